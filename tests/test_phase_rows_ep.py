"""A routed phase's row is one device's under expert parallelism (freshuser23's report; session 31).

README (plan --json): `phases` is one decoder layer "on the same basis" as flops_per_step, one device's share. The
catalogue counts the experts' parameters and the weights their forward reads over all E experts (formulas/moe.toml:
the timing model divides, model/gpu/costs.py `_traffic`); the row showed them undivided, so on 16 H100 at EP 8 the
experts' row read 0.6 G parameters and about 177 FLOP/byte where each GPU holds and reads 1/16 of them. Expected
values: Qwen3-30B-A3B's config (E 128 experts of 3 h f_e weights, h 2,048, f_e 768) and bf16 weights (2 bytes)."""

from __future__ import annotations

import json

import pytest

E, H, F_E = 128, 2048, 768
ARGS = ("--model", "qwen3-30b-a3b", "--devices", "16", "--global-batch", "64", "--json")


def _experts(cli, hw: str, *extra: str) -> dict:
    code, out, err = cli("plan", "--hw", hw, *ARGS, *extra)
    assert code in (0, 1), err
    return next(p for p in json.loads(out)["phases"] if p["name"] == "experts")


def test_the_experts_row_holds_one_devices_share_of_the_weights(cli):
    row = _experts(cli, "h100", "--tp", "2", "--ep", "8")
    shards = 8 * 2  # EP x ETP (ETP = TP, Megatron-Core's default)
    assert row["params"] == E * 3 * H * F_E // shards
    # EP 4 against EP 8 at TP 1 (DP 16, ETP 1): each GPU runs k x T routed tokens either way (4 ranks' tokens over 32
    # of 128 experts, or 8 ranks' over 16), so the same FLOPs and activation traffic, and reads 1/4 or 1/8 of the
    # experts' bf16 weights
    four, eight = _experts(cli, "h100", "--ep", "4"), _experts(cli, "h100", "--ep", "8")
    assert (four["params"], eight["params"]) == (E * 3 * H * F_E // 4, E * 3 * H * F_E // 8)
    assert four["flops_forward"] == eight["flops_forward"]
    assert four["bytes_moved"] - eight["bytes_moved"] == 2 * E * 3 * H * F_E * (1 / 4 - 1 / 8)
    assert row["arithmetic_intensity"] == pytest.approx(row["flops_forward"] / row["bytes_moved"], rel=1e-12)


