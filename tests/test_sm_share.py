"""Compute lost to the SMs of an overlapped expert all-to-all (DeepEP / HybridEP, NCCL's send/recv all-to-all),
checked as its derivation from the cited SM counts."""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout, Overlaps, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.collectives import all_to_all_time, count_gather_time
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.merged_pair import LayerNodes, merged_exposed
from btacalc.model.gpu.sm_share import sm_share_loss
from btacalc.model.gpu.stages import PipelineStages
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.problem import make_problem
from btacalc.planning.measured import express, load_runs

# Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py L1287-1291: DeepEP's
# Buffer.num_sms is 20 when moe_flex_dispatcher_num_sms is unset (HybridEP takes DeepEP's default,
# transformer_config.py L972-974)
DEEPEP_SMS = 20
H100_SMS = 132  # Hopper architecture whitepaper: 132 SMs on the H100 SXM5
B200_SMS = 148  # Chips and Cheese's B200 measurement (hardware_profiles/b200.toml)
GB200_SMS = 148  # hardware_profiles/gb200.toml: the B200's die (estimate)
QWEN = resolve_model("qwen3-30b-a3b")


def _problem(hw: str = "h100", **layout):
    hardware = resolve_hardware(hw)
    fields = dict(devices_per_node=int(hardware.system.devices_per_node.value), devices=16, expert_parallel=16)
    fields.update(layout)
    return make_problem(QWEN, hardware, RunOptions(attention="flash", recompute="none"), Layout(**fields))


def test_the_window_is_the_shorter_of_exchange_and_compute():
    p = _problem(deepep=True, overlap=Overlaps(all_to_all=True))
    # exchange shorter than the compute it hides behind: all of it runs beside compute at 112 of 132 SMs
    assert sm_share_loss(p, 0.3, 1.0) == pytest.approx(0.3 * 20 / 132)
    # exchange longer: the compute (1 s) runs wholly beside it, and loses 20/132 of its rate
    assert sm_share_loss(p, 3.0, 1.0) == pytest.approx(1.0 * DEEPEP_SMS / H100_SMS)
    b200 = _problem("b200", deepep=True, overlap=Overlaps(all_to_all=True))
    assert sm_share_loss(b200, 0.3, 1.0) == pytest.approx(0.3 * DEEPEP_SMS / B200_SMS)


def _pow2_up(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _nccl_p2p_channels_in_a_node(links: int, link_gb_s: float, top_speed_gb_s: float) -> int:
    """NCCL @ 5067397c, its default path written out: the ring search's channels at its top speed
    (src/graph/search.cc L1057, L1063), duplicated (L1036-1047: bw >= 50 GB/s), doubled
    (src/graph/connect.cc L460), capped at MAX_P2P_NCHANNELS = 64 and rounded up to a power of 2
    (src/graph/paths.cc L957-958, L977-990)."""
    search = int(links * link_gb_s // top_speed_gb_s)
    return _pow2_up(min(2 * (2 * search), 64))


def test_nccls_all_to_all_holds_one_cta_per_p2p_channel():
    # H100: 18 NVLinks x 20.6 GB/s (src/graph/topo.h L22), search speeds from 60 GB/s: 6 channels -> 12
    # -> 24 collective channels -> 32 p2p channels, as NCCL_DEBUG prints on an 8-H100 node (AWS p5.48xlarge,
    # aws-samples/aws-do-eks @ 701c554a Container-Root/eks/deployment/nccl-test/README.md L82)
    h100_ctas = _nccl_p2p_channels_in_a_node(18, 20.6, 60.0)
    assert h100_ctas == 32
    one_node = _problem(devices=8, expert_parallel=8, overlap=Overlaps(all_to_all=True))
    assert sm_share_loss(one_node, 0.3, 1.0) == pytest.approx(0.3 * h100_ctas / H100_SMS)
    # two nodes (EP 16 over 8-GPU nodes): "16 p2p channels, 2 p2p channels per peer" (README.md L95)
    two_nodes = _problem(overlap=Overlaps(all_to_all=True))
    assert sm_share_loss(two_nodes, 0.3, 1.0) == pytest.approx(0.3 * 16 / H100_SMS)
    # the exchange longer than the compute: all the compute runs beside its CTAs
    assert sm_share_loss(two_nodes, 3.0, 1.0) == pytest.approx(1.0 * 16 / H100_SMS)
    # Blackwell: 18 x 40.1 GB/s (topo.h L24), speeds from 90 GB/s: 8 -> 16 -> 32 -> 32 p2p channels; an EP 32
    # group inside a GB200 NVL72 domain runs on NVLink
    b_ctas = _nccl_p2p_channels_in_a_node(18, 40.1, 90.0)
    assert b_ctas == 32
    gb200 = _problem("gb200", devices=32, expert_parallel=32, overlap=Overlaps(all_to_all=True))
    assert sm_share_loss(gb200, 0.3, 1.0) == pytest.approx(0.3 * b_ctas / GB200_SMS)
    # without expert parallelism there is no exchange and no CTA
    assert sm_share_loss(_problem(devices=8, expert_parallel=1), 0.3, 1.0) == 0.0


def test_an_exposed_nccl_exchange_takes_no_sms_an_overlapped_one_does():
    # Qwen3-30B-A3B on 16 H100, EP 16 over two nodes, the alltoall dispatcher: each of the 48 MoE layers loses
    # min(hidden, compute) x 16 / 132 per micro-batch with the exchange overlapped, nothing with it exposed; hidden:
    # the exchange less what the merged schedule leaves exposed node by node (review26: that part has no compute
    # beside it to slow)
    p = _problem(overlap=Overlaps(all_to_all=True))
    ev = p.evaluate(1, 1)
    counts = PipelineStages.of(p, p.layout.micro_batches).kind_counts(0)
    expected = 0.0
    for n, part in zip(counts, layer_parts(p, ev)):
        a2a = all_to_all_time(p, part.a2a_bytes, part.a2a_calls)
        # the count all-gathers run on the compute stream in the pre-dispatch node (fine_grained_callables.py
        # L125-129 @ d98e8a64): compute beside the exchange, holding no NCCL SMs of their own here
        gathers = count_gather_time(p, part.count_bytes, part.count_calls)
        assert gathers > 0
        nodes = LayerNodes.of(part.compute_s + gathers, part.backward_s, part.recompute_s,
                              (part.pre_dispatch_s + gathers, part.pre_dispatch_backward_s,
                               part.pre_dispatch_recompute_s), a2a)
        expected += n * min(a2a - merged_exposed(nodes, False), part.compute_s) * 16 / H100_SMS
    assert expected > 0
    assert gpu_step_time(p, 1, 1, ev).details["terms"]["a2a_sm_share"] == pytest.approx(expected)
    assert gpu_step_time(_problem(), 1, 1).details["terms"]["a2a_sm_share"] == 0.0


def test_step_carries_the_loss_of_every_layer_and_micro_batch():
    # Qwen3-30B-A3B on 16 H100 (EP 16, DeepEP, overlapped all-to-all), one sequence of 4,096 per micro-batch:
    # 48 MoE layers, each loses min(a2a, compute) x 20/132 per micro-batch
    p = _problem(deepep=True, overlap=Overlaps(all_to_all=True))
    ev = p.evaluate(1, 1)
    parts = layer_parts(p, ev)
    expected = 0.0
    counts = PipelineStages.of(p, p.layout.micro_batches).kind_counts(0)  # one stage: every layer
    assert sum(counts) == 48
    for n, part in zip(counts, parts):
        a2a = all_to_all_time(p, part.a2a_bytes, part.a2a_calls)
        expected += n * min(a2a, part.compute_s) * DEEPEP_SMS / H100_SMS
    assert expected > 0
    step = gpu_step_time(p, 1, 1, ev)
    assert step.details["terms"]["a2a_sm_share"] == pytest.approx(expected)
    m = p.layout.micro_batches
    assert step.phase_time_s["a2a_sm_share"] == pytest.approx(expected * m)
    # without the overlap nothing runs beside compute; the exchange is exposed instead
    plain = gpu_step_time(_problem(deepep=True), 1, 1)
    assert plain.details["terms"]["a2a_sm_share"] == 0.0


def test_the_layouts_dispatcher_sms_replace_the_default():
    # Megatron-Bridge @ 067f987d recipes/qwen/h100/qwen3_moe.py L205-209: the 16-GPU H100 Qwen3-30B-A3B
    # recipe gives HybridEP 32 SMs: 32 of 132 run the exchange, the compute beside it keeps 100
    p = _problem(deepep=True, dispatcher_sms=32, overlap=Overlaps(all_to_all=True))
    assert sm_share_loss(p, 0.3, 1.0) == pytest.approx(0.3 * 32 / H100_SMS)
    runs = {r.id: r for r in load_runs()}
    request, _ = express(runs["qwen3-30b-a3b-h100-16-389"])
    assert request is not None and request.dispatcher_sms == 32 and request.deepep


def test_dispatcher_sms_without_deepep_or_beyond_the_chip_is_refused(cli):
    base = ("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16", "--seq", "4096",
            "--global-batch", "1024", "--micro-batch", "1", "--overlap-a2a")
    for extra in (("--dispatcher-sms", "32"), ("--deepep", "--dispatcher-sms", "132")):
        code, _, err = cli(*base, *extra)
        assert code == 2 and "--dispatcher-sms" in err and len(err.strip().splitlines()) == 1
