"""Task ncclsm: the SMs NCCL's data-parallel collectives hold, per GPU generation and with Megatron's nccl_ub
(btacalc/model/gpu/sm_share.py, docs/clock.md 'ncclsm').

Ring channels are NCCL's topology search written out (NVIDIA/nccl v2.18.1-1 and v2.27.7-1): the search starts at
the first speed of the generation's list not above the GPU's NVLink bandwidth (links x per-link GB/s, src/graph/
topo.h) and finds floor(bandwidth / speed) channels; ncclTopoDupChannels doubles them unless the speed is below
25 GB/s, or below 50 GB/s with more than 4 channels past sm80 (search.cc L937-949); connect.cc L452 doubles
again. nccl_ub's NVLS path (src/transport/nvls.cc L1086-1097 @ 5067397c) holds ceil(factor / heads) CTAs.
"""

from __future__ import annotations

import json
import math

import pytest

from btacalc.config.execution import Layout, Overlaps, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.bridge_codec import from_bridge, to_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.sm_share import dp_ctas, ring_channels
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.problem import make_problem
from btacalc.planning.measured import load_runs

H100_SMS, B200_SMS = 132, 148  # Hopper whitepaper (H100 SXM5); Blackwell: 148 SMs on B200 / GB200 (profiles)

# search speed lists (GB/s), intra-node, by generation: v2.27.7-1 src/graph/search.cc L952 (sm80), L957 (sm90),
# L962 (sm100); v2.18.1-1 L776 / L781 give the same first entries for sm80 / sm90
SPEEDS = {8.0: (40.0, 30.0, 20.0), 9.0: (60.0, 50.0, 40.0), 10.0: (90.0, 80.0, 70.0)}
# NVLinks x GB/s per link (src/graph/topo.h: SM80 20.0, SM90 20.6, SM100 40.1; 12 links on A100, 18 on H100/B200)
NVLINK = {8.0: (12, 20.0), 9.0: (18, 20.6), 10.0: (18, 40.1)}


def _search(cc: float) -> int:
    links, per_link = NVLINK[cc]
    bandwidth = links * per_link
    speed = next(s for s in SPEEDS[cc] if s <= bandwidth)
    channels = int(bandwidth // speed)
    keep = speed < 25.0 or (cc > 8.0 and speed < 50.0 and channels > 4)  # ncclTopoDupChannels' early returns
    return (channels if keep else 2 * channels) * 2  # connect.cc L452: nChannels*2


@pytest.mark.parametrize("cc, expected", [(8.0, 6 * 2 * 2), (9.0, 6 * 2 * 2), (10.0, 8 * 2 * 2)])
def test_ring_channels_in_one_domain_from_nccls_search(cc, expected):
    assert _search(cc) == expected
    assert ring_channels(cc).in_domain.value == expected
    # across domains: 8 NICs at the inter lists' 48 GB/s, one channel each, not duplicated, doubled
    assert ring_channels(cc).across_domains.value == 8 * 2


def test_unknown_capability_takes_the_first_row_and_newer_takes_blackwells():
    assert ring_channels(None).in_domain.value == 24
    assert ring_channels(10.3).in_domain.value == _search(10.0)


def _problem(hw: str, devices: int, per_node: int | None = None, nccl_ub: bool = False, nvls: bool = False,
             zero: int = 1):
    profile = resolve_hardware(hw)
    node = per_node or int(profile.system.devices_per_node.value)
    layout = Layout(devices=devices, devices_per_node=node, zero_stage=zero, micro_batches=4, nccl_ub=nccl_ub,
                    nvls=nvls, overlap=Overlaps(grad_reduce=True, param_gather=True))
    return make_problem(resolve_model("llama-3-8b"), profile, RunOptions(attention="flash", recompute="none"), layout)


def test_nccl_ub_cta_counts_from_nvls_registration():
    # one 8-GPU node: the intra-node NVLS graph has one head per GPU (search.cc: minChannels = maxChannels = GPUs)
    heads = 8
    h100 = dp_ctas(_problem("h100", 8, nccl_ub=True, nvls=True))
    assert h100 == {"all_gather": math.ceil(4 * 8 / heads), "reduce_scatter": math.ceil(5 * 8 / heads),
                    "all_reduce": 24}  # 4 / 5: Megatron's table (distributed_data_parallel_config.py L121-136)
    b200 = dp_ctas(_problem("b200", 8, nccl_ub=True, nvls=True))
    assert b200 == {"all_gather": math.ceil(4 * 8 / heads), "reduce_scatter": math.ceil(6 * 8 / heads),
                    "all_reduce": 32}
    # four data-parallel ranks in the node (--gpus-per-node 4 of a 4-GPU job): four heads
    assert dp_ctas(_problem("h100", 4, nccl_ub=True, nvls=True))["reduce_scatter"] == math.ceil(5 * 8 / 4)


@pytest.mark.parametrize("hw, devices, ring", [
    ("h100", 16, 16),      # across nodes: NVLS-UB needs SHARP (CollNet) there, enqueue.cc L2165: the ring
    ("gb200", 64, 32),     # one NVL72 rack is MNNVL: the CTA policy path is skipped (enqueue.cc L2154)
    ("a100-80gb", 8, 24),  # no NVLS before sm90 (search.cc L1124)
])
def test_nccl_ub_keeps_the_ring_where_nccl_does(hw, devices, ring):
    assert set(dp_ctas(_problem(hw, devices, nccl_ub=True, nvls=True)).values()) == {ring}


def test_nccl_ub_without_nvls_keeps_the_ring():
    assert set(dp_ctas(_problem("h100", 8, nccl_ub=True)).values()) == {24}


def _sync(problem):
    step = gpu_step_time(problem, 1, 2, micro_batches=4)
    return step.details["sync_s"], step.communication_s["gradient_reduce"], step.communication_s["param_gather"]


@pytest.mark.parametrize("hw, sms, ring, rs, ag", [("h100", H100_SMS, 24, 5, 4), ("b200", B200_SMS, 32, 6, 4)])
def test_a_run_with_nccl_ub_pays_the_nvls_ctas(hw, sms, ring, rs, ag):
    # ZeRO-1 on one 8-GPU node, both overlaps: reduce and gather hidden, each charged its CTAs / SMs
    sync, reduce, gather = _sync(_problem(hw, 8))
    assert sync == pytest.approx((reduce + gather) * ring / sms)
    sync_ub, reduce_ub, gather_ub = _sync(_problem(hw, 8, nccl_ub=True, nvls=True))
    assert (reduce_ub, gather_ub) == (reduce, gather)
    assert sync_ub == pytest.approx(reduce * rs / sms + gather * ag / sms)


def test_emit_and_read_back(cli):
    base = ("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--zero", "1", "--seq", "2048")
    for nvls, env in ((True, "NCCL_NVLS_ENABLE=1"), (False, "NCCL_NVLS_ENABLE=0")):
        code, out, _ = cli(*base, "--nccl-ub", *(("--nvls",) if nvls else ()), "--emit", "megatron")
        assert code == 0 and "--use-nccl-ub" in out and "export NCCL_CTA_POLICY=1" in out and f"export {env}" in out
        run = import_megatron(out, "emitted.sh")
        assert (run.request.nccl_ub, run.request.nvls) == (True, nvls)
    # without NCCL_CTA_POLICY=1 NCCL keeps its default policy: planned without nccl_ub, and said so
    run = import_megatron(out.replace("export NCCL_CTA_POLICY=1", ""), "emitted.sh")
    assert not run.request.nccl_ub and any("NCCL_CTA_POLICY" in n for n in run.notes)
    code, out, _ = cli(*base, "--nccl-ub", "--nvls", "--json")
    assert json.loads(out)["parallelism"]["dp_collective_ctas"]["all_gather"] == 4
    assert to_bridge({"nccl_ub": True}) == {"ddp.nccl_ub": True}
    assert from_bridge({"ddp.nccl_ub": True})[0] == {"nccl_ub": True}


def test_measured_nccl_ub_run_is_its_recipe():
    run = next(r for r in load_runs() if r.id == "llama-3-8b-h100-8-fp8-current-249")
    # Megatron-Bridge v0.2.0: nccl_ub with Megatron-FSDP, NCCL_NVLS_ENABLE=0 (executors.py L42)
    assert run.recipe is not None and run.recipe.nccl_ub and not run.recipe.nvls
