"""llm-foundry's MPT throughput table (task runs8): the A100-40GB rows at 128 GPUs and every MPT-70B row (A100-40GB,
A100-80GB, H100), as published in github.com/mosaicml/llm-foundry scripts/train/benchmarking/README.md @ 5e85bd62d.

Each row's tokens/s per GPU and step time are derived here from the table's own columns (Throughput T/s over # GPUs;
GlobalBatchSize x SeqLen over T/s), and the T/s is checked against the table's independent MFU column with the
README's own MFU formula (section "MFU": (3 flops_per_seq + 3 attn_flops_per_seq) x seq_per_sec / (gpus x peak)):
a transcription error in any of the four columns fails it. The MPT-70B preset's count is derived by hand from
mpt-70b.yaml and set against the table's NumParams. None of this uses btacalc's FLOP or timing code."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from btacalc.config.execution import RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.params import param_counts
from btacalc.model.problem import make_problem

RUNS = Path(__file__).resolve().parents[1] / "btacalc" / "data" / "measured_runs.json"
SEQ = 2048
V = 50368  # mpt-*.yaml vocab_size
# GPU_AVAILABLE_FLOPS the table's MFU divides by: the BF16 dense peaks (A100 312 TFLOP/s, H100 SXM 989 TFLOP/s)
PEAK = {"a100-40gb": 312e12, "a100-80gb": 312e12, "h100": 989e12}
# d_model, n_layers of each size (llm-foundry @ 5e85bd62d scripts/train/yamls/pretrain/mpt-<size>.yaml L13-15)
SHAPE = {"1b": (2048, 24), "3b": (2560, 32), "7b": (4096, 32), "13b": (5120, 40), "30b": (7168, 48),
         "70b": (8192, 80)}

# The published rows, transcribed column by column:
# run id, size, GPUs, MFU %, HFU %, MicroBatchSize, GradAccum, GlobalBatchSize, T/s, T/s/GPU, MP Mode,
# Activation Checkpointing, NumParams
TABLE = [
    ("mpt-1b-a100-40gb-128-bf16-llmfoundry", "1b", 128, 54.41, 54.41, 10, 1, 1280, 2386897, 18647, "PURE", False,
     1315950592),
    ("mpt-3b-a100-40gb-128-bf16-llmfoundry", "3b", 128, 54.8, 54.8, 6, 1, 768, 1220885, 9538, "PURE", False,
     2651837440),
    ("mpt-7b-a100-40gb-128-bf16-llmfoundry", "7b", 128, 50.14, 66.85, 18, 1, 2304, 463749, 3623, "PURE", True,
     6658859008),
    ("mpt-13b-a100-40gb-128-bf16-llmfoundry", "13b", 128, 51.93, 69.24, 16, 1, 2048, 252444, 1972, "PURE", True,
     12853954560),
    ("mpt-30b-a100-40gb-128-bf16-llmfoundry", "30b", 128, 52.25, 69.66, 6, 1, 768, 110803, 865, "PURE", True,
     29975214080),
    ("mpt-70b-a100-40gb-128-bf16-llmfoundry", "70b", 128, 48.91, 65.21, 4, 1, 512, 48194, 376, "PURE", True,
     64862437376),
    ("mpt-70b-a100-40gb-64-bf16-llmfoundry", "70b", 64, 35.87, 47.82, 2, 1, 128, 17672, 276, "PURE", True,
     64862437376),
    ("mpt-70b-a100-80gb-64-bf16-llmfoundry", "70b", 64, 53.33, 71.1, 8, 4, 2048, 26274, 410, "PURE", True,
     64862437376),
    ("mpt-70b-a100-80gb-32-bf16-llmfoundry", "70b", 32, 48.56, 64.75, 2, 16, 1024, 11962, 373, "PURE", True,
     64862437376),
    ("mpt-70b-h100-32-bf16-llmfoundry", "70b", 32, 36.15, 48.2, 2, 16, 1024, 28242, 882, "DEFAULT", True,
     64862437376),
    ("mpt-70b-h100-64-bf16-llmfoundry", "70b", 64, 42.57, 56.76, 8, 4, 2048, 66523, 1039, "DEFAULT", True,
     64862437376),
    ("mpt-70b-h100-128-bf16-llmfoundry", "70b", 128, 43.36, 57.81, 8, 1, 1024, 135490, 1058, "DEFAULT", True,
     64862437376),
    ("mpt-70b-h100-256-bf16-llmfoundry", "70b", 256, 42.42, 56.56, 8, 1, 2048, 265149, 1035, "DEFAULT", True,
     64862437376),
    ("mpt-70b-h100-512-bf16-llmfoundry", "70b", 512, 41.25, 55.0, 8, 1, 4096, 515636, 1007, "DEFAULT", True,
     64862437376),
]


def _runs() -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(RUNS.read_text())["runs"]}


@pytest.mark.parametrize("row", TABLE, ids=[r[0] for r in TABLE])
def test_row_is_the_published_row(row):
    rid, size, gpus, mfu, hfu, mbs, ga, gbs, tps, tps_gpu, mp, ac, nparams = row
    run = _runs()[rid]
    assert run["role"] == "check"
    assert (run["model"], run["devices"], run["seq"], run["precision"]) == (f"mpt-{size}", gpus, SEQ, "bf16")
    assert (run["micro_batch"], run["global_batch"], run["tp"], run["pp"], run["fsdp"]) == (mbs, gbs, 1, 1, True)
    assert gbs == gpus * mbs * ga  # data parallel over every GPU: GBS = DP x MBS x GA
    assert run["recompute"] == run["recipe"]["recompute"] == ("full" if ac else "none")
    # the large-scale table's sweep (scripts/train/benchmarking/sweep.py @ 5e85bd62d L42-81) passes --attn_impl flash
    # for 1b, 3b, 7b and 70b with flash-attn 2.4.2 (docs/runs.md "mpt6"); every other row ran attn_impl's triton
    large = "Large Scale" in run["source"]
    kernel = "flash-attn-2-varlen" if large and size in ("1b", "3b", "7b", "70b") else "triton-flash"
    assert run["recipe"]["fsdp_impl"] == "torch" and run["recipe"]["attention_kernel"] == kernel
    # PURE reduces the gradients in bf16 (--grad-bytes 2); DEFAULT in fp32 (the default 4)
    assert run["recipe"].get("grad_bytes", 4) == (2 if mp == "PURE" else 4)
    # tokens/s per GPU: the table's T/s over its GPUs, printed truncated to a whole token
    assert math.floor(tps / gpus) == tps_gpu
    assert run["measured"]["tokens_per_s_per_device"] == tps_gpu
    assert run["measured"]["step_time_s"] == pytest.approx(gbs * SEQ / tps, abs=1e-4)


@pytest.mark.parametrize("row", TABLE, ids=[r[0] for r in TABLE])
def test_throughput_reproduces_the_published_mfu_and_hfu(row):
    rid, size, gpus, mfu, hfu, _mbs, _ga, _gbs, tps, _tps_gpu, _mp, ac, nparams = row
    d, layers = SHAPE[size]
    seq_per_s = tps / SEQ
    flops_per_seq = 2 * nparams * SEQ
    attn_flops_per_seq = layers * 2 * 2 * d * SEQ**2
    peak = PEAK[_runs()[rid]["hw"]]
    model_flops = (3 * flops_per_seq + 3 * attn_flops_per_seq) * seq_per_s
    assert 100 * model_flops / (gpus * peak) == pytest.approx(mfu, abs=0.05)
    # HFU counts the checkpointed forward again (factor 4) only where activation checkpointing is on
    factor = 4 if ac else 3
    hardware_flops = factor * (flops_per_seq + attn_flops_per_seq) * seq_per_s
    assert 100 * hardware_flops / (gpus * peak) == pytest.approx(hfu, abs=0.05)


def test_tokens_per_s_of_the_70b_a100_40gb_row_by_hand():
    # 70b, 128 x A100-40GB: Throughput 48194 T/s (23 S/s printed rounded), GlobalBatchSize 512 sequences of 2048
    step_s = 512 * 2048 / 48194
    assert step_s == pytest.approx(21.7574, abs=1e-4)
    assert 48194 / 128 == 376.515625  # printed truncated: 376
    run = _runs()["mpt-70b-a100-40gb-128-bf16-llmfoundry"]
    assert run["measured"] == {"tokens_per_s_per_device": 376.0, "step_time_s": pytest.approx(step_s, abs=1e-4)}


def test_mpt_70b_count_by_hand_equals_the_logged_one():
    # MPT block with biases: 12 h^2 + 13 h per layer; tied embedding V h; learned positions 2048 h; final norm 2h
    h, layers = SHAPE["70b"]
    by_hand = layers * (12 * h * h + 13 * h) + V * h + SEQ * h + 2 * h
    assert by_hand == 64862437376
    spec = load_preset("mpt-70b")
    # the run at its 2048 tokens (semantics20: a longer sequence grows the learned table, params.position_rows)
    assert param_counts(make_problem(spec, resolve_hardware("a100-40gb"), RunOptions(seq_len=SEQ))).total == by_hand


def test_every_runs8_row_is_a_check_run():
    ids = {r[0] for r in TABLE}
    runs = _runs()
    assert ids <= set(runs)
    assert all(runs[i]["role"] == "check" and "task runs8" in runs[i]["notes"] for i in ids)
