"""mut35: tests for mutants of btacalc/model/gpu/costs.py's part assembly and its caches (`_part`, `_kind_rates`,
`_kind_rates_of`, `_kind_template`, `_gemms_of_part`, `_evaluate_all`) that the suite let survive. Each expected value
is arithmetic from the cited source (a Megatron-LM test's model configuration, the model's config numbers), not the
tool's own output (docs/mutation-survivors.md "mut35" lists the mutants each test kills)."""

from __future__ import annotations

from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from support import resolved

S = 4096  # one sequence of 4,096 tokens


# ---- two layer kinds that share one compiled selection keep their own symbols


def test_two_layer_kinds_of_one_selection_keep_their_own_ffn_width():
    """Megatron-LM's two-layer DeepSeek proxy (Megatron-LM @ d98e8a64 tests/functional_tests/test_cases/moe/
    deepseek_proxy_fsdp_ep2_fsdp2_ep_overlap/model_config.yaml L57-59, L87-91: --hidden-size 512, --ffn-hidden-size
    2048 for the dense first layer, --moe-ffn-hidden-size 1024, top 4, a shared expert of 1024) as its dense
    equivalent, the BTA comparison's model (ModelSpec.dense_equivalent: the MoE position becomes one SwiGLU FFN of
    width k f + f_shared = 4 x 1024 + 1024 = 5,120; the dense layer keeps 2,048). Both layers are then dense SwiGLU
    layers with the same features, so one compiled selection, but each runs its own width: fc1 (gate and up) is an
    s x 2 width x h GEMM, fc2 an s x h x width one (megatron/core/transformer/mlp.py L205-206: a gated linear unit
    doubles fc1's output), per sequence of s tokens at TP 1."""
    h = 512
    p = resolved(load_preset("deepseek-proxy-2l-megatron-ci").dense_equivalent(), "h100", precision="bf16",
                 attention="flash", seq_len=S)
    ev = p.evaluate(1, 1)
    parts = layer_parts(p, ev)
    assert [kind.name for kind, _ in ev.layers] == ["dense", "ffn"]
    for part, width in zip(parts, (2048, 4 * 1024 + 1024)):
        rows = {g.name: (g.m, g.n, g.k) for g in part.gemms["mlp"]}
        assert rows == {"W_gate_up": (S, 2 * width, h), "W_down": (S, h, width)}, width
