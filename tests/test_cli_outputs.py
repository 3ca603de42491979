"""What the commands write: through symlinks keeping the target's mode, into FIFOs as streams, to
standard output with `-`, all-or-nothing, nothing left behind; closed pipes and full disks."""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_plan_output_writes_through_a_symlink_keeping_the_mode(cli, tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o644)
    link = tmp_path / "plan.json"
    link.symlink_to(real)
    code, out, err = cli("plan", "--hw", "wse2", "--output", str(link))
    assert code == 0, err
    assert link.is_symlink() and json.loads(real.read_text())["hardware"]["name"] == "wse2"
    assert _mode(real) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "real.json"]


def test_plan_output_to_a_fifo_is_streamed(cli, tmp_path):
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, out, err = cli("plan", "--hw", "wse2", "--output", str(fifo))
    reader.join(10)
    assert code == 0, err
    assert json.loads(got[0])["hardware"]["name"] == "wse2" and "Plan" in out
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and [p.name for p in tmp_path.iterdir()] == ["plan.fifo"]


def test_output_dash_is_stdout_and_replaces_the_table(cli):
    code, out, _ = cli("plan", "--hw", "wse2", "--output", "-")
    assert code == 0 and json.loads(out)["hardware"]["name"] == "wse2"


def test_csv_to_stdout_with_json_to_a_file(cli, tmp_path):
    code, out, err = cli("compare", "--hw", "wse3", "--csv", "-", "--output", str(tmp_path / "c.json"))
    assert code == 0, err
    assert out.startswith("hardware,display_name,") and json.loads((tmp_path / "c.json").read_text())["rows"]


def test_several_outputs_are_written_together(cli, tmp_path):
    pytest.importorskip("matplotlib")
    code, _, err = cli("compare", "--hw", "wse3", "--csv", str(tmp_path / "c.csv"), "--output", str(tmp_path / "c.json"),
                       "--plot", str(tmp_path / "c.svg"))
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv", "c.json", "c.svg"]
    assert (tmp_path / "c.svg").read_text().lstrip().startswith("<?xml")


def test_a_plot_that_cannot_be_drawn_writes_no_other_output(cli, tmp_path):
    """The plot fails after the work (nothing fits): the CSV and JSON asked for with it are not written."""
    pytest.importorskip("matplotlib")
    (tmp_path / "c.csv").write_text("old")
    code, out, err = cli("compare", "--hw", "wse3", "--seq", "4000000", "--csv", str(tmp_path / "c.csv"),
                         "--output", str(tmp_path / "c.json"), "--plot", str(tmp_path / "c.png"))
    assert code == 2 and "nothing to draw" in err and out == ""
    assert [(p.name, p.read_text()) for p in tmp_path.iterdir()] == [("c.csv", "old")]


class _Full(io.TextIOWrapper):
    """Standard output on a full disk."""

    def __init__(self):
        super().__init__(io.BytesIO(), encoding="utf-8")

    def write(self, s):
        raise OSError(errno.ENOSPC, "No space left on device")


class _Closed(_Full):
    """Standard output into a pipe whose reader has gone (`| head`)."""

    def write(self, s):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


@pytest.mark.parametrize("args", [["plan", "--json"], ["plan"], ["hw", "list"], ["formulas", "--json"],
                                  ["compare", "--hw", "wse3", "--json"]])
def test_stdout_on_a_full_disk_is_one_line_exit_2(monkeypatch, capsys, tmp_path, args):
    from btacalc.cli import main

    monkeypatch.setattr(sys, "stdout", _Full())
    extra = ["--output", str(tmp_path / "x.json")] if args[0] in ("plan", "compare") else []
    with pytest.raises(SystemExit) as exc:
        main([*args, *extra])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "No space left on device" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # the file asked for with it is not left behind


@pytest.mark.parametrize("args, code", [(["plan"], 0), (["plan", "--memory-model", "resident"], 1), (["hw", "list"], 0),
                                        (["plan", "--json"], 0)])
def test_a_closed_pipe_ends_quietly_with_the_commands_own_code(monkeypatch, capsys, args, code):
    from btacalc.cli import main

    monkeypatch.setattr(sys, "stdout", _Closed())
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == code and capsys.readouterr().err == ""


def _btacalc(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "btacalc", *args], env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def test_a_real_closed_pipe():
    proc = _btacalc("hw", "list")
    proc.stdout.close()  # like `| head` that has already exited
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 0 and err == ""


@pytest.mark.parametrize("args,flag", [
    (["compare", "--hw", "wse3,b200"], "--csv"),
    (["compare", "--hw", "wse3"], "--output"),
    (["plan", "--hw", "wse3"], "--output"),
])
def test_the_terminal_says_where_the_file_went(cli, tmp_path, args, flag):
    """Issue 25 (Build 4): with data going to a file the terminal says where, as sweep's summary does; the
    table stays (a few rows), the file has the data."""
    path = tmp_path / ("f.csv" if flag == "--csv" else "f.json")
    code, out, _ = cli(*args, flag, str(path))
    assert code == 0 and path.stat().st_size > 0
    assert out.splitlines()[-1] == f"written to {path} ({flag})"
    code, out, _ = cli(*args)
    assert code == 0 and "written to" not in out
