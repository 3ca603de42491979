"""Per-phase roofline time model: step time, tokens/s and MFU of one batch shape.

For every phase (L times for the layer phases) over the passes of a training step (forward,
backward = 2 x forward, and recomputation when the phase's activations were dropped; factors in
``formulas/constants.toml``):

    t_compute = FLOPs / (peak x compute_efficiency)
    t_memory  = activation bytes moved / bandwidth of the memory holding them
                (on-chip SRAM for weight streaming; HBM for resident GPUs, weights included)
    t_stream  = weight-streaming link time (weight streaming only): every weight of the phase crosses
                the link for the forward pass and again for the backward pass while its gradient goes
                out over the full-duplex link: 2 x beta x params / link bandwidth. Every expert's
                weights cross whether or not tokens reach it (DESIGN notes).
    t_phase   = max(t_compute, t_memory) combined with t_stream by max (overlap) or sum (no overlap)

On a wafer the matmuls also run at the fabric's width utilisation u(n) = n / (n + k X), n = h for a
phase that multiplies by weights and d_h for the attention core (no weights), and every
kernel run pays a fixed cost once per micro-batch (model/wafer/fabric.py).
A per-tile overhead is added G times per step: derived from the mesh on a wafer profile with a
`[mesh]` (model/wafer/mesh.py), else the profile's `calibration.tile_overhead_s` per layer. On a
wafer, the on-wafer dispatch/combine, the start of each micro-batch's weight stream, the fitted fixed
cost of a micro-batch (wafer/costs.py) and the offloaded activations' traffic the link cannot hide
(wafer/offload.py) are added per micro-batch, and the step boundary of a wafer cluster (gradients out, MemoryX's optimizer step, SwarmX
latency: model/wafer/cluster.py) once per step. Step time is the sum over phases times M
micro-batches, plus the step boundary; tokens/s = N*M*G*b*s / step time; MFU = model FLOPs / (step
time x peak). GPU problems (Megatron layouts: tensor, pipeline, context, expert and data
parallelism with their collectives) go to model/gpu/timing.py.
All functions work on ints and on numpy arrays (vectorised sweeps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..catalogue.constants import constants
from .communication import recomputed
from .gpu.timing import gpu_step_time
from .steptime import StepTime, compute_efficiency, tile_overhead_s
from .problem import Evaluation, Problem
from .wafer.cluster import stream_bandwidth
from .wafer.costs import tiles_overhead_s, wafer_costs
from .wafer.fabric import phase_utilisation
from .wafer.offload import exposed_offload_s
from .memory import MemoryModel


@dataclass
class _PhaseTimes:
    phase_time: dict[str, Any]
    stream_bound: Any
    model_flops: Any
    backward_time: Any = 0  # the backward pass (with recomputation and its weight stream), for overlaps
    stream_time: Any = 0  # the weight stream's link time over the micro-batch (weight streaming)
    per_layer: dict[tuple[str, str], Any] = field(default_factory=dict)  # (kind, phase) -> one layer's time


def _phase_times(problem: Problem, ev: Evaluation) -> _PhaseTimes:
    """Roofline time of every phase over one micro-batch (see module docstring)."""
    hw, model = problem.hardware, problem.model
    passes = constants().passes
    peak = hw.chip.peak_flops_per_s.value * compute_efficiency(problem)
    streaming = problem.memory_model == "weight_streaming"
    sram_bw = hw.chip.sram_bandwidth_bytes_per_s
    act_bw = sram_bw.value if sram_bw else hw.memory.offchip_bandwidth_bytes_per_s.value  # wafer SRAM
    link_bw = stream_bandwidth(hw)
    beta = problem.run.bytes_per_element
    out = _PhaseTimes({}, 0, 0)
    for kind, n, pv, phase in ev.kind_items():
        v = pv.of(phase.name).__getitem__
        flops = v("flops_fwd") + v("flops_bwd") + v("flops_recompute")
        out.model_flops = out.model_flops + n * (v("flops_fwd") + v("flops_bwd"))
        traffic = v("bytes_moved") * (1 + recomputed(pv, phase.name)) + v("bytes_moved_bwd")
        t_cmp = np.maximum(flops / (peak * phase_utilisation(problem, v("params"))), traffic / act_bw)
        t_bwd = t_cmp * (flops - v("flops_fwd")) / np.maximum(flops, 1)  # the backward share of the phase
        if streaming:
            weight_bytes = 0 if phase.stream_unit == "none" else beta * v("params")
            t_str = passes.weight_stream_passes * weight_bytes / link_bw
            t = np.maximum(t_cmp, t_str) if problem.run.overlap_streaming else t_cmp + t_str
            out.stream_bound = out.stream_bound + n * np.where(t_str > t_cmp, t, 0.0)
            out.stream_time = out.stream_time + n * t_str
            t_str_bwd = t_str * (passes.weight_stream_passes - 1) / passes.weight_stream_passes
            t_bwd = np.maximum(t_bwd, t_str_bwd) if problem.run.overlap_streaming else t_bwd + t_str_bwd
        else:
            t = t_cmp
        out.backward_time = out.backward_time + n * t_bwd
        out.phase_time[phase.name] = out.phase_time.get(phase.name, 0) + n * t
        out.per_layer[(kind, phase.name)] = t
    return out


def step_time(problem: Problem, tiles: Any, tile_batch: Any, ev: Optional[Evaluation] = None,
              micro_batches: Any = None, report: bool = True) -> StepTime:
    """Step time of `micro_batches` (default the layout's) micro-batches of `tiles` tiles of
    `tile_batch` sequences on every device (ints or arrays). `report` false: a GPU problem's per-phase,
    per-GEMM and collective rows may be left out (`gpu_step_time`); the times are the same."""
    if problem.hardware.family == "gpu":  # Megatron layouts: btacalc.model.gpu.timing
        return gpu_step_time(problem, tiles, tile_batch, ev, micro_batches, report)
    run, model, layout = problem.run, problem.model, problem.layout
    ev = ev if ev is not None else problem.evaluate(tiles, tile_batch)
    times = _phase_times(problem, ev)
    phase_time = times.phase_time
    tokens = tiles * tile_batch * run.seq_len
    wafer = wafer_costs(problem, ev, times.backward_time, sum(phase_time.values()))
    if problem.memory_model == "weight_streaming":  # stored activations held off the wafer (wafer/offload.py)
        offloaded = MemoryModel(problem).activation_split(ev).offloaded
        wafer.per_micro_batch["activation_offload"] = exposed_offload_s(
            problem, offloaded, sum(phase_time.values()), times.stream_time)
    phase_time.update(wafer.per_micro_batch)
    # gradient accumulation: M micro-batches of G*b sequences per optimizer step; everything above
    # runs M times, the step boundary once
    m = layout.micro_batches if micro_batches is None else micro_batches
    phase_time = {k: m * v for k, v in phase_time.items()}
    stream_bound = m * times.stream_bound
    phase_time.update(wafer.per_step)
    tiling = m * tiles_overhead_s(problem, ev, tiles, model.num_layers * tile_overhead_s(problem))
    total = sum(phase_time.values()) + tiling
    peak = problem.hardware.chip.peak_flops_per_s.value
    per_layer = {key: m * t for key, t in times.per_layer.items()}
    return StepTime(total, layout.devices * m * tokens / total, m * times.model_flops / (total * peak),
                    phase_time, tiling, stream_bound / total, wafer.communication, kind_phase_time_s=per_layer)
