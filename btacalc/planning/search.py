"""`plan --search`: the fastest Megatron layout that fits, over TP, PP, VP, CP, EP, ETP, the micro-batch
and the recomputation policy, on a given number of GPUs and global batch.

Candidates are every combination of the free dimensions (a dimension the request gives is fixed) that
passes the same rules as a plan (`Layout.validate`: divisibility, heads, experts, the pipeline split,
interleaving needing M a multiple of PP, ...). Where PP·VP does not divide the layers, a candidate takes
the plan's uneven split (Megatron's account-for flags, first/last stage layers or a layout string:
`btacalc.config.pipeline`), or the user's split options. They are evaluated vectorised: one numpy evaluation of
the catalogue, the per-stage memory and the step-time model per recomputation policy, over every
layout at once (t, t_e, b/CP, PP, VP, EP ... are arrays; `btacalc.model.gpu` branches on none of
them). The fastest fitting layout is then planned exactly (`make_plan`), so the winner's numbers are a
plan's numbers; the runners-up and why the winner beats them come from the vectorised terms.

Sequence parallelism is on with TP > 1 (Megatron-Core needs it for MoE layers; it costs no extra
communication volume, Korthikanti et al. 2022 §4.2.2). ZeRO / FSDP, overlaps, the sequence length and
the global batch come from the request (the global batch defaults to 4M tokens per step).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Optional

import numpy as np
from pydantic import BaseModel, Field

from ..config.execution import DEFAULT_TOKENS_PER_STEP, BatchLimits, Execution, ExecutionRequest, Layout
from ..config.resolution import (TORCHTITAN_RECOMPUTE, check_dtensor_precision, check_eager_context_parallel,
                                 check_torch_loss, op_recompute_refusal, resolve_execution, recompute_refusal,
                                 whole_sequences)
from ..config.megatron_rules import a2a_refusal, userbuffers_domain_refusal
from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec
from ..config.pipeline import StageSplit, parse_layout
from ..errors import BtacalcError
from ..model.gpu.memory import GpuMemory
from ..model.gpu.timing import gpu_step_time
from ..divisors import divisors
from ..model.problem import Problem
from .plan import make_plan
from .report import PlanReport

SCHEMA_VERSION = 1
# The fixed lists of the sizes not derived from a rule (`pipeline_sizes`, `micro_batch_sizes`, `expert_tensor_sizes`
# and `_vp_choices` derive theirs); TP within an NVLink domain
SIZES = {"tensor_parallel": (1, 2, 4, 8), "virtual_pipeline": (1, 2, 3, 4, 6, 8, 12), "context_parallel": (1, 2, 4, 8)}
RECOMPUTE_CHOICES = ("none", "selective", "full")
MOE_RECOMPUTE_CHOICES = ("layernorm,moe_act",)  # Megatron-Bridge's GPT-OSS recipes (perf_recipes/gpt_oss)
RUNNERS_UP = 5
# search33: the largest micro-batch, in tokens, a search tries above one sequence (`micro_batch_sizes`): 65,536, the
# power of two above the largest published micro-batch of the measured set (btacalc/data/measured_runs.json:
# llm-foundry's MPT-1B on 64 H100s, 20 x 2,048 = 40,960 tokens; the largest Megatron one 16,384, 4 x 4,096). A larger
# one stores more activations (they grow with the micro-batch) and leaves fewer micro-batches to fill the pipeline
MAX_MICRO_BATCH_TOKENS = 1 << 16


class LayoutRow(BaseModel):
    tensor_parallel: int
    pipeline_parallel: int
    virtual_pipeline: int
    context_parallel: int
    expert_parallel: int
    expert_tensor_parallel: int
    data_parallel: int
    micro_batch: int = Field(description="sequences per micro-batch per data-parallel rank")
    micro_batches: int = Field(description="M: micro-batches per optimizer step")
    recompute: str
    fits: bool
    memory_bytes: int = Field(description="worst pipeline stage, per device")
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_device: float
    mfu: float
    time_s: dict[str, float] = Field(description="step time by term: compute, exposed communication, bubble, sync")

    def label(self) -> str:
        return (f"TP{self.tensor_parallel} PP{self.pipeline_parallel}"
                + (f" VP{self.virtual_pipeline}" if self.virtual_pipeline > 1 else "")
                + (f" CP{self.context_parallel}" if self.context_parallel > 1 else "")
                + (f" EP{self.expert_parallel}" if self.expert_parallel > 1 else "")
                + (f" ETP{self.expert_tensor_parallel}" if self.expert_tensor_parallel > 1 else "")
                + f" DP{self.data_parallel} mb{self.micro_batch} M{self.micro_batches} rc {self.recompute}")


class SearchResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    model: str
    hardware: str
    devices: int
    global_batch: int = Field(description="sequences per optimizer step, all ranks")
    seq_len: int
    candidates: int = Field(description="layouts that pass the layout rules, evaluated")
    fitting: int
    not_timed: int = Field(0, description="layouts that do not fit and were not timed: a larger micro-batch of a "
                           "layout and policy that does not fit at a smaller one (memory grows with the micro-batch)")
    elapsed_s: float = Field(exclude=True, description="wall time of the search (shown in the table; left out of "
                             "the JSON so that it is reproducible)")
    best: Optional[PlanReport] = Field(None, description="the fastest fitting layout, planned exactly")
    ranking: list[LayoutRow] = Field(default_factory=list, description="the winner and the runners-up")
    fastest_not_fitting: Optional[LayoutRow] = Field(None, description="the fastest timed layout that does not fit, if "
                                                     "faster than the winner (`not_timed`: the ones not timed)")
    why: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class _Candidate:
    layout: Layout
    micro_batch: int
    recompute: str


def search_layouts(model: ModelSpec, hardware: HardwareProfile, request: ExecutionRequest,
                   note: Optional[Callable[[str], None]] = None) -> SearchResult:
    """The fastest fitting layout (see the module docstring). `note(template)`, if given, is told before a long
    search that it is long (`_check_space`; the template names parameters as an error's does)."""
    if hardware.family != "gpu" or request.devices < 1:
        raise BtacalcError("{search} chooses GPU layouts: give a GPU profile and --devices")
    if request.tokens_per_step is not None and request.limits.global_batch is not None:
        raise BtacalcError("{tokens_per_step} sets the global batch of a search that fixes none: {global_batch} "
                           "fixes it here")
    if request.micro_batches is not None:  # hostile35: it was dropped (the base resolves without it), in silence
        raise BtacalcError("{micro_batches} with {search}: the search ranks every layout at one global batch (given, "
                           "or the default), which each layout splits into its own M = N / (DP x micro-batch): give "
                           "{global_batch} (and {micro_batch}) to fix the batch, or plan a layout with {micro_batches}")
    start = time.perf_counter()
    if request.recompute is None and (request.checkpoint_early_stop or request.recompute_layers):
        # hostile32 D2: both shape a full recomputation, which is then the only policy to rank (the search ranked
        # every policy, and its winner's plan refused one without full, or the base at a profile's default none)
        request = request.with_changes(recompute="full")
    # the split options apply per candidate (their PP and VP); the base resolves the rest. hostile28: so does the
    # interleaved schedule's micro-batch group when the search chooses VP (a VP 1 candidate's plan has none)
    chosen_vp = request.virtual_pipeline is None
    # hostile30 D4: with TP chosen, the base resolves at TP 1, where PyTorch FSDP2 refuses the TP-comm overlap
    # (torchtitan's async TP needs TP > 1); each candidate takes the request's overlap back (`_tp_comm`). FSDP1 has
    # no TP at all (Layout._validate_fsdp_impl): its refusal stands, naming what the overlap needs
    fsdp1 = request.fsdp and request.fsdp_impl == "torch"
    overlaps = request.overlaps if request.tensor_parallel or fsdp1 else replace(request.overlaps, tp_comm=None)
    base = resolve_execution(request.with_changes(limits=replace(request.limits, global_batch=None, micro_batch=None),
                                                  micro_batches=None, stage_split=StageSplit(), overlaps=overlaps,
                                                  # search33: the search chooses ETP (`expert_tensor_sizes`); the
                                                  # default ETP = TP refused --tp 4 --ep 8 on 16 GPUs (ETP 1, 2 run)
                                                  expert_tensor_parallel=request.expert_tensor_parallel
                                                  or (1 if model.is_moe else None),
                                                  microbatch_group=None if chosen_vp else request.microbatch_group,
                                                  # hostile42: a given VP with PP chosen: the base (PP 1) was refused
                                                  # "--vp > 1 needs --pp > 1"; the candidates take it (_vp_choices)
                                                  virtual_pipeline=request.virtual_pipeline
                                                  if request.pipeline_parallel else None,
                                                  # hostile32 D3: a search ranks its own policies (`_policies`),
                                                  # not the profile's default, which FSDP2 may refuse (selective)
                                                  recompute=request.recompute or "none"),
                             model, hardware)
    # hostile34: the plan's own default (`whole_sequences`: whole sequences, rounded up to a multiple of DP x the
    # micro-batch), to a multiple of the devices x the micro-batch given, so every candidate's DP divides it; the floor
    # tokens // s gave 1,398 sequences at --seq 3000, which only DP 1 and 2 divide, so 32 GPUs ranked PP 16 layouts
    # (and 1,024 at --micro-batch 3, which no layout divides, where plan takes 1,056)
    tokens = request.tokens_per_step or DEFAULT_TOKENS_PER_STEP
    n = request.limits.global_batch or whole_sequences(tokens, base.run.seq_len,
                                                       base.layout.devices * (request.limits.micro_batch or 1))
    _check_space(model, request, base, n, note)
    candidates = list(_candidates(model, hardware, request, base, n))
    if not candidates:
        _refuse_async_tp_alone(model, hardware, request, base)
        raise BtacalcError(f"{{search}}: no layout of {request.devices} devices satisfies the layout rules for "
                           f"{{global_batch}} {n}")
    timed, memory, untimed = _untimed_dropped(model, hardware, base, candidates)
    scores = _scored(model, hardware, base, timed, memory)
    return _result(model, hardware, request, base, n, scores, start, (len(candidates), untimed))


# hostile42: the layouts a search weighs grow with the divisors of the devices and of the batch (PP every divisor up to
# L + 2, EP of gcd(E, devices), the micro-batch every divisor of N / DP up to 65,536 tokens): 40,320 H100s (5,040 x 8)
# evaluated 429,216 layouts in 87 s and 0.9 GB, 256 H100s at s = 128 with a global batch of 720,720 x 256 sequences
# 2,245,280 in 147 s and 3.1 GB, in silence (the README: "about 5 s on 256 GPUs"). Above SEARCH_NOTE_LAYOUTS the
# search says how many it weighs before it starts; above MAX_SEARCH_LAYOUTS it is refused, naming what narrows it.
# Both count `search_space` (783,008 and 3,402,972 there; 145,060 for the README's 256 H100s, 157,680 for its GB200
# benchmark), measured at about SEARCH_SPACE_RATE a second on a quiet core (256 H100s: 145,060 in 4.95 s; under the
# load of three sessions a third of it) and 1.1 kB each (40,320 H100s: 0.9 GB).
SEARCH_NOTE_LAYOUTS = 250_000
MAX_SEARCH_LAYOUTS = 1_000_000
SEARCH_SPACE_RATE = 30_000


def _check_space(model: ModelSpec, request: ExecutionRequest, base: Execution, n: int,
                 note: Optional[Callable[[str], None]]) -> None:
    """The search's size against SEARCH_NOTE_LAYOUTS and MAX_SEARCH_LAYOUTS (see there)."""
    space = search_space(model, request, base, n, len(_search_policies(model, request, base)))
    if space <= SEARCH_NOTE_LAYOUTS:
        return
    narrow = "{tensor_parallel}, {pipeline_parallel}, {expert_parallel}, {micro_batch} or {recompute}"
    where = f"{space:,} layouts of {request.devices:,} devices at {{global_batch}} {n:,}"
    if space > MAX_SEARCH_LAYOUTS:
        cost = f"about {MAX_SEARCH_LAYOUTS // SEARCH_SPACE_RATE} s and 1.1 GB at best"
        raise BtacalcError(f"{{search}}: {where} to weigh, more than the {MAX_SEARCH_LAYOUTS:,} a search takes "
                           f"({cost}): fix {narrow} to narrow it")
    if note is not None:
        note(f"{{search}}: weighing {where} (more than {SEARCH_NOTE_LAYOUTS:,}: about {space // SEARCH_SPACE_RATE} s "
             f"at best, minutes on a loaded machine); fix {narrow} to narrow it")


def _choices(given: Optional[int], name: str) -> tuple[int, ...]:
    return (given,) if given is not None else SIZES[name]


def pipeline_sizes(devices: int, num_layers: int) -> tuple[int, ...]:
    """The PP sizes a search tries (search33; a fixed 1-32 in powers of two before): every divisor of the devices
    (Megatron-Core: TP·PP·CP divides the world, parallel_state.py L815-823 @ d98e8a64; the search checks TP·PP·CP
    per layout) up to L + 2, the units a pipeline spreads (the decoder layers, the embedding and the loss: the
    account-for flags' count, `config.pipeline.balanced_layout`): a larger PP leaves a stage empty. A PP that does
    not divide L takes the plan's own uneven split (`config.pipeline.place`: the account-for flags, Megatron's
    first/last stage sizes, or a layout string), the most even one, whose slowest stage sets the step."""
    return tuple(d for d in divisors(devices) if d <= num_layers + 2)


def micro_batch_sizes(per_replica: int, seq_len: int) -> tuple[int, ...]:
    """The micro-batches a search tries (search33; {1, 2, 4, 8} before): every divisor of the sequences a data-parallel
    replica takes per step, N / DP (Megatron-LM asserts the global batch a multiple of micro-batch x DP,
    core/num_microbatches_calculator.py L381-386 @ d98e8a64), up to `MAX_MICRO_BATCH_TOKENS` tokens (see there)."""
    return tuple(d for d in divisors(per_replica) if d == 1 or d * seq_len <= MAX_MICRO_BATCH_TOKENS)


def expert_tensor_sizes(model: ModelSpec, tp: int) -> tuple[int, ...]:
    """The ETP sizes a search tries beside TP `tp` (search33; {1, TP} before): the divisors of TP that divide the
    expert width. Megatron-Core needs ETP x EP x PP to divide the world (parallel_state.py L872-884 @ d98e8a64;
    `Layout.validate` checks it per layout) and ETP to divide the expert width (the expert linears split it with
    `divide`, tensor_parallel/layers.py L1038, L1408, utils.py L590-599; `Layout.validate`), and ETP 1 where the
    experts have biases (transformer_config.py L2612-2615, `ModelSpec.biased_moe`); a dense model has none above 1.
    It accepts an ETP above TP too (nothing ties ETP to TP: it is TP only by default, parallel_state.py L871-872),
    which the search leaves to --etp: no published layout takes one (the measured set; Megatron-Bridge's perf recipes
    @ 067f987d set ETP 1 in all 65 places), and it would double the space (187,280 layouts instead of 108,800 for the
    GB200 benchmark, 10.7 s of CPU instead of 7.0)."""
    if not model.is_moe or model.biased_moe():
        return (1,)
    return tuple(d for d in divisors(tp) if model.ffn_size % d == 0)


def _vp_choices(request: ExecutionRequest, layers: int, pp: int) -> tuple[int, ...]:
    """VP sizes to try at PP `pp`; a layout string fixes VP = its chunks / PP (Megatron). Beside the fixed list, every
    divisor of the layers per stage (L / PP, or (L + 2) / PP under the account-for flags): Megatron's even
    interleavings (transformer_block.py L161-181 builds L / PP / VP layers per chunk; transformer_config.py L2404-2416).
    review32: the fixed list alone missed Mixtral 8x22B's published PP 8 VP 7 (one layer per chunk), 8% faster than
    the search's winner, and Llama 3 70B's VP 5, 10 and 20 at PP 4."""
    layout = request.stage_split.pipeline_layout
    if request.virtual_pipeline is not None:
        return (request.virtual_pipeline,)
    if layout is not None:
        chunks = len(parse_layout(layout))
        return (chunks // pp,) if chunks % pp == 0 else ()
    even = {d for units in (layers, layers + 2) if units % pp == 0 for d in divisors(units // pp)}
    return tuple(sorted(set(SIZES["virtual_pipeline"]) | even))


def _p2p(request: ExecutionRequest, pp: int, vp: int) -> bool:
    """A candidate's p2p overlap as Megatron-LM runs it: only with the interleaved schedule (arguments.py
    L1010-1012 switches it off without), as the request gives it, and on where the interleaved schedule over
    two stages needs it (`megatron_rules.p2p_refusal`)."""
    return vp > 1 and (request.overlaps.p2p is not False or pp <= 2)


def _tp_comm(request: ExecutionRequest, tp: int, base: bool) -> bool:
    """A candidate's TP-comm overlap: the request's --tp-comm-overlap wherever the candidate has TP > 1 (Megatron-LM
    drops it at TP 1, arguments.py; the base, resolved at TP 1, has dropped it, so a search scored every candidate
    without it and then planned its winner with it)."""
    return tp > 1 and bool(request.overlaps.tp_comm or base)


def _userbuffers_leave_domain(request: ExecutionRequest, base: Execution, tp: int) -> bool:
    """A Megatron candidate whose TP-comm overlap (TransformerEngine's userbuffers) would put a TP group across NVLink
    domains, which plan refuses (`megatron_rules.userbuffers_domain_refusal`): not ranked."""
    on = _tp_comm(request, tp, base.layout.overlap.tp_comm) and not base.layout.torch_fsdp
    return on and userbuffers_domain_refusal(tp, base.layout.devices, base.layout.devices_per_node) is not None


def _async_tp_at_one(request: ExecutionRequest, base: Execution, tp: int) -> bool:
    """hostile30 D4: a PyTorch FSDP search asked for the TP-comm overlap (torchtitan's async TP) ranks TP > 1 only,
    as plan refuses that overlap at TP 1 (`_NO_EFFECT`); Megatron-LM drops it at TP 1 and ranks TP 1 too."""
    return tp == 1 and base.layout.torch_fsdp and bool(request.overlaps.tp_comm)


def _policies(model: ModelSpec, base: Execution) -> tuple[str, ...]:
    """The recomputation policies a search ranks: Megatron's, none it refuses (freshuser17; semantics19: beside the
    plan's CUDA graphs too); under PyTorch FSDP2 torchtitan's (`check_torchtitan_recompute`), its per-op policy where
    it applies to the model and run (`op_recompute_refusal`)."""
    if base.layout.fsdp2:
        return tuple(p for p in TORCHTITAN_RECOMPUTE
                     if op_recompute_refusal(replace(base.run, recompute=p), model) is None)
    return tuple(p for p in RECOMPUTE_CHOICES + (MOE_RECOMPUTE_CHOICES if model.is_moe else ())
                 if recompute_refusal(p, model, base.run.recipe, base.layout.cuda_graph_scope) is None)


def _refuse_async_tp_alone(model: ModelSpec, hardware: HardwareProfile, request: ExecutionRequest,
                           base: Execution) -> None:
    """review26 D1: a PyTorch FSDP search asked for async TP ranks TP > 1 only (`_async_tp_at_one`); where no TP > 1
    layout plans, the refusal names what async TP needs and why TP 2 does not plan (which a plan at TP 1 would have
    said), not the layout rules for a global batch the user may not have given."""
    if not (base.layout.torch_fsdp and request.overlaps.tp_comm and request.tensor_parallel is None):
        return
    why = "no layout with {tensor_parallel} > 1 passes the layout rules"
    try:
        resolve_execution(request.with_changes(tensor_parallel=2, sequence_parallel=True), model, hardware)
    except BtacalcError as exc:
        why = f"at {{tensor_parallel}} 2: {exc.template}"
    raise BtacalcError("{search} with {tp_comm_overlap} on a PyTorch FSDP plan (torchtitan's async TP) ranks "
                       f"{{tensor_parallel}} > 1 only, and {why}")


def _outer(model: ModelSpec, request: ExecutionRequest, base: Execution, n: int) -> Iterator[tuple[int, ...]]:
    """The (TP, PP, VP, CP, DP) a search tries whose TP·PP·CP divides the devices and whose DP divides the batch `n`,
    within a domain and the TP overlap's rules."""
    pps = (request.pipeline_parallel,) if request.pipeline_parallel else \
        pipeline_sizes(request.devices, model.num_layers)
    tps = _choices(request.tensor_parallel, "tensor_parallel")
    layouts = ((tp, pp, vp, cp) for tp, pp in itertools.product(tps, pps)
               for vp in _vp_choices(request, model.num_layers, pp)
               for cp in _choices(request.context_parallel, "context_parallel"))
    for tp, pp, vp, cp in layouts:
        if (request.devices % (tp * pp * cp) or tp > base.layout.devices_per_node
                or _async_tp_at_one(request, base, tp) or _userbuffers_leave_domain(request, base, tp)):
            continue
        dp = request.devices // (tp * pp * cp)
        if n % dp == 0:
            yield tp, pp, vp, cp, dp


def _inner(model: ModelSpec, request: ExecutionRequest, base: Execution, n: int, tp: int,
           dp: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The micro-batches, EPs and ETPs a search tries at TP `tp` and DP `dp`."""
    mbs = (request.limits.micro_batch,) if request.limits.micro_batch else \
        micro_batch_sizes(n // dp, base.run.seq_len)
    eps = (request.expert_parallel,) if request.expert_parallel else \
        tuple(divisors(math.gcd(model.num_experts, request.devices))) if model.is_moe else (1,)  # within the devices
    # review19: a biased MoE model (GPT-OSS) only at ETP 1, which Megatron-Core requires (ModelSpec.biased_moe)
    etps = (request.expert_tensor_parallel,) if request.expert_tensor_parallel else expert_tensor_sizes(model, tp)
    return mbs, eps, etps


def search_space(model: ModelSpec, request: ExecutionRequest, base: Execution, n: int, policies: int) -> int:
    """hostile42: how many layouts a search weighs (`_candidates` with whole heads per TP rank and ETP x EP x PP
    dividing the devices, before the rest of Layout.validate: an upper bound of the layouts evaluated), counted
    without building one."""
    total = 0
    for tp, pp, _, _, dp in _outer(model, request, base, n):
        if model.num_heads % tp or model.num_kv_heads % tp:
            continue  # each rank holds whole heads (Layout.validate)
        mbs, eps, etps = _inner(model, request, base, n, tp, dp)
        grids = sum(1 for ep, etp in itertools.product(eps, etps) if request.devices % (ep * etp * pp) == 0)
        total += sum(1 for mb in mbs if n % (dp * mb) == 0) * grids * policies
    return total


def _candidates(model: ModelSpec, hardware: HardwareProfile, request: ExecutionRequest, base: Execution,
                n: int) -> Iterator[_Candidate]:
    # hostile32 D1: the base's policy, parsed to canonical form (`core_attn` is `selective`); the raw text crashed
    policies = _search_policies(model, request, base)
    for tp, pp, vp, cp, dp in _outer(model, request, base, n):
        mbs, eps, etps = _inner(model, request, base, n, tp, dp)
        overlap = replace(base.layout.overlap, p2p=_p2p(request, pp, vp),
                          tp_comm=_tp_comm(request, tp, base.layout.overlap.tp_comm))
        for mb, ep, etp in itertools.product(mbs, eps, etps):
            if n % (dp * mb):
                continue
            layout = replace(base.layout, tensor_parallel=tp, sequence_parallel=tp > 1, pipeline_parallel=pp,
                             virtual_pipeline=vp, context_parallel=cp, expert_parallel=ep, expert_tensor_parallel=etp,
                             micro_batches=n // (dp * mb), stage_split=request.stage_split,
                             microbatch_group=request.microbatch_group,  # one for all: `_stack` takes the first's
                             overlap=overlap)
            try:
                layout.validate(model, hardware, base.run.seq_len,
                                model.mtp_layers if base.run.multi_token_prediction else 0)
                # review of review35: the search chose CP with eager attention, which its own plan then refused
                check_eager_context_parallel(base.run, layout, hardware.family == "gpu")
                # review24: PyTorch's cross-entropy only at TP 1, as plan refuses it beside tensor parallelism
                check_torch_loss(base.run, layout, hardware.family == "gpu")
                check_dtensor_precision(base.run, layout)
            except BtacalcError:
                continue
            for policy in policies:
                yield _Candidate(_runnable_a2a(layout, policy), mb, policy)


def _search_policies(model: ModelSpec, request: ExecutionRequest, base: Execution) -> tuple[str, ...]:
    return (base.run.recompute,) if request.recompute else _policies(model, base)


def _runnable_a2a(layout: Layout, policy: str) -> Layout:
    """review28: a candidate's all-to-all overlap as its plan runs it: off where Megatron-Core refuses it (PP > 1
    without a virtual pipeline, full recomputation, the moe recompute module: `megatron_rules.a2a_refusal`), as
    `resolve_execution` drops it for a plan (config/resolution.py `_runnable_overlaps`). The search scored such a
    candidate with the overlap its plan then dropped: a PP 2 VP 1 ranking row 14% faster than the plan it stood for."""
    o = layout.overlap
    if not o.all_to_all or a2a_refusal(policy, layout.pipeline_parallel, layout.virtual_pipeline,
                                       layout.expert_parallel) is None:
        return layout
    return replace(layout, overlap=replace(o, all_to_all=False, early_attn_release=False, delay_wgrad=False))


@dataclass
class _Scores:
    """Vectorised results of every candidate: memory, step time and its terms (numpy arrays)."""

    candidates: list[_Candidate]
    memory: np.ndarray
    step: np.ndarray
    tokens: np.ndarray
    mfu: np.ndarray
    terms: dict[str, np.ndarray]

    def row(self, i: int, usable: int) -> LayoutRow:
        c = self.candidates[i]
        lay = c.layout
        return LayoutRow(tensor_parallel=lay.tensor_parallel, pipeline_parallel=lay.pipeline_parallel,
                         virtual_pipeline=lay.virtual_pipeline, context_parallel=lay.context_parallel,
                         expert_parallel=lay.expert_parallel, expert_tensor_parallel=lay.expert_tensor_parallel,
                         data_parallel=lay.data_parallel, micro_batch=c.micro_batch, micro_batches=lay.micro_batches,
                         recompute=c.recompute, fits=bool(self.memory[i] <= usable), memory_bytes=int(self.memory[i]),
                         step_time_s=float(self.step[i]), tokens_per_s=float(self.tokens[i]),
                         tokens_per_s_per_device=float(self.tokens[i]) / lay.devices, mfu=float(self.mfu[i]),
                         time_s={k: float(v[i]) for k, v in self.terms.items()})


# fitting and non-fitting candidates whose pipeline schedule is simulated at once, at first (doubled each
# round, `_scored`)
SIMULATED_AT_ONCE = 32


def _untimed_dropped(model: ModelSpec, hardware: HardwareProfile, base: Execution,
                     candidates: list[_Candidate]) -> tuple[list[_Candidate], np.ndarray, int]:
    """search33: the candidates to time, their bytes, and how many are not timed. Every candidate's memory is
    evaluated first (`_memory`, about a fifth of a timing's cost); every one that fits is timed, and of those that do
    not, the smallest micro-batch of each layout and policy, which can name the fastest layout that does not fit. The
    larger micro-batches of a layout and policy that does not fit, which then do not fit either (the stored
    activations and working sets are per sequence: memory grows with the micro-batch), are not timed: the divisor
    micro-batches made them most of the space."""
    memory = _memory(model, hardware, base, candidates)
    fits = memory <= _usable(model, hardware, base, candidates)
    seen: set[tuple[Any, ...]] = set()
    keep = []
    for i, c in enumerate(candidates):  # `_candidates` yields a layout's micro-batches in ascending order
        lay = c.layout
        key = (lay.tensor_parallel, lay.pipeline_parallel, lay.virtual_pipeline, lay.context_parallel,
               lay.expert_parallel, lay.expert_tensor_parallel, c.recompute)
        if not fits[i]:
            if key in seen:
                continue
            seen.add(key)
        keep.append(i)
    return [candidates[i] for i in keep], memory[keep], len(candidates) - len(keep)


def _scored(model: ModelSpec, hardware: HardwareProfile, base: Execution, candidates: list[_Candidate],
            memory: Optional[np.ndarray] = None) -> _Scores:
    """Every candidate's memory and step time, the step with its pipeline schedule simulated (gpu/schedule.py)
    where that can change what the search shows. The step without the bubble is a lower bound of the step
    (`gpu_step_time`, schedule off), so its tokens/s an upper bound: every candidate is scored by it first,
    then, fastest bound first, the candidates are simulated while a fitting one's bound reaches the slowest
    row of the ranking so far (or there are not enough rows yet) or a non-fitting one's reaches the fastest
    simulated candidate, fitting or not: a candidate left at its bound cannot enter the ranking or be the
    fastest that does not fit (a bound equal to the slowest row is simulated too: left at its bound it would
    tie that row and, listed first, could take its place; review23)."""
    scores = _evaluate(model, hardware, base, candidates, schedule=False, memory=memory)
    usable = _usable(model, hardware, base, scores.candidates)
    fits = scores.memory <= usable
    bound = scores.tokens.copy()
    done = np.zeros(len(bound), dtype=bool)
    batch = SIMULATED_AT_ONCE
    while True:
        ranked = _distinct(scores, [int(i) for i in np.argsort(-np.where(done & fits, scores.tokens, -np.inf),
                                                                   kind="stable") if done[i] and fits[i]], usable)
        slowest = ranked[-1].tokens_per_s if len(ranked) > RUNNERS_UP else -np.inf
        fastest = float(np.max(scores.tokens[done], initial=-np.inf))
        need = ~done & np.where(fits, bound >= slowest, bound >= fastest)
        if not need.any():
            return scores
        take = [int(i) for part in (need & fits, need & ~fits)
                for i in np.argsort(-np.where(part, bound, -np.inf), kind="stable")[:min(batch, int(part.sum()))]]
        exact = _evaluate(model, hardware, base, [scores.candidates[i] for i in take])
        at = {id(c): j for j, c in enumerate(exact.candidates)}  # `_evaluate` orders them by policy and overlap
        for i in take:
            j = at[id(scores.candidates[i])]
            scores.step[i], scores.tokens[i], scores.mfu[i] = exact.step[j], exact.tokens[j], exact.mfu[j]
            for name, v in exact.terms.items():
                scores.terms[name][i] = v[j]
        done[take] = True
        batch *= 2


def _groups(model: ModelSpec, hardware: HardwareProfile, base: Execution,
            candidates: list[_Candidate]) -> Iterator[tuple[list[_Candidate], Problem]]:
    """The candidates in groups evaluated at once, each with its Problem (a Layout of arrays, `_stack`): one per
    policy and all-to-all overlap (`_runnable_a2a`: a Layout's other overlaps are one for all); under a block
    recompute also per PP x VP, whose chunks decide which layers recompute (Problem.stored_layers)."""
    def key(c: _Candidate) -> tuple[Any, ...]:
        pipe = (c.layout.pipeline_parallel, c.layout.virtual_pipeline) if base.run.recompute_layers else ()
        # userbuffers, async TP: the TP overlap runs on a candidate's TP > 1 only (one value per stacked layout)
        # and under PyTorch's FSDP TP 1 apart from TP > 1, DTensor's TP plan (Problem.features dtensor_tp)
        # review32: the per-stage sums loop over the largest VP of a group (gpu/stages.py), so the deep interleavings
        # (VP above the fixed list's 12, `_vp_choices`) are evaluated apart, not making every candidate loop to 48
        # search33: and so do the per-stage loops over the largest PP, so PPs are grouped by their bit length
        # (1, 2-3, 4-7, ...): the divisor PPs up to L + 2 (64 for 94 layers on 256 GPUs) made every candidate loop to 64
        return (c.recompute, c.layout.overlap.all_to_all, c.layout.userbuffers, c.layout.async_tp,
                c.layout.dtensor_tp, c.layout.virtual_pipeline > max(SIZES["virtual_pipeline"]),
                c.layout.pipeline_parallel.bit_length(), *pipe)
    groups: dict[tuple[Any, ...], list[_Candidate]] = {}
    for c in candidates:  # search33: one pass (each group's filter over every candidate was a fifth of the search)
        groups.setdefault(key(c), []).append(c)
    for group_key, group in groups.items():
        layout = _stack([c.layout for c in group])
        yield group, Problem(model, hardware, Execution(replace(base.run, recompute=group_key[0]), layout,
                                                        BatchLimits()))


def _memory(model: ModelSpec, hardware: HardwareProfile, base: Execution, candidates: list[_Candidate]) -> np.ndarray:
    """Every candidate's worst-stage bytes, in the order given."""
    at = {id(c): i for i, c in enumerate(candidates)}
    out = np.zeros(len(candidates))
    for group, problem in _groups(model, hardware, base, candidates):
        mb = np.array([c.micro_batch for c in group])
        out[[at[id(c)] for c in group]] = np.broadcast_to(GpuMemory(problem).total(np.ones_like(mb), mb), mb.shape)
    return out


def _evaluate(model: ModelSpec, hardware: HardwareProfile, base: Execution, candidates: list[_Candidate],
              schedule: bool = True, memory: Optional[np.ndarray] = None) -> _Scores:
    """Every candidate's memory and step time, one vectorised evaluation per group (`_groups`; without `schedule`,
    the step's lower bound: `gpu_step_time`); `memory`: the candidates' bytes, known (`_memory`), in their order."""
    order: list[_Candidate] = []
    parts: dict[str, list[np.ndarray]] = {}
    at = {id(c): i for i, c in enumerate(candidates)}
    for group, problem in _groups(model, hardware, base, candidates):
        mb = np.array([c.micro_batch for c in group])
        ones = np.ones_like(mb)
        st = gpu_step_time(problem, ones, mb, schedule=schedule)
        m = problem.layout.micro_batches
        d = st.details
        values = {"memory": GpuMemory(problem).total(ones, mb) if memory is None else
                  memory[[at[id(c)] for c in group]], "step": st.step_time_s, "tokens": st.tokens_per_s,
                  "mfu": st.mfu, **{f"term:{k}": v * m for k, v in d["terms"].items()},
                  "term:pipeline_bubble": d["bubble_s"], "term:data_parallel_sync": d["sync_s"]}
        for k, v in values.items():
            parts.setdefault(k, []).append(np.broadcast_to(np.asarray(v, dtype=float), mb.shape))
        order += group
    cat = {k: np.concatenate(v) for k, v in parts.items()}
    terms = {k[5:]: v for k, v in cat.items() if k.startswith("term:")}
    return _Scores(order, cat["memory"], cat["step"], cat["tokens"], cat["mfu"], terms)


def _stack(layouts: list[Layout]) -> Layout:
    """One Layout whose parallel sizes are arrays (one element per candidate)."""
    fields = ("tensor_parallel", "pipeline_parallel", "virtual_pipeline", "context_parallel", "expert_parallel",
              "expert_tensor_parallel", "micro_batches")
    arrays: dict[str, Any] = {f: np.array([getattr(lay, f) for lay in layouts]) for f in fields}
    p2p: Any = np.array([lay.overlap.p2p for lay in layouts])  # on with interleaving unless the request says
    return replace(layouts[0], sequence_parallel=True, overlap=replace(layouts[0].overlap, p2p=p2p), **arrays)


def _result(model: ModelSpec, hardware: HardwareProfile, request: ExecutionRequest, base: Execution, n: int,
            scores: _Scores, start: float, counts: tuple[int, int]) -> SearchResult:
    """`counts`: the layouts evaluated and how many of them (not fitting) were not timed (`_untimed_dropped`)."""
    usable = _usable(model, hardware, base, scores.candidates)
    fits = scores.memory <= usable
    result = SearchResult(model=model.name, hardware=hardware.name, devices=request.devices, global_batch=n,
                          seq_len=base.run.seq_len, candidates=counts[0], fitting=int(fits.sum()),
                          not_timed=counts[1], elapsed_s=0.0)
    by_speed = np.argsort(-scores.tokens, kind="stable")
    fitting = [int(i) for i in by_speed if fits[i]]
    best_fit = scores.tokens[fitting[0]] if fitting else 0.0
    faster = [int(i) for i in by_speed if not fits[i] and scores.tokens[i] > best_fit]
    if faster:
        result.fastest_not_fitting = scores.row(faster[0], int(usable[faster[0]]))
    if not fitting:
        result.why = [f"none of the {counts[0]:,} layouts fits in {usable.max() / 1e9:.1f} GB per device",
                      "the same command without --search lists what would fit (a device count, ZeRO-3, recomputation), "
                      "each change checked to fit"]
    else:
        ranking = _distinct(scores, fitting, usable)
        result.ranking = ranking
        result.best = make_plan(model, hardware, _request_of(request, ranking[0], n))
        result.why = _why(ranking, result.fastest_not_fitting, int(usable[faster[0]]) if faster else 0, counts[1])
    result.elapsed_s = time.perf_counter() - start
    return result


def _usable(model: ModelSpec, hardware: HardwareProfile, base: Execution, candidates: list[_Candidate]) -> np.ndarray:
    """Each candidate's usable bytes: the profile's less the library workspaces its run holds, which differ between
    layouts only by TransformerEngine's userbuffers workspace (TP > 1 under --tp-comm-overlap; config/workspaces.py)."""
    by_userbuffers: dict[bool, int] = {}
    for c in candidates:
        if c.layout.userbuffers not in by_userbuffers:
            problem = Problem(model, hardware, replace(base, layout=c.layout))
            by_userbuffers[c.layout.userbuffers] = hardware.usable_capacity(problem.workspace_bytes)
    return np.array([by_userbuffers[c.layout.userbuffers] for c in candidates], dtype=np.int64)


def _distinct(scores: _Scores, fitting: list[int], usable: np.ndarray) -> list[LayoutRow]:
    """The fastest fitting rows, winner first, one per outcome: a layout under several recomputation
    policies, or layouts that trade CP for micro-batch size at identical time and memory, count once."""
    seen: set[Any] = set()
    out: list[LayoutRow] = []
    for i in fitting:
        row = scores.row(i, int(usable[i]))
        keys = {row.label().split(" rc ")[0], (round(row.tokens_per_s, 3), row.memory_bytes)}
        if not keys & seen:
            seen |= keys
            out.append(row)
        if len(out) > RUNNERS_UP:
            break
    return out


def _request_of(request: ExecutionRequest, row: LayoutRow, n: int) -> ExecutionRequest:
    return request.with_changes(
        tensor_parallel=row.tensor_parallel, pipeline_parallel=row.pipeline_parallel,
        virtual_pipeline=row.virtual_pipeline, context_parallel=row.context_parallel,
        expert_parallel=row.expert_parallel, expert_tensor_parallel=row.expert_tensor_parallel,
        sequence_parallel=row.tensor_parallel > 1 or None, recompute=row.recompute, micro_batches=None,
        microbatch_group=request.microbatch_group if row.virtual_pipeline > 1 else None,
        # G = 1: the ranking timed each micro-batch untiled (`gpu_step_time(problem, ones, mb)`), and Megatron has no
        # attention tiles, so the winner's exact plan (and an --emit of it) must not tile its micro-batch either
        limits=replace(request.limits, global_batch=n, micro_batch=row.micro_batch, tiles=1))


# Layouts within this share of the winner's tokens/s count as ties (the search reports them as such).
TIE = 0.005


def _why(ranking: list[LayoutRow], faster: Optional[LayoutRow], faster_usable: int, not_timed: int = 0) -> list[str]:
    """What the winner saves against the first clearly slower runner-up, the ties (and what ranked the winner first
    among them), and the fastest layout that does not fit (what binds: memory), or that none is faster."""
    best, out = ranking[0], []
    ties = [r for r in ranking[1:] if r.tokens_per_s >= (1 - TIE) * best.tokens_per_s]
    if ties:
        # review32: the line called the ties equivalent and did not say why the winner still came first (by predicted
        # tokens/s alone, often by a few hundredths of a percent); it names the tie with the most memory headroom
        roomy = min(ties, key=lambda r: r.memory_bytes)
        out.append(f"{len(ties)} runner-up(s) within {100 * TIE:.1f}% of it (e.g. {ties[0].label()}): equivalent "
                   "choices by this model; it ranks first by predicted tokens/s alone, "
                   f"{100 * (best.tokens_per_s / ties[0].tokens_per_s - 1):.2f}% ahead"
                   # freshuser26: "at 144.4 GB" read as headroom; it is the memory the tie uses
                   + (f"; the most memory headroom among them: {roomy.label()}, using {roomy.memory_bytes / 1e9:.1f} "
                      f"GB per device against the winner's {best.memory_bytes / 1e9:.1f} GB"
                      if roomy.memory_bytes < best.memory_bytes else ""))
    slower = next((r for r in ranking[1:] if r.tokens_per_s < (1 - TIE) * best.tokens_per_s), None)
    if slower is not None:
        out.append(_saves(best, slower))
    if faster is not None:
        out.append(f"{faster.label()} would be {100 * (faster.tokens_per_s / best.tokens_per_s - 1):.1f}% faster but "
                   f"needs {faster.memory_bytes / 1e9:.1f} GB of {faster_usable / 1e9:.1f} GB usable")
    elif not_timed:  # search33: a larger micro-batch that does not fit, not timed, may be faster
        out.append("no layout timed is faster, fitting or not: memory does not bind it among them")
    else:
        out.append("no layout of the space is faster, fitting or not: memory does not bind it")
    if not_timed:
        out.append(f"{not_timed:,} layouts that do not fit were not timed: larger micro-batches of a layout and policy "
                   "that does not fit at a smaller one")
    return out


def _seconds(d: float) -> str:
    return f"{d:.2f} s" if d >= 0.01 else f"{1e3 * d:.1f} ms"


def _saves(best: LayoutRow, slower: LayoutRow) -> str:
    """What the winner saves against `slower`, term by term. review32: terms under 5 ms were dropped, so a winner 0.6%
    faster on a 0.8 s step read "it saves little"; a term now counts from a thousandth of the step."""
    gain = best.tokens_per_s / slower.tokens_per_s - 1
    floor = 1e-3 * best.step_time_s
    deltas = sorted(((slower.time_s.get(k, 0.0) - v, k) for k, v in best.time_s.items()), reverse=True)
    saves = ", ".join(f"{k} {_seconds(d)}" for d, k in deltas[:2] if d >= floor)
    costs = ", ".join(f"{k} {_seconds(-d)}" for d, k in deltas[::-1][:1] if d <= -floor)
    return (f"{100 * gain:.1f}% faster than {slower.label()}: it saves {saves or 'little'} per step"
            + (f" and spends {costs} more" if costs else ""))
