"""The formulas against a real PyTorch layer (btacalc.torchref): FLOPs from FlopCounterMode,
bytes saved for backward from saved_tensors_hooks, at full size under FakeTensorMode and at small
size on real CPU tensors. Needs `btacalc[measure]` (torch 2.13.0, CPU build); CI installs it.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from btacalc.config.model import validate_model
from btacalc.config.presets import resolve_model  # noqa: E402
from btacalc.torchref.accuracy import compare_layer, layer_shape  # noqa: E402
from btacalc.torchref.layers import GPTLayer, LayerShape, Qwen3MoeLayer  # noqa: E402
from btacalc.torchref.measure import build_and_measure, flop_counter  # noqa: E402

QWEN = resolve_model("qwen3-30b-a3b")
GPT3 = resolve_model("gpt3-175b")


def small_qwen(**changes):
    base = {**QWEN.model_dump(), "name": "qwen3-moe-small", "published_params": None, "hidden_size": 64,
            "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "ffn_size": 48, "num_experts": 8,
            "top_k": 2}
    return validate_model({**base, **changes}, "test")


def small_gpt():
    return validate_model({**GPT3.model_dump(), "name": "gpt-small", "published_params": None, "hidden_size": 64,
                           "num_layers": 2, "num_heads": 4, "num_kv_heads": 4, "head_dim": 16, "ffn_size": 256}, "test")


# --- the FLOP counter counts what we think -------------------------------------------------------

def test_flop_counter_misses_cpu_sdpa_unless_registered():
    from torch.utils.flop_counter import FlopCounterMode

    b, a, s, d = 2, 4, 32, 16
    q, k, v = (torch.randn(b, a, s, d) for _ in range(3))
    with FlopCounterMode(display=False) as plain:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert plain.get_total_flops() == 0  # the pitfall: CPU flash attention counts as zero
    with flop_counter() as ours:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert ours.get_total_flops() == 2 * (2 * b * a * s * s * d)  # Q K^T and P V


def test_flop_counter_counts_matmul_as_2mnk():
    x, w = torch.randn(8, 64), torch.randn(64, 32)
    with flop_counter() as fc:
        x @ w
    assert fc.get_total_flops() == 2 * 8 * 64 * 32


def test_grouped_mm_is_why_experts_are_a_loop():
    # torch's counter has no formula for _grouped_mm (it would count zero): the reference layer uses
    # one matmul per expert, which the counter sees
    from torch.utils.flop_counter import flop_registry

    assert hasattr(torch.ops.aten, "_grouped_mm")  # torch 2.13 has the op (the extra pins it) ...
    assert torch.ops.aten._grouped_mm not in flop_registry  # ... and no FLOP formula for it


# --- fake (full size, no memory) and real (small, CPU) give the same numbers ---------------------

@pytest.mark.parametrize("attention", ["eager", "flash"])
def test_fake_and_real_measurements_agree(attention):
    shape = layer_shape(small_qwen())
    real = build_and_measure("qwen3-moe", shape, batch=2, seq=16, attention=attention, fake=False)
    fake = build_and_measure("qwen3-moe", shape, batch=2, seq=16, attention=attention, fake=True)
    # real routing (data-dependent expert loads) and the fake equal split give identical totals:
    # every routed copy is processed by exactly one expert
    assert real.saved_bytes_by_phase == fake.saved_bytes_by_phase
    assert (real.flops_forward, real.flops_backward) == (fake.flops_forward, fake.flops_backward)


def test_phase_flops_sum_to_the_counter_total():
    m = build_and_measure("qwen3-moe", layer_shape(small_qwen()), batch=2, seq=16, fake=True)
    assert sum(m.flops_forward_by_phase.values()) == m.flops_forward


# --- formulas vs measurement over a grid ---------------------------------------------------------

FULL_GRID = [  # (model changes, batch G*b, s, G, attention): full size under FakeTensorMode
    ({}, 1, 1024, 1, "eager"),
    ({}, 1, 4096, 1, "eager"),
    ({}, 2, 1024, 2, "eager"),
    ({}, 2, 2048, 1, "flash"),
    ({"num_experts": 16}, 1, 1024, 1, "eager"),
    ({"num_experts": 32, "top_k": 4}, 2, 512, 2, "eager"),
    ({"top_k": 1, "ffn_size": 6144}, 1, 1024, 1, "eager"),  # BTA paper's top-k sweep, k*f fixed
    ({"top_k": 2, "ffn_size": 3072}, 4, 512, 4, "flash"),
]


@pytest.mark.parametrize("changes, batch, seq, tiles, attention", FULL_GRID)
def test_full_size_formulas_match_measurement(changes, batch, seq, tiles, attention):
    model = validate_model({**QWEN.model_dump(), **changes, "published_params": None}, "grid")
    c = compare_layer(model, batch, seq, tiles, attention, fake=True)
    # matmul FLOPs exactly (the acceptance allows 0.1%); torch counts FlashAttention's recomputation
    # of S in the backward, the catalogue as flops_recompute: formula_flops_backward adds it
    assert c.measured_flops_forward == c.formula_flops_forward
    assert c.measured_flops_backward == c.formula_flops_backward
    # pytorch accounting: within 2% in total (it is exact phase by phase for torch 2.13)
    assert abs(c.pytorch_bytes - c.measured_bytes) <= 0.02 * c.measured_bytes
    for r in c.phases:
        assert r.pytorch_bytes == r.measured_bytes, r.phase
        if attention == "eager":
            assert r.measured_flops_forward == r.formula_flops_forward, r.phase
    # ideal accounting undercounts a real framework
    assert c.ideal_bytes < c.measured_bytes


@pytest.mark.parametrize("batch, seq, tiles", [(2, 16, 1), (4, 8, 2), (3, 12, 3)])
def test_small_real_layers_match_formulas(batch, seq, tiles):
    for model in (small_qwen(), small_qwen(num_experts=4, top_k=1), small_gpt()):
        c = compare_layer(model, batch, seq, tiles, "eager", fake=False)
        assert c.measured_bytes == c.pytorch_bytes
        assert c.measured_flops_forward == c.formula_flops_forward


# --- GPT vs Korthikanti, term by term ------------------------------------------------------------

def test_gpt_layer_is_korthikanti_plus_layernorm_statistics():
    s, b, h, a = 2048, 1, GPT3.hidden_size, GPT3.num_heads
    c = compare_layer(GPT3, b, s, 1, "eager", fake=True)
    korthikanti = s * b * h * 34 + 5 * a * s * s * b  # sbh(34 + 5as/h), 16-bit, 1-byte dropout masks
    assert c.ideal_bytes == korthikanti
    # the only difference: each LayerNorm keeps its per-token mean and 1/std (2 values x 2 bytes on
    # the CPU in bf16), two norms per layer
    assert c.measured_bytes - korthikanti == 2 * (2 * 2 * s * b)
    assert c.measured_flops_forward == 24 * b * s * h * h + 4 * b * s * s * h


def test_gpt_dropout_masks_are_one_byte():
    c = compare_layer(small_gpt(), 2, 16, 1, "eager", fake=True)
    rows = {r.phase: r for r in c.phases}
    s, b, h, a = 16, 2, 64, 4
    # softmax output (2as^2b) + dropout mask (as^2b), Korthikanti §4.1
    assert rows["attn_softmax"].measured_bytes == 2 * a * s * s * b + a * s * s * b
    # projection input 2sbh + residual dropout mask sbh
    assert rows["attn_out_proj"].measured_bytes == 2 * s * b * h + s * b * h


# --- Batch Tiling on Attention --------------------------------------------------------------------

def test_tiled_layer_equals_untiled():
    torch.manual_seed(0)
    shape = LayerShape(hidden=64, heads=4, kv_heads=2, head_dim=32, ffn=48, experts=8, top_k=2)
    gpt = LayerShape(64, 4, 4, 16, 256, attention_dropout=0.0, hidden_dropout=0.0)
    for layer in (Qwen3MoeLayer(shape, dtype=torch.float32), GPTLayer(gpt, dtype=torch.float32)):
        x = torch.randn(4, 16, 64)
        torch.testing.assert_close(layer(x, tiles=4), layer(x, tiles=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attention", ["eager", "flash"])
def test_bta_keeps_stored_bytes_and_divides_attention_intermediate(attention):
    shape = layer_shape(QWEN)
    untiled = build_and_measure("qwen3-moe", shape, batch=4, seq=1024, tiles=1, attention=attention, fake=True)
    tiled = build_and_measure("qwen3-moe", shape, batch=4, seq=1024, tiles=4, attention=attention, fake=True)
    assert tiled.saved_bytes == untiled.saved_bytes
    attn = ("attn_scores", "attn_softmax", "attn_pv")
    big = lambda m: max(m.largest_intermediate_by_phase.get(p, 0) for p in attn)  # noqa: E731
    assert big(tiled) * 4 == big(untiled)
    if attention == "eager":  # the fp32 softmax output of one tile, b a s^2 x 4 bytes
        assert big(tiled) == 1 * QWEN.num_heads * 1024 * 1024 * 4


# --- the accounting option in plan ----------------------------------------------------------------


def test_plan_pytorch_accounting_differs_by_the_measured_amount(cli):
    seq = 1024
    # on a wafer the ideal selection is the reference layer's (the routing weights applied in the combine);
    # a GPU plan applies them inside the experts as Megatron does, a different layer from the one measured
    common = ("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--seq", str(seq),
              "--recompute", "none", "--attention", "eager", "--tiles", "1", "--tile-batch", "1", "--json")
    code_i, out_i, _ = cli(*common, "--accounting", "ideal")
    code_p, out_p, _ = cli(*common, "--accounting", "pytorch")
    ideal, pytorch = json.loads(out_i), json.loads(out_p)
    assert ideal["inputs"]["accounting"] == "ideal" and pytorch["inputs"]["accounting"] == "pytorch"
    measured = compare_layer(QWEN, 1, seq, 1, "eager", fake=True)
    per_layer_gap = measured.measured_bytes - measured.ideal_bytes
    gap = pytorch["memory_bytes"]["stored_activations"] - ideal["memory_bytes"]["stored_activations"]
    assert gap == QWEN.num_layers * per_layer_gap


def test_measure_command(cli):
    code, out, err = cli("measure", "--model", "qwen3-30b-a3b", "--seq", "512", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["measured_bytes"] == r["pytorch_bytes"] and r["ideal_bytes"] < r["measured_bytes"]
    code, out, err = cli("measure", "--batch", "3", "--tiles", "2")
    assert code == 2 and "divide" in err


# --- MLA, shared experts, dense layers, sliding windows and sinks (issue 10) ---------------------

def small(preset, **changes):
    return validate_model({**resolve_model(preset).model_dump(), "published_params": None, **changes}, "test")


SMALL_DEEPSEEK = dict(name="deepseek-small", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, head_dim=24,
                      vocab_size=100, ffn_size=16, num_experts=8, top_k=2, shared_expert_size=16, first_dense_layers=1,
                      dense_ffn_size=48, mla={"q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
                                              "qk_rope_head_dim": 8, "v_head_dim": 12})
SMALL_OSS = dict(name="gpt-oss-small", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                 vocab_size=100, ffn_size=24, num_experts=8, top_k=2, sliding_window=4)
SMALL_VARIANTS = [  # (preset, changes, layer kinds): every new block, on small real CPU tensors
    ("deepseek-v3", SMALL_DEEPSEEK, ("dense", "moe")),
    ("deepseek-v3", {**SMALL_DEEPSEEK, "router": "softmax", "router_renormalize": False, "router_score_bias": False,
                     # no query compression
                     "mla": {**SMALL_DEEPSEEK["mla"], "q_lora_rank": 0}}, ("moe",)),
    ("gpt-oss-120b", SMALL_OSS, ("moe-sliding", "moe-full")),
    ("mixtral-8x7b", {**SMALL_OSS, "name": "window-everywhere", "num_experts": 4, "qk_norm": "head",
                      "sliding_window": 5}, ("decoder",)),  # Mistral-style window on every layer, fp32 softmax
    ("qwen3-30b-a3b", {**SMALL_OSS, "name": "qwen2-moe-like", "sliding_window": 0, "shared_expert_size": 32,
                       "shared_expert_gate": True, "router_renormalize": False}, ("decoder",)),
]


@pytest.mark.parametrize("preset, changes, kinds", SMALL_VARIANTS)
@pytest.mark.parametrize("batch, seq, tiles", [(2, 12, 1), (4, 8, 2)])
def test_new_blocks_small_real_layers_match_phase_by_phase(preset, changes, kinds, batch, seq, tiles):
    model = small(preset, **changes)
    for kind in kinds:
        c = compare_layer(model, batch, seq, tiles, "eager", fake=False, kind_name=kind)
        assert c.layer_kind == kind
        for r in c.phases:
            assert (r.pytorch_bytes, r.formula_flops_forward) == (r.measured_bytes, r.measured_flops_forward), (kind, r)
        assert c.measured_flops_backward == c.formula_flops_backward


# Full-size dimensions under FakeTensorMode. The routed experts run in a per-expert loop whose cost grows
# with E (256 experts take 17 s here), so these layers keep every dimension but route over 16 experts:
# the expert formulas are checked at E = 128 in the Qwen3 grid above, the new blocks (MLA, windows, sinks,
# the sigmoid router, shared experts, dense layers) at their real sizes here.
FULL_SIZE_NEW = [  # (preset, layer kind, batch G*b, s, G)
    ("deepseek-v3", "moe", 1, 512, 1),
    ("deepseek-v3", "dense", 2, 256, 2),
    ("gpt-oss-120b", "moe-sliding", 1, 512, 1),
    ("gpt-oss-120b", "moe-full", 1, 512, 1),
]


def full_size(preset):
    return small(preset, name=f"{preset} (16 experts)", num_experts=16)


@pytest.mark.parametrize("preset, kind, batch, seq, tiles", FULL_SIZE_NEW)
def test_new_blocks_full_size_match_phase_by_phase(preset, kind, batch, seq, tiles):
    c = compare_layer(full_size(preset), batch, seq, tiles, "eager", fake=True, kind_name=kind)
    assert c.measured_flops_forward == c.formula_flops_forward
    assert c.measured_flops_backward == c.formula_flops_backward
    for r in c.phases:
        assert r.measured_flops_forward == r.formula_flops_forward, r.phase
        assert abs(r.pytorch_bytes - r.measured_bytes) <= 0.02 * max(r.measured_bytes, 1), r.phase
    assert c.pytorch_bytes == c.measured_bytes  # exact in torch 2.13
    assert c.ideal_bytes < c.measured_bytes


def test_sliding_window_scores_grow_with_w_not_s():
    model = full_size("gpt-oss-120b")
    c = compare_layer(model, 1, 256, 1, "eager", fake=True, kind_name="moe-sliding")
    rows = {r.phase: r for r in c.phases}
    w, heads, d = model.sliding_window, model.num_heads, model.head_dim
    # s*w scores per head (s = 256, w = 128), where a full layer has s*s; the grid above checks s = 512
    assert rows["attn_scores"].measured_flops_forward == 2 * 256 * w * heads * d
    assert rows["attn_pv"].measured_flops_forward == 2 * 256 * w * heads * d
    # the sink softmax over w + 1 columns (bf16) and its int64 row argmax
    assert rows["attn_softmax"].measured_bytes == 2 * heads * 256 * (w + 1) + 8 * heads * 256


def test_window_attention_is_banded_causal_attention():
    from btacalc.torchref.layers import window_attention

    torch.manual_seed(0)
    b, a, s, d, w = 2, 3, 10, 8, 4
    q, k, v = (torch.randn(b, a, s, d) for _ in range(3))
    band = window_attention(q, k, v, w, 0.5, None)
    i, j = torch.arange(s)[:, None], torch.arange(s)[None, :]
    allowed = (j <= i) & (j > i - w)
    dense = torch.softmax((q @ k.transpose(2, 3) * 0.5).masked_fill(~allowed, float("-inf")), -1) @ v
    torch.testing.assert_close(band, dense)
    # a window as long as the sequence is causal attention
    full = window_attention(q, k, v, s, 0.5, None)
    causal = torch.softmax((q @ k.transpose(2, 3) * 0.5).masked_fill(j > i, float("-inf")), -1) @ v
    torch.testing.assert_close(full, causal)


def test_flop_counter_counts_the_band_matmuls_and_not_the_elementwise_ops():
    # FlopCounterMode's blind spots: elementwise ops (sigmoid, softmax, the additive mask, cat) count zero;
    # the per-offset bmm of the window attention counts 2*N*d each; an fp32 linear (DeepSeek router) counts
    n, d = 6, 8
    q, k = torch.randn(n, 1, d), torch.randn(n, d, 1)
    with flop_counter() as fc:
        x = torch.bmm(q, k)
        torch.cat([x, x], -1).sigmoid().softmax(-1) + 1.0
    assert fc.get_total_flops() == 2 * n * d
    w = torch.nn.Linear(16, 4, dtype=torch.float32)
    with flop_counter() as fc:
        w(torch.randn(3, 16, dtype=torch.bfloat16).float())
    assert fc.get_total_flops() == 2 * 3 * 16 * 4


def test_mla_and_windows_are_measured_eager_only(cli):
    code, _, err = cli("measure", "--model", "deepseek-v3", "--seq", "128", "--attention", "flash")
    assert code == 2 and "eager only" in err
    code, out, err = cli("measure", "--model", "gpt-oss-20b", "--seq", "64", "--layer-kind", "moe-sliding", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["layer_kind"] == "moe-sliding" and r["measured_bytes"] == r["pytorch_bytes"]
    # a 128-token window over 64 tokens is the whole (s x s) score matrix
    scores = next(p for p in r["phases"] if p["phase"] == "attn_scores")
    assert scores["measured_flops_forward"] == scores["formula_flops_forward"] == 2 * 64 * 64 * 64 * 64
    code, _, err = cli("measure", "--model", "gpt-oss-20b", "--layer-kind", "nope")
    assert code == 2 and "--layer-kind" in err
