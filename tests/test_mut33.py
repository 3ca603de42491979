"""mut33: tests for mutants of btacalc/model/gpu/costs.py (per-phase GEMM time, the fused attention core, casts, host
issue counts, grouped-linear host time) that the suite let survive. Each expected value is arithmetic from the cited
source (a model's published shape, a datasheet, the catalogue's FLOP count, TransformerEngine's and Megatron's code),
not the tool's own output (docs/mutation-survivors.md "mut33" lists the mutants each test kills)."""

from __future__ import annotations

import numpy as np
import pytest

from btacalc.config.attention_kernels import attention_kernel
from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.gemm import gemm_time
from btacalc.model.gpu.rates import rates_of
from btacalc.model.problem import make_problem
from support import resolved
from tests.test_det3_deterministic_attention import DETERMINISTIC_BWD_MS, DEFAULT_BWD_MS, GB200_ATTENTION_RATE
from tests.test_fp8_attention import GB200_BF16_PEAK, GB200_HBM, _layer
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


# ---- the fused attention core


def _llama_gb200_layer(**run):
    """One Llama 3 8B layer at TP 4 on a GB200, s = 8192, causal (tests/test_det3_deterministic_attention.py)."""
    options = RunOptions(seq_len=8192, attention="flash", causal=True, gradient_bytes=4, recompute="none", **run)
    p = make_problem(load_preset("llama-3-8b"), resolve_hardware("gb200"), options,
                     Layout(devices=8, tensor_parallel=4, micro_batches=1))
    return layer_parts(p, p.evaluate(1, 1))[0]


def test_a_deterministic_attention_backward_is_backward_time():
    """cuDNN's deterministic backward takes 4.754 / 4.127 of the default backward kernel's time (cudnn-frontend's GB200
    benchmark): the backward kernel runs 2.5 x the forward's 4 s^2 a d x 65/128 FLOPs (8 heads a device) at 0.559 x
    2,450 TFLOP/s, and 0.152 x that more time is the layer's, its backward's (the pass that runs the kernel), its
    attention core's and its pre-dispatch node's (Megatron's merged 1F1B: attention is the first node)."""
    default, deterministic = _llama_gb200_layer(), _llama_gb200_layer(deterministic_attention=True)
    forward_flops = 4 * 8192**2 * 8 * 128 * 65 / 128
    extra = 2.5 * forward_flops / GB200_ATTENTION_RATE * (round(DETERMINISTIC_BWD_MS / DEFAULT_BWD_MS, 3) - 1)
    for field in ("compute_s", "backward_s", "core_s", "pre_dispatch_s", "pre_dispatch_backward_s"):
        grew = getattr(deterministic, field) - getattr(default, field)
        assert grew == pytest.approx(extra, rel=1e-9), field
    # the forward kernel is not the deterministic one: the forward (what is neither backward nor re-run) keeps its
    # time, and the re-run share (here the scores the backward kernel recomputes) stays the default kernel's
    assert deterministic.recompute_s == pytest.approx(default.recompute_s, rel=1e-12)
    assert deterministic.pre_dispatch_recompute_s == pytest.approx(default.pre_dispatch_recompute_s, rel=1e-12)
    forward = [p.compute_s - p.backward_s - p.recompute_s for p in (default, deterministic)]
    assert forward[1] == pytest.approx(forward[0], rel=1e-12)


def test_fp8_attentions_backward_casts_are_backward_time():
    """Llama 3 8B, one sequence of 4,096 on a GB200 under MXFP8, with and without --fp8-attention
    (tests/test_fp8_attention.py's layer). The kernel runs 14 s^2 a d x 33/64 FLOPs (forward 4, backward 8, the
    backward's recomputed Q K^T 2) at cuDNN's measured MXFP8 or BF16 share of 2,450 TFLOP/s; around the FP8 kernel TE
    quantises Q, K, V forward and dO backward, each into a rowwise and a columnwise MXFP8 copy,
    (2 + 2 (1 + 1/32)) B an element at the profile's two-copy cast share 0.651 of 8 TB/s. The backward pass gets the
    kernel's backward 8/14 and the dO cast; the forward the Q, K, V cast; the recomputed scores stay 2/14."""
    s, a, a_kv, d = 4096, 32, 8, 128
    flops, kernel = 14 * s * s * a * d * 33 / 64, attention_kernel("default")
    fp8, bf16 = (flops / (kernel.fraction_of_peak(10.0, s, dtype) * GB200_BF16_PEAK) for dtype in ("mxfp8", "bf16"))
    per_element = (2 + 2 * (1 + 1 / 32)) / 0.651 / GB200_HBM
    cast_fwd, cast_bwd = s * (a + 2 * a_kv) * d * per_element, s * a * d * per_element
    with_fp8, plain = _layer("llama-3-8b", "gb200", "mxfp8", True), _layer("llama-3-8b", "gb200", "mxfp8", False)
    grew = {f: getattr(with_fp8, f) - getattr(plain, f) for f in (
        "compute_s", "backward_s", "recompute_s", "pre_dispatch_backward_s", "pre_dispatch_recompute_s")}
    assert grew["compute_s"] == pytest.approx(fp8 - bf16 + cast_fwd + cast_bwd, rel=1e-9)
    assert grew["backward_s"] == pytest.approx((fp8 - bf16) * 8 / 14 + cast_bwd, rel=1e-9)
    assert grew["pre_dispatch_backward_s"] == pytest.approx(grew["backward_s"], rel=1e-12)  # attention: pre-dispatch
    assert grew["recompute_s"] == pytest.approx((fp8 - bf16) * 2 / 14, rel=1e-9)
    assert grew["pre_dispatch_recompute_s"] == pytest.approx(grew["recompute_s"], rel=1e-12)


# ---- host-issued counts under CUDA graphs


def _llama_h100_layer(recompute, scope=()):
    run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute=recompute)
    p = make_problem(load_preset("llama-3-8b"), resolve_hardware("h100"), run, Layout(cuda_graph_scope=scope))
    (part,) = layer_parts(p, p.evaluate(1, 1))
    return part


@pytest.mark.parametrize("recompute, reruns", [("none", 0), ("full", 1)])
def test_a_re_run_replays_no_graph_of_its_own(recompute, reruns):
    """Llama 3 8B on an H100, the mlp scope (a dense layer's post_attn_norm and mlp): the graph takes over
    post_attn_norm's 2 + r launches and the two MLP GEMMs' 3 + r each (forward, data and weight gradient, each re-run
    of the forward), r the re-runs (recompute full: 1). Megatron's TE implementation replays one forward and one
    backward graph (TE graph.py Graphed.forward / backward), 2 launches whatever the re-runs (tests/test_cuda_graphs.py
    counts r = 0): a re-run inside the graph runs in the backward graph (mut35 corrected mut33's 2 + r; full
    recomputation beside per-layer graphs is refused on input, Megatron-LM @ d98e8a64 transformer_config.py L2855-2858,
    so this case is the count's arithmetic, tests/test_mut35.py has the accepted one)."""
    eager, graphed = _llama_h100_layer(recompute), _llama_h100_layer(recompute, ("mlp",))
    captured = (2 + reruns) + 2 * (3 + reruns)
    assert eager.kernels - graphed.kernels == captured - 2
    assert eager.kernels_fwd - graphed.kernels_fwd == 3 - 1  # the first forward: 3 launches for the graph's 1


# ---- the re-run's share of a phase's time, and the parameters a layer kept in BF16 quantises


@pytest.mark.parametrize("sequences", [1, np.array([1, 2])])  # one shape; arrays of shapes (the solver's)
def test_a_full_re_run_is_a_quarter_of_a_linear_phases_time(sequences):
    """Llama 3 8B on the flat H100 (every GEMM at 0.5 x 989 TFLOP/s, bytes at 3.35 TB/s) with --recompute full: the MLP
    phase runs its forward, a re-run of it and a backward of twice its FLOPs, so the re-run is 1/4 of its FLOPs and
    of its time, the separately launched SwiGLU kernels' bytes (forward, re-run, backward) included, and the backward
    2/4. The mlp phase is the layer's only phase outside Megatron's pre-dispatch node (attention and the norms)."""
    p = resolved(load_preset("llama-3-8b"), _h100_flat(), Layout(), recompute="full", attention="flash", seq_len=S,
                 precision="bf16")
    ev = p.evaluate(1, sequences)
    (_, pv), part = ev.layers[0], layer_parts(p, ev)[0]
    mlp_flops = 4 * (2 * S * H * 2 * F + 2 * S * F * H) * np.asarray(sequences)  # forward, re-run, backward (2x)
    elementwise = (2 * pv.value("mlp", "elementwise_bytes") + pv.value("mlp", "elementwise_bytes_bwd")) / H100_HBM
    expected = (mlp_flops / (EFF * H100_BF16) + elementwise) / 4
    assert part.recompute_s - part.pre_dispatch_recompute_s == pytest.approx(expected, rel=1e-9)
    assert part.backward_s - part.pre_dispatch_backward_s == pytest.approx(2 * expected, rel=1e-9)
    assert np.all(part.pre_dispatch_recompute_s > 0)


def test_a_layer_kept_in_bf16_caches_no_low_precision_weights():
    """Llama 3 8B under FP8 with its first layer kept in BF16 (--num-layers-at-start-in-bf16 1, tests/test_bf16ends.py):
    an FP8 layer caches quantised copies of its four linears' weights, H (A + 2 A_kv) d_h + H^2 + 2 H F + F H
    parameters (the norms' are not quantised); the BF16 layer's linears run outside the recipe, none."""
    p = _problem(resolve_hardware("h100"), precision="fp8-current", bf16_layers_at_start=1)
    ev = p.evaluate(1, 1)
    parts = {kind.name: part for (kind, _), part in zip(ev.layers, layer_parts(p, ev))}
    linears = sum(n * k for _, n, k in LLAMA_LINEARS)
    assert parts["decoder"].low_precision_params == linears
    assert parts["decoder-bf16"].low_precision_params == 0
    assert parts["decoder-bf16"].dense_params == parts["decoder"].dense_params > linears
