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
