"""Parsing of list-valued options: `--vary NAME=VALUES`, `--devices 8,64`, `--hidden 512:4096:256`."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..config.execution import MAX_SEQUENCES
from ..config.named_tables import did_you_mean
from ..errors import BtacalcError
from .integers import INTEGER
from ..planning.sweep import CHOICE_PARAMS, VARIABLES


def comma_entries(text: str, flag: str, unique: bool = True, paths: bool = False) -> list[str]:
    """The stripped entries of a comma-separated option value; [] when it holds none (`,` or blanks: the
    caller says what to give). An empty entry among others (`16,,32`, `16,32,`) and an entry given twice are
    one-line errors: the first may hide a value that was meant, the second would make the same point, row or
    curve twice (`unique=False`: the caller checks repeats itself, e.g. by the profile a name or path gives).
    `paths`: the entries are built-in hardware names or profile paths, and a path may hold commas (path_pieces)."""
    from ..config.hardware import is_builtin_name

    entries = [x.strip() for x in (path_pieces(text, is_builtin_name) if paths else text.split(","))]
    if not any(entries):
        return []
    if not all(entries):
        raise BtacalcError(f"{flag} {text.strip()!r} has an empty entry (two commas in a row, or one at an end)")
    twice = sorted({x for x in entries if entries.count(x) > 1}, key=entries.index) if unique else []
    if twice:
        raise BtacalcError(f"{flag} {text.strip()!r} gives {', '.join(twice)} twice")
    return entries


def path_pieces(text: str, name: Callable[[str], bool] = lambda _: False) -> list[str]:
    """`text` split at its commas, except where a comma is part of a file's path (hostile36): a piece that is neither
    a `name` nor an existing path is joined with the pieces after it, the fewest that make one existing path
    (`--hw 'a,b/h100.toml,b200'`: 'a,b/h100.toml' and 'b200' when the folder 'a,b' exists); a piece no join makes
    a path stays alone, for its reader to refuse. A successful split stats each piece once."""
    import os

    parts, pieces, i = text.split(","), [], 0
    while i < len(parts):
        end = i + 1
        if not name(parts[i].strip()) and not os.path.exists(parts[i].strip()):  # exists: False on any OSError
            joined = parts[i]
            for j in range(i + 1, len(parts)):
                joined += "," + parts[j]
                if os.path.exists(joined.strip()):
                    end = j + 1
                    break
        pieces.append(",".join(parts[i:end]))
        i = end
    return pieces


def parse_values(spec: str, flag: str = "--vary", limit: Optional[int] = None) -> Sequence[int]:
    """'a,b,c' or 'start:stop:step' (inclusive; a `range`, never built in memory) or 'start:stop:xF'
    (geometric, factor F); positive integers. `flag` names the option in error messages; `limit` caps
    how many values it may give (checked before any list is built)."""
    def bounded(count: int) -> None:
        if limit is not None and count > limit:
            raise BtacalcError(f"{flag} {spec!r} gives {count:,} values, more than {limit:,}")

    def num(text: str, what: str = "") -> int:
        # `what`: a range's step or factor, named as such (hostile21: '8:16:0' read "--devices value 0 must be positive")
        name = f"{flag} range {spec!r}: {what}" if what else f"{flag} value"
        try:
            # int() reads any script's digits ('١٦' is 16) and a literal's digit grouping ('1_6' is 16); an
            # integer option takes digits with an optional sign only (integers.py), and so does a list (review12)
            if not INTEGER.fullmatch(text.strip()):
                raise ValueError(text)
            v = int(text)
        except ValueError:
            raise BtacalcError(f"{name} {text.strip()!r} is not an integer") from None
        if v < 1:
            raise BtacalcError(f"{name} {v} must be positive")
        if v > MAX_SEQUENCES:  # every varied quantity is a count or a size within 64-bit integers
            raise BtacalcError(f"{flag} value {v} is beyond 2^62")
        return v

    if ":" in spec:
        parts = spec.split(":")
        if len(parts) != 3:
            raise BtacalcError(f"{flag} range {spec!r} must be start:stop:step or start:stop:xF")
        start, stop = num(parts[0]), num(parts[1])
        if stop < start:
            raise BtacalcError(f"{flag} range {spec!r}: stop is below start")
        if parts[2].startswith("x"):
            factor = num(parts[2][1:], "factor")
            if factor < 2:
                raise BtacalcError(f"{flag} range {spec!r}: geometric factor must be at least 2")
            values, v = [], start
            while v <= stop:
                values.append(v)
                v *= factor
            bounded(len(values))
            return values
        step = num(parts[2], "step")
        bounded((stop - start) // step + 1)
        return range(start, stop + 1, step)
    values = [num(x) for x in comma_entries(spec, flag)]
    if not values:
        raise BtacalcError(f"{flag} {spec!r} gives no values")
    twice = sorted({v for v in values if values.count(v) > 1})  # one number spelt twice ('16,016')
    if twice:
        raise BtacalcError(f"{flag} {spec!r} gives {', '.join(map(str, twice))} twice")
    bounded(len(values))
    return values


def _choice_indices(name: str, spec: str) -> list[int]:
    """`--vary precision=bf16,mxfp8`: the indices of the named choices (the grid holds integers)."""
    choices = CHOICE_PARAMS[name][1]
    names = comma_entries(spec, f"--vary {name}")
    unknown = [n for n in names if n not in choices]
    if not names or unknown:
        raise BtacalcError(f"--vary {name}: {unknown[0] if unknown else spec!r} is not one of {', '.join(choices)}"
                           + (did_you_mean(unknown[0], choices) if unknown else ""))
    return [choices.index(n) for n in names]


def parse_vary(items: list[str]) -> dict[str, Sequence[int]]:
    grid: dict[str, Sequence[int]] = {}
    for item in items:
        if "=" not in item:
            raise BtacalcError(f"--vary {item!r} must look like NAME=VALUES (e.g. experts=16,32,64)")
        name, spec = item.split("=", 1)
        name = name.strip()
        if name not in VARIABLES:
            raise BtacalcError(f"--vary: unknown parameter {name!r} (known: {', '.join(VARIABLES)})")
        if name in grid:
            raise BtacalcError(f"--vary: {name!r} given twice")
        # the parameter named in every refusal (hostile19: `--vary seq=` read "--vary '' gives no values")
        grid[name] = _choice_indices(name, spec) if name in CHOICE_PARAMS else parse_values(spec, f"--vary {name}")
    if not grid:
        raise BtacalcError("give at least one --vary NAME=VALUES")
    return grid
