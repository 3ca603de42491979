"""`--optimizer adam|sgd` (plan), and a launch's or Bridge overrides' optimizer: review21 found `--optimizer sgd` in a
Megatron launch listed as "not modelled" and planned with Adam's state, though the catalogue holds SGD's
(formulas/training_state.toml: fp32 master weights and one momentum). Each expectation is the state's arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE = ("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2")


def _json(cli, *args: str) -> dict:
    code, out, err = cli(*BASE, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_sgd_holds_master_weights_and_one_momentum(cli):
    """TP 2, ZeRO-1 over DP 4 (so that Adam's plan fits): a TP rank holds half of every weight matrix (the embedding
    and LM head vocabulary-parallel too) and all of the RMSNorm weights, R = (2L + 1)h; the optimizer state shards
    that over DP 4: Adam's (4 master + 4 + 4 moments) B x ((P - R)/2 + R) / 4, SGD's (4 master + 4 momentum) B x the same.
    P, Llama 3 8B's parameters from its config (h 4096, 32 layers, 8 of 32 KV heads, FFN 14336, vocabulary 128256,
    untied): 2Vh + L(h(h + 2h/4) + h² + 3h·ffn + 2h) + h = 8,030,261,248, Meta's 8.03B."""
    h, layers, ffn, vocab = 4096, 32, 14336, 128256
    params = 2 * vocab * h + layers * (h * (h + 2 * h // 4) + h * h + 3 * h * ffn + 2 * h) + h
    assert params == 8_030_261_248
    shard = (params - (2 * layers + 1) * h) // 2 + (2 * layers + 1) * h
    adam, sgd = _json(cli), _json(cli, "--optimizer", "sgd")
    assert adam["memory_bytes"]["optimizer_state"] == 12 * shard // 4
    assert sgd["memory_bytes"]["optimizer_state"] == 8 * shard // 4
    assert sgd["inputs"]["optimizer"] == "sgd" and adam["inputs"]["optimizer"] == "adam"


def test_a_launch_says_sgd_and_reads_it_back(cli, tmp_path):
    """--emit megatron writes --optimizer sgd (adam is Megatron-LM's default, arguments.py L2913: no flag); the launch
    read back plans SGD's state, and so do the Bridge overrides (optimizer.optimizer, OptimizerConfig.optimizer)."""
    code, launch, err = cli(*BASE, "--optimizer", "sgd", "--emit", "megatron")
    assert code == 0 and "--optimizer sgd" in launch
    code, adam_launch, _ = cli(*BASE, "--emit", "megatron")
    assert "--optimizer" not in adam_launch.replace("--use-distributed-optimizer", "")
    path = tmp_path / "launch.sh"
    path.write_text(launch)
    back = json.loads(cli("plan", "--from-megatron", str(path), "--hw", "h100", "--json")[1])
    assert back["inputs"]["optimizer"] == "sgd"
    code, overrides, _ = cli(*BASE, "--optimizer", "sgd", "--emit", "bridge")
    assert "optimizer.optimizer=sgd" in overrides.splitlines()
    path.write_text(overrides)
    back = json.loads(cli("plan", "--from-bridge", str(path), "--hw", "h100", "--devices", "8", "--json")[1])
    assert back["inputs"]["optimizer"] == "sgd"


@pytest.mark.parametrize("name", ["muon", "lion", "soap"])
def test_an_optimizer_whose_state_btacalc_does_not_hold_is_refused_not_planned_as_adam(cli, tmp_path, name):
    code, launch, _ = cli(*BASE, "--emit", "megatron")
    path = tmp_path / "launch.sh"
    path.write_text(launch.replace("pretrain_gpt.py", f"pretrain_gpt.py --optimizer {name}", 1))
    proc = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--from-megatron", str(path), "--hw", "h100"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and f"--optimizer {name}" in proc.stderr and "adam and sgd" in proc.stderr


def test_bf16_moments_with_sgd_is_one_line(cli):
    code, out, err = cli(*BASE, "--optimizer", "sgd", "--optimizer-moments", "bf16")
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "no Adam moments" in err
