"""Calibration you can audit: factors fitted only on role=fit runs, by least squares on log error,
written into the profiles with the runs they came from; check runs never move them."""

from __future__ import annotations

import json
import math

import pytest

from btacalc.config.hardware import builtin_profiles, parse_profile
from btacalc.planning.calibration import FamilySpec, fit_family, load_families, write_fit
from btacalc.planning.measured import load_runs, predict


def test_families_declare_at_most_three_factors_each():
    for f in load_families():
        assert 1 <= len(f.factors) <= 3 and f.profiles


def test_shipped_wafer_factor_is_the_fit_on_the_fit_runs():
    (spec,) = [f for f in load_families() if f.name == "wse"]
    fit = fit_family(spec)
    assert fit is not None and fit.runs == [r.id for r in load_runs() if r.role == "fit" and r.hw in spec.profiles]
    for name in spec.profiles:
        shipped = builtin_profiles()[name].calibration.compute_efficiency
        assert shipped.kind == "calibrated" and shipped.fitted_to == fit.runs
        assert shipped.value == pytest.approx(fit.factors["compute_efficiency"], abs=2e-4)
    # three factors, three fit runs: the refit lands on every shipped factor (the fabric width overhead at
    # the fit's lower bound, 1e-3: the BERT-large batch pair leaves no room for a width penalty)
    for name in spec.factors:
        shipped = getattr(builtin_profiles()["wse2"].calibration, name)
        assert shipped.fitted_to == fit.runs and shipped.value == pytest.approx(fit.factors[name], abs=2e-4)
    assert fit.runs == ["llama-7b-wse2-1-400", "bert-large-wse2-1-406", "bert-large-wse2-1-407"]


def test_check_runs_do_not_move_the_fit(tmp_path):
    runs = load_runs()
    (spec,) = [f for f in load_families() if f.name == "wse"]
    base = fit_family(spec, runs)
    # a check run measured 10x faster than anything btacalc predicts must not change the factor
    wild = [r.model_copy(update={"measured": r.measured.model_copy(update={"tokens_per_s_per_device": 1e6})})
            if r.role == "check" else r for r in runs]
    assert fit_family(spec, wild).factors == base.factors
    # ... while the same change to the fit run does
    moved = [r.model_copy(update={"measured": r.measured.model_copy(
        update={"tokens_per_s_per_device": 0.8 * r.measured.tokens_per_s_per_device})})
        if r.role == "fit" and r.hw in spec.profiles else r for r in runs]
    assert fit_family(spec, moved).factors["compute_efficiency"] < base.factors["compute_efficiency"]


def test_fit_minimises_log_error():
    (spec,) = [f for f in load_families() if f.name == "wse"]
    fit = fit_family(spec)
    best = sum(math.log1p(e) ** 2 for e in fit.errors_after.values())
    assert best <= sum(math.log1p(e) ** 2 for e in fit.errors_before.values()) + 1e-12


def test_written_profiles_stay_valid_and_record_the_runs(tmp_path):
    from btacalc.paths import data_dir

    for name in ("wse2", "wse3"):
        (tmp_path / f"{name}.toml").write_text((data_dir("hardware_profiles") / f"{name}.toml").read_text())
    (spec,) = [f for f in load_families() if f.name == "wse"]
    fit = fit_family(spec).model_copy(update={"factors": {"compute_efficiency": 0.4242}})
    for path in write_fit(fit, tmp_path):
        prof = parse_profile(path.read_text(), path.name)
        eff = prof.calibration.compute_efficiency
        assert eff.value == 0.4242 and eff.kind == "calibrated" and eff.fitted_to == fit.runs


def test_a_family_needs_as_many_fit_runs_as_factors():
    spec = FamilySpec(name="wse", profiles=["wse2", "wse3"], factors=["compute_efficiency", "fabric_vector_overhead",
                                                                      "usable_memory_fraction"],
                      source="https://example.org")
    runs = [r for r in load_runs() if not (r.role == "fit" and r.model == "bert-large")]  # LLaMA-7B alone
    with pytest.raises(Exception, match="need at least as many fit runs"):
        fit_family(spec, runs)


