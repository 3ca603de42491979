"""Rich rendering of a `whatif` answer."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.markup import escape
from rich.text import Text

from ..planning.whatif import WhatIfResult, readable as _fmt
from .fit import fit, label_grid


def whatif_renderable(r: WhatIfResult) -> Group:
    head = label_grid(fold_values=True)  # hostile36: a target of 1e300 is 300 digits: folded, never cut with "…"
    head.add_row("question", f"{r.target_metric} >= {_fmt(r.target_value)} for {escape(r.model)} on {escape(r.hardware)}: what "
                             f"{r.solve_for} would it take?")
    today = _fmt(r.today_metric) if r.today_metric is not None else "-" if r.today_fits else "- (the plan does not fit)"
    head.add_row("today", f"{r.solve_for} = {_fmt(r.today_value)} gives {r.target_metric} = {today}")
    if r.reached and r.value is not None and r.ratio is not None and r.answer is not None:
        head.add_row("answer", Text(f"{_fmt(r.value)} ({_fmt(r.ratio, 3)}x today's value) gives {r.target_metric} = "
                                    f"{'-' if r.answer.metric is None else _fmt(r.answer.metric)} at G x b x M = {r.answer.shape}", style="bold green"))
    else:
        head.add_row("answer", Text(f"not reached: {r.note}", style="bold red"))
    head.add_row("along the way", " -> ".join(r.binds_along_the_way) or "-")
    if r.fits_nowhere:  # the note says it in one line
        return Group(head)
    # freshuser20: the trace runs to the first grid point that reaches the target, past the answer (whatif.py)
    title = ("Trace (grid points from today's value to the first that reaches the target; the answer lies between "
             "the last two)" if r.reached else "Trace (every grid point tried; none reaches the target)")
    t = Table(title=title, title_justify="left")
    for c in ("value", "x today", r.target_metric, "G x b x M", "dominant phase", "stream-bound", "batch limited by"):
        t.add_column(c, justify="left" if c in ("dominant phase", "batch limited by", "G x b x M") else "right",
                     overflow="fold" if c == "batch limited by" else "ellipsis")
    for s in r.trace:
        t.add_row(_fmt(s.value), _fmt(s.ratio, 3), "-" if s.metric is None else _fmt(s.metric), s.shape,
                  s.dominant_phase, f"{s.stream_bound_share:.0%}", s.binding_constraint)
    return Group(head, fit(t))
