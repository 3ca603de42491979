"""Narayanan et al. 2021 (arXiv 2104.04473), Table 1 weak scaling on Selene A100 (task runs6): the presets' parameter
counts against the sizes the Table states, derived by hand from the paper's Eq. 2, and the runs' tokens/s per GPU
derived from the Table's teraFLOP/s per GPU with the paper's Eq. 3 (FLOPs per iteration with activation
recomputation), independent of btacalc's FLOP and parameter code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from btacalc.config.execution import RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.params import model_param_counts, published_checks
from btacalc.model.problem import make_problem

RUNS = Path(__file__).resolve().parents[1] / "btacalc" / "data" / "measured_runs.json"
V, S = 51200, 2048  # section 5.1: vocabulary 51,200, sequence 2,048

# Table 1 rows shipped (the 529.6B TP8 PP35 and 1T TP8 PP64 rows are held back and not here):
# size as printed, heads, hidden h, layers l, TP, PP, GPUs, batch B, teraFLOP/s per GPU
TABLE1 = [("1.7", 24, 2304, 24, 1, 1, 32, 512, 137), ("3.6", 32, 3072, 30, 2, 1, 64, 512, 138),
          ("7.5", 32, 4096, 36, 4, 1, 128, 512, 142), ("18.4", 48, 6144, 40, 8, 1, 256, 1024, 135),
          ("39.1", 64, 8192, 48, 8, 2, 512, 1536, 138), ("76.1", 80, 10240, 60, 8, 4, 1024, 1792, 140),
          ("145.6", 96, 12288, 80, 8, 8, 1536, 2304, 148), ("310.1", 128, 16384, 96, 8, 16, 1920, 2160, 155)]


def _runs() -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(RUNS.read_text())["runs"]}


@pytest.mark.parametrize("size,heads,h,layers", [(r[0], r[1], r[2], r[3]) for r in TABLE1])
def test_preset_count_is_the_tables_size(size, heads, h, layers):
    # Eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) = l (12 h^2 + 13 h) + (V + s) h, plus the final
    # LayerNorm (2h), which Eq. 2 leaves out; the Table prints P in billions to one decimal.
    eq2 = layers * (12 * h * h + 13 * h) + (V + S) * h
    assert round(eq2 / 1e8) / 10 == float(size)
    spec = load_preset(f"gpt-{size}b")
    assert (spec.hidden_size, spec.num_heads, spec.num_layers, spec.vocab_size) == (h, heads, layers, V)
    counts = model_param_counts(make_problem(spec, resolve_hardware("a100-80gb"), RunOptions()))
    assert counts.total == eq2 + 2 * h
    checks = published_checks(spec, counts)
    assert checks and all(c.matches for c in checks), checks


def test_tokens_per_s_of_the_145_6b_row_from_eq3():
    # 145.6B: l = 80, h = 12288, B = 2304, 1536 GPUs at 148 teraFLOP/s each. Eq. 3:
    # F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per iteration.
    flops = 96 * 2304 * 2048 * 80 * 12288**2 * (1 + 2048 / (6 * 12288) + 51200 / (16 * 80 * 12288))
    step_s = flops / (1536 * 148e12)
    tokens_per_s_per_gpu = 2304 * 2048 / step_s / 1536
    assert step_s == pytest.approx(24.817, abs=1e-3)
    assert tokens_per_s_per_gpu == pytest.approx(123.78, abs=0.01)
    run = _runs()["gpt-145.6b-a100-80gb-1536-megatron2021"]
    assert run["measured"]["tokens_per_s_per_device"] == pytest.approx(tokens_per_s_per_gpu, abs=0.01)
    assert run["measured"]["step_time_s"] == pytest.approx(step_s, abs=1e-3)


@pytest.mark.parametrize("row", TABLE1, ids=[r[0] for r in TABLE1])
def test_every_row_matches_the_table(row):
    size, _heads, h, layers, tp, pp, gpus, batch, tflops = row
    run = _runs()[f"gpt-{size}b-a100-80gb-{gpus}-megatron2021"]
    assert (run["model"], run["tp"], run["pp"], run["devices"], run["global_batch"], run["seq"]) == (
        f"gpt-{size}b", tp, pp, gpus, batch, S)
    assert (run["precision"], run["recompute"], run["role"]) == ("fp16", "full", "check")
    # tokens/s per GPU = X / (FLOPs per token) with Eq. 3 divided by B s: 96 l h^2 (...) / ... -> the batch drops out
    per_token = 96 * layers * h * h * (1 + S / (6 * h) + V / (16 * layers * h))
    assert run["measured"]["tokens_per_s_per_device"] == pytest.approx(tflops * 1e12 / per_token, abs=0.01)
    # the interleaved schedule needs the micro-batch count divisible by PP (Megatron-LM README of 2021)
    if run.get("vp"):
        dp = gpus // (tp * pp)
        assert (batch // (dp * run["micro_batch"])) % pp == 0 and layers % (pp * run["vp"]) == 0
