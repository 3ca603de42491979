"""`btacalc validate --measured`: predictions against measured training runs.

A run file is ``{"runs": [...]}`` (the format of btacalc/data/measured_runs.json, shipped with its
sources). Each run is expressed as an `ExecutionRequest` on the run's model and hardware, planned
with the run's batch, and its predicted tokens/s per device (and step time) set against the measured
ones: error = predicted / measured - 1.

Runs marked `role: fit` may be used by `validate --calibrate` to fit a device family's named
efficiency factors; every `role: check` run is a prediction. A run btacalc cannot express yet (a
layout it does not model, an unknown model or device) is listed with the reason, never counted as
passing.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config.execution import BatchLimits, ExecutionRequest, OverlapRequest
from ..config.hardware import HardwareProfile, resolve_hardware
from ..config.precision import recipe as precision_recipe
from ..config.presets import resolve_model
from ..errors import BtacalcError, first_validation_error
from ..paths import package_data
from .plan import make_plan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SHIPPED_RUNS = "measured_runs.json"
BANDS_FILE = "validation_bands.toml"


class Measured(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tokens_per_s_per_device: Optional[float] = Field(None, gt=0, allow_inf_nan=False)
    step_time_s: Optional[float] = Field(None, gt=0, allow_inf_nan=False)


class Overlaps(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    grad_reduce: Optional[bool] = None
    param_gather: Optional[bool] = None
    tp_comm: Optional[bool] = None
    all_to_all: bool = False


class Recipe(BaseModel):
    """Settings of the run's own configuration that the run's fields leave null or state differently,
    each read from the file `source` names (btacalc's extension of the run format)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    source: str = Field(min_length=10)
    attention: Optional[Literal["eager", "flash"]] = None
    recompute: Optional[Union[str, list[str]]] = None
    sequence_parallel: Optional[bool] = None
    vp: Optional[int] = Field(None, ge=1)
    zero: Optional[int] = Field(None, ge=0, le=3)
    grad_bytes: Optional[Literal[2, 4]] = None
    deepep: bool = Field(False, description="the run dispatches MoE tokens with DeepEP (Megatron flex dispatcher)")
    overlaps: Overlaps = Overlaps()


class MeasuredRun(BaseModel):
    """One measured training run with its layout (fields as in the run file; null = not stated / 1).
    Strict types: a count is a JSON integer (not true, "8" or 8.0), a measurement a finite number."""

    model_config = ConfigDict(extra="allow", strict=True)

    id: str
    source: str
    model: str
    hw: str
    devices: int = Field(ge=1)
    # btacalc's --precision names (btacalc/data/precision.toml): fp8 = delayed scaling, fp8-current = per-tensor
    # current scaling, fp8-blockwise, mxfp8, nvfp4
    precision: Literal["bf16", "fp16", "fp8", "fp8-current", "fp8-blockwise", "mxfp8", "nvfp4"]
    seq: int = Field(ge=1)
    global_batch: int = Field(ge=1)
    micro_batch: Optional[int] = Field(None, ge=1)
    tp: Optional[int] = Field(None, ge=1)
    pp: Optional[int] = Field(None, ge=1)
    vp: Optional[int] = Field(None, ge=1)
    cp: Optional[int] = Field(None, ge=1)
    ep: Optional[int] = Field(None, ge=1)
    etp: Optional[int] = Field(None, ge=1)
    zero: Optional[int] = Field(None, ge=0, le=3)
    fsdp: Optional[bool] = None
    sequence_parallel: Optional[bool] = None
    recompute: Optional[Union[str, list[str]]] = None
    measured: Measured
    role: Literal["fit", "check"]
    known_gap: str = Field("", description="btacalc is known to miss this run: the mechanism it lacks")
    recipe: Optional[Recipe] = None

    def with_recipe(self) -> "MeasuredRun":
        """The run with its recipe's corrections applied to the layout fields."""
        if self.recipe is None:
            return self
        r = self.recipe
        changes = {k: v for k, v in (("vp", r.vp), ("sequence_parallel", r.sequence_parallel), ("zero", r.zero),
                                     ("recompute", r.recompute)) if v is not None}
        return self.model_copy(update=changes)


class RunPrediction(BaseModel):
    tokens_per_s_per_device: Optional[float] = None
    step_time_s: Optional[float] = None


class RunResult(BaseModel):
    id: str
    role: str
    family: str = Field(description="device family the run's errors are summarised and calibrated by")
    model: str
    hw: str
    devices: int
    expressible: bool
    reason: str = Field("", description="why the run cannot be expressed or predicted")
    predicted: RunPrediction = RunPrediction()
    measured: Measured
    error: Optional[float] = Field(None, description="predicted / measured - 1 (tokens/s per device, else step time)")
    known_gap: str = ""
    carried: dict[str, Any] = Field(default_factory=dict, description="other keys of the run, carried through")


class FamilySummary(BaseModel):
    role: str
    family: str
    n: int
    mean_abs_error: Optional[float]
    median_abs_error: Optional[float]
    max_abs_error: Optional[float]
    not_expressible: list[str] = Field(default_factory=list, description="run id: reason")


# A run file is a few kilobytes per run; this is thousands of runs.
MAX_RUN_FILE_BYTES = 16 << 20


def _no_constant(name: str) -> None:
    """JSON has no Infinity or NaN (Python's json module reads them unless told not to)."""
    raise ValueError(f"{name} is not a JSON number")


def load_runs(path: Optional[Path] = None) -> list[MeasuredRun]:
    """The runs of `path` (default: the shipped measured set)."""
    origin = str(path) if path else f"btacalc/data/{SHIPPED_RUNS}"
    source = path or package_data(SHIPPED_RUNS)
    if path is not None and not path.exists():
        raise BtacalcError(f"{{measured}}: {origin} not found")
    if path is not None and not path.is_file():  # a FIFO would block, /dev/zero never end
        raise BtacalcError(f"{{measured}}: {origin} is not a regular file")
    try:
        if source.stat().st_size > MAX_RUN_FILE_BYTES:
            raise OSError(f"larger than {MAX_RUN_FILE_BYTES // 2**20} MiB")
        raw = json.loads(source.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except OSError as exc:
        raise BtacalcError(f"{{measured}}: cannot read {origin}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, a 5,000-digit number
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0]
        raise BtacalcError(f"{{measured}}: {origin} is not valid JSON: {why}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("runs"), list):
        raise BtacalcError(f"{{measured}}: {origin} must be a JSON object with a list under 'runs'")
    runs = []
    for i, item in enumerate(raw["runs"]):
        try:
            runs.append(MeasuredRun.model_validate(item))
        except ValidationError as exc:
            label = item.get("id", f"#{i}") if isinstance(item, dict) else f"#{i}"
            raise BtacalcError(f"{{measured}}: {origin} run {label}: {first_validation_error(exc)}") from None
    ids = [r.id for r in runs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise BtacalcError(f"{{measured}}: {origin}: run ids given twice: {', '.join(dupes)}")
    return runs


def device_family(profile: HardwareProfile) -> str:
    """Runs are summarised and calibrated per family: GPUs together, wafers together."""
    return profile.family


# Run fields -> ExecutionRequest fields (every layout field a run file can carry is modelled).
LAYOUT_FIELDS: dict[str, str] = {
    "ep": "expert_parallel",
    "zero": "zero_stage",
    "tp": "tensor_parallel",
    "pp": "pipeline_parallel",
    "vp": "virtual_pipeline",
    "cp": "context_parallel",
    "etp": "expert_tensor_parallel",
    "fsdp": "fsdp",
    "sequence_parallel": "sequence_parallel",
}


def express(run: MeasuredRun, family: str = "gpu") -> tuple[Optional[ExecutionRequest], str]:
    """The request that reproduces `run`, or None and the reason it cannot be expressed yet.

    The global batch is the batch per optimizer step over all data-parallel ranks (Megatron) or all
    systems (Cerebras); a given micro-batch fixes G*b and gradient accumulation follows (M = N / (DP
    micro-batch)); without one, the micro-batching is chosen (on wafers, as the compiler would)."""
    recipe = run.recipe
    run = run.with_recipe()
    changes: dict[str, Any] = {target: getattr(run, name) for name, target in LAYOUT_FIELDS.items()
                               if getattr(run, name) is not None}
    if changes.get("fsdp") is False:
        changes.pop("fsdp")
    recompute = ",".join(run.recompute) if isinstance(run.recompute, list) else run.recompute
    limits = BatchLimits(global_batch=run.global_batch, micro_batch=run.micro_batch)
    if recipe is not None:
        o = recipe.overlaps
        changes.update(overlaps=OverlapRequest(grad_reduce=o.grad_reduce, param_gather=o.param_gather, tp_comm=o.tp_comm),
                       overlap_all_to_all=o.all_to_all, attention=recipe.attention, gradient_bytes=recipe.grad_bytes,
                       deepep=recipe.deepep)
    # the published low-precision runs use Megatron-Bridge's mixed-precision recipes (btacalc/data/precision.toml
    # bridge_param_gather: FP8 parameters and their all-gather where the recipe turns them on)
    return ExecutionRequest(seq_len=run.seq, recompute=recompute, devices=run.devices, limits=limits,
                            precision=run.precision, fp8_param_gather=precision_recipe(run.precision).bridge_param_gather,
                            **changes), ""


def predict(run: MeasuredRun, hardware: Callable[[str], HardwareProfile] = resolve_hardware) -> RunResult:
    """`run` predicted; `hardware` resolves the run's device (calibration passes trial profiles)."""
    carried = {k: v for k, v in (run.model_extra or {}).items()}
    base = dict(id=run.id, role=run.role, model=run.model, hw=run.hw, devices=run.devices, measured=run.measured,
                known_gap=run.known_gap, carried=carried)
    try:
        profile = hardware(run.hw)
        family = device_family(profile)
        model = resolve_model(run.model)
    except BtacalcError as exc:
        return RunResult(**base, family="unknown", expressible=False, reason=str(exc))
    request, reason = express(run, family)
    if request is None:
        return RunResult(**base, family=family, expressible=False, reason=reason)
    try:
        report = make_plan(model, profile, request)
    except BtacalcError as exc:
        return RunResult(**base, family=family, expressible=False, reason=str(exc))
    th = report.throughput
    if not report.plan.fits or th is None:
        return RunResult(**base, family=family, expressible=False,
                         reason="btacalc says this layout does not fit: " + ("; ".join(report.suggestions) or "memory"))
    pred = RunPrediction(tokens_per_s_per_device=th.tokens_per_s / run.devices, step_time_s=th.step_time_s)
    return RunResult(**base, family=family, expressible=True, predicted=pred, error=_error(pred, run.measured))


def _error(pred: RunPrediction, measured: Measured) -> Optional[float]:
    if measured.tokens_per_s_per_device and pred.tokens_per_s_per_device:
        return pred.tokens_per_s_per_device / measured.tokens_per_s_per_device - 1
    if measured.step_time_s and pred.step_time_s:
        return pred.step_time_s / measured.step_time_s - 1
    return None


def summarize(results: list[RunResult]) -> list[FamilySummary]:
    out = []
    for role in ("fit", "check"):
        for family in sorted({r.family for r in results if r.role == role}):
            mine = [r for r in results if r.role == role and r.family == family]
            errs = [abs(r.error) for r in mine if r.error is not None]
            out.append(FamilySummary(
                role=role, family=family, n=len(errs),
                mean_abs_error=statistics.fmean(errs) if errs else None,
                median_abs_error=statistics.median(errs) if errs else None,
                max_abs_error=max(errs) if errs else None,
                not_expressible=[f"{r.id}: {r.reason}" for r in mine if not r.expressible],
            ))
    return out


class Bands(BaseModel):
    """The documented error bands `validate` enforces on check runs (btacalc/data/validation_bands.toml)."""

    model_config = ConfigDict(extra="forbid")
    per_run_abs_error: float = Field(gt=0)
    family_mean_abs_error: float = Field(gt=0)
    note: str = ""


def load_bands() -> Bands:
    return Bands.model_validate(tomllib.loads(package_data(BANDS_FILE).read_text(encoding="utf-8")))


class GateVerdict(BaseModel):
    ok: bool
    failures: list[str]


def gate(results: list[RunResult], summaries: list[FamilySummary], bands: Bands) -> GateVerdict:
    """Check runs outside the per-run band fail unless they are known gaps; a known gap that passes
    fails too (its note must go); a family whose check-run mean leaves its band fails."""
    failures = []
    for r in results:
        if r.role != "check" or r.error is None:
            continue
        inside = abs(r.error) <= bands.per_run_abs_error
        if not inside and not r.known_gap:
            failures.append(f"{r.id}: error {r.error:+.1%} outside ±{bands.per_run_abs_error:.0%}")
        if inside and r.known_gap:
            failures.append(f"{r.id}: marked a known gap but now within ±{bands.per_run_abs_error:.0%}")
    gaps = {r.id for r in results if r.known_gap}
    for s in summaries:
        if s.role != "check" or s.mean_abs_error is None:
            continue
        errs = [abs(r.error) for r in results if r.role == "check" and r.family == s.family
                and r.error is not None and r.id not in gaps]
        mean = statistics.fmean(errs) if errs else 0.0
        if mean > bands.family_mean_abs_error:
            failures.append(f"{s.family}: mean |error| of check runs {mean:.1%} outside ±{bands.family_mean_abs_error:.0%}")
    return GateVerdict(ok=not failures, failures=failures)


class MeasuredReport(BaseModel):
    runs: list[RunResult]
    summary: list[FamilySummary]
    bands: Bands
    gate: GateVerdict


def validate_measured(path: Optional[Path] = None) -> MeasuredReport:
    results = [predict(run) for run in load_runs(path)]
    summary = summarize(results)
    bands = load_bands()
    return MeasuredReport(runs=results, summary=summary, bands=bands, gate=gate(results, summary, bands))
