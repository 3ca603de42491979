"""Choose the batch shape: G tiles of b sequences.

Objective (DESIGN notes): maximise expert compute density T_e = G*b*s*k/E, i.e. the global batch
n = G*b, within the usable memory; then prefer the largest tile b (fewest tiles, least tiling
overhead). Memory is non-decreasing in n and, for fixed n, in b (attention's transient working set
scales with b; everything stored scales with n), so:

1. n* = the largest n with M(n tiles of 1 sequence) <= capacity: exponential + binary search;
2. b* = the largest divisor b of n* with M(n*/b tiles of b) <= capacity: binary search over the
   sorted divisors.

That is O(log n + d(n)) memory evaluations, never a blind enumeration of (G, b).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ..config.execution import BatchLimits
from .divisors import divisors
from .memory import MemoryModel

_SEARCH_LIMIT = 1 << 40  # no real plan gets near 2^40 sequences


@dataclass(frozen=True)
class Solution:
    tiles: int
    tile_batch: int
    fits: bool
    binding_constraint: str  # what stops a larger global batch G*b
    tile_constraint: str  # what stops a larger tile b at that global batch
    explanation: str
    evaluations: int = 0


def _largest_true(pred: Callable[[int], bool], lo: int, hi: Optional[int]) -> int:
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


def solve(mem: MemoryModel, limits: BatchLimits) -> Solution:
    """The densest batch shape within `limits` (see module docstring)."""
    limits.validate()
    fits = _Probe(mem)
    n, g, b = limits.fixed_micro_batch, limits.tiles, limits.tile_batch
    if n is not None and (g is not None or b is not None):
        return _fixed_global_and_tile(fits, n, g, b)
    if g is not None and b is not None:
        ok = fits(g, b)
        return Solution(g, b, ok, "tiles", "tile_batch",
                        _fixed_text(ok, g, b, "--tiles and --tile-batch fix the shape"), fits.count)
    if n is not None:
        return _fixed_global(fits, n, limits.max_tile_batch)
    if g is not None:
        return _fixed_tiles(fits, g, limits.max_global_batch, limits.max_tile_batch)
    if b is not None:
        return _fixed_tile_batch(fits, b, limits.max_global_batch)
    return _free(fits, limits.max_global_batch, limits.max_tile_batch)


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
    idx = _largest_true(lambda i: fits(n // opts[i], opts[i]), 0, len(opts) - 1)
    b = opts[idx]
    tile_c = _tile_reason(idx, opts, n, cap_b)
    return Solution(n // b, b, True, "global_batch", tile_c,
                    f"--global-batch {n} is fixed; the largest tile that fits is b = {b} (G = {n // b}); "
                    f"tile limited by {tile_c}", fits.count)


def _fixed_tiles(fits: _Probe, g: int, cap_n: Optional[int], cap_b: Optional[int]) -> Solution:
    hi = None if cap_n is None else cap_n // g
    if cap_b is not None:
        hi = cap_b if hi is None else min(hi, cap_b)
    if (hi is not None and hi < 1) or not fits(g, 1):
        return Solution(g, 1, False, "memory", "memory", f"{g} tiles of 1 sequence do not fit", fits.count)
    b = _largest_true(lambda x: fits(g, x), 1, hi)
    bind = _cap_reason(b, hi, cap_n, cap_b, g, fits, lambda x: (g, x + 1))
    return Solution(g, b, True, bind, "tiles",
                    f"--tiles {g} is fixed; the largest tile that fits is b = {b}; limited by {bind}", fits.count)


def _fixed_tile_batch(fits: _Probe, b: int, cap_n: Optional[int]) -> Solution:
    hi = None if cap_n is None else cap_n // b
    if (hi is not None and hi < 1) or not fits(1, b):
        return Solution(1, b, False, "memory", "memory", f"one tile of {b} sequences does not fit", fits.count)
    g = _largest_true(lambda x: fits(x, b), 1, hi)
    bind = _cap_reason(g, hi, cap_n, None, b, fits, lambda x: (x + 1, b))
    return Solution(g, b, True, bind, "tile_batch",
                    f"--tile-batch {b} is fixed; the most tiles that fit is G = {g}; limited by {bind}", fits.count)


def _free(fits: _Probe, cap_n: Optional[int], cap_b: Optional[int]) -> Solution:
    """Maximise n = G*b (tiles of one sequence use the least memory for a given n), then the largest
    tile b dividing n."""
    if not fits(1, 1):
        return Solution(1, 1, False, "memory", "memory", "not even one sequence fits", fits.count)
    n = _largest_true(lambda x: fits(x, 1), 1, cap_n)
    bind = "max_global_batch" if cap_n is not None and n == cap_n and fits(cap_n + 1, 1) else "memory"
    opts = [b for b in divisors(n) if cap_b is None or b <= cap_b]
    idx = _largest_true(lambda i: fits(n // opts[i], opts[i]), 0, len(opts) - 1)
    b = opts[idx]
    tile_c = _tile_reason(idx, opts, n, cap_b)
    what = "usable memory" if bind == "memory" else f"--max-global-batch {cap_n}"
    return Solution(n // b, b, True, bind, tile_c,
                    f"G*b = {n} is the largest global batch within {what}; b = {b} is the largest tile "
                    f"dividing it that fits (limited by {tile_c})", fits.count)


def _tile_reason(idx: int, opts: list[int], n: int, cap_b: Optional[int]) -> str:
    if opts[idx] == n:
        return "none"  # one tile: attention fits untiled
    if idx == len(opts) - 1:  # every allowed divisor fits: the tile cap binds
        return "max_tile_batch"
    return "memory"


def _cap_reason(x: int, hi: Optional[int], cap_n: Optional[int], cap_b: Optional[int], other: int,
                fits: Callable[[int, int], bool], nxt: Callable[[int], tuple[int, int]]) -> str:
    if hi is not None and x == hi:
        if not fits(*nxt(x)):
            return "memory"
        if cap_b is not None and x == cap_b and (cap_n is None or cap_b <= cap_n // other):
            return "max_tile_batch"
        return "max_global_batch"
    return "memory"


def _fixed_text(ok: bool, g: int, b: int, why: str) -> str:
    return f"{why}: G = {g}, b = {b} {'fits' if ok else 'does not fit'}"
