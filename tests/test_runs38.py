"""The runs38 check rows (docs/runs.md 'runs38'): NeMo 24.07's H100 FP8 pre-training table, each figure as published.

Source: github.com/NVIDIA/NeMo @ 9c5c5e97 docs/source/performance/performance_summary.md L12-25 (NeMo 24.07 container,
DGX-H100, "pre-training performance ... at FP8 precision"): the table gives GPUs, GBS, MBS, sequence length, TP, PP,
CP, VP (1 = none), tokens/s/GPU and model TFLOP/s/GPU. The set held its two GPT3-175B rows (-291, -292). What the
table leaves out is read from the launcher file of the same release (NVIDIA/NeMo-Framework-Launcher tag 24.07,
8325688d launcher_scripts/conf/training/<family>/<model>.yaml and its tp_overlap/*.yaml).
"""

from __future__ import annotations

import json

import pytest

from btacalc.paths import package_data
from btacalc.planning.measured import load_runs, predict

# run id: (table line, table model, GPUs, GBS, MBS, seq, TP, PP, CP, VP column, tokens/s/GPU, model TFLOP/s/GPU,
#          decoder layers of the model (its config.json / the launcher file's num_layers))
TABLE = {
    "llama-2-7b-h100-8-fp8-nemo2407-tp1-pp1": (18, "LLAMA2-7B", 8, 128, 1, 4096, 1, 1, 1, 1, 16934, 780, 32),
    "llama-2-13b-h100-16-fp8-nemo2407-tp1-pp4-vp10": (19, "LLAMA2-13B", 16, 128, 1, 4096, 1, 4, 1, 10, 8715, 760, 40),
    "llama-2-70b-h100-64-fp8-nemo2407-tp4-pp4-vp20": (20, "LLAMA2-70B", 64, 128, 1, 4096, 4, 4, 1, 20, 1728, 768, 80),
    "nemotron4-340b-h100-128-fp8-nemo2407-tp8-pp8-vp12": (23, "Nemotron-340B", 128, 32, 1, 4096, 8, 8, 1, 12, 326, 686,
                                                          96),
    "llama-3-8b-h100-8-fp8-nemo2407-tp1-pp1-cp2": (24, "LLAMA3-8B", 8, 128, 1, 8192, 1, 1, 2, 1, 12273, 711, 32),
    "llama-3-70b-h100-64-fp8-nemo2407-tp4-pp4-vp5-cp2": (25, "LLAMA3-70B", 64, 128, 1, 8192, 4, 4, 2, 5, 1524, 734, 80),
}
# btacalc's memory puts the launcher file's Nemotron-4 340B settings over the usable H100 memory at DP 2 (the run ran):
# shipped so that validate names it, excluded in tests/test_lpfit.py
NOT_FITTING = {"nemotron4-340b-h100-128-fp8-nemo2407-tp8-pp8-vp12"}
ALL = sorted(TABLE)
MIB = 2**20


def _rows():
    runs = json.loads(package_data("measured_runs.json").read_text())["runs"]
    return {r["id"]: r for r in runs if r["id"] in ALL}


def test_every_runs38_row_is_shipped_once_as_a_check():
    rows = _rows()
    assert sorted(rows) == ALL
    runs = json.loads(package_data("measured_runs.json").read_text())["runs"]
    assert len([r for r in runs if r["id"] in ALL]) == len(ALL)
    for r in rows.values():
        assert r["role"] == "check" and r["release"] == "NeMo 24.07" and r["software_date"] == "2024-07"
        assert r["hw"] == "h100" and r["precision"] == "fp8"


@pytest.mark.parametrize("rid", ALL)
def test_row_is_the_table_line(rid):
    line, name, gpus, gbs, mbs, seq, tp, pp, cp, vp, tok, tflops, _ = TABLE[rid]
    r = _rows()[rid]
    assert f"@ 9c5c5e9709407d3511005fc966e45374998bb478 L{line} " in r["source"]
    assert (r["devices"], r["global_batch"], r["micro_batch"], r["seq"]) == (gpus, gbs, mbs, seq)
    assert (r["tp"], r["pp"], r["cp"], r["vp"]) == (tp, pp, cp, vp if vp > 1 else None)
    assert r["measured"] == {"tokens_per_s_per_device": tok}
    assert f"'{name}'" in r["notes"] and f"{tflops} model TFLOP/s/GPU" in r["notes"]
    step = gbs * seq / (tok * gpus)
    assert f"= {step:.3f} s" in r["notes"]
    dp = gpus // (tp * pp * cp)
    assert f"DP {dp}, GA {gbs // (dp * mbs)}." in r["notes"] and dp * mbs * (gbs // (dp * mbs)) == gbs


@pytest.mark.parametrize("rid", ALL)
def test_virtual_stages_divide_the_layers(rid):
    *_, pp, _cp, vp, _tok, _tf, layers = TABLE[rid]
    assert layers % (pp * vp) == 0


@pytest.mark.parametrize("rid", ALL)
def test_recipe_buckets_and_gradient_precision(rid):
    """Apex's distributed Adam sizes a bucket as bucket_cap_mb MiB of grad_sync_dtype elements: the Nemotron file
    states 50 MB and bf16 (L160-161), the Llama files 125 MB (the gradient precision from the publisher baseline,
    bf16)."""
    rc = _rows()[rid]["recipe"]
    assert rc["apex_distributed_adam"] is True and rc["fp8_param_gather"] is False
    if rid.startswith("nemotron4"):
        assert rc["ddp_bucket_size"] == 50 * MIB // 2 == 26_214_400 and rc["grad_reduce_in_bf16"] is True
        assert rc["recompute"] == "selective" and rc["overlaps"]["tp_comm"] is False
    else:
        assert rc["ddp_bucket_size"] == 125 * MIB // 2 == 65_536_000 and "grad_reduce_in_bf16" not in rc
        assert rc["recompute"] == "none"


def test_tp_overlap_tables_are_the_launcher_files():
    rows = _rows()
    l2 = rows["llama-2-70b-h100-64-fp8-nemo2407-tp4-pp4-vp20"]["recipe"]["tp_overlap_cfg"]
    l3 = rows["llama-3-70b-h100-64-fp8-nemo2407-tp4-pp4-vp5-cp2"]["recipe"]["tp_overlap_cfg"]
    assert "ub_cfg_h100_h8192_tp4_mbs1_seqlen4096.yaml" in l2["source"]
    assert "ub_cfg_h100_h8192_tp4_mbs1_seqlen8192.yaml" in l3["source"]
    # bulk SMs (qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad): seqlen4096 L5-27 8/16/2/4, seqlen8192 L5-27 4/24/2/4
    bulk = ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")
    assert [l2["gemms"][g]["num_sm"] for g in bulk] == [8, 16, 2, 4]
    assert [l3["gemms"][g]["num_sm"] for g in bulk] == [4, 24, 2, 4]
    for t in (l2, l3):
        assert (t["gemms"]["proj_fprop"]["num_sm"], t["gemms"]["fc2_fprop"]["num_sm"]) == (24, 16)
        assert all(t["gemms"][g] == {"method": "ring_exchange"}
                   for g in ("qkv_fprop", "proj_dgrad", "fc1_fprop", "fc2_dgrad"))


def test_no_runs38_row_is_a_held_back_layout():
    # /work/shared/reference/HELD-BACK.md holds no NeMo 24.07 row; its H100 layouts are Llama 3.1 405B TP8 PP8 VP8
    # CP2, DeepSeek-V3, Grok-1, GPT-OSS, Kimi-K2 and Qwen3: none of these models is here
    held = {"llama-3.1-405b", "deepseek-v3", "grok-1", "gpt-oss-120b", "gpt-oss-20b", "kimi-k2", "qwen3-235b-a22b",
            "mt-nlg-530b", "gpt-1t"}
    assert not {r["model"] for r in _rows().values()} & held


def test_each_runs38_row_is_predicted_within_the_band_or_named_not_fitting():
    runs = {r.id: r for r in load_runs() if r.id in ALL}
    for rid, run in runs.items():
        result = predict(run)
        assert not _rows()[rid].get("known_gap")
        if rid in NOT_FITTING:
            assert not result.expressible and "does not fit" in result.reason
            continue
        error = result.predicted.tokens_per_s_per_device / run.measured.tokens_per_s_per_device - 1
        assert abs(error) <= 0.25, (rid, error)
