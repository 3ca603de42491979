"""Issue 22, the Amdahl part of the low-precision miss: memory-bound phases (norms, activations, RoPE, residual
adds, softmax/cross-entropy) and the optimizer step stream their bytes at a published share of the HBM datasheet
bandwidth, `memory.achievable_bandwidth_fraction` (docs/precision.md, "Memory-bound phases at the measured
streaming bandwidth").

Sources, each typed in below as the published numbers:
- RRZE-HPC/gpu-benches @ 1038c5d0d0f48cfe9912930d34eb2d8a31b72b9b gpu-stream/{a100_40,a100_80,gh200}.txt
  (cuda-stream): the best "scale" (1 load + 1 store stream) and "triad" (3 loads + 1 store) GB/s over occupancy;
- NVIDIA/cccl PR 7391: cub::DeviceTransform "add" on F16, 2^28 elements, on a B200: 6.72 TB/s.
"""

from __future__ import annotations

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.precision import cast_rates
from support import resolved

# (scale GB/s, triad GB/s, datasheet GB/s of the benchmarked GPU)
A100_40 = (1382, 1375, 1555)
A100_80 = (1737, 1794, 2039)
GH200 = (3174, 3783, 4000)  # "NVIDIA GH200 480GB": the H100 die with 96 GB HBM3 at 4.0 TB/s
B200_ADD_BPS, B200_HBM = 6.72e12, 8e12


def _stream_share(scale: float, triad: float, datasheet: float) -> float:
    """A 2:1 load:store elementwise kernel (add, norm, activation backward) sits between scale (1:1) and triad
    (3:1): the mean of the two over the datasheet."""
    return (scale + triad) / 2 / datasheet


@pytest.mark.parametrize("profile, share, kind", [
    ("a100-40gb", _stream_share(*A100_40), "derived"),
    ("a100-80gb", _stream_share(*A100_80), "derived"),
    ("h100", _stream_share(*GH200), "estimate"),  # the same die and HBM3; no SXM run published in the file
    ("h200", _stream_share(*GH200), "estimate"),
    ("b200", B200_ADD_BPS / B200_HBM, "derived"),
    ("gb200", B200_ADD_BPS / B200_HBM, "estimate"),  # the same die and HBM3e
])
def test_the_share_is_the_published_streaming_benchmark(profile, share, kind):
    """A100-40GB (1382 + 1375)/2/1555 = 0.886; A100-80GB (1737 + 1794)/2/2039 = 0.866; Hopper
    (3174 + 3783)/2/4000 = 0.870; Blackwell 6.72/8 = 0.840. Every share is below the datasheet."""
    f = resolve_hardware(profile).memory.achievable_bandwidth_fraction
    assert f.value == pytest.approx(share, abs=5e-4)
    assert f.kind == kind
    assert f.value < 1


def test_a_norm_phase_streams_its_bytes_at_hbm_times_the_share():
    """Llama 3 8B on a B200, one 4,096-token sequence: the pre-attention RMSNorm has no GEMM, so its time is
    its HBM bytes (forward + backward, the catalogue's counts, and the residual add's) over 8 TB/s x 0.840 = 6.72 TB/s."""
    p = resolved(load_preset("llama-3-8b"), "b200", recompute="none", attention="flash", seq_len=4096)
    ev = p.evaluate(1, 1)
    pv = ev.layers[0][1]
    moved = pv.value("input_norm", "bytes_moved") + pv.value("input_norm", "bytes_moved_bwd")
    # the residual add before it, its own kernel (lp6, tests/test_lp6_elementwise.py): 3 x 2 B forward and backward
    added = pv.value("input_norm", "elementwise_bytes") + pv.value("input_norm", "elementwise_bytes_bwd")
    assert layer_parts(p, ev)[0].phase_s["input_norm"] == pytest.approx((moved + added) / B200_ADD_BPS, rel=1e-9)
    # the catalogue's count: 12 B per token x hidden element over the forward and backward passes
    assert moved / (4096 * 4096) == pytest.approx(12, rel=1e-3)
    assert added / (4096 * 4096) == pytest.approx(12, rel=1e-9)


def test_the_cast_kernels_keep_their_own_share_of_the_datasheet():
    """The casts' measured shares (lp3: 0.651 of 8 TB/s for MXFP8's two-copy cast, 2 B read + 2 x (1 + 1/32) B
    written) are already shares of the datasheet; the streaming share (0.840) does not multiply them (tests/test_lp_cast_bandwidth.py derives their times)."""
    p = resolved(load_preset("llama-3-8b"), "b200", recompute="none", attention="flash", seq_len=4096,
                 precision="mxfp8")
    rates = cast_rates(p)
    assert rates.full_bandwidth_bytes_per_cast == pytest.approx((2 + 2 * (1 + 1 / 32)) / 0.651, rel=2e-3)


def test_a_profile_without_the_share_streams_at_the_datasheet():
    """Absent field: B_stream = B_HBM (the wafer profiles, whose off-chip link is not HBM)."""
    m = resolve_hardware("wse3").memory
    assert m.achievable_bandwidth_fraction is None
    assert m.streaming_bandwidth_bytes_per_s() == m.offchip_bandwidth_bytes_per_s.value
    h = resolve_hardware("h100").memory
    assert h.streaming_bandwidth_bytes_per_s() == pytest.approx(3.35e12 * _stream_share(*GH200), rel=5e-4)
