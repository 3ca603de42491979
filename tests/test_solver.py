"""The density solver (the design card's rule) on hand-built memory models (affine, as in the DESIGN
notes) and on real problems. The throughput objective and the vectorised search: test_search.py."""

from __future__ import annotations

import itertools

import numpy as np

import pytest

from btacalc.errors import BtacalcError
from btacalc.config.hardware import resolve_hardware
from btacalc.model.memory import MemoryModel
from btacalc.config.presets import load_preset
from btacalc.config.execution import RunOptions
from support import resolved
from types import SimpleNamespace

from btacalc.config.execution import BatchLimits, Layout
from btacalc.model.solver import Solution, divisors, solve_density as solve


class Affine:
    """M(G, b) = A*(G*b) + Q*b + C against `usable` bytes."""

    def __init__(self, A, Q, C, usable):
        self.A, self.Q, self.C, self.usable = A, Q, C, usable
        self.calls = 0
        self.problem = SimpleNamespace(layout=Layout())  # one device, one micro-batch

    def total(self, g, b):
        return self.A * g * b + self.Q * b + self.C

    def fits(self, g, b):
        self.calls += 1
        return self.total(g, b) <= self.usable


def brute_force(mem, limits, n_max=420):
    """Reference: enumerate every (G, b) and apply the objective (max G*b, then max b)."""
    best = None
    for g, b in itertools.product(range(1, n_max + 1), repeat=2):
        n = g * b
        if limits.global_batch and n != limits.global_batch:
            continue
        if limits.tiles and g != limits.tiles:
            continue
        if limits.tile_batch and b != limits.tile_batch:
            continue
        if limits.max_global_batch and n > limits.max_global_batch:
            continue
        if limits.max_tile_batch and b > limits.max_tile_batch:
            continue
        if mem.total(g, b) <= mem.usable and (best is None or (n, b) > (best[0] * best[1], best[1])):
            best = (g, b)
    return best


def test_free_solve_hand_case():
    # A = 1 per sequence, Q = 10 per tile sequence, C = 5, capacity 100:
    # max n with n + 10 + 5 <= 100 -> n = 85; tiles b | 85 with 85 + 10b + 5 <= 100 -> b = 1 (5 does not fit)
    mem = Affine(1, 10, 5, 100)
    sol = solve(mem, BatchLimits())
    assert (sol.tiles, sol.tile_batch) == (85, 1)
    assert sol.binding_constraint == "memory" and sol.tile_constraint == "memory"
    assert mem.total(sol.tiles, sol.tile_batch) <= 100


def test_untiled_when_attention_is_cheap():
    # Q = 0: tiling buys nothing, so the solver keeps one tile (b = G*b)
    sol = solve(Affine(2, 0, 0, 64), BatchLimits())
    assert (sol.tiles, sol.tile_batch, sol.tile_constraint) == (1, 32, "none")


def test_max_global_batch_binds():
    sol = solve(Affine(1, 1, 0, 1000), BatchLimits(max_global_batch=48))
    assert sol.tiles * sol.tile_batch == 48 and sol.binding_constraint == "max_global_batch"
    # b: 48 + b <= 1000 for every divisor, so b = 48, one tile
    assert sol.tile_batch == 48


def test_max_tile_batch_binds():
    sol = solve(Affine(1, 1, 0, 1000), BatchLimits(max_global_batch=48, max_tile_batch=10))
    assert (sol.tiles, sol.tile_batch) == (6, 8) and sol.tile_constraint == "max_tile_batch"


def test_global_batch_divisibility():
    # N = 60 fixed: b must divide 60; 60 + 10b + 5 <= 150 -> b <= 8.5 -> b = 6, G = 10
    sol = solve(Affine(1, 10, 5, 150), BatchLimits(global_batch=60))
    assert (sol.tiles, sol.tile_batch) == (10, 6)
    assert 60 % sol.tiles == 0 and sol.binding_constraint == "global_batch"


def test_fixed_tiles_maximises_tile_batch():
    # G = 4: 4b + 10b + 5 <= 100 -> b = 6
    sol = solve(Affine(1, 10, 5, 100), BatchLimits(tiles=4))
    assert (sol.tiles, sol.tile_batch, sol.binding_constraint) == (4, 6, "memory")


def test_fixed_tile_batch_maximises_tiles():
    # b = 3: 3G + 30 + 5 <= 100 -> G = 21
    sol = solve(Affine(1, 10, 5, 100), BatchLimits(tile_batch=3))
    assert (sol.tiles, sol.tile_batch) == (21, 3)


def test_nothing_fits():
    sol = solve(Affine(1, 10, 500, 100), BatchLimits())
    assert not sol.fits and sol.binding_constraint == "memory"


@pytest.mark.parametrize("A, Q, C, cap", [(1, 10, 5, 100), (3, 7, 11, 173), (5, 0, 2, 97), (1, 50, 0, 400),
                                          (2, 3, 1, 120)])
@pytest.mark.parametrize("limits", [BatchLimits(), BatchLimits(max_global_batch=24), BatchLimits(global_batch=12),
                                    BatchLimits(max_tile_batch=4), BatchLimits(tiles=3), BatchLimits(tile_batch=2)])
def test_matches_brute_force(A, Q, C, cap, limits):
    mem = Affine(A, Q, C, cap)
    sol = solve(mem, limits)
    best = brute_force(mem, limits)
    if best is None:
        assert not sol.fits
    else:
        assert sol.fits and (sol.tiles, sol.tile_batch) == best
        assert mem.total(sol.tiles, sol.tile_batch) <= cap


def test_search_is_logarithmic():
    mem = Affine(1, 3, 0, 10**9)
    sol = solve(mem, BatchLimits())
    assert sol.tiles * sol.tile_batch > 10**8
    assert mem.calls < 250  # exponential + binary search, then a search over divisors


@pytest.mark.parametrize("hw", ["wse2", "wse3", "b200"])
@pytest.mark.parametrize("recompute", ["full", "selective"])
@pytest.mark.parametrize("attention", ["eager", "flash"])
def test_real_plans_never_exceed_capacity(hw, recompute, attention):
    model = load_preset("qwen3-30b-a3b").with_overrides(experts=32) if hw == "b200" else load_preset("qwen3-30b-a3b")
    mem = MemoryModel(resolved(model, hw, recompute=recompute, attention=attention))
    sol = solve(mem, BatchLimits())
    if sol.fits:
        assert mem.total(sol.tiles, sol.tile_batch) <= mem.usable
        # optimal: one more sequence does not fit even in tiles of one
        assert mem.total(sol.tiles * sol.tile_batch + 1, 1) > mem.usable


def test_real_global_batch_is_divided():
    mem = MemoryModel(resolved(load_preset("qwen3-30b-a3b"), "wse3"))
    sol = solve(mem, BatchLimits(global_batch=12))
    assert sol.fits and 12 % sol.tiles == 0 and sol.tiles * sol.tile_batch == 12


@pytest.mark.parametrize("limits, message", [
    (BatchLimits(global_batch=10, tiles=3), "not divisible by tiles"),
    (BatchLimits(global_batch=10, tile_batch=3), "not divisible by tile_batch"),
    (BatchLimits(tiles=0), "positive integer"),
    (BatchLimits(global_batch=100, max_global_batch=10), "exceeds"),
    # a cap below the fixed size is bad input, as a global batch over it is (hostile26: it was "does not fit")
    (BatchLimits(tiles=4, max_global_batch=3), "makes a global batch of at least 4"),
    (BatchLimits(tile_batch=4, max_global_batch=3), "makes a global batch of at least 4"),
])
def test_bad_limits(limits, message):
    with pytest.raises(BtacalcError, match=message):
        solve(Affine(1, 1, 1, 100), limits)


def test_divisors():
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert divisors(1) == [1] and divisors(13) == [1, 13]


def _reason_fixed_tiles(mem, g, cap_n, cap_b):
    """Reference for --tiles G: the largest b that fits within the caps, and what stops b + 1."""
    hi = min([c for c in (cap_b, cap_n // g if cap_n else None) if c is not None], default=10**6)
    fitting = [b for b in range(1, hi + 1) if mem.total(g, b) <= mem.usable]
    if not fitting:
        return None
    b = max(fitting)
    if mem.total(g, b + 1) > mem.usable:
        return b, "memory"
    if cap_b is not None and b + 1 > cap_b and (cap_n is None or cap_b <= cap_n // g):
        return b, "max_tile_batch"
    return b, "max_global_batch"


@pytest.mark.parametrize("A, Q, C, cap", [(1, 10, 5, 100), (3, 7, 11, 173), (1, 1, 0, 1000), (2, 0, 1, 90)])
@pytest.mark.parametrize("g", [1, 3, 4])
@pytest.mark.parametrize("cap_n, cap_b", [(None, None), (24, None), (None, 5), (24, 5), (12, 10), (2, None)])
def test_fixed_tiles_binding_constraint_as_derived(A, Q, C, cap, g, cap_n, cap_b):
    mem = Affine(A, Q, C, cap)
    limits = BatchLimits(tiles=g, max_global_batch=cap_n, max_tile_batch=cap_b)
    if cap_n is not None and g > cap_n:  # G x 1 over the cap: bad input (test_bad_limits)
        with pytest.raises(BtacalcError, match="at least"):
            solve(mem, limits)
        return
    sol = solve(mem, limits)
    want = _reason_fixed_tiles(mem, g, cap_n, cap_b)
    if want is None:
        assert not sol.fits and (sol.tiles, sol.tile_batch) == (g, 1) and sol.binding_constraint == "memory"
        return
    assert sol.fits and (sol.tiles, sol.tile_batch, sol.binding_constraint) == (g, *want)
    assert sol.tile_constraint == "tiles" and f"b = {want[0]}" in sol.explanation and want[1] in sol.explanation


@pytest.mark.parametrize("A, Q, C, cap", [(1, 10, 5, 100), (3, 7, 11, 173), (1, 1, 0, 1000), (2, 0, 1, 90)])
@pytest.mark.parametrize("b", [1, 2, 5])
@pytest.mark.parametrize("cap_n", [None, 24, 7, 1])
def test_fixed_tile_batch_binding_constraint_as_derived(A, Q, C, cap, b, cap_n):
    """--tile-batch b: the most tiles G that fit within the cap on G*b; memory or the cap stops G + 1."""
    mem = Affine(A, Q, C, cap)
    if cap_n is not None and b > cap_n:  # 1 x b over the cap: bad input (test_bad_limits)
        with pytest.raises(BtacalcError, match="at least"):
            solve(mem, BatchLimits(tile_batch=b, max_global_batch=cap_n))
        return
    sol = solve(mem, BatchLimits(tile_batch=b, max_global_batch=cap_n))
    hi = cap_n // b if cap_n else 10**6
    fitting = [g for g in range(1, hi + 1) if mem.total(g, b) <= mem.usable]
    if not fitting:
        assert not sol.fits and (sol.tiles, sol.tile_batch) == (1, b) and sol.binding_constraint == "memory"
        assert "does not fit" in sol.explanation or "do not fit" in sol.explanation
        return
    g = max(fitting)
    reason = "memory" if mem.total(g + 1, b) > mem.usable else "max_global_batch"
    assert sol.fits and (sol.tiles, sol.tile_batch, sol.binding_constraint, sol.tile_constraint) == (g, b, reason,
                                                                                                    "tile_batch")
    assert f"G = {g}" in sol.explanation and reason in sol.explanation


@pytest.mark.parametrize("A, Q, C, cap", [(1, 10, 5, 100), (3, 7, 11, 173), (1, 1, 0, 1000)])
@pytest.mark.parametrize("b", [1, 2])
def test_a_global_cap_at_the_memory_limit_is_memory_binding(A, Q, C, cap, b):
    """--tile-batch b with the cap on G*b exactly at memory's largest G: G + 1 would not fit, so memory
    binds; one tile lower, the cap does (G + 1 would fit)."""
    mem = Affine(A, Q, C, cap)
    most = max(g for g in range(1, 10**4) if mem.total(g, b) <= mem.usable)
    at = solve(mem, BatchLimits(tile_batch=b, max_global_batch=most * b))
    assert (at.tiles, at.binding_constraint) == (most, "memory")
    below = solve(mem, BatchLimits(tile_batch=b, max_global_batch=(most - 1) * b))
    assert (below.tiles, below.binding_constraint) == (most - 1, "max_global_batch")


def test_fixed_shape_text_says_whether_it_fits():
    mem = Affine(1, 10, 5, 100)
    ok = solve(mem, BatchLimits(tiles=2, tile_batch=3))
    assert ok.fits and ok.explanation == "--tiles and --tile-batch fix the shape: G = 2, b = 3 fits"
    bad = solve(mem, BatchLimits(tiles=20, tile_batch=20))
    assert not bad.fits and bad.explanation == "--tiles and --tile-batch fix the shape: G = 20, b = 20 does not fit"


def test_fixed_global_batch_that_does_not_fit_says_so():
    mem = Affine(1, 10, 5, 100)
    sol = solve(mem, BatchLimits(global_batch=200, micro_batches=1))  # 200 + 10 + 5 > 100 even as 200 tiles of 1
    assert not sol.fits and (sol.tiles, sol.tile_batch) == (200, 1)
    assert (sol.binding_constraint, sol.tile_constraint) == ("memory", "memory") and sol.evaluations >= 1
    assert sol.explanation == "global batch 200 does not fit even as 200 tiles of 1 sequence"


def test_fixed_global_batch_under_a_tile_cap():
    # N = 60, memory allows b = 8 (60 + 10b + 5 <= 150 -> b <= 8.5) but the cap is 4: b = 4, G = 15
    sol = solve(Affine(1, 10, 5, 150), BatchLimits(global_batch=60, max_tile_batch=4, micro_batches=1))
    assert (sol.tiles, sol.tile_batch, sol.tile_constraint) == (15, 4, "max_tile_batch")
    assert isinstance(sol.tiles, int) and isinstance(sol.tile_batch, int)


def test_free_cap_that_memory_also_reaches_is_memory():
    # A = 1, C = 0, capacity 48: memory stops at n = 48 exactly where --max-global-batch 48 does;
    # one more sequence would not fit, so memory is what binds
    assert solve(Affine(1, 0, 0, 48), BatchLimits(max_global_batch=48)).binding_constraint == "memory"
    assert solve(Affine(1, 0, 0, 49), BatchLimits(max_global_batch=48)).binding_constraint == "max_global_batch"
    assert solve(Affine(1, 0, 0, 47), BatchLimits(max_global_batch=48)).binding_constraint == "memory"


def test_fixed_global_batch_and_tiles_is_one_shape():
    # N = 60 with G = 6 leaves b = 10: 60 + 10*10 + 5 = 165 <= 170 fits, and <= 160 does not
    sol = solve(Affine(1, 10, 5, 170), BatchLimits(global_batch=60, tiles=6, micro_batches=1))
    assert (sol.tiles, sol.tile_batch, sol.fits) == (6, 10, True)
    assert (sol.binding_constraint, sol.tile_constraint) == ("global_batch", "tiles")
    assert sol.explanation == "--global-batch with --tiles/--tile-batch fixes the shape: G = 6, b = 10 fits"
    bad = solve(Affine(1, 10, 5, 160), BatchLimits(global_batch=60, tiles=6, micro_batches=1))
    assert (bad.tiles, bad.tile_batch, bad.fits) == (6, 10, False) and bad.explanation.endswith("does not fit")


def test_fixed_global_batch_and_tile_batch_is_one_shape():
    # N = 60 with b = 4 leaves G = 15: 60 + 40 + 5 = 105
    sol = solve(Affine(1, 10, 5, 105), BatchLimits(global_batch=60, tile_batch=4, micro_batches=1))
    assert (sol.tiles, sol.tile_batch, sol.fits, sol.tile_constraint) == (15, 4, True, "tile_batch")
    assert sol.evaluations == 1


def test_fixed_global_batch_with_free_micro_batches_takes_the_fewest_that_fit():
    # N = 60, M free: the fewest M dividing 60 whose 60/M sequences fit as tiles of one sequence.
    # A = 1, capacity 25: M = 1 (60), 2 (30) do not fit; M = 3 (20) does. Q = 0: one tile of 20.
    sol = solve(Affine(1, 0, 0, 25), BatchLimits(global_batch=60))
    assert (sol.micro_batches, sol.tiles * sol.tile_batch, sol.fits) == (3, 20, True)
    assert (sol.tiles, sol.tile_batch) == (1, 20)
    # with tiles fixed, G*b is a multiple of 2: the fewest M whose 60/M (one of 60/d, d | 30) fits
    fixed = solve(Affine(1, 0, 0, 25), BatchLimits(global_batch=60, tiles=2))
    assert (fixed.micro_batches, fixed.tiles, fixed.tile_batch) == (3, 2, 10)


def test_fixed_global_batch_that_never_fits_takes_the_most_micro_batches():
    # nothing fits (C = 500 > capacity): M = N, one sequence per micro-batch, reported as not fitting
    sol = solve(Affine(1, 0, 500, 100), BatchLimits(global_batch=12))
    assert (sol.micro_batches, sol.tiles, sol.tile_batch, sol.fits) == (12, 1, 1, False)


# --- every answer of the density solver, whole (shape, verdict, both constraints, text and probes) ----

def _exact(sol, g, b, fits, bind, tile, text, probes, m=1):
    assert sol == Solution(g, b, fits, bind, tile, text, probes, m, "density"), sol


@pytest.mark.parametrize("limits, want", [
    # nothing fits: one probe, of the smallest shape the limits allow
    (BatchLimits(), (1, 1, False, "memory", "memory", "not even one sequence fits", 1)),
    (BatchLimits(tiles=4), (4, 1, False, "memory", "memory", "4 tiles of 1 sequence do not fit", 1)),
    (BatchLimits(tile_batch=3), (1, 3, False, "memory", "memory", "one tile of 3 sequences does not fit", 1)),
    (BatchLimits(tiles=2, tile_batch=3),
     (2, 3, False, "tiles", "tile_batch", "--tiles and --tile-batch fix the shape: G = 2, b = 3 does not fit", 1)),
])
def test_density_answers_when_nothing_fits(limits, want):
    _exact(solve(Affine(1, 10, 500, 100), limits), *want)


def test_density_at_a_cap_equal_to_the_fixed_size():
    # --tiles 4 with --max-global-batch 4: b = 1 is the only tile allowed, and it fits (4 + 10 + 5 <= 100)
    _exact(solve(Affine(1, 10, 5, 100), BatchLimits(tiles=4, max_global_batch=4)), 4, 1, True, "max_global_batch",
           "tiles", "--tiles 4 is fixed; the largest tile that fits is b = 1; limited by max_global_batch", 2)
    # --tile-batch 3 with --max-global-batch 5: G = 1 (3 sequences) fits, G = 2 would exceed the cap
    _exact(solve(Affine(1, 10, 5, 100), BatchLimits(tile_batch=3, max_global_batch=5)), 1, 3, True, "max_global_batch",
           "tile_batch", "--tile-batch 3 is fixed; the most tiles that fit is G = 1; limited by max_global_batch", 2)


def test_density_with_one_tile_the_only_fit():
    # --tile-batch 5: one tile (5 + 50 + 40 = 95) fits, two (10 + 50 + 40) do not; two probes: the one
    # tile, then the exponential search's first step (G = 2)
    _exact(solve(Affine(1, 10, 40, 95), BatchLimits(tile_batch=5)), 1, 5, True, "memory", "tile_batch",
           "--tile-batch 5 is fixed; the most tiles that fit is G = 1; limited by memory", 2)


def test_density_caps_that_do_not_divide_stay_whole():
    # --tiles 4 under --max-global-batch 25: b <= 25 // 4 = 6 (not 6.25); memory allows b = 7 (4b + 10b + 5 <= 105)
    sol = solve(Affine(1, 10, 5, 105), BatchLimits(tiles=4, max_global_batch=25))
    assert (sol.tiles, sol.tile_batch, sol.binding_constraint) == (4, 6, "max_global_batch")
    assert isinstance(sol.tile_batch, int) and "b = 6;" in sol.explanation
    # --tile-batch 4 under --max-global-batch 30: G <= 7 (not 7.5); memory allows more (4G + 40 + 5 <= 100: G = 13)
    sol = solve(Affine(1, 10, 5, 100), BatchLimits(tile_batch=4, max_global_batch=30))
    assert (sol.tiles, sol.binding_constraint) == (7, "max_global_batch") and isinstance(sol.tiles, int)


def test_both_caps_name_the_one_that_binds():
    # --tiles 2, --max-tile-batch 5, --max-global-batch 12: b <= min(5, 6) = 5; memory allows b = 8:
    # the tile cap binds (5 <= 12 // 2)
    sol = solve(Affine(1, 1, 0, 1000), BatchLimits(tiles=2, max_global_batch=12, max_tile_batch=5))
    assert (sol.tile_batch, sol.binding_constraint) == (5, "max_tile_batch")
    # --max-tile-batch 7 with --max-global-batch 12: b <= min(7, 6) = 6: the global cap binds
    sol = solve(Affine(1, 1, 0, 1000), BatchLimits(tiles=2, max_global_batch=12, max_tile_batch=7))
    assert (sol.tile_batch, sol.binding_constraint) == (6, "max_global_batch")
    # --max-tile-batch 6 = 12 // 2: both allow b = 6; the tile cap is named
    sol = solve(Affine(1, 1, 0, 1000), BatchLimits(tiles=2, max_global_batch=12, max_tile_batch=6))
    assert (sol.tile_batch, sol.binding_constraint) == (6, "max_tile_batch")


def test_free_density_text_names_the_binding_cap():
    sol = solve(Affine(1, 1, 0, 1000), BatchLimits(max_global_batch=48))
    assert "within --max-global-batch 48" in sol.explanation
    sol = solve(Affine(1, 10, 5, 100), BatchLimits())
    assert "within usable memory" in sol.explanation


def test_density_search_is_counted():
    from btacalc import profiling

    profiling.reset()
    solve(Affine(1, 10, 5, 100), BatchLimits())
    assert profiling.counts["density searches"] == 1


def test_the_search_stops_at_its_limit():
    from btacalc.model.solver import _SEARCH_LIMIT, largest_true

    # an always-true predicate: the exponential search walks to the limit and no further
    assert largest_true(lambda x: True, 1, None) == _SEARCH_LIMIT == 2**40
    assert largest_true(lambda x: x <= 1000, 1, None) == 1000


class _CurvedMemory:
    """Many points' memory in bytes at n = G*b sequences: c + a n + q n^3 (q > 0: a working set that
    grows faster than linearly, so the solver's secant steps overshoot and bisection must finish)."""

    def __init__(self, c, a, q, usable):
        self.c, self.a, self.q, self.usable = np.asarray(c), np.asarray(a), np.asarray(q), usable

    def total(self, point, tiles, tile_batch, kept=False):  # kept: nothing offloads here, the same bytes
        n = np.asarray(tiles, dtype=float) * tile_batch
        return self.c[point] + self.a[point] * n + self.q[point] * n ** 3

    def fits(self, point, tiles, tile_batch):
        return self.total(point, tiles, tile_batch) <= self.usable


def _largest_by_bisection(fits, limit):
    """The largest x in [1, limit] with fits(x), fits(1) given and fits monotone: plain bisection."""
    lo, hi = 1, limit + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def test_the_vectorised_search_finds_the_largest_fitting_x_on_curved_memory():
    from btacalc.model.solver import _Slots, largest_fitting

    rng = np.random.default_rng(7)
    k = 300
    mem = _CurvedMemory(rng.integers(0, 1000, k), rng.integers(1, 50, k), rng.choice([0.0, 1e-6, 1e-3, 1.0, 5.0], k),
                        usable=10**6)
    fixed = rng.integers(1, 4, k)
    along_tiles = rng.random(k) < 0.5
    hi = np.where(rng.random(k) < 0.3, rng.integers(1, 500, k), -1)  # a cap on x, or none (-1)
    got = largest_fitting(mem, _Slots(np.arange(k), fixed, along_tiles), hi)
    for i in range(k):
        def fits(x, i=i):
            return bool(mem.fits(i, x, fixed[i]))  # n = x * fixed either way round
        assert got[i] == _largest_by_bisection(fits, int(hi[i]) if hi[i] >= 0 else 10**7), i
