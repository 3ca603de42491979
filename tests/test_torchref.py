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
    for layer in (Qwen3MoeLayer(shape, dtype=torch.float32), GPTLayer(LayerShape(64, 4, 4, 16, 256), dropout=0.0,
                                                                       dtype=torch.float32)):
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
    common = ("plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--seq", str(seq),
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
