"""Terminals and locales: ASCII when the stream cannot encode Unicode, tables that keep every name
and number whole at any width, help that shows every default, --version and -h, CSV booleans."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from btacalc.cli.app import app
from btacalc.cli.console import ascii_fallback

ROOT = Path(__file__).resolve().parents[1]
ASCII_COMMANDS = [["plan"], ["hw", "list"], ["models", "list"], ["validate"], ["formulas"], ["hw", "show", "wse3"],
                  ["compare", "--hw", "wse3"], ["formulas", "--model", "qwen3-30b-a3b", "--phase", "experts"]]


class _AsciiStream(io.TextIOWrapper):
    def __init__(self, errors: str = "strict"):
        super().__init__(io.BytesIO(), encoding="ascii", errors=errors)

    def text(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("ascii")  # type: ignore[attr-defined]  # a BytesIO


@pytest.mark.parametrize("args, errors", [(a, "strict") for a in ASCII_COMMANDS]  # PYTHONIOENCODING=ascii
                         + [(["plan"], "surrogateescape")], ids=str)  # a C locale's stdout
def test_an_ascii_stream_gets_ascii(monkeypatch, capsys, args, errors):
    from btacalc.cli import main

    stream = _AsciiStream(errors)
    monkeypatch.setattr(sys, "stdout", stream)
    with pytest.raises(SystemExit) as exc:
        main(args)
    text = stream.text()
    assert exc.value.code in (0, 1) and capsys.readouterr().err == ""
    assert text.strip() and "Traceback" not in text


def test_ascii_standins_read_well():
    stream = _AsciiStream()
    ascii_fallback(stream)
    stream.write("G·b, s², ±5, 1–2 — … • ≤ µs ✓\n")
    assert stream.text() == "G*b, s^2, +/-5, 1-2 - ... * <= us ?\n"


def test_a_utf8_stream_is_left_alone():
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    ascii_fallback(stream)
    assert stream.errors == "strict"


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii", "COLUMNS": "40"},
                                 {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}])
def test_a_real_ascii_terminal(env):
    """A real process: ASCII stand-ins, and (COLUMNS=40 when piped) tables split, nothing cut."""
    full = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LANG", "PYTHONIOENCODING", "PYTHONUTF8", "COLUMNS")}
    res = subprocess.run([sys.executable, "-m", "btacalc", "plan"], env={**full, **env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr
    text = res.stdout.decode("ascii")
    assert "G*b" in text and "+----" in text and "attn_scores" in text and "attn_softmax" in text
    width = int(env.get("COLUMNS", 132))
    assert max(len(line) for line in text.splitlines()) <= width and "..." not in text.replace("...)", "")


def _render(renderable, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]  # a StringIO


@pytest.fixture(scope="module")
def report():
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import resolve_model
    from btacalc.planning.plan import make_plan

    return make_plan(resolve_model("qwen3-30b-a3b"), resolve_hardware("b200"), ExecutionRequest(devices=8))


@pytest.mark.parametrize("width", [30, 40, 60, 80, 100, 132])
def test_plan_tables_keep_every_name_and_number_whole(report, width):
    from btacalc.output.tables import plan_renderable, si

    text = _render(plan_renderable(report), width)
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines())
    for phase in report.phases:  # each name and each of its numbers appears whole
        assert re.search(rf"\b{phase.name}\b", text), phase.name
        for value in (phase.transient_bytes, phase.bytes_moved):
            assert si(value, "B") in text


@pytest.mark.parametrize("width", [40, 80])
@pytest.mark.parametrize("command", [["compare", "--hw", "wse3,b200"], ["crossover", "--hw", "wse3,b200", "--hidden",
                                                                         "256,2048"],
                                     ["hw", "show", "b200"], ["hw", "list"], ["models", "list"], ["validate"],
                                     ["plan", "--hw", "h100", "--devices", "64", "--search"],
                                     ["whatif", "--hw", "wse3", "--target", "tokens_per_s=50000", "--solve-for",
                                      "sram_bytes"],
                                     ["plan", "--hw", "wse2", "--devices", "4", "--global-batch", "96",
                                      "--sensitivity", "10"]])
def test_every_table_fits_the_terminal_without_cutting(monkeypatch, capsys, width, command):
    from btacalc.cli import console, main

    monkeypatch.setattr(console.out.get(), "_width", width)
    with pytest.raises(SystemExit) as exc:
        main(command)
    text = capsys.readouterr().out
    assert exc.value.code in (0, 1)
    assert "…" not in text and all(len(line) <= width for line in text.splitlines()), text


def _commands():
    import typer

    group = typer.main.get_command(app)
    stack = [([], group)]
    while stack:
        path, cmd = stack.pop()
        subs = getattr(cmd, "commands", None)
        if subs:
            stack += [(path + [name], sub) for name, sub in subs.items()]
        else:
            yield path, cmd


COMMAND_PATHS = sorted(p for p, _ in _commands())


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=" ".join)
def test_help_shows_every_default_and_bracket(cli, path):
    """Rich would read '[default: ...]' as markup and drop it: every bracketed text shows."""
    code, out, _ = cli(*path, "--help")
    assert code == 0
    flat = re.sub(r"[\s│╭╮╰╯─]", "", out)
    cmd = next(c for p, c in _commands() if p == path)
    for param in cmd.params:
        for bracketed in re.findall(r"\[[^\]]*\]", param.help or ""):
            assert re.sub(r"\s", "", bracketed.replace("\\[", "[")) in flat, (param.name, bracketed)


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_short_help_everywhere(cli, flag):
    for path in COMMAND_PATHS:
        code, out, _ = cli(*path, flag)
        assert code == 0 and "Usage: btacalc" in out, path


def test_version(cli):
    from btacalc import __version__

    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"btacalc {__version__}"


def test_shell_completion_is_offered(cli, monkeypatch):
    # the shell as named, not detected from the process tree (absent when the tests run outside a shell)
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    code, out, _ = cli("--show-completion", "bash")
    assert code == 0 and "_BTACALC_COMPLETE" in out


@pytest.mark.parametrize("args, column", [(["compare", "--hw", "wse3,b200"], "fits"),
                                          (["sweep", "--hw", "wse2", "--vary", "experts=16,64"], "fits")])
def test_csv_booleans_are_true_false(cli, tmp_path, args, column):
    path = tmp_path / "out.csv"
    code, _, err = cli(*args, "--csv", str(path))
    assert code == 0, err
    rows = list(csv.DictReader(path.open()))
    assert rows and {r[column] for r in rows} <= {"true", "false"}
    assert "True" not in path.read_text() and "False" not in path.read_text()


def test_csv_cells_by_hand():
    from btacalc.output.csvfiles import csv_text

    assert csv_text(["a", "b", "c"], [{"a": True, "b": False, "c": None}]) == "a,b,c\ntrue,false,\n"


def test_json_stays_json_under_ascii(monkeypatch):
    from btacalc.cli import main

    stream = _AsciiStream()
    monkeypatch.setattr(sys, "stdout", stream)
    with pytest.raises(SystemExit):
        main(["plan", "--json"])
    assert json.loads(stream.text())["plan"]["tokens_per_expert"] > 0


MARKUP_NAME = "[/bold]x[red]"  # rich would read this as markup (a closing tag without an opening one)


@pytest.mark.parametrize("args", [
    ["plan", "--hw", "wse3", "--name", MARKUP_NAME],
    ["plan", "--hw", "wse3", "--name", MARKUP_NAME, "--sensitivity", "10"],
    ["compare", "--hw", "wse3,{profile}", "--name", MARKUP_NAME],
    ["sweep", "--hw", "wse3", "--name", MARKUP_NAME, "--vary", "experts=16,32"],
    ["crossover", "--hw", "{profile}", "--hidden", "512"],
    ["plan", "--hw", "{profile}", "--devices", "8", "--search"],
    ["hw", "show", "{profile}"],
    ["hw", "check", "{profile}"],
])
def test_names_are_printed_as_given_never_read_as_markup(cli, tmp_path, args):
    """A model named by --name or a file, or a profile's name and display name, is text: printed as it
    is, whatever brackets it holds."""
    text = (Path(__file__).parents[1] / "hardware_profiles" / "b200.toml").read_text()
    text = re.sub(r'^name = .*$', f'name = "{MARKUP_NAME}"', text, count=1, flags=re.M)
    text = re.sub(r'^display_name = .*$', f'display_name = "{MARKUP_NAME} B200"', text, count=1, flags=re.M)
    profile = tmp_path / "odd.toml"
    profile.write_text(text)
    code, out, err = cli(*(a.replace("{profile}", str(profile)) for a in args))
    assert code in (0, 1) and not err.startswith("btacalc: internal error"), err
    assert MARKUP_NAME in out


@pytest.mark.parametrize("columns, width", [("\u00b2", 132), ("\u0663\u0660", 132), ("10", 40), ("99999999", 1000)])
def test_odd_columns_settings_are_read_as_numbers_or_ignored(monkeypatch, columns, width):
    """COLUMNS that Python calls digits but that are not ASCII numbers is ignored (as if unset: 132 when
    piped); narrower than 40 is laid out at 40; wider than 1,000 at 1,000."""
    from btacalc.cli import console

    monkeypatch.setenv("COLUMNS", columns)
    console.sanitize_environment()
    assert console._width() == width


def test_a_closed_standard_output_is_a_one_line_error(tmp_path):
    """`btacalc plan >&-`: Python starts with no sys.stdout; writing the plan fails as writing to a closed
    descriptor does, in one line, exit 2, and nothing else is written."""
    res = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--json", "--output", str(tmp_path / "p.json")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, close_fds=True,
                         preexec_fn=lambda: os.close(1))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "standard output is closed" in res.stderr
    assert not list(tmp_path.iterdir())


# Issue 25 (Build 4): a table longer than the terminal is cut with a count of what was left out; a pipe
# gets everything. Each command below prints one table (taller than 20 lines) and nothing else.
# (`hw list` was one: freshuser20 made it one line per profile, 19 lines for 11 profiles)
LONG_TABLES = [["models", "list"], ["sweep", "--hw", "wse3", "--vary", "seq=256:65536:256"],
               ["compare", "--hw", "b200,h100", "--devices", "8,16,32,64,128,256,512,1024"]]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _run_on(cli, monkeypatch, args, lines):
    """(exit code, stdout without colour codes) with standard output a terminal of 132 x `lines`, or a
    pipe (`lines` None), the console made afresh for it."""
    from btacalc.cli import console

    monkeypatch.setenv("COLUMNS", "132")
    monkeypatch.setattr(console.out, "_console", None)
    with monkeypatch.context() as m:
        if lines is not None:
            m.setattr(sys.stdout, "isatty", lambda: True, raising=False)
            m.setattr(sys.stdout, "fileno", lambda: 1, raising=False)
            m.setattr(os, "get_terminal_size", lambda fd=1: os.terminal_size((132, lines)))
        code, out, _ = cli(*args)
        monkeypatch.setattr(console.out, "_console", None)
    return code, _ANSI.sub("", out)


@pytest.mark.parametrize("args", LONG_TABLES, ids=" ".join)
def test_a_table_taller_than_the_terminal_is_cut_with_a_count(cli, monkeypatch, args):
    """On a 20-line terminal the table takes 20 - CUT_FRAME_LINES (the count and the prompt) = 18 lines:
    its first 17 lines as a pipe gets them, then one line counting the other (pipe lines - 17); a pipe
    gets every line (and no count)."""
    from btacalc.output.fit import CUT_FRAME_LINES, CUT_NOTE

    code, piped = _run_on(cli, monkeypatch, args, None)
    full = piped.rstrip("\n").split("\n")
    assert code == 0 and len(full) > 20 and "more lines not shown" not in piped
    code, shown = _run_on(cli, monkeypatch, args, 20)
    lines = shown.rstrip("\n").split("\n")
    room = 20 - CUT_FRAME_LINES
    assert code == 0 and len(lines) == room
    assert [line.rstrip() for line in lines[:-1]] == [line.rstrip() for line in full[:room - 1]]
    assert lines[-1] == CUT_NOTE.format(left=len(full) - (room - 1))


def test_a_table_that_fits_the_terminal_is_not_cut(cli, monkeypatch):
    """A terminal taller than the table shows it whole, as a pipe does."""
    args = ["compare", "--hw", "b200,h100", "--devices", "8,16,32,64,128,256,512,1024"]
    code, piped = _run_on(cli, monkeypatch, args, None)
    code, shown = _run_on(cli, monkeypatch, args, len(piped.splitlines()) + 5)
    assert code == 0 and [s.rstrip() for s in shown.splitlines()] == [p.rstrip() for p in piped.splitlines()]


@pytest.mark.parametrize("args", [["validate"], ["formulas"]], ids=" ".join)
def test_every_long_table_of_a_listing_is_cut_on_a_terminal(cli, monkeypatch, args):
    """validate (several tables and prose) and formulas (a table per phase): on a terminal no table runs
    past the screen, each cut one counting what it left out; a pipe gets every line (1,000 and more)."""
    code, piped = _run_on(cli, monkeypatch, args, None)
    code2, shown = _run_on(cli, monkeypatch, args, 20)
    notes = [line for line in shown.splitlines() if "more lines not shown" in line]
    assert code == code2 and "more lines not shown" not in piped and notes
    left = sum(int(re.search(r"\.\.\. ([\d,]+) more", n).group(1).replace(",", "")) for n in notes)
    assert len(shown.splitlines()) - len(notes) + left == len(piped.splitlines())


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_a_real_terminal_gets_a_cut_table():
    """The same through a pseudo-terminal of 20 lines (a real isatty and terminal size): `models list` ends
    with the count."""
    from support import on_terminal

    code, shown = on_terminal(["models", "list"], 20, 132, limit_s=60)
    assert code == 0
    lines = _ANSI.sub("", shown).replace("\r", "").rstrip("\n").split("\n")
    assert len(lines) == 18 and "more lines not shown: pipe the output" in lines[-1]


def test_a_long_word_in_a_cell_is_measured_without_the_highlighter(monkeypatch):
    """review12: a cell is measured as rich's Table renders it, with its column's `highlight` (False by default:
    rich table.py Column.highlight). The fitting measured text cells with the console's repr highlighter instead,
    whose regular expressions take time quadratic in a long word: a run id of 100,000 characters held `validate`
    for 4 min 40 s. Measured now without the highlighter, the cell still needs its whole width."""
    from rich.highlighter import ReprHighlighter
    from rich.table import Table

    from btacalc.output.fit import fit

    calls = []
    monkeypatch.setattr(ReprHighlighter, "highlight", lambda self, text: calls.append(len(text.plain)))
    word = "x" * 100_000
    table = Table("run", "role")
    table.add_row(word, "fit")
    console = Console(file=io.StringIO(), width=120)
    console.print(fit(table))
    assert calls == []
    assert word in console.file.getvalue().replace("\n", "").replace("│", "").replace(" ", "")
