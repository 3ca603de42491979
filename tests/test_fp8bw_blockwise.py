"""fp8bw: blockwise FP8 (`--precision fp8-blockwise`, TransformerEngine's Float8BlockScaling) on Hopper at its
published rate (issue 22; docs/precision.md "fp8bw").

Which GEMM TE calls: on compute capability 9.x cuBLASLt with CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (1x128 FP32
scales: activations, gradients) and BLK128x128_32F (128x128: weights), cuBLAS 12.9+ (TE @ d0067d0
transformer_engine/common/gemm/cublaslt_gemm.cu L570-603; the grouped GEMM cublaslt_grouped_gemm.cu L919-940); from
10.0 on TE converts both operands to MXFP8 and runs an MXFP8 GEMM (pytorch/csrc/extensions/gemm.cpp L312-322).

Its rate: TransformerEngine's own GEMM benchmark on an H200 NVL (docs/examples/gemm_profiling/gemm_profiling.rst
@ d0067d0 L233-319, benchmarks/gemm/benchmark_gemm.py: a te.Linear forward per GEMM shape under te.autocast, the
weights quantised every call; hidden 4096, FFN 16384, 15,872 tokens, 12 fprop / dgrad / wgrad shapes). Per layer:
Float8BlockScaling with its casts 22.882 ms; current scaling with its casts 20.285 ms, pre-quantised 16.785 ms.

The casts: one kernel per tensor writes the rowwise and the columnwise copy (quantizer.cpp L1425-1439
nvte_quantize_v2 -> common/transpose/quantize_transpose_vector_blockwise.cu), reading the 16-bit tensor once. In the
benchmark the input needs no gradient and the weight's gradient does: TE (pytorch/module/linear.py @ d0067d0 L303,
L386-392, L467, L479) casts the weight every call (is_first_microbatch None), rowwise only, and the input rowwise and
columnwise, except under per-tensor scaling (rowwise only: "All-gather is not supported with FP8 column-wise data").
"""

from __future__ import annotations

import pytest

import btacalc.model.gpu.costs as costs
from btacalc.config.hardware import resolve_hardware
from btacalc.config.precision import recipe
from btacalc.config.presets import load_preset
from btacalc.model.gpu.rates import matmul_ceiling
from btacalc.model.gpu.precision import cast_rates
from support import resolved

# gemm_profiling.rst L233-319 (H200 NVL, ms per layer)
BLOCK_AUTOCAST_MS, CURRENT_AUTOCAST_MS, CURRENT_PREQUANT_MS = 22.882, 20.285, 16.785
M, H, I = 31 * 512, 4096, 16384  # micro-batch 31 x sequence 512; hidden; FFN (gemm_profiling.rst L28-35)


def _calls() -> list[tuple[int, int, int]]:
    """benchmark_gemm.py compute_gemm_shapes: (M, K, N) of the 12 te.Linear calls of one layer."""
    fprop = [(M, H, 3 * H), (M, H, H), (M, H, I), (M, I, H)]
    dgrad = [(M, 3 * H, H), (M, H, H), (M, I, H), (M, H, I)]
    wgrad = [(H, M, 3 * H), (H, M, H), (H, M, I), (I, M, H)]
    return fprop + dgrad + wgrad


def _block_to_per_tensor_rate() -> float:
    """The block-scaled GEMMs' rate over the per-tensor ones at the same shapes. Each call casts its input (M x K)
    and its weight (K x N). Current scaling: amax read 2 B, cast read 2 B, one FP8 write: 5 B per element; block
    scaling: read 2 B, write 2 x (1 + 4/128) (activations, both copies) or 1 + 4/128^2 (weights, rowwise).
    Current scaling's casts took 20.285 - 16.785 = 3.500 ms; the block casts take their share of the bytes at the
    same rate, and the block GEMMs the rest of 22.882 ms."""
    acts = sum(m * k for m, k, _ in _calls())
    weights = sum(k * n for _, k, n in _calls())
    current_bytes = 5 * (acts + weights)
    block_bytes = acts * (2 + 2 * (1 + 4 / 128)) + weights * (2 + 1 + 4 / 128**2)
    block_cast_ms = (CURRENT_AUTOCAST_MS - CURRENT_PREQUANT_MS) * block_bytes / current_bytes
    return CURRENT_PREQUANT_MS / (BLOCK_AUTOCAST_MS - block_cast_ms)


def test_the_block_scaled_gemm_runs_at_0_825_of_the_per_tensor_fp8_rate():
    """1,495.3 M activation and 987.8 M weight elements cast per layer; 0.728 of current scaling's cast bytes,
    0.728 x 3.500 = 2.548 ms; 16.785 / (22.882 - 2.548) = 0.825. The current-scaling casts stream 12.42 GB in
    3.500 ms = 3.55 TB/s, 0.74 of the H200 NVL's 4.8 TB/s (a plausible cast rate: the split is consistent). Bounds:
    16.785 / 22.882 = 0.734 (block casts free), 16.785 / (22.882 - 3.500) = 0.866 (as slow as current's)."""
    acts = sum(m * k for m, k, _ in _calls())
    weights = sum(k * n for _, k, n in _calls())
    assert (acts, weights) == (1_495_269_376, 987_758_592)
    assert 5 * (acts + weights) / 3.500e-3 / 4.8e12 == pytest.approx(0.739, abs=1e-3)
    r = _block_to_per_tensor_rate()
    assert r == pytest.approx(0.825, abs=5e-4)
    assert CURRENT_PREQUANT_MS / BLOCK_AUTOCAST_MS < r < CURRENT_PREQUANT_MS / (BLOCK_AUTOCAST_MS - 3.500)
    flops = sum(2 * m * k * n for m, k, n in _calls())
    assert flops / (CURRENT_PREQUANT_MS / r) / 1e9 == pytest.approx(943, abs=1)  # TFLOP/s (per-tensor: 1,142)


@pytest.mark.parametrize("hw", ["h100", "h200"])
def test_hopper_profiles_take_the_block_scaled_ceiling_as_the_fp8_one_times_the_ratio(hw):
    """H100: 0.9 x 0.825 = 0.743; H200: 0.871 x 0.825 = 0.719 (both profiles' FP8 GEMMs run at the BF16 ceiling:
    no FP8 one is published for them)."""
    k = resolve_hardware(hw).kernels
    assert k.fp8_gemm_ceiling_fraction is None
    assert k.fp8_block_gemm_ceiling_fraction.value == pytest.approx(
        k.gemm_ceiling_fraction.value * _block_to_per_tensor_rate(), abs=5e-4)


def _llama(hw: str, precision: str):
    return resolved(load_preset("llama-3-8b"), hw, recompute="none", attention="flash", seq_len=8192,
                    precision=precision)


def test_on_an_h100_a_blockwise_gemm_runs_at_the_block_scaled_rate():
    """The fp8-blockwise GEMMs run at 1979 TFLOP/s x 0.743 x compute_efficiency, the per-tensor recipes' at
    1979 x 0.9 x compute_efficiency: a large GEMM, e.g. Mixtral's FC1 fprop 2 x 8192 x 4096 x 28672 = 1.924e12 FLOP,
    takes 1.924e12 / (1979e12 x 0.743 x e) against 1.924e12 / (1979e12 x 0.9 x e): 0.9 / 0.743 = 1.211 times as
    long."""
    block, current = _llama("h100", "fp8-blockwise"), _llama("h100", "fp8-current")
    assert cast_rates(block).ceiling_kernel == "fp8_block"
    assert matmul_ceiling(block, "fp8_block") == 0.743
    eff = costs.rates_of(current).low_share / 0.9
    assert costs.rates_of(block).low_share == pytest.approx(0.743 * eff)
    flops = 2 * 8192 * 4096 * 28672
    t_block = flops / (1979e12 * costs.rates_of(block).low_share)
    t_current = flops / (1979e12 * costs.rates_of(current).low_share)
    assert t_block / t_current == pytest.approx(0.9 / 0.743)


@pytest.mark.parametrize("hw", ["b200", "gb200"])
def test_from_compute_capability_10_blockwise_gemms_run_as_mxfp8(hw):
    """TE emulates Float8BlockScaling with MXFP8 GEMMs on 10.0+ (gemm.cpp L312-322): the MXFP8 ceiling applies."""
    block = _llama(hw, "fp8-blockwise")
    assert cast_rates(block).ceiling_kernel == "mxfp8"
    assert costs.rates_of(block).low_share == pytest.approx(costs.rates_of(_llama(hw, "mxfp8")).low_share)
    assert recipe("fp8-blockwise").ceiling_kernel(9.0) == "fp8_block"
    assert recipe("fp8-blockwise").ceiling_kernel(10.0) == "mxfp8"


def test_one_blockwise_cast_reads_the_tensor_once_and_writes_two_copies():
    """quantize_transpose_vector_blockwise: read 2 B, write rowwise and columnwise FP8 with an FP32 scale per 128:
    2 + 2 x (1 + 4/128) = 4.0625 B per element at the H100 profile's cast share, TransformerEngine's measured Hopper
    quantise share (hoppercast: the current-scaling casts of this file's benchmark, 5 B per element in 3.500 ms,
    0.739 of 4.8 TB/s; no two-copy measurement, so the two-copy kernel takes it too): one 8192 x 4096 activation's
    cast takes 8192 x 4096 x 4.0625 / (0.739 x 3.35e12) = 55.0 us."""
    rates = cast_rates(_llama("h100", "fp8-blockwise"))
    acts = sum(m * k for m, k, _ in _calls())
    weights = sum(k * n for _, k, n in _calls())
    share = round(5 * (acts + weights) / ((CURRENT_AUTOCAST_MS - CURRENT_PREQUANT_MS) * 1e-3) / 4.8e12, 3)
    assert share == 0.739
    assert rates.activation_bytes_per_cast == pytest.approx((2 + 2 * (1 + 4 / 128)) / share)
    assert rates.full_bandwidth_bytes_per_cast == pytest.approx((2 + 2 * (1 + 4 / 128)) / share)
    assert 8192 * 4096 * rates.activation_bytes_per_cast / 3.35e12 == pytest.approx(55.0e-6, abs=0.1e-6)


@pytest.mark.parametrize("hw", ["h100", "h100-96gb", "h200"])
def test_hopper_profiles_cast_at_transformer_engines_measured_share(hw):
    """hoppercast: the Hopper profiles' kernels.cast_bandwidth_fraction is the share TE's own benchmark gives its
    current-scaling casts (amax read 2 B, cast read 2 B, FP8 write 1 B per element) on an H200 NVL: 12.42 GB in
    3.500 ms = 3.55 TB/s of 4.8 TB/s = 0.739. The delayed-scaling run, whose casts move 3 B per element over the same
    pre-quantised GEMMs (18.978 - 16.785 ms), gives 0.71: the same range, and the B200's measured single-copy share
    is 0.730."""
    acts = sum(m * k for m, k, _ in _calls())
    weights = sum(k * n for _, k, n in _calls())
    current = 5 * (acts + weights) / ((CURRENT_AUTOCAST_MS - CURRENT_PREQUANT_MS) * 1e-3) / 4.8e12
    delayed = 3 * (acts + weights) / ((18.978 - CURRENT_PREQUANT_MS) * 1e-3) / 4.8e12
    assert round(current, 3) == 0.739 and round(delayed, 2) == 0.71
    assert resolve_hardware(hw).kernels.cast_bandwidth_fraction.value == round(current, 3)
