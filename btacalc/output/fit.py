"""Tables that never cut a number: when a table is wider than the console, its columns are split into
several tables (each repeating the first, naming column), instead of letting rich shrink the cells
to `attn_s…` or `1.2…`.

Columns made with ``overflow="fold"`` are prose (notes, sources): they may wrap at spaces and fold
long words. Every other column is kept whole (``no_wrap``). Below the width where even the naming
column and one more fit, each row becomes a short list of `header: value` lines.

On a terminal, a table taller than the screen is cut to the screen's height less `CUT_FRAME_LINES`
(at least `CUT_MIN_LINES`), and one closing line counts the lines left out and says how to get them
all (issue 25, Build 4). The console says whether it writes to a terminal and how tall it is
(`screen_lines`, None for a pipe or a file, which get every line: btacalc.cli.console).
"""

from __future__ import annotations

import copy
from typing import Iterable, Iterator

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.constrain import Constrain
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Column, Table
from rich.text import Text, TextType

PROSE_MIN = 12  # a prose column may wrap down to this many characters
# Lines of a terminal a cut table leaves free: its closing count and the shell's prompt.
CUT_FRAME_LINES = 2
CUT_MIN_LINES = 10  # a cut table shows at least this many lines, however short the terminal
CUT_NOTE = "... {left:,} more lines not shown: pipe the output (| less) or use --json to get all of it"


def _is_prose(column: Column) -> bool:
    return column.overflow == "fold"


def _cell_width(console: Console, options: ConsoleOptions, cell: RenderableType, highlight: bool) -> tuple[int, int]:
    """A cell's narrowest and widest width. A text cell is measured as its column renders it (rich's Table passes
    the column's `highlight`, False unless set): the console's default highlighter, never used to render the
    cell, took time quadratic in a long word (a 100,000-character run id: `validate` 4 min 40 s; review12)."""
    if isinstance(cell, str):
        cell = console.render_str(cell, highlight=highlight)
    m = Measurement.get(console, options, cell)
    return m.minimum, m.maximum


def _needed(console: Console, options: ConsoleOptions, table: Table, columns: list[Column]) -> int:
    """The narrowest width at which `columns` of `table` render with nothing cut."""
    pad = table.padding[1] + table.padding[3]
    total = 0
    for column in columns:
        widths = [_cell_width(console, options, c, column.highlight) for c in (column.header, *column.cells)]
        widest = max(w[1] for w in widths)
        total += (min(PROSE_MIN, widest) if _is_prose(column) else widest) + pad
    if table.box is not None:
        total += len(columns) - 1 + (2 if table.show_edge else 0)
    return total


def _subtable(table: Table, columns: list[Column], first: bool) -> Table:
    """The table of `columns`: the title on the first, the caption on none (`_caption` sets it under them all)."""
    sub = copy.copy(table)
    sub.columns = []
    for i, column in enumerate(columns):
        c = copy.copy(column)
        c._index = i
        sub.columns.append(c)
    if not first:
        sub.title = None
    sub.caption = None
    return sub


def _caption(console: Console, options: ConsoleOptions, table: Table, caption: TextType,
             pieces: list[Table]) -> RenderableType:
    """The caption of a split table, wrapped to its widest piece as the whole table's caption is to the table
    (freshuser20: it was the last piece's, a 14-column key column and one more, so a two-line caption took
    twelve lines of two words each)."""
    width = min(options.max_width, max(Measurement.get(console, options, p).maximum for p in pieces))
    text = console.render_str(caption, style=Style.pick_first(table.caption_style, "table.caption"),
                              highlight=False) if isinstance(caption, str) else copy.copy(caption)
    text.justify = table.caption_justify
    return Constrain(text, width)


def _records(table: Table) -> Iterator[RenderableType]:
    """Each row as `header: value` lines (the last resort for very narrow consoles)."""
    if table.title:
        yield table.title
    headers = [str(c.header) for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    for row in range(table.row_count):
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for h, col in zip(headers, cells):
            grid.add_row(h + ":" if h else "", col[row])
        yield grid
        yield Text("")
    if table.caption:
        yield table.caption


def _chunks(console: Console, options: ConsoleOptions, table: Table) -> list[list[Column]] | None:
    """Groups of columns that each fit, the first column repeated in every group; None if even the
    first column and one more do not fit."""
    key, rest = table.columns[0], table.columns[1:]
    groups: list[list[Column]] = []
    group = [key]
    for column in rest:
        if _needed(console, options, table, group + [column]) <= options.max_width:
            group.append(column)
            continue
        if len(group) == 1 or _needed(console, options, table, [key, column]) > options.max_width:
            return None
        groups.append(group)
        group = [key, column]
    groups.append(group)
    return groups


class Fit:
    """A table rendered whole at any console width (see the module docstring)."""

    def __init__(self, table: Table):
        self.table = table
        for column in table.columns:
            if not _is_prose(column):
                column.no_wrap = True

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        pieces = list(self._pieces(console, options))
        screen = getattr(console, "screen_lines", None)
        if screen is None:
            yield from pieces
            return
        yield from _cut(console, options, pieces, max(screen - CUT_FRAME_LINES, CUT_MIN_LINES))

    def _pieces(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
        table = self.table
        if not table.columns or _needed(console, options, table, table.columns) <= options.max_width:
            yield table
            return
        groups = _chunks(console, options, table) if len(table.columns) > 1 else None
        if groups is None:
            yield from _records(table)
            return
        pieces = [_subtable(table, group, first=i == 0) for i, group in enumerate(groups)]
        yield from pieces
        if table.caption:
            yield _caption(console, options, table, table.caption, pieces)


def _cut(console: Console, options: ConsoleOptions, pieces: list[RenderableType], room: int) -> RenderResult:
    """`pieces` whole if they take at most `room` lines, else their first `room - 1` lines and a count
    of the rest (`CUT_NOTE`), `room` lines in all."""
    lines = console.render_lines(Group(*pieces), options, pad=False)
    if len(lines) <= room:
        yield from pieces
        return
    shown = room - 1
    for line in lines[:shown]:
        yield from line
        yield Segment.line()
    yield Text(CUT_NOTE.format(left=len(lines) - shown))


def label_grid(*, fold_values: bool = False) -> Table:
    """A borderless two-column table of labelled lines (a plan's header, a wafer plan, a whatif answer): the label
    bold, then its value; `fold_values`: values wrap at narrow widths (a long formula or number), never end
    in "…"."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    if fold_values:
        t.add_column(overflow="fold")
    else:
        t.add_column()
    return t


def fit(table: Table) -> Fit:
    return Fit(table)


def fit_all(tables: Iterable[RenderableType]) -> list[RenderableType]:
    """`fit` applied to the tables among `tables` (grids and panels pass through)."""
    return [fit(t) if isinstance(t, Table) and t.box is not None else t for t in tables]
