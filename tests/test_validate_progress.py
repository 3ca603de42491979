"""validate, --cross-validate and --wafer-loo report progress (issue: they ran 6-35 s silent): each library
function calls `progress(1)` exactly as many times as the step count the command line passes as the total,
and the command prints its lines unless --quiet."""

from __future__ import annotations

import btacalc.cli.progress as progress_module
from btacalc.paths import package_data as btacalc_data
from btacalc.planning.crossval import cross_validation_steps, load_model_families, model_family, validate_cross
from btacalc.planning.measured import load_runs, measured_report
from btacalc.planning.validate import load_points
from btacalc.planning.validate import validate as published_points
from btacalc.planning.wafer_loo import leave_one_out, leave_one_out_steps


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, n: int) -> None:
        assert n == 1
        self.calls += 1


def _small_set():
    """Two runs of each of two model families (a dense and an MoE one): a fold each; each fold has fewer runs
    left to fit on than factors, so no fit runs (a fit's many predictions are what makes a fold slow)."""
    families = load_model_families()
    picked: dict[str, list] = {}
    for r in load_runs():
        family = model_family(r.model, families)
        if family in (model_family("llama-3-8b", families), model_family("qwen3-30b-a3b", families)):
            picked.setdefault(family, []).append(r)
    return [r for runs in picked.values() for r in runs[:2]]


def test_measured_report_advances_once_per_run():
    runs = load_runs()[:7]
    counter = Counter()
    report = measured_report(runs, counter)
    assert counter.calls == 7 == len(report.runs)


def test_published_points_advance_once_per_point(monkeypatch):
    import btacalc.planning.validate as validate_module

    points = [p for p in load_points() if not p.whatif][:3]  # quick points (a whatif question takes seconds)
    monkeypatch.setattr(validate_module, "load_points", lambda: points)
    counter = Counter()
    assert len(published_points(counter)) == counter.calls == 3


def test_the_published_points_file_is_read_once_for_the_count_and_the_run(monkeypatch):
    # review: `validate` parsed published_points.toml twice, for its progress total and for its run
    import btacalc.planning.validate as validate_module

    reads = []
    real = validate_module.package_data
    monkeypatch.setattr(validate_module, "package_data", lambda name: reads.append(name) or real(name))
    validate_module._points.cache_clear()
    try:
        assert len(load_points()) == len(load_points()) > 0
    finally:
        validate_module._points.cache_clear()
    assert reads == ["published_points.toml"]


def test_a_changed_published_point_does_not_change_the_next_load():
    # review19: load_points handed out the cached objects themselves
    first = load_points()
    first[0].overrides["num_layers"] = 1
    first[0].whatif.clear()
    first[0].published = -1.0
    again = load_points()[0]
    assert "num_layers" not in again.overrides and again.published != -1.0
    assert again == load_points()[0] and again is not load_points()[0]


def test_cross_validation_advances_its_step_count():
    runs = _small_set()
    counter = Counter()
    cv = validate_cross(runs, counter)
    # one per run predicted with the shipped factors, one per fold: here two families, two folds
    assert len(cv.folds) == 2
    assert counter.calls == cross_validation_steps(runs) == len(runs) + 2


def test_wafer_leave_one_out_advances_once_per_model():
    wafer = [r for r in load_runs() if r.hw.startswith("wse")]
    models = sorted({r.model for r in wafer})
    assert len(models) >= 3  # the shipped wafer runs hold several models (a fold each)
    two = [r for r in wafer if r.model in models[:2]]  # two folds, each with one model's runs left to fit on
    counter = Counter()
    report = leave_one_out("wse", two, progress=counter)
    assert counter.calls == leave_one_out_steps("wse", two) == len(report.folds) == 2
    assert leave_one_out_steps("wse") == len(models)


def test_validate_prints_progress_unless_quiet(cli, monkeypatch, tmp_path):
    """Both of validate's stages print their line (piped: stderr is captured); --quiet prints nothing."""
    import json
    import re

    import btacalc.planning.validate as validate_module

    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)
    monkeypatch.setattr(progress_module, "PIPED_INTERVAL_S", 0.0)
    points = [p for p in validate_module.load_points() if not p.whatif][:2]  # two quick points
    monkeypatch.setattr(validate_module, "load_points", lambda: points)
    runs = tmp_path / "runs.json"
    shipped = json.loads(btacalc_data("measured_runs.json").read_text(encoding="utf-8"))
    runs.write_text(json.dumps({"runs": shipped["runs"][:3]}), encoding="utf-8")
    code, _, err = cli("validate", "--measured", str(runs), "--json")
    assert code in (0, 1) and [re.sub(r", \d+ s$", "", line) for line in err.splitlines()] == [
        "btacalc: predicting the measured runs: 1 of 3 (33%)",
        "btacalc: predicting the measured runs: 2 of 3 (67%)",
        "btacalc: predicting the measured runs: 3 of 3 (100%)",
        "btacalc: computing the published points: 1 of 2 (50%)",
        "btacalc: computing the published points: 2 of 2 (100%)"]
    code, _, err = cli("validate", "--measured", str(runs), "--json", "--quiet")
    assert code in (0, 1) and not err


def test_calibrate_takes_no_quiet(cli):
    code, _, err = cli("validate", "--calibrate", "--quiet")
    assert code == 2 and err.strip().splitlines() == [
        "btacalc: error: --calibrate fits on the shipped measured runs and rewrites the profiles; it takes no --quiet"]
