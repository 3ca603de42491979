"""mut33: tests for mutants of btacalc/model/gpu/costs.py (per-phase GEMM time, the fused attention core, casts, host
issue counts, grouped-linear host time) that the suite let survive. Each expected value is arithmetic from the cited
source (a model's published shape, a datasheet, the catalogue's FLOP count, TransformerEngine's and Megatron's code),
not the tool's own output (docs/mutation-survivors.md "mut33" lists the mutants each test kills)."""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.gemm import gemm_time
from btacalc.model.gpu.rates import rates_of
from support import resolved
from tests.test_bf16ends import A, A_KV, D_H, EFF, F, H, H100_BF16, H100_HBM, S, _h100_flat, _problem

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


# ---- a routed phase's HBM traffic


def _experts_phase(hw, ep):
    """Qwen3-30B-A3B (config.json: h 2,048, 128 experts of moe_intermediate_size 768, SwiGLU, top-8) with one sequence
    of 128 tokens per GPU on 2 GPUs at EP `ep`: the experts phase's time and the catalogue's values of it."""
    p = resolved(load_preset("qwen3-30b-a3b"), hw, Layout(devices=2, expert_parallel=ep), recompute="none",
                 attention="flash", seq_len=128, precision="bf16")
    ev = p.evaluate(1, 1)
    (_, pv), part = ev.layers[-1], layer_parts(p, ev)[-1]
    return part.phase_s["experts"], {q: pv.value("experts", q) for q in (
        "bytes_moved", "bytes_moved_bwd", "elementwise_bytes", "elementwise_bytes_bwd", "flops_fwd", "flops_bwd")}


def test_a_routed_phase_reads_only_the_experts_a_device_holds():
    """1,024 routed copies against 128 experts' weights W = 2 B x 3 x 128 x 2,048 x 768: memory-bound on the flat H100
    (no [kernels], no streaming share: bytes at 3.35 TB/s). At EP 1 the device holds every expert: the phase moves the
    catalogue's bytes (forward, backward, its elementwise kernels'). At EP 2 it holds 64 experts and reads half of W
    forward and half of the backward's 2W (dX and dW each read the weights: formulas/constants.toml
    backward_traffic_factor), 1.5 W / 3.35 TB/s less; balanced routing, so the activations' bytes are the same."""
    t1, v = _experts_phase(_h100_flat(), 1)
    t2, _ = _experts_phase(_h100_flat(), 2)
    assert (v["flops_fwd"] + v["flops_bwd"]) / (EFF * H100_BF16) < t2 / 4  # memory-bound
    moved = v["bytes_moved"] + v["bytes_moved_bwd"] + v["elementwise_bytes"] + v["elementwise_bytes_bwd"]
    assert t1 == pytest.approx(moved / H100_HBM, rel=1e-12)
    w = 2 * 3 * 128 * 2048 * 768
    assert t1 - t2 == pytest.approx(1.5 * w / H100_HBM, rel=1e-9)
