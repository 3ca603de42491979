"""Leave-one-out over model sizes on the wafer runs: fit the wafer family's factors without any run of
one model, predict that model's runs, and repeat for every model (issue 24).

The fit is `validate --calibrate`'s (least squares on log error, calibration.py), on every wafer run of
the other models whatever its role in the shipped set, so each fold sees the most data it can, except
the runs with a documented known gap (a mechanism btacalc lacks: fitting factors to them would bend the
factors towards a miss they cannot explain); those are still predicted in their own fold. A fold that
leaves fewer runs than the family has factors is skipped with the reason. The result is data
(`LooReport`); `btacalc validate --wafer-loo` prints it, and a GPU cross-validation can reuse
`leave_one_out` with its own family spec.
"""

from __future__ import annotations

import statistics
from typing import Callable, Optional

from pydantic import BaseModel, Field

from ..config.hardware import HardwareProfile, builtin_profiles
from ..errors import BtacalcError
from .calibration import FamilySpec, fit_family, load_families, with_factors
from .measured import predict
from .run_file import MeasuredRun, load_runs


class LooPrediction(BaseModel):
    id: str
    model: str
    hw: str
    error: Optional[float] = Field(None, description="predicted / measured - 1 with the fold's factors")
    error_shipped: Optional[float] = Field(None, description="the same with the shipped factors")
    reason: str = ""


class LooFold(BaseModel):
    held_out: str = Field(description="the model whose runs the fold's fit never saw")
    factors: dict[str, float] = Field(default_factory=dict)
    fit_runs: list[str] = Field(default_factory=list)
    predictions: list[LooPrediction] = Field(default_factory=list)
    skipped: str = ""


class LooReport(BaseModel):
    family: str
    factors: list[str]
    folds: list[LooFold]
    mean_abs_error: Optional[float]
    max_abs_error: Optional[float]


def _hardware(spec: FamilySpec, factors: dict[str, float], runs: list[str], source: str) -> Callable[[str], HardwareProfile]:
    profiles = builtin_profiles()
    trial = {name: with_factors(profiles[name], factors, runs, source) for name in spec.profiles}
    return lambda name: trial.get(name) or profiles[name]


def _fold(spec: FamilySpec, mine: list[MeasuredRun], model: str) -> LooFold:
    train = [r.model_copy(update={"role": "fit"}) for r in mine if r.model != model and not r.known_gap]
    held = [r for r in mine if r.model == model]
    if len(train) < len(spec.factors):
        return LooFold(held_out=model, skipped=f"{len(train)} runs left for {len(spec.factors)} factors")
    try:
        fit = fit_family(spec, train)
    except BtacalcError as exc:
        return LooFold(held_out=model, skipped=str(exc))
    if fit is None:
        return LooFold(held_out=model, skipped="no run of the other models can be predicted")
    hardware = _hardware(spec, fit.factors, fit.runs, spec.source)
    preds = []
    for run in held:
        res, shipped = predict(run, hardware), predict(run)
        preds.append(LooPrediction(id=run.id, model=run.model, hw=run.hw, error=res.error,
                                   error_shipped=shipped.error, reason=res.reason))
    return LooFold(held_out=model, factors=fit.factors, fit_runs=fit.runs, predictions=preds)


def _family(family: str, spec: Optional[FamilySpec]) -> FamilySpec:
    found = spec or next((f for f in load_families() if f.name == family), None)
    if found is None:
        raise BtacalcError(f"{{family}}: no calibration family {family!r} (btacalc/data/calibration.toml)")
    return found


def _held_out_models(spec: FamilySpec, runs: Optional[list[MeasuredRun]]) -> tuple[list[MeasuredRun], list[str]]:
    """The family's runs (of `runs`, default the shipped set) and the models of its folds, in order."""
    mine = [r for r in (runs if runs is not None else load_runs()) if r.hw in spec.profiles]
    return mine, sorted({r.model for r in mine})


def leave_one_out_steps(family: str = "wse", runs: Optional[list[MeasuredRun]] = None) -> int:
    """How many times `leave_one_out(family, runs, progress=...)` calls `progress(1)`: once per fold (model)."""
    return len(_held_out_models(_family(family, None), runs)[1])


def leave_one_out(family: str = "wse", runs: Optional[list[MeasuredRun]] = None,
                  spec: Optional[FamilySpec] = None, progress: Optional[Callable[[int], None]] = None) -> LooReport:
    """One fold per model among the family's runs (shipped set by default): fit without it, predict it.
    `progress(1)`, if given, after each fold."""
    spec = _family(family, spec)
    mine, models = _held_out_models(spec, runs)
    folds = []
    for model in models:
        folds.append(_fold(spec, mine, model))
        if progress:
            progress(1)
    errs = [abs(p.error) for f in folds for p in f.predictions if p.error is not None]
    return LooReport(family=spec.name, factors=spec.factors, folds=folds,
                     mean_abs_error=statistics.fmean(errs) if errs else None,
                     max_abs_error=max(errs) if errs else None)
