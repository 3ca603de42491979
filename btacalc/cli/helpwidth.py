"""Help that never cuts a flag's name or a word, at any terminal width (issue 25).

typer's rich help lays a command's options out as a table (names, aliases, type, help); on a narrow
terminal rich shortens the cells that do not fit and ends them with '…' (`--max-global-ba…` at 80
columns, `--mod…` at 40). Each command's help is therefore rendered once off screen first; when that
rendering cuts a cell, the help is laid out stacked instead: each option's names and type on their own
line(s), its help below, indented, wrapped at spaces only (a word, a flag or a path longer than the
line stays whole and the terminal wraps it). Help that fits is typer's, unchanged.
"""

from __future__ import annotations

import contextlib
import io
import textwrap
from typing import Any, Callable, Iterator

from .console import guarded_stdout, silence_stdout

ELLIPSIS = "…"  # what rich puts at the end of a cell it shortened
INDENT, HELP_INDENT = 2, 6


def keep_whole(command: Any) -> Any:
    """`command` (a click command or group, typer's) and every subcommand get help that never cuts a
    word (see the module docstring); returns `command`."""
    for cmd in walk(command):
        cmd.format_help = _Whole(cmd, cmd.format_help)
    return command


def walk(command: Any) -> Iterator[Any]:
    """`command` and every subcommand under it."""
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from walk(sub)


class _Whole:
    """A command's format_help: typer's when nothing is cut, else the stacked layout."""

    def __init__(self, command: Any, typer_help: Callable[[Any, Any], None]):
        self.command, self.typer_help = command, typer_help

    def __call__(self, ctx: Any, formatter: Any) -> None:
        off_screen = io.StringIO()
        with contextlib.redirect_stdout(off_screen):
            self.typer_help(ctx, formatter)
        if not cuts(off_screen.getvalue(), self.command):
            try:  # a full disk is one line, "cannot write to standard output" (hostile21: "cannot read or write")
                guarded_stdout(lambda: self.typer_help(ctx, formatter))
            except SystemExit:
                # typer prints through its own rich Console, whose on_broken_pipe sends standard output to
                # /dev/null and exits with 1 (hostile15: `btacalc --help | head -1` exited 1, which here means
                # "does not fit"); a closed pipe ends quietly with the command's own code (help: 0), as elsewhere
                # (an EPIPE raised here would not do: click's main turns it into exit 1 too)
                silence_stdout()
            return
        from rich.console import Console  # the width typer's console would use

        # as above: a closed pipe silences standard output (click's main would exit 1 on its EPIPE), a full disk is one line
        guarded_stdout(lambda: print(stacked_help(self.command, ctx, Console().width), end=""))


def cuts(rendered: str, command: Any) -> bool:
    """True when the rendered help shortened a cell (an ellipsis that no help text of the command has)."""
    own = " ".join([command.help or "", command.epilog or ""] + [getattr(p, "help", None) or "" for p in command.params])
    return ELLIPSIS in rendered and ELLIPSIS not in own


def _wrap(text: str, width: int, indent: int) -> list[str]:
    """Lines of at most `width` (unless one word is longer), broken at spaces only."""
    pad = " " * indent
    return textwrap.wrap(text, max(width, indent + 1), initial_indent=pad, subsequent_indent=pad,
                         break_long_words=False, break_on_hyphens=False) or [""]


def _paragraphs(text: str, width: int, indent: int) -> list[str]:
    out: list[str] = []
    for para in text.replace("\\[", "[").split("\n\n"):
        literal = para.startswith("  ")  # an example command: one per line, as written
        for line in (para.splitlines() if literal else [" ".join(para.split())]):
            out += _wrap(line.strip(), width, indent + (2 if literal else 0))
        out.append("")
    return out


def stacked_help(command: Any, ctx: Any, width: int) -> str:
    """The help of `command` laid out one option after another (see the module docstring)."""
    lines = [""] + _wrap(command.get_usage(ctx), width, 1) + [""]
    lines += _paragraphs(command.help or "", width, 1)
    lines.append(" Options:")
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, text = record
        lines += _wrap(names, width, INDENT)
        if text:
            lines += _wrap(" ".join(text.replace("\\[", "[").split()), width, HELP_INDENT)
    commands = getattr(command, "commands", {})
    if commands:
        lines += ["", " Commands:"]
        for name in command.list_commands(ctx):
            sub = commands[name]
            lines += _wrap(name, width, INDENT)
            lines += _wrap(" ".join((sub.short_help or sub.help or "").split("\n\n")[0].split()), width, HELP_INDENT)
    if command.epilog:
        lines.append("")
        lines += _paragraphs(command.epilog, width, 1)
    return "\n".join(line.rstrip() for line in lines).rstrip("\n") + "\n"
