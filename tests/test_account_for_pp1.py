"""Megatron-LM's account-for flags at pipeline size 1 (twenty-sixth session).

Megatron-LM reads `--account-for-embedding-in-pipeline-split` and `--account-for-loss-in-pipeline-split` only to
check that the layers, plus one for each flag, divide by the pipeline size (Megatron-LM @ d98e8a64
megatron/training/arguments.py L990-997); at PP 1 that always holds and no layer moves, so the launch runs as
without them. Megatron-LM's own Qwen3-235B GB200 MoE recipe sets them at PP 1 (examples/moe_recipes @ e5ad09802d).
btacalc refused such a launch; a plan that asks for them at PP 1 is still refused, as an option with no effect.
"""

from __future__ import annotations

import json


def _launch(cli, tmp_path, extra: str = ""):
    code, launch, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--emit", "megatron")
    assert code in (0, 1) and "--pipeline-model-parallel-size 1" in launch, err
    path = tmp_path / ("with.sh" if extra else "without.sh")
    path.write_text(launch.replace("--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 1" + extra))
    return path


def test_the_account_for_flags_at_pp_1_plan_as_the_launch_without_them(cli, tmp_path):
    flags = " --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"
    plans = []
    for path in (_launch(cli, tmp_path, flags), _launch(cli, tmp_path)):
        code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100", "--json")
        assert code in (0, 1), err
        plans.append(json.loads(out))
    with_flags, without = plans
    assert with_flags["throughput"] == without["throughput"]
    assert with_flags["memory_bytes"] == without["memory_bytes"]
    assert with_flags["memory_stages"] == without["memory_stages"]


def test_the_dropped_flags_are_said(cli, tmp_path):
    path = _launch(cli, tmp_path, " --account-for-loss-in-pipeline-split")
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100")
    assert code in (0, 1), err
    assert "at pipeline size 1: no effect" in " ".join(out.split())


def test_a_plan_that_asks_for_them_at_pp_1_is_still_refused(cli):
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--pp", "1",
                         "--account-for-loss-in-pipeline-split")
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_bridge_overrides_without_a_global_batch_say_the_plan_takes_btacalcs(cli, tmp_path):
    # hostile34 (noted): a Megatron-Bridge override file without train.global_batch_size runs its recipe's batch,
    # which btacalc cannot see; it was planned at btacalc's default in silence
    code, overrides, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--emit", "bridge")
    assert code in (0, 1) and "train.global_batch_size=" in overrides, err
    path = tmp_path / "run.yaml"
    path.write_text("\n".join(line for line in overrides.splitlines()
                              if not line.startswith("train.global_batch_size=")) + "\n")
    code, out, err = cli("plan", "--from-bridge", str(path), "--hw", "h100", "--devices", "8")
    assert code in (0, 1), err
    assert "sets no train.global_batch_size" in " ".join(out.split())
    kept = tmp_path / "kept.yaml"
    kept.write_text(overrides)
    code, out, err = cli("plan", "--from-bridge", str(kept), "--hw", "h100", "--devices", "8")
    assert code in (0, 1), err
    assert "sets no train.global_batch_size" not in " ".join(out.split())
