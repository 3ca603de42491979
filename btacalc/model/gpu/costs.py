"""Per-device, per-micro-batch costs of the parts a pipeline stage holds: one decoder layer of each
layer kind, the parts of the first stage (embedding) and of the last (final norm, LM head, loss).

Every value comes from the catalogue evaluated per device (`Problem.evaluate`: terms divided by the
tensor-parallel split, the batch by context parallelism). On top of that:

- time per phase: the roofline max(FLOPs / (peak x efficiency), HBM traffic / (bandwidth x the streaming
  kernels' achieved share, `Memory.streaming_bandwidth_bytes_per_s`)) over the
  forward, backward and re-run passes, where a phase with matmuls (the catalogue's `gemm` entries,
  (m, n, k) per device) runs each of them at its own shape's efficiency (`gemm.py`: tiles, waves over
  the SMs, the memory floor); the backward pass runs each forward GEMM (m, n, k) as its data gradient
  (m, k, n) and weight gradient (k, n, m); a grouped expert GEMM takes m x EP x R tokens per expert
  (R the routing imbalance) and runs as TransformerEngine's GroupedLinear issues it, one GEMM per local
  expert over 4 CUDA streams (`_gemm_operands`: rounds of at most 4 experts sharing the waves);
- the phases of the attention core share one roofline under FlashAttention (one fused kernel, Dao et
  al. 2022), whose causal mask skips the key blocks above the diagonal (rates.py `causal_block_fraction`), at
  the run's attention kernel's rate (rates.py `attention_core_peak`: the large-GEMM rate unless
  btacalc/data/attention_kernels.toml gives the kernel another on this architecture);
- the routed experts: a device holds E/(EP·ETP) of the experts' weights and reads only those; the
  busiest expert-parallel rank receives `routing_imbalance` times the mean routed tokens (R, 1 =
  balanced), which stretches the routed phases' FLOPs, activation traffic, stored and transient bytes
  and the all-to-all (with EP = 1 every expert is local and the total does not change: R acts only
  with EP > 1);
- low-precision training (`precision.py`): a `low_precision` phase's GEMMs at the recipe's dtype peak x
  that dtype's GEMM ceiling (rates.py `matmul_ceiling`), plus its cast kernels' HBM traffic, and its
  sequence-parallel all-gathers in the quantised bytes;
- communication volumes before the collective factor and link (`collectives.py`): tensor-parallel
  boundary exchanges, the context-parallel K/V ring, the expert-parallel all-to-all, the pipeline
  boundary activation.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple, Optional

import numpy as np

from ...catalogue.compiled import PhaseValues
from ...catalogue.constants import constants
from ...catalogue.selection import Selection
from ...catalogue.terms import Gemm, Phase
from ...config.cuda_graphs import ISSUED, captured_counts
from ...config.tp_overlap import ub_families
from ..problem import Evaluation, Problem, kind_values
from ..arrays import is_array, maximum, minimum, where
from .precision import CastRates, attention_cast_s, gather_share, phase_cast_s, phase_weight_cast_s
from .gemm import GemmDevice, gemm_passes, gemm_passes_of_many
from ...memo import remembered
from .part import GemmRow, Part, new_part
from .rates import (PYTHON_NUMBERS, Rates, attention_bwd_ratio, attention_core_block_share, attention_core_peak,
                    attention_core_time_factor, attention_kernel_share, rates_of)
from .memory_rows import memory_of_shapes, quantised_kind



class _GemmDtype(NamedTuple):
    """The dtype a phase's GEMMs run in (`_dtype`): its achieved peak, the GEMM shape model's device view (None: a
    profile without [kernels], every matmul at `peak`), its operands' bytes per element and `peak` over the
    dtype's datasheet peak."""

    peak: Any
    device: Optional[GemmDevice]
    beta: float
    share: float


def _kind_rates(problem: Problem, r: Rates, kind: Any, pv: PhaseValues) -> Rates:
    """`r` with the layer kind's symbol values (for its GEMM shapes and its attention core). Only G and b
    depend on the batch shape: the rest (every other symbol, the features, the attention core's factor,
    which reads s and w) is kept per layout and kind (`_kind_template`) when no symbol is an array."""
    template = _kind_template(problem, r, kind, pv)
    if template is None:
        return _kind_rates_of(problem, r, kind, pv, pv.tiles, pv.tile_batch)
    out = object.__new__(Rates)  # dataclasses.replace without re-running __init__ (frozen: set via __dict__)
    out.__dict__.update(template.__dict__)
    symbols = out.__dict__["symbols"] = template.symbols.copy()
    for name, v in (("G", pv.tiles), ("b", pv.tile_batch)):
        symbols[name] = float(v) if isinstance(v, Fraction) else v
    out.__dict__["python_symbols"] = template.python_symbols and type(symbols["G"]) in PYTHON_NUMBERS \
        and type(symbols["b"]) in PYTHON_NUMBERS
    out.__dict__["python_layout"] = template.python_symbols  # (the template's G = b = 1: Python ints)
    return out


def _kind_template(problem: Problem, r: Rates, kind: Any, pv: PhaseValues) -> Optional[Rates]:
    """`_kind_rates` at G = b = 1, kept per layout and kind, or None where a symbol other than G and b is an
    array (points of a sweep: sequence lengths, expert counts) or `r` is not the layout's rates."""
    if r is not rates_of(problem):
        return None
    key = ("gpu kind rates", kind.name, id(pv.compiled))
    cache = problem.layout_cache
    hit = cache.get(key)
    if hit is None or hit[0] is not pv.compiled:
        template = _kind_rates_of(problem, r, kind, pv, 1, 1)
        plain = not any(isinstance(v, np.ndarray) for v in template.symbols.values()) \
            and type(template.core_time_factor) is float
        hit = cache[key] = (pv.compiled, template if plain else None)
    return hit[1]


def _kind_rates_of(problem: Problem, r: Rates, kind: Any, pv: PhaseValues, tiles: Any, tile_batch: Any) -> Rates:
    shape = {**problem.shape_values(tiles, 1), "b": tile_batch}
    symbols = {k: (float(v) if isinstance(v, Fraction) else v) for k, v in kind_values(problem.model, kind, shape).items()}
    out = object.__new__(Rates)  # dataclasses.replace without re-running __init__ (frozen: set via __dict__)
    features, gemms = _selection_gemms(pv.compiled.selection)
    layout = type(r.expert_parallel) is int and all(type(v) in PYTHON_NUMBERS for k, v in symbols.items() if k not in ("G", "b"))
    python = layout and type(symbols["G"]) in PYTHON_NUMBERS and type(symbols["b"]) in PYTHON_NUMBERS
    out.__dict__.update(r.__dict__, symbols=symbols, features=features, gemms=gemms, python_symbols=python,
                        python_layout=layout, plans={},
                        core_time_factor=attention_core_time_factor(problem, symbols, bool(features["sliding_window"])))
    if features["bf16_layer"]:
        out.__dict__.update(_sixteen_bit_rates(problem, r))
    return out


def _sixteen_bit_rates(problem: Problem, r: Rates) -> dict[str, Any]:
    """The rates a layer kept out of the low-precision recipe (feature `bf16_layer`) runs at: no recipe (its
    `low_precision` phases' GEMMs at the 16-bit rate, no casts, 16-bit sequence-parallel gathers: `_dtype`, `_cast`,
    `gather_share` read `cast` None) and, under --fp8-attention, the 16-bit attention kernel without its casts
    (TE's fp8_dpa is the recipe's, and the layer runs outside the recipe's autocast: config/execution.py
    BF16_LAYERS_SOURCE)."""
    if not problem.run.fp8_attention:
        return {"cast": None}
    return {"cast": None, "attention_cast": None, "attention_peak": attention_core_peak(problem, r.peak, "bf16"),
            "attention_wall_rate": attention_kernel_share(problem, "bf16") is not None,
            "attention_bwd_ratio": attention_bwd_ratio(problem, "bf16")}


@remembered
@functools.lru_cache(maxsize=256)
def _selection_gemms(selection: Selection) -> tuple[dict[str, Any], dict[str, tuple[Gemm, ...]]]:
    """A selection's features and, filled in per phase on first use (`_phase_gemms`), the phase's GEMMs that
    apply under them: the same for every layout and shape of that selection."""
    return selection.feature_dict, {}


def _phase_gemms(phase: Phase, r: Rates) -> tuple[Gemm, ...]:
    """The phase's GEMMs that apply under the layer kind's features."""
    try:
        return r.gemms[phase.name]
    except KeyError:
        gemms = r.gemms[phase.name] = tuple(g for g in phase.gemm if g.applies(r.features))
        return gemms


@dataclass(frozen=True)
class _PhasePlan:
    """What `_part` reads of a phase that is the same for every batch shape under one layer kind's rates (kept
    in `Rates.plans` with them, as `_volume_factors`): its GEMMs under the kind's features (`_phase_gemms`),
    how many of them a layer module issues (`_issue`), whether it runs inside the fused attention
    core, and its GEMMs' dtype (`_dtype`)."""

    gemms: tuple[Gemm, ...]  # the matmuls the GEMM shape model times (not the attention core's)
    counts: tuple[str, ...]  # each GEMM's launches per forward pass (an expression)
    grouped: tuple[bool, ...]  # each GEMM's `grouped`
    modules: int
    fused: bool  # phase.core under FlashAttention: timed and counted with the fused kernel (`_fused_core`)
    dtype: _GemmDtype
    tiled: bool  # catalogue `batch = "tile"`: the phase runs once per attention tile, G times a micro-batch
    core_gemms: tuple[Gemm, ...] = ()  # the attention core's matmuls (`Gemm.attention_core`): report rows only


def _phase_plan(phase: Phase, r: Rates) -> _PhasePlan:
    hit = r.plans.get(("phase", phase.name))
    if hit is not None and hit[0] is phase:
        return hit[1]
    every = _phase_gemms(phase, r)
    gemms = tuple([g for g in every if not g.attention_core])
    plan = _PhasePlan(gemms, tuple([g.count for g in gemms]), tuple([g.grouped for g in gemms]),
                      len([g for g in gemms if g.module]), bool(phase.core and r.flash), _dtype(phase, r),
                      phase.batch == "tile", tuple([g for g in every if g.attention_core]))
    r.plans[("phase", phase.name)] = (phase, plan)
    return plan


def layer_parts(problem: Problem, ev: Evaluation, memory_only: bool = False, report: bool = True) -> list[Part]:
    """One decoder layer of each layer kind (in `ev.layers` order); with `memory_only`, only the bytes
    and parameters (what the memory model needs: the solver asks for many shapes); without `report`, no
    per-GEMM report rows (`Part.gemms`: the solver's candidates need the times alone) and no memory bytes
    (`Part.stored`, `recompute`, `transient` left at 0: the parameters alone, `_parameters`)."""
    r = rates_of(problem)
    return [_part(pv, *_part_phases(pv.compiled)["layer"], r if memory_only else _kind_rates(problem, r, kind, pv),
                  memory_only, report) for kind, pv in ev.layers]


def pre_dispatch_stored(problem: Problem, ev: Evaluation) -> list[tuple[Any, Any]]:
    """Per layer kind (in `ev.layers` order), the stored bytes of one micro-batch's phases that form the first node of
    a layer in Megatron's merged 1F1B schedule (`Phase.pre_dispatch`: attention, norms, shared experts, router): what
    a backward layer still holds when the forward layer beside it has finished (memory.py); and those of its dispatch
    node (`Phase.dispatch_node`), which the forward layer holds before its experts run."""
    r = rates_of(problem)
    out = []
    for _, pv in ev.layers:
        layer = _part_phases(pv.compiled)["layer"][0]
        nodes = []
        for node in ("pre_dispatch", "dispatch_node"):
            phases = [p for p in layer if getattr(p, node)]
            nodes.append(_part(pv, phases, ("memory rows", node, tuple([p.name for p in phases])), r,
                               memory_only=True).stored)
        out.append((nodes[0], nodes[1]))
    return out


def outside_parts(problem: Problem, ev: Evaluation, memory_only: bool = False, report: bool = True) -> tuple[Part, Part]:
    """(first stage's, last stage's) parts outside the layers (`memory_only`, `report`: as `layer_parts`)."""
    r = rates_of(problem)
    if not memory_only:
        r = _kind_rates(problem, r, ev.layers[0][0], ev.outside)
    parts = _part_phases(ev.outside.compiled)
    return (_part(ev.outside, *parts["first"], r, memory_only, report),
            _part(ev.outside, *parts["last"], r, memory_only, report))


@remembered
@functools.lru_cache(maxsize=256)
def _part_phases(compiled: Any) -> dict[str, tuple[list[Phase], tuple[Any, ...]]]:
    """A compiled selection's phases of each part (a decoder layer's; outside the layers, the first stage's and
    the last stage's), each with the key of its summed memory rows (`memory_of_shapes`): the same for every
    layout and shape of the selection, so filtered once."""
    model = [p for p in compiled.phases if p.scope == "model"]
    scoped = {"layer": [p for p in compiled.phases if p.scope == "layer"],
              "first": [p for p in model if p.pipeline_stage == "first"],
              "last": [p for p in model if p.pipeline_stage == "last"]}
    return {name: (phases, ("memory rows", tuple([p.name for p in phases]))) for name, phases in scoped.items()}


def _part(pv: PhaseValues, phases: list[Phase], rows_key: Any, r: Rates, memory_only: bool = False,
          report: bool = True) -> Part:
    if memory_only:
        summed = memory_of_shapes(pv, phases, r, rows_key)
        if summed is not None:
            return summed
    part, core = new_part(), _FusedCore()
    quantised = quantised_kind(pv)
    timed = {} if memory_only or r.python_symbols else _gemms_of_part(phases, r)
    graphed = _graphed(phases, r) if not memory_only else {}
    nodes = not memory_only and any(p.dispatch_node for p in phases)  # an MoE layer: its counts kept by node too
    for phase in phases:
        v = pv.of(phase.name)  # quantity -> value (read by subscript: one shape reads ~20 per phase)
        load = r.load(phase)
        if memory_only:
            _memory(part, phase, v, load, quantised)
            continue
        plan = _phase_plan(phase, r)
        flops = (v["flops_fwd"] + v["flops_bwd"] + v["flops_recompute"]) * load
        traffic = _traffic(phase, v, r, load)
        # 1 for each of `ISSUED_COUNTS` the host still issues, 0 for those a CUDA graph replays (`_eager`)
        before = _issued_now(part) if nodes else ()
        _issue(part, phase, v, r, plan, _eager(graphed[phase.name]) if phase.name in graphed else _ALL_EAGER)
        if nodes:
            _to_node(part, _merged_node(phase), before)
        if plan.fused:
            cast_s = core.add(v, load, flops, traffic, r)
            if cast_s is not None:
                part.cast_s[phase.name] = cast_s
            t = 0.0
        else:
            matmul = _matmul_time(part, phase, v, r, load, plan, timed, report)
            if phase.core:  # eager attention: the whole s x s score matrix, masked (rates._eager_core_time_factor)
                matmul, flops = matmul * r.core_time_factor, flops * r.core_time_factor
            if report and plan.core_gemms:  # eager attention's matmuls: the phase's roofline
                part.gemms[phase.name] = _eager_core_rows(plan, r, flops, matmul, traffic / r.stream_hbm)
            t = maximum(matmul, traffic / r.stream_hbm) + _cast(part, phase, v, r, load) + _elementwise_s(v, r, load)
        _add_time(part, phase, v, t)
        if report:
            _memory(part, phase, v, load, quantised)
        else:  # the solver's candidates (timing reads the parameters alone; `MemoryModel` its own parts)
            _parameters(part, phase, v, quantised)
        _volumes(part, phase, v, r)
    before = _issued_now(part) if nodes else ()
    if r.flash and not memory_only:
        _fused_core(part, pv, phases, core, r,
                    eager=not any("kernels" in graphed.get(p.name, ()) for p in phases if p.core), report=report)
    if graphed:
        _graph_launches(part)
    if nodes:  # the attention core and the layer's graph (attention, router, preprocess): the pre-dispatch node's
        _to_node(part, "pre", before)
    return part


def _merged_node(phase: Phase) -> Optional[str]:
    """The node of Megatron's merged 1F1B schedule a layer phase runs in (`Part.node_issued`; None: the MLP node)."""
    return "pre" if phase.pre_dispatch else "dispatch" if phase.dispatch_node else "combine" if phase.combine_node \
        else None


def _issued_now(part: Part) -> tuple[Any, ...]:
    return tuple([getattr(part, n) for n in ISSUED_COUNTS] + [getattr(part, n + "_fwd") for n in ISSUED_COUNTS])


def _to_node(part: Part, node: Optional[str], before: tuple[Any, ...]) -> None:
    """What the part's counts grew by since `before` (`_issued_now`), added to `node`'s (`Part.node_issued`)."""
    if node is None:
        return
    held = part.node_issued.get(node, (0,) * len(before))
    part.node_issued[node] = tuple([h + now - b for h, now, b in zip(held, _issued_now(part), before)])


def _add_time(part: Part, phase: Phase, v: dict[str, Any], t: Any) -> None:
    """A phase's time `t` per micro-batch into the part: its own, the part's compute, its backward share (and the
    forward rest after the dispatcher's sync), and the attention core's."""
    part.phase_s[phase.name] = t
    part.compute_s = part.compute_s + t
    share = _backward_share(v)  # (a pure function of the phase's values: the same value both times)
    part.backward_s = part.backward_s + t * share
    part.recompute_s = part.recompute_s + t * _recompute_share(v)
    if phase.pre_dispatch:
        part.pre_dispatch_s = part.pre_dispatch_s + t
        part.pre_dispatch_backward_s = part.pre_dispatch_backward_s + t * share
        part.pre_dispatch_recompute_s = part.pre_dispatch_recompute_s + t * _recompute_share(v)
    if phase.after_dispatch_sync:
        part.compute_post_s = part.compute_post_s + t * (1 - share)
    part.core_s = part.core_s + (t if phase.core else 0.0)


def _graphed(phases: list[Phase], r: Rates) -> dict[str, frozenset[str]]:
    """Per phase of a layer, the host-issued counts (`ISSUED_COUNTS`) its CUDA-graph scopes capture
    (config/cuda_graphs.py; a layer is an MoE layer when it has `moe`-group phases)."""
    if not r.cuda_graph_scope:
        return {}
    return captured_counts(r.cuda_graph_scope, [p.name for p in phases], any(p.group == "moe" for p in phases))


def _eager(captured: frozenset[str]) -> tuple[int, ...]:
    """1 for each of `ISSUED_COUNTS` the host still issues for a phase, 0 for those its CUDA graph replays."""
    return tuple(0 if n in captured else 1 for n in ISSUED_COUNTS)


def _graph_launches(part: Part) -> None:
    """The launches of a layer's CUDA graph (model/gpu/fixed.py): Megatron's TransformerEngine implementation
    captures one callable per layer, whatever its scopes (transformer_layer.py _te_cuda_graph_capture), replayed
    by one forward and one backward graph (TransformerEngine @ d0067d0d graph.py L1031-1097 Graphed.forward /
    backward): 2 launches, whatever the re-runs. A module recomputed inside the callable re-runs its forward inside
    the backward graph (the backward is captured by torch.autograd.backward over the callable's outputs, graph.py
    L966-975), and no recompute module may enclose a graphed scope, nor full recomputation run beside per-layer
    graphs (Megatron-LM @ d98e8a64 transformer_config.py L2855-2861), so nothing replays the forward graph again
    (mut35). Each launch is taken at the profile's launch_overhead_s. The graph runs before the dispatcher's sync
    (attention, router, preprocess), so its forward launch is not a `*_post` count."""
    part.kernels = part.kernels + 2
    part.kernels_fwd = part.kernels_fwd + 1


def _matmul_time(part: Part, phase: Phase, v: dict[str, Any], r: Rates, load: Any, plan: _PhasePlan,
                 timed: dict[Any, Any], report: bool) -> Any:
    """The phase's FLOPs at its GEMMs' efficiencies: forward and re-run at the forward shapes', backward
    at the data- and weight-gradient shapes' (FLOP-weighted); at `peak` for a phase without GEMMs. A
    low-precision phase runs at its dtype's peak, with its operands' bytes (`_peak`, `_dtype`). `timed`: the
    part's GEMMs already timed together (`_gemms_of_part`; empty: each timed here)."""
    fwd = (v["flops_fwd"] + v["flops_recompute"]) * load
    bwd = v["flops_bwd"] * load
    dtype = plan.dtype
    peak = dtype.peak
    gemms = plan.gemms if dtype.device is not None else ()
    if not gemms:  # every matmul at the peak: a GEMM's weight gradient runs half its backward FLOPs
        _add_wgrad(part, phase, bwd / peak / 2 if plan.gemms else 0.0)
        return (fwd + bwd) / peak
    rows = [_gemm_row(g, r, load, dtype, timed.get((phase.name, i)) if timed else None, report)
            for i, g in enumerate(gemms)]
    if report:
        part.gemms[phase.name] = [row for row, _ in rows if row is not None]  # (every row, with `report`)
    ideal: Any = 0  # each summed from 0 in the GEMMs' order
    t_fwd: Any = 0
    t_bwd: Any = 0
    t_wgrad: Any = 0
    families = ub_families()
    for g, (_, (i, tf, tb, td, tw)) in zip(gemms, rows):
        ideal, t_fwd, t_bwd, t_wgrad = ideal + i, t_fwd + tf, t_bwd + tb, t_wgrad + tw
        family = None if g.grouped else families.get(g.name)
        if family is not None:  # the dense TP GEMMs' passes (model/gpu/tp_overlap.py)
            for name, t in (("_fprop", tf), ("_dgrad", td), ("_wgrad", tw)):
                part.tp_gemm_s[family + name] = part.tp_gemm_s.get(family + name, 0.0) + t
    _add_wgrad(part, phase, bwd / peak * (t_wgrad / (2 * ideal)))
    return fwd / peak * (t_fwd / ideal) + bwd / peak * (t_bwd / (2 * ideal))


def _add_wgrad(part: Part, phase: Phase, t: Any) -> None:
    """The phase's weight-gradient GEMMs' time (its backward's wgrad passes, FLOP-weighted as `_matmul_time` times
    them) into the part: what Megatron's backward_dw runs under --delay-wgrad-compute (TE's linears and grouped
    linears; an attention core's matmuls have no weight, so none)."""
    if phase.core:
        return
    part.wgrad_s = part.wgrad_s + t
    if phase.pre_dispatch:
        part.pre_dispatch_wgrad_s = part.pre_dispatch_wgrad_s + t


def _dtype(phase: Phase, r: Rates) -> _GemmDtype:
    """The dtype of the phase's GEMMs: the low-precision recipe's for a `low_precision` phase (its dtype's
    ceiling x compute_efficiency on the dtype's datasheet peak), else 16-bit."""
    if r.cast is not None and phase.low_precision:
        return _GemmDtype(r.low_peak, r.low_device, r.low_beta, r.low_share)
    return _GemmDtype(r.peak, r.device, r.beta, r.peak_share)


def _gemms_of_part(phases: list[Phase], r: Rates) -> dict[tuple[str, int], Any]:
    """(phase, GEMM index) -> (operands, passes) of every GEMM of the part's timed phases: the GEMMs of one
    dtype timed together (`gemm.gemm_passes_of_many`: over arrays of shapes, one call instead of one per
    GEMM), the same values `_gemm_row` would get one by one."""
    groups: dict[tuple[int, Any], tuple[GemmDevice, list[tuple[tuple[str, int], tuple[Any, ...]]]]] = {}
    for phase in phases:
        plan = _phase_plan(phase, r)
        device, beta = plan.dtype.device, plan.dtype.beta
        if plan.fused or device is None:
            continue
        load = r.load(phase)
        rows = groups.setdefault((id(device), beta), (device, []))[1]
        rows.extend(((phase.name, i), _gemm_operands(g, r, load)) for i, g in enumerate(plan.gemms))
    out = {}
    for (_, beta), (device, rows) in groups.items():
        passes = gemm_passes_of_many([ops[:4] for _, ops in rows], beta, device, r.output_bytes)
        out.update({key: (ops, timed) for (key, ops), timed in zip(rows, passes)})
    return out


def _gemm_operands(g: Gemm, r: Rates, load: Any) -> tuple[Any, Any, Any, Any, Any]:
    """(m, n, k, groups, launches per forward pass) of one GEMM of a phase (see the module docstring).

    A grouped expert GEMM (Megatron's `--moe-grouped-gemm`, TEGroupedMLP) runs in TransformerEngine's
    GroupedLinear through `general_grouped_gemm`, which at every release the rows use (TE v2.2 to v2.13) reaches
    `multi_stream_cublas_gemm`: one cuBLASLt GEMM per local expert, expert i on compute stream i mod 4
    (formulas/constants.toml `grouped_gemm_streams`; TE @ v2.9 transformer_engine/common/gemm/cublaslt_gemm.cu
    L924-977; pytorch/csrc/extensions/gemm.cpp L545-550; a CUTLASS grouped kernel only on sm90 with NVTE_USE_CUTLASS_GROUPED_GEMM=1 in BF16, L1006-1080).
    So no more than 4 experts' GEMMs share the SMs at a time, and a stream's next expert starts when its last one
    ends: the G = E/EP local experts run as G/4 rounds of min(G, 4) GEMMs whose tiles share the waves (the best
    the four streams can do; a remainder round counts as its share of a full one). TE PR 2045's H100 benchmark of
    this path lies between these rounds and the experts one after another (tests/test_moe11_multistream.py,
    docs/clock.md "moe11")."""
    (m, n, k, count), _ = _evaluate_all((g.m, g.n, g.k, g.count), r)
    if g.grouped:
        local = count / r.expert_parallel
        concurrent = minimum(local, constants().transformer_engine.grouped_gemm_streams)
        return m * r.expert_parallel * load, n, k, concurrent, local / maximum(concurrent, 1)
    return m, n, k, 1, count


def _gemm_row(g: Gemm, r: Rates, load: Any, dtype: _GemmDtype, timed: Optional[tuple[Any, Any]],
              report: bool) -> tuple[Optional[GemmRow], tuple[Any, Any, Any, Any, Any]]:
    """One GEMM of a phase in `dtype`: its report row (efficiencies as shares of the dtype's datasheet peak; None
    without `report`) and (ideal forward time, forward time, backward time, data-gradient time, weight-gradient
    time) per pass; `timed`: its operands and passes already computed (`_gemms_of_part`), or None."""
    dev, beta = dtype.device, dtype.beta
    assert dev is not None  # _matmul_time only asks with a device
    if timed is None:
        m, n, k, groups, launches = _gemm_operands(g, r, load)
        fwd, dgrad, wgrad = gemm_passes(m, n, k, beta, dev, groups, r.output_bytes)
    else:
        (m, n, k, groups, launches), (fwd, dgrad, wgrad) = timed
    if type(m) in PYTHON_NUMBERS and type(n) in PYTHON_NUMBERS and type(k) in PYTHON_NUMBERS and type(groups) in PYTHON_NUMBERS:
        # one shape: the float64 operations the array expression below makes, in its order, on Python floats
        ideal = np.float64(2 * float(m) * n * k * groups / dev.peak_flops_per_s)
    else:
        ideal = 2 * np.asarray(m, dtype=float) * n * k * groups / dev.peak_flops_per_s
    bwd_time = dgrad.time_s + wgrad.time_s
    times = (launches * ideal, launches * fwd.time_s, launches * bwd_time, launches * dgrad.time_s,
             launches * wgrad.time_s)
    if not report:
        return None, times
    eff = dtype.share
    row = object.__new__(GemmRow)  # the frozen dataclass's __init__ without its nine object.__setattr__ calls
    row.__dict__.update(name=g.name, m=m, n=n, k=k, groups=groups, launches=launches, efficiency=fwd.efficiency * eff,
                        backward_efficiency=2 * ideal / bwd_time * eff, binding=fwd.binding())
    return row, times


@functools.lru_cache(maxsize=None)
def _code(expr: str) -> Any:
    return compile(expr, "<gemm shape>", "eval")


_FUNCTIONS = {"ceiling": np.ceil, "__builtins__": {}}


@functools.lru_cache(maxsize=None)
def _python_arithmetic(expr: str) -> bool:
    """Whether the expression calls no function (`ceiling` is numpy's): at Python numbers it is then Python
    arithmetic, which numpy's error state does not touch."""
    return not set(_code(expr).co_names) & set(_FUNCTIONS)


def _evaluate_all(exprs: tuple[str, ...], r: Rates) -> tuple[tuple[Any, ...], bool]:
    """(`_evaluate` of each expression at the rates' symbols, whether they are Python numbers), under
    np.errstate(divide="ignore", invalid="ignore") (an empty shape, no expert on a device, is 0/0 over
    arrays); without it where every symbol is a Python int or float (`Rates.python_symbols`) and no
    expression calls a function: there numpy computes nothing, so the state would change nothing (a Python
    division by zero raises either way), and setting it is the costliest step of one shape's GEMM. The same
    holds where only G and b are arrays (`Rates.python_layout`) and no expression reads them: their values
    are then kept per layout and kind (`_shape_free_value`)."""
    symbols = r.symbols
    if r.python_symbols:
        code = _python_tuple(exprs)
        if code is not None:  # one eval of the expressions as a tuple: each sub-expression's own operations
            return eval(code, _FUNCTIONS, symbols), True  # noqa: S307  # (`_evaluate`)
    elif r.python_layout:
        # G or b arrays of shapes (the solver's candidates), no expression reading them (most GEMM counts) and
        # none calling a function: each is the Python arithmetic it is at one shape, numpy computes nothing
        for e in exprs:
            if not (_python_arithmetic(e) and _shape_free(e)):
                break
        else:
            return tuple([_shape_free_value(e, r) for e in exprs]), True
    with np.errstate(divide="ignore", invalid="ignore"):
        return tuple([_evaluate(e, symbols) for e in exprs]), False


@functools.lru_cache(maxsize=None)
def _python_tuple(exprs: tuple[str, ...]) -> Any:
    """The expressions compiled as one tuple display, each in its own parentheses (its operations, in its order,
    on the same symbols: the values `eval` gives one by one), or None where one calls a function
    (`_python_arithmetic`); round "speed7": one eval per GEMM's operands instead of four."""
    if not all(_python_arithmetic(e) for e in exprs):
        return None
    return compile("(" + "".join(f"({e}), " for e in exprs) + ")", "<gemm shapes>", "eval")


@functools.lru_cache(maxsize=None)
def _shape_free(expr: str) -> bool:
    """Whether the expression reads neither G nor b: under one layer kind's rates its value is then the same
    for every batch shape (`_kind_rates` changes only those two symbols)."""
    return not {"G", "b"} & set(_code(expr).co_names)


def _shape_free_value(expr: str, r: Rates) -> Any:
    """A `_shape_free` Python-arithmetic expression at the rates' symbols, evaluated once per layout and kind
    (kept in `Rates.plans`, which every shape of them shares): for arrays of shapes (`_evaluate_all`)."""
    try:
        return r.plans[("expression", expr)]
    except KeyError:
        value = r.plans[("expression", expr)] = eval(_code(expr), _FUNCTIONS, r.symbols)  # noqa: S307  # `_evaluate`
        return value


def _evaluate(expr: str, symbols: dict[str, Any]) -> Any:
    """A catalogue GEMM expression (checked arithmetic over the notation: `terms.check_expression`) at the
    symbol values (ints, floats or arrays of layouts). Callers hold np.errstate(divide="ignore",
    invalid="ignore"): an empty shape (no expert on a device) is 0/0."""
    return eval(_code(expr), _FUNCTIONS, symbols)  # noqa: S307  # arithmetic only, checked when read


def _issue(part: Part, phase: Phase, v: dict[str, Any], r: Rates, plan: _PhasePlan, eager: tuple[int, ...]) -> None:
    """What a phase issues from the host per micro-batch (model/gpu/fixed.py, estimates), added to the part's
    counts in this order (one function, not five: it runs per phase of every timed part; round "speed7"):
    - kernel launches and per-expert GEMMs: each dense GEMM once forward and twice backward; a grouped expert
      GEMM as one GEMM per local expert (E/EP, the host loop of TransformerEngine's multi-stream grouped GEMM)
      in each of those passes; another phase with work one kernel each way; a re-run repeats the forward; the
      fused attention core is counted once for all its phases (`_fused_core`);
    - layer-module calls: each GEMM a module issues (the catalogue's `module` GEMMs: a Megatron/TransformerEngine
      linear or grouped linear, whatever its `count` of matmuls inside) is one module call forward, one
      backward (autograd runs the module's backward function once for its data and weight gradients) and one
      per re-run; the attention core's module is counted with the fused kernel (`_fused_core`);
    - the eager glue in reference ops: forward once and per re-run, backward once; + `_grouped_linear_python`;
    - the first forward pass's share of each (`*_fwd`: a GEMM phase's kernels and expert GEMMs in 3 + re-runs
      passes, another phase's kernel in 2 + re-runs, a module in 2 + re-runs; re-runs belong to the backward);
    - the per-expert quantisation of a low-precision phase's grouped expert GEMMs: TransformerEngine's
      GroupedLinear quantises its input forward and its output gradient backward with one `tex.split_quantize`
      call each, which launches the recipe's `grouped_quantize_kernels_per_expert` per local expert (E/EP) in a
      C++ loop (precision.toml); a re-run quantises the input again. Per grouped GEMM: G x k x (2 + re-runs),
      the first forward G x k (G per grouped GEMM in each of its 3 + re-runs passes);
    - after the dispatcher's sync (`Phase.after_dispatch_sync`), the growth of the `*_fwd` counts also goes to
      the `*_post` counts (`_after_sync`).
    Each count times `eager`'s entry for it (`_eager`: 0 where the phase's CUDA graph replays it); the
    quantisation kernels only where the phase's kernels are eager."""
    reruns = v["reruns"]
    kernels, kernels_fwd, expert_gemms, modules, expert_modules = _issued(v, r, plan)
    kernels, expert_gemms, modules = kernels * eager[0], expert_gemms * eager[1], modules * eager[2]
    glue = phase.host_glue
    part.kernels, part.expert_gemms = part.kernels + kernels, part.expert_gemms + expert_gemms
    part.module_calls = part.module_calls + modules
    part.glue_ops = part.glue_ops + (0 if glue is None else glue.forward_ops * (1 + reruns) + glue.backward_ops) * eager[3]
    before = _forward_counts(part) if phase.after_dispatch_sync else None
    part.kernels_fwd = part.kernels_fwd + kernels_fwd * eager[0]
    part.expert_gemms_fwd = part.expert_gemms_fwd + expert_gemms / (3 + reruns)
    part.module_calls_fwd = part.module_calls_fwd + modules / (2 + reruns)
    part.glue_ops_fwd = part.glue_ops_fwd + (0 if glue is None else glue.forward_ops * eager[3])
    _grouped_linear_python(part, expert_modules, reruns, eager[2], r.cast if phase.low_precision else None)
    if eager[0] and r.cast is not None and phase.low_precision:
        _grouped_quantize(part, expert_gemms, reruns, r.cast)
    if before is not None:
        _after_sync(part, before)


def _issued(v: dict[str, Any], r: Rates, plan: _PhasePlan) -> tuple[Any, Any, Any, Any, Any]:
    """What a phase issues per micro-batch before CUDA graphs (`_issue`'s first two items): (kernel launches, the
    first forward's share of them, per-expert GEMMs, layer-module calls, local experts summed over its grouped
    linear modules); none for a phase inside the fused attention core (`_fused_core` counts it). An eager
    attention core's matmuls (`Gemm.attention_core`, outside the GEMM shape model) launch their `count` once per
    forward and re-run and twice backward (each operand's gradient), with their `backward_scale_kernels` beside
    (`_eager_core_kernels`)."""
    if plan.fused:
        return 0, 0, 0, 0, 0
    reruns = v["reruns"]
    passes = 1 + reruns + 2
    if plan.gemms:
        counts, python = _evaluate_all(plan.counts, r)
        # as `_evaluate_all`: Python numbers (EP an int, `python_symbols`) leave numpy out
        with contextlib.nullcontext() if python else np.errstate(divide="ignore", invalid="ignore"):
            dense = sum([c for c, grouped in zip(counts, plan.grouped) if not grouped])
            experts = sum([c / r.expert_parallel for c, grouped in zip(counts, plan.grouped) if grouped])
            expert_modules = sum([c / r.expert_parallel for c, g in zip(counts, plan.gemms) if g.grouped and g.module])
        kernels, kernels_fwd, expert_gemms = dense * passes, dense, experts * passes
    elif plan.core_gemms:
        kernels, kernels_fwd, modules = _eager_core_kernels(plan.core_gemms, reruns, r)
        return kernels, kernels_fwd, 0, modules, 0
    else:
        work = where((v["bytes_moved"] + v["flops_fwd"]) > 0, 1, 0) * _tiles(plan, r)
        kernels, kernels_fwd, expert_gemms, expert_modules = work * (2 + reruns), work, 0, 0
    return kernels, kernels_fwd, expert_gemms, plan.modules * _tiles(plan, r) * (1 + reruns + 1), expert_modules


def _tiles(plan: _PhasePlan, r: Rates) -> Any:
    """How many times a micro-batch issues a phase: G for a tile-batched phase (it runs once per attention tile of
    b sequences), else 1. A GEMM's launches carry it already in their catalogue `count` ("G")."""
    return r.symbols["G"] if plan.tiled else 1


def _eager_core_kernels(gemms: tuple[Gemm, ...], reruns: Any, r: Rates) -> tuple[Any, Any, Any]:
    """(launches per micro-batch, the first forward's share, attention-module calls) of an eager attention core
    phase's matmuls: per GEMM `count` x (forward 1 + re-runs + backward 2 + `backward_scale_kernels`). Megatron's
    unfused attention (dot_product_attention.py L194-200, L239) runs Q K^T as torch.baddbmm with alpha =
    softmax_scale, whose backward is bmm + mul for each operand (5 + r launches), and P V as torch.bmm (3 + r).
    The attention module's own call is counted on the matmul marked `module` (Q K^T), as the fused core counts
    its module: forward, each re-run and backward (2 + r)."""
    counts, _ = _evaluate_all(tuple([g.count for g in gemms]), r)
    forward = sum(counts)
    modules = sum([c * (2 + reruns) for c, g in zip(counts, gemms) if g.module])
    return sum([c * (3 + reruns + g.backward_scale_kernels) for c, g in zip(counts, gemms)]), forward, modules


def _grouped_quantize(part: Part, expert_gemms: Any, reruns: Any, cast: CastRates) -> None:
    """The per-expert quantisation kernels of a low-precision phase's grouped expert GEMMs (`_issue`'s last
    item but one): the recipe's `grouped_quantize_kernels_per_expert` per local expert in each grouped GEMM's
    forward, backward and re-runs (2 + re-runs), the first forward's share into `kernels_fwd`."""
    per_expert = cast.recipe.grouped_quantize_kernels_per_expert
    if per_expert:
        forward = expert_gemms / (3 + reruns) * per_expert
        part.kernels = part.kernels + forward * (2 + reruns)
        part.kernels_fwd = part.kernels_fwd + forward


def _grouped_linear_python(part: Part, expert_modules: Any, reruns: Any, eager_module: int,
                           cast: Optional[CastRates]) -> None:
    """TransformerEngine GroupedLinear's Python per local expert (model/gpu/fixed.py), counted with the glue in its
    unit (reference ops): `expert_modules` local experts summed over the phase's grouped linear modules (count/EP
    each), x formulas/constants.toml `grouped_linear_expert_forward_ref_ops` once forward and once per re-run, x
    `grouped_linear_expert_backward_ref_ops` once backward; the first forward's share into `glue_ops_fwd` (after
    `_issue`'s other counts, so that a post-sync phase's `_after_sync` sees it). Where a CUDA graph replays the
    module (`eager_module` 0) its Python does not run (no scope btacalc accepts captures the experts today: `moe`
    is refused, data/cuda_graph_scopes.toml). A low-precision phase's recipe (`cast`; else None) adds its
    quantizers' per-expert Python (precision.toml grouped_linear_expert_quantizer_*_ref_ops) to each pass."""
    te = constants().transformer_engine
    fwd, bwd = te.grouped_linear_expert_forward_ref_ops, te.grouped_linear_expert_backward_ref_ops
    if cast is not None:
        fwd += cast.recipe.grouped_linear_expert_quantizer_forward_ref_ops
        bwd += cast.recipe.grouped_linear_expert_quantizer_backward_ref_ops
    forward = expert_modules * fwd * eager_module
    part.glue_ops = part.glue_ops + forward * (1 + reruns) + expert_modules * bwd * eager_module
    part.glue_ops_fwd = part.glue_ops_fwd + forward


# the host-issued counts of a `Part` (host_time's arguments), each also kept for the first forward (`*_fwd`) and
# for the part of it issued after the dispatcher's sync (`*_post`)
ISSUED_COUNTS = ISSUED  # (config/cuda_graphs.py names them: its scopes take some over)
_ALL_EAGER = _eager(frozenset())  # a phase no CUDA graph captures: the host issues every count (`_issue`)


def _forward_counts(part: Part) -> tuple[Any, ...]:
    return tuple(getattr(part, n + "_fwd") for n in ISSUED_COUNTS)


def _after_sync(part: Part, before: tuple[Any, ...]) -> None:
    """Add what a phase after the dispatcher's sync issued in the first forward (the growth of the `*_fwd`
    counts since `before`) to the `*_post` counts."""
    for n, b in zip(ISSUED_COUNTS, before):
        setattr(part, n + "_post", getattr(part, n + "_post") + getattr(part, n + "_fwd") - b)


@dataclass(slots=True)
class _FusedCore:
    """A layer's core phases under FlashAttention, summed for the one fused kernel `_fused_core` times (scalars or
    arrays of shapes; the ints stay ints until a phase adds to them)."""

    flops: Any = 0  # FLOPs the kernel runs: counted forward, backward and re-run FLOPs x the causal block share
    traffic_bytes: Any = 0  # FlashAttention's IO-count HBM traffic (formulas/attention.toml)
    backward_flops: Any = 0  # the backward's share of `flops`
    backward_kernel_flops: Any = 0  # the backward kernel's: `backward_flops` and its recomputation of the scores
    cast_forward_s: Any = 0.0  # --fp8-attention: the casts around the FP8 kernel in the first forward
    cast_backward_s: Any = 0.0  # and in the backward
    reruns: Any = 0  # forward re-runs of the core (its phases share Megatron's core_attn recompute module)

    def add(self, v: dict[str, Any], load: Any, flops: Any, traffic: Any, r: Rates) -> Any:
        """A core phase's `flops` (forward, backward and re-run, x the routed load) and HBM `traffic` into the
        kernel's sums, x the causal block share; its FP8-attention casts' time (None without --fp8-attention)."""
        run = r.core_time_factor
        self.flops, self.traffic_bytes = self.flops + flops * run, self.traffic_bytes + traffic
        self.reruns = maximum(self.reruns, v["reruns"])
        self.backward_flops = self.backward_flops + v["flops_bwd"] * load * run
        # the backward kernel also recomputes the scores: re-run FLOPs that are not a forward re-run
        in_kernel = v["flops_recompute"] - v["reruns"] * v["flops_fwd"]
        self.backward_kernel_flops = self.backward_kernel_flops + (v["flops_bwd"] + in_kernel) * load * run
        if r.attention_cast is None:
            return None
        forward, backward = attention_cast_s(r.attention_cast, r.hbm, v.__getitem__)
        self.cast_forward_s, self.cast_backward_s = self.cast_forward_s + forward, self.cast_backward_s + backward
        return forward + backward


def _fused_core(part: Part, pv: PhaseValues, phases: list[Phase], core: _FusedCore, r: Rates,
                eager: bool = True, report: bool = False) -> None:
    """The FlashAttention kernel, one time over the core phases, shared out by their FLOPs:

        t = F_kernel / R                              where the kernel has a benchmarked rate R
        t = max(F_kernel / R_gemm, Q_IO / B_HBM)      otherwise (the large-GEMM rate's roofline)
        t = t x (1 + F_bwd,kernel / F_kernel x (rho - 1))   under a deterministic backward of measured ratio rho

    plus, under --fp8-attention, the casts around the FP8 kernel (`precision.attention_cast_s`: Q, K, V and dO
    quantised, O and dQ, dK, dV dequantized where the kernel writes them in FP8), bandwidth-bound kernels of
    their own that add to the core's time and go to the phase whose terms count them.
    F_kernel is the FLOPs of the blocks the kernel runs (`attention_core_time_factor`), Q_IO FlashAttention's
    IO-count traffic (Dao et al. 2022, Theorem 2; formulas/attention.toml). A benchmarked rate is FLOPs over
    measured wall time, so it already holds the kernel's memory behaviour, and the IO count (blocks of
    B_c = M/(4d) keys, no L2 reuse of K and V across CTAs) is contradicted by those benchmarks: on H100 at
    d = 128, s = 4096 (B_c = 227) it allows the causal forward 129.5 FLOP/B x 3.35 TB/s = 434 TFLOP/s on the
    blocks run, under cuDNN's measured 534 (tests/test_attention_kernels.py), so it is not applied on top.
    With `report`, each core phase's matmuls as report rows (`_core_rows`) at the kernel's achieved rate."""
    bound = core.traffic_bytes / r.stream_hbm if not r.attention_wall_rate else 0.0
    ran = core.flops > 0
    safe = where(ran, core.flops, 1)
    default = maximum(core.flops / r.attention_peak, bound)
    # a deterministic backward's extra time: (rho - 1) x the backward kernel's share of the default time
    extra = default * where(ran, core.backward_kernel_flops / safe, 0) * (r.attention_bwd_ratio - 1)
    kernel = default + extra
    backward = default * where(ran, core.backward_flops / safe, 0) + extra
    casts = core.cast_forward_s + core.cast_backward_s
    fused = kernel + casts
    part.compute_s, part.core_s = part.compute_s + fused, part.core_s + fused
    _core_issue(part, where(ran, 1, 0) * int(eager), core.reruns, r)
    part.backward_s = part.backward_s + backward + core.cast_backward_s
    if any(p.core and p.pre_dispatch for p in phases):  # the attention core: Megatron's pre-dispatch node
        part.pre_dispatch_s = part.pre_dispatch_s + fused
        part.pre_dispatch_backward_s = part.pre_dispatch_backward_s + backward + core.cast_backward_s
    for phase in phases:
        if phase.core:
            v = pv.of(phase.name)
            flops = v["flops_fwd"] + v["flops_bwd"] + v["flops_recompute"]
            # core.flops holds the FLOPs the kernel runs (counted x the causal block share): the shares sum to 1
            part.phase_s[phase.name] = kernel * where(ran, flops * r.core_time_factor / safe, 0) \
                + part.cast_s.get(phase.name, 0.0)
            # the re-run at the default rate: a deterministic backward's extra time is all in `backward` (mut33)
            rerun = default * where(ran, v["flops_recompute"] * r.core_time_factor / safe, 0)
            part.recompute_s = part.recompute_s + rerun
            if phase.pre_dispatch:
                part.pre_dispatch_recompute_s = part.pre_dispatch_recompute_s + rerun
    if report:
        # the kernel's FLOPs over its time (casts apart), forward and backward; what bounds it
        binding = "measured" if r.attention_wall_rate else _binding(core.flops / r.attention_peak >= bound)
        efficiency = _share(core.flops, default, r)
        backward_efficiency = _share(core.backward_flops, backward, r)
        for phase in phases:
            plan = _phase_plan(phase, r)
            if plan.core_gemms:
                part.gemms[phase.name] = _core_rows(plan, r, efficiency, backward_efficiency, binding, "fused_attention")


def _core_issue(part: Part, issued: Any, reruns: Any, r: Rates) -> None:
    """The fused attention kernel's launches and its attention module's calls (`issued` 1, 0 where it ran nothing
    or a CUDA graph replays it: scope attn): forward, re-runs and backward, once per attention tile (G: the core
    phases are tile-batched)."""
    both, forward = (issued * n * r.symbols["G"] for n in (2 + reruns, 1))
    part.kernels = part.kernels + both  # the fused forward (and its re-runs) and backward kernels
    part.module_calls = part.module_calls + both  # its attention module, forward, re-runs and backward
    part.kernels_fwd = part.kernels_fwd + forward
    part.module_calls_fwd = part.module_calls_fwd + forward


def _share(flops: Any, seconds: Any, r: Rates) -> Any:
    """`flops` in `seconds` as a share of the datasheet peak (0 where nothing ran)."""
    ran = seconds > 0
    return where(ran, flops / where(ran, seconds, 1), 0.0) / r.datasheet_peak


def _binding(compute_bound: Any) -> Any:
    """'compute' or 'memory' (scalars: a str; arrays: an array of str)."""
    if type(compute_bound) in (bool, np.bool_):
        return "compute" if compute_bound else "memory"
    return np.where(compute_bound, "compute", "memory")


def _eager_core_rows(plan: _PhasePlan, r: Rates, flops: Any, matmul_s: Any, memory_s: Any) -> list[GemmRow]:
    """Eager attention's matmuls as report rows: the phase's FLOPs over its roofline max(FLOPs / peak, HBM traffic /
    streaming bandwidth), as `_part` times it (every pass at that rate)."""
    share = _share(flops, maximum(matmul_s, memory_s), r)
    return _core_rows(plan, r, share, share, _binding(matmul_s >= memory_s), "eager_attention")


def _core_rows(plan: _PhasePlan, r: Rates, efficiency: Any, backward_efficiency: Any, binding: Any,
               kernel: str) -> list[GemmRow]:
    """The attention core's matmuls of a phase (`Gemm.attention_core`) as report rows: their per-device shape and
    batch, the share of their blocks the kernel runs (rates.py `attention_core_block_share`) and the core's
    achieved efficiencies; they time nothing (the core is timed as one kernel, `_fused_core`)."""
    symbols = r.symbols
    runs = attention_core_block_share(r.flash, symbols["s"], symbols["w"], bool(r.features["sliding_window"]))
    rows = []
    for g in plan.core_gemms:
        (m, n, k, count, batch), _ = _evaluate_all((g.m, g.n, g.k, g.count, g.batch), r)
        rows.append(GemmRow(name=g.name, m=m, n=n, k=k, groups=1, launches=count, efficiency=efficiency,
                            backward_efficiency=backward_efficiency, binding=binding, batch=batch,
                            causal_fraction=runs, kernel=kernel))
    return rows


def _cast(part: Part, phase: Phase, v: dict[str, Any], r: Rates, load: Any) -> Any:
    """Seconds of the phase's activation and gradient casts per micro-batch (`precision.phase_cast_s`); the
    weights' cast, once per step, goes to `part.weight_cast_s` (the step adds it once, whatever M); the
    report's row carries both on its micro-batch basis."""
    if r.cast is None or not phase.low_precision:
        return 0.0
    t = phase_cast_s(r.cast, r.hbm, phase, v.__getitem__, load, r.expert_shards, weights=False)
    once = phase_weight_cast_s(r.cast, r.hbm, phase, v.__getitem__, r.expert_shards)
    part.weight_cast_s = part.weight_cast_s + once
    part.cast_s[phase.name] = t + once * r.cast.weight_casts_per_micro_batch
    return t


def _elementwise_s(v: dict[str, Any], r: Rates, load: Any) -> Any:
    """Seconds of the phase's separately launched elementwise kernels per micro-batch (the catalogue's
    `elementwise_bytes`, forward and each re-run, and `elementwise_bytes_bwd`): the activation between two
    linears, the residual adds. Each is its own memory-bound kernel, so its bytes at the streaming bandwidth
    add to the phase instead of hiding under its GEMMs' `max`:

        t = (E_fwd x (1 + re-runs) + E_bwd) x load / B_stream

    (Megatron-LM @ d98e8a64 mlp.py L275-317, fused_bias_swiglu.py, fused_bias_dropout.py: jit-fused kernels
    between TransformerEngine modules, which cannot take them in; docs/precision.md "lp6")."""
    return (v["elementwise_bytes"] * (1 + v["reruns"]) + v["elementwise_bytes_bwd"]) * load / r.stream_hbm


# Estimate: the backward share of the time of a phase that counts no FLOPs (a copy, a cast, a permutation: its
# backward moves what its forward did, its gradient through the same bytes) is a matmul phase's, whose backward
# runs two GEMMs (data and weight gradient) per forward one (the FLOP count behind Narayanan et al. 2021, arXiv
# 2104.04473, Eq. 3: a backward pass twice the forward's FLOPs); no measurement splits such a phase.
NO_FLOPS_BACKWARD_SHARE = 2 / 3


def _backward_share(v: dict[str, Any]) -> Any:
    """The backward's share of a phase's time: its backward FLOPs over all it runs (forward, backward, re-run),
    NO_FLOPS_BACKWARD_SHARE for a phase without FLOPs."""
    bwd = v["flops_bwd"]
    total = v["flops_fwd"] + bwd + v["flops_recompute"]
    if not isinstance(total, np.ndarray):  # one shape: the value `where` picks, without computing the other
        return float(bwd) / float(total) if total > 0 else NO_FLOPS_BACKWARD_SHARE  # float64, as the arrays divide
    positive = total > 0  # (one comparison for both `where`s: the same mask)
    return where(positive, bwd / where(positive, total, 1), NO_FLOPS_BACKWARD_SHARE)


def _recompute_share(v: dict[str, Any]) -> Any:
    """The re-run's share of a phase's time (activation recomputation), by FLOPs as `_backward_share`; 0 for a
    phase without FLOPs."""
    total = v["flops_fwd"] + v["flops_bwd"] + v["flops_recompute"]
    if not isinstance(total, np.ndarray):
        return float(v["flops_recompute"]) / float(total) if total > 0 else 0.0
    positive = total > 0
    return where(positive, v["flops_recompute"] / where(positive, total, 1), 0.0)


def _traffic(phase: Phase, v: dict[str, Any], r: Rates, load: Any) -> Any:
    """HBM bytes over the forward, re-run and backward passes; a routed phase reads only the device's
    share of the experts' weights, and its activation traffic scales with the routed load."""
    fwd, bwd = v["bytes_moved"], v["bytes_moved_bwd"]
    if phase.routed_load:
        w = r.beta * v["params"]  # the experts' weights read per forward pass
        k = constants().passes.backward_traffic_factor
        fwd = (fwd - w) * load + w / r.expert_shards
        bwd = (bwd - k * w) * load + k * w / r.expert_shards
    return fwd * (1 + v["reruns"]) + bwd


def _memory(part: Part, phase: Phase, v: dict[str, Any], load: Any, quantised: bool = True) -> None:
    part.stored = part.stored + v["stored"] * load
    part.recompute = part.recompute + v["recompute_bytes"] * load
    part.transient = maximum(part.transient, v["transient"] * load)
    _parameters(part, phase, v, quantised)


def _parameters(part: Part, phase: Phase, v: dict[str, Any], quantised: bool = True) -> None:
    """`_memory`'s parameter counts alone (its bytes left at 0): a part timed without `report`, whose stored,
    re-computed and working-set bytes nothing reads (the step time reads the parameters, `_stage_state`).
    `quantised` False: a layer kept in BF16 (`quantised_kind`), whose linears cache no low-precision weights."""
    low = phase.low_precision and quantised
    if phase.param_bucket == "routed":
        part.routed_params = part.routed_params + v["params"]
        if low:
            part.low_precision_routed = part.low_precision_routed + v["params"]
    else:
        part.dense_params = part.dense_params + v["params"]
        if low:
            part.low_precision_params = part.low_precision_params + v["params"]


def _volumes(part: Part, phase: Phase, v: dict[str, Any], r: Rates) -> None:
    """Communication volumes of one micro-batch (see the module docstring); collective factors are
    named constants: an all-reduce counts all_reduce (2) units, a reduce-scatter or all-gather one. Under a
    low-precision recipe a low-precision phase's sequence-parallel all-gathers move its quantised bytes
    (`precision.gather_share`): the reduce-scatters stay 16-bit. The factors' terms before the re-runs are
    the phase's under the layout (`_volume_factors`), added as written here."""
    f = _volume_factors(phase, r)
    reruns = v["reruns"]
    if f.sequence_parallel:
        # in: all-gather forward, reduce-scatter backward, the input gathered again for dW (Megatron's: sp_regather),
        # re-run gather
        tp_in = (f.tp_in_gathers + reruns * f.all_gather) * f.gather_share + f.reduce_scatter
        # out: reduce-scatter forward (and re-run), the output gradient all-gathered backward
        out_reruns = reruns if r.rerun_scatters else 0  # (the op policy caches them: rates.py)
        tp_out = f.tp_out_head + out_reruns * f.reduce_scatter
        in_calls, out_calls = f.in_calls_head + reruns, 2 + out_reruns
    else:  # Shoeybi et al. 2019: f (identity forward, all-reduce backward) and g (all-reduce forward)
        tp_in = f.all_reduce
        tp_out = f.all_reduce * (1 + reruns)
        in_calls, out_calls = 1, 1 + reruns
    tp_in_bytes, tp_out_bytes, cp_bytes, a2a_bytes = v["tp_in_bytes"], v["tp_out_bytes"], v["cp_bytes"], v["a2a_bytes"]
    part.tp_bytes = part.tp_bytes + tp_in * tp_in_bytes + tp_out * tp_out_bytes
    part.cp_bytes = part.cp_bytes + cp_bytes * (f.cp_head + reruns)
    part.a2a_bytes = part.a2a_bytes + a2a_bytes * (f.a2a_head + reruns) * r.imbalance
    # the allgather dispatcher gathers every token whatever the routing: no imbalance
    gather_bytes = v["gather_bytes"]
    part.gather_bytes = part.gather_bytes + gather_bytes * (f.a2a_head + reruns)
    # review27: one call per tensor a pass gathers or scatters (the dispatch's map, probabilities and tokens), the
    # bytes of all of them summed above
    g = phase.gather_calls
    gather_calls = f.a2a_head + reruns if g is None else g.forward * (1 + reruns) + g.backward
    # a dispatcher that exchanges more than one tensor per pass (Megatron's alltoall: the tokens and their routing
    # probabilities, Phase.a2a_calls) makes one call each, the bytes of all of them summed above
    e = phase.a2a_calls
    token_calls = f.a2a_head + reruns
    a2a_calls = e.forward * (1 + reruns) + e.backward if e is not None and e.applies(r.dispatcher, r.features) \
        else token_calls
    # the per-expert token counts the dispatcher gathers before its all-to-all (Phase.count_gathers): forward only,
    # repeated by a re-run, each call a rank's count per expert
    c = phase.count_gathers
    counts = c.forward * (1 + reruns) if c is not None and c.applies(r.dispatcher, r.features) else 0
    count_bytes = counts * c.bytes_per_expert * (r.experts * 1.0) if c is not None else 0  # float: E may be 2^62
    # calls: one per exchange counted above (an all-reduce is one call of two units)
    if is_array(tp_in_bytes, tp_out_bytes, cp_bytes, a2a_bytes, gather_bytes, reruns):
        part.count_calls = part.count_calls + where(a2a_bytes > 0, counts, 0)
        part.count_bytes = part.count_bytes + where(a2a_bytes > 0, count_bytes, 0)
        part.tp_calls = part.tp_calls + where(tp_in_bytes > 0, in_calls, 0) + where(tp_out_bytes > 0, out_calls, 0)
        part.cp_calls = part.cp_calls + where(cp_bytes > 0, 2 + reruns, 0)
        part.a2a_calls = part.a2a_calls + where(a2a_bytes > 0, a2a_calls, 0)
        part.a2a_token_calls = part.a2a_token_calls + where(a2a_bytes > 0, token_calls, 0)
        part.gather_calls = part.gather_calls + where(gather_bytes > 0, gather_calls, 0)
    else:  # one shape: `where`'s choice inline (the counts are Python numbers; `part` may hold arrays)
        part.count_calls = part.count_calls + (counts if a2a_bytes > 0 else 0)
        part.count_bytes = part.count_bytes + (count_bytes if a2a_bytes > 0 else 0)
        part.tp_calls = part.tp_calls + (in_calls if tp_in_bytes > 0 else 0) + (out_calls if tp_out_bytes > 0 else 0)
        part.cp_calls = part.cp_calls + (2 + reruns if cp_bytes > 0 else 0)
        part.a2a_calls = part.a2a_calls + (a2a_calls if a2a_bytes > 0 else 0)
        part.a2a_token_calls = part.a2a_token_calls + (token_calls if a2a_bytes > 0 else 0)
        part.gather_calls = part.gather_calls + (gather_calls if gather_bytes > 0 else 0)
    part.pp_bytes = part.pp_bytes + v["pp_bytes"]


@dataclass(frozen=True)
class _VolumeFactors:
    """The shape-free terms of a phase's communication factors (`_volumes`), each the leading terms of its
    sum as `_volumes` adds them left to right: the same operations in the same order."""

    sequence_parallel: bool
    gather_share: float  # `precision.gather_share`
    all_gather: int
    reduce_scatter: int
    all_reduce: int
    tp_in_gathers: int  # all_gather + sp_regather x all_gather (rates.sp_regather)
    tp_out_head: Any  # reduce_scatter + all_gather x gather_share
    in_calls_head: int  # 2 + sp_regather
    cp_head: int  # 1 + cp_backward_exchange_factor
    a2a_head: int  # 1 + backward_exchange_factor


def _volume_factors(phase: Phase, r: Rates) -> _VolumeFactors:
    """`_VolumeFactors` of the phase under the rates, kept with the rates (`Rates.plans`: per layout and kind)."""
    hit = r.plans.get(("volumes", phase.name))
    if hit is not None and hit[0] is phase:
        return hit[1]
    p, c = constants().passes, constants().collectives
    ag = gather_share(r.cast, phase, r.beta)
    factors = _VolumeFactors(
        sequence_parallel=bool(r.sequence_parallel), gather_share=ag, all_gather=c.all_gather,
        reduce_scatter=c.reduce_scatter, all_reduce=c.all_reduce,
        tp_in_gathers=c.all_gather + r.sp_regather * c.all_gather,
        tp_out_head=c.reduce_scatter + c.all_gather * ag, in_calls_head=2 + r.sp_regather,
        cp_head=1 + p.cp_backward_exchange_factor, a2a_head=1 + p.backward_exchange_factor)
    r.plans[("volumes", phase.name)] = (phase, factors)
    return factors
