"""The on-disk cache of what btacalc derives from the formula catalogue: the validated catalogue
itself (a pickle) and the generated numeric code of each selection (`compiled`).

Everything lives in ``$XDG_CACHE_HOME/btacalc/compiled/<fingerprint>/`` (``~/.cache`` when the
variable is unset or not absolute, as the XDG spec asks). The fingerprint hashes the catalogue files
and the code that reads them and derives the formulas, so an edited catalogue or a new btacalc never
reads a stale entry. Files are written atomically (a temporary file renamed over the target); when the
folder cannot be written, callers keep what they computed in memory. A damaged entry is ignored and
rewritten.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, Optional

from ..paths import data_dir

# The code whose changes alter what is derived from the catalogue (besides the catalogue files).
_SOURCES = ("catalogue/cache.py", "catalogue/selection.py", "catalogue/terms.py", "catalogue/compiled.py",
            "catalogue/constants.py", "vocabulary.py")


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """Hash of the formula files and of the code that reads them and derives the formulas."""
    digest = hashlib.sha256()
    for path in sorted(data_dir("formulas").glob("*.toml")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    package = Path(__file__).resolve().parents[1]
    for name in _SOURCES:
        digest.update(name.encode() + b"\0" + (package / name).read_bytes())
    return digest.hexdigest()[:24]


def cache_dir() -> Optional[Path]:
    """The cache folder of this catalogue; None when there is no home to put it in."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    try:
        root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    except RuntimeError:  # no home directory
        return None
    return root / "btacalc" / "compiled" / fingerprint()


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder; give up quietly when the
    folder cannot be written (the caller keeps the value in memory)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        pass
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_pickle(name: str) -> Any:
    """The cached object `name`, or None when absent or unreadable."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        with open(folder / f"{name}.pickle", "rb") as fh:
            return pickle.load(fh)
    except Exception:  # absent, damaged or from other code: recomputed, never trusted
        return None


def store_pickle(name: str, value: Any) -> None:
    folder = cache_dir()
    if folder is not None:
        write_atomic(folder / f"{name}.pickle", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
