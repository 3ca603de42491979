"""A part's totals for one micro-batch on one device (`Part`: bytes, seconds, counts, each phase's GEMMs as
`GemmRow`): what `costs.py` fills phase by phase and the stage timing (`timing.py`) and memory (`memory.py`) read."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

@dataclass
class Part:
    """Totals of a group of phases for one micro-batch on one device (bytes, seconds, parameters)."""

    stored: Any = 0
    recompute: Any = 0
    transient: Any = 0
    dense_params: Any = 0  # per device (tensor-parallel shard), weights outside the routed experts
    routed_params: Any = 0  # all E routed experts' weights (a device holds 1/(EP·ETP) of them)
    compute_s: Any = 0.0  # roofline time, forward + backward + re-run
    backward_s: Any = 0.0
    recompute_s: Any = 0.0  # the re-run's share of compute_s (activation recomputation: it runs in the backward pass)
    core_s: Any = 0.0  # the attention core (what hides the context-parallel ring)
    # the pre-dispatch phases' (`Phase.pre_dispatch`: Megatron's first node of a layer) compute_s, backward_s and
    # recompute_s shares (merged_pair.py: the merged 1F1B schedule's node times)
    pre_dispatch_s: Any = 0.0
    pre_dispatch_backward_s: Any = 0.0
    pre_dispatch_recompute_s: Any = 0.0
    # the weight-gradient GEMMs' share of backward_s (the part's, its pre-dispatch phases'): what
    # --delay-wgrad-compute moves into Megatron's backward_dw (merged_pair.py)
    wgrad_s: Any = 0.0
    pre_dispatch_wgrad_s: Any = 0.0
    tp_bytes: Any = 0  # tensor-parallel collective units x volume (x (t-1)/t per rank: collectives.py)
    cp_bytes: Any = 0  # K/V ring volume per exchange step (x (CP - 1): collectives.py)
    a2a_bytes: Any = 0  # expert-parallel dispatch + combine, all passes (x (1 - 1/EP): collectives.py)
    pp_bytes: Any = 0  # stage-boundary activation of one micro-batch, one direction
    tp_calls: Any = 0  # tensor-parallel collective calls (each pays the link's latency: collectives.py)
    cp_calls: Any = 0  # context-parallel ring exchanges (each CP - 1 sends)
    a2a_calls: Any = 0  # expert-parallel all-to-alls (dispatch, combine, their backward and re-runs)
    # those of them that carry the tokens (one per pass of each exchanging phase): the others move the routing
    # probabilities (Phase.a2a_calls), a latency each; the `plan --json` row's message size is per token call
    a2a_token_calls: Any = 0
    # the allgather dispatcher's gathers and reduce-scatters over the ETP x EP group, each rank's contribution, all
    # passes (x (n_g - 1) bus bytes per rank: collectives.py allgather_dispatch_time), and its calls
    gather_bytes: Any = 0
    gather_calls: Any = 0
    # the alltoall dispatcher's all-gathers of the per-expert token counts over the tp_ep group (Phase.count_gathers),
    # all passes: calls and each call's contribution per rank (8 E bytes: collectives.py count_gather_time)
    count_calls: Any = 0
    count_bytes: Any = 0
    phase_s: dict[str, Any] = field(default_factory=dict)  # roofline time per phase (report)
    cast_s: dict[str, Any] = field(default_factory=dict)  # low precision: each phase's cast kernels (in phase_s)
    weight_cast_s: Any = 0.0  # low precision: casting the weights, once per optimizer step (not per micro-batch)
    low_precision_params: Any = 0  # dense weights of low-precision phases (quantised copies cached)
    low_precision_routed: Any = 0  # routed experts' weights of low-precision phases (all E)
    gemms: dict[str, list["GemmRow"]] = field(default_factory=dict)  # per phase, its matmuls (report)
    # "<TE GEMM family>_<pass>" (config/tp_overlap.py: qkv, proj, fc1, fc2; fprop, dgrad, wgrad) -> seconds of that
    # GEMM pass, once: the dense GEMMs a userbuffers TP overlap hides collectives behind (tp_overlap.py)
    tp_gemm_s: dict[str, Any] = field(default_factory=dict)
    kernels: Any = 0  # kernel launches, forward + backward + re-run (model/gpu/fixed.py)
    expert_gemms: Any = 0  # per-expert GEMMs of grouped expert GEMMs, all passes (issued one by one: fixed.py)
    module_calls: Any = 0  # layer-module calls (linear, grouped linear, attention), all passes (fixed.py)
    glue_ops: Any = 0  # the layer's eager glue outside its modules, reference-op equivalents, all passes (fixed.py)
    # the same four counts for the first forward pass alone (the dispatcher's sync splits the host time by pass)
    kernels_fwd: Any = 0
    expert_gemms_fwd: Any = 0
    module_calls_fwd: Any = 0
    glue_ops_fwd: Any = 0
    # the first forward pass of the phases after the dispatcher's sync (`Phase.after_dispatch_sync`): the four
    # counts and their forward compute (the sync's segment, fixed.py `launch_time_synced`)
    kernels_post: Any = 0
    expert_gemms_post: Any = 0
    module_calls_post: Any = 0
    glue_ops_post: Any = 0
    compute_post_s: Any = 0.0
    # an MoE layer's host-issued counts by the node of Megatron's merged 1F1B schedule that issues them (`pre`:
    # Phase.pre_dispatch, `dispatch`, `combine`; the rest is the MLP node's): the four `ISSUED` counts over all
    # passes, then the four of the first forward (merged_pair.py `NodeHost`); empty for a layer without a dispatch
    node_issued: dict[str, tuple[Any, ...]] = field(default_factory=dict)


# Part's fields in order with their defaults (None for the three dicts, which `new_part` makes fresh)
_PART_DEFAULTS = {f.name: (f.default if f.default is not MISSING else None) for f in fields(Part)}
_PART_DICTS = tuple(f.name for f in fields(Part) if f.default is MISSING)


def new_part(**values: Any) -> Part:
    """`Part(**values)` without the generated __init__'s 33 assignments (a part is made per stage and part of
    every evaluation): the same fields, in the same order, the same defaults, fresh dicts."""
    part = object.__new__(Part)
    state = part.__dict__
    state.update(_PART_DEFAULTS)
    for name in _PART_DICTS:
        state[name] = {}
    state.update(values)
    return part


@dataclass(frozen=True)
class GemmRow:
    """One matmul of a phase as the report shows it: its forward shape and how fast it runs."""

    name: str
    m: Any
    n: Any
    k: Any
    groups: Any  # GEMMs sharing the waves (a grouped expert GEMM: min(E/EP, 4) experts on TE's 4 streams), else 1
    launches: Any  # launches per forward pass (a grouped expert GEMM: rounds of those, E/EP / groups)
    efficiency: Any  # forward: share of the datasheet peak (compute_efficiency x quantisation, or the memory floor)
    backward_efficiency: Any  # data and weight gradients together
    binding: Any  # compute / waves / memory (forward); the attention core: compute / memory / measured
    batch: Any = 1  # matrices of this shape per launch (the attention core: sequences x query heads), else 1
    causal_fraction: Any = 1.0  # share of its m x n (queries x keys) blocks the kernel runs (causal block skipping)
    kernel: str = "gemm"  # gemm (the shape model), fused_attention or eager_attention (timed with the core)
