"""The expert all-to-all across NVLink domains at NCCL's measured all-to-all rate (docs/comm.md 'a2a'), each
test written as its derivation from the published measurement.

nccl-tests alltoall_perf on 2 DGX H100 nodes, one 400 Gb/s NIC per GPU, NVLink disabled (every peer through
the NIC): 46 GB/s bus bandwidth (YangZhou1997 in deepseek-ai/DeepEP issue 3). For alltoall nccl-tests reports
busbw = algbw x (n - 1)/n (sjeaugey in NVIDIA/nccl-tests issue 130): the bytes a rank sends to its n - 1
peers over the time, all of them through its NIC here, so the NIC runs at 46 of its 50 GB/s line rate.
The ring collectives keep their own 47/50 (nccl-tests issue 290).
"""

from __future__ import annotations

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.config.execution import Layout, RunOptions
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.collectives import all_to_all_link, all_to_all_time, links
from btacalc.model.problem import make_problem
from support import flash_problem

NIC_LINE_RATE = 400e9 / 8  # 400 Gb/s ConnectX-7 per GPU, bytes/s per direction
A2A_BUSBW = 46e9  # nccl-tests alltoall_perf, 2 x 8 H100, network only (DeepEP issue 3)
RING_BUSBW = 47e9  # 46-48 GB/s per NIC for ring collectives (nccl-tests issue 290)
NIC_ALPHA = 46.5e-6  # one small call across nodes (nccl issue 1244), the profile's scaleout_latency_s
NVLINK, NVLINK_EFF = 450e9, 360 / 450  # H100 NVLink per direction and its ring bus efficiency (nccl-tests 326)


def _problem(hw: str, model: str = "qwen3-30b-a3b", **layout):
    return flash_problem(model, hw, **layout)


def test_the_measurement_gives_the_profiles_all_to_all_efficiency():
    # 46 / 50 = 0.92 on every profile whose NICs are ConnectX-7 400 Gb/s (the measured system's), and the
    # ring's 47 / 50 = 0.94 stays the ring collectives'
    for hw in ("h100", "h200", "b200", "gb200"):
        c = resolve_hardware(hw).collectives
        assert c.scaleout_all_to_all_efficiency.value == pytest.approx(A2A_BUSBW / NIC_LINE_RATE)
        assert c.scaleout_bus_efficiency.value == pytest.approx(RING_BUSBW / NIC_LINE_RATE)
        assert resolve_hardware(hw).system.scaleout_bandwidth_bytes_per_s.value == NIC_LINE_RATE


def test_one_all_to_all_call_across_two_dgx_h100_at_the_measured_rate():
    # EP 16 over 2 DGX H100 (Qwen3-30B-A3B, 128 experts): one call of 1 GB. A rank keeps 1/16, sends 15/16;
    # 7 of its 15 peers share its node (NVLink), 8 are reached through its NIC, concurrently:
    # t = alpha_NIC + max(sent x 7/15 / (450e9 x 0.8), sent x 8/15 / 46e9)
    p = _problem("h100", devices=16, expert_parallel=16)
    sent = 1e9 * 15 / 16
    nic_s = sent * 8 / 15 / A2A_BUSBW  # 0.5e9 / 46e9 = 10.87 ms
    nvl_s = sent * 7 / 15 / (NVLINK * NVLINK_EFF)  # 0.4375e9 / 360e9 = 1.22 ms
    assert all_to_all_time(p, 1e9, 1) == pytest.approx(NIC_ALPHA + max(nic_s, nvl_s))
    assert all_to_all_time(p, 1e9, 1) == pytest.approx(46.5e-6 + 0.5e9 / 46e9)
    # at the ring's 47 GB/s the same call would take 0.5e9 / 47e9: the all-to-all is 47/46 slower on the NIC
    ring_nic_s = sent * 8 / 15 / RING_BUSBW
    assert (all_to_all_time(p, 1e9, 1) - NIC_ALPHA) / ring_nic_s == pytest.approx(47 / 46)


def test_ep64_over_eight_b200_nodes_sends_seven_eighths_through_the_nic():
    # gpt-oss-120b's layout on DGX B200 (EP 64, 8 per node): 56 of 63 peers off the node, so the NIC carries
    # 1 GB x 63/64 x 56/63 = 0.875 GB per GB of volume; sjeaugey's rule (nccl-tests issue 130) for N nodes
    # gives busbw = N/(N - 1) x the NIC's bandwidth per GPU, i.e. the NIC at 46 GB/s: time = 0.875e9 / 46e9
    p = _problem("b200", model="gpt-oss-120b", devices=64, expert_parallel=64)
    nic_s = 1e9 * 7 / 8 / A2A_BUSBW
    assert all_to_all_time(p, 1e9, 1) == pytest.approx(NIC_ALPHA + nic_s)
    # read back as nccl-tests would report the call (bandwidth part): algbw = 1 GB / t, busbw = algbw x 63/64,
    # which sjeaugey's rule puts at N/(N - 1) = 8/7 of the NIC's rate, times 63/64
    algbw = 1e9 / (all_to_all_time(p, 1e9, 1) - NIC_ALPHA)
    assert algbw * 63 / 64 == pytest.approx(8 / 7 * A2A_BUSBW * 63 / 64)


def test_the_network_link_of_the_all_to_all_differs_from_the_rings_only_in_efficiency():
    # all_to_all_link: the same NIC, the same alpha, the all-to-all's efficiency in place of the ring's
    p = _problem("h100", devices=16, expert_parallel=16)
    ring, a2a = links(p)[1], all_to_all_link(p)
    assert (a2a.bandwidth_bytes_per_s, a2a.latency_s) == (ring.bandwidth_bytes_per_s, ring.latency_s)
    assert (ring.bus_efficiency, a2a.bus_efficiency) == pytest.approx((47 / 50, 46 / 50))


def test_a_profile_without_an_all_to_all_measurement_runs_at_the_rings_efficiency():
    # the field is optional: without it the cross-domain bytes run at scaleout_bus_efficiency, as before
    hw = resolve_hardware("h100")
    bare = hw.model_copy(update={"collectives": hw.collectives.model_copy(
        update={"scaleout_all_to_all_efficiency": None})})
    p = make_problem(resolve_model("qwen3-30b-a3b"), bare, RunOptions(attention="flash", recompute="none"),
                     Layout(devices=16, expert_parallel=16, devices_per_node=8))
    assert all_to_all_time(p, 1e9, 1) == pytest.approx(NIC_ALPHA + 1e9 * 8 / 16 / RING_BUSBW)


def test_the_plan_row_reports_the_all_to_all_efficiency_at_its_message_size():
    # the expert_all_to_all row's efficiency across domains: e x / (x + h), e = 0.92, h = alpha x 50e9 x 0.92
    from btacalc.model.gpu.collectives import describe_all_to_all
    p = _problem("h100", devices=16, expert_parallel=16)
    per_call = 100e6
    row = describe_all_to_all(p, (10 * per_call, 10), 1.0)
    h = NIC_ALPHA * NIC_LINE_RATE * 0.92
    assert row.link == "network" and row.algorithm == "all-to-all"
    assert row.efficiency == pytest.approx(0.92 * per_call / (per_call + h))
