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
Step time is the sum over phases (times M micro-batches with gradient accumulation, the gradient
synchronisation once); tokens/s = N*M*G*b*s / step time; MFU = model FLOPs / (step time x peak).
All functions work on ints and on numpy arrays (vectorised sweeps).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np

from .catalogue import PhaseValues
from .memory import MemoryModel
from .parallel import all_to_all_bytes, gradient_sync_bytes
from .run import Problem
from .solver import BatchLimits, Solution, solve


@dataclass(frozen=True)
class StepTime:
    step_time_s: Any
    tokens_per_s: Any  # all devices
    mfu: Any
    phase_time_s: dict[str, Any]  # per phase, per step (layer phases summed over L layers)
    tiling_overhead_s: Any
    stream_bound_share: Any  # fraction of step time during which the streaming link is the bottleneck
    communication_s: dict[str, Any]  # multi-GPU: all_to_all and gradient_sync, before overlap


def time_params(problem: Problem) -> tuple[float, float]:
    hw = problem.hardware
    eff = hw.compute_efficiency.value if hw.compute_efficiency else 1.0
    tile = hw.tile_overhead_s.value if hw.tile_overhead_s else 0.0
    return eff, tile


def _link_time(bytes_intra: Any, bytes_inter: Any, problem: Problem) -> Any:
    """Time to send bytes to peers in the node (scale-up link) and in other nodes (NIC), concurrently.
    Plans on several devices are validated to have both bandwidths (Parallelism.validate)."""
    hw = problem.hardware
    up = hw.scaleup_bandwidth_bytes_per_s.value  # type: ignore[union-attr]
    out = hw.scaleout_bandwidth_bytes_per_s.value  # type: ignore[union-attr]
    return np.maximum(bytes_intra / up, bytes_inter / out)


def communication_time(problem: Problem, tokens: Any, experts_recomputed: bool) -> dict[str, Any]:
    """All-to-all (per step, all MoE layers) and gradient synchronisation time of one device."""
    par, model = problem.parallel, problem.model
    if par.devices == 1:
        return {}
    node = par.node_size(int(problem.hardware.devices_per_node.value) if problem.hardware.devices_per_node else None)
    beta = problem.run.bytes_per_element
    out: dict[str, Any] = {}
    ep = par.expert_parallel
    if model.is_moe and ep > 1:
        sent = all_to_all_bytes(tokens, model.top_k, model.hidden_size, beta, ep, experts_recomputed)
        # EP groups are packed on consecutive devices: of the ep - 1 peers, min(ep, node) - 1 share the node.
        peers_in_node = min(ep, node) - 1
        share_intra = peers_in_node / (ep - 1)
        out["all_to_all"] = model.num_layers * _link_time(sent * share_intra, sent * (1 - share_intra), problem)
    mem_params = problem.params
    grad_rate = beta  # 16-bit gradients
    spans_nodes = par.devices > node
    sync = 0.0
    for params, ranks in ((mem_params.non_expert, par.data_parallel),
                          (mem_params.expert / ep, par.expert_data_parallel)):
        b = gradient_sync_bytes(grad_rate * params, ranks, par.zero_stage)
        sync = sync + (_link_time(0, b, problem) if spans_nodes else _link_time(b, 0, problem))
    out["gradient_sync"] = sync
    return out


def step_time(problem: Problem, tiles: Any, tile_batch: Any, overlap: bool = True,
              pv: Optional[PhaseValues] = None) -> StepTime:
    hw, run, model, par = problem.hardware, problem.run, problem.model, problem.parallel
    pv = pv if pv is not None else problem.evaluate(tiles, tile_batch)
    eff, tile_s = time_params(problem)
    peak = hw.peak_flops_per_s.value * eff
    streaming = problem.memory_model == "weight_streaming"
    act_bw = (hw.sram_bandwidth_bytes_per_s.value if hw.family == "wse" and hw.sram_bandwidth_bytes_per_s
              else hw.offchip_bandwidth_bytes_per_s.value)
    link_bw = hw.offchip_bandwidth_bytes_per_s.value
    beta = run.bytes_per_element
    phase_time: dict[str, Any] = {}
    stream_bound = 0
    model_flops = 0
    backward_compute = 0
    experts_recomputed = False
    for phase in problem.compiled.phases:
        n = model.num_layers if phase.scope == "layer" else 1
        v = lambda q: pv.value(phase.name, q)  # noqa: E731
        flops = v("flops_fwd") + v("flops_bwd") + v("flops_recompute")
        model_flops = model_flops + n * (v("flops_fwd") + v("flops_bwd"))
        recomputed = (np.asarray(v("recompute_bytes")) > 0) | (np.asarray(v("flops_recompute")) > 0)
        moved = v("bytes_moved")
        if phase.name == "experts" and par.expert_parallel > 1:
            # a device holds E/EP experts: only their weights are read (tokens routed to it are counted
            # by the catalogue already: uniform routing gives each device T*k token-expert pairs)
            moved = moved - beta * v("params") * (1 - 1 / par.expert_parallel)
            experts_recomputed = bool(np.any(recomputed))
        traffic = moved * (3 + recomputed)
        t_cmp = np.maximum(flops / peak, traffic / act_bw)
        backward_compute = backward_compute + n * v("flops_bwd") / peak
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
    tokens = tiles * tile_batch * run.seq_len
    comm = communication_time(problem, tokens, experts_recomputed)
    if "all_to_all" in comm:
        a2a = comm["all_to_all"]
        # overlapped: hidden behind the experts' own compute (chunked dispatch), only the excess shows
        phase_time["all_to_all"] = np.maximum(0.0, a2a - phase_time["experts"]) if par.overlap_all_to_all else a2a
    # gradient accumulation: M micro-batches of G*b sequences per optimizer step; everything above
    # runs M times, the gradients are synchronised once
    m = par.micro_batches
    if m > 1:
        phase_time = {k: m * v for k, v in phase_time.items()}
        stream_bound = m * stream_bound
    if "gradient_sync" in comm:
        # data-parallel gradient reduction overlaps the backward pass of the last micro-batch
        # (bucketed, as in PyTorch DDP and Megatron-LM); only what exceeds it shows
        phase_time["gradient_sync"] = np.maximum(0.0, comm["gradient_sync"] - backward_compute)
    tiling = m * model.num_layers * tiles * tile_s
    total = sum(phase_time.values()) + tiling
    return StepTime(total, par.devices * m * tokens / total, m * model_flops / (total * hw.peak_flops_per_s.value),
                    phase_time, tiling, stream_bound / total, comm)


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
    dense_problem = Problem(problem.model.dense_equivalent(), problem.hardware, problem.run,
                            replace(problem.parallel, expert_parallel=1))
    dense_mem = MemoryModel(dense_problem)
    dense = solve(dense_mem, cap)
    best_t = step_time(problem, best.tiles, best.tile_batch, overlap)
    g1_t = step_time(problem, 1, g1.tile_batch, overlap) if g1.fits else None
    dense_t = step_time(dense_problem, dense.tiles, dense.tile_batch, overlap) if dense.fits else None
    return ThroughputSummary(best, g1, dense, best_t, g1_t, dense_t)
