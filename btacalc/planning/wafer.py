"""The wafer section of a plan: the batch split as Cerebras runs it, SwarmX and MemoryX, the
mesh-derived costs, and the same plan on 1, 2, 4, ... D systems, to show where scaling stops being
linear (model/wafer/cluster.py says why it can: with a fixed global batch the batch per system shrinks
until the weight stream is no longer hidden; the step boundary is fixed per step)."""

from __future__ import annotations

from typing import Optional

from ..config.execution import WAFER_BATCH_RULE
from ..errors import BtacalcError
from ..model.memory import MemoryModel
from ..model.problem import Problem
from ..model.solver import Solution, solve
from ..model.timing import StepTime, step_time
from ..model.wafer.cluster import levels, stream_bandwidth, stream_limit, tree_latency_s
from ..model.wafer.costs import tiles_overhead_s
from .report import ScalingRow, WaferInfo
from .resolve import resolve_problem

# Scaling efficiency below which the plan reports scaling as no longer linear: a reporting threshold
# (5%, the order of the Sandia 1 -> 16 CS-3 result, 15.3x = 95.6%, Cerebras press release via wafer.md).
LINEAR_EFFICIENCY = 0.95
# A cost below this share of the step is not named as what limits scaling.
NOTABLE_SHARE = 0.05


def _shares(t: StepTime) -> tuple[float, float, float]:
    """(stream-bound, step-boundary, latency) shares of a step."""
    total = float(t.step_time_s)
    boundary = float(t.phase_time_s.get("step_boundary", 0.0)) / total
    latency = float(t.phase_time_s.get("stream_latency", 0.0)) / total
    return float(t.stream_bound_share), boundary, latency


def _limited_by(t: StepTime) -> str:
    stream, boundary, latency = _shares(t)
    named = {"weight stream (batch per system too small to hide it)": stream,
             "step boundary (gradients out, MemoryX optimizer step)": boundary,
             "SwarmX/MemoryX latency": latency}
    top = max(named, key=lambda k: named[k])
    return top if named[top] >= NOTABLE_SHARE else "compute"


def _best(problem: Problem) -> Optional[tuple[Solution, StepTime]]:
    sol = solve(MemoryModel(problem), problem.execution.limits)
    if not sol.fits or not MemoryModel(problem).offchip_fits:
        return None
    return sol, step_time(problem, sol.tiles, sol.tile_batch, micro_batches=sol.micro_batches)


def scaling_rows(problem: Problem) -> list[ScalingRow]:
    """The plan's request on 1, 2, 4, ... D systems (and D); counts the global batch does not divide
    over, or whose micro-batch does not fit, are left out."""
    request = problem.execution.request
    systems = problem.layout.devices
    if request is None or systems == 1:
        return []
    counts = sorted({1 << i for i in range(systems.bit_length()) if 1 << i <= systems} | {systems})
    rows: list[ScalingRow] = []
    one: Optional[float] = None
    for n in counts:
        try:
            p = resolve_problem(problem.model, problem.hardware, request.with_changes(devices=n))
        except BtacalcError:  # the global batch does not divide over n systems
            continue
        best = _best(p)
        if best is None:
            continue
        sol, t = best
        tps = float(t.tokens_per_s)
        one = tps if n == 1 else one
        stream, boundary, _ = _shares(t)
        rows.append(ScalingRow(systems=n, per_system_batch=sol.micro_batches * sol.tiles * sol.tile_batch,
                               micro_batches=sol.micro_batches, tokens_per_s=tps, tokens_per_s_per_system=tps / n,
                               efficiency=tps / (n * one) if one else float("nan"), stream_bound_share=stream,
                               step_boundary_share=boundary, limited_by=_limited_by(t)))
    return rows


def _linear_until(rows: list[ScalingRow]) -> tuple[Optional[int], str]:
    if not rows:
        return None, ""
    last = None
    for row in rows:
        if not row.efficiency >= LINEAR_EFFICIENCY:
            if last is None:
                return None, "no single-system plan to scale from"
            return last, (f"scaling falls below {LINEAR_EFFICIENCY:.0%} at {row.systems} systems "
                          f"({row.efficiency:.1%}); limited by {row.limited_by}")
        last = row.systems
    return last, f"linear (>= {LINEAR_EFFICIENCY:.0%}) up to {last} systems"


def wafer_info(problem: Problem, mem: MemoryModel, sol: Solution, best: Optional[StepTime]) -> WaferInfo:
    hw, lay = problem.hardware, problem.layout
    n = sol.tiles * sol.tile_batch
    state = sum(v for k, v in mem.offchip.items() if k != "capacity")
    comm = best.communication_s if best is not None else {}
    rows = scaling_rows(problem)
    linear, note = _linear_until(rows)
    ev = problem.evaluate(sol.tiles, sol.tile_batch)
    split = mem.activation_split(ev)
    per_tile = hw.calibration.tile_overhead_s.value * problem.model.num_layers if hw.calibration.tile_overhead_s else 0.0
    return WaferInfo(
        systems=lay.devices, global_batch=lay.devices * lay.micro_batches * n,
        per_system_batch=lay.micro_batches * n, micro_batches=lay.micro_batches, micro_batch_size=n, batch_rule=WAFER_BATCH_RULE,
        tokens_per_s=float(best.tokens_per_s) if best is not None else None,
        tokens_per_s_per_system=float(best.tokens_per_s) / lay.devices if best is not None else None,
        stream_bandwidth_bytes_per_s=stream_bandwidth(hw), stream_limited_by=stream_limit(hw),
        swarmx_levels=levels(problem), swarmx_latency_s=tree_latency_s(hw, lay.devices),
        memoryx_capacity_bytes=int(hw.memory.offchip_memory_bytes.value), memoryx_state_bytes=int(state),
        memoryx_fits=mem.offchip_fits, offloaded_activation_bytes=int(split.offloaded),
        offloaded_recompute_bytes=int(split.recompute_offloaded),
        gradient_out_s=_opt(comm.get("gradient_out")), optimizer_update_s=_opt(comm.get("optimizer_update")),
        step_boundary_s=_opt(best.phase_time_s.get("step_boundary")) if best is not None else None,
        tile_overhead_s=float(tiles_overhead_s(problem, ev, 1, per_tile)),
        mesh_dispatch_s=_opt(best.phase_time_s.get("mesh_dispatch")) if best is not None else None,
        scaling=rows, linear_until=linear, scaling_note=note,
    )


def _opt(v: object) -> Optional[float]:
    return None if v is None else float(v)  # type: ignore[arg-type]  # a float or a 0-d array
