"""Activations held off the wafer (model/wafer/offload.py) and the micro-batch's fixed cost
(model/wafer/costs.py), each checked against arithmetic from its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from btacalc.config.execution import RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.hf import load_hf_config
from btacalc.config.presets import load_preset
from btacalc.model.memory import MemoryModel
from btacalc.model.problem import make_problem
from btacalc.model.timing import step_time
from btacalc.model.wafer.offload import KEPT_LAYERS, exposed_offload_s
from support import resolved

LLAMA = load_hf_config(Path(__file__).parent / "data" / "llama-7b.config.json")
WSE2 = resolve_hardware("wse2")
L, S, B, H, FFN = 32, 2048, 99, 4096, 11008  # LLaMA-7B, one micro-batch of 99 sequences of 2,048 (the log's)


def _llama(hw=WSE2):
    return make_problem(LLAMA, hw, RunOptions(memory_model="weight_streaming", seq_len=S))


def _without(hw, section, field):
    return hw.model_copy(update={section: getattr(hw, section).model_copy(update={field: None})})


def test_llama_checkpoints_beyond_the_sram_go_off_the_wafer():
    """Kept K = usable - working set - buffers (the SRAM left), offloaded = checkpoints + one layer's
    recomputed activations - K. The layer checkpoints are L s B h x 2 bytes (full recomputation keeps each
    layer's input); usable = 0.85 x 40 GB (profile); buffers = 2 units of weights and 2 of gradients of
    the largest block, LLaMA's MLP, 3 h f x 2 bytes."""
    p = _llama()
    mem, ev = MemoryModel(p), p.evaluate(3, 33)
    checkpoints = L * S * B * H * 2
    assert ev.layers_total("stored") == checkpoints == 53_150_220_288
    usable = 0.85 * 40e9
    buffers = 2 * 2 * 3 * H * FFN * 2
    kept = usable - ev.max("transient") - buffers
    split = mem.activation_split(ev)
    assert split.stored_on_wafer + split.recompute_on_wafer == pytest.approx(kept)
    outside = ev.outside_total("stored")  # the LM head's stored logits, outside the layers
    assert split.offloaded == pytest.approx(checkpoints + outside + ev.largest_layer("recompute_bytes") - kept)
    assert split.offloaded > 0 and mem.fits(3, 33)
    assert kept > KEPT_LAYERS * S * B * H * 2  # more than the two layers' checkpoints that must stay


def test_offload_hides_behind_compute_for_llama_and_shows_when_the_link_is_busy():
    """t_offload = max(0, 2 S_off / r - (t_micro_batch - t_stream)). LLaMA-7B: about 71 GB out and back,
    0.95 s at 150 GB/s, against a link idle for most of a 4 s micro-batch: hidden. With numbers: 30 GB
    offloaded, 0.5 s micro-batch of which the stream takes 0.3 s: 2 x 30e9 / 150e9 - 0.2 = 0.2 s shows."""
    p = _llama()
    off = MemoryModel(p).activation_split(p.evaluate(3, 33)).offloaded
    assert 2 * off / 150e9 == pytest.approx(0.95, abs=0.01)
    assert step_time(p, 3, 33, micro_batches=1).phase_time_s["activation_offload"] == 0
    assert exposed_offload_s(p, 30e9, 0.5, 0.3) == pytest.approx(0.2)
    assert exposed_offload_s(p, 30e9, 0.9, 0.3) == 0  # 0.4 s of traffic inside 0.6 s of idle link


def test_a_profile_without_an_offload_path_keeps_every_checkpoint():
    """Without `activation_offload_bandwidth_bytes_per_s` the SRAM holds all: 53 GB of checkpoints do not
    fit 34 GB, the shape does not fit and nothing is offloaded."""
    p = _llama(_without(WSE2, "memory", "activation_offload_bandwidth_bytes_per_s"))
    mem, ev = MemoryModel(p), p.evaluate(3, 33)
    split = mem.activation_split(ev)
    assert split.offloaded == 0 and split.stored_on_wafer == ev.layers_total("stored") + ev.outside_total("stored")
    assert not mem.fits(3, 33)


def test_micro_batch_fixed_cost_is_paid_once_per_micro_batch():
    """step(M micro-batches) with t_0 - step without it = M t_0 (costs.py), whatever the shape."""
    p = _llama()
    t0 = WSE2.calibration.micro_batch_fixed_s.value
    q = _llama(_without(WSE2, "calibration", "micro_batch_fixed_s"))
    for m, g, b in ((1, 3, 33), (3, 1, 33), (9, 1, 11)):
        with_t0 = step_time(p, g, b, micro_batches=m).step_time_s
        without = step_time(q, g, b, micro_batches=m).step_time_s
        assert with_t0 - without == pytest.approx(m * t0, rel=1e-6)


def test_fixed_cost_from_the_bert_pair_arithmetic():
    """The fitted t_0 stays near the BERT-large pair's two-point line, t_0 = (B2 t1 - B1 t2) / (B2 - B1)
    = (2048 x 0.17459 - 512 x 0.30503) / 1536 = 0.131 s (measured_runs.json), within a factor 1.5: the
    fit also carries LLaMA-7B, and btacalc's per-sequence time for BERT-large is above the measured one."""
    t0_pair = (2048 * 0.17459 - 512 * 0.30503) / 1536
    assert t0_pair == pytest.approx(0.1311, abs=1e-4)
    fitted = WSE2.calibration.micro_batch_fixed_s
    assert fitted.kind == "calibrated" and t0_pair / 1.5 < fitted.value < t0_pair * 1.5


def test_gpt_j_under_r19_reads_slower_without_offload():
    """GPT-J 6B on one CS-2 ran R_1.9, before R2.0's dynamic memory offload: predicted with the SRAM alone
    holding the checkpoints (the profile without an offload path) it is slower, inside the gate's 25%. (Since
    wafer25 the run is predicted with the 30% Cerebras states Release_2.0.2 gained for GPT-style models, which
    includes what the offload gave: the shipped prediction keeps the offload path.)"""
    from btacalc.planning.measured import load_runs, predict

    run = next(r for r in load_runs() if r.id == "gpt-j-6b-wse2-1-408")
    with_offload = predict(run).error
    sram_only = predict(run, hardware=lambda name: _without(resolve_hardware(name), "memory",
                                                             "activation_offload_bandwidth_bytes_per_s")).error
    assert sram_only < with_offload and abs(sram_only) < 0.25 and abs(with_offload) < 0.25


def test_memory_kept_on_the_wafer_is_the_total_plus_what_leaves():
    """MemoryModel.total_kept, the solver's predicate for "nothing offloaded", is the memory as if every
    activation stayed: the total on the wafer plus the offloaded bytes (checkpoints + recomputed = kept +
    offloaded). LLaMA-7B's micro-batch of 99 (3 tiles of 33) offloads, so the two differ by exactly that; without the
    profile's offload path nothing leaves and they agree."""
    p = _llama()
    mem = MemoryModel(p)
    offloaded = mem.breakdown(3, 33).offloaded_activations
    assert offloaded > 0 and mem.offloads
    assert mem.total_kept(3, 33) == pytest.approx(mem.total(3, 33) + offloaded, rel=1e-12)
    assert mem.total(3, 33) <= mem.usable < mem.total_kept(3, 33)
    plain = MemoryModel(_llama(_without(WSE2, "memory", "activation_offload_bandwidth_bytes_per_s")))
    assert not plain.offloads and plain.total_kept(3, 33) == plain.total(3, 33)


def test_tokens_per_s_rises_then_falls_along_a_slot_when_the_offload_is_exposed():
    """What the solver's narrowing rests on (solver.offload_band): along G with b fixed, tokens/s is
    quasi-concave, T = C + max(P, t_stream + 2 S_off / r_act) being convex in G. The case the solver's
    property test found (Qwen3-30B-A3B with 8 experts, top_k 1, s = 2,048, selective recomputation, on one
    CS-2), b = 1: tokens/s rises while the offload is hidden, falls once it is exposed, and never rises
    again."""
    p = resolved(load_preset("qwen3-30b-a3b").with_overrides(experts=8, top_k=1), "wse2", seq_len=2048,
                 recompute="selective")
    mem = MemoryModel(p)
    g_max = 1
    while mem.fits(g_max + 1, 1):
        g_max += 1
    times = [step_time(p, g, 1) for g in range(1, g_max + 1)]
    tps = [float(t.tokens_per_s) for t in times]
    peak = max(range(len(tps)), key=tps.__getitem__)
    assert 0 < peak < len(tps) - 1  # an interior peak: neither corner
    assert all(tps[i] < tps[i + 1] for i in range(peak)) and all(tps[i] >= tps[i + 1] for i in range(peak, len(tps) - 1))
    exposed = [float(t.phase_time_s.get("activation_offload", 0.0)) for t in times]
    assert exposed[peak - 1] == 0 and exposed[-1] > 0
