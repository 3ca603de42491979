"""`btacalc sweep`: a cartesian grid over model and run parameters, each point solved at G = 1 and
at the solver's G, with throughput relative to the dense model.

Every point is solved with the compiled (lambdified) formulas; no sympy substitution happens per
point. Points sharing a model shape reuse one compiled selection.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator, Optional

from pydantic import BaseModel

from .errors import BtacalcError
from .hardware import HardwareProfile
from .models import ModelSpec
from .parallel import Parallelism, auto_expert_parallel
from .plan import PlanInfo, Throughput, make_plan
from .run import RunOptions
from .solver import BatchLimits

MODEL_PARAMS = {"experts": "experts", "top-k": "top_k", "expert-ffn": "expert_ffn"}
RUN_PARAMS = {"seq": "seq_len"}
LIMIT_PARAMS = {"global-batch": "global_batch", "tiles": "tiles", "tile-batch": "tile_batch",
                "max-global-batch": "max_global_batch", "max-tile-batch": "max_tile_batch"}
PARALLEL_PARAMS = {"devices": "devices", "grad-accum": "micro_batches"}
VARIABLES = {**MODEL_PARAMS, **RUN_PARAMS, **LIMIT_PARAMS, **PARALLEL_PARAMS}


def parse_values(spec: str, flag: str = "--vary") -> list[int]:
    """'a,b,c' or 'start:stop:step' (inclusive) or 'start:stop:xF' (geometric, factor F); positive
    integers. `flag` names the option in error messages."""
    def num(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise BtacalcError(f"{flag} value {text.strip()!r} is not an integer") from None
        if v < 1:
            raise BtacalcError(f"{flag} value {v} must be positive")
        return v

    if ":" in spec:
        parts = spec.split(":")
        if len(parts) != 3:
            raise BtacalcError(f"{flag} range {spec!r} must be start:stop:step or start:stop:xF")
        start, stop = num(parts[0]), num(parts[1])
        if stop < start:
            raise BtacalcError(f"{flag} range {spec!r}: stop is below start")
        if parts[2].startswith("x"):
            factor = num(parts[2][1:])
            if factor < 2:
                raise BtacalcError(f"{flag} range {spec!r}: geometric factor must be at least 2")
            values, v = [], start
            while v <= stop:
                values.append(v)
                v *= factor
            return values
        return list(range(start, stop + 1, num(parts[2])))
    values = [num(x) for x in spec.split(",") if x.strip()]
    if not values:
        raise BtacalcError(f"{flag} {spec!r} gives no values")
    return values


def parse_vary(items: list[str]) -> dict[str, list[int]]:
    grid: dict[str, list[int]] = {}
    for item in items:
        if "=" not in item:
            raise BtacalcError(f"--vary {item!r} must look like NAME=VALUES (e.g. experts=16,32,64)")
        name, spec = item.split("=", 1)
        name = name.strip()
        if name not in VARIABLES:
            raise BtacalcError(f"--vary: unknown parameter {name!r} (known: {', '.join(VARIABLES)})")
        if name in grid:
            raise BtacalcError(f"--vary: {name!r} given twice")
        grid[name] = parse_values(spec)
    if not grid:
        raise BtacalcError("give at least one --vary NAME=VALUES")
    return grid


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


def run_sweep(model: ModelSpec, hw: HardwareProfile, run: RunOptions, limits: BatchLimits,
              grid: dict[str, list[int]], fixed_active: bool = False, overlap: bool = True,
              progress: Optional[Callable[[int], None]] = None, parallel: Parallelism = Parallelism(),
              expert_parallel_given: bool = False) -> SweepResult:
    """Solve every grid point. When `devices` varies and the EP degree was not given, each point
    uses EP = gcd(devices, E) (the plan default)."""
    from dataclasses import replace

    points = []
    for params in grid_points(grid):
        m_over = {MODEL_PARAMS[k]: v for k, v in params.items() if k in MODEL_PARAMS}
        r_over = {RUN_PARAMS[k]: v for k, v in params.items() if k in RUN_PARAMS}
        l_over = {LIMIT_PARAMS[k]: v for k, v in params.items() if k in LIMIT_PARAMS}
        p_over = {PARALLEL_PARAMS[k]: v for k, v in params.items() if k in PARALLEL_PARAMS}
        try:
            spec = model.with_overrides(**m_over, fixed_active=fixed_active) if (m_over or fixed_active) else model
            par = replace(parallel, **p_over)
            if not expert_parallel_given and ("devices" in p_over or m_over):
                par = replace(par, expert_parallel=auto_expert_parallel(par.devices, spec.num_experts))
            lim = replace(limits, **l_over)
            rep = make_plan(spec, hw, replace(run, **r_over), lim, overlap=overlap, parallel=par)
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


CSV_COLUMNS = ["tiles", "tile_batch", "global_batch", "tokens_per_expert", "fits", "binding_constraint",
               "step_time_s", "tokens_per_s", "mfu", "relative_to_dense", "tile_batch_g1", "tokens_per_s_g1",
               "relative_to_dense_g1"]


def to_csv(result: SweepResult) -> str:
    import csv
    import io

    names = list(result.points[0].params) if result.points else []
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(names + CSV_COLUMNS + ["error"])
    for p in result.points:
        row: list[Any] = [p.params[n] for n in names]
        merged = {**(p.throughput.model_dump() if p.throughput else {}), **p.plan.model_dump()}
        row += [merged.get(c, "") for c in CSV_COLUMNS]
        w.writerow(row + [p.error or ""])
    return buf.getvalue()


def plot(result: SweepResult, path: str) -> None:
    """Relative throughput vs the first varied parameter, at G = 1 and at the solver's G."""
    from .plotting import pyplot, save

    plt = pyplot(path)
    pts = [p for p in result.points if p.throughput]
    if not pts:
        raise BtacalcError("--plot: no point of the sweep fits, nothing to draw")
    x_name = list(pts[0].params)[0]
    others = [n for n in pts[0].params if n != x_name]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    groups: dict[tuple, list[SweepPoint]] = {}
    for p in pts:
        groups.setdefault(tuple(p.params[n] for n in others), []).append(p)
    for key, ps in groups.items():
        label = ", ".join(f"{n}={v}" for n, v in zip(others, key))
        xs = [p.params[x_name] for p in ps]
        ax.plot(xs, [p.throughput.relative_to_dense for p in ps], "o-", label=f"BTA (solver G) {label}".strip())
        ax.plot(xs, [p.throughput.relative_to_dense_g1 for p in ps], "s--", label=f"G = 1 {label}".strip())
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(x_name + (" (k*f fixed)" if result.fixed_active else ""))
    ax.set_ylabel("throughput relative to dense (same active params)")
    ax.set_ylim(0, 1.1)
    ax.set_title(f"{result.model} on {result.hardware}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path)
