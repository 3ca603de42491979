"""Choose the batch shape: M micro-batches of G tiles of b sequences per data-parallel rank
(N = DP x M x G x b).

Two objectives (`config.execution.OBJECTIVES`):

- throughput (default, `search`): the fitting shape with the highest predicted tokens/s; ties go to more
  tokens per expert, then fewer tiles. With N free the candidates are the corners of the memory limit
  (the shapes where neither G nor b can grow: memory never falls as either grows, and with one fixed
  the step time's parts are maxima of affine functions of the other with non-negative intercepts, so
  tokens/s never falls as it grows; on GPUs the GEMMs' wave quantisation, model/gpu/gemm.py, makes a
  matmul's time a step function of its rows, so tokens/s may dip by a share of a partial wave: the
  corner is then within that share of the best, e.g. 2.6e-5 on B200). On a wafer that offloads
  activations (model/wafer/offload.py) the offload's exposed traffic can make tokens/s fall as G or b
  grows, but only where activations leave the wafer: per slot of the staircase the candidates add the
  largest shape that keeps every activation on the wafer and every shape from there to the corner
  (`offload_band`); with N fixed, every
  factorisation M x G x b = N / DP. The untiled baseline that BTA's gain is measured against (G = 1) is
  the same objective applied to the G = 1 candidates: the fastest untiled shape, not the largest b that
  fits (with activations offloaded a smaller untiled batch can be faster; the comparison is with the best
  the hardware does without tiling, as the dense reference is the dense model's fastest shape). All of it is
  vectorised over the candidates of many points (plan: one point; sweep: thousands).
- density (`solve_density`): the design card's rule, the largest G*b that fits (expert density
  T_e = G*b*s*k/E), then the largest tile b. Memory is non-decreasing in n = G*b and, for fixed n, in b,
  so an exponential + binary search finds n* (as tiles of one sequence) and a binary search over the
  sorted divisors of n* the largest tile: O(log n + d(n)) memory evaluations. With N fixed and M free,
  the fewest micro-batches whose G*b fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import numpy as np

from .. import profiling
from ..config.execution import OBJECTIVES, BatchLimits
from ..errors import BtacalcError
from ..divisors import divisors, splits
from .memory import MemoryModel
from .problem import Problem
from .timing import step_time

_SEARCH_LIMIT = 1 << 40  # no real plan gets near 2^40 sequences
TIE_TOLERANCE = 1e-12  # tokens/s this close (relative) to the best count as a tie


@dataclass(frozen=True)
class Solution:
    tiles: int
    tile_batch: int
    fits: bool
    binding_constraint: str  # what stops a larger global batch G*b
    tile_constraint: str  # what stops a larger tile b at that global batch
    explanation: str
    evaluations: int = 0
    micro_batches: int = 1
    objective: str = "density"
    tokens_per_s: Optional[float] = None  # predicted, when the search computed it


def largest_true(pred: Callable[[int], bool], lo: int, hi: Optional[int]) -> int:
    """Largest x in [lo, hi] with pred(x), given pred(lo) is True and pred is monotone (True then False)."""
    if hi is None:  # exponential search for a False upper bound
        step = max(lo, 1)
        hi_probe = lo + step
        while hi_probe <= _SEARCH_LIMIT and pred(hi_probe):
            lo, step = hi_probe, step * 2
            hi_probe = lo + step
        hi = min(hi_probe - 1, _SEARCH_LIMIT)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


class _Probe:
    """Memory feasibility of a shape, counting the evaluations."""

    def __init__(self, mem: MemoryModel):
        self.mem = mem
        self.count = 0

    def __call__(self, g: int, b: int) -> bool:
        self.count += 1
        return bool(self.mem.fits(g, b))


def solve_density(mem: MemoryModel, limits: BatchLimits) -> Solution:
    """The densest batch shape within `limits`: the design card's rule, the search unchanged (its
    memory probes are counted in `Solution.evaluations`)."""
    dp = mem.problem.layout.data_parallel
    limits.validate(dp)
    profiling.count("density searches")
    fits = _Probe(mem)
    n, g, b = limits.global_batch, limits.tiles, limits.tile_batch
    m = limits.micro_batches or mem.problem.layout.micro_batches
    if n is not None:
        per_rank = n // dp
        if limits.micro_batches is None:
            m = per_rank // (g * b) if g is not None and b is not None else \
                _fewest_micro_batches(mem, per_rank, (g or 1) * (b or 1))
        n = per_rank // m
    return replace(_density(fits, limits, n, g, b), micro_batches=m)


def _fewest_micro_batches(mem: MemoryModel, per_rank: int, step: int) -> int:
    """Density with the global batch fixed and M free: the fewest micro-batches whose G*b fits as
    tiles of one sequence (the most tokens per expert), else the most."""
    options = divisors(per_rank // step)
    return next((m for m in options if mem.fits(per_rank // m, 1)), options[-1])


def _density(fits: "_Probe", limits: BatchLimits, n: Optional[int], g: Optional[int], b: Optional[int]) -> Solution:
    if n is not None and (g is not None or b is not None):
        return _fixed_global_and_tile(fits, n, g, b)
    if g is not None and b is not None:
        ok = fits(g, b)
        return Solution(g, b, ok, "tiles", "tile_batch",
                        _fixed_text(ok, g, b, "--tiles and --tile-batch fix the shape"), fits.count)
    if n is not None:
        return _fixed_global(fits, n, limits.max_tile_batch)
    cap_n = _per_micro_batch(limits.max_global_batch, fits.mem)
    if g is not None:
        return _fixed_tiles(fits, g, cap_n, limits.max_tile_batch)
    if b is not None:
        return _fixed_tile_batch(fits, b, cap_n)
    return _free(fits, cap_n, limits.max_tile_batch)


def _per_micro_batch(max_global_batch: Optional[int], mem: MemoryModel) -> Optional[int]:
    """The cap on G*b implied by a cap on N = DP*M*G*b."""
    if max_global_batch is None:
        return None
    layout = mem.problem.layout
    return max_global_batch // (layout.data_parallel * layout.micro_batches)


def _fixed_global_and_tile(fits: _Probe, n: int, g_fixed: Optional[int], b_fixed: Optional[int]) -> Solution:
    """A fully determined shape: just check it."""
    g = g_fixed if g_fixed is not None else n // b_fixed  # type: ignore[operator]  # b_fixed is set when g_fixed is not
    b = n // g
    ok = fits(g, b)
    return Solution(g, b, ok, "global_batch", "tiles" if g_fixed else "tile_batch",
                    _fixed_text(ok, g, b, "--global-batch with --tiles/--tile-batch fixes the shape"), fits.count)


def _fixed_global(fits: _Probe, n: int, cap_b: Optional[int]) -> Solution:
    """G must divide N; the largest tile that fits is the smallest feasible G."""
    opts = [b for b in divisors(n) if cap_b is None or b <= cap_b]
    if not opts or not fits(n, 1):
        return Solution(n, 1, False, "memory", "memory",
                        f"global batch {n} does not fit even as {n} tiles of 1 sequence", fits.count)
    idx = largest_true(lambda i: fits(n // opts[i], opts[i]), 0, len(opts) - 1)
    b = opts[idx]
    tile_c = _tile_reason(idx, opts, n)
    return Solution(n // b, b, True, "global_batch", tile_c,
                    f"--global-batch fixes G*b = {n} per micro-batch; the largest tile that fits is b = {b} (G = {n // b}); "
                    f"tile limited by {tile_c}", fits.count)


def _fixed_tiles(fits: _Probe, g: int, cap_n: Optional[int], cap_b: Optional[int]) -> Solution:
    hi = None if cap_n is None else cap_n // g
    if cap_b is not None:
        hi = cap_b if hi is None else min(hi, cap_b)
    if (hi is not None and hi < 1) or not fits(g, 1):
        return Solution(g, 1, False, "memory", "memory", f"{g} tiles of 1 sequence do not fit", fits.count)
    b = largest_true(lambda x: fits(g, x), 1, hi)
    bind = _cap_reason(b, hi, cap_b, fits, lambda x: (g, x + 1))
    return Solution(g, b, True, bind, "tiles",
                    f"--tiles {g} is fixed; the largest tile that fits is b = {b}; limited by {bind}", fits.count)


def _fixed_tile_batch(fits: _Probe, b: int, cap_n: Optional[int]) -> Solution:
    hi = None if cap_n is None else cap_n // b
    if (hi is not None and hi < 1) or not fits(1, b):
        return Solution(1, b, False, "memory", "memory", f"one tile of {b} sequences does not fit", fits.count)
    g = largest_true(lambda x: fits(x, b), 1, hi)
    bind = _cap_reason(g, hi, None, fits, lambda x: (x + 1, b))
    return Solution(g, b, True, bind, "tile_batch",
                    f"--tile-batch {b} is fixed; the most tiles that fit is G = {g}; limited by {bind}", fits.count)


def _free(fits: _Probe, cap_n: Optional[int], cap_b: Optional[int]) -> Solution:
    """Maximise n = G*b (tiles of one sequence use the least memory for a given n), then the largest
    tile b dividing n."""
    if not fits(1, 1):
        return Solution(1, 1, False, "memory", "memory", "not even one sequence fits", fits.count)
    n = largest_true(lambda x: fits(x, 1), 1, cap_n)
    bind = "max_global_batch" if cap_n is not None and n == cap_n and fits(cap_n + 1, 1) else "memory"
    opts = [b for b in divisors(n) if cap_b is None or b <= cap_b]
    idx = largest_true(lambda i: fits(n // opts[i], opts[i]), 0, len(opts) - 1)
    b = opts[idx]
    tile_c = _tile_reason(idx, opts, n)
    what = "usable memory" if bind == "memory" else f"--max-global-batch {cap_n}"
    return Solution(n // b, b, True, bind, tile_c,
                    f"G*b = {n} is the largest global batch within {what}; b = {b} is the largest tile "
                    f"dividing it that fits (limited by {tile_c})", fits.count)


def _tile_reason(idx: int, opts: list[int], n: int) -> str:
    if opts[idx] == n:
        return "none"  # one tile: attention fits untiled
    if idx == len(opts) - 1:  # every allowed divisor fits: the tile cap binds
        return "max_tile_batch"
    return "memory"


def _cap_reason(x: int, hi: Optional[int], cap_b: Optional[int], fits: Callable[[int, int], bool],
                nxt: Callable[[int], tuple[int, int]]) -> str:
    """What stopped a search at x, the largest fitting value up to hi: memory, unless x is the cap and one
    more would still fit. At x == hi == cap_b the tile cap binds (hi = min(cap_n // other, cap_b), so
    the global cap allows it too)."""
    if hi is None or x < hi or not fits(*nxt(x)):
        return "memory"
    return "max_tile_batch" if cap_b is not None and x == cap_b else "max_global_batch"


def _fixed_text(ok: bool, g: int, b: int, why: str) -> str:
    return f"{why}: G = {g}, b = {b} {'fits' if ok else 'does not fit'}"


# ---------------------------------------------------------------------------------------------------
# The candidate search, vectorised over the candidate shapes of many points


@dataclass(frozen=True)
class PointLimits:
    """The batch limits of P points as int64 arrays, 0 where a limit is not set. Which limits are set
    is the same for every point (a sweep varies values, not which flags are given)."""

    global_batch: np.ndarray
    tiles: np.ndarray
    tile_batch: np.ndarray
    max_global_batch: np.ndarray
    max_tile_batch: np.ndarray
    micro_batches: np.ndarray

    @classmethod
    def of(cls, limits: BatchLimits, points: int = 1) -> "PointLimits":
        return cls(**{name: np.full(points, getattr(limits, name) or 0, dtype=np.int64)
                      for name in cls.__dataclass_fields__})

    def given(self, name: str) -> bool:
        return bool(getattr(self, name).any())  # small arrays: cheaper than caching on a frozen dataclass


@dataclass(frozen=True)
class Candidates:
    """Candidate shapes: the point each belongs to, G, b and M (int64 arrays of one length)."""

    point: np.ndarray
    tiles: np.ndarray
    tile_batch: np.ndarray
    micro_batches: np.ndarray

    @staticmethod
    def join(parts: list["Candidates"]) -> "Candidates":
        return Candidates(*(np.concatenate([getattr(c, f) for c in parts]).astype(np.int64)
                            for f in Candidates.__dataclass_fields__))

    def where(self, keep: np.ndarray) -> "Candidates":
        return Candidates(*(getattr(self, f)[keep] for f in Candidates.__dataclass_fields__))


class PointMemory:
    """Memory of candidate shapes of the points of `problem` (whose sequence length, model symbols
    and parameter counts may be arrays with one value per point); counts the shapes evaluated per
    point."""

    def __init__(self, problem: Problem, points: int):
        self.problem = problem
        self.mem = MemoryModel(problem)
        self.usable = self.mem.usable
        self.per_point = isinstance(problem.run.seq_len, np.ndarray) or bool(problem.symbols)
        self.shapes = np.zeros(points, dtype=np.int64)

    def at(self, point: np.ndarray) -> Problem:
        """The problem of the candidates' points (one value per candidate)."""
        return self.problem.at_points(point) if self.per_point else self.problem

    def _memory(self, point: np.ndarray) -> MemoryModel:
        self.shapes += np.bincount(point, minlength=self.shapes.size)
        return MemoryModel(self.at(point)) if self.per_point else self.mem

    def fits(self, point: np.ndarray, tiles: np.ndarray, tile_batch: np.ndarray) -> np.ndarray:
        if not point.size:
            return np.zeros(0, dtype=bool)
        fit = self._memory(point).fits(tiles.astype(float), tile_batch.astype(float))
        return _as_points(np.asarray(fit, dtype=bool), point.shape)

    def total(self, point: np.ndarray, tiles: np.ndarray, tile_batch: np.ndarray, kept: bool = False) -> np.ndarray:
        """Bytes on the wafer of each shape; `kept`: as if no activation left it (MemoryModel.total_kept)."""
        mem = self._memory(point)
        total = (mem.total_kept if kept else mem.total)(tiles.astype(float), tile_batch.astype(float))
        return _as_points(np.asarray(total, dtype=float), point.shape)


def _as_points(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`values` over the probed shapes: itself when it has their shape already (every probe of a layout that
    is not an array of points; np.broadcast_to's Python wrapper costs a few µs), else broadcast (read only)."""
    return values if values.shape == shape else np.broadcast_to(values, shape)


@dataclass
class _Slots:
    """Searches for the largest fitting x per slot: x is G (b = `fixed`) or b (G = `fixed`)."""

    point: np.ndarray
    fixed: np.ndarray
    along_tiles: np.ndarray  # True: x is G

    def shape(self, x: np.ndarray, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        along = self.along_tiles[sel]
        return self.point[sel], np.where(along, x, self.fixed[sel]), np.where(along, self.fixed[sel], x)


# Secant steps before bisection finishes: memory is convex and piecewise linear in G (and in b), so a
# step lands on the limit unless another phase's working set takes over on the way.
_SECANT_STEPS = 6


# Shapes evaluated together: bounds the memory of one pass. Since the wafer offload band (469cf81) a
# shape holds about 12 KB of per-phase values while it is evaluated (a 10,000-point wse3 sweep peaked at
# 497 MB with 2^15 shapes a pass, 254 MB with 2^13, the same CPU time; docs/speed.md, "speed4").
CHUNK_SHAPES = 1 << 13


def _chunks(size: int) -> list[slice]:
    return [slice(i, min(i + CHUNK_SHAPES, size)) for i in range(0, size, CHUNK_SHAPES)]


def largest_fitting(memory: PointMemory, slots: _Slots, hi: np.ndarray, kept: bool = False) -> np.ndarray:
    """`_largest_fitting` over chunks of at most CHUNK_SHAPES slots."""
    if slots.point.size <= CHUNK_SHAPES:
        return _largest_fitting(memory, slots, hi, kept)
    return np.concatenate([_largest_fitting(memory, _Slots(slots.point[c], slots.fixed[c], slots.along_tiles[c]),
                                            hi[c], kept)
                           for c in _chunks(slots.point.size)])


def _largest_fitting(memory: PointMemory, slots: _Slots, hi: np.ndarray, kept: bool = False) -> np.ndarray:
    """Per slot, the largest x in [1, hi] (hi < 0: up to 2^40) whose shape fits, given x = 1 fits
    (`kept`: fits with every activation on the wafer, MemoryModel.total_kept).

    Each step evaluates the memory at x and x + 1: x fitting and x + 1 not settles the slot; else the
    line through the two predicts the limit. Memory never falls as x grows (what makes the answer
    well defined) and is convex (a working set that takes over grows faster), so the prediction never
    falls short, and lands on the limit once on its linear piece. Bisection finishes what the steps
    leave open."""
    k = slots.point.size
    ok = np.ones(k, dtype=np.int64)  # largest x known to fit
    bad = np.where(hi >= 0, hi + 1, _SEARCH_LIMIT + 1).astype(np.int64)  # smallest x known not to fit (or beyond)
    open_ended = hi < 0
    x = np.ones(k, dtype=np.int64)
    for _ in range(_SECANT_STEPS):
        act = np.flatnonzero(bad - ok > 1)
        if not act.size:
            return ok
        xa = x[act]
        sel, xs = np.concatenate([act, act]), np.concatenate([xa, xa + 1])
        t = memory.total(*slots.shape(xs, sel), kept=kept)
        _record(t <= memory.usable, sel, xs, ok, bad, open_ended)
        t0, slope = t[:act.size], t[act.size:] - t[:act.size]
        with np.errstate(divide="ignore", invalid="ignore"):
            guess = np.where(slope > 0, xa + np.floor((memory.usable - t0) / np.where(slope > 0, slope, 1)),
                             _SEARCH_LIMIT)
        x[act] = np.clip(np.nan_to_num(guess, nan=_SEARCH_LIMIT), ok[act], bad[act] - 1)
    while True:
        act = np.flatnonzero(bad - ok > 1)
        if not act.size:
            return ok
        mid = np.where(open_ended[act], np.minimum(2 * ok[act], _SEARCH_LIMIT), (ok[act] + bad[act]) // 2)
        _record(memory.total(*slots.shape(mid, act), kept=kept) <= memory.usable, act, mid, ok, bad, open_ended)


def _record(fit: np.ndarray, sel: np.ndarray, xs: np.ndarray, ok: np.ndarray, bad: np.ndarray,
            open_ended: np.ndarray) -> None:
    """Learn from probes at xs of slots sel; probes at or beyond a slot's known bound (its cap, or a
    shape already known not to fit) teach nothing."""
    inside = xs < bad[sel]
    fit, sel, xs = fit[inside], sel[inside], xs[inside]
    np.maximum.at(ok, sel[fit], xs[fit])
    np.minimum.at(bad, sel[~fit], xs[~fit])
    open_ended[sel[~fit]] = False
    open_ended[sel[fit][xs[fit] >= _SEARCH_LIMIT]] = False


def _caps(limits: PointLimits, problem: Problem, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Caps on G*b (from the cap on N = DP*M*G*b) and on b per point; -1 where there is none."""
    dp = problem.layout.data_parallel
    cap_n = np.where(limits.max_global_batch > 0, limits.max_global_batch // (dp * m), -1)
    cap_b = np.where(limits.max_tile_batch > 0, limits.max_tile_batch, -1)
    return cap_n, cap_b


def _min_cap(*caps: np.ndarray) -> np.ndarray:
    """The smallest of caps where -1 means none (-1 if all are none)."""
    big = np.iinfo(np.int64).max
    low = np.minimum.reduce([np.where(c >= 0, c, big) for c in caps])
    return np.where(low == big, -1, low)


def corner_candidates(memory: PointMemory, limits: PointLimits, m: np.ndarray) -> Candidates:
    """N free: the corners of each point's memory limit (see the module docstring), within the caps,
    with G or b fixed where the user fixed them."""
    points = np.arange(m.size)
    cap_n, cap_b = _caps(limits, memory.problem, m)
    g_fix = limits.tiles if limits.given("tiles") else np.ones_like(m)
    b_fix = limits.tile_batch if limits.given("tile_batch") else np.ones_like(m)
    start = memory.fits(points, g_fix, b_fix) & ((cap_n < 0) | (g_fix * b_fix <= cap_n))
    p = points[start]
    if limits.given("tiles") and limits.given("tile_batch"):
        return Candidates(p, g_fix[p], b_fix[p], m[p])
    if limits.given("tiles") or limits.given("tile_batch"):
        along = np.full(p.size, limits.given("tile_batch"))  # b fixed: search G, else search b
        fixed = np.where(along, b_fix[p], g_fix[p])
        hi = np.where(along, np.where(cap_n[p] >= 0, cap_n[p] // np.maximum(fixed, 1), -1),
                      _min_cap(cap_b[p], np.where(cap_n[p] >= 0, cap_n[p] // np.maximum(fixed, 1), -1)))
        slots = _Slots(p, fixed, along)
        x = largest_fitting(memory, slots, hi)
        return Candidates.join([Candidates(p, np.where(along, x, fixed), np.where(along, fixed, x), m[p]),
                                offload_band(memory, slots, x, np.zeros(p.size, np.int64), m)])
    # the extent of the staircase: n1 = the most tiles of one sequence, b1 = the largest single tile
    k = p.size
    ext = largest_fitting(memory, _Slots(np.concatenate([p, p]), np.ones(2 * k, np.int64),
                                         np.arange(2 * k) < k),
                          np.concatenate([cap_n[p], _min_cap(cap_b[p], cap_n[p])]))
    n1, b1 = ext[:k], ext[k:]
    r = np.floor(np.sqrt(n1)).astype(np.int64)
    r = r - (r * r > n1) + ((r + 1) * (r + 1) <= n1)
    tiles_side = _ladder(p, np.maximum(r - 1, 0))  # G = 2..r, search b
    tile_side = _ladder(p, np.maximum(np.minimum(r, b1) - 1, 0))  # b = 2..min(r, b1), search G
    row_a, row_b = np.searchsorted(p, tiles_side[0]), np.searchsorted(p, tile_side[0])  # rows of n1, b1
    slots = _Slots(np.concatenate([tiles_side[0], tile_side[0]]), np.concatenate([tiles_side[1], tile_side[1]]),
                   np.arange(tiles_side[0].size + tile_side[0].size) >= tiles_side[0].size)
    hi = np.concatenate([np.minimum(b1[row_a], n1[row_a] // np.maximum(tiles_side[1], 1)),
                         n1[row_b] // np.maximum(tile_side[1], 1)])
    x = largest_fitting(memory, slots, hi)
    corners = Candidates(np.concatenate([p, p, slots.point]),
                         np.concatenate([n1, np.ones(k, np.int64), np.where(slots.along_tiles, x, slots.fixed)]),
                         np.concatenate([np.ones(k, np.int64), b1, np.where(slots.along_tiles, slots.fixed, x)]),
                         m[np.concatenate([p, p, slots.point])])
    # every slot, the two extents first (G along b = 1, b along G = 1); a slot that searches G (b >= 1
    # fixed) needs no G <= r in its band: those shapes lie on the slots G = 1..r
    every = _Slots(np.concatenate([p, p, slots.point]), np.ones(2 * k + slots.point.size, np.int64),
                   np.concatenate([np.ones(k, bool), np.zeros(k, bool), slots.along_tiles]))
    every.fixed[2 * k:] = slots.fixed
    along = every.along_tiles
    r_of = np.concatenate([r, r, r[np.searchsorted(p, slots.point)]])
    return Candidates.join([corners, offload_band(memory, every, np.concatenate([n1, b1, x]),
                                                  np.where(along, r_of, 0), m)])


# The offload band's shapes a search times in one pass before narrowing the widest slots, and the
# samples per slot in a narrowing round (model/solver.offload_band)
BAND_SCAN_SHAPES = 2048
BAND_SAMPLES = 16


def offload_band(memory: PointMemory, slots: _Slots, largest: np.ndarray, covered: np.ndarray,
                 m: np.ndarray) -> Candidates:
    """The shapes of each slot where activations leave the wafer (wafer/offload.py), which the corners
    alone do not cover. Per slot, x_0 is the largest x whose shape fits with every activation on the
    wafer (a binary search: that predicate is the memory limit without offload, monotone in x); up to
    x_0 the step's parts are as without offload, so tokens/s never falls as x grows and x_0 stands for
    them. Beyond it, up to the slot's memory corner `largest` (x up to `covered` lie on other slots),
    the offloaded bytes S_off = max(0, S + W - usable) leave and come back, and the micro-batch takes
        T = C + max(P, t_stream + 2 S_off / r_act)
    (P: the phases, C: the per-micro-batch costs; offload.py's t_offload = max(0, 2 S_off / r_act -
    (P - t_stream)) added to P + C): once the link cannot hide the traffic, tokens/s falls as x grows
    (a brute-force search found 3 x 2 beat the corners by 7% or more on wse2). Both branches of T are
    convex in x (P and C are maxima of affine functions, memory S + W is convex and piecewise linear,
    t_stream does not depend on x), so T is, and tokens/s = x k / (M T + B) is quasi-concave in x:
    it rises, may stay flat, then falls. A point's band is timed whole when it holds at most
    BAND_SCAN_SHAPES shapes (exact without that argument); wider slots are first narrowed, each
    round timing BAND_SAMPLES evenly spaced x and keeping the two intervals around the fastest (the
    largest x among equals), which holds the peak of a quasi-concave function."""
    if not slots.point.size or not memory.mem.offloads:
        return Candidates(*(np.zeros(0, np.int64),) * 4)
    starts = memory.total(*slots.shape(np.ones(slots.point.size, np.int64), np.arange(slots.point.size)),
                          kept=True) <= memory.usable
    x0 = np.zeros(slots.point.size, np.int64)
    on = np.flatnonzero(starts)
    x0[on] = largest_fitting(memory, _Slots(slots.point[on], slots.fixed[on], slots.along_tiles[on]),
                             largest[on], kept=True)
    first, last = _narrow(memory, slots, np.maximum(x0, covered) + 1, largest.astype(np.int64), m)
    counts = np.maximum(last - first + 1, 0)
    owner = np.repeat(np.arange(slots.point.size), counts)
    x = np.arange(owner.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts) + first[owner]
    keep0 = np.flatnonzero((x0 >= 1) & (x0 < largest))  # x_0 itself (the corner is already a candidate)
    owner, x = np.concatenate([owner, keep0]), np.concatenate([x, x0[keep0]])
    return _slot_candidates(slots, owner, x, m)


def _slot_candidates(slots: _Slots, owner: np.ndarray, x: np.ndarray, m: np.ndarray) -> Candidates:
    """The shapes at x on slots `owner`."""
    along, fixed, point = slots.along_tiles[owner], slots.fixed[owner], slots.point[owner]
    return Candidates(point, np.where(along, x, fixed), np.where(along, fixed, x), m[point])


def _narrow(memory: PointMemory, slots: _Slots, first: np.ndarray, last: np.ndarray,
            m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shrink each slot's interval [first, last] (tokens/s quasi-concave in x on it) around its fastest
    x until each point's intervals hold at most BAND_SCAN_SHAPES shapes together (offload_band); per
    point, so a point of a sweep gets the candidates a plan of it gets."""
    first, last = first.copy(), last.copy()
    k = BAND_SAMPLES
    points = int(slots.point.max()) + 1 if slots.point.size else 0
    while True:
        width = np.maximum(last - first + 1, 0)
        crowded = np.bincount(slots.point, weights=width, minlength=points) > BAND_SCAN_SHAPES
        wide = np.flatnonzero(crowded[slots.point] & (width > k))
        if not wide.size:
            break
        span = (last - first)[wide]
        xs = first[wide, None] + (np.arange(k)[None, :] * span[:, None]) // (k - 1)  # (wide, k), ends included
        owner = np.repeat(wide, k)
        tps = _timed(memory, _slot_candidates(slots, owner, xs.reshape(-1), m))[0].reshape(-1, k)
        best = k - 1 - np.argmax(tps[:, ::-1] >= tps.max(axis=1, keepdims=True), axis=1)  # the largest x among equals
        rows = np.arange(wide.size)
        first[wide], last[wide] = xs[rows, np.maximum(best - 1, 0)], xs[rows, np.minimum(best + 1, k - 1)]
    return first, last


def _timed(memory: PointMemory, cand: Candidates) -> tuple[np.ndarray, np.ndarray]:
    """Tokens/s and step time of each candidate, in chunks of at most CHUNK_SHAPES shapes."""
    tps, step = np.zeros(cand.point.size), np.zeros(cand.point.size)
    for c in _chunks(cand.point.size):
        profiling.count("step-time passes")
        st = step_time(memory.at(cand.point[c]), cand.tiles[c].astype(float), cand.tile_batch[c].astype(float),
                       micro_batches=cand.micro_batches[c].astype(float), report=False)
        tps[c], step[c] = st.tokens_per_s, st.step_time_s
    return tps, step


def _ladder(points: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each point, `count` slots numbered 2, 3, ...: (point per slot, number per slot)."""
    owner = np.repeat(points, counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return owner, np.arange(owner.size, dtype=np.int64) - starts + 2


def factor_candidates(memory: PointMemory, limits: PointLimits) -> Candidates:
    """N fixed: every M*G*b = N/DP per point within the fixed values and the tile cap, that fits."""
    dp = memory.problem.layout.data_parallel
    keys = np.stack([limits.global_batch // dp, limits.micro_batches, limits.tiles, limits.tile_batch,
                     limits.max_tile_batch], axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    parts = []
    for i, key in enumerate(unique):
        triples = np.array(_factorisations(*(int(v) for v in key)), dtype=np.int64).reshape(-1, 3)
        owners = np.flatnonzero(inverse == i)
        parts.append(Candidates(np.repeat(owners, len(triples)), np.tile(triples[:, 1], owners.size),
                                np.tile(triples[:, 2], owners.size), np.tile(triples[:, 0], owners.size)))
    cand = Candidates.join(parts)
    fits = np.concatenate([memory.fits(cand.point[c], cand.tiles[c], cand.tile_batch[c])
                           for c in _chunks(cand.point.size)] or [np.zeros(0, dtype=bool)])
    return cand.where(fits)


# The most (M, G, b) splits of a fixed global batch the solver lists (a power of two up to 2^62 has at
# most 2,016; only batch sizes with very many divisors come near).
MAX_SPLITS = 1 << 18


def _factorisations(per_rank: int, m_fix: int, g_fix: int, b_fix: int, cap_b: int) -> list[tuple[int, int, int]]:
    """(M, G, b) with M*G*b = per_rank, honouring the fixed values (0: free) and the cap on b."""
    if not (m_fix or g_fix or b_fix) and splits(per_rank) > MAX_SPLITS:
        raise BtacalcError(f"{{global_batch}}: {per_rank:,} sequences per data-parallel rank split {splits(per_rank):,} "
                           f"ways into M x G x b, more than the {MAX_SPLITS:,} the solver lists; fix {{micro_batches}}, "
                           "{tiles} or {tile_batch}")
    out = []
    for m in [m_fix] if m_fix else divisors(per_rank):
        n = per_rank // m
        for b in [b_fix] if b_fix else divisors(n):
            if n % b or (cap_b and b > cap_b) or (g_fix and n // b != g_fix):
                continue
            out.append((m, n // b, b))
    return out


def pick(cand: Candidates, tokens_per_s: np.ndarray, points: int, objective: str) -> np.ndarray:
    """Per point, the index of the chosen candidate (-1 if it has none). Throughput: the highest
    tokens/s (within TIE_TOLERANCE), then the most tokens per expert (G*b), then the fewest tiles;
    density: the largest G*b, then the fewest tiles."""
    chosen = np.full(points, -1, dtype=np.int64)
    if not cand.point.size:
        return chosen
    tied = np.ones(cand.point.size, dtype=bool)
    if objective == "throughput":
        best = np.full(points, -np.inf)
        np.maximum.at(best, cand.point, tokens_per_s)
        tied = tokens_per_s >= best[cand.point] * (1 - TIE_TOLERANCE)
    order = np.lexsort((-cand.tiles, cand.tiles * cand.tile_batch, tied, cand.point))
    last = np.flatnonzero(np.append(cand.point[order][1:] != cand.point[order][:-1], True))
    chosen[cand.point[order][last]] = order[last]
    return chosen


@dataclass
class Search:
    """The candidates of P points with their predicted step times, and the choices among them."""

    cand: Candidates  # fitting candidates only
    step_time_s: np.ndarray
    tokens_per_s: np.ndarray
    chosen: dict[str, np.ndarray]  # "throughput", "density", "g1" (G = 1: the objective's best untiled shape)
    objective: str
    shapes: np.ndarray  # memory evaluations (shapes) per point
    binding: list[str]
    tile: list[str]
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # candidates per point
    # per point without a fitting shape, the shape reported as not fitting (as the density search
    # reports it): G and b as fixed (else 1), and M as fixed, else N/(DP*G*b) with N fixed, else 1
    fallback: tuple[np.ndarray, np.ndarray, np.ndarray] = (np.ones(0, np.int64),) * 3

    @property
    def best(self) -> np.ndarray:
        return self.chosen[self.objective]

    def shapes_of(self, which: Optional[str] = None) -> tuple[np.ndarray, ...]:
        """Per point, the choice of `which` (default the objective): fits, G, b, M, tokens/s (a point
        without a fitting shape: 1, 1, 1, nan)."""
        i = self.chosen[which or self.objective]
        fits = i >= 0
        j = np.maximum(i, 0)
        pick = lambda a, default: np.where(fits, a[j] if a.size else default, default)  # noqa: E731
        c, (g, b, m) = self.cand, self.fallback
        return (fits, pick(c.tiles, g), pick(c.tile_batch, b), pick(c.micro_batches, m),
                pick(self.tokens_per_s, np.nan))

    def solution(self, point: int = 0, which: Optional[str] = None) -> Solution:
        """The choice for one point as a `Solution` (the objective's, or `which`)."""
        which = which or self.objective
        i = int(self.chosen[which][point])
        if i < 0:
            g, b, m = (int(a[point]) for a in self.fallback)
            return Solution(g, b, False, "memory", "memory", "not even one sequence fits",
                            int(self.shapes[point]), m, which)
        g, b, m = (int(getattr(self.cand, f)[i]) for f in ("tiles", "tile_batch", "micro_batches"))
        bind, tile = (self.binding[point], self.tile[point]) if which == self.objective else ("", "")
        return Solution(g, b, True, bind, tile, self.explain(point, which), int(self.shapes[point]), m, which,
                        float(self.tokens_per_s[i]))

    def explain(self, point: int, which: Optional[str] = None) -> str:
        which = which or self.objective
        i = int(self.chosen[which][point])
        if i < 0:
            return "not even one sequence fits"
        c = self.cand
        shape = f"G = {c.tiles[i]}, b = {c.tile_batch[i]}" + (f", M = {c.micro_batches[i]}" if c.micro_batches[i] > 1 else "")
        if which == "density":
            return f"{shape}: the largest G*b that fits, then the largest tile ({self.tokens_per_s[i]:,.0f} tokens/s)"
        text = f"{shape}: the fastest of {self.counts[point]} candidate shapes ({self.tokens_per_s[i]:,.0f} tokens/s)"
        d = int(self.chosen["density"][point])
        if d != i:
            text += (f"; the densest, G = {c.tiles[d]}, b = {c.tile_batch[d]}, runs at "
                     f"{self.tokens_per_s[d]:,.0f} tokens/s")
        return text


def search(problem: Problem, limits: PointLimits, objective: str = "throughput") -> Search:
    """Every candidate shape of every point of `problem` (its sequence length may be an array of
    points), the step time of each, and each objective's choice (see the module docstring)."""
    points = limits.tiles.size
    profiling.count("candidate searches")
    memory = PointMemory(problem, points)
    m = np.where(limits.micro_batches > 0, limits.micro_batches, problem.layout.micro_batches)
    if limits.given("global_batch"):
        cand = factor_candidates(memory, limits)
    else:
        cand = corner_candidates(memory, limits, m)
    tps, step = _timed(memory, cand)
    chosen = {o: pick(cand, tps, points, o) for o in OBJECTIVES}
    untiled = np.flatnonzero(cand.tiles == 1)
    # G = 1 is the objective's choice among the untiled candidates, as with N fixed or G given (plan.summarize,
    # sweep): under throughput the fastest untiled shape, which with activations offloaded can be a smaller b
    # than the largest that fits (the slot G = 1's offload band is among the candidates)
    g1 = pick(cand.where(untiled), tps[untiled], points, objective)
    chosen["g1"] = np.where(g1 >= 0, untiled[np.maximum(g1, 0)] if untiled.size else -1, -1)
    binding, tile = _constraints(memory, limits, cand, chosen[objective])
    return Search(cand, step, tps, chosen, objective, memory.shapes, binding, tile,
                  np.bincount(cand.point, minlength=points), _fallback(problem, limits, m))


def _fallback(problem: Problem, limits: PointLimits, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shape reported where not even one sequence fits: what the user fixed, else one sequence. With N and M
    both fixed (a GPU's --micro-batch becomes M = N / (DP x micro-batch), config/execution.py) the micro-batch G*b
    is N / (DP x M), the one the user asked for, not 1 (a plan reported micro-batch 1 and half the global batch):
    b = G*b / G with G fixed or 1, or G = G*b / b with only b fixed (a wafer's --tile-batch: review18). Per point:
    a point without M keeps G and b as given or 1."""
    g = np.where(limits.tiles > 0, limits.tiles, 1)
    b = np.where(limits.tile_batch > 0, limits.tile_batch, 1)
    if limits.given("global_batch"):
        per_rank = limits.global_batch // problem.layout.data_parallel
        m_fixed = limits.micro_batches > 0
        gb = per_rank // np.maximum(limits.micro_batches, 1)  # G*b where M is fixed
        b = np.where(m_fixed & (limits.tile_batch <= 0), np.maximum(gb // g, 1), b)
        g = np.where(m_fixed & (limits.tiles <= 0) & (limits.tile_batch > 0), np.maximum(gb // b, 1), g)
        m = np.where(m_fixed, limits.micro_batches, np.maximum(per_rank // (g * b), 1))
    return g, b, m


def _constraints(memory: PointMemory, limits: PointLimits, cand: Candidates,
                 chosen: np.ndarray) -> tuple[list[str], list[str]]:
    """Per point: what stops a larger G*b at the chosen shape, and what stops a larger tile b."""
    points = chosen.size
    binding, tile = ["memory"] * points, ["memory"] * points
    p = np.flatnonzero(chosen >= 0)
    i = chosen[p]
    g, b = cand.tiles[i], cand.tile_batch[i]
    m = np.ones(points, dtype=np.int64)
    m[p] = cand.micro_batches[i]
    cap_n, cap_b = (c[p] for c in _caps(limits, memory.problem, m))
    grow_b = limits.given("tiles") and not limits.given("tile_batch")
    next_g, next_b = np.where(grow_b, g, g + 1), np.where(grow_b, b + 1, b)
    fits = memory.fits(np.concatenate([p, p]), np.concatenate([next_g, g]), np.concatenate([next_b, b + 1]))
    grows, wider = fits[:p.size], fits[p.size:]
    given = {n: limits.given(n) for n in ("global_batch", "tiles", "tile_batch")}
    bind = _select([np.full(p.size, given["global_batch"]), np.full(p.size, given["tiles"] and given["tile_batch"]),
                    (cap_n >= 0) & (next_g * next_b > cap_n), grow_b & (cap_b >= 0) & (next_b > cap_b), grows],
                   ["global_batch", "tiles", "max_global_batch", "max_tile_batch", "throughput"], "memory")
    wide = _select([g == 1, np.full(p.size, given["tile_batch"]), np.full(p.size, given["tiles"]),
                    (cap_b >= 0) & (b + 1 > cap_b), wider],
                   ["none", "tile_batch", "tiles", "max_tile_batch", "throughput"], "memory")
    for values, out in ((bind, binding), (wide, tile)):
        for q, v in zip(p.tolist(), values):
            out[q] = v
    return binding, tile


# Up to this many points the constraints' names are chosen in Python (np.select over strings costs ~30 µs a call)
_SELECT_IN_PYTHON = 64


def _select(conditions: list[np.ndarray], choices: list[str], default: str) -> list[str]:
    """`np.select(conditions, choices, default).tolist()`: per element, the choice of the first true condition,
    else `default` (1-D conditions of one length)."""
    size = conditions[0].size
    if size > _SELECT_IN_PYTHON:
        return np.select(conditions, choices, default).tolist()
    flags = [(c if np.shape(c) == (size,) else np.broadcast_to(c, (size,))).tolist() for c in conditions]
    return [next((choice for flag, choice in zip(flags, choices) if flag[i]), default) for i in range(size)]


def solve(mem: MemoryModel, limits: BatchLimits, objective: Optional[str] = None) -> Solution:
    """The batch shape of one problem under `objective` (default: the problem's execution's)."""
    objective = objective or mem.problem.execution.objective
    if objective == "density":
        return solve_density(mem, limits)
    limits.validate(mem.problem.layout.data_parallel)
    return search(mem.problem, PointLimits.of(limits), objective).solution(0)
