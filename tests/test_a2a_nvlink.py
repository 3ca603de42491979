"""The expert all-to-all inside an NVLink domain at NCCL's measured all-to-all rate (docs/comm.md 'a2a-nvlink'),
each test written as its derivation from the published measurement.

H100: nccl-tests alltoall_perf on the 8 GPUs of one node, bf16 (MooreThreads/SimuMax @ 4dcaae51
simu_tools/efficency_test/nccl_fit.py L105-118; the file's DEVICE_BW comment names the H100). SimuMax fits time
against bytes x (n - 1)/n over the first 11 sizes; the slope is the bus bandwidth a linear (alpha-beta) model
needs. B200: SimuMax's B200 system file carries the same fit of its 8-B200 node as a factor of a nominal 900 in
GiB/s (configs/system/b200_bf16_ceperm.json L855-860; one_click_common.py L245-258).
"""

from __future__ import annotations

import numpy as np
import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.collectives import all_to_all_nvlink, all_to_all_time, describe_all_to_all, links
from btacalc.model.problem import make_problem

# nccl_fit.py L105-115: (bytes, out-of-place time in us) of alltoall_perf on 8 H100, 1 MB to 1 GB
H100_ALLTOALL = ((1048576, 75.76), (2097152, 75.06), (4194304, 76.64), (8388608, 79.10), (16777216, 82.85),
                 (33554432, 129.9), (67108864, 220.1), (134217728, 398.7), (268435456, 761.2),
                 (536870912, 1461.0), (1073741824, 2822.3))
# L77-87: all_gather_perf on the same node, same sizes
H100_ALLGATHER = ((1048576, 47.14), (2097152, 45.69), (4194304, 47.23), (8388608, 48.87), (16777216, 73.03),
                  (33554432, 128.2), (67108864, 211.3), (134217728, 386.4), (268435456, 730.2),
                  (536870912, 1394.3), (1073741824, 2734.1))
H100_NVLINK = 450e9  # bytes/s per direction (18 NVLink4 links)
B200_NVLINK = 900e9  # 18 NVLink5 links
B200_A2A_FACTOR, B200_AR_FACTOR = 0.5968, 0.7424  # of a nominal 900 GiB/s (b200_bf16_ceperm.json)
GIB = 2 ** 30


def _slope_bytes_per_s(rows, ranks=8):
    x = np.array([b for b, _ in rows]) * (ranks - 1) / ranks
    t = np.array([us for _, us in rows]) * 1e-6
    return 1 / np.polyfit(x, t, 1)[0]


def _problem(hw, **layout):
    """Qwen3-30B-A3B at EP 8 on one node of `hw` (a profile's name, or the profile itself)."""
    hardware = resolve_hardware(hw) if isinstance(hw, str) else hw
    fields = dict(devices=8, expert_parallel=8, devices_per_node=int(hardware.system.devices_per_node.value))
    fields.update(layout)
    return make_problem(resolve_model("qwen3-30b-a3b"), hardware, RunOptions(attention="flash", recompute="none"),
                        Layout(**fields))


def test_the_h100_measurement_gives_the_profiles_nvlink_all_to_all_efficiency():
    a2a = _slope_bytes_per_s(H100_ALLTOALL)
    assert a2a == pytest.approx(338.9e9, rel=1e-3)
    for hw in ("h100", "h200"):  # H200: the same NVLink4 and NVSwitch (an estimate, said in the profile)
        assert resolve_hardware(hw).collectives.scaleup_all_to_all_efficiency.value == pytest.approx(
            a2a / H100_NVLINK, abs=5e-5)
    # the ring on the same node: 348 GB/s, within 4% of the 360 GB/s (0.80) the profile takes for ring collectives
    assert _slope_bytes_per_s(H100_ALLGATHER) / H100_NVLINK == pytest.approx(
        resolve_hardware("h100").collectives.scaleup_bus_efficiency.value, rel=0.04)


def test_the_b200_fit_in_gib_gives_the_profiles_nvlink_all_to_all_efficiency():
    # 0.5968 x 900 GiB/s = 576.7 GB/s of the 900 GB/s line rate
    for hw in ("b200", "gb200"):  # GB200: the same 18 NVLink5 links per GPU (an estimate, said in the profile)
        assert resolve_hardware(hw).collectives.scaleup_all_to_all_efficiency.value == pytest.approx(
            B200_A2A_FACTOR * 900 * GIB / B200_NVLINK, abs=5e-5)
    # the unit reading checked: the same file's all-reduce, read the same way, is the 0.80 ring share of
    # NVLink5 that NCCL's topo.h gives (the profile's scaleup_bus_efficiency), within 1%
    assert B200_AR_FACTOR * 900 * GIB / B200_NVLINK == pytest.approx(
        resolve_hardware("b200").collectives.scaleup_bus_efficiency.value, rel=0.01)


def test_one_nvlink_all_to_all_call_on_eight_gpus():
    # EP 8 in one node, the alltoall dispatcher: a rank keeps 1/8 of 1 GB and sends 7/8 over NVLink;
    # t = alpha + 0.875e9 / (line rate x measured all-to-all efficiency)
    for hw, line, eff in (("h100", H100_NVLINK, _slope_bytes_per_s(H100_ALLTOALL) / H100_NVLINK),
                          ("b200", B200_NVLINK, B200_A2A_FACTOR * 900 * GIB / B200_NVLINK)):
        p = _problem(hw)
        alpha = links(p)[0].latency_s
        assert all_to_all_time(p, 1e9, 1) == pytest.approx(alpha + 0.875e9 / (line * eff), rel=1e-4)


def test_deepep_keeps_the_rings_nvlink_share():
    # DeepEP / HybridEP are not NCCL: their NVLink rate is DeepEP's published one, the ring's share (test_collectives)
    p = _problem("b200", deepep=True)
    assert all_to_all_nvlink(p) == links(p)[0]
    plain = _problem("b200")
    assert all_to_all_nvlink(plain).bus_efficiency == pytest.approx(0.6408)
    assert all_to_all_nvlink(plain).latency_s == links(plain)[0].latency_s


def test_a_profile_without_the_measurement_runs_at_the_rings_efficiency():
    hw = resolve_hardware("b200")
    p = _problem(hw.model_copy(update={"collectives": hw.collectives.model_copy(
        update={"scaleup_all_to_all_efficiency": None})}))
    up = links(p)[0]
    assert all_to_all_time(p, 1e9, 1) == pytest.approx(up.latency_s + 0.875e9 / up.bus_bytes_per_s)


def test_the_plan_row_reports_the_nvlink_all_to_all_efficiency():
    # e x / (x + h) with e the all-to-all's, h = alpha x line rate x e
    p = _problem("h100")
    per_call = 50e6
    row = describe_all_to_all(p, (10 * per_call, 10), 1.0)
    e, alpha = _slope_bytes_per_s(H100_ALLTOALL) / H100_NVLINK, links(p)[0].latency_s
    h = alpha * H100_NVLINK * e
    assert (row.link, row.algorithm) == ("nvlink", "all-to-all")
    assert row.efficiency == pytest.approx(e * per_call / (per_call + h), rel=1e-4)
