"""The busiest expert-parallel rank under Megatron's force-balanced benchmark routing (model/routing_balance.py),
each test a derivation from an independent source: closed forms and Harter's table for the normal maxima, a
simulation of Megatron's RandomSTE routing for the load, the arithmetic by hand for a measured run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from btacalc.model.routing_balance import expected_max_standard_normal, forced_balance_imbalance
from btacalc.planning.measured import express, forced_balance_of, load_runs


def test_expected_normal_maxima_match_closed_forms_and_harters_table() -> None:
    # e_2 = 1/sqrt(pi) and e_3 = 3/(2 sqrt(pi)) in closed form; e_4 and e_8 from Harter (1961), Biometrika 48, Table 1
    assert expected_max_standard_normal(1) == pytest.approx(0.0, abs=1e-12)
    assert expected_max_standard_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max_standard_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-9)
    assert expected_max_standard_normal(4) == pytest.approx(1.02938, abs=1e-5)
    assert expected_max_standard_normal(8) == pytest.approx(1.42360, abs=1e-5)


def test_the_busiest_rank_matches_a_simulation_of_megatrons_random_routing() -> None:
    # Megatron's RandomSTE: fresh standard-normal logits per token, top-k of them, tokens counted per rank of
    # E/n contiguous experts; the mean over trials of max load / mean load against the formula
    tokens, experts, top_k, ranks, trials = 2048, 32, 4, 8, 1500
    rng = np.random.default_rng(7)
    ratios = np.empty(trials)
    for t in range(trials):
        logits = rng.standard_normal((tokens, experts), dtype=np.float32)
        chosen = np.argpartition(-logits, top_k - 1, axis=1)[:, :top_k]
        loads = np.bincount((chosen // (experts // ranks)).ravel(), minlength=ranks)
        ratios[t] = loads.max() / (tokens * top_k / ranks)
    standard_error = ratios.std() / math.sqrt(trials)
    assert forced_balance_imbalance(tokens, experts, top_k, ranks) == pytest.approx(ratios.mean(), abs=4 * standard_error)
    assert ratios.mean() > 1.02  # the simulated imbalance is real at this size, not a numerical 1


def test_qwen3_30b_at_ep_8_by_hand() -> None:
    # 8 x 4,096 tokens, top-8 of 128 experts, 16 per rank: hypergeometric variance per token, Harter's e_8
    tokens, p = 8 * 4096, 1 / 8
    sigma = math.sqrt(tokens * 8 * p * (1 - p) * (128 - 8) / (128 - 1))
    by_hand = 1 + 1.42360 * sigma / (tokens * 8 * p * math.sqrt(1 - p))
    assert forced_balance_imbalance(tokens, 128, 8, 8) == pytest.approx(by_hand, rel=1e-6)
    assert by_hand == pytest.approx(1.0076, abs=1e-4)


def test_no_expert_parallelism_is_balanced_and_a_bad_layout_is_refused() -> None:
    assert forced_balance_imbalance(4096, 128, 8, 1) == 1.0
    with pytest.raises(ValueError):
        forced_balance_imbalance(4096, 128, 8, 6)  # 6 ranks cannot hold 128 experts evenly


def test_a_force_balanced_run_plans_its_ranks_sampling_imbalance() -> None:
    runs = {r.id: r for r in load_runs()}
    # Megatron-MoE-ModelZoo run_235b.sh L40: TP 2, EP 8, micro-batch 1, --moe-router-force-load-balancing;
    # with sequence parallelism each rank dispatches 4,096 / 2 tokens, the EP group 8 x 2,048
    pp32 = runs["qwen3-235b-a22b-h100-256-bf16-mzoo-a2a-tp2-pp32-vp3-ep8"]
    assert pp32.router_force_load_balancing
    request, _ = express(pp32)
    assert request is not None
    assert request.routing_imbalance == pytest.approx(forced_balance_imbalance(8 * 4096 // 2, 128, 8, 8))
    assert forced_balance_of(pp32)[0] == request.routing_imbalance
    # NeMo's Mixtral performance runs drop tokens at capacity 1.0 instead: no flag, the balanced plan
    mixtral = runs["mixtral-8x7b-b200-64-fp8-287"]
    assert not mixtral.router_force_load_balancing
    request, _ = express(mixtral)
    assert request is not None and request.routing_imbalance == 1.0
