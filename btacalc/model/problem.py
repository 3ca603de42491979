"""A `Problem`: a model on a device under a resolved execution, everything but the batch shape.

It owns the catalogue selection for the model and the run, compiles it once, and evaluates every
per-phase formula at a batch shape (G tiles of b sequences). Scalar evaluations are memoised: the
solver, the memory breakdown and the time model ask for the same shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ..catalogue.compiled import CompiledSelection, PhaseValues, compile_selection
from ..catalogue.selection import Selection
from ..config.execution import Execution, Layout, RunOptions
from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec


@dataclass(frozen=True)
class Problem:
    """A model on a device with run options and a layout: everything but the batch shape (G, b)."""

    model: ModelSpec
    hardware: HardwareProfile
    execution: Execution
    _cache: dict[Any, PhaseValues] = field(default_factory=dict, compare=False, repr=False, hash=False)
    evaluations: list[int] = field(default_factory=lambda: [0], compare=False, repr=False, hash=False)

    @property
    def run(self) -> RunOptions:
        return self.execution.run

    @property
    def layout(self) -> Layout:
        return self.execution.layout

    @property
    def memory_model(self) -> str:
        """weight_streaming or resident ("auto" must be resolved first: model.memory.resolve_memory_model)."""
        return self.run.memory_model

    @cached_property
    def selection(self) -> Selection:
        return Selection.make({**self.model.features(), **self.run.features()}, self.run.recompute)

    @cached_property
    def compiled(self) -> CompiledSelection:
        return compile_selection(self.selection)

    def symbol_values(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> dict[str, Any]:
        values: dict[str, Any] = dict(self.model.symbol_values())
        values.update(
            s=self.run.seq_len if seq_len is None else seq_len,
            b=tile_batch,
            G=tiles,
            beta=self.run.bytes_per_element,
            P=0,
        )
        return values

    def evaluate(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> PhaseValues:
        """Every per-phase quantity at G = `tiles`, b = `tile_batch` (ints: exact, memoised; or arrays)."""
        scalar = all(isinstance(x, int) for x in (tiles, tile_batch)) and (seq_len is None or isinstance(seq_len, int))
        key = (tiles, tile_batch, seq_len)
        if scalar and key in self._cache:
            return self._cache[key]
        self.evaluations[0] += 1
        pv = self.compiled.evaluate(self.symbol_values(tiles, tile_batch, seq_len))
        if scalar:
            self._cache[key] = pv
        return pv

    def with_run(self, **changes: Any) -> "Problem":
        return Problem(self.model, self.hardware, replace(self.execution, run=replace(self.run, **changes)))

    def with_layout(self, **changes: Any) -> "Problem":
        return Problem(self.model, self.hardware, replace(self.execution, layout=replace(self.layout, **changes)))

    def with_model(self, model: ModelSpec) -> "Problem":
        return Problem(model, self.hardware, self.execution)


def make_problem(model: ModelSpec, hardware: HardwareProfile, run: RunOptions = RunOptions(),
                 layout: Layout = Layout()) -> Problem:
    """A problem from already-resolved run options and layout (library and test convenience)."""
    return Problem(model, hardware, Execution(run, layout))
