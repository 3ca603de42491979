"""The seven Megatron-LM moe_recipes rows of the shipped set (twenty-sixth session; docs/clock.md 'mlmrecipes').

NVIDIA/Megatron-LM @ e5ad09802d examples/moe_recipes/README.md publishes each recipe's median TFLOP/s per GPU and no
step time. Megatron-LM logs TFLOP/s as num_floating_point_operations(args, batch) / (step x 1e12 x world size)
(megatron/training/training.py, transformer_flops, BSHD), so tokens/s per GPU = TFLOP/s x 1e12 / (FLOPs per token).
For Qwen3's GQA SwiGLU MoE layers (no dense layer, shared expert or MTP) the formula's FLOPs per token are

    6 [ L (3 h f k  +  h (q + 2 kv)  +  q h)  +  h V ]   +   6 q s L

(3: forward, weight and data gradients; 2 per multiply-add; q = d_h a, kv = d_h a_kv; the core attention's
2 q s L per layer halved for the causal mask and doubled for QK^T and PV). The test derives them from the presets'
dimensions and checks every row's measured tokens/s against its published TFLOP/s.
"""

from __future__ import annotations

import json
import re

import pytest

from btacalc.config.presets import resolve_model
from btacalc.paths import package_data

RECIPES = {  # run id: the README's median TFLOP/s/GPU (e5ad09802d examples/moe_recipes/README.md)
    "qwen3-30b-a3b-h100-32-bf16-mlmrecipes": 234.1,
    "qwen3-30b-a3b-h100-32-fp8-blockwise-mlmrecipes": 232.4,
    "qwen3-30b-a3b-gb200-16-bf16-mlmrecipes": 528.0,
    "qwen3-30b-a3b-gb200-16-mxfp8-mlmrecipes": 514.0,
    "qwen3-235b-a22b-h100-256-bf16-mlmrecipes": 214.3,
    "qwen3-235b-a22b-b200-128-mxfp8-mlmrecipes": 633.9,
    "qwen3-235b-a22b-gb200-128-mxfp8-mlmrecipes": 1018.0,
}


def _runs():
    runs = json.loads(package_data("measured_runs.json").read_text())["runs"]
    return {r["id"]: r for r in runs if r["id"] in RECIPES}


def megatron_flops_per_token(model: str, seq: int) -> int:
    m = resolve_model(model)
    h, L, f, k, V = m.hidden_size, m.num_layers, m.ffn_size, m.top_k, m.vocab_size
    q, kv = m.head_dim * m.num_heads, m.head_dim * m.num_kv_heads
    return 6 * (L * (3 * h * f * k + h * (q + 2 * kv) + q * h) + h * V) + 6 * q * seq * L


def test_the_formula_by_hand_for_qwen3_30b():
    # h 2048, L 48, f 768, k 8, q 4096, kv 512, V 151936, s 4096
    mlp = 3 * 2048 * 768 * 8 * 48              # 1,811,939,328
    attention = (2048 * (4096 + 1024) + 4096 * 2048) * 48  # 905,969,664
    logits = 2048 * 151936                      # 311,164,928
    core = 4096 * 4096 * 48                     # 805,306,368
    assert megatron_flops_per_token("qwen3-30b-a3b", 4096) == 6 * (mlp + attention + logits) + 6 * core
    assert megatron_flops_per_token("qwen3-30b-a3b", 4096) == 23_006_281_728


def test_the_same_formula_reproduces_the_model_zoo_rows_own_tflops():
    # Megatron-MoE-ModelZoo @ 8017e112 states both for its Qwen3-235B H100 DeepEP row: 245 TFLOP/s per GPU and a
    # 19.7 s step of 2048 x 4096 tokens on 256 GPUs; the formula puts the two within the table's rounding
    tokens_per_s = 2048 * 4096 / (19.7 * 256)
    tflops = tokens_per_s * megatron_flops_per_token("qwen3-235b-a22b", 4096) / 1e12
    assert tflops == pytest.approx(245, abs=1.5)


@pytest.mark.parametrize("run_id", sorted(RECIPES))
def test_each_rows_tokens_per_s_is_its_published_tflops(run_id):
    run = _runs()[run_id]
    expected = RECIPES[run_id] * 1e12 / megatron_flops_per_token(run["model"], run["seq"])
    assert run["measured"]["tokens_per_s_per_device"] == pytest.approx(expected, abs=0.006)
    assert re.search(rf"median {RECIPES[run_id]:g} TFLOP/s/GPU", run["notes"])


def test_the_rows_are_checks_with_the_recipes_batch_and_routing():
    runs = _runs()
    assert len(runs) == len(RECIPES)
    for run in runs.values():
        assert run["role"] == "check" and run["router_force_load_balancing"] is True and run["seq"] == 4096
        # Megatron-LM turns sequence parallelism off at TP 1 (the recipes' ARGS set it everywhere)
        assert run["sequence_parallel"] == (run["tp"] > 1)
