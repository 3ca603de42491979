"""The precision-aware optimizer's master weights (RunOptions.param_remainders), each case written as its derivation
from the code:

- Megatron-LM @ d98e8a64 megatron/core/optimizer/optimizer_config.py L192-195: store_param_remainders defaults to
  True; L407-414: use_precision_aware_optimizer_no_fp8_or_ds_fp8 holds with the precision-aware optimizer and no FP8
  recipe or the delayed one; optimizer/__init__.py L574-588: then TransformerEngine's FusedAdam gets
  master_weights, an fp32 master dtype and store_param_remainders (not under Megatron-FSDP, L578-581);
  distrib_optimizer.py L1007-1009: the master state is int16 with bf16 parameters;
- TransformerEngine @ d0067d0 pytorch/optimizers/fused_adam.py L213-214 (remainders need fp32 master weights),
  L414-415 (torch.zeros_like(param, dtype=torch.int16)).

So Adam's optimizer state per parameter is 2 (int16 remainder) + 4 + 4 (fp32 moments) = 10 B, or 2 + 2 + 2 = 6 B with
bf16 moments (which need the precision-aware optimizer); under a recipe other than delayed-scaling FP8 Megatron's
distributed optimizer keeps fp32 main weights itself: 4 + 4 + 4 = 12 B.
"""

from __future__ import annotations

import json

import pytest

from btacalc.config.execution import Layout
from btacalc.config.presets import resolve_model
from btacalc.model.state import bytes_per_param

from support import resolved


@pytest.mark.parametrize("hw, run, optimizer_bytes", [
    ("h100", dict(), 4 + 4 + 4),
    ("h100", dict(precision_aware_optimizer=True), 2 + 4 + 4),
    ("h100", dict(moment_bytes=2), 2 + 2 + 2),
    ("h100", dict(precision_aware_optimizer=True, precision="fp8"), 2 + 4 + 4),  # delayed scaling: FusedAdam's
    ("h100", dict(precision_aware_optimizer=True, precision="fp8-current"), 4 + 4 + 4),  # the DistOpt's fp32 main
    ("b200", dict(moment_bytes=2, precision="mxfp8"), 4 + 2 + 2),
    ("h100", dict(precision_aware_optimizer=True, precision="fp16", bytes_per_element=2), 4 + 4 + 4),  # bf16 only
])
def test_optimizer_bytes_per_parameter(hw, run, optimizer_bytes):
    problem = resolved(resolve_model("llama-3-8b"), hw, Layout(devices=8, zero_stage=1, devices_per_node=8), attention="flash", **run)
    assert bytes_per_param(problem)["optimizer"] == optimizer_bytes


def test_megatron_fsdp_keeps_its_own_main_weights():
    problem = resolved(resolve_model("llama-3-8b"), "h100", Layout(devices=8, zero_stage=3, fsdp=True, devices_per_node=8),
                       attention="flash", precision_aware_optimizer=True)
    assert bytes_per_param(problem)["optimizer"] == 4 + 4 + 4


def test_the_plan_says_it_and_megatron_reads_it_back(cli, tmp_path):
    base = "--model llama-3.2-1b --hw h100 --devices 8 --global-batch 64".split()
    code, out, err = cli("plan", *base, "--json")
    plain = json.loads(out)
    code, out, err = cli("plan", *base, "--precision-aware-optimizer", "--json")
    aware = json.loads(out)
    assert aware["inputs"]["master_weights"] == "remainders" and plain["inputs"]["master_weights"] == "fp32"
    # ZeRO-1 over 8 ranks: each rank holds ceil(P / 8) master weights, 2 B each fewer
    params = plain["model"]["params_total"]
    saved = plain["memory_bytes"]["optimizer_state"] - aware["memory_bytes"]["optimizer_state"]
    assert saved == pytest.approx(2 * params / 8, rel=1e-6)
    code, text, err = cli("plan", *base, "--precision-aware-optimizer", "--emit", "megatron")
    assert "--use-precision-aware-optimizer" in text and "--exp-avg-dtype" not in text
    launch = tmp_path / "run.sh"
    launch.write_text(text)
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["master_weights"] == "remainders"
    code, out, err = cli("plan", *base, "--precision-aware-optimizer")
    assert "int16 master remainders" in out


@pytest.mark.parametrize("extra, fragment", [
    ("--hw h100 --optimizer sgd", "TransformerEngine's FusedAdam; the optimizer is sgd"),
    ("--hw wse3", "a wafer-scale run's optimizer state is MemoryX's"),
])
def test_refused_where_megatron_has_no_such_optimizer(cli, extra, fragment):
    code, out, err = cli("plan", "--model", "llama-3-8b", *extra.split(), "--precision-aware-optimizer")
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
