"""Calibration you can audit: factors fitted only on role=fit runs, by least squares on log error,
written into the profiles with the runs they came from; check runs never move them."""

from __future__ import annotations

import json
import math

import pytest

from btacalc.config.hardware import builtin_profiles, parse_profile
from btacalc.planning.calibration import FamilySpec, fit_family, fitted_texts, load_families
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
    for path, text in fitted_texts(fit, tmp_path).items():
        prof = parse_profile(text, path.name)
        eff = prof.calibration.compute_efficiency
        assert eff.value == 0.4242 and eff.kind == "calibrated" and eff.fitted_to == fit.runs


def test_a_family_needs_as_many_fit_runs_as_factors():
    spec = FamilySpec(name="wse", profiles=["wse2", "wse3"], factors=["compute_efficiency", "fabric_vector_overhead",
                                                                      "usable_memory_fraction"],
                      source="https://example.org")
    runs = [r for r in load_runs() if not (r.role == "fit" and r.model == "bert-large")]  # LLaMA-7B alone
    with pytest.raises(Exception, match="need at least as many fit runs"):
        fit_family(spec, runs)




# -- review4: one calibration family per profile; a profile fitted on other devices' runs says so ------------

def test_every_builtin_profile_is_in_exactly_one_family():
    # `validate --calibrate` writes a family's factors into each of its profiles, and cross-validation keys a
    # run's fold by the family that holds its profile: a shipped profile outside every family would keep a
    # factor nothing refits, one in two families would be overwritten by whichever family is written last
    owners: dict[str, list[str]] = {}
    for f in load_families():
        for name in f.profiles:
            owners.setdefault(name, []).append(f.name)
    assert sorted(owners) == sorted(builtin_profiles())
    assert all(len(v) == 1 for v in owners.values())


def test_a_profile_in_two_families_is_refused(tmp_path, monkeypatch):
    import btacalc.config.calibration_families as calibration
    from btacalc.errors import BtacalcError

    text = ('[[family]]\nname = "a"\nprofiles = ["h100"]\nfactors = ["compute_efficiency"]\nsource = "https://x.org"\n'
            '[[family]]\nname = "b"\nprofiles = ["h200", "h100"]\nfactors = ["compute_efficiency"]\n'
            'source = "https://x.org"\n')
    (tmp_path / "calibration.toml").write_text(text)
    monkeypatch.setattr(calibration, "package_data", lambda name: tmp_path / name)
    with pytest.raises(BtacalcError, match="'h100' is in two families \\(a, b\\)"):
        calibration.load_families()


@pytest.mark.parametrize("family", ["gpu-ampere", "gpu-hopper", "gpu-blackwell"])
def test_shipped_gpu_factor_is_the_fit_on_its_own_fit_runs(family):
    # fitfam: one compute_efficiency per GPU architecture, each the least-squares fit on the role=fit runs whose
    # hardware is in that family; refitting now must land on what every profile of the family ships
    (spec,) = [f for f in load_families() if f.name == family]
    fit = fit_family(spec)
    assert fit is not None
    assert fit.runs == [r.id for r in load_runs() if r.role == "fit" and r.hw in spec.profiles]
    for name in spec.profiles:
        shipped = builtin_profiles()[name].calibration.compute_efficiency
        assert shipped.kind == "calibrated" and shipped.fitted_to == fit.runs
        assert shipped.value == pytest.approx(fit.factors["compute_efficiency"], abs=2e-4)


def test_a_profile_without_fit_runs_of_its_own_says_whose_runs_fitted_it():
    # B300 and GB300 (held back: no run of theirs is fitted or checked) take gpu-blackwell's factor, fitted on
    # GB200 runs; the shipped note must say so rather than read as if fitted on the profile itself
    runs = [r for r in load_runs() if r.role == "fit"]
    for f in load_families():
        fitted_on = sorted({r.hw for r in runs if r.hw in f.profiles})
        for name in f.profiles:
            note = builtin_profiles()[name].calibration.compute_efficiency.note
            inherited = f"None of these runs is on {name}: it takes its calibration family's factor as fitted on " \
                        f"{', '.join(fitted_on)} runs"
            assert (inherited in note) == (name not in fitted_on), name
    b300 = builtin_profiles()["b300"].calibration.compute_efficiency.note
    assert b300.endswith("None of these runs is on b300: it takes its calibration family's factor as fitted on "
                         "gb200 runs")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_hw_show_names_the_calibration_family_of_a_builtin_profile(cli):
    code, out, err = cli("hw", "show", "b300")
    assert code == 0, err
    (spec,) = [f for f in load_families() if "b300" in f.profiles]
    assert spec.name == "gpu-blackwell"
    assert f"calibration family gpu-blackwell ({', '.join(spec.profiles)};" in _one_line(out)


def test_a_profile_file_is_in_no_family_and_a_missing_gpu_factor_reads_as_one(cli, tmp_path):
    # a user's GPU profile file is in no calibration family: the numbers it writes apply; without a
    # compute_efficiency model/steptime.py uses 1.0, which hw show/check now say instead of staying silent
    import re

    from btacalc.paths import data_dir

    text = (data_dir("hardware_profiles") / "h100.toml").read_text()
    copy = tmp_path / "h100-copy.toml"
    copy.write_text(text)
    bare = tmp_path / "mine.toml"
    bare.write_text(re.sub(r"\[calibration\.compute_efficiency\]\n(?:(?!\[).*\n?)*", "", text))
    for command in ("show", "check"):
        code, out, err = cli("hw", command, str(copy))
        assert code == 0, err
        assert "in no calibration family" in _one_line(out) and "no calibration.compute_efficiency" not in _one_line(out)
        code, out, err = cli("hw", command, str(bare))
        assert code == 0, err
        assert "no calibration.compute_efficiency, so GEMMs run at the kernels' measured ceiling" in _one_line(out)
