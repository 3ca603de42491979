"""review17: the refactors' new library objects and named constants, tested where they live (each test fails with
its change reverted: the object or constant it reads did not exist, or the value was decided elsewhere)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from btacalc.model.gpu.fixed import FixedCosts
from btacalc.model.gpu.timing import _critical, _slowest_fixed, _Stage, _Sync
from btacalc.planning.plan import PhaseTimes


# 1. planning/plan.py build_report: a plan's phase times are one object (PhaseTimes), not a closure over three maps

def _times(repeats: Any = None) -> PhaseTimes:
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
    stages = [_stage({"compute": 1.0, "launch": 1.0}), _stage({"compute": 3.0, "launch": 0.0}),
              _stage({"compute": 2.0, "launch": 1.0})]
    worst, crit = _critical(stages)
    assert (crit, worst.terms, worst.raw) == (1, stages[1].terms, {"tp_comm": 3.0})
    assert _critical([_stage({"compute": 2.0}), _stage({"compute": 2.0})])[1] == 0


def test_critical_stage_over_arrays_of_layouts_is_elementwise() -> None:
    worst, crit = _critical([_stage({"compute": np.array([1.0, 4.0])}), _stage({"compute": np.array([2.0, 3.0])})])
    assert crit == 0
    assert worst.terms["compute"].tolist() == [2.0, 4.0] and worst.raw["tp_comm"].tolist() == [2.0, 4.0]


def test_slowest_fixed_costs_are_the_stage_with_the_largest_total() -> None:
    stages = [_stage({"compute": 0.0}, (1.0, 1.0, 0.0)), _stage({"compute": 0.0}, (0.5, 0.5, 2.0)),
              _stage({"compute": 0.0}, (2.0, 0.0, 0.0))]
    assert _slowest_fixed(stages) == FixedCosts(0.5, 0.5, 2.0)
    arrays = [_stage({"compute": 0.0}, (np.array([1.0, 0.0]), 0.0, 0.0)),
              _stage({"compute": 0.0}, (np.array([0.5, 3.0]), 0.0, 0.0))]
    assert _slowest_fixed(arrays).optimizer_s.tolist() == [1.0, 3.0]
