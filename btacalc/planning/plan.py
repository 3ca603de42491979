"""`plan`: solve the batch shape for a model on a device and report memory, FLOPs, phases and
throughput (against G = 1 and against the dense model with the same active parameters).

One candidate search per problem (`solver.search`) gives the plan under both objectives and the best
untiled shape; the dense model needs a search of its own. The model itself is evaluated once per
problem (and once more for the parameter counts): every shape after that is arithmetic on the
formulas' coefficients.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Optional, Sequence

import numpy as np

from .. import profiling
from ..catalogue.compiled import PhaseValues
from ..config.model import LayerKind
from ..config.execution import DEFAULT_FSDP_IMPL, ExecutionRequest
from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec
from ..config.tp_overlap import ub_overlaps
from ..config.workspaces import Workspace
from ..model.gpu.sm_share import dp_ctas, nccl_ub_path
from ..model.gpu.tp_overlap import userbuffers_timed
from ..model.memory import MemoryModel
from ..model.params import short_table
from ..model.problem import Evaluation, Problem
from ..model.solver import PointLimits, Search, Solution, search, solve_density
from ..model.timing import StepTime, compute_efficiency, step_time
from .report import (AlternativePlan, DeviceMemory, FlopsPerStep, GemmShape, HardwareInfo, Inputs, LayerKindRows,
                     ModelInfo, ParallelInfo, PhaseRow, PlanInfo, PlanReport, StageRow, StateRow, Throughput,
                     WorkspaceRow)
from .expected_error import expected_error, kind_of
from .precision import mark_precision
from .resolve import resolve_problem
from .suggest import suggestions, verdict
from .wafer import wafer_info



def streaming_overlap(problem: Problem) -> Optional[bool]:
    """Whether the weight stream overlaps compute; None where no weights stream (a GPU plan, a wafer plan with the
    state resident: review36, a GPU plan's JSON said true)."""
    return problem.run.overlap_streaming if problem.memory_model == "weight_streaming" else None

def make_plan(model: ModelSpec, hardware: HardwareProfile, request: ExecutionRequest = ExecutionRequest(), *,
              baselines: bool = True) -> PlanReport:
    """Resolve the execution, solve the batch shape and build the report. `baselines` False leaves out the
    G = 1 and dense-model plans the report compares against (their fields None): a prediction of the run
    itself (`validate --measured`) reads only the plan's own step and memory."""
    with profiling.stage("resolve"):
        problem = resolve_problem(model, hardware, request)
    return plan_problem(problem, baselines=baselines)


def plan_problem(problem: Problem, *, baselines: bool = True) -> PlanReport:
    """The plan of an already-resolved problem (its memory model resolved)."""
    problem, sol, found = solve_problem(problem)
    with profiling.stage("report (G = 1, dense, step times)"):
        return build_report(problem, MemoryModel(problem), sol, found, baselines=baselines)


def solve_problem(problem: Problem) -> tuple[Problem, Solution, Search]:
    """The solver's shape under the execution's objective, the problem at the chosen M, and the
    candidate search (which also holds the other objective's choice and the best G = 1 shape)."""
    limits, objective = problem.execution.limits, problem.execution.objective
    limits.validate(problem.layout.data_parallel)
    with profiling.stage("solve"):
        found = search(problem, PointLimits.of(limits), objective)
        sol = solve_density(MemoryModel(problem), limits) if objective == "density" else found.solution(0)
    if sol.micro_batches != problem.layout.micro_batches:
        problem = problem.with_layout(micro_batches=sol.micro_batches)
    return problem, sol, found


def _rows(pv: PhaseValues, scope: str, problem: Problem) -> list[PhaseRow]:
    """One device's phases. The catalogue counts a routed phase's parameters, and the weights its forward reads,
    over all E experts (formulas/moe.toml: the timing model divides); a GPU device holds 1/(EP x ETP) of them
    (freshuser23: the row showed 32 GB and 32 FLOP/byte where one device reads 2 GB at about 490), as
    model/gpu/costs.py `_traffic` times them. A wafer holds every expert (EP 1)."""
    lay = problem.layout
    shards = lay.expert_parallel * lay.expert_tensor_parallel if problem.hardware.family == "gpu" else 1
    rows = []
    for phase in pv.phases:
        if phase.scope != scope:
            continue
        v = lambda q: pv.value(phase.name, q)  # noqa: E731
        params, moved = v("params"), v("bytes_moved")
        if phase.param_bucket == "routed" and shards > 1:
            moved = moved - problem.run.bytes_per_element * params * (1 - 1 / shards)
            params = params / shards
        rows.append(PhaseRow(
            name=phase.name, group=phase.group, batch=phase.batch, params=int(params),
            flops_forward=int(v("flops_fwd")), flops_backward=int(v("flops_bwd")),
            flops_recompute=int(v("flops_recompute")), flops_elementwise=int(v("flops_elementwise")),
            stored_activation_bytes=int(v("stored")), recompute_bytes=int(v("recompute_bytes")),
            transient_bytes=int(v("transient")), bytes_moved=int(moved),
            arithmetic_intensity=float(v("flops_fwd") / moved) if moved else 0.0,
        ))
    return rows


def tokens_per_expert(model: ModelSpec, seq_len: int, global_batch: int, expert_parallel: int = 1,
                      shards: float = 1.0) -> float:
    """T_e under uniform routing: an expert replica serves the tokens of its EP group. `shards` =
    ETP/(TP·CP): the EP x ETP ranks of an expert group each hold 1/(TP·CP) of a micro-batch's tokens."""
    tokens = global_batch * seq_len
    return expert_parallel * shards * tokens * model.top_k / model.num_experts if model.is_moe else float(tokens)


def device_memory(hw: HardwareProfile, tensors: int, workspaces: Sequence[Workspace]) -> Optional[DeviceMemory]:
    """A GPU's allocated and reserved bytes for `tensors` bytes of btacalc's tensors beside the run's library
    `workspaces` (`Problem.library_workspaces`; None on a wafer)."""
    res = hw.reserves
    if res is None:
        return None
    ws = sum(w.bytes for w in workspaces)
    return DeviceMemory(
        allocated_bytes=res.allocated_bytes(tensors, ws), reserved_bytes=res.reserved_bytes(tensors, ws),
        device_bytes=res.device_bytes(tensors, ws), capacity_bytes=hw.memory_capacity_bytes,
        cuda_context_bytes=int(res.cuda_context_bytes.value),
        communicator_buffers_bytes=int(res.communicator_buffers_bytes.value),
        library_workspace_bytes=ws,
        library_workspaces=[WorkspaceRow(name=w.name, library=w.library, count=w.count, bytes_each=w.bytes_each,
                                         bytes=w.bytes, when=w.when, source=w.source) for w in workspaces],
        allocator_fragmentation_fraction=res.allocator_fragmentation_fraction.value,
        capacity_kind=hw.memory.offchip_memory_bytes.kind)


def _model_info(problem: Problem, mem: MemoryModel) -> ModelInfo:
    model, pc = problem.model, mem.params
    # semantics20: a learned table the run grows to the sequence, as its launch builds it, named like an override
    rows = short_table(model, int(problem.run.seq_len))
    name = f"{model.name} (learned positions {rows:,} -> {problem.run.seq_len:,})" if rows else model.name
    return ModelInfo(
        name=name, source=model.source, params_total=pc.total, params_active=pc.active,
        params_non_embedding=pc.non_embedding, params_per_layer=pc.per_layer,
        hidden_size=model.hidden_size, num_layers=model.num_layers, num_heads=model.num_heads,
        num_kv_heads=model.num_kv_heads, head_dim=model.head_dim, vocab_size=model.vocab_size,
        ffn_size=model.ffn_size, num_experts=model.num_experts, top_k=model.top_k,
    )


def _hardware_info(problem: Problem) -> HardwareInfo:
    hw = problem.hardware
    return HardwareInfo(
        name=hw.name, display_name=hw.display_name, memory_model=hw.defaults.memory_model,
        memory_capacity_bytes=hw.memory_capacity_bytes, usable_memory_bytes=hw.usable_capacity(problem.workspace_bytes),
        peak_flops_per_s=hw.chip.peak_flops_per_s.value,
        offchip_bandwidth_bytes_per_s=hw.memory.offchip_bandwidth_bytes_per_s.value,
        devices_per_host=hw.system.host_devices,
        compute_capability=hw.chip.capability if hw.family == "gpu" else None,
    )


def _inputs(problem: Problem) -> Inputs:
    """The run options as resolved, and the batch limits as the user gave them."""
    run, ex = problem.run, problem.execution
    given = {**ex.limits.__dict__, "micro_batches": None}
    if ex.request is not None:
        given = {**ex.request.limits.__dict__, "micro_batches": ex.request.micro_batches}
    return Inputs(
        memory_model=problem.memory_model, seq_len=run.seq_len, recompute=run.recompute, attention=run.attention,
        causal=run.causal, attention_kernel=run.attention_kernel, loss=run.loss, accounting=run.accounting, optimizer=run.optimizer,
        bytes_per_element=run.bytes_per_element, **given, gradient_bytes=run.gradient_bytes,
        routing_imbalance=run.routing_imbalance, capacity_factor=run.capacity_factor,
        pad_to_capacity=run.pad_to_capacity, objective=ex.objective, defaults=ex.default_reasons,
        changed_overlaps=dict(ex.changed_overlaps),
        precision=run.precision, te_recipe=run.recipe.te_recipe, fp8_param_gather=run.low_precision_param_gather,
        fp8_attention=run.fp8_attention,
        rht_cast_fusion=run.rht_cast_fusion, te_version=run.te_version if problem.hardware.family == "gpu" else "",
        gradient_accumulation_fusion=run.gradient_accumulation_fusion,
        checkpoint_early_stop=run.checkpoint_early_stop, eager_kernels=run.eager_kernels,
        transformer_engine=run.transformer_engine and problem.hardware.family == "gpu",  # a wafer runs no TE
        expert_grouped_gemm=run.expert_grouped_gemm,
        deterministic_mode=run.deterministic_attention and run.nccl_ring_only,
        cpu_offload_layers=run.cpu_offload_layers, moment_bytes=run.moment_bytes, routing_weights=run.routing_weights,
        precision_aware_optimizer=run.precision_aware,
        optimizer_fp8_recipe=run.optimizer_fp8_recipe, master_weights=problem.features()["master"],
        bf16_layers_at_start=run.bf16_layers_at_start, bf16_layers_at_end=run.bf16_layers_at_end,
        recompute_layers=min(run.recompute_layers, problem.model.num_layers),
        bf16_layers=sorted(problem.model.bf16_layer_positions(run.bf16_ends)),
    )



def _parallel_info(problem: Problem) -> ParallelInfo:
    lay = problem.layout
    return ParallelInfo(
        devices=lay.devices, expert_parallel=lay.expert_parallel, expert_data_parallel=lay.expert_data_parallel,
        zero_stage=lay.zero_stage, micro_batches=lay.micro_batches, devices_per_node=lay.devices_per_node,
        overlap_all_to_all=lay.overlap_all_to_all, deepep=lay.deepep, allgather_dispatcher=lay.allgather_dispatcher,
        hybridep=lay.hybridep, dispatcher_sms=lay.dispatcher_sms,
        nccl_ub=lay.nccl_ub, nvls=lay.nvls, nccl_ub_path=nccl_ub_path(problem) if problem.hardware.family == "gpu"
        else "", ddp_bucket_params=lay.ddp_bucket_params,
        ddp_num_buckets=lay.ddp_num_buckets, microbatch_group=lay.microbatch_group,
        vocab_multiple=lay.vocab_multiple, dp_collective_ctas=dp_ctas(problem),
        cuda_graph_scope=list(lay.cuda_graph_scope),
        tensor_parallel=lay.tensor_parallel,
        sequence_parallel=lay.sequence_parallel, pipeline_parallel=lay.pipeline_parallel,
        virtual_pipeline=lay.virtual_pipeline, context_parallel=lay.context_parallel,
        expert_tensor_parallel=lay.expert_tensor_parallel, data_parallel=lay.data_parallel, fsdp=lay.fsdp,
        fsdp_impl=lay.fsdp_impl or DEFAULT_FSDP_IMPL,
        **_stages_info(problem),
        overlaps={k: bool(v) for k, v in asdict(lay.overlap).items() if k != "max_connections"},
        cuda_max_connections=lay.overlap.max_connections, tp_overlap_table=_ub_table_timed(problem),
    )


TE_DEFAULT_TABLE = "TransformerEngine's defaults (btacalc/data/tp_overlap.toml)"


def _ub_table_timed(problem: Problem) -> Optional[str]:
    """Which userbuffers table model/gpu/tp_overlap.py times: None where it times none (`userbuffers_timed`: no
    TP-comm overlap, TP 1 or no sequence parallelism), TE's defaults, or the run's own table (its entries' sources)."""
    lay = problem.layout
    if not userbuffers_timed(lay):
        return None
    if lay.tp_overlap_cfg is None:
        return TE_DEFAULT_TABLE
    own = sorted({o.source for o in lay.tp_overlap_cfg} - {o.source for o in ub_overlaps()})
    return f"the run's own ({'; '.join(own)})" if own else TE_DEFAULT_TABLE


def _stages_info(problem: Problem) -> dict[str, Any]:
    """The pipeline split as Megatron builds it (config/pipeline.py) and the options that build it."""
    model = problem.model
    placed = problem.layout.placement(model.num_layers, model.mtp_layers if problem.run.multi_token_prediction else 0)
    split = placed.split
    return {"pipeline_split": placed.method, "stage_layers": [len(placed.stage_layers(p)) for p in range(placed.pp)],
            "first_stage_layers": split.first_stage_layers, "last_stage_layers": split.last_stage_layers,
            "pipeline_layout": split.pipeline_layout}


def _plan_info(problem: Problem, sol: Solution, fits: bool, found: Search) -> PlanInfo:
    g, b, lay, seq = sol.tiles, sol.tile_batch, problem.layout, problem.run.seq_len
    return PlanInfo(
        tiles=g, tile_batch=b, global_batch=g * b, tokens_per_step=g * b * seq, devices=lay.devices,
        cluster_tokens_per_step=lay.data_parallel * lay.micro_batches * g * b * seq,
        tokens_per_expert=_tokens_per_expert(problem, g * b),
        fits=fits, binding_constraint=sol.binding_constraint, tile_constraint=sol.tile_constraint,
        explanation=sol.explanation, memory_evaluations=sol.evaluations, objective=problem.execution.objective,
        micro_batches=lay.micro_batches, step_batch=lay.data_parallel * lay.micro_batches * g * b,
        alternative=_alternative(problem, sol, found),
    )


def _tokens_per_expert(problem: Problem, n: int) -> float:
    lay = problem.layout
    return tokens_per_expert(problem.model, problem.run.seq_len, n, lay.expert_parallel,
                             lay.expert_tensor_parallel / (lay.tensor_parallel * lay.context_parallel))


def _alternative(problem: Problem, sol: Solution, found: Search) -> Optional[AlternativePlan]:
    """The other objective's plan, when it differs from this one."""
    other = next(o for o in ("throughput", "density") if o != problem.execution.objective)
    alt = found.solution(0, other)
    if not alt.fits or (alt.tiles, alt.tile_batch, alt.micro_batches) == (sol.tiles, sol.tile_batch, sol.micro_batches):
        return None
    lay, seq, n = problem.layout, problem.run.seq_len, alt.tiles * alt.tile_batch
    return AlternativePlan(
        objective=other, tiles=alt.tiles, tile_batch=alt.tile_batch, micro_batches=alt.micro_batches,
        global_batch=n, step_batch=lay.data_parallel * alt.micro_batches * n,
        tokens_per_expert=_tokens_per_expert(problem, n),
        tokens_per_s=alt.tokens_per_s or 0.0)


def representative_kind(ev: Evaluation) -> tuple[LayerKind, PhaseValues]:
    """The layer kind the report's `phases` show: the most common one (the later on a tie)."""
    return max(ev.layers, key=lambda kp: kp[0].count)


def build_report(problem: Problem, mem: MemoryModel, sol: Solution, found: Search, *,
                 baselines: bool = True) -> PlanReport:
    """The report of a solved shape: what the plan holds (`_shape_report`), then its step time and each phase's
    share of it where it fits, or what would make it fit where it does not, and the wafer view on a wafer."""
    if not (sol.fits and mem.fits(sol.tiles, sol.tile_batch)):
        sol = verdict(problem, mem, sol)  # one cause named: memory, a fixed size or a cap
    ev = problem.evaluate(sol.tiles, sol.tile_batch)
    report = _shape_report(problem, mem, sol, found, ev)
    if problem.hardware.family == "gpu":
        mark_precision(problem, ev, report)
    best_time = None
    if report.plan.fits:
        summary = summarize(problem, mem, sol, found) if baselines else own_step(problem, sol)
        report.throughput = _throughput(problem, summary)
        if baselines:  # a user's plan; a measured run's prediction (validate) is what the expected error is made of
            report.throughput.expected_error = expected_error(kind_of(problem))
        best_time = summary.best_time
        PhaseTimes.of(best_time).fill(report, representative_kind(ev)[0])
    else:
        report.suggestions = suggestions(problem, mem, solve_problem)
    if problem.hardware.family == "wse":
        report.wafer = wafer_info(problem, mem, sol, best_time)
    return report


def _shape_report(problem: Problem, mem: MemoryModel, sol: Solution, found: Search, ev: Evaluation) -> PlanReport:
    """The report before any step time: the model, device, layout and plan, the memory (per component, per
    state shard, per pipeline stage), the FLOPs per step and each phase's row."""
    breakdown = mem.breakdown(sol.tiles, sol.tile_batch)
    _, pv = representative_kind(ev)

    def step(q: str) -> int:
        return int(ev.layers_total(q)) + int(ev.outside_total(q))

    fwd, bwd, rec = step("flops_fwd"), step("flops_bwd"), step("flops_recompute")
    return PlanReport(
        model=_model_info(problem, mem), hardware=_hardware_info(problem), inputs=_inputs(problem),
        parallelism=_parallel_info(problem), plan=_plan_info(problem, sol, sol.fits and breakdown.fits, found),
        memory_bytes={"total": breakdown.total, "capacity": breakdown.capacity, "usable_capacity": breakdown.usable,
                      **breakdown.components},
        offchip_bytes=breakdown.offchip,
        device_memory=device_memory(problem.hardware, breakdown.total, problem.library_workspaces),
        state_sharding=[StateRow(component=s.component, part=s.part, params=int(s.params),
                                 bytes_per_param=s.bytes_per_param, divisor=int(s.divisor), bytes_per_device=int(s.bytes),
                                 formula=s.formula) for s in breakdown.state_parts if s.params],
        memory_stages=[StageRow(stage=row.stage, layers=int(row.layers), in_flight=int(row.in_flight),
                                components={k: int(v) for k, v in row.components.items()}, total=int(row.total))
                       for row in breakdown.stages],
        flops_per_step=FlopsPerStep(forward=fwd, backward=bwd, total=fwd + bwd, recompute=rec,
                                    hardware_total=fwd + bwd + rec, elementwise=step("flops_elementwise")),
        phases=_rows(pv, "layer", problem),
        outside_layers=_rows(ev.outside, "model", problem),
        layer_kinds=[LayerKindRows(name=k.name, count=k.count, phases=_rows(kpv, "layer", problem))
                     for k, kpv in ev.layers] if len(ev.layers) > 1 else [],
    )


@dataclass(frozen=True)
class PhaseTimes:
    """A plan's step time as its phase rows show it: each phase's time in one layer of a kind (or once outside
    the layers) and its GEMMs, keyed (layer kind, phase) with "" the kind of the phases outside the layers."""

    # a phase's time in one layer of a kind: the wafer model's own, and a GPU plan's per micro-batch (each kind's
    # own part, gpu/timing.py `_kind_phase_times`, freshuser26)
    per_layer: dict[tuple[str, str], Any]
    phase_time: dict[str, Any]  # a phase's time in the step (the GPU critical stage's)
    repeats: Optional[dict[str, Any]]  # the layers the critical stage repeats a phase in (None: the kind's count)
    gemms: dict[tuple[str, str], list[GemmShape]]

    @classmethod
    def of(cls, best: StepTime) -> "PhaseTimes":
        gemms = {key: [_gemm_shape(g) for g in rows] for key, rows in best.details.get("gemms", {}).items()}
        return cls(best.kind_phase_time_s, best.phase_time_s, best.phase_repeats, gemms)

    def in_layer(self, kind_name: str, count: int, phase: str) -> float:
        """A phase's time in one layer of a kind: the time model's own (`per_layer`), else (a phase it lacks) the
        critical stage's time in the step over the layers it repeats in."""
        if (kind_name, phase) in self.per_layer:
            return float(self.per_layer[(kind_name, phase)])
        return self._over(phase, count)

    def outside(self, phase: str) -> float:
        """A phase outside the layers: its time in the step over the times the critical stage runs it."""
        return self._over(phase, 1)

    def _over(self, phase: str, count: int) -> float:
        n = self.repeats.get(phase, 0) if self.repeats is not None else count
        return float(self.phase_time.get(phase, 0.0)) / n if n else 0.0

    def fill(self, report: PlanReport, kind: LayerKind) -> None:
        """Set `time_s` and `gemms` on every phase row of the report: the representative kind's, each kind's,
        and those outside the layers."""
        tables = [(kind.name, kind.count, report.phases)]
        tables += [(rows.name, rows.count, rows.phases) for rows in report.layer_kinds]
        for name, count, rows in tables:
            for row in rows:
                row.time_s = self.in_layer(name, count, row.name)
                row.gemms = self.gemms.get((name, row.name), [])
        for row in report.outside_layers:
            row.time_s = self.outside(row.name)
            row.gemms = self.gemms.get(("", row.name), [])


def _gemm_shape(row: Any) -> GemmShape:
    """A GEMM of the time model (model/gpu/part.GemmRow, one plan: scalars) as the report's row."""
    return GemmShape(name=row.name, m=float(row.m), n=float(row.n), k=float(row.k), groups=float(row.groups),
                     launches=float(row.launches), efficiency=float(row.efficiency),
                     backward_efficiency=float(row.backward_efficiency), binding=str(row.binding),
                     batch=float(row.batch), causal_fraction=float(row.causal_fraction), kernel=row.kernel)


@dataclass(frozen=True)
class ThroughputSummary:
    """Step times of the plan, of G = 1 (the objective's best untiled batch) and of the dense model
    with the same active parameters at its own best plan."""

    best: Solution
    g1: Solution
    dense: Solution
    best_time: StepTime
    g1_time: Optional[StepTime]
    dense_time: Optional[StepTime]

    @property
    def relative_to_dense(self) -> Optional[float]:
        if self.dense_time is None or not self.best.fits:
            return None
        return float(self.best_time.tokens_per_s / self.dense_time.tokens_per_s)

    @property
    def relative_to_dense_g1(self) -> Optional[float]:
        if self.dense_time is None or self.g1_time is None:
            return None
        return float(self.g1_time.tokens_per_s / self.dense_time.tokens_per_s)


def dense_problem(problem: Problem) -> Problem:
    """The dense model with the same active parameters (one FFN of width k*f), on the same devices."""
    dense = problem.with_model(problem.model.dense_equivalent())
    return dense.with_layout(expert_parallel=1)


def summarize(problem: Problem, mem: MemoryModel, best: Solution, found: Search) -> ThroughputSummary:
    """The plan's step time, the best G = 1 plan's and the dense model's best plan's, under the
    plan's objective. Density: G = 1 and the dense plan free of the user's shape (the design card's
    comparison); throughput: G = 1 under the user's limits (so the BTA gain is never below 1)."""
    limits, objective = problem.execution.limits, problem.execution.objective
    free = limits.free()
    dense = dense_problem(problem)
    if objective == "density":
        g1 = solve_density(mem, replace(limits.free(keep_global_batch=False), tiles=1))
        dense_sol = solve_density(MemoryModel(dense), free)
    else:
        if limits.tiles is None and limits.tile_batch is None:
            g1 = found.solution(0, "g1")
        else:
            g1 = search(problem, PointLimits.of(replace(limits, tiles=1, tile_batch=None)), objective).solution(0)
        dense_sol = search(dense, PointLimits.of(free), objective).solution(0)
    profiling.count("step-time passes", 1 + g1.fits + dense_sol.fits)
    best_t = step_time(problem, best.tiles, best.tile_batch)
    g1_t = step_time(problem, 1, g1.tile_batch, micro_batches=g1.micro_batches) if g1.fits else None
    dense_t = step_time(dense, dense_sol.tiles, dense_sol.tile_batch, micro_batches=dense_sol.micro_batches) \
        if dense_sol.fits else None
    return ThroughputSummary(best, g1, dense_sol, best_t, g1_t, dense_t)


def own_step(problem: Problem, best: Solution) -> ThroughputSummary:
    """The plan's step time alone: no G = 1 or dense baseline (each reads as not fitting, its time None)."""
    none = replace(best, fits=False)
    return ThroughputSummary(best, none, none, step_time(problem, best.tiles, best.tile_batch), None, None)


def _throughput(problem: Problem, s: ThroughputSummary) -> Throughput:
    bt = s.best_time
    power_kw = problem.layout.devices * problem.hardware.power_per_device_w / 1e3
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
        dense_micro_batches=s.dense.micro_batches if s.dense.fits else None,
        tiling_overhead_s=float(bt.tiling_overhead_s), stream_bound_share=float(bt.stream_bound_share),
        overlap_streaming=streaming_overlap(problem), compute_efficiency=compute_efficiency(problem),
        phase_share=shares, dominant_phase=max(shares, key=lambda k: shares[k]),
        communication_s={k: float(v) for k, v in bt.communication_s.items()},
        collectives=[asdict(row) for row in bt.details.get("collectives", [])],
        critical_stage=int(bt.details.get("critical_stage", 0)),
        routing_sensitivity=routing_sensitivity(problem, s.best.tiles, s.best.tile_batch),
    )


# Routing imbalance the sensitivity check adds: the busiest expert-parallel rank 25% busier than planned.
SENSITIVITY_STEP = 1.25


def routing_sensitivity(problem: Problem, tiles: Any, tile_batch: Any, micro_batches: Any = None) -> Any:
    """tokens/s with the routing imbalance raised 25% over tokens/s as planned (MoE with EP > 1 only;
    ints, or arrays of shapes): below 0.95 the plan is sensitive to routing imbalance (the output says so)."""
    if not problem.model.is_moe or problem.layout.expert_parallel == 1 or problem.hardware.family != "gpu":
        return None
    busier = problem.with_run(routing_imbalance=problem.run.routing_imbalance * SENSITIVITY_STEP)
    base = step_time(problem, tiles, tile_batch, micro_batches=micro_batches)
    worse = step_time(busier, tiles, tile_batch, micro_batches=micro_batches)
    ratio = worse.tokens_per_s / base.tokens_per_s
    return ratio if isinstance(ratio, np.ndarray) else float(ratio)


