"""review17: the refactors' new library objects and named constants, tested where they live (each test fails with
its change reverted: the object or constant it reads did not exist, or the value was decided elsewhere)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from btacalc.model.gpu.fixed import FixedCosts
from btacalc.model.gpu.timing import _Stage, _Sync


# 1. planning/plan.py build_report: a plan's phase times are one object (PhaseTimes), not a closure over three maps

def _times(repeats: Any = None) -> Any:
    from btacalc.planning.plan import PhaseTimes

    return PhaseTimes(per_layer={("moe", "experts"): 0.5}, phase_time={"router": 6.0, "loss": 3.0},
                      repeats=repeats, gemms={("moe", "router"): ["r"], ("", "loss"): ["l"]})


def test_phase_times_take_the_wafer_models_own_time_of_one_layer_first() -> None:
    assert _times({"experts": 4}).in_layer("moe", 48, "experts") == 0.5


def test_phase_times_divide_the_critical_stages_time_by_its_repeats_or_the_kinds_count() -> None:
    assert _times({"router": 3}).in_layer("moe", 48, "router") == 2.0
    assert _times(None).in_layer("moe", 3, "router") == 2.0  # no repeats (wafer): the kind's count
    assert _times({"router": 0}).in_layer("moe", 48, "router") == 0.0
    assert _times({}).in_layer("moe", 48, "absent") == 0.0


def test_phase_times_outside_the_layers_run_once_unless_the_stage_repeats_them() -> None:
    assert _times(None).outside("loss") == 3.0
    assert _times({"loss": 3}).outside("loss") == 1.0


def test_phase_times_fill_every_table_of_the_report() -> None:
    def rows(*names: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(name=n, time_s=None, gemms=None) for n in names]

    report = SimpleNamespace(phases=rows("router", "experts"), outside_layers=rows("loss"),
                             layer_kinds=[SimpleNamespace(name="dense", count=2, phases=rows("router"))])
    _times(None).fill(report, SimpleNamespace(name="moe", count=3))  # type: ignore[arg-type]
    assert [(r.time_s, r.gemms) for r in report.phases] == [(2.0, ["r"]), (0.5, [])]
    assert [(r.time_s, r.gemms) for r in report.layer_kinds[0].phases] == [(3.0, [])]
    assert [(r.time_s, r.gemms) for r in report.outside_layers] == [(3.0, ["l"])]


# 2. model/gpu/timing.py gpu_step_time: the critical stage and the slowest fixed costs are functions of the stages

def _stage(terms: dict[str, Any], fixed: tuple[Any, Any, Any] = (0.0, 0.0, 0.0)) -> _Stage:
    return _Stage(terms, {"tp_comm": terms["compute"]}, _Sync(0.0, 0.0), {}, FixedCosts(*fixed))


def test_critical_stage_is_the_slowest_per_micro_batch_first_on_a_tie() -> None:
    from btacalc.model.gpu.timing import _critical

    stages = [_stage({"compute": 1.0, "launch": 1.0}), _stage({"compute": 3.0, "launch": 0.0}),
              _stage({"compute": 2.0, "launch": 1.0})]
    worst, crit = _critical(stages)
    assert (crit, worst.terms, worst.raw) == (1, stages[1].terms, {"tp_comm": 3.0})
    assert _critical([_stage({"compute": 2.0}), _stage({"compute": 2.0})])[1] == 0


def test_critical_stage_over_arrays_of_layouts_is_elementwise() -> None:
    from btacalc.model.gpu.timing import _critical

    worst, crit = _critical([_stage({"compute": np.array([1.0, 4.0])}), _stage({"compute": np.array([2.0, 3.0])})])
    assert crit == 0
    assert worst.terms["compute"].tolist() == [2.0, 4.0] and worst.raw["tp_comm"].tolist() == [2.0, 4.0]


def test_slowest_fixed_costs_are_the_stage_with_the_largest_total() -> None:
    from btacalc.model.gpu.timing import _slowest_fixed

    stages = [_stage({"compute": 0.0}, (1.0, 1.0, 0.0)), _stage({"compute": 0.0}, (0.5, 0.5, 2.0)),
              _stage({"compute": 0.0}, (2.0, 0.0, 0.0))]
    assert _slowest_fixed(stages) == FixedCosts(0.5, 0.5, 2.0)
    arrays = [_stage({"compute": 0.0}, (np.array([1.0, 0.0]), 0.0, 0.0)),
              _stage({"compute": 0.0}, (np.array([0.5, 3.0]), 0.0, 0.0))]
    assert _slowest_fixed(arrays).optimizer_s.tolist() == [1.0, 3.0]


# 3. planning/whatif.py whatif (56 lines): the search along one number is an object (_Scan), the two ways of
# missing the goal one method

def _scan(metric_of: Any, fits: Any = lambda x: True, today: float = 100.0) -> tuple[Any, list[float]]:
    from btacalc.planning.metrics import PlanMetrics
    from btacalc.planning.whatif import _Scan

    asked: list[float] = []

    def at(x: float) -> PlanMetrics:
        asked.append(x)
        return PlanMetrics(fits(x), 1, 1, 1, "memory", {"tokens_per_s": metric_of(x)})

    return _Scan(at, today, False, "tokens_per_s", 1000.0), asked


def test_scan_hits_the_reaching_grid_point_nearest_today_and_bisects_towards_today() -> None:
    from btacalc.planning.whatif import REL_TOL

    scan, asked = _scan(lambda x: x)  # the metric is the value: 1,000 is reached at 10x today
    hit = scan.nearest_hit()
    assert hit is not None and scan.grid[hit] >= 1000.0 > scan.grid[hit - 1]
    assert set(asked) < set(scan.grid)  # the grid points up to the hit's ratio to today, not all 31
    value = scan.answer(hit)
    assert 1000.0 <= value <= 1000.0 * (1 + 2 * REL_TOL)
    assert scan.answer(scan.grid.index(100.0)) == 100.0


def test_scan_miss_note_names_the_best_point_where_some_point_fits() -> None:
    scan, _ = _scan(lambda x: min(x, 500.0))
    assert scan.nearest_hit() is None
    note = scan.miss_note("sram_bytes", "m does not fit on 1 x w")
    assert note.startswith("tokens_per_s does not reach 1,000 anywhere from 0.1 to 100,000 (best 500 at 631, 6.31x today)")


def test_scan_miss_note_says_what_does_not_fit_where_no_point_fits() -> None:
    scan, _ = _scan(lambda x: None, fits=lambda x: False)
    assert scan.nearest_hit() is None
    assert scan.miss_note("sram_bytes", "m does not fit on 1 x w").startswith(
        "m does not fit on 1 x w at any sram_bytes from 0.1 to 100,000 (binds: memory)")


def test_scan_miss_note_refuses_a_number_that_changes_nothing() -> None:
    from btacalc.errors import BtacalcError

    scan, _ = _scan(lambda x: 7.0)
    assert scan.nearest_hit() is None
    with pytest.raises(BtacalcError, match="sram_bytes would change nothing: tokens_per_s is 7 at every value"):
        scan.miss_note("sram_bytes", "m does not fit on 1 x w")


# 4. model/gpu/costs.py: a phase's GEMM dtype is one named object; _gemm_row and _matmul_time lost their dead
# defaults (re-derived from the rates); the routed load is the rates' to say; _issue's counting and its
# grouped quantisation kernels are functions of their own

def _bare_rates(**kw: Any) -> Any:
    from btacalc.model.gpu.rates import Rates

    return Rates(peak=1.0, hbm=2.0, imbalance=1.5, expert_shards=8, flash=True, sequence_parallel=False, beta=2, **kw)


def test_the_routed_load_is_the_imbalance_on_routed_phases_only() -> None:
    r = _bare_rates()
    assert r.load(SimpleNamespace(routed_load=True)) == 1.5
    assert r.load(SimpleNamespace(routed_load=False)) == 1.0


def test_a_low_precision_phase_runs_its_gemms_in_the_recipes_dtype() -> None:
    from btacalc.model.gpu.costs import _dtype, _GemmDtype

    r = _bare_rates(cast=object(), low_peak=4.0, low_beta=1.0, low_share=0.7, peak_share=0.8)
    assert _dtype(SimpleNamespace(low_precision=True), r) == _GemmDtype(4.0, None, 1.0, 0.7)
    assert _dtype(SimpleNamespace(low_precision=False), r) == _GemmDtype(1.0, None, 2, 0.8)
    assert _dtype(SimpleNamespace(low_precision=True), _bare_rates(peak_share=0.8)).peak == 1.0  # 16-bit training


def test_a_phase_in_the_fused_attention_core_issues_nothing_of_its_own() -> None:
    from btacalc.model.gpu.costs import _issued, _PhasePlan

    plan = _PhasePlan(gemms=(), counts=(), grouped=(), modules=1, fused=True, dtype=_dtype_16(), tiled=True)
    assert _issued({"reruns": 1}, _bare_rates(), plan) == (0, 0, 0, 0, 0)
    unfused = _PhasePlan(gemms=(), counts=(), grouped=(), modules=1, fused=False, dtype=_dtype_16(), tiled=False)
    # no GEMMs but work: one kernel forward (the first forward's share, 1), one backward, one per re-run; its module
    # forward, backward, re-run
    assert _issued({"reruns": 1, "bytes_moved": 8, "flops_fwd": 0}, _bare_rates(), unfused) == (3, 1, 0, 3, 0)


def _dtype_16() -> Any:
    from btacalc.model.gpu.costs import _GemmDtype

    return _GemmDtype(1.0, None, 2, 1.0)


def test_grouped_quantize_kernels_per_local_expert_in_each_pass() -> None:
    from btacalc.model.gpu.costs import _grouped_quantize
    from btacalc.model.gpu.part import new_part

    part = new_part()
    cast = SimpleNamespace(recipe=SimpleNamespace(grouped_quantize_kernels_per_expert=2))
    _grouped_quantize(part, 8, 1, cast)  # 8 expert GEMMs over 3 + 1 passes: 2 per pass, 2 kernels each
    assert (part.kernels, part.kernels_fwd) == (12.0, 4.0)  # forward, backward and the re-run; the first forward
    none = new_part()
    _grouped_quantize(none, 8, 1, SimpleNamespace(recipe=SimpleNamespace(grouped_quantize_kernels_per_expert=0)))
    assert (none.kernels, none.kernels_fwd) == (0, 0)


# 5. model/gpu/costs.py _part (54 -> 40 lines): a core phase's sums are the fused core's to add, a phase's time the
# part's (`_add_time`)

def test_the_fused_core_adds_a_phases_flops_at_the_causal_block_share() -> None:
    from btacalc.model.gpu.costs import _FusedCore

    core = _FusedCore()
    v = {"flops_fwd": 10, "flops_bwd": 20, "flops_recompute": 14, "reruns": 1}
    assert core.add(v, 2, 88, 5, _bare_rates(core_time_factor=0.5)) is None  # no --fp8-attention: no casts
    # backward 20 x load 2 x 0.5; its kernel also recomputes the scores: 14 - 1 x 10 = 4 beyond the re-run
    assert (core.flops, core.traffic_bytes, core.backward_flops, core.backward_kernel_flops) == (44, 5, 20, 24)


def test_a_phases_time_goes_to_its_backward_share_and_after_the_sync_its_forward_rest() -> None:
    from btacalc.model.gpu.costs import _add_time
    from btacalc.model.gpu.part import new_part

    part = new_part()
    v = {"flops_fwd": 10, "flops_bwd": 30, "flops_recompute": 0}
    _add_time(part, SimpleNamespace(name="experts", after_dispatch_sync=True, core=False, pre_dispatch=False), v, 8.0)
    assert (part.phase_s, part.compute_s, part.backward_s, part.compute_post_s, part.core_s) == \
        ({"experts": 8.0}, 8.0, 6.0, 2.0, 0.0)
    _add_time(part, SimpleNamespace(name="attn_pv", after_dispatch_sync=False, core=True, pre_dispatch=True), v, 4.0)
    assert (part.compute_s, part.backward_s, part.compute_post_s, part.core_s) == (12.0, 9.0, 2.0, 4.0)
    # merged2: the pre-dispatch phase's time and its backward share (30 / 40 of it) kept apart too
    assert (part.pre_dispatch_s, part.pre_dispatch_backward_s, part.pre_dispatch_recompute_s) == (4.0, 3.0, 0.0)


# 6. catalogue/compiled.py: a row mask's bits are named (CONSTANT_TERM, SHAPE_TERMS), not 1 and 14 in costs.py;
# memory_of_shapes (52 lines) split at its arrays (`_memory_of_arrays`), a shape-free row's value one function

def test_the_row_mask_names_agree_with_affine() -> None:
    from btacalc.catalogue.compiled import CONSTANT_TERM, SHAPE_TERMS, affine

    c = (5, 7, 11, 13)
    assert affine(CONSTANT_TERM, c, 3, 2, 6) == 5
    assert affine(SHAPE_TERMS, c, 3, 2, 6) == 7 * 2 + 11 * 3 + 13 * 6  # every shape term, no constant
    assert SHAPE_TERMS & CONSTANT_TERM == 0 and SHAPE_TERMS | CONSTANT_TERM == 15


def test_a_shape_free_row_is_its_constant_as_a_float() -> None:
    from btacalc.catalogue.compiled import CONSTANT_TERM
    from btacalc.model.gpu.memory_rows import _fixed_value

    assert _fixed_value(CONSTANT_TERM, (5, 0, 0, 0)) == 5.0 and type(_fixed_value(CONSTANT_TERM, (5, 0, 0, 0))) is float
    assert _fixed_value(0, (5, 0, 0, 0)) == 0.0


# 7. planning/modelzoo.py: what differs between Model Zoo's configuration classes is data (ZooClass), not
# `gptj = name == "gptj"`; the dropout rate and the fallback max_position_embeddings are named, with sources

def test_every_zoo_model_has_a_configuration_class_and_each_writes_only_its_keys() -> None:
    from btacalc.config.presets import resolve_model
    from btacalc.planning.modelzoo import ZOO_CLASSES, ZOO_KEYS, ZOO_MODELS, used_keys, zoo_model

    assert set(ZOO_MODELS.values()) <= set(ZOO_CLASSES)
    for preset, name in ZOO_MODELS.items():
        model, notes = zoo_model(resolve_model(preset))
        assert model is not None
        zoo = ZOO_CLASSES[name]
        assert all(zoo.has(key) for key in used_keys(model)), preset
        assert ("dropout_rate" in model, "norm_type" in model) == (zoo.has("dropout_rate"), zoo.has("norm_type"))
        assert all(source in notes[0] for source in zoo.sources)
    assert [k for k in ZOO_KEYS if not ZOO_CLASSES["gptj"].has(k)] == ["dropout_rate", "norm_type", "moe",
                                                                       "moe.num_experts", "moe.num_shared_experts",
                                                                       "moe.top_k"]


def test_a_class_that_rotates_part_of_each_head_writes_its_note_not_rotary_dim(monkeypatch: Any) -> None:
    from dataclasses import replace

    from btacalc.config.presets import resolve_model
    from btacalc.planning import modelzoo

    llama = replace(modelzoo.ZOO_CLASSES["llama"], partial_rotary_note="rotary_dim: partial")
    monkeypatch.setitem(modelzoo.ZOO_CLASSES, "llama", llama)
    model, notes = modelzoo.zoo_model(resolve_model("llama-2-7b"))
    assert model is not None and "rotary_dim" not in model and notes[1] == "rotary_dim: partial"


def test_the_dropout_rate_and_the_position_fallback_are_the_named_constants(monkeypatch: Any) -> None:
    from btacalc.config.presets import resolve_model
    from btacalc.planning import modelzoo

    monkeypatch.setattr(modelzoo, "DROPOUT_RATE", 0.25)
    monkeypatch.setattr(modelzoo, "DEFAULT_MAX_POSITION_EMBEDDINGS", 777)
    spec = resolve_model("gpt2-small")
    model, _ = modelzoo.zoo_model(spec.model_copy(update={"max_position_embeddings": None}))
    assert model is not None
    assert (model["dropout_rate"], model["attention_dropout_rate"], model["max_position_embeddings"]) == (0.25, 0.25, 777)


# 8. model/gpu/nccl.py: NCCL's 64-byte size unit, the tree correction's 23 sizes and the tree's 0.5 algorithm
# ratio are named with their tuning.cc lines (they were bare literals in three expressions)

def test_the_tree_correction_applies_below_its_named_size_limit(monkeypatch: Any) -> None:
    from btacalc.catalogue.constants import constants
    from btacalc.model.gpu import nccl

    group = nccl.Group(16, 2, 2, 1e11)
    simple = nccl.SIMPLE
    corrections = constants().nccl.tree_correction[simple]
    size = nccl.SIZE_UNIT_BYTES * 2 ** 11  # index 11 of the table: 0.5 under Simple
    assert corrections[11] == 0.5
    corrected = nccl.tree_time_s(group, size, simple)
    monkeypatch.setattr(nccl, "TREE_CORRECTION_SIZES", 11)  # the guard now stops below index 11
    uncorrected = nccl.tree_time_s(group, size, simple)
    latency = nccl.tree_latency_s(group, simple)
    assert (corrected - latency) == pytest.approx(2 * (uncorrected - latency))


def test_the_tree_runs_at_its_named_share_of_the_bus_bandwidth(monkeypatch: Any) -> None:
    from btacalc.model.gpu import nccl

    group = nccl.Group(16, 2, 2, 1e11)
    size = 2 ** 40  # beyond the correction's sizes: factor 1
    base = nccl.tree_time_s(group, size, nccl.SIMPLE) - nccl.tree_latency_s(group, nccl.SIMPLE)
    monkeypatch.setattr(nccl, "TREE_ALGORITHM_RATIO", 0.25)
    assert nccl.tree_time_s(group, size, nccl.SIMPLE) - nccl.tree_latency_s(group, nccl.SIMPLE) == pytest.approx(2 * base)


# 9. model/gpu/costs.py: a phase without FLOPs splits its time by a named share (was `2 / 3` twice)

def test_a_phase_without_flops_takes_the_named_backward_share(monkeypatch: Any) -> None:
    from btacalc.model.gpu import costs

    nothing = {"flops_fwd": 0, "flops_bwd": 0, "flops_recompute": 0}
    assert costs._backward_share(nothing) == costs.NO_FLOPS_BACKWARD_SHARE == 2 / 3
    monkeypatch.setattr(costs, "NO_FLOPS_BACKWARD_SHARE", 0.5)
    assert costs._backward_share(nothing) == 0.5
    arrays = {"flops_fwd": np.array([0, 1]), "flops_bwd": np.array([0, 2]), "flops_recompute": np.array([0, 1])}
    assert costs._backward_share(arrays).tolist() == [0.5, 0.5]


# 10. planning/crossover.py: the family's width-free numbers are its anchor preset's (Qwen3-30B-A3B), not the
# config.json's values written again in the code

def test_the_family_takes_what_does_not_scale_from_its_anchor_preset(monkeypatch: Any) -> None:
    from btacalc.config.presets import load_preset
    from btacalc.planning import crossover

    anchor = load_preset(crossover.ANCHOR)
    member = crossover.family_model("qwen3-moe", 1024)
    assert all(getattr(member, f) == getattr(anchor, f) for f in crossover.ANCHOR_FIELDS)
    changed = anchor.model_copy(update={"vocab_size": 32000, "num_experts": 64, "top_k": 4})
    monkeypatch.setattr(crossover, "load_preset", lambda name: changed)
    member = crossover.family_model("qwen3-moe", 1024)
    assert (member.vocab_size, member.num_experts, member.top_k) == (32000, 64, 4)
    assert member.source.endswith("E = 64, k = 4")


# 11. planning/validate.py metric_value: a published metric's computation is looked up by name in a table
# (REPORT_METRICS, THROUGHPUT_METRICS), not found by an if-chain of seven string comparisons; a point naming no
# known metric is refused when the points are read, not after its plan

def test_every_published_point_names_a_known_metric_and_a_typo_is_refused_on_reading() -> None:
    from pydantic import ValidationError

    from btacalc.planning.validate import POINT_METRICS, PublishedPoint, load_points

    assert {p.metric for p in load_points()} <= set(POINT_METRICS)
    fields = {"id": "x", "claim": "c", "source": "s", "hw": "wse2", "published": 1.0, "tolerance": 0.1}
    with pytest.raises(ValidationError, match="unknown metric 'speed_up'"):
        PublishedPoint.model_validate({**fields, "metric": "speed_up"})


def test_a_report_metric_is_read_through_its_table(monkeypatch: Any) -> None:
    from btacalc.planning import validate

    point = next(p for p in validate.load_points() if p.metric == "params_total")
    monkeypatch.setitem(validate.REPORT_METRICS, "params_total", lambda r: -1.0)
    assert validate.metric_value(point) == -1.0


# 12. output: the labelled two-column grid of the plan header, the plan box, the wafer plan and the whatif answer
# is one function (`label_grid`; `duplicates` found it written four times)

def test_label_grid_is_a_bold_label_then_its_value_folding_only_when_asked() -> None:
    from btacalc.output.fit import label_grid

    t = label_grid()
    assert [c.style for c in t.columns] == ["bold", ""] and t.padding == (0, 2, 0, 2) and not t.show_header
    assert t.columns[1].overflow == "ellipsis"
    assert label_grid(fold_values=True).columns[1].overflow == "fold"
