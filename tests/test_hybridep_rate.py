"""Hybrid-EP's cross-node rate on H100 (hardware_profiles/h100.toml collectives.hybridep_*), each number derived from
Hybrid-EP's own benchmark (DeepEP branch hybrid-ep @ 17cfb81 docs/README_Hybrid-EP.md, "H100 Platform": 4,096 tokens,
hidden 7,168, top-8 of 128 random experts, BF16, the Torch API column at 16 SMs, "IB bandwidth" in GB/s).

Its test counts each token once per node it reaches, its own node included (tests/test_hybrid_ep.py @ a0d27f1
L345-355, tests/utils.py L671-683), so with N nodes the NIC carries (N - 1)/N of the counted bytes. Dispatch and combine
move the same bytes, so one exchange of both runs at the harmonic mean of their two rates.
"""

from __future__ import annotations

import json

import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.collectives import all_to_all_link, all_to_all_time
from btacalc.model.problem import make_problem

NIC = 400e9 / 8  # ConnectX-7 400 Gb/s per GPU


def _share(counted_gb_s: float, nodes: int) -> float:
    return counted_gb_s * 1e9 * (nodes - 1) / nodes / NIC


def _harmonic(a: float, b: float) -> float:
    return 2 / (1 / a + 1 / b)


TWO_NODES = _harmonic(_share(54.47, 2), _share(53.35, 2))  # 16 ranks
MORE = (_harmonic(_share(47.36, 4), _share(52.53, 4)) + _harmonic(_share(41.24, 8), _share(46.57, 8))) / 2  # 32, 64


def _problem(hw: str = "h100", **layout):
    return make_problem(resolve_model("qwen3-30b-a3b"), resolve_hardware(hw), RunOptions(attention="flash",
                        recompute="none"), Layout(devices_per_node=8, **layout))


def test_the_profile_holds_the_benchmarks_nic_shares():
    c = resolve_hardware("h100").collectives
    assert c.hybridep_scaleout_efficiency_two_nodes.value == pytest.approx(TWO_NODES, abs=5e-4)  # 0.539
    assert c.hybridep_scaleout_efficiency.value == pytest.approx(MORE, abs=5e-4)  # 0.756


@pytest.mark.parametrize("devices, ep, share", [(16, 16, TWO_NODES), (32, 32, MORE), (64, 64, MORE)])
def test_hybridep_crosses_nodes_at_its_own_share(devices, ep, share):
    p = _problem(devices=devices, expert_parallel=ep, deepep=True, hybridep=True)
    assert all_to_all_link(p).bus_efficiency == pytest.approx(share, abs=5e-4)
    # DeepEP's kernels keep NCCL's measured all-to-all share (0.92), as before
    d = _problem(devices=devices, expert_parallel=ep, deepep=True)
    assert all_to_all_link(d).bus_efficiency == pytest.approx(0.92)


def test_a_nic_bound_exchange_takes_longer_by_the_ratio_of_the_shares():
    # EP 16 over 2 nodes: a dispatch + combine of 1 GB; the same deduplicated bytes cross the NIC either way, so the
    # time above the call's latency scales with 0.92 / 0.539 where the NIC binds
    h = _problem(devices=16, expert_parallel=16, deepep=True, hybridep=True)
    d = _problem(devices=16, expert_parallel=16, deepep=True)
    c = resolve_hardware("h100").collectives
    alpha, share = c.scaleout_latency_s.value, c.hybridep_scaleout_efficiency_two_nodes.value
    assert (all_to_all_time(h, 1e9, 1) - alpha) / (all_to_all_time(d, 1e9, 1) - alpha) == pytest.approx(0.92 / share,
                                                                                                       rel=1e-9)


def test_a_profile_without_the_benchmark_keeps_ncclsshare():
    p = _problem("b200", devices=16, expert_parallel=16, deepep=True, hybridep=True)
    assert all_to_all_link(p).bus_efficiency == pytest.approx(0.92)


def test_the_backend_goes_out_and_comes_back(cli, tmp_path):
    base = "--model qwen3-30b-a3b --hw h100 --devices 16 --ep 16 --global-batch 64 --micro-batch 1 --deepep".split()
    code, text, err = cli("plan", *base, "--hybridep", "--emit", "megatron")
    assert code == 0 and "--moe-flex-dispatcher-backend hybridep" in text
    launch = tmp_path / "run.sh"
    launch.write_text(text)
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["parallelism"]["hybridep"] is True
    row = next(c for c in plan["throughput"]["collectives"] if c["name"] == "expert_all_to_all")
    assert row["algorithm"] == "hybridep" and row["link"] == "network"
    code, out, err = cli("plan", *[a for a in base if a != "--deepep"], "--hybridep")
    assert code == 2 and "it needs --deepep" in err and len(err.strip().splitlines()) == 1


def test_a_launch_megatron_refuses_for_its_backend_or_sms_is_refused(cli, tmp_path):
    """review29: Megatron-LM @ d98e8a64 transformer_config.py L1743-1748: --moe-enable-deepep sets the deepep backend
    and raises beside --moe-flex-dispatcher-backend hybridep ("Only one backend"), which btacalc planned as DeepEP at
    NCCL's share; L1795-1811: without --moe-flex-dispatcher-num-sms the deprecated --moe-deepep-num-sms and
    --moe-hybridep-num-sms are routed to it and must agree, where btacalc took DeepEP's. Agreeing knobs: that SM count."""
    base = "--model qwen3-30b-a3b --hw h100 --devices 16 --ep 16 --global-batch 64 --micro-batch 1 --deepep".split()
    code, text, err = cli("plan", *base, "--hybridep", "--emit", "megatron")
    assert code == 0 and "--moe-flex-dispatcher-backend hybridep" in text
    launch = tmp_path / "run.sh"
    for change, fragment in (("--moe-flex-dispatcher-backend hybridep --moe-enable-deepep", "only one backend"),
                             ("--moe-flex-dispatcher-backend hybridep --moe-deepep-num-sms 24 --moe-hybridep-num-sms 32",
                              "--moe-hybridep-num-sms (both deprecated) differ")):
        launch.write_text(text.replace("--moe-flex-dispatcher-backend hybridep", change))
        code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100")
        assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
    launch.write_text(text.replace("--moe-flex-dispatcher-backend hybridep",
                                   "--moe-flex-dispatcher-backend hybridep --moe-deepep-num-sms 24 "
                                   "--moe-hybridep-num-sms 24"))
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--json")
    plan = json.loads(out)
    assert code == 0 and plan["parallelism"]["hybridep"] is True and plan["parallelism"]["dispatcher_sms"] == 24
