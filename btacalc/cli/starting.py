"""The command line's imports (typing, numpy, typer, pydantic: a second or more on a loaded machine) run before
`main` handles signals (cli/signals.py). A Ctrl-C, SIGTERM or SIGHUP then stopped the process with a
KeyboardInterrupt traceback from inside the import machinery; within `while_starting` it prints the line `main`
prints for a stopped command and exits 128 + the signal at once (nothing can have been written yet). This module
imports only os, signal and sys, so that it covers the imports from the first one on."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads this spelling too)
if TYPE_CHECKING:
    from collections.abc import Iterator

STARTING_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


def _stop(signum: int, frame: object) -> None:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    sys.stderr.write(f"btacalc: stopped by {name}; nothing written\n")
    sys.stderr.flush()
    os._exit(128 + signum)  # no cleanup to run: the command has not started


@contextlib.contextmanager
def while_starting() -> Iterator[None]:
    """Within the block, the signals `main` handles end the process quietly; the previous handlers come back
    after (only in the main thread: elsewhere Python allows no handlers and nothing changes)."""
    previous: dict[int, object] = {}
    try:
        for signum in STARTING_SIGNALS:
            previous[signum] = signal.signal(signum, _stop)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)  # type: ignore[arg-type]  # what signal.signal returned
