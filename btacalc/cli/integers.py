"""An integer option takes an integer as written (review8): the option parser (typer's pydantic adapter) also
read `--devices 8.0` and `1000.0` as whole numbers and `--devices 8_0` as 80 (a Python literal's digit grouping),
where `--devices 1e3`, `--vary seq=1.5` and a Megatron launch's `--seq-length 8192.0` are refused; a run file's
`devices = 1e3` (a TOML float) came through as 1000. An integer option's value is digits, with an optional sign."""

from __future__ import annotations

import re
from typing import Any

from ..errors import BtacalcError

INTEGER = re.compile(r"[+-]?[0-9]+")


def takes_integer(param: Any) -> bool:
    """An option whose value is one integer (its annotation, not a list or a switch)."""
    runtime = getattr(param, "get_runtime_param", None)
    annotation = getattr(runtime(), "annotation", None) if runtime is not None else None
    return annotation is int and not getattr(param, "is_flag", False) and not getattr(param, "multiple", False)


def check_integer(param: Any, raw: Any) -> None:
    """Refuse `raw` for an integer option unless it is written as an integer (one line naming the option)."""
    if takes_integer(param) and isinstance(raw, str) and not INTEGER.fullmatch(raw.strip()):
        names = "/".join(param.opts + param.secondary_opts)
        raise BtacalcError(f"{names} takes an integer, got {raw!r}")
