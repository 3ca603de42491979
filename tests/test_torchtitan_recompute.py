"""A PyTorch FSDP2 plan (torchtitan) recomputes as torchtitan can (twenty-fourth session; noted since review24).

torchtitan's activation checkpointing has three modes, none, full and selective, and selective is either its per-op
policy or every n-th layer (torchtitan @ 820504e2 torchtitan/config_manager.py L462-470 ActivationCheckpoint,
torchtitan/models/llama3/parallelize_llama.py L236-247). Megatron-Core's recompute modules (`selective` = core_attn, or a
list such as core_attn,mlp) are not among them: plan had counted them under FSDP2 as Megatron's, and a layout search
under FSDP2 ranked `selective` and never torchtitan's own op policy."""

from __future__ import annotations

import json

import pytest

FSDP2 = ("--model", "llama-3-8b", "--hw", "h100", "--devices", "64", "--fsdp", "--fsdp-impl", "fsdp2")


@pytest.mark.parametrize("policy", ["selective", "core_attn,mlp", "layernorm"])
def test_megatron_module_recomputation_is_refused_under_fsdp2(cli, policy):
    code, out, err = cli("plan", *FSDP2, "--recompute", policy)
    assert code == 2 and f"--recompute {policy} is Megatron-Core's module recomputation" in err, err
    assert "give --recompute none, full or op" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("policy", ["none", "full", "op"])
def test_torchtitan_policies_plan_under_fsdp2(cli, policy):
    code, out, err = cli("plan", *FSDP2, "--recompute", policy, "--json")
    assert code in (0, 1), err
    assert json.loads(out)["inputs"]["recompute"] == policy


def test_fsdp1_keeps_module_lists(cli):
    """llm-foundry (FSDP1) picks the modules it checkpoints (activation_checkpointing_target): not refused here."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "64", "--fsdp", "--fsdp-impl",
                         "torch", "--recompute", "selective", "--json")
    assert code in (0, 1), err


def test_a_search_under_fsdp2_ranks_torchtitan_policies(cli):
    code, out, err = cli("plan", "--model", "llama-3-70b", "--hw", "h100", "--devices", "64", "--fsdp", "--fsdp-impl",
                         "fsdp2", "--search", "--json")
    assert code == 0, err
    d = json.loads(out)
    ranked = {r["recompute"] for r in d["ranking"]}
    assert ranked <= {"none", "full", "op"} and "op" in ranked, ranked
    assert d["best"]["throughput"]["step_time_s"] == pytest.approx(d["ranking"][0]["step_time_s"], rel=1e-9)


def _policies(*layout: str) -> tuple[str, ...]:
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.resolution import resolve_execution
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import resolve_model
    from btacalc.planning.search import _policies as policies

    model, hw = resolve_model("llama-3-8b"), resolve_hardware("h100")
    fsdp = {"fsdp": True, "fsdp_impl": layout[0]} if layout else {}
    attention = {"attention": layout[1]} if len(layout) > 1 else {}
    return policies(model, resolve_execution(ExecutionRequest(devices=64, **fsdp, **attention), model, hw))


def test_each_search_ranks_its_own_framework_policies():
    """review26 D4: Megatron's search ranks its policies (none, selective = core_attn, full), FSDP2's torchtitan's,
    the op policy only where it applies (eager attention: not SDPA's flash kernel on the policy's save list)."""
    assert _policies() == ("none", "selective", "full")
    assert _policies("fsdp2") == ("none", "full", "op")
    assert _policies("fsdp2", "eager") == ("none", "full")
    assert _policies("torch") == ("none", "selective", "full")  # FSDP1: as before (llm-foundry picks modules)


def test_a_search_under_fsdp2_with_eager_attention_ranks_without_op(cli):
    code, out, err = cli("plan", *FSDP2, "--attention", "eager", "--search", "--json")
    assert code == 0, err
    assert {r["recompute"] for r in json.loads(out)["ranking"]} <= {"none", "full"}


def test_async_tp_without_a_tp_above_one_says_why(cli):
    """review26 D1: an FSDP2 async-TP search with no TP > 1 layout named a global batch the user never gave."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--fsdp", "--fsdp-impl",
                         "fsdp2", "--tp-comm-overlap", "--precision", "fp8", "--search")
    assert code == 2 and "torchtitan's async TP" in err and "at --tp 2: --precision fp8" in err, err
    assert "--global-batch" not in err and len(err.strip().splitlines()) == 1


def test_a_profile_default_module_list_is_named_as_the_profile_default(cli, tmp_path):
    """hostile32 (noted): under a user profile whose default recompute is a Megatron module list, a plain FSDP2 plan
    was refused naming `--recompute selective`, which the user had not given; it names the profile's default."""
    from btacalc.paths import data_dir

    text = (data_dir("hardware_profiles") / "h100.toml").read_text()
    assert 'recompute = "none"' in text and 'name = "h100"' in text
    path = tmp_path / "hx.toml"
    path.write_text(text.replace('recompute = "none"', 'recompute = "selective"', 1).replace('name = "h100"',
                                                                                            'name = "hx"', 1))
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", str(path), "-n", "8", "--fsdp", "--fsdp-impl", "fsdp2")
    assert code == 2 and "hx's default --recompute selective is Megatron-Core's" in err, err
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", str(path), "-n", "8", "--fsdp", "--fsdp-impl", "fsdp2",
                         "--recompute", "selective")  # given: named as the option
    assert code == 2 and "error: --recompute selective is Megatron-Core's" in err, err
