"""Which hardware numbers move a plan: every number of the profile moved by -x% and +x% alone, the
plan solved again (its shape may change), and the elasticity of tokens/s,
(tokens/s' / tokens/s - 1) / (+-x), reported. Partial derivatives: numbers derived from one another
(the mesh clock and the peak FLOP/s) are moved one at a time."""

from __future__ import annotations

from typing import Optional, Union

from ..config.execution import ExecutionRequest
from ..config.hardware import CAPABILITY, HardwareProfile
from ..config.model import ModelSpec
from ..errors import BtacalcError
from .metrics import PlanMetrics, plan_metrics
from .report import SensitivityRow


def _elasticity(new: Optional[float], base: Optional[float], step: float) -> Optional[float]:
    if new is None or not base:
        return None
    return (new / base - 1) / step


def sensitivity(model: ModelSpec, hardware: HardwareProfile, request: ExecutionRequest,
                percent: float = 10.0) -> list[SensitivityRow]:
    if not 0 < percent < 100:
        raise BtacalcError(f"{{sensitivity}} must be a percentage in (0, 100), got {percent!r}")
    step = percent / 100
    base = plan_metrics(model, hardware, request).values["tokens_per_s"]
    rows = []
    for key, number in hardware.numbers().items():
        if hardware.number_range(key) == CAPABILITY:  # an architecture's identity, not a rate to move
            continue
        (lo, lo_step), (hi, hi_step) = (_trial(model, hardware, request, key, sign * step) for sign in (-1, 1))
        rows.append(SensitivityRow(
            parameter=key, value=number.value, kind=number.kind,
            tokens_per_s_minus=_tokens(lo), tokens_per_s_plus=_tokens(hi),
            elasticity_minus=_elasticity(_tokens(lo), base, lo_step),
            elasticity_plus=_elasticity(_tokens(hi), base, hi_step),
            shape_minus=_shape(lo), shape_plus=_shape(hi)))
    return rows


def _trial(model: ModelSpec, hardware: HardwareProfile, request: ExecutionRequest, key: str,
           step: float) -> tuple[Union[PlanMetrics, str], float]:
    """The plan with the number at `key` moved by `step` (relative), and the step actually taken: a
    count (cores, buffers, devices per node) moves to the nearest whole number, at least by one. A value
    the profile's rules refuse (a fraction above 1, a count below 1) gives the rule instead of a plan."""
    value = hardware.numbers()[key].value
    moved = value * (1 + step)
    rng = hardware.number_range(key)
    if rng is not None and rng.integer:
        moved = float(round(moved))
        if moved == value:
            moved = value + (1 if step > 0 else -1)
    if moved == value:  # a step below the float's resolution (--sensitivity 1e-300): no move, no elasticity
        return f"not applicable: {100 * step:+.4g}% leaves {value:g} unchanged (below double precision)", step
    actual = moved / value - 1 if value else step
    try:
        trial = hardware.with_number(key, moved, note=f"sensitivity trial {100 * actual:+.4g}%")
    except BtacalcError as exc:
        return f"not applicable: {exc}", actual
    return plan_metrics(model, trial, request), actual


def _tokens(trial: Union[PlanMetrics, str]) -> Optional[float]:
    return trial.values["tokens_per_s"] if isinstance(trial, PlanMetrics) else None


def _shape(trial: Union[PlanMetrics, str]) -> str:
    return trial.shape if isinstance(trial, PlanMetrics) else trial
