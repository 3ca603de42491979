"""Help never cuts a flag's name or a word at 80 or 40 columns (issue 25: `--max-global-ba…`)."""

from __future__ import annotations

import re

import pytest
import typer

from btacalc.cli.app import app
from btacalc.cli.helpwidth import cuts, stacked_help


def _commands():
    stack = [([], typer.main.get_command(app))]
    while stack:
        path, cmd = stack.pop()
        yield path, cmd
        stack += [(path + [name], sub) for name, sub in getattr(cmd, "commands", {}).items()]


COMMANDS = sorted(_commands(), key=lambda pc: pc[0])


def _whole(name: str, text: str) -> bool:
    """`name` appears with nothing glued to either side (`--tp` is not `--tp-comm-overlap`)."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


@pytest.mark.parametrize("width", [80, 40])
@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) or "btacalc" for p, _ in COMMANDS])
def test_help_keeps_every_name_and_word_whole(cli, monkeypatch, width, path, cmd):
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, _ = cli(*path, "--help")
    assert code == 0 and "Usage: btacalc" in out
    assert not cuts(out, cmd), out
    for param in cmd.params:
        if getattr(param, "hidden", False):
            continue
        for name in [*param.opts, *param.secondary_opts]:
            if name.startswith("-"):
                assert _whole(name, out), (name, out)
    for name in getattr(cmd, "commands", {}):
        assert _whole(name, out), (name, out)
    for line in out.splitlines():  # longer than the terminal only where one word is longer than a line
        assert len(line) <= width or len(line.split()) == 1 or not line.startswith(" " * 6), line


def test_stacked_help_wraps_at_spaces_only():
    """The stacked layout itself: every option line at most the width unless it is one word, each word of
    the option's help kept (in order) exactly as the help record gives it."""
    import click

    group = typer.main.get_command(app)
    cmd = group.commands["plan"]
    ctx = click.Context(cmd, info_name="plan", parent=click.Context(group, info_name="btacalc"))
    text = stacked_help(cmd, ctx, 40)
    words = text.split()
    for param in cmd.get_params(ctx):
        names, help_text = param.get_help_record(ctx)
        expected = names.split() + help_text.replace("\\[", "[").split()
        next(i for i in range(len(words)) if words[i:i + len(expected)] == expected)
    assert all(len(line) <= 40 or len(line.split()) == 1 for line in text.splitlines())


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) or "btacalc" for p, _ in COMMANDS])
def test_each_option_states_its_default_once(path, cmd):
    """review5: four options wrote "[default: 0]." in their help and typer added its own "[default: 0]" below it
    (--cpu-offloading-num-layers, --bf16-layers-at-start/-end; --deepep's "[default: off ...]" and
    "[default: no-deepep]"). An option's help as shown (its text and typer's default note) says it once."""
    ctx = typer.main.get_command(app).make_context("btacalc", [], resilient_parsing=True)
    for param in cmd.params:
        record = param.get_help_record(ctx)
        if record is not None:
            assert record[1].count("[default:") <= 1, (param.name, record[1])


def test_validates_example_run_file_is_in_a_clone():
    """review5: `validate --help`'s example read `--measured ../shared/reference/measured-runs.json`, a path outside
    a clone (the README had been corrected, the help had not): every --measured in its examples is a shipped file."""
    from pathlib import Path

    import btacalc.cli.validate as validate_cli

    root = Path(__file__).resolve().parents[1]
    source = Path(validate_cli.__file__).read_text()
    paths = re.findall(r"--measured (\S+)", source)
    assert paths and all((root / p).is_file() for p in paths), paths
