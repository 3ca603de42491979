"""Issue 22, Blackwell low-precision runs predicted too fast: TransformerEngine's quantise kernels stream at a
measured share of the HBM bandwidth, not at the datasheet's (docs/precision.md, "Why Blackwell low-precision
runs were predicted too fast").

Source: ROCm/TransformerEngine PR 598 (2026-05-27), table "CAST_ONLY", column "B200 (us)": TE's MXFP8 cast of a
BF16 8192 x 8192 tensor on a B200, 34.84 us writing the rowwise copy, 52.34 us writing both copies. Each test
writes the expected value as arithmetic from those two times, the OCP MX block format (1 B E8M0 scale per 32
elements) and the B200's 8 TB/s.
"""

from __future__ import annotations

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.precision import cast_bandwidth_shares, cast_bytes_per_element, cast_rates
from support import resolved

ELEMENTS = 8192 * 8192  # the benchmarked tensor, BF16
ROWWISE_S, BOTH_S = 34.84e-6, 52.34e-6  # the PR's B200 times
B200_HBM = 8e12  # HBM3e, B/s (the profile's source)
MX = 1 + 1 / 32  # one MXFP8 element and its share of the E8M0 scale, bytes
H, F, S = 4096, 14336, 4096  # Llama 3 8B hidden and FFN widths; one 4,096-token sequence


def test_the_cast_shares_are_the_published_b200_cast_times():
    """Rowwise: 2 B read + 1 + 1/32 B written per element = 203.4 MB in 34.84 us = 5.84 TB/s, 0.730 of 8 TB/s.
    Both copies from one read: 2 + 2 (1 + 1/32) B = 272.6 MB in 52.34 us = 5.21 TB/s, 0.651."""
    rowwise = ELEMENTS * (2 + MX) / ROWWISE_S / B200_HBM
    both = ELEMENTS * (2 + 2 * MX) / BOTH_S / B200_HBM
    k = resolve_hardware("b200").kernels
    assert k.cast_bandwidth_fraction.value == pytest.approx(rowwise, abs=5e-4)
    assert k.cast_two_copy_bandwidth_fraction.value == pytest.approx(both, abs=5e-4)
    # the kernel that writes two copies streams less well than the one that writes one, both below the datasheet
    assert both < rowwise < 1
    # GB200: the same die and HBM3e, the B200 measurement carried over (kind estimate)
    g = resolve_hardware("gb200").kernels
    assert g.cast_bandwidth_fraction.value == k.cast_bandwidth_fraction.value
    assert g.cast_bandwidth_fraction.kind == "estimate"


@pytest.mark.parametrize("precision, amax_passes, copies", [("fp8-current", 1, 1), ("mxfp8", 0, 2), ("fp8", 0, 1),
                                                             ("nvfp4", 1, 2)])
def test_one_llama_mlp_casts_at_the_measured_share(precision, amax_passes, copies):
    """Llama 3 8B MLP, one 4,096-token sequence on a B200: the cast elements are the fc1 input (h), fc1 output
    gradient (2f), fc2 input (f) and fc2 output gradient (h) per token. Each element's cast reads 2 B, again
    per amax pass (a read-only kernel, at the rowwise share), and writes `copies` quantised copies (Blackwell
    reads per-tensor FP8 in any layout: 1; block scales: 2), at the share of the kernel with that many copies."""
    p = resolved(load_preset("llama-3-8b"), "b200", recompute="none", attention="flash", seq_len=S,
                 precision=precision)
    q = {"fp8-current": 1, "fp8": 1, "mxfp8": MX, "nvfp4": 0.5 + 1 / 16}[precision]
    rowwise = ELEMENTS * (2 + MX) / ROWWISE_S / B200_HBM
    share = {1: rowwise, 2: ELEMENTS * (2 + 2 * MX) / BOTH_S / B200_HBM}[copies]
    seconds_per_element = (2 * amax_passes / rowwise + (2 + copies * q) / share) / B200_HBM
    part = layer_parts(p, p.evaluate(1, 1))[0]
    activations = S * (2 * H + 3 * F) * seconds_per_element
    weights = 3 * H * F * seconds_per_element  # once per step; M = 1, so all of it on this micro-batch's row
    assert part.cast_s["mlp"] == pytest.approx(activations + weights, rel=1e-3)


def test_profiles_without_a_measured_cast_stream_at_their_streaming_share():
    """A profile without a measured TransformerEngine cast share casts at the share a streaming kernel reaches there,
    memory.achievable_bandwidth_fraction (a cast is a streaming kernel and cannot beat it; the H100's, RRZE-HPC
    gpu-benches' GH200 cuda-stream, the mean of scale (3174 GB/s) and triad (3783 GB/s) over 4000 GB/s = 0.87); a
    profile without either keeps the datasheet rate. The shipped Hopper profiles now carry TE's measured share
    (0.739, tests/test_fp8bw_blockwise.py derives it): Hopper's FP8 cast reads 2 B and writes the rowwise and the
    transposed 1-byte copies, 4 B per element at 0.739, i.e. 4 / 0.739 B at the datasheet rate."""
    stream = (3174 + 3783) / 2 / 4000
    assert stream == pytest.approx(0.87, abs=5e-4)
    h100 = resolve_hardware("h100")
    assert h100.kernels is not None and h100.kernels.cast_bandwidth_fraction is not None
    unmeasured = h100.kernels.model_copy(update={"cast_bandwidth_fraction": None})
    assert cast_bandwidth_shares(unmeasured, 2, h100.memory.achievable_bandwidth_fraction.value) == (0.87, 0.87)
    assert cast_bandwidth_shares(unmeasured, 2) == (1.0, 1.0)
    assert cast_bandwidth_shares(h100.kernels, 2, 0.87) == (0.739, 0.739)  # no two-copy measurement: the one share
    p = resolved(load_preset("llama-3-8b"), "h100", recompute="none", attention="flash", seq_len=S, precision="fp8")
    rates = cast_rates(p)
    plain = cast_bytes_per_element(rates.recipe, 2)  # Hopper's FP8 cast writes the rowwise and transposed copies
    assert plain == pytest.approx(2 + 2 * 1)
    assert rates.full_bandwidth_bytes_per_cast == pytest.approx(plain / 0.739)


def test_bf16_plans_have_no_cast_and_do_not_move():
    """16-bit training casts nothing, so the new shares cannot move a BF16 plan."""
    p = resolved(load_preset("llama-3-8b"), "b200", recompute="none", attention="flash", seq_len=S)
    assert cast_rates(p) is None
    assert not layer_parts(p, p.evaluate(1, 1))[0].cast_s


# torchao PR 2427 (pytorch/ao, 2025-06-23), benchmarks/float8/bench_matmul.py --recipe nvfp4 on "NVIDIA B200":
# M = K = N, TFLOP/s of torch.bfloat16 and of the NVFP4 GEMM (torch._scaled_mm, cuBLASLt block scales)
NVFP4_VS_BF16 = {6144: (1.45e15, 5.50e15), 8192: (1.42e15, 5.37e15)}
B200_BF16, B200_FP4 = 2.25e15, 9e15  # the peaks the benchmark prints (the profile's own)


@pytest.mark.parametrize("hw", ["b200", "gb200"])
def test_nvfp4_ceiling_is_the_bf16_ceiling_times_the_published_ratio(hw):
    """At 6144^3 and 8192^3 (compute-bound at both precisions) NVFP4 reaches 0.611 and 0.597 of the FP4 peak where
    BF16 reaches 0.644 and 0.631 of its own: 0.948 and 0.945, mean 0.9468. The FP4 ceiling is the profile's BF16
    ceiling times that ratio: B200 0.823 x 0.9468 = 0.779; GB200 (the same die) 0.805 x 0.9468 = 0.762."""
    ratios = [(fp4 / B200_FP4) / (bf16 / B200_BF16) for bf16, fp4 in NVFP4_VS_BF16.values()]
    assert ratios[0] == pytest.approx(ratios[1], abs=5e-3)  # the two shapes agree
    ratio = sum(ratios) / len(ratios)
    k = resolve_hardware(hw).kernels
    assert k.fp4_gemm_ceiling_fraction.value == pytest.approx(k.gemm_ceiling_fraction.value * ratio, abs=6e-4)
    # below the BF16 ceiling and of the order of the FP8 one (the MAMF table: FP8 0.954 of BF16 on the B200)
    assert k.fp4_gemm_ceiling_fraction.value < k.gemm_ceiling_fraction.value
    assert resolve_hardware("h100").kernels.fp4_gemm_ceiling_fraction is None  # H100 has no FP4 peak at all
