"""A part's memory from its phases' rows summed once per layout (`memory_of_shapes`): the solver probes many batch
shapes of one layout, and where every term is an integer below 2^53 the summed rows give the same bytes as the
phase-by-phase sums of `costs.py` (float64 sums of such integers are exact in any order), at one product per
array of shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ...catalogue.compiled import CONSTANT_TERM, SHAPE_TERMS, PhaseValues, affine
from ...catalogue.terms import Phase
from .part import Part, new_part
from .rates import Rates

_FLOAT64 = np.dtype(np.float64)
_EXACT = float(2 ** 53)  # below this every integer is a float64: sums of integers are exact in any order
_MISSING = object()


@dataclass(frozen=True)
class _MemoryRows:
    """A part's memory rows summed once per layout (`memory_of_shapes`): (mask, c0, c_b, c_G, c_Gb) of the
    stored and recomputed bytes, the working-set rows stacked (4, rows) for their maximum, the parameters."""

    routed: bool  # a phase works on the routed tokens (its load is R)
    stored: tuple[int, tuple[int, ...]]
    recompute: tuple[int, tuple[int, ...]]
    transient: np.ndarray
    transient_rows: tuple[tuple[int, ...], ...]  # the same rows as ints (one shape of ints)
    # the one working-set row every other is at or below at every shape (each coefficient at least theirs), as
    # floats; None where no row dominates all (`memory_of_shapes` then takes the maximum over the stacked rows)
    top: Optional[tuple[float, float, float, float]]
    params: tuple[int, int, int, int]  # dense, routed (all E), low-precision dense, low-precision routed
    bound: tuple[int, int, int, int]  # every row above summed: (c0, c_b, c_G, c_Gb) of a bound on any term or sum

    def exact(self, bounds: tuple[int, int, int]) -> bool:
        """Every value and partial sum below 2^53 at shapes up to `bounds` (G, b, G*b): the coefficients
        are non-negative, so the sum of all rows at the largest shapes bounds them all."""
        c0, c_b, c_g, c_n = self.bound
        g, b, n = bounds
        return c0 + c_b * b + c_g * g + c_n * n < _EXACT


def _memory_rows(pv: PhaseValues, phases: list[Phase]) -> Optional[_MemoryRows]:
    """The memory rows of `phases` summed, or None where summing first could differ from `_memory`'s running
    sums: a coefficient that is not a non-negative int below 2^53, parameters that depend on the shape, a
    working set that does not (its running maximum would be a scalar), no phase."""
    coefs, rows = pv.coefficients, pv.compiled.row
    masks = {"stored": 0, "recompute_bytes": 0}
    sums: dict[str, list[int]] = {"stored": [0, 0, 0, 0], "recompute_bytes": [0, 0, 0, 0]}
    transient: list[tuple[int, ...]] = []
    params = [0, 0, 0, 0]
    quantised = quantised_kind(pv)
    for phase in phases:
        for q in ("stored", "recompute_bytes", "transient", "params"):
            mask, c = coefs.row(rows[(phase.name, q)])
            if any(type(x) is not int or x < 0 or x >= _EXACT for x in c):
                return None
            if q == "params":
                if mask & SHAPE_TERMS:
                    return None
                routed = phase.param_bucket == "routed"
                params[1 if routed else 0] += c[0] if mask & CONSTANT_TERM else 0
                if phase.low_precision and quantised:
                    params[3 if routed else 2] += c[0] if mask & CONSTANT_TERM else 0
            elif q == "transient":
                transient.append(tuple(c))
            else:
                masks[q] |= mask
                sums[q] = [a + x for a, x in zip(sums[q], c)]
    if not phases or not any(c[1] or c[2] or c[3] for c in transient):
        return None
    every = [sum(c[i] for c in [*transient, *sums.values()]) for i in range(4)]
    return _MemoryRows(routed=any(p.routed_load for p in phases),
                       stored=(masks["stored"], tuple(sums["stored"])),
                       recompute=(masks["recompute_bytes"], tuple(sums["recompute_bytes"])),
                       transient=np.array(transient, dtype=float).T,  # (4, rows)
                       transient_rows=tuple(transient),
                       top=_dominant(transient),
                       params=(params[0], params[1], params[2], params[3]),
                       bound=(every[0], every[1], every[2], every[3]))


def _undominated(rows: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The rows (c0, c_b, c_G, c_Gb) no other row is at or above in every coefficient (the first of equal rows
    kept): at non-negative shapes their maximum is the maximum of all."""
    return [a for i, a in enumerate(rows)
            if not any(j != i and all(x >= y for x, y in zip(b, a)) and (b != a or j < i) for j, b in enumerate(rows))]


def _row_product(summed: _MemoryRows) -> tuple[np.ndarray, np.ndarray]:
    """(c_b, c_G, c_Gb) as a (rows, 3) float matrix and c0 as a (rows, 1) column of the stored row, the re-computed
    row and the working-set rows no other is at or above (`_undominated`): one product with the shapes gives
    them all (`memory_of_shapes`; made on the first array of shapes, kept with the coefficients)."""
    rows = [summed.stored[1], summed.recompute[1], *_undominated(list(summed.transient_rows))]
    coefficients = np.array(rows, dtype=float)
    return np.ascontiguousarray(coefficients[:, 1:]), coefficients[:, :1].copy()


def _dominant(rows: list[tuple[int, ...]]) -> Optional[tuple[float, float, float, float]]:
    """The row (c0, c_b, c_G, c_Gb) at or above every other row in every coefficient, as floats, or None: the one
    row `_undominated` keeps, when it keeps one (in a finite set a sole undominated row is above all the others).
    At non-negative shapes (which `memory_of_shapes` requires) it is then the largest row at every shape; with
    every term an integer below 2^53 each row is exact in float64, so it equals their maximum bit for bit."""
    top = _undominated(rows)
    if len(top) != 1:
        return None
    c0, c_b, c_g, c_n = top[0]
    return float(c0), float(c_b), float(c_g), float(c_n)


def memory_of_shapes(pv: PhaseValues, phases: list[Phase], r: Rates, key: Any = None) -> Optional[Part]:
    """The memory-only `Part` of arrays of batch shapes of one layout (the solver's probes), from the phases'
    rows summed once per layout instead of phase by phase: the same values wherever every term is an
    integer below 2^53 (then float64 sums are exact in any order), which is checked (`PhaseValues.
    integer_bounds`, `_MemoryRows.exact`); else None (the phase by phase sums of `_part`). `key`: the phases'
    (`_part_phases`), else made from their names."""
    tiles, tile_batch, n = pv.tiles, pv.tile_batch, pv.n
    one = type(tiles) is int and type(tile_batch) is int and tiles >= 0 and tile_batch >= 0
    if not (one or isinstance(n, np.ndarray)) or not pv.coefficients.scalar:
        return None
    key = key if key is not None else ("memory rows", tuple([p.name for p in phases]))
    summed = pv.coefficients.derived.get(key, _MISSING)
    if summed is _MISSING:
        summed = pv.coefficients.derived[key] = _memory_rows(pv, phases)
    if summed is None or (summed.routed and not (type(r.imbalance) is float and r.imbalance == 1.0)):
        return None
    bounds = (tiles, tile_batch, n) if one else pv.integer_bounds
    if bounds is None or not summed.exact(bounds):
        return None
    if one:
        return _memory_of_one_shape(summed, tiles, tile_batch, n)
    return _memory_of_arrays(pv, summed, key)


def _memory_of_arrays(pv: PhaseValues, summed: _MemoryRows, key: Any) -> Part:
    """`memory_of_shapes` over arrays of shapes: every row at once as one matrix product where the shapes are
    one-dimensional float64 arrays, else each sum's affine row and the working set's maximum row."""
    tiles, tile_batch, n = pv.tiles, pv.tile_batch, pv.n
    dense, routed, low_dense, low_routed = summed.params
    product = None
    if type(tiles) is np.ndarray and type(tile_batch) is np.ndarray and tiles.dtype == tile_batch.dtype == n.dtype \
            == _FLOAT64 and tiles.ndim == 1 and tiles.shape == tile_batch.shape == n.shape:
        product = pv.coefficients.derived.get(("row product", key), _MISSING)
        if product is _MISSING:
            product = pv.coefficients.derived[("row product", key)] = _row_product(summed)
    if product is not None:
        # every row at once: each value an integer below 2^53 (checked above), so the product's sums are exact in
        # whatever order BLAS adds them, and every term is +0.0 or more (round "speed7")
        matrix, constant = product
        y = matrix @ np.array((tile_batch, tiles, n))
        y += constant
        (m_stored, c_stored), (m_re, c_re) = summed.stored, summed.recompute
        return new_part(stored=y[0] if m_stored & SHAPE_TERMS else _fixed_value(m_stored, c_stored),
                        recompute=y[1] if m_re & SHAPE_TERMS else _fixed_value(m_re, c_re),
                        transient=y[2] if len(y) == 3 else np.maximum.reduce(y[2:], axis=0), dense_params=dense,
                        routed_params=routed, low_precision_params=low_dense, low_precision_routed=low_routed)
    # each phase's bytes times its load 1.0: arrays, or a float where no phase's bytes depend on the shape
    stored, recompute = [affine(m, c, tiles, tile_batch, n) if m & SHAPE_TERMS else _fixed_value(m, c)
                         for m, c in (summed.stored, summed.recompute)]
    if summed.top is not None:  # one row at or above all the others: it is their maximum (round "speed7")
        c0, c_b, c_g, c_n = summed.top
        transient = c0 + c_b * tile_batch + c_g * tiles + c_n * n
    else:
        t = summed.transient.reshape(summed.transient.shape + (1,) * n.ndim)
        # np.max is this ufunc's reduce behind a Python wrapper (numpy/_core/fromnumeric.py `_wrapreduction`)
        transient = np.maximum.reduce(t[0] + t[1] * tile_batch + t[2] * tiles + t[3] * n, axis=0)
    # (no np.maximum(0, ...): every coefficient and shape is non-negative, so every row is +0.0 or more already)
    return new_part(stored=stored, recompute=recompute, transient=transient, dense_params=dense,
                routed_params=routed, low_precision_params=low_dense, low_precision_routed=low_routed)


def _fixed_value(mask: int, c: tuple[Any, ...]) -> float:
    """A row with no shape term (`SHAPE_TERMS`) as the float it is at every shape: its constant, or 0."""
    return float(c[0] if mask & CONSTANT_TERM else 0)


def _memory_of_one_shape(summed: _MemoryRows, tiles: int, tile_batch: int, n: int) -> Part:
    """`memory_of_shapes` at one shape of ints, with `_memory`'s types: each phase's bytes times its load
    1.0 summed (a float), the working set's running maximum from the int 0 (a float once a phase's is
    positive, else that int 0)."""
    # ints throughout (`_memory_rows`): exact in any order
    (_, st), (_, rc) = summed.stored, summed.recompute
    stored = float(st[0] + st[1] * tile_batch + st[2] * tiles + st[3] * n)
    recompute = float(rc[0] + rc[1] * tile_batch + rc[2] * tiles + rc[3] * n)
    top = max([c0 + c_b * tile_batch + c_g * tiles + c_n * n for c0, c_b, c_g, c_n in summed.transient_rows])
    dense, routed, low_dense, low_routed = summed.params
    return new_part(stored=stored, recompute=recompute, transient=float(top) if top > 0 else 0, dense_params=dense,
                routed_params=routed, low_precision_params=low_dense, low_precision_routed=low_routed)


def quantised_kind(pv: PhaseValues) -> bool:
    """Whether the layer kind of `pv` runs its `low_precision` phases in the recipe: not one of the first/last
    layers kept in BF16 (feature `bf16_layer`: ModelSpec.bf16_layer_positions), which Megatron-Core builds and
    runs outside the recipe's autocast, so TransformerEngine neither quantises nor caches their weights
    (config/resolution.py BF16_LAYERS_SOURCE)."""
    return not pv.compiled.selection.feature_dict["bf16_layer"]
