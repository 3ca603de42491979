"""hostile15: standard input as an input file, a leading byte-order mark, and help into a closed pipe.

- `-` (standard input) for `--config`, `--from-megatron`, `--from-bridge` is read once per command, as UTF-8: a closed
  standard input was an internal error (exit 3), a second option given `-` read nothing and planned an empty launch,
  and bytes that are not UTF-8 came back as escapes in a quoted "line" of a shell-splitting error.
- A leading UTF-8 byte-order mark (U+FEFF, which Windows editors write) is dropped by the one reader of input files
  (paths.read_input): TOML read "Invalid statement (at line 1, column 1)", JSON "Unexpected UTF-8 BOM", a Hydra
  file quoted the mark back as part of its first line. The file with the mark plans as the file without.
- `btacalc --help | head -1` exited 1 (rich's Console.on_broken_pipe, then click's EPIPE handling): 1 means "does
  not fit"; a closed pipe ends with the command's own code, 0 for help.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from btacalc.paths import data_dir
from support import default_dispositions

ROOT = Path(__file__).resolve().parent.parent
BOM = "\ufeff".encode("utf-8")  # EF BB BF
LAUNCH_ARGS = ["plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2"]


def _stdin(monkeypatch, data: bytes | None) -> None:
    """Standard input holding `data` (bytes below a text layer, as a real one), or closed (None, as Python leaves it)."""
    monkeypatch.setattr(sys, "stdin", None if data is None else io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def _one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "", (code, err)
    assert err.startswith("btacalc: error:") and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("flag", ["--config", "--from-megatron", "--from-bridge"])
def test_a_closed_standard_input_is_one_line(cli, monkeypatch, flag):
    _stdin(monkeypatch, None)
    model = ["-m", "llama-3-8b"] if flag == "--from-bridge" else []
    err = _one_line_error(*cli("plan", "--hw", "h100", *model, flag, "-"))
    assert f"{flag} '-': standard input is closed" in err


@pytest.mark.parametrize("second", ["--from-megatron", "--from-bridge"])
def test_standard_input_is_read_by_one_option(cli, monkeypatch, second):
    _stdin(monkeypatch, b"devices = 8\n")
    err = _one_line_error(*cli("plan", "--hw", "h100", "--config", "-", second, "-"))
    assert f"{second} '-': standard input is read already by --config: give one of them a file" in err


@pytest.mark.parametrize("data, byte", [(b"\xd1\x05torchrun --nproc_per_node 8 pretrain_gpt.py\n", 0),
                                        ("torchrun pretrain_gpt.py\n".encode("utf-16"), 0),
                                        (b"torchrun --nproc_per_node 8 \xff\n", 28)])
def test_standard_input_that_is_not_utf8_is_named_so(cli, monkeypatch, data, byte):
    _stdin(monkeypatch, data)
    err = _one_line_error(*cli("plan", "--hw", "h100", "--from-megatron", "-"))
    assert f"--from-megatron '-': not UTF-8 text (byte {byte})" in err  # the offset of the first bad byte


def test_a_launch_on_standard_input_plans_as_its_file(cli, monkeypatch, tmp_path):
    code, launch, _ = cli(*LAUNCH_ARGS, "--emit", "megatron")
    assert code == 0
    (tmp_path / "l.sh").write_text(launch)
    code, from_file, _ = cli("plan", "--hw", "h100", "--from-megatron", str(tmp_path / "l.sh"), "--json")
    _stdin(monkeypatch, (BOM + launch.encode("utf-8")))
    code2, from_stdin, _ = cli("plan", "--hw", "h100", "--from-megatron", "-", "--json")
    assert (code, code2) == (0, 0)
    assert _without_source(json.loads(from_stdin)) == _without_source(json.loads(from_file))


def _without_source(plan: dict) -> dict:
    """A plan without the strings that name where its run came from (the file's path, or '-')."""
    plan["imported"].pop("source")
    plan["model"].pop("source")
    plan["model"].pop("name")  # "llama-3-8b (from l.sh)" / "(from -)"
    return plan


def _plan(cli, *args: str) -> dict:
    code, out, err = cli(*args, "--json")
    assert code in (0, 1), err
    return json.loads(out)


def test_a_run_file_with_a_byte_order_mark_plans_as_without(cli, tmp_path):
    text = b'model = "llama-3-8b"\nhw = "h100"\ndevices = 8\ntp = 2\n'
    (tmp_path / "plain.toml").write_bytes(text)
    (tmp_path / "bom.toml").write_bytes(BOM + text)
    assert _plan(cli, "plan", "--config", str(tmp_path / "bom.toml")) == _plan(cli, "plan", "--config",
                                                                              str(tmp_path / "plain.toml"))


def test_a_profile_with_a_byte_order_mark_is_the_profile(cli, tmp_path):
    text = (data_dir("hardware_profiles") / "h100.toml").read_bytes()
    (tmp_path / "h100.toml").write_bytes(text)
    (tmp_path / "bom" / "h100.toml").parent.mkdir()
    (tmp_path / "bom" / "h100.toml").write_bytes(BOM + text)
    args = ["plan", "-m", "llama-3-8b", "--devices", "8", "--hw"]
    with_bom = _plan(cli, *args, str(tmp_path / "bom" / "h100.toml"))
    without = _plan(cli, *args, str(tmp_path / "h100.toml"))
    assert json.dumps(with_bom).replace("/bom/", "/") == json.dumps(without)


def test_overrides_with_a_byte_order_mark_plan_as_without(cli, tmp_path):
    code, overrides, _ = cli(*LAUNCH_ARGS, "--emit", "bridge")
    assert code == 0 and overrides.startswith("#")  # a comment first: before, the mark made it a YAML line
    (tmp_path / "o.txt").write_text(overrides)
    (tmp_path / "bom").mkdir()
    (tmp_path / "bom" / "o.txt").write_bytes(BOM + overrides.encode("utf-8"))
    args = ["plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--from-bridge"]
    with_bom = _plan(cli, *args, str(tmp_path / "bom" / "o.txt"))
    assert json.dumps(with_bom).replace("/bom/", "/") == json.dumps(_plan(cli, *args, str(tmp_path / "o.txt")))


def test_measured_runs_with_a_byte_order_mark_validate_as_without(cli, tmp_path):
    runs = {"runs": [{"id": "r", "source": "test", "model": "llama-3-8b", "hw": "h100", "devices": 8,
                      "precision": "bf16", "seq": 2048, "global_batch": 64, "micro_batch": 1, "tp": 2,
                      "measured": {"tokens_per_s_per_device": 1000.0}, "role": "check"}]}
    text = json.dumps(runs).encode("utf-8")
    (tmp_path / "runs.json").write_bytes(text)
    (tmp_path / "bom").mkdir()
    (tmp_path / "bom" / "runs.json").write_bytes(BOM + text)
    outs = []
    for path in (tmp_path / "bom" / "runs.json", tmp_path / "runs.json"):
        code, out, err = cli("validate", "--measured", str(path), "--json")
        assert code in (0, 1) and err == "", err  # 1: a check run outside its band
        outs.append((code, json.loads(out)["measured"]))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("args", [["--help"], [], ["hw"], ["hw", "--help"], ["plan", "--help"], ["whatif", "--help"]])
def test_help_into_a_closed_pipe_exits_zero(args):
    """The reader is gone before btacalc writes (`| true`): help's code is 0, nothing on stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    words = " ".join(args)
    done = subprocess.run(f"{sys.executable} -m btacalc {words} | true; exit ${{PIPESTATUS[0]}}", shell=True, env=env,
                          capture_output=True, text=True, timeout=120, executable="/bin/bash")
    assert done.returncode == 0 and done.stderr == "", (done.returncode, done.stderr)


@pytest.mark.parametrize("flag, emit", [("--from-megatron", "megatron"), ("--from-bridge", "bridge"),
                                        ("--config", None)])
@pytest.mark.parametrize("output", [["-o", "{f}"], ["-o", "{link}"], ["--json", "-o", "{f}"]])
def test_standard_input_from_a_file_is_that_file(cli, monkeypatch, tmp_path, flag, emit, output):
    """`plan --from-megatron - -o run.sh < run.sh` wrote the plan over the launch it read (the file behind standard
    input was no registered input); through a hard link too."""
    if emit is not None:
        code, text, _ = cli(*LAUNCH_ARGS, "--emit", emit)
        assert code == 0
    else:
        text = 'model = "llama-3-8b"\nhw = "h100"\ndevices = 8\ntp = 2\n'
    path = tmp_path / "run.txt"
    path.write_text(text)
    os.link(path, tmp_path / "hard.txt")
    monkeypatch.setattr(sys, "stdin", open(path, encoding="utf-8"))
    model = ["-m", "llama-3-8b", "--devices", "8"] if flag == "--from-bridge" else []
    args = [a.replace("{f}", str(path)).replace("{link}", str(tmp_path / "hard.txt")) for a in output]
    err = _one_line_error(*cli("plan", "--hw", "h100", *model, flag, "-", *args))
    sys.stdin.close()
    assert f"is an input of this command ({flag} - (standard input))" in err
    assert path.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == ["hard.txt", "run.txt"]


def test_standard_input_from_a_pipe_still_writes_the_output(cli, tmp_path):
    """A pipe is no file an output could name: the plan is written (a real process, a real pipe)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code, launch, _ = cli(*LAUNCH_ARGS, "--emit", "megatron")
    done = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--hw", "h100", "--from-megatron", "-", "-o",
                           str(tmp_path / "plan.json")], input=launch, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads((tmp_path / "plan.json").read_text())["imported"]["source"] == "-"


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_sweep_waiting_for_a_fifos_reader_can_be_stopped(tmp_path, signum):
    """`sweep --csv fifo` opened the FIFO while the stopping signals were held (its staged files are created and
    noted under them), so with no reader yet it waited for ever and only SIGKILL ended it. Now the signal stops it:
    128 + n, one line, the staged --output file removed, the old one kept, the FIFO left a FIFO."""
    import signal
    import stat
    import time

    os.mkfifo(tmp_path / "fifo.csv")
    (tmp_path / "out.json").write_text("old")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "btacalc", "sweep", "--vary", "experts=16,32", "-q", "--output",
                             "out.json", "--csv", "fifo.csv"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=default_dispositions)
    end = time.monotonic() + 60
    while time.monotonic() < end and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        time.sleep(0.05)  # --output is staged first, then the FIFO is opened
    time.sleep(0.5)
    proc.send_signal(getattr(signal, signum))
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"{signum} did not stop a sweep waiting for its FIFO's reader")
    assert proc.returncode == 128 + getattr(signal, signum), err
    assert err == f"btacalc: stopped by {signum}; nothing written\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.csv", "out.json"]
    assert (tmp_path / "out.json").read_text() == "old" and stat.S_ISFIFO(os.stat(tmp_path / "fifo.csv").st_mode)
