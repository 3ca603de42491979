"""Time model: hand-checked streaming bound and the qualitative BTA behaviour (issue acceptance)."""

from __future__ import annotations

import pytest

from btacalc.config.hardware import Number, resolve_hardware
from btacalc.model.memory import MemoryModel
from btacalc.model.params import param_counts
from btacalc.config.presets import load_preset
from btacalc.config.execution import RunOptions
from support import resolved, with_calibration
from btacalc.config.execution import BatchLimits
from btacalc.model.solver import PointLimits, search
from btacalc.model.timing import step_time
from btacalc.planning.plan import summarize


def summary(model, hw="wse2", overlap=True):
    p = resolved(model, hw, overlap_streaming=overlap)
    found = search(p, PointLimits.of(BatchLimits()))
    return summarize(p, MemoryModel(p), found.solution(0), found)


def test_streaming_bound_by_hand():
    # With compute made (practically) free, a weight-streaming step is the link time:
    # every weight but the embedding table crosses in forward and again in backward (gradients leave
    # over the full-duplex link meanwhile): 2 * 2 bytes * P_streamed / 150 GB/s, plus the mesh-derived
    # tile overhead and dispatch, the kernel runs' mesh steps (tests/test_wafer_fabric.py), the stream's start
    # latency and the step boundary (tests/test_wafer.py), the fitted fixed cost of the micro-batch and any
    # offload traffic the idle link cannot hide (tests/test_wafer_offload.py).
    hw = resolve_hardware("wse2")
    fast = with_calibration(hw, compute_efficiency=Number(value=1e6, kind="estimate", source="https://example.org",
                                                          note="test: compute made negligible"))
    model = load_preset("qwen3-30b-a3b")
    p = resolved(model, fast)
    pc = param_counts(p)
    streamed = pc.total - 151936 * 2048  # minus the embedding table
    t = step_time(p, 4, 2)
    link = 2 * 2 * streamed / 150e9
    extra = ("mesh_dispatch", "kernel_fixed", "stream_latency", "step_boundary", "micro_batch_fixed",
             "activation_offload")
    assert t.phase_time_s["micro_batch_fixed"] == hw.calibration.micro_batch_fixed_s.value  # one micro-batch
    overhead = t.tiling_overhead_s + sum(t.phase_time_s[k] for k in extra)
    # 4 tiles x 48 layers x 8 tile phases x 4 passes (full recomputation re-runs the whole layer from its
    # input, input norm included: Korthikanti 2022 §5) x one mesh step (X + Y + 2 T_R + 1 cycles)
    assert t.tiling_overhead_s == pytest.approx(4 * 48 * 8 * 4 * (750 + 994 + 2 * 2 + 1) / 1.1e9)
    sram_traffic = t.step_time_s - link - overhead  # activation traffic at 20 PB/s: tiny but not zero
    assert 0 <= sram_traffic < 1e-3 * link


def test_g1_relative_throughput_falls_with_experts():
    base = load_preset("qwen3-30b-a3b")
    rel = [summary(base.with_overrides(experts=e)).relative_to_dense_g1 for e in (16, 32, 64, 128)]
    assert all(a >= b for a, b in zip(rel, rel[1:])) and rel[0] > rel[-1]


def test_g1_relative_throughput_falls_with_lower_top_k_fixed_active():
    base = load_preset("qwen3-30b-a3b")
    rel = [summary(base.with_overrides(top_k=k, fixed_active=True)).relative_to_dense_g1 for k in (8, 4, 2, 1)]
    assert all(a > b for a, b in zip(rel, rel[1:]))


@pytest.mark.parametrize("experts", [16, 32, 64])
def test_bta_stays_near_dense_over_experts(experts):
    s = summary(load_preset("qwen3-30b-a3b").with_overrides(experts=experts))
    assert s.relative_to_dense >= 0.85
    assert s.relative_to_dense >= s.relative_to_dense_g1 - 0.05  # tiling overhead may cost a little at low E


def test_bta_at_128_experts_reaches_the_published_point():
    """With checkpoints held off the wafer (wafer/offload.py) the BTA batch grows until attention's working
    set binds, enough sequences to hide the 128 experts' weight stream: BTA recovers at least 0.85 of dense
    (published about 1.0, tolerance 0.15) where G = 1 stays far below, and validate lists no known gap."""
    from btacalc.planning.validate import load_points

    s = summary(load_preset("qwen3-30b-a3b").with_overrides(experts=128))
    assert s.relative_to_dense >= 0.85 and s.relative_to_dense > 1.5 * s.relative_to_dense_g1
    assert not next(p for p in load_points() if p.id == "experts-128-bta").known_gap


def test_mfu_and_overlap_bounds():
    model = load_preset("qwen3-30b-a3b")
    over, serial = summary(model, overlap=True), summary(model, overlap=False)
    assert 0 < over.best_time.mfu < 1
    assert serial.best_time.step_time_s > over.best_time.step_time_s


def test_gpu_plan_is_compute_or_hbm_bound():
    # Dense Qwen3-8B-like model on B200 has no streaming term: time = max(compute, HBM traffic)
    from btacalc.config.hf import load_hf_config
    from pathlib import Path

    model = load_hf_config(Path(__file__).parent / "data" / "qwen3-8b.config.json")
    s = summary(model, hw="b200")
    assert s.best.fits and s.best_time.stream_bound_share == 0
    assert 0.2 < s.best_time.mfu <= 0.5  # efficiency 0.5 is the ceiling
