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
