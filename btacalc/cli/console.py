"""The two output streams of the command line. Only the CLI prints.

- Width: a terminal's own width; when piped, `COLUMNS` if set, else 132 (wide enough for the phase
  tables; rich would otherwise assume 80). Tables narrower than their content are split, never cut
  (`btacalc.output.fit`).
- Encoding: a stream that cannot encode Unicode (``PYTHONIOENCODING=ascii``, a C locale without
  UTF-8) gets ASCII stand-ins (``·`` -> ``*``, ``²`` -> ``^2``, box lines -> ``+-|``) instead of a crash.
- Standard output that fails: a closed pipe (``| head``) silences it and the command carries on;
  any other error (a full disk) is a one-line error.
"""

from __future__ import annotations

import codecs
import os
import sys
from typing import Any, Union

from rich.console import Console

from ..errors import BtacalcError

_PIPED_WIDTH = 132


def _width() -> Any:
    if sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) >= 20 else _PIPED_WIDTH


out = Console(width=_width())
err = Console(stderr=True)

# What an ASCII stream shows instead of the Unicode characters btacalc prints (anything else: "?").
ASCII_STANDINS = {
    "·": "*", "²": "^2", "³": "^3", "—": "-", "–": "-", "…": "...", "•": "*", "±": "+/-", "×": "x",
    "≤": "<=", "≥": ">=", "→": "->", "µ": "u", "≈": "~", "‘": "'", "’": "'", "“": '"', "”": '"',
    "─": "-", "━": "-", "│": "|", "┃": "|", "╭": "+", "╮": "+", "╰": "+", "╯": "+", "┏": "+", "┓": "+",
    "┗": "+", "┛": "+", "┡": "+", "┩": "+", "╇": "+", "┳": "+", "┻": "+", "┼": "+", "┬": "+", "┴": "+",
    "├": "+", "┤": "+", "┌": "+", "┐": "+", "└": "+", "┘": "+", "╷": "|", "╵": "|", "█": "#",
}
_HANDLER = "btacalc-ascii"


def _standin(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start:exc.end]
    return "".join(ASCII_STANDINS.get(ch, "?") for ch in text), exc.end


codecs.register_error(_HANDLER, _standin)


def ascii_fallback(stream: Any) -> None:
    """Let `stream` print ASCII stand-ins for characters its encoding lacks (instead of raising)."""
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        "".join(ASCII_STANDINS).encode(encoding)
        return
    except (UnicodeEncodeError, LookupError):
        pass
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors=_HANDLER)


def silence_stdout() -> None:
    """After a closed pipe: send what is left (and the interpreter's final flush) to /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (tests capture stdout)
        pass


def guarded_stdout(action: Any) -> None:
    """Run `action` (which prints on standard output) and flush: a closed pipe silences standard
    output, any other failure is a one-line error."""
    try:
        action()
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    except OSError as exc:
        raise BtacalcError(f"cannot write to standard output: {exc.strerror or exc}") from None


def write_stdout(data: Union[str, bytes]) -> None:
    """Text or bytes on standard output (guarded)."""
    def write() -> None:
        if isinstance(data, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data)

    guarded_stdout(write)


def print_stdout(renderable: Any) -> None:
    """A rich renderable on standard output (guarded)."""
    guarded_stdout(lambda: out.print(renderable))
