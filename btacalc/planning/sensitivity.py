"""Which hardware numbers move a plan: every number of the profile moved by -x% and +x% alone, the
plan solved again (its shape may change), and the elasticity of tokens/s,
(tokens/s' / tokens/s - 1) / (+-x), reported. Partial derivatives: numbers derived from one another
(the mesh clock and the peak FLOP/s) are moved one at a time."""

from __future__ import annotations

from typing import Optional

from ..config.execution import ExecutionRequest
from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec
from ..errors import BtacalcError
from .metrics import plan_metrics
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
        trials = []
        for sign in (-1, 1):
            trial = hardware.with_number(key, number.value * (1 + sign * step), note=f"sensitivity trial {sign * percent:+g}%")
            trials.append(plan_metrics(model, trial, request))
        lo, hi = trials
        rows.append(SensitivityRow(
            parameter=key, value=number.value, kind=number.kind,
            tokens_per_s_minus=lo.values["tokens_per_s"], tokens_per_s_plus=hi.values["tokens_per_s"],
            elasticity_minus=_elasticity(lo.values["tokens_per_s"], base, -step),
            elasticity_plus=_elasticity(hi.values["tokens_per_s"], base, step),
            shape_minus=lo.shape, shape_plus=hi.shape))
    return rows
