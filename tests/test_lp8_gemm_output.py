"""Issue 22 (lp8): a training GEMM's result is not written in its operands' dtype (docs/precision.md, "lp8").

TransformerEngine's forward and data-gradient GEMMs write the 16-bit activation dtype from FP8 or FP4 operands
(TE @ d0067d0 pytorch/module/linear.py: general_gemm(..., out_dtype=activation_dtype)), and the weight-gradient
GEMM accumulates into Megatron's main gradient buffer (gradient_accumulation_fusion, on by default:
general_gemm(..., out=main_grad, accumulate=True), linear.py L1227-1262), reading and writing it. The GEMM shape
model's memory floor therefore counts the m x n result at 2 B (forward, dgrad) and 2 x gradient_bytes (wgrad)
instead of the operands' 1 B (FP8) or 0.5 B (FP4). The published microbenchmarks the ceilings come from write their
result in the operand dtype (mamf-finder.py: out=C of the input dtype), so the ceilings' derivations keep it.
"""

from __future__ import annotations

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.rates import rates_of, gemm_output_bytes
from btacalc.model.gpu.gemm import GemmDevice, gemm_passes, gemm_time
from support import resolved

P = 1.6  # the profiles' smooth-roofline exponent (kernels.gemm_overlap_exponent)


def _b200_fp8_device() -> GemmDevice:
    """A B200 at its FP8 datasheet peak x FP8 ceiling (a microbenchmark's view: no compute_efficiency)."""
    p = resolve_hardware("b200")
    assert p.kernels.gemm_overlap_exponent.value == P and p.kernels.gemm_wave_overhead_s.value == 0
    return GemmDevice(4.5e15 * p.kernels.fp8_gemm_ceiling_fraction.value, 8e12, 148, p.kernels.gemm_tiles,
                      0.0, P)


def test_the_memory_floor_counts_the_result_at_its_own_bytes():
    """m = 148 x 128 rows, n = 256 columns: 148 tiles of 128 x 256, one full wave on 148 SMs (no quantisation
    loss), k = 4096. Compute = 2mnk / (4.5e15 x 0.785); memory = ((mk + kn) x 1 B + mn x out) / 8 TB/s; the time
    is the smooth roofline (c^1.6 + m^1.6)^(1/1.6). The FP8 operands with a BF16 result (2 B) take longer than the
    same GEMM writing FP8 (the microbenchmark's case)."""
    dev = _b200_fp8_device()
    m, n, k = 148 * 128, 256, 4096
    compute = 2 * m * n * k / (4.5e15 * 0.785)

    def by_hand(out: float) -> float:
        memory = ((m * k + k * n) * 1 + m * n * out) / 8e12
        return (compute ** P + memory ** P) ** (1 / P)

    fp8_out = gemm_time(m, n, k, 1, dev)
    bf16_out = gemm_time(m, n, k, 1, dev, output_bytes=2)
    assert fp8_out.time_s == pytest.approx(by_hand(1), rel=1e-9)
    assert bf16_out.time_s == pytest.approx(by_hand(2), rel=1e-9)
    assert bf16_out.time_s > fp8_out.time_s


def test_each_pass_writes_its_own_result():
    """gemm_passes: forward (m, n, k) writes m x n, data gradient (m, k, n) writes m x k, weight gradient (k, n, m)
    writes k x n, each at its own bytes; one Llama 3 8B fc1 (16,384 tokens, h 4,096, 2f 28,672) under NVFP4
    (0.5 B operands) with BF16 results and an fp32 main gradient read and written (2, 2, 8)."""
    p = resolve_hardware("b200")
    dev = GemmDevice(9e15 * p.kernels.fp4_gemm_ceiling_fraction.value, 8e12, 148, p.kernels.gemm_tiles, 0.0, P)
    m, n, k = 16384, 28672, 4096
    fwd, dgrad, wgrad = gemm_passes(m, n, k, 0.5, dev, 1, (2.0, 2.0, 8.0))
    assert fwd.time_s == gemm_time(m, n, k, 0.5, dev, output_bytes=2.0).time_s
    assert dgrad.time_s == gemm_time(m, k, n, 0.5, dev, output_bytes=2.0).time_s
    assert wgrad.time_s == gemm_time(k, n, m, 0.5, dev, output_bytes=8.0).time_s
    # the weight gradient's result (4,096 x 28,672 fp32, read and written) is 8 / 0.5 = 16x the bytes counted before
    old = gemm_passes(m, n, k, 0.5, dev)
    assert wgrad.time_s > old[2].time_s and fwd.time_s > old[0].time_s
    # arrays of shapes give the same bits as one shape
    arr = gemm_passes([m, m], [n, n], [k, k], 0.5, dev, 1, (2.0, 2.0, 8.0))
    assert arr[2].time_s[0] == wgrad.time_s and arr[0].time_s[1] == fwd.time_s


@pytest.mark.parametrize("precision", ["bf16", "fp8-current", "mxfp8", "nvfp4"])
def test_outputs_are_16_bit_and_the_wgrad_accumulates_into_the_main_gradient(precision):
    """(2, 2, 2 x 4) with Megatron's fp32 main gradients, in every precision: the result dtype does not follow the
    operands; with 16-bit main gradients (--grad-bytes 2) the weight gradient reads and writes 2 x 2 B."""
    b200 = resolve_hardware("b200")
    kw = dict(recompute="none", attention="flash", seq_len=4096, precision=precision)
    fp32 = resolved(load_preset("llama-3-8b"), b200, **kw, gradient_bytes=4)
    bf16 = resolved(load_preset("llama-3-8b"), b200, **kw, gradient_bytes=2)
    assert gemm_output_bytes(fp32) == (2.0, 2.0, 8.0)
    assert gemm_output_bytes(bf16) == (2.0, 2.0, 4.0)
    assert rates_of(fp32).output_bytes == (2.0, 2.0, 8.0)


@pytest.mark.parametrize("precision", ["bf16", "mxfp8"])
def test_without_gradient_accumulation_fusion_the_wgrad_writes_the_activation_dtype(precision):
    """--no-gradient-accumulation-fusion: TE's weight-gradient GEMM gets out=None, out_dtype=activation_dtype,
    accumulate=False (TE @ d0067d0 pytorch/module/linear.py L1231-1262 with fuse_wgrad_accumulation off): it writes
    a 16-bit gradient once (2 B) and neither reads nor writes the main gradient, which the separate add
    (gpu/fixed.py wgrad_accumulate_s) moves instead; the forward and dgrad results stay 16-bit."""
    b200 = resolve_hardware("b200")
    kw = dict(recompute="none", attention="flash", seq_len=4096, precision=precision, gradient_bytes=4)
    unfused = resolved(load_preset("llama-3-8b"), b200, **kw, gradient_accumulation_fusion=False)
    assert gemm_output_bytes(unfused) == (2.0, 2.0, 2.0)
    assert rates_of(unfused).output_bytes == (2.0, 2.0, 2.0)
