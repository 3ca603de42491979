"""Wafer-scale systems as Cerebras runs them (issue 12): mesh-derived costs, SwarmX/MemoryX, the batch
split into micro-batches, the Cerebras YAML, whatif, compare --match and the sensitivity table.
Expected values are hand arithmetic from the profile numbers and the cited rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from btacalc.config.execution import BatchLimits, ExecutionRequest, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.hf import load_hf_config
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError
from btacalc.model.communication import exchanges
from btacalc.model.memory import MemoryModel
from btacalc.model.problem import make_problem
from btacalc.model.timing import step_time
from btacalc.model.wafer.cluster import step_boundary, stream_bandwidth, tree_latency_s, tree_levels, update_bytes
from btacalc.model.wafer.mesh import MeshGeometry, dispatch_s
from btacalc.planning.plan import make_plan

LLAMA = Path(__file__).parent / "data" / "llama-7b.config.json"
QWEN = load_preset("qwen3-30b-a3b")
WSE2 = resolve_hardware("wse2")
# WSE-2 mesh (profile): 750 x 994 PEs, 1.1 GHz, 1 cycle per hop, T_R = 2 cycles, 4 bytes per link per cycle
X, Y, F = 750, 994, 1.1e9


def streaming(model=QWEN, hw=WSE2, **run):
    return make_problem(model, hw, RunOptions(memory_model="weight_streaming", **run))


# --- the mesh ----------------------------------------------------------------------------------------

def test_mesh_step_is_distance_plus_core_router_round_trip():
    g = MeshGeometry.of(WSE2.mesh)
    assert (g.x, g.y) == (X, Y)
    assert g.step_s == pytest.approx((X + Y + 2 * 2 + 1) / F)  # 1.59 us
    assert g.bisection_bytes_per_s == pytest.approx(2 * X * 4 * F)  # 6.6 TB/s both ways


def test_dispatch_is_the_contention_of_a_random_permutation_over_the_bisection():
    p = streaming()
    ev = p.evaluate(4, 1)
    tokens = 4 * 4096
    # dispatch + combine, each beta*k*T*h, forward, backward and recomputed (full recomputation), 48 layers
    volume = 2 * 3 * 2 * 8 * tokens * 2048 * 48
    assert exchanges(ev) == (volume, 2 * 3 * 48)
    contention = volume / (4 * 4 * X)  # half crosses the cut of the long side, X links each way, 4 B per cycle
    energy = (volume / 4) * (X + Y) / 3 / (2 * (X * (Y - 1) + Y * (X - 1))) + 288 * (X + Y)
    assert contention > energy  # the bisection binds
    assert dispatch_s(WSE2.mesh, ev) == pytest.approx((contention + 288 * 5) / F)


def test_permutation_energy_binds_on_a_small_mesh_and_each_hop_costs_its_latency():
    """Below about 3 x 3 PEs the energy term E/N + L exceeds the contention C (on a wafer C binds: above).
    A 2 x 2 mesh has 8 directed links (4 neighbour pairs, both ways); here a hop takes 3 cycles."""
    g = MeshGeometry(x=2, y=2, clock_hz=1e9, hop_cycles=3, ramp_cycles=2, link_bytes_per_cycle=4)
    cells = [(i, j) for i in range(2) for j in range(2)]
    links = sum(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a in cells for b in cells)
    volume, count = 9600, 2
    contention = volume / (4 * 4 * 2)  # 300 cycles
    energy = (volume / 4) * (2 + 2) / 3 / links  # 400 cycles
    distance = (2 + 2) * 3  # X + Y hops, 3 cycles each
    assert links == 8 and energy > contention
    assert g.permutation_s(volume, count) == pytest.approx((energy + count * distance + count * (2 * 2 + 1)) / 1e9)


def test_dense_models_pay_no_dispatch_and_every_wafer_pays_the_tile_steps():
    dense = load_hf_config(LLAMA)
    t = step_time(streaming(dense, seq_len=2048), 3, 2)
    assert "mesh_dispatch" not in t.phase_time_s
    # 3 tiles x 32 layers x 7 tile phases (input_norm, rope, qkv, scores, softmax, pv, out) x 4 passes
    # (forward, dX, dW, and the forward again: full recomputation re-runs the whole layer, Korthikanti §5)
    # x one mesh step
    assert t.tiling_overhead_s == pytest.approx(3 * 32 * 7 * 4 * (X + Y + 5) / F)


def test_profile_peak_agrees_with_the_mesh_clock():
    # peak = cores x FP16 lanes x 2 FLOP x clock (4 lanes on WSE-2, 8 on WSE-3; profiles' notes)
    for name, lanes in (("wse2", 4), ("wse3", 8)):
        hw = resolve_hardware(name)
        bottom_up = hw.chip.cores.value * lanes * 2 * hw.mesh.clock_hz.value
        assert hw.chip.peak_flops_per_s.value == pytest.approx(bottom_up, rel=0.01)


# --- SwarmX and MemoryX ------------------------------------------------------------------------------

@pytest.mark.parametrize("systems, levels", [(1, 0), (2, 1), (4, 1), (5, 2), (16, 2), (17, 3), (64, 3), (192, 4)])
def test_swarmx_tree_has_ceil_log4_levels(systems, levels):
    assert tree_levels(systems, 4) == levels


def test_tree_latency_and_stream_bandwidth():
    assert tree_latency_s(WSE2, 1) == pytest.approx(10e-6)
    assert tree_latency_s(WSE2, 16) == pytest.approx(10e-6 + 2 * 5e-6)
    assert stream_bandwidth(WSE2) == 150e9
    slow = WSE2.with_number("memory.memoryx_bandwidth_bytes_per_s", 100e9, note="test: a slower MemoryX")
    assert stream_bandwidth(slow) == 100e9
    from btacalc.model.wafer.cluster import levels, stream_limit

    assert (stream_limit(WSE2), stream_limit(slow)) == ("system_io", "memoryx")
    # a profile without SwarmX's fan-out has no tree: one system, no levels, only MemoryX's own latency
    bare = WSE2.model_copy(update={"system": WSE2.system.model_copy(update={"swarmx_fanout": None})})
    assert levels(make_problem(QWEN, bare, RunOptions())) == 0
    assert levels(make_problem(QWEN, WSE2, RunOptions())) == 0 and tree_levels(16, 4) == 2
    assert tree_latency_s(bare, 16) == pytest.approx(10e-6)  # no tree: MemoryX's latency only
    # without MemoryX's own latency only the tree's levels count
    direct = WSE2.model_copy(update={"system": WSE2.system.model_copy(update={"memoryx_latency_s": None})})
    assert tree_latency_s(direct, 16) == pytest.approx(2 * 5e-6) and tree_latency_s(direct, 1) == 0.0


def test_step_boundary_by_hand():
    p = streaming()
    params = 30_532_122_624
    assert update_bytes(p, params) == 30 * params  # read 2 + 2 + 12, write 2 + 12 (mixed-precision Adam)
    sb = step_boundary(p, params, backward_s=0.5, micro_batch_s=1.0)
    t_g, t_u = 2 * params / 150e9, 30 * params / 1.2e12
    assert (sb.gradient_out_s, sb.optimizer_update_s) == (pytest.approx(t_g), pytest.approx(t_u))
    expected = max(t_g - 0.5, max(0.0, t_u - 1.0) + t_u / 48) + 2 * 10e-6
    assert sb.exposed_s == pytest.approx(expected)


def test_a_profile_without_a_memoryx_update_bandwidth_has_no_update_time():
    # the optimizer step is timed only when the profile gives MemoryX's update bandwidth
    hw = WSE2.model_copy(update={"memory": WSE2.memory.model_copy(update={"memoryx_update_bandwidth_bytes_per_s": None})})
    p = make_problem(QWEN, hw, RunOptions(memory_model="weight_streaming"))
    params = 30_532_122_624
    sb = step_boundary(p, params, backward_s=0.0, micro_batch_s=1.0)
    assert sb.optimizer_update_s == 0.0
    assert sb.exposed_s == pytest.approx(2 * params / 150e9 + 2 * 10e-6)  # the gradients out, unhidden


def test_several_systems_scale_the_tokens_and_keep_the_per_system_step():
    one = make_plan(QWEN, WSE2, ExecutionRequest(devices=1, limits=BatchLimits(global_batch=16)))
    four = make_plan(QWEN, WSE2, ExecutionRequest(devices=4, limits=BatchLimits(global_batch=64)))
    assert (four.plan.tiles, four.plan.tile_batch) == (one.plan.tiles, one.plan.tile_batch)
    assert four.wafer.systems == 4 and four.wafer.swarmx_levels == 1
    # same per-system work; only the tree latency (one level, 5 us, twice per step + once per micro-batch) differs
    assert four.throughput.step_time_s - one.throughput.step_time_s == pytest.approx(3 * 5e-6, rel=1e-6)
    assert four.wafer.tokens_per_s_per_system == pytest.approx(one.throughput.tokens_per_s, rel=1e-4)


def test_strong_scaling_stops_being_linear_when_the_batch_per_system_cannot_hide_the_stream():
    r = make_plan(QWEN, WSE2, ExecutionRequest(devices=64, limits=BatchLimits(global_batch=256)))
    w = r.wafer
    assert [row.systems for row in w.scaling] == [1, 2, 4, 8, 16, 32, 64]
    # one system runs all 256 as one micro-batch (their checkpoints held off the wafer, wafer/offload.py),
    # paying the micro-batch's fixed cost once: 64 sequences per system still hide the stream ...
    assert w.linear_until == 4
    row8 = w.scaling[3]
    assert row8.per_system_batch == 32 and row8.efficiency < 0.95  # ... 32 do not
    assert row8.limited_by.startswith("weight stream")
    assert row8.stream_bound_share > w.scaling[2].stream_bound_share


def test_wafer_cluster_rejects_gpu_layouts_and_resident_state(cli):
    with pytest.raises(BtacalcError, match="strict data parallel"):
        make_plan(QWEN, WSE2, ExecutionRequest(devices=2, expert_parallel=2))
    code, out, err = cli("plan", "--hw", "wse2", "--devices", "2", "--zero", "1")
    assert code == 2 and "--zero" in err and not out


# --- the batch split ---------------------------------------------------------------------------------

def test_divisibility_follows_model_zoo_2_0_3():
    """N % D == 0 and (N / D) % M == 0, checked once when the execution is resolved."""
    model = load_hf_config(LLAMA)

    def plan(n, systems, m=None):
        return make_plan(model, WSE2, ExecutionRequest(seq_len=2048, devices=systems, micro_batches=m,
                                                       limits=BatchLimits(global_batch=n)))

    assert plan(120, 2, 2).wafer.micro_batch_size == 120 // 2 // 2
    with pytest.raises(BtacalcError, match="99 does not divide over .* 2 wafer systems"):
        plan(99, 2)
    with pytest.raises(BtacalcError, match=r"\(60 per rank\) is not divisible by .* 7"):
        plan(120, 2, 7)


def test_several_wafer_systems_refuse_a_resident_model():
    with pytest.raises(BtacalcError, match="resident keeps the model on one wafer: .* MemoryX through SwarmX "
                                           r"\(weight_streaming\)"):
        make_plan(QWEN, WSE2, ExecutionRequest(devices=2, memory_model="resident"))


def test_a_resident_wafer_plan_shows_its_state_unsharded():
    """GPT-2 small fits whole on a CS-3 (memory_model auto: resident): one copy of 16-bit weights and
    gradients and 12 bytes of Adam state (fp32 master, m, v) per parameter, divisor 1."""
    h, vocab, positions, layers = 768, 50257, 1024, 12
    per_layer = (h * 3 * h + 3 * h) + (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h) + 2 * 2 * h  # qkv, o, fc, proj, 2 LN
    params = layers * per_layer + vocab * h + positions * h + 2 * h  # tied LM head, final LN
    # at GPT-2's own 1024 positions (semantics20: a longer sequence grows the learned table, as the launch does)
    r = make_plan(load_preset("gpt2-small"), resolve_hardware("wse3"), ExecutionRequest(seq_len=positions))
    assert r.inputs.memory_model == "resident"
    rows = {row.component: row for row in r.state_sharding}
    assert {c: (row.params, row.bytes_per_param, row.divisor) for c, row in rows.items()} == {
        "weights": (params, 2, 1), "gradients": (params, 2, 1), "optimizer": (params, 12, 1)}
    assert (r.memory_bytes["weights"], r.memory_bytes["optimizer_state"]) == (2 * params, 12 * params)


def test_llama_7b_measured_run_fits_with_micro_batches_chosen():
    """ALCF's LLaMA-7B run (1 x CS-2, batch 99, s = 2048, measured-runs.json): its compile log reads "Compile
    will proceed at original per-box batch size 99". The checkpoints of 99 sequences under full
    recomputation, 32 x 2048 x 99 x 4096 x 2 B = 53 GB, exceed the SRAM; held off the wafer (R2.0 dynamic
    memory offload, wafer/offload.py) they fit as one micro-batch of 3 tiles of 33; 99 untiled do not
    (eager attention's working set). Without offload the SRAM alone cannot hold them (the split of
    before: micro-batches of 33 at most). Density and throughput both take one micro-batch of 99."""
    model = load_hf_config(LLAMA)
    mem = MemoryModel(streaming(model, seq_len=2048))
    assert mem.fits(3, 33) and mem.fits(99, 1) and not mem.fits(1, 99)
    assert 32 * 2048 * 99 * 4096 * 2 > mem.usable  # the checkpoints alone exceed the usable SRAM
    no_offload = WSE2.model_copy(update={"memory": WSE2.memory.model_copy(
        update={"activation_offload_bandwidth_bytes_per_s": None})})
    sram_only = MemoryModel(streaming(model, hw=no_offload, seq_len=2048))
    assert not sram_only.fits(99, 1) and not sram_only.fits(3, 33) and sram_only.fits(33, 1)
    dense = make_plan(model, WSE2, ExecutionRequest(seq_len=2048, limits=BatchLimits(global_batch=99),
                                                    objective="density"))
    assert (dense.wafer.global_batch, dense.wafer.micro_batches, dense.wafer.micro_batch_size) == (99, 1, 99)
    assert dense.plan.tiles > 1
    r = make_plan(model, WSE2, ExecutionRequest(seq_len=2048, limits=BatchLimits(global_batch=99)))
    assert r.plan.fits and r.throughput is not None
    assert (r.wafer.global_batch, r.wafer.micro_batches, r.wafer.micro_batch_size, r.plan.tiles) == (99, 1, 99, 3)
    assert r.throughput.tokens_per_s == dense.throughput.tokens_per_s  # the same shape
    fixed = make_plan(model, WSE2, ExecutionRequest(seq_len=2048, micro_batches=3,
                                                    limits=BatchLimits(global_batch=99)))
    assert fixed.wafer.micro_batches == 3 and fixed.wafer.micro_batch_size == 33  # --grad-accum fixes M


def test_two_systems_split_the_global_batch():
    """120 sequences over 2 systems: 60 per system, as M micro-batches of G*b with M*G*b = 60; the solver's
    split is at least as fast as any split --grad-accum could fix."""
    model = load_hf_config(LLAMA)
    r = make_plan(model, WSE2, ExecutionRequest(seq_len=2048, devices=2, limits=BatchLimits(global_batch=120)))
    assert r.plan.fits
    assert r.wafer.per_system_batch == 60 and r.wafer.micro_batches * r.wafer.micro_batch_size == 60
    assert r.plan.cluster_tokens_per_step == 120 * 2048
    for m in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60):
        fixed = make_plan(model, WSE2, ExecutionRequest(seq_len=2048, devices=2, micro_batches=m,
                                                        limits=BatchLimits(global_batch=120)))
        assert fixed.wafer.micro_batches == m
        assert fixed.throughput is None or fixed.throughput.tokens_per_s <= r.throughput.tokens_per_s * (1 + 1e-12)


# --- the Cerebras configuration ----------------------------------------------------------------------

def _yaml(cli, *args):
    yaml = pytest.importorskip("yaml")
    code, out, err = cli("plan", *args, "--emit", "cerebras")
    assert code == 0, err
    return yaml.safe_load(out)


def test_emitted_cerebras_yaml_parses_and_the_tile_cap_divides_the_batch(cli):
    cfg = _yaml(cli, "--hw", "wse2", "--devices", "4", "--global-batch", "96")["trainer"]
    flags = cfg["init"]["callbacks"][0]["GlobalFlags"]["csx.debug.ini"]
    micro = cfg["init"]["callbacks"][1]["ScopedTrainFlags"]["csx.performance.micro_batch_size"]
    batch = cfg["fit"]["train_dataloader"]["batch_size"]
    assert cfg["init"]["backend"]["cluster_config"]["num_csx"] == 4 and batch == 96
    assert flags["ws_opt_enable_bta"] is True
    tile = flags["ws_opt_bta_max_tile"]
    assert batch % tile == 0 and micro % tile == 0 and (batch // 4) % micro == 0


def test_untiled_plan_disables_bta(cli):
    cfg = _yaml(cli, "--hw", "wse2", "--tiles", "1")
    flags = cfg["trainer"]["init"]["callbacks"][0]["GlobalFlags"]["csx.debug.ini"]
    assert flags == {"ws_opt_enable_bta": False}


def test_emit_needs_a_wafer_plan_that_fits(cli):
    code, out, err = cli("plan", "--hw", "b200", "--emit", "cerebras")
    assert code == 2 and "wafer-scale profile" in err and not out


# --- whatif ------------------------------------------------------------------------------------------

def test_whatif_finds_the_smallest_sram_that_reaches_the_target(cli):
    code, out, err = cli("whatif", "--hw", "wse2", "--top-k", "1", "--fixed-active",
                         "--target", "relative_to_dense=0.85", "--solve-for", "sram_bytes", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["solve_for"] == "chip.sram_bytes" and r["reached"]
    assert r["answer"]["metric"] >= 0.85 > r["today_metric"]
    assert r["ratio"] == pytest.approx(r["value"] / 40e9)
    from btacalc.planning.metrics import plan_metrics

    model = QWEN.with_overrides(top_k=1, fixed_active=True)
    below = WSE2.with_number("chip.sram_bytes", r["value"] * (1 - 3e-3), note="test: just below the answer")
    assert plan_metrics(model, below, ExecutionRequest()).values["relative_to_dense"] < 0.85


def test_whatif_says_when_a_target_is_out_of_reach(cli):
    code, out, err = cli("whatif", "--hw", "wse2", "--top-k", "1", "--fixed-active",
                         "--target", "relative_to_dense=0.85", "--solve-for", "layers", "--json")
    assert code == 1
    r = json.loads(out)
    assert not r["reached"] and r["value"] is None and "does not reach" in r["note"]


@pytest.mark.parametrize("args, text", [
    (("--target", "speed=3", "--solve-for", "sram_bytes"), "--target"),
    (("--target", "tokens_per_s=abc", "--solve-for", "sram_bytes"), "not a number"),
    (("--target", "tokens_per_s=5e4", "--solve-for", "warp_drive"), "--solve-for"),
])
def test_whatif_bad_input_exits_2(cli, args, text):
    code, out, err = cli("whatif", "--hw", "wse2", *args)
    assert code == 2 and text in err and not out


# --- compare and sensitivity -------------------------------------------------------------------------

def test_compare_matches_gpus_to_wafer_power_and_count(cli):
    code, out, err = cli("compare", "--hw", "wse2,b200", "--systems", "4", "--match", "power", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    b200 = resolve_hardware("b200")
    node = int(b200.system.devices_per_node.value)
    nodes = round(4 * 23e3 / (node * b200.power_per_device_w))  # whole nodes nearest 4 x 23 kW
    assert [r["devices"] for r in rows] == [4, nodes * node]
    assert "by power" in rows[1]["note"]
    code, out, _ = cli("compare", "--hw", "wse2,b200", "--systems", "4", "--match", "devices", "--json")
    assert [r["devices"] for r in json.loads(out)["rows"]] == [4, 4]
    code, _, err = cli("compare", "--hw", "wse2,b200", "--match", "power", "--devices", "8")
    assert code == 2 and "--match" in err


def test_sensitivity_of_a_compute_bound_dense_plan():
    from btacalc.planning.sensitivity import sensitivity

    model = load_hf_config(LLAMA)
    req = ExecutionRequest(seq_len=2048, limits=BatchLimits(global_batch=33, tiles=11))
    rows = {r.parameter: r for r in sensitivity(model, WSE2, req, percent=10)}
    eff = rows["calibration.compute_efficiency"]
    # compute-bound: tokens/s is nearly proportional to the efficiency (the step's fixed terms dilute it)
    assert 0.9 < eff.elasticity_plus <= 1.0 and 0.9 < eff.elasticity_minus <= 1.0
    # the mesh's hop latency enters through the per-tile overhead only (11 tiles x 32 layers per micro-batch):
    # about 1% of the step
    assert abs(rows["mesh.hop_latency_cycles"].elasticity_plus) < 0.02
    assert rows["chip.power_w"].elasticity_plus == 0  # power moves tokens/kW, not tokens/s


def test_validate_says_what_the_flat_top_k_1_curve_would_take():
    """README's answer: the top_k = 1 BTA point is out of reach by the link alone (MemoryX then feeds the
    stream) or by fewer layers. Since checkpoints offload (wafer/offload.py) a larger batch fits and the
    stream hides behind more work, so link + MemoryX serving together (with or without 16 micro-batches),
    the three bandwidths together, or more SRAM reach it at a modest factor (each between 1x and 2x)."""
    from btacalc.planning.validate import load_points, what_it_takes

    point = next(p for p in load_points() if p.id == "topk-1-bta")
    answers = {(r.solve_for, q.grad_accum): r for r, q in zip(what_it_takes(point), point.whatif)}
    assert not answers[("memory.offchip_bandwidth_bytes_per_s", None)].reached
    assert not answers[("layers", None)].reached
    both = "memory.offchip_bandwidth_bytes_per_s,memory.memoryx_bandwidth_bytes_per_s"
    for key in (("chip.sram_bytes", None), (both, None), (both, 16),
                (both + ",memory.memoryx_update_bandwidth_bytes_per_s", None)):
        assert answers[key].reached and 1 < answers[key].ratio < 2


def test_micro_batch_size_is_a_whole_count():
    # 120 sequences over 2 systems in 3 micro-batches: 20 each, in JSON as an integer
    r = make_plan(load_hf_config(LLAMA), WSE2, ExecutionRequest(seq_len=2048, devices=2, micro_batches=3,
                                                                limits=BatchLimits(global_batch=120)))
    assert json.loads(r.model_dump_json())["wafer"]["micro_batch_size"] == 20
    assert type(r.wafer.micro_batch_size) is int


def test_sensitivity_moves_counts_to_whole_numbers_and_reports_refused_values():
    # 8 GPUs per node moved by 10% is 7.2 / 8.8: a count moves to the nearest whole number instead (7, 9);
    # a fraction moved above 1 (compute efficiency 0.59 + 99%) is not a profile: the row says so
    from btacalc.planning.sensitivity import sensitivity

    b200 = resolve_hardware("b200")
    req = ExecutionRequest(devices=16)
    rows = {r.parameter: r for r in sensitivity(QWEN, b200, req, percent=10)}
    per_node = rows["system.devices_per_node"]
    assert per_node.tokens_per_s_minus is not None and per_node.tokens_per_s_plus is not None
    base = rows["chip.peak_flops_per_s"]
    assert base.elasticity_plus is not None
    wide = {r.parameter: r for r in sensitivity(QWEN, b200, req, percent=99)}
    eff = wide["calibration.compute_efficiency"]
    assert eff.tokens_per_s_plus is None and eff.elasticity_plus is None
    assert eff.shape_plus.startswith("not applicable") and "in [1e-06, 1]" in eff.shape_plus


def test_whatif_stops_at_the_edge_of_a_numbers_range(cli):
    # compute efficiency cannot pass 1: the scan stops there (since the twenty-fifth session; before, the grid
    # points above it were traced as "not a valid profile"), and an unreachable target is reported as such (exit 1)
    code, out, err = cli("whatif", "--hw", "wse2", "--target", "tokens_per_s=1e12", "--solve-for",
                         "compute_efficiency", "--json")
    assert code == 1, err
    r = json.loads(out)
    assert not r["reached"] and "does not reach" in r["note"] and " to 1 " in r["note"]
    assert max(s["value"] for s in r["trace"]) == pytest.approx(1.0)
    assert not any(s["binding_constraint"].startswith("not a valid profile") for s in r["trace"])


def test_a_sensitivity_below_double_precision_moves_nothing_and_says_so():
    """review12: --sensitivity 1e-300 moves 9.89e14 by 9.89e14 x 1e-302, which rounds to 9.89e14 again (a double
    holds 15-16 significant digits): the step taken was 0 and the elasticity divided by it (a ZeroDivisionError,
    "beyond the arithmetic's range", exit 2). A move that changes nothing is not applicable; counts still move by one."""
    from btacalc.planning.sensitivity import sensitivity

    rows = {r.parameter: r for r in sensitivity(QWEN, resolve_hardware("b200"), ExecutionRequest(devices=16),
                                                percent=1e-300)}
    peak = rows["chip.peak_flops_per_s"]
    assert peak.elasticity_minus is None and peak.elasticity_plus is None
    assert peak.shape_plus.startswith("not applicable") and "unchanged (below double precision)" in peak.shape_plus
    per_node = rows["system.devices_per_node"]  # 8 GPUs per node: a count moves to 7 and 9
    assert per_node.tokens_per_s_minus is not None and per_node.elasticity_plus is not None
