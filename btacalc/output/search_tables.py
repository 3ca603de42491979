"""Rich rendering of a layout search: the winner's plan, the ranking and why the winner wins."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table

from ..planning.search import SearchResult
from .tables import plan_renderable

_TERMS = ("compute", "tp_comm", "cp_comm", "all_to_all", "pp_p2p", "zero_per_micro_batch", "pipeline_bubble",
          "data_parallel_sync", "tiling")


def search_renderable(result: SearchResult) -> Group:
    parts: list[RenderableType] = []
    head = (f"{result.model} on {result.devices} x {result.hardware}: {result.candidates:,} layouts evaluated, "
            f"{result.fitting:,} fit; global batch {result.global_batch:,} sequences of {result.seq_len:,} tokens "
            f"({result.elapsed_s:.2f} s)")
    parts.append(Panel("\n".join([head] + [f"• {w}" for w in result.why]), title="Layout search",
                       border_style="green" if result.best else "red"))
    if result.ranking:
        parts.append(_ranking(result))
    if result.best is not None:
        parts.append(plan_renderable(result.best))
    return Group(*parts)


def _ranking(result: SearchResult) -> Table:
    t = Table(title="Fastest layouts that fit (per step: seconds by term)", title_justify="left")
    for c in ("#", "layout", "tokens/s/GPU", "step", "MFU", "memory", *_TERMS):
        t.add_column(c, justify="left" if c in ("#", "layout") else "right")
    rows = list(result.ranking)
    if result.fastest_not_fitting is not None:
        rows.append(result.fastest_not_fitting)
    for i, r in enumerate(rows):
        mark = str(i + 1) if r.fits else "no fit"
        t.add_row(mark, r.label(), f"{r.tokens_per_s_per_device:,.0f}", f"{r.step_time_s:.2f} s", f"{100 * r.mfu:.1f}%",
                  f"{r.memory_bytes / 1e9:.1f} GB", *(f"{r.time_s.get(k, 0.0):.2f}" for k in _TERMS))
    return t
