"""The wafer-specific terms of a step (the hooks timing.py calls): the per-tile overhead from the mesh,
the on-wafer dispatch/combine and the wafer cluster's stream latency (per micro-batch), and the step
boundary (once per optimizer step). See mesh.py and cluster.py for the derivations."""

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
    if mesh is not None and problem.model.is_moe:
        out.per_micro_batch["mesh_dispatch"] = out.communication["mesh_dispatch"] = dispatch_s(mesh, ev)
    if problem.memory_model == "weight_streaming":
        out.per_micro_batch["stream_latency"] = micro_batch_latency_s(problem)
        sb = step_boundary(problem, param_counts(problem).total, backward_s, micro_batch_s)
        out.per_step["step_boundary"] = sb.exposed_s
        out.communication.update(gradient_out=sb.gradient_out_s, optimizer_update=sb.optimizer_update_s,
                                 swarmx_latency=sb.latency_s)
    return out
