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


# review28: the FP8 recipe use_precision_aware_optimizer_no_fp8_or_ds_fp8 tests is the optimizer config's, which both
# front ends fill for a precision with no FP8 recipe: Megatron-LM copies every argument OptimizerConfig has a field
# for (Megatron-LM @ d98e8a64 megatron/training/training.py L2609-2616), --fp8-recipe among them, default delayed
# (transformer_config.py L594-596): remainders for bf16 and NVFP4; Megatron-Bridge copies its MixedPrecisionConfig's,
# default tensorwise (Megatron-Bridge @ 067f987d src/megatron/bridge/training/mixed_precision.py L50-52, setup
# L113-157, run before the optimizer's finalize: training/config.py L2012-2016, L1395): the distributed optimizer's
# fp32 main weights (distrib_optimizer.py L422-447), 4 + 4 + 4 B.
SMALL = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512 "
         "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 32000 --use-distributed-optimizer "
         "--use-precision-aware-optimizer")


def _optimizer_bytes(cli, tmp_path, *source: str, text: str, name: str = "run.sh", hw: str = "b200") -> tuple[str, float]:
    path = tmp_path / name
    path.write_text(text)
    code, out, err = cli("plan", *source, str(path), "--hw", hw, "--devices", "8", "--json")
    assert code == 0, err
    plan = json.loads(out)
    # each of the 8 ranks holds P / 8 of the optimizer state (ZeRO-1): bytes per parameter
    return plan["inputs"]["master_weights"], plan["memory_bytes"]["optimizer_state"] * 8 / plan["model"]["params_total"]


@pytest.mark.parametrize("extra, master, per_param", [
    ("", "remainders", 2 + 4 + 4),  # --fp8-recipe delayed by default: no FP8 recipe or the delayed one
    ("--fp8-recipe tensorwise", "fp32", 4 + 4 + 4),  # stated without --fp8-format: it still reaches the optimizer
    ("--fp4-format e2m1", "remainders", 2 + 4 + 4),  # NVFP4 keeps the default delayed --fp8-recipe
    ("--fp8-format hybrid --fp8-recipe tensorwise", "fp32", 4 + 4 + 4),
    ("--fp8-format hybrid --fp8-recipe delayed", "remainders", 2 + 4 + 4),
])
def test_a_megatron_lm_launch_keeps_fp8_recipe_delayed_unless_it_says(cli, tmp_path, extra, master, per_param):
    got = _optimizer_bytes(cli, tmp_path, "--from-megatron", text=f"{SMALL} {extra}")
    assert got[0] == master and got[1] == pytest.approx(per_param, rel=1e-3)


BRIDGE = ("model.num_layers=2 model.hidden_size=256 model.num_attention_heads=4 model.seq_length=512 "
          "model.vocab_size=32000 train.micro_batch_size=1 train.global_batch_size=8 "
          "ddp.use_distributed_optimizer=True optimizer.use_distributed_optimizer=True "
          "optimizer.use_precision_aware_optimizer=True").replace(" ", "\n") + "\n"


@pytest.mark.parametrize("extra, master, per_param", [
    ("mixed_precision=bf16_mixed", "fp32", 4 + 4 + 4),  # MixedPrecisionConfig's tensorwise reaches the optimizer
    ("mixed_precision=bf16_mixed\nmixed_precision.fp8_recipe=delayed", "remainders", 2 + 4 + 4),
    ("mixed_precision=bf16_with_nvfp4_mixed\nmixed_precision.fp4_param_gather=false", "fp32", 4 + 4 + 4),
    ("mixed_precision=bf16_with_fp8_delayed_scaling_mixed", "remainders", 2 + 4 + 4),
])
def test_a_bridge_run_takes_its_mixed_precisions_fp8_recipe(cli, tmp_path, extra, master, per_param):
    got = _optimizer_bytes(cli, tmp_path, "-m", "llama-3.2-1b", "--from-bridge", text=BRIDGE + extra + "\n",
                           name="o.txt")
    assert got[0] == master and got[1] == pytest.approx(per_param, rel=1e-3)


def test_each_emitter_writes_the_optimizers_fp8_recipe_the_plan_has(cli, tmp_path):
    # a plan with remainders (Megatron-LM's delayed) emitted for Bridge writes mixed_precision.fp8_recipe=delayed, and
    # a Bridge run's tensorwise emitted for Megatron-LM writes --fp8-recipe tensorwise: each reads back as planned
    base = "--model llama-3.2-1b --hw h100 --devices 8 --global-batch 64 --precision-aware-optimizer".split()
    code, text, err = cli("plan", *base, "--emit", "bridge")
    assert "++mixed_precision.fp8_recipe=delayed" in text.splitlines()  # bridgemp: in the section written whole
    (tmp_path / "o.txt").write_text(text)
    code, out, err = cli("plan", "--from-bridge", str(tmp_path / "o.txt"), "--hw", "h100", "--devices", "8", "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["master_weights"] == "remainders"
    (tmp_path / "t.txt").write_text(text.replace("++mixed_precision.fp8_recipe=delayed\n",
                                                 "++mixed_precision.fp8_recipe=tensorwise\n"))
    code, launch, err = cli("plan", "--from-bridge", str(tmp_path / "t.txt"), "--hw", "h100", "--devices", "8",
                            "--emit", "megatron")
    assert "--fp8-recipe tensorwise" in launch and "--fp8-format" not in launch
    (tmp_path / "l.sh").write_text(launch)
    code, out, err = cli("plan", "--from-megatron", str(tmp_path / "l.sh"), "--hw", "h100", "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["master_weights"] == "fp32"


def test_without_the_distributed_optimizer_megatron_refuses_it(cli):
    # hostile29: get_megatron_optimizer raises "--use-precision-aware-optimizer only supported with distributed
    # optimizer" (Megatron-LM @ d98e8a64 megatron/core/optimizer/__init__.py L1054-1060) before the first step; the
    # Float16Optimizer path an earlier round planned here (fp32 master weights at ZeRO 0) is never reached
    for extra in (("--precision-aware-optimizer",), ("--optimizer-moments", "bf16")):
        code, out, err = cli("plan", "--model", "llama-3.2-1b", "--hw", "h100", "--devices", "8", "--global-batch",
                             "64", "--zero", "0", *extra)
        assert code == 2 and "only supported with distributed optimizer" in err, err
        assert len(err.strip().splitlines()) == 1


def test_on_one_gpu_the_precision_aware_optimizer_takes_the_distributed_optimizer(cli):
    # one GPU defaults to ZeRO 0; under the precision-aware optimizer it is Megatron's distributed optimizer over one
    # rank, which shards nothing and keeps the remainders: 2 B of int16 remainder and two 4 B moments per parameter
    code, out, err = cli("plan", "--model", "llama-3.2-1b", "--hw", "h100", "--devices", "1", "--global-batch", "8",
                         "--precision-aware-optimizer", "--json")
    assert code in (0, 1), err
    plan = json.loads(out)
    assert plan["parallelism"]["zero_stage"] == 1
    assert plan["inputs"]["master_weights"] == "remainders"
    assert plan["memory_bytes"]["optimizer_state"] == (2 + 4 + 4) * plan["model"]["params_total"]


def test_the_update_reads_the_16_bit_weight_beside_its_remainder():
    # TransformerEngine @ d0067d0 transformer_engine/common/multi_tensor/adam.cu AdamFunctorMasterParamRemainder:
    # reads g (4), p (2), p_remainder (2), m, v (4 + 4); writes p_remainder, p, m, v: 4 + 2 x 10 + 2 x 2 = 28 B, where
    # fp32 master weights read g, master, m, v and write them and the 16-bit weight: 4 + 2 x 12 + 2 = 30 B
    from btacalc.model.gpu.fixed import fixed_costs

    layout = Layout(devices=8, zero_stage=1, devices_per_node=8)
    kw = dict(attention="flash", gradient_bytes=4)  # fp32 main gradients, a GPU's default
    aware = resolved(resolve_model("llama-3-8b"), "h100", layout, precision_aware_optimizer=True, **kw)
    plain = resolved(resolve_model("llama-3-8b"), "h100", layout, **kw)
    rates = [bytes_per_param(p) for p in (aware, plain)]
    assert [(r["gradients"], r["optimizer"], r["weights"]) for r in rates] == [(4, 10, 2), (4, 12, 2)]
    times = [fixed_costs(p, 1e9, 0.0, r).optimizer_s for p, r in zip((aware, plain), rates)]
    assert times[0] / times[1] == pytest.approx((4 + 2 * 10 + 2 * 2) / (4 + 2 * 12 + 2))


def test_the_hybridep_rows_recipe_keeps_fp32_main_weights():
    # qwen3-30b-a3b-h100-16-389: Megatron-Bridge's 16-GPU recipe sets bf16_mixed and the precision-aware optimizer
    # (qwen3_moe.py L154, L157 @ 067f987d): its optimizer config holds tensorwise, so fp32 main weights
    from btacalc.planning.measured import express, load_runs

    run = next(r for r in load_runs() if r.id == "qwen3-30b-a3b-h100-16-389")
    request, _ = express(run)
    assert request is not None and request.precision_aware_optimizer and request.optimizer_fp8_recipe == "tensorwise"


def test_main_grads_dtype_bf16_is_read_as_bf16_gradient_buffers(cli, tmp_path):
    # Megatron-LM under --bf16 turns accumulate_allreduce_grads_in_fp32 on only with fp32 main gradients (arguments.py
    # L1213-1216 @ d98e8a64), and the DDP's grad_reduce_in_fp32 is that flag (training.py L2635): --main-grads-dtype
    # bf16 keeps the gradient buffers in bf16, 2 B per parameter as --grad-reduce-in-bf16 does
    grads = {}
    for extra in ("", "--main-grads-dtype bf16", "--grad-reduce-in-bf16"):
        (tmp_path / "l.sh").write_text(f"{SMALL} {extra}")
        code, out, err = cli("plan", "--from-megatron", str(tmp_path / "l.sh"), "--hw", "h100", "--devices", "8",
                             "--json")
        assert code == 0, err
        plan = json.loads(out)
        grads[extra] = plan["memory_bytes"]["gradients"] / plan["model"]["params_total"]
    assert grads[""] == pytest.approx(4, rel=1e-3)
    assert grads["--main-grads-dtype bf16"] == grads["--grad-reduce-in-bf16"] == pytest.approx(2, rel=1e-3)


# bridgedtype: NVFP4 parameters where FusedAdam keeps the master weights were planned with fp32 masters; Megatron-Core
# hands FusedAdam no shard of them (distrib_optimizer.py L404-409: no view(-1) of an NVFP4 tensor; L453: no fp32 main
# weight either, FusedAdam would hold it; L485-494: the optimizer's params are those shards), so the launch cannot train
@pytest.mark.parametrize("extra, refused", [
    ("--fp4-format e2m1 --fp4-param-gather", True),  # --fp8-recipe delayed by default: FusedAdam's masters
    ("--fp4-format e2m1 --fp4-param-gather --fp8-recipe tensorwise", False),  # Megatron-Core's own fp32 main weights
    ("--fp4-format e2m1", False),  # bf16 parameters: remainders
])
def test_nvfp4_parameters_without_a_shard_for_fusedadam_are_refused(cli, tmp_path, extra, refused):
    path = tmp_path / "run.sh"
    path.write_text(f"{SMALL} {extra}")
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "b200", "--devices", "8", "--json")
    assert (code == 2) == refused, err
    if refused:
        assert "hands FusedAdam no shard of an NVFP4 parameter" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("plan", "--model", "llama-3.2-1b", "--hw", "b200", "--devices", "8", "--precision", "nvfp4",
                         "--fp8-param-gather", "--precision-aware-optimizer", "--zero", "0")
    assert code == 2 and "only supported with distributed optimizer" in err, err  # (hostile29: no ZeRO 0 path)
