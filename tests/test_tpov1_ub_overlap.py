"""TransformerEngine userbuffers TP overlap, GEMM by GEMM (model/gpu/tp_overlap.py), checked as its derivation from
TransformerEngine's code at the commit NeMo 25.04 pins (TE @ bee4649c, docs/clock.md "tpov1")."""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout, Overlaps, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.config.tp_overlap import ub_overlaps
from btacalc.model.gpu.collectives import tensor_parallel_time
from btacalc.model.gpu.costs import layer_parts, outside_parts
from btacalc.model.gpu.gemm import gemm_time
from btacalc.model.gpu.tp_overlap import layer_overlap_s, overlap_cost
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.problem import make_problem

# TE @ bee4649c transformer_engine/pytorch/module/base.py L224-262 (initialize_ub get_default_config): methods per
# GEMM, num_sm 1 for ring exchange (copy engines) else 16, num_splits 4 for pipeline, set_sm_margin unless ring
TE_DEFAULT = {
    "qkv_fprop": ("ring_exchange", 1, False), "fc1_fprop": ("ring_exchange", 1, False),
    "proj_dgrad": ("ring_exchange", 1, False), "fc2_dgrad": ("ring_exchange", 1, False),
    "proj_fprop": ("pipeline", 16, True), "fc2_fprop": ("pipeline", 16, True),
    "qkv_dgrad": ("bulk", 16, False), "qkv_wgrad": ("bulk", 16, False),
    "fc1_dgrad": ("bulk", 16, False), "fc1_wgrad": ("bulk", 16, False),
}
PIPELINE_SPLITS = 4
GB200_SMS = 148  # hardware_profiles/gb200.toml chip.cores
H100_SMS = 132
NEMOTRON = resolve_model("nemotron4-340b")


def _by_name():
    return {o.name: o for o in ub_overlaps()}


def test_the_table_is_transformer_engines_default():
    table = _by_name()
    assert set(table) == set(TE_DEFAULT)
    for name, (method, sms, margin) in TE_DEFAULT.items():
        o = table[name]
        assert (o.method, o.num_sm, o.set_sm_margin) == (method, sms, margin)
        assert o.family == name.split("_")[0] and o.gemm_pass == name.split("_")[1]
        assert o.num_splits == (PIPELINE_SPLITS if method == "pipeline" else 0)


def test_ring_exchange_exposes_the_copy_chain_beyond_the_gemm():
    # 4096 tokens at TP 8: 8 chunk GEMMs of 512 rows; the 7 copies start with the first chunk and the last chunk
    # runs after the last copy: max(G, c + G/8)
    ring = _by_name()["qkv_fprop"]
    assert overlap_cost(ring, 1.0e-3, 0.2e-3, GB200_SMS, 8) == 0.0
    assert overlap_cost(ring, 1.0e-3, 1.0e-3, GB200_SMS, 8) == pytest.approx(1.0e-3 / 8)
    assert overlap_cost(ring, 0.2e-3, 1.0e-3, GB200_SMS, 8) == pytest.approx(1.0e-3 + 0.2e-3 / 8 - 0.2e-3)


def test_pipeline_runs_the_gemm_on_the_margin_and_exposes_the_last_chunk():
    pipe = _by_name()["fc2_fprop"]
    g, c = 1.0e-3, 0.4e-3
    slowed = g * GB200_SMS / (GB200_SMS - 16)  # set_sm_margin: _math_sms = SMs - num_sm (comm_gemm_overlap.cpp L84)
    assert overlap_cost(pipe, g, c, GB200_SMS, 8) == pytest.approx(slowed - g + c / PIPELINE_SPLITS)
    # a collective longer than the slowed GEMM: its excess shows for the first three of the four chunks too
    c = 2.0e-3
    assert overlap_cost(pipe, g, c, H100_SMS, 8) == pytest.approx(
        g * 16 / (H100_SMS - 16) + c / 4 + (c - g * H100_SMS / (H100_SMS - 16)) * 3 / 4)


def test_bulk_shares_the_sms_while_both_run():
    bulk = _by_name()["qkv_wgrad"]
    assert overlap_cost(bulk, 1.0e-3, 0.3e-3, H100_SMS, 8) == pytest.approx(0.3e-3 * 16 / H100_SMS)
    assert overlap_cost(bulk, 1.0e-3, 1.5e-3, H100_SMS, 8) == pytest.approx(1.0e-3 * 16 / H100_SMS + 0.5e-3)


def _problem(sequence_parallel=True, tp_comm=True, hw="gb200"):
    hardware = resolve_hardware(hw)
    layout = Layout(devices_per_node=int(hardware.system.devices_per_node.value), devices=8, tensor_parallel=8,
                    sequence_parallel=sequence_parallel, overlap=Overlaps(tp_comm=tp_comm))
    return make_problem(NEMOTRON, hardware, RunOptions(attention="flash", recompute="none", seq_len=4096), layout)


def test_the_layer_gemms_are_the_shape_models():
    p = _problem()
    ev = p.evaluate(1, 1)
    (_, part), = [(k, part) for (k, _), part in zip(ev.layers, layer_parts(p, ev))]
    row = {r.name: r for rows in part.gemms.values() for r in rows}["W_qkv"]
    assert (row.m, row.n, row.k) == (4096, (96 + 2 * 8) * 192 / 8, 18432)
    from btacalc.model.gpu.rates import rates_of, gemm_output_bytes
    device = rates_of(p).device
    wgrad_out = gemm_output_bytes(p)[2]  # the weight gradient's result bytes (accumulated into main_grad or not)
    fwd, dgrad, wgrad = (part.tp_gemm_s["qkv_" + x] for x in ("fprop", "dgrad", "wgrad"))
    assert fwd == pytest.approx(gemm_time(row.m, row.n, row.k, 2, device).time_s)
    assert dgrad == pytest.approx(gemm_time(row.m, row.k, row.n, 2, device).time_s)
    assert wgrad == pytest.approx(gemm_time(row.k, row.n, row.m, 2, device, output_bytes=wgrad_out).time_s)


def test_the_layer_cost_sums_the_ten_gemms_and_the_step_takes_the_larger():
    p = _problem()
    ev = p.evaluate(1, 1)
    part = layer_parts(p, ev)[0]
    c = tensor_parallel_time(p, part.tp_bytes / part.tp_calls, 1)
    assert part.tp_calls == 10  # SP: AG fwd, RS bwd, AG re-gather for dW per input; RS fwd, AG bwd per output
    table = _by_name()
    expected = 0.0
    for name, (method, sms, margin) in TE_DEFAULT.items():
        g = part.tp_gemm_s[name]
        if method == "ring_exchange":
            expected += max(0.0, c + g / 8 - g)
        elif method == "pipeline":
            slowed = g * GB200_SMS / (GB200_SMS - sms)
            expected += slowed - g + c / 4 + max(0.0, c - slowed) * 3 / 4
        else:
            expected += min(c, g) * sms / GB200_SMS + max(0.0, c - g)
        assert table[name].num_sm == sms
    got = layer_overlap_s(p, part.tp_gemm_s, part.tp_bytes, part.tp_calls)
    assert got == pytest.approx(expected) and got > 0
    # the step: every layer exposes the larger of the collectives' excess over its compute and this cost, the
    # embedding's and head's collectives (outside the layers) stay exposed
    st = gpu_step_time(p, 1, 1, ev)
    tp = tensor_parallel_time(p, part.tp_bytes, part.tp_calls)
    assert tp < part.compute_s
    assert st.details["terms"]["tp_comm"] == pytest.approx(
        NEMOTRON.num_layers * max(0.0, tp - part.compute_s, expected) + _outside_tp(p, ev))


def _outside_tp(p, ev):
    return sum(tensor_parallel_time(p, q.tp_bytes, q.tp_calls) for q in outside_parts(p, ev))


def test_no_cost_without_sequence_parallelism_or_the_overlap():
    p = _problem(sequence_parallel=False)
    ev = p.evaluate(1, 1)
    part = layer_parts(p, ev)[0]
    assert layer_overlap_s(p, part.tp_gemm_s, part.tp_bytes, part.tp_calls) == 0.0
    on, off = _problem(), _problem(tp_comm=False)
    t_on = gpu_step_time(on, 1, 1).details["terms"]["tp_comm"]
    t_off = gpu_step_time(off, 1, 1).details["terms"]["tp_comm"]
    ev = off.evaluate(1, 1)
    part = layer_parts(off, ev)[0]
    assert t_off == pytest.approx(NEMOTRON.num_layers * tensor_parallel_time(off, part.tp_bytes, part.tp_calls)
                                  + _outside_tp(off, ev))
    assert t_on < t_off


def test_every_catalogue_gemm_maps_to_a_family_of_the_table(tmp_path, monkeypatch):
    """[families] maps the catalogue's dense GEMMs onto TE's four GEMM families, the same four the overlaps use; a
    family the table does not know is a data error (one line), not a GEMM silently left out of the overlap."""
    from btacalc.config import tp_overlap
    from btacalc.errors import DataError

    assert set(tp_overlap.ub_families().values()) == {o.family for o in ub_overlaps()} == {"qkv", "proj", "fc1", "fc2"}
    bad = tmp_path / "tp_overlap.toml"
    bad.write_text('[families]\nsource = "test"\nW_qkv = "qkvv"\n')
    monkeypatch.setattr(tp_overlap, "package_data", lambda name: bad)
    tp_overlap.ub_families.cache_clear()
    try:
        with pytest.raises(DataError, match="W_qkv = 'qkvv': not one of fc1, fc2, proj, qkv"):
            tp_overlap.ub_families()
    finally:
        tp_overlap.ub_families.cache_clear()


def test_every_overlap_method_has_a_cost():
    """Each method the table may name (UbOverlap.method) has its cost function, and no other: a method added to
    the schema without its cost would fail at plan time instead of here."""
    from typing import get_args

    from btacalc.config.tp_overlap import UbOverlap
    from btacalc.model.gpu import tp_overlap

    assert set(tp_overlap._COST) == set(get_args(UbOverlap.model_fields["method"].annotation))
