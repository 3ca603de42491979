"""The merged 1F1B schedule's pair when the host issues it (mergedhost: model/gpu/merged_pair.py `host_pair_time`),
each test written as its derivation from Megatron-LM @ d98e8a64 models/common/model_chunk_schedule_plan.py L261-301
(`TransformerLayerSchedulePlan.run`: the host's issue order combine_bwd, pre_dispatch_fwd, mlp_bwd, dispatch_fwd,
mlp_bwd_dw, dispatch_bwd, mlp_fwd, combine_fwd, pre_dispatch_bwd, pre_dispatch_bwd_dw) and the dispatcher's sync in
the forward dispatch (HybridEP's cudaStreamSynchronize on the comm stream: deepseek-ai/DeepEP @ 94a9f8f
csrc/hybrid_ep/executor/executor.cu L164-166)."""

from __future__ import annotations

import itertools
import random

import pytest

from btacalc.config.execution import Layout, Overlaps
from btacalc.model.gpu.merged_pair import LayerNodes, NodeHost, host_pair_time, pair_time

# GPU node times (ms) of tests/test_merged_pair.py's example: P_f 0.4, P_b 0.8, M_f 0.6, M_b 1.2, one call 0.5
NODES = LayerNodes(0.4, 0.8, 0.6, 1.2, 0.5)


def test_the_gpu_pair_of_the_example_is_3_1():
    # both streams start together: combine_bwd (0.5) beside pre_dispatch_fwd (0.4); mlp_bwd from max = 0.5 to 1.7;
    # dispatch_fwd 0.5-1.0, dispatch_bwd max(1.0, 1.7)-2.2, mlp_fwd max(1.7, 1.0)-2.3, then combine_fwd from
    # max(2.3, 2.2) = 2.3 to 2.8 and pre_dispatch_bwd 2.3-3.1: the pair ends at 3.1
    assert pair_time(NODES, False) == pytest.approx(3.1)


def test_the_host_issuing_the_experts_after_the_sync_holds_the_pair():
    """Host: 0.2 to issue pre_dispatch_fwd, 2.0 to issue mlp_fwd (the experts' per-expert GEMM loop), nothing else.
    The forward dispatch's sync holds the host until the GPU has run pre_dispatch_fwd and the comm stream
    (combine_bwd): max(0.4, 0.5) = 0.5. Only then does it issue mlp_fwd, over 0.5-2.5, so mlp_fwd (ready at
    max(mlp_bwd 1.7, dispatch_fwd 1.0) = 1.7, 0.6 of work) ends at max(2.3, 2.5) = 2.5; combine_fwd
    max(2.5, dispatch_bwd 2.2) + 0.5 = 3.0; pre_dispatch_bwd after mlp_fwd on the compute stream, 2.5 + 0.8 = 3.3.
    The host ends issuing at 2.5, 0.8 before the pair ends, so the next pair's pre_dispatch_fwd is issued early and
    the next sync releases at 0.5 again: every pair takes 0.5 + 2.0 + 0.8 = 3.3, 0.2 more than the GPU's 3.1."""
    host = NodeHost(pre_forward=0.2, mlp_forward=2.0)
    assert host_pair_time(NODES, host, False) == pytest.approx(3.3)
    # the same host work issued before the sync hides: the host is back at the sync long before the GPU
    assert host_pair_time(NODES, NodeHost(pre_forward=0.2, mlp_backward=2.0), False) == pytest.approx(3.1)


def test_a_slow_pre_dispatch_issue_shows_in_the_first_pair_only():
    """Host: 1.0 to issue pre_dispatch_fwd, 0.5 for mlp_fwd. From an idle start pre_dispatch_fwd ends at 1.0 (its
    kernels issued over 1.0), so mlp_bwd, which follows it on the compute stream, runs 1.0-2.2; dispatch_bwd 2.2-2.7;
    mlp_fwd 2.2-2.8; combine_fwd 2.8-3.3; pre_dispatch_bwd 2.8-3.6. The host is done at 1.5, 2.1 ahead of the GPU:
    the next pair's pre_dispatch_fwd is issued before its GPU start and the pair runs as the GPU's 3.1."""
    host = NodeHost(pre_forward=1.0, mlp_forward=0.5)
    from btacalc.model.gpu import merged_pair
    first, host_end = merged_pair._one_pair(merged_pair._gpu_times(NODES), host, merged_pair._ORDER, 0.0)
    assert (first, host_end) == (pytest.approx(3.6), pytest.approx(1.5))
    assert host_pair_time(NODES, host, False) == pytest.approx(3.1)


def test_a_host_bound_pair_takes_the_hosts_whole_issue_time():
    # 1 ms of host per node, 10 nodes, the GPU's 3.1 hidden: the host never waits at the sync (the GPU has run
    # pre_dispatch_fwd long before the host reaches the dispatch), so each pair takes the host's 10
    host = NodeHost(*[1.0] * 11)  # build and the ten nodes (pre_dw included: its call is host work too)
    assert host_pair_time(NODES, host, False) == pytest.approx(11.0)
    assert host_pair_time(NODES, host, True) == pytest.approx(11.0)


def test_with_no_host_time_the_pair_is_pair_time():
    rng = random.Random(7)
    for _ in range(300):
        pf, pb, mf, mb, call = (rng.uniform(0.0, 2.0) for _ in range(5))
        nodes = LayerNodes(pf, pb, mf, mb, call, rng.random() < 0.5, rng.uniform(0, pb), rng.uniform(0, mb))
        for early, sync, comm in itertools.product((False, True), repeat=3):
            assert host_pair_time(nodes, NodeHost(sync=sync, comm_sync=comm), early) == \
                pytest.approx(pair_time(nodes, early), abs=1e-12)


def test_the_alltoall_dispatchers_sync_waits_for_the_pre_dispatch_node_alone():
    """The alltoall dispatcher copies its split sizes at `before_permutation_1` inside pre_dispatch_fwd, on a side
    stream after the compute stream (token_dispatcher.py L927-954), and waits at `before_ep_alltoall` in the dispatch
    (L956-958): the host is released at P_f = 0.4, not at max(P_f, combine_bwd) = 0.5. With mlp_fwd's 2.0 of host
    after it: mlp_fwd ends at 0.4 + 2.0 = 2.4, pre_dispatch_bwd 2.4 + 0.8 = 3.2."""
    host = NodeHost(mlp_forward=2.0, comm_sync=False)
    assert host_pair_time(NODES, host, False) == pytest.approx(3.2)
    assert host_pair_time(NODES, NodeHost(mlp_forward=2.0), False) == pytest.approx(3.3)
    # without a sync (drop-and-pad) the host issues mlp_fwd at once: 0 to 2.0, hidden under the GPU's 1.7 + 0.6
    assert host_pair_time(NODES, NodeHost(mlp_forward=2.0, sync=False), False) == pytest.approx(3.1)


def _step(overlap: bool, monkeypatch=None, scale: float = 1.0) -> float:
    from btacalc.catalogue.constants import constants
    from btacalc.model.gpu import timing
    from btacalc.model.gpu.timing import gpu_step_time
    from btacalc.config.presets import load_preset
    from support import resolved

    if monkeypatch is not None:
        c = constants()
        megatron = c.megatron.model_copy(update={"merged_node_backward_ref_ops": 5.0 * scale,
                                                 "merged_node_forward_ref_ops": 2.4 * scale})
        monkeypatch.setattr(timing, "constants", lambda: c.model_copy(update={"megatron": megatron}))
    layout = Layout(devices=16, expert_parallel=16, deepep=True, hybridep=True, micro_batches=4,
                    overlap=Overlaps(all_to_all=overlap))
    problem = resolved(load_preset("qwen3-30b-a3b"), "h100", layout, seq_len=4096, recompute="none",
                       attention="flash")
    return float(gpu_step_time(problem, 1, 1).step_time_s)


def test_a_plan_without_the_overlap_does_not_see_the_merged_schedules_host_work(monkeypatch):
    # the node work x 1000 changes the overlapped plan's step and leaves the plain one's as it was
    plain, overlapped = _step(False), _step(True)
    assert _step(False, monkeypatch, 1000.0) == plain
    assert _step(True, monkeypatch, 1000.0) > overlapped
