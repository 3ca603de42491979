"""Progress for long commands: a bar on a terminal, a periodic line on stderr when piped, nothing
with `--quiet`. Work that finishes within `delay_s` shows nothing at all.

    with progress(total, "solving", quiet) as advance:
        for item in items:
            ...
            advance(1)
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable, Iterator, Optional

from .console import err

# Below this a command feels instant; beyond it a user deserves to see that work is under way.
DELAY_S = 2.0
# Piped output: one line at most this often.
PIPED_INTERVAL_S = 10.0


@contextlib.contextmanager
def progress(total: int, label: str, quiet: bool = False, delay_s: Optional[float] = None,
             interval_s: Optional[float] = None) -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`; report progress on stderr once the work has run `delay_s` seconds (the
    module's DELAY_S and PIPED_INTERVAL_S, read at the call, when not given)."""
    delay_s = DELAY_S if delay_s is None else delay_s
    interval_s = PIPED_INTERVAL_S if interval_s is None else interval_s
    start = time.monotonic()
    done = 0
    last_line = start
    bar = None
    task = None
    # hostile37: a dumb terminal (TERM=dumb: an editor's shell buffer) is written lines, as a pipe: rich draws no bar
    # there, so a long command showed nothing until its end, then left an empty line where the bar was erased
    tty = sys.stderr.isatty() and not err.get().is_dumb_terminal

    def advance(n: int) -> None:
        nonlocal done, last_line, bar, task
        done += n
        if quiet:
            return
        now = time.monotonic()
        if now - start < delay_s:
            return
        if tty:
            if bar is None:
                from rich.progress import Progress

                bar = Progress(console=err.get(), transient=True)
                bar.start()
                task = bar.add_task(label, total=total)
            bar.update(task, completed=done)
        elif now - last_line >= interval_s or done == total:
            last_line = now
            err.print(f"btacalc: {label}: {done:,} of {total:,} ({100 * done / max(total, 1):.0f}%), "
                      f"{now - start:.0f} s", highlight=False, markup=False, soft_wrap=True)

    try:
        yield advance
    finally:
        if bar is not None:
            bar.stop()
