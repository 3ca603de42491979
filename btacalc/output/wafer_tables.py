"""Rich renderings of the wafer section of a plan (systems, batch split, SwarmX/MemoryX, mesh costs,
scaling over systems) and of the sensitivity table."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from ..planning.report import PlanReport, WaferInfo
from .fit import fit, label_grid


def wafer_renderable(w: WaferInfo) -> Group:
    t = label_grid()
    t.add_row("systems", f"{w.systems} (strict data parallel; weights broadcast and gradients reduced by SwarmX, "
                         f"{w.swarmx_levels} tree level(s), latency {w.swarmx_latency_s * 1e6:,.0f} us)")
    t.add_row("batch", f"N = {w.global_batch} = {w.systems} systems x {w.micro_batches} micro-batch(es) x "
                       f"{w.micro_batch_size} sequences  [dim]({w.batch_rule})[/dim]")
    if w.tokens_per_s is not None and w.tokens_per_s_per_system is not None:
        t.add_row("tokens/s", f"{w.tokens_per_s:,.0f} in all, {w.tokens_per_s_per_system:,.0f} per system")
    t.add_row("weight stream", f"{w.stream_bandwidth_bytes_per_s / 1e9:,.0f} GB/s per system, limited by "
                               f"{w.stream_limited_by.replace('_', ' ')}; once per micro-batch")
    fits = "fits" if w.memoryx_fits else "DOES NOT FIT"
    t.add_row("MemoryX", f"{w.memoryx_state_bytes / 1e9:,.2f} GB of state in {w.memoryx_capacity_bytes / 1e9:,.0f} GB "
                         f"({fits})" + (f"; optimizer step {w.optimizer_update_s:.3f} s, gradients out "
                                       f"{w.gradient_out_s:.3f} s, exposed at the step boundary "
                                       f"{w.step_boundary_s:.4f} s" if w.optimizer_update_s is not None
                                       and w.gradient_out_s is not None and w.step_boundary_s is not None else ""))
    mesh = [f"per-tile overhead {w.tile_overhead_s * 1e3:.3f} ms per tile per step"] if w.tile_overhead_s else []
    if w.mesh_dispatch_s is not None:
        mesh.append(f"dispatch + combine {w.mesh_dispatch_s:.3f} s per step")
    if mesh:
        t.add_row("mesh", ", ".join(mesh))
    parts: list = [t]
    if w.scaling:
        s = Table(title=f"Scaling over systems: {w.scaling_note}", title_justify="left")
        for c in ("systems", "batch/system", "M", "tokens/s", "per system", "efficiency", "stream-bound", "limited by"):
            s.add_column(c, justify="left" if c == "limited by" else "right",
                         overflow="fold" if c == "limited by" else "ellipsis")
        for row in w.scaling:
            s.add_row(str(row.systems), str(row.per_system_batch), str(row.micro_batches), f"{row.tokens_per_s:,.0f}",
                      f"{row.tokens_per_s_per_system:,.0f}", f"{row.efficiency:.1%}", f"{row.stream_bound_share:.0%}",
                      row.limited_by)
        parts.append(fit(s))  # inside a panel: split like the other tables, never cut
    return Group(*parts)


def sensitivity_table(r: PlanReport) -> Table:
    t = Table(title="Sensitivity: tokens/s when one hardware number moves (elasticity = relative change of "
                    "tokens/s per relative change of the number)", title_justify="left")
    for c in ("number", "value", "kind", "tokens/s -", "tokens/s +", "elasticity -", "elasticity +", "G x b x M -/+"):
        t.add_column(c, justify="left" if c in ("number", "kind", "G x b x M -/+") else "right",
                     overflow="fold" if c == "G x b x M -/+" else "ellipsis")
    fmt = lambda v: "-" if v is None else f"{v:+.3f}"  # noqa: E731
    num = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    for row in sorted(r.sensitivity or [], key=lambda x: -max(abs(x.elasticity_minus or 0), abs(x.elasticity_plus or 0))):
        t.add_row(row.parameter, f"{row.value:.4g}", row.kind, num(row.tokens_per_s_minus), num(row.tokens_per_s_plus),
                  fmt(row.elasticity_minus), fmt(row.elasticity_plus), f"{row.shape_minus} / {row.shape_plus}")
    return t
