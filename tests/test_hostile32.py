"""hostile32: a campaign on compare, whatif, sweep, formulas, run files and the FSDP2 recompute rules
(twenty-fifth session). Each test is a finding: the one-line refusal, or the number the plan must equal."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("spelling, canonical", [("core_attn", "selective"), ("mlp,core_attn", "core_attn,mlp")])
def test_a_search_takes_a_recompute_spelling_plan_takes(cli, spelling, canonical):
    # D1: the search ranked the option's raw text, which the formulas assert is canonical: an internal error
    base = ("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--search", "--json", "--recompute")
    code, out, err = cli(*base, spelling)
    assert code == 0, err
    code2, out2, err2 = cli(*base, canonical)
    assert code2 == 0, err2
    got, want = json.loads(out), json.loads(out2)
    assert got["ranking"] == want["ranking"]
    assert {row["recompute"] for row in got["ranking"]} == {canonical}


@pytest.mark.parametrize("option", [("--recompute-layers", "4"), ("--checkpoint-early-stop",)])
@pytest.mark.parametrize("fsdp", [(), ("--fsdp", "--fsdp-impl", "fsdp2")])
def test_a_search_with_a_full_recompute_option_ranks_full(cli, option, fsdp):
    # D2: refused "needs --recompute full, got none" (the profile's default) though the search chooses the policy
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--search", "--json",
                         *option, *fsdp)
    assert code == 0, err
    ranking = json.loads(out)["ranking"]
    assert ranking and {row["recompute"] for row in ranking} == {"full"}


def test_a_search_under_a_profile_defaulting_to_full_plans_its_winner(cli, tmp_path):
    # D2: with the profile's default full the base resolved; the search ranked rc none first, then its own
    # winner's plan refused --checkpoint-early-stop without full (exit 2 after the whole search)
    from btacalc.paths import data_dir

    text = (data_dir("hardware_profiles") / "h100.toml").read_text()
    assert 'recompute = "none"' in text and 'name = "h100"' in text
    path = tmp_path / "hf.toml"
    path.write_text(text.replace('recompute = "none"', 'recompute = "full"', 1).replace('name = "h100"', 'name = "hf"', 1))
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", str(path), "--devices", "8", "--search", "--json",
                         "--checkpoint-early-stop")
    assert code == 0, err
    found = json.loads(out)
    assert found["best"]["inputs"]["checkpoint_early_stop"] is True
    assert found["best"]["throughput"]["step_time_s"] == pytest.approx(found["ranking"][0]["step_time_s"], rel=1e-12)
    assert {row["recompute"] for row in found["ranking"]} == {"full"}


def test_an_fsdp2_search_ranks_its_policies_whatever_the_profiles_default(cli, tmp_path):
    # D3: the base resolved at the profile's default (selective), which FSDP2 refuses; the search never ranks it
    from btacalc.paths import data_dir

    text = (data_dir("hardware_profiles") / "h100.toml").read_text()
    path = tmp_path / "hx.toml"
    path.write_text(text.replace('recompute = "none"', 'recompute = "selective"', 1).replace('name = "h100"', 'name = "hx"', 1))
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", str(path), "--devices", "8", "--fsdp",
                         "--fsdp-impl", "fsdp2", "--search", "--json")
    assert code == 0, err
    assert {row["recompute"] for row in json.loads(out)["ranking"]} <= {"none", "full", "op"}


def test_a_compare_search_takes_a_recompute_module_list(cli):
    # D1, through compare: `compare --search --recompute core_attn` was the same internal error
    code, out, err = cli("compare", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--search",
                         "--recompute", "core_attn", "--json", "-q")
    assert code == 0, err
    assert [row["recompute"] for row in json.loads(out)["rows"]] == ["selective"]
