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
