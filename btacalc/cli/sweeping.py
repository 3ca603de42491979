"""The outputs of `btacalc sweep`, fed block by block as the points are solved: JSON on stdout or in
a file, CSV, a plot, and otherwise a table (rich for small grids, streamed plain text for large ones).

The targets were checked before the sweep started (`options.outputs`). Streamed outputs go to their
temporary files (`output.files.Streams`) and are renamed into place, with the plot, only when the sweep
succeeds; a failed sweep leaves nothing behind. Invalid points are reported on stderr: one line each,
or a summary line when many."""

from __future__ import annotations

from typing import Any, Optional

from ..errors import BtacalcError
from ..planning.sweep import Grid, SweepBlock, SweepPoint, SweepResult
from .console import err, print_stdout, terminal_lines, write_stdout

# Up to this many points the table is a rich table (built at the end); above, plain text streamed.
TABLE_POINTS = 500
# Up to this many invalid points are listed one per line; above, one summary line.
LISTED_INVALID = 10
# The outputs written as the blocks come (the plot is drawn at the end).
STREAMED = ("--output", "--json", "--csv")
# Standard output is held back until a valid point is solved (a sweep with none writes nothing and
# exits 2); a run of invalid points longer than this is written anyway, to keep memory bounded.
HELD_BYTES = 1 << 22


# freshuser20: a sweep none of whose points fits said only "does not fit" on each row. `plan` names what binds and
# what would fit; on GPUs the sweep's layouts are data and expert parallelism alone (it takes no --tp, --pp, --cp).
NO_FIT = "no point of the sweep fits: btacalc plan with one point's values says what binds and what would fit"
NO_FIT_GPU = (NO_FIT + "; sweep lays the model out in data and expert parallelism only (no --tp, --pp or --cp): "
              "btacalc plan --search finds the fastest layout that fits, if any")


def no_fit_line(gpu: bool, request: Any) -> str:
    """The line a sweep none of whose valid points fits ends with. hostile39: a sweep given --tp, --pp or --cp (which
    sweep has taken since) was told it lays the model out "in data and expert parallelism only (no --tp, --pp or
    --cp)"; it names the layout given instead."""
    if not gpu:
        return NO_FIT
    given = [f"--{flag} {v}" for flag, v in (("tp", request.tensor_parallel), ("pp", request.pipeline_parallel),
                                               ("cp", request.context_parallel)) if v is not None and v > 1]
    if not given:
        return NO_FIT_GPU
    return (NO_FIT + f"; sweep plans every point at the layout given ({', '.join(given)}): btacalc plan --search finds "
            "the fastest layout that fits, if any")


# Lines a streamed table leaves on a terminal's screen besides its rows: the title, the header, the
# closing count and the shell's prompt.
TERMINAL_FRAME_LINES = 4


def terminal_rows() -> Optional[int]:
    """On a terminal, the rows of a streamed table that fit its height (at least 10): the rest are counted
    in one closing line, so the answer stays on screen (issue 25: a table longer than the terminal is cut
    with a count). None when standard output is a pipe or a file (TextTable.ROWS then)."""
    lines = terminal_lines()
    return None if lines is None else max(lines - TERMINAL_FRAME_LINES, 10)


class HeldStdout:
    """Standard output for a streamed sweep: buffered until `release` (the first valid point)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.released = False

    def __call__(self, text: str) -> None:
        if self.released:
            write_stdout(text)
            return
        self.parts.append(text)
        self.size += len(text)
        if self.size > HELD_BYTES:
            self.release()

    def release(self) -> None:
        if not self.released:
            self.released = True
            held, self.parts = "".join(self.parts), []
            if held:
                write_stdout(held)


class SweepOutputs:
    """Every output the user asked for, as one context: `block` per solved block, `finish` at the end."""

    def __init__(self, outs: Any, grid: Grid, model: str, hardware: str, fixed_active: bool,
                 plot_path: Optional[str], no_fit: str = NO_FIT):
        self.outs, self.grid, self.plot_path, self.no_fit = outs, grid, plot_path, no_fit
        self.model, self.hardware, self.fixed_active = model, hardware, fixed_active
        self.streams: Any = None
        self.stdout = HeldStdout()
        self.sinks: list[Any] = []
        self.table: Optional[list[SweepPoint]] = None
        self.plot: Any = None
        self.invalid: list[str] = []
        self.invalid_count = 0
        self.fitting = 0

    def __enter__(self) -> "SweepOutputs":
        from ..output.sweepstream import PlotPoints

        if self.plot_path:
            from ..output.plots import pyplot

            pyplot(self.plot_path)  # a missing matplotlib is refused before any work
            self.plot = PlotPoints()
            self.sinks.append(self.plot)
        from ..output.files import held

        try:  # `with` calls __exit__ only after __enter__ returned
            with held():  # a stop between creating the staged files and noting them here would orphan them
                self.streams = self.outs.streams(STREAMED, self.stdout)
            # (a stop held above is delivered as held() unblocks it, still inside this try: tidy2 found the
            # staged files orphaned when it came between the `with` and a try that began after it)
            self._sinks()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _sinks(self) -> None:
        from ..output.sweepstream import CsvStream, FileSummary, JsonStream, TextTable

        for flag, write in self.streams.writers.items():
            if flag == "--csv":
                self.sinks.append(CsvStream(write, list(self.grid.names)))
            else:
                self.sinks.append(JsonStream(write, self.model, self.hardware, self.fixed_active))
        files = self._file_targets()
        if not self.outs.stdout_taken and files:
            title = f"Sweep: {self.model} on {self.hardware}" + (" (k·f fixed)" if self.fixed_active else "")
            self.sinks.append(FileSummary(self.stdout, title, files))
        elif not self.outs.stdout_taken:
            if self.grid.size <= TABLE_POINTS:
                self.table = []
            else:
                title = f"Sweep: {self.model} on {self.hardware}" + (" (k·f fixed)" if self.fixed_active else "")
                self.sinks.append(TextTable(self.stdout, list(self.grid.names), title, terminal_rows()))

    def _file_targets(self) -> list[str]:
        """The files this sweep writes (--csv, --output, --plot), as the user named them."""
        return [f"{t.path} ({flag})" for flag, t in self.outs.targets.items() if t.kind == "file"]

    def block(self, block: SweepBlock) -> None:
        if self._releases(block):
            self.stdout.release()
        for sink in self.sinks:
            sink.block(block)
        if self.table is not None:
            self.table += [SweepPoint.model_validate(p) for p in block.points()]
        self.fitting += sum(1 for v in block.columns["tokens_per_s"].tolist() if v is not None and v == v)
        for params, error in zip(block.param_rows(), block.errors):
            if error is not None:
                self.invalid_count += 1
                if len(self.invalid) <= LISTED_INVALID:
                    self.invalid.append(f"{', '.join(f'{k}={v}' for k, v in params.items())}: {error}")

    def finish(self) -> None:
        """Close the streams, report invalid points, draw the plot, then put every file in place and
        print a small table."""
        if self.invalid_count == self.grid.size:  # bad input: one line, as every error (the first reason in it)
            raise BtacalcError(f"none of the {self.grid.size:,} points of the sweep is valid; the first: {self.invalid[0]}")
        payloads: dict[str, Any] = {}
        if self.plot is not None:  # drawn before the summary names the files: a plot of nothing is refused first
            from ..output.plots import sweep_plot_points

            payloads["--plot"] = sweep_plot_points(self.plot.points, self.model, self.hardware, self.fixed_active,
                                                   self.plot_path or "")
        from ..output.sweepstream import FileSummary

        # the summary names the files it wrote: it prints once the streamed files are closed (review34: a --csv to
        # a full disk failed after "written to new.json (--output)" was printed, and neither file was written)
        summaries = [sink for sink in self.sinks if isinstance(sink, FileSummary)]
        for sink in self.sinks:
            if not isinstance(sink, FileSummary):
                sink.close()
        self._report_invalid()
        self.stdout.release()
        table = None
        if self.table is not None:
            from ..output.tables import sweep_renderable

            result = SweepResult(model=self.model, hardware=self.hardware, fixed_active=self.fixed_active,
                                 points=self.table)
            table = lambda: print_stdout(sweep_renderable(result))  # noqa: E731

        def finish() -> None:
            for summary in summaries:
                summary.close()
            if table is not None:
                table()

        self.outs.commit(payloads, stdout=write_stdout, finish=finish, streamed=self.streams)
        self.streams = None  # committed: its staged files are in place or, on failure, removed

    def _releases(self, block: SweepBlock) -> bool:
        """Whether `block` lets held standard output go: a valid point, or with --plot a fitting one (hostile21: a
        sweep whose points all fit nowhere printed its JSON, or \"written to p.png, s.csv\", and then refused the
        plot with exit 2, neither file written)."""
        if self.plot is None:
            return any(e is None for e in block.errors)
        return any(v is not None and v == v for v in block.columns["tokens_per_s"].tolist())

    def _report_invalid(self) -> None:
        say = lambda text: err.print(f"btacalc: {text}", highlight=False, markup=False, soft_wrap=True)  # noqa: E731
        if self.invalid_count and self.invalid_count <= LISTED_INVALID:
            for line in self.invalid:
                say(f"invalid point {line}")
        elif self.invalid_count:
            say(f"{self.invalid_count:,} of {self.grid.size:,} points are invalid; the first: {self.invalid[0]}")
        if not self.fitting:
            say(self.no_fit)

    def __exit__(self, *exc: Any) -> Optional[bool]:
        if self.streams is not None:  # the sweep failed: nothing is left behind
            self.streams.discard()
        return None
