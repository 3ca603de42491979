"""hostile26 (the twentieth session): a tester's campaign against the reliability rules (one line and exit 2 for bad input, outputs that never
damage what was there, a stop that says so). Each test is one defect it found, written as the behaviour the rules
require."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "btacalc", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _streaming(proc: subprocess.Popen[str], folder: Path, limit_s: float = 60) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end and proc.poll() is None:
        if any(p.name.endswith(".tmp") for p in folder.iterdir()):
            return
        time.sleep(0.02)
    pytest.fail("the sweep never started streaming")


@pytest.mark.parametrize("first, second", [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGTERM)],
                         ids=["TERM-TERM", "INT-TERM"])
def test_a_second_signal_at_once_leaves_the_first_stop_and_its_line(tmp_path, first, second):
    """Two signals a few microseconds apart: the second ended the process with no line (the default action came
    back before `main` printed), or cut the first stop's clean-up short (temporary files left)."""
    (tmp_path / "o.json").write_text("old")
    proc = _start(["sweep", "--hw", "wse2", "--vary", "seq=1024:400000:1", "--csv", "o.csv", "-o", "o.json", "-q"],
                  tmp_path)
    _streaming(proc, tmp_path)
    os.kill(proc.pid, first)
    os.kill(proc.pid, second)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + first, err
    assert err.strip().splitlines() == [f"btacalc: stopped by {signal.Signals(first).name}; nothing written"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"] and (tmp_path / "o.json").read_text() == "old"


def _profile_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """validate --calibrate writing into copies in tmp_path (fitted_texts pointed there), each copy "old" now."""
    import btacalc.planning.calibration as calibration

    real = calibration.fitted_texts

    def into_copies(fit, folder=None):  # type: ignore[no-untyped-def]
        return {tmp_path / path.name: text for path, text in real(fit, folder).items()}

    monkeypatch.setattr(calibration, "fitted_texts", into_copies)
    names = [f"{n}.toml" for f in calibration.load_families() for n in f.profiles]
    for name in names:
        (tmp_path / name).write_text("old")
    return [tmp_path / n for n in names]


def test_calibrate_writes_every_profile_or_none(cli, tmp_path, monkeypatch):
    """Each family's files were written as it was fitted and its line printed between: a full standard output after
    the first family left the wafer profiles rewritten and the GPU ones not, under "nothing written"."""
    pytest.importorskip("scipy")
    copies = _profile_copies(tmp_path, monkeypatch)

    def full(text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("btacalc.cli.validate.write_stdout", full)
    code, out, err = cli("validate", "--calibrate")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert all(p.read_text() == "old" for p in copies)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in copies)  # no temporary left
    monkeypatch.undo()
    copies = _profile_copies(tmp_path, monkeypatch)
    code, out, err = cli("validate", "--calibrate")
    assert code == 0, err
    assert all(p.read_text().startswith("# ") or "[calibration." in p.read_text() for p in copies)
    assert sum(line.count(".toml") for line in out.splitlines() if "written to" in line) == len(copies)
