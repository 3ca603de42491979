"""Signals: a command stopped from outside leaves nothing behind and exits with 128 + the signal.

SIGINT, SIGTERM and SIGHUP raise `Stopped` in the main thread at the next bytecode (a
BaseException, like KeyboardInterrupt, but not one: click would turn that into its Abort and print
a blank line), so a sweep stops within one block of points, and every `except BaseException` / `finally`
on the way out runs: staged temporary files are removed, replaced files restored from their backups
(`btacalc.output.files`). `main` then prints one line and exits 128 + n (130, 143, 129).

SIGPIPE: Python ignores it, so a write to a closed pipe fails with EPIPE, which the console handles
(`btacalc plan | head` ends quietly with the command's own exit code). A SIGPIPE sent from outside
(`kill -PIPE`) is handled as the others (exit 141) unless standard output is a pipe whose reader is
gone (then the signal came from our own write and EPIPE does the rest).
"""

from __future__ import annotations

import select
import contextlib
import signal
from typing import Any

from ..starting import installed

HANDLED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE") if hasattr(signal, name))


class Stopped(BaseException):
    """The command was stopped by signal `signum`."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"


def _stdout_pipe_broken() -> bool:
    """Whether standard output is a pipe whose reading end is closed (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(1, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def stopped_within(exc: BaseException) -> "Stopped | None":
    """The `Stopped` an exception was raised while handling, if any (its __cause__ / __context__ chain). A signal
    raises `Stopped` at the next bytecode, and a library that turns whatever was raised inside it into its own
    error hides it: numpy's comparison of structured arrays (np.unique(..., axis=0) compares rows so) replaces any
    exception with "TypeError: Cannot compare structured arrays unless they have a common dtype", which made a
    SIGTERM'd sweep an internal error (exit 3) instead of "stopped" (exit 143)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, Stopped):
            return link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return None


def _handler(signum: int, frame: Any) -> None:
    if signum == getattr(signal, "SIGPIPE", -1) and _stdout_pipe_broken():
        return  # our own write to a closed pipe: the EPIPE it returned is handled where it was written
    raise Stopped(signum)


def handled() -> contextlib.AbstractContextManager[None]:
    """Within the block, the handled signals raise `Stopped`; the previous handlers come back after.
    Only in the main thread (elsewhere Python does not allow handlers: nothing changes)."""
    return installed(_handler, HANDLED)
