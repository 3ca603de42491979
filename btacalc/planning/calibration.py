"""`btacalc validate --calibrate`: fit each device family's named efficiency factors on the measured
runs marked `role = "fit"`, by least squares on log error, and write them into the profiles.

Which factors a family has, and which profiles share them, is data (btacalc/data/calibration.toml).
Every `check` run stays a prediction: the fit never sees one.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Callable, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..config.calibration_families import MAX_FACTORS, FamilySpec, family_of, load_families
from ..config.hardware import Calibration, HardwareProfile, Number, builtin_profiles, number_range
from ..errors import BtacalcError
from ..paths import data_dir, package_data
from .measured import predict
from .run_file import MeasuredRun, load_runs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

class FamilyFit(BaseModel):
    family: str
    source: str
    factors: dict[str, float]
    before: dict[str, float] = Field(description="the shipped factors")
    runs: list[str] = Field(description="the fit runs used")
    run_hardware: dict[str, str] = Field(default_factory=dict, description="fit run -> the profile it ran on")
    skipped: dict[str, str] = Field(default_factory=dict, description="fit runs btacalc cannot express yet, and why")
    errors_before: dict[str, float]
    errors_after: dict[str, float]
    profiles: list[str]


def applying_family(profile: HardwareProfile, builtin: bool) -> Optional[FamilySpec]:
    """The calibration family whose refitted factors `profile` carries: a built-in profile's (family_of); a profile
    file (`builtin` False) is in none, whatever its name."""
    return family_of(profile.name) if builtin else None


def family_statement(profile: HardwareProfile, builtin: bool) -> str:
    """What calibration applies to `profile`, for `hw show`/`hw check`: a built-in profile's family (whose factors
    `validate --calibrate` refits and writes into it); a profile file is in no family, so its own
    [calibration] numbers apply as written, and a GPU file without compute_efficiency runs at 1.0."""
    spec = applying_family(profile, builtin)
    if spec is not None:
        return (f"calibration family {spec.name} ({', '.join(spec.profiles)}; btacalc/data/calibration.toml): "
                f"validate --calibrate refits its {', '.join(spec.factors)} on the family's role=fit runs and "
                "writes them into each of these profiles")
    text = ("in no calibration family (a profile file, or a built-in profile calibration.toml does not list): its own "
            "[calibration] numbers apply as written, and validate --calibrate never rewrites them")
    if profile.family == "gpu" and profile.calibration.compute_efficiency is None:
        text += ("; it gives no calibration.compute_efficiency, so GEMMs run at the kernels' measured ceiling with no "
                 "training loss (factor 1.0): copy the one of its architecture's family (btacalc hw show h100)")
    return text


def with_factors(profile: HardwareProfile, factors: dict[str, float], runs: list[str], source: str,
                 fitted_on: tuple[str, ...] = ()) -> HardwareProfile:
    """`profile` with calibration factors set (kind calibrated, fitted on `runs`). `fitted_on`: the profiles
    the runs ran on; when it is given and `profile` is not among them, the note says the profile takes its
    family's factor from other devices' runs."""
    note = (f"fitted by btacalc validate --calibrate (least squares on log error) on the measured fit runs "
            f"{', '.join(runs)}; every check run is a prediction")
    if fitted_on and profile.name not in fitted_on:
        note += (f". None of these runs is on {profile.name}: it takes its calibration family's factor as fitted on "
                 f"{', '.join(fitted_on)} runs")
    numbers = {name: Number(value=value, kind="calibrated", source=source, fitted_to=runs, note=note)
               for name, value in factors.items()}
    return profile.model_copy(update={"calibration": profile.calibration.model_copy(update=numbers)})


def _log_errors(runs: list[MeasuredRun], hardware: Callable[[str], HardwareProfile]) -> dict[str, float]:
    out = {}
    for run in runs:
        result = predict(run, hardware)
        if result.error is None:
            raise BtacalcError(f"fit run {run.id} cannot be predicted: {result.reason or 'no measured value'}")
        out[run.id] = math.log1p(result.error)
    return out


def fit_family(spec: FamilySpec, runs: Optional[list[MeasuredRun]] = None) -> Optional[FamilyFit]:
    """Least-squares fit of the family's factors on its fit runs (None when it has none)."""
    try:
        from scipy.optimize import least_squares
    except ImportError:
        raise BtacalcError("validate --calibrate needs scipy: pip install 'btacalc[calibrate]'") from None

    profiles = builtin_profiles()
    candidates = [r for r in (runs if runs is not None else load_runs()) if r.role == "fit" and r.hw in spec.profiles]
    results = {r.id: predict(r) for r in candidates}
    skipped = {i: res.reason or "no measured value" for i, res in results.items() if res.error is None}
    fit_runs = [r for r in candidates if r.id not in skipped]
    if not fit_runs:
        return None
    if len(fit_runs) < len(spec.factors):
        raise BtacalcError(f"family {spec.name}: {len(spec.factors)} factors need at least as many fit runs "
                           f"(have {len(fit_runs)})")
    ids = [r.id for r in fit_runs]
    before = {f: _value(getattr(profiles[spec.profiles[0]].calibration, f)) for f in spec.factors}

    def hardware_for(values: dict[str, float]) -> Callable[[str], HardwareProfile]:
        trial = {name: with_factors(profiles[name], values, ids, spec.source) for name in spec.profiles}
        return lambda name: trial.get(name) or profiles[name]

    def residuals(x: list[float]) -> list[float]:
        return list(_log_errors(fit_runs, hardware_for(dict(zip(spec.factors, x)))).values())

    lows, highs = [], []
    for f in spec.factors:
        rng = number_range(Calibration, f)
        lows.append(max(rng.low, 1e-3) if rng else 1e-3)
        highs.append(rng.high if rng else 1e3)
    x0 = [min(max(before[f], lo), hi) for f, lo, hi in zip(spec.factors, lows, highs)]
    solution = least_squares(residuals, x0, bounds=(lows, highs), xtol=1e-10, ftol=1e-12, x_scale="jac")
    fitted = {f: float(round(v, 4)) for f, v in zip(spec.factors, solution.x)}
    return FamilyFit(family=spec.name, source=spec.source, factors=fitted, before=before, runs=ids,
                     run_hardware={r.id: r.hw for r in fit_runs}, profiles=spec.profiles, skipped=skipped,
                     errors_before={k: math.expm1(v) for k, v in _log_errors(fit_runs, hardware_for(before)).items()},
                     errors_after={k: math.expm1(v) for k, v in _log_errors(fit_runs, hardware_for(fitted)).items()})


def _value(number: Optional[Number]) -> float:
    """A factor's shipped value; a factor the profile does not have yet starts at 1."""
    return number.value if number is not None else 1.0


def calibrate_all() -> list[FamilyFit]:
    return [fit for spec in load_families() if (fit := fit_family(spec)) is not None]


def _number_block(name: str, number: Number) -> str:
    lines = [f"[calibration.{name}]", f"value = {number.value!r}", f'kind = "{number.kind}"',
             f'source = "{number.source}"', f'note = "{number.note}"',
             "fitted_to = [" + ", ".join(f'"{r}"' for r in number.fitted_to) + "]"]
    return "\n".join(lines) + "\n"


def fitted_texts(fit: FamilyFit, folder: Optional[Path] = None) -> dict[Path, str]:
    """Each of the family's profile files with the fitted factors written into it."""
    folder = folder or data_dir("hardware_profiles")
    written: dict[Path, str] = {}
    for name in fit.profiles:
        path = folder / f"{name}.toml"
        text = path.read_text(encoding="utf-8")
        fitted_on = tuple(sorted(set(fit.run_hardware.values())))
        profile = with_factors(builtin_profiles()[name], fit.factors, fit.runs, fit.source, fitted_on)
        for factor in fit.factors:
            block = _number_block(factor, getattr(profile.calibration, factor))
            header = re.compile(rf"^\[calibration\.{factor}\]\n(?:(?!\[).*\n?)*", re.M)
            if header.search(text):
                text = header.sub(lambda _: block + "\n", text, count=1)
            else:
                text = text.rstrip() + "\n\n" + block
        written[path] = text.rstrip() + "\n"
    return written
