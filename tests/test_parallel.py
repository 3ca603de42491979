"""Multi-GPU planning: sharded training state, all-to-all and gradient-sync volumes, compare/crossover.

Expected values are written as the derivation: parameter buckets from the architecture, bytes per
parameter from Transformer Math 101 (2 + 2 + 12), divisors from the ZeRO paper's stage definitions.
"""

from __future__ import annotations

import json

import pytest

from btacalc.planning.cluster import min_devices
from btacalc.planning.compare import CompareRequest, compare
from btacalc.planning.crossover import crossover, family_model
from btacalc.errors import BtacalcError
from btacalc.config.hardware import resolve_hardware
from btacalc.model.memory import MemoryModel, resolve_memory_model
from btacalc.model.params import param_counts
from btacalc.config.presets import resolve_model
from btacalc.config.execution import ExecutionRequest, Layout, OverlapRequest
from btacalc.model.communication import exchanges
from btacalc.planning.plan import make_plan
from btacalc.config.execution import RunOptions
from btacalc.model.problem import make_problem

QWEN = resolve_model("qwen3-30b-a3b")
# Qwen3-30B-A3B routed experts: L x E x 3hf (gate, up, down), from config.json
EXPERT_PARAMS = 48 * 128 * 3 * 2048 * 768


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def problem(hw="a100-80gb", devices=1, ep=1, zero=0, model=QWEN, **run):
    hardware = resolve_hardware(hw)
    node = int(hardware.system.devices_per_node.value) if hardware.system.devices_per_node else 1
    return resolve_memory_model(make_problem(model, hardware, RunOptions(attention="flash", **run),
                                             Layout(devices, ep, zero, node)))



# --- sharding arithmetic -------------------------------------------------------------------------

def test_expert_bucket_is_the_routed_experts():
    pc = param_counts(problem())
    assert pc.expert == EXPERT_PARAMS
    assert pc.non_expert == pc.total - EXPERT_PARAMS


def test_single_device_state_is_16_bytes_per_param():
    mem = MemoryModel(problem())
    total = param_counts(problem()).total
    assert mem.fixed == {"weights": 2 * total, "gradients": 2 * total, "optimizer_state": 12 * total}
    assert sum(mem.fixed.values()) == 16 * total  # ~ 30.5 B x 16 = 488.5 GB


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_sharded_state_per_device(zero):
    n, ep = 64, 8
    pe, pne = EXPERT_PARAMS, param_counts(problem()).total - EXPERT_PARAMS
    dp, edp = n, n // ep
    mem = MemoryModel(problem(devices=n, ep=ep, zero=zero))
    # experts always split over EP; ZeRO stage s also splits a component over its data-parallel ranks
    weights = 2 * ceil_div(pne, dp if zero >= 3 else 1) + 2 * ceil_div(pe, ep * (edp if zero >= 3 else 1))
    grads = 2 * ceil_div(pne, dp if zero >= 2 else 1) + 2 * ceil_div(pe, ep * (edp if zero >= 2 else 1))
    optim = 12 * ceil_div(pne, dp if zero >= 1 else 1) + 12 * ceil_div(pe, ep * (edp if zero >= 1 else 1))
    assert mem.fixed["weights"] == weights
    assert mem.fixed["gradients"] == grads
    assert mem.fixed["optimizer_state"] == optim
    if zero == 3:  # one layer's local weights gathered: non-expert layer part + E/EP experts of that layer
        layer = param_counts(problem()).per_layer
        assert mem.fixed["gathered_weights"] == int(2 * (layer - EXPERT_PARAMS / 48 * (1 - 1 / ep)))


def test_more_devices_never_increase_per_device_memory():
    for zero in (0, 1, 2, 3):
        prev = None
        for n in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            mem = MemoryModel(problem(devices=n, ep=min(n, 128), zero=zero))
            now = mem.total(1, 1)
            assert prev is None or now <= prev, (zero, n)
            prev = now


# --- communication volumes -----------------------------------------------------------------------

def test_token_permutation_bytes_hand_computed():
    # one 4096-token sequence, k = 8 copies of h = 2048 bf16 values; dispatch + combine, forward +
    # backward = 4 transfers per MoE layer; full recomputation replays the forward (dispatch and combine
    # again): 6; over the 48 MoE layers of a step (a GPU's all-to-all sends (EP-1)/EP of it:
    # model/gpu/collectives.py, tested in test_megatron.py)
    def sent(recompute, tiles=1, tile_batch=1):
        p = problem(devices=8, ep=8, recompute=recompute)
        return exchanges(p.evaluate(tiles, tile_batch))[0]

    assert sent("selective") == sent("none") == 48 * 4 * 4096 * 8 * 2048 * 2
    assert sent("full") == 48 * 6 * 4096 * 8 * 2048 * 2
    assert sent("full", tiles=3, tile_batch=2) == 48 * 6 * 6 * 4096 * 8 * 2048 * 2


# --- acceptance: plan on GPUs ----------------------------------------------------------------------

def test_one_a100_does_not_fit_qwen3(cli):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "a100-80gb", "--devices", "1", "--json")
    assert code == 1, err
    r = json.loads(out)
    assert not r["plan"]["fits"]
    assert r["plan"]["binding_constraint"] == "memory"
    state = r["memory_bytes"]["weights"] + r["memory_bytes"]["gradients"] + r["memory_bytes"]["optimizer_state"]
    # Megatron's default bf16 training: 2 (bf16 weights) + 4 (fp32 main gradients) + 12 (fp32 master, Adam m, v)
    assert state == 18 * r["model"]["params_total"]
    assert r["inputs"]["gradient_bytes"] == 4 and "gradient_bytes" in r["inputs"]["defaults"]
    assert any("--devices" in s for s in r["suggestions"])


def test_64_a100s_with_ep8_zero1_fit(cli):
    code, out, err = cli("plan", "--hw", "a100-80gb", "--devices", "64", "--ep", "8", "--zero", "1", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["plan"]["fits"] and r["parallelism"]["expert_data_parallel"] == 8
    rows = {(s["component"], s["part"]): s for s in r["state_sharding"]}
    # a device holds E/EP of the experts; the distributed optimizer shards their state over the EDP = 8
    # replicas, the non-expert state over the 64 data-parallel ranks; weights stay whole
    assert rows[("optimizer", "expert")]["params"] == EXPERT_PARAMS // 8
    assert rows[("optimizer", "expert")]["divisor"] == 8 and rows[("weights", "expert")]["divisor"] == 1
    assert rows[("optimizer", "non_expert")]["divisor"] == 64 and rows[("weights", "non_expert")]["divisor"] == 1
    th = r["throughput"]
    assert {"all_to_all", "gradient_reduce", "param_gather"} <= set(th["communication_s"])
    assert "all_to_all" in th["phase_share"]
    # tokens per expert: each expert replica serves its EP group of 8 devices
    assert r["plan"]["tokens_per_expert"] == 8 * r["plan"]["global_batch"] * 4096 * 8 / 128


def test_suggested_device_count_fits():
    fit = min_devices(QWEN, resolve_hardware("a100-80gb"), ExecutionRequest(attention="flash", zero_stage=1),
                      escalate=True)
    assert fit is not None and MemoryModel(fit).fits(1, 1)
    half = fit.layout.devices // 2
    if half >= 1:  # the next smaller power of two fits with none of the levers
        for zero, rc in ((1, "selective"), (3, "selective"), (1, "full"), (3, "full")):
            smaller = problem(devices=half, ep=min(half, 128), zero=zero if half > 1 else 0, recompute=rc,
                              gradient_bytes=4)
            assert not MemoryModel(smaller).fits(1, 1)


@pytest.mark.parametrize("args, text", [
    (("--hw", "a100-80gb", "--devices", "12", "--ep", "8"), "does not divide --devices"),
    (("--hw", "a100-80gb", "--devices", "24", "--ep", "3"), "does not divide the 128 experts"),
    (("--hw", "wse3", "--devices", "2", "--ep", "2"), "strict data parallel"),
    (("--hw", "wse3", "--devices", "3", "--global-batch", "100"), "does not divide over --devices 3"),
    (("--hw", "wse3", "--devices", "2", "--global-batch", "100", "--grad-accum", "3"), "is not divisible by --grad-accum 3"),
    (("--hw", "wse3", "--devices", "2", "--memory-model", "resident"), "keeps the model on one wafer"),
    (("--hw", "a100-80gb", "--memory-model", "weight_streaming"), "wafer-scale profiles only"),
    (("--hw", "a100-80gb", "--zero", "4"), "--zero"),
])
def test_bad_parallel_options_exit_2(cli, args, text):
    code, out, err = cli("plan", *args)
    assert code == 2
    assert text in err and len(err.strip().splitlines()) == 1 and not out


def test_dense_model_rejects_ep(cli):
    code, _, err = cli("plan", "--model", "gpt3-175b", "--hw", "a100-80gb", "--devices", "8", "--ep", "2")
    assert code == 2 and "dense" in err


# --- memory regime on the wafer ------------------------------------------------------------------

def test_wafer_keeps_a_small_model_resident_and_streams_a_large_one():
    small = family_model("qwen3-moe", 512)  # 0.63 B params: 16 B/param = 10 GB < 37 GB usable
    p_small = resolve_memory_model(make_problem(small, resolve_hardware("wse3"), RunOptions()))
    assert p_small.memory_model == "resident"
    assert MemoryModel(p_small).fixed["optimizer_state"] == 12 * param_counts(p_small).total
    p_large = resolve_memory_model(make_problem(QWEN, resolve_hardware("wse3"), RunOptions()))
    assert p_large.memory_model == "weight_streaming"


def test_memoryx_capacity_is_checked():
    hw = resolve_hardware("wse3")
    small_store = hw.memory.offchip_memory_bytes.model_copy(update={"value": 1e11})
    tiny = hw.model_copy(update={"memory": hw.memory.model_copy(update={"offchip_memory_bytes": small_store})})
    report = make_plan(QWEN, tiny, ExecutionRequest(memory_model="weight_streaming"))
    assert not report.plan.fits
    assert any("MemoryX" in s for s in report.suggestions)


# --- family, compare, crossover --------------------------------------------------------------------

def test_family_rule_reproduces_qwen3_30b_a3b():
    fam = family_model("qwen3-moe", 2048)
    for field in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size", "ffn_size",
                  "num_experts", "top_k", "qk_norm", "tied_embeddings"):
        assert getattr(fam, field) == getattr(QWEN, field), field


def test_family_rejects_bad_hidden():
    with pytest.raises(BtacalcError):
        family_model("qwen3-moe", 1000)
    with pytest.raises(BtacalcError):
        family_model("llama", 1024)


def test_compare_rows_and_json(cli):
    code, out, err = cli("compare", "--model", "qwen3-30b-a3b", "--hw", "wse2,wse3,a100-80gb,b200", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert [row["hardware"] for row in r["rows"]] == ["wse2", "wse3", "a100-80gb", "b200"]
    for row in r["rows"]:
        assert row["fits"]
        assert {"tiles", "tile_batch", "tokens_per_expert", "step_time_s", "tokens_per_s", "mfu", "relative_to_dense",
                "binding_constraint", "dominant_phase", "tokens_per_s_per_kw"} <= set(row)
        assert row["tokens_per_s_per_kw"] == pytest.approx(row["tokens_per_s"] / row["power_kw"])
    b200 = next(row for row in r["rows"] if row["hardware"] == "b200")
    assert b200["power_kw"] == pytest.approx(b200["devices"] * 14.3 / 8)  # DGX B200 system power per GPU
    wafers = [row for row in r["rows"] if row["hardware"].startswith("wse")]
    assert all(row["devices"] == 1 and row["memory_model"] == "weight_streaming" for row in wafers)


def test_data_parallel_scaling_with_ep_inside_a_node():
    res = compare(QWEN, [resolve_hardware("b200")],
                  CompareRequest(ExecutionRequest(expert_parallel=8), devices=(8, 16, 32, 64)))
    assert all(r.fits for r in res.rows)
    tput = [r.tokens_per_s for r in res.rows]
    assert all(b > a for a, b in zip(tput, tput[1:]))  # more data-parallel replicas, more tokens/s


def test_expert_parallelism_across_nodes_costs_all_to_all():
    # EP 16 on 8-GPU nodes sends 8 of 15 peers' share over the 50 GB/s NIC instead of 900 GB/s NVLink
    b200 = [resolve_hardware("b200")]
    inside = compare(QWEN, b200, CompareRequest(ExecutionRequest(expert_parallel=8), devices=(16,))).rows[0]
    across = compare(QWEN, b200, CompareRequest(ExecutionRequest(expert_parallel=16), devices=(16,))).rows[0]
    assert across.dominant_phase == "all_to_all"
    assert across.tokens_per_s < inside.tokens_per_s


@pytest.mark.parametrize("request_", [
    ExecutionRequest(overlaps=OverlapRequest(grad_reduce=True)),  # Megatron's overlaps: GPU layout options
    ExecutionRequest(overlaps=OverlapRequest(tp_comm=False)),
    ExecutionRequest(devices_per_node=4),
])
def test_compare_of_wafers_alone_refuses_every_gpu_layout_option(request_):
    """The GPU layout options are one table (config/resolution.py _GPU_LAYOUT): a wafer plan refuses them, and so
    does a compare with no GPU row to take them (a wafer row's request drops them: they would be ignored)."""
    with pytest.raises(BtacalcError, match="has no GPU profile"):
        compare(QWEN, [resolve_hardware("wse3")], CompareRequest(request_))


def test_a_wafer_row_beside_gpu_rows_drops_the_gpu_layout_options():
    hws = [resolve_hardware(h) for h in ("wse3", "b200")]
    given = ExecutionRequest(devices_per_node=8, overlaps=OverlapRequest(grad_reduce=True, p2p=True))
    plain = compare(QWEN, hws, CompareRequest(devices=(8,))).rows
    rows = compare(QWEN, hws, CompareRequest(given, devices=(8,))).rows
    assert rows[0].hardware == "wse3" and rows[0].tokens_per_s == plain[0].tokens_per_s


def test_crossover_monotone_regimes():
    hws = [resolve_hardware(h) for h in ("wse3", "b200")]
    res = crossover(hws, hidden_sizes=[256, 512, 1024, 2048, 3072])
    for hw in ("wse3", "b200"):
        pts = [p for p in res.points if p.hardware == hw]
        assert [p.params_total for p in pts] == sorted(p.params_total for p in pts)
        if hw == "b200":
            counts = [p.row.devices for p in pts if p.row.fits]
            assert counts == sorted(counts)  # a larger model never needs fewer GPUs
        else:
            regimes = [p.regime for p in pts]
            first_stream = regimes.index("weight_streaming")
            assert all(r == "resident" for r in regimes[:first_stream])
            assert all(r != "resident" for r in regimes[first_stream:])  # never resident again
    assert any(b.hardware == "wse3" and b.from_regime == "resident" for b in res.boundaries)
    for p in (q for q in res.points if q.hardware == "wse3" and q.row.fits):
        gpu = next(q for q in res.points if q.hardware == "b200" and q.model == p.model)
        assert res.gpu_equivalents[p.model]["wse3/b200"] == pytest.approx(
            p.row.tokens_per_s / (gpu.row.tokens_per_s / gpu.row.devices))


def test_compare_csv_and_plot_outputs(tmp_path, cli):
    csv_path = tmp_path / "c.csv"
    code, _, err = cli("compare", "--hw", "wse3,b200", "--csv", str(csv_path))
    assert code == 0, err
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("hardware,") and len(lines) == 3
    pytest.importorskip("matplotlib")
    png = tmp_path / "x.png"
    code, _, err = cli("crossover", "--hw", "wse3,b200", "--hidden", "512,2048", "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_compare_bad_input_writes_nothing(tmp_path, cli):
    csv_path = tmp_path / "c.csv"
    code, out, err = cli("compare", "--hw", "wse3,nosuch", "--csv", str(csv_path))
    assert code == 2 and "unknown hardware" in err and not csv_path.exists()
    code, out, err = cli("compare", "--devices", "8,x")
    assert code == 2 and "--devices" in err


def test_resident_on_wafer_suggests_streaming():
    report = make_plan(QWEN, resolve_hardware("wse3"), ExecutionRequest(memory_model="resident"))
    assert not report.plan.fits
    assert any("--memory-model weight_streaming" in s for s in report.suggestions)


def test_gradient_accumulation_runs_micro_batches_and_syncs_once():
    from btacalc.model.timing import step_time

    one = step_time(problem(devices=64, ep=8, zero=1), 1, 1)
    four = step_time(problem(devices=64, ep=8, zero=1).with_layout(micro_batches=4), 1, 1)
    # once per step: the gradient sync, the optimizer update and the gradient norm (model/gpu/fixed.py)
    sync = sum(one.phase_time_s[k] for k in ("gradient_sync", "optimizer_step", "grad_norm"))
    assert one.phase_time_s["gradient_sync"] > 0 and one.phase_time_s["optimizer_step"] > 0
    assert four.step_time_s == pytest.approx(4 * (one.step_time_s - sync) + sync)
    assert four.tokens_per_s > one.tokens_per_s  # the sync is amortised over 4x the tokens
    # on a wafer, everything but the step boundary (gradients out, MemoryX's optimizer step) runs per
    # micro-batch, the weight stream included: accumulation amortises only the step boundary
    w1 = step_time(problem(hw="wse3"), 2, 1)
    w4 = step_time(problem(hw="wse3").with_layout(micro_batches=4), 2, 1)
    boundary = w1.phase_time_s["step_boundary"]
    assert boundary > 0 and w4.phase_time_s["step_boundary"] == pytest.approx(boundary)
    assert w4.step_time_s == pytest.approx(4 * (w1.step_time_s - boundary) + boundary)


def test_sweep_over_device_counts(cli):
    code, out, err = cli("sweep", "--hw", "b200", "--vary", "devices=8:32:x2", "--ep", "8", "--json")
    assert code == 0, err
    pts = json.loads(out)["points"]
    assert [p["params"]["devices"] for p in pts] == [8, 16, 32]
    assert [p["plan"]["devices"] for p in pts] == [8, 16, 32]
    tput = [p["throughput"]["tokens_per_s"] for p in pts]
    assert tput == sorted(tput)


