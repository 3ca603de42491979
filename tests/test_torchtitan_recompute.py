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


def test_a_megatron_search_still_ranks_its_modules(cli):
    code, out, err = cli("plan", "--model", "llama-3-70b", "--hw", "h100", "--devices", "64", "--search", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert "op" not in {r["recompute"] for r in d["ranking"]}
    assert d["candidates"] > 0
