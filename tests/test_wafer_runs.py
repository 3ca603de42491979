"""The wafer runs added for issue 24 (btacalc/data/measured_runs.json), each number re-derived from the
log lines quoted in the run's notes, and the batch effect the BERT-large pair documents as its known gap:
a step that costs t_0 + B t_seq on the wafer, where btacalc's step is proportional to the batch."""

from __future__ import annotations

import pytest

from btacalc.paths import package_data
from btacalc.planning.measured import load_runs, predict

RUNS = {r.id: r for r in load_runs()}
BERT_512, BERT_2048 = RUNS["bert-large-wse2-1-406"], RUNS["bert-large-wse2-1-407"]

# Log timestamps (seconds after midnight) of Step=100 and Step=1000, from the runs' sources:
# btrungvo/ai-science-training-series @ 0323731c (B = 512): 11:10:32.958 and 11:13:10.091;
# kharelb/ai-science-training-series @ e98f3966 (B = 2048): 13:03:05.540 and 13:07:40.068.
LOOP_512_S = (11 * 3600 + 13 * 60 + 10.091) - (11 * 3600 + 10 * 60 + 32.958)
LOOP_2048_S = (13 * 3600 + 7 * 60 + 40.068) - (13 * 3600 + 3 * 60 + 5.540)
STEPS = 1000 - 100


def test_bert_pair_rates_are_the_logs_arithmetic():
    assert LOOP_512_S == pytest.approx(157.133) and LOOP_2048_S == pytest.approx(274.528)
    for run, loop in ((BERT_512, LOOP_512_S), (BERT_2048, LOOP_2048_S)):
        sequences_per_s = STEPS * run.global_batch / loop
        assert run.measured.tokens_per_s_per_device == pytest.approx(sequences_per_s * run.seq, abs=1)
        assert run.measured.step_time_s == pytest.approx(loop / STEPS, abs=1e-5)
    assert BERT_512.micro_batch == 512  # "Compile will proceed at original per-box batch size 512"
    assert BERT_2048.micro_batch is None  # not in the part of the log shown: the solver picks it


def test_bert_pair_step_line_is_what_the_fixed_cost_starts_from():
    """t_step = t_0 + B t_seq through the two runs: t_seq = 84.9 us per sequence, t_0 = 0.131 s per step
    (one micro-batch each), the numbers the runs' notes quote; the pair are fit runs for the micro-batch's
    fixed cost, which starts from this t_0 (the profiles' estimate before the fit)."""
    t512, t2048 = LOOP_512_S / STEPS, LOOP_2048_S / STEPS
    t_seq = (t2048 - t512) / (2048 - 512)
    t0 = t512 - 512 * t_seq
    assert t_seq == pytest.approx(84.9e-6, abs=0.05e-6) and t0 == pytest.approx(0.131, abs=5e-4)
    assert t0 / t512 == pytest.approx(0.75, abs=0.01)  # three quarters of the step at 512
    for run in (BERT_512, BERT_2048):
        assert run.role == "fit" and not run.known_gap
    assert "= 84.9 us" in BERT_2048.notes and "= 0.1311 s" in BERT_2048.notes


def test_btacalc_predicts_bert_rate_growing_with_the_batch():
    """With the micro-batch's fixed cost t_0 (fitted) btacalc's step is t_0 + B t_seq as the pair's: both run
    as one micro-batch, so the predicted rate ratio is (t_0 + 512 t_seq) 2048 / ((t_0 + 2048 t_seq) 512)
    with btacalc's own t_0 and t_seq, taken from the two predicted steps."""
    from btacalc.config.hardware import resolve_hardware

    p512, p2048 = predict(BERT_512), predict(BERT_2048)
    rate = {r.id: r.predicted.tokens_per_s_per_device / 128 for r in (p512, p2048)}
    t512, t2048 = 512 / rate[BERT_512.id], 2048 / rate[BERT_2048.id]
    t0 = resolve_hardware("wse2").calibration.micro_batch_fixed_s.value
    t_seq = (t512 - t0) / 512  # what btacalc's 512 step leaves per sequence
    assert t2048 == pytest.approx(t0 + 2048 * t_seq, rel=0.02)  # the same line through the 2,048 step
    assert 1.5 < rate[BERT_2048.id] / rate[BERT_512.id] < 2.29  # grows, less than measured (t_seq too high)
    measured = BERT_2048.measured.tokens_per_s_per_device / BERT_512.measured.tokens_per_s_per_device
    assert measured == pytest.approx(2.29, abs=0.01)


def test_gpt_j_on_one_cs2_is_the_logs_arithmetic():
    run = RUNS["gpt-j-6b-wse2-1-408"]
    batch = 13200 // 200  # 'Processed 13200 sample(s)' over 200 steps
    assert run.global_batch == batch == 66 and run.devices == 1 and run.role == "check"
    assert run.measured.step_time_s == pytest.approx(66 / 19.80, abs=1e-4)  # Rate 19.80 samples/s
    assert run.measured.tokens_per_s_per_device == pytest.approx(19.80 * 2048, abs=1)


def _clock_s(h: int, m: int, s: float) -> float:
    return h * 3600 + m * 60 + s


def test_dit_on_cs3_rate_is_the_device_rate_through_the_checkpoint():
    """dit-2b-wse3-1-405's log (argonne-lcf/user-guides @ 2f884f51): Step=100 at 21:45:21.917, Step=200 at
    21:47:35.271, Step=400 at 21:52:02.497, a 3-minute checkpoint save after step 200 and ~6,000 images/s logged
    for steps 220-340. Steps 200 -> 400 take as long per step as 100 -> 200, so those lines are the host catching
    up with a device that ran through the save, not a faster device (or a restart)."""
    run = RUNS["dit-2b-wse3-1-405"]
    s100, s200, s400 = _clock_s(21, 45, 21.917), _clock_s(21, 47, 35.271), _clock_s(21, 52, 2.497)
    early, late = (s200 - s100) / 100, (s400 - s200) / 200
    assert late == pytest.approx(early, rel=0.005)
    assert run.measured.step_time_s == pytest.approx(early, abs=1e-4)
    assert run.measured.tokens_per_s_per_device == pytest.approx(1168 / early * 256, abs=1)


def test_dit_runs_are_one_micro_batch_as_their_release_configs_pin():
    """Model Zoo's DiT-2B config sets csx.performance.micro_batch_size to the whole batch (1,100 at R_2.4.0,
    1,168 at R_2.10.0): the rows say so, and btacalc left free chooses the same single micro-batch, so the
    DiT gap is not the compiler's micro-batch."""
    for rid, batch in (("dit-2b-wse2-1-403", 1100), ("dit-2b-wse3-1-405", 1168)):
        run = RUNS[rid]
        assert run.global_batch == run.micro_batch == batch
        pinned, free = predict(run), predict(run.model_copy(update={"micro_batch": None}))
        assert free.predicted.step_time_s == pytest.approx(pinned.predicted.step_time_s, rel=1e-12)


def test_dit_gap_scales_with_compute_not_a_fixed_time():
    """What btacalc misses on DiT-2B is in proportion to its compute on both generations (0.50 and 0.53 of
    btacalc's per-FLOP rate), not one time shared by the two (host, input, MemoryX would be): the arithmetic the
    runs' known gap quotes, from btacalc's own step parts."""
    from btacalc.planning.measured import express
    from btacalc.planning.plan import make_plan
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import resolve_model

    missing, eta = {}, {}
    for rid in ("dit-2b-wse2-1-403", "dit-2b-wse3-1-405"):
        run = RUNS[rid]
        request, _ = express(run, "wafer")
        t = make_plan(resolve_model(run.model), resolve_hardware(run.hw), request).throughput
        fixed = t.step_time_s * sum(t.phase_share.get(k, 0.0) for k in ("micro_batch_fixed", "step_boundary", "kernel_fixed"))
        compute = t.step_time_s - fixed
        missing[rid] = run.measured.step_time_s - t.step_time_s
        eta[rid] = compute / (run.measured.step_time_s - fixed)
    assert missing["dit-2b-wse2-1-403"] / missing["dit-2b-wse3-1-405"] > 2  # not one shared time
    assert eta["dit-2b-wse2-1-403"] == pytest.approx(0.50, abs=0.01)
    assert eta["dit-2b-wse3-1-405"] == pytest.approx(0.53, abs=0.01)


# wafer6: one user's same-day BERT-large sweep on one CS-2 (github.com/PrayaagKatta/ai-science-training-series
# 07_AITestbeds/HW7/Cerebras.txt @ 3bca8a8b, 2024-04-10, R_2.1.1): Step=100 and Step=1000 of each run.
SWEEP_LOOP_S = {
    512: _clock_s(3, 8, 23.963) - _clock_s(3, 5, 45.947),
    1024: _clock_s(6, 19, 7.665) - _clock_s(6, 15, 58.772),
    2048: _clock_s(3, 45, 14.570) - _clock_s(3, 40, 41.233),
}


def test_bert_1024_of_2024_is_the_logs_arithmetic():
    run = RUNS["bert-large-wse2-1-409"]
    loop = SWEEP_LOOP_S[1024]
    assert loop == pytest.approx(188.893)
    assert run.global_batch == run.micro_batch == 1024 and run.devices == 1 and run.seq == 128
    assert run.role == "check" and not run.known_gap
    assert run.measured.step_time_s == pytest.approx(loop / STEPS, abs=1e-6)
    assert run.measured.tokens_per_s_per_device == pytest.approx(STEPS * 1024 / loop * 128, abs=1)
    # the 2023-11 run of the same example and batch (R_2.0.3) ran 17% slower per sequence
    older = RUNS["bert-large-wse2-1-401"]
    assert older.measured.step_time_s / run.measured.step_time_s == pytest.approx(1.207, abs=0.002)


def test_bert_same_day_sweep_repeats_the_fit_pair_and_bends_below_its_line():
    """The sweep's 512 and 2,048 runs are the fit runs' compiles (same hashes) and land within 0.6% of them,
    which is why they stay in the notes; the affine step t_0 + B t_seq through them (t_seq = 83.4 us,
    t_0 = 0.1329 s) puts 1,024 at 0.2183 s, 4.0% above the measured 0.2099 s (the run is 3.8% below the line): the
    step is slightly concave in the batch."""
    t = {b: loop / STEPS for b, loop in SWEEP_LOOP_S.items()}
    assert t[512] / BERT_512.measured.step_time_s == pytest.approx(1.0, abs=0.006)
    assert t[2048] / BERT_2048.measured.step_time_s == pytest.approx(1.0, abs=0.006)
    t_seq = (t[2048] - t[512]) / (2048 - 512)
    t0 = t[512] - 512 * t_seq
    assert t_seq == pytest.approx(83.4e-6, abs=0.05e-6) and t0 == pytest.approx(0.1329, abs=2e-4)
    line_1024 = t0 + 1024 * t_seq
    assert line_1024 / t[1024] - 1 == pytest.approx(0.040, abs=0.002)
    run = RUNS["bert-large-wse2-1-409"]
    assert "3.8% below that line" in run.notes  # (0.2183 - 0.2099) / 0.2183


def test_gpt_j_on_two_cs2_of_r18_is_the_logs_arithmetic_and_carries_its_release():
    """argonne-lcf/user-guides @ ba547969 (2023-05-17, R_1.8.0): Step=100 at 18:51:03.551, Step=500 at
    19:16:32.156, 'Completed 65000 sample(s)' over 500 steps, --num_csx=2."""
    run = RUNS["gpt-j-6b-wse2-2-410"]
    loop = _clock_s(19, 16, 32.156) - _clock_s(18, 51, 3.551)
    batch = 65000 // 500
    assert run.global_batch == batch == 130 and run.devices == 2 and run.seq == 2048
    assert run.measured.step_time_s == pytest.approx(loop / 400, abs=1e-4)
    assert run.measured.tokens_per_s_per_device == pytest.approx(400 * 130 / loop * 2048 / 2, abs=1)
    assert run.role == "check" and run.release == "Cerebras R_1.8.0" and not run.known_gap
    # per sequence, the same example six months later on R_2.0.3 (gpt-j-6b-wse2-2-399) is 1.28x faster
    newer = RUNS["gpt-j-6b-wse2-2-399"]
    per_seq = (run.measured.step_time_s / 130) / (newer.measured.step_time_s / 120)
    assert per_seq == pytest.approx(1.28, abs=0.01)


def _btacalc_step_parts(run):
    """btacalc's step for a measured run and its part that is not a fixed cost (micro-batch, kernel, step
    boundary), with the number of micro-batches per step."""
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import resolve_model
    from btacalc.planning.measured import express
    from btacalc.planning.plan import make_plan

    request, _ = express(run, "wafer")
    plan = make_plan(resolve_model(run.model), resolve_hardware(run.hw), request)
    t = plan.throughput
    fixed = t.step_time_s * sum(t.phase_share.get(k, 0.0) for k in ("micro_batch_fixed", "step_boundary", "kernel_fixed"))
    return t.step_time_s, t.step_time_s - fixed, plan


def test_esm2_on_cs3_runs_the_micro_batch_of_the_same_config_on_cs2():
    """wafer7: both ESM-2 rows run ALCF's one config file (cp .../ESM-2/params_esm2_t12_35M_UR50D_modified.yaml);
    its CS-2 compile tried one micro-batch, 64, so the CS-3 row uses 64 too: 2,048 / 64 = 32 micro-batches per
    step. At 64 the measured CS-3 step leaves (2.0848 s - btacalc's compute) / 32 = 0.060 s per micro-batch for
    the fixed cost, 0.63 of the 0.0962 s fitted on CS-2 runs: the known gap's arithmetic."""
    from btacalc.config.hardware import resolve_hardware

    cs2, cs3 = RUNS["esm2-35m-wse2-1-402"], RUNS["esm2-35m-wse3-1-404"]
    assert cs3.micro_batch == cs2.micro_batch == 64 and cs3.global_batch == cs2.global_batch == 2048
    micro_batches = cs3.global_batch // cs3.micro_batch
    assert micro_batches == 32
    t0 = resolve_hardware("wse3").calibration.micro_batch_fixed_s.value
    assert t0 == resolve_hardware("wse2").calibration.micro_batch_fixed_s.value  # one factor, both generations
    step, compute, _ = _btacalc_step_parts(cs3)
    assert compute == pytest.approx(0.16, abs=0.01)
    assert step == pytest.approx(compute + micro_batches * t0, rel=0.01)  # the fixed cost dominates the step
    left = (cs3.measured.step_time_s - compute) / micro_batches
    assert left == pytest.approx(0.060, abs=0.001) and left / t0 == pytest.approx(0.63, abs=0.01)
    assert cs3.measured.step_time_s / step - 1 == pytest.approx(-0.356, abs=0.002)  # error: rate over rate
    assert "-35.6%" in cs3.known_gap and "0.63" in cs3.known_gap


def test_gpt_j_r18_batch_is_65_per_system_as_its_release_reads_batch_size():
    """Model Zoo Release_1.8.0's GPT-J config sets batch_size 65 and every R_1.8 input worker streams it (the
    per-system batch; the effective-batch reading starts at Release_1.9.1): 65 x 2 systems x 500 steps = the log's
    'Completed 65000 sample(s)'. Without gradient accumulation (R_1.8's default), each system runs one micro-batch
    of 65, which is also the split btacalc picks left free."""
    run = RUNS["gpt-j-6b-wse2-2-410"]
    per_system = 65
    assert per_system * run.devices * 500 == 65000 == run.global_batch * 500
    assert run.micro_batch == per_system == run.global_batch // run.devices
    pinned, free = predict(run), predict(run.model_copy(update={"micro_batch": None}))
    assert free.predicted.step_time_s == pytest.approx(pinned.predicted.step_time_s, rel=1e-12)


# wafer25: Model Zoo's notes for its general release 2.0.2 (github.com/Cerebras/modelzoo, tag Release_2.0.2,
# RELEASE-NOTES.md L20): "GPT style models train with ~30% improved performance in release 2.0.2".
RELEASE_2_0_2_GPT_GAIN = 1.3


def test_gpt_j_before_release_2_0_2_trains_at_the_fitted_rate_over_its_stated_gain():
    """The wafer factors are fitted on runs of R_2.1.1 (every wse fit run's software is of 2024-01), after
    Release_2.0.2 (tagged 2023-11-08), so they carry its gain. GPT-J is a GPT-style model in the notes' own words (L24:
    "The default dataloader for GPT-style models is now GptHDF5MapDataProcessor", which GPT-J's config takes at that
    release). Its runs of R_1.9.x and R_1.8.0 are therefore predicted at the fitted rate / 1.3 and step x 1.3;
    the R_2.0.3 run at the fitted rate. Both older runs then read inside the gate's band."""
    from btacalc.config.cerebras_release import cerebras_releases

    (gain,) = cerebras_releases().gain
    assert gain.since == "2.0.2" and gain.speedup == RELEASE_2_0_2_GPT_GAIN and "gpt-j-6b" in gain.models
    assert "GPT style models train with ~30% improved performance in release 2.0.2" in gain.source
    fits = [r for r in RUNS.values() if r.role == "fit" and r.hw.startswith("wse")]
    assert fits and all(r.software_date >= "2023-11" and r.release is None for r in fits)
    for run_id, older in (("gpt-j-6b-wse2-1-408", True), ("gpt-j-6b-wse2-2-410", True), ("gpt-j-6b-wse2-2-399", False)):
        run = RUNS[run_id]
        expected = RELEASE_2_0_2_GPT_GAIN if older else 1.0
        fitted, stated = predict(run.model_copy(update={"release": None})), predict(run)
        assert stated.predicted.tokens_per_s_per_device == pytest.approx(
            fitted.predicted.tokens_per_s_per_device / expected, rel=1e-12)
        assert stated.predicted.step_time_s == pytest.approx(fitted.predicted.step_time_s * expected, rel=1e-12)
        assert 1 + stated.error == pytest.approx((1 + fitted.error) / expected, rel=1e-12)
        assert stated.release_gain == (expected if older else None)
        assert not run.known_gap and abs(stated.error) < 0.25
        if older:  # the release was these runs' known gap: +26.5% and +47.2% before wafer25
            assert fitted.error > 0.25 and abs(stated.error) < fitted.error


def test_a_release_gain_applies_to_the_models_it_names_and_needs_the_patch_where_it_changed():
    """The 2.0.2 gain names GPT-style models only: DiT-2B's run read as an R_1.9.1 run predicts as fitted. A
    release that names only its minor version where a gain starts at a patch ("R_2.0.x") is not read: the run is
    not predicted, with a one-line reason."""
    dit = RUNS["dit-2b-wse2-1-403"]
    as_fitted, as_old = predict(dit), predict(dit.model_copy(update={"release": "Cerebras R_1.9.1"}))
    assert as_old.predicted.step_time_s == as_fitted.predicted.step_time_s and as_old.release_gain is None
    vague = predict(RUNS["gpt-j-6b-wse2-1-408"].model_copy(update={"release": "Cerebras R_2.0.x"}))
    assert not vague.expressible and "R_2.0.N" in vague.reason and "\n" not in vague.reason


# wafer9: which resource of the wafer the remaining misses scale with. The two generations differ by datasheet
# numbers the profiles hold (hardware_profiles/wse2.toml, wse3.toml): SIMD peak 2.107x, cores 1.059x, usable PEs
# 1.185x, clock 1.0x, mesh step (latency of one dependent step) 0.906x, weight-stream link 1.0x; Cerebras' cluster
# page gives the CS-3's ingress/egress as 30% faster (https://training-docs.cerebras.ai/rel-2.10.0/concepts/
# cerebras-wafer-scale-cluster), the largest link ratio any source gives.
CEREBRAS_CS3_LINK_RATIO = 1.3


def _generation_ratios():
    from btacalc.config.hardware import resolve_hardware
    from btacalc.model.wafer.mesh import MeshGeometry

    cs2, cs3 = resolve_hardware("wse2"), resolve_hardware("wse3")
    g2, g3 = MeshGeometry.of(cs2.mesh), MeshGeometry.of(cs3.mesh)
    return {
        "peak": cs3.chip.peak_flops_per_s.value / cs2.chip.peak_flops_per_s.value,
        "cores": cs3.chip.cores.value / cs2.chip.cores.value,
        "usable_pes": (g3.x * g3.y) / (g2.x * g2.y),
        "clock": g3.clock_hz / g2.clock_hz,
        "mesh_step": g2.step_s / g3.step_s,
        "link": max(cs3.memory.offchip_bandwidth_bytes_per_s.value / cs2.memory.offchip_bandwidth_bytes_per_s.value,
                    CEREBRAS_CS3_LINK_RATIO),
    }


def test_dit_miss_shrinks_with_simd_work_not_with_link_or_latency():
    """wafer9: per image, the time btacalc misses on DiT-2B shrinks 2.41x from CS-2 to CS-3, more than the SIMD
    peak (2.107x) and far more than every other resource: so it is not a stream- or link-bound cost (adaLN's
    per-image GEMMs streamed, activation offload, input), which would shrink at most 1.3x, nor a latency per
    kernel run (a tiny-m GEMM's fixed cost), which the WSE-3's longer mesh step makes slower, unless the newer
    release of the CS-3 row alone gained 1.85x (2.41 / 1.3) or 2.66x (2.41 / 0.906) on it. By magnitude it is
    not adaLN either: its weights over the link take 3% of the CS-2 miss, its elementwise work would have to run
    at under 1e-4 of the wafer's lane rate to fill it."""
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import resolve_model

    miss = {}
    for rid in ("dit-2b-wse2-1-403", "dit-2b-wse3-1-405"):
        run = RUNS[rid]
        step, _, _ = _btacalc_step_parts(run)
        miss[rid] = (run.measured.step_time_s - step) / run.global_batch  # seconds per image
    shrink = miss["dit-2b-wse2-1-403"] / miss["dit-2b-wse3-1-405"]
    ratios = _generation_ratios()
    assert shrink == pytest.approx(2.41, abs=0.01)
    assert ratios["peak"] == pytest.approx(2.107, abs=0.001)
    assert shrink > ratios["peak"] > 1.6 > max(v for k, v in ratios.items() if k != "peak")
    assert ratios["mesh_step"] < 1  # a latency-bound cost would be slower on the CS-3

    # adaLN-Zero (Model Zoo Release_2.4.0 layers/AdaLayerNorm.py, DiTDecoderLayer.py): per block shift and scale
    # linears of two norms and two gates, Linear(h, h) with bias on the [B, h] context; the final norm adds two.
    model, cs2 = resolve_model("dit-2b"), resolve_hardware("wse2")
    h, layers, run = model.hidden_size, model.num_layers, RUNS["dit-2b-wse2-1-403"]
    params = (6 * layers + 2) * (h * h + h)
    streamed = 2 * params * (3 + 1)  # 2-byte weights in for forward, recomputation and backward; gradients out
    stream_s = streamed / cs2.memory.offchip_bandwidth_bytes_per_s.value
    missing_s = miss["dit-2b-wse2-1-403"] * run.global_batch
    assert stream_s == pytest.approx(0.0407, abs=0.0005) and stream_s / missing_s < 0.035
    # modulation (x (1 + scale) + shift, twice) and the two gates: 6 h elementwise operations per patch per block,
    # in forward, recomputation and a backward of twice the work
    ops = 6 * h * 4 * layers * run.global_batch * run.seq
    lanes_per_s = cs2.chip.peak_flops_per_s.value / 2  # one FMA (2 FLOP) per lane per cycle
    assert ops / missing_s / lanes_per_s < 1e-4


def test_esm2_cs3_micro_batch_cost_shrinks_by_no_single_resource():
    """wafer9: the same ALCF ESM-2 config on both generations leaves (measured - btacalc's compute) / 32 =
    0.100 s per micro-batch on the CS-2 and 0.060 s on the CS-3: 1.66x, between every non-SIMD resource (at most
    the 1.3x link) and the SIMD peak (2.107x). No datasheet ratio gives it; a mix of two would be a fitted
    split, and the two runs are also 14 months and several releases apart (2024-08, R_2.6 in 2025-10)."""
    left = {}
    for rid in ("esm2-35m-wse2-1-402", "esm2-35m-wse3-1-404"):
        run = RUNS[rid]
        _, compute, _ = _btacalc_step_parts(run)
        left[rid] = (run.measured.step_time_s - compute) / (run.global_batch // run.micro_batch)
    assert left["esm2-35m-wse2-1-402"] == pytest.approx(0.100, abs=0.001)
    assert left["esm2-35m-wse3-1-404"] == pytest.approx(0.060, abs=0.001)
    shrink = left["esm2-35m-wse2-1-402"] / left["esm2-35m-wse3-1-404"]
    ratios = _generation_ratios()
    assert shrink == pytest.approx(1.66, abs=0.01)
    assert max(v for k, v in ratios.items() if k != "peak") + 0.2 < shrink < ratios["peak"] - 0.2


def test_validate_names_the_release_gain_of_an_older_wafer_run_and_only_there(cli, tmp_path):
    """`validate --measured`: the R_1.9.x GPT-J run's note and JSON carry the gain its rate was divided by, with
    the source; the R_2.0.3 run's result has neither key (as every GPU run's: their JSON reads as before)."""
    import json
    import io

    rows = [r for r in json.loads(package_data("measured_runs.json").read_text())["runs"]
            if r["id"] in ("gpt-j-6b-wse2-1-408", "gpt-j-6b-wse2-2-399")]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": rows}))
    code, out, err = cli("validate", "--measured", str(path), "--json")
    runs = {r["id"]: r for r in json.loads(out)["measured"]["runs"]}
    old, new = runs["gpt-j-6b-wse2-1-408"], runs["gpt-j-6b-wse2-2-399"]
    assert old["release_gain"] == RELEASE_2_0_2_GPT_GAIN and "RELEASE-NOTES.md" in old["release_gain_sources"][0]
    assert "release_gain" not in new and "release_gain_sources" not in new
    from rich.console import Console

    from btacalc.output.validation_tables import measured_table
    from btacalc.planning.measured import validate_measured

    console = Console(width=1000, record=True, file=io.StringIO())
    console.print(measured_table(validate_measured(path)))
    notes = {line.split(":")[0]: line for line in console.export_text().splitlines()
             if line.startswith("gpt-j-6b-wse2")}
    assert "older release: predicted rate / 1.3," in notes["gpt-j-6b-wse2-1-408"]  # the run's line under the tables
    assert "gpt-j-6b-wse2-2-399" not in notes  # nothing to say about it
