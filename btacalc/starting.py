"""The command line's imports (typing, numpy, typer, pydantic: a second or more on a loaded machine) run before
`main` handles signals (cli/signals.py). A Ctrl-C, SIGTERM or SIGHUP then stopped the process with a
KeyboardInterrupt traceback from inside the import machinery; within `while_starting` it prints the line `main`
prints for a stopped command and exits 128 + the signal at once (nothing can have been written yet). This module
imports only os, signal and sys, so that it covers the imports from the first one on; when the process
is the btacalc command, `btacalc/__init__.py` calls `begin` before its own first import (hostile19: the package's
imports, typing among them, ran before `cli/__init__.py` and a Ctrl-C there still printed a traceback)."""

import os
import sys
TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads this spelling too)
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable
else:  # the same functions without the enums signal's own module builds first (0.5 ms more before `begin`)
    import _signal as signal

_NAMES = {getattr(signal, n): n for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)}
# Every signal whose default action ends the process, by name: what a running command stops on (cli/signals.py) and
# what output/files.py holds while it creates, records or renames a file. One list (the twenty-seventh session:
# hostile27 added SIGQUIT and the others to the first only, so a SIGQUIT between creating a staged file and recording
# it could still leave it behind: tests/test_hostile27.py failed so once under load).
STOPPING_NAMES = ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE", "SIGQUIT", "SIGXCPU", "SIGALRM", "SIGUSR1", "SIGUSR2",
                  "SIGVTALRM", "SIGPROF")
STARTING_SIGNALS = tuple(_NAMES)


def _stop(signum: int, frame: object) -> None:
    name = _NAMES.get(signum, f"signal {signum}")
    sys.stderr.write(f"btacalc: stopped by {name}; nothing written\n")
    sys.stderr.flush()
    os._exit(128 + signum)  # no cleanup to run: the command has not started


def inherited_ignore(signum: int) -> bool:
    """Whether whoever started the command asked it to ignore `signum` (nohup's SIGHUP, the SIGINT and SIGQUIT a
    non-interactive shell's background job ignores): it stays ignored (review22). SIGPIPE is Python's own ignore
    (signals.py handles it), not the caller's."""
    return signum != getattr(signal, "SIGPIPE", None) and signal.getsignal(signum) == signal.SIG_IGN


class installed:
    """Within the block (`with installed(handler, signums):`), `handler` handles `signums`; the previous handlers
    come back after. Only in the main thread (elsewhere Python does not allow handlers: nothing changes). A class,
    not contextlib's decorator: contextlib's imports would run before the first signal is handled."""

    def __init__(self, handler: "Callable[[int, object], None]", signums: tuple[int, ...]):
        self.handler, self.signums = handler, signums
        self.previous: dict[int, object] = {}

    def __enter__(self) -> None:
        try:
            for signum in self.signums:
                if inherited_ignore(signum):
                    continue
                self.previous[signum] = signal.signal(signum, self.handler)
        except ValueError:  # not the main thread
            pass

    def __exit__(self, *exc: object) -> None:
        for signum, old in self.previous.items():
            signal.signal(signum, old)  # type: ignore[arg-type]  # what signal.signal returned
        self.previous.clear()


_BEFORE: dict[int, object] = {}  # the handlers `begin` replaced, which `end` gives back


def begin() -> None:
    """From now until `end`, the signals `main` handles end the process quietly (`_stop`). A second call before
    `end` changes nothing, so the handlers `end` gives back are the ones before the first."""
    if _BEFORE:
        return
    try:
        for signum in STARTING_SIGNALS:
            if not inherited_ignore(signum):
                _BEFORE[signum] = signal.signal(signum, _stop)
    except ValueError:  # not the main thread: nothing changes
        pass


def end() -> None:
    """The handlers before `begin` back."""
    for signum, old in _BEFORE.items():
        signal.signal(signum, old)  # type: ignore[arg-type]  # what signal.signal returned
    _BEFORE.clear()


class while_starting:
    """Within the block, the signals `main` handles end the process quietly (`_stop`); a `begin` before it
    (`btacalc/__init__.py` when the process is the btacalc command) lasts until the block ends."""

    def __enter__(self) -> None:
        begin()

    def __exit__(self, *exc: object) -> None:
        end()


def started_as_command() -> bool:
    """Whether this process is the btacalc command: the console script (`sys.argv[0]` is its path) or
    `python -m btacalc` (runpy imports the package while `sys.argv[0]` is still "-m"). Imported as a library,
    btacalc leaves the signals alone."""
    argv = getattr(sys, "argv", None) or [""]
    name = os.path.basename(argv[0])
    return name in ("btacalc", "btacalc.exe", "btacalc-script.py") or argv[0] == "-m"
