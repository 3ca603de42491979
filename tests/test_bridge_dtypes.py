"""A Megatron-Bridge file's optimizer dtypes, each case written from the code that reads them:

- Megatron-Bridge @ 067f987d src/megatron/bridge/training/utils/omegaconf_utils.py L498-505: a string override of a
  field that holds a torch.dtype goes through str_to_dtype; utils/activation_map.py L94-115: the names it knows
  ("fp32", "float32", "32", "32-true"; "fp16", "float16", "16", "16-mixed"; "bf16", "bfloat16", "bf16-mixed"; "fp8",
  "float8_e4m3fn", "float8_e5m2"), with "torch.<name>" for those without a dot, a leading digit or a hyphen;
- Megatron-LM @ d98e8a64 megatron/core/optimizer/optimizer_config.py L197-207 (the four dtypes, fp32 by default),
  L466-479 (fp32 asserted without the precision-aware optimizer); main_grads_dtype is read nowhere else in
  Megatron-Core (the gradient buffers are the DDP config's grad_reduce_in_fp32, which Bridge's mixed precision sets:
  bf16_mixed True, mixed_precision.py L185-198 @ 067f987d).

Before this, `optimizer.exp_avg_dtype=torch.bfloat16` was refused as "both Adam moments in fp32 or both in bf16",
`optimizer.main_params_dtype` was listed as not modelled (an fp16 master planned as fp32), and a main_grads_dtype of
bf16 would have halved the gradient buffers the mixed precision keeps in fp32.
"""

from __future__ import annotations

import json

import pytest

BASE = ("model.num_layers=2 model.hidden_size=256 model.num_attention_heads=4 model.seq_length=512 "
        "model.vocab_size=32000 train.micro_batch_size=1 train.global_batch_size=8 "
        "ddp.use_distributed_optimizer=True optimizer.use_distributed_optimizer=True mixed_precision=bf16_mixed")


def _plan(cli, tmp_path, *lines: str, aware: bool = True) -> tuple[int, dict, str]:
    text = BASE.split() + (["optimizer.use_precision_aware_optimizer=True"] if aware else []) + list(lines)
    path = tmp_path / "overrides.txt"
    path.write_text("\n".join(text) + "\n")
    code, out, err = cli("plan", "-m", "llama-3.2-1b", "--from-bridge", str(path), "--hw", "h100", "--devices", "8",
                         "--json")
    return code, (json.loads(out) if code == 0 else {}), err


def _per_param(plan: dict, part: str) -> float:
    # ZeRO-1 over 8 ranks: each holds 1/8 of the optimizer state; gradient buffers are whole
    share = 8 if part == "optimizer_state" else 1
    return plan["memory_bytes"][part] * share / plan["model"]["params_total"]


@pytest.mark.parametrize("spelling", ["bf16", "bfloat16", "bf16-mixed", "torch.bfloat16", "torch.bf16"])
def test_bf16_moments_in_every_spelling_bridge_reads(cli, tmp_path, spelling):
    # bf16_mixed's fp8_recipe is tensorwise, so the distributed optimizer keeps fp32 masters: 4 + 2 + 2 B
    code, plan, err = _plan(cli, tmp_path, f"optimizer.exp_avg_dtype={spelling}",
                            f"optimizer.exp_avg_sq_dtype={spelling}")
    assert code == 0, err
    assert _per_param(plan, "optimizer_state") == pytest.approx(4 + 2 + 2, rel=1e-3)


@pytest.mark.parametrize("spelling", ["fp32", "float32", "32-true", "torch.float32"])
def test_fp32_spellings_are_the_default(cli, tmp_path, spelling):
    code, plan, err = _plan(cli, tmp_path, f"optimizer.exp_avg_dtype={spelling}",
                            f"optimizer.main_params_dtype={spelling}")
    assert code == 0, err
    assert _per_param(plan, "optimizer_state") == pytest.approx(4 + 4 + 4, rel=1e-3)


@pytest.mark.parametrize("line, fragment", [
    ("optimizer.main_params_dtype=torch.float16", "--main-params-dtype fp16"),  # FusedAdam's fp16 masters
    ("optimizer.main_params_dtype=half", "Megatron-Bridge reads a dtype from a string"),  # not a name Bridge knows
    ("optimizer.exp_avg_dtype=16.5", "Megatron-Bridge reads a dtype from a string"),  # set as given: not a dtype
    ("optimizer.exp_avg_dtype=32", "optimizer.exp_avg_dtype=32: Megatron-Bridge"),  # an override's 32 is an int
    ("optimizer.exp_avg_dtype=bf16", "both Adam moments in fp32 or both in bf16"),  # exp_avg_sq stays fp32
])
def test_dtypes_btacalc_does_not_model_are_refused_in_one_line(cli, tmp_path, line, fragment):
    code, plan, err = _plan(cli, tmp_path, line)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("mixed, gradient_bytes", [
    ([], 4),  # bf16_mixed: grad_reduce_in_fp32 True, whatever main_grads_dtype says
    (["mixed_precision.grad_reduce_in_fp32=false"], 2),
])
def test_main_grads_dtype_leaves_the_mixed_precisions_buffers(cli, tmp_path, mixed, gradient_bytes):
    code, plan, err = _plan(cli, tmp_path, "optimizer.main_grads_dtype=torch.bfloat16", *mixed)
    assert code == 0, err
    assert _per_param(plan, "gradients") == pytest.approx(gradient_bytes, rel=1e-6)
    listed = {row["flag"]: row["reason"] for row in plan["imported"]["ignored"]}
    assert listed["optimizer.main_grads_dtype"].startswith("no effect under the precision-aware optimizer")


def test_a_quoted_32_in_yaml_is_str_to_dtypes_fp32(cli, tmp_path):
    path = tmp_path / "recipe.yaml"
    lines = [f"{k}: {v}" for k, v in (x.split("=") for x in BASE.split() if "." in x.split("=")[0])]
    path.write_text("\n".join(lines) + "\nmixed_precision: bf16_mixed\noptimizer:\n  use_precision_aware_optimizer: true\n"
                    "  exp_avg_dtype: '32'\n")
    code, out, err = cli("plan", "-m", "llama-3.2-1b", "--from-bridge", str(path), "--hw", "h100", "--devices", "8",
                         "--json")
    assert code == 0, err
    assert _per_param(json.loads(out), "optimizer_state") == pytest.approx(4 + 4 + 4, rel=1e-3)


def test_lower_dtypes_without_the_precision_aware_optimizer_are_refused(cli, tmp_path):
    # Megatron-Core's OptimizerConfig asserts fp32 there (L466-479)
    for line in ("optimizer.main_grads_dtype=torch.bfloat16", "optimizer.exp_avg_dtype=bfloat16"):
        code, plan, err = _plan(cli, tmp_path, line, aware=False)
        assert code == 2 and "without --use-precision-aware-optimizer" in err, (line, err)


def test_emitted_moments_read_back(cli, tmp_path):
    base = "--model llama-3.2-1b --hw h100 --devices 8 --global-batch 64 --optimizer-moments bf16".split()
    code, text, err = cli("plan", *base, "--emit", "bridge")
    assert code == 0, err
    assert "optimizer.exp_avg_dtype=bf16" in text.splitlines()
    (tmp_path / "o.txt").write_text(text)
    code, out, err = cli("plan", "--from-bridge", str(tmp_path / "o.txt"), "--hw", "h100", "--devices", "8", "--json")
    assert code == 0, err
    code, direct, err = cli("plan", *base, "--json")
    assert json.loads(out)["memory_bytes"]["optimizer_state"] == json.loads(direct)["memory_bytes"]["optimizer_state"]
