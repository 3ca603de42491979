"""Issue 22, lp6: the elementwise kernels Megatron launches between TransformerEngine's modules add to the step.

The SwiGLU (or bias-GeLU) activation between the two MLP linears and the two residual bias-dropout-adds per layer
are separately launched, memory-bound, jit-fused kernels (Megatron-LM @ d98e8a64 megatron/core/transformer/mlp.py
L275-317, megatron/core/fusions/fused_bias_swiglu.py L15-26 and L79-94, fused_bias_dropout.py L11-73,
transformer_layer.py L745-756 and L1105). Their bytes are the catalogue's `elementwise_bytes` (forward, again per
re-run) and `elementwise_bytes_bwd`; each phase adds them at B_stream = HBM x achievable_bandwidth_fraction instead
of hiding them under its GEMMs' roofline max (docs/precision.md, "lp6").

Expected values are written out as arithmetic from the kernels' reads and writes:
- swiglu(y): reads y = [gate, up] (2f per token), writes SiLU(gate) * up (f): 3 f elements forward;
- swiglu_back(g, y): reads y (2f) and g (f), writes [d gate, d up] (2f): 5 f elements backward;
- residual + x: reads two h, writes one h forward; the backward's one add sums the gradient through the block
  and the one around it (two h read, one written).
"""

from __future__ import annotations

import pytest

import btacalc.model.gpu.costs as costs
from btacalc.config.execution import Layout
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from support import resolved

# Llama 3 8B (config.json): hidden 4096, intermediate 14336; one 8,192-token sequence; BF16 = 2 B
H, F, S, BETA = 4096, 14336, 8192, 2
B200_STREAM_BPS = 8e12 * 0.840  # B200 datasheet x the CCCL DeviceTransform add share (tests/test_streaming_bandwidth.py)
H100_STREAM_BPS = 3.35e12 * 0.870  # H100 SXM datasheet x the GH200 STREAM share


def _llama(hw: str, **run):
    p = resolved(load_preset("llama-3-8b"), hw, recompute="none", attention="flash", seq_len=S, **run)
    ev = p.evaluate(1, 1)
    return p, ev, ev.layers[0][1]


def test_the_swiglu_kernels_bytes_are_the_activations_reads_and_writes():
    """3 x 2 B x 8192 x 14336 = 704.6 MB forward, 5 x 2 B x 8192 x 14336 = 1174.4 MB backward."""
    _, _, pv = _llama("b200")
    assert pv.value("mlp", "elementwise_bytes") == pytest.approx(3 * BETA * S * F)
    assert pv.value("mlp", "elementwise_bytes_bwd") == pytest.approx(5 * BETA * S * F)


def test_one_layers_swiglu_adds_its_bytes_over_the_streaming_bandwidth():
    """On a B200 the SwiGLU kernels take (3 + 5) x 2 x 8192 x 14336 B / 6.72 TB/s = 279.6 us per layer and
    sequence, added to the MLP phase (not hidden under its 18 s h f FLOPs of GEMMs); the two residual adds
    (3 + 3) x 2 x 8192 x 4096 B / 6.72 TB/s = 59.9 us each, added to the norm phase that follows them."""
    p, ev, _ = _llama("b200")
    with_kernels = layer_parts(p, ev)[0]
    swiglu_s = (3 + 5) * BETA * S * F / B200_STREAM_BPS
    add_s = (3 + 3) * BETA * S * H / B200_STREAM_BPS
    assert swiglu_s == pytest.approx(279.6e-6, rel=1e-3)
    assert add_s == pytest.approx(59.9e-6, rel=1e-3)
    real = costs._elementwise_s
    try:  # the same layer with the kernels' time taken out
        costs._elementwise_s = lambda v, r, load: 0.0
        without = layer_parts(p, ev)[0]
    finally:
        costs._elementwise_s = real
    assert with_kernels.phase_s["mlp"] - without.phase_s["mlp"] == pytest.approx(swiglu_s, rel=1e-9)
    for norm in ("input_norm", "post_attn_norm"):
        assert with_kernels.phase_s[norm] - without.phase_s[norm] == pytest.approx(add_s, rel=1e-9)
    assert with_kernels.compute_s - without.compute_s == pytest.approx(swiglu_s + 2 * add_s, rel=1e-9)


@pytest.mark.parametrize("precision", ["fp8-current", "mxfp8", "nvfp4"])
def test_the_activation_is_the_same_16_bit_kernel_under_low_precision(precision):
    """Megatron's SwiGLU writes 16-bit under every recipe (use_te_activation_func is off: transformer_config.py
    L1199); the second linear's TE module quantises its input separately, lp3's cast of the f elements
    (`cast_elements`), so the activation's bytes do not change and nothing is counted twice."""
    _, _, bf16 = _llama("b200")
    _, _, lp = _llama("b200", precision=precision)
    for q in ("elementwise_bytes", "elementwise_bytes_bwd"):
        assert lp.value("mlp", q) == pytest.approx(bf16.value("mlp", q))
    # lp3's casts of the MLP: fc1 input h, fc1 output gradient 2f, fc2 input f, fc2 output gradient h
    assert lp.value("mlp", "cast_elements") == pytest.approx(S * (2 * H + 3 * F))


def test_a_recomputed_mlp_runs_its_activation_again():
    """Selective recomputation of the MLP module re-runs its forward, the activation kernel with it:
    (3 x 2 + 5) x 2 x 8192 x 14336 B over the H100's 2.91 TB/s."""
    p = resolved(load_preset("llama-3-8b"), "h100", recompute="mlp",
                 attention="flash", seq_len=S)
    ev = p.evaluate(1, 1)
    pv = ev.layers[0][1]
    assert pv.value("mlp", "reruns") == 1
    real = costs._elementwise_s
    try:
        costs._elementwise_s = lambda v, r, load: 0.0
        without = layer_parts(p, ev)[0]
    finally:
        costs._elementwise_s = real
    added = layer_parts(p, ev)[0].phase_s["mlp"] - without.phase_s["mlp"]
    assert added == pytest.approx((3 * 2 + 5) * BETA * S * F / H100_STREAM_BPS, rel=1e-9)


def test_a_biased_gelu_mlp_with_dropout():
    """GPT-3 175B (h 12288, f 4h, biased linears, dropout): bias-GeLU 2 f forward, 3 f + 1 f (the bias
    gradient's reduction) backward; each residual add with dropout writes a 1-byte mask forward (3 x 2 + 1 B
    per element) and runs the dropout gradient (2 x 2 + 1 B) besides the accumulation (3 x 2 B) backward."""
    p = resolved(load_preset("gpt3-175b"), "h100", recompute="none", attention="flash", seq_len=2048)
    pv = p.evaluate(1, 1).layers[0][1]
    h = 12288
    f = 4 * h
    t = 2048
    assert pv.value("mlp", "elementwise_bytes") == pytest.approx(2 * BETA * t * f)
    assert pv.value("mlp", "elementwise_bytes_bwd") == pytest.approx((3 + 1) * BETA * t * f)
    for norm in ("input_norm", "post_attn_norm"):
        assert pv.value(norm, "elementwise_bytes") == pytest.approx((3 * BETA + 1) * t * h)
        assert pv.value(norm, "elementwise_bytes_bwd") == pytest.approx((3 * BETA + 2 * BETA + 1) * t * h)


def test_the_routed_experts_activation_scales_with_the_routed_copies():
    """Qwen3 30B-A3B (h 2048, expert width 768, top-8): each of the k = 8 copies of a token runs the weighted
    SwiGLU, 3 x 2 B x 8 x 768 per token forward and 5 x 2 B x 8 x 768 backward."""
    p = resolved(load_preset("qwen3-30b-a3b"), "h100", recompute="none", attention="flash", seq_len=4096)
    pv = p.evaluate(1, 1).layers[0][1]
    assert pv.value("experts", "elementwise_bytes") == pytest.approx(3 * BETA * 8 * 4096 * 768)
    assert pv.value("experts", "elementwise_bytes_bwd") == pytest.approx(5 * BETA * 8 * 4096 * 768)


def test_tensor_parallelism_splits_the_activation_and_sequence_parallelism_the_adds():
    """TP 4 with sequence parallelism: the activation runs on f/4 columns of every token, the residual add on
    s/4 tokens; without sequence parallelism every rank adds the full sequence."""
    model = load_preset("llama-3-8b")
    sp = resolved(model, "h100", Layout(devices=4, tensor_parallel=4, sequence_parallel=True), recompute="none",
                  attention="flash", seq_len=S).evaluate(1, 1).layers[0][1]
    no_sp = resolved(model, "h100", Layout(devices=4, tensor_parallel=4, sequence_parallel=False), recompute="none",
                     attention="flash", seq_len=S).evaluate(1, 1).layers[0][1]
    assert sp.value("mlp", "elementwise_bytes") == pytest.approx(3 * BETA * S * F / 4)
    assert sp.value("input_norm", "elementwise_bytes") == pytest.approx(3 * BETA * S * H / 4)
    assert no_sp.value("input_norm", "elementwise_bytes") == pytest.approx(3 * BETA * S * H)


# flashinfer PR 2256 (B200, cuDNN backend, 128 batched 512x512x4096 GEMMs): bmm_mxfp8 and bmm_fp8 TFLOP/s
MXFP8_TFLOPS, FP8_TFLOPS = 2347.650, 2369.049


@pytest.mark.parametrize("hw", ["b200", "gb200"])
def test_the_mxfp8_ceiling_is_the_fp8_one_times_the_published_mxfp8_to_fp8_ratio(hw):
    """2347.650 / 2369.049 = 0.991 of the per-tensor FP8 rate at the same shape: B200 0.785 x 0.991 = 0.778,
    GB200 0.794 x 0.991 = 0.787; the MXFP8 recipe's GEMMs run at it, the per-tensor FP8 recipes at the FP8 one."""
    from btacalc.config.hardware import resolve_hardware
    from btacalc.model.gpu.rates import matmul_ceiling
    from btacalc.model.gpu.precision import cast_rates
    k = resolve_hardware(hw).kernels
    ratio = MXFP8_TFLOPS / FP8_TFLOPS
    assert ratio == pytest.approx(0.991, abs=5e-4)
    assert k.mxfp8_gemm_ceiling_fraction.value == pytest.approx(k.fp8_gemm_ceiling_fraction.value * ratio, abs=5e-4)
    mx = resolved(load_preset("llama-3-8b"), hw, recompute="none", attention="flash", seq_len=S, precision="mxfp8")
    cs = resolved(load_preset("llama-3-8b"), hw, recompute="none", attention="flash", seq_len=S, precision="fp8-current")
    assert matmul_ceiling(mx, cast_rates(mx).ceiling_kernel) == k.mxfp8_gemm_ceiling_fraction.value
    assert costs.rates_of(mx).low_share / costs.rates_of(cs).low_share == pytest.approx(
        k.mxfp8_gemm_ceiling_fraction.value / k.fp8_gemm_ceiling_fraction.value)


def test_without_an_mxfp8_measurement_mxfp8_takes_the_fp8_ceiling():
    """A profile with an FP8 ceiling and no MXFP8 one runs MXFP8 at the FP8 ceiling (the B200 with its MXFP8 field
    taken out: 0.785); one with neither (the B200 with both taken out) at the BF16 one, 0.823."""
    from btacalc.config.hardware import resolve_hardware
    from btacalc.model.gpu.rates import matmul_ceiling
    b200 = resolve_hardware("b200")
    bare = b200.model_copy(update={"kernels": b200.kernels.model_copy(update={"mxfp8_gemm_ceiling_fraction": None})})
    p = resolved(load_preset("llama-3-8b"), bare, recompute="none", attention="flash", seq_len=S, precision="mxfp8")
    assert matmul_ceiling(p, "mxfp8") == pytest.approx(0.785)
    neither = bare.model_copy(update={"kernels": bare.kernels.model_copy(update={"fp8_gemm_ceiling_fraction": None})})
    q = resolved(load_preset("llama-3-8b"), neither, recompute="none", attention="flash", seq_len=S, precision="mxfp8")
    assert matmul_ceiling(q, "mxfp8") == pytest.approx(0.823)
