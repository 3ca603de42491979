"""`btacalc sweep`: a cartesian grid over model and run parameters, each point solved at G = 1 and
at the solver's G, with throughput relative to the dense model.

Every point is solved with the compiled (lambdified) formulas; no sympy substitution happens per
point. Points sharing a model shape reuse one compiled selection.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any, Callable, Iterator, Optional

from pydantic import BaseModel

from ..config.execution import ExecutionRequest
from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec
from ..errors import BtacalcError
from .plan import make_plan
from .report import PlanInfo, Throughput

MODEL_PARAMS = {"experts": "experts", "top-k": "top_k", "expert-ffn": "expert_ffn"}
RUN_PARAMS = {"seq": "seq_len"}
LIMIT_PARAMS = {"global-batch": "global_batch", "tiles": "tiles", "tile-batch": "tile_batch",
                "max-global-batch": "max_global_batch", "max-tile-batch": "max_tile_batch", "grad-accum": "micro_batches"}
LAYOUT_PARAMS = {"devices": "devices"}
VARIABLES = {**MODEL_PARAMS, **RUN_PARAMS, **LIMIT_PARAMS, **LAYOUT_PARAMS}


class SweepPoint(BaseModel):
    params: dict[str, int]
    plan: PlanInfo
    throughput: Optional[Throughput]
    error: Optional[str] = None


class SweepResult(BaseModel):
    model: str
    hardware: str
    fixed_active: bool
    points: list[SweepPoint]


def grid_points(grid: dict[str, list[int]]) -> Iterator[dict[str, int]]:
    names = list(grid)
    for combo in itertools.product(*(grid[n] for n in names)):
        yield dict(zip(names, combo))


def run_sweep(model: ModelSpec, hw: HardwareProfile, request: ExecutionRequest, grid: dict[str, list[int]],
              fixed_active: bool = False, progress: Optional[Callable[[int], None]] = None) -> SweepResult:
    """Solve every grid point: `request` with the point's values. What `request` leaves unset
    defaults per point (e.g. EP = gcd(devices, E) when devices vary)."""
    points = []
    for params in grid_points(grid):
        m_over = {MODEL_PARAMS[k]: v for k, v in params.items() if k in MODEL_PARAMS}
        r_over = {RUN_PARAMS[k]: v for k, v in params.items() if k in RUN_PARAMS}
        r_over.update({LAYOUT_PARAMS[k]: v for k, v in params.items() if k in LAYOUT_PARAMS})
        l_over = {LIMIT_PARAMS[k]: v for k, v in params.items() if k in LIMIT_PARAMS}
        try:
            spec = model.with_overrides(**m_over, fixed_active=fixed_active) if (m_over or fixed_active) else model
            point = request.with_changes(**r_over, limits=replace(request.limits, **l_over))
            rep = make_plan(spec, hw, point)
            points.append(SweepPoint(params=params, plan=rep.plan, throughput=rep.throughput))
        except BtacalcError as exc:  # e.g. top-k > experts at this point: record, keep sweeping
            points.append(SweepPoint(params=params, plan=_empty_plan(), throughput=None, error=str(exc)))
        if progress:
            progress(1)
    return SweepResult(model=model.name, hardware=hw.name, fixed_active=fixed_active, points=points)


def _empty_plan() -> PlanInfo:
    return PlanInfo(tiles=0, tile_batch=0, global_batch=0, tokens_per_step=0, tokens_per_expert=0, fits=False,
                    binding_constraint="invalid", tile_constraint="invalid", explanation="invalid point",
                    memory_evaluations=0)
