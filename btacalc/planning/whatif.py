"""`btacalc whatif`: the hardware or model value at which a plan reaches a target.

`solve_for` is a number of the hardware profile (`offchip_bandwidth_bytes_per_s`, `sram_bytes`,
`chip.peak_flops_per_s`, ...), several numbers moved together by the same factor (comma-separated: the
first one's value is reported), or a model value (`layers`); `target` is a plan metric and the value it
must reach (`relative_to_dense=0.95`, `tokens_per_s=50000`). Every trial is a full plan: the batch
shape is solved again at each value, so what binds may change along the way, and the report says
where.

Search: the metric is evaluated on a geometric grid from today's value / F to today's value x F
(F = 1000; model values from 1 up; a hardware number within its valid range, e.g. an efficiency at most 1),
outward from today's value until a grid point reaches the target;
the crossing nearest to today's value is so bracketed on the grid and refined by bisection (to 0.1%, or to the
integer for model values and for a count of the profile, cores or devices per node, which moves in whole numbers).
The metric is assumed monotone between today's value and the answer; the trace of the grid points in between shows
whether it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from pydantic import BaseModel, Field

from ..config.execution import ExecutionRequest
from ..config.hardware import HardwareProfile
from ..config.model import MAX_LAYERS, ModelSpec, validate_model
from ..config.precision import DEFAULT_PRECISION, recipe
from ..config.text import DECIMAL
from ..errors import BtacalcError
from .metrics import METRICS, PlanMetrics, plan_metrics

SCHEMA_VERSION = 1
MODEL_VALUES = {"layers": "num_layers"}
RANGE_FACTOR = 1000.0  # search today's value / F .. x F
GRID_POINTS = 31  # geometric grid over the range (every 10^(6/30) = 1.58x)
REL_TOL = 1e-3


def readable(v: float, digits: int = 4) -> str:
    """`digits` significant digits, never in e-notation: 4e10 is written 40,000,000,000, a ratio of 1000
    at 3 digits 1,000 (not 1e+03), 1e-5 0.00001."""
    if not math.isfinite(v) or v == 0:
        return f"{v:g}"
    rounded = float(f"{v:.{digits}g}")  # rounding first carries 999.95 over to 1,000
    if abs(rounded) >= 1e15:  # hostile36: past 2^53 `,.0f` wrote the float's binary noise (1e300 as 1,000,...,052,504,...)
        from decimal import Decimal

        return f"{Decimal(f'{v:.{digits}g}'):,f}"  # the digits kept, then zeros
    if abs(rounded) >= 1000:
        return f"{rounded:,.0f}"
    decimals = max(digits - 1 - math.floor(math.log10(abs(rounded))), 0)
    text = f"{rounded:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


class WhatIfStep(BaseModel):
    value: float
    ratio: float = Field(description="value / today's value")
    metric: Optional[float]
    fits: bool
    shape: str = Field(description="G x b x M")
    binding_constraint: str
    dominant_phase: str
    stream_bound_share: float


class WhatIfResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    model: str
    hardware: str
    solve_for: str = Field(description="'section.field' of the profile (several, comma-separated, move together), "
                           "or a model value (layers)")
    target_metric: str
    target_value: float
    today_value: float
    today_metric: Optional[float]
    # review16: decided here, where today's plan is made (the table compared the trace's values to today's as floats
    # to find it), and part of the JSON like every other answer of the library
    today_fits: bool = Field(description="whether the plan fits at today's value")
    reached: bool
    value: Optional[float] = Field(None, description="the smallest change from today's value that reaches the target")
    ratio: Optional[float] = Field(None, description="value / today's value")
    answer: Optional[WhatIfStep] = None
    trace: list[WhatIfStep] = Field(default_factory=list, description="grid points from today's value to the answer")
    binds_along_the_way: list[str] = Field(default_factory=list, description="distinct regimes met on the way, "
                                           "in order: the phase taking the most time (stream-bound or not) and "
                                           "what limits the batch")
    note: str = ""

    @property
    def fits_nowhere(self) -> bool:
        """No grid point fits (hostile16: the note says it in one line, there is no trace to show)."""
        return bool(self.trace) and not any(s.fits for s in self.trace)


def parse_target(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in METRICS:
        raise BtacalcError(f"{{target}} {text!r}: give METRIC=VALUE with METRIC one of {', '.join(METRICS)}")
    try:
        target = float(value)
        if not DECIMAL.fullmatch(value.strip()) and math.isfinite(target):  # hostile31: `0.8_5`, `٠.٨٥`
            raise ValueError(value)
    except ValueError:
        raise BtacalcError(f"{{target}} {text!r}: {value!r} is not a number") from None
    if not (target > 0 and math.isfinite(target)):  # nan, inf and 1e400 (inf) are no target
        raise BtacalcError(f"{{target}} {text!r}: the target must be a finite positive number")
    if name == "mfu" and target > 1:  # hostile21: searched the whole grid and answered "not reached", exit 1
        raise BtacalcError(f"{{target}} {text!r}: mfu is the share of the peak FLOP/s the model's FLOPs use, at most 1")
    return name, target


def _evaluator(model: ModelSpec, hw: HardwareProfile, request: ExecutionRequest,
               solve_for: str) -> tuple[str, float, bool, Callable[[float], PlanMetrics]]:
    """(key, today's value, integer?, value -> plan metrics)."""
    if solve_for in MODEL_VALUES:
        field = MODEL_VALUES[solve_for]
        if request.stage_split.pipeline_layout is not None:
            raise BtacalcError(f"{{solve_for}} {solve_for}: {{pipeline_layout}} places each of the model's "
                               f"{getattr(model, field)} layers, so no other count is a plan of it: leave it out (or "
                               "give --first-stage-layers / --last-stage-layers) to move the layers")

        def model_at(x: float) -> PlanMetrics:
            n = max(1, int(round(x)))
            update = {field: n, "name": f"{model.name} ({solve_for}={n})", "published_params": None}
            try:
                # hostile39: validated as a model file is (a copy was not: DeepSeek-V3's first 3 dense layers made a
                # 1- to 3-layer trial an MoE model without an MoE layer, planned and reported "best at 1")
                changed = validate_model({**model.model_dump(), **update}, origin=f"{solve_for}={n}")
            except BtacalcError as exc:
                return PlanMetrics(False, 0, 0, 0, f"not a valid model at {n} layers ({exc})", dict.fromkeys(METRICS))
            try:
                return plan_metrics(changed, hw, request)
            except BtacalcError as exc:
                if n == getattr(model, field):
                    raise  # today's: the run as given, its refusal the user's
                # hostile38: a trial count the pipeline split cannot take (--first-stage-layers 24 --last-stage-layers
                # 24 of --pp 2 at 54 layers) refused the whole question with the trial's leftover layers ("leave 6
                # layer(s) for 0 middle stage(s)"), a count the command line never gave; it is a point that does
                # not plan, as a hardware number against a rule between numbers is
                return PlanMetrics(False, 0, 0, 0, f"not a valid layout at {n} layers ({exc})", dict.fromkeys(METRICS))

        return solve_for, float(getattr(model, field)), True, model_at
    names = [k.strip() for k in solve_for.split(",")]
    if not all(names):  # review8: read as a number named '' ("wse3 has no number ''")
        raise BtacalcError(f"{{solve_for}} {solve_for.strip()!r} " + ("names no number" if not any(names) else
                           "has an empty entry (two commas in a row, or one at an end)"))
    keys = [hw.number_key(k) for k in names]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:  # one number named twice (also as 'x' and 'chip.x'): the factor would apply to it once
        raise BtacalcError(f"{{solve_for}} names {', '.join(twice)} twice")
    labels = [k for k in keys if (r := hw.number_range(k)) is not None and not r.scalable]
    if labels:  # hostile19 left it: a compute capability scaled like a rate ("best at 1.426")
        raise BtacalcError(f"{{solve_for}} {labels[0]} is a label, not a quantity: whatif scales a number by a factor, "
                           "which means nothing for it; give a rate, a size or a time")
    _check_gpu_cores(hw, request, keys)
    numbers = hw.numbers()
    today = numbers[keys[0]].value
    for k in keys:
        if not numbers[k].value > 0:
            raise BtacalcError(f"{{solve_for}} {k} is {readable(numbers[k].value)} in {hw.name}: whatif scales today's value, "
                               "so it needs a positive one")

    def hardware_at(x: float) -> PlanMetrics:
        trial = hw
        try:
            for k in keys:  # several numbers move together, by the same factor; a count to a whole number
                v = numbers[k].value * x / today
                trial = trial.with_number(k, float(max(1, round(v))) if _is_count(hw, k) else v,
                                          note=f"whatif trial: {keys[0]} x {readable(x / today)}")
        except BtacalcError as exc:  # outside a number's range, or against a rule between numbers
            return PlanMetrics(False, 0, 0, 0, f"not a valid profile ({exc})", dict.fromkeys(METRICS))
        return plan_metrics(model, trial, request)

    return ",".join(keys), today, _is_count(hw, keys[0]), hardware_at


def _check_gpu_cores(hw: HardwareProfile, request: ExecutionRequest, keys: list[str]) -> None:
    """fu23 (freshuser23: `--solve-for cores` on a GPU answered "best at 1 SM"): a GPU's chip.cores is its SM count,
    which the plan reads for the GEMMs' waves (rates.gemm_device) and the SMs communication kernels hold
    (gpu/sm_share.py), while the peak FLOP/s is the device's (per device, not per SM). Moved alone, it spreads the same
    peak over more or fewer SMs, a device that cannot exist; moved with the peaks the plan's GEMMs run at, it scales
    the device (the same rate per SM). A wafer's count is refused as changing nothing (the plan reads its SRAM per
    core, not the count)."""
    if hw.family != "gpu" or "chip.cores" not in keys:
        return
    peaks = ["chip.peak_flops_per_s"]
    gemm = recipe(request.precision or DEFAULT_PRECISION).gemm_peak
    if gemm != "bf16":
        peaks.append(f"chip.peak_{gemm}_flops_per_s")
    if any(k not in keys for k in peaks):
        raise BtacalcError(f"{{solve_for}} chip.cores of a GPU is its SM count at the profile's per-device peak FLOP/s: "
                           "alone it spreads the same peak over more or fewer SMs; to scale the device at the same "
                           f"rate per SM, move the peaks with it: {','.join(['chip.cores', *peaks])}")


def _step(x: float, today: float, metric: str, pm: PlanMetrics) -> WhatIfStep:
    return WhatIfStep(value=x, ratio=x / today, metric=pm.values[metric], fits=pm.fits, shape=pm.shape,
                      binding_constraint=pm.binding_constraint, dominant_phase=pm.dominant_phase or "-",
                      stream_bound_share=pm.stream_bound_share)


def _reached(pm: PlanMetrics, metric: str, target: float) -> bool:
    v = pm.values[metric]
    return v is not None and v >= target


def _is_count(hw: HardwareProfile, key: str) -> bool:
    """Whether the profile's number at `key` is a count (cores, devices per node, buffers: whole numbers only)."""
    rng = hw.number_range(key)
    return rng is not None and rng.integer


def _bounds(hw: HardwareProfile, solve_for: str, today: float) -> tuple[float, float]:
    """The values of the first number at which every number solved for stays in its range (they move together by
    one factor; hostile32: `--solve-for calibration.compute_efficiency` scanned to 1000x an efficiency at most 1,
    every point past 1 a trace row "not a valid profile"). Model values: 1 to MAX_LAYERS; numbers without a range:
    unbounded."""
    if solve_for in MODEL_VALUES:
        return (1.0, float(MAX_LAYERS))
    numbers, lo, hi = hw.numbers(), 0.0, math.inf
    for key in (hw.number_key(k.strip()) for k in solve_for.split(",")):
        rng, value = hw.number_range(key), numbers[key].value
        if rng is not None:
            lo, hi = max(lo, today * rng.low / value), min(hi, today * rng.high / value)
    return (lo, hi)


def _grid(today: float, integer: bool, bounds: tuple[float, float] = (0.0, math.inf),
          model: bool = False) -> list[float]:
    """The geometric grid around today's value: today / F .. today x F, within `bounds` (the values the number may
    take: a hardware number's range, e.g. an efficiency at most 1), model values from 1; whole numbers for a model
    value and for a count of the profile (hostile34: a count's grid points were fractions, each "not a valid
    profile", so `--solve-for devices_per_node` answered 1,000x today where 2x reaches the target)."""
    lo = 1.0 if model else max(today / RANGE_FACTOR, bounds[0])
    hi = min(today * RANGE_FACTOR, bounds[1])
    if lo >= hi:
        return [today]
    pts = [lo * (hi / lo) ** (i / (GRID_POINTS - 1)) for i in range(GRID_POINTS)]
    if integer:
        pts = [float(v) for v in sorted({max(math.ceil(lo), min(math.floor(hi), round(p))) for p in pts})]
    return sorted(set(pts) | {today})


def _bisect(at: Callable[[float], PlanMetrics], metric: str, target: float, good: float, bad: float,
            integer: bool) -> float:
    """Shrink [bad, good] (bad misses the target, good reaches it) to the tolerance; return good."""
    while (abs(good - bad) > 1) if integer else (abs(good / bad - 1) > REL_TOL):
        mid = round((good + bad) / 2) if integer else math.sqrt(good * bad)
        if mid in (good, bad):
            break
        if _reached(at(mid), metric, target):
            good = mid
        else:
            bad = mid
    return good


@dataclass
class _Scan:
    """The search along one number (module docstring): today's value, the grid around it, the metric and the
    value it must reach, and the plans evaluated so far (grid points are evaluated outward from today's value,
    as needed)."""

    at: Callable[[float], PlanMetrics]  # the plan at a value of the number
    today: float
    integer: bool  # a model value (layers) or a count of the profile: whole numbers
    metric: str
    goal: float
    bounds: tuple[float, float] = (0.0, math.inf)  # the values the number may take (`_bounds`)
    model: bool = False  # a model value: the grid starts at 1
    grid: list[float] = field(init=False)
    points: dict[float, PlanMetrics] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.grid = _grid(self.today, self.integer, self.bounds, self.model)

    def point(self, x: float) -> PlanMetrics:
        if x not in self.points:
            self.points[x] = self.at(x)
        return self.points[x]

    def step(self, x: float, pm: PlanMetrics) -> WhatIfStep:
        return _step(x, self.today, self.metric, pm)

    def nearest_hit(self) -> Optional[int]:
        """The index of the grid point nearest to today's value (in ratio; the lower on a tie) whose plan reaches
        the goal, or None where none does."""
        grid, today = self.grid, self.today
        order = sorted(range(len(grid)), key=lambda i: (abs(math.log(grid[i] / today)), grid[i]))
        return next((i for i in order if _reached(self.point(grid[i]), self.metric, self.goal)), None)

    def answer(self, hit: int) -> float:
        """The value at which the goal is reached: today's where it already is, else the crossing between the
        hit and its grid neighbour towards today, refined by bisection."""
        i0 = self.grid.index(self.today)
        if hit == i0:
            return self.today
        toward = hit - 1 if hit > i0 else hit + 1
        return _bisect(self.at, self.metric, self.goal, self.grid[hit], self.grid[toward], self.integer)

    def miss_note(self, key: str, nowhere: str) -> str:
        """Why no grid point reaches the goal (every grid point evaluated): `nowhere` (what does not fit where)
        when no point fits at all, else the best point. Refused where the metric is the same at every valid
        point: the number does not enter the plan."""
        grid, points, metric, base = self.grid, self.points, self.metric, self.points[self.today]
        if not any(points[x].fits for x in grid):
            # hostile16: the note read "best - at 989,000,000,000, 0.001x today" (the first of the grid, no plan at all)
            why = base.binding_constraint if base.binding_constraint.startswith("not a valid") else \
                f"binds: {base.binding_constraint}"
            return (f"{nowhere} at any {key} from {readable(grid[0])} to {readable(grid[-1])} ({why}); btacalc plan "
                    "with the same options says what would fit")
        valid = [x for x in grid if not points[x].binding_constraint.startswith("not a valid")]
        if valid == [self.today] and len(grid) > 1:  # hostile38: not "would change nothing" (it changed the validity)
            nearest = min((x for x in grid if x != self.today), key=lambda x: abs(math.log(x / self.today)))
            invalid = points[nearest].binding_constraint
            raise BtacalcError(f"{{solve_for}} {key}: no value from {readable(grid[0])} to {readable(grid[-1])} but "
                               f"today's {readable(self.today)} is a plan under these options: {invalid}")
        if valid and len({points[x].values[metric] for x in valid}) == 1:
            # hostile19: `--solve-for chip.peak_fp8_flops_per_s` of a bf16 plan printed 31 identical rows and "not
            # reached ... (best 97,070 at 1,979,000,000,000, 0.001x today)", exit 1: the number does not enter the plan
            raise BtacalcError(f"{{solve_for}} {key} would change nothing: {metric} is {_metric_text(base.values[metric])} "
                               f"at every value from {readable(valid[0])} to {readable(valid[-1])} (this plan does not "
                               "use the number under these options); solve for one it uses")
        best = max(grid, key=lambda x: points[x].values[metric] or 0.0)
        return (f"{metric} does not reach {readable(self.goal)} anywhere from {readable(grid[0])} to "
                f"{readable(grid[-1])} (best {_metric_text(points[best].values[metric])} at {readable(best)}, "
                f"{readable(best / self.today, 3)}x today)")


def whatif(model: ModelSpec, hw: HardwareProfile, request: ExecutionRequest, target: str,
           solve_for: str) -> WhatIfResult:
    metric, goal = parse_target(target)
    key, today, integer, at = _evaluator(model, hw, request, solve_for)
    scan = _Scan(at, today, integer, metric, goal, _bounds(hw, solve_for, today), solve_for in MODEL_VALUES)
    base = scan.point(today)
    result = WhatIfResult(model=model.name, hardware=hw.name, solve_for=key, target_metric=metric, target_value=goal,
                          today_value=today, today_metric=base.values[metric], today_fits=base.fits,
                          reached=False)
    # the reaching grid point nearest to today's value (in ratio), and its neighbour towards today
    hit = scan.nearest_hit()
    if hit is None:
        result.note = scan.miss_note(key, f"{model.name} does not fit on {request.devices or 1} x {hw.name}")
        result.trace = [scan.step(x, scan.points[x]) for x in scan.grid]
        result.binds_along_the_way = _regimes(result.trace)
        return result
    value = scan.answer(hit)
    answer = scan.step(value, at(value))
    lo, hi = sorted((scan.grid.index(today), hit))
    trace = [scan.step(x, scan.point(x)) for x in scan.grid[lo:hi + 1]]
    result.reached, result.value, result.ratio, result.answer = True, value, value / today, answer
    result.trace, result.binds_along_the_way = trace, _regimes(trace + [answer])
    return result


def _metric_text(v: Optional[float]) -> str:
    return "-" if v is None else readable(v)


def _regimes(steps: list[WhatIfStep]) -> list[str]:
    """The distinct regimes met along `steps`, in order: the phase that takes the most time (and whether
    the weight stream binds), and what limits the batch."""
    out: list[str] = []
    for s in steps:
        stream = " (stream-bound)" if s.stream_bound_share > 0.5 else ""
        label = f"{s.dominant_phase}{stream}; batch limited by {s.binding_constraint}" if s.fits else "does not fit"
        if not out or out[-1] != label:
            out.append(label)
    return out
