"""Shipped data files of named entries (btacalc/data/*.toml with one `[KEY.NAME]` table per entry), read
into pydantic models: the precision recipes and the attention kernels share this loader and its errors."""

from __future__ import annotations

import sys
from typing import Any, Mapping, TypeVar

from ..errors import BtacalcError, DataError
from ..paths import package_data
from .text import nearest_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

M = TypeVar("M")


def load_named_tables(file: str, key: str, model: Any) -> dict[str, Any]:
    """Every `[key.NAME]` table of btacalc/data/`file` as `model(name=NAME, **table)`; a broken shipped file
    is a bug, not the user's input (DataError)."""
    raw = tomllib.loads(package_data(file).read_text(encoding="utf-8"))
    try:
        return {name: model(name=name, **table) for name, table in raw[key].items()}
    except Exception as exc:
        raise DataError(f"btacalc/data/{file}: {exc}") from exc


def pick(table: Mapping[str, M], name: str, option: str) -> M:
    """The entry `name`; a one-line error naming the option and the known entries otherwise."""
    if name not in table:
        raise BtacalcError(f"{{{option}}} must be one of {', '.join(table)}, got {name!r}{did_you_mean(name, table)}")
    return table[name]


def did_you_mean(name: str, names: Any) -> str:
    """": did you mean NAME?" for the known name `name` is nearest (case, `_` for `-`, a near spelling), else "".
    hostile23: `--precision BF16` (also MXFP8) was refused in three wordings, none naming bf16; as with --hw and
    --model, a case variant is refused naming the one name, not taken (one spelling in files, goldens and output)."""
    near = nearest_name(str(name), [str(n) for n in names])
    return f": did you mean {near}?" if near else ""
