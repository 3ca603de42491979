"""Rich tables for `compare` and `crossover` (GB = 1e9 bytes; tokens/s as plain numbers)."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text
from rich.markup import escape

from ..planning.compare import CompareResult
from ..planning.crossover import CrossoverPoint, CrossoverResult
from .fit import Fit, fit, fit_all
from .tables import params


def _num(v, fmt: str = ",.0f") -> str:
    return "-" if v is None else format(v, fmt)


def compare_renderable(r: CompareResult) -> Fit:
    t = Table(title=f"{escape(r.model)} ({params(r.params_total)} parameters), s = {r.seq_len}: one row per device set",
              title_justify="left", caption_justify="left")
    t.box = box.SIMPLE_HEAD
    t.padding = (0, 1)
    moe_only = ("T_e", "vs dense", "BTA")  # a dense model has no experts (issue 25's rule, as plan: freshuser26)
    cols = tuple(c for c in ("device", "setup", "G x b", "T_e", "tokens/s", "MFU", "vs dense", "BTA", "tok/s/kW",
                             "dominant", "GB/device") if r.moe or c not in moe_only)
    for c in cols:
        t.add_column(c, justify="left" if c in ("device", "setup", "dominant") else "right",
                     overflow="fold" if c == "setup" else "ellipsis", min_width=13 if c == "setup" else None)
    notes = []
    for row in r.rows:
        rc = f"{row.recompute} rc" + ("" if row.precision == "bf16" else f", {row.precision}")
        memory = row.memory_model.replace('weight_streaming', 'streamed')
        if row.devices > 1 and row.layout:
            setup = f"{row.layout}, ZeRO-{row.zero_stage}\n{rc}"
        elif row.devices > 1:  # wafer systems in strict data parallel (compare.layout_label)
            setup = f"{memory}, {row.devices} systems\n{rc}"
        else:
            setup = f"{memory}\n{rc}"
        cells = {"device": escape(f"{row.hardware} x{row.devices}" if row.devices > 1 else row.hardware),
                 "setup": setup, "G x b": f"{row.tiles} x {row.tile_batch}" if row.fits else "[red]no fit[/]",
                 "T_e": _num(row.tokens_per_expert),
                 "tokens/s": _num(row.tokens_per_s) + ("" if row.expected_median_abs_error is None
                                                       or row.tokens_per_s is None
                                                       else f"\n±{100 * row.expected_median_abs_error:.0f}%"),
                 "MFU": "-" if row.mfu is None else f"{100 * row.mfu:.1f}%",
                 "vs dense": _num(row.relative_to_dense, ".2f"),
                 "BTA": "-" if row.bta_gain is None else f"{row.bta_gain:.2f}x",
                 "tok/s/kW": _num(row.tokens_per_s_per_kw), "dominant": row.dominant_phase or "-",
                 "GB/device": f"{row.memory_total_bytes / 1e9:.1f}/{row.usable_memory_bytes / 1e9:.1f}"}
        t.add_row(*(cells[c] for c in cols))
        if row.note:
            notes.append(escape(f"{row.hardware} x{row.devices}: {row.note}"))
        if row.run_options:  # the plan's inputs.run_options: as flags, too long for the setup cell
            notes.append(escape(f"{row.hardware} x{row.devices} {row.precision}: run options {' '.join(row.run_options)}"))
    t.caption = _compare_caption(r, notes)
    return fit(t)


def _compare_caption(r: CompareResult, notes: list[str]) -> str:
    moe = ("T_e: tokens per expert; ", "vs dense: the dense model with the same active parameters on the same devices; "
           "BTA: tokens/s at the solver's G over G = 1;\n") if r.moe else ("", "a dense model: no T_e, vs dense or BTA "
                                                                           "columns;\n")
    return ("G x b: per device; " + moe[0] + "tokens/s: all devices, ± under it: the typical (median) |predicted / "
            "measured - 1| of tokens/s on the measured runs most like the row, each predicted with factors fitted "
            "without its model family where enough fit runs are left (plan with the row's options names them and any "
            "predicted with the shipped factors); rc: recomputation; " + moe[1]
            + "tok/s/kW: over system power; dominant: the step's largest time row (a phase, a collective, or launch: "
            "the host issuing kernels); GB/device: used/usable, GB = 1e9 bytes"
            + ("\n" + "\n".join(notes) if notes else "")
            + ("\nnot run: " + "; ".join(escape(s) for s in r.skipped) if r.skipped else ""))


def crossover_renderable(r: CrossoverResult) -> Group:
    hws = list(dict.fromkeys(p.hardware for p in r.points))
    t = Table(title=f"{r.family} family, s = {r.seq_len}: regime and tokens/s per kW per device", title_justify="left")
    t.add_column("model")
    t.add_column("params", justify="right")
    for hw in hws:
        t.add_column(escape(hw), justify="right")
    t.add_column("best per kW")
    by_model: dict[str, dict[str, CrossoverPoint]] = {}
    for p in r.points:
        by_model.setdefault(p.model, {})[p.hardware] = p
    for model, cells in by_model.items():
        row = [model, params(next(iter(cells.values())).params_total)]
        for hw in hws:
            p = cells[hw]
            if p.row.fits:
                row.append(f"{p.regime.replace('weight_streaming', 'streamed')}\n{p.row.tokens_per_s_per_kw:,.0f}")
            else:
                row.append("[red]does not fit[/]")
        row.append(escape(r.best_per_kw.get(model, "-")))
        t.add_row(*row)
    b = Table(title="Regime boundaries (between the family members on either side)", title_justify="left")
    for c in ("device", "from", "to", "between"):
        b.add_column(c)
    for x in r.boundaries:
        b.add_row(escape(x.hardware), x.from_regime, x.to_regime, f"{params(x.below_params)} and {params(x.above_params)}")
    # freshuser20: with no regime change (one family member, or one regime throughout) the table was its headers alone
    parts = [t, b if r.boundaries else Text("Regime boundaries: none (each device keeps one regime over these sizes)")]
    if r.gpu_equivalents:
        pairs = list(dict.fromkeys(k for v in r.gpu_equivalents.values() for k in v))
        e = Table(title="One wafer system = N GPUs (tokens/s per GPU at the GPU's smallest fitting cluster)",
                  title_justify="left")
        e.add_column("model")
        for pair in pairs:
            e.add_column(escape(pair), justify="right")
        for model, vals in r.gpu_equivalents.items():
            e.add_row(model, *(f"{vals[pair]:,.1f}" if pair in vals else "-" for pair in pairs))
        parts.append(e)
    return Group(*fit_all(parts))
