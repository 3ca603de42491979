"""Regenerate the README's "time model against measured runs" tables, its published-points table and
docs/accuracy.png from the library, in one command:

    python tools/accuracy.py            # rewrite README.md between the accuracy markers, draw the plot, and
                                        # write btacalc/data/expected_error.json (what a plan's expected error
                                        # reads: the leave-one-model-family-out errors, about 25 s)
    python tools/accuracy.py --check    # exit 1 if README.md is not what this would write (CI-friendly)

Everything comes from the library (`validate_measured`, the profiles' calibration sections); nothing is
typed by hand. The plot needs matplotlib (`pip install '.[plot]'`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from btacalc.config.hardware import builtin_profiles
from btacalc.output.plots import measured_plot
from btacalc.planning.calibration import load_families
from btacalc.planning.crossval import held_out_errors
from btacalc.config.presets import resolve_model
from btacalc.planning.measured import validate_measured
from btacalc.planning.run_file import load_runs, software_year
from btacalc.planning.validate import load_points, summary_line, validate

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PLOT = ROOT / "docs" / "accuracy.png"
EXPECTED_ERROR = ROOT / "btacalc" / "data" / "expected_error.json"
BEGIN, END = "<!-- accuracy:begin (tools/accuracy.py) -->", "<!-- accuracy:end -->"
POINTS_BEGIN, POINTS_END = "<!-- points:begin (tools/accuracy.py) -->", "<!-- points:end -->"
WHATIF_BEGIN, WHATIF_END = "<!-- whatif:begin (tools/accuracy.py) -->", "<!-- whatif:end -->"
GROUPS_BEGIN, GROUPS_END = "<!-- groups:begin (tools/accuracy.py) -->", "<!-- groups:end -->"
SWYEAR_BEGIN, SWYEAR_END = "<!-- swyear:begin (tools/accuracy.py) -->", "<!-- swyear:end -->"
SUMMARY_BEGIN, SUMMARY_END = "<!-- summary:begin (tools/accuracy.py) -->", "<!-- summary:end -->"
LAYOUT = (("tp", "TP"), ("pp", "PP"), ("vp", "VP"), ("cp", "CP"), ("ep", "EP"))


def _layout(run) -> str:
    """The layout as run: the run's fields with its recipe applied (e.g. the VP the benchmark loads)."""
    run = run.with_recipe()
    parts = [f"{label}{getattr(run, key)}" for key, label in LAYOUT if getattr(run, key) not in (None, 1)]
    if run.fsdp:
        parts.append("FSDP")
    return " ".join(parts) or "DP only"


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:+.1f}%"


def _abs_pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _not_expressible(items: list[str]) -> str:
    """The runs btacalc cannot plan as published, by id, with how many say 'does not fit' (each run's own
    reason is in `btacalc validate`'s table)."""
    if not items:
        return "none"
    ids = [i.split(":", 1)[0] for i in items]
    unfit = sum("does not fit" in i for i in items)
    return f"{len(ids)} ({unfit} do not fit as published): " + ", ".join(ids)


def markdown() -> str:
    report = validate_measured()
    runs = {r.id: r for r in load_runs()}
    lines = ["| run | role | model | devices | layout | predicted tok/s/device | measured | error | predicted peak "
             "GiB | measured | memory error |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in report.runs:
        run = runs[r.id]
        pred = r.predicted.tokens_per_s_per_device
        meas = r.measured.tokens_per_s_per_device
        mem_pred, mem_meas = r.predicted.peak_alloc_gib, r.measured.peak_alloc_gib
        lines.append(f"| {r.id} | {r.role} | {r.model} | {r.devices} x {r.hw} | {_layout(run)} | "
                     f"{'—' if pred is None else f'{pred:,.0f}'} | {'—' if meas is None else f'{meas:,.0f}'} | "
                     f"{_pct(r.error)}{' (known gap)' if r.known_gap else ''} | "
                     f"{'—' if mem_meas is None or mem_pred is None else f'{mem_pred:.2f}'} | "
                     f"{'—' if mem_meas is None else f'{mem_meas:.2f}'} | {_pct(r.memory_error)}"
                     f"{' (known gap)' if r.memory_known_gap else ''} |")
    lines += ["", "| role | family | runs | mean \\|error\\| | median | max | memory runs | mean \\|memory error\\| | "
              "max | not expressible |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for s in report.summary:
        lines.append(f"| {s.role} | {s.family} | {s.n} | {_abs_pct(s.mean_abs_error)} | {_abs_pct(s.median_abs_error)} | "
                     f"{_abs_pct(s.max_abs_error)} | {s.memory_n} | {_abs_pct(s.memory_mean_abs_error)} | "
                     f"{_abs_pct(s.memory_max_abs_error)} | {_not_expressible(s.not_expressible)} |")
    lines += ["", "Fitted factors (`btacalc validate --calibrate`, least squares on log error over the `fit` runs "
              "only; written into the profiles' `[calibration]` sections):", ""]
    profiles = builtin_profiles()
    for family in load_families():
        cal = profiles[family.profiles[0]].calibration
        for factor in family.factors:
            number = getattr(cal, factor)
            lines.append(f"- {family.name} (`{', '.join(family.profiles)}`): `{factor}` = {number.value:g}, "
                         f"{number.kind}, fitted to {', '.join(number.fitted_to) or 'nothing'}")
    b = report.bands
    lines += ["", f"Gate (`btacalc validate`, in CI): every check run within ±{100 * b.per_run_abs_error:.0f}% "
              f"unless a documented known gap (and a known gap inside it fails: its note must go), each family's "
              f"mean |error| over its other check runs within "
              f"±{100 * b.family_mean_abs_error:.0f}%; peak memory of every check run within "
              f"±{100 * b.memory_per_run_abs_error:.0f}% unless a documented memory known gap, each family's "
              f"mean over its other check runs within "
              f"±{100 * b.memory_family_mean_abs_error:.0f}%: **{'pass' if report.gate.ok else 'FAIL'}**."]
    return "\n".join(lines)


# The groups of GPU check runs the prose under the accuracy tables quotes ("63 dense GPU check runs ...
# mean |error| 8.4%"): each a name and a test of (run, its model is MoE).
SIXTEEN_BIT = ("bf16", "fp16")  # 16-bit training; every other --precision quantises the linear layers (FP8/FP4)
GROUPS = (("dense", lambda run, moe: not moe),
          ("dense, 16-bit", lambda run, moe: not moe and run.precision in SIXTEEN_BIT),
          ("dense, low precision", lambda run, moe: not moe and run.precision not in SIXTEEN_BIT),
          ("low precision (dense and MoE)", lambda run, moe: run.precision not in SIXTEEN_BIT), ("MoE", lambda run, moe: moe))


def _stats(errors: list[float]) -> tuple[str, str, str, str]:
    import statistics

    if not errors:
        return "0", "—", "—", "—"
    absolute = [abs(e) for e in errors]
    return (str(len(errors)), _abs_pct(statistics.fmean(absolute)), _abs_pct(statistics.median(absolute)),
            _abs_pct(max(absolute)))


def groups_markdown(report=None) -> str:
    """GPU check runs by kind (dense or MoE, BF16 or lower precision): runs, mean, median and max |error|,
    all and without a documented known gap (the numbers the prose below the tables quotes)."""
    report = report or validate_measured()
    runs = {r.id: r for r in load_runs()}
    moe = {name: resolve_model(name).is_moe for name in {r.model for r in report.runs}}
    checked = [r for r in report.runs if r.role == "check" and r.family == "gpu" and r.error is not None]
    lines = ["| GPU check runs | runs | mean \\|error\\| | median | max | without a known gap: runs | mean | max |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, member in GROUPS:
        group = [r for r in checked if member(runs[r.id], moe[r.model])]
        n, mean, median, top = _stats([r.error for r in group])
        gn, gmean, _, gtop = _stats([r.error for r in group if not r.known_gap])
        lines.append(f"| {name} | {n} | {mean} | {median} | {top} | {gn} | {gmean} | {gtop} |")
    return "\n".join(lines)


def swyear_markdown(report=None) -> str:
    """GPU check runs by the year of their software (software_date; known gaps left out): runs, signed and absolute
    mean error, and the signed mean of the 16-bit and the low-precision ones apart (task swdate, docs/runs.md)."""
    import statistics

    report = report or validate_measured()
    runs = {r.id: r for r in load_runs()}
    lines = ["| software year | check runs | mean (signed) | mean \\|error\\| | 16-bit: runs | signed | "
             "low precision: runs | signed | known gaps left out |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    checked = [r for r in report.runs if r.role == "check" and r.family == "gpu" and r.error is not None]
    for g in (g for g in report.by_software_year if g.family == "gpu"):
        mine = [r for r in checked if not r.known_gap and software_year(r.software_date) == g.software_year]
        parts = []
        for wide in (True, False):
            errs = [r.error for r in mine if (runs[r.id].precision in SIXTEEN_BIT) == wide]
            parts += [str(len(errs)), _pct(statistics.fmean(errs)) if errs else "—"]
        lines.append(f"| {g.software_year} | {g.n} | {_pct(g.mean_error)} | {_abs_pct(g.mean_abs_error)} | "
                     f"{' | '.join(parts)} | {g.known_gaps} |")
    return "\n".join(lines)


def _hardware_order() -> list[str]:
    """Profile names as the calibration families list them, GPU families first (the order a reader scans)."""
    families = sorted(load_families(), key=lambda f: not f.name.startswith("gpu"))
    return [name for family in families for name in family.profiles]


def summary_markdown(report=None) -> str:
    """The short table at the top of "How accurate is btacalc?": the timed check runs (predictions; the `fit` runs
    are left out) by `--hw` profile, dense or MoE and 16-bit or FP8/FP4, each cell's runs, median and mean |error|,
    signed mean, worst error and how many of its runs are documented known gaps; then the known misses by id and
    the peak-memory check runs. Only a regrouping of the per-run table below (the same `validate` errors)."""
    import statistics

    report = report or validate_measured()
    runs = {r.id: r for r in load_runs()}
    moe = {name: resolve_model(name).is_moe for name in {r.model for r in report.runs}}
    checked = [r for r in report.runs if r.role == "check" and r.error is not None]
    lines = ["| `--hw` | model | precision | check runs | median \\|error\\| | mean \\|error\\| | mean (signed) | "
             "worst | of which known gaps |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for hw in _hardware_order():
        for is_moe in (False, True):
            for wide in (True, False):
                cell = [r for r in checked if r.hw == hw and moe[r.model] == is_moe
                        and (runs[r.id].precision in SIXTEEN_BIT) == wide]
                if not cell:
                    continue
                errors = [r.error for r in cell]
                worst = max(errors, key=abs)
                lines.append(f"| {hw} | {'MoE' if is_moe else 'dense'} | {'16-bit' if wide else 'FP8/FP4'} | "
                             f"{len(cell)} | {_abs_pct(statistics.median(abs(e) for e in errors))} | "
                             f"{_abs_pct(statistics.fmean(abs(e) for e in errors))} | "
                             f"{_pct(statistics.fmean(errors))} | {_pct(worst)} | "
                             f"{sum(bool(r.known_gap) for r in cell)} |")
    gaps = [r for r in checked if r.known_gap]
    lines += ["", f"Known misses, worst first ({len(gaps)} check runs outside the gate's "
              f"±{100 * report.bands.per_run_abs_error:.0f}% per-run band, each documented as a known gap; "
              "`btacalc validate` prints a one-line summary of the mechanism each lacks, `validate --explain` "
              "and the run's id its whole account): "
              + ", ".join(f"`{r.id}` {_pct(r.error)}" for r in sorted(gaps, key=lambda r: -abs(r.error))) + "."]
    memory = [r for r in report.runs if r.role == "check" and r.memory_error is not None]
    if memory:
        worst = max(memory, key=lambda r: abs(r.memory_error))
        mgaps = [r for r in memory if r.memory_known_gap]
        reserved = sum(r.measured.peak_alloc_gib is None for r in memory)
        kind = ("`torch.cuda.max_memory_allocated`" if not reserved else
                f"`torch.cuda.max_memory_allocated`; {reserved} of them `max_memory_reserved`, "
                "what their source publishes")
        lines += ["", f"Peak memory ({kind}): {len(memory)} check runs, mean |error| "
                  f"{_abs_pct(statistics.fmean(abs(r.memory_error) for r in memory))}, worst `{worst.id}` "
                  f"{_pct(worst.memory_error)}; known gaps: "
                  + (", ".join(f"`{r.id}`" for r in mgaps) or "none") + "."]
    return "\n".join(lines)


def _num(x) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def points_markdown() -> str:
    """The published points (BTA curves, Korthikanti, parameter counts) against btacalc."""
    lines = ["| point | claim | published | btacalc | tolerance | status |", "|---|---|---:|---:|---:|---|"]
    for p in validate():
        lines.append(f"| {p.id} | {p.claim} | {_num(p.published)} | {_num(p.model)} | ±{_num(p.tolerance)} | "
                     f"{p.status} |")
    return "\n".join(lines)


def whatif_markdown(point_id: str = "topk-1-bta") -> str:
    """What `whatif` says it would take to reach a known-gap point's tolerance edge."""
    spec = next(p for p in load_points() if p.id == point_id)
    result = next(p for p in validate() if p.id == point_id)
    lines = [f"`{point_id}` needs {spec.metric} ≥ {spec.published - spec.tolerance:g} (btacalc today: "
             f"{_num(result.model)}); each change alone, the batch shape re-solved at every trial value:", ""]
    for r, q in zip(result.what_it_takes, spec.whatif):
        lines.append(f"- {summary_line(r, q.grad_accum)}")
    return "\n".join(lines)


def _replace(text: str, begin: str, end: str, body: str) -> str:
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no {begin} ... {end} block")
    return pattern.sub(lambda _: f"{begin}\n{body}\n{end}", text)


def expected_error_json() -> str:
    """btacalc/data/expected_error.json as the cross-validation gives it today (planning/expected_error.py)."""
    return held_out_errors().model_dump_json(indent=1) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that README.md is current")
    args = parser.parse_args()
    text = README.read_text(encoding="utf-8")
    new = _replace(_replace(text, BEGIN, END, markdown()), POINTS_BEGIN, POINTS_END, points_markdown())
    new = _replace(new, WHATIF_BEGIN, WHATIF_END, whatif_markdown())
    new = _replace(new, GROUPS_BEGIN, GROUPS_END, groups_markdown())
    new = _replace(new, SWYEAR_BEGIN, SWYEAR_END, swyear_markdown())
    new = _replace(new, SUMMARY_BEGIN, SUMMARY_END, summary_markdown())
    if args.check:
        return 0 if new == text else 1
    README.write_text(new, encoding="utf-8")
    PLOT.parent.mkdir(exist_ok=True)
    PLOT.write_bytes(measured_plot(validate_measured(), str(PLOT)))
    EXPECTED_ERROR.write_text(expected_error_json(), encoding="utf-8")
    print(f"wrote {README.relative_to(ROOT)}, {PLOT.relative_to(ROOT)} and {EXPECTED_ERROR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
