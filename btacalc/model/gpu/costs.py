"""Per-device, per-micro-batch costs of the parts a pipeline stage holds: one decoder layer of each
layer kind, the parts of the first stage (embedding) and of the last (final norm, LM head, loss).

Every value comes from the catalogue evaluated per device (`Problem.evaluate`: terms divided by the
tensor-parallel split, the batch by context parallelism). On top of that:

- time per phase: the roofline max(FLOPs / (peak x efficiency), HBM traffic / bandwidth) over the
  forward, backward and re-run passes; the phases of the attention core share one roofline under
  FlashAttention (one fused kernel, Dao et al. 2022);
- the routed experts: a device holds E/(EP·ETP) of the experts' weights and reads only those; the
  busiest expert-parallel rank receives `routing_imbalance` times the mean routed tokens (R, 1 =
  balanced), which stretches the routed phases' FLOPs, activation traffic, stored and transient bytes
  and the all-to-all (with EP = 1 every expert is local and the total does not change: R acts only
  with EP > 1);
- low-precision training (`precision.py`): a `low_precision` phase's GEMMs at the recipe's dtype peak,
  plus its cast kernels' HBM traffic;
- communication volumes before the collective factor and link (`collectives.py`): tensor-parallel
  boundary exchanges, the context-parallel K/V ring, the expert-parallel all-to-all, the pipeline
  boundary activation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ...catalogue.compiled import PhaseValues
from ...catalogue.constants import constants
from ...catalogue.terms import Phase
from ..problem import Evaluation, Problem
from ..steptime import compute_efficiency
from ..arrays import maximum, where
from .precision import CastRates, cast_rates, phase_cast_s


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
    core_s: Any = 0.0  # the attention core (what hides the context-parallel ring)
    tp_bytes: Any = 0  # tensor-parallel collective units x volume (x (t-1)/t per rank: collectives.py)
    cp_bytes: Any = 0  # K/V ring volume per exchange step (x (CP - 1): collectives.py)
    a2a_bytes: Any = 0  # expert-parallel dispatch + combine, all passes (x (1 - 1/EP): collectives.py)
    pp_bytes: Any = 0  # stage-boundary activation of one micro-batch, one direction
    tp_calls: Any = 0  # tensor-parallel collective calls (each pays the link's latency: collectives.py)
    cp_calls: Any = 0  # context-parallel ring exchanges (each CP - 1 sends)
    a2a_calls: Any = 0  # expert-parallel all-to-alls (dispatch, combine, their backward and re-runs)
    phase_s: dict[str, Any] = field(default_factory=dict)  # roofline time per phase (report)
    cast_s: dict[str, Any] = field(default_factory=dict)  # low precision: each phase's cast kernels (in phase_s)
    low_precision_params: Any = 0  # dense weights of low-precision phases (quantised copies cached)
    low_precision_routed: Any = 0  # routed experts' weights of low-precision phases (all E)


@dataclass(frozen=True)
class _Rates:
    peak: float  # achieved matmul FLOP/s
    hbm: float  # HBM bytes/s
    imbalance: Any  # R on the busiest expert-parallel rank (1 without expert parallelism)
    expert_shards: Any  # EP·ETP
    flash: bool
    sequence_parallel: bool
    beta: int
    cast: Optional[CastRates] = None  # the low-precision recipe's rates (None: 16-bit training)


def _rates(problem: Problem) -> _Rates:
    hw, lay = problem.hardware, problem.layout
    return _Rates(
        peak=hw.chip.peak_flops_per_s.value * compute_efficiency(problem),
        hbm=hw.memory.offchip_bandwidth_bytes_per_s.value,
        imbalance=where(lay.expert_parallel > 1, problem.run.routing_imbalance, 1.0),
        expert_shards=lay.expert_parallel * lay.expert_tensor_parallel,
        flash=problem.run.attention == "flash",
        sequence_parallel=lay.sequence_parallel,
        beta=problem.run.bytes_per_element,
        cast=cast_rates(problem),
    )


def layer_parts(problem: Problem, ev: Evaluation, memory_only: bool = False) -> list[Part]:
    """One decoder layer of each layer kind (in `ev.layers` order); with `memory_only`, only the bytes
    and parameters (what the memory model needs: the solver asks for many shapes)."""
    r = _rates(problem)
    return [_part(pv, [p for p in pv.phases if p.scope == "layer"], r, memory_only) for _, pv in ev.layers]


def outside_parts(problem: Problem, ev: Evaluation, memory_only: bool = False) -> tuple[Part, Part]:
    """(first stage's, last stage's) parts outside the layers."""
    r = _rates(problem)
    phases = [p for p in ev.outside.phases if p.scope == "model"]
    return (_part(ev.outside, [p for p in phases if p.pipeline_stage == "first"], r, memory_only),
            _part(ev.outside, [p for p in phases if p.pipeline_stage == "last"], r, memory_only))


def _part(pv: PhaseValues, phases: list[Phase], r: _Rates, memory_only: bool = False) -> Part:
    part, core = Part(), [0, 0, 0]  # fused FlashAttention core: FLOPs, traffic, backward FLOPs
    for phase in phases:
        v = pv.of(phase.name).__getitem__
        load = r.imbalance if phase.routed_load else 1.0
        if memory_only:
            _memory(part, phase, v, load)
            continue
        flops = (v("flops_fwd") + v("flops_bwd") + v("flops_recompute")) * load
        traffic = _traffic(phase, v, r, load)
        if phase.core and r.flash:
            core = [core[0] + flops, core[1] + traffic, core[2] + v("flops_bwd") * load]
            t = 0.0
        else:
            t = maximum(flops / _peak(phase, r), traffic / r.hbm) + _cast(part, phase, v, r, load)
        part.phase_s[phase.name] = t
        part.compute_s = part.compute_s + t
        part.backward_s = part.backward_s + t * _backward_share(v)
        part.core_s = part.core_s + (t if phase.core else 0.0)
        _memory(part, phase, v, load)
        _volumes(part, v, r)
    if r.flash and not memory_only:
        _fused_core(part, pv, phases, core, r)
    return part


def _fused_core(part: Part, pv: PhaseValues, phases: list[Phase], core: list[Any], r: _Rates) -> None:
    """The FlashAttention kernel: one roofline over the core phases, shared out by their FLOPs."""
    fused = maximum(core[0] / r.peak, core[1] / r.hbm)
    part.compute_s, part.core_s = part.compute_s + fused, part.core_s + fused
    safe = where(core[0] > 0, core[0], 1)
    part.backward_s = part.backward_s + fused * where(core[0] > 0, core[2] / safe, 0)
    for phase in phases:
        if phase.core:
            flops = pv.value(phase.name, "flops_fwd") + pv.value(phase.name, "flops_bwd") \
                + pv.value(phase.name, "flops_recompute")
            part.phase_s[phase.name] = fused * where(core[0] > 0, flops / safe, 0)


def _peak(phase: Phase, r: _Rates) -> Any:
    """Achieved FLOP/s of the phase's GEMMs: the recipe's dtype for low-precision phases, else 16-bit."""
    return r.cast.peak if r.cast is not None and phase.low_precision else r.peak


def _cast(part: Part, phase: Phase, v: Any, r: _Rates, load: Any) -> Any:
    """Seconds of the phase's cast kernels per micro-batch (`precision.phase_cast_s`), kept for the report."""
    if r.cast is None or not phase.low_precision:
        return 0.0
    t = phase_cast_s(r.cast, r.hbm, phase, v, load, r.expert_shards)
    part.cast_s[phase.name] = t
    return t


def _backward_share(v: Any) -> Any:
    total = v("flops_fwd") + v("flops_bwd") + v("flops_recompute")
    return where(total > 0, v("flops_bwd") / where(total > 0, total, 1), 2 / 3)


def _traffic(phase: Phase, v: Any, r: _Rates, load: Any) -> Any:
    """HBM bytes over the forward, re-run and backward passes; a routed phase reads only the device's
    share of the experts' weights, and its activation traffic scales with the routed load."""
    fwd, bwd = v("bytes_moved"), v("bytes_moved_bwd")
    if phase.routed_load:
        w = r.beta * v("params")  # the experts' weights read per forward pass
        k = constants().passes.backward_traffic_factor
        fwd = (fwd - w) * load + w / r.expert_shards
        bwd = (bwd - k * w) * load + k * w / r.expert_shards
    return fwd * (1 + v("reruns")) + bwd


def _memory(part: Part, phase: Phase, v: Any, load: Any) -> None:
    part.stored = part.stored + v("stored") * load
    part.recompute = part.recompute + v("recompute_bytes") * load
    part.transient = maximum(part.transient, v("transient") * load)
    if phase.param_bucket == "routed":
        part.routed_params = part.routed_params + v("params")
        if phase.low_precision:
            part.low_precision_routed = part.low_precision_routed + v("params")
    else:
        part.dense_params = part.dense_params + v("params")
        if phase.low_precision:
            part.low_precision_params = part.low_precision_params + v("params")


def _volumes(part: Part, v: Any, r: _Rates) -> None:
    """Communication volumes of one micro-batch (see the module docstring); collective factors are
    named constants: an all-reduce counts all_reduce (2) units, a reduce-scatter or all-gather one."""
    p, c = constants().passes, constants().collectives
    reruns = v("reruns")
    if r.sequence_parallel:
        # in: all-gather forward, reduce-scatter backward, the input gathered again for dW, re-run gather
        tp_in = c.all_gather + c.reduce_scatter + p.sp_backward_regather * c.all_gather + reruns * c.all_gather
        tp_out = c.reduce_scatter + c.all_gather + reruns * c.reduce_scatter
    else:  # Shoeybi et al. 2019: f (identity forward, all-reduce backward) and g (all-reduce forward)
        tp_in = c.all_reduce
        tp_out = c.all_reduce * (1 + reruns)
    part.tp_bytes = part.tp_bytes + tp_in * v("tp_in_bytes") + tp_out * v("tp_out_bytes")
    part.cp_bytes = part.cp_bytes + v("cp_bytes") * (1 + p.cp_backward_exchange_factor + reruns)
    part.a2a_bytes = part.a2a_bytes + v("a2a_bytes") * (1 + p.backward_exchange_factor + reruns) * r.imbalance
    # calls: one per exchange counted above (an all-reduce is one call of two units)
    if r.sequence_parallel:
        in_calls, out_calls = 2 + p.sp_backward_regather + reruns, 2 + reruns
    else:
        in_calls, out_calls = 1, 1 + reruns
    part.tp_calls = part.tp_calls + where(v("tp_in_bytes") > 0, in_calls, 0) + where(v("tp_out_bytes") > 0, out_calls, 0)
    part.cp_calls = part.cp_calls + where(v("cp_bytes") > 0, 2 + reruns, 0)
    part.a2a_calls = part.a2a_calls + where(v("a2a_bytes") > 0, 1 + p.backward_exchange_factor + reruns, 0)
    part.pp_bytes = part.pp_bytes + v("pp_bytes")
