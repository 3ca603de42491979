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
    from collections.abc import Callable, Iterator

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
def installed(handler: Callable[[int, object], None], signums: tuple[int, ...]) -> Iterator[None]:
    """Within the block, `handler` handles `signums`; the previous handlers come back after. Only in the main
    thread (elsewhere Python does not allow handlers: nothing changes)."""
    previous: dict[int, object] = {}
    try:
        for signum in signums:
            previous[signum] = signal.signal(signum, handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)  # type: ignore[arg-type]  # what signal.signal returned


def while_starting() -> contextlib.AbstractContextManager[None]:
    """Within the block, the signals `main` handles end the process quietly (`_stop`)."""
    return installed(_stop, STARTING_SIGNALS)
