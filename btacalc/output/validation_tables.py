"""Rich tables for `btacalc validate`: published points and measured runs."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table

from ..planning.crossval import CrossValidation
from ..planning.measured import Bands, MeasuredReport, RunResult, memory_status, run_status, time_status
from ..planning.precision_pairs import PairReport
from ..planning.run_file import MeasuredRun
from ..planning.validate import PointResult
from .fit import Fit, fit


# a verdict's colour: the published points' status, and each part of a measured run's
STATUS_STYLE = {"pass": "green", "KNOWN GAP": "yellow", "FAIL": "bold red", "UNEXPECTED PASS": "bold red"}


def points_table(results: list[PointResult]) -> Group:
    t = Table(title="Published points vs btacalc", title_justify="left")
    for c in ("point", "published", "model", "deviation", "tolerance", "status"):
        t.add_column(c, justify="left" if c in ("point", "status") else "right")
    style = STATUS_STYLE
    notes = []
    for r in results:
        fmt = (lambda v: f"{v:,.4g}") if abs(r.published) < 1e3 else (lambda v: f"{v:,.0f}")
        t.add_row(r.id, fmt(r.published),
                  "-" if r.model is None else fmt(r.model), "-" if r.deviation is None else f"{r.deviation:+.3g}",
                  f"±{r.tolerance:g}", f"[{style[r.status]}]{r.status}[/]")
        notes.append(f"[bold]{r.id}[/bold]: {escape(r.claim)} [dim]({escape(r.source)})[/dim]"
                     + (f"\n  [yellow]{escape(r.note)}[/yellow]" if r.note else ""))
    return Group(fit(t), *notes)


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


def _memory_pair(r: RunResult) -> tuple[str, str]:
    """(predicted, measured) peak memory in GiB: allocated when the run gives it, else reserved ("res")."""
    m, p = r.measured, r.predicted
    if m.peak_alloc_gib is not None:
        return ("-" if p.peak_alloc_gib is None else f"{p.peak_alloc_gib:.1f}"), f"{m.peak_alloc_gib:.1f}"
    if m.peak_reserved_gib is not None:
        return ("-" if p.peak_reserved_gib is None else f"{p.peak_reserved_gib:.1f} res"), f"{m.peak_reserved_gib:.1f} res"
    return "-", "-"


def measured_table(report: MeasuredReport) -> Group:
    """The measured runs: a time table, a peak-memory table (the runs that measured it; in both a fit run's status
    reads "fit", so neither repeats the role, and the run's family is in the summary and `--explain`: at 80 columns
    the two columns folded every run id onto two lines or more), the notes (known gaps' summaries, what could not be
    expressed, older wafer releases), then the summaries, years and pairs. What each run took by default and what
    its recipe sets untimed are in `validate --explain RUN` and `--json`."""
    b = report.bands
    t = Table(title=f"Measured training runs vs btacalc: time (tokens/s per device; a check run's band ±"
              f"{b.per_run_abs_error:.0%})", title_justify="left")
    for c in ("run", "predicted", "measured", "error", "status"):
        t.add_column(c, justify="left" if c in ("run", "status") else "right",
                     overflow="fold" if c == "run" else "ellipsis")
    for r in report.runs:
        if r.measured.tokens_per_s_per_device is None and r.measured.step_time_s is None:
            continue  # a memory-only run: in the memory table
        pred, meas = r.predicted.tokens_per_s_per_device, r.measured.tokens_per_s_per_device
        t.add_row(escape(r.id), "-" if pred is None else f"{pred:,.0f}",
                  "-" if meas is None else f"{meas:,.0f}", _pct(r.error), _status_text(time_status(r, b)))
    return Group(fit(t), memory_table(report), *run_notes(report), fit(summary_table(report)),
                 software_year_table(report), pairs_table(report.pairs), _verdict_line(report))


def memory_table(report: MeasuredReport) -> Fit:
    """The runs that measured peak memory: predicted against measured, and the memory verdict."""
    t = Table(title="Measured training runs vs btacalc: peak memory per device (GiB = 2^30 B; allocated, else "
              f"reserved \"res\"; a check run's band ±{report.bands.memory_per_run_abs_error:.0%})",
              title_justify="left")
    for c in ("run", "predicted", "measured", "error", "status"):
        t.add_column(c, justify="left" if c in ("run", "status") else "right",
                     overflow="fold" if c == "run" else "ellipsis")
    for r in report.runs:
        mem_pred, mem_meas = _memory_pair(r)
        if mem_meas == "-":
            continue
        t.add_row(escape(r.id), mem_pred, mem_meas, _pct(r.memory_error),
                  _status_text(memory_status(r, report.bands)))
    return fit(t)


def run_notes(report: MeasuredReport) -> list[str]:
    """One line per run that has something to say in the tables' stead: its known gaps (the summary where the run
    gives one), why it could not be expressed, an older wafer release's gains; then where the rest is."""
    lines = []
    for r in report.runs:
        notes = [] if r.expressible else [f"not expressible: {r.reason}"]
        if r.known_gap:
            notes.append(f"known gap: {r.known_gap_summary or r.known_gap}")
        if r.memory_known_gap:
            notes.append(f"memory known gap: {r.memory_known_gap_summary or r.memory_known_gap}")
        if r.release_gain is not None:
            notes.append(f"older release: predicted rate / {r.release_gain:g}, the gains Cerebras states since "
                         "(cerebras_releases.toml)")
        if notes:
            lines.append(f"[bold]{escape(r.id)}[/bold]: " + escape("; ".join(notes)))
    return [*lines, f"[dim]{escape(EXPLAIN_HINT)}[/dim]"] if report.runs else lines


def summary_table(report: MeasuredReport) -> Table:
    b = report.bands
    s = Table(title=f"Summary per role and device family (bands: ±{b.per_run_abs_error:.0%} per check run, "
              f"±{b.family_mean_abs_error:.0%} family mean; memory ±{b.memory_per_run_abs_error:.0%} per check run, "
              f"±{b.memory_family_mean_abs_error:.0%} family mean)", title_justify="left")
    for c in ("role", "family", "n", "mean |error|", "median", "max", "mem n", "mem mean", "mem max", "not expressible"):
        s.add_column(c, justify="left" if c in ("role", "family") else "right")
    for f in report.summary:
        fmt = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        s.add_row(f.role, f.family, str(f.n), fmt(f.mean_abs_error), fmt(f.median_abs_error), fmt(f.max_abs_error),
                  str(f.memory_n), fmt(f.memory_mean_abs_error), fmt(f.memory_max_abs_error), str(len(f.not_expressible)))
    return s


def _verdict_line(report: MeasuredReport) -> str:
    return ("[green]within the documented bands[/]" if report.gate.ok else
            "[bold red]outside the bands:[/] " + escape("; ".join(report.gate.failures)))


EXPLAIN_HINT = ("Each run in full (its source and layout, what it takes by default and why, what its recipe sets that "
                "is not timed, a known gap's whole account where the line above is its summary): "
                "btacalc validate --explain RUN, or --json.")


LAYOUT_FIELDS = ("tp", "pp", "vp", "cp", "ep", "etp", "zero", "fsdp", "sequence_parallel", "recompute")


def _run_layout(run: MeasuredRun) -> str:
    """The run's layout as the prediction takes it: its fields with its recipe's corrections (MeasuredRun.with_recipe;
    freshuser25: the row's own recompute was shown where the recipe's was timed); those left out are the plan's
    defaults, listed apart."""
    if run.megatron_args is not None:
        return "as its Megatron-LM launch states it (megatron_args)"
    timed = run.with_recipe()
    stated = []
    for k in LAYOUT_FIELDS:
        value, row = getattr(timed, k), getattr(run, k)
        if value is not None:
            stated.append(f"{k} {value}" + (f" (the recipe's; the row states {row})"
                                             if row is not None and row != value else ""))
    batch = f"seq {timed.seq}, global batch {timed.global_batch}" + (
        f", micro-batch {timed.micro_batch}" if timed.micro_batch is not None else "")
    return ", ".join([batch, *stated])


def _recipe_rows(run: MeasuredRun) -> list[tuple[str, str]]:
    """What the run's own recipe states beyond the layout (MTP, dispatcher, overlaps, optimizer precision, ...), each
    field as the file gives it, and its source: the prediction times them (freshuser25: `--explain` showed none)."""
    if run.recipe is None:
        return []
    fields = run.recipe.model_dump(exclude_none=True, exclude_defaults=True, exclude={"source"})
    return [("recipe", ", ".join(f"{k} {v}" for k, v in fields.items()) or "-"), ("recipe source", run.recipe.source)]


def _num(v: Any, spec: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def _measured_step(run: MeasuredRun, r: RunResult) -> str:
    """The measured step time; where a source states tokens/s alone, the step it implies (freshuser24: "measured -"
    beside a run whose notes derived it): global batch x sequence / (tokens/s per device x devices)."""
    step, rate = r.measured.step_time_s, r.measured.tokens_per_s_per_device
    if step is not None or not rate or not run.global_batch or not run.seq:
        return _num(step, ".4g", " s")
    step = run.global_batch * run.seq / (rate * r.devices)
    return f"{step:.4g} s (from tokens/s: global batch x seq / all devices' rate)"


def _record_rows(run: MeasuredRun, r: RunResult, bands: Bands) -> list[tuple[str, str]]:
    pred, meas = r.predicted, r.measured
    mem_pred, mem_meas = _memory_pair(r)
    rows = [("run", r.id), ("role", f"{r.role} ({r.family})"), ("model", r.model),
            ("hardware", f"{r.hw} x {r.devices}"), ("precision", run.precision), ("layout", _run_layout(run)),
            ("source", run.source), ("release", run.release or "-"), ("software date", run.software_date or "-"),
            ("tokens/s per device", f"predicted {_num(pred.tokens_per_s_per_device, ',.0f')}, "
             f"measured {_num(meas.tokens_per_s_per_device, ',.0f')}"),
            ("step time", f"predicted {_num(pred.step_time_s, '.4g', ' s')}, measured {_measured_step(run, r)}"),
            ("error", _pct(r.error)), ("peak memory (GiB)", f"predicted {mem_pred}, measured {mem_meas}"),
            ("memory error", _pct(r.memory_error)), ("status", run_status(r, bands)), *_recipe_rows(run)]
    if not r.expressible:
        rows.append(("not expressible", r.reason))
    rows += [(label, text) for label, text in (("known gap (summary)", r.known_gap_summary), ("known gap", r.known_gap),
                                                 ("memory known gap (summary)", r.memory_known_gap_summary),
                                                 ("memory known gap", r.memory_known_gap)) if text]
    if r.release_gain is not None:
        rows.append(("older release", f"predicted rate / {r.release_gain:g}, the gains Cerebras states since "
                                      "(cerebras_releases.toml)"))
    rows += [(key, str(r.carried[key])) for key in ("confidence", "notes") if r.carried.get(key)]
    rows += [(f"default: {k}", why) for k, why in sorted(r.defaulted.items())]
    rows += [(f"not timed: {k}", why) for k, why in sorted(r.not_timed.items())]
    return rows


def run_record(run: MeasuredRun, result: RunResult, bands: Bands) -> Fit:
    """`validate --explain`: one measured run whole, each field on its own row (the known gap's full account)."""
    t = Table(title=f"Measured run {escape(run.id)} (error = predicted / measured - 1)", title_justify="left")
    t.add_column("field", justify="left")
    t.add_column("value", justify="left", overflow="fold")
    for label, value in _record_rows(run, result, bands):
        t.add_row(escape(label), escape(str(value)))
    return fit(t)


def _status_text(status: str) -> str:
    """A measured run's status with each verdict in its colour ("pass; mem KNOWN GAP")."""
    parts = []
    for part in status.split("; "):
        verdict = part.removeprefix("mem ")
        style = STATUS_STYLE.get(verdict)
        parts.append(f"[{style}]{part}[/]" if style else part)
    return "; ".join(parts)


def software_year_table(report: MeasuredReport) -> Fit:
    """Check runs' time errors by device family and the year of their software (software_date), known gaps out."""
    t = Table(title="Check runs by software year (the year of each run's software_date; signed error: positive = "
              "btacalc too fast, the older software ran slower than btacalc's clock; known gaps left out)",
              title_justify="left")
    for c in ("family", "software year", "n", "mean (signed)", "mean |error|", "max |error|", "known gaps"):
        t.add_column(c, justify="left" if c in ("family", "software year") else "right")
    for g in report.by_software_year:
        t.add_row(g.family, g.software_year, str(g.n), _pct(g.mean_error),
                  "-" if g.mean_abs_error is None else f"{100 * g.mean_abs_error:.1f}%",
                  "-" if g.max_abs_error is None else f"{100 * g.max_abs_error:.1f}%", str(g.known_gaps))
    return fit(t)


def pairs_table(report: PairReport) -> Group:
    """Precision pairs, speed-up over BF16 first, then low-precision against low-precision; the known gaps below."""
    style = {"pass": "green", "KNOWN GAP": "yellow", "MISS": "bold red", "miss (cross-source)": "yellow",
             "not predicted": "dim"}
    parts: list[Any] = []
    for kind, title in (("bf16", "speed-up over BF16"), ("lp", "low precision against low precision")):
        t = Table(title=f"Precision pairs, {title}: same model, hardware, devices and layout (ratio = tokens/s of "
                  f"the first / the second; tolerance ±{report.tolerance:.0%}: {escape(report.tolerance_source)})",
                  title_justify="left")
        for c in ("pair", "runs", "source", "measured", "predicted", "error", "tolerance", "status"):
            t.add_column(c, justify="right" if c in ("measured", "predicted", "error", "tolerance") else "left",
                         overflow="fold" if c == "runs" else "ellipsis")
        for p in (p for p in report.pairs if p.kind == kind):
            t.add_row(escape(p.name), escape(f"{p.narrow} / {p.wide}"), "cross-source" if p.cross_source else "same",
                      f"{p.measured_ratio:.3f}", "-" if p.predicted_ratio is None else f"{p.predicted_ratio:.3f}",
                      _pct(p.error), f"±{p.tolerance:.0%}", f"[{style[p.status]}]{p.status}[/]")
        parts.append(fit(t))
    gaps = {p.known_gap_summary or p.known_gap for p in report.pairs if p.known_gap and p.status == "KNOWN GAP"}
    parts += [f"[yellow]precision-pair known gap: {escape(g)}[/yellow]" for g in sorted(gaps)]
    return Group(*parts)


def crossval_tables(cv: CrossValidation) -> Group:
    """Leave-one-model-family-out: each fold's fit and per-run errors, then the errors grouped."""
    t = Table(title="Leave one model family out (tokens/s per device; factors fitted without the run's family)",
              title_justify="left")
    for c in ("held out", "run", "hw", "devices", "predicted", "measured", "error", "fitted on"):
        t.add_column(c, justify="right" if c in ("devices", "predicted", "measured", "error") else "left",
                     overflow="fold" if c == "fitted on" else "ellipsis")
    for f in cv.folds:
        basis = "; ".join(f"{d}: {b}" + (" " + ", ".join(f"{k} {v:.4g}" for k, v in f.fits.get(d, {}).items()))
                          for d, b in f.basis.items())
        for r in f.runs:
            if r.error is None:
                continue
            t.add_row(f.held_out, escape(r.id), r.hw, str(r.devices), f"{r.predicted_tokens_per_s_per_device:,.0f}",
                      f"{r.measured_tokens_per_s_per_device:,.0f}", _pct(r.error), escape(basis))
            basis = ""
    s = Table(title="Errors grouped", title_justify="left")
    for c in ("group", "value", "n", "mean |error|", "max |error|", "mean (signed)"):
        s.add_column(c, justify="left" if c in ("group", "value") else "right")
    fmt = lambda v: "-" if v is None else f"{100 * v:+.1f}%"  # noqa: E731
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    groups = [("all", {"runs": cv.overall}), ("hardware", cv.by_hardware), ("kind", cv.by_kind),
              ("scale", cv.by_scale), ("model family", cv.by_model_family), ("software year", cv.by_software_year)]
    for name, rows in groups:
        for value, e in rows.items():
            s.add_row(name, value, str(e.n), pct(e.mean_abs_error), pct(e.max_abs_error), fmt(e.mean_error))
    missing = (f"{len(cv.not_expressible)} runs have no time error to count (not expressible, or a measured memory "
               f"only): {', '.join(entry.split(':', 1)[0] for entry in cv.not_expressible)}")
    return Group(fit(t), fit(s), missing)
