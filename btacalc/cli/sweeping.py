"""The outputs of `btacalc sweep`, fed block by block as the points are solved: JSON on stdout or in
a file, CSV, a plot, and otherwise a table (rich for small grids, streamed plain text for large ones).
Files go to temporary files beside their targets and are moved into place only when the sweep
succeeds. Invalid points are reported on stderr: one line each, or a summary line when many."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Optional

from ..errors import BtacalcError
from ..planning.sweep import Grid, SweepBlock, SweepPoint, SweepResult
from .console import err, out

# Up to this many points the table is a rich table (built at the end); above, plain text streamed.
TABLE_POINTS = 500
# Up to this many invalid points are listed one per line; above, one summary line.
LISTED_INVALID = 10


class SweepOutputs:
    """Every output the user asked for, as one context: `block` per solved block, `finish` at the end."""

    def __init__(self, grid: Grid, model: str, hardware: str, fixed_active: bool, as_json: bool,
                 output: Optional[Path], csv_path: Optional[Path], plot_path: Optional[str]):
        self.grid, self.model, self.hardware, self.fixed_active = grid, model, hardware, fixed_active
        self.as_json, self.output, self.csv_path, self.plot_path = as_json, output, csv_path, plot_path
        self.stack = contextlib.ExitStack()
        self.sinks: list[Any] = []
        self.table: Optional[list[SweepPoint]] = None
        self.plot: Any = None
        self.invalid: list[str] = []
        self.invalid_count = 0

    def __enter__(self) -> "SweepOutputs":
        from ..output.files import atomic_path
        from ..output.sweepstream import CsvStream, JsonStream, PlotPoints, TextTable

        self.stack.__enter__()
        names = list(self.grid.names)
        if self.plot_path:
            from ..output.plots import pyplot

            pyplot(self.plot_path)  # refuse a bad file name or a missing matplotlib before any work
            self.plot = PlotPoints()
            self.sinks.append(self.plot)
        for path, make in ((self.output, lambda w: JsonStream(w, self.model, self.hardware, self.fixed_active)),
                           (self.csv_path, lambda w: CsvStream(w, names))):
            if path is not None:
                tmp = self.stack.enter_context(atomic_path(path))
                self.sinks.append(make(self.stack.enter_context(open(tmp, "w", encoding="utf-8")).write))
        if self.as_json:
            self.sinks.append(JsonStream(sys.stdout.write, self.model, self.hardware, self.fixed_active))
        elif self.grid.size <= TABLE_POINTS:
            self.table = []
        else:
            title = f"Sweep: {self.model} on {self.hardware}" + (" (k·f fixed)" if self.fixed_active else "")
            self.sinks.append(TextTable(sys.stdout.write, names, title))
        return self

    def block(self, block: SweepBlock) -> None:
        for sink in self.sinks:
            sink.block(block)
        if self.table is not None:
            self.table += [SweepPoint.model_validate(p) for p in block.points()]
        for params, error in zip(block.param_rows(), block.errors):
            if error is not None:
                self.invalid_count += 1
                if len(self.invalid) <= LISTED_INVALID:
                    self.invalid.append(f"{', '.join(f'{k}={v}' for k, v in params.items())}: {error}")

    def finish(self) -> None:
        """Close the streams, report invalid points, draw the plot and print a small table."""
        for sink in self.sinks:
            sink.close()
        self._report_invalid()
        if self.plot is not None:
            from ..output.plots import sweep_plot_points

            sweep_plot_points(self.plot.points, self.model, self.hardware, self.fixed_active, self.plot_path or "")
        if self.table is not None:
            from ..output.tables import sweep_renderable

            out.print(sweep_renderable(SweepResult(model=self.model, hardware=self.hardware,
                                                   fixed_active=self.fixed_active, points=self.table)))

    def _report_invalid(self) -> None:
        say = lambda text: err.print(f"btacalc: {text}", highlight=False, markup=False, soft_wrap=True)  # noqa: E731
        if self.invalid_count and self.invalid_count <= LISTED_INVALID:
            for line in self.invalid:
                say(f"invalid point {line}")
        elif self.invalid_count:
            say(f"{self.invalid_count:,} of {self.grid.size:,} points are invalid; the first: {self.invalid[0]}")
        if self.invalid_count == self.grid.size:
            raise BtacalcError(f"none of the {self.grid.size:,} points of the sweep is valid")

    def __exit__(self, *exc: Any) -> Optional[bool]:
        return self.stack.__exit__(*exc)
