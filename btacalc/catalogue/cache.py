"""The on-disk cache of what btacalc derives from the formula catalogue: the validated catalogue
itself (a pickle) and the compiled numeric code of each selection (`compiled`).

Everything lives in ``$XDG_CACHE_HOME/btacalc/compiled/<fingerprint>/`` (``~/.cache`` when the
variable is unset or not absolute, as the XDG spec asks). The fingerprint hashes the catalogue files,
the code that reads them and derives the formulas, and the Python version, so an edited catalogue or
a new btacalc never reads a stale entry.

The cache cannot be poisoned. An entry is code (a marshalled code object) or a pickle, either of
which runs code when loaded, so nothing is loaded unless it is verified first:

- every entry carries an HMAC-SHA256 tag over the fingerprint, its name and its bytes, keyed by a
  random per-user secret (``btacalc/key`` in the cache root, mode 0600). A file another user (or
  another program) wrote or edited fails the check and is ignored and rewritten; the key itself is
  used only when it is a regular file owned by this user that no one else can read or write;
- an entry is read only when it is a regular file owned by this user (a FIFO, a device, a link is
  ignored; the file is opened without blocking and without following a link), at most 64 MiB;
- the folders are created 0700; a folder owned by someone else or writable by others is not used.

When the cache cannot be used (no home, an unreadable or unwritable folder, another user's HOME),
callers compute in memory: a cache is never a reason for a command to fail. Files are written
atomically (a temporary file renamed over the target).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import pickle
import secrets
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

from ..paths import data_dir, read_all

# The code whose changes alter what is derived from the catalogue (besides the catalogue files).
_SOURCES = ("catalogue/cache.py", "catalogue/selection.py", "catalogue/terms.py", "catalogue/compiled.py",
            "catalogue/constants.py", "vocabulary.py")
_MAGIC = b"BTACALC-CACHE-1\n"
_TAG_BYTES = 32  # HMAC-SHA256
MAX_ENTRY_BYTES = 64 << 20  # the largest entry is well under 1 MB


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """Hash of the formula files, of the code that reads them and derives the formulas, and of the
    Python version (marshalled code is specific to it)."""
    digest = hashlib.sha256(sys.version.encode() + b"\0")
    for path in sorted(data_dir("formulas").glob("*.toml")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    package = Path(__file__).resolve().parents[1]
    for name in _SOURCES:
        digest.update(name.encode() + b"\0" + (package / name).read_bytes())
    return digest.hexdigest()[:24]


def _root() -> Optional[Path]:
    base = os.environ.get("XDG_CACHE_HOME", "")
    try:
        root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    except (RuntimeError, KeyError):  # no home directory
        return None
    return root / "btacalc"


def cache_dir() -> Optional[Path]:
    """The cache folder of this catalogue; None when there is no home to put it in."""
    root = _root()
    return None if root is None else root / "compiled" / fingerprint()


def _private_folder(folder: Path) -> bool:
    """Create `folder` (0700) if missing; True when it is a folder of this user that others cannot write."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(folder, follow_symlinks=False)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            and os.access(folder, os.R_OK | os.W_OK | os.X_OK))


def _read_private(path: Path, limit: int) -> Optional[bytes]:
    """The bytes of `path` when it is a regular file of this user (not a link, FIFO or device), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > limit:
            return None
        data = read_all(fd, limit)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=4)
def _key(root: Path) -> Optional[bytes]:
    """The per-user secret of the cache at `root` (created on first use), or None when it cannot be
    trusted: not a regular file of this user, or readable or writable by others. A key of this user, private, that
    is not 32 bytes is what an interrupted creation left (hostile35: created empty, then stopped before its bytes
    were written, it turned the cache off for good, every later command compiling the formulas again): it is
    replaced."""
    if not _private_folder(root):
        return None
    path = root / "key"
    for _ in range(3):
        data = _read_private(path, 64)
        if data is not None:
            try:
                mode = os.stat(path, follow_symlinks=False).st_mode
            except OSError:
                return None
            if mode & 0o077:
                return None
            if len(data) == 32:
                return data
            try:
                os.unlink(path)
            except OSError:
                return None
            continue
        created = _create_key(path)
        if created is not None:
            return created
    return None


def _create_key(path: Path) -> Optional[bytes]:
    """A new key at `path`, written whole to a private temporary file first and linked into place, so that `path`
    never holds part of a key (hostile35: it was opened at `path` and then written, so a stop or a full disk in
    between left it empty, and the full disk's error reached the command); None when another process linked its key
    first (the caller reads that one) or the folder cannot hold it (the cache is then not used)."""
    key = secrets.token_bytes(32)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".key.", suffix=".tmp", dir=path.parent)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
        os.link(tmp, path)  # fails if a key is there: two processes racing agree on one
        return key
    except OSError:
        return None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _usable() -> Optional[tuple[Path, bytes]]:
    """The cache folder and its key, when both can be trusted."""
    root, folder = _root(), cache_dir()
    if root is None or folder is None:
        return None
    key = _key(root)
    if key is None or not (_private_folder(root / "compiled") and _private_folder(folder)):
        return None
    return folder, key


def _tag(key: bytes, name: str, payload: bytes) -> bytes:
    return hmac.new(key, fingerprint().encode() + b"\0" + name.encode() + b"\0" + payload, hashlib.sha256).digest()


def read_entry(name: str) -> Optional[bytes]:
    """The verified bytes of cache entry `name`, or None (absent, not a regular file of this user,
    damaged, or written by anyone without this user's key)."""
    usable = _usable()
    if usable is None:
        return None
    folder, key = usable
    data = _read_private(folder / name, MAX_ENTRY_BYTES)
    if data is None or not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + _TAG_BYTES:
        return None
    tag, payload = data[len(_MAGIC):len(_MAGIC) + _TAG_BYTES], data[len(_MAGIC) + _TAG_BYTES:]
    return payload if hmac.compare_digest(tag, _tag(key, name, payload)) else None


def write_entry(name: str, payload: bytes) -> None:
    """Store `payload` as entry `name` with its tag (atomically); quietly nothing when the cache is unusable."""
    usable = _usable()
    if usable is not None:
        folder, key = usable
        write_atomic(folder / name, _MAGIC + _tag(key, name, payload) + payload)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder; give up quietly when the
    folder cannot be written (the caller keeps the value in memory)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:  # a full disk, a read-only folder: the value stays in memory
        pass
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_pickle(name: str) -> Any:
    """The cached object `name`, or None when absent or not verified (never unpickled unverified)."""
    payload = read_entry(f"{name}.pickle")
    if payload is None:
        return None
    try:
        return pickle.loads(payload)
    except Exception:  # verified but from other code (cannot happen with the fingerprint): recomputed
        return None


def store_pickle(name: str, value: Any) -> None:
    write_entry(f"{name}.pickle", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
