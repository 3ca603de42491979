"""hostile27: a campaign against the reliability rules (bad input is one line and exit 2; an interrupted command
leaves nothing behind; output never damages what was there), each defect it found as a test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT, started, wait_for_temp

PLAN = ["plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--ep", "8", "--global-batch", "64",
        "--seq", "4096"]


@pytest.mark.parametrize("factor, pad", [("1e-310", False), ("5e-324", True), ("0.001", False)])
def test_a_vanishing_capacity_factor_is_bad_input(cli, factor, pad):
    """A subnormal factor made every step time NaN behind numpy's overflow warnings, exit 0: below 0.01 Megatron's
    round-up to whole copies is most of each capacity, which btacalc's load does not count."""
    code, out, err = cli(*PLAN, "--capacity-factor", factor, *(["--pad-to-capacity"] if pad else []))
    assert code == 2 and err.count("\n") == 1 and "from 0.01" in err, err


def test_a_launch_with_an_infinite_factor_is_bad_input(cli, tmp_path):
    """The launch reader took `--moe-expert-capacity-factor inf`, which --capacity-factor refuses."""
    launch = tmp_path / "launch.sh"
    code, _, err = cli(*PLAN, "--capacity-factor", "1.25", "--emit", "megatron", "-o", str(launch))
    assert code == 0, err
    launch.write_text(launch.read_text().replace("--moe-expert-capacity-factor 1.25", "--moe-expert-capacity-factor inf"))
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "b200")
    assert code == 2 and err.count("\n") == 1 and "capacity" in err, err


@pytest.mark.parametrize("sig", [signal.SIGQUIT, signal.SIGUSR1, signal.SIGALRM, signal.SIGXCPU],
                         ids=lambda s: signal.Signals(s).name)
def test_every_signal_that_would_end_the_command_cleans_up(tmp_path, sig):
    """Only INT, TERM, HUP and PIPE were handled: Ctrl-\\ (QUIT), `ulimit -t` (XCPU), ALRM and USR1 ended a sweep
    mid-write with its staged temporary files left in the folder and no line."""
    (tmp_path / "o.json").write_text("old")
    proc = started(["sweep", "--hw", "wse2", "--vary", "seq=1024:400000:1", "--csv", "o.csv", "-o", "o.json", "-q"],
                   tmp_path)
    wait_for_temp(tmp_path, proc)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert err.strip().splitlines() == [f"btacalc: stopped by {signal.Signals(sig).name}; nothing written"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"] and (tmp_path / "o.json").read_text() == "old"


def _closed(args: list[str], cwd: Path, close: str) -> subprocess.CompletedProcess[str]:
    """`python -m btacalc ARGS` with the shell's `close` redirections (e.g. `<&- 2>&-`)."""
    command = " ".join([sys.executable, "-m", "btacalc", *args]) + " " + close
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(["sh", "-c", command], cwd=cwd, env=env, text=True, capture_output=True, timeout=120)


def test_closed_stdin_and_stderr_leave_the_input_readable(tmp_path):
    """With stdin and stderr both closed the input opened as descriptor 2, looked like stderr redirected onto it and
    was diverted to /dev/null before it was read: exit 2 and no output. The closed descriptors are held now."""
    model = tmp_path / "m.json"
    model.write_text((ROOT / "tests" / "data" / "gpt-j-6b.config.json").read_text())
    done = _closed(["plan", "--model", "m.json", "--hw", "b200", "--devices", "8", "--json", "-o", "p.json"],
                   tmp_path, "<&- 2>&-")
    assert done.returncode == 0
    assert json.loads((tmp_path / "p.json").read_text())["model"]["name"] == "m"


def test_closed_stdout_is_said_so_not_blamed_on_the_input(tmp_path):
    """With stdout closed the input opened as descriptor 1 and was reported as the target of a shell's `>`."""
    model = tmp_path / "m.json"
    model.write_text((ROOT / "tests" / "data" / "gpt-j-6b.config.json").read_text())
    done = _closed(["plan", "--model", "m.json", "--hw", "b200", "--devices", "8"], tmp_path, ">&-")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "standard output is closed" in done.stderr and "redirected onto" not in done.stderr


def test_the_search_schema_is_what_search_prints(cli):
    """`plan --search --json` did not match `plan --schema`, which refused --search as changing nothing."""
    jsonschema = pytest.importorskip("jsonschema")
    code, schema, err = cli("plan", "--search", "--schema")
    assert code == 0, err
    code, out, err = cli("plan", "--hw", "b200", "--devices", "8", "--search", "--json")
    assert code == 0, err
    jsonschema.validate(json.loads(out), json.loads(schema))
    code, plan_schema, _ = cli("plan", "--schema")
    assert json.loads(plan_schema)["title"] == "PlanReport" and json.loads(schema)["title"] == "SearchResult"


@pytest.mark.parametrize("args", [["--show-completion", "tcsh"], ["--install-completion", "sh"]])
def test_completion_for_an_unknown_shell_is_bad_input(cli, args):
    """typer printed "Shell sh not supported." and exited 1, the code of a plan that does not fit."""
    code, out, err = cli(*args)
    assert code == 2 and err.count("\n") == 1 and err.startswith("btacalc: error: --"), err
