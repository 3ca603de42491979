"""review24 (D3): a layout search with tensor parallelism fixed and TransformerEngine's userbuffers overlap asked for
(`--tp 2 --tp-comm-overlap --search`) stopped with an internal error (exit 3): the search stacks its candidates'
layouts into one with array sizes, and `Layout.userbuffers` took the truth value of the TP array. The search now
evaluates the candidates that run the overlap apart from those that do not (planning/search.py `_evaluate`), and
its winner is timed as `plan` times that layout."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("tp", ["2", "4"])
def test_a_search_with_the_tp_overlap_times_its_winner_as_plan_does(cli, tp):
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--tp", tp,
                         "--tp-comm-overlap", "--search", "--json")
    assert code == 0, err
    d = json.loads(out)
    best, first = d["best"], d["ranking"][0]
    assert best["parallelism"]["overlaps"]["tp_comm"] is True
    assert best["parallelism"]["tensor_parallel"] == first["tensor_parallel"] == int(tp)
    assert best["throughput"]["step_time_s"] == pytest.approx(first["step_time_s"], rel=1e-9)
    assert best["throughput"]["phase_share"]["tp_comm"] > 0


def test_the_overlap_costs_what_plan_says_in_the_search_too(cli):
    """The same layout planned with and without the overlap: the search's winner is the plan with it."""
    args = ("--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--tp", "2")
    code, out, err = cli("plan", *args, "--tp-comm-overlap", "--search", "--json")
    assert code == 0, err
    first = json.loads(out)["ranking"][0]
    code, out, err = cli("plan", *args, "--tp-comm-overlap", "--cp", str(first["context_parallel"]),
                         "--pp", str(first["pipeline_parallel"]), "--micro-batch", str(first["micro_batch"]),
                         "--global-batch", str(first["micro_batch"] * first["micro_batches"] * first["data_parallel"]),
                         "--json")
    assert code in (0, 1), err
    assert json.loads(out)["throughput"]["step_time_s"] == pytest.approx(first["step_time_s"], rel=1e-9)


def test_a_search_scores_its_candidates_with_the_overlap_asked_for(cli):
    """`--tp-comm-overlap --search` without `--tp`: the search's base layout is resolved at TP 1, where Megatron-LM
    drops the overlap, so every candidate was scored without it and the winner then planned with it (Llama 3 70B on
    64 H100: ranked 61.53 s at TP 2, planned 59.47 s). Each candidate with TP > 1 now runs the overlap it was asked
    for: the winner's score is its plan's step time, and no TP 1 candidate carries it."""
    args = ("--model", "llama-3-70b", "--hw", "h100", "--devices", "64", "--search", "--json")
    code, out, err = cli("plan", *args, "--tp-comm-overlap")
    assert code == 0, err
    d = json.loads(out)
    best, first = d["best"], d["ranking"][0]
    assert best["throughput"]["step_time_s"] == pytest.approx(first["step_time_s"], rel=1e-9)
    assert best["parallelism"]["overlaps"]["tp_comm"] is (first["tensor_parallel"] > 1)
    code, out, err = cli("plan", *args)
    assert code == 0, err
    without = json.loads(out)
    assert without["best"]["parallelism"]["overlaps"]["tp_comm"] is False
    assert first["step_time_s"] < without["ranking"][0]["step_time_s"]  # the overlap hides TP communication


def test_a_pytorch_fsdp_search_with_async_tp_ranks_tp_above_one(cli):
    """hostile30 D4: `--fsdp --fsdp-impl fsdp2 --tp-comm-overlap --search` without `--tp` was refused (the base,
    resolved at TP 1, met plan's refusal of async TP at TP 1) where Megatron's search runs. torchtitan applies async TP
    only where TP is enabled (parallelize_llama.py L49-73 @ 820504e2) and plan refuses it at TP 1, so the search ranks
    TP > 1 only, each candidate with the overlap, and its winner plans to its score with the overlap on."""
    args = ("--model", "llama-3-8b", "--hw", "h100", "--devices", "64", "--fsdp", "--fsdp-impl", "fsdp2")
    code, out, err = cli("plan", *args, "--tp-comm-overlap", "--search", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["ranking"] and all(r["tensor_parallel"] > 1 for r in d["ranking"])
    best, first = d["best"], d["ranking"][0]
    assert best["parallelism"]["overlaps"]["tp_comm"] is True and best["parallelism"]["fsdp_impl"] == "fsdp2"
    assert best["throughput"]["step_time_s"] == pytest.approx(first["step_time_s"], rel=1e-9)
    # the same search with TP fixed at the winner's size ranks the same winner
    code, out, err = cli("plan", *args, "--tp", str(first["tensor_parallel"]), "--tp-comm-overlap", "--search", "--json")
    assert code == 0, err
    assert json.loads(out)["ranking"][0]["step_time_s"] == pytest.approx(first["step_time_s"], rel=1e-9)
