"""The runs36 check rows (docs/runs.md 'runs36'): each measured tokens/s derived from its published figure.

Sources: github.com/yanring/Megatron-MoE-ModelZoo (Qwen3-235B-A22B long context on H100 and GB200, the H100
'+1f1b overlap' row and best-practice script, Mixtral 8x22B on H100) and github.com/NVIDIA/Megatron-LM @ eb0783b6
docs/discussions/deepseek-v3-gb200-optimization (DeepSeek-V3 on 256 GB200). All but one publish TFLOP/s per GPU,
which Megatron-LM logs as num_floating_point_operations / (step x 1e12 x GPUs) (megatron/training/training.py,
transformer_flops), so tokens/s per GPU = TFLOP/s x 1e12 / (FLOPs per token). The FLOPs per token are written here
from the published model dimensions (not from btacalc's presets or planner):

- GQA SwiGLU MoE (Qwen3, Mixtral): 6 [L (3 h f k + h (q + 2 kv) + q h) + h V] + 6 q s L
  (3: forward, weight and data gradients; 2 per multiply-add; the core attention's 2 q s per layer halved for the
  causal mask and doubled for QK^T and PV);
- DeepSeek-V3 (MLA, 3 dense + 58 MoE layers, one shared expert, no MTP), transformer_flops @ effebd81:
  12 h (3/2) (3 F_dense + 58 (k f_moe + f_shared)) + L x 6 [q_lora (h + a (d_qk + d_rope) + 1)
  + kv_lora (h + a (d_qk + d_v) + 1) + h d_rope + a d_v h + s a (d_qk + d_rope) / 2 + s a d_v / 2] + 6 h V.
"""

from __future__ import annotations

import json
import re

import pytest

from btacalc.paths import package_data
from btacalc.planning.measured import load_runs, predict

QWEN3_235B = dict(h=4096, L=94, f=1536, k=8, q=64 * 128, kv=4 * 128, V=151936)  # config.json, moe_intermediate 1536
MIXTRAL_8X22B = dict(h=6144, L=56, f=16384, k=2, q=48 * 128, kv=8 * 128, V=32000)  # Llama2Tokenizer, 32,000

TFLOPS = {  # run id: (published TFLOP/s per GPU, its model's dimensions, sequence length)
    "qwen3-235b-a22b-h100-256-bf16-mzoo-s16k-tp4-cp1-pp8-vp4-ep8": (295, QWEN3_235B, 16384),
    "qwen3-235b-a22b-h100-256-bf16-mzoo-s32k-tp4-cp2-pp8-vp4-ep8": (335, QWEN3_235B, 32768),
    "qwen3-235b-a22b-h100-256-bf16-mzoo-s64k-tp4-cp4-pp8-vp4-ep8": (368, QWEN3_235B, 65536),
    "qwen3-235b-a22b-h100-256-bf16-mzoo-s128k-tp4-cp8-pp8-vp4-ep8": (389, QWEN3_235B, 131072),
    "qwen3-235b-a22b-gb200-128-mxfp8-mzoo-s128k-tp4-cp4-pp4-vp12-ep32": (1150, QWEN3_235B, 131072),
    "qwen3-235b-a22b-h100-256-bf16-mzoo-bp-a2aovl-tp2-pp8-vp4-ep32": (320, QWEN3_235B, 4096),
    "mixtral-8x22b-h100-128-bf16-mzoo-tp2-pp8-vp7-ep8": (465, MIXTRAL_8X22B, 4096),
    "mixtral-8x22b-h100-128-fp8-blockwise-mzoo-tp2-pp8-vp7-ep8": (560, MIXTRAL_8X22B, 4096),
}
DSV3 = "deepseek-v3-gb200-256-mxfp8-mlmdoc-tp1-pp8-vp4-ep32"
STEP_ROW = "qwen3-235b-a22b-h100-256-bf16-mzoo-deepep-1f1b-tp2-pp8-vp4-ep32"
H200 = {  # torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md L44-47: nodes: (TPS/GPU, Memory(GiB))
    "llama-3.1-8b-h200-32-fp8-current-torchtitan-trainy-op-ac": (4, 10938, 47.96),
    "llama-3.1-8b-h200-64-fp8-current-torchtitan-trainy-op-ac": (8, 10753, 46.97),
}
ALL = sorted([*TFLOPS, DSV3, STEP_ROW])


def _runs(ids=ALL):
    runs = json.loads(package_data("measured_runs.json").read_text())["runs"]
    return {r["id"]: r for r in runs if r["id"] in ids}


def gqa_flops_per_token(h, L, f, k, q, kv, V, seq):
    return 6 * (L * (3 * h * f * k + h * (q + 2 * kv) + q * h) + h * V) + 6 * q * seq * L


def deepseek_v3_flops_per_token(seq):
    h, L, ffn_dense, f_moe, k, f_shared, vocab = 7168, 61, 18432, 2048, 8, 2048, 129280
    a, q_lora, kv_lora, d_qk, d_rope, d_v = 128, 1536, 512, 128, 64, 128
    mlp = 12 * h * 3 * (3 * ffn_dense + 58 * (k * f_moe + f_shared)) // 2
    attention = 6 * (q_lora * (h + a * (d_qk + d_rope) + 1) + kv_lora * (h + a * (d_qk + d_v) + 1) + h * d_rope
                     + a * d_v * h + seq * a * (d_qk + d_rope) // 2 + seq * a * d_v // 2)
    return mlp + L * attention + 6 * h * vocab


def test_the_gqa_formula_by_hand_for_qwen3_235b_at_128k():
    mlp = 3 * 4096 * 1536 * 8 * 94                        # 14,193,524,736
    projections = (4096 * (8192 + 1024) + 8192 * 4096) * 94  # 6,702,497,792
    logits = 4096 * 151936                                # 622,329,856
    core = 8192 * 131072 * 94                             # 100,931,731,456
    assert gqa_flops_per_token(**QWEN3_235B, seq=131072) == 6 * (mlp + projections + logits) + 6 * core
    assert gqa_flops_per_token(**QWEN3_235B, seq=131072) == 734_700_503_040


def test_the_gqa_formula_by_hand_for_mixtral_8x22b():
    mlp = 3 * 6144 * 16384 * 2 * 56                       # 33,822,867,456
    projections = (6144 * (6144 + 2048) + 6144 * 6144) * 56  # 4,932,501,504
    logits = 6144 * 32000                                 # 196,608,000
    core = 6144 * 4096 * 56                               # 1,409,286,144
    assert gqa_flops_per_token(**MIXTRAL_8X22B, seq=4096) == 6 * (mlp + projections + logits + core)


def test_the_mla_formula_by_hand_for_deepseek_v3():
    mlp = 12 * 7168 * 3 * (3 * 18432 + 58 * (8 * 2048 + 2048)) // 2   # 145,068,392,448
    per_layer = 6 * (1536 * (7168 + 128 * 192 + 1) + 512 * (7168 + 128 * 256 + 1) + 7168 * 64
                     + 128 * 128 * 7168 + 4096 * 128 * 192 // 2 + 4096 * 128 * 128 // 2)
    assert deepseek_v3_flops_per_token(4096) == mlp + 61 * per_layer + 6 * 7168 * 129280
    # about 6 x the 37B active parameters plus the causal core: 2.50e11
    assert deepseek_v3_flops_per_token(4096) == pytest.approx(2.4981e11, rel=1e-4)


@pytest.mark.parametrize("run_id", sorted(TFLOPS))
def test_each_tflops_rows_tokens_per_s_is_its_published_tflops(run_id):
    run = _runs()[run_id]
    tflops, dims, seq = TFLOPS[run_id]
    assert run["seq"] == seq
    expected = tflops * 1e12 / gqa_flops_per_token(**dims, seq=seq)
    assert run["measured"]["tokens_per_s_per_device"] == pytest.approx(expected, abs=0.006)
    assert re.search(rf"\b{tflops}\b", run["source"])


def test_the_deepseek_v3_rows_tokens_per_s_is_its_published_tflops():
    run = _runs()[DSV3]
    expected = 970.01e12 / deepseek_v3_flops_per_token(4096)
    assert run["measured"]["tokens_per_s_per_device"] == pytest.approx(expected, abs=0.006)
    assert "970.01" in run["source"] and run["recipe"]["mtp_num_layers"] == 0


def test_the_1f1b_rows_tokens_per_s_is_its_published_step():
    run = _runs()[STEP_ROW]
    assert run["measured"]["step_time_s"] == 17.6
    assert run["measured"]["tokens_per_s_per_device"] == pytest.approx(2048 * 4096 / (17.6 * 256), abs=0.006)
    # the table's 276 TFLOP/s for this step agrees with the formula within its rounding
    tflops = run["measured"]["tokens_per_s_per_device"] * gqa_flops_per_token(**QWEN3_235B, seq=4096) / 1e12
    assert tflops == pytest.approx(276, abs=1.5)


def test_the_rows_are_dated_checks_with_forced_balance():
    runs = _runs()
    assert sorted(runs) == ALL
    for run in runs.values():
        assert run["role"] == "check" and run["router_force_load_balancing"] is True
        assert re.fullmatch(r"20\d\d-\d\d", run["software_date"]) and run["software_date_source"]
        assert re.search(r"@ [0-9a-f]{40}", run["source"]) and re.search(r"@ [0-9a-f]{40}", run["recipe"]["source"])
        # the data-parallel size divides the global batch: devices = TP x CP x PP x DP
        dp = run["devices"] // (run["tp"] * run["cp"] * run["pp"])
        assert dp * run["tp"] * run["cp"] * run["pp"] == run["devices"]
        assert run["global_batch"] % (dp * run["micro_batch"]) == 0


def test_no_row_carries_a_known_gap_since_onequeue():
    """The EP-overlap row without delayed weight gradients carried the set's one known gap (+29.9%) until the lead's
    onequeue modelled its CUDA_DEVICE_MAX_CONNECTIONS=1 (docs/clock.md 'onequeue'): inside the band, its story kept in
    its notes."""
    runs = _runs()
    assert sorted(r["id"] for r in runs.values() if r.get("known_gap")) == []
    assert runs[STEP_ROW]["recipe"]["overlaps"]["max_connections"] == 1 and "onequeue" in runs[STEP_ROW]["notes"]


@pytest.mark.parametrize("run_id", sorted(H200))
def test_the_h200_torchtitan_rows_are_as_published_and_not_expressible(run_id):
    run = _runs(H200)[run_id]
    nodes, tps, memory = H200[run_id]
    assert run["devices"] == 8 * nodes and run["global_batch"] == 2 * run["devices"]  # local batch 2, FSDP over all
    assert run["measured"] == {"tokens_per_s_per_device": tps, "peak_reserved_gib": memory}
    assert run["role"] == "check" and run["precision"] == "fp8-current" and run["recompute"] == "op"
    # a real missing feature: torchtitan's per-op checkpoint policy under Float8 linears
    result = predict(next(r for r in load_runs() if r.id == run_id))
    assert not result.expressible and "recompute op" in result.reason and "_scaled_mm" in result.reason
