"""Fast paths of the speed3 round return exactly what the slow paths return (issue 25, item 6)."""

from __future__ import annotations

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
