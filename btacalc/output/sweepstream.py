"""Streamed renderings of a sweep, block by block (`planning.sweep.iter_sweep`), so that a grid of
any size is written with bounded memory: the sweep's JSON document, its CSV, a plain-text table for
grids too large for a rich one, and the three numbers per point a plot needs."""

from __future__ import annotations

import json
from typing import Callable, Optional

from ..planning.sweep import SweepBlock
from .csvfiles import SWEEP_COLUMNS, sweep_csv_header, sweep_csv_rows
from .plots import PlotPoint

Write = Callable[[str], object]


class JsonStream:
    """{"model", "hardware", "fixed_active", "points": [...]}: the JSON of `SweepResult`, one point a line."""

    def __init__(self, write: Write, model: str, hardware: str, fixed_active: bool):
        self.write = write
        self.first = True
        head = json.dumps({"model": model, "hardware": hardware, "fixed_active": fixed_active})
        write(head[:-1] + ', "points": [')

    def block(self, block: SweepBlock) -> None:
        lines = [json.dumps(p) for p in block.points()]
        if lines:
            self.write(("\n" if self.first else ",\n") + ",\n".join(lines))
            self.first = False

    def close(self) -> None:
        self.write("\n]}\n")


class CsvStream:
    def __init__(self, write: Write, names: list[str]):
        self.write = write
        write(sweep_csv_header(names))

    def block(self, block: SweepBlock) -> None:
        self.write(sweep_csv_rows(block))

    def close(self) -> None:
        pass


# The plain-text table: the rich table's columns, fixed widths.
_TEXT_COLUMNS = (("G", 6), ("b", 6), ("M", 4), ("T_e", 12), ("tokens/s", 14), ("vs dense", 9), ("G=1 b", 6),
                 ("G=1 vs dense", 13), ("BTA gain", 9))


class TextTable:
    """One line per point, columns aligned; for grids too large to hold in a rich table."""

    # Rows shown at most (a terminal: its height, `terminal_rows`); the rest are counted in one closing
    # line (files get every row).
    ROWS = 1000

    def __init__(self, write: Write, names: list[str], title: str, rows: Optional[int] = None):
        self.write = write
        self.rows = self.ROWS if rows is None else rows
        self.shown = self.left_out = 0
        self.widths = [max(len(n), 8) for n in names] + [w for _, w in _TEXT_COLUMNS]
        header = names + [c for c, _ in _TEXT_COLUMNS]
        write(title + "\n" + self._line(header) + "\n")

    def _line(self, cells: list[str]) -> str:
        return " ".join(c.rjust(w) for c, w in zip(cells, self.widths)).rstrip()

    def block(self, block: SweepBlock) -> None:
        c = {k: block.columns[k].tolist() for k in ("tiles", "tile_batch", "micro_batches", "tokens_per_expert",
                                                     "tokens_per_s", "tokens_per_s_g1", "relative_to_dense",
                                                     "relative_to_dense_g1", "tile_batch_g1")}
        widths = self.widths
        names = list(block.params)
        params = [block.params[n].tolist() for n in names]
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        lines = []
        for i, (tps, g1) in enumerate(zip(c["tokens_per_s"], c["tokens_per_s_g1"])):
            cells = [str(p[i]) for p in params]
            if tps is None:
                cells += ["-"] * 8 + [block.errors[i] or "does not fit"]
            else:
                cells += [str(c["tiles"][i]), str(c["tile_batch"][i]), str(c["micro_batches"][i]),
                          f"{c['tokens_per_expert'][i]:,.0f}", f"{tps:,.0f}", fmt(c["relative_to_dense"][i]),
                          str(c["tile_batch_g1"][i] or "-"), fmt(c["relative_to_dense_g1"][i]),
                          f"{tps / g1:.2f}x" if g1 else "-"]
            lines.append(" ".join(cell.rjust(w) for cell, w in zip(cells, widths)).rstrip())
        room = max(self.rows - self.shown, 0)
        self.left_out += max(len(lines) - room, 0)
        lines = lines[:room]
        self.shown += len(lines)
        if lines:
            self.write("\n".join(lines) + "\n")

    def close(self) -> None:
        if self.left_out:
            self.write(f"... {self.left_out:,} more points not shown: --csv, --json or --output write every point\n")


class FileSummary:
    """What the terminal gets when a sweep's data goes to files (--csv, --output, --plot): the count of
    points, how many fit, the `BEST` fastest and where the data went (issue: files get data, the terminal
    a summary). Keeps only the best points, so memory stays bounded."""

    BEST = 5

    def __init__(self, write: Write, title: str, targets: list[str]):
        self.write, self.title, self.targets = write, title, targets
        self.points = self.fitting = 0
        self.best: list[tuple[float, str]] = []

    def block(self, block: SweepBlock) -> None:
        names = list(block.params)
        params = [block.params[n].tolist() for n in names]
        tps = block.columns["tokens_per_s"].tolist()
        self.points += len(tps)
        for i, v in enumerate(tps):
            if v is None or v != v:  # not fitting or invalid
                continue
            self.fitting += 1
            if len(self.best) < self.BEST or v > self.best[-1][0]:
                label = ", ".join(f"{n}={p[i]}" for n, p in zip(names, params))
                self.best = sorted(self.best + [(v, label)], key=lambda t: -t[0])[:self.BEST]

    def close(self) -> None:
        lines = [f"{self.title}: {self.points:,} points, {self.fitting:,} fit; written to {', '.join(self.targets)}"]
        lines += [f"  {tps:>14,.0f} tokens/s  {label}" for tps, label in self.best]
        self.write("\n".join(lines) + "\n")


class PlotPoints:
    """What `output.plots.sweep_plot_points` draws: params and the two relative throughputs per point."""

    def __init__(self) -> None:
        self.points: list[PlotPoint] = []

    def block(self, block: SweepBlock) -> None:
        c = block.columns
        for i, params in enumerate(block.param_rows()):
            if c["tokens_per_s"][i] is not None:
                self.points.append((params, c["relative_to_dense"][i], c["relative_to_dense_g1"][i]))

    def close(self) -> None:
        pass


__all__ = ["JsonStream", "CsvStream", "TextTable", "PlotPoints", "SWEEP_COLUMNS"]
