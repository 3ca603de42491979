"""Time of one GEMM C (m x n) = A (m x k) @ B (k x n) on a GPU, from its shape.

The output is cut into tiles of tm x tn elements; each thread block (CTA) computes one tile, and the
tiles run in waves of one per SM (NVIDIA, Matrix Multiplication Background User's Guide, §2.1 "GPU
implementation", §3.1 "Tile quantization", §3.2 "Wave quantization",
https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html).
Two quantisation losses follow from the shape alone:

    tiles       = ceil(m/tm) · ceil(n/tn)
    tile share  = m·n / (tiles · tm · tn)                       (partial edge tiles compute padding)
    wave share  = (tiles / SMs) / ceil(tiles / SMs)              (the last wave leaves SMs idle)

Each wave also pays a fixed time `o` that does not shrink with k (filling the operand pipeline before
the first MMA, writing the tile out after the last): per candidate tile,

    compute = 2·m·n·k / (peak · tile share · wave share) + ceil(tiles / SMs) · o

A library chooses its tile among a few configurations (cuBLAS's heuristics, CUTLASS's tile shapes):
the fastest of the device's candidate tiles is taken. `peak` is the achieved dense peak of the dtype:
the datasheet peak x the generation's measured large-GEMM ceiling (a profile's
`kernels.gemm_ceiling_fraction`) x the family's calibrated `compute_efficiency`.

The per-wave time is derived from DeepGEMM's table of dense FP8 GEMMs on H800 (132 SMs; README
@55ab91f7, "Normal GEMMs for dense models", m = 4096): at n x k = 32768 x 512, 24576 x 1536, 7168 x
2048, 4096 x 7168, 7168 x 16384 the achieved rates 751, 1125, 1168, 1265, 1426 TFLOP/s fall with k
as the fixed cost per wave predicts. The grouped tables of the same README give the rate as a function
of rows (tokens) per expert: the contiguous layout (4 and 8 experts of 8,192 and 4,096 rows) runs at the
dense rate, the masked layout (1, 2, 4 experts of 1,024, 512, 256 rows) falls to 932 and 815 TFLOP/s
at 256 rows, where the weights' HBM traffic nears the math time. Least squares on log error over the
16 rows (dense m = 4096, contiguous, masked; grid search) gives a ceiling of 0.73 of 1,979 TFLOP/s,
o = 1.5 µs and p = 1.6, every row within 9% (with p → ∞, i.e. max(), the 256-row rows come out 25-41%
too fast) (tests/test_clock.py::test_deepgemm_dense_and_grouped_rates). A grouped expert GEMM's
efficiency as a function of its tokens per expert therefore follows from its shape: no separate
grouped-kernel factor.

A GEMM also moves its operands and result through HBM at least once (the guide's §2 "Math and memory
bounds"; arithmetic intensity 2mnk / ((mk + kn + mn)·bytes)):

    memory floor = ((m·k + k·n) · bytes + m·n · output bytes) / HBM bandwidth

The output bytes are the operands' unless the caller says otherwise (`output_bytes`): a microbenchmark writes its
result in the operand dtype (the ceilings are derived so), while a training GEMM writes a 16-bit result from FP8 or
FP4 operands and its weight-gradient GEMM accumulates into the main gradient (read and write: model/gpu/costs.py
`gemm_output_bytes`).

which binds at small m (a few tokens per expert, the guide's Table 1 "linear layer with batch 1").
Where both are near binding the kernel does not hide one under the other completely; the GEMM takes
the smooth roofline

    t = (compute^p + memory^p)^(1/p)        (p → ∞: the larger of the two; p = 1: their sum)

with p a profile's `kernels.gemm_overlap_exponent`. Its efficiency is the ideal time 2mnk/peak over t.

A grouped kernel (`groups` > 1: MoE experts in one launch, TransformerEngine / CUTLASS grouped GEMM,
DeepGEMM's contiguous layout) schedules the tiles of all groups over the SMs together: the wave share
is taken over groups x tiles, the tile share per group, the memory floor over every group's operands.

Every argument may be a numpy array (arrays of layouts or shapes); the peak is an input, so another
dtype's peak (FP8, FP4) drops in without changing the shape model.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ...memo import remembered

BINDINGS = ("compute", "waves", "memory")  # what limits a GEMM; `waves`: tile and wave quantisation cost > 5%
QUANTISATION_NOTABLE = 0.95  # below this tile x wave share a GEMM is reported as bound by `waves`


@dataclass(frozen=True)
class GemmDevice:
    """What the shape model needs of a device: the dtype's achieved peak, HBM bandwidth, SMs, tiles."""

    peak_flops_per_s: float  # achieved dense peak of the GEMM's dtype (datasheet x ceiling x compute_efficiency)
    hbm_bytes_per_s: float
    sms: int
    tiles: tuple[tuple[int, int], ...]  # candidate output tiles (tm, tn) the library chooses among
    wave_overhead_s: float = 0.0  # fixed time per wave of tiles (pipeline fill and epilogue)
    overlap_exponent: float = float("inf")  # p of the smooth roofline; inf: max(compute, memory)

    def __hash__(self) -> int:
        """The hash the frozen dataclass would generate (of its fields' tuple), computed once: `_one_gemm`'s
        cache hashes its device on every call, 15 times per evaluation, and the tiles' nested tuple made that
        the costliest part of a cache hit (round "speed7"). Equality stays the dataclass's (the fields)."""
        try:
            return self.__dict__["_hash"]
        except KeyError:
            value = self.__dict__["_hash"] = hash((self.peak_flops_per_s, self.hbm_bytes_per_s, self.sms, self.tiles,
                                                   self.wave_overhead_s, self.overlap_exponent))
            return value


@dataclass(frozen=True)
class GemmTime:
    """One GEMM (or grouped GEMM): time, efficiency against `peak_flops_per_s` and what binds it."""

    time_s: Any
    efficiency: Any  # ideal time 2mnk·groups/peak over time_s (1 = a perfectly quantised, compute-bound GEMM)
    quantisation: Any  # compute-side share of the chosen tile: tile share x wave share, after the per-wave time
    memory_bound: Any  # True where the memory floor exceeds the quantised compute time

    def binding(self) -> Any:
        """'memory', 'waves' or 'compute' (scalars: a str; arrays: an array of str)."""
        if isinstance(self.memory_bound, bool):  # one shape: the same rule without numpy's string arrays
            return "memory" if self.memory_bound else "waves" if self.quantisation < QUANTISATION_NOTABLE else "compute"
        out = np.where(self.memory_bound, "memory", np.where(self.quantisation < QUANTISATION_NOTABLE, "waves",
                                                             "compute"))
        return str(out) if np.ndim(out) == 0 else out


def quantisation(m: Any, n: Any, sms: int, tile: tuple[Any, Any], groups: Any = 1) -> Any:
    """Tile share x wave share of an m x n output cut into `tile`s, `groups` GEMMs in one launch."""
    tm, tn = tile
    per_group = np.ceil(np.asarray(m, dtype=float) / tm) * np.ceil(np.asarray(n, dtype=float) / tn)
    tile_share = np.asarray(m, dtype=float) * n / (per_group * tm * tn)
    waves = per_group * groups / sms
    wave_share = waves / np.ceil(waves)
    return tile_share * wave_share


def _compute_time(m: Any, n: Any, k: Any, device: GemmDevice, tile: tuple[Any, Any], groups: Any) -> Any:
    """Quantised compute time with `tile`: ideal / (tile share x wave share) + ceil(waves) x overhead."""
    tm, tn = tile
    waves = np.ceil(np.ceil(m / tm) * np.ceil(n / tn) * groups / device.sms)
    ideal = 2 * m * n * k * groups / device.peak_flops_per_s
    return ideal / quantisation(m, n, device.sms, tile, groups) + waves * device.wave_overhead_s


def _roofline(compute: Any, memory: Any, p: float) -> Any:
    """(compute^p + memory^p)^(1/p), scaled by the larger term so that no power overflows; max() at p = inf.
    The powers always run through numpy's ufunc loop on a 1-d array, one shape included: a float64 scalar's ** is
    the C library's pow, and where numpy's power loop is vectorised (AVX-512 builds use SVML, not correctly
    rounded) the two differ in the last bit for some values; one shape must give the bits an array of shapes
    gives (tests/test_speed5.py)."""
    top = np.maximum(compute, memory)
    if np.isinf(p):
        return top
    shares = np.power(np.atleast_1d(compute / top), p) + np.power(np.atleast_1d(memory / top), p)
    out = top * np.power(shares, 1 / p)
    return out[0] if np.ndim(top) == 0 else out


def gemm_time(m: Any, n: Any, k: Any, bytes_per_element: Any, device: GemmDevice, groups: Any = 1,
              output_bytes: Any = None) -> GemmTime:
    """Time of `groups` GEMMs (m x k) @ (k x n) run as one launch (see the module docstring). No group (a
    device holding no expert) takes no time; the arithmetic never warns (shares of an empty launch are 1).
    `output_bytes`: HBM bytes per element of the m x n result (None: the operands' `bytes_per_element`).
    One shape (all scalars) is answered from a cache keyed on the shape and the device (`_one_gemm`): a
    plan, a search and a sweep ask for the same few shapes many times."""
    out = bytes_per_element if output_bytes is None else output_bytes
    for x in (m, n, k, bytes_per_element, groups, out):  # a plain loop: one evaluation runs this per GEMM and pass
        if not (isinstance(x, (int, float)) or (isinstance(x, np.generic) and x.ndim == 0)):
            return _gemm_times(m, n, k, bytes_per_element, device, groups, out)
    return _one_gemm(float(m), float(n), float(k), float(bytes_per_element), device, float(groups), float(out))


def gemm_passes(m: Any, n: Any, k: Any, bytes_per_element: Any, device: GemmDevice,
                groups: Any = 1, output_bytes: Optional[tuple[float, float, float]] = None
                ) -> tuple[GemmTime, GemmTime, GemmTime]:
    """The forward (m x k) @ (k x n), data-gradient (m x n) @ (n x k) and weight-gradient (k x m) @ (m x n)
    GEMMs of one layer GEMM: `gemm_time` at (m, n, k), (m, k, n) and (k, n, m), their results written at
    `output_bytes` (forward, data-gradient, weight-gradient; None: the operands' bytes). Arrays of shapes take one
    pass over the three stacked along a leading axis (every step of `_gemm_time` is elementwise over the
    shapes, the tile minimum along its own axis, so each element gets the same bits as alone); one shape
    asks the cache three times."""
    of, od, ow = (bytes_per_element,) * 3 if output_bytes is None else output_bytes
    one = True  # every argument a Python or numpy scalar: `gemm_time`'s cache, the floats converted once
    for x in (m, n, k, bytes_per_element, groups):  # a plain loop: one evaluation runs this per GEMM
        if isinstance(x, np.ndarray) and x.ndim:
            break
        one = one and (isinstance(x, (int, float)) or (isinstance(x, np.generic) and x.ndim == 0))
    else:
        if one:
            fm, fn, fk, fb, fg = float(m), float(n), float(k), float(bytes_per_element), float(groups)
            return (_one_gemm(fm, fn, fk, fb, device, fg, float(of)), _one_gemm(fm, fk, fn, fb, device, fg, float(od)),
                    _one_gemm(fk, fn, fm, fb, device, fg, float(ow)))
        return (gemm_time(m, n, k, bytes_per_element, device, groups, of),
                gemm_time(m, k, n, bytes_per_element, device, groups, od),
                gemm_time(k, n, m, bytes_per_element, device, groups, ow))
    shape = (3,) + np.broadcast(m, n, k, groups).shape

    def stacked(first: Any, second: Any, third: Any) -> np.ndarray:  # float64, as _gemm_time reads each
        out = np.empty(shape)
        out[0], out[1], out[2] = first, second, third
        return out

    both = _gemm_times(stacked(m, m, k), stacked(n, k, n), stacked(k, n, m), bytes_per_element, device,
                       stacked(groups, groups, groups), stacked(of, od, ow))
    return tuple(GemmTime(both.time_s[i], both.efficiency[i], both.quantisation[i], both.memory_bound[i])
                 for i in range(3))  # type: ignore[return-value]


def gemm_passes_of_many(shapes: list[tuple[Any, Any, Any, Any]], bytes_per_element: Any, device: GemmDevice,
                        output_bytes: Optional[tuple[float, float, float]] = None
                        ) -> list[tuple[GemmTime, GemmTime, GemmTime]]:
    """`gemm_passes` of each (m, n, k, groups) in `shapes` on one device and operand size. The shapes that
    `gemm_passes` takes over arrays (an operand an array of at least one dimension) and that broadcast to
    one shape are timed in one `_gemm_times` call, their three passes each stacked along the leading axis
    (every step is elementwise over that axis, as in `gemm_passes`: each element gets its own bits); the
    others are asked one by one. A part's GEMMs over a search's candidate shapes: one call for several.
    `output_bytes` as in `gemm_passes`."""
    if isinstance(bytes_per_element, np.ndarray):
        return [gemm_passes(m, n, k, bytes_per_element, device, groups, output_bytes) for m, n, k, groups in shapes]
    out: list[Any] = [None] * len(shapes)
    batch: list[int] = []
    shape: tuple[int, ...] = ()
    for i, (m, n, k, groups) in enumerate(shapes):
        if _has_axes(m, n, k, bytes_per_element, groups):
            one = np.broadcast(m, n, k, groups).shape
            if not batch or one == shape:
                shape = one
                batch.append(i)
                continue
        out[i] = gemm_passes(m, n, k, bytes_per_element, device, groups, output_bytes)
    if len(batch) < 2:
        for i in batch:
            out[i] = gemm_passes(*shapes[i][:3], bytes_per_element, device, shapes[i][3], output_bytes)
        return out
    of, od, ow = (bytes_per_element,) * 3 if output_bytes is None else output_bytes
    stack = np.empty((5, 3 * len(batch)) + shape)  # m, n, k, groups, result bytes of each pass of each GEMM: float64
    for j, i in enumerate(batch):
        m, n, k, groups = shapes[i]
        for axis, passes in enumerate(((m, m, k), (n, k, n), (k, n, m), (groups, groups, groups), (of, od, ow))):
            stack[axis, 3 * j], stack[axis, 3 * j + 1], stack[axis, 3 * j + 2] = passes
    both = _gemm_times(stack[0], stack[1], stack[2], bytes_per_element, device, stack[3], stack[4])
    for j, i in enumerate(batch):
        out[i] = tuple(GemmTime(both.time_s[p], both.efficiency[p], both.quantisation[p], both.memory_bound[p])
                       for p in range(3 * j, 3 * j + 3))
    return out


def _has_axes(*values: Any) -> bool:
    for x in values:
        if isinstance(x, np.ndarray) and x.ndim:
            return True
    return False


@remembered
@functools.lru_cache(maxsize=8192)
def _one_gemm(m: float, n: float, k: float, bytes_per_element: float, device: GemmDevice, groups: float,
              output_bytes: float) -> GemmTime:
    """One shape's `_gemm_times` (the same arithmetic on float64 scalars, so the same bits), cached."""
    return _gemm_times(m, n, k, bytes_per_element, device, groups, output_bytes)


def _gemm_times(m: Any, n: Any, k: Any, bytes_per_element: Any, device: GemmDevice, groups: Any,
                output_bytes: Any) -> GemmTime:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = _gemm_time(m, n, k, bytes_per_element, device, np.asarray(groups, dtype=float), output_bytes)
    def clean(v: Any, empty: float) -> Any:  # an empty launch: 0/0 (all finite, the usual case: as it is)
        if not np.ndim(v):
            return empty if v != v else v
        # (`ndarray.all` is this reduction behind a Python wrapper)
        return v if np.logical_and.reduce(np.isfinite(v), axis=None) else np.nan_to_num(v, nan=empty)

    return GemmTime(clean(out.time_s, 0.0), clean(out.efficiency, 1.0), clean(out.quantisation, 1.0),
                    out.memory_bound)


def _gemm_time(m: Any, n: Any, k: Any, bytes_per_element: Any, device: GemmDevice, groups: Any,
               output_bytes: Any) -> GemmTime:
    m, n, k = (np.maximum(np.asarray(x, dtype=float), 1.0) for x in (m, n, k))
    shape = np.broadcast(m, n, k, groups).shape
    # every candidate tile at once along a leading axis (the same arithmetic per tile), the fastest taken
    tiles = np.asarray(device.tiles, dtype=float).reshape((len(device.tiles), 2) + (1,) * len(shape))
    per_tile = _compute_time(m, n, k, device, (tiles[:, 0], tiles[:, 1]), groups)
    # (np.min's own reduction, without its Python wrapper: numpy/_core/fromnumeric.py `_wrapreduction`)
    every = (len(device.tiles),) + shape  # (a no-op when an operand already spans the shapes)
    compute = np.minimum.reduce(per_tile if per_tile.shape == every else np.broadcast_to(per_tile, every), axis=0)
    ideal = 2 * m * n * k * groups / device.peak_flops_per_s
    q = ideal / compute
    memory = ((m * k + k * n) * bytes_per_element + m * n * output_bytes) * groups / device.hbm_bytes_per_s
    time = _roofline(compute, memory, device.overlap_exponent)
    scalar = all(np.ndim(x) == 0 for x in (time, q))
    as_out = (lambda x: float(x)) if scalar else (lambda x: x)  # noqa: E731
    return GemmTime(as_out(time), as_out(ideal / time), as_out(q),
                    bool(memory > compute) if scalar else memory > compute)
