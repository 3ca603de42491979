"""Step time of GPU training under a Megatron layout.

Per micro-batch, stage j takes (per device; `costs.py` for the roofline of each phase)

    t_j = sum over its real layers (stages.py: Megatron's placement, by kind) of (compute + exposed TP + exposed CP + exposed EP all-to-all)
          + its parts outside the layers + exposed pipeline sends + exposed per-micro-batch ZeRO-2/3
          traffic + G x layers x the per-tile overhead

and the optimizer step takes

    step = max_j t_j x (M + (PP - 1)/VP) + max_j (exposed gradient reduction)
           + max_j (exposed weight all-gather), or sum_j of it when overlapped without interleaving (`_Sync`)
           + max_j (optimizer update + gradient norm of stage j's local shard)

with t_j also holding the exposed kernel-launch time of a micro-batch (`fixed.py`).

(1F1B / interleaved pipeline: M micro-batches plus the bubble, Narayanan et al. 2021 §2.2). Overlap
rules are the layout's named options (Megatron-Core's names; defaults in config/execution.py REASONS):
- tensor-parallel collectives: exposed, or with --tp-comm-overlap the larger of what exceeds the layer's compute
  and what TransformerEngine's userbuffers overlap costs GEMM by GEMM (tp_overlap.py: SM margins, pipeline tails,
  ring-exchange excess, bulk SM share; with sequence parallelism);
- context-parallel K/V ring (cp_comm_type p2p, Megatron's default): asynchronous sends behind the
  attention core, only the excess shows;
- expert-parallel all-to-all (+ ETP gather): exposed, or with --overlap-a2a
  (overlap_moe_expert_parallel_comm: another micro-batch's compute hides it) what exceeds the layer,
  plus the compute its DeepEP / HybridEP kernels' SMs take from the layer while hidden
  (`a2a_sm_share` = min(a2a, compute) x reserved SMs / SMs, sm_share.py);
- pipeline sends: exposed, or with --overlap-p2p behind the stage's compute;
- data-parallel gradient reduction / weight all-gather: exposed, or with --overlap-grad-reduce /
  --overlap-param-gather behind the last micro-batch's backward / the first one's forward (interleaved:
  model chunk 0's share is exposed, the other chunks' behind the chunk backwards after / forwards before
  them; later stages reduce during the backwards still to come on the stages before them, and without
  interleaving wait for their one-bucket gathers whole: as Megatron-Core schedules and buckets them,
  `_ChunkSync`, collectives.StageBuckets); ZeRO-3 and
  FSDP prefetch their per-micro-batch gathers behind compute (Megatron-FSDP turns the overlaps on); every
  one of these NCCL ring collectives takes its channels' SMs from the compute it hides behind (`dp_sm_share` =
  the hidden per-micro-batch traffic x collective channels / SMs, sm_share.py; the hidden per-step
  gradient reduction / weight all-gather pays the same, inside the step's synchronisation).
tokens/s = DP·M·G·b·s / step; MFU = model FLOPs (the whole model, t = CP = 1) / (step x devices x peak).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np

from ...catalogue.constants import constants
from ...memo import plain_key
from ..arrays import is_array, largest, maximum, minimum, where
from ..problem import Evaluation, Problem
from ..state import bytes_per_param
from ..steptime import StepTime, tile_overhead_s
from .merged_pair import LayerNodes, NodeHost, host_pair_time, merged_exposed, pair_time
from .collectives import (CollectiveRow, DataParallelTimes, StageBuckets, all_to_all_time, allgather_dispatch_time,
                          count_gather_time, describe_allgather_dispatch, describe_count_gather, all_to_all_wire_bytes, context_parallel_time,
                          data_parallel_collective, data_parallel_groups, data_parallel_kind, data_parallel_times, data_parallel_traffic, describe, part_buckets,
                          describe_all_to_all, describe_expert_tensor_parallel, expert_exchange_time, expert_tensor_parallel_time,
                          pipeline_p2p_time, ring_share, ring_time, tensor_parallel_kind, tensor_parallel_time)
from .costs import ISSUED_COUNTS, NO_FLOPS_BACKWARD_SHARE, layer_parts, outside_parts
from .part import Part, new_part
from .fixed import (FixedCosts, SyncSplit, dispatcher_syncs, fixed_costs, fsdp2_copy_s, gpu_forward_share,
                    host_time, launch_time, launch_time_synced, wgrad_accumulate_s)
from .memory import stage_key, stage_params
from .sm_share import dp_sm_share_loss, dp_step_sm_share, sm_share_loss

# The per-micro-batch ZeRO-2 / ZeRO-3 / FSDP traffic mixes all-gathers and reduce-scatters; it is charged the
# reduce-scatter's CTAs, the larger count under nccl_ub's NVLS path (sm_share.NVLS_UB_FACTORS), equal otherwise
PER_MICRO_BATCH_KIND = "reduce_scatter"
from .tp_overlap import layer_overlap_s
from .schedule import step_makespan, warmup_forwards
from .stages import PipelineStages


@dataclass
class _Slowest:
    """A stage's per-micro-batch terms and raw communication (before overlap); as the running choice over
    stages, the slowest so far, elementwise over layouts: the step's critical path."""

    terms: dict[str, Any]
    raw: dict[str, Any]

    @property
    def micro_batch_s(self) -> Any:
        return sum(self.terms.values())

    def pick(self, slower: Any, st: "_Slowest") -> "_Slowest":
        """`st` where it is `slower`, else this one."""
        if not is_array(slower):
            return _Slowest(st.terms, st.raw) if slower else self
        return _Slowest({k: where(slower, st.terms[k], self.terms[k]) for k in st.terms},
                        {k: where(slower, st.raw[k], self.raw[k]) for k in st.raw})


@dataclass(frozen=True)
class _Sync:
    """A stage's exposed data-parallel synchronisation (`_ChunkSync`), with the SMs its hidden part takes:
    the gradient reduction at the step's end and the parameter all-gather at its start."""

    at_end: Any
    at_start: Any

    @classmethod
    def of_stage(cls, problem: Problem, chunks: "_ChunkSync", dp: DataParallelTimes, compute: tuple[Any, Any]) -> "_Sync":
        """Stage `chunks.stage`'s, from its data-parallel times and its (forward + backward, backward) of one
        micro-batch. The buckets' ring collectives hold their channels' SMs while hidden behind compute
        (sm_share.py); a later stage's reduce without interleaving hides in the cooldown, where the stage
        computes nothing."""
        o = problem.layout.overlap
        total, backward = compute
        reduce = where(o.grad_reduce, chunks.exposed_reduce(dp.reduce_per_step, backward), dp.reduce_per_step)
        gather = where(o.param_gather, chunks.exposed_gather(dp.gather_per_step, total - backward), dp.gather_per_step)
        idle = (chunks.virtual == 1) & (chunks.stage > 0)
        ends_sm = dp_step_sm_share(problem, where(idle, 0.0, dp.reduce_per_step - reduce), 0.0)
        return cls(reduce + ends_sm, gather + dp_step_sm_share(problem, 0.0, dp.gather_per_step - gather))

    @staticmethod
    def of_step(lay: Any, stages: list["_Sync"]) -> Any:
        """The step's: the stages' reductions run side by side after stage 0's last backward (the
        slowest counts); their gathers too with interleaving (all launched at the step's start) or when
        not overlapped (in the optimizer step, distrib_optimizer.py L3189-3196), while the overlapped
        gathers without interleaving each hold the first micro-batch's forward on its way down the
        pipeline, so they add up (`_ChunkSync`)."""
        at_end, slowest, total = stages[0].at_end, stages[0].at_start, stages[0].at_start
        for st in stages[1:]:
            at_end, slowest, total = maximum(at_end, st.at_end), maximum(slowest, st.at_start), total + st.at_start
        chained = (lay.virtual_pipeline == 1) & lay.overlap.param_gather
        return at_end + where(chained, total, slowest)


@dataclass
class _Stage(_Slowest):
    """One stage's per-micro-batch time split into its terms, and its per-step synchronisation (the
    step's is the maximum over stages)."""

    sync: "_Sync"  # exposed data-parallel synchronisation, per step
    sync_raw: dict[str, Any]
    fixed: FixedCosts  # optimizer update and gradient norm, per step
    host_s: Any = 0.0  # CPU time to issue one micro-batch's kernels (fixed.host_time); `launch` is its excess


def gpu_step_time(problem: Problem, tiles: Any, tile_batch: Any, ev: Optional[Evaluation] = None,
                  micro_batches: Any = None, report: bool = True, schedule: bool = True) -> StepTime:
    """Step time, tokens/s and MFU of a GPU problem at `micro_batches` (default the layout's) micro-batches
    of `tiles` x `tile_batch` sequences per data-parallel rank (ints, or arrays over layouts or shapes).
    Without `report`, the per-phase, per-GEMM and collective rows of the report are left empty (the
    solver's candidates: the times alone, the same values). Without `schedule`, the pipeline's passes are not
    simulated and the bubble is 0: a lower bound of the step (the busiest stage runs its M micro-batches one
    after another whatever the schedule), what the layout search ranks by before it simulates the layouts that
    can rank (planning/search.py)."""
    ev = ev if ev is not None else problem.evaluate(tiles, tile_batch)
    kinds = [(kind, part) for (kind, _), part in zip(ev.layers, layer_parts(problem, ev, report=report))]
    first, last = outside_parts(problem, ev, report=report)
    lay = problem.layout
    m = lay.micro_batches if micro_batches is None else micro_batches
    pipe = PipelineStages.of(problem, m)
    count = largest(lay.pipeline_parallel)
    per_kind = _kind_terms(problem, kinds)
    stages = [_stage(problem, pipe, j, kinds, (first, last), tiles, m, per_kind) for j in range(count)]
    worst, crit = _critical(stages)
    sync = _Sync.of_step(lay, [st.sync for st in stages])
    fixed = _slowest_fixed(stages)
    optimizer, norm, casts = fixed.optimizer_s, fixed.grad_norm_s, fixed.weight_cast_s
    # what Megatron's schedule adds over the busiest stage's M micro-batches (schedule.py)
    makespan, passes = _makespan(problem, pipe, stages, (kinds, per_kind), (first, last), tiles, m) if schedule \
        else (worst.micro_batch_s * m, None)
    bubble = makespan - worst.micro_batch_s * m
    # stage 0's micro-batch with its passes alone (review28): its terms without the overlap, host wait included
    alone = _stage(problem.with_layout(overlap=replace(lay.overlap, all_to_all=False)), pipe, 0, kinds, (first, last),
                   tiles, m) if lay.overlap.all_to_all else stages[0]
    unpaired = unpaired_exchange_s(problem, stages[0], alone, m)
    step = worst.micro_batch_s * m + bubble + unpaired + sync + optimizer + norm + casts
    seqs = lay.data_parallel * m * tiles * tile_batch
    # hostile42: a search's layouts are int64 arrays, where N x s wrapped past 2^63 (a global batch of 2^62 sequences
    # of 4,096 tokens is 2^74 tokens: 0, every layout at 0 tokens/s and the ranking a division by zero); a plan's
    # Python integers are exact, and converted as before
    seqs = seqs.astype(np.float64) if isinstance(seqs, np.ndarray) and seqs.dtype.kind in "iu" else seqs
    peak = problem.hardware.chip.peak_flops_per_s.value
    flops = _model_flops(problem, tiles, tile_batch) * lay.data_parallel * m
    # the per-phase report needs the critical stage: known for one shape, or for arrays of shapes of one
    # single-stage layout (not for arrays of layouts, where it differs from layout to layout)
    known = report and (not is_array(step) or (not is_array(lay.pipeline_parallel) and lay.pipeline_parallel == 1))
    phase_time, repeats = _phase_report(problem, pipe, crit, kinds, (first, last), m) if known else ({}, {})
    phase_time.update({k: v * m for k, v in worst.terms.items() if k not in ("compute", "tiling")})
    phase_time.update(pipeline_bubble=bubble, gradient_sync=sync, optimizer_step=optimizer, grad_norm=norm)
    if lay.overlap.all_to_all:
        # a lone pass quicker than its share of a host-bound pair (`unpaired_exchange_s` < 0) saves its host wait
        phase_time.update(a2a_unpaired=maximum(0.0, unpaired),
                          launch=phase_time["launch"] + minimum(0.0, unpaired))
    if problem.run.recipe.low:
        phase_time.update(weight_casts=casts)
    comm = {k: v * m for k, v in worst.raw.items()}
    comm.update(stages[crit].sync_raw if known else {})
    details = {"gemms": _gemm_report(kinds, (first, last)) if known else {}, "critical_stage": crit, "micro_batch_s": worst.micro_batch_s, "terms": worst.terms,
               "bubble_s": bubble, "sync_s": sync, "optimizer_s": optimizer, "grad_norm_s": norm,
               "host_s": stages[crit].host_s, "passes": passes}
    if report and not is_array(step) and lay.devices > 1:
        details["collectives"] = _critical_collectives(problem, pipe, crit, kinds, (first, last), m)
    return StepTime(step, seqs * problem.run.seq_len / step, flops / (step * lay.devices * peak), phase_time,
                    worst.terms["tiling"] * m, 0.0, comm, repeats, details,
                    kind_phase_time_s=_kind_phase_times(kinds) if known else {})


def _kind_phase_times(kinds: list[tuple[Any, Part]]) -> dict[tuple[str, str], Any]:
    """(layer kind, phase) -> the phase's time in one layer of that kind, per micro-batch (freshuser26: a model
    of several kinds showed every kind's row the phase's step time over all its layers, the kinds' average, so
    GPT-OSS's sliding-window and full-attention layers showed one attention time)."""
    return {(kind.name, name): t for kind, part in kinds for name, t in part.phase_s.items()}


def unpaired_exchange_s(problem: Problem, first: _Slowest, alone: _Slowest, m: Any) -> Any:
    """The expert exchange Megatron's merged 1F1B schedule leaves without a partner, per step (0 without
    --overlap-moe-expert-parallel-comm). The schedule runs a forward and a backward pass of two micro-batches
    together, each one's all-to-all beside the other's compute (merged_pair.py); some passes run alone and show
    their whole exchange:

    - without a pipeline, the first micro-batch's forward and the last one's backward (Megatron-LM @ d98e8a64
      megatron/core/pipeline_parallel/combined_1f1b.py L76-93: "executed alone, no a2a overlapping", L119-135);
    - with one (Megatron requires interleaving then, transformer_config.py L3007-3011), each rank's warm-up
      forwards and as many cool-down backwards, w = 2(PP - 1) + (VP - 1)N + 1 on rank 0 (schedule.py
      `warmup_forwards`, the one more of the overlap included), each over one model chunk, 1/VP of the stage.

    A lone forward and a lone backward of the same layers together run as a micro-batch without the overlap
    (`alone`: stage 0's terms with the overlap off) where the pair ran as `first` (stage 0's): each lone pair adds
    their difference D, whatever split of the exposed part between the two passes the pipeline simulation uses.
    Where the host's kernel issue does not bind, D = H = a2a - exposed - its SM share; where it does (the `launch`
    term, fixed.py, with the MoE dispatcher's syncs too), the lone passes' exchange runs in the host's wait and D is
    less (review28: H alone counted it on top of that wait, and with one micro-batch the step was not the step
    without the overlap). Rank 0's passes span the step from its first forward to its last backward (the makespan,
    schedule.py), so its w lone pairs of chunk passes add w/VP x D: with no pipeline 1 x D. An estimate on the
    critical path for a pipeline: the other ranks' lone passes are fewer and are not added.

    mergedhost: a merged pair also waits for its host (merged_pair.py `host_pair_time`, in stage 0's `launch`), and
    where that wait exceeds what the pair hides, D < 0: a lone forward and a lone backward take less than a pair's
    share (with M = 1 and no pipeline the step is again the step without the overlap); the report takes a negative D
    off the `launch` row (`gpu_step_time`)."""
    lay = problem.layout
    more = alone.micro_batch_s - first.micro_batch_s
    pp, vp = lay.pipeline_parallel, lay.virtual_pipeline
    lone = where(pp > 1, warmup_forwards(pp, vp, m, lay.microbatch_group or pp, 0, extra=True), 1)
    return where(lay.overlap.all_to_all, lone / vp * more, 0.0)


# a stage's per-micro-batch terms that its layers run (per layer of a kind, `_kind_terms`): they place its time
# in its virtual chunks; the rest of the stage's terms go with them in proportion
_PASS_TERMS = ("compute", "tp_comm", "cp_comm", "all_to_all", "a2a_sm_share")


def _makespan(problem: Problem, pipe: PipelineStages, stages: list[_Stage], layers: tuple[list[tuple[Any, Part]], list[dict[str, Any]]],
              ends: tuple[Part, Part], tiles: Any, m: Any) -> tuple[Any, Any]:
    """The end of the last pass of Megatron's pipeline schedule (schedule.py) of `m` micro-batches, its passes
    timed by `pass_times` (and those times, f and b); without a pipeline M x t_0 (and None)."""
    lay = problem.layout
    pp, vp = lay.pipeline_parallel, lay.virtual_pipeline
    if not is_array(pp) and pp == 1:
        return stages[0].micro_batch_s * m, None
    forward, backward = pass_times(problem, pipe, stages, layers, ends, tiles)
    group = lay.microbatch_group or pp
    return step_makespan(forward, backward, pp, vp, m, group, lay.overlap.all_to_all & (vp > 1)), (forward, backward)


def pass_times(problem: Problem, pipe: PipelineStages, stages: list[_Stage], layers: tuple[list[tuple[Any, Part]], list[dict[str, Any]]],
               ends: tuple[Part, Part], tiles: Any) -> tuple[list[list[Any]], list[list[Any]]]:
    """One micro-batch's forward and backward pass time of each stage's virtual chunks, f[j][v] and b[j][v]:
    each stage's per-micro-batch time t_j split into its chunks:

        a_jv = sum over kinds of (the chunk's layers of the kind x the kind's per-layer `_PASS_TERMS` + tiling)
               + the embedding's compute and exposed TP on chunk 0 of stage 0, the head's and loss's on the last
               chunk of the last stage
        f_jv = t_j x a_jv / sum_v a_jv x (1 - r_jv),   b_jv = t_j x a_jv / sum_v a_jv x r_jv

    with r_jv the chunk compute's backward share (backward FLOPs' time plus the activation re-run's, which
    Megatron runs in the backward pass; costs.py). The stage's terms outside its layers (exposed pipeline sends,
    per-micro-batch ZeRO traffic, kernel-launch excess, gradient accumulation) go with the chunks in proportion,
    so sum_v (f_jv + b_jv) = t_j: every term counted once."""
    lay = problem.layout
    pp, vp = lay.pipeline_parallel, lay.virtual_pipeline
    kinds, per_kind = layers
    tile = tiles * tile_overhead_s(problem)
    per_layer = [sum(t[k] for k in _PASS_TERMS) + tile for t in per_kind]
    back = [part.backward_s + part.recompute_s for _, part in kinds]
    own = [part.compute_s for _, part in kinds]
    outside = [(p.compute_s + tensor_parallel_time(problem, p.tp_bytes, p.tp_calls), p.backward_s + p.recompute_s,
                p.compute_s) for p in ends]
    chunks = largest(vp)
    forward, backward = [], []
    for j, st in enumerate(stages):
        last_stage = where(pipe.exists(j), j == pp - 1, False)
        cells = []
        for v in range(chunks):
            counts = pipe.chunk_kinds(j, v)
            on = (j == 0 and v == 0, last_stage & (v == vp - 1))
            cell = [sum(n * x for n, x in zip(counts, column)) for column in (per_layer, back, own)]
            cells.append([c + sum(where(flag, part[i], 0.0) for flag, part in zip(on, outside)) for i, c in enumerate(cell)])
        total = sum(c[0] for c in cells)
        share = [where(total > 0, c[0] / where(total > 0, total, 1.0), 1.0 / vp) * st.micro_batch_s for c in cells]
        ratio = [where(c[2] > 0, c[1] / where(c[2] > 0, c[2], 1.0), NO_FLOPS_BACKWARD_SHARE) for c in cells]
        forward.append([s * (1 - r) for s, r in zip(share, ratio)])
        backward.append([s * r for s, r in zip(share, ratio)])
    return forward, backward


def _critical(stages: list[_Stage]) -> tuple[_Slowest, int]:
    """The slowest stage per micro-batch, elementwise over layouts (the first on a tie), and the index of the
    slowest for one layout (0 over arrays of layouts, where it differs from layout to layout)."""
    worst: _Slowest = stages[0]
    crit = 0
    for j, st in enumerate(stages[1:], start=1):
        slower = st.micro_batch_s > worst.micro_batch_s
        if not is_array(slower) and slower:
            crit = j
        worst = worst.pick(slower, st)
    return worst, crit


def _slowest_fixed(stages: list[_Stage]) -> FixedCosts:
    """The per-step fixed costs of the stage whose total is the largest (the first on a tie), elementwise."""
    optimizer, norm = stages[0].fixed.optimizer_s, stages[0].fixed.grad_norm_s
    casts = stages[0].fixed.weight_cast_s
    for st in stages[1:]:
        slower = st.fixed.total_s > optimizer + norm + casts
        optimizer, norm = where(slower, st.fixed.optimizer_s, optimizer), where(slower, st.fixed.grad_norm_s, norm)
        casts = where(slower, st.fixed.weight_cast_s, casts)
    return FixedCosts(optimizer, norm, casts)


def _critical_collectives(problem: Problem, pipe: PipelineStages, crit: int, kinds: list[tuple[Any, Part]],
                          ends: tuple[Part, Part], m: Any) -> list[Any]:
    """The report's collective rows of the critical stage `crit` (one shape): its layers' tensor-, context- and
    expert-parallel calls per step, then its data-parallel synchronisation."""
    first, last = ends
    stage_ends = (first if crit == 0 else None, crit == problem.layout.pipeline_parallel - 1, last)
    counts = pipe.kind_counts(crit)
    return (_collective_rows(problem, kinds, counts, m)
            + _data_parallel_rows(problem, _stage_state(problem, crit, counts, kinds, stage_ends)[:2], m,
                                  _stage_buckets(problem, crit, stage_ends)))




# the per-micro-batch fields of a layer's `Part` a stage sums over its layers
_STAGE_SUMS = ("compute_s", "backward_s", "recompute_s", "core_s", "tp_bytes", "cp_bytes", "a2a_bytes", "tp_calls", "cp_calls",
               "a2a_calls", "a2a_token_calls", "gather_bytes", "gather_calls", "weight_cast_s", "compute_post_s") \
    + tuple(n + when for when in ("", "_fwd", "_post") for n in ISSUED_COUNTS)


def _summed_layers(counts: list[Any], kinds: list[tuple[Any, Part]]) -> Part:
    """A stage's layers as one part: each `_STAGE_SUMS` field summed over the layer kinds, x the stage's count of
    each kind."""
    stage = new_part()
    summed = stage.__dict__  # the fields read and written directly: this runs per stage and layer kind
    for n, (_, part) in zip(counts, kinds):
        fields = part.__dict__
        for name in _STAGE_SUMS:
            summed[name] = summed[name] + n * fields[name]
    return stage


def _launch(problem: Problem, stage: Part, outside: list[tuple[Part, Any]], terms: dict[str, Any],
            passes: tuple[Any, Any, Any], merged: tuple[Any, Any] = (0.0, 0.0)) -> tuple[Any, Any]:
    """A stage's `launch` term (the host's issue time beyond the GPU's work, per micro-batch) and the host's
    issue time itself, from the counts its layers and ends issue (`ISSUED_COUNTS`); where the stage's MoE layers
    wait on the dispatcher's sync, the host time after the sync is not hidden by the GPU work before it
    (`launch_time_synced`). `terms`: the stage's other per-micro-batch terms; `passes`: its compute, its backward
    and its count all-gathers' time (in terms["all_to_all"], but issued and awaited before the sync).
    Under Megatron's merged 1F1B schedule (--overlap-a2a) the MoE layers' syncs sit in the merged pairs instead:
    `merged` holds what those pairs wait for the host (merged_pair.py `host_pair_time`, the stage's layers summed)
    and the schedule's own host work on their nodes; the term is then that wait plus what the stage's whole host
    time (with that work) still exceeds its GPU time and the wait (`launch_time`)."""
    compute, backward, count_gathers = passes
    waits, issue = merged
    names = ISSUED_COUNTS
    issued = [getattr(stage, n) + _on_ends(outside, n) for n in names]
    forward = [getattr(stage, n + "_fwd") + _on_ends(outside, n + "_fwd") for n in names]
    host = host_time(problem, *issued)
    gpu = sum(terms.values())
    synced = launch_time_synced(SyncSplit(
        host, gpu, host_time(problem, *forward), gpu_forward_share(compute, backward, gpu),
        host_time(problem, *(getattr(stage, n + "_post") for n in names)),
        # after the sync: the post-sync phases' forward compute and the forward half of the exchange; the
        # count all-gathers are not in it: the sync waits for their result (token_dispatcher.py L557-576, L927-958)
        stage.compute_post_s + (terms["all_to_all"] - count_gathers + terms["a2a_sm_share"]) / 2))
    synced_layers = (stage.expert_gemms > 0) & (dispatcher_syncs(problem).forward_per_layer > 0)
    plain = where(synced_layers, synced, launch_time(host, gpu))
    paired = problem.layout.overlap.all_to_all & (stage.expert_gemms > 0)
    return (where(paired, waits + launch_time(host + issue, gpu + waits), plain),
            where(paired, host + issue, host))


def _stage(problem: Problem, pipe: PipelineStages, j: int, kinds: list[tuple[Any, Part]], ends: tuple[Part, Part],
           tiles: Any, micro_batches: Any, per_kind: Optional[list[dict[str, Any]]] = None) -> _Stage:
    lay = problem.layout
    exists = pipe.exists(j)
    is_first, is_last = j == 0, where(exists, j == lay.pipeline_parallel - 1, False)
    counts = pipe.kind_counts(j)  # the stage's real layers of each kind (stages.py)
    layers = sum(counts)
    stage = _summed_layers(counts, kinds)
    layer_terms = _layer_terms(per_kind if per_kind is not None else _kind_terms(problem, kinds), counts)
    first, last = ends
    outside = [(first, is_first), (last, is_last)]
    compute = layer_terms.pop("compute") + _on_ends(outside, "compute_s")
    backward = stage.backward_s + _on_ends(outside, "backward_s")
    tp_outside = sum(where(on, tensor_parallel_time(problem, p.tp_bytes, p.tp_calls), 0) for p, on in outside)
    raw = {"tp_comm": layer_terms.pop("tp_raw") + tp_outside, "cp_comm": layer_terms.pop("cp_raw"),
           "all_to_all": layer_terms.pop("a2a_raw")}
    count_gathers = layer_terms.pop("count_gathers")
    merged = (layer_terms.pop("merged_host"), layer_terms.pop("merged_issue"))
    p2p = where(exists, pipeline_p2p_time(problem, kinds[0][1].pp_bytes), 0)
    raw["pp_p2p"] = p2p
    dense, expert, dp, fixed = _stage_state(problem, j, counts, kinds, (first if is_first else None, is_last, last))
    o = lay.overlap
    sharded = lay.zero_stage >= 3
    per_mb = where(sharded | o.grad_reduce, maximum(0.0, dp.per_micro_batch - where(sharded, compute, backward)),
                   dp.per_micro_batch)
    terms = {"compute": compute, "tp_comm": layer_terms["tp_comm"] + tp_outside, "cp_comm": layer_terms["cp_comm"],
             "all_to_all": layer_terms["all_to_all"], "a2a_sm_share": layer_terms["a2a_sm_share"],
             "pp_p2p": where(o.p2p, maximum(0.0, p2p - compute), p2p), "zero_per_micro_batch": per_mb,
             "dp_sm_share": dp_sm_share_loss(problem, dp.per_micro_batch - per_mb, PER_MICRO_BATCH_KIND),
             "tiling": layers * tiles * tile_overhead_s(problem),
             "wgrad_accumulate": wgrad_accumulate_s(problem, dense + expert),
             "fsdp2_copies": fsdp2_copy_s(problem, _fsdp2_units(problem, counts, kinds, (dense, first, last)))}
    terms["launch"], host = _launch(problem, stage, outside, terms, (compute, backward, count_gathers), merged)
    host = where(exists, host, 0.0)
    chunks = _ChunkSync.of(problem, micro_batches,
                           _first_chunk_share(lay, dense + expert, first.dense_params if is_first else 0), j)
    sync = _Sync.of_stage(problem, chunks, dp, (compute, backward))
    terms = {k: where(exists, v, 0.0) for k, v in terms.items()}
    sync_raw = {"gradient_reduce": dp.reduce_per_step, "param_gather": dp.gather_per_step,
                "zero_per_micro_batch": dp.per_micro_batch * micro_batches}
    casts = stage.weight_cast_s + _on_ends(outside, "weight_cast_s")
    fixed = FixedCosts(where(exists, fixed.optimizer_s, 0.0), where(exists, fixed.grad_norm_s, 0.0),
                       where(exists, casts, 0.0))
    return _Stage(terms, raw, _Sync(where(exists, sync.at_end, 0.0), where(exists, sync.at_start, 0.0)),
                  sync_raw, fixed, host)


def _fsdp2_units(problem: Problem, counts: list[Any], kinds: list[tuple[Any, Part]],
                 held: tuple[Any, Part, Part]) -> Optional[tuple[Any, Any, Any]]:
    """(all, root unit, largest block) parameters per device of a PyTorch FSDP2 plan with TP (one stage: validated),
    for its copies (fixed.fsdp2_device_counts): the stage's dense parameters, the parts outside the layers (the
    root's embedding, final norm and output layer) and the largest layer kind's; None otherwise."""
    lay = problem.layout
    if not lay.fsdp2:
        return None
    dense, first, last = held
    block: Any = 0
    for n, (_, p) in zip(counts, kinds):
        block = maximum(block, where(n > 0, p.dense_params, 0))
    return dense, first.dense_params + last.dense_params, block


@dataclass(frozen=True)
class _ChunkSync:
    """The exposed data-parallel gradient reduce-scatter and parameter all-gather of pipeline stage j under
    --overlap-grad-reduce / --overlap-param-gather, as Megatron-Core schedules them (Megatron-LM @ d98e8a64).
    Reduces are timed from the end of stage 0's last backward, where the step's backward ends; gathers
    from the start of the stage's first forward.

    VP = 1, stage 0: the gradient buckets are reduced as the last micro-batch's backward fills them
    (schedules.py L813-830 without a pipeline, L2431-2434 / L2456-2461 with one: the sync is enabled for the
    last backward), and each parameter bucket's all-gather is prefetched behind the previous bucket's
    forward (param_and_grad_buffer.py L562-573, align_param_gather is off without interleaving, arguments.py
    L1013): exposed = max(0, traffic - one micro-batch's backward / forward).

    VP = 1, stage j > 0 (`ddpchunk`): with align_grad_reduce (on by default, common_config.py L80,
    training.py L4356-4359) only the first stage enables the sync in its last backward; the others launch
    theirs after the cooldown (schedules.py L2456-2461, L2476-2480), and Megatron-Core gives them one bucket
    per buffer anyway, which can only launch once the backward is done (distributed_data_parallel.py
    L160-171, param_and_grad_buffer.py L863-884). The last micro-batch's backward still has stages
    j-1 ... 0 to cross, so the reduce hides behind j backward slots: max(0, traffic - j b) (an estimate: the
    other stages' slots taken as this stage's b). The all-gather is dispatched by the forward pre-hook of
    the stage's first layer (finish_param_sync dispatches a bucket not yet dispatched,
    param_and_grad_buffer.py L554-558; nothing dispatches it earlier without align_param_gather,
    distrib_optimizer.py L3178-3196), once the stage's first input has arrived; with one bucket per buffer
    the first layer waits for all of it: the whole gather is exposed (`single`), and it delays the first
    micro-batch's forward on its way down the pipeline, so these add up over the stages (`gpu_step_time`).
    Apex's buckets (`every_stage`) prefetch as on stage 0.

    VP > 1 (interleaved, align_grad_reduce and align_param_gather on by default: common_config.py L80,
    arguments.py L3152-3155, training.py L4356-4363): a chunk's reduce-scatter is launched whole once its
    last micro-batch's backward is done, at the same time on every stage (rank j after its backward
    v + j: schedules.py L1438-1456), in backward order chunk VP-1 ... 0, and after chunk k's launch only the
    last micro-batch group's backwards of chunks k-1 ... 0 remain (L last micro-batches each,
    get_schedule_table L989-1016, groups of PP micro-batches, model_parallel_config.py L567-568). Chunk 0's
    launch on rank j > 0 falls past the loop and comes with the remaining reductions at the stage's own end
    (L2064-2069), j chunk backward slots before stage 0's. With r_0 chunk 0's share and r each later
    chunk's, the queue drains max(r_0 - j b/VP, max_k>=1 (r_0 + k r - k L b/VP)) after the last backward:
    max(r_0 - j b/VP, r_0 + r - L b/VP, R - (VP-1) L b/VP) (the k terms are linear in k; at j = 0 this is
    max(r_0, R - (VP-1) L b/VP), as before). An estimate: chunk 1 is taken as launched in the loop, which
    holds for j <= L.
    The all-gathers of chunks 0 and 1 are launched at the step's start on every stage, that of chunk v+1
    when chunk v starts its first forward (L1218-1221, L1334-1354); chunk 0's first layer waits for all of
    chunk 0's buckets (they are dispatched last-layer first, distributed_data_parallel.py L369-379), and
    stage j's first forward starts j chunk forward slots into the step: max(0, a_0 - j f/VP). Each later
    chunk waits for what its gather exceeds one group of its predecessor's forwards
    (h = min(PP, M) f / VP): max(0, a_0 - j f/VP) + (VP-1) max(0, a - h). Chunks are taken as equal slices
    of the stage's layers, with the first stage's embedding in chunk 0 (an estimate: the last stage's
    output layer is spread evenly)."""

    virtual: Any  # VP
    last_group: Any  # L: micro-batches in the schedule's last group
    first_group: Any  # micro-batches in the first group, min(PP, M)
    first_share: Any  # chunk 0's share of the stage's parameters (and so of its traffic)
    stage: Any = 0  # j, the stage's pipeline rank
    single: Any = False  # the stage's buffers are one bucket each (Megatron-Core's DDP on a rank > 0)

    @classmethod
    def of(cls, problem: Problem, micro_batches: Any, first_share: Any, stage: int = 0) -> "_ChunkSync":
        lay = problem.layout
        group = lay.pipeline_parallel
        last_group = micro_batches - group * ((micro_batches - 1) // group)
        return cls(lay.virtual_pipeline, last_group, minimum(group, micro_batches), first_share, stage,
                   stage > 0 and not lay.ddp_buckets_every_stage)

    def exposed_reduce(self, traffic: Any, backward: Any) -> Any:
        slot = backward / self.virtual
        first = self.first_share * traffic
        later = (traffic - first) / maximum(self.virtual - 1, 1)
        interleaved = maximum(maximum(first - self.stage * slot, first + later - self.last_group * slot),
                              traffic - (self.virtual - 1) * self.last_group * slot)
        flat = traffic - maximum(self.stage, 1) * backward
        return maximum(0.0, where(self.virtual > 1, interleaved, flat))

    def exposed_gather(self, traffic: Any, forward: Any) -> Any:
        first = self.first_share * traffic
        later = (traffic - first) / maximum(self.virtual - 1, 1)
        hidden = self.first_group * forward / self.virtual
        interleaved = (maximum(0.0, first - self.stage * forward / self.virtual)
                       + (self.virtual - 1) * maximum(0.0, later - hidden))
        flat = where(self.single, traffic, maximum(0.0, traffic - forward))
        return where(self.virtual > 1, interleaved, flat)


def _first_chunk_share(lay: Any, params: Any, embedding: Any) -> Any:
    """Model chunk 0's share of a stage's `params` per device: 1/VP of its layers' and the first stage's
    `embedding` whole (an estimate: equal layer slices)."""
    layers = params - embedding
    return where(params > 0, (layers / lay.virtual_pipeline + embedding) / maximum(params, 1), 1.0 / lay.virtual_pipeline)


def _stage_state(problem: Problem, j: int, counts: list[Any], kinds: list[tuple[Any, Part]],
                 ends: tuple[Optional[Part], Any, Part]) -> tuple[Any, Any, DataParallelTimes, FixedCosts]:
    """Stage j's (non-expert, expert) parameters per device (`memory.stage_params`), its data-parallel
    synchronisation and its optimizer and gradient-norm times: functions of the layout and of the parameters
    of the parts it holds, not of the batch shape, so kept per layout when the layer counts and parameters
    are Python ints (keyed on them and on j, which fixes whether the stage is the first or the last), as
    the stage's training state is (`GpuMemory._state`)."""
    key = stage_key("gpu stage times", j, counts, kinds, ends, ("dense_params", "routed_params"))
    cache = problem.layout_cache
    if key is not None and key in cache:
        return cache[key]
    dense, expert = stage_params(problem, counts, kinds, ends)
    rates = bytes_per_param(problem)
    dp = data_parallel_times(problem, dense, expert, rates, _stage_buckets(problem, j, ends))
    out = (dense, expert, dp, fixed_costs(problem, dense, expert, rates))
    if key is not None:
        cache[key] = out
    return out


def _stage_buckets(problem: Problem, j: int, ends: tuple[Optional[Part], Any, Part]) -> StageBuckets:
    """Stage j's gradient buckets (collectives.StageBuckets): the first stage's embedding is in its chunk 0;
    tied, it and the last stage's copy of it are split off."""
    first, is_last, _ = ends
    shared = ((first is not None) | is_last) if problem.model.tied_embeddings else False
    return StageBuckets(j == 0, first.dense_params if first is not None else 0, shared)


def _on_ends(outside: list[tuple[Part, Any]], name: str) -> Any:
    """Field `name` of the parts outside the layers (first stage's, last stage's) where the stage holds
    them, else 0, summed from 0 in that order."""
    total: Any = 0
    for part, on in outside:
        value = getattr(part, name)
        if isinstance(on, np.ndarray) or isinstance(value, np.ndarray):
            total = total + where(on, value, 0)
        else:  # `where`'s choice inline: this runs 11 times per stage
            total = total + (value if on else 0)
    return total


def _kind_terms(problem: Problem, kinds: list[tuple[Any, Part]]) -> list[dict[str, Any]]:
    """Per layer of each kind, one micro-batch: its compute and exposed communication (and the raw
    communication before overlap)."""
    o = problem.layout.overlap
    out = []
    for _, part in kinds:
        tp = tensor_parallel_time(problem, part.tp_bytes, part.tp_calls)
        cp = context_parallel_time(problem, part.cp_bytes, part.cp_calls)
        # the expert exchange: the all-to-all (alltoall / flex dispatcher) or the allgather dispatcher's collectives
        a2a = (all_to_all_time(problem, part.a2a_bytes, part.a2a_calls, part.a2a_token_calls)
               + allgather_dispatch_time(problem, part.gather_bytes, part.gather_calls))
        # the alltoall dispatcher's count all-gathers run in its preprocess, on the compute stream before the
        # exchange, whatever overlaps it (`_merged`)
        counts = count_gather_time(problem, part.count_bytes, part.count_calls)
        # (the merged schedule's: the rest runs beside compute), and what its pairs wait for the host and the host's
        # own schedule work per layer (`_merged_host`)
        exposed, share, waits, issue = _merged(problem, part, a2a, counts)
        out.append({"compute": part.compute_s,
                    "tp_comm": where(o.tp_comm, maximum(maximum(0.0, tp - part.compute_s),
                                                        layer_overlap_s(problem, part.tp_gemm_s, part.tp_bytes,
                                                                        part.tp_calls)), tp),
                    "cp_comm": maximum(0.0, cp - part.core_s),
                    "all_to_all": where(o.all_to_all, exposed + counts, a2a + counts),
                    # the SMs the exchange holds cost compute only while compute runs beside it: its hidden part
                    "a2a_sm_share": where(o.all_to_all, share, 0.0),
                    "tp_raw": tp, "cp_raw": cp, "a2a_raw": a2a + counts, "count_gathers": counts,
                    "merged_host": where(o.all_to_all, waits, 0.0), "merged_issue": where(o.all_to_all, issue, 0.0)})
    return out


def _merged(problem: Problem, part: Part, a2a: Any, counts: Any = 0.0) -> tuple[Any, Any, Any, Any]:
    """The all-to-all a layer shows under Megatron's merged 1F1B schedule, node by node (merged_pair.py), with the
    count all-gathers' `counts` seconds in the pre-dispatch node's forward, where Megatron runs the dispatcher's
    preprocess on the compute stream (Megatron-LM @ d98e8a64 megatron/core/models/gpt/fine_grained_callables.py
    L125-129, models/common/model_chunk_schedule_plan.py L160-162); a re-run's are taken there too (a stated
    approximation: they run in the backward's recompute). With it the compute the exchange's SMs take while hidden
    (sm_share.py), then, for a layer with a dispatch (`_node_host`), what the pair waits for its host beyond its GPU
    time (`host_pair_time` - `pair_time`, the compute nodes stretched by that SM share: a GPU slowed by the exchange
    beside it has less idle for the host to fill) and the host's seconds of the schedule's own work on the layer's
    nodes (per layer and micro-batch; 0 and 0 for a layer without one)."""
    o = problem.layout.overlap
    nodes = LayerNodes.of(part.compute_s + counts, part.backward_s, part.recompute_s,
                          (part.pre_dispatch_s + counts, part.pre_dispatch_backward_s, part.pre_dispatch_recompute_s),
                          a2a, o.delay_wgrad, (part.wgrad_s, part.pre_dispatch_wgrad_s), o.one_queue)
    exposed = merged_exposed(nodes, o.early_attn_release)
    # the SMs the exchange holds cost compute only while compute runs beside it: its hidden part
    share = sm_share_loss(problem, a2a - exposed, part.compute_s)
    host = _node_host(problem, part) if np.any(o.all_to_all) else None
    if host is None:
        return exposed, share, 0.0, 0.0
    slowed = nodes.stretched(1.0 + share / where(part.compute_s > 0, part.compute_s, 1.0))
    gpu = pair_time(slowed, o.early_attn_release)
    return exposed, share, maximum(0.0, host_pair_time(slowed, host[0], o.early_attn_release) - gpu), host[1]


def _node_host(problem: Problem, part: Part) -> Optional[tuple[NodeHost, Any]]:
    """The host's issue seconds of an MoE layer's nodes in a merged pair (merged_pair.py `NodeHost`), and of the
    schedule's own work on them per layer and micro-batch; None for a layer without a dispatch (`Part.node_issued`).
    Each node's own host time: `host_time` of the counts its phases issue (`Part.node_issued`: the pre-dispatch
    phases, with the attention core and the layer's CUDA graph; the dispatch; the combine; the MLP node the rest),
    its first forward in the forward node, the rest (backward, re-runs) in the backward node; the dispatch phase's
    forward before the dispatcher's sync, as `launch_time_synced` takes it (fixed.py). With delayed weight gradients
    the experts' weight-gradient GEMM loop (one pass of the per-expert GEMMs) is the MLP's backward_dw; the
    pre-dispatch node's weight-gradient launches stay in its backward (a few launches). The schedule's own work
    (formulas/constants.toml [megatron] merged_node_*): building the layer's four nodes, and per node forward and
    backward its Python and autograd call (reference ops at eager_op_host_s) and its event wait and record (CUDA
    calls at launch_overhead_s)."""
    if "dispatch" not in part.node_issued:
        return None
    lay, c = problem.layout, constants().megatron
    node = {k: (host_time(problem, *v[:4]), host_time(problem, *v[4:])) for k, v in part.node_issued.items()}
    pre, dispatch, combine = (node.get(k, (0.0, 0.0)) for k in ("pre", "dispatch", "combine"))
    whole = host_time(problem, *[getattr(part, n) for n in ISSUED_COUNTS])
    first = host_time(problem, *[getattr(part, n + "_fwd") for n in ISSUED_COUNTS])
    mlp = (whole - pre[0] - dispatch[0] - combine[0], first - pre[1] - dispatch[1] - combine[1])
    fwd = host_time(problem, c.merged_node_cuda_calls, glue_ops=c.merged_node_forward_ref_ops)
    bwd = host_time(problem, c.merged_node_cuda_calls, glue_ops=c.merged_node_backward_ref_ops)
    build = host_time(problem, 0, glue_ops=4 * c.merged_node_build_ref_ops)
    dw = where(lay.overlap.delay_wgrad, host_time(problem, 0, part.expert_gemms_fwd), 0.0)
    comm = lay.dispatcher != "alltoall" or "moe_preprocess" in lay.cuda_graph_scope
    host = NodeHost(build, combine[0] - combine[1] + bwd, pre[1] + fwd, mlp[0] - mlp[1] - dw + bwd, dispatch[1] + fwd,
                    dw, dispatch[0] - dispatch[1] + bwd, mlp[1] + fwd, combine[1] + fwd, pre[0] - pre[1] + bwd, 0.0,
                    dispatcher_syncs(problem).forward_per_layer > 0, comm)
    return host, build + 4 * (fwd + bwd)


def _layer_terms(per_kind: list[dict[str, Any]], counts: list[Any]) -> dict[str, Any]:
    """Compute and exposed per-layer communication of the stage's layers (counts[k] of kind k, `_kind_terms`
    per layer), one micro-batch."""
    out = dict.fromkeys(("compute", "tp_comm", "cp_comm", "all_to_all", "a2a_sm_share", "tp_raw", "cp_raw",
                         "a2a_raw", "count_gathers", "merged_host", "merged_issue"), 0.0)
    for n, exposed in zip(counts, per_kind):
        for k, v in exposed.items():
            out[k] = out[k] + n * v
    return out


def _gemm_report(kinds: list[tuple[Any, Part]], ends: tuple[Part, Part]) -> dict[tuple[str, str], Any]:
    """(layer kind name, phase) -> the phase's GEMM rows; ("", phase) outside the layers."""
    out = {(kind.name, name): rows for kind, part in kinds for name, rows in part.gemms.items()}
    out.update({("", name): rows for part in ends for name, rows in part.gemms.items()})
    return out


def _collective_rows(problem: Problem, kinds: list[tuple[Any, Part]], counts: list[Any], m: Any) -> list[CollectiveRow]:
    """The critical stage's layer collectives (counts[k] layers of kind k) and pipeline sends per step:
    bus bytes, calls, link, the efficiency at the message size and the latency per call
    (collectives.describe)."""
    lay = problem.layout
    tot = dict.fromkeys(("tp_bytes", "tp_calls", "cp_bytes", "cp_calls", "a2a_bytes", "a2a_calls", "a2a_token_calls",
                         "gather_bytes", "gather_calls", "count_bytes", "count_calls"), 0.0)
    times = dict.fromkeys(("tp", "cp", "a2a", "etp", "gather", "counts"), 0.0)
    for count, (_, part) in zip(counts, kinds):
        n = count * m
        for key in tot:
            tot[key] += n * getattr(part, key)
        times["tp"] += n * tensor_parallel_time(problem, part.tp_bytes, part.tp_calls)
        times["cp"] += n * context_parallel_time(problem, part.cp_bytes, part.cp_calls)
        times["a2a"] += n * expert_exchange_time(problem, part.a2a_bytes, part.a2a_calls)
        times["etp"] += n * expert_tensor_parallel_time(problem, part.a2a_bytes, part.a2a_calls, part.a2a_token_calls)
        times["gather"] += n * allgather_dispatch_time(problem, part.gather_bytes, part.gather_calls)
        times["counts"] += n * count_gather_time(problem, part.count_bytes, part.count_calls)
    t, cp, ep, etp = lay.tensor_parallel, lay.context_parallel, lay.expert_parallel, lay.expert_tensor_parallel
    rows = []
    if t > 1:
        rows.append(describe(problem, "tensor_parallel", (t, 1), (tot["tp_bytes"] * ring_share(t), tot["tp_calls"]),
                             times["tp"], kind=tensor_parallel_kind(problem),
                             collective="all_gather+reduce_scatter" if lay.sequence_parallel else "all_reduce"))
    if cp > 1:
        rows.append(describe(problem, "context_parallel", (cp, t), (tot["cp_bytes"] * (cp - 1),
                             tot["cp_calls"] * (cp - 1)), times["cp"], "p2p ring", collective="send_recv"))
    if ep > 1 and tot["a2a_calls"]:
        rows.append(describe_all_to_all(problem, (all_to_all_wire_bytes(problem, tot["a2a_bytes"]), tot["a2a_calls"]),
                                        times["a2a"], tot["a2a_bytes"], tot["a2a_token_calls"]))
    if etp > 1 and tot["a2a_calls"]:
        rows.append(describe_expert_tensor_parallel(problem, tot["a2a_bytes"], (tot["a2a_calls"], tot["a2a_token_calls"]),
                                                    times["etp"]))
    if tot["gather_calls"] and lay.expert_model_parallel > 1:
        rows.append(describe_allgather_dispatch(problem, tot["gather_bytes"], tot["gather_calls"], times["gather"]))
    if tot["count_calls"] and lay.expert_model_parallel > 1:
        rows.append(describe_count_gather(problem, tot["count_bytes"], tot["count_calls"], times["counts"]))
    if lay.pipeline_parallel > 1:
        sends = 2 * lay.virtual_pipeline * m
        group = (lay.pipeline_parallel, max(lay.devices // lay.pipeline_parallel, 1))
        rows.append(describe(problem, "pipeline_p2p", group, (kinds[0][1].pp_bytes * sends, sends),
                             m * pipeline_p2p_time(problem, kinds[0][1].pp_bytes), "p2p", collective="send_recv"))
    return rows


def _data_parallel_rows(problem: Problem, params: tuple[Any, Any], m: Any, stage: StageBuckets) -> list[CollectiveRow]:
    """The critical stage's data-parallel collectives per step (collectives.data_parallel_traffic) in its
    buckets: functions of the layout, the stage's parameters and buckets and M, kept per layout when those
    are plain numbers."""
    key = plain_key((params, m, stage.first_stage, stage.embedding, stage.shared))
    if key is None:
        return _data_parallel_rows_of(problem, params, m, stage)
    rows = problem.layout_cache.get(("data parallel rows", key))
    if rows is None:
        rows = problem.layout_cache[("data parallel rows", key)] = _data_parallel_rows_of(problem, params, m, stage)
    return list(rows)


def _data_parallel_rows_of(problem: Problem, params: tuple[Any, Any], m: Any, stage: StageBuckets) -> list[CollectiveRow]:
    rows = []
    kinds = {"reduce_per_step": "gradient_reduce", "gather_per_step": "param_gather", "per_micro_batch": "zero_per_micro_batch"}
    for part, held in zip(("dense", "expert"), params):
        size, stride = data_parallel_groups(problem)[part]
        if size <= 1 or not held:
            continue
        traffic = data_parallel_traffic(problem, held, size, bytes_per_param(problem), part_buckets(stage, part), part)
        for key, (bus, calls) in traffic.items():
            times = m if key == "per_micro_batch" else 1
            if calls or bus:  # review31: PyTorch FSDP's expert bytes ride their blocks' calls (no calls of their own)
                kind = data_parallel_kind(problem, key)
                rows.append(describe(problem, f"{kinds[key]}_{part}", (size, stride), (bus * times, calls * times),
                                     times * ring_time(problem, bus, size, stride, calls, kind), kind=kind,
                                     collective=data_parallel_collective(problem, key)))
    return rows


def _model_flops(problem: Problem, tiles: Any, tile_batch: Any) -> Any:
    """Model FLOPs (forward + backward) of one micro-batch of the whole model (no parallel split)."""
    flat = problem._cache.get("unsplit")  # the same problem for every batch shape: its evaluations kept
    if flat is None:
        flat = problem._cache["unsplit"] = _unsplit(problem)
    ev = flat.evaluate(tiles, tile_batch)
    return sum(ev.layers_total(q) + ev.outside_total(q) for q in ("flops_fwd", "flops_bwd"))


def _unsplit(problem: Problem) -> Problem:
    """The problem without the tensor, context and expert-tensor split (whose FLOPs are the model's). Its
    execution is kept per layout, so that unsplit problems of one layout share their layout cache; the
    problem itself (and the shapes it evaluates) is this problem's own."""
    execution = problem.layout_cache.get("unsplit execution")
    if execution is None:
        execution = problem.layout_cache["unsplit execution"] = problem.with_layout(
            tensor_parallel=1, context_parallel=1, expert_tensor_parallel=1).execution
    if execution is problem.execution:
        return problem
    return Problem(problem.model, problem.hardware, execution, symbols=problem.symbols, counts=problem.counts)


def _phase_report(problem: Problem, pipe: PipelineStages, crit: int, kinds: list[tuple[Any, Part]],
                  ends: tuple[Part, Part], m: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per-phase time per step on the critical stage, and how often each phase runs there per step."""
    times: dict[str, Any] = {}
    repeats: dict[str, Any] = {}
    for n, (_, part) in zip(pipe.kind_counts(crit), kinds):
        for name, t in part.phase_s.items():
            times[name] = times.get(name, 0) + n * t * m
            repeats[name] = repeats.get(name, 0) + n * m
    first, last = ends
    on = {id(first): crit == 0, id(last): crit == problem.layout.pipeline_parallel - 1}
    for part in ends:
        for name, t in part.phase_s.items():
            times[name] = (t * m) if on[id(part)] else 0.0
            repeats[name] = m if on[id(part)] else 0
    return times, repeats
