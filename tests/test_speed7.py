"""Round "speed7" (issue 25 item 6): what this round computes once or skips, each checked against the path it
stands in for (no number moves: equal in value, type and repr), and the host-issued counts of a phase
(`costs._issue`) against their rules spelled out."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from test_speed5 import _problem
from test_speed6 import _LAYOUTS


def test_a_phase_read_at_one_shape_of_ints_equals_every_row() -> None:
    """`PhaseValues.of` at one shape of ints computes the phase's rows from its template
    (`Coefficients.phase_template`): the values and types `Coefficients.rows_at` gives, every phase and
    quantity, over layouts, layer kinds and shapes; under context parallelism (a rank's share of b is a
    Fraction, not an int) the template is not used."""
    from btacalc.catalogue.compiled import ROW_QUANTITIES

    templates = 0
    for (name, hw, ask), (g, b) in itertools.product(_LAYOUTS, ((1, 1), (3, 2), (1, 7), (0, 4))):
        problem = _problem(name, hw, ask)
        for _, values in problem.evaluate(g, b).layers:  # type: ignore[attr-defined]
            rows = values.coefficients.rows_at(values.tiles, values.tile_batch, values.n)  # (b: the rank's share)
            for phase in values.phase_names():
                base = values.compiled.row[(phase, ROW_QUANTITIES[0])]
                template = values.coefficients.phase_template(base) is not None and type(values.tile_batch) is int
                templates += template
                got = values.of(phase)
                if not template:  # (a Fraction share: `of` reads each row as `affine` gives it, as before)
                    continue
                assert list(got) == list(ROW_QUANTITIES)  # a plain dict in `rows_at`'s order
                for q in ROW_QUANTITIES:
                    want = rows[values.compiled.row[(phase, q)]]
                    assert type(got[q]) is type(want) and got[q] == want, (name, ask, g, b, phase, q)
    assert templates  # the template path ran
    cp = _problem("qwen3-30b-a3b", "h100", dict(devices=32, expert_parallel=16, context_parallel=2))
    (_, values), = cp.evaluate(1, 1).layers  # type: ignore[attr-defined]
    assert type(values.tile_batch) is not int and type(values.of(values.phase_names()[0])) is not dict


def test_the_gemm_device_hash_is_the_dataclass_hash() -> None:
    """`GemmDevice.__hash__` (computed once) is the hash the frozen dataclass generates, of its fields' tuple;
    equal devices hash and compare equal, so `_one_gemm`'s cache answers an equal device built again."""
    from btacalc.model.gpu.gemm import GemmDevice, _one_gemm

    device = GemmDevice(0.73 * 989e12, 3.35e12, 132, ((128, 128), (128, 256)), 1.5e-6, 1.6)
    fields = tuple(getattr(device, f.name) for f in dataclasses.fields(GemmDevice))
    assert hash(device) == hash(fields) == hash(device)
    again = GemmDevice(*fields)
    assert again == device and hash(again) == hash(device) and again is not device
    other = dataclasses.replace(device, sms=114)
    assert other != device and hash(other) == hash(tuple(getattr(other, f.name) for f in dataclasses.fields(GemmDevice)))
    _one_gemm.cache_clear()
    first = _one_gemm(4096.0, 4096.0, 4096.0, 2.0, device, 1.0, 2.0)
    assert _one_gemm(4096.0, 4096.0, 4096.0, 2.0, again, 1.0, 2.0) is first  # a cache hit
    assert _one_gemm.cache_info().hits == 1


def _count(expr: str, symbols: dict) -> object:
    from btacalc.model.gpu.costs import _FUNCTIONS, _code

    with np.errstate(divide="ignore", invalid="ignore"):
        return eval(_code(expr), _FUNCTIONS, symbols)  # noqa: S307


def test_a_phase_issues_what_its_rules_say() -> None:
    """`_issue` against its rules (model/gpu/fixed.py), spelled out per phase from the catalogue: a dense GEMM
    once forward and twice backward plus once per re-run; a grouped expert GEMM count/EP per pass; a phase
    without GEMMs one kernel each way where it has work; the fused core nothing (`_fused_core` counts it);
    module calls 2 + re-runs per module GEMM; a tile-batched phase's kernels and module calls G times (tilehost); glue forward x (1 + re-runs) + backward, with GroupedLinear's
    per-expert Python (count/EP per grouped module GEMM, constants.toml) the same way; the first forward's
    share of each; FP8 grouped GEMMs' per-expert quantisation; after the dispatcher's sync the first forward
    again in `*_post`; a count a CUDA graph replays is 0 (its quantisation too where the kernels are). Layouts:
    dense (full recompute: re-runs), MoE with EP under FP8 and MXFP8 (per-expert quantisation, re-runs), DeepEP
    with PP, MXFP8 MoE with CUDA-graph scopes attn, moe_router and moe_preprocess."""
    from btacalc.catalogue.constants import constants
    from btacalc.model.gpu.costs import _eager, _graphed, _issue, _kind_rates, _phase_plan
    from btacalc.model.gpu.rates import rates_of
    from btacalc.model.gpu.part import new_part

    layouts = [("llama-3-8b", "a100-80gb", dict(devices=8, zero_stage=3, recompute="full", attention="flash")),
               ("mixtral-8x7b", "h100", dict(devices=8, expert_parallel=8, precision="fp8")),
               ("qwen3-30b-a3b", "b200", dict(devices=8, expert_parallel=8, precision="mxfp8", recompute="full")),
               ("deepseek-v3", "h100", dict(devices=256, expert_parallel=64, pipeline_parallel=4, deepep=True)),
               ("qwen3-30b-a3b", "b200", dict(devices=8, expert_parallel=8, precision="mxfp8",
                                              cuda_graph_scope=("attn", "moe_router", "moe_preprocess")))]
    seen = {"grouped": 0, "quantised": 0, "post": 0, "no gemm": 0, "fused": 0, "graphed": 0, "grouped python": 0}
    for name, hw, ask in layouts:
        problem = _problem(name, hw, ask)
        ev = problem.evaluate(2, 1)  # type: ignore[attr-defined]
        for kind, pv in ev.layers:
            r = _kind_rates(problem, rates_of(problem), kind, pv)  # type: ignore[arg-type]
            graphed = {}
            for phases in ([p for p in pv.phases if p.scope == "layer"], [p for p in pv.phases if p.scope == "model"]):
                graphed.update(_graphed(phases, r))  # the phases' captured counts (config/cuda_graphs.py)
            for phase in pv.phases:
                v, plan = pv.of(phase.name), _phase_plan(phase, r)
                eager = _eager(graphed.get(phase.name, frozenset()))  # 0 for a count the graph replays
                seen["graphed"] += 0 in eager
                reruns = v["reruns"]
                # tilehost: a tile-batched phase runs once per attention tile (G = 2 here); its GEMMs' counts hold G
                tiles = 2 if phase.batch == "tile" else 1
                gemms = [g for g in phase.gemm if g.applies(r.features)]
                if plan.fused:
                    kernels, experts, modules = 0, 0, 0
                    seen["fused"] += 1
                elif gemms:
                    counts = [(_count(g.count, r.symbols), g.grouped) for g in gemms]
                    kernels = sum(c for c, grouped in counts if not grouped) * (3 + reruns)
                    experts = sum(c / r.expert_parallel for c, grouped in counts if grouped) * (3 + reruns)
                    modules = sum(1 for g in gemms if g.module) * (2 + reruns) * tiles
                    seen["grouped"] += any(g.grouped for g in gemms)
                else:
                    kernels = (1 if v["bytes_moved"] + v["flops_fwd"] > 0 else 0) * (2 + reruns) * tiles
                    experts, modules = 0, 0
                    seen["no gemm"] += 1
                kernels, experts, modules = kernels * eager[0], experts * eager[1], modules * eager[2]
                glue = phase.host_glue
                glue_ops = (0 if glue is None else glue.forward_ops * (1 + reruns) + glue.backward_ops) * eager[3]
                # GroupedLinear's per-expert Python: the local experts of each grouped module GEMM, in reference ops
                expert_modules = sum(_count(g.count, r.symbols) / r.expert_parallel for g in gemms
                                     if g.grouped and g.module) if gemms and not plan.fused else 0
                te = constants().transformer_engine
                fwd_ops, bwd_ops = te.grouped_linear_expert_forward_ref_ops, te.grouped_linear_expert_backward_ref_ops
                if r.cast is not None and phase.low_precision:  # the recipe's quantizers' per-expert Python
                    fwd_ops += r.cast.recipe.grouped_linear_expert_quantizer_forward_ref_ops
                    bwd_ops += r.cast.recipe.grouped_linear_expert_quantizer_backward_ref_ops
                per_expert_fwd = expert_modules * fwd_ops * eager[2]
                glue_ops = glue_ops + per_expert_fwd * (1 + reruns) + expert_modules * bwd_ops * eager[2]
                seen["grouped python"] += bool(expert_modules)
                fwd = {"kernels": kernels / ((3 if gemms else 2) + reruns), "expert_gemms": experts / (3 + reruns),
                       "module_calls": modules / (2 + reruns),
                       "glue_ops": (0 if glue is None else glue.forward_ops * eager[3]) + per_expert_fwd}
                per_expert = r.cast.recipe.grouped_quantize_kernels_per_expert if r.cast is not None else 0
                if per_expert and phase.low_precision and experts and eager[0]:
                    quantise = experts / (3 + reruns) * per_expert  # G x k per grouped GEMM, first forward
                    kernels, fwd["kernels"] = kernels + quantise * (2 + reruns), fwd["kernels"] + quantise
                    seen["quantised"] += 1
                part = new_part()
                _issue(part, phase, v, r, plan, eager)
                assert (part.kernels, part.expert_gemms, part.module_calls, part.glue_ops) == \
                    (kernels, experts, modules, glue_ops), (name, phase.name)
                for n, want in fwd.items():
                    assert getattr(part, n + "_fwd") == want, (name, phase.name, n)
                    post = getattr(part, n + "_post")
                    assert post == (want if phase.after_dispatch_sync else 0), (name, phase.name, n)
                seen["post"] += phase.after_dispatch_sync
    assert all(seen.values()), seen


def test_shape_free_counts_over_arrays_of_shapes_are_the_evaluated_ones() -> None:
    """Over arrays of shapes, GEMM expressions that read neither G nor b are taken from the layout's values
    (`Rates.python_layout`, `_shape_free_value`): each equals the expression evaluated at the shapes'
    symbols under numpy's error state (`_evaluate`), in value and type; expressions that read G or b, and
    layouts whose other symbols are arrays (points of a sweep), are evaluated as before. At one shape of
    Python numbers a GEMM's four expressions are one eval of a tuple: each equals its own eval."""
    from btacalc.model.gpu.costs import _evaluate, _evaluate_all, _kind_rates, _shape_free
    from btacalc.model.gpu.rates import rates_of

    g, b = np.array([1.0, 3, 5, 2]), np.array([2.0, 1, 1, 4])
    free = 0
    for name, hw, ask in _LAYOUTS:
        problem = _problem(name, hw, ask)
        for kind, pv in problem.evaluate(g, b).layers:  # type: ignore[attr-defined]
            r = _kind_rates(problem, rates_of(problem), kind, pv)  # type: ignore[arg-type]
            assert r.python_layout and not r.python_symbols
            for phase in pv.phases:
                for gemm in phase.gemm:
                    exprs = (gemm.m, gemm.n, gemm.k, gemm.count)
                    got, python = _evaluate_all(exprs, r)
                    with np.errstate(divide="ignore", invalid="ignore"):
                        want = [_evaluate(e, r.symbols) for e in exprs]
                    for x, y in zip(got, want, strict=True):
                        assert type(x) is type(y) and np.array_equal(x, y), (name, phase.name, gemm.name)
                    assert python == all(_shape_free(e) for e in exprs) or not python
                    counts, python = _evaluate_all((gemm.n, gemm.k, gemm.count), r)
                    free += python and _shape_free(gemm.count)
    assert free  # the shape-free path ran
    one = 0
    for name, hw, ask in _LAYOUTS:  # one shape: every GEMM's operands in one eval of a tuple (`_python_tuple`)
        problem = _problem(name, hw, ask)
        for kind, pv in problem.evaluate(3, 2).layers:  # type: ignore[attr-defined]
            r = _kind_rates(problem, rates_of(problem), kind, pv)  # type: ignore[arg-type]
            for gemm in (gemm for phase in pv.phases for gemm in phase.gemm):
                exprs = (gemm.m, gemm.n, gemm.k, gemm.count)
                got, python = _evaluate_all(exprs, r)
                want = [_evaluate(e, r.symbols) for e in exprs]
                assert python == r.python_symbols and len(got) == 4
                for x, y in zip(got, want, strict=True):
                    assert type(x) is type(y) and x == y, (name, gemm.name)
                one += python
    assert one


def test_the_dominant_working_set_row_is_the_maximum() -> None:
    """`_dominant`: a row whose every coefficient is at least every other row's is their maximum at every
    non-negative shape, bit for bit, as floats over arrays of integer shapes (the stacked maximum's values);
    rows none of which dominates give None. The parts of real layouts (a zero shape included): the solver's
    memory from one product of the rows not dominated with the shapes (`memory_rows._row_product`) equals the dominant
    row alone and the stacked rows as `affine` sums them (stored, re-computed and working-set bytes by repr,
    type, dtype and sign bit)."""
    from btacalc.model.gpu import costs, memory_rows

    rng = np.random.default_rng(7)
    assert memory_rows._dominant([(1, 2, 0, 0), (2, 1, 0, 0)]) is None
    assert memory_rows._dominant([(5, 2, 3, 1), (5, 2, 3, 1), (4, 0, 3, 1)]) == (5.0, 2.0, 3.0, 1.0)
    for _ in range(200):
        top = tuple(int(x) for x in rng.integers(0, 2 ** 20, 4))
        rows = [tuple(int(rng.integers(0, c + 1)) for c in top) for _ in range(int(rng.integers(0, 6)))] + [top]
        rows = [rows[i] for i in rng.permutation(len(rows))]
        c0, c_b, c_g, c_n = memory_rows._dominant(rows)  # type: ignore[misc]
        g, b = rng.integers(0, 4096, 9).astype(float), rng.integers(0, 64, 9).astype(float)
        stacked = np.array(rows, dtype=float).T.reshape(4, len(rows), 1)
        want = np.maximum.reduce(stacked[0] + stacked[1] * b + stacked[2] * g + stacked[3] * (g * b), axis=0)
        assert np.array_equal(c0 + c_b * b + c_g * g + c_n * (g * b), want)
    g, b = np.array([1.0, 3, 5, 2, 8, 0]), np.array([2.0, 1, 1, 4, 1, 3])
    dominant = products = 0
    for name, hw, ask in _LAYOUTS:
        problem = _problem(name, hw, ask)
        ev = problem.evaluate(g, b)  # type: ignore[attr-defined]
        r = costs.rates_of(problem)  # type: ignore[arg-type]
        for _, pv in ev.layers:
            for phases, key in costs._part_phases(pv.compiled).values():
                got = costs.memory_of_shapes(pv, phases, r, key)
                summed = pv.coefficients.derived.get(key)
                if got is None or summed is None:
                    continue
                dominant += summed.top is not None
                product = pv.coefficients.derived.get(("row product", key))
                products += product is not None
                paths = []  # the dominant row alone, then the stacked rows (no product with the shapes either)
                pv.coefficients.derived[("row product", key)] = None
                for change in (dict(), dict(top=None)):
                    pv.coefficients.derived[key] = dataclasses.replace(summed, **change)
                    try:
                        paths.append(costs.memory_of_shapes(pv, phases, r, key))
                    finally:
                        pv.coefficients.derived[key] = summed
                pv.coefficients.derived[("row product", key)] = product
                for want in paths:
                    for field in ("stored", "recompute", "transient"):
                        x, y = getattr(got, field), getattr(want, field)
                        assert type(x) is type(y) and np.asarray(x).dtype == np.asarray(y).dtype, (name, field)
                        assert repr(x) == repr(y) and np.array_equal(np.signbit(x), np.signbit(y)), (name, field)
    assert dominant and products
