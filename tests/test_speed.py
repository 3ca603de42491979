"""Speed work that must not move a number: the cached one-shape GEMM path gives the same bits as the
array path it stands in for."""

from __future__ import annotations

import numpy as np
import pytest

from btacalc.model.gpu.gemm import GemmDevice, _one_gemm, gemm_time

# An H800-like device (132 SMs, the shape model's DeepGEMM fit: o = 1.5 us, p = 1.6; gemm.py docstring).
DEVICE = GemmDevice(0.73 * 1979e12, 3.35e12, 132, ((128, 128), (128, 256), (256, 128)), 1.5e-6, 1.6)
SHAPES = [(4096, 7168, 2048, 1, 1), (1, 4096, 4096, 2, 1), (256, 7168, 2048, 1, 4), (0, 4096, 4096, 2, 0),
          (8191, 129, 65, 2, 3)]


@pytest.mark.parametrize("m,n,k,beta,groups", SHAPES)
def test_one_shape_equals_array_path(m: int, n: int, k: int, beta: int, groups: int) -> None:
    one = gemm_time(m, n, k, beta, DEVICE, groups)
    arr = gemm_time(np.array([m, m]), n, k, beta, DEVICE, np.array([groups, groups]))
    for field in ("time_s", "efficiency", "quantisation", "memory_bound"):
        assert getattr(one, field) == getattr(arr, field)[0], field
    assert one.binding() == arr.binding()[0]


def test_one_shape_is_cached_and_scalar() -> None:
    _one_gemm.cache_clear()
    first = gemm_time(4096, 7168, 2048, 1, DEVICE)
    again = gemm_time(np.int64(4096), 7168.0, 2048, 1.0, DEVICE, 1)
    assert again is first and _one_gemm.cache_info().hits == 1
    assert isinstance(first.time_s, float) and isinstance(first.memory_bound, bool)
    # the arithmetic itself, once: ideal 2mnk/peak over the quantised, per-wave, smooth-roofline time
    ideal = 2 * 4096 * 7168 * 2048 / DEVICE.peak_flops_per_s
    assert first.efficiency == pytest.approx(ideal / first.time_s)


def test_local_members_over_arrays_equals_each_layout() -> None:
    """The distinct-groups walk over arrays gives each layout's own answer (the scalar walk)."""
    from btacalc.model.gpu.collectives import local_members

    rng = np.random.default_rng(25)
    size = rng.choice([1, 2, 3, 4, 6, 8, 16, 32], 500)
    stride = rng.choice([1, 2, 3, 4, 8], 500)
    for devices, domain in ((256, 8), (np.array(rng.choice([8, 24, 64, 96, 256], 500)), 8), (72, 72), (96, 4)):
        out = local_members(size, stride, devices, domain)
        each = [local_members(int(a), int(b), int(devices if np.ndim(devices) == 0 else devices[i]), domain)
                for i, (a, b) in enumerate(zip(size, stride))]
        assert out.shape == size.shape and out.dtype == size.dtype
        assert out.tolist() == each


def test_tiles_at_once_equal_the_fastest_tile_one_by_one() -> None:
    """All candidate tiles along one axis: each shape's compute time is the least of its per-tile times
    (ideal / (tile share x wave share) + waves x o, gemm.py's docstring), tile by tile, to the bit."""
    from btacalc.model.gpu.gemm import _compute_time

    rng = np.random.default_rng(7)
    m = rng.integers(1, 20000, 300).astype(float)
    n, k = rng.integers(1, 9000, 300).astype(float), rng.integers(1, 9000, 300).astype(float)
    groups = rng.integers(1, 9, 300).astype(float)
    out = gemm_time(m, n, k, 2, DEVICE, groups)
    fastest = np.minimum.reduce([_compute_time(m, n, k, DEVICE, t, groups) for t in DEVICE.tiles])
    ideal = 2 * m * n * k * groups / DEVICE.peak_flops_per_s
    assert np.array_equal(out.quantisation, ideal / fastest)


# --- per-layout invariants remembered across problems (btacalc/memo.py): never a stale answer ---

def _clear_layout_caches() -> None:
    """Every cache the speed work added or leans on, emptied: the next evaluation is computed afresh."""
    from btacalc.memo import clear_caches

    clear_caches()
    assert _one_gemm.cache_info().currsize == 0  # the registry holds the lru caches too


def _evaluate(model, hw, request):  # the benchmark's evaluation: memory and step time of one shape, API
    from btacalc.config.resolution import resolve_execution
    from btacalc.model.memory import MemoryModel, resolve_memory_model
    from btacalc.model.problem import Problem
    from btacalc.model.timing import step_time

    problem = resolve_memory_model(Problem(model, hw, resolve_execution(request, model, hw)))
    st = step_time(problem, 2, 1)
    return (MemoryModel(problem).total(2, 1), st.step_time_s, st.tokens_per_s, st.mfu, st.phase_time_s, st.communication_s,
            st.details["micro_batch_s"], st.details["terms"])


def test_layouts_alternated_give_fresh_answers() -> None:
    """Layouts of one model, two models on one layout, two sequence lengths, asked in turn with every cache warm, give
    exactly what each gives computed afresh (caches emptied before it): the memo keys tell them apart."""
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import load_preset

    hw = resolve_hardware("h100")
    moe, dense = load_preset("qwen3-30b-a3b"), load_preset("llama-3-8b")
    asks = [(moe, ExecutionRequest(devices=16, expert_parallel=8, seq_len=4096)),
            (moe, ExecutionRequest(devices=16, expert_parallel=4, tensor_parallel=2, seq_len=4096)),
            (dense, ExecutionRequest(devices=16, tensor_parallel=2, seq_len=4096)),
            (moe, ExecutionRequest(devices=16, expert_parallel=8, seq_len=2048)),  # only s differs from the first
            (moe, ExecutionRequest(devices=16, expert_parallel=8, seq_len=2048, recompute="full"))]
    fresh = []
    for model, request in asks:
        _clear_layout_caches()
        fresh.append(_evaluate(model, hw, request))
    assert len({repr(f[:3]) for f in fresh}) == len(asks)  # different answers to tell apart
    for _ in range(2):
        for (model, request), expected in zip(asks, fresh):
            assert _evaluate(model, hw, request) == expected
            # an equal request built anew (the value key, not the object) gives the same too
            assert _evaluate(model, hw, ExecutionRequest(**request.__dict__)) == expected


def test_memo_keys_tell_equal_values_of_other_types_apart() -> None:
    """4, 4.0, True and int64(4) are equal and hash alike; the keys differ (or refuse: numpy), and so
    a request of numpy numbers is never answered from one of ints."""
    from btacalc.config.execution import ExecutionRequest
    from btacalc.memo import Memo, plain_key

    keys = [plain_key(ExecutionRequest(seq_len=v)) for v in (4096, 4096.0)]
    assert keys[0] != keys[1] and None not in keys
    assert plain_key(ExecutionRequest(seq_len=np.int64(4096))) is None
    assert plain_key((1, True)) != plain_key((1, 1))
    calls = []
    memo: Memo[int] = Memo(size=2)
    for key in ("a", "b", "a", None, None, "c", "a"):
        memo.get(key, (), lambda: calls.append(key) or len(calls))
    assert calls == ["a", "b", None, None, "c", "a"]  # None never cached; full at 2 entries: starts again


def test_memory_of_shapes_summed_once_equals_phase_by_phase() -> None:
    """Memory from each part's rows summed once per layout (the solver's arrays of shapes, and one shape of
    ints) gives the phase-by-phase sums bit for bit, types included; where they could not (a fraction of a sequence per
    context-parallel rank, a routing imbalance) the phase-by-phase path answers."""
    import btacalc.model.gpu.costs as costs
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import load_preset
    from btacalc.model.gpu.memory import GpuMemory
    from btacalc.planning.resolve import resolve_problem

    cases = [("qwen3-30b-a3b", "h100", dict(devices=16, expert_parallel=8)),
             ("deepseek-v3", "h100", dict(devices=512, expert_parallel=32, pipeline_parallel=16)),
             ("mixtral-8x7b", "h100", dict(devices=8, expert_parallel=8, precision="fp8")),
             ("llama-3-8b", "a100-80gb", dict(devices=8, zero_stage=3, recompute="full")),
             ("qwen3-30b-a3b", "h100", dict(devices=16, expert_parallel=8, context_parallel=2, routing_imbalance=1.3))]
    tiles, tile_batch = np.array([1.0, 2, 3, 7, 64, 1]), np.array([1.0, 1, 2, 3, 1, 40])
    summed = costs.memory_of_shapes
    used: list = []  # the arrays' answers (None: phase by phase)
    one: list = []  # one shape's
    try:
        for name, hw, ask in cases:
            problem = resolve_problem(load_preset(name), resolve_hardware(hw), ExecutionRequest(seq_len=4096, **ask))
            costs.memory_of_shapes = lambda *a: used.append(summed(*a)) or used[-1]  # type: ignore[assignment]
            fast = GpuMemory(problem).stage_rows(tiles, tile_batch)
            costs.memory_of_shapes = lambda *a: None  # type: ignore[assignment]
            slow = GpuMemory(problem).stage_rows(tiles, tile_batch)
            for a, b in zip(fast, slow, strict=True):
                assert a.components.keys() == b.components.keys()
                for k in a.components:
                    assert type(a.components[k]) is type(b.components[k]), (name, k)
                    assert np.array_equal(a.components[k], b.components[k]), (name, k)
            for g, b in ((1, 1), (3, 2), (1, 7)):  # one shape of ints: each part's fields, values and types
                ev = problem.evaluate(g, b)
                costs.memory_of_shapes = lambda *a: one.append(summed(*a)) or one[-1]  # type: ignore[assignment]
                fast_parts = [*costs.layer_parts(problem, ev, True), *costs.outside_parts(problem, ev, True)]
                costs.memory_of_shapes = lambda *a: None  # type: ignore[assignment]
                slow_parts = [*costs.layer_parts(problem, ev, True), *costs.outside_parts(problem, ev, True)]
                for fp, sp in zip(fast_parts, slow_parts, strict=True):
                    assert [(type(v), v) for v in vars(fp).values()] == [(type(v), v) for v in vars(sp).values()]
    finally:
        costs.memory_of_shapes = summed  # type: ignore[assignment]
    assert any(u is not None for u in used) and any(u is None for u in used)
    assert any(u is not None for u in one) and any(u is None for u in one)


def test_integer_rows_of_one_shape_equal_every_term() -> None:
    """One shape of ints: the rows with only a constant are that constant, the others c0 + c_b*b + c_G*G +
    c_Gb*G*b; a Fraction share of a sequence (context parallelism) takes every term, as before."""
    from fractions import Fraction

    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import load_preset
    from btacalc.planning.resolve import resolve_problem

    problem = resolve_problem(load_preset("qwen3-30b-a3b"), resolve_hardware("h100"),
                              ExecutionRequest(devices=16, expert_parallel=8, seq_len=4096))
    coefs = problem.coefficients()[0]
    f = coefs.flat
    for g, b in ((1, 1), (3, 5), (2, Fraction(1, 2))):
        every = {r: f[i] + f[i + 1] * b + f[i + 2] * g + f[i + 3] * g * b for r, i in enumerate(range(0, len(f), 4))}
        rows = coefs.rows_at(g, b, g * b)
        assert rows == every and [type(v) for v in rows.values()] == [type(v) for v in every.values()]
