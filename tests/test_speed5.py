"""Round "speed5" (issue 25 item 6): per-layout invariants shared by the problems of one layout, and the
scalar fast paths, each checked against the path it stands in for."""

from __future__ import annotations

import numpy as np

_LAYOUTS = [("qwen3-30b-a3b", "h100", dict(devices=16, expert_parallel=8)),
            ("deepseek-v3", "h100", dict(devices=512, expert_parallel=32, pipeline_parallel=16)),
            ("mixtral-8x7b", "h100", dict(devices=8, expert_parallel=8, precision="fp8")),
            ("llama-3-8b", "a100-80gb", dict(devices=8, zero_stage=3, recompute="full")),
            ("qwen3-30b-a3b", "h100", dict(devices=16, expert_parallel=8, context_parallel=2)),
            ("llama-3-8b", "h100", dict(devices=16, tensor_parallel=2, pipeline_parallel=2, virtual_pipeline=2)),
            ("qwen3-30b-a3b", "wse3", dict())]


_OBJECTS: dict = {}  # one model and one profile object per name, as a process asking again holds them


def _problem(name: str, hw: str, ask: dict) -> object:
    """A new `Problem` of the layout, of the same model and profile objects each time (what shares a layout)."""
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import load_preset
    from btacalc.planning.resolve import resolve_problem

    if name not in _OBJECTS:
        _OBJECTS[name] = load_preset(name)
    if hw not in _OBJECTS:
        _OBJECTS[hw] = resolve_hardware(hw)
    return resolve_problem(_OBJECTS[name], _OBJECTS[hw], ExecutionRequest(seq_len=4096, **ask))


def _answer(problem: object, g: int, b: int) -> tuple:
    from btacalc.model.memory import MemoryModel
    from btacalc.model.timing import step_time

    memory = MemoryModel(problem)  # type: ignore[arg-type]
    # repr: every field, numbers to the last bit (float repr round-trips) and numpy scalars by their type
    return memory.total(g, b), repr(memory.breakdown(g, b)), repr(step_time(problem, g, b))  # type: ignore[arg-type]


def test_problems_of_one_layout_share_its_invariants_but_not_their_shapes() -> None:
    """Two problems of the same model, profile and execution objects share one layout cache (what a new
    `Problem` of a layout seen before reuses), and never a batch shape's evaluation; another layout, and a
    problem of points (symbols), have their own."""
    from btacalc.model.problem import Problem

    a = _problem("llama-3-8b", "a100-80gb", dict(devices=8, zero_stage=3))
    b = Problem(a.model, a.hardware, a.execution)  # type: ignore[attr-defined]
    assert b.layout_cache is a.layout_cache
    _answer(a, 1, 2)
    assert "gpu rates" in b.layout_cache
    assert not any(k == (1, 2, None) for k in b._cache) and any(k == (1, 2, None) for k in a._cache)
    assert not any(isinstance(k, tuple) and len(k) == 3 and k[:2] == (1, 2) for k in a.layout_cache)
    other = _problem("llama-3-8b", "a100-80gb", dict(devices=8, zero_stage=2))
    assert other.layout_cache is not a.layout_cache  # type: ignore[attr-defined]
    points = Problem(a.model, a.hardware, a.execution, symbols={"E": np.array([8, 16])})  # type: ignore[attr-defined]
    assert points.layout_cache is points._cache


def test_a_layout_seen_before_answers_as_a_fresh_one() -> None:
    """Layouts asked alternately, each through a new `Problem` (the layout cache warm from the earlier
    ones), give exactly the answers of a process whose caches are emptied before each (values and types)."""
    from btacalc.memo import clear_caches

    shapes = [(1, 1), (2, 3), (1, 4)]
    fresh = {}
    for i, (name, hw, ask) in enumerate(_LAYOUTS):
        for g, b in shapes:
            clear_caches()
            fresh[i, g, b] = _answer(_problem(name, hw, ask), g, b)
    clear_caches()
    for _ in range(2):
        for i, (name, hw, ask) in enumerate(_LAYOUTS):
            for g, b in shapes:
                warm = _answer(_problem(name, hw, ask), g, b)
                for x, y in zip(warm, fresh[i, g, b], strict=True):
                    assert type(x) is type(y) and x == y, (name, g, b)


_GRID = [(g, b) for g in (1, 2, 3, 8) for b in (1, 2, 4, 5)]


def _fields(part: object) -> dict:
    """Every number of a `Part`, the per-phase dicts flattened."""
    out = {}
    for k, v in vars(part).items():
        if isinstance(v, dict):
            for name, x in v.items():
                if k == "gemms":
                    continue
                # node_issued (mergedhost): a tuple of counts per node
                out.update({(k, name, j): y for j, y in enumerate(x)} if isinstance(x, tuple) else {(k, name): x})
        else:
            out[k] = v
    return out


def test_one_shape_equals_the_array_path_on_a_grid() -> None:
    """The one-shape fast paths (`_kind_rates` from its per-layout template, GEMM shapes without numpy's
    error state, the communication calls, the backward share, the fused attention core, one shape's memory
    rows, `gemm_passes` from the cache) give, shape by shape, exactly the numbers the array path gives for
    the same shapes together: every field of every part (layer kinds, first and last stage, time and
    memory-only), the step, its terms and phases, and the memory, over seven layouts and 16 shapes."""
    from btacalc.model.gpu.costs import layer_parts, outside_parts
    from btacalc.model.memory import MemoryModel
    from btacalc.model.timing import step_time

    tiles = np.array([g for g, _ in _GRID], dtype=float)
    batch = np.array([b for _, b in _GRID], dtype=float)
    for name, hw, ask in _LAYOUTS:
        problem = _problem(name, hw, ask)
        memory = MemoryModel(problem)  # type: ignore[arg-type]
        together = step_time(problem, tiles, batch)  # type: ignore[arg-type]
        total = memory.total(tiles, batch)
        gpu = problem.hardware.family == "gpu"  # type: ignore[attr-defined]
        if gpu:
            ev = problem.evaluate(tiles, batch)  # type: ignore[attr-defined]
            parts = {only: [*layer_parts(problem, ev, only), *outside_parts(problem, ev, only)]  # type: ignore[arg-type]
                     for only in (False, True)}
        for i, (g, b) in enumerate(_GRID):
            one = step_time(problem, g, b)  # type: ignore[arg-type]
            assert float(memory.total(g, b)) == float(total[i]), (name, g, b)
            for field in ("step_time_s", "tokens_per_s", "mfu", "tiling_overhead_s"):
                assert float(getattr(one, field)) == float(np.broadcast_to(getattr(together, field), tiles.shape)[i])
            for table in ("phase_time_s", "communication_s"):
                mine, theirs = getattr(one, table), getattr(together, table)
                # (arrays of shapes of a pipelined layout report no per-phase rows: the critical stage may differ)
                assert set(theirs) <= set(mine) and len(theirs) > 3, (name, table)
                for k in theirs:
                    assert float(mine[k]) == float(np.broadcast_to(theirs[k], tiles.shape)[i]), (name, g, b, k)
            if not gpu:
                continue
            ev1 = problem.evaluate(g, b)  # type: ignore[attr-defined]
            for only in (False, True):
                ones = [*layer_parts(problem, ev1, only), *outside_parts(problem, ev1, only)]  # type: ignore[arg-type]
                for a, arrays in zip(ones, parts[only], strict=True):
                    fa, fb = _fields(a), _fields(arrays)
                    assert fa.keys() == fb.keys(), name
                    for k in fa:
                        assert float(fa[k]) == float(np.broadcast_to(fb[k], tiles.shape)[i]), (name, g, b, only, k)


def test_gemm_shapes_without_the_error_state_equal_those_under_it() -> None:
    """`_evaluate_all` at Python numbers (no np.errstate) gives the values and types of the expressions
    evaluated under the error state, for every GEMM of every phase of the layouts' layer kinds."""
    from dataclasses import replace

    from btacalc.model.gpu.costs import _evaluate_all, _kind_rates

    from btacalc.model.gpu.rates import rates_of

    checked = 0
    for name, hw, ask in _LAYOUTS[:-1]:
        problem = _problem(name, hw, ask)
        for g, b in ((1, 1), (3, 5)):
            ev = problem.evaluate(g, b)  # type: ignore[attr-defined]
            for kind, pv in ev.layers:
                r = _kind_rates(problem, rates_of(problem), kind, pv)  # type: ignore[arg-type]
                assert r.python_symbols
                guarded = replace(r, python_symbols=False)
                for phase in pv.phases:
                    for gemm in phase.gemm:
                        exprs = (gemm.m, gemm.n, gemm.k, gemm.count)
                        fast, python = _evaluate_all(exprs, r)
                        slow, _ = _evaluate_all(exprs, guarded)
                        assert python and [type(x) for x in fast] == [type(x) for x in slow] and fast == slow
                        checked += 1
    assert checked > 50
