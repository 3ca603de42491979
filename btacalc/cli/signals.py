"""Signals: a command stopped from outside leaves nothing behind and exits with 128 + the signal.

SIGINT, SIGTERM and SIGHUP (and every other signal that would end the process: `STOPPING`) raise `Stopped` in the main thread at the next bytecode (a
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

from ..errors import BtacalcError, DataError
from ..starting import STOPPING_NAMES, installed

# hostile27: every signal whose default action ends the process (without a core dump or with one) is a stop: SIGQUIT
# (Ctrl-\), SIGXCPU (`ulimit -t`), SIGALRM, SIGUSR1/2, SIGVTALRM and SIGPROF left the staged temporary files behind.
# SIGXFSZ: Python ignores it, so a write past `ulimit -f` fails with EFBIG, an error of the write (files.py). SIGKILL
# cannot be caught.
STOPPING = STOPPING_NAMES
HANDLED = tuple(getattr(signal, name) for name in STOPPING if hasattr(signal, name))


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


# The stopping signal this command received (`_handler`), None before one: a library may turn the `Stopped` raised
# inside it into an error of its own with no trace of it (numpy's comparison of structured arrays, which
# np.unique(..., axis=0) runs on rows, sets "TypeError: Cannot compare structured arrays unless they have a common
# dtype" from C over whatever was raised, with neither __cause__ nor __context__), so the record, not the error's
# chain, says the command was stopped.
received: "Stopped | None" = None


def stopped_by(exc: BaseException) -> "Stopped | None":
    """The `Stopped` behind `exc`: the one it is, the one in its chain, or the signal this command received before it
    was raised; None for an error of the command's own. OSError, BtacalcError and DataError are never taken for a
    stop: cleaning up after one (restoring a file from its backup) may fail so, and the user must hear of that rather
    than "nothing written"."""
    if isinstance(exc, Stopped):
        return exc
    if isinstance(exc, (OSError, BtacalcError, DataError)):
        return None
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, Stopped):
            return link
        seen.add(id(link))
        link = link.__cause__ if link.__cause__ is not None else link.__context__
    return received


def _handler(signum: int, frame: Any) -> None:
    global received
    if signum == getattr(signal, "SIGPIPE", -1) and _stdout_pipe_broken():
        return  # our own write to a closed pipe: the EPIPE it returned is handled where it was written
    if received is not None:
        # hostile26: the command is already stopping. A second signal raised here cut the first stop's clean-up
        # short (temporary files left beside the outputs); the first stop stands and says which signal it was.
        return
    received = Stopped(signum)
    raise received


class _Handled(installed):
    """`installed` for `_handler`; once a stop was received, the command (`keep_ignoring`: `main` run as the console
    script or `python -m btacalc`, its argv None) keeps ignoring the handled signals when the block ends instead of
    giving back their default action: a second SIGTERM a few milliseconds after the first ended the process before
    `main` printed the first one's line (hostile26). In-process callers (tests) get their handlers back."""

    def __init__(self, keep_ignoring: bool):
        super().__init__(_handler, HANDLED)
        self.keep_ignoring = keep_ignoring

    def __exit__(self, *exc: object) -> None:
        if received is None or not self.keep_ignoring:
            super().__exit__(*exc)
            return
        for signum in self.previous:
            signal.signal(signum, signal.SIG_IGN)
        self.previous.clear()


def handled(keep_ignoring: bool = False) -> contextlib.AbstractContextManager[None]:
    """Within the block, the handled signals raise `Stopped` (and `received` records it: none at its start; later
    signals are ignored once one was); the previous handlers come back after, unless a stop was received and
    `keep_ignoring` (`_Handled`). Only in the main thread (elsewhere Python does not allow handlers: nothing
    changes)."""
    global received
    received = None
    return _Handled(keep_ignoring)
