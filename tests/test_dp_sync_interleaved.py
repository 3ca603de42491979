"""The exposed data-parallel synchronisation under --overlap-grad-reduce / --overlap-param-gather (issue 21, task
dpov1; btacalc/model/gpu/timing.py `_ChunkSync`), derived from Megatron-LM @ d98e8a64:

- schedules.py get_schedule_table L989-1016: the interleaved order, groups of `microbatch_group_size_per_vp_stage`
  (= PP, model_parallel_config.py L567-568) micro-batches per model chunk; backward runs the chunks reversed
  (get_model_chunk_id L1244-1249);
- L1438-1456 (align_grad_reduce, on by default: training/config/common_config.py L80, training.py L4356-4357):
  a chunk's whole reduce-scatter is launched once its last micro-batch's backward is done;
- L1218-1221 and L1334-1354 (align_param_gather, on with interleaving): chunks 0 and 1 all-gather at the start,
  chunk v+1 when chunk v starts its first forward; a chunk's first forward waits for its gather;
- one data-parallel communicator: the collectives run one after the other (a FIFO queue).

The tests replay that schedule on the first pipeline rank (rank offset 0) as an event simulation and compare it
with the closed form; then check the wiring on a small interleaved Llama 3 8B layout."""

from __future__ import annotations

import math

import pytest

from btacalc.config.execution import Layout, Overlaps, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.collectives import StageBuckets, data_parallel_times
from btacalc.model.gpu.timing import _ChunkSync, gpu_step_time
from btacalc.model.problem import make_problem
from btacalc.model.state import bytes_per_param


def _table(m: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) in Megatron's forward order (get_schedule_table, L989-1016)."""
    out = []
    for start in range(0, m, group):
        stop = m if start + group >= m else start + group
        out += [(mb, c) for c in range(chunks) for mb in range(start, stop)]
    return out


def _chunk_traffic(total: float, share: float, vp: int) -> list[float]:
    return [share * total] + [(1 - share) * total / (vp - 1)] * (vp - 1)


def _simulated_reduce(pp: int, vp: int, m: int, traffic: float, share: float, backward: float) -> float:
    """Backward steps back to back (each b / VP); after a chunk's last micro-batch its reduce-scatter joins the
    queue; exposed = when the queue drains, less the end of the last backward."""
    per_chunk, t, free = _chunk_traffic(traffic, share, vp), 0.0, 0.0
    for mb, c in _table(m, vp, pp):
        chunk = vp - 1 - c  # backward runs the chunks reversed
        t += backward / vp
        if mb == m - 1:
            free = max(free, t) + per_chunk[chunk]
    return max(0.0, free - t)


def _simulated_gather(pp: int, vp: int, m: int, traffic: float, share: float, forward: float) -> float:
    """Forward steps (rank 0's warm-up holds every chunk's first group); stalls waiting for a chunk's gather."""
    per_chunk = _chunk_traffic(traffic, share, vp)
    done = {0: per_chunk[0], 1: per_chunk[0] + per_chunk[1]}  # both launched at t = 0, one after the other
    t, stall = 0.0, 0.0
    for mb, c in _table(m, vp, pp):
        if mb == 0:
            if 1 < c + 1 < vp:
                done[c + 1] = max(t, done[c]) + per_chunk[c + 1]
            if done[c] > t:
                stall += done[c] - t
                t = done[c]
        t += forward / vp
    return stall


@pytest.mark.parametrize("pp,vp,m", [(4, 12, 8), (4, 12, 128), (4, 12, 9), (8, 3, 8), (2, 4, 2), (4, 2, 3)])
@pytest.mark.parametrize("traffic,share,step", [(0.36, 1 / 12, 0.14), (0.36, 0.125, 0.01), (1.0, 0.3, 0.5),
                                                (0.05, 0.25, 0.3)])
def test_the_closed_form_is_the_schedule(pp, vp, m, traffic, share, step):
    if vp == 2 and share == 1 / 12:
        share = 0.5
    chunks = _ChunkSync(vp, m - pp * ((m - 1) // pp), min(pp, m), share)
    assert chunks.exposed_reduce(traffic, step) == pytest.approx(_simulated_reduce(pp, vp, m, traffic, share, step))
    assert chunks.exposed_gather(traffic, step / 2) == pytest.approx(
        _simulated_gather(pp, vp, m, traffic, share, step / 2))


def test_pp4_vp12_only_the_last_chunk_reduce_scatter_shows():
    """The runs7 layout (PP 4, VP 12, GA 8) at 0.36 s of reduce-scatter and all-gather per step and a 0.2123 s
    micro-batch (backward 2/3 of it): chunk 0's 1/12 of the reduce-scatter (0.03 s) is exposed, the other 11
    chunks' hide behind the 11 x 4 chunk backwards after them (11 x 4 x 0.1415 / 12 = 0.519 s > 0.33 s). The
    gather: chunk 0's 0.03 s, then each chunk's 0.03 s against 4 forwards of 0.0708 / 12: 0.0064 s more each."""
    b, f = 0.2123 * 2 / 3, 0.2123 / 3
    chunks = _ChunkSync(12, 4, 4, 1 / 12)
    assert chunks.exposed_reduce(0.36, b) == pytest.approx(0.03)
    assert chunks.exposed_gather(0.36, f) == pytest.approx(0.03 + 11 * (0.03 - 4 * f / 12))
    # without interleaving (VP 1) the same traffic shows less one micro-batch's backward / forward of the whole
    # stage: 0.36 - 0.1415 = 0.2185 s and 0.36 - 0.0708 = 0.2892 s, what the interleaved layout was charged before
    flat = _ChunkSync(1, 4, 4, 1.0)
    assert flat.exposed_reduce(0.36, b) == pytest.approx(0.2185, abs=1e-4)
    assert flat.exposed_gather(0.36, f) == pytest.approx(0.2892, abs=1e-4)


@pytest.mark.parametrize("traffic,step", [(0.36, 0.14), (0.05, 0.3)])
def test_without_interleaving_the_last_micro_batch_hides_it(traffic, step):
    """VP = 1 (schedules.py L813-830 and L2431-2461: the buckets reduce during the last backward; the gathers
    prefetch behind the forward, align_param_gather off without interleaving, arguments.py L1013): as before."""
    chunks = _ChunkSync(1, 1, 1, 1.0)
    assert chunks.exposed_reduce(traffic, step) == max(0.0, traffic - step)
    assert chunks.exposed_gather(traffic, step) == max(0.0, traffic - step)


# Llama 3 8B (h 4,096, 32 heads of 128, 8 KV heads, SwiGLU f 14,336, vocabulary 128,256 untied, 32 layers)
H, KV_H, D, F = 4096, 8, 128, 14336
LAYER = H * (H + 2 * KV_H * D) + H * H + 3 * H * F + 2 * H  # linears + the two norm vectors (TP 1)
EMBEDDING = 128256 * H  # the first stage's input embedding (TP 1: no padding beyond 128)


def test_the_step_takes_the_first_stage_chunk_zero_with_the_embedding():
    """8 H100s, PP 4, VP 2, DP 2, GA 8, both overlaps: each stage holds 8 layers (4 per chunk); the first
    stage's chunk 0 also holds the embedding, so its share is (4 L + E) / (8 L + E), and at this size the
    backwards and forwards after it hide everything else: sync = share x (its reduce-scatter + all-gather)."""
    run = RunOptions(seq_len=4096, attention="flash")
    layout = Layout(devices=8, devices_per_node=8, pipeline_parallel=4, virtual_pipeline=2, zero_stage=1,
                    micro_batches=8, overlap=Overlaps(grad_reduce=True, param_gather=True))
    problem = make_problem(load_preset("llama-3-8b"), resolve_hardware("h100"), run, layout)
    stage0 = 8 * LAYER + EMBEDDING
    # Megatron-Core buckets the first stage's chunk 0 only (ddpchunk; training.py L2504-2514): ceil((4 L + E) / 4e7)
    # = ceil(1,397,784,576 / 40,000,000) = 35 buckets, and chunk 1 is one bucket: 36 calls each way
    dp = data_parallel_times(problem, stage0, 0, bytes_per_param(problem), StageBuckets(True, EMBEDDING))
    assert StageBuckets(True, EMBEDDING).calls(problem, stage0) == math.ceil((4 * LAYER + EMBEDDING) / 40_000_000) + 1 == 36
    share = (4 * LAYER + EMBEDDING) / stage0
    step = gpu_step_time(problem, 1, 1)
    traffic = dp.reduce_per_step + dp.gather_per_step
    # the hidden rest holds the ring's 24 collective channels of the node's 132 SMs (task dpsm, sm_share.py)
    hidden_cost = (1 - share) * traffic * 24 / 132
    assert step.details["sync_s"] == pytest.approx(share * traffic + hidden_cost, rel=1e-3)
    assert share == pytest.approx(0.6157, abs=1e-4)  # 4 x 218.1M + 525.3M over 8 x 218.1M + 525.3M
