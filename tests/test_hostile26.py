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

from support import started, wait_for_temp

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("first, second", [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGTERM)],
                         ids=["TERM-TERM", "INT-TERM"])
def test_a_second_signal_at_once_leaves_the_first_stop_and_its_line(tmp_path, first, second):
    """Two signals a few microseconds apart: the second ended the process with no line (the default action came
    back before `main` printed), or cut the first stop's clean-up short (temporary files left)."""
    (tmp_path / "o.json").write_text("old")
    proc = started(["sweep", "--hw", "wse2", "--vary", "seq=1024:400000:1", "--csv", "o.csv", "-o", "o.json", "-q"],
                  tmp_path)
    wait_for_temp(tmp_path, proc)
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


def test_an_output_on_standard_error_is_written_there(tmp_path):
    """`-o /dev/stderr 2> plan.json`: standard error was turned to /dev/null because a word named its file, so the
    plan was thrown away and an error line lost; an output option's value asks for the output there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(tmp_path / "plan.json", "w") as err:
        done = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--hw", "wse2", "-o", "/dev/stderr"], env=env,
                              stdout=subprocess.DEVNULL, stderr=err, timeout=120)
    assert done.returncode == 0
    assert (tmp_path / "plan.json").read_text().lstrip().startswith("{")
    with open(tmp_path / "e.txt", "w") as err:
        done = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--hw", "nope", "-o", "/dev/stderr"], env=env,
                              stdout=subprocess.DEVNULL, stderr=err, timeout=120)
    assert done.returncode == 2 and "unknown hardware 'nope'" in (tmp_path / "e.txt").read_text()


def test_the_named_files_leave_out_output_values():
    from btacalc.paths import _named_files

    words = ["plan", "-o", "a.json", "--csv=b.csv", "-oc.json", "--plot", "p.png", "--from-megatron", "run.sh",
             "--measured=m.json", "-qo", "d.json", "-qoe.json"]
    assert sorted(_named_files(words)) == sorted(["plan", "--from-megatron", "run.sh", "--measured=m.json", "m.json"])
    # review20: a cluster ending in o takes the next word as its output; a value-taking letter ends the cluster
    # (`-mo x`: the model "o", then an input word x)
    assert sorted(_named_files(["sweep", "-qo", "/dev/stderr"])) == ["sweep"]
    assert sorted(_named_files(["plan", "-mo", "x.json"])) == ["-mo", "plan", "x.json"]


@pytest.mark.parametrize("folder", ["formulas", "hardware_profiles", "btacalc/data/presets", "btacalc/data"])
def test_no_new_file_in_btacalc_own_folders(cli, folder):
    """A new file there (`-o formulas/zzz.toml`) was read by every later command as a formula, profile or preset."""
    target = ROOT / folder / "hostile26-output.json"
    code, out, err = cli("plan", "--hw", "wse2", "-o", str(target))
    assert code == 2 and "btacalc's own folders" in err and len(err.strip().splitlines()) == 1, err
    assert not target.exists()


def test_a_bad_matplotlib_backend_in_the_environment_does_not_stop_a_plot(tmp_path):
    """In a process of its own (review20: in-process, matplotlib was imported before the variable was set, so the
    test could not fail): matplotlib validates MPLBACKEND when it is imported."""
    pytest.importorskip("matplotlib")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "nope"}
    done = subprocess.run([sys.executable, "-m", "btacalc", "compare", "--plot", str(tmp_path / "p.png"), "-q"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("args, says", [
    ("--tiles 3 --tile-batch 1 --max-global-batch 2", "--tiles 3 x --tile-batch 1 make a global batch of at least 3"),
    ("--tiles 3 --max-global-batch 2", "--tiles 3 makes a global batch of at least 3"),
    ("--tile-batch 4 --max-global-batch 2", "--tile-batch 4 makes a global batch of at least 4"),
    ("--hw h100 --devices 8 --micro-batch 2 --max-global-batch 8",
     "--micro-batch 2 x 8 data-parallel ranks make a global batch of 16, above --max-global-batch 8"),
])
def test_a_fixed_batch_over_the_cap_is_bad_input(cli, args, says):
    """It was planned and reported "does not fit" (exit 1); the same contradiction given as --global-batch is exit 2.
    The smallest global batch is DP x the fixed factors x 1 for the free ones: 3 x 1, 3 x 1, 1 x 4, 8 x 2."""
    code, out, err = cli("plan", *args.split())
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_a_fixed_batch_at_the_cap_is_planned(cli):
    code, out, err = cli("plan", "--tiles", "2", "--tile-batch", "1", "--max-global-batch", "2")
    assert code == 0, err


@pytest.mark.parametrize("field, value, says", [
    ("recompute", "banana", "recompute 'banana': expected none"),
    ("recompute", "", "recompute '': expected none"),
    ("recompute", ["core_attn", "banana"], "recompute 'core_attn,banana'"),
    ("hw", "nope", "unknown hardware 'nope'"),
    ("model", "nope", "unknown model 'nope'"),
])
def test_a_run_file_value_that_names_nothing_is_bad_input(cli, tmp_path, field, value, says):
    """Such a run was reported as one btacalc cannot express (exit 1, nothing on standard error)."""
    import json

    runs = json.loads((ROOT / "btacalc" / "data" / "measured_runs.json").read_text())["runs"]
    run = {**next(r for r in runs if r["id"] == "llama-7b-wse2-1-400"), field: value}
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [run]}))
    code, out, err = cli("validate", "--measured", str(tmp_path / "runs.json"), "-q")
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_a_launch_with_zero_experts_is_dense(cli, tmp_path):
    """Megatron-LM reads --num-experts 0 as no experts (arguments.py L1648-1649 @ d98e8a64: num_experts = None); the
    launch was refused naming --allgather-dispatcher, an option the user never gave."""
    launch = tmp_path / "dense.sh"
    launch.write_text("torchrun pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                      "--seq-length 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 --ffn-hidden-size 4096 "
                      "--vocab-size 32000 --max-position-embeddings 1024 --num-experts 0\n")
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--devices", "8", "--json")
    assert code == 0, err
    import json
    assert json.loads(out)["model"]["num_experts"] == 0


def test_two_outputs_may_both_be_discarded(cli, tmp_path):
    """`--csv /dev/null -o /dev/null` was refused as two outputs on one file; discarding both collides with nothing.
    Two outputs on one regular file are still refused."""
    code, out, err = cli("sweep", "--hw", "wse2", "--vary", "seq=1024,2048", "--csv", "/dev/null", "-o", "/dev/null",
                         "-q")
    assert code == 0, err
    code, out, err = cli("sweep", "--hw", "wse2", "--vary", "seq=1024,2048", "--csv", str(tmp_path / "x.csv"), "-o",
                         str(tmp_path / "." / "x.csv"), "-q")
    assert code == 2 and "both write to" in err and not list(tmp_path.iterdir())


def test_the_command_keeps_ignoring_signals_once_stopped():
    """review20: after a stop the console command (main with argv None, also `python -m btacalc`) keeps the handled
    signals ignored while it reports; an in-process caller gets its handlers back."""
    from btacalc.cli import signals as sig

    before = signal.getsignal(signal.SIGTERM)
    try:
        for keep, after in ((True, signal.SIG_IGN), (False, before)):
            with pytest.raises(sig.Stopped):
                with sig.handled(keep_ignoring=keep):
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(1)  # the handler raises at the next bytecode
            assert signal.getsignal(signal.SIGTERM) == after
            signal.signal(signal.SIGTERM, before)
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_data_parallel_excess_stays_the_verdict_whatever_factor_of_one_is_given(cli):
    """review20: --devices 4 --max-global-batch 2 is the plan's verdict (exit 1); adding --tiles 1 made it bad input
    (exit 2). Only a fixed size over the cap by itself is bad input."""
    for extra in ([], ["--tiles", "1"], ["--tile-batch", "1"]):
        code, out, err = cli("plan", "--hw", "wse2", "--devices", "4", "--max-global-batch", "2", *extra)
        assert code == 1, (extra, err)
