"""Megatron-LM's pipeline schedule as a dependency simulation: the makespan of one step's forward and
backward chunk passes when stages and virtual chunks take different times.

Megatron-LM @ d98e8a64, megatron/core/pipeline_parallel/schedules.py:
- the order of a rank's passes: `w` warm-up forwards, then (forward, backward) pairs while forwards remain
  (the steady 1F1B phase), then the remaining backwards (cool-down); forward_backward_pipelining_with_
  interleaving L1573-1735, forward_backward_pipelining_without_interleaving L2277-2334;
- warm-up counts (get_pp_rank_microbatches L950-977): without interleaving PP - j - 1; interleaved
  2(PP - j - 1) + (VP - 1)·N, one more with overlap_moe_expert_parallel_comm; at most M·VP;
- which chunk and micro-batch the k-th forward runs (get_schedule_table L989-1016, get_model_chunk_id
  L1244-1249): micro-batches in groups of N (--microbatch-group-size-per-virtual-pipeline-stage, default PP,
  model_parallel_config.py L567-568), chunk 0 of the group, then chunk 1, ...; the last group takes every
  micro-batch left. The k-th backward runs the same table entry with the chunk reversed (VP - 1 - chunk).
Dependencies: the forward of (stage j, chunk v, micro-batch i) waits for (j - 1, v, i), on stage 0 for
(PP - 1, v - 1, i) (model chunk v·PP + j follows chunk v·PP + j - 1); a backward for (j + 1, v, i), on the last
stage for (0, v + 1, i), and the last model chunk's backward for its own forward. A pass starts when its
rank's previous pass and the pass it waits on have ended; the makespan is the end of the last pass (stage 0's
last backward). Point-to-point transfer time is not a separate edge: the step model charges each stage's
exposed sends in its per-micro-batch time (timing.py `pp_p2p`), so it sits inside the pass times here.

Uniform passes give Narayanan et al. 2021 §2.2: M·t + (PP - 1)·t/VP (t a stage's forward + backward of one
micro-batch over all its chunks).

The passes are evaluated level by level (all passes whose longest chain of predecessors has the same
length at once), vectorised over the trailing axes of the pass times (layouts or batch shapes); the
schedule's structure (per pass: its rank predecessor, the pass it waits on, its level) is kept per
(PP, VP, M, N, extra warm-up)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..arrays import minimum, where
from ...config.pipeline import group_rule  # noqa: F401  (Megatron's rule on the group size, beside its schedule)



def warmup_forwards(pp: Any, vp: Any, m: Any, group: Any, rank: int, extra: Any = False) -> Any:
    """Megatron's warm-up forward passes on pipeline rank `rank` (get_pp_rank_microbatches L950-977); ints, or
    arrays over layouts (timing.unpaired_exchange_s)."""
    interleaved = minimum(2 * (pp - rank - 1) + (vp - 1) * group + where(extra, 1, 0), m * vp)
    return where(pp == 1, 0, where(vp == 1, minimum(pp - rank - 1, m), interleaved))


def schedule_table(m: int, vp: int, group: int, first: Optional[int] = None) -> list[tuple[int, int]]:
    """(micro-batch, model chunk) of each forward, as get_schedule_table L989-1016 builds it; its `first` entries
    only, when given (hostile42: a stage's in-flight passes, a few: the whole table of M = 2^62 - 1 micro-batches was
    built to count them, and `plan --pp 16 --global-batch 4611686018427387903` never answered)."""
    table: list[tuple[int, int]] = []
    for low in range(0, m, group):
        if first is not None and len(table) >= first:
            return table[:first]
        high = m if low + group >= m else low + group
        table.extend((i, v) for v in range(vp) for i in range(low, high))
    return table if first is None else table[:first]


@dataclass(frozen=True)
class _Structure:
    """One schedule's passes, numbered F(j, v, i) = (j·VP + v)·M + i and B = n + that (n = PP·VP·M): per pass
    its rank predecessor and the pass it waits on (the sentinel 2n: none), grouped into levels."""

    n: int
    prev: np.ndarray
    dep: np.ndarray
    levels: tuple[np.ndarray, ...]

    @functools.cached_property
    def ordered(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int]]]:
        """The passes renumbered level by level (each level a slice): the order, each pass's two predecessors
        in the new numbering (2n: none) and the levels' bounds."""
        order = np.concatenate(self.levels)
        rank = np.empty(2 * self.n + 1, dtype=np.int64)
        rank[order] = np.arange(2 * self.n)
        rank[2 * self.n] = 2 * self.n
        bounds = np.cumsum([0] + [len(level) for level in self.levels])
        return order, rank[self.prev[order]], rank[self.dep[order]], list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


@functools.lru_cache(maxsize=128)
def _structure(pp: int, vp: int, m: int, group: int, extra: bool) -> _Structure:
    n = pp * vp * m
    none = 2 * n
    ids = np.arange(n).reshape(pp, vp, m)  # F(j, v, i)
    dep = np.full(2 * n + 1, none, dtype=np.int64)
    fdep = np.full((pp, vp, m), none, dtype=np.int64)
    fdep[1:] = ids[:-1]
    fdep[0, 1:] = ids[pp - 1, :-1]
    bdep = np.full((pp, vp, m), none, dtype=np.int64)
    bdep[:-1] = n + ids[1:]
    bdep[pp - 1, :-1] = n + ids[0, 1:]
    bdep[pp - 1, vp - 1] = ids[pp - 1, vp - 1]
    dep[:n], dep[n:2 * n] = fdep.ravel(), bdep.ravel()
    table = np.asarray(schedule_table(m, vp, group), dtype=np.int64).reshape(-1, 2)
    total = m * vp
    k = np.arange(total)
    prev = np.full(2 * n + 1, none, dtype=np.int64)
    for j in range(pp):
        w = warmup_forwards(pp, vp, m, group, j, extra)
        # positions in rank j's order: forward k, backward k (the warm-up forwards, then pairs, then the rest)
        at_f = np.where(k < w, k, w + 2 * (k - w))
        at_b = np.where(k < total - w, w + 2 * k + 1, total + k)
        order = np.empty(2 * total, dtype=np.int64)
        order[at_f] = ids[j, table[:, 1], table[:, 0]]
        order[at_b] = n + ids[j, vp - 1 - table[:, 1], table[:, 0]]
        prev[order[1:]] = order[:-1]
    return _Structure(n, prev[:-1], dep[:-1], _levels(prev[:-1], dep[:-1], none))


def _levels(prev: np.ndarray, dep: np.ndarray, none: int) -> tuple[np.ndarray, ...]:
    """The passes by level (the longest chain of predecessors before them), by Kahn's rounds: a round is
    every pass whose predecessors all ended in earlier rounds."""
    count = len(prev)
    waits = (prev != none).astype(np.int64) + (dep != none)
    # each pass's successors: its rank successor and the passes waiting on it (at most two)
    succ = np.full((count + 1, 2), count, dtype=np.int64)
    has = prev != none
    succ[prev[has], 0] = np.flatnonzero(has)
    has = dep != none
    targets, sources = np.flatnonzero(has), dep[has]
    slot = np.where(succ[sources, 0] == targets, -1, 1)  # a rank successor that also waits on it: one edge
    waits[targets[slot < 0]] -= 1
    succ[sources[slot > 0], 1] = targets[slot > 0]
    waits = np.append(waits, 1 << 40)
    frontier = np.flatnonzero(waits[:count] == 0)
    levels = []
    done = 0
    while frontier.size:
        levels.append(frontier)
        done += frontier.size
        nxt = succ[frontier].ravel()
        np.subtract.at(waits, nxt, 1)
        frontier = np.unique(nxt[waits[nxt] == 0])
    if done != count:  # pragma: no cover - Megatron's order is deadlock-free
        raise RuntimeError("the pipeline schedule has a cycle")
    return tuple(levels)


def makespan(forward: Any, backward: Any, pp: int, vp: int, m: int, group: int = 0, extra: bool = False) -> Any:
    """The end of the last pass of Megatron's schedule of `m` micro-batches on `pp` stages of `vp` chunks.

    `forward[j][v]`, `backward[j][v]`: one micro-batch's forward / backward time of chunk v of stage j, scalars
    or arrays of one shape (the result has it). `group`: the micro-batch group size (0: PP); `extra`: the extra
    warm-up forward of overlap_moe_expert_parallel_comm (interleaved only).

    Many micro-batches (`_periodic`): a shorter schedule of the same last group is simulated, and where its
    steady middle has become periodic (every pass of a group ends c after the same pass one group before, over
    more groups than any pass reaches back) the passes of every further group end c later as well (the same
    dependencies on passes shifted by c: max and + commute with the shift), so makespan(m) = makespan(short) +
    (m - short)/N x c; elsewhere the whole schedule is simulated."""
    group = _group(pp, vp, group)
    extra = extra and vp > 1
    times, shape = _times(forward, backward, pp, vp)
    return _shaped(_periodic(times, pp, vp, m, group, extra), shape)


def _periodic(times: np.ndarray, pp: int, vp: int, m: Any, group: int, extra: bool) -> np.ndarray:
    """The makespan of each element of `times` (`_times`) at its M (`m`: an int, or one per element; the
    elements share the last group's size), by `makespan`'s periodic extrapolation where it holds."""
    count = times.shape[-1]
    ms = np.broadcast_to(np.asarray(m, dtype=np.int64), (count,))
    rest = int(ms[0] - group * ((ms[0] - 1) // group))  # the last group's micro-batches (get_schedule_table)
    w = warmup_forwards(pp, vp, 1 << 30, group, 0, extra)
    first = -(-(w + 1) // (vp * group))  # the first group whose passes are past every rank's warm-up
    cool = -(-w // (vp * group)) + 1  # groups the cool-down reaches back
    out = np.zeros(count)
    todo = np.arange(count)
    while todo.size:
        st_short = rest + (first + _LAG + 2 + cool - 1) * group
        long = ms[todo] > st_short + group
        for mb in np.unique(ms[todo[~long]]):  # short schedules: simulated whole
            idx = todo[~long][ms[todo[~long]] == mb]
            out[idx] = _simulate(times[..., idx], pp, vp, int(mb), group, extra)[0]
        todo = todo[long]
        if not todo.size:
            break
        span, ends = _simulate(times[..., todo], pp, vp, st_short, group, extra)
        n = pp * vp * st_short
        ids = np.arange(pp * vp)[:, None] * st_short + np.arange(first * group, (first + _LAG + 1) * group)[None, :]
        ids = np.concatenate([ids.ravel(), n + ids.ravel()])
        shift = ends[ids + group] - ends[ids]
        c = shift[0]
        steady = np.all(np.abs(shift - c) <= 1e-10 * span, axis=0)
        out[todo[steady]] = span[steady] + (ms[todo[steady]] - st_short) // group * c[steady]
        todo = todo[~steady]
        first *= 2  # not periodic yet: compare later groups
    return out


# groups a pass's rank predecessor may lie before or after it (Megatron's order: a backward runs beside the
# forward of a micro-batch up to the warm-up ahead; `_lag` measures it, tests/test_pipesched.py checks the bound)
_LAG = 3


def _lag(st: "_Structure", m: int, group: int) -> int:
    """The most groups between a pass and its rank predecessor (the pass it waits on has its micro-batch)."""
    mb = np.arange(2 * st.n) % m // group
    has = st.prev != 2 * st.n
    return int(np.max(np.abs(mb[has] - mb[st.prev[has]]), initial=0))


def _times(forward: Any, backward: Any, pp: int, vp: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """The pass times as one (2, PP, VP, 1, elements) array, and the elements' shape."""
    cells = [forward[j][v] for j in range(pp) for v in range(vp)] + [backward[j][v] for j in range(pp) for v in range(vp)]
    arrays = np.broadcast_arrays(*[np.asarray(c, dtype=float) for c in cells])
    shape = arrays[0].shape
    tail = int(np.prod(shape))
    return np.stack([a.reshape(tail) for a in arrays]).reshape(2, pp, vp, 1, tail), shape


def _shaped(out: np.ndarray, shape: tuple[int, ...]) -> Any:
    return out.reshape(shape) if shape else float(out[0])


def full_makespan(forward: Any, backward: Any, pp: int, vp: int, m: int, group: int = 0, extra: bool = False) -> Any:
    """`makespan` with every micro-batch simulated (no steady-state extrapolation)."""
    times, shape = _times(forward, backward, pp, vp)
    return _shaped(_simulate(times, pp, vp, m, _group(pp, vp, group), extra and vp > 1)[0], shape)


def _group(pp: int, vp: int, group: int) -> int:
    """The micro-batch group the schedule is cut into: N where the schedule is interleaved (0: PP), else PP.
    Without interleaving Megatron ignores N (its order does not depend on it) and a group of N < PP micro-batches
    would put a pass's rank predecessor PP - 1 micro-batches, more than `_LAG` groups, away (review23)."""
    return (group or pp) if vp > 1 else pp


def _simulate(times: np.ndarray, pp: int, vp: int, m: int, group: int, extra: bool) -> tuple[np.ndarray, np.ndarray]:
    """The makespan of each element of `times` (`_times`), every pass simulated level by level, and every pass's
    end (pass, element) in the passes' own numbering."""
    tail = times.shape[-1]
    st = _structure(pp, vp, m, group, extra)
    order, prev, dep, bounds = st.ordered
    duration = np.broadcast_to(times, (2, pp, vp, m, tail)).reshape(2 * st.n, tail)[order]
    end = np.zeros((2 * st.n + 1, tail))
    if tail == 1:
        duration, end = duration[:, 0], end[:, 0]
    for lo, hi in bounds:
        end[lo:hi] = np.maximum(end[prev[lo:hi]], end[dep[lo:hi]]) + duration[lo:hi]
    ends = np.empty((2 * st.n, tail))
    ends[order] = end[:-1].reshape(2 * st.n, tail)
    return ends.max(axis=0), ends


def step_makespan(forward: Any, backward: Any, pp: Any, vp: Any, m: Any, group: Any, extra: Any) -> Any:
    """`makespan` where PP, VP, M, the group size and `extra` may be arrays (one per layout or batch shape,
    broadcast with the pass times): simulated once per distinct (PP, VP, M, group, extra), vectorised over
    the elements that share it. `forward[j][v]` for j < max PP, v < max VP (a layout's stages and chunks beyond
    its own PP and VP are not read). Without arrays, `makespan` itself."""
    params = (pp, vp, m, group, extra)
    if not any(isinstance(x, np.ndarray) for x in params):
        return makespan(forward, backward, int(pp), int(vp), int(m), int(group), bool(extra))
    cells = [c for row in forward for c in row] + [c for row in backward for c in row]
    arrays = np.broadcast_arrays(*[np.asarray(x) for x in params], *[np.asarray(c, dtype=float) for c in cells])
    keys, times = np.stack([a.ravel() for a in arrays[:5]], axis=1).astype(np.int64), arrays[5:]
    shape = arrays[0].shape
    rows, cols = len(forward), len(forward[0])
    flat_f = [t.ravel() for t in times[:rows * cols]]
    flat_b = [t.ravel() for t in times[rows * cols:]]
    out = np.zeros(keys.shape[0])
    keys[:, 3] = np.where(keys[:, 1] > 1, np.where(keys[:, 3] > 0, keys[:, 3], keys[:, 0]), keys[:, 0])  # `_group`
    ms = keys[:, 2].copy()
    keys[:, 2] = ms - keys[:, 3] * ((ms - 1) // keys[:, 3])  # the last group's size: one short schedule for every M
    for key in np.unique(keys, axis=0):
        p, v, _, g, x = (int(k) for k in key)
        idx = np.flatnonzero((keys == key).all(axis=1))
        f = [[flat_f[j * cols + c][idx] for c in range(v)] for j in range(p)]
        b = [[flat_b[j * cols + c][idx] for c in range(v)] for j in range(p)]
        out[idx] = _periodic(_times(f, b, p, v)[0], p, v, ms[idx], g, bool(x) and v > 1)
    return out.reshape(shape)
