"""mut32: tests for mutants of btacalc/model/gpu/collectives.py (the all-to-all, expert tensor parallelism, the
data-parallel buckets and kinds, the domain walks) that the suite let survive. Each expected value is arithmetic from
the cited source (NCCL's tuning.cc constants as formulas/constants.toml cites them, the all-to-all model of the module
docstring, Megatron's and Hybrid-EP's documented behaviour), not the tool's own output (briefs/mut32.md lists the
mutants each test kills)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.gpu import collectives as co
from btacalc.model.problem import make_problem
from tests.test_collectives import _problem

US = 1e-6
NVLINK_BUS = 450e9 * 0.8  # H100 NVLink at its ring bus efficiency (nccl-tests issue 326: ~360 GB/s)
NVLINK_ANCHOR = 13.0 / (6.6 + 14 * 0.6)  # DGX H100's measured 13.0 us over NCCL's LL model at its reference (nccl2)
NVLINK_ALPHA, NIC_ALPHA = 13.0e-6, 46.5e-6  # the h100 profile's per-call latencies (tests/test_collectives.py)
NIC_A2A = 50e9 * 0.92  # the NIC's all-to-all share (nccl-tests alltoall_perf, tests/test_a2a_network.py)


def _simple_ring_us(steps: int) -> float:
    """NCCL's Simple ring latency inside a node (tuning.cc L151 base 8.4 us, L159 NVLink 3.4 us a step)."""
    return 8.4 + steps * 3.4


def _ll_ring_us(steps: int) -> float:
    """NCCL's LL ring latency inside a node (tuning.cc L151 base 6.6 us, L159 NVLink 0.6 us a step)."""
    return 6.6 + steps * 0.6


# ---- the expert tensor-parallel ring and the all-to-all's token calls


def test_an_expert_tensor_parallel_group_of_8_is_an_nccl_all_gather_ring_in_the_node():
    """ETP 8 on one DGX H100 (EP 1; Megatron's expert rank order puts ETP innermost: 8 consecutive ranks, one node).
    An all-to-all volume V = 1.25e8 B: each rank's received copies go to its 7 peers, 7V bus bytes
    (expert_tensor_parallel_bytes). In 10 calls each call's buffer is 7V / 10 / (7/8) = 1e8 B: NCCL's Simple ring,
    7 steps (an all-gather), 8.4 + 7 x 3.4 us x the NVLink anchor, plus 7V at 360 GB/s. With 14 calls of which 10 carry
    the tokens, the other 4 gather the routing probabilities, empty calls at NCCL's LL latency 6.6 + 7 x 0.6 us x the
    anchor (token_dispatcher.py L746-751 @ d98e8a64). EP 1: no exchange, so all_to_all_time is that ring alone."""
    p = _problem(devices=8, expert_tensor_parallel=8)
    v = 1.25e8
    tokens = 10 * _simple_ring_us(7) * US * NVLINK_ANCHOR + 7 * v / NVLINK_BUS
    probs = 4 * _ll_ring_us(7) * US * NVLINK_ANCHOR
    assert co.expert_tensor_parallel_time(p, v, 10) == pytest.approx(tokens, rel=1e-9)
    assert co.expert_tensor_parallel_time(p, v, 14, 10) == pytest.approx(tokens + probs, rel=1e-9)
    assert co.all_to_all_time(p, v, 14, 10) == pytest.approx(tokens + probs, rel=1e-9)


def test_two_gpus_exchange_half_their_expert_tokens_over_nvlink():
    """EP 2 on 2 GPUs of a DGX H100: a rank keeps the 1/2 of V routed to its own experts and sends the other 1/2 to its
    one peer over NVLink, at NCCL's all-to-all share of NVLink (the profile's scaleup_all_to_all_efficiency, 0.753:
    nccl-tests alltoall_perf), each of the 4 calls the NVLink alpha. The row reports the V/2 bytes sent."""
    p = _problem(devices=2, expert_parallel=2)
    v = 1e9
    a2a_up = 450e9 * resolve_hardware("h100").collectives.scaleup_all_to_all_efficiency.value
    assert co.expert_exchange_time(p, v, 4) == pytest.approx(4 * NVLINK_ALPHA + v / 2 / a2a_up, rel=1e-12)
    assert co.all_to_all_wire_bytes(p, v) == pytest.approx(v / 2, rel=1e-12)


def test_ep_2_across_two_nodes_sends_everything_through_the_nic():
    """16 H100s in two DGX nodes, ETP 8, EP 2: the EP group is 2 ranks at stride ETP = 8 (Megatron's expert order
    ETP, EP, ...), one in each node. Its one peer is in the other node, so all of the V/2 a rank sends crosses the
    NIC, at the all-to-all's NIC share, each call the network alpha; nothing goes over NVLink."""
    p = _problem(devices=16, expert_tensor_parallel=8, expert_parallel=2)
    v = 1e9
    assert co.expert_exchange_time(p, v, 4) == pytest.approx(4 * NIC_ALPHA + v / 2 / NIC_A2A, rel=1e-12)


# ---- DeepEP


def test_deepep_dedup_when_every_domain_is_always_hit():
    """The module docstring's dedup = (m - 1)(1 - P0) / (k (m - 1)/m), P0 = prod_{i<k} (E - E/m - i)/(E - i). With
    E = 4 experts over m = 2 domains (2 each) and top-k = 3, a token's 3 distinct experts cannot all avoid a domain
    (only 2 lie outside it): P0 = 0 (the factor at i = 2 is (4 - 2 - 2)/2 = 0). So each token reaches the remote
    domain once, against k (m - 1)/m = 1.5 expected remote expert copies: 1 / 1.5 = 2/3."""
    problem = SimpleNamespace(model=SimpleNamespace(num_experts=4, top_k=3))
    assert co.deepep_dedup(problem, 2) == pytest.approx(2 / 3, rel=1e-12)


def _fast_nic(hw: str = "h100", nic_bytes_per_s: float = 900e9):
    """The profile with a (hypothetical) NIC of `nic_bytes_per_s` per GPU, so that NVLink binds an exchange."""
    h = resolve_hardware(hw)
    out = h.system.scaleout_bandwidth_bytes_per_s.model_copy(update={"value": nic_bytes_per_s})
    return h.model_copy(update={"system": h.system.model_copy(update={"scaleout_bandwidth_bytes_per_s": out})})


def test_deepep_forwarded_copies_add_to_the_nvlink_bytes():
    """Module docstring: with DeepEP a token crosses to a remote domain once and is forwarded there over NVLink, so
    the forwarded copies add to the NVLink bytes. Qwen3-30B-A3B (E = 128, top-8), EP 16 over two 8-GPU nodes with a
    NIC as fast as 900 GB/s (so NVLink binds): of a rank's sent bytes S = 15/16 V, 7/15 go to its node's peers and
    8/15 cross; per destination rank dedup r = 15 (1 - C(120, 8)/C(128, 8)) / (8 x 15/16); per domain
    d = (1 - C(64, 8)/C(128, 8)) / 4. NVLink carries S x 7/15 x r + S x 8/15 x r (the forwarded copies) at
    450 GB/s x 0.8 (DeepEP keeps the ring's NVLink share); the NIC S x 8/15 x d at 900 GB/s x 0.92; the time is the
    larger, plus 4 network alphas."""
    model = resolve_model("qwen3-30b-a3b")
    p = make_problem(model, _fast_nic(), RunOptions(attention="flash", recompute="none"),
                     Layout(devices=16, devices_per_node=8, expert_parallel=16, deepep=True))
    v = 1e9
    sent = v * 15 / 16
    r = 15 * (1 - math.comb(120, 8) / math.comb(128, 8)) / (8 * 15 / 16)
    d = (1 - math.comb(64, 8) / math.comb(128, 8)) / 4
    nvlink = (sent * 7 / 15 * r + sent * 8 / 15 * r) / NVLINK_BUS
    nic = sent * 8 / 15 * d / (900e9 * 0.92)
    assert nvlink > nic
    assert co.expert_exchange_time(p, v, 4) == pytest.approx(4 * NIC_ALPHA + nvlink, rel=1e-9)


@pytest.mark.parametrize("model, devices, ep, etp", [("kimi-k2", 24, 24, 1), ("qwen3-30b-a3b", 32, 4, 8)])
def test_hybridep_across_more_than_two_nodes_runs_at_its_more_than_two_nodes_share(model, devices, ep, etp):
    """Hybrid-EP's benchmark (tests/test_hybridep_rate.py) gives one NIC share for exactly two nodes (16 ranks) and
    another for more (32 and 64 ranks). Kimi K2 (384 experts) at EP 24 on 24 H100s spans three 8-GPU nodes; EP 4 at
    stride ETP = 8 on 32 H100s puts each of its 4 members in its own node (one member a node: 4 nodes). Both are more
    than two, so the second share."""
    from tests.test_hybridep_rate import MORE, TWO_NODES

    p = make_problem(resolve_model(model), resolve_hardware("h100"), RunOptions(attention="flash", recompute="none"),
                     Layout(devices=devices, devices_per_node=8, expert_parallel=ep, expert_tensor_parallel=etp,
                            deepep=True, hybridep=True))
    assert abs(MORE - TWO_NODES) > 0.1
    assert co.all_to_all_link(p).bus_efficiency == pytest.approx(MORE, abs=5e-4)


# ---- data-parallel buckets


def test_the_expert_buffer_has_neither_the_word_embedding_nor_its_bucket():
    """Megatron-Core's DDP keeps dense and expert parameters in separate buffers (distributed_data_parallel.py
    L160-171 @ d98e8a64) and buckets only pipeline rank 0's model chunk 0 (StageBuckets). The word embedding is dense,
    and so is the bucket of its own the distributed optimizer gives a tied embedding over PP > 1. PP 2, VP 2, ZeRO-1,
    --overlap-grad-reduce, DP 8 (bucket max(4e7, 1e6 x 8) = 4e7 parameters), 8e7 parameters in each buffer of the first
    stage, of which a 5e7 word embedding in the dense one. Dense: chunk 0 holds 5e7 + 3e7 / 2 = 6.5e7 -> 2 buckets,
    + 1 call for chunk 1, + 1 for the embedding's bucket = 4. Expert: chunk 0 holds 8e7 / 2 = 4e7 -> 1 bucket, + 1 for
    chunk 1 = 2."""
    from btacalc.config.execution import Overlaps

    p = _problem(devices=16, pipeline_parallel=2, virtual_pipeline=2, zero_stage=1, expert_parallel=8,
                 overlap=Overlaps(grad_reduce=True))
    assert (p.layout.data_parallel, p.layout.context_parallel) == (8, 1)
    stage = co.StageBuckets(first_stage=True, embedding=50_000_000, shared=True)
    assert co.part_buckets(stage, "dense").calls(p, 80_000_000) == 4
    assert co.part_buckets(stage, "expert").calls(p, 80_000_000) == 2


# ---- the domain walks


def test_a_rank_cut_off_alone_by_a_domain_boundary_has_one_local_member():
    """--gpus-per-node 1 (a domain of one GPU): each member of an 8-rank group is in its own domain, so the worst-placed
    rank shares its domain with 1 member, itself. A 7-rank group on 8-GPU nodes (56 GPUs): block 1 holds ranks 7-13
    and the node boundary at rank 8 leaves rank 7 alone in node 0: 1 local member. A 3-rank group on 9 GPUs: block 2
    holds ranks 6-8, and rank 8 is alone in the second node: 1."""
    assert co.local_members(8, 1, 8, 1) == 1
    assert co.local_members(7, 1, 56, 8) == 1
    assert co.local_members(3, 1, 9, 8) == 1


def test_the_last_piece_of_a_group_cut_by_a_domain_boundary_counts():
    """128 GB200s in NVL72 domains (ranks 0-71 and 72-127), TP 4: the DP group of 32 ranks at stride 4 spans all 128
    ranks. Its members in domain 0 are 72 / 4 = 18, in domain 1 (the partial rack) 56 / 4 = 14: the worst-placed rank
    shares its domain with 14 members (the piece after the boundary, not the one before it). The ring then crosses the
    NICs of 14 members: 14 x 50 GB/s x 0.94 = 658 GB/s, below NVLink's bus rate."""
    assert co.local_members(32, 4, 128, 72) == 14
    assert co.local_members(80, 1, 80, 72) == 8  # one 80-rank block: 72 in the first rack, 8 in the next


def test_ddp_num_buckets_cuts_a_sharded_stage_into_that_many_buckets():
    """--ddp-num-buckets N: Megatron-LM @ d98e8a64 sets bucket_size = params // N (training.py L2186-2187) and a bucket
    closes once it holds bucket_size elements (param_and_grad_buffer.py L980-995): 1e9 parameters and N = 4 give 4
    buckets, and 1e9 + 2 parameters buckets of ceil((1e9 + 2) / 4) = 250,000,001, still 4. With ZeRO-2 each bucket is
    a reduce-scatter per micro-batch; ZeRO-3 adds two all-gathers per bucket."""
    from btacalc.config.execution import Overlaps

    for zero, per_bucket in ((2, 1), (3, 3)):
        p = _problem(devices=8, zero_stage=zero, ddp_num_buckets=4, overlap=Overlaps(grad_reduce=True))
        assert co.gradient_buckets(p, 1_000_000_000) == 4
        assert co.gradient_buckets(p, 1_000_000_002) == 4
        traffic = co.data_parallel_traffic(p, 1_000_000_000, 8, {"gradients": 4, "weights": 2})
        assert traffic["per_micro_batch"][1] == 4 * per_bucket


# ---- plan --json rows


@pytest.mark.parametrize("flags, algorithm", [({}, "all-to-all"), ({"deepep": True}, "deepep"),
                                              ({"deepep": True, "hybridep": True}, "hybridep")])
def test_the_all_to_all_row_names_the_dispatchers_backend(flags, algorithm):
    """The expert_all_to_all row's algorithm names what moves the tokens: NCCL's all-to-all (Megatron's alltoall
    dispatcher), DeepEP's kernels (--moe-token-dispatcher-type flex) or Hybrid-EP (CollectiveRow, module docstring)."""
    p = _problem(devices=16, expert_parallel=16, **flags)
    row = co.describe_all_to_all(p, (co.all_to_all_wire_bytes(p, 1e9), 4), 1e-3, 1e9)
    assert row.algorithm == algorithm


@pytest.mark.parametrize("ring_only", [False, True])
def test_a_rows_algorithm_is_nccls_choice_for_its_call(ring_only):
    """A row of a collective NCCL's tuning model times gives NCCL's choice for one call (collectives.describe). A 4-byte
    all-reduce over 512 H100s (64 nodes of 8): NCCL picks the tree (LL), 2 x (7 + 6) = 26 steps up and down
    (tests/test_mut31.py); with NCCL_ALGO=Ring (tuning.cc L458-462) the LL ring, 2 x 511 = 1022 steps."""
    p = make_problem(resolve_model("qwen3-30b-a3b"), resolve_hardware("h100"),
                     RunOptions(attention="flash", recompute="none", nccl_ring_only=ring_only),
                     Layout(devices=512, devices_per_node=8))
    bus = 2 * 511 / 512 * 4
    row = co.describe(p, "gradient_reduce", (512, 1), (bus, 1), 1e-3, kind=2, collective="all_reduce")
    assert (row.algorithm, row.protocol, row.steps) == (("ring", "LL", 1022) if ring_only else ("tree", "LL", 26))


def test_the_expert_tensor_parallel_row_of_8_is_on_nvlink():
    """ETP 8 in one DGX H100: the row's group is 8 consecutive ranks (stride 1), one node, so its link is NVLink and
    NCCL's ring all-gather has 7 steps (each call's buffer 1e8 B: Simple)."""
    p = _problem(devices=8, expert_tensor_parallel=8)
    row = co.describe_expert_tensor_parallel(p, 1.25e8, (14, 10), 1e-3)
    assert (row.link, row.ranks, row.steps, row.protocol) == ("nvlink", 8, 7, "Simple")
    assert row.message_bytes == pytest.approx(7 * 1.25e8 / 10)


def test_a_row_of_bytes_without_calls_of_its_own_has_no_message_and_no_nccl_choice():
    """Under PyTorch FSDP a block's experts travel in its own unit (review31): the expert part's row has bytes but no
    calls of its own. Such a row has no message per call (0 B), so no buffer and no bus factor, no achieved
    efficiency, and no NCCL choice of algorithm, protocol or steps (describe: `not per_call`)."""
    p = _problem(devices=8)
    row = co.describe(p, "zero_per_micro_batch", (8, 1), (1e9, 0), 0.0, kind=1, collective="all_gather")
    assert (row.message_bytes, row.efficiency, row.protocol, row.steps, row.algorithm) == (0.0, 0.0, "", 0, "ring")
    assert (row.buffer_bytes, row.bus_factor) == (0.0, 0.0)
