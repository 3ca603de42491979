"""hostile21: a hostile user's campaign on option combinations, run files, signals, closed pipes and the environment
(docs/story.md, "hostile21"). The bad-input cases it added are in tests/test_bad_input.py."""

from __future__ import annotations

import errno
import io
import json
import os
import sys

import pytest


class _ClosesAfterFirstWrite(io.TextIOWrapper):
    """Standard output into a pipe whose reader leaves after the first write (`| head -1` once the help is in the
    pipe's buffer): every later write fails with EPIPE."""

    def __init__(self):
        super().__init__(open(os.devnull, "wb"), encoding="utf-8")  # a real descriptor, as rich and the console ask
        self.writes = 0

    def write(self, s):
        self.writes += 1
        if self.writes > 1 and s:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        return len(s)


@pytest.mark.parametrize("args", [["plan", "--help"], ["compare", "--help"], ["sweep", "--help"], ["--help"],
                                  ["hw", "--help"]])
def test_help_whose_reader_leaves_after_the_first_write_exits_zero(monkeypatch, capsys, args):
    """`btacalc plan --help | head -1` exited 1 in 4 of 5 runs: the help went into the pipe in one write, head left,
    and the newline click writes after a command's help met EPIPE, which click's main turns into exit 1 (1 means "does
    not fit"). hostile15's fix covered a reader gone before the first write only."""
    from btacalc.cli import main

    monkeypatch.setattr(sys, "stdout", _ClosesAfterFirstWrite())
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 0 and capsys.readouterr().err == ""


class _Full(_ClosesAfterFirstWrite):
    """Standard output on a full disk (`> /dev/full`)."""

    def write(self, s):
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("args", [["formulas", "--phase", "attn_softmax"], ["formulas", "--json"], ["hw", "list"],
                                  ["hw", "list", "--json"], ["hw", "show", "h100"], ["hw", "show", "h100", "--json"],
                                  ["hw", "check", "{profile}"], ["models", "list"], ["models", "show", "gpt3-175b"],
                                  ["models", "show", "gpt3-175b", "--json"], ["--help"], ["plan", "--help"],
                                  ["hw", "--help"], ["--version"]])
def test_a_full_disk_is_standard_output_named(monkeypatch, capsys, args):
    """`btacalc hw list > /dev/full` (and formulas, models, hw show / check, --help, --version) said "cannot read or
    write: No space left on device", naming nothing: these commands wrote past the guard that plan, sweep and compare
    write through."""
    from btacalc.cli import main
    from btacalc.paths import data_dir

    monkeypatch.setattr(sys, "stdout", _Full())
    with pytest.raises(SystemExit) as exc:
        main([a.replace("{profile}", str(data_dir("hardware_profiles") / "h100.toml")) for a in args])
    assert (exc.value.code, capsys.readouterr().err) == (
        2, "btacalc: error: cannot write to standard output: No space left on device\n")


def _runs_file(tmp_path, **change):
    """A runs file of one shipped run with `change` applied."""
    from btacalc.paths import package_data

    run = dict(json.loads(package_data("measured_runs.json").read_text())["runs"][0]) | change
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [run]}))
    return path


# hostile40: on 7 devices the run's tokens/s and step time no longer agree (a file refused): its tokens/s alone
@pytest.mark.parametrize("change, note", [({"devices": 7, "measured": {"tokens_per_s_per_device": 721.1}},
                                           "does not divide"),
                                          ({"precision": "fp8"}, "which a100-80gb does not have")])
def test_a_runs_file_with_nothing_predicted_is_no_pass(cli, tmp_path, change, note):
    """Every run not expressible (a layout that does not divide its devices, FP8 on an A100): the rows said why, and
    the verdict was "within the documented bands", exit 0, with nothing predicted."""
    code, out, _ = cli("validate", "--measured", str(_runs_file(tmp_path, **change)), "--json")
    measured = json.loads(out)["measured"]
    assert note in json.dumps(measured["runs"])
    assert code == 1 and measured["gate"]["failures"] == [
        "none of the 1 measured runs was predicted (the line under the runs table says why for each): nothing was "
        "checked against the bands"]


def test_a_users_run_on_held_back_hardware_is_predicted(cli, tmp_path):
    """Decided (docs/story.md, hostile21): a run of the user's own on b300 or gb300 is predicted like any other. The
    project holds measured B300/GB300 runs back from its own fitting and checks (HELD-BACK.md); `validate --measured`
    fits nothing (--cross-validate and --calibrate refuse --measured), so the user's numbers reach no factor."""
    for hw in ("b300", "gb300"):
        code, out, _ = cli("validate", "--measured", str(_runs_file(tmp_path, hw=hw)), "--json")
        (result,) = json.loads(out)["measured"]["runs"]
        assert code in (0, 1) and result["error"] is not None, result
