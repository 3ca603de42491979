"""hostile19: the standard-output rule in one place, the round trip of the options the command line adds beside an
import, signals at start-up, and a hostile campaign on sweep / compare / cluster / whatif / validate --measured /
--plot and the environment (docs/story.md "hostile19")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import btacalc
from btacalc.paths import data_dir

# the subprocesses run the btacalc this test imported (as test_hostile16 and 17 do)
ENV = {**os.environ, "PYTHONPATH": str(Path(btacalc.__file__).resolve().parents[1])}


def _run(args: list[str], cwd: Path, stdout_path: Path | None = None, **kw) -> subprocess.CompletedProcess:
    """`python -m btacalc ARGS [>> stdout_path]` in `cwd`."""
    env = {**ENV, **kw.pop("env", {})}
    if stdout_path is None:
        return subprocess.run([sys.executable, "-m", "btacalc", *args], capture_output=True, text=True, cwd=cwd,
                              timeout=120, env=env, stdin=subprocess.DEVNULL, **kw)
    with open(stdout_path, "ab") as out:
        return subprocess.run([sys.executable, "-m", "btacalc", *args], stdout=out, stderr=subprocess.PIPE,
                              text=True, cwd=cwd, timeout=120, env=env, stdin=subprocess.DEVNULL, **kw)


def _refusal(stderr: str) -> str:
    """The part of a one-line stdout-onto-input refusal after the file's name."""
    line = stderr.strip()
    assert len(line.splitlines()) == 1, stderr
    return line[line.index("standard output"):]


def test_standard_output_onto_an_input_is_one_rule_with_one_message(tmp_path):
    """review of hostile16: the rule was written twice, in two wordings ("redirected onto this file (a shell's > or
    >> names it)" when an input was read, "redirected (a shell's > or >>) onto an input of this command (...)" for a
    declared input or a shipped file). Both now come from `paths.stdout_onto`."""
    run = tmp_path / "run.toml"
    run.write_text('model = "llama-3-8b"\nhw = "h100"\ndevices = 8\n')
    read = _run(["plan", "--config", "run.toml"], tmp_path, run)  # read_input's check
    shipped = data_dir("hardware_profiles") / "wse3.toml"
    before = shipped.read_bytes()
    try:
        own = _run(["plan", "--hw", "wse3"], tmp_path, shipped)  # Outputs.check_inputs' check (a shipped file)
    finally:
        if shipped.read_bytes() != before:
            shipped.write_bytes(before)
    assert read.returncode == own.returncode == 2, (read.stderr, own.stderr)
    assert "one of btacalc's own files" in own.stderr and "--config 'run.toml'" in read.stderr
    assert _refusal(read.stderr) == _refusal(own.stderr)


READER = {"megatron": "--from-megatron", "bridge": "--from-bridge"}
PLAN = ("plan", "--model", "mpt-7b", "--hw", "h100", "--devices", "8")


def _numbers(cli, *args: str) -> dict:
    code, out, err = cli(*args, "--json")
    assert code in (0, 1), err
    r = json.loads(out)
    return {"causal": r["inputs"]["causal"], "loss": r["inputs"]["loss"], "flops": r["flops_per_step"],
            "memory": r["memory_bytes"], "fits": r["plan"]["fits"],
            "shape": (r["plan"]["global_batch"], r["plan"]["micro_batches"], r["plan"]["tile_batch"]),
            "throughput": {k: v for k, v in r["throughput"].items() if not k.endswith("_g1")}}


@pytest.mark.parametrize("emit", ["megatron", "bridge"])
@pytest.mark.parametrize("options", [("--causal",), ("--full-scores",), ("--loss", "stored"), ("--loss", "fused"),
                                     ("--loss", "te_fused"), ("--objective", "density"),
                                     ("--causal", "--loss", "fused", "--objective", "density")])
def test_plan_emit_read_back_gives_the_same_numbers(cli, tmp_path, emit, options):
    """review of hostile18 (what IMPORT_KEEPS lets the command line add beside an import): `--causal` and
    `--loss stored|fused` were left out of the emitted launch, so the launch read back counted the full s² scores and
    Megatron's vocab-parallel cross-entropy (other FLOPs, MFU, memory, step time); they are `# btacalc option:` lines
    now. `--objective` chooses the batch shape, which the launch fixes: the numbers match without a line."""
    before = _numbers(cli, *PLAN, *options)
    code, out, err = cli(*PLAN, *options, "--emit", emit)
    if emit == "megatron" and "te_fused" in options:  # review35: Megatron-LM refuses the TE impl (test_cefuse.py)
        assert code == 2 and out == "", err
        return
    assert code in (0, 1), err
    path = tmp_path / "run.txt"
    path.write_text(out)
    after = _numbers(cli, "plan", "--hw", "h100", "--devices", "8", READER[emit], str(path))
    assert after == before


@pytest.mark.parametrize("emit", ["megatron", "bridge"])
def test_the_command_line_causal_and_loss_win_over_the_file_only_when_given(cli, tmp_path, emit):
    """Beside an import the command line's --causal / --full-scores replaced the file's even when not given (its
    default, full scores, was passed as if given), as --accounting's did before hostile18."""
    code, out, err = cli(*PLAN, "--causal", "--loss", "stored", "--emit", emit)
    path = tmp_path / "run.txt"
    path.write_text(out)
    read = ("plan", "--hw", "h100", "--devices", "8", READER[emit], str(path))
    kept = _numbers(cli, *read)
    assert (kept["causal"], kept["loss"]) == (True, "stored")
    given = _numbers(cli, *read, "--full-scores", "--loss", "fused")
    assert (given["causal"], given["loss"]) == (False, "fused")


@pytest.mark.parametrize("tail, says", [
    ("\n# btacalc option: --loss vocab_parallel (x)\n", "--loss takes one of fused, stored, got 'vocab_parallel'"),
    ("\n# btacalc option: --causal 1\n", "--causal is a switch and takes no value"),
    # review35: Megatron-LM refuses the te impl itself now (arguments.py L1698), before the loss comment is read
    (" \\\n    --cross-entropy-loss-fusion --cross-entropy-fusion-impl te\n# btacalc option: --loss stored\n",
     "Megatron-LM would refuse this launch: --cross-entropy-fusion-impl te"),
    (" \\\n    --cross-entropy-loss-fusion\n# btacalc option: --loss fused\n",
     "--loss fused beside Megatron's compiled (native) fused cross-entropy (native_fused)"),
])
def test_a_loss_or_causal_comment_btacalc_would_not_write_is_refused(cli, tmp_path, tail, says):
    code, out, err = cli(*PLAN, "--emit", "megatron")
    path = tmp_path / "run.sh"
    path.write_text(out.rstrip("\n") + tail)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


def _started(tmp_path: Path, name: str, body: str) -> subprocess.CompletedProcess:
    """A script called `name` (the console script is called btacalc) that imports btacalc and runs `body`, with the
    interpreter's SIGINT handling as an interactive shell leaves it: SIGINT and SIGTERM at their defaults in the child,
    also when this test runs as a background job of a non-interactive shell (which starts it with SIGINT ignored,
    POSIX sh 'Asynchronous Lists', so Python would not install its KeyboardInterrupt handler)."""
    script = tmp_path / name
    script.write_text("import os, signal, sys, time\n" + body)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=60, preexec_fn=_default_stopping_signals)


def _default_stopping_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_the_package_imports_is_one_line(tmp_path, signum):
    """Ctrl-C while `btacalc/__init__.py` imported (typing, collections: before `btacalc.cli` handled signals)
    printed a KeyboardInterrupt traceback. The command's process now handles the stopping signals from the
    package's first line: here the signal arrives after `import btacalc`, before `btacalc.cli` is imported."""
    done = _started(tmp_path, "btacalc", f"import btacalc\nos.kill(os.getpid(), {int(signum)})\ntime.sleep(30)\n"
                    "print('not stopped')\n")
    assert done.returncode == 128 + signum, done.stderr
    assert done.stderr.splitlines() == [f"btacalc: stopped by {signum.name}; nothing written"] and done.stdout == ""


def test_the_package_leaves_signals_alone_as_a_library_and_after_the_command_starts(tmp_path):
    """Imported by another program btacalc does not touch its handlers; in the command, `btacalc.cli`'s imports
    give back the handlers there were before the package's first line."""
    check = ("print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
             "signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)\n")
    library = _started(tmp_path, "lib.py", "import btacalc\n" + check + "import btacalc.cli\n" + check)
    assert library.stdout.split() == ["True", "True", "True", "True"], library.stderr
    command = _started(tmp_path, "btacalc", "import btacalc.cli\n" + check)
    assert command.stdout.split() == ["True", "True"], command.stderr
    stopped = _started(tmp_path, "lib.py", "import btacalc\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)\n")
    assert "KeyboardInterrupt" in stopped.stderr  # the program's own Ctrl-C, as without btacalc


@pytest.mark.parametrize("args", [["models", "list"], ["hw", "show", "h100"], ["formulas"], ["--version"],
                                  ["plan", "--help"]], ids=lambda a: " ".join(a))
def test_standard_output_onto_btacalc_own_file_is_refused_by_every_command(tmp_path, args):
    """hostile16 refused `btacalc plan --hw wse3 >> hardware_profiles/wse3.toml` in `Outputs.check_inputs`, which only
    the commands writing through `Outputs` reach: `btacalc models list >> btacalc/cli/app.py` (and `hw`,
    `formulas`, `--version`, `--help`) appended to btacalc's own files, exit 0. Now `main` asks first."""
    shipped = data_dir("hardware_profiles") / "wse3.toml"
    before = shipped.read_bytes()
    try:
        done = _run(args, tmp_path, shipped)
        after = shipped.read_bytes()
    finally:  # a failing run must not leave the shipped profile broken for every later test
        if shipped.read_bytes() != before:
            shipped.write_bytes(before)
    assert done.returncode == 2 and "wse3.toml (one of btacalc's own files): standard output is redirected onto this " \
        "file" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and after == before


def test_models_show_names_its_argument_not_the_plan_option(cli, tmp_path):
    """`models show X` takes the model as an argument: its refusals say "model:", as `hw show` says "profile:", not
    "--model:", an option the command does not have (hostile19 left it)."""
    folder = tmp_path / "empty"
    folder.mkdir()
    for arg, why in (("no-such-model", "unknown model"), (str(folder), "is a folder without a config.json")):
        code, out, err = cli("models", "show", arg)
        assert code == 2 and out == "" and err.startswith("btacalc: error: model: ") and why in err
        assert "--model" not in err.splitlines()[0].split(why)[0]
