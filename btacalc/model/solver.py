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

from .errors import BtacalcError
from .memory import MemoryModel

_SEARCH_LIMIT = 1 << 40  # no real plan gets near 2^40 sequences


@dataclass(frozen=True)
class BatchLimits:
    """User constraints on the batch shape; None means free."""

    global_batch: Optional[int] = None
    tiles: Optional[int] = None
    tile_batch: Optional[int] = None
    max_global_batch: Optional[int] = None
    max_tile_batch: Optional[int] = None

    def validate(self) -> None:
        for name, v in self.__dict__.items():
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise BtacalcError(f"--{name.replace('_', '-')} must be a positive integer, got {v!r}")
        n, g, b = self.global_batch, self.tiles, self.tile_batch
        if n is not None and g is not None and n % g:
            raise BtacalcError(f"--global-batch {n} is not divisible by --tiles {g}")
        if n is not None and b is not None and n % b:
            raise BtacalcError(f"--global-batch {n} is not divisible by --tile-batch {b}")
        if n is not None and g is not None and b is not None and g * b != n:
            raise BtacalcError(f"--tiles {g} x --tile-batch {b} = {g * b} differs from --global-batch {n}")
        if n is not None and self.max_global_batch is not None and n > self.max_global_batch:
            raise BtacalcError(f"--global-batch {n} exceeds --max-global-batch {self.max_global_batch}")
        if b is not None and self.max_tile_batch is not None and b > self.max_tile_batch:
            raise BtacalcError(f"--tile-batch {b} exceeds --max-tile-batch {self.max_tile_batch}")


@dataclass(frozen=True)
class Solution:
    tiles: int
    tile_batch: int
    fits: bool
    binding_constraint: str  # what stops a larger global batch G*b
    tile_constraint: str  # what stops a larger tile b at that global batch
    explanation: str
    evaluations: int = 0


def divisors(n: int) -> list[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


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


def solve(mem: MemoryModel, limits: BatchLimits) -> Solution:
    limits.validate()
    count = 0

    def fits(g: int, b: int) -> bool:
        nonlocal count
        count += 1
        return bool(mem.fits(g, b))

    cap_n = limits.max_global_batch
    cap_b = limits.max_tile_batch
    n_fixed, g_fixed, b_fixed = limits.global_batch, limits.tiles, limits.tile_batch

    # Fully determined shapes: just check them.
    if n_fixed is not None and (g_fixed is not None or b_fixed is not None):
        g = g_fixed if g_fixed is not None else n_fixed // b_fixed  # type: ignore[operator]
        b = n_fixed // g
        ok = fits(g, b)
        return Solution(g, b, ok, "global_batch", "tiles" if g_fixed else "tile_batch",
                        _fixed_text(ok, g, b, "--global-batch with --tiles/--tile-batch fixes the shape"), count)
    if g_fixed is not None and b_fixed is not None:
        ok = fits(g_fixed, b_fixed)
        return Solution(g_fixed, b_fixed, ok, "tiles", "tile_batch",
                        _fixed_text(ok, g_fixed, b_fixed, "--tiles and --tile-batch fix the shape"), count)

    if n_fixed is not None:
        # G must divide N; the largest tile that fits is the smallest feasible G.
        tiles_opts = [b for b in divisors(n_fixed) if cap_b is None or b <= cap_b]
        if not tiles_opts or not fits(n_fixed, 1):
            return Solution(n_fixed, 1, False, "memory", "memory",
                            f"global batch {n_fixed} does not fit even as {n_fixed} tiles of 1 sequence", count)
        idx = _largest_true(lambda i: fits(n_fixed // tiles_opts[i], tiles_opts[i]), 0, len(tiles_opts) - 1)
        b = tiles_opts[idx]
        tile_c = _tile_reason(idx, tiles_opts, n_fixed, cap_b)
        return Solution(n_fixed // b, b, True, "global_batch", tile_c,
                        f"--global-batch {n_fixed} is fixed; the largest tile that fits is b = {b} (G = {n_fixed // b}); "
                        f"tile limited by {tile_c}", count)

    if g_fixed is not None:
        hi = None if cap_n is None else cap_n // g_fixed
        if cap_b is not None:
            hi = cap_b if hi is None else min(hi, cap_b)
        if (hi is not None and hi < 1) or not fits(g_fixed, 1):
            return Solution(g_fixed, 1, False, "memory", "memory", f"{g_fixed} tiles of 1 sequence do not fit", count)
        b = _largest_true(lambda x: fits(g_fixed, x), 1, hi)
        bind = _cap_reason(b, hi, cap_n, cap_b, g_fixed, fits, lambda x: (g_fixed, x + 1))
        return Solution(g_fixed, b, True, bind, "tiles",
                        f"--tiles {g_fixed} is fixed; the largest tile that fits is b = {b}; limited by {bind}", count)

    if b_fixed is not None:
        hi = None if cap_n is None else cap_n // b_fixed
        if (hi is not None and hi < 1) or not fits(1, b_fixed):
            return Solution(1, b_fixed, False, "memory", "memory", f"one tile of {b_fixed} sequences does not fit", count)
        g = _largest_true(lambda x: fits(x, b_fixed), 1, hi)
        bind = _cap_reason(g, hi, cap_n, None, b_fixed, fits, lambda x: (x + 1, b_fixed))
        return Solution(g, b_fixed, True, bind, "tile_batch",
                        f"--tile-batch {b_fixed} is fixed; the most tiles that fit is G = {g}; limited by {bind}", count)

    # Free: maximise n = G*b (tiles of one sequence use the least memory for a given n) ...
    if not fits(1, 1):
        return Solution(1, 1, False, "memory", "memory", "not even one sequence fits", count)
    n = _largest_true(lambda x: fits(x, 1), 1, cap_n)
    bind = "max_global_batch" if cap_n is not None and n == cap_n and fits(cap_n + 1, 1) else "memory"
    # ... then the largest tile b dividing n.
    opts = [b for b in divisors(n) if cap_b is None or b <= cap_b]
    idx = _largest_true(lambda i: fits(n // opts[i], opts[i]), 0, len(opts) - 1)
    b = opts[idx]
    tile_c = _tile_reason(idx, opts, n, cap_b)
    what = "usable memory" if bind == "memory" else f"--max-global-batch {cap_n}"
    return Solution(n // b, b, True, bind, tile_c,
                    f"G*b = {n} is the largest global batch within {what}; b = {b} is the largest tile "
                    f"dividing it that fits (limited by {tile_c})", count)


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
