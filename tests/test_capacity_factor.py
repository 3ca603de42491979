"""Megatron's token dropping (--capacity-factor, --pad-to-capacity), written as its derivation from the code:

- Megatron-LM @ d98e8a64 megatron/core/transformer/moe/moe_utils.py L248-266: an expert's capacity is
  ceil(T k / E x CF) of a rank's T k routed copies; the router drops the copies beyond it. So the busiest
  expert-parallel rank, which carries R times the balanced share without dropping, carries min(R, CF);
- token_dispatcher.py L517-540 (drop-and-pad): every expert's input is padded to its capacity, so every rank carries
  exactly CF times the balanced share, padded rows included in the all-to-all; the counts are known on the host, so
  preprocess returns before the count all-gather (L557-576) and before any sync point (L457: cuda_sync_point
  stays "no_sync");
- transformer_config.py L1862-1866: padding without a capacity factor is refused; L1754-1761: the flex dispatcher's
  DeepEP backend refuses padding.

The load is `Rates.imbalance` (model/gpu/rates.py `expert_load`): the experts' GEMMs and the tokens' all-to-all
bytes scale with it. Here the experts' GEMM rows (m) are read from the plan's GEMM table, so the ratio is exact.
"""

from __future__ import annotations

import json

import pytest

from btacalc.config.execution import Layout
from btacalc.model.gpu.fixed import dispatcher_syncs
from btacalc.model.gpu.rates import expert_load
from support import resolved

BASE = ("--model qwen3-30b-a3b --hw b200 --devices 8 --ep 8 --global-batch 64 --micro-batch 2 --seq 4096 "
        "--json").split()


def _plan(cli, *extra: str) -> dict:
    code, out, err = cli("plan", *BASE, *extra)
    assert code == 0, err
    return json.loads(out)


def _expert_rows(d: dict) -> float:
    """The rows each expert GEMM runs on the busiest rank: m = load x b s k EP / E."""
    return next(p for p in d["phases"] if p["name"] == "experts")["gemms"][0]["m"]


def _rows(d: dict) -> dict[str, dict]:
    return {c["name"]: c for c in d["throughput"]["collectives"]}


@pytest.mark.parametrize("imbalance, factor, pad, load", [
    (1.0, None, False, 1.0),  # dropless, balanced
    (1.5, None, False, 1.5),  # dropless: R
    (1.5, 1.2, False, 1.2),  # dropped at capacity: min(R, CF)
    (1.1, 1.2, False, 1.1),  # under capacity: nothing dropped
    (1.5, 1.25, True, 1.25),  # padded: CF whatever R
    (1.0, 1.25, True, 1.25),
])
def test_the_busiest_rank_carries_min_r_cf_or_cf_padded(imbalance, factor, pad, load):
    problem = resolved("qwen3-30b-a3b", "b200", Layout(devices=8, expert_parallel=8), routing_imbalance=imbalance,
                       capacity_factor=factor, pad_to_capacity=pad)
    assert expert_load(problem) == pytest.approx(load, rel=1e-12)


def test_padded_at_one_rank_every_expert_still_runs_its_capacity():
    one = resolved("qwen3-30b-a3b", "b200", Layout(devices=1), capacity_factor=1.25, pad_to_capacity=True)
    assert expert_load(one) == pytest.approx(1.25)
    assert expert_load(resolved("qwen3-30b-a3b", "b200", Layout(devices=1), capacity_factor=1.25)) == 1.0


def test_padding_scales_the_experts_and_the_tokens_exchange(cli):
    plain, padded = _plan(cli), _plan(cli, "--capacity-factor", "1.25", "--pad-to-capacity")
    assert padded["inputs"]["capacity_factor"] == 1.25 and padded["inputs"]["pad_to_capacity"]
    assert _expert_rows(plain) == 2 * 4096 * 8 * 8 / 128  # b s k EP / E at load 1
    assert _expert_rows(padded) == pytest.approx(1.25 * _expert_rows(plain), rel=1e-12)
    a2a = _rows(plain)["expert_all_to_all"], _rows(padded)["expert_all_to_all"]
    assert a2a[1]["message_bytes"] == pytest.approx(1.25 * a2a[0]["message_bytes"], rel=1e-12)


def test_drop_and_pad_makes_no_count_gather_and_no_sync(cli):
    assert "moe_token_counts" in _rows(_plan(cli, "--capacity-factor", "1.0"))
    assert "moe_token_counts" not in _rows(_plan(cli, "--capacity-factor", "1.0", "--pad-to-capacity"))
    layout = Layout(devices=8, expert_parallel=8)
    assert dispatcher_syncs(resolved("qwen3-30b-a3b", "b200", layout, capacity_factor=1.0)).forward_per_layer == 1
    padded = resolved("qwen3-30b-a3b", "b200", layout, capacity_factor=1.0, pad_to_capacity=True)
    assert dispatcher_syncs(padded).forward_per_layer == 0


def test_the_launch_carries_both_flags_and_reads_them_back(cli, tmp_path):
    launch = tmp_path / "launch.sh"
    code, _, err = cli("plan", *BASE[:-1], "--capacity-factor", "1.25", "--pad-to-capacity", "--emit", "megatron",
                       "-o", str(launch))
    assert code == 0, err
    text = launch.read_text()
    assert "--moe-expert-capacity-factor 1.25" in text and "--moe-pad-expert-input-to-capacity" in text
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "b200", "--json")
    assert code == 0, err
    inputs = json.loads(out)["inputs"]
    assert (inputs["capacity_factor"], inputs["pad_to_capacity"]) == (1.25, True)


@pytest.mark.parametrize("extra, words", [
    (("--pad-to-capacity",), "needs --capacity-factor"),
    (("--capacity-factor", "0"), "from 0.01"),
    (("--capacity-factor", "-1"), "from 0.01"),
    (("--capacity-factor", "17", "--pad-to-capacity"), "at most E/k = 16"),
    (("--capacity-factor", "1", "--pad-to-capacity", "--deepep"), "deepep backend does not support"),
])
def test_bad_input_is_one_line(cli, extra, words):
    code, out, err = cli("plan", *BASE, *extra)
    assert code == 2 and err.count("\n") == 1 and words in err, err


@pytest.mark.parametrize("model, hw, words", [("qwen3-30b-a3b", "wse3", "wafer-scale run's MoE layers are dropless"),
                                              ("llama-3-8b", "h100", "the model is dense")])
def test_a_factor_that_changes_nothing_is_refused(cli, model, hw, words):
    code, out, err = cli("plan", "--model", model, "--hw", hw, "--capacity-factor", "1")
    assert code == 2 and err.count("\n") == 1 and words in err, err


def test_the_stored_activations_scale_with_the_same_load(cli):
    """The routed phases' stored bytes scale with the load, the rest do not: stored(load) = A + B x load, so padding
    to 1.25 adds a quarter of what dropless R = 2 adds (review22: removing the load from the stored bytes left every
    other test passing)."""
    def stored(*extra: str) -> float:
        return _plan(cli, *extra)["memory_bytes"]["stored_activations"]

    base = stored()
    doubled = stored("--routing-imbalance", "2") - base
    padded = stored("--capacity-factor", "1.25", "--pad-to-capacity") - base
    assert doubled > 0
    assert padded == pytest.approx(0.25 * doubled, rel=1e-9)


def test_hybridep_makes_no_sync_under_drop_and_pad():
    """token_dispatcher.py L1113-1127: under drop-and-pad HybridEP's permuted token count is the capacity's, so
    fused_a2a.py L415-417 dispatches non-blocking and DeepEP's executor makes no cudaStreamSynchronize (review22)."""
    layout = Layout(devices=8, expert_parallel=8, deepep=True, hybridep=True)
    assert dispatcher_syncs(resolved("qwen3-30b-a3b", "b200", layout)).forward_per_layer == 1
    padded = resolved("qwen3-30b-a3b", "b200", layout, capacity_factor=1.0, pad_to_capacity=True)
    assert dispatcher_syncs(padded).forward_per_layer == 0


def test_dropping_without_padding_refuses_the_preprocess_graph(cli):
    """transformer_config.py L2839-2850: the all-to-all dispatcher copies the dropped routing's sizes to the host in
    its preprocess, which a moe_preprocess CUDA graph cannot hold; padded, the sizes are the host's own."""
    scope = ("--cuda-graph-scope", "moe_router,moe_preprocess")
    code, out, err = cli("plan", *BASE, *scope, "--capacity-factor", "1.0")
    assert code == 2 and err.count("\n") == 1 and "DtoH copies" in err, err
    code, _, err = cli("plan", *BASE, *scope, "--capacity-factor", "1.0", "--pad-to-capacity")
    assert code == 0, err


@pytest.mark.parametrize("balancing, refused", [
    (None, False), ("aux_loss", False), ("seq_aux_loss", False), ("global_aux_loss", False), ("none", False),
    ("sinkhorn", True), (["aux_loss", "sinkhorn"], True), (["seq_aux_loss", "global_aux_loss"], False),
])
def test_a_capacity_factor_needs_an_aux_loss_balancing(balancing, refused):
    """Megatron-Core (transformer_config.py L1836-1860 @ d98e8a64): with any capacity factor given, every load-
    balancing type must be aux_loss, seq_aux_loss, global_aux_loss or none (nargs +: each entry of a list); the
    default is aux_loss. A negative factor (dropless) is checked too: the check sits in the same branch."""
    from btacalc.config.megatron_rules import violations

    for factor in (1.0, -1.0):
        args = {"num_experts": 8, "moe_router_topk": 2, "num_attention_heads": 8, "add_bias_linear": False,
                "moe_expert_capacity_factor": factor}
        if balancing is not None:
            args["moe_router_load_balancing_type"] = balancing
        names = [r.name for r in violations(args, {})]
        assert ("capacity-factor-balancing" in names) == refused, (factor, names)
    assert violations({"num_experts": 8, "moe_router_topk": 2, "num_attention_heads": 8, "add_bias_linear": False,
                       "moe_router_load_balancing_type": "sinkhorn"}, {}) == []  # dropless: no rule


def test_a_sinkhorn_launch_with_a_capacity_factor_is_refused_in_one_line(cli, tmp_path):
    launch = tmp_path / "launch.sh"
    code, _, err = cli("plan", *BASE[:-1], "--capacity-factor", "1.25", "--emit", "megatron", "-o", str(launch))
    assert code == 0, err
    launch.write_text(launch.read_text().replace("--moe-expert-capacity-factor 1.25",
                                                 "--moe-expert-capacity-factor 1.25 --moe-router-load-balancing-type "
                                                 "sinkhorn"))
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "b200")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "transformer_config.py:1839" in err and "only works with the aux_loss" in err
