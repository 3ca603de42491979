"""hostile30: a campaign on the FSDP2 x TP build, the path checks and the precision-aware optimizer (twenty-third
session). Each test is a finding's derivation: what the plan must equal, or the one-line refusal Megatron's or
torchtitan's code gives."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("extra", [("--fsdp", "--fsdp-impl", "fsdp2"), ()])
@pytest.mark.parametrize("precision", ["fp8-current", "nvfp4"])
def test_a_tp_1_search_winner_under_a_low_precision_recipe_plans_to_its_score(cli, extra, precision):
    """A layout search stacks its candidates with sequence parallelism on (planning/search.py `_stack`), TP 1 ones
    too; TE's sequence-parallel gather of the quantised input (`precision.sp_gather_extra_bytes`) read only that flag,
    so a TP 1 candidate was charged a gather its plan does not run: Llama 3 8B on 64 H100, FSDP2, fp8-current ranked
    4.6077 s where its plan says 4.5938 s. At TP 1 nothing is gathered: the score is the plan's step."""
    hw = "b200" if precision == "nvfp4" else "h100"
    base = ("plan", "--model", "llama-3-8b", "--hw", hw, "--devices", "64", "--tp", "1", "--precision", precision,
            *extra, "--json")
    code, out, err = cli(*base, "--search")
    assert code == 0, err
    search = json.loads(out)
    best = search["ranking"][0]
    code, out, err = cli(*base, "--global-batch", str(search["global_batch"]), "--micro-batch", str(best["micro_batch"]),
                         "--recompute", best["recompute"], "--pp", str(best["pipeline_parallel"]), "--vp",
                         str(best["virtual_pipeline"]), "--cp", str(best["context_parallel"]))
    assert code == 0, err
    plan = json.loads(out)
    assert plan["throughput"]["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)
    assert plan["memory_bytes"]["total"] == best["memory_bytes"]


def test_a_bridge_recipe_with_torch_fsdp2_is_refused_as_a_launch_is(cli, tmp_path):
    # Megatron-Bridge's DistributedInitConfig.use_torch_fsdp2 was listed as not modelled and planned as Megatron DDP
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--emit", "bridge")
    assert code == 0, err
    path = tmp_path / "recipe.txt"
    path.write_text("\n".join(line for line in out.splitlines() if not line.startswith("#"))
                    + "\ndist.use_torch_fsdp2=True\n")
    code, out, err = cli("plan", "--hw", "h100", "--devices", "16", "--from-bridge", str(path))
    assert code == 2 and "dist.use_torch_fsdp2" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("tp", ["1", "8"])
def test_bf16_adam_moments_are_refused_under_pytorch_fsdp(cli, tp):
    # bf16 moments are the precision-aware optimizer's (RunOptions.param_remainders), which a PyTorch FSDP run has not
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--fsdp", "--fsdp-impl",
                         "fsdp2", "--tp", tp, "--optimizer-moments", "bf16")
    assert code == 2 and "--optimizer-moments is a Megatron-LM option" in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("option, suffix", [("--from-megatron", ".sh"), ("--from-bridge", ".yaml")])
def test_an_imported_run_without_hw_asks_for_a_gpu_profile(cli, tmp_path, option, suffix):
    # the default wse3 refused the launch's GPU options as if the user had given them with a wafer
    emit = "megatron" if option == "--from-megatron" else "bridge"
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--emit", emit)
    assert code == 0, err
    path = tmp_path / f"run{suffix}"
    path.write_text(out)
    code, out, err = cli("plan", option, str(path), "--devices", "16")
    assert code == 2 and err.strip() == f"btacalc: error: {option} plans a GPU run: give --hw (a GPU profile: btacalc hw list)"
