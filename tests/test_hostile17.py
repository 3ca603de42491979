"""hostile17: standard error redirected by the shell onto an input is never written into it; `--fp16` with
`--grad-reduce-in-bf16` is listed as ignored; a Bridge `mixed_precision.fp8=null` refusal names the Bridge field
(docs/story.md "hostile17")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import btacalc
from support import read_terminal

# the subprocesses run the btacalc this test imported (as test_hostile16 does on main): from a checkout beside a
# non-editable install, the cwd alone would start the installed copy
ENV = {**os.environ, "PYTHONPATH": str(Path(btacalc.__file__).resolve().parents[1])}
BAD = "--bogus-flag 3 \\\n"  # a line after the launch command: a one-line refusal, exit 2


def _launch(tmp_path: Path) -> tuple[Path, str]:
    text = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--model", "llama-3-8b", "--hw", "h100",
                           "--devices", "8", "--emit", "megatron"], capture_output=True, text=True, timeout=120,
                          env=ENV).stdout
    path = tmp_path / "run.sh"
    path.write_text(text + BAD)
    return path, path.read_text()


def _run(args: list[str], stderr_path: Path, stdout=subprocess.PIPE, stdin: Path | None = None):
    with open(stderr_path, "ab") as err, (open(stdin, "rb") if stdin else open(os.devnull, "rb")) as inp:
        return subprocess.run([sys.executable, "-m", "btacalc", *args], stdout=stdout, stderr=err, stdin=inp,
                              cwd=stderr_path.parent, timeout=120, env=ENV)


@pytest.mark.parametrize("args", [
    ["plan", "--hw", "h100", "--from-megatron", "run.sh"],  # the input's own refusal
    ["plan", "--hw", "h100", "--from-megatron", "run.sh", "--bogus"],  # a usage error, before the input is read
    ["plan", "--hw", "h100", "--from-megatron=run.sh"],
])
def test_standard_error_redirected_onto_an_input_is_not_written(tmp_path, args):
    """`btacalc plan --from-megatron run.sh 2>> run.sh` appended its one-line error to the launch it read."""
    path, before = _launch(tmp_path)
    done = _run(args, path)
    assert done.returncode == 2
    assert path.read_text() == before
    assert done.stdout == b""  # no terminal: nothing said, the exit code tells


def test_standard_error_onto_standard_input_and_with_standard_output(tmp_path):
    path, before = _launch(tmp_path)
    done = _run(["plan", "--hw", "h100", "--from-megatron", "-"], path, stdin=path)
    assert done.returncode == 2 and path.read_text() == before
    with open(path, "ab") as out:  # `>> run.sh 2>&1`: hostile16's refusal went to standard error, into the file
        done = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--hw", "h100", "--from-megatron", "run.sh"],
                              stdout=out, stderr=out, cwd=tmp_path, timeout=120, env=ENV)
    assert done.returncode == 2 and path.read_text() == before


def test_standard_error_onto_another_file_still_gets_the_line(tmp_path):
    path, before = _launch(tmp_path)
    log = tmp_path / "log.txt"
    done = _run(["plan", "--hw", "h100", "--from-megatron", "run.sh"], log)
    assert done.returncode == 2
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("btacalc: error: run.sh: flags after the launch command"), lines
    assert "redirected" not in lines[0]


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminal")
def test_standard_error_onto_an_input_is_shown_on_the_terminal(tmp_path):
    path, before = _launch(tmp_path)
    leader, follower = os.openpty()
    try:
        done = _run(["plan", "--hw", "h100", "--from-megatron", "run.sh"], path, stdout=follower)
        os.close(follower)
        follower = -1
        shown = read_terminal(leader)
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 2 and path.read_text() == before
    text = " ".join(shown.decode().split())
    assert text.startswith("btacalc: error: run.sh: flags after the launch command"), text
    assert "(standard error is redirected onto run.sh, an input of this command" in text, text


def _imported(cli, *args: str) -> dict:
    import json

    code, out, err = cli(*args, "--json")
    assert code in (0, 1), err
    data = json.loads(out)
    return {"gradient_bytes": data["inputs"]["gradient_bytes"], "precision": data["inputs"]["precision"],
            # the emitted launch's placeholder run length and learning rate (review35) are listed as not planned
            "ignored": {row["flag"]: row["reason"] for row in data["imported"]["ignored"]
                        if row["flag"] not in ("--train-iters", "--lr")}}


@pytest.mark.parametrize("fp32", [False, True])
def test_fp16_with_grad_reduce_in_bf16_is_listed_ignored(cli, tmp_path, fp32):
    """A launch with `--fp16 --grad-reduce-in-bf16` was read without a word: Megatron-LM reads the flag only under
    --bf16 (arguments.py L1213 @ d98e8a64)."""
    code, launch, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--precision", "fp16",
                            *(() if fp32 else ("--grad-bytes", "2")), "--emit", "megatron")
    assert code in (0, 1), err
    assert ("--accumulate-allreduce-grads-in-fp32" in launch) == fp32
    path = tmp_path / "run.sh"
    path.write_text(launch.replace("--fp16", "--fp16 --grad-reduce-in-bf16"))
    got = _imported(cli, "plan", "--hw", "h100", "--from-megatron", str(path))
    assert (got["precision"], got["gradient_bytes"]) == ("fp16", 4 if fp32 else 2)
    reason = got["ignored"]["--grad-reduce-in-bf16"]
    assert reason.startswith("no effect under --fp16: Megatron-LM reads it only under --bf16 "
                             "(megatron/training/arguments.py L1213 @ d98e8a64)"), reason
    # under --bf16 it is read, as before
    path.write_text(launch.replace("--fp16", "--bf16 --grad-reduce-in-bf16")
                    .replace("--accumulate-allreduce-grads-in-fp32", ""))
    got = _imported(cli, "plan", "--hw", "h100", "--from-megatron", str(path))
    assert (got["precision"], got["gradient_bytes"], got["ignored"]) == ("bf16", 2, {})


@pytest.mark.parametrize("fp32", [False, True])
def test_bridge_fp16_without_a_recipe_reads_ddp_grad_reduce_in_fp32(cli, tmp_path, fp32):
    """The Bridge reader shares the Megatron one: `model.fp16` with `ddp.grad_reduce_in_fp32: true` (no
    mixed_precision) planned 16-bit gradients, though Bridge gives the field to Megatron-Core's DDP as it is."""
    path = tmp_path / "b.yaml"
    path.write_text("model:\n  fp16: true\n  bf16: false\ntrain:\n  micro_batch_size: 1\n  global_batch_size: 64\n"
                    f"ddp:\n  grad_reduce_in_fp32: {str(fp32).lower()}\n")
    got = _imported(cli, "plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--from-bridge", str(path))
    assert (got["precision"], got["gradient_bytes"], got["ignored"]) == ("fp16", 4 if fp32 else 2, {})
