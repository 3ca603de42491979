"""Writing output files without damaging what was there.

Every file a command writes (`--output`, `--csv`, `--plot`) goes through `Outputs`:

- a regular file (or a new one) is written to a temporary file in the same folder and renamed over
  the target (atomic); an existing file keeps its mode (and, where permitted, its owner), a new one
  gets 0666 under the umask, like any file a shell redirection creates;
- a symbolic link is followed: its target is replaced atomically and the link stays a link;
- a character device, a FIFO, `/dev/stdout`, `/dev/fd/N` and `-` (standard output) are streams,
  written in place, never replaced (as root, `--output /dev/null` must not turn the device into a file);
- a folder, a block device, a socket, a missing or unwritable folder is a one-line `BtacalcError`;
- several outputs are all-or-nothing: every file is staged (written to its temporary file) before
  any target is touched, streams are written next, and the renames come last; if anything fails,
  the targets already replaced are restored from hard-link backups and nothing is left behind.

Targets are checked when `Outputs` is built, before a command starts its work, and again on commit.
"""

from __future__ import annotations

import errno
import os
import contextlib
import secrets
import shutil
import signal
import stat
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Mapping, Optional, Union

from ..errors import BtacalcError
from ..paths import inputs_read, own_files, own_folders, stdout_file, stdout_onto, stdout_onto_own_file
from ..starting import STOPPING_NAMES

PathLike = Union[str, "os.PathLike[str]"]
Payload = Union[str, bytes]
STDOUT = "-"
_MAX_LINKS = 40  # symlink hops followed before calling it a loop (Linux's own limit)


@dataclass(frozen=True)
class Target:
    """Where one output goes: `stdout`, a `stream` (device, FIFO) or a `file` (replaced atomically)."""

    flag: str
    given: str
    kind: Literal["stdout", "stream", "file"]
    path: str  # the file or stream written (symlinks resolved for files)

    def fail(self, why: str) -> BtacalcError:
        return BtacalcError(f"{self.flag} {self.given}: {why}")


_STOPPING = tuple(getattr(signal, n) for n in STOPPING_NAMES if hasattr(signal, n))


@contextlib.contextmanager
def _signal_mask(how: int) -> Iterator[None]:
    """The stopping signals blocked (SIG_BLOCK) or unblocked (SIG_UNBLOCK) inside the block, the mask restored after."""
    try:
        old = signal.pthread_sigmask(how, _STOPPING)
    except (AttributeError, ValueError, OSError):  # no pthread_sigmask here
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def held() -> "contextlib.AbstractContextManager[None]":
    """Signals that stop a command are held (blocked, then delivered) while a temporary file is created
    and recorded, or while files are renamed or restored: a stop between creating a file and noting it
    would leave it behind, one in the middle of the renames would leave half the outputs replaced."""
    return _signal_mask(signal.SIG_BLOCK)


def released() -> "contextlib.AbstractContextManager[None]":
    """Inside `held()`, the stopping signals unblocked again for one call that may wait without end: opening a FIFO
    that no process reads yet waits for a reader (hostile15: `sweep --csv fifo` with no reader could not be stopped
    by Ctrl-C or SIGTERM, only by SIGKILL, as its streams are opened while the signals are held). A stop delivered
    here raises in the call, and the caller's cleanup runs."""
    return _signal_mask(signal.SIG_UNBLOCK)


def _open_stream(path: str) -> int:
    """A device or FIFO opened for writing in place (no O_CREAT, no O_TRUNC; O_APPEND keeps whatever a /dev/fd link's
    file already holds), with the stopping signals free while a FIFO waits for its reader."""
    with released():
        return os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOCTTY", 0))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _same_as_stdout(st: os.stat_result) -> bool:
    """`st` is standard output's file, other than the null device: what goes to /dev/null twice collides with
    nothing (with standard output closed or sent there, `--json -o /dev/null` was refused as two writers of one
    stream)."""
    try:
        return os.path.samestat(st, os.fstat(1)) and not _is_null_device(st)
    except OSError:
        return False


def _is_null_device(st: os.stat_result) -> bool:
    """`st` is the null device, by whatever name it was reached (its device number, not its path)."""
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and stat.S_ISCHR(null.st_mode) and st.st_rdev == null.st_rdev


def _is_null_path(path: str) -> bool:
    try:
        return _is_null_device(os.stat(path))
    except OSError:
        return False


def _through_fd_link(path: str) -> bool:
    """True when the symlink chain of `path` passes through /proc/.../fd or /dev/fd (e.g. /dev/stdout):
    the file behind such a link is another process's open file, written as a stream."""
    p = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        if p.startswith(("/proc/", "/dev/fd/")):
            return True
        if not os.path.islink(p):
            return False
        p = os.path.join(os.path.dirname(p), os.readlink(p))
    return False


def target(flag: str, given: PathLike) -> Target:
    """Classify an output path; a path that cannot be written is a one-line error naming `flag`."""
    text = os.fspath(given)
    if text == STDOUT:
        return Target(flag, text, "stdout", text)
    if not text or "\0" in text:
        raise BtacalcError(f"{flag} {text!r}: not a file name")
    where = Target(flag, text, "file", text)
    if os.path.basename(text.rstrip("/") if text.endswith("/.") else text) in ("", ".", ".."):
        raise where.fail("names a folder (., .. or a trailing slash); give a file name")
    if not os.path.isabs(text) and not working_folder_exists():
        raise where.fail("the working folder no longer exists (it was deleted); give an absolute path")
    try:
        st: Optional[os.stat_result] = os.stat(text)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise where.fail(exc.strerror or str(exc)) from None
    if st is not None:
        if _same_as_stdout(st):
            return Target(flag, text, "stdout", STDOUT)
        if stat.S_ISDIR(st.st_mode):
            raise where.fail("is a folder; give a file name")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode) or (
                stat.S_ISREG(st.st_mode) and _through_fd_link(text)):
            return Target(flag, text, "stream", text)
        if not stat.S_ISREG(st.st_mode):
            raise where.fail("is not a regular file, a FIFO or a character device")
    real = os.path.realpath(text)
    folder = os.path.dirname(real) or "."
    if not os.path.isdir(folder):
        raise where.fail(f"folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise where.fail(f"folder {folder} is not writable")
    if st is not None and _sticky_and_foreign(folder, st):
        raise where.fail(f"belongs to another user in the shared folder {folder} (sticky: only its owner may "
                         "replace it)")
    return Target(flag, text, "file", real)


def _sticky_and_foreign(folder: str, st: os.stat_result) -> bool:
    """Whether renaming over the file is refused: a sticky folder (a shared /tmp) lets only the file's or
    the folder's owner (or root) replace or remove it."""
    me = os.geteuid()
    try:
        dst = os.stat(folder)
    except OSError:
        return False
    return bool(dst.st_mode & stat.S_ISVTX) and me != 0 and me not in (st.st_uid, dst.st_uid)


def working_folder_exists() -> bool:
    """Whether the current folder still exists (a shell may sit in a folder deleted under it): the one check, for
    an output path (`target`) and for an unnamed OSError (cli/app.py). Another OSError of getcwd (EACCES: a parent
    folder unreadable) is no deleted folder."""
    try:
        os.getcwd()
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return True


def _identity(path: str) -> Any:
    """What makes two paths the same file: its device and inode when it exists (hard links too),
    else the resolved path."""
    try:
        st = os.stat(path)
    except OSError:
        return os.path.normcase(path)
    return ("inode", st.st_dev, st.st_ino)


def _new_temp(t: Target) -> tuple[int, str]:
    """A new temporary file beside the target: (descriptor, path)."""
    folder, name = os.path.split(t.path)
    try:  # the name is shortened so that the temporary one stays within the file-name limit (255)
        return tempfile.mkstemp(prefix=f".{name[:200]}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise t.fail(f"cannot create a file in {folder}: {exc.strerror or exc}") from None


def _adopt_mode(t: Target, tmp: str) -> None:
    """Give the temporary file the target's mode (and owner, where permitted), or a new file's."""
    try:
        old: Optional[os.stat_result] = os.stat(t.path)
    except FileNotFoundError:
        old = None
    os.chmod(tmp, stat.S_IMODE(old.st_mode) if old else 0o666 & ~_umask())
    if old is not None and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.chown(tmp, old.st_uid, old.st_gid)
        except OSError:  # not permitted: the file becomes ours, as with any editor's save
            pass


def _stage(t: Target, data: bytes) -> str:
    """Write `data` to a new temporary file beside the target, with the target's mode; return its path."""
    fd, tmp = _new_temp(t)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _adopt_mode(t, tmp)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _backup(path: str) -> Optional[str]:
    """A hard link (else a copy) of an existing file, to restore it if the commit fails."""
    if not os.path.exists(path):
        return None
    folder, name = os.path.split(path)
    while True:
        backup = os.path.join(folder, f".{name[:200]}.{secrets.token_hex(6)}.bak")
        try:
            os.link(path, backup)
            return backup
        except FileExistsError:
            continue
        except OSError:  # no hard links here (or not permitted): a copy
            try:
                shutil.copy2(path, backup)
            except BaseException:
                if os.path.exists(backup):
                    os.unlink(backup)
                raise
            return backup


def _write_stream(t: Target, data: bytes) -> None:
    fd = _open_stream(t.path)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _guarded_write(t: Target, write: Callable[[str], object]) -> Callable[[str], object]:
    """`write`, with a failure (a full disk, a closed FIFO) reported as one error naming the flag."""
    def guarded(text: str) -> object:
        try:
            return write(text)
        except OSError as exc:
            raise t.fail(f"cannot write: {exc.strerror or exc}") from None
    return guarded


def _bytes(data: Payload) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


class Streams:
    """Writers for some outputs that are produced piece by piece (a streamed sweep): a file target is
    written to its temporary file (renamed into place by `Outputs.commit`, with the other outputs,
    or removed if the command fails); a stream or standard output is written as the pieces come."""

    def __init__(self, outs: "Outputs", flags: tuple[str, ...], stdout: Callable[[str], None]):
        self.staged: dict[str, str] = {}
        self.writers: dict[str, Callable[[str], object]] = {}
        self._handles: list[tuple[Target, Any]] = []
        try:
            for flag in flags:
                t = outs.targets.get(flag)
                if t is None:
                    continue
                if t.kind == "file":
                    with held():
                        fd, tmp = _new_temp(t)
                        self.staged[flag] = tmp
                    fh = os.fdopen(fd, "w", encoding="utf-8")
                elif t.kind == "stream":
                    fh = os.fdopen(_open_stream(t.path), "w", encoding="utf-8")
                else:
                    self.writers[flag] = stdout
                    continue
                self._handles.append((t, fh))
                self.writers[flag] = _guarded_write(t, fh.write)
        except BaseException:
            self.discard()
            raise

    def close(self) -> None:
        """Flush and close every file (to disk for the staged ones). A file that cannot be written (a
        full disk) removes every staged file and is one error naming its flag."""
        for t, fh in self._handles:
            if fh.closed:
                continue
            try:
                fh.flush()
                try:
                    os.fsync(fh.fileno())
                except OSError as exc:  # a stream (pipe, device) cannot be synced; a full disk can fail here
                    if exc.errno not in (errno.EINVAL, errno.EROFS, errno.ENOTSUP):
                        raise
                fh.close()
            except OSError as exc:
                self.discard()
                raise t.fail(f"cannot write: {exc.strerror or exc}") from None

    def discard(self) -> None:
        """Close everything and remove the staged files (the command failed)."""
        with held():
            self._discard()

    def _discard(self) -> None:
        for _, fh in self._handles:
            try:
                fh.close()
            except OSError:
                pass
        for tmp in self.staged.values():
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        self.staged = {}


class Outputs:
    """The outputs of one command, checked now and written together by `commit` (all-or-nothing).

    `paths` maps a flag to its path (None: not asked for; "-": standard output); `labels` names the option a
    user gave where a flag stands for another (plan's `--emit` and `--schema` print on the `--json` stream)."""

    def __init__(self, paths: Mapping[str, Optional[PathLike]], inputs: Mapping[str, PathLike] = {},
                 labels: Mapping[str, str] = {}, own_data: bool = False):
        self.targets = {flag: target(flag, p) for flag, p in paths.items() if p is not None}
        self.inputs = {flag: os.fspath(p) for flag, p in inputs.items()}
        # the targets are btacalc's own data files, written on purpose (`validate --calibrate` puts the fitted
        # factors into the built-in profiles): the refusal of its own files is off, the rest holds
        self.own_data = own_data
        self.check_inputs()
        seen: dict[Any, str] = {}
        for flag, t in self.targets.items():
            if t.kind == "stream" and _is_null_path(t.path):
                continue  # hostile26: `--csv /dev/null -o /dev/null` discards both; nothing there to collide
            key = t.path if t.kind != "file" else _identity(t.path)
            if key in seen:
                what = "standard output" if t.kind == "stdout" else t.path
                raise BtacalcError(f"{seen[key]} and {labels.get(flag, flag)} both write to {what}; give each its own "
                                   "file")
            seen[key] = labels.get(flag, flag)

    def check_inputs(self) -> None:
        """No output file may be a file this command reads: the inputs declared (`--model`, `--hw`,
        `--measured`) and every file read so far (`paths.read_input`), compared by device and inode, so
        a symbolic or hard link to an input is the input."""
        read = inputs_read()
        for flag, given in self.inputs.items():
            try:
                st = os.stat(given)
            except OSError:
                continue
            read.setdefault((st.st_dev, st.st_ino), f"{flag} {given}")
        own: Optional[dict[tuple[int, int], str]] = None
        out = stdout_file()
        if out is not None:  # hostile16: `btacalc ... >> input` (the shell's redirection: no --output names it)
            source = read.get((out.st_dev, out.st_ino))
            refusal = f"{source}: {stdout_onto(out)}" if source is not None else stdout_onto_own_file()
            if refusal is not None:
                raise BtacalcError(refusal)
        for t in self.targets.values():
            try:
                st = os.stat(t.path)
            except OSError:
                self._check_new_file(t)
                continue
            source = read.get((st.st_dev, st.st_ino))
            if source is not None:
                raise t.fail(f"is an input of this command ({source}); btacalc never writes over what it reads")
            if t.kind == "file" and not self.own_data:
                own = own_files() if own is None else own
                shipped = own.get((st.st_dev, st.st_ino))
                if shipped is not None:
                    raise t.fail(f"is one of btacalc's own files ({shipped}); btacalc never writes over its own "
                                 "code or data")

    def _check_new_file(self, t: Target) -> None:
        """A new file may not be created in a folder of btacalc's own files (`paths.own_folders`): every later command
        would read it as a formula, a profile or a preset."""
        if t.kind != "file" or self.own_data:
            return
        try:
            parent = os.stat(os.path.dirname(os.path.abspath(t.path)))
        except OSError:
            return
        folder = own_folders().get((parent.st_dev, parent.st_ino))
        if folder is not None:
            raise t.fail(f"is in one of btacalc's own folders ({folder}), whose files every command reads; write it "
                         "elsewhere")

    @property
    def stdout_taken(self) -> bool:
        """Whether an output goes to standard output (then nothing else should be printed there)."""
        return any(t.kind == "stdout" for t in self.targets.values())

    def streams(self, flags: tuple[str, ...], stdout: Callable[[str], None]) -> Streams:
        """Writers for `flags` (those asked for) whose content comes piece by piece; give the result to
        `commit` as `streamed`, or `discard` it."""
        return Streams(self, flags, stdout)

    def commit(self, payloads: Mapping[str, Payload], stdout: Callable[[Payload], None],
               finish: Optional[Callable[[], None]] = None, streamed: Optional[Streams] = None) -> None:
        """Write each flag's payload: stage the files, write streams and standard output (through
        `stdout`), call `finish` (more standard output), then rename the files into place. Flags in
        `streamed` were written already (their staged files are renamed with the others)."""
        done_flags = set(streamed.writers) if streamed is not None else set()
        prestaged = dict(streamed.staged) if streamed is not None else {}
        if streamed is not None:
            streamed.close()
        missing = set(self.targets) - set(payloads) - done_flags
        if missing:
            raise ValueError(f"no payload for {sorted(missing)}")
        targets = {flag: target(t.flag, t.given) for flag, t in self.targets.items()}  # again: it may have changed
        self.check_inputs()  # and against the files read during the work (a model file a run names)
        temps: list[str] = list(prestaged.values())
        done: list[tuple[str, Optional[str]]] = []  # (replaced path, backup)
        current = next(iter(targets.values()), None)
        try:
            staged = []
            for flag, t in targets.items():
                current = t
                if t.kind == "file":
                    with held():
                        if flag in prestaged:
                            tmp = prestaged[flag]
                            _adopt_mode(t, tmp)
                        else:
                            tmp = _stage(t, _bytes(payloads[flag]))
                            temps.append(tmp)
                        backup = _backup(t.path)
                        if backup:
                            temps.append(backup)
                        staged.append((t, tmp, backup))
            for flag, t in targets.items():
                current = t
                if flag in done_flags:
                    continue
                if t.kind == "stream":
                    _write_stream(t, _bytes(payloads[flag]))
                elif t.kind == "stdout":
                    stdout(payloads[flag])
            current = None
            if finish is not None:
                finish()
            with held():
                for t, tmp, backup in staged:
                    current = t
                    os.replace(tmp, t.path)
                    done.append((t.path, backup))
        except BaseException as exc:
            with held():
                self._undo(done)
            if isinstance(exc, OSError) and current is not None:
                raise current.fail(f"cannot write: {exc.strerror or exc}") from None
            raise
        finally:
            with held():
                for path in temps:
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass

    @staticmethod
    def _undo(done: list[tuple[str, Optional[str]]]) -> None:
        for path, backup in reversed(done):
            if backup is not None:
                os.replace(backup, path)
            else:
                os.unlink(path)
