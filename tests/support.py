"""Helpers shared by the tests (plain functions; fixtures live in conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import HardwareProfile, resolve_hardware
from btacalc.model.memory import resolve_memory_model
from btacalc.model.problem import Problem, make_problem


def resolved(model: Any, hw: str | HardwareProfile = "wse3", layout: Layout = Layout(), **run: Any) -> Problem:
    """A problem with its memory model resolved (auto: resident if it fits, else streamed on a wafer)."""
    hardware = resolve_hardware(hw) if isinstance(hw, str) else hw
    return resolve_memory_model(make_problem(model, hardware, RunOptions(**run), layout))


def with_calibration(hw: HardwareProfile, **numbers: Any) -> HardwareProfile:
    """`hw` with calibration numbers replaced (e.g. compute_efficiency=Number(...))."""
    return hw.model_copy(update={"calibration": hw.calibration.model_copy(update=numbers)})


DATA = Path(__file__).parent / "data"


def hf_config(name: str) -> dict[str, Any]:
    """A stored Hugging Face config.json (tests/data/NAME.config.json)."""
    return json.loads((DATA / f"{name}.config.json").read_text())


def emitted(cli: Any, given: str, kind: str = "megatron") -> str:
    """`btacalc plan GIVEN --emit KIND`'s output (a plan that does not fit is emitted too)."""
    code, out, err = cli("plan", *given.split(), "--emit", kind)
    assert code in (0, 1), err
    return out


def planned_as_it_ran(run: Any) -> Any:
    """A measured row btacalc plans as it ran: expressed without a reason and predicted with an error (runs10, runs11);
    the prediction, for the row's own band checks."""
    from btacalc.planning.measured import express, predict

    request, reason = express(run)
    assert reason == "" and request is not None
    result = predict(run)
    assert result.expressible and result.error is not None
    return result
