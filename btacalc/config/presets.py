"""Built-in model presets (``btacalc/data/presets/*.toml``) and resolving a model by name or path."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Optional

from ..errors import BtacalcError
from ..paths import preset_names, presets_dir
from .hf import load_hf_config
from .model import ModelSpec, validate_model
from .text import check_path_text, name_not_file, name_text, nearest_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def load_preset(name: str) -> ModelSpec:
    path = presets_dir() / f"{name}.toml"
    if not path.is_file():
        near = nearest_name(name, preset_names())
        hint = f": did you mean {near}?" if near else ""
        raise BtacalcError(f"{{model}}: unknown model {name!r}{hint} (built-in: {', '.join(preset_names())}; "
                           "or give a config.json path)")
    stat = path.stat()
    return _preset_file(name, str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _preset_file(name: str, path: str, mtime_ns: int, size: int) -> ModelSpec:
    """A preset file read and validated once per version of it (its modification time and size are in the key,
    so an edited preset is read again): `validate` resolves the same few presets for each of its runs, and
    parsing and validating one took about 1.2 ms (ModelSpec is frozen, so the one object is shared)."""
    return validate_model(tomllib.loads(Path(path).read_text(encoding="utf-8")), origin=f"preset {name}")


# a Hugging Face repository id: one owner, one name (`Qwen/Qwen3-30B-A3B`), neither a path's `.` or `..`
_REPOSITORY = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def _repository_hint(given: str) -> str:
    """What to do when `--model` looks like a Hugging Face repository id that is no file here: btacalc reads
    files, never the network, so the config.json's path, or the built-in preset the id's name is nearest."""
    if not _REPOSITORY.fullmatch(given) or given.endswith(".json"):
        return ""
    near = nearest_name(given.split("/")[1], preset_names())
    preset = f", or the built-in {near}" if near else ""
    return f": a Hugging Face repository id? btacalc does not download: give the path of its config.json{preset}"


def resolve_model(name_or_path: str, name: Optional[str] = None) -> ModelSpec:
    """A preset name, or the path of a Hugging Face config.json (or a folder holding one). The model is
    called `name` when given, else by its preset name, the file's stem, or, for a config.json, its folder."""
    if name is not None:
        try:
            name = name_text(name)
        except ValueError as exc:
            raise BtacalcError(f"{{name}} {exc}") from None
    with name_not_file("model", "model", name_or_path):
        spec = _resolve_model(name_or_path, name)
    return spec if name is None else spec.model_copy(update={"name": name})


def _resolve_model(name_or_path: str, name: Optional[str]) -> ModelSpec:
    path = Path(name_or_path)
    if name_or_path in preset_names():
        spec = load_preset(name_or_path)
    else:
        check_path_text("{model}", name_or_path)  # hostile29: '' read the working folder, m.json/ read m.json
        if path.is_dir():
            if not (path / "config.json").exists():  # hostile15: read "model file 'folder' not found"
                raise BtacalcError(f"{{model}}: {name_or_path!r} is a folder without a config.json (a model is a "
                                   "preset name, a config.json or a folder holding one)")
            path = path / "config.json"
        if path.is_file():
            return load_hf_config(path, name)
        if path.exists():  # a FIFO, a device, a socket: never read (it could block or never end)
            raise BtacalcError(f"{{model}}: {str(path)!r} is not a regular file (a model is a config.json)")
        if path.suffix == ".json" or "/" in name_or_path:
            raise BtacalcError(f"{{model}}: model file {name_or_path!r} not found{_repository_hint(name_or_path)}")
        spec = load_preset(name_or_path)
    return spec
