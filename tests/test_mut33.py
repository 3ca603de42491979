"""mut33: tests for mutants of btacalc/model/gpu/costs.py (per-phase GEMM time, the fused attention core, casts, host
issue counts, grouped-linear host time) that the suite let survive. Each expected value is arithmetic from the cited
source (a model's published shape, a datasheet, the catalogue's FLOP count, TransformerEngine's and Megatron's code),
not the tool's own output (docs/mutation-survivors.md "mut33" lists the mutants each test kills)."""

from __future__ import annotations

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.gemm import gemm_time
from btacalc.model.gpu.rates import rates_of
from tests.test_bf16ends import A, A_KV, D_H, EFF, F, H, H100_BF16, S, _h100_flat, _problem

# Llama 3 8B's four linears of one layer at one sequence, (m, n, k) of Y = X W: QKV, output projection, SwiGLU's
# gate/up and down (tests/test_bf16ends.py's shape, from the model's config.json)
LLAMA_LINEARS = ((S, (A + 2 * A_KV) * D_H, H), (S, H, H), (S, 2 * F, H), (S, H, F))

# ---- the weight-gradient GEMMs' time (what --delay-wgrad-compute moves into Megatron's backward_dw)


def test_without_a_kernels_section_the_weight_gradients_are_half_the_linears_backward_at_the_peak():
    """Llama 3 8B, one sequence of 4,096 tokens on an H100 profile without [kernels] (every matmul at the BF16 peak x
    0.5). Each forward GEMM (m, n, k) has a data gradient and a weight gradient of 2mnk FLOPs each (Narayanan et al.
    2021, Eq. 3): the weight gradients are the linears' forward FLOPs, QKV 2·S·H·(A + 2 A_kv)·d_h, the output
    projection 2·S·H², SwiGLU's gate/up 2·S·H·2F and down 2·S·F·H, at 0.5 x 989 TFLOP/s. The norms and RoPE have no
    GEMM (no weight gradient), the attention core's matmuls no weight."""
    part = layer_parts(p := _problem(_h100_flat(), precision="bf16"), p.evaluate(1, 1))[0]
    forward = sum(2 * m * n * k for m, n, k in LLAMA_LINEARS)
    assert part.wgrad_s == pytest.approx(forward / (EFF * H100_BF16), rel=1e-12)


def test_the_weight_gradients_are_each_linears_k_by_n_by_m_gemm():
    """The same layer on the h100 profile (its GEMM shape model): the weight gradient of Y = X W (X m x k) is
    dW = X^T dY, a (k x m) @ (m x n) GEMM, written at the FP32 gradient's 4 bytes an element (Megatron's main grads,
    gradient_bytes 4). Each linear runs once a pass, so the layer's weight-gradient time is the sum of
    gemm_time(k, n, m) over its four linears."""
    p = _problem(resolve_hardware("h100"), precision="bf16")
    part, r = layer_parts(p, p.evaluate(1, 1))[0], rates_of(p)
    assert r.output_bytes[2] == 4
    expected = sum(gemm_time(k, n, m, 2, r.device, 1, 4.0).time_s for m, n, k in LLAMA_LINEARS)
    assert part.wgrad_s == pytest.approx(expected, rel=1e-12)
