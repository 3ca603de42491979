"""The wafer-specific terms of a step (the hooks timing.py calls): the per-tile overhead from the mesh,
the on-wafer dispatch/combine, the wafer cluster's stream latency and the micro-batch's fixed cost (per
micro-batch), and the step boundary (once per optimizer step). See mesh.py and cluster.py for the
derivations.

The micro-batch's fixed cost t_0 (`calibration.micro_batch_fixed_s`, fitted). One model, one cluster,
one month, only the batch changed (BERT-large on one CS-2 at 512 and 2,048, each run by the compiler as
one micro-batch of the whole batch: "No benefit from gradient accumulation expected", measured_runs.json
bert-large-wse2-1-406/-407): a step is t_0 + B t_seq, so two batches give
    t_0 = (B_2 t_1 - B_1 t_2) / (B_2 - B_1) = (2048 x 0.17459 - 512 x 0.30503) / 1536 = 0.131 s,
75% of the step at 512. What it is Cerebras does not publish (the mechanisms btacalc derives, the
kernels' mesh steps, the stream's start, the step boundary, give BERT-large a few milliseconds); that it
is paid per micro-batch rather than per optimizer step is what ESM-2 35M's CS-2 run shows (32
micro-batches of 64 in a 3.51 s step, where btacalc without it predicted 0.92 s). It is fitted with the
family's other factors on the fit runs (btacalc/data/calibration.toml), never set from this arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..params import param_counts
from ..problem import Evaluation, Problem
from .cluster import micro_batch_latency_s, step_boundary
from .fabric import kernel_fixed_s
from .mesh import dispatch_s, tile_overhead_s


@dataclass(frozen=True)
class WaferCosts:
    per_micro_batch: dict[str, Any] = field(default_factory=dict)  # repeated M times
    per_step: dict[str, Any] = field(default_factory=dict)  # once per optimizer step, exposed part
    communication: dict[str, Any] = field(default_factory=dict)  # before overlap, for the report


def tiles_overhead_s(problem: Problem, ev: Evaluation, tiles: Any, per_tile_without_mesh: float) -> Any:
    """What G tiles add to one micro-batch: from the mesh when the profile has one, else the profile's
    calibrated per-tile cost (`per_tile_without_mesh`, already summed over the layers)."""
    mesh = problem.hardware.mesh
    return tiles * (tile_overhead_s(mesh, ev) if mesh is not None else per_tile_without_mesh)


def wafer_costs(problem: Problem, ev: Evaluation, backward_s: Any, micro_batch_s: Any) -> WaferCosts:
    """Mesh dispatch (MoE models), the fixed cost of the micro-batch's kernel runs (fabric.py) and, when
    weights stream, the cluster's latency and step boundary."""
    out = WaferCosts()
    mesh = problem.hardware.mesh
    if mesh is not None:
        out.per_micro_batch["kernel_fixed"] = kernel_fixed_s(mesh, ev)
    fixed = problem.hardware.calibration.micro_batch_fixed_s
    if fixed is not None:
        out.per_micro_batch["micro_batch_fixed"] = fixed.value
    if mesh is not None and problem.model.is_moe:
        out.per_micro_batch["mesh_dispatch"] = out.communication["mesh_dispatch"] = dispatch_s(mesh, ev)
    if problem.memory_model == "weight_streaming":
        out.per_micro_batch["stream_latency"] = micro_batch_latency_s(problem)
        sb = step_boundary(problem, param_counts(problem).total, backward_s, micro_batch_s)
        out.per_step["step_boundary"] = sb.exposed_s
        out.communication.update(gradient_out=sb.gradient_out_s, optimizer_update=sb.optimizer_update_s,
                                 swarmx_latency=sb.latency_s)
    return out
