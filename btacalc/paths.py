"""Where the shipped data folders live.

In an installed wheel the catalogue and the profiles are inside the package (``btacalc/_data/...``,
see pyproject.toml); in a source checkout they are the top-level ``formulas/`` and
``hardware_profiles/`` folders. Presets, published points and measured runs live in ``btacalc/data``.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the folder of shipped data `name` ('formulas' or 'hardware_profiles')."""
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"btacalc data folder {name!r} not found (looked in {_PKG / '_data'} and {_PKG.parent})")


def presets_dir() -> Path:
    return _PKG / "data" / "presets"


def preset_names() -> list[str]:
    """Built-in model presets (btacalc/data/presets/*.toml), sorted: the names `--model` takes."""
    return sorted(p.stem for p in presets_dir().glob("*.toml"))


def profile_names() -> list[str]:
    """Built-in hardware profiles (hardware_profiles/*.toml), sorted: the names `--hw` takes."""
    return sorted(p.stem for p in data_dir("hardware_profiles").glob("*.toml"))


def package_data(name: str) -> Path:
    """A data file that ships inside the package (btacalc/data/NAME)."""
    return _PKG / "data" / name


# ---------------------------------------------------------------------------------------------------
# Input files: read with a size cap checked before the read, and remembered for the command's outputs

# The largest input file btacalc reads (a config.json, a profile .toml, a run file): 16 MiB. The
# largest shipped file is a few hundred kilobytes; a config.json is a few kilobytes.
MAX_INPUT_BYTES = 16 << 20

_READ: dict[tuple[int, int], str] = {}  # (device, inode) -> the path as given, of every input read
_STDIN_READ_BY: list[str] = []  # the option that read standard input in this command (hostile15)
BOM = "\ufeff"  # a UTF-8 byte-order mark, as Windows editors write it at a file's start


def forget_inputs() -> None:
    """Start a new command: no input read yet (tests run many commands in one process)."""
    _READ.clear()
    _STDIN_READ_BY.clear()
    _STDERR_ONTO.clear()


def note_input(path: "os.PathLike[str] | str") -> None:
    """Remember `path` (through its symbolic links) as read by this command: no output may replace it."""
    try:
        st = os.stat(path)
    except OSError:
        return
    _READ[(st.st_dev, st.st_ino)] = os.fspath(path)


def inputs_read() -> dict[tuple[int, int], str]:
    """The (device, inode) -> path of every input this command has read so far."""
    return dict(_READ)


def _own_folders_list() -> "list[Path]":
    """The folders of btacalc's own files: the package, and in a source checkout the shipped formulas and hardware
    profiles."""
    return [_PKG] + [d for d in (_PKG.parent / "formulas", _PKG.parent / "hardware_profiles")
                     if d.is_dir() and d == _source_data(d.name)]


def own_folders() -> dict[tuple[int, int], str]:
    """The (device, inode) -> path of every folder of btacalc's own files and the folders below them (hostile26: an
    output written there as a new file, `-o formulas/zzz.toml`, was read by every later command as a formula file and
    broke it: `own_files` covers the files that exist)."""
    return _identities(root for folder in _own_folders_list() for root, _, _ in os.walk(folder))


def own_files() -> dict[tuple[int, int], str]:
    """The (device, inode) -> path of btacalc's own files: the package (its code and btacalc/data: presets,
    measured runs, calibration), the shipped formulas and hardware profiles, and in a source checkout the
    README the tests execute. Every command reads some of them by name (`--hw wse3` is
    hardware_profiles/wse3.toml, `validate` reads btacalc/data/measured_runs.json), none of them through a
    path the user gave, so `note_input` never sees them; an output onto one would break every later
    command. About 200 files, listed in about a millisecond, only when an output target already exists."""
    folders = _own_folders_list()
    files = [os.path.join(root, name) for folder in folders for root, _, names in os.walk(folder) for name in names]
    if len(folders) > 1:  # a source checkout
        files.append(os.fspath(_PKG.parent / "README.md"))
    return _identities(files)


def _identities(paths: "Iterable[str]") -> dict[tuple[int, int], str]:
    """(device, inode) -> the first of `paths` that is it (a path that cannot be read is left out)."""
    out: dict[tuple[int, int], str] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.setdefault((st.st_dev, st.st_ino), os.fspath(path))
    return out


def _source_data(name: str) -> "Path | None":
    try:
        return data_dir(name)
    except FileNotFoundError:
        return None


def _regular_file_on(fd: int) -> "os.stat_result | None":
    """The regular file descriptor `fd` writes to (a shell's `> file`, `>> file`, `2>> file`), else None (a
    terminal, a pipe, /dev/null, closed)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def stdout_file() -> "os.stat_result | None":
    """The regular file standard output writes to, else None (`_regular_file_on`)."""
    return _regular_file_on(1)


def stdout_onto(st: os.stat_result) -> "str | None":
    """The one rule for standard output that a shell's `>` or `>>` points at a file btacalc reads or ships
    (hostile16: `btacalc plan --from-megatron run.sh >> run.sh` appended the plan to the launch it read; `>` emptied
    it first, and the empty file was refused naming no cause): the refusal, worded once, when standard output writes
    to `st`, else None. `read_input` asks it of each file as it is read, `Outputs.check_inputs` of the inputs
    declared and btacalc's own files; each puts the file's name in front."""
    out = stdout_file()
    if out is None or not os.path.samestat(out, st):
        return None
    emptied = " (empty: a shell's > emptied it before btacalc started)" if st.st_size == 0 else ""
    return ("standard output is redirected onto this file (a shell's > or >> names it)" + emptied + ": btacalc never "
            "writes over its inputs or its own files; send the output to another file")


def stdout_onto_own_file() -> "str | None":
    """`stdout_onto`'s refusal, the file named, when standard output is one of btacalc's own files (`own_files`),
    else None. hostile19: only the commands that write through `Outputs` asked; `btacalc models list >>
    btacalc/cli/app.py` (also `hw`, `formulas`, `--version`, `--help`) appended to btacalc's own code."""
    out = stdout_file()
    shipped = None if out is None else own_files().get((out.st_dev, out.st_ino))
    refusal = None if out is None or shipped is None else stdout_onto(out)
    return None if refusal is None else f"{shipped} (one of btacalc's own files): {refusal}"


def _refuse_stdout_onto(st: os.stat_result, where: str) -> None:
    """`stdout_onto` as the OSError an input reader raises (its caller puts `where` in front)."""
    refusal = stdout_onto(st)
    if refusal is not None:
        raise OSError(errno.EINVAL, refusal, where)


_STDERR_ONTO: list[str] = []  # the input standard error was redirected onto, once it was turned away (hostile17)


def stderr_onto_input() -> "str | None":
    """The input standard error was redirected onto (`2>> run.sh`), once `_divert_stderr` turned it away, else None."""
    return _STDERR_ONTO[0] if _STDERR_ONTO else None


def _divert_stderr(where: str) -> None:
    """hostile17: `btacalc plan --from-megatron run.sh 2>> run.sh` appended its one-line error (and any note) to the
    launch it read. Standard error is pointed elsewhere before btacalc writes to it: at the terminal standard output
    shows, if it is one, else at /dev/null (the exit code still tells). The input is never written."""
    if _STDERR_ONTO:
        return
    try:
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass
    target = 1 if os.isatty(1) else os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(target, 2)
    finally:
        if target != 1:
            os.close(target)
    _STDERR_ONTO.append(where)


def _guard_stderr(st: os.stat_result, where: str) -> None:
    """Standard error turned away from `st`, an input about to be read, if it is the file standard error writes to."""
    err = _regular_file_on(2)
    if err is not None and os.path.samestat(err, st):
        _divert_stderr(where)


# The options whose value is a file btacalc writes (output/files.py `Outputs`): naming standard error's file there
# asks for the output on it, so it is no input to protect (hostile26: `plan -o /dev/stderr 2> plan.json` wrote an
# empty plan.json, standard error sent to /dev/null)
OUTPUT_OPTIONS = ("-o", "--output", "--csv", "--plot")
# the short options that take a value (-m model, -n devices, -p phase): in a cluster the rest is theirs, not -o's
_SHORT_VALUED = frozenset("mnp")


def _short_output(word: str) -> "tuple[bool, bool]":
    """A cluster of short options (`-qo`, `-qoFILE`): (its -o takes the next word, its -o's value is in the word).
    click reads the letters in turn; a value-taking one ends the cluster."""
    for i, letter in enumerate(word[1:], 1):
        if letter == "o":
            return i == len(word) - 1, i < len(word) - 1
        if letter in _SHORT_VALUED:
            break
    return False, False


def _named_files(args: "list[str]") -> "list[str]":
    """The words of the command line that may name a file it reads: every word and `--flag=value` value, less the
    values of `OUTPUT_OPTIONS` (`-o FILE`, `-qo FILE`, `-oFILE`, `--output=FILE`)."""
    out: list[str] = []
    after_output = False
    for word in args:
        if after_output:
            after_output = False
            continue
        if word in OUTPUT_OPTIONS[1:]:
            after_output = True
            continue
        flag, eq, value = word.partition("=")
        if eq and flag in OUTPUT_OPTIONS[1:]:
            continue
        if word.startswith("-") and not word.startswith("--") and len(word) > 1:
            next_word, in_word = _short_output(word)
            after_output = next_word
            if next_word or in_word:
                continue
        out += [w for w in {word, value if word.startswith("-") else ""} if w not in ("", "-")]
    return out


def guard_stderr(args: "list[str]") -> None:
    """Before a command runs (its inputs not yet read: a usage error comes first): standard error turned away from
    a regular file that the command line names (a word, or the value of `--flag=value`; not an output option's
    value, `_named_files`), that standard input is when the command line reads `-`, or that is one of btacalc's own
    files."""
    err = _regular_file_on(2)
    if err is None:
        return
    for given in _named_files(args):
        try:
            if os.path.samestat(os.stat(given), err):
                return _divert_stderr(given)
        except (OSError, ValueError):  # no such file, a name too long, a NUL byte
            continue
    if "-" in args:
        try:
            if os.path.samestat(os.fstat(0), err):
                return _divert_stderr("- (standard input)")
        except OSError:
            pass
    shipped = own_files().get((err.st_dev, err.st_ino))
    if shipped is not None:
        _divert_stderr(shipped)


def read_input(path: "os.PathLike[str] | str", limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a user's input file. Its type and size are checked on the open file before
    any byte is read (a FIFO or a device never blocks, a 1 GiB file is never read); a refusal is an
    OSError whose `strerror` says why (callers put it in their one-line error)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file" + _stdin_hint(st), os.fspath(path))
        _guard_stderr(st, os.fspath(path))  # first: the refusal below is written to standard error
        _refuse_stdout_onto(st, os.fspath(path))
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB ({st.st_size:,} bytes)", os.fspath(path))
        data = os.read(fd, limit + 1) if st.st_size == 0 else read_all(fd, limit)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew since the stat
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", os.fspath(path))
    _READ[(st.st_dev, st.st_ino)] = os.fspath(path)
    return utf8_text(data, os.fspath(path))


def _stdin_hint(st: os.stat_result) -> str:
    """For a refused pipe or terminal that is standard input (`cat run.sh | btacalc ... --from-megatron /dev/stdin`):
    how to read it (hostile20: "not a regular file" alone)."""
    try:
        return " (it is standard input: give - to read it)" if os.path.samestat(st, os.fstat(0)) else ""
    except OSError:
        return ""


def utf8_text(data: bytes, where: str) -> str:
    """`data` as UTF-8 text; a leading byte-order mark is dropped (hostile15: TOML's and JSON's parsers refuse it with
    "Invalid statement" / "Unexpected UTF-8 BOM", a Hydra file quoted it back as part of its first line); text that
    is not UTF-8 (UTF-16, binary) is an OSError naming the first bad byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OSError(errno.EILSEQ, f"not UTF-8 text (byte {exc.start})", where) from None
    if "\0" in text:  # hostile20: a launch read `--num-layers 3<NUL>2` as the value '3\x002', /proc/self/environ as text
        raise OSError(errno.EILSEQ, f"not text: a NUL byte (byte {data.index(0)})", where)
    return text.removeprefix(BOM)


def _note_stdin_file(stream: object, reader: str) -> None:
    """Standard input redirected from a file (`--from-megatron - < run.sh`) is that file, an input no output may
    replace (hostile15: `plan --from-megatron - -o run.sh < run.sh` wrote the plan over the launch it read). A pipe
    or a terminal is no file an output could name."""
    try:
        st = os.fstat(stream.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's StringIO), or a closed one
        return
    if stat.S_ISREG(st.st_mode):
        _guard_stderr(st, "- (standard input)")
        _refuse_stdout_onto(st, "-")
        _READ[(st.st_dev, st.st_ino)] = f"{reader} - (standard input)"


def read_stdin(limit: int, reader: str) -> str:
    """Standard input (`-` for an input file) as UTF-8 text, at most `limit` bytes, read by one option of a command:
    a second option given `-` would read nothing (hostile15: `--config - --from-megatron -` planned an empty launch),
    and a closed standard input (`<&-`) raised an internal error. A refusal is an OSError whose `strerror` says why."""
    if _STDIN_READ_BY:
        raise OSError(errno.EINVAL, f"standard input is read already by {_STDIN_READ_BY[0]}: give one of them a file",
                      "-")
    stream = sys.stdin
    if stream is None or getattr(stream, "closed", False):
        raise OSError(errno.EBADF, "standard input is closed", "-")
    _STDIN_READ_BY.append(reader)
    _note_stdin_file(stream, reader)
    binary = getattr(stream, "buffer", None)
    if binary is None:  # a text stream without bytes below it (tests put a StringIO there)
        text = stream.read(limit + 1)
        if len(text.encode("utf-8", "surrogatepass")) > limit:
            raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", "-")
        return text.removeprefix(BOM)
    data = binary.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", "-")
    return utf8_text(data, "-")


def read_all(fd: int, limit: int) -> bytes:
    """The bytes of the open file `fd` to its end, but at most `limit` + 1: more than `limit` says it is too large
    (the one bounded read of an input file and of the private catalogue cache, catalogue/cache.py)."""
    chunks, size = [], 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
