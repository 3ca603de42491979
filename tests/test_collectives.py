"""Collectives as NCCL runs them (btacalc/model/gpu/collectives.py) and leave-one-model-family-out
cross-validation (btacalc/planning/crossval.py), each test written as its derivation.

The H100 numbers below are the profile's sources, restated: NVLink 450 GB/s per direction at a bus
efficiency of 360/450 (nccl-tests issue 326), 13.0 us per call inside a node (NVIDIA's DGX H100
nccl-tests sample, dgxc-benchmarking nccl/README.md); the NIC 50 GB/s at 47/50 (nccl-tests issue 290), 46.5 us per call across nodes (nccl issue 1244);
an all-to-all's NIC share at 46/50 (nccl-tests alltoall_perf across two DGX H100, DeepEP issue 3; tests/test_a2a_network.py).
"""

from __future__ import annotations

import json
import math

import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.errors import BtacalcError
from btacalc.model.gpu.collectives import (all_to_all_time, all_to_all_wire_bytes, deepep_dedup, efficiency_at,
                                           links, local_members, ring_factor, ring_time)
from btacalc.model.problem import make_problem
from btacalc.planning.crossval import Setting, cross_validate, scale_group
from btacalc.planning.measured import MeasuredRun

NVLINK_H100, NIC = 450e9, 50e9
NVLINK_EFF, NIC_EFF = 360 / 450, 0.94
NIC_A2A_EFF = 46 / 50
NVLINK_ALPHA, NIC_ALPHA = 13.0e-6, 46.5e-6
QWEN = resolve_model("qwen3-30b-a3b")


def _problem(hw: str = "h100", model=QWEN, **layout):
    hardware = resolve_hardware(hw)
    fields = dict(devices_per_node=int(hardware.system.devices_per_node.value))
    fields.update(layout)
    return make_problem(model, hardware, RunOptions(attention="flash", recompute="none"), Layout(**fields))


def test_ring_bus_factors_on_eight_ranks():
    # NCCL-tests PERFORMANCE.md: all-reduce moves 2(n-1)/n of the buffer per rank, all-gather and
    # reduce-scatter (n-1)/n; on n = 8: 14/8 and 7/8
    assert ring_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert ring_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert ring_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert ring_factor("all_reduce", 1) == 0


def test_latency_times_calls_plus_bytes_at_the_bus_rate():
    # a ring of 8 ranks inside a DGX H100 timed as point-to-point sends (no collective kind: the context-parallel
    # K/V ring): 10 calls moving 1 GB of bus bytes in all, each call the profile's alpha
    p = _problem(devices=8)
    assert ring_time(p, 1e9, 8, 1, 10) == pytest.approx(10 * NVLINK_ALPHA + 1e9 / (NVLINK_H100 * NVLINK_EFF))
    # the calls alone: 100 empty calls cost 100 alphas; one rank moves nothing and pays nothing
    assert ring_time(p, 0.0, 8, 1, 100) == pytest.approx(100 * NVLINK_ALPHA)
    assert ring_time(p, 1e9, 1, 1, 100) == 0


def test_efficiency_at_a_message_size_from_the_curve():
    # busbw(x) = B e x / (x + h), h = alpha B e = 13e-6 x 360e9 = 4.68 MB: half of 0.8 at 4.68 MB,
    # 0.8 x 36 / 40.68 at 36 MB
    up, _ = links(_problem(devices=8))
    assert up.half_size_bytes == pytest.approx(NVLINK_ALPHA * NVLINK_H100 * NVLINK_EFF)
    assert efficiency_at(up, 4.68e6) == pytest.approx(0.4)
    assert efficiency_at(up, 36e6) == pytest.approx(0.8 * 36 / 40.68)
    # the curve is the alpha-beta time read as a bandwidth: x / (B x eff(x)) = alpha + x / (B e)
    x = 36e6
    assert x / (NVLINK_H100 * efficiency_at(up, x)) == pytest.approx(NVLINK_ALPHA + x / (NVLINK_H100 * NVLINK_EFF))


def test_measured_bus_bandwidth_on_nvlink_is_within_the_published_range():
    # issue 21: NCCL reaches about 0.6-0.8 of NVLink's peak on 8-GPU nodes, tens of us per call
    for hw in ("a100-80gb", "h100", "h200", "b200", "gb200"):
        up, out = links(_problem(hw, devices=8))
        assert 0.6 <= up.bus_efficiency <= 0.81 and 5e-6 <= up.latency_s <= 1e-4
        assert out.latency_s >= up.latency_s


def test_ep64_inside_one_nvl72_domain_stays_on_nvlink():
    # 64 GPUs of one GB200 NVL72 rack: the EP 64 group (stride ETP = 1) is ranks 0-63 of domain 0-71
    assert local_members(64, 1, 64, 72) == 64
    # 128 GPUs: the second group, ranks 64-127, is cut at rank 72: 8 of its members in the first domain,
    # 56 in the second; the rank among the 8 sets the pace
    assert local_members(64, 1, 128, 72) == 8
    # size alone (64 <= 72) would have kept both on NVLink; a DGX of 8 cuts every 64-rank group in 8
    assert local_members(64, 1, 64, 8) == 8 and local_members(8, 8, 64, 8) == 1


def test_all_to_all_inside_and_across_nvl72_domains():
    gb = resolve_hardware("gb200")
    c = gb.collectives
    # NCCL's all-to-all (the alltoall dispatcher) at its measured shares of NVLink and of the NIC (test_a2a_nvlink,
    # test_a2a_network), not the ring collectives'
    up, out = 900e9 * c.scaleup_all_to_all_efficiency.value, 50e9 * c.scaleout_all_to_all_efficiency.value
    alpha_up, alpha_out = gb.collectives.scaleup_latency_s.value, gb.collectives.scaleout_latency_s.value
    one = _problem("gb200", devices=64, expert_parallel=64)
    sent = 1e9 * 63 / 64  # a rank keeps the 1/64 routed to itself
    assert all_to_all_time(one, 1e9, 4) == pytest.approx(4 * alpha_up + sent / up)
    two = _problem("gb200", devices=128, expert_parallel=64)
    # 7 of 63 peers share the slowest rank's domain, 56 are reached through its NIC, concurrently
    assert all_to_all_time(two, 1e9, 4) == pytest.approx(4 * alpha_out + max(sent * 7 / 63 / up, sent * 56 / 63 / out))


def test_deepep_sends_a_token_once_per_remote_domain():
    # Qwen3-30B-A3B (E = 128, k = 8) with EP 16 over two DGX H100: m = 2 domains, 64 experts each.
    # P(no expert of the other domain among the 8) = C(64, 8) / C(128, 8); expected remote copies 8 x 1/2
    p = _problem(devices=16, expert_parallel=16, deepep=True)
    none = math.comb(64, 8) / math.comb(128, 8)
    assert deepep_dedup(p, 2) == pytest.approx((1 - none) / 4)
    assert deepep_dedup(p, 1) == 1.0
    # the NIC share shrinks by that factor; what arrives is forwarded to its experts over NVLink
    plain = _problem(devices=16, expert_parallel=16)
    sent = 1e9 * 15 / 16
    up, nic = NVLINK_H100 * NVLINK_EFF, NIC * NIC_A2A_EFF
    assert all_to_all_time(plain, 1e9) == pytest.approx(max(sent * 7 / 15 / up, sent * 8 / 15 / nic))
    expected = max((sent * 7 / 15 + sent * 8 / 15) / up, sent * 8 / 15 * (1 - none) / 4 / nic)
    assert all_to_all_time(p, 1e9) == pytest.approx(expected)


def test_deepep_sends_a_token_once_per_rank_inside_a_node():
    # Qwen3-235B-A22B (E = 128, top-8) at EP 8 on one DGX H100 (ETP 1: the EP group is 8 consecutive ranks,
    # Megatron's expert RankGenerator(tp=ETP, ep=EP, ...) in order tp-cp-ep-dp-pp): 16 experts per rank.
    # DeepEP's layout gives each token a destination-rank mask (is_token_in_rank), so a rank receives one
    # copy however many of its 16 experts the token chose. P(a given rank gets none of the 8) =
    # C(112, 8) / C(128, 8); expected distinct remote ranks 7 (1 - P) against 7 x 8/8 remote expert copies.
    qwen235 = resolve_model("qwen3-235b-a22b")
    p = _problem(model=qwen235, devices=8, expert_parallel=8, deepep=True)
    none = math.comb(112, 8) / math.comb(128, 8)
    assert deepep_dedup(p, 8) == pytest.approx(7 * (1 - none) / (8 * 7 / 8))
    assert deepep_dedup(p, 8) == pytest.approx(0.6674, abs=1e-4)
    sent, up = 1e9 * 7 / 8, NVLINK_H100 * NVLINK_EFF
    assert all_to_all_time(p, 1e9, 4) == pytest.approx(4 * NVLINK_ALPHA + sent * (1 - none) / up)
    # Megatron's alltoall dispatcher permutes to tokens x top-k rows first: a copy per expert
    # (and NCCL's all-to-all runs at its measured share of NVLink, 0.753 on H100: test_a2a_nvlink)
    plain = _problem(model=qwen235, devices=8, expert_parallel=8)
    nccl_a2a = NVLINK_H100 * resolve_hardware("h100").collectives.scaleup_all_to_all_efficiency.value
    assert all_to_all_time(plain, 1e9, 4) == pytest.approx(4 * NVLINK_ALPHA + sent / nccl_a2a)


def test_nvlink_all_to_all_rate_matches_deepeps_published_intranode_rate():
    # DeepEP README (docs/legacy.md, "Normal kernels"): EP 8 on H800 dispatches at 153 GB/s and combines at
    # 158 GB/s of the received (per-rank) bytes; H800's NVLink is 8 links x 25 GB/s = 200 GB/s per direction
    # (H100 SXM: 18 links, 450 GB/s). The share of line rate DeepEP reaches is the NVLink bus efficiency
    # the H100 profile takes from nccl-tests, within 5%.
    h800_line = 200e9
    for published in (153e9, 158e9):
        assert published / h800_line == pytest.approx(NVLINK_EFF, rel=0.05)
    up, _ = links(_problem(devices=8))
    assert up.bus_bytes_per_s == pytest.approx(NVLINK_H100 * NVLINK_EFF)


def test_plan_json_lists_each_collective(cli):
    # TP 8 inside one DGX H100: the tensor-parallel row (sequence parallel: all-gathers and reduce-scatters) is a
    # ring on NVLink; since nccllat a call costs NCCL's Simple ring latency, 8.4 + 7 x 3.4 us (tuning.cc L151, L159,
    # L412), since nccl2 x the NVLink anchor: the DGX H100's measured 13.0 us over NCCL's 6.6 + 14 x 0.6 = 15.0 us at
    # its reference (8 GPUs, all-reduce of 8 bytes; docs/comm.md nccl2), and its efficiency is the large-message one
    # scaled by the bandwidth share of the call's time
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "8", "--seq", "4096",
                         "--global-batch", "8", "--micro-batch", "1", "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["throughput"]["collectives"]}
    tp = rows["tensor_parallel"]
    assert (tp["algorithm"], tp["link"], tp["ranks"]) == ("ring", "nvlink", 8)
    lat = (8.4 + 7 * 3.4) * 1e-6 * 13.0 / (6.6 + 14 * 0.6)
    assert (tp["latency_s"], tp["protocol"], tp["steps"]) == (pytest.approx(lat), "Simple", 7)
    x = tp["message_bytes"]
    per_call = lat + x / (NVLINK_H100 * NVLINK_EFF)
    assert tp["efficiency"] == pytest.approx(NVLINK_EFF * x / (NVLINK_H100 * NVLINK_EFF) / per_call)
    assert tp["time_s"] == pytest.approx(tp["calls"] * per_call)


def _run(run_id: str, model: str, role: str, measured: float, known_gap: str = "") -> MeasuredRun:
    return MeasuredRun.model_validate(dict(id=run_id, source="synthetic test run", model=model, hw="x", devices=8,
                                           precision="bf16", seq=1, global_batch=1, role=role, known_gap=known_gap,
                                           measured={"tokens_per_s_per_device": measured}))


def _synthetic(speeds: dict[str, float]):
    """A one-factor model: predicted = f x speed; the least-squares fit on log error is
    log f = mean(log(measured / speed)) over the fit runs."""
    from btacalc.planning.crossval import CrossRun

    def fit(device, chosen):
        return {"f": math.exp(sum(math.log(r.measured.tokens_per_s_per_device / speeds[r.id]) for r in chosen)
                              / len(chosen))}

    def predict_run(run, factors):
        pred = factors["d"]["f"] * speeds[run.id]
        meas = run.measured.tokens_per_s_per_device
        return CrossRun(id=run.id, model_family=run.model[0], hw=run.hw, moe=run.model.endswith("moe"),
                        devices=run.devices, scale=scale_group(run.devices), predicted_tokens_per_s_per_device=pred,
                        measured_tokens_per_s_per_device=meas, error=pred / meas - 1)

    setting = Setting(family_of=lambda r: r.model[0], device_family_of=lambda r: "d", usable=lambda r: True)
    return setting, fit, predict_run


def test_cross_validation_by_hand():
    # family a: two fit runs measured at 2x their speed; family b: a fit run at 4x and a check run at 2x
    runs = [_run("a1", "a", "fit", 2.0), _run("a2", "a", "fit", 2.0), _run("b1", "b-moe", "fit", 4.0),
            _run("b2", "b-moe", "check", 4.0)]
    speeds = {"a1": 1.0, "a2": 1.0, "b1": 1.0, "b2": 2.0}
    cv = cross_validate(runs, *_synthetic(speeds))
    # holding a out fits f = 4 on b1: a predicted 4 against 2, +100% each; holding b out fits f = 2 on
    # a1, a2: b1 2 against 4 (-50%), b2 4 against 4 (0)
    errors = {r.id: r.error for f in cv.folds for r in f.runs}
    assert errors == pytest.approx({"a1": 1.0, "a2": 1.0, "b1": -0.5, "b2": 0.0})
    assert cv.overall.n == 4 and cv.overall.mean_abs_error == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert cv.overall.max_abs_error == pytest.approx(1.0)
    assert cv.by_kind["dense"].mean_abs_error == pytest.approx(1.0)
    assert cv.by_kind["moe"].mean_abs_error == pytest.approx(0.25)
    assert cv.by_kind["moe"].mean_error == pytest.approx(-0.25)
    folds = {f.held_out: f for f in cv.folds}
    assert folds["a"].fits["d"]["f"] == pytest.approx(4.0) and folds["a"].fit_runs["d"] == ["b1"]


def test_cross_validation_falls_back_to_all_runs_when_the_family_holds_every_fit_run():
    # every fit run is in family a: holding a out, the factor is fitted on b's check runs (4 / 1), and
    # the fold says so; b2, a known gap (a mechanism btacalc lacks), is predicted but never fitted to
    runs = [_run("a1", "a", "fit", 2.0), _run("b1", "b", "check", 4.0), _run("b2", "b", "check", 100.0, "a gap")]
    cv = cross_validate(runs, *_synthetic({"a1": 1.0, "b1": 1.0, "b2": 1.0}))
    folds = {f.held_out: f for f in cv.folds}
    assert folds["a"].basis["d"].startswith("all runs of other families")
    assert folds["a"].runs[0].error == pytest.approx(4.0 / 2.0 - 1)
    assert folds["a"].fit_runs["d"] == ["b1"]
    assert folds["b"].basis["d"] == "fit runs of other families" and folds["b"].runs[0].error == pytest.approx(-0.5)
    assert folds["b"].runs[1].error == pytest.approx(2.0 / 100.0 - 1)


def test_scale_groups():
    assert [scale_group(n) for n in (1, 8, 9, 72, 73, 256, 257)] == ["1-8", "1-8", "9-72", "9-72", "73-256",
                                                                      "73-256", ">256"]


def test_a_low_precision_run_the_device_cannot_run_is_not_expressible_rather_than_a_crash():
    # MXFP8 needs Blackwell (compute capability 10): an H100 row is listed with the reason, never counted
    from btacalc.planning.measured import predict

    run = MeasuredRun.model_validate(dict(id="x", source="synthetic test run", model="llama-3-8b", hw="h100",
                                          devices=8, precision="mxfp8", seq=8192, global_batch=128, role="check",
                                          measured={"tokens_per_s_per_device": 1000.0}))
    res = predict(run)
    assert not res.expressible and "mxfp8" in res.reason and res.error is None


def test_bad_collectives_section_is_one_line():
    from btacalc.config.hardware import parse_profile
    from btacalc.paths import data_dir

    # the shipped h100 profile with an efficiency above 1; a wafer profile with a [collectives] section
    path = data_dir("hardware_profiles") / "h100.toml"
    bad = path.read_text(encoding="utf-8").replace("[collectives.scaleup_bus_efficiency]\nvalue = 0.8",
                                                    "[collectives.scaleup_bus_efficiency]\nvalue = 1.5")
    assert bad != path.read_text(encoding="utf-8")
    with pytest.raises(BtacalcError, match=r"collectives\.scaleup_bus_efficiency\.value = 1\.5"):
        parse_profile(bad, "h100.toml")
    wafer = (path.parent / "wse3.toml").read_text(encoding="utf-8") + (
        '\n[collectives.scaleup_bus_efficiency]\nvalue = 0.8\nkind = "estimate"\nsource = "https://x.org"\n'
        'note = "a wafer has no NCCL"\n')
    with pytest.raises(BtacalcError, match="collectives"):
        parse_profile(wafer, "wse3.toml")


def test_plan_json_lists_the_data_parallel_collectives(cli):
    # Llama-3-8B on 8 GPUs of one DGX H100, DP 8 with the distributed optimizer (ZeRO-1) and fp32 main
    # gradients: one reduce-scatter of 7/8 x 4 bytes x P per rank and one all-gather of 7/8 x 2 bytes x P
    # (no --overlap-grad-reduce: one bucket), on NVLink
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--seq", "2048",
                         "--global-batch", "8", "--micro-batch", "1", "--json")
    assert code == 0, err
    report = json.loads(out)
    params = report["model"]["params_total"]
    rows = {r["name"]: r for r in report["throughput"]["collectives"]}
    reduce, gather = rows["gradient_reduce_dense"], rows["param_gather_dense"]
    assert (reduce["ranks"], reduce["link"], reduce["calls"]) == (8, "nvlink", 1.0)
    assert reduce["message_bytes"] == pytest.approx(7 / 8 * 4 * params)
    assert gather["message_bytes"] == pytest.approx(7 / 8 * 2 * params)
    # one Simple ring reduce-scatter: NCCL's latency 8.4 + 7 x 3.4 us (tuning.cc L151, L159, L412; docs/comm.md nccllat)
    # x 13.0 / 15.0, the NVLink anchor (docs/comm.md nccl2)
    assert reduce["time_s"] == pytest.approx((8.4 + 7 * 3.4) * 1e-6 * 13.0 / 15.0 + 7 / 8 * 4 * params / (NVLINK_H100 * NVLINK_EFF))
    assert report["throughput"]["communication_s"]["gradient_reduce"] == pytest.approx(reduce["time_s"])


@pytest.mark.parametrize("args", [("--cross-validate", "--measured", "x.json"), ("--cross-validate", "--calibrate")])
def test_cross_validate_refuses_options_it_would_ignore(cli, args):
    code, _, err = cli("validate", *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--" in err


def test_cross_validation_of_shipped_runs_reproduces_the_calibration_when_the_fit_runs_stay():
    # Each calibration family (calibration.toml: one per GPU architecture) is fitted in a fold on the fit runs of
    # the other model families. Nemotron-4 held out: every fit run stays, so the fold's factors are the shipped
    # profiles' and its error is validate's. Llama 3 held out: Ampere keeps both its GPT fit runs (its shipped
    # factor), Hopper keeps only the GPT-3 175B run. GPT-3 held out: Ampere has nothing of another family left (the
    # shipped factor stays, and the fold says so), Hopper fits on the two Llama 3 FP8 fit runs, never a GPT-3 run.
    from btacalc.planning.crossval import validate_cross
    from btacalc.planning.measured import load_runs, predict

    ampere_fit = ["gpt-22b-a100-80gb-8-379", "gpt-22b-a100-80gb-8-380"]
    llama_fit = ["llama-3-70b-h100-64-fp8-69", "llama-3-70b-h100-64-fp8-current-250"]
    keep = {*ampere_fit, "gpt3-175b-h100-128-304", *llama_fit, "llama-3-70b-h100-64-303",
            "nemotron4-15b-h100-16-gbs64-bf16-dgxc"}
    runs = [r for r in load_runs() if r.id in keep]
    assert len(runs) == len(keep)
    folds = {f.held_out: f for f in validate_cross(runs).folds}

    def shipped(profile: str) -> dict[str, float]:
        return {"compute_efficiency": resolve_hardware(profile).calibration.compute_efficiency.value}

    nemotron = folds["nemotron4"]
    assert nemotron.fits["gpu-ampere"] == pytest.approx(shipped("a100-80gb"), rel=1e-3)
    assert nemotron.fits["gpu-hopper"] == pytest.approx(shipped("h100"), rel=1e-3)
    assert sorted(nemotron.fit_runs["gpu-hopper"]) == sorted(["gpt3-175b-h100-128-304", *llama_fit])
    (row,) = nemotron.runs
    assert row.error == pytest.approx(predict(next(x for x in runs if x.id == row.id)).error, abs=2e-3)

    assert folds["llama-3"].fits["gpu-ampere"] == pytest.approx(shipped("a100-80gb"), rel=1e-3)
    assert folds["llama-3"].fit_runs["gpu-hopper"] == ["gpt3-175b-h100-128-304"]

    assert folds["gpt3"].basis["gpu-ampere"].startswith("shipped factors")
    assert folds["gpt3"].basis["gpu-hopper"] == "fit runs of other families"
    assert sorted(folds["gpt3"].fit_runs["gpu-hopper"]) == sorted(llama_fit)


def test_all_to_all_row_reports_the_bytes_deepep_sends():
    # plan --json's expert_all_to_all row: what one rank sends, (EP - 1)/EP of the volume, shrunk by
    # DeepEP's per-rank deduplication inside a DGX H100 (Qwen3-235B-A22B, EP 8: 7 (1 - P) distinct remote
    # ranks against 7 remote expert copies, P = C(112, 8) / C(128, 8)); the plain dispatcher sends them all
    qwen235 = resolve_model("qwen3-235b-a22b")
    none = math.comb(112, 8) / math.comb(128, 8)
    deepep = _problem(model=qwen235, devices=8, expert_parallel=8, deepep=True)
    plain = _problem(model=qwen235, devices=8, expert_parallel=8)
    assert all_to_all_wire_bytes(plain, 1e9) == pytest.approx(1e9 * 7 / 8)
    assert all_to_all_wire_bytes(deepep, 1e9) == pytest.approx(1e9 * 7 / 8 * (1 - none))


def test_scale_groups_print_smallest_first():
    """freshuser15: `validate --cross-validate` listed the scale groups as text sorts them (1-8, 73-256, 9-72, >256).
    They come out in the order of their smallest device count, 1 < 9 < 73 < 257, whatever order they were built in."""
    from btacalc.planning.crossval import _in_scale_order, grouped

    class Run:  # the two fields grouped() reads
        def __init__(self, devices: int, error: float):
            self.scale, self.error = scale_group(devices), error

    groups = _in_scale_order(grouped([Run(n, 0.01) for n in (300, 16, 100, 8)], lambda r: r.scale))
    smallest = {"1-8": 1, "9-72": 9, "73-256": 73, ">256": 257}
    assert list(groups) == sorted(groups, key=smallest.__getitem__) == ["1-8", "9-72", "73-256", ">256"]
