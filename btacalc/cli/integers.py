"""An integer option takes an integer as written (review8): the option parser (typer's pydantic adapter) also
read `--devices 8.0` and `1000.0` as whole numbers and `--devices 8_0` as 80 (a Python literal's digit grouping),
where `--devices 1e3`, `--vary seq=1.5` and a Megatron launch's `--seq-length 8192.0` are refused; a run file's
`devices = 1e3` (a TOML float) came through as 1000. An integer option's value is digits, with an optional sign.
A number option's value is finite (hostile15: NaN was refused as "Input should be less than or equal to 100")."""

from __future__ import annotations

import math
import re
from typing import Any, Optional

from ..config.text import DECIMAL
from ..errors import BtacalcError

INTEGER = re.compile(r"[+-]?[0-9]+")


def takes_integer(param: Any) -> bool:
    """An option whose value is one integer (its annotation, not a list or a switch)."""
    runtime = getattr(param, "get_runtime_param", None)
    annotation = getattr(runtime(), "annotation", None) if runtime is not None else None
    return annotation is int and not getattr(param, "is_flag", False) and not getattr(param, "multiple", False)


def takes_number(param: Any) -> bool:
    """An option whose value is one real number (its annotation float, or Optional[float])."""
    runtime = getattr(param, "get_runtime_param", None)
    annotation = getattr(runtime(), "annotation", None) if runtime is not None else None
    return annotation in (float, Optional[float]) and not getattr(param, "multiple", False)


def check_integer(param: Any, raw: Any) -> None:
    """Refuse `raw` for an integer option unless it is written as an integer, and for a number option unless it is
    finite (one line naming the option)."""
    names = "/".join(getattr(param, "opts", []) + getattr(param, "secondary_opts", []))
    if takes_integer(param) and isinstance(raw, str) and not INTEGER.fullmatch(raw.strip()):
        raise BtacalcError(f"{names} takes an integer, got {raw!r}")
    if takes_number(param) and isinstance(raw, str):
        # hostile15: `--sensitivity nan` read "Input should be less than or equal to 100" and `--routing-imbalance nan`
        # "greater than or equal to 1" (the option parser's range check on a NaN); a run file's TOML nan and inf too
        try:
            value = float(raw.strip())
        except ValueError:
            return  # not a number at all: the option parser's own message says so
        if not math.isfinite(value):
            raise BtacalcError(f"{names} takes a finite number, got {raw!r}")
        if not DECIMAL.fullmatch(raw.strip()):  # hostile31: `1_0.5` (Python's digit grouping) read as 10.5
            raise BtacalcError(f"{names} takes a number written in decimal digits, got {raw!r}")
