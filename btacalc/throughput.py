"""Per-phase roofline time model, step time, tokens/s, MFU and throughput relative to dense.

For every phase (L times for the layer phases) and every pass (forward, backward, recompute):

    t_compute = FLOPs / (peak x compute_efficiency)
    t_memory  = activation bytes moved / bandwidth of the memory holding them
                (on-chip SRAM for weight streaming; HBM for resident GPUs, weights included)
    t_stream  = weight-streaming link time (weight streaming only): every weight of the phase crosses
                the link in the forward pass and again in the backward pass, while its gradient goes out
                over the full-duplex link at the same time: 2 x beta x params / link bandwidth.
                Every expert's weights cross whether or not tokens reach it (DESIGN notes).
    t_phase   = max(t_compute, t_memory) combined with t_stream by max (overlap) or sum (no overlap)

A per-tile overhead (profile `tile_overhead_s`) is added G times per layer for the attention block.
Step time is the sum over phases; tokens/s = G*b*s / step time; MFU = model FLOPs / (step time x peak).
All functions work on ints and on numpy arrays (vectorised sweeps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .catalogue import PhaseValues
from .memory import MemoryModel
from .run import Problem
from .solver import BatchLimits, Solution, solve


@dataclass(frozen=True)
class StepTime:
    step_time_s: Any
    tokens_per_s: Any
    mfu: Any
    phase_time_s: dict[str, Any]  # per phase, per step (layer phases summed over L layers)
    tiling_overhead_s: Any
    stream_bound_share: Any  # fraction of step time during which the streaming link is the bottleneck


def time_params(problem: Problem) -> tuple[float, float]:
    hw = problem.hardware
    eff = hw.compute_efficiency.value if hw.compute_efficiency else 1.0
    tile = hw.tile_overhead_s.value if hw.tile_overhead_s else 0.0
    return eff, tile


def step_time(problem: Problem, tiles: Any, tile_batch: Any, overlap: bool = True,
              pv: Optional[PhaseValues] = None) -> StepTime:
    hw, run, model = problem.hardware, problem.run, problem.model
    pv = pv if pv is not None else problem.evaluate(tiles, tile_batch)
    eff, tile_s = time_params(problem)
    peak = hw.peak_flops_per_s.value * eff
    streaming = hw.memory_model == "weight_streaming"
    act_bw = (hw.sram_bandwidth_bytes_per_s.value if streaming and hw.sram_bandwidth_bytes_per_s
              else hw.offchip_bandwidth_bytes_per_s.value)
    link_bw = hw.offchip_bandwidth_bytes_per_s.value
    beta = run.bytes_per_element
    phase_time: dict[str, Any] = {}
    stream_bound = 0
    model_flops = 0
    for phase in problem.compiled.phases:
        n = model.num_layers if phase.scope == "layer" else 1
        v = lambda q: pv.value(phase.name, q)  # noqa: E731
        flops = v("flops_fwd") + v("flops_bwd") + v("flops_recompute")
        model_flops = model_flops + n * (v("flops_fwd") + v("flops_bwd"))
        recomputed = (np.asarray(v("recompute_bytes")) > 0) | (np.asarray(v("flops_recompute")) > 0)
        traffic = v("bytes_moved") * (3 + recomputed)
        t_cmp = np.maximum(flops / peak, traffic / act_bw)
        if streaming:
            weight_bytes = beta * v("params")
            if phase.name == "embedding":
                weight_bytes = 0  # rows gathered by token id; the table is not streamed whole
            t_str = 2 * weight_bytes / link_bw
            t = np.maximum(t_cmp, t_str) if overlap else t_cmp + t_str
            stream_bound = stream_bound + n * np.where(t_str > t_cmp, t, 0.0)
        else:
            t = t_cmp
        phase_time[phase.name] = n * t
    tiling = model.num_layers * tiles * tile_s
    total = sum(phase_time.values()) + tiling
    tokens = tiles * tile_batch * run.seq_len
    return StepTime(total, tokens / total, model_flops / (total * hw.peak_flops_per_s.value), phase_time, tiling,
                    stream_bound / total)


@dataclass(frozen=True)
class ThroughputSummary:
    best: Solution
    g1: Solution
    dense: Solution
    best_time: StepTime
    g1_time: Optional[StepTime]
    dense_time: Optional[StepTime]

    @property
    def relative_to_dense(self) -> Optional[float]:
        if self.dense_time is None or not self.best.fits:
            return None
        return float(self.best_time.tokens_per_s / self.dense_time.tokens_per_s)

    @property
    def relative_to_dense_g1(self) -> Optional[float]:
        if self.dense_time is None or self.g1_time is None:
            return None
        return float(self.g1_time.tokens_per_s / self.dense_time.tokens_per_s)


def summarize(problem: Problem, mem: MemoryModel, best: Solution, limits: BatchLimits,
              overlap: bool = True) -> ThroughputSummary:
    """Throughput at the plan's (G, b), at G = 1 (conventional batching: the largest untiled batch
    that fits) and of the dense model with the same active parameters at its own best plan."""
    cap = BatchLimits(max_global_batch=limits.max_global_batch)
    g1 = solve(mem, BatchLimits(tiles=1, max_global_batch=limits.max_global_batch))
    dense_problem = Problem(problem.model.dense_equivalent(), problem.hardware, problem.run)
    dense_mem = MemoryModel(dense_problem)
    dense = solve(dense_mem, cap)
    best_t = step_time(problem, best.tiles, best.tile_batch, overlap)
    g1_t = step_time(problem, 1, g1.tile_batch, overlap) if g1.fits else None
    dense_t = step_time(dense_problem, dense.tiles, dense.tile_batch, overlap) if dense.fits else None
    return ThroughputSummary(best, g1, dense, best_t, g1_t, dense_t)
