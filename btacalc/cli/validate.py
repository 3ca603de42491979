"""`btacalc validate`: published points and measured training runs against the model, with bands."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import BtacalcError
from .completion import complete_run
from .console import model_json, write_stdout
from .options import OutputOpt, QuietOpt, help_text, outputs, write_outputs
from .progress import progress

EXAMPLES = ("Examples:\n\n"
            "  btacalc validate\n\n"
            "  btacalc validate --measured btacalc/data/measured_runs.json --json\n\n"
            "  btacalc validate --plot accuracy.png\n\n"
            "  btacalc validate --explain qwen3-30b-a3b-gb200-8-mxfp8-239\n\n"
            "  btacalc validate --calibrate\n\n"
            "  btacalc validate --wafer-loo\n\n"
            "  btacalc validate --cross-validate --json\n\n"
            "  btacalc validate --cross-validate --plot crossval.png")


def validate(
    measured: Optional[Path] = typer.Option(None, "--measured", help=help_text(
        'Measured runs file ({"runs": [...]}) [default: the shipped set, btacalc/data/measured_runs.json].')),
    as_json: bool = typer.Option(False, "--json", help="Print {points, measured} as JSON."),
    output: Optional[str] = OutputOpt,
    plot_path: Optional[str] = typer.Option(None, "--plot", help=help_text("Predicted vs measured tokens/s, log-log, "
                                            "with the ±10% and ±25% bands (.png/.svg).")),
    calibrate: bool = typer.Option(False, "--calibrate", help="Fit each calibration family's efficiency factors "
                                   "(btacalc/data/calibration.toml: one per GPU architecture, and the wafers) on its "
                                   "measured runs marked role=fit (least squares on log error) and write them into the "
                                   "calibration sections of the family's built-in profiles."),
    wafer_loo: bool = typer.Option(False, "--wafer-loo", help="Leave-one-out over model sizes on the wafer runs: fit "
                                   "the wafer factors without each model's runs and predict them (about a minute)."),
    cross_validate: bool = typer.Option(False, "--cross-validate", help="Leave one model family out: fit the "
                                        "factors without each family's runs and predict that family; per-run errors, "
                                        "mean and max, grouped by hardware, dense/MoE and scale (--json, --plot)."),
    explain: Optional[str] = typer.Option(None, "--explain", metavar="RUN", autocompletion=complete_run, help=help_text(
        "One measured run in full: its source, layout, prediction and error, what it defaults, and its known gap's "
        "whole account (the table shows a one-line summary); with --json, its result as JSON.")),
    quiet: bool = QuietOpt,
) -> int:
    """Compute every published point (BTA curves, Korthikanti, parameter counts) against its tolerance,
    and predict every measured training run (error = predicted / measured - 1), per role and device family.

    Exit 0 when every point passes or is a documented known gap and the measured check runs stay in
    their documented bands; 1 otherwise; 2 on bad input.
    """
    if explain is not None:
        given = [f for f, v in (("--output", output), ("--plot", plot_path), ("--calibrate", calibrate),
                                ("--wafer-loo", wafer_loo), ("--cross-validate", cross_validate)) if v]
        if given:
            raise BtacalcError(f"--explain shows one run; it takes no {', '.join(given)}")
        return _explain(explain, measured, as_json)
    refit = _refit(measured, as_json, output, plot_path, calibrate, wafer_loo, cross_validate, quiet)
    if refit is not None:
        return refit
    return _validate(measured, as_json, output, plot_path, quiet)


def _explain(run_id: str, measured: Optional[Path], as_json: bool) -> int:
    """One run of the measured set (`--measured` or the shipped one) predicted and shown whole; exit 0, as
    `validate` itself judges the set, not one run."""
    from ..config.named_tables import did_you_mean
    from ..planning.measured import load_bands, predict
    from ..planning.run_file import load_runs

    runs = {r.id: r for r in load_runs(measured)}
    run = runs.get(run_id)
    if run is None:
        raise BtacalcError(f"--explain: no run {run_id[:80]!r} in the measured runs{did_you_mean(run_id, runs)}")
    result = predict(run)
    if as_json:
        write_stdout(model_json(result))
        return 0
    from ..output.validation_tables import run_record
    from .console import print_stdout

    print_stdout(run_record(run, result, load_bands()))
    return 0


def _refit(measured: Optional[Path], as_json: bool, output: Optional[str], plot_path: Optional[str], calibrate: bool,
           wafer_loo: bool, cross_validate: bool, quiet: bool) -> Optional[int]:
    """The three refits (--calibrate, --cross-validate, --wafer-loo), each on the shipped runs with the
    outputs it takes (others: one-line errors); None when none is asked for."""
    if calibrate:
        given = [f for f, v in (("--measured", measured), ("--json", as_json), ("--output", output), ("--plot", plot_path),
                                ("--cross-validate", cross_validate), ("--wafer-loo", wafer_loo),
                                ("--quiet", quiet)) if v]
        if given:
            raise BtacalcError(f"--calibrate fits on the shipped measured runs and rewrites the profiles; it takes "
                               f"no {', '.join(given)}")
        return _calibrate()
    if cross_validate and wafer_loo:
        raise BtacalcError("--cross-validate and --wafer-loo are two refits: give one")
    if cross_validate:
        if measured:
            raise BtacalcError("--cross-validate refits on the shipped measured runs; it takes no --measured")
        return _cross_validate(output, as_json, plot_path, quiet)
    if wafer_loo:
        given = [f for f, v in (("--measured", measured), ("--output", output), ("--plot", plot_path)) if v]
        if given:
            raise BtacalcError(f"--wafer-loo refits on the shipped measured runs; it takes no {', '.join(given)}")
        return _wafer_loo(as_json, quiet)
    return None


def _validate(measured: Optional[Path], as_json: bool, output: Optional[str], plot_path: Optional[str],
              quiet: bool) -> int:
    """Every published point and measured run: tables, JSON and the accuracy plot, written together."""
    from ..planning.measured import measured_report
    from ..planning.run_file import load_runs
    from ..planning.validate import load_points
    from ..planning.validate import validate as run_validation

    outs = outputs(output, as_json, plot_path=plot_path, inputs={"--measured": str(measured) if measured else None})
    runs = load_runs(measured)  # first: a bad run file is refused before the published points run
    with progress(len(runs), "predicting the measured runs", quiet) as advance:
        report = measured_report(runs, advance)
    with progress(len(load_points()), "computing the published points", quiet) as advance:
        points = run_validation(advance)
    text = json.dumps({"points": [r.model_dump() | {"status": r.status} for r in points],
                       "measured": report.model_dump()}, indent=2) + "\n"
    payloads: dict[str, Any] = {"--output": text, "--json": text}
    if plot_path:
        from ..output.plots import measured_plot

        payloads["--plot"] = measured_plot(report, plot_path)

    def tables() -> Any:
        from rich.console import Group

        from ..output.validation_tables import measured_table, points_table

        return Group(points_table(points), measured_table(report))

    write_outputs(outs, payloads, tables)
    return 0 if all(r.ok_for_ci for r in points) and report.gate.ok else 1


def _cross_validate(output: Optional[str], as_json: bool, plot_path: Optional[str], quiet: bool) -> int:
    from ..planning.crossval import cross_validation_steps, validate_cross
    from ..planning.run_file import load_runs

    outs = outputs(output, as_json, plot_path=plot_path)
    runs = load_runs()
    with progress(cross_validation_steps(runs), "cross-validating (runs, then one fold per model family)",
                  quiet) as advance:
        cv = validate_cross(runs, advance)
    text = json.dumps(cv.model_dump(), indent=2) + "\n"
    payloads: dict[str, Any] = {"--output": text, "--json": text}
    if plot_path:
        from ..output.plots import crossval_plot

        payloads["--plot"] = crossval_plot(cv, plot_path)

    def tables() -> Any:
        from ..output.validation_tables import crossval_tables

        return crossval_tables(cv)

    write_outputs(outs, payloads, tables)
    return 0


def _calibrate() -> int:
    """Fit every family, then write all their profiles together (hostile26: each family's files were written as it
    was fitted, its report line printed in between, so a full standard output or a stop after the first family left
    it written and the others not, under "nothing written"): the files are staged, the report printed, then all are
    renamed with the stopping signals held (output/files.py `Outputs`), so it is every profile or none."""
    from ..output.files import Outputs
    from ..planning.calibration import calibrate_all, fitted_texts

    texts: dict[str, str] = {}
    lines: list[str] = []
    for fit in calibrate_all():
        written = {str(path): text for path, text in fitted_texts(fit).items()}
        texts.update(written)
        factors = ", ".join(f"{k} {fit.before[k]:.4g} -> {v:.4g}" for k, v in fit.factors.items())
        errors = ", ".join(f"{r} {100 * fit.errors_before[r]:+.1f}% -> {100 * fit.errors_after[r]:+.1f}%"
                           for r in fit.runs)
        lines.append(f"{fit.family}: {factors}; fit runs: {errors}; written to "
                     f"{', '.join(os.path.basename(p) for p in written)}\n")
        lines += [f"{fit.family}: fit run {run} not used: {reason}\n" for run, reason in fit.skipped.items()]
    flags = {f"--calibrate ({os.path.basename(path)})": path for path in texts}
    Outputs(flags, own_data=True).commit({flag: texts[path] for flag, path in flags.items()}, write_stdout,
                                         finish=lambda: write_stdout("".join(lines)))
    return 0


def _wafer_loo(as_json: bool, quiet: bool) -> int:
    from ..planning.run_file import load_runs
    from ..planning.wafer_loo import leave_one_out, leave_one_out_steps

    runs = load_runs()  # once, for the step count and the folds
    with progress(leave_one_out_steps("wse", runs), "leaving each wafer model out", quiet) as advance:
        report = leave_one_out("wse", runs, progress=advance)
    if as_json:
        write_stdout(model_json(report))
        return 0
    for fold in report.folds:
        if fold.skipped:
            write_stdout(f"without {fold.held_out}: skipped ({fold.skipped})\n")
            continue
        factors = ", ".join(f"{k} {v:.4g}" for k, v in fold.factors.items())
        preds = "; ".join(f"{p.id} {'n/a' if p.error is None else f'{100 * p.error:+.1f}%'}"
                          f" (shipped {'n/a' if p.error_shipped is None else f'{100 * p.error_shipped:+.1f}%'})"
                          for p in fold.predictions)
        write_stdout(f"without {fold.held_out}: {factors}; {preds}\n")
    if report.mean_abs_error is not None:
        write_stdout(f"{report.family}: leave-one-out mean |error| {100 * report.mean_abs_error:.1f}%, "
                         f"max {100 * (report.max_abs_error or 0):.1f}%\n")
    return 0


def register(app: typer.Typer) -> None:
    app.command(epilog=EXAMPLES)(validate)
