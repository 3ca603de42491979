"""`btacalc compare`: one model on several devices (and GPU counts), side by side.

Each row is a full plan (`plan.make_plan`) reduced to what a comparison needs. A wafer-scale row is
D systems in strict data parallel (one by default; weights streamed, or resident on one system); a GPU
row is N devices with expert parallelism and ZeRO (a `CompareRequest` says which rows). With its `devices`
None ("auto") a GPU row uses the
smallest power-of-two device count whose per-device shard fits (`cluster.min_devices`), or with
`match` the count set beside the wafer systems: similar power, or as many devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

from pydantic import BaseModel, Field

from ..config.execution import BatchLimits, ExecutionRequest
from ..config.resolution import gpu_layout_options, resolve_execution, resolve_run, without_gpu_layout
from ..config.hardware import HardwareProfile
from ..config.pipeline import StageSplit
from ..config.precision import DEFAULT_PRECISION, recipe
from ..config.model import ModelSpec
from ..errors import BtacalcError
from .cluster import MAX_DEVICES, device_counts, min_devices
from .plan import make_plan, plan_problem
from .report import PlanReport
from ..vocabulary import GPU_LOSSES

SCHEMA_VERSION = 1


class CompareRow(BaseModel):
    hardware: str
    display_name: str
    devices: int
    expert_parallel: int
    zero_stage: int
    micro_batches: int = 1
    layout: str = Field("", description="GPU: TP/PP/VP/CP/EP/ETP/DP sizes of the row's layout")
    memory_model: str
    recompute: str
    attention: str
    precision: str = Field("bf16", description="training precision of the row (--precision)")
    run_options: list[str] = Field(default_factory=list, description="the run options set away from their defaults "
                                   "that change the row's numbers, as flags (the plan's inputs.run_options, and "
                                   "--loss where given)")
    fits: bool
    tiles: Optional[int] = Field(None, description="G per device")
    tile_batch: Optional[int] = Field(None, description="b per device")
    tokens_per_expert: Optional[float] = Field(None, description="T_e per expert replica; None for a dense model")
    step_time_s: Optional[float] = None
    tokens_per_s: Optional[float] = Field(None, description="all devices")
    tokens_per_s_per_device: Optional[float] = None
    mfu: Optional[float] = None
    relative_to_dense: Optional[float] = Field(None, description="tokens/s over the dense model with the same active "
                                               "parameters; None for a dense model, which is its own dense model")
    bta_gain: Optional[float] = Field(None, description="tokens/s at the solver's G over tokens/s at G = 1; None for a "
                                      "dense model (as plan, which shows no G = 1 row for one: issue 25)")
    power_kw: float = Field(description="devices x system power per device (profile system_power_w, else power_w) / 1000")
    tokens_per_s_per_kw: Optional[float] = None
    binding_constraint: str
    dominant_phase: Optional[str] = None
    memory_total_bytes: int = Field(description="per device")
    usable_memory_bytes: int
    expected_median_abs_error: Optional[float] = Field(None, description="the plan's expected error: the typical "
                                                       "(median) |error| of the measured runs most like it, each "
                                                       "predicted with its model family held out (plan --json "
                                                       "throughput.expected_error)")
    expected_error_basis: str = Field("", description="the group of measured runs expected_median_abs_error is over")
    note: str = ""


class CompareResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    model: str
    params_total: int
    seq_len: int
    moe: bool = Field(True, description="the model has experts: T_e, relative_to_dense and bta_gain apply (None in "
                      "every row of a dense model, and compare's table leaves their columns out)")
    rows: list[CompareRow]
    skipped: list[str] = Field(default_factory=list, description="device and precision pairs that cannot run, and why "
                               "(a wafer or a GPU without the dtype's peak)")


def layout_label(report: PlanReport) -> str:
    """A GPU row's Megatron layout; "" for one device and for wafer systems (strict data parallel, their state in
    MemoryX: freshuser22, a 4-system row read "TP1 PP1 DP4, ZeRO-0")."""
    par = report.parallelism
    if par.devices == 1 or report.wafer is not None:
        return ""
    return (f"TP{par.tensor_parallel} PP{par.pipeline_parallel}" + (f" VP{par.virtual_pipeline}" if par.virtual_pipeline > 1 else "")
            + (f" CP{par.context_parallel}" if par.context_parallel > 1 else "")
            + (f" EP{par.expert_parallel} ETP{par.expert_tensor_parallel}" if par.expert_parallel > 1 else "")
            + f" DP{par.data_parallel}")


def _row(report: PlanReport, profile: HardwareProfile) -> CompareRow:
    par, th, plan = report.parallelism, report.throughput, report.plan
    fits = plan.fits and th is not None
    # freshuser26: a dense model's rows showed T_e, a "vs dense" over itself (0.96) and a G = 1 gain, which plan hides
    moe = bool(report.model.num_experts)
    g1 = th.tokens_per_s_g1 if th and moe else None
    return CompareRow(
        hardware=profile.name, display_name=profile.display_name, devices=par.devices,
        expert_parallel=par.expert_parallel, zero_stage=par.zero_stage, micro_batches=par.micro_batches,
        layout=layout_label(report),
        memory_model=report.inputs.memory_model,
        recompute=report.inputs.recompute, attention=report.inputs.attention, precision=report.inputs.precision,
        # the loss is an input the plan header shows beside seq and attention, not a run option: given, it is one here
        run_options=[flag for _, flag in report.inputs.run_options()]
        + ([] if "loss" in report.inputs.defaults else [f"--loss {report.inputs.loss}"]),
        fits=fits,
        tiles=plan.tiles if fits else None, tile_batch=plan.tile_batch if fits else None,
        tokens_per_expert=plan.tokens_per_expert if fits and moe else None,
        step_time_s=th.step_time_s if th else None, tokens_per_s=th.tokens_per_s if th else None,
        tokens_per_s_per_device=th.tokens_per_s / par.devices if th else None, mfu=th.mfu if th else None,
        relative_to_dense=th.relative_to_dense if th and moe else None,
        bta_gain=th.tokens_per_s / g1 if th and g1 else None,
        power_kw=par.devices * profile.power_per_device_w / 1e3,
        tokens_per_s_per_kw=th.tokens_per_s_per_kw if th else None,
        binding_constraint=plan.binding_constraint if fits else "memory",
        dominant_phase=th.dominant_phase if th else None,
        memory_total_bytes=report.memory_bytes["total"], usable_memory_bytes=report.memory_bytes["usable_capacity"],
        expected_median_abs_error=th.expected_error.median_abs_error if th and th.expected_error else None,
        expected_error_basis=th.expected_error.basis if th and th.expected_error else "",
        note="" if fits else "; ".join(report.suggestions) or "does not fit",
    )


MATCHES = ("power", "devices")
# the run options whose errors mean "this device cannot run this precision": such a row is skipped, not refused
PRECISION_PARAMS = frozenset({"precision", "fp8_param_gather", "fp8_attention"})


def matched_gpu_count(wafer: HardwareProfile, systems: int, gpu: HardwareProfile, match: str) -> tuple[int, str]:
    """GPUs set beside `systems` wafer systems: as many devices, or the whole nodes whose system power is
    nearest the wafers' (profile system_power_w, else power_w, per device)."""
    if match == "devices":
        return systems, f"matched to {systems} x {wafer.name} by device count"
    wafer_kw = systems * wafer.power_per_device_w / 1e3
    node = gpu.system.domain_devices
    nodes = max(1, round(wafer_kw * 1e3 / (node * gpu.power_per_device_w)))
    return nodes * node, f"matched to {systems} x {wafer.name} by power ({wafer_kw:,.0f} kW; whole {node}-device nodes)"


@dataclass(frozen=True)
class CompareRequest:
    """What a comparison asks for, beside the model and the profiles: the rows, and the run each row plans.

    `devices`: the GPU rows' device counts (None: the smallest power-of-two count that fits, or with `match` the
    count matched to the first wafer row: `power`, similar system power; `devices`, as many GPUs as wafer systems).
    `systems`: CS systems per wafer row; `wafer_global_batch`: the wafer rows' sequences per step over all systems.
    `search`: each GPU row is the fastest layout that fits on its devices (`search.search_layouts`). `precisions`: a
    row per precision for each GPU profile and count (wafers train in 16 bits: one row; empty: the run's precision
    alone). Every other choice comes from `run`; what it leaves unset defaults per device (recompute, attention)
    and per device count (EP, ZeRO)."""

    run: ExecutionRequest = field(default_factory=ExecutionRequest)
    devices: Optional[tuple[int, ...]] = None
    systems: int = 1
    match: Optional[str] = None
    wafer_global_batch: Optional[int] = None
    search: bool = False
    precisions: tuple[str, ...] = ()

    def row_count(self, profiles: Sequence[HardwareProfile]) -> int:
        """How many rows `compare` returns (at most): one per wafer, one per GPU profile, device count and
        precision."""
        per_gpu = (len(self.devices) if self.devices else 1) * (len(self.precisions) or 1)
        return sum(1 if p.family == "wse" else per_gpu for p in profiles)

    def check(self, profiles: Sequence[HardwareProfile]) -> None:
        """Refused before any row is planned (one-line errors): no profile; an option for one kind of row with no
        row of that kind (it would be ignored); a --match that cannot apply."""
        if not profiles:
            raise BtacalcError("{hardware}: give at least one hardware profile")
        wafers = [p for p in profiles if p.family == "wse"]
        if self.systems != 1 and not wafers:
            raise BtacalcError(f"{{systems}} {self.systems} sets the wafer rows' systems: {{hardware}} has no "
                               "wafer-scale profile")
        if len(wafers) == len(profiles):
            if self.search:
                raise BtacalcError("{search} chooses the GPU rows' layouts: {hardware} has no GPU profile")
            if any(x != DEFAULT_PRECISION for x in self.precisions):
                raise BtacalcError("{precision} makes a row per precision for each GPU profile (wafers train in 16 "
                                   "bits, one row): {hardware} has no GPU profile")
            gpu_only = _gpu_row_options(self.run, self.devices)
            if gpu_only:
                raise BtacalcError(f"{'/'.join(gpu_only)} set{'s' if len(gpu_only) == 1 else ''} the GPU rows' layout "
                                   "or kernels (the wafer rows are strict data parallel): {hardware} has no GPU profile")
        if self.match is not None and (self.match not in MATCHES or not wafers or self.devices):
            raise BtacalcError(f"{{match}} {self.match!r}: give power or devices, with a wafer profile in {{hardware}} "
                               "and without GPU {devices}")
        self._check_matched(wafers, [p for p in profiles if p.family == "gpu"])

    def _check_matched(self, wafers: list[HardwareProfile], gpus: list[HardwareProfile]) -> None:
        """hostile36: a matched GPU count beyond the device bound was refused as "--devices N is beyond 2^20", a flag
        the user never gave, after the wafer rows were planned; it is named by what set it, before any row."""
        from ..config.execution import LIMIT_TEXT, MAX_DEVICES as MAX_LAYOUT_DEVICES

        if self.match is None or not wafers:
            return
        for gpu in gpus:
            count, _ = matched_gpu_count(wafers[0], self.systems, gpu, self.match)
            if count > MAX_LAYOUT_DEVICES:
                raise BtacalcError(f"{{systems}} {self.systems} x {wafers[0].name} matched by {self.match} on {gpu.name}"
                                   f" take {count:,} GPUs, beyond {LIMIT_TEXT[MAX_LAYOUT_DEVICES]}")


# The request fields that set GPU rows only beside the GPU layout options (config/resolution.py _GPU_LAYOUT), at
# the value that leaves a row as without them: `_gpu_row_options` names those given, and a wafer row's request
# (`_row_request`) takes these values.
_GPU_ROW_NEUTRAL: dict[str, Any] = {
    "expert_parallel": None, "zero_stage": None,
    "gradient_accumulation_fusion": True, "rht_cast_fusion": True, "te_version": None, "checkpoint_early_stop": False,
    "bf16_layers_at_start": 0, "bf16_layers_at_end": 0, "transformer_engine": True,
    "expert_grouped_gemm": True, "recompute_layers": 0,
    # review29: Megatron's token dropping (a wafer plan refuses it: its MoE layers are dropless), which refused the
    # whole comparison
    "capacity_factor": None, "pad_to_capacity": False,
    # Megatron's grid, pipeline split and sharding, the MoE dispatcher, NCCL's registered buffers, CUDA graphs and
    # the GPU kernels (a wafer plan refuses each: config/resolution.py, config/execution.py)
    "tensor_parallel": None, "sequence_parallel": None, "pipeline_parallel": None, "virtual_pipeline": None,
    "context_parallel": None, "expert_tensor_parallel": None, "stage_split": StageSplit(), "fsdp": False,
    "fsdp_impl": None, "routing_imbalance": 1.0, "deepep": False, "hybridep": False, "allgather_dispatcher": False,
    "dispatcher_sms": None, "nccl_ub": False, "nvls": False, "cuda_graph_scope": (), "attention_kernel": None,
    "eager_kernels": False, "cpu_offload_layers": 0, "precision_aware_optimizer": False}


def _gpu_row_options(request: ExecutionRequest, devices: Optional[Sequence[int]]) -> list[str]:
    """The options given for GPU rows only (_row_request drops them from a wafer row's request)."""
    names = gpu_layout_options(request) + [name for name, neutral in _GPU_ROW_NEUTRAL.items()
                                           if getattr(request, name) != neutral] \
        + (["loss"] if request.loss in GPU_LOSSES else [])
    return (["{devices}"] if devices else []) + ["{" + name + "}" for name in names]


def compare(model: ModelSpec, profiles: Sequence[HardwareProfile], request: CompareRequest = CompareRequest(), *,
            progress: Optional[Callable[[int], None]] = None,
            say: Callable[[BtacalcError], str] = str) -> CompareResult:
    """One row per wafer profile (`request.systems` CS systems each), and per (GPU profile, device count,
    precision): see CompareRequest. A pair a device cannot run is listed in `skipped` with the reason, as `say`
    writes it (default: with the library's parameter names, the command line passes its flags). `progress(n)`, if
    given, is called as rows are done."""
    request.check(profiles)
    wafers = [p for p in profiles if p.family == "wse"]
    run, devices, systems, match = request.run, request.devices, request.systems, request.match
    rows: list[CompareRow] = []
    params_total = 0
    seq = 0
    skipped: list[str] = []
    chosen: list[Optional[str]] = list(request.precisions) or [run.precision]
    taking = _rows_taking(run, chosen, profiles)
    wafer_precision, wafer_note = _wafer_precision(chosen)
    for profile, precision in [(p, x) for p in profiles for x in chosen]:
        if profile.family == "wse" and precision != chosen[0]:
            continue  # one wafer row: the precision list is for the GPU rows
        precision = wafer_precision if profile.family == "wse" else precision
        base = _row_request(run, profile, precision, bool(wafers), taking, request.wafer_global_batch)
        if precision is not None:
            try:  # the run options as each row's plan resolves them (its default attention, its precision checks)
                resolve_run(base.with_changes(precision=precision), model, profile)
            except BtacalcError as exc:
                if not PRECISION_PARAMS & set(exc.params):
                    raise
                skipped.append(f"{profile.name} {precision}: {say(exc)}")
                continue
        matched = matched_gpu_count(wafers[0], systems, profile, match) if match and profile.family == "gpu" else None
        counts: Sequence[Optional[int]] = ([systems] if profile.family == "wse" else [matched[0]] if matched
                                           else (list(devices) if devices else [None]))
        for n in counts:
            report, note = _row_plan(model, profile, base, n, request.search and profile.family == "gpu")
            note = note or (matched[1] if matched else "") or (wafer_note if profile.family == "wse" else "")
            params_total, seq = report.model.params_total, report.inputs.seq_len
            row = _row(report, profile)
            if note:
                row.note = "; ".join(x for x in (note, row.note) if x)
            rows.append(row)
            if progress:
                progress(1)
    if not rows and skipped:
        raise BtacalcError(f"{{precision}}: no device can run it ({'; '.join(skipped)})")
    return CompareResult(model=model.name, params_total=params_total, seq_len=seq, rows=rows, skipped=skipped,
                         moe=bool(model.num_experts))


def _wafer_precision(chosen: list[Optional[str]]) -> tuple[Optional[str], str]:
    """The wafer rows' precision and their note: the first 16-bit precision of `chosen` (None: the run's default),
    else bf16 with a note. fu23: `--precision mxfp8` (or a list of low precisions first) skipped the wafer rows ("not
    run: ... 16-bit training only"), where "bf16 wafer vs mxfp8 GPU" asks for them at their only precision."""
    sixteen = [x for x in chosen if x is None or not recipe(x).low]
    if sixteen:
        return sixteen[0], ""
    return DEFAULT_PRECISION, (f"planned in {DEFAULT_PRECISION}: a wafer trains in 16-bit (--precision "
                               f"{','.join(x for x in chosen if x)} sets the GPU rows)")


Taking = tuple[set[Optional[str]], set[Optional[str]], set[tuple[Optional[str], str]]]


def _rows_taking(request: ExecutionRequest, chosen: list[Optional[str]],
                 profiles: Sequence[HardwareProfile]) -> Taking:
    """The rows that take the recipe options given for several rows (empty: every row takes them, and one that
    cannot refuses them). --no-rht-cast-fusion: the precisions whose recipe casts through the Hadamard transform
    (check_precision); --bf16-layers-at-start/-end: the low precisions, a 16-bit row having no recipe to keep layers
    out of (check_bf16_layers); --te-version: the (precision, GPU profile) rows where a TE release changes the plan
    (Recipe.te_release_decides_on: the projection's quantised copy of O on every GPU, per-tensor FP8's transposes
    only where FP8 GEMMs take non-TN layouts)."""
    gpus = [p for p in profiles if p.family == "gpu"]
    pairs = [(x, p) for x in chosen for p in gpus]
    versioned = set() if request.te_version is None else \
        {(x, p.name) for x, p in pairs if recipe(x or DEFAULT_PRECISION).te_release_decides_on(p.chip.capability)}
    if len(versioned) == len(pairs):
        versioned = set()
    if len(chosen) < 2:
        return set(), set(), versioned
    unfused = set() if request.rht_cast_fusion else \
        {x for x in chosen if recipe(x or DEFAULT_PRECISION).rht_cast_fusion_since_te}
    low = set() if not (request.bf16_layers_at_start or request.bf16_layers_at_end) else \
        {x for x in chosen if recipe(x or DEFAULT_PRECISION).low}
    return unfused, low, versioned


def _row_request(request: ExecutionRequest, profile: HardwareProfile, precision: Optional[str], with_wafers: bool,
                 taking: Taking,
                 wafer_global_batch: Optional[int]) -> ExecutionRequest:
    """The request one row is planned with. A wafer row is D systems in strict data parallel: the GPU layout
    choices (EP, ZeRO, the NVLink domain, the communication overlaps) and Megatron's and TransformerEngine's GPU
    kernel options (the unfused main-gradient add, NVFP4's unfused casts, PyTorch's early-stopping re-run, the layers
    kept out of a low-precision recipe, the router's token dropping) do not apply. A GPU row drops the options for
    other rows only: --no-rht-cast-fusion unless its precision is in the first of `taking` (the row's run options show
    which rows took it), --bf16-layers-at-start/-end unless it is in the second (the low precisions), --te-version
    unless (its precision, its profile) is in the third, --no-overlap beside wafer rows (the wafer rows' weight
    streaming; a GPU plan refuses it)."""
    if profile.family == "wse":
        loss = None if request.loss in GPU_LOSSES else request.loss  # a GPU framework's loss: the GPU rows'
        return without_gpu_layout(request).with_changes(**_GPU_ROW_NEUTRAL, loss=loss,
                                                        limits=replace(request.limits, global_batch=wafer_global_batch))
    unfused_rows, low_rows, versioned = taking
    base = request.with_changes(precision=precision)
    if unfused_rows and precision not in unfused_rows:
        base = base.with_changes(rht_cast_fusion=True)
    if low_rows and precision not in low_rows:
        base = base.with_changes(bf16_layers_at_start=0, bf16_layers_at_end=0)
    if versioned and (precision, profile.name) not in versioned:
        base = base.with_changes(te_version=None)
    if with_wafers:
        base = base.with_changes(overlap_streaming=True)
    return base


def _row_plan(model: ModelSpec, profile: HardwareProfile, base: ExecutionRequest, devices: Optional[int],
              search: bool) -> tuple[PlanReport, str]:
    """One row's plan on `devices` (None: the smallest power-of-two count that fits), the searched layout with
    `search`, and a note when no count fits."""
    if devices is not None:
        request = base.with_changes(devices=devices)
        return (_searched(model, profile, request) if search else make_plan(model, profile, request)), ""
    # a given --zero or --recompute is the user's: only the levers left open are pulled (review5: a given
    # --recompute none was planned as full, and an unknown --recompute was never read)
    fit = min_devices(model, profile, base, escalate=True,
                      keep=tuple(k for k in ("zero_stage", "recompute") if getattr(base, k) is not None))
    if fit is None:
        return _auto_plan(model, profile, base, _first_count(model, profile, base), "the smallest power-of-two count "
                          "that takes the layout"), (f"no power-of-two count up to {MAX_DEVICES:,} devices fits, "
                                                     "even with ZeRO-3 and full recomputation")
    if search:
        return _searched(model, profile, base.with_changes(devices=fit.layout.devices)), ""
    # hostile38: the count's fit is one sequence per device (min_devices leaves the batch out); the row is the run's
    # own batch (--global-batch, --grad-accum) at that count, with the ZeRO stage and recomputation that fit
    # (`plan_problem(fit)` planned 1,024 sequences per step whatever --global-batch said)
    chosen = fit.execution.request or base.with_changes(devices=fit.layout.devices)
    return _auto_plan(model, profile, chosen.with_changes(limits=base.limits, micro_batches=base.micro_batches),
                      fit.layout.devices, "the smallest power-of-two count that fits one sequence per device"), ""


def _first_count(model: ModelSpec, profile: HardwareProfile, base: ExecutionRequest) -> int:
    """The smallest power-of-two device count that takes `base`'s layout (it need not fit): where a row no count
    fits is planned. No count takes it: the layout's own refusal at the largest count, naming the row (hostile38:
    the row was planned on one device, and `--tp 8` on a model of 4 key/value heads, or `--etp 3`, was refused as
    not dividing `--devices 1`, a count the command line never gave)."""
    counts = device_counts(MAX_DEVICES)
    for n in counts:
        try:
            resolve_execution(base.with_changes(devices=n, limits=BatchLimits(), micro_batches=None), model, profile)
            return n
        except BtacalcError as exc:
            last = exc
    raise _at_auto_count(last, profile, counts[-1], "no power-of-two count up to it takes the layout")


def _auto_plan(model: ModelSpec, profile: HardwareProfile, request: ExecutionRequest, devices: int,
               why: str) -> PlanReport:
    """The row's plan at its automatic device count (chosen as `why` says); a refusal (the run's batch over that
    count) names the row and the count."""
    try:
        return make_plan(model, profile, request.with_changes(devices=devices))
    except BtacalcError as exc:
        raise _at_auto_count(exc, profile, devices, why) from None


def _at_auto_count(exc: BtacalcError, profile: HardwareProfile, devices: int, why: str) -> BtacalcError:
    return BtacalcError(f"{profile.name} row at {{devices}} auto = {devices:,} ({why}): {exc.template}")


def _searched(model: ModelSpec, profile: HardwareProfile, request: ExecutionRequest) -> PlanReport:
    """The fastest fitting layout's plan (with the requested ZeRO stage, else ZeRO-3 when nothing fits
    without it), or the plain plan (which says what would fit) when none fits."""
    from .search import search_layouts

    result = search_layouts(model, profile, request)
    if result.best is None and request.zero_stage is None and request.devices > 1:
        result = search_layouts(model, profile, request.with_changes(zero_stage=3))
    return result.best if result.best is not None else make_plan(model, profile, request)
