"""Shell completion completes preset model names and hardware profile names (issue 25, item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from btacalc.cli.completion import complete_hardware, complete_hardware_list, complete_model
from btacalc.paths import package_data

RUN_IDS = sorted(r["id"] for r in json.loads(package_data("measured_runs.json").read_text())["runs"])

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (ROOT / "btacalc" / "data" / "presets").glob("*.toml"))
PROFILES = sorted(p.stem for p in (ROOT / "hardware_profiles").glob("*.toml"))


def test_the_functions_complete_shipped_names():
    assert complete_model("") == PRESETS and complete_hardware("") == PROFILES
    assert complete_model("qwen3") == [n for n in PRESETS if n.startswith("qwen3")] != []
    assert complete_hardware("wse") == ["wse2", "wse3"]
    assert complete_hardware("no-such-device") == []
    # a list of profiles: the last name, each profile once, the head kept
    assert complete_hardware_list("wse3,wse") == ["wse3,wse2"]
    assert complete_hardware_list("b") == [n for n in PROFILES if n.startswith("b")]


@pytest.mark.parametrize("words, expected", [
    ("btacalc plan --hw wse", ["wse2", "wse3"]),
    ("btacalc plan --model qwen3", [n for n in PRESETS if n.startswith("qwen3")]),
    ("btacalc sweep --hw h", [n for n in PROFILES if n.startswith("h")]),
    ("btacalc whatif -m ", PRESETS),
    ("btacalc compare --hw wse3,wse", ["wse3,wse2"]),
    ("btacalc crossover --hw a100-", [n for n in PROFILES if n.startswith("a100-")]),
    ("btacalc hw show gb", [n for n in PROFILES if n.startswith("gb")]),
    ("btacalc models show ", PRESETS),
    ("btacalc formulas --model ", PRESETS),
    # gapsum: the shipped runs' ids for validate --explain
    ("btacalc validate --explain qwen3-30b-a3b-gb200-8", [n for n in RUN_IDS if n.startswith("qwen3-30b-a3b-gb200-8")]),
])
def test_the_shell_gets_names(cli, monkeypatch, words, expected):
    """As bash asks: the completion variable set, the words typed so far, the index of the one typed."""
    parts = words.split(" ")
    monkeypatch.setenv("_BTACALC_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(len(parts) - 1))
    code, out, _ = cli()
    assert code == 0 and out.split() == expected


def _install_under_bash(home: Path):
    import os
    import subprocess
    import sys

    from support import ROOT

    env = {k: v for k, v in os.environ.items() if k != "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"}
    env.update(PYTHONPATH=str(ROOT), HOME=str(home))
    return subprocess.run(["bash", "-c", f"{sys.executable} -m btacalc --install-completion"], cwd=home, env=env,
                          text=True, capture_output=True, timeout=120)


@pytest.mark.parametrize("setup, says", [
    (lambda h: (h / ".bash_completions").write_text(""), ".bash_completions is not a folder"),
    (lambda h: (h / ".bash_completions" / "btacalc.sh").mkdir(parents=True), "btacalc.sh is a folder"),
    (lambda h: (h / ".bashrc").write_bytes(b"\xff\xfe"), "cannot read"),
    (lambda h: (h / ".bashrc").mkdir(), ".bashrc is not a file"),
    (lambda h: (h / ".bashrc").symlink_to(h / "gone" / "bashrc"), "cannot create"),
    # review23: a link to nothing on the script's path failed only after ~/.bashrc had been written
    (lambda h: (h / ".bash_completions").symlink_to(h / "gone"), ".bash_completions is a link to nothing"),
    (lambda h: ((h / ".bash_completions").mkdir(), (h / ".bash_completions" / "btacalc.sh").symlink_to(h / "gone" / "x")),
     "btacalc.sh is a link to nothing"),
])
def test_an_install_it_cannot_finish_writes_nothing(tmp_path, setup, says):
    """typer's bash installer (typer 0.29.2 install_bash) writes ~/.bashrc's `source` line first and then creates
    ~/.bash_completions: with a file in that folder's place it failed after ~/.bashrc had gained a line sourcing a
    script that never came, which every new shell then reports. Every target is checked first: one line, exit 2,
    and the home folder as it was (each file's bytes unchanged)."""
    pytest.importorskip("shellingham")
    setup(tmp_path)
    before = {p: (p.read_bytes() if p.is_file() else None) for p in tmp_path.rglob("*")}
    done = _install_under_bash(tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr and "nothing was installed" in done.stderr
    assert {p: (p.read_bytes() if p.is_file() else None) for p in tmp_path.rglob("*")} == before


def test_an_install_that_can_finish_still_installs(tmp_path):
    """The check refuses nothing typer can write: an existing ~/.bashrc keeps its lines and gains the `source` line,
    and the script lands in ~/.bash_completions."""
    pytest.importorskip("shellingham")
    (tmp_path / ".bashrc").write_text("alias ll='ls -l'\n")
    done = _install_under_bash(tmp_path)
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "btacalc.sh"
    assert script.is_file() and "_BTACALC_COMPLETE" in script.read_text()
    rc = (tmp_path / ".bashrc").read_text()
    assert rc.startswith("alias ll='ls -l'\n") and f"source '{script}'" in rc


def test_a_link_to_nothing_as_the_start_up_file_is_written_through(tmp_path):
    """review23: typer's write_text follows a ~/.bashrc that links to a missing file in an existing folder (a
    dotfiles checkout not yet made): that install can finish, so it is not refused."""
    pytest.importorskip("shellingham")
    (tmp_path / "dotfiles").mkdir()
    (tmp_path / ".bashrc").symlink_to(tmp_path / "dotfiles" / "bashrc")
    done = _install_under_bash(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "source '" in (tmp_path / "dotfiles" / "bashrc").read_text()


def test_an_install_that_fails_after_all_puts_every_file_back(tmp_path):
    """Whatever the checks miss (a race, a full disk, a signal between typer's two writes): the start-up file gets
    its bytes back, a script the install created is removed, and so are the folders it made while empty."""
    from btacalc.cli.completion import restored_on_failure

    rc, script = tmp_path / ".bashrc", tmp_path / ".bash_completions" / "btacalc.sh"
    rc.write_bytes(b"alias ll='ls -l'\n")
    with pytest.raises(OSError):
        with restored_on_failure((rc, script)):
            rc.write_text("alias ll='ls -l'\n\nsource 'x'\n")
            script.parent.mkdir()
            script.write_text("half a script")
            raise OSError("disk full")
    assert rc.read_bytes() == b"alias ll='ls -l'\n"
    assert not script.exists() and not script.parent.exists()
    with restored_on_failure((rc, script)):  # a success keeps what was written
        rc.write_text("new")
    assert rc.read_text() == "new"


def test_a_failed_install_keeps_a_start_up_link_as_a_link(tmp_path):
    """A ~/.bashrc that links to a file not yet made: the failed install removes the file it created behind the
    link, never the link."""
    from btacalc.cli.completion import restored_on_failure

    (tmp_path / "dotfiles").mkdir()
    rc = tmp_path / ".bashrc"
    rc.symlink_to(tmp_path / "dotfiles" / "bashrc")
    with pytest.raises(KeyboardInterrupt):
        with restored_on_failure((rc,)):
            rc.write_text("source 'x'\n")
            raise KeyboardInterrupt
    assert rc.is_symlink() and not (tmp_path / "dotfiles" / "bashrc").exists()
