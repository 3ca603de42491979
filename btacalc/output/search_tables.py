"""Rich rendering of a layout search: the winner's plan, the ranking and why the winner wins."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.markup import escape

from ..planning.search import SearchResult
from .fit import Fit, fit
from .tables import plan_renderable

SHORT = {"compute": "compute", "tp_comm": "TP", "cp_comm": "CP", "all_to_all": "a2a", "a2a_sm_share": "a2a SMs",
         "dp_sm_share": "DP SMs", "pp_p2p": "p2p",
         "zero_per_micro_batch": "ZeRO-2/3", "pipeline_bubble": "bubble", "data_parallel_sync": "DP sync",
         "tiling": "tiles", "fsdp2_copies": "FSDP2 copies"}


def search_renderable(result: SearchResult) -> Group:
    parts: list[RenderableType] = []
    head = (f"{escape(result.model)} on {result.devices} x {escape(result.hardware)}: {result.candidates:,} layouts evaluated, "
            f"{result.fitting:,} fit; global batch {result.global_batch:,} sequences of {result.seq_len:,} tokens "
            f"({result.elapsed_s:.2f} s)")
    parts.append(Panel("\n".join([head] + [f"• {w}" for w in result.why]), title="Layout search",
                       border_style="green" if result.best else "red"))
    if result.ranking:
        parts.append(_ranking(result))
    if result.best is not None:
        parts.append(plan_renderable(result.best))
    return Group(*parts)


def _ranking(result: SearchResult) -> Fit:
    t = Table(title="Fastest layouts that fit", title_justify="left")
    for c in ("#", "layout", "tok/s/GPU", "step", "MFU", "GB/GPU", "where the step goes (s)"):
        t.add_column(c, justify="left" if c in ("#", "layout", "where the step goes (s)") else "right",
                     overflow="fold" if c == "where the step goes (s)" else "ellipsis")
    rows = list(result.ranking)
    if result.fastest_not_fitting is not None:
        rows.append(result.fastest_not_fitting)
    for i, r in enumerate(rows):
        terms = sorted(((v, k) for k, v in r.time_s.items() if v >= 0.005), reverse=True)[:4]
        t.add_row(str(i + 1) if r.fits else "no fit", r.label(), f"{r.tokens_per_s_per_device:,.0f}",
                  f"{r.step_time_s:.2f} s", f"{100 * r.mfu:.1f}%", f"{r.memory_bytes / 1e9:.1f}",
                  ", ".join(f"{SHORT.get(k, k)} {v:.2f}" for v, k in terms))
    return fit(t)
