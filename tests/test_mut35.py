"""mut35: tests for mutants of btacalc/model/gpu/costs.py's part assembly and its caches (`_part`, `_kind_rates`,
`_kind_rates_of`, `_kind_template`, `_gemms_of_part`, `_evaluate_all`) that the suite let survive. Each expected value
is arithmetic from the cited source (a Megatron-LM test's model configuration, the model's config numbers), not the
tool's own output (docs/mutation-survivors.md "mut35" lists the mutants each test kills)."""

from __future__ import annotations

import numpy as np
import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.problem import make_problem
from support import resolved
from tests.test_attngemm import _core, _plan

S = 4096  # one sequence of 4,096 tokens
ARRAYS = [1, np.array([1, 2])]  # one shape; arrays of shapes (the solver's)


# ---- two layer kinds that share one compiled selection keep their own symbols


@pytest.mark.parametrize("tiles", ARRAYS)
def test_two_layer_kinds_of_one_selection_keep_their_own_ffn_width(tiles):
    """Megatron-LM's two-layer DeepSeek proxy (Megatron-LM @ d98e8a64 tests/functional_tests/test_cases/moe/
    deepseek_proxy_fsdp_ep2_fsdp2_ep_overlap/model_config.yaml L57-59, L87-91: --hidden-size 512, --ffn-hidden-size
    2048 for the dense first layer, --moe-ffn-hidden-size 1024, top 4, a shared expert of 1024) as its dense
    equivalent, the BTA comparison's model (ModelSpec.dense_equivalent: the MoE position becomes one SwiGLU FFN of
    width k f + f_shared = 4 x 1024 + 1024 = 5,120; the dense layer keeps 2,048). Both layers are then dense SwiGLU
    layers with the same features, so one compiled selection, but each runs its own width: fc1 (gate and up) is an
    s x 2 width x h GEMM, fc2 an s x h x width one (megatron/core/transformer/mlp.py L205-206: a gated linear unit
    doubles fc1's output), over the G s tokens of G sequences at TP 1."""
    h = 512
    p = resolved(load_preset("deepseek-proxy-2l-megatron-ci").dense_equivalent(), "h100", precision="bf16",
                 attention="flash", seq_len=S)
    ev = p.evaluate(tiles, 1)
    parts = layer_parts(p, ev)
    assert [kind.name for kind, _ in ev.layers] == ["dense", "ffn"]
    for part, width in zip(parts, (2048, 4 * 1024 + 1024)):
        rows = {g.name: (g.m, g.n, g.k) for g in part.gemms["mlp"]}
        assert sorted(rows) == ["W_down", "W_gate_up"]
        for (m, n, k), expected in zip((rows["W_gate_up"], rows["W_down"]), ((2 * width, h), (h, width))):
            assert np.all(m == S * np.asarray(tiles)) and (n, k) == expected, width


# ---- a layer kept in BF16 caches no low-precision weights on the solver's and the memory model's other paths


@pytest.mark.parametrize("path", ["solver's candidates", "memory over arrays of sequence lengths"])
def test_a_layer_kept_in_bf16_caches_no_low_precision_weights_on_every_path(path):
    """Llama 3 8B (config.json: hidden 4,096, 32 heads and 8 KV heads of 128, intermediate 14,336) under FP8 with its
    first layer kept in BF16 (--num-layers-at-start-in-bf16 1; Megatron-LM @ d98e8a64 megatron/core/fp8_utils.py
    L850-852: that layer runs outside the recipe's autocast). An FP8 layer caches quantised copies of its four
    linears' weights, 4,096 x (32 + 2 x 8) x 128 + 4,096^2 + 3 x 4,096 x 14,336 parameters (its norms' are not
    quantised); the BF16 layer caches none, on the solver's candidates (timed without report rows, whose step time
    reads the parameters) as on the memory model's parts where the rows are summed phase by phase (arrays of
    sequence lengths), as tests/test_mut33.py checks for the plan's report."""
    h, f = 4096, 14336
    linears = h * (32 + 2 * 8) * 128 + h * h + 3 * h * f
    model = load_preset("llama-3-8b")
    if path == "solver's candidates":
        p = resolved(model, "h100", precision="fp8-current", bf16_layers_at_start=1, attention="flash", seq_len=S)
        parts = layer_parts(p, p.evaluate(np.array([1, 2]), 1), report=False)
    else:
        p = resolved(model, "h100", precision="fp8-current", bf16_layers_at_start=1, attention="flash",
                     seq_len=np.array([2048, S]))
        parts = layer_parts(p, p.evaluate(1, 1), memory_only=True)
    kinds = {kind.name: part for (kind, _), part in zip(p.evaluate(1, 1).layers, parts)}
    assert sorted(kinds) == ["decoder", "decoder-bf16"]
    assert np.all(kinds["decoder"].low_precision_params == linears)
    assert np.all(kinds["decoder-bf16"].low_precision_params == 0)
    assert np.all(kinds["decoder-bf16"].dense_params == kinds["decoder"].dense_params)


# ---- eager attention's report rows under the causal FLOP convention


def test_eager_attentions_rows_under_causal_run_the_whole_matrix_at_the_gemm_ceiling(cli):
    """--causal counts s(s + 1)/2 score entries, but eager attention computes the whole s x s matrix and masks it
    (Megatron-LM @ d98e8a64 megatron/core/transformer/dot_product_attention.py L194-200: one baddbmm over the whole
    matrix, then the scale-mask-softmax), so its two matmuls run the FLOPs of the full square, and at s = 2,048 on
    an A100 they are compute bound: each row's efficiency is the FLOPs it runs over its time, the GEMM ceiling x the
    compute efficiency, as without --causal (tests/test_attngemm.py), not that share divided by the time factor."""
    report = _plan(cli, "--model", "llama-3-8b", "--hw", "a100-80gb", "--devices", "8", "--tp", "2", "--seq", "2048",
                   "--attention", "eager", "--causal")
    profile = resolve_hardware("a100-80gb")
    ceiling = profile.kernels.gemm_ceiling_fraction.value * profile.calibration.compute_efficiency.value
    rows = _core(report["phases"])
    assert sorted(rows) == ["attn_pv", "attn_scores"]
    for _, row in rows.values():
        assert row["kernel"] == "eager_attention" and row["binding"] == "compute"
        assert row["efficiency"] == pytest.approx(ceiling, rel=1e-12)


# ---- a module recomputed inside a per-layer CUDA graph re-runs inside its backward graph


@pytest.mark.parametrize("scope", [("mlp",), ("attn",)])
def test_a_module_recomputed_inside_the_graph_adds_no_graph_launch(scope):
    """Llama 3 8B on an H100 with Megatron's --recompute-modules layernorm (the input and pre-MLP norms re-run their
    forward in the backward) and a per-layer CUDA graph over the mlp scope (post_attn_norm and the MLP) or the attn
    scope (input_norm to the output projection). TransformerEngine captures the graph's backward by running
    torch.autograd.backward over the callable's outputs (TransformerEngine @ d0067d0d transformer_engine/pytorch/
    graph.py L966-975), so a norm recomputed inside the callable re-runs inside the backward graph, and replays it
    as one forward and one backward graph (L1031-1097); Megatron allows no recompute module around a graphed scope
    (Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_config.py L2861). So the layer's host launches
    are those of its eager phases plus 2, with or without the norms' re-run: the re-run adds only the launch of the
    norm outside the graph (one forward kernel again), nothing for the graphed one."""
    def layer(recompute):
        run = RunOptions(seq_len=S, attention="flash", gradient_bytes=4, recompute=recompute)
        p = make_problem(load_preset("llama-3-8b"), resolve_hardware("h100"), run, Layout(cuda_graph_scope=scope))
        (part,) = layer_parts(p, p.evaluate(1, 1))
        return part

    assert layer("layernorm").kernels - layer("none").kernels == 1
