"""`plan`: solve the batch shape for a model on a device and report memory, FLOPs and phases.

The report is a pydantic model (`PlanReport`); its JSON schema is `PlanReport.model_json_schema()`
(`btacalc plan --schema`). Units: bytes, FLOP, FLOP/byte, seconds; no scaled units in JSON.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, Field

from .hardware import HardwareProfile
from .memory import MemoryModel, resolve_memory_model
from .parallel import Parallelism
from .models import ModelSpec
from .run import Problem, RunOptions
from .solver import BatchLimits, Solution, solve

SCHEMA_VERSION = 1


class ModelInfo(BaseModel):
    name: str
    source: str
    params_total: int
    params_active: int
    params_non_embedding: int
    params_per_layer: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    ffn_size: int = Field(description="expert width f (MoE) or MLP width (dense)")
    num_experts: int
    top_k: int


class HardwareInfo(BaseModel):
    name: str
    display_name: str
    memory_model: str
    memory_capacity_bytes: int = Field(description="SRAM (weight streaming) or device memory (resident)")
    usable_memory_bytes: int
    peak_flops_per_s: float
    offchip_bandwidth_bytes_per_s: float


class ParallelInfo(BaseModel):
    devices: int = Field(description="N: devices; every device is a data-parallel rank")
    expert_parallel: int = Field(description="EP: devices the experts are split over (E/EP experts each)")
    expert_data_parallel: int = Field(description="N/EP: replicas of each expert shard")
    zero_stage: int = Field(description="ZeRO stage: 1 shards optimizer state, 2 + gradients, 3 + weights")
    micro_batches: int = Field(1, description="M: gradient accumulation steps per optimizer step")
    devices_per_node: int
    overlap_all_to_all: bool


class StateRow(BaseModel):
    component: str = Field(description="weights, gradients or optimizer")
    part: str = Field(description="non_expert (data-parallel) or expert (expert-parallel)")
    params: int = Field(description="parameters of this part in the whole model")
    bytes_per_param: int
    divisor: int = Field(description="devices the part is split over: EP for experts, x data-parallel ranks when ZeRO shards it")
    bytes_per_device: int
    formula: str


class Inputs(BaseModel):
    memory_model: str = Field("", description="weight_streaming or resident, as used")
    seq_len: int
    recompute: str
    attention: str
    causal: bool
    loss: str
    accounting: str
    optimizer: str
    bytes_per_element: int
    global_batch: Optional[int] = None
    tiles: Optional[int] = None
    tile_batch: Optional[int] = None
    max_global_batch: Optional[int] = None
    max_tile_batch: Optional[int] = None
    defaults: dict[str, str] = Field(default_factory=dict, description="inputs left at their default, and why")


class PlanInfo(BaseModel):
    tiles: int = Field(description="G: attention tiles")
    tile_batch: int = Field(description="b: sequences per attention tile")
    global_batch: int = Field(description="G*b: sequences the router and experts see per step, per device")
    tokens_per_step: int = Field(description="G*b*s, per device")
    devices: int = 1
    cluster_tokens_per_step: int = Field(0, description="N*M*G*b*s: tokens per optimizer step over all devices")
    tokens_per_expert: float = Field(description="T_e = EP*G*b*s*k/E per expert replica under uniform routing (G*b*s for dense)")
    fits: bool
    binding_constraint: str = Field(description="what stops a larger G*b: memory, max_global_batch, global_batch, tiles, ...")
    tile_constraint: str = Field(description="what stops a larger tile b at that G*b")
    explanation: str
    memory_evaluations: int


class FlopsPerStep(BaseModel):
    forward: int
    backward: int
    total: int = Field(description="model FLOPs: forward + backward (Korthikanti's 72BLsh^2(...))")
    recompute: int = Field(description="extra forward FLOPs re-run by recomputation / FlashAttention")
    hardware_total: int = Field(description="total + recompute")
    elementwise: int = Field(description="approximate non-matmul work, not in the totals")


class PhaseRow(BaseModel):
    name: str
    group: str
    batch: str = Field(description="tile: runs G times on b sequences; global: once on G*b")
    params: int
    flops_forward: int
    flops_backward: int
    flops_recompute: int
    flops_elementwise: int
    stored_activation_bytes: int
    recompute_bytes: int
    transient_bytes: int
    bytes_moved: int
    arithmetic_intensity: float = Field(description="flops_forward / bytes_moved, FLOP/byte")
    time_s: float = Field(0.0, description="modelled time of this phase per step (one layer for layer phases)")


class Throughput(BaseModel):
    step_time_s: float
    tokens_per_s: float = Field(description="all devices")
    tokens_per_s_per_kw: float = Field(0.0, description="tokens/s over the system power of the devices (profile system_power_w, else power_w)")
    mfu: float = Field(description="model FLOPs / (step time x peak)")
    relative_to_dense: Optional[float] = Field(description="tokens/s over the dense model (same active params) at its best plan")
    tokens_per_s_g1: Optional[float] = Field(description="tokens/s at G = 1 (largest untiled batch that fits)")
    relative_to_dense_g1: Optional[float]
    step_time_s_g1: Optional[float]
    tile_batch_g1: Optional[int]
    dense_tokens_per_s: Optional[float]
    dense_global_batch: Optional[int]
    tiling_overhead_s: float
    stream_bound_share: float = Field(description="share of the step during which weight streaming is the bottleneck")
    overlap_streaming: bool
    compute_efficiency: float
    phase_share: dict[str, float] = Field(description="share of step time per phase")
    dominant_phase: str = ""
    communication_s: dict[str, float] = Field(default_factory=dict, description="multi-GPU: all_to_all and "
                                              "gradient_sync time per step before overlap")


class PlanReport(BaseModel):
    schema_version: int = SCHEMA_VERSION
    model: ModelInfo
    hardware: HardwareInfo
    inputs: Inputs
    parallelism: ParallelInfo
    plan: PlanInfo
    memory_bytes: dict[str, int] = Field(description="total, capacity, usable_capacity and one key per component")
    offchip_bytes: dict[str, int] = Field(description="weight streaming: state held off-wafer (MemoryX)")
    state_sharding: list[StateRow] = Field(default_factory=list, description="resident: weights, gradients and "
                                           "optimizer state per device, by part and divisor")
    flops_per_step: FlopsPerStep
    phases: list[PhaseRow] = Field(description="one decoder layer, at the plan's G and b, per step")
    outside_layers: list[PhaseRow] = Field(description="embedding, final norm, LM head, loss")
    throughput: Optional[Throughput] = None
    suggestions: list[str] = Field(default_factory=list, description="what would fit, when the plan does not")


def _rows(problem: Problem, pv: Any, scope: str) -> list[PhaseRow]:
    rows = []
    for phase in problem.compiled.phases:
        if phase.scope != scope:
            continue
        v = lambda q: pv.value(phase.name, q)  # noqa: E731
        rows.append(
            PhaseRow(
                name=phase.name,
                group=phase.group,
                batch=phase.batch,
                params=int(v("params")),
                flops_forward=int(v("flops_fwd")),
                flops_backward=int(v("flops_bwd")),
                flops_recompute=int(v("flops_recompute")),
                flops_elementwise=int(v("flops_elementwise")),
                stored_activation_bytes=int(v("stored")),
                recompute_bytes=int(v("recompute_bytes")),
                transient_bytes=int(v("transient")),
                bytes_moved=int(v("bytes_moved")),
                arithmetic_intensity=float(v("arithmetic_intensity")),
            )
        )
    return rows


def tokens_per_expert(model: ModelSpec, seq_len: int, global_batch: int, expert_parallel: int = 1) -> float:
    """T_e under uniform routing: an expert replica serves the tokens of its EP group."""
    tokens = global_batch * seq_len
    return expert_parallel * tokens * model.top_k / model.num_experts if model.is_moe else float(tokens)


def make_plan(
    model: ModelSpec,
    hardware: HardwareProfile,
    run: RunOptions,
    limits: BatchLimits = BatchLimits(),
    defaults: Optional[dict[str, str]] = None,
    overlap: bool = True,
    parallel: Parallelism = Parallelism(),
) -> PlanReport:
    parallel.validate(model.num_experts, hardware)
    problem = resolve_memory_model(Problem(model, hardware, run, parallel))
    mem = MemoryModel(problem)
    sol = solve(mem, limits)
    return build_report(problem, mem, sol, limits, defaults or {}, overlap)


def build_report(problem: Problem, mem: MemoryModel, sol: Solution, limits: BatchLimits,
                 defaults: dict[str, str], overlap: bool = True) -> PlanReport:
    model, hw, run, par = problem.model, problem.hardware, problem.run, problem.parallel
    node = par.node_size(int(hw.devices_per_node.value) if hw.devices_per_node else None)
    g, b = sol.tiles, sol.tile_batch
    pv = problem.evaluate(g, b)
    breakdown = mem.breakdown(g, b)
    layers = model.num_layers
    layer_rows = _rows(problem, pv, "layer")
    outside_rows = _rows(problem, pv, "model")

    def step(field: str) -> int:
        return layers * sum(getattr(r, field) for r in layer_rows) + sum(getattr(r, field) for r in outside_rows)

    fwd, bwd, rec = step("flops_forward"), step("flops_backward"), step("flops_recompute")
    memory = {"total": breakdown.total, "capacity": breakdown.capacity, "usable_capacity": breakdown.usable,
              **breakdown.components}
    pc = mem.params
    report = PlanReport(
        model=ModelInfo(
            name=model.name, source=model.source, params_total=pc.total, params_active=pc.active,
            params_non_embedding=pc.non_embedding, params_per_layer=pc.per_layer,
            hidden_size=model.hidden_size, num_layers=model.num_layers, num_heads=model.num_heads,
            num_kv_heads=model.num_kv_heads, head_dim=model.head_dim, vocab_size=model.vocab_size,
            ffn_size=model.ffn_size, num_experts=model.num_experts, top_k=model.top_k,
        ),
        hardware=HardwareInfo(
            name=hw.name, display_name=hw.display_name, memory_model=hw.memory_model,
            memory_capacity_bytes=hw.memory_capacity_bytes, usable_memory_bytes=hw.usable_capacity_bytes,
            peak_flops_per_s=hw.peak_flops_per_s.value,
            offchip_bandwidth_bytes_per_s=hw.offchip_bandwidth_bytes_per_s.value,
        ),
        inputs=Inputs(
            memory_model=problem.memory_model, seq_len=run.seq_len, recompute=run.recompute, attention=run.attention, causal=run.causal,
            loss=run.loss, accounting=run.accounting, optimizer=run.optimizer,
            bytes_per_element=run.bytes_per_element, **limits.__dict__, defaults=defaults,
        ),
        parallelism=ParallelInfo(
            devices=par.devices, expert_parallel=par.expert_parallel, expert_data_parallel=par.expert_data_parallel,
            zero_stage=par.zero_stage, micro_batches=par.micro_batches, devices_per_node=node,
            overlap_all_to_all=par.overlap_all_to_all,
        ),
        plan=PlanInfo(
            tiles=g, tile_batch=b, global_batch=g * b, tokens_per_step=g * b * run.seq_len,
            devices=par.devices, cluster_tokens_per_step=par.devices * par.micro_batches * g * b * run.seq_len,
            tokens_per_expert=tokens_per_expert(model, run.seq_len, g * b, par.expert_parallel),
            fits=sol.fits and breakdown.fits, binding_constraint=sol.binding_constraint,
            tile_constraint=sol.tile_constraint, explanation=sol.explanation,
            memory_evaluations=sol.evaluations,
        ),
        memory_bytes=memory,
        offchip_bytes=breakdown.offchip,
        state_sharding=[StateRow(component=s.component, part=s.part, params=s.params,
                                 bytes_per_param=s.bytes_per_param, divisor=s.divisor, bytes_per_device=s.bytes,
                                 formula=s.formula) for s in breakdown.state_parts],
        flops_per_step=FlopsPerStep(
            forward=fwd, backward=bwd, total=fwd + bwd, recompute=rec, hardware_total=fwd + bwd + rec,
            elementwise=step("flops_elementwise"),
        ),
        phases=layer_rows,
        outside_layers=outside_rows,
    )
    if report.plan.fits:
        report.throughput, phase_time = _throughput(problem, mem, sol, limits, overlap)
        for row in report.phases:
            row.time_s = float(phase_time[row.name]) / layers
        for row in report.outside_layers:
            row.time_s = float(phase_time[row.name])
    else:
        report.suggestions = suggestions(problem, mem, limits)
    return report


def _throughput(problem: Problem, mem: MemoryModel, sol: Solution, limits: BatchLimits,
                overlap: bool) -> tuple[Throughput, dict[str, Any]]:
    from .throughput import summarize, time_params

    s = summarize(problem, mem, sol, limits, overlap)
    bt = s.best_time
    power_kw = problem.parallel.devices * problem.hardware.power_per_device_w / 1e3
    shares = {k: float(v / bt.step_time_s) for k, v in bt.phase_time_s.items()}
    return Throughput(
        step_time_s=float(bt.step_time_s), tokens_per_s=float(bt.tokens_per_s),
        tokens_per_s_per_kw=float(bt.tokens_per_s) / power_kw, mfu=float(bt.mfu),
        relative_to_dense=s.relative_to_dense,
        tokens_per_s_g1=float(s.g1_time.tokens_per_s) if s.g1_time else None,
        relative_to_dense_g1=s.relative_to_dense_g1,
        step_time_s_g1=float(s.g1_time.step_time_s) if s.g1_time else None,
        tile_batch_g1=s.g1.tile_batch if s.g1.fits else None,
        dense_tokens_per_s=float(s.dense_time.tokens_per_s) if s.dense_time else None,
        dense_global_batch=s.dense.tiles * s.dense.tile_batch if s.dense.fits else None,
        tiling_overhead_s=float(bt.tiling_overhead_s), stream_bound_share=float(bt.stream_bound_share),
        overlap_streaming=overlap, compute_efficiency=time_params(problem)[0],
        phase_share=shares, dominant_phase=max(shares, key=shares.get),  # type: ignore[arg-type]
        communication_s={k: float(v) for k, v in bt.communication_s.items()},
    ), bt.phase_time_s


def suggestions(problem: Problem, mem: MemoryModel, limits: BatchLimits) -> list[str]:
    """What would fit when the plan does not: recomputation, FlashAttention, shorter sequences, more devices."""
    out: list[str] = []
    fixed = sum(mem.fixed.values())
    if not mem.offchip_fits:
        state = sum(v for k, v in mem.offchip.items() if k != "capacity")
        out.append(f"weights, gradients and optimizer state ({state / 1e12:.2f} TB) exceed the off-wafer store "
                   f"({mem.offchip['capacity'] / 1e12:.2f} TB in the profile): a larger MemoryX configuration is needed")
        return out
    if fixed > mem.usable:
        if mem.streaming:
            out.append(f"streamed weight and gradient buffers alone take {fixed / 1e9:.1f} GB of {mem.usable / 1e9:.1f} GB usable")
            return out
        out.append(f"weights, gradients and optimizer state take {fixed / 1e9:.1f} GB per device of "
                   f"{mem.usable / 1e9:.1f} GB usable")
        if problem.hardware.family == "wse":
            streamed = MemoryModel(problem.with_run(memory_model="weight_streaming"))
            if streamed.fits(1, 1):
                sol = solve(streamed, BatchLimits(max_global_batch=limits.max_global_batch))
                out.append(f"--memory-model weight_streaming (or auto) fits G = {sol.tiles}, b = {sol.tile_batch}: "
                           "weights and optimizer state off-wafer in MemoryX")
        if problem.hardware.multi_device:
            from .cluster import min_devices

            zero = max(problem.parallel.zero_stage, 1)
            fit = min_devices(problem.with_parallel(zero_stage=zero), escalate=True)
            if fit is not None:
                p = fit.parallel
                extra = " --recompute full" if fit.run.recompute != problem.run.recompute else ""
                out.append(f"--devices {p.devices} --ep {p.expert_parallel} --zero {p.zero_stage}{extra} fits one "
                           f"sequence per device (smallest power-of-two device count; EP = gcd(N, E))")
        return out
    run = problem.run
    trials = []
    if run.recompute != "full":
        trials.append(("--recompute full", {"recompute": "full"}))
    if run.attention != "flash":
        trials.append(("--attention flash", {"attention": "flash"}))
    for flag, change in trials:
        alt = MemoryModel(problem.with_run(**change))
        if alt.fits(1, 1):
            sol = solve(alt, BatchLimits(max_global_batch=limits.max_global_batch))
            out.append(f"{flag} fits G = {sol.tiles}, b = {sol.tile_batch} (G*b = {sol.tiles * sol.tile_batch})")
    # the longest sequence that fits one sequence
    if mem.total(1, 1, seq_len=1) <= mem.usable:
        lo, hi = 1, run.seq_len
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if mem.total(1, 1, seq_len=mid) <= mem.usable:
                lo = mid
            else:
                hi = mid - 1
        out.append(f"--seq {lo} is the longest sequence that fits one sequence (G = b = 1)")
    if limits.global_batch is not None and mem.fits(limits.global_batch, 1):
        out.append(f"--global-batch {limits.global_batch} fits as {limits.global_batch} tiles of 1 sequence (drop --tiles/--tile-batch)")
    return out
