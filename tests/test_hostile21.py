"""hostile21: a hostile user's campaign on option combinations, run files, signals, closed pipes and the environment
(docs/story.md, "hostile21"). The bad-input cases it added are in tests/test_bad_input.py."""

from __future__ import annotations

import errno
import io
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
