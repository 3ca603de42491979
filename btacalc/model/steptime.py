"""The result of a time model (`StepTime`) and the two calibration factors every time model uses, shared
by the wafer / single-device model (`timing.py`) and the GPU model (`gpu/timing.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .problem import Problem


@dataclass(frozen=True)
class StepTime:
    step_time_s: Any
    tokens_per_s: Any  # all devices
    mfu: Any
    phase_time_s: dict[str, Any]  # per phase, per step (layer phases summed over L layers)
    tiling_overhead_s: Any
    stream_bound_share: Any  # fraction of step time during which the streaming link is the bottleneck
    communication_s: dict[str, Any]  # multi-GPU: all_to_all and gradient_sync, before overlap
    # GPU: times each phase of `phase_time_s` repeats on the critical pipeline stage per step (None: the
    # layer kind's count); the stage's memory-free details for the report
    phase_repeats: Optional[dict[str, Any]] = None
    details: dict[str, Any] = field(default_factory=dict)
    kind_phase_time_s: dict[tuple[str, str], Any] = field(default_factory=dict)  # (layer kind, phase): one layer


def compute_efficiency(problem: Problem) -> float:
    """Achieved share of the datasheet peak on matmul phases: the profile's calibration (else 1, pure
    roofline). On GPUs it is what a large, perfectly quantised GEMM reaches; the shape of each GEMM
    (tiles, waves, the memory floor) is modelled on top of it (`gpu/gemm.py`)."""
    cal = problem.hardware.calibration
    return cal.compute_efficiency.value if cal.compute_efficiency else 1.0


def tile_overhead_s(problem: Problem) -> float:
    tile = problem.hardware.calibration.tile_overhead_s
    return tile.value if tile else 0.0
