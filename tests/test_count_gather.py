"""Megatron's alltoall dispatcher gathers every rank's routed-copy count per expert before its all-to-all, written as
its derivation from the code (formulas/moe.toml, the dispatch phase's `count_gathers`):

- Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py L543: the rank's count per expert,
  `routing_map.sum(dim=0).long()` (E values of 8 bytes); L557-576: when EP or ETP > 1, one
  gather_from_sequence_parallel_region of it over the tp_ep group (ETP x EP ranks);
- tensor_parallel/mappings.py L118-146: that is one all_gather_into_tensor, skipped for a group of one rank; an
  integer tensor has no gradient, so the backward makes no call;
- DeepEP / HybridEP (the flex dispatcher) count inside their own kernels: no such call.

So per layer and micro-batch: one all-gather forward, two under full recompute (the forward re-runs), none with the
flex dispatcher. Its buffer is n contributions of 8 E bytes, so a ring passes (n - 1) x 8 E bytes per rank, and at
1 KiB per contribution the call is NCCL's latency: the LL protocol's ring latency (NVIDIA/nccl@5067397c
src/graph/tuning.cc L151, L159: base 6.6 us, 0.6 us per NVLink step) x the B200 NVLink anchor (nccl-tests issue 333:
~22 us for a 4-GPU all-reduce, whose model is the ring LL's 6.6 + 2 x 3 x 0.6 = 10.2 us; docs/comm.md "nccl2").
"""

from __future__ import annotations

import json

import pytest

from btacalc.catalogue.terms import load_catalogue

LAYERS, MICRO_BATCHES, EXPERTS, EP = 48, 8, 128, 8  # qwen3-30b-a3b; global batch 64 / (DP 8 x micro-batch 1)
RUN = ("--model qwen3-30b-a3b --hw b200 --devices 8 --ep 8 --global-batch 64 --micro-batch 1 --seq 4096 "
       "--json").split()
NVLINK_BUS = 9e11 * 0.802  # b200.toml: NVLink5 900 GB/s per direction x NCCL's NVLink5 share (nccl issue 1807)


def _rows(cli, *extra: str) -> dict[str, dict]:
    code, out, err = cli("plan", *RUN, *extra)
    assert code == 0, err
    d = json.loads(out)
    assert d["parallelism"]["micro_batches"] == MICRO_BATCHES
    return {c["name"]: c for c in d["throughput"]["collectives"]}


@pytest.mark.parametrize("recompute, per_layer", [("none", 1), ("full", 1 + 1)])
def test_one_gather_per_forward_pass(cli, recompute, per_layer):
    row = _rows(cli, "--recompute", recompute)["moe_token_counts"]
    assert row["calls"] == LAYERS * MICRO_BATCHES * per_layer
    assert row["ranks"] == EP and row["collective"] == "all_gather"
    assert row["message_bytes"] == (EP - 1) * 8 * EXPERTS  # a ring's bus bytes per rank of n contributions


def test_the_call_is_the_ring_ll_latency_at_the_b200_anchor(cli):
    row = _rows(cli)["moe_token_counts"]
    scale = 22e-6 / ((6.6 + 2 * (4 - 1) * 0.6) * 1e-6)  # measured 4-GPU all-reduce / NCCL's ring LL model of it
    latency = (6.6 + (EP - 1) * 0.6) * 1e-6 * scale  # 8-rank all-gather: 7 NVLink steps
    assert row["protocol"] == "LL" and row["algorithm"] == "ring"
    assert row["latency_s"] == pytest.approx(latency, rel=1e-9)
    # LL at half the Simple ring's rate, at most llMaxBw, 2 x 141 GB/s in a Blackwell node (tuning.cc L182, L327;
    # review31: the cap had been left out)
    per_call = latency + (EP - 1) * 8 * EXPERTS / min(NVLINK_BUS * 0.5, 282e9)
    assert row["time_s"] == pytest.approx(row["calls"] * per_call, rel=1e-9)


def test_the_flex_dispatcher_counts_in_its_own_kernels(cli):
    assert "moe_token_counts" not in _rows(cli, "--deepep")


def test_one_rank_in_the_tp_ep_group_makes_no_call(cli):
    """EP 1 and ETP 1: the group is one rank, which mappings.py L133-135 skips (PP 2 and full recompute so it fits)."""
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--ep", "1", "--pp",
                         "2", "--recompute", "full", "--global-batch", "64", "--micro-batch", "1", "--seq", "4096",
                         "--json")
    assert code == 0, err
    d = json.loads(out)
    assert all(c["name"] != "moe_token_counts" for c in d["throughput"]["collectives"])
    assert d["throughput"]["communication_s"]["all_to_all"] == 0


@pytest.mark.parametrize("devices, ep, etp, tp, micro_batches", [(8, 1, 2, 2, 16), (16, 8, 2, 2, 8)])
def test_the_group_is_expert_tensor_times_expert_parallel(cli, devices, ep, etp, tp, micro_batches):
    """L557: the call is made when EP or ETP > 1, over the tp_ep group of ETP x EP ranks (L87); at EP 1 and ETP 2
    the group is the ETP pair. With TP 2, DP is devices / 2, so 64 / DP micro-batches of one sequence, and the full
    recompute re-runs each forward once."""
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", str(devices), "--ep", str(ep),
                         "--etp", str(etp), "--tp", str(tp), "--recompute", "full", "--global-batch", "64",
                         "--micro-batch", "1", "--seq", "4096", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["parallelism"]["micro_batches"] == micro_batches == 64 // (devices // tp)
    row = next(c for c in d["throughput"]["collectives"] if c["name"] == "moe_token_counts")
    n = ep * etp
    assert row["ranks"] == n
    assert row["calls"] == LAYERS * micro_batches * (1 + 1)
    assert row["message_bytes"] == (n - 1) * 8 * EXPERTS


def test_the_catalogue_entry_is_the_alltoall_dispatchers():
    gathers = next(p for p in load_catalogue() if p.name == "dispatch").count_gathers
    assert gathers is not None and (gathers.forward, gathers.bytes_per_expert) == (1, 8)
    dropless, padded = {"pad_to_capacity": False}, {"pad_to_capacity": True}
    assert gathers.applies("alltoall", dropless)
    assert not gathers.applies("flex", dropless) and not gathers.applies("allgather", dropless)
    assert not gathers.applies("alltoall", padded)  # drop-and-pad: preprocess returns first (L517-540)


def test_the_post_sync_gpu_time_leaves_the_count_gather_before_the_sync(monkeypatch):
    """The dispatcher's device-to-host sync copies the gathered counts to the host (token_dispatcher.py L557-576,
    the all-gather; L927-958, the copy the sync waits for), so the count all-gather is GPU work before the sync: the
    post-sync block's GPU time G_post (fixed.py, the two-block flow shop) is the post-sync phases' forward compute
    plus half of the exposed exchange *without* it. Derived: G_post = compute_post + (all_to_all - L x t_c + sm)/2,
    t_c the count all-gather's time per layer; and G_post is the same whatever t_c is."""
    from btacalc.config.execution import Layout, RunOptions
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import load_preset
    from btacalc.model.gpu import timing
    from btacalc.model.gpu.costs import layer_parts
    from btacalc.model.problem import make_problem

    run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute="none")
    p = make_problem(load_preset("qwen3-30b-a3b"), resolve_hardware("b200"), run,
                     Layout(devices=8, expert_parallel=8, micro_batches=4, devices_per_node=8))
    (part,) = layer_parts(p, p.evaluate(1, 1))
    t_c = timing.count_gather_time(p, part.count_bytes, part.count_calls)
    assert t_c > 0 and part.count_calls == 1

    def post_sync_gpu(scale: float) -> tuple[float, dict]:
        seen = []
        real_synced, real_counts = timing.launch_time_synced, timing.count_gather_time
        monkeypatch.setattr(timing, "launch_time_synced", lambda t: seen.append(t) or real_synced(t))
        monkeypatch.setattr(timing, "count_gather_time", lambda *a: scale * real_counts(*a))
        terms = timing.gpu_step_time(p, 1, 1, p.evaluate(1, 1)).details["terms"]
        monkeypatch.undo()
        return seen[0].gpu_post_s, terms

    g_post, terms = post_sync_gpu(1.0)
    expected = part.compute_post_s * LAYERS + (terms["all_to_all"] - LAYERS * t_c + terms["a2a_sm_share"]) / 2
    assert g_post == pytest.approx(expected, rel=1e-12)
    g_post_tenfold, terms_tenfold = post_sync_gpu(10.0)
    assert terms_tenfold["all_to_all"] == pytest.approx(terms["all_to_all"] + 9 * LAYERS * t_c, rel=1e-9)
    assert g_post_tenfold == pytest.approx(g_post, rel=1e-12)
