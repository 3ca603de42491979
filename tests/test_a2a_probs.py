"""Megatron's alltoall dispatcher exchanges the routing probabilities in an all-to-all of their own, written as its
derivation from the code (formulas/moe.toml, the dispatch phase's `a2a_calls`):

- Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py L705-724: token_dispatch calls
  all_to_all on the permuted tokens, then on the permuted probabilities; token_combine (L864-870) one all_to_all;
- tensor_parallel/mappings.py L469-484: each all_to_all's backward is one all_to_all of its gradient;
- DeepEP's dispatch (the flex dispatcher) carries the top-k weights in the same kernel call as the tokens.

So per layer and micro-batch: alltoall 2 + 2 (dispatch) + 1 + 1 (combine) = 6 all-to-alls, flex 1 + 1 + 1 + 1 = 4;
a full recompute re-runs each forward once more: alltoall 6 + 3 = 9, flex 4 + 2 = 6. The probabilities' bytes are
not counted (<= 4 B per routed copy against beta h), so the time they add is the calls' latency alone.
"""

from __future__ import annotations

import json

import pytest

from btacalc.catalogue.terms import ExchangeCalls, load_catalogue

LAYERS, MICRO_BATCHES = 48, 8  # qwen3-30b-a3b; global batch 64 / (DP 8 x micro-batch 1)
RUN = ("--model qwen3-30b-a3b --hw b200 --devices 8 --ep 8 --global-batch 64 --micro-batch 1 --seq 4096 "
       "--json").split()


def _a2a(cli, *extra: str) -> dict:
    code, out, err = cli("plan", *RUN, *extra)
    assert code == 0, err
    d = json.loads(out)
    assert d["parallelism"]["micro_batches"] == MICRO_BATCHES
    return next(c for c in d["throughput"]["collectives"] if c["name"] == "expert_all_to_all")


@pytest.mark.parametrize("recompute, alltoall, flex", [("none", 2 + 2 + 1 + 1, 1 + 1 + 1 + 1),
                                                       ("full", 2 + 2 + 1 + 1 + 2 + 1, 1 + 1 + 1 + 1 + 1 + 1)])
def test_calls_per_layer_and_micro_batch(cli, recompute, alltoall, flex):
    assert _a2a(cli, "--recompute", recompute)["calls"] == LAYERS * MICRO_BATCHES * alltoall
    assert _a2a(cli, "--recompute", recompute, "--deepep")["calls"] == LAYERS * MICRO_BATCHES * flex


def test_the_probabilities_add_latency_only(cli):
    """The row's message is a token call's (its buffer x (EP - 1)/EP); the time is calls x latency + the tokens'
    bytes at one rate, the same with or without a re-run's calls."""
    rates = []
    for recompute, token_calls in (("none", 1 + 1 + 1 + 1), ("full", 1 + 1 + 1 + 1 + 1 + 1)):
        row = _a2a(cli, "--recompute", recompute)
        assert row["message_bytes"] == pytest.approx(row["buffer_bytes"] * 7 / 8)
        assert row["message_calls"] == LAYERS * MICRO_BATCHES * token_calls
        wire = row["message_bytes"] * LAYERS * MICRO_BATCHES * token_calls
        rates.append(wire / (row["time_s"] - row["calls"] * row["latency_s"]))
    assert rates[0] == pytest.approx(rates[1], rel=1e-9)


def test_the_counts_follow_the_dispatcher_and_where_the_weights_apply():
    calls = next(p for p in load_catalogue() if p.name == "dispatch").a2a_calls
    assert calls is not None and (calls.forward, calls.backward) == (2, 2)
    experts = {"routing_weights": "experts"}
    assert calls.applies("alltoall", experts)
    assert not calls.applies("flex", experts) and not calls.applies("allgather", experts)
    # weights applied at the combine (Megatron-Core <= 0.12): the tokens travel alone
    assert not calls.applies("alltoall", {"routing_weights": "combine"})


def test_an_unknown_feature_is_refused():
    with pytest.raises(ValueError, match="unknown feature"):
        ExchangeCalls(dispatcher="alltoall", when={"nonsense": True}, forward=2, backward=2, source="x y z")


@pytest.mark.parametrize("etp", [1, 2, 4])
def test_under_etp_the_tokens_keep_their_calls_and_each_other_call_is_an_empty_one(etp):
    """review20: the ETP all-gather / reduce-scatter of the received copies (token_dispatcher.py L746-751) runs once
    for the tokens and once for the probabilities per pass. Per layer and micro-batch without re-runs: 4 token calls
    carry every byte, 2 more carry none. So time(6 calls, 4 of them tokens) = time(4 token calls) + 2 x time(one empty
    call), and at ETP 1 there is no group and no time."""
    from btacalc.config.execution import Layout
    from btacalc.model.gpu.collectives import expert_tensor_parallel_time
    from support import resolved

    problem = resolved("qwen3-30b-a3b", "h100", Layout(devices=64, expert_parallel=8, expert_tensor_parallel=etp,
                                                       tensor_parallel=etp, devices_per_node=8))
    volume = 4 * 4096 * 8 * 2048 * 2.0  # the phase's a2a bytes of one micro-batch: 4 passes of k s h beta
    both = expert_tensor_parallel_time(problem, volume, 6, 4)
    tokens = expert_tensor_parallel_time(problem, volume, 4, 4)
    empty = expert_tensor_parallel_time(problem, 0.0, 1, 1)
    if etp == 1:
        assert both == tokens == empty == 0
        return
    assert empty > 0 and both == pytest.approx(tokens + 2 * empty, rel=1e-12)
    # the bytes are not spread over the probabilities' calls: six calls of a sixth each would time differently
    assert both != pytest.approx(expert_tensor_parallel_time(problem, volume, 6, 6), rel=1e-6)
