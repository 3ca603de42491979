"""The `btacalc` command line: a thin layer over the library. Printing happens only in `btacalc.cli`.

Commands live in their own modules and register themselves through `COMMAND_MODULES` (no module
imports this one back). `main` turns library errors into one line on stderr and exit code 2,
rendering the parameters they name as the flags a user typed.

Exit codes: 0 success (a plan that fits); 1 a plan that does not fit (or `validate` with a failing
point); 2 bad input, or an output that cannot be written (one line on stderr, nothing written);
3 a bug in btacalc (a broken shipped file, an unexpected exception; one line, please report it).
130 after Ctrl-C. Set BTACALC_DEBUG=1 to see the traceback of an unexpected exception.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from typing import Optional

import typer

from .. import __version__
from ..config.named_tables import did_you_mean
from ..errors import BtacalcError, DataError
from ..output.files import working_folder_exists
from ..paths import forget_inputs, guard_stderr, stderr_onto_input, stdout_onto_own_file
from . import cluster, info, measure, plan, validate, whatif
from .helpwidth import keep_whole
from .repeats import once
from .completion import check_completion_shell, restored_on_failure
from .console import (CLOSED_STDOUT, ClosedStream, ascii_fallback, err, guarded_stdout, open_streams, out,
                      sanitize_environment, silence_stdout)
from .options import FLAGS, flag, with_flags
from .signals import Stopped, handled, stopped_by

try:  # typer >= 0.20 vendors click; older typer uses the click package
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc  # type: ignore[no-redef]  # the same module, older location

COMMAND_MODULES = (plan, cluster, whatif, measure, validate, info)

# An option's help that names an outside tool's flag for the same thing ("Megatron's --micro-batch-size", "also
# called --gpus"): a user who types that flag is told btacalc's name instead of click's spelling guesses.
_OUTSIDE_NAMES = re.compile(r"(?:Megatron(?:'s)?|also called) ((?:--[\w-]+(?:, | or )?)+)")


def _btacalc_name(option: str, command) -> Optional[str]:
    """The option of `command` whose help names `option` as an outside tool's flag, if exactly one does."""
    hits = {param.opts[0] for param in getattr(command, "params", ())
            if any(option in re.findall(r"--[\w-]+", m.group(1))
                   for m in _OUTSIDE_NAMES.finditer(getattr(param, "help", None) or ""))}
    return hits.pop() if len(hits) == 1 else None


def _usage_message(exc) -> str:
    """click's message; for an unknown option that another tool spells so, the name btacalc takes."""
    if isinstance(exc, click_exc.NoSuchOption) and exc.ctx is not None:
        ours = _btacalc_name(exc.option_name, exc.ctx.command)
        if ours:
            return f"No such option: {exc.option_name}: btacalc's name for it is {ours}"
    # a choice's refusal names the choice meant (hostile23: --precision BF16 listed the names, none picked out)
    choice = re.search(r"'([^']*)' is not one of ('[^']*'(?:, '[^']*')*)\.?$", exc.format_message())
    if isinstance(exc, click_exc.BadParameter) and choice:
        return exc.format_message().rstrip(".") + did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
    return exc.format_message()


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="btacalc",
        help="Analytical memory, FLOP and throughput calculator for MoE training with Batch Tiling on Attention (BTA)."
        "\n\nExample: btacalc plan --model qwen3-30b-a3b --hw wse3",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    for module in COMMAND_MODULES:
        module.register(app)
    return app


def _version(shown: bool) -> None:
    if shown:
        guarded_stdout(lambda: out.print(f"btacalc {__version__}", highlight=False, markup=False))
        raise typer.Exit()


def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Analytical memory, FLOP and throughput calculator for MoE training with Batch Tiling on Attention (BTA)."""


app = build_app()


def _say(text: str, code: int) -> None:
    onto = stderr_onto_input()
    if onto is not None:  # standard error now shows on standard output's terminal, or goes nowhere (paths.py)
        text += (f" (standard error is redirected onto {onto}, an input of this command or one of btacalc's own "
                 "files: this line is shown here, not written there)")
    try:
        err.print(" ".join(text.split()), highlight=False, markup=False, soft_wrap=True)
    except OSError:  # stderr itself is gone: the exit code still tells
        pass
    sys.exit(code)


def _invoked(argv: Optional[list[str]]) -> typer.Typer:
    """The app to build for this command line: `app` itself, or, when the first argument names one of its
    commands (`plan`, `sweep`, ...), a copy holding that command alone. typer builds every registered
    command's options (their signatures and types) before it parses anything, about 20 ms of a cold
    `plan --json`; click then runs only the command named, so the copy answers the same. Help, completion,
    root options and groups (`hw list`) take the whole app."""
    args = sys.argv[1:] if argv is None else argv
    if not args or any(key.endswith("_COMPLETE") for key in os.environ):
        return app
    only = [info for info in app.registered_commands
            if (info.name or typer.main.get_command_name(info.callback.__name__)) == args[0]]  # type: ignore[union-attr]
    if len(only) != 1:
        return app
    narrowed = copy.copy(app)
    narrowed.registered_commands = only
    narrowed.registered_groups = []
    return narrowed


def _run(argv: Optional[list[str]]) -> int:
    refusal = stdout_onto_own_file()  # every command, --help and --version too, before anything is printed
    if refusal is not None:
        raise BtacalcError(refusal)
    if isinstance(sys.stdout, ClosedStream):  # hostile36: said before the work (validate's 12 s, minutes of a search),
        raise BtacalcError(CLOSED_STDOUT)     # not when its first line was written: every command prints there
    try:
        command = once(keep_whole(typer.main.get_command(_invoked(argv))))
        rv = command.main(args=argv, prog_name="btacalc", standalone_mode=False)
    except click_exc.NoArgsIsHelpError as exc:  # `btacalc` alone: help, as usual
        guarded_stdout(lambda: out.print(exc.ctx.get_help() if exc.ctx else ""))
        return 0
    except SystemExit:
        # Outside standalone mode click's main exits only on EPIPE (it returns or raises otherwise), with 1 ("does not
        # fit" here) after wrapping the streams (click.utils._PacifyFlushWrapper, whose `wrapped` is the stream).
        # hostile21: `btacalc plan --help | head -1` exited 1 when head left after the help's one write, before the
        # newline click writes after it. A closed pipe ends quietly with the command's own code (help: 0), as elsewhere.
        if not hasattr(sys.stdout, "wrapped"):
            raise
        for name in ("stdout", "stderr"):
            setattr(sys, name, getattr(getattr(sys, name), "wrapped", getattr(sys, name)))
        silence_stdout()
        return 0
    guarded_stdout(lambda: None)  # flush what the command printed: a full disk is an error here, not at exit
    return rv if isinstance(rv, int) else 0


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry: user errors become one line on stderr and exit code 2 (see the module
    docstring for every exit code). No traceback reaches the user."""
    open_streams()
    forget_inputs()
    guard_stderr(sys.argv[1:] if argv is None else list(argv))  # hostile17: `2>> run.sh` never writes into run.sh
    sanitize_environment()
    ascii_fallback(sys.stdout)
    ascii_fallback(sys.stderr)
    out.quiet = err.quiet = False  # a closed pipe silenced an earlier command in this process (tests)
    try:
        with handled(keep_ignoring=argv is None):  # the command itself (tests call main with their argv)
            code = _stopped_as_such(argv)
    except Stopped as exc:  # SIGTERM, SIGHUP, SIGINT, SIGPIPE: files already cleaned on the way out
        _say(f"btacalc: stopped by {exc.name}; nothing written", exc.exit_code)
    except click_exc.UsageError as exc:
        # click wraps a converter's ValueError as "Value error, ...": the reason alone reads better
        _say(f"btacalc: error: {_usage_message(exc).replace('Value error, ', '')}", 2)
    except (typer.Abort, KeyboardInterrupt):
        _say("btacalc: interrupted", 130)
    except BtacalcError as exc:
        _say(f"btacalc: error: {with_flags(exc, sys.argv[1:] if argv is None else argv)}", 2)
    except DataError as exc:  # a broken shipped file: a bug, but still no traceback
        _say(f"btacalc: internal data error (please report): {exc}", 3)
    except BrokenPipeError:
        silence_stdout()
        sys.exit(0)
    except OSError as exc:  # reading or writing a file the library did not name
        if exc.filename is None and not working_folder_exists():
            _say("btacalc: error: the working folder no longer exists (it was deleted); cd to another folder", 2)
        where = f" {exc.filename}" if exc.filename else ""
        _say(f"btacalc: error: cannot read or write{where}: {exc.strerror or exc}", 2)
    except (ArithmeticError, RuntimeWarning) as exc:  # overflow, or numpy's warnings under PYTHONWARNINGS=error
        _say(f"btacalc: error: the inputs take a number beyond the arithmetic's range ({type(exc).__name__}: "
             f"{str(exc).splitlines()[0] if str(exc) else 'overflow'}); use sizes and rates within the documented ranges", 2)
    except MemoryError:
        _say("btacalc: error: out of memory: the inputs ask for more than this machine has", 2)
    except Exception as exc:  # a bug: one line, exit 3 (BTACALC_DEBUG=1 shows the traceback)
        if os.environ.get("BTACALC_DEBUG"):
            raise
        _say(f"btacalc: internal error (please report, or rerun with BTACALC_DEBUG=1): {type(exc).__name__}: {exc}", 3)
    if argv is None:
        _finished()
    sys.exit(code)


def _stopped_as_such(argv: Optional[list[str]]) -> int:
    """`_run`, with an error raised after a stopping signal (signals.stopped_by: the library that was running turned
    the signal's `Stopped` into an error of its own) turned back into that `Stopped`: a stopped command says so. A
    failed clean-up (OSError, BtacalcError, DataError) is reported as itself."""
    try:
        installs = check_completion_shell(sys.argv[1:] if argv is None else list(argv))
        with restored_on_failure(installs):
            return _run(argv)
    except Exception as exc:
        stopped = stopped_by(exc)
        if stopped is not None:
            raise stopped from None
        raise


def _finished() -> None:
    """The command has written everything: a stopping signal from here on (Python's teardown takes tens of ms) is
    ignored. hostile16: a SIGTERM in that window ended a finished `plan --emit megatron -o x.sh` with exit 143 and no
    line, its file written, though 128 + n promises "stopped; nothing written". Only for the console command
    (`argv` None): tests run `main` in their own process, whose signals stay theirs."""
    import signal

    from ..starting import STOPPING_NAMES

    for name in STOPPING_NAMES:  # (every signal a command stops on: a SIGQUIT here too ended a finished command)
        if hasattr(signal, name):
            try:
                signal.signal(getattr(signal, name), signal.SIG_IGN)
            except ValueError:  # not the main thread
                pass


__all__ = ["app", "main", "FLAGS"]
