"""Fast paths of the speed3 round return exactly what the slow paths return (issue 25, item 6)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.markup import escape

from btacalc.cli.options import help_text

_MARKUP = st.text(alphabet="[]\\/#@ab Z:=.-", max_size=40)


@settings(max_examples=500, deadline=None)
@given(_MARKUP)
def test_help_text_escapes_exactly_as_rich(text: str) -> None:
    assert help_text(text) == escape(text)


def test_help_text_escapes_the_shipped_help_as_rich() -> None:
    """Every help text of every command, escaped without rich, equals rich's escape of it."""
    import typer.main

    from btacalc.cli.app import app

    raw = []
    group = typer.main.get_command(app)
    for command in group.commands.values():  # type: ignore[attr-defined]
        for param in command.params:
            raw.append(getattr(param, "help", None) or "")
    assert any("\\[" in text for text in raw)  # the help does carry escaped "[default: ...]" tags
    for text in ["[default: 1]", "a \\[b]", "x\\", "x\\\\", "[/]", "[#fff]", "[@click]", "[ab[cd]", "[Z]", "[a"]:
        assert help_text(text) == escape(text), text


def test_one_command_app_builds_the_same_command_as_the_whole_app() -> None:
    """`btacalc plan ...` builds only `plan`; every command so built equals the whole app's (options, types,
    defaults, help), and anything but a command name first takes the whole app."""
    import typer.main

    from btacalc.cli import app as cli

    whole = typer.main.get_command(cli.app)
    names = list(whole.commands)  # type: ignore[attr-defined]
    singles = [n for n in names if not hasattr(whole.commands[n], "commands")]  # type: ignore[attr-defined]
    assert "plan" in singles and "hw" in names and "hw" not in singles
    for name in singles:
        narrowed = typer.main.get_command(cli._invoked([name, "--json"]))
        assert list(narrowed.commands) == [name]  # type: ignore[attr-defined]
        built, full = narrowed.commands[name], whole.commands[name]  # type: ignore[attr-defined]
        assert built.name == full.name and _params(built) == _params(full)
    for argv in ([], ["--help"], ["--version"], ["hw", "list"], ["plann"], ["--json", "plan"]):
        assert cli._invoked(argv) is cli.app


def _params(command: object) -> list[dict[str, object]]:
    """Every attribute of every option but the callbacks typer wraps anew on each build (compared by name)."""
    rows = []
    for param in command.params:  # type: ignore[attr-defined]
        row = {k: (getattr(v, "__name__", None) if callable(v) else re.sub(r" at 0x[0-9a-f]+", "", repr(v))) for k, v in vars(param).items()}
        rows.append(row)
    return rows
