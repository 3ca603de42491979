"""Output files (btacalc.output.files): atomic replacement keeping the mode, symlinks written through,
devices and FIFOs written as streams (never replaced), all-or-nothing commits, nothing left behind.

Device cases use a FIFO or a temporary path (a FIFO, a symlink to it, and as root a private
character device made with mknod), never the machine's real /dev."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest

from btacalc.errors import BtacalcError
from btacalc.output.files import Outputs, target


def _no_stdout(data):
    raise AssertionError("nothing should go to standard output")


def _commit(paths: dict, payloads: dict, **kw) -> None:
    Outputs(paths).commit(payloads, stdout=kw.pop("stdout", _no_stdout), **kw)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    """Set a umask for one test; restore the old one."""
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_gets_the_usual_mode_under_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    _commit({"--output": tmp_path / "new.json"}, {"--output": "{}\n"})
    assert _mode(tmp_path / "new.json") == mode
    assert (tmp_path / "new.json").read_text() == "{}\n"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o755])
def test_an_existing_file_keeps_its_mode(tmp_path, umask, mode):
    umask(0o077)
    path = tmp_path / "old.json"
    path.write_text("old")
    path.chmod(mode)
    _commit({"--output": path}, {"--output": "new"})
    assert path.read_text() == "new" and _mode(path) == mode


def test_an_existing_file_is_replaced_not_rewritten(tmp_path):
    """Atomic replacement: a reader holding the old file keeps reading the old contents."""
    path = tmp_path / "plan.json"
    path.write_text("old contents")
    with open(path) as reader:
        _commit({"--output": path}, {"--output": "new contents"})
        assert reader.read() == "old contents"
    assert path.read_text() == "new contents"


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o604)
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    _commit({"--output": link}, {"--output": "new"})
    assert link.is_symlink() and os.readlink(link) == "real.json"
    assert real.read_text() == "new" and _mode(real) == 0o604
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_chain_of_links_and_a_dangling_link(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("sub/c.json")  # dangling: c.json does not exist yet
    _commit({"--output": tmp_path / "a"}, {"--output": "x"})
    assert (tmp_path / "a").is_symlink() and (tmp_path / "b").is_symlink()
    assert (tmp_path / "sub" / "c.json").read_text() == "x"


def _read_fifo(path: Path, into: list) -> threading.Thread:
    def run():
        with open(path, "rb") as fh:
            into.append(fh.read())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("via_link", [False, True])
def test_a_fifo_is_written_as_a_stream_not_replaced(tmp_path, via_link):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    path = tmp_path / "link" if via_link else fifo
    if via_link:
        path.symlink_to("pipe")
    assert target("--output", path).kind == "stream"
    got: list = []
    reader = _read_fifo(fifo, got)
    _commit({"--output": path}, {"--output": "streamed\n"})
    reader.join(10)
    assert got == [b"streamed\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO
    assert not via_link or (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["pipe"] + (["link"] if via_link else []))


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_as_root_a_character_device_is_written_not_replaced(tmp_path):
    """A private null device (major 1, minor 3, like /dev/null) in a temporary folder."""
    dev = tmp_path / "null"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    _commit({"--output": dev}, {"--output": "discarded"})
    assert stat.S_ISCHR(os.lstat(dev).st_mode) and os.lstat(dev).st_rdev == os.makedev(1, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["null"]


def test_dash_is_standard_output(tmp_path):
    seen = []
    outs = Outputs({"--output": "-", "--csv": tmp_path / "x.csv"})
    assert outs.stdout_taken
    outs.commit({"--output": "json", "--csv": "a,b\n"}, stdout=seen.append)
    assert seen == ["json"] and (tmp_path / "x.csv").read_text() == "a,b\n"


@pytest.mark.parametrize("make, fragment", [
    (lambda p: p.mkdir() or p, "is a folder"),
    (lambda p: p / "missing" / "x.json", "does not exist"),
    (lambda p: (p.write_text("") or p) / "x.json", "Not a directory"),
    (lambda p: (os.symlink(p, p) or p), "symbolic links"),
])
def test_paths_that_cannot_be_written_are_one_line_errors(tmp_path, make, fragment):
    path = make(tmp_path / "t")
    with pytest.raises(BtacalcError) as exc:
        Outputs({"--output": path})
    assert fragment in str(exc.value) and "--output" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_an_unwritable_folder_is_an_error(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(BtacalcError, match="not writable"):
            Outputs({"--output": folder / "x.json"})
    finally:
        folder.chmod(0o755)


def test_a_folder_that_refuses_files_is_an_error_even_as_root():
    """/proc accepts no new files, whoever asks."""
    with pytest.raises(BtacalcError, match="cannot create a file in /proc"):
        _commit({"--output": "/proc/btacalc-test.json"}, {"--output": "x"})


def test_the_same_file_twice_or_two_outputs_on_stdout(tmp_path):
    (tmp_path / "link").symlink_to("x.json")
    with pytest.raises(BtacalcError, match="--csv and --output both write to"):
        Outputs({"--csv": tmp_path / "x.json", "--output": tmp_path / "link"})
    with pytest.raises(BtacalcError, match="standard output"):
        Outputs({"--output": "-", "--json": "-"})


def _listing(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir()}


@pytest.fixture
def three(tmp_path):
    """Three targets: two existing files (one through a link) and one new file."""
    (tmp_path / "a.csv").write_text("old a")
    (tmp_path / "real.json").write_text("old real")
    (tmp_path / "b.json").symlink_to("real.json")
    paths = {"--csv": tmp_path / "a.csv", "--output": tmp_path / "b.json", "--plot": tmp_path / "c.png"}
    payloads = {"--csv": "new a", "--output": "new b", "--plot": b"new c"}
    return tmp_path, paths, payloads


def test_all_outputs_are_written_together(three):
    folder, paths, payloads = three
    _commit(paths, payloads)
    assert _listing(folder) == {"a.csv": "new a", "real.json": "new b", "b.json": "new b", "c.png": "new c"}


def _disk_full(_=None):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("where", ["stdout", "finish", "second rename", "interrupt"])
def test_a_late_failure_leaves_everything_as_it_was(three, monkeypatch, where):
    folder, paths, payloads = three
    before = _listing(folder)
    kw: dict = {}
    expected: type[BaseException] = BtacalcError
    if where == "stdout":
        paths = {**paths, "--json": "-"}
        payloads = {**payloads, "--json": "{}"}
        kw["stdout"] = _disk_full  # reported naming --json
    elif where == "finish":
        kw["finish"] = _disk_full
        expected = OSError
    elif where == "interrupt":
        def interrupt():
            raise KeyboardInterrupt
        kw["finish"] = interrupt
        expected = KeyboardInterrupt
    else:
        real_replace, calls = os.replace, []

        def flaky(src, dst):
            calls.append(dst)
            if len(calls) == 2:
                _disk_full()
            return real_replace(src, dst)
        monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(expected):
        _commit(paths, payloads, **kw)
    monkeypatch.undo()
    assert _listing(folder) == before  # earlier targets restored, the new one absent, no temporary file
    assert (folder / "b.json").is_symlink()


def test_a_failing_stage_writes_nothing(three, monkeypatch):
    folder, paths, payloads = three
    before = _listing(folder)
    real_fdopen, calls = os.fdopen, []

    def full_on_second(fd, *args, **kw):
        calls.append(fd)
        fh = real_fdopen(fd, *args, **kw)
        if len(calls) == 2:
            fh.write = _disk_full
        return fh
    monkeypatch.setattr(os, "fdopen", full_on_second)
    with pytest.raises(BtacalcError, match="--output .*No space left on device"):
        _commit(paths, payloads)
    monkeypatch.undo()
    assert _listing(folder) == before


def test_a_missing_payload_is_a_programming_error(tmp_path):
    with pytest.raises(ValueError, match="no payload"):
        _commit({"--output": tmp_path / "x"}, {})
    assert list(tmp_path.iterdir()) == []
