"""The two output streams of the command line. Only the CLI prints.

- Width: a terminal's own width (one that reports no size: `COLUMNS` if set, else 80); when piped, `COLUMNS`
  if set, else 132 (wide enough for the phase tables; rich would otherwise assume 80). Tables narrower than their
  content are split, never cut (`btacalc.output.fit`).
- Encoding: a stream that cannot encode Unicode (``PYTHONIOENCODING=ascii``, a C locale without
  UTF-8) gets ASCII stand-ins (``·`` -> ``*``, ``²`` -> ``^2``, box lines -> ``+-|``) instead of a crash.
- Standard output that fails: a closed pipe (``| head``) silences it and the command carries on;
  any other error (a full disk) is a one-line error.
- Each stream is a rich Console made on first use: importing rich costs about 20 ms that a command
  writing only JSON never needs.
"""

from __future__ import annotations

import codecs
import os
import sys
from typing import Any, Optional, Union


from ..errors import BtacalcError, clean_text

_PIPED_WIDTH = 132
# A terminal this wide is beyond any screen; wider settings are taken as this (a table is laid out
# character by character: COLUMNS=99999999 would not finish).
MAX_WIDTH = 1000


MIN_WIDTH = 40  # narrower consoles are laid out at 40 columns (the terminal wraps, nothing is cut)


# hostile36: a terminal that reports no size (0 x 0: a pseudo-terminal nobody sized, as `docker exec -t` or a CI
# runner may give) is laid out at the width terminals default to, and never cut: its 0 rows cut every table to
# the fewest lines a cut keeps, whatever its real height, and its 0 columns laid every table out at 40.
_UNSIZED_WIDTH = 80


def _terminal_size() -> Optional[os.terminal_size]:
    """Standard output's terminal size; None for a pipe or a file, or a terminal that reports no size."""
    if not sys.stdout.isatty():
        return None
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except (OSError, ValueError):
        return None
    return size if size.columns > 0 and size.lines > 0 else None


def _width() -> Any:
    size = _terminal_size()
    if size is not None:
        return max(MIN_WIDTH, size.columns)
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        return max(MIN_WIDTH, int(columns))
    return _UNSIZED_WIDTH if sys.stdout.isatty() else _PIPED_WIDTH


def terminal_lines() -> Any:
    """The height of the terminal standard output is, in lines; None when it is a pipe or a file (which
    get every line). Shared by every table (`btacalc.output.fit.Fit` cuts one taller than this) and the
    streamed sweep table (issue 25: a table longer than the terminal is cut with a count)."""
    size = _terminal_size()
    return None if size is None else size.lines


def sanitize_environment() -> None:
    """COLUMNS and LINES as rich and btacalc read them: an ASCII whole number (else dropped, as if
    unset: '²' is a digit to Python but not a number), at most MAX_WIDTH."""
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name)
        if value is None:
            continue
        if not (value.isascii() and value.isdigit()):
            del os.environ[name]
        elif int(value) > MAX_WIDTH:
            os.environ[name] = str(MAX_WIDTH)


CLOSED_STDOUT = "cannot write to standard output: standard output is closed (Bad file descriptor)"


class ClosedStream:
    """Standard output or error closed before btacalc started (`>&-`): writing to it is an error
    (reported as one line, exit 2, for stdout), as writing to a closed file descriptor is."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, data: Any) -> int:
        raise OSError(9, "standard output is closed (Bad file descriptor)")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(9, "Bad file descriptor")


def _hold_closed_descriptors() -> None:
    """A closed descriptor 0, 1 or 2 held by /dev/null, so that no file the command opens lands on it (hostile27:
    with stdin and stderr closed, an input opened as descriptor 2 looked like stderr redirected onto it, and was
    diverted before it was read; with stdout closed, an input opened as descriptor 1 was reported as stdout's
    target). sys.stdout / sys.stderr stay what Python made of the closed streams (None: `open_streams`)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: fd itself, the lower ones being open
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def open_streams() -> None:
    """Closed standard streams become `ClosedStream`s (Python leaves them None), and their descriptors are held
    (`_hold_closed_descriptors`)."""
    _hold_closed_descriptors()
    if sys.stdout is None:
        sys.stdout = ClosedStream()  # a file-like stand-in for the closed stream
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # nowhere to report to: the exit code still tells


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


def _encodable(encoding: str) -> bool:
    try:
        "".join(ASCII_STANDINS).encode(encoding)
        return True
    except (UnicodeEncodeError, LookupError):
        return False


def to_ascii(text: str) -> str:
    """`text` with ASCII stand-ins for the characters btacalc prints (others unchanged)."""
    return text if text.isascii() else "".join(ASCII_STANDINS.get(ch, ch) for ch in text)


def _console_class() -> Any:
    """rich's Console with btacalc's ASCII stand-ins and closed-pipe handling (rich imported here)."""
    from rich.console import Console

    class BtacalcConsole(Console):
        @property
        def screen_lines(self) -> Any:
            """The terminal's height when this console writes to a terminal (`terminal_lines`), else
            None; asked on every print, so a redirected stream is never cut."""
            return None if self.stderr else terminal_lines()

        def render_str(self, text: str, **kwargs: Any) -> Any:
            """On a stream that cannot encode Unicode, stand-ins replace characters before rich lays
            the text out (so '±' -> '+/-' widens its cell instead of pushing the border)."""
            text = clean_text(text, keep="\n\t")  # no escape sequence or lone surrogate reaches a stream
            if not text.isascii() and not _encodable(self.encoding):
                text = to_ascii(text)
            return super().render_str(text, **kwargs)

        def on_broken_pipe(self) -> None:
            """A closed pipe (`| head`): stop printing, carry on (rich's default exits with 1, which here
            means "does not fit")."""
            self.quiet = True
            if not self.stderr:
                silence_stdout()

    return BtacalcConsole


class _Console:
    """A console created when first used (attributes go to the rich Console)."""

    def __init__(self, stderr: bool):
        self._stderr = stderr
        self._console: Any = None
        self._pending: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if self._console is None and name in self._pending:
            return self._pending[name]
        return getattr(self.get(), name)

    _OWN = ("_stderr", "_console", "_pending")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._OWN:
            object.__setattr__(self, name, value)
        elif self._console is None:  # e.g. `quiet` before anything was printed: kept until then
            self._pending[name] = value
        else:
            setattr(self._console, name, value)

    def reset(self) -> None:
        """Forget the console: the next use makes it from the environment again, as a new process does (the
        tests' in-process runs reset it before each command, so one command's COLUMNS is not the next one's)."""
        self._console = None
        self._pending = {}

    def get(self) -> Any:
        """The rich Console itself (for rich objects that take one)."""
        if self._console is None:
            cls = _console_class()
            self._console = cls(stderr=True) if self._stderr else cls(width=_width())
            for name, value in self._pending.items():
                setattr(self._console, name, value)
        return self._console


out = _Console(stderr=False)
err = _Console(stderr=True)


def ascii_fallback(stream: Any) -> None:
    """Let `stream` print ASCII stand-ins for characters its encoding lacks (instead of raising)."""
    if _encodable(getattr(stream, "encoding", None) or "ascii"):
        return
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


class JsonText(str):
    """JSON text: on a stream that cannot encode it, its non-ASCII characters are written as JSON's \\u escapes
    (`write_stdout`), the same data, not the stand-ins or '?' of text for a reader (hostile28: `plan --json` under
    PYTHONIOENCODING=ascii or a C locale wrote 'arXiv 2505.09388 ?3.2' for '§3.2', and a model named 'Modèle' as
    'Mod?le', where the --output file of the same run held the characters)."""


def model_json(result: Any) -> JsonText:
    """A report (a pydantic model) as the JSON text every command writes: indented by 2, one line end."""
    return JsonText(result.model_dump_json(indent=2) + "\n")


def json_escaped(text: str) -> str:
    """`text` (JSON) with every non-ASCII character as a \\u escape (a surrogate pair above U+FFFF): the same JSON
    value, since JSON's syntax is ASCII and such characters stand only inside its strings."""
    def escape(ch: str) -> str:
        code = ord(ch)
        if code < 0x10000:
            return f"\\u{code:04x}"
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return text if text.isascii() else "".join(ch if ch.isascii() else escape(ch) for ch in text)


def _for_stream(data: str, stream: Any) -> str:
    """`data` as `stream` can take it: JSON text the stream's encoding cannot encode gets \\u escapes."""
    if not isinstance(data, JsonText) or data.isascii():
        return data
    try:
        data.encode(getattr(stream, "encoding", None) or "ascii")
        return data
    except (UnicodeEncodeError, LookupError):
        return json_escaped(data)


def write_stdout(data: Union[str, bytes]) -> None:
    """Text or bytes on standard output (guarded)."""
    def write() -> None:
        if isinstance(data, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(_for_stream(data, sys.stdout))

    guarded_stdout(write)


def print_stdout(renderable: Any) -> None:
    """A rich renderable on standard output (guarded)."""
    guarded_stdout(lambda: out.print(renderable))
