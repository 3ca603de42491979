"""`compare --loss` (thirty-first session) planned each row with the loss given, but no row said so: the loss is a
plan input (the plan header's "loss te_fused"), not one of the run options compare's notes list. A row now lists
`--loss X` among its run options where the loss was given, and nothing where it is the default (shown in plan with
its reason)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("given, expected", [((), []), (("--loss", "te_fused"), ["--loss te_fused"]),
                                            (("--loss", "stored"), ["--loss stored"])])
def test_a_compare_row_says_which_loss_it_was_planned_with(cli, given, expected):
    code, out, err = cli("compare", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", *given, "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["run_options"] for r in rows] == [expected]
    code, out, _ = cli("compare", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", *given)
    assert ("run options --loss" in " ".join(out.split())) == bool(expected)
    assert all(f"run options {flag}" in " ".join(out.split()) for flag in expected)
