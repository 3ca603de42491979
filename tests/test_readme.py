"""The README, executed: every `btacalc` command it shows runs, and every output it quotes is what the
command prints today.

- A ```console block holds `$ btacalc ...` lines, each followed by an excerpt of its output. The command
  runs (in-process, from a scratch folder that sees the repository's data as a clone does) and every
  excerpt line must appear in its output, in order (runs of spaces are compared as one; a line `...`
  skips any number of lines). A quoted number that drifts fails here.
- Every `btacalc ...` command written inline (the command table, the prose) runs too: it must not be
  refused as bad input (exit 2) or crash; exit 1 (a plan that does not fit) is allowed only when the
  README says so next to it ("does not fit").
- ```bash blocks hold the install and test commands; `../shared/checks/fresh-install.sh` runs those
  on a fresh machine, so here they are only checked to name the commands `.ci/run` runs.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.loading import load_script

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\s*$")
INLINE = re.compile(r"`(btacalc [^`]+)`")
# Paths an example may read, as a clone has them (linked into the scratch folder the commands run in).
DATA = ("btacalc", "tests", "formulas", "hardware_profiles", "examples")


def _lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def _blocks() -> list[tuple[str, int, list[str]]]:
    """(language, first line number, lines) of every fenced block."""
    out, lang, start, body = [], None, 0, []
    for i, line in enumerate(_lines(), 1):
        m = FENCE.match(line)
        if m and lang is None:
            lang, start, body = m.group(1) or "text", i, []
        elif line.strip() == "```" and lang is not None:
            out.append((lang, start, body))
            lang = None
        elif lang is not None:
            body.append(line)
    return out


def _console_cases() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for every `$ ` line of the console blocks."""
    cases: list[tuple[str, list[str]]] = []
    for lang, _, body in _blocks():
        if lang != "console":
            continue
        command: str | None = None
        for line in body:
            if line.startswith("$ "):
                command = line[2:].strip()
                cases.append((command, []))
            elif command is not None and cases[-1][1] is not None and command.endswith("\\"):
                command = command[:-1] + " " + line.strip()
                cases[-1] = (command, [])
            elif command is not None:
                cases[-1][1].append(line)
    return cases


def _bash_cases() -> list[tuple[str, bool]]:
    """(command, may not fit) for every `btacalc ...` line of the ```bash blocks (a trailing `# ...`
    comment saying "exit 1" allows a plan that does not fit)."""
    out = []
    for lang, _, body in _blocks():
        if lang != "bash":
            continue
        for line in body:
            if line.startswith("btacalc "):
                cmd, _, comment = line.partition("  #")
                out.append((cmd.strip(), "exit 1" in comment))
    return out


def _inline_cases() -> list[tuple[str, bool]]:
    """(command, may not fit) for every inline `btacalc ...` outside fenced blocks, and the `btacalc` lines
    of the ```bash blocks."""
    out, fenced = _bash_cases(), False
    for line in _lines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for cmd in INLINE.findall(line):
            if any(ch in cmd for ch in "|<>") or "..." in cmd:
                continue  # a pattern (<name>, ...) or a pipeline: the console blocks run the real ones
            out.append((cmd, "does not fit" in line))
    return sorted(set(out))


def _squash(line: str) -> str:
    return " ".join(line.split())


@pytest.fixture
def clone_dir(tmp_path, monkeypatch):
    """A scratch folder that sees the repository's data folders as a clone does."""
    for name in DATA:
        if (ROOT / name).exists():
            (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "docs").mkdir()  # examples draw their plots there; the repository's pictures stay as they are
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


def _run(cli, command: str) -> tuple[int, str, str]:
    args = shlex.split(command)
    assert args[0] == "btacalc", command
    return cli(*args[1:])


def _examples_tool():
    """tools/readme_examples.py, which writes the console blocks: the test runs commands as it does."""
    return load_script("tools/readme_examples.py")


@pytest.mark.parametrize("command,expected", _console_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_console_block_output_is_current(clone_dir, command, expected):
    """Each README line of the block appears in today's output, in order (`...` and blank lines skipped; runs of
    spaces compared as one): the excerpt rule tools/readme_examples.py keeps hand-written excerpts by."""
    tool = _examples_tool()
    missing = tool.excerpt_missing(expected, tool.run(command, clone_dir))
    assert missing is None, f"{command}: README line not in today's output: {missing!r}"


# Commands that take minutes (the whole family scan with a layout search per device and size; the
# leave-one-family-out refits): they run in benchmarks/ and where their output is made (tools/accuracy.py),
# and their code paths are tested on small inputs (test_cli, test_collectives); here they would be most of CI.
SLOW = (("crossover", "--search"), ("--cross-validate",))


@pytest.mark.parametrize("command,may_not_fit", _inline_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_inline_command_runs(cli, clone_dir, command, may_not_fit, monkeypatch):
    if "--show-completion" in command.split():
        # typer takes the shell from the process tree (shellingham), which a test run outside a shell (a job
        # started in the background, an IDE) does not have; with detection off, the shell named is used
        monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    if "--install-completion" in command.split():
        pytest.skip("it would write into this user's shell start-up file; --show-completion is run instead")
    if any(all(word in command.split() for word in slow) for slow in SLOW):
        pytest.skip("minutes long: run by benchmarks/ and tools/accuracy.py (SLOW)")
    if "--plot" in command.split():
        pytest.importorskip("matplotlib", reason="--plot needs the plot extra (pip install '.[plot]')")
    if command.split()[1] == "measure":
        pytest.importorskip("torch", reason="btacalc measure needs the measure extra (pip install '.[measure]')")
    if "--calibrate" in command.split():
        pytest.importorskip("scipy", reason="--calibrate needs the calibrate extra (pip install '.[calibrate]')")
    code, out, err = _run(cli, command)
    allowed = (0, 1) if may_not_fit else (0,)
    assert code in allowed, f"{command}: exit {code}: {err.strip()[:300]}"


def test_readme_has_console_examples():
    """The executed examples exist (a README without them would pass the tests above vacuously)."""
    assert len(_console_cases()) >= 3
    assert len(_inline_cases()) >= 20


def test_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    bash = [line for lang, _, body in _blocks() if lang == "bash" for line in body]
    tests = [line[line.index("python -m pytest"):].strip() for line in bash if "python -m pytest" in line]
    assert tests, "the README shows no test command"
    assert any(t in ci for t in tests), "the README's test command is not the one .ci/run runs"


def _defaults_row(flag: str) -> str:
    """The README's "Defaults and why" row of `flag` (its default and why columns)."""
    rows = [line for line in _lines() if line.startswith(f"| `{flag}`")]
    assert len(rows) == 1, (flag, rows)
    return rows[0]


@pytest.mark.parametrize("hw,family", [(["--hw", "wse3"], "WSE"), (["--hw", "h100", "--devices", "8"], "GPU")])
def test_readme_defaults_are_the_tools(cli, hw, family):
    """Issue 25: the README said selective recomputation is the GPU (Megatron) default while plans ran with
    none, and `--grad-accum` "else 1" while a GPU plan without a batch takes 4M tokens in M micro-batches.
    Each row must name what `plan --json` reports as its default on that family."""
    import json

    from btacalc.config.execution import DEFAULT_TOKENS_PER_STEP

    code, out, _ = cli("plan", *hw, "--json")
    inputs = json.loads(out)["inputs"]
    assert code in (0, 1) and {"recompute", "loss"} <= set(inputs["defaults"])
    assert f"{inputs['recompute']} on {family}" in _defaults_row("--recompute")
    assert f"{inputs['loss']} on {family}" in _defaults_row("--loss")
    assert "selective is Megatron-LM's default" not in _defaults_row("--recompute").lower()
    row = _defaults_row("--tokens-per-step")
    assert f"{DEFAULT_TOKENS_PER_STEP:,}" in row and "--global-batch" in row
    if family == "GPU":
        assert f"{DEFAULT_TOKENS_PER_STEP:,}" in inputs["defaults"]["global_batch"]


def test_example_paths_are_inside_a_clone():
    """Issue 25: `validate --measured ../shared/...` failed from a clone. Every file an example command reads
    (an argument naming an existing-looking path: a `/`, or a .json/.toml name) lies inside the repository,
    and those the examples read (not write) exist in it."""
    writes = {"--output", "--csv", "--plot", "--emit-file", "-o"}
    read = []
    for command, _ in _inline_cases():
        words = shlex.split(command)
        for flag, word in zip(words, words[1:]):
            if flag in writes or word.startswith("-") or not ("/" in word or word.endswith((".json", ".toml"))):
                continue
            assert not word.startswith(("/", "..", "~")), (command, word)
            assert (ROOT / word).exists(), (command, word)
            read.append(word)
    assert "btacalc/data/measured_runs.json" in read  # the run file validate's example reads


def test_quick_start_parameter_counts_are_the_plans(cli):
    """The quick start's prose quotes the parameter counts (`30.53 B total, ... 3.353 B active`): each equals
    `plan --json`'s count in billions at the precision it is printed with."""
    import json

    text = " ".join(line.strip() for line in _lines())
    start = text.index("- **parameters**")
    quoted = re.findall(r"([\d.]+) B (total|non-embedding|active)", text[start:start + 400])
    assert {kind for _, kind in quoted} == {"total", "non-embedding", "active"}, quoted
    _, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--json")
    model = json.loads(out)["model"]
    key = {"total": "params_total", "non-embedding": "params_non_embedding", "active": "params_active"}
    for number, kind in quoted:
        decimals = len(number.split(".")[1]) if "." in number else 0
        assert number == f"{model[key[kind]] / 1e9:.{decimals}f}", (kind, number, model[key[kind]])


def test_readme_hostile_case_count_is_the_tests():
    """The README quotes how many hostile-input cases `test_hostile.py` holds; the number is its CLASSES count."""
    module = load_script("tests/test_hostile.py", "hostile_counts")
    text = " ".join(line.strip() for line in _lines())
    (quoted,) = re.findall(r"\(`test_hostile\.py`, ([\d,]+) cases", text)
    assert int(quoted.replace(",", "")) == sum(module.CLASSES.values())


def test_readme_bad_input_case_count_is_the_tests():
    """review8: the README quotes how many cases `test_bad_input.py` holds (its hostile count was checked, this one
    was not); the number is the length of its CASES table, one test each."""
    module = load_script("tests/test_bad_input.py", "bad_input_cases")
    text = " ".join(line.strip() for line in _lines())
    (quoted,) = re.findall(r"\(`test_bad_input\.py`: ([\d,]+) cases", text)
    assert int(quoted.replace(",", "")) == len(module.CASES)


def test_the_verdict_quotes_are_what_plan_prints(cli, monkeypatch):
    """The "A plan that does not fit" bullet quotes what three plans print (it quoted "89.17 GB of 72.00 GB
    usable", which no command printed): each quoted phrase after a `plan ...` command is in that command's
    output (a line of the table at 200 columns, or the JSON's explanation and suggestions)."""
    import json

    monkeypatch.setenv("COLUMNS", "200")
    text = " ".join(line.strip() for line in _lines())
    start = text.index("- **A plan that does not fit**")
    bullet = text[start:text.index(" - **", start + 1)]
    parts = re.split(r"`(plan [^`]+)`", bullet)
    checked = 0
    for command, after in zip(parts[1::2], parts[2::2]):
        args = shlex.split(command)[1:]
        _, table, _ = cli("plan", *args)
        _, out, _ = cli("plan", *args, "--json")
        doc = json.loads(out)
        said = [_squash(line.strip("│ ")) for line in table.splitlines()]
        said += [_squash(doc["plan"]["explanation"]), *map(_squash, doc["suggestions"])]
        for quote in re.findall(r'"([^"]+)"', after):
            assert any(_squash(quote) in line for line in said), (command, quote)
            checked += 1
    assert checked >= 5


def test_the_examples_tool_keeps_a_hand_written_excerpt_while_its_lines_still_appear():
    """A console block with `...` between its lines is an excerpt (semantics22's launch: the numerics flags, not the
    first lines): tools/readme_examples.py keeps it while its lines appear in order, as this file's block test
    reads it, and names the first line that does not."""
    tool = _examples_tool()
    got = ["torchrun a \\", "    --num-layers 48 \\", "    --hidden-size  2048 \\", "    --rotary-base 1000000 \\"]
    assert tool.excerpt_missing(["torchrun a \\", "...", "    --rotary-base 1000000 \\", "..."], got) is None
    assert tool.excerpt_missing(["...", "--hidden-size 2048", "...", "--num-layers 48"], got) == "--num-layers 48"
    assert tool.excerpt_missing(["--norm-epsilon 1e-06"], got) == "--norm-epsilon 1e-06"
