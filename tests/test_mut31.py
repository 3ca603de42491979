"""mut31: tests for mutants of btacalc/model/gpu/fixed.py and btacalc/model/gpu/nccl.py that the suite let survive.
Each expected value is arithmetic from the cited source or from the module's documented contract, not the tool's
own output (docs: briefs/mut31.md lists the mutants each test kills)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.model.gpu import fixed


def _host_problem(**kernel_fields):
    """A stand-in problem whose only hardware section host_time reads is [kernels] (the h100 profile's, with
    `kernel_fields` replaced; kernels=None: a profile without the section)."""
    k = resolve_hardware("h100").kernels
    if "kernels" in kernel_fields:
        k = kernel_fields.pop("kernels")
    elif kernel_fields:
        k = k.model_copy(update=kernel_fields)
    return SimpleNamespace(hardware=SimpleNamespace(kernels=k))


def test_host_time_is_zero_without_a_kernels_section():
    """fixed.host_time's contract (its docstring, Kernels' description in config/hardware.py): a profile without
    [kernels] has no host issue time at all, so however many kernels, expert GEMMs, module calls and glue ops a
    micro-batch issues, the host time is 0 s (and launch_time = max(0, 0 - GPU time) = 0)."""
    p = _host_problem(kernels=None)
    assert fixed.host_time(p, 1000, 50, 20, 300) == 0.0
    assert fixed.launch_time(fixed.host_time(p, 1000), 1e-3) == 0.0


def test_host_time_without_module_or_glue_costs_counts_launches_only():
    """Kernels.module_host_s / eager_op_host_s: "None: not counted". With both absent (and no
    expert_gemm_host_s: each expert GEMM one plain launch), 10 kernels + 4 expert GEMMs + 5 module calls + 7 glue
    ops cost (10 + 4) launches x the h100 profile's launch_overhead_s (4 us): 56 us, nothing for modules or glue."""
    p = _host_problem(module_host_s=None, eager_op_host_s=None, expert_gemm_host_s=None)
    launch = resolve_hardware("h100").kernels.launch_overhead_s.value
    assert launch == pytest.approx(4e-6)
    assert fixed.host_time(p, 10, 4, 5, 7) == pytest.approx(14 * 4e-6)
    # each absence on its own: the other's cost still counts (module 111 us, eager op 3.8 us: the h100 profile)
    only_glue = _host_problem(module_host_s=None)
    assert fixed.host_time(only_glue, 0, 0, 5, 7) == pytest.approx(7 * 3.8e-6)
    only_modules = _host_problem(eager_op_host_s=None)
    assert fixed.host_time(only_modules, 0, 0, 5, 7) == pytest.approx(5 * 111e-6)


# Llama 3 8B (Meta's config: hidden 4096, 8 KV heads of 128 = 1024, FFN 14,336, 32 layers, vocabulary 128,256)
H, KV, F, L, V = 4096, 1024, 14336, 32, 128_256


def test_fsdp2_copies_at_tp_2_are_of_the_device_shard(cli):
    """FSDP2 x TP 2 (torchtitan 2-D; tests/test_fsdp2_tp.py has the derivation at TP 8): each device copies out its
    TP shard of every gathered unit, not the whole model's. TP 2: the linears split 2 ways, the two RMSNorm weights
    of a block and the final norm whole, the embedding and output split 2 ways over the vocabulary (128,256 is
    already a multiple of 128 x 2 = 256: no padding). Per micro-batch: blocks 0..L-2 gathered twice, the last block
    and the root once, each copied out at 2 + 2 B (bf16 read and write); every device parameter chunk-cat into the
    reduce-scatter input at 2 + 4 B (bf16 read, fp32 written); at the profile's streaming HBM bandwidth."""
    tp = 2
    block = (H * H + 2 * H * KV + H * H + 3 * H * F) // tp + 2 * H
    root = 2 * V * H // tp + H
    p_dev = L * block + root
    gathered = (L - 1) * 2 * block + block + root
    copy_bytes = gathered * (2 + 2) + p_dev * (2 + 4)
    hbm = resolve_hardware("h100-96gb").memory.streaming_bandwidth_bytes_per_s()
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100-96gb", "--devices", "16", "--tp", str(tp),
                         "--seq", "8192", "--global-batch", "8", "--micro-batch", "1", "--fsdp", "--fsdp-impl",
                         "fsdp2", "--recompute", "full", "--json")
    assert code == 0, err
    plan = json.loads(out)
    th = plan["throughput"]
    m = plan["parallelism"]["micro_batches"]
    assert th["phase_share"]["fsdp2_copies"] * th["step_time_s"] == pytest.approx(m * copy_bytes / hbm, rel=1e-9)



# ---- btacalc/model/gpu/nccl.py. Constants: NVIDIA/nccl@5067397c (v2.30.7) src/graph/tuning.cc as
# formulas/constants.toml [nccl] cites them line by line: baseLatencies (L151) ring LL 6.6, LL128 14.0, Simple 8.4 us,
# tree LL 6.8, LL128 14.0, Simple 8.4; NVLink hwLatencies (L159) ring 0.6 / 1.9 / 3.4, tree 0.6 / 1.25 / 4.0; NET
# (L171) ring 2.7 / 4.0 / 14.0, tree 5.0 / 8.5 / 14; ring bandwidth LL x 0.5, LL128 x 0.92 (L327-329); tree all-reduce
# bus bandwidth x 0.92 (L330-331), LL x 1/3.8, LL128 x 7/9 in one node and 120/128 across nodes (L332-335); the
# algorithm bandwidth of a tree = bus x 0.5 (L380); tree correction for log2(bytes / 64) < 23 (L639-642).
US = 1e-6
AG, AR = 1, 2  # collective factors (formulas/constants.toml [collectives]): all-gather 1, all-reduce 2
LL, LL128, SIMPLE = 0, 1, 2
BUS = 360e9  # a Simple ring bus bandwidth in bytes/s (the h100 profile's NVLink 450 GB/s x 0.8)


def _group(ranks, nodes, kind, rate=BUS):
    from btacalc.model.gpu import nccl

    return nccl.Group(ranks, nodes, kind, rate)


@pytest.mark.parametrize("ranks, nodes, share, hops_us", [
    (8, 1, 7 / 9, 7 * 1.25),              # one node: LL128 x 7/9; 7 NVLink hops, no network hop
    (16, 2, 120 / 128, 7 * 1.25 + 1 * 8.5),  # 2 nodes: x 120/128; 7 NVLink hops + floor(log2 2) = 1 network hop
    (32, 4, 120 / 128, 7 * 1.25 + 2 * 8.5),  # 4 nodes: log2 4 = 2 network hops
])
def test_tree_ll128_bandwidth_share_is_by_node_count(ranks, nodes, share, hops_us):
    """A tree LL128 all-reduce of 2^30 B (log2(2^30 / 64) = 24 >= 23: no tree correction): latency 14.0 + 2 x hops
    us, then the buffer at 0.5 (tree algorithm / bus) x 0.92 (tree all-reduce) x share x the Simple ring's bus
    bandwidth, share 7/9 inside one node and 120/128 across nodes (tuning.cc L332-335)."""
    from btacalc.model.gpu import nccl

    nbytes = 2.0**30
    expected = (14.0 + 2 * hops_us) * US + nbytes / (0.5 * 0.92 * share * BUS)
    assert nccl.tree_time_s(_group(ranks, nodes, AR), nbytes, LL128) == pytest.approx(expected, rel=1e-12)


def test_call_time_takes_the_ring_ll128_when_it_is_the_fastest():
    """An all-gather on 8 ranks of one node (no tree: all-gather runs rings only, tuning.cc L293-298) with a buffer of
    8/7 x 30 us x BUS, i.e. 30 us of bus bytes at the Simple rate (n - 1)/n x nBytes = 30e-6 x BUS:
      LL     10.8 us (6.6 + 7 x 0.6)  + 30 / 0.5  = 70.8 us
      LL128  27.3 us (14.0 + 7 x 1.9) + 30 / 0.92 = 59.909 us   <- the fastest
      Simple 32.2 us (8.4 + 7 x 3.4)  + 30        = 62.2 us
    so one call takes the LL128 ring's time, and NCCL's choice names it."""
    from btacalc.model.gpu import nccl

    g = _group(8, 1, AG)
    nbytes = 8 / 7 * 30e-6 * BUS
    ll128 = (14.0 + 7 * 1.9) * US + 30e-6 / 0.92
    assert ll128 < (6.6 + 7 * 0.6) * US + 30e-6 / 0.5 and ll128 < (8.4 + 7 * 3.4) * US + 30e-6
    assert nccl.call_time_s(g, nbytes) == pytest.approx(ll128, rel=1e-12)
    assert nccl.choose(g, nbytes).protocol == "LL128"


def test_call_time_over_arrays_of_kinds_is_each_kinds_scalar_time():
    """A search evaluates layouts as arrays: a group whose collective factor is an array (all-gather for one layout,
    all-reduce for another) must time each element as the scalar call would (only the all-reduce weighs trees).
    Scalars, 8 ranks in a node, 4 B: all-gather ring LL 6.6 + 7 x 0.6 = 10.8 us; all-reduce ring LL
    6.6 + 14 x 0.6 = 15.0 us against tree LL 6.8 + 2 x 7 x 0.6 = 15.2 us: 15.0 us (plus the bytes' few ps)."""
    import numpy as np

    from btacalc.model.gpu import nccl

    kinds = np.array([AG, AR])
    got = nccl.call_time_s(nccl.Group(np.array([8, 8]), np.array([1, 1]), kinds, BUS), np.array([4.0, 4.0]))
    assert got[0] == pytest.approx(10.8 * US, rel=1e-3) and got[1] == pytest.approx(15.0 * US, rel=1e-3)
    assert list(got) == [nccl.call_time_s(_group(8, 1, AG), 4.0), nccl.call_time_s(_group(8, 1, AR), 4.0)]


@pytest.mark.parametrize("ranks, nodes, steps", [
    (512, 64, 2 * 6 + 2 * 7),  # 64 nodes x 8: 2 x floor(log2 64) network hops + 2 x (8 - 1) NVLink hops = 26
    (12, 8, 2 * 3 + 2 * 0),    # 12 ranks over 8 nodes: ranks per node 12 // 8 = 1 (NCCL's integer nRanks/nNodes): 6
])
def test_a_tree_choice_counts_its_hops_up_and_down(ranks, nodes, steps):
    """NCCL's tree latency (tuning.cc, ncclTopoTuneModel: 2 x ((nRanks/nNodes - 1) x intra + log2i(nNodes) x inter),
    integer division and floor log2) counts 2 x (ranks per node - 1) + 2 x floor(log2 nodes) hops; `choose` reports
    them as the tree's steps. A 4-byte all-reduce goes by tree LL in both cases (512/64: 75.2 us against the ring's
    1,242.8 us, tests/test_nccl.py; 12/8: tree 6.8 + 2 x 3 x 5.0 = 36.8 us against ring LL 6.6 + 8 x 1.0 + 14 x 2.7
    = 52.4 us: 22 steps, 14 between nodes, the intra steps floored at the 1.0 us network overhead)."""
    from btacalc.model.gpu import nccl

    choice = nccl.choose(_group(ranks, nodes, AR), 4)
    assert (choice.algorithm, choice.protocol) == ("tree", "LL")
    assert choice.steps == steps
    hops = (ranks // nodes - 1) * 0.6 + {64: 6, 8: 3}[nodes] * 5.0
    assert choice.latency_s == pytest.approx((6.8 + 2 * hops) * US)


def test_the_ring_all_reduce_plateau_is_multi_node_and_starts_at_64_bytes_per_rank():
    """tuning.cc L647-650 (formulas/constants.toml ring_all_reduce_plateau): a Simple ring all-reduce's latency x 1.4
    when nNodes > 1 and nBytes / (nChannels x nRanks) >= 64, one channel taken.
    - one node, 8 ranks, 1 MB: no plateau: 8.4 + 14 x 3.4 = 56.0 us;
    - 2 nodes x 8 (16 ranks): 30 steps, 2 between nodes (2 x (2 - 1)), the 28 others at max(3.4, 3 x 1.0) = 3.4 us,
      the network steps at the ring's 14.0 us (2 nodes of 8: not one rank per node): 8.4 + 28 x 3.4 + 2 x 14.0 =
      131.6 us, x 1.4 from exactly 64 x 16 = 1,024 B on, not at 1,023 B; an all-gather never (its factor is 1)."""
    from btacalc.model.gpu import nccl

    one = _group(8, 1, AR)
    assert nccl.ring_call_latency_s(one, 1e6, SIMPLE) == pytest.approx((8.4 + 14 * 3.4) * US, rel=1e-12)
    two = _group(16, 2, AR)
    base = (8.4 + 28 * 3.4 + 2 * 14.0) * US
    assert nccl.ring_call_latency_s(two, 1e6, SIMPLE) == pytest.approx(1.4 * base, rel=1e-12)
    assert nccl.ring_call_latency_s(two, 1024, SIMPLE) == pytest.approx(1.4 * base, rel=1e-12)
    assert nccl.ring_call_latency_s(two, 1023, SIMPLE) == pytest.approx(base, rel=1e-12)
    assert nccl.ring_call_latency_s(_group(16, 2, AG), 1e6, SIMPLE) == pytest.approx(
        (8.4 + 14 * 3.4 + 1 * 14.0) * US, rel=1e-12)  # all-gather: 15 steps, 1 between nodes, no plateau


def test_the_tree_correction_applies_from_64_bytes():
    """tuning.cc L639-642: the tree bandwidth x treeCorrectionFactor[p][log2(nBytes >> 6)]: a 64-byte call has
    log2(1) = 0, the table's first entry, 0.9 for Simple (formulas/constants.toml tree_correction). Its transfer
    term is 64 B / (0.5 x 0.92 x 1.0 (Simple share) x 0.9 x BUS) on top of the tree latency (8.4 + 2 x 7 x 4.0 us,
    8 ranks in one node)."""
    from btacalc.model.gpu import nccl

    g = _group(8, 1, AR)
    transfer = nccl.tree_time_s(g, 64, SIMPLE) - nccl.tree_latency_s(g, SIMPLE)
    assert nccl.tree_latency_s(g, SIMPLE) == pytest.approx((8.4 + 2 * 7 * 4.0) * US, rel=1e-12)
    assert transfer == pytest.approx(64 / (0.5 * 0.92 * 0.9 * BUS), rel=1e-6)


# ---- btacalc/model/gpu/collectives.py (ring_time and the links; a partial run: briefs/mut31.md)


def test_a_two_gpu_ring_costs_its_nccl_call_and_its_bytes():
    """Two H100s of a DGX (TP 2): 10 all-gathers of 1e8 bus bytes each (1e9 in all; the buffer 2e8 B, ring share
    1/2). The ring has 1 step on NVLink; Simple at these sizes: NCCL's latency 8.4 + 1 x 3.4 = 11.8 us, scaled by
    the profile's NVLink anchor (13.0 us measured / 15.0 us model: tests/test_nccl.py H100_UP_SCALE), plus the bytes
    at the profile's NVLink bus bandwidth (450 GB/s x 0.8). A 2-GPU run is not a 1-GPU run: its rings cost time."""
    from btacalc.model.gpu.collectives import ring_time
    from tests.test_collectives import _problem

    p = _problem(devices=2)
    scale = 13.0 / (6.6 + 14 * 0.6)
    expected = 10 * (8.4 + 3.4) * US * scale + 1e9 / BUS
    assert ring_time(p, 1e9, 2, 1, 10, AG) == pytest.approx(expected, rel=1e-9)


def test_a_profile_without_collectives_runs_rings_at_line_rate_with_no_latency():
    """collectives.ring_time's contract: on a profile without a [collectives] section a call costs the link's
    alpha, 0, and the bytes go at the line rate (bus efficiency 1). Eight H100s with the section removed:
    1e9 bus bytes over NVLink in 10 calls take 1e9 / 450e9 s; with the ring leaving the node (16 ranks of 8 per
    node, stride 1: 8 local members x the 50 GB/s NIC = 400 GB/s, below NVLink's 450) 1e9 / 400e9 s."""
    from btacalc.config.execution import Layout, RunOptions
    from btacalc.model.gpu.collectives import ring_time
    from btacalc.model.problem import make_problem
    from tests.test_collectives import QWEN

    hw = resolve_hardware("h100")
    up = hw.system.scaleup_bandwidth_bytes_per_s.value
    nic = hw.system.scaleout_bandwidth_bytes_per_s.value
    assert (up, nic) == (450e9, 50e9)
    bare = hw.model_copy(update={"collectives": None})
    for devices in (8, 16):
        p = make_problem(QWEN, bare, RunOptions(attention="flash", recompute="none"),
                         Layout(devices=devices, devices_per_node=8))
        assert ring_time(p, 1e9, 8, 1, 10, AG) == pytest.approx(1e9 / 450e9, rel=1e-12)
        if devices == 16:
            assert ring_time(p, 1e9, 16, 1, 10, AR) == pytest.approx(1e9 / (8 * 50e9), rel=1e-12)


@pytest.mark.parametrize("ring_only", [False, True])
def test_nccl_algo_ring_reaches_the_timed_ring(ring_only):
    """RunOptions.nccl_ring_only (NCCL_ALGO=Ring: tuning.cc L458-462, L538, no tree weighed) must reach the call
    ring_time times. A 4-byte all-reduce over 512 H100s (64 DGX nodes of 8, stride 1): NCCL's tree LL takes
    6.8 + 2 x (7 x 0.6 + 6 x 5.0) = 75.2 us; the best ring, LL, 6.6 + (1022 - 126) x 1.0 + 126 x 2.7 = 1242.8 us
    (tests/test_nccl.py). Both scaled by the h100 profile's scale-out anchor, 46.5 us measured / 25.2 us model
    (tests/test_nccl.py HOPPER_OUT_SCALE); the 8 bytes of bus traffic add under a nanosecond (LL at most llMaxBw,
    20.4 GB/s over more than 2 nodes, tuning.cc L179, L327, L332: review31)."""
    from btacalc.config.execution import Layout, RunOptions
    from btacalc.model.gpu.collectives import ring_time
    from btacalc.model.problem import make_problem
    from tests.test_collectives import QWEN

    p = make_problem(QWEN, resolve_hardware("h100"),
                     RunOptions(attention="flash", recompute="none", nccl_ring_only=ring_only),
                     Layout(devices=512, devices_per_node=8))
    model_us = 6.6 + (1022 - 126) * 1.0 + 126 * 2.7 if ring_only else 6.8 + 2 * (7 * 0.6 + 6 * 5.0)
    scale = 46.5 / (6.8 + 2 * (7 * 0.6 + 5.0))
    assert ring_time(p, 2 * 511 / 512 * 4, 512, 1, 1, AR) == pytest.approx(model_us * US * scale, rel=1e-5)


def test_zero_calls_time_the_bytes_alone_at_the_bus_rate():
    """ring_time with calls = 0 (tensor_parallel_time's default: volume without a call count) charges no per-call
    latency and moves the bus bytes at the link's bus bandwidth: 1e9 B over 8 H100s of a DGX at 450 GB/s x 0.8 =
    360 GB/s is 1e9 / 360e9 s."""
    from btacalc.model.gpu.collectives import ring_time
    from tests.test_collectives import _problem

    assert ring_time(_problem(devices=8), 1e9, 8, 1, 0, AG) == pytest.approx(1e9 / BUS, rel=1e-12)


def test_tensor_parallel_without_sequence_parallel_is_an_nccl_all_reduce():
    """Without sequence parallelism Megatron's TP collectives are all-reduces (Shoeybi et al. 2019: f/g operators),
    timed by NCCL's model like any kind, not as point-to-point sends. TP 8 in a DGX H100, 10 calls moving a volume
    of 2e9 collective units (tensor_parallel_time passes volume x (n-1)/n = 1.75e9 bus bytes; each call's buffer
    1.75e9 / 10 / (2 x 7/8) = 1e8 B: Simple): 10 x (8.4 + 14 x 3.4) us x the NVLink anchor 13.0 / 15.0, plus 1.75e9 B at
    450 GB/s x 0.8."""
    from btacalc.model.gpu.collectives import tensor_parallel_time
    from tests.test_collectives import _problem

    p = _problem(devices=8, tensor_parallel=8, sequence_parallel=False)
    expected = 10 * (8.4 + 14 * 3.4) * US * 13.0 / (6.6 + 14 * 0.6) + 2e9 * 7 / 8 / BUS
    assert tensor_parallel_time(p, 2e9, 10) == pytest.approx(expected, rel=1e-9)


def test_two_pipeline_stages_on_two_gpus_send_their_activations():
    """PP 2 on 2 GPUs of a DGX H100 (one NVLink domain), VP 1: per micro-batch a forward activation and a backward
    gradient, 2 sends, each the NVLink link's alpha (the h100 profile's 13.0 us) plus its bytes at 450 GB/s x 0.8:
    1e9 B per send -> 2 x 13.0 us + 2 x 1e9 / 360e9 s."""
    from btacalc.model.gpu.collectives import links, pipeline_p2p_time
    from tests.test_collectives import _problem

    p = _problem(devices=2, pipeline_parallel=2)
    assert links(p)[0].latency_s == pytest.approx(13.0e-6)
    assert pipeline_p2p_time(p, 1e9) == pytest.approx(2 * 13.0e-6 + 2 * 1e9 / BUS, rel=1e-12)


@pytest.mark.parametrize("zero, reduce, gather, micro", [
    (0, 2 * 7 / 8 * 4e9, 0.0, 0.0),                       # DDP: one all-reduce of the fp32 gradients, 2(n-1)/n
    (1, 7 / 8 * 4e9, 7 / 8 * 2e9, 0.0),                   # distributed optimizer: reduce-scatter + all-gather, (n-1)/n
    (3, 0.0, 0.0, 2 * 7 / 8 * 2e9 + 7 / 8 * 4e9),         # ZeRO-3: two weight all-gathers + one gradient reduce-scatter
])
def test_data_parallel_bus_bytes_follow_nccl_tests_bus_factors(zero, reduce, gather, micro):
    """NCCL-tests doc/PERFORMANCE.md: an all-reduce moves 2(n-1)/n of its buffer per rank, an all-gather or a
    reduce-scatter (n-1)/n. 1e9 parameters on a data-parallel group of 8, fp32 gradients (4 B) and 16-bit weights
    (2 B): ZeRO-0 all-reduces 4e9 B of gradients (2 x 7/8 x 4e9 = 7e9 bus bytes); ZeRO-1 reduce-scatters them
    (3.5e9) and all-gathers the 2e9 B of weights (1.75e9); ZeRO-3 gathers the weights twice and reduce-scatters
    the gradients per micro-batch (3.5e9 + 3.5e9)."""
    from btacalc.model.gpu.collectives import data_parallel_traffic
    from tests.test_collectives import _problem

    p = _problem(devices=8, zero_stage=zero)
    got = data_parallel_traffic(p, 1e9, 8, {"gradients": 4, "weights": 2})
    assert float(got["reduce_per_step"][0]) == pytest.approx(reduce, rel=1e-12)
    assert float(got["gather_per_step"][0]) == pytest.approx(gather, rel=1e-12)
    assert float(got["per_micro_batch"][0]) == pytest.approx(micro, rel=1e-12)
