"""hostile19: the standard-output rule in one place, the round trip of the options the command line adds beside an
import, signals at start-up, and a hostile campaign on sweep / compare / cluster / whatif / validate --measured /
--plot and the environment (docs/story.md "hostile19")."""

from __future__ import annotations

import os
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
