"""The throughput metrics of one plan without building its report: what `whatif` and the sensitivity
table evaluate many times (the plan's shape, tokens/s, vs dense, MFU, and what binds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config.execution import ExecutionRequest
from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec
from ..model.memory import MemoryModel
from .plan import solve_problem, summarize
from .resolve import resolve_problem

METRICS = ("tokens_per_s", "relative_to_dense", "mfu", "tokens_per_s_per_kw")


@dataclass(frozen=True)
class PlanMetrics:
    fits: bool
    tiles: int
    tile_batch: int
    micro_batches: int
    binding_constraint: str
    values: dict[str, Optional[float]]  # METRICS
    dominant_phase: str = ""
    stream_bound_share: float = 0.0

    @property
    def shape(self) -> str:
        return f"{self.tiles}x{self.tile_batch}x{self.micro_batches}" if self.fits else "no fit"


def plan_metrics(model: ModelSpec, hardware: HardwareProfile, request: ExecutionRequest) -> PlanMetrics:
    problem, sol, found = solve_problem(resolve_problem(model, hardware, request))
    mem = MemoryModel(problem)
    m = problem.layout.micro_batches
    if not (sol.fits and mem.offchip_fits):
        return PlanMetrics(False, sol.tiles, sol.tile_batch, m, sol.binding_constraint, dict.fromkeys(METRICS))
    s = summarize(problem, mem, sol, found)
    t = s.best_time
    tps = float(t.tokens_per_s)
    shares = {k: float(v / t.step_time_s) for k, v in t.phase_time_s.items()}
    power_kw = problem.layout.devices * hardware.power_per_device_w / 1e3
    values = {"tokens_per_s": tps, "relative_to_dense": s.relative_to_dense, "mfu": float(t.mfu),
              "tokens_per_s_per_kw": tps / power_kw}
    return PlanMetrics(True, sol.tiles, sol.tile_batch, m, sol.binding_constraint, values,
                       max(shares, key=lambda k: shares[k]), float(t.stream_bound_share))
