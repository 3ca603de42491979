"""Megatron-Core DDP's buckets on later pipeline ranks and later model chunks (task ddpchunk), derived from
Megatron-LM @ d98e8a64:

- training.py L2504-2514: each model chunk gets bucket size None ("disable bucketing") when it is not chunk 0, or
  when the pipeline rank is > 0; distributed_data_parallel.py L160-171 sets bucket_size None on pp_rank > 0 as well;
  with bucket_size None a buffer (a dtype group; dense and expert apart) is one bucket (param_and_grad_buffer.py
  L954-1000, distrib_optimizer.py L567-576);
- bucket_size = max(40,000,000, 1,000,000 x |DP x CP|) unless given (training.py L2179-2194);
- 1F1B with align_grad_reduce (on by default, training/config/common_config.py L80, training.py L4356-4359): only
  the first stage enables the sync during its last backward; the others call grad_sync_func after the cooldown
  (schedules.py L2456-2461, L2476-2480). The interleaved schedule launches a chunk's sync on rank j after its
  backward v + j (L1445-1456), and what is left at the end after the loop (L2064-2069);
- 1F1B has no param_sync_func (align_param_gather is off without interleaving, arguments.py L1013): a bucket's
  all-gather is dispatched by the forward pre-hook of its first layer (param_and_grad_buffer.py L554-558)."""

from __future__ import annotations

import math

import pytest

from btacalc.config.execution import Layout, Overlaps, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.collectives import StageBuckets, gradient_buckets
from btacalc.model.gpu.timing import _ChunkSync, _Sync
from btacalc.model.problem import make_problem
from test_dp_sync_interleaved import _table  # (micro-batch, chunk) in Megatron's forward order

# Llama 3 70B (Meta model card / config.json: h 8,192, 64 heads of 128, 8 KV heads, SwiGLU f 28,672, 80 layers,
# vocabulary 128,256, untied) over TP 4: each linear split four ways, the two RMSNorm vectors whole
H, KV, D, F, V = 8192, 8, 128, 28672, 128256
LINEARS = H * (H + 2 * KV * D) + H * H + 3 * H * F  # QKV, output projection, gate + up + down
LAYER_TP4 = LINEARS // 4 + 2 * H  # 855,638,016 / 4 + 16,384 = 213,925,888
STAGE = 20 * LAYER_TP4  # PP 4: 20 layers a stage
EMBEDDING_TP4 = V * H // 4  # the word embedding, vocabulary-parallel over TP 4
BUCKET = 40_000_000  # max(4e7, 1e6 x DP 8)


def _llama70b(vp: int = 1, **layout) -> object:
    lay = Layout(devices=128, devices_per_node=8, tensor_parallel=4, pipeline_parallel=4, virtual_pipeline=vp,
                 zero_stage=1, micro_batches=8, overlap=Overlaps(grad_reduce=True, param_gather=True), **layout)
    return make_problem(load_preset("llama-3-70b"), resolve_hardware("h100"), RunOptions(seq_len=8192), lay)


def test_the_arithmetic():
    assert LAYER_TP4 == 213_925_888 and STAGE == 4_278_517_760 and EMBEDDING_TP4 == 262_668_288


def test_only_the_first_stage_is_bucketed():
    p = _llama70b()
    first = StageBuckets(True, EMBEDDING_TP4).calls(p, STAGE + EMBEDDING_TP4)
    # (4,278,517,760 + 262,668,288) / 40,000,000 = 113.5 -> 114 buckets on stage 0; one on every later stage
    assert first == math.ceil((STAGE + EMBEDDING_TP4) / BUCKET) == 114
    assert StageBuckets(False).calls(p, STAGE) == 1
    assert gradient_buckets(p, STAGE) == math.ceil(STAGE / BUCKET) == 107  # what every stage paid before


def test_interleaving_buckets_chunk_zero_only():
    p = _llama70b(vp=5)  # 4 layers a chunk; the embedding sits in stage 0's chunk 0
    chunk0 = 4 * LAYER_TP4 + EMBEDDING_TP4  # 855,703,552 + 262,668,288 = 1,118,371,840
    assert StageBuckets(True, EMBEDDING_TP4).calls(p, STAGE + EMBEDDING_TP4) == math.ceil(chunk0 / BUCKET) + 4 == 32
    assert StageBuckets(False).calls(p, STAGE) == 5  # one bucket for each of the five chunks


def test_num_buckets_sizes_from_the_whole_rank_and_applies_to_chunk_zero():
    # --ddp-num-buckets 10: bucket_size = (rank's parameters over its chunks) // 10 (training.py L2186-2187,
    # num_parameters L2442-2444), then only chunk 0 of stage 0 is cut in buckets of that size
    p = _llama70b(vp=5, ddp_num_buckets=10)
    rank = STAGE + EMBEDDING_TP4
    bucket = math.ceil(rank / 10)
    assert StageBuckets(True, EMBEDDING_TP4).calls(p, rank) == math.ceil((4 * LAYER_TP4 + EMBEDDING_TP4) / bucket) + 4 == 7


def test_apex_buckets_every_stage_alike():
    p = _llama70b(vp=5, ddp_buckets_every_stage=True)
    assert StageBuckets(False).calls(p, STAGE) == StageBuckets(True, EMBEDDING_TP4).calls(p, STAGE) == 107


def test_without_overlap_each_chunk_is_one_call():
    lay = Layout(devices=128, devices_per_node=8, tensor_parallel=4, pipeline_parallel=4, virtual_pipeline=5,
                 zero_stage=1, micro_batches=8)
    p = make_problem(load_preset("llama-3-70b"), resolve_hardware("h100"), RunOptions(seq_len=8192), lay)
    assert StageBuckets(True, EMBEDDING_TP4).calls(p, STAGE + EMBEDDING_TP4) == StageBuckets(False).calls(p, STAGE) == 5


@pytest.mark.parametrize("vp, first, later", [(1, 114, 1), (5, 32, 5)])
def test_plan_shows_the_critical_stage_buckets(vp, first, later):
    from btacalc.config.execution import BatchLimits, ExecutionRequest, OverlapRequest
    from btacalc.config.presets import resolve_model
    from btacalc.planning.plan import make_plan

    report = make_plan(resolve_model("llama-3-70b"), resolve_hardware("h100"), ExecutionRequest(
        seq_len=8192, devices=128, tensor_parallel=4, pipeline_parallel=4, virtual_pipeline=vp, zero_stage=1,
        recompute="full", overlaps=OverlapRequest(grad_reduce=True, param_gather=True),
        limits=BatchLimits(global_batch=64, micro_batch=1)))
    crit = report.throughput.critical_stage
    calls = {c["name"]: c["calls"] for c in report.throughput.collectives}
    # the plan's own parameter count of the stage (its vocabulary padding) may move stage 0's count by one
    expected = first if crit == 0 else later
    assert abs(calls["gradient_reduce_dense"] - expected) <= (1 if crit == 0 else 0), (crit, calls)
    assert calls["param_gather_dense"] == calls["gradient_reduce_dense"]


# --- exposure (timing._ChunkSync), VP = 1 ---


@pytest.mark.parametrize("stage, traffic, backward, exposed", [
    (1, 0.40, 0.25, 0.40 - 1 * 0.25),  # one backward slot (stage 0's) after stage 1's end: 0.15 s shows
    (2, 0.40, 0.25, 0.0),  # two slots, 0.50 s > 0.40 s: hidden
    (3, 0.80, 0.25, 0.80 - 3 * 0.25),  # 0.05 s shows
])
def test_a_later_stage_reduces_in_the_backwards_still_to_come(stage, traffic, backward, exposed):
    chunks = _ChunkSync(1, 1, 1, 1.0, stage, True)
    assert chunks.exposed_reduce(traffic, backward) == pytest.approx(exposed, abs=1e-12)


def test_the_first_stage_still_hides_its_buckets_behind_its_last_backward():
    assert _ChunkSync(1, 1, 1, 1.0, 0, False).exposed_reduce(0.40, 0.25) == pytest.approx(0.15)


def test_a_later_stage_waits_for_its_whole_gather():
    # one bucket, dispatched by the first layer's pre-hook and waited for there: nothing hides it
    assert _ChunkSync(1, 1, 1, 1.0, 2, True).exposed_gather(0.2, 0.5) == 0.2
    # Apex's buckets prefetch behind the forward, as stage 0's do
    assert _ChunkSync(1, 1, 1, 1.0, 2, False).exposed_gather(0.2, 0.5) == 0.0


def _warm_up_delay(gathers: list[float], forwards: list[float]) -> float:
    """The first micro-batch's forward down the pipeline: stage j's gather starts when its input arrives and its
    forward starts when the gather is done; the delay is when it leaves the last stage, less the forwards."""
    t = 0.0
    for gather, forward in zip(gathers, forwards):
        t = t + gather + forward
    return t - sum(forwards)


def test_overlapped_gathers_without_interleaving_add_up_over_the_stages():
    lay = Layout(pipeline_parallel=4, virtual_pipeline=1, overlap=Overlaps(param_gather=True))
    stages = [_Sync(0.3, 0.05), _Sync(0.1, 0.2), _Sync(0.0, 0.2), _Sync(0.2, 0.25)]
    # the reductions: the slowest (0.3); the gathers: 0.05 + 0.2 + 0.2 + 0.25 = 0.7
    assert _warm_up_delay([0.05, 0.2, 0.2, 0.25], [1.0] * 4) == pytest.approx(0.7)
    assert _Sync.of_step(lay, stages) == pytest.approx(0.3 + 0.7)
    # with interleaving every stage's gathers start at the step's start: the slowest counts (0.25)
    assert _Sync.of_step(Layout(pipeline_parallel=4, virtual_pipeline=2, overlap=lay.overlap), stages) == \
        pytest.approx(0.3 + 0.25)
    # not overlapped, the gathers run in the optimizer step, side by side
    assert _Sync.of_step(Layout(pipeline_parallel=4), stages) == pytest.approx(0.3 + 0.25)


# --- exposure, VP > 1: rank j's chunk syncs replayed from schedules.py ---


def _simulated_reduce_on_rank(pp: int, vp: int, m: int, traffic: tuple[float, float], backward: float,
                              rank: int) -> float:
    """Backward steps of b / VP; rank j's backward v + j falls when rank 0's v does. A chunk whose last backward is
    v is launched by rank j after its backward v + j, or at its own end (rank 0's step total - 1 - j) when v + j
    is past the last; launched chunks reduce one after the other. Exposed: past rank 0's last backward."""
    first, later = traffic
    table = _table(m, vp, pp)
    total = len(table)
    ends = [(v + 1) * backward / vp for v in range(total)]
    launches = sorted((ends[min(v, total - 1 - rank)], vp - 1 - c) for v, (mb, c) in enumerate(table) if mb == m - 1)
    free = 0.0
    for at, chunk in launches:
        free = max(free, at) + (first if chunk == 0 else later)
    return max(0.0, free - ends[-1])


@pytest.mark.parametrize("pp,vp,m", [(4, 12, 8), (4, 5, 16), (8, 3, 8), (4, 2, 12)])
@pytest.mark.parametrize("first,later,backward", [(0.05, 0.01, 0.2), (0.3, 0.02, 0.2), (0.1, 0.2, 0.3)])
def test_the_interleaved_reduce_on_rank_j_is_the_schedule(pp, vp, m, first, later, backward):
    traffic = first + (vp - 1) * later
    for rank in range(pp):
        chunks = _ChunkSync(vp, m - pp * ((m - 1) // pp), min(pp, m), first / traffic, rank, rank > 0)
        assert chunks.exposed_reduce(traffic, backward) == pytest.approx(
            _simulated_reduce_on_rank(pp, vp, m, (first, later), backward, rank), abs=1e-12), rank


def test_the_interleaved_chunk_zero_gather_on_rank_j_has_its_warm_up():
    # chunks 0 and 1 gather from the step's start on every rank; rank 2's first forward starts two chunk forwards
    # in (VP 4, f = 0.4: 2 x 0.1 = 0.2 s), so 0.25 s of chunk 0's 0.45 s gather shows; later chunks as on rank 0
    chunks = _ChunkSync(4, 4, 4, 0.45 / 0.75, 2, True)
    later = (0.75 - 0.45) / 3
    assert chunks.exposed_gather(0.75, 0.4) == pytest.approx((0.45 - 2 * 0.4 / 4) + 3 * max(0.0, later - 4 * 0.4 / 4))


def test_tied_embeddings_get_a_bucket_of_their_own_on_the_first_and_last_stages():
    # distrib_optimizer.py L555-576: a shared_embedding parameter closes the bucket before it and its own; the
    # first stage's embedding (the last parameter in backward order) and the last stage's copy (the first)
    p = _llama70b(vp=5)
    assert StageBuckets(False, 0, True).calls(p, STAGE) == 5 + 1
    assert StageBuckets(True, EMBEDDING_TP4, True).calls(p, STAGE + EMBEDDING_TP4) == 32 + 1
    # without the distributed optimizer the buffer's default layout splits nothing (param_and_grad_buffer.py
    # L954-1000)
    lay = Layout(devices=128, devices_per_node=8, tensor_parallel=4, pipeline_parallel=4, virtual_pipeline=5,
                 zero_stage=0, micro_batches=8, overlap=Overlaps(grad_reduce=True))
    p0 = make_problem(load_preset("llama-3-70b"), resolve_hardware("h100"), RunOptions(seq_len=8192), lay)
    assert StageBuckets(False, 0, True).calls(p0, STAGE) == 5
