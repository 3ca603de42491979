"""`btacalc validate --cross-validate`: leave one model family out.

For each model family F (btacalc/data/calibration.toml [model_families]: presets sharing an
architecture and lineage), each device family's named factors (at most three, `calibration.toml`
[[family]]) are fitted, by least squares on log error as `validate --calibrate` does, on the role=fit
runs of every other model family, and the runs of F are predicted with them. When F holds every fit
run of a device family, that device family is fitted on all the expressible runs of the other model
families instead, except the documented known gaps (mechanisms btacalc lacks: no factor is fitted to
them), and the fold says so; when nothing is left to fit on, the shipped factors stay (said
too). Every run is predicted in exactly one fold, by factors that never saw its model family: the
errors are what a user should expect on a model btacalc has never seen.

The errors are summarised over all runs and grouped by hardware, by dense / MoE, by scale (devices), by model
family and by the year of the software that measured the run (its software_date).
The fold logic is generic (`cross_validate` takes the fit and the prediction as functions), so a test
can run it on a synthetic set whose answer is known by hand.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Callable, Optional

from pydantic import BaseModel, Field

from ..config.hardware import HardwareProfile, builtin_profiles, resolve_hardware
from ..config.precision import recipe as precision_recipe
from ..config.presets import resolve_model
from ..errors import BtacalcError
from ..paths import package_data
from .calibration import FamilySpec, family_of, fit_family, load_families, with_factors
from .measured import predict
from .run_file import UNKNOWN_SOFTWARE_YEAR, MeasuredRun, load_runs, software_year
from .expected_error import ExpectedErrorData, HeldOutRun
from .report import EXPECTED_ERROR_SOURCE, ErrorSummary, summarize_errors

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Scale groups by devices: one node, up to a rack-scale domain, a few hundred, more
SCALE_EDGES = ((8, "1-8"), (72, "9-72"), (256, "73-256"), (math.inf, ">256"))
# a fold's basis where the device family keeps fewer fit runs than factors without the held-out model family: its
# runs are predicted with the shipped factors, which were fitted on them (not held out: HeldOutRun.held_out)
SHIPPED_FACTORS = "shipped factors (nothing left to fit on)"


def load_model_families() -> dict[str, str]:
    """Model preset -> model family (calibration.toml [model_families])."""
    raw = tomllib.loads(package_data("calibration.toml").read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for family, models in raw.get("model_families", {}).items():
        for m in models:
            if m in out:
                raise BtacalcError(f"calibration.toml: model {m!r} is in two model families")
            out[m] = family
    return out


def model_family(model: str, families: dict[str, str]) -> str:
    """A run's model family: its preset's family, else the model name itself (a family of one)."""
    return families.get(model, model)


def scale_group(devices: int) -> str:
    return next(label for edge, label in SCALE_EDGES if devices <= edge)


class CrossRun(BaseModel):
    id: str
    model_family: str
    hw: str
    moe: bool
    ep_overlap: bool = Field(False, description="its plan hides the expert exchange (RunResult.ep_overlap)")
    devices: int
    scale: str
    software_year: str = Field(UNKNOWN_SOFTWARE_YEAR, description="the year of the run's software_date (YYYY), or "
                               "unknown")
    predicted_tokens_per_s_per_device: Optional[float] = None
    measured_tokens_per_s_per_device: Optional[float] = None
    error: Optional[float] = Field(None, description="predicted / measured - 1, predicted by factors fitted "
                                   "without this run's model family")
    reason: str = Field("", description="why the run has no error (not expressible)")


class Fold(BaseModel):
    held_out: str = Field(description="the model family predicted in this fold")
    fits: dict[str, dict[str, float]] = Field(description="device family -> its fitted factors")
    fit_runs: dict[str, list[str]] = Field(description="device family -> the runs the factors were fitted on")
    basis: dict[str, str] = Field(description="device family -> 'fit runs of other families', 'all runs of "
                                  "other families (the held-out family holds every fit run)', or 'shipped "
                                  "factors (nothing left to fit on)'")
    runs: list[CrossRun]


class CrossValidation(BaseModel):
    folds: list[Fold]
    overall: ErrorSummary
    by_hardware: dict[str, ErrorSummary]
    by_kind: dict[str, ErrorSummary] = Field(description="dense / moe")
    by_scale: dict[str, ErrorSummary] = Field(description="devices: 1-8, 9-72, 73-256, >256")
    by_model_family: dict[str, ErrorSummary]
    by_software_year: dict[str, ErrorSummary] = Field(default_factory=dict, description="the year of the runs' "
                                                      "software_date (YYYY; unknown: not given)")
    not_expressible: list[str] = Field(default_factory=list, description="run id: reason")


def grouped(runs: list[CrossRun], key: Callable[[CrossRun], str]) -> dict[str, ErrorSummary]:
    groups: dict[str, list[float]] = {}
    for r in runs:
        if r.error is not None:
            groups.setdefault(key(r), []).append(r.error)
    return {k: summarize_errors(v) for k, v in sorted(groups.items())}


def _in_scale_order(groups: dict[str, ErrorSummary]) -> dict[str, ErrorSummary]:
    """The scale groups smallest first, as SCALE_EDGES lists them (sorted as text, "73-256" came before "9-72")."""
    order = [label for _, label in SCALE_EDGES]
    return {k: groups[k] for k in sorted(groups, key=order.index)}


# fit(device family, runs to fit on) -> factors (None: nothing to fit); predict(run, factors by device
# family) -> CrossRun
FitFn = Callable[[str, list[MeasuredRun]], Optional[dict[str, float]]]
PredictFn = Callable[[MeasuredRun, dict[str, dict[str, float]]], CrossRun]


@dataclass(frozen=True)
class Setting:
    """What a cross-validation needs to know about the runs: each run's model family and device family,
    and whether a run can be predicted at all (low-precision rows cannot yet)."""

    family_of: Callable[[MeasuredRun], str]
    device_family_of: Callable[[MeasuredRun], str]
    usable: Callable[[MeasuredRun], bool]


def cross_validate(runs: list[MeasuredRun], setting: Setting, fit: FitFn, predict_run: PredictFn,
                   progress: Optional[Callable[[int], None]] = None) -> CrossValidation:
    """Leave one model family out over `runs` (see the module docstring). `progress(1)`, if given, after each
    fold."""
    usable = [r for r in runs if setting.usable(r)]
    folds = []
    memo: dict[tuple[str, tuple[str, ...]], Optional[dict[str, float]]] = {}  # folds often fit the same runs

    def fitted(device: str, chosen: list[MeasuredRun]) -> Optional[dict[str, float]]:
        key = (device, tuple(r.id for r in chosen))
        if key not in memo:
            memo[key] = fit(device, chosen) if chosen else None
        return memo[key]

    for held in sorted({setting.family_of(r) for r in runs}):
        fits: dict[str, dict[str, float]] = {}
        fit_runs: dict[str, list[str]] = {}
        basis: dict[str, str] = {}
        if not any(setting.family_of(r) == held for r in usable):  # nothing to predict: no fit needed
            folds.append(Fold(held_out=held, fits={}, fit_runs={}, basis={},
                              runs=[predict_run(r, {}) for r in runs if setting.family_of(r) == held]))
            if progress:
                progress(1)
            continue
        others = [r for r in usable if setting.family_of(r) != held]
        for device in sorted({setting.device_family_of(r) for r in runs}):
            mine = [r for r in others if setting.device_family_of(r) == device]
            chosen = [r for r in mine if r.role == "fit"]
            why = "fit runs of other families"
            if not chosen:  # a known gap is a mechanism btacalc lacks: no factor is fitted to it
                chosen = [r.model_copy(update={"role": "fit"}) for r in mine if not r.known_gap]
                why = "all runs of other families (the held-out family holds every fit run), known gaps left out"
            factors = fitted(device, chosen)
            if factors is None:
                why = SHIPPED_FACTORS
                factors = {}
            fits[device], fit_runs[device], basis[device] = factors, [r.id for r in chosen if factors], why
        predicted = [predict_run(r, fits) for r in runs if setting.family_of(r) == held]
        folds.append(Fold(held_out=held, fits=fits, fit_runs=fit_runs, basis=basis, runs=predicted))
        if progress:
            progress(1)
    every = [r for f in folds for r in f.runs]
    return CrossValidation(
        folds=folds, overall=summarize_errors([r.error for r in every if r.error is not None]),
        by_hardware=grouped(every, lambda r: r.hw), by_kind=grouped(every, lambda r: "moe" if r.moe else "dense"),
        by_scale=_in_scale_order(grouped(every, lambda r: r.scale)), by_model_family=grouped(every, lambda r: r.model_family),
        by_software_year=grouped(every, lambda r: r.software_year),
        not_expressible=[f"{r.id}: {r.reason}" for r in every if r.error is None])


# -- btacalc's own runs: the fit and the prediction of `validate --calibrate` --------------------------

def _device_family(run: MeasuredRun, specs: dict[str, FamilySpec]) -> str:
    """The calibration family (calibration.toml [[family]]) whose profiles hold the run's hardware; a
    profile outside every family is a family of its own kind (gpu / wse)."""
    owner = family_of(run.hw, list(specs.values()))
    if owner is not None:
        return owner.name
    try:
        return resolve_hardware(run.hw).family
    except BtacalcError:
        return "unknown"


def _is_moe(model: str) -> bool:
    try:
        return resolve_model(model).is_moe
    except BtacalcError:
        return False


def _trial_hardware(factors: dict[str, dict[str, float]], specs: dict[str, FamilySpec]) -> Callable[[str], HardwareProfile]:
    profiles = builtin_profiles()
    trial: dict[str, HardwareProfile] = {}
    for device, values in factors.items():
        spec = specs.get(device)
        if spec is None or not values:
            continue
        for name in spec.profiles:
            trial[name] = with_factors(profiles[name], values, ["cross-validation fold"], spec.source)
    return lambda name: trial.get(name) or resolve_hardware(name)


def cross_validation_steps(runs: list[MeasuredRun]) -> int:
    """How many times `validate_cross(runs, progress)` calls `progress(1)`: once per run (its prediction with the
    shipped factors) and once per fold (one per model family)."""
    families = load_model_families()
    return len(runs) + len({model_family(r.model, families) for r in runs})


def validate_cross(runs: Optional[list[MeasuredRun]] = None,
                   progress: Optional[Callable[[int], None]] = None) -> CrossValidation:
    """Leave-one-model-family-out over the shipped measured runs (or `runs`), with btacalc's model.
    `progress(1)`, if given, after each run's prediction with the shipped factors and after each fold
    (`cross_validation_steps(runs)` calls in all)."""
    runs = runs if runs is not None else load_runs()
    families = load_model_families()
    specs = {s.name: s for s in load_families()}
    plain = {}
    for r in runs:
        plain[r.id] = predict(r)
        if progress:
            progress(1)

    def fit(device: str, chosen: list[MeasuredRun]) -> Optional[dict[str, float]]:
        spec = specs.get(device)
        if spec is None or len(chosen) < len(spec.factors):  # fewer runs than factors: nothing to fit on
            return None
        result = fit_family(spec, chosen)
        return dict(result.factors) if result is not None else None

    def predict_run(run: MeasuredRun, factors: dict[str, dict[str, float]]) -> CrossRun:
        res = predict(run, _trial_hardware(factors, specs))
        return CrossRun(id=run.id, model_family=model_family(run.model, families), hw=run.hw, moe=_is_moe(run.model),
                        ep_overlap=res.ep_overlap, devices=run.devices, scale=scale_group(run.devices),
                        software_year=software_year(run.software_date),
                        predicted_tokens_per_s_per_device=res.predicted.tokens_per_s_per_device,
                        measured_tokens_per_s_per_device=run.measured.tokens_per_s_per_device,
                        error=res.error, reason=res.reason)

    setting = Setting(family_of=lambda r: model_family(r.model, families), device_family_of=lambda r: _device_family(r, specs),
                      usable=lambda r: plain[r.id].error is not None)
    return cross_validate(runs, setting, fit, predict_run, progress)


def held_out_errors(runs: Optional[list[MeasuredRun]] = None) -> ExpectedErrorData:
    """Every run's error of `validate_cross` (about 25 s over the shipped runs), with what a plan is matched on
    (planning/expected_error.py): what `python tools/accuracy.py` writes to btacalc/data/expected_error.json."""
    runs = runs if runs is not None else load_runs()
    by_id = {r.id: r for r in runs}
    families = load_families()
    rows = []
    specs = {s.name: s for s in families}
    for fold in validate_cross(runs).folds:
        for cr in fold.runs:
            if cr.error is None:
                continue
            run = by_id[cr.id]
            spec = family_of(run.hw, families)
            kept = fold.basis.get(_device_family(run, specs)) == SHIPPED_FACTORS
            rows.append(HeldOutRun(id=cr.id, hw=cr.hw, calibration_family=spec.name if spec else None,
                                   device=resolve_hardware(run.hw).family, moe=cr.moe, ep_overlap=cr.ep_overlap,
                                   low_precision=precision_recipe(run.precision).low, error=cr.error,
                                   held_out=not kept))
    return ExpectedErrorData(source=EXPECTED_ERROR_SOURCE, runs=sorted(rows, key=lambda r: r.id))
