"""The row primitives of btacalc's Megatron codec (config/megatron_codec.py): a `Row` turns some of a run's
fields into Megatron-LM argparse destinations and back; `same`, `switch` and `choice` build the rows that are one
destination each, and `Get` reads a launch's destinations with Megatron's own defaults. Split from
config/megatron_codec.py."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from ..errors import BtacalcError
from .megatron_launch import flags_by_dest, integer, refuse_bridge_text


Fields = dict[str, Any]
Args = dict[str, Any]


def megatron_default(dest: str) -> Any:
    """The parser's default of a destination (None when it is not a literal); a list default is a fresh copy."""
    value = _literal_default(dest)
    return list(value) if isinstance(value, list) else value


@functools.lru_cache(maxsize=None)
def _literal_default(dest: str) -> Any:
    flags = flags_by_dest().get(dest)
    if not flags:
        return None
    try:
        return ast.literal_eval(flags[0].default)
    except (ValueError, SyntaxError):
        return None


class Get:
    """Reads destinations with Megatron's defaults, remembering which ones were read."""

    def __init__(self, args: Args):
        self.args, self.read = args, set[str]()

    def __call__(self, dest: str) -> Any:
        self.read.add(dest)
        return self.args[dest] if dest in self.args else megatron_default(dest)

    def given(self, dest: str) -> bool:
        self.read.add(dest)
        return dest in self.args


def optional_int(v: Any, dest: str) -> Optional[int]:
    """A destination's value as an integer (None: not given)."""
    return None if v is None else integer(v, dest)


def truth(v: Any) -> bool:
    """A switch's value as Megatron-LM or a Bridge file gives it (a Bridge string "true"/"1"/"yes"; bridge_codec
    reads its keys with it too)."""
    refuse_bridge_text(v, "true or false")
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes")
    return bool(v)


@dataclass(frozen=True)
class Row:
    """One concept: the fields it covers, the destinations it writes, and both directions."""

    name: str
    encode: Callable[[Fields], Args]
    decode: Callable[[Get], Fields]


def same(field: str, dest: str, kind: Callable[[Any], Any] = int, skip: Any = None) -> Row:
    """A field that is one destination, value for value (omitted when it equals `skip`)."""
    def enc(f: Fields) -> Args:
        v = f.get(field)
        return {} if v is None or v == skip else {dest: v}

    def dec(get: Get) -> Fields:
        v = get(dest)
        return {field: None if v is None else (optional_int(v, dest) if kind is int else kind(v))}

    return Row(field, enc, dec)


def switch(field: str, dest: str, invert: bool = False) -> Row:
    """A boolean field that is a Megatron switch (inverted: the switch means the opposite)."""
    def enc(f: Fields) -> Args:
        v = f.get(field)
        return {} if v is None else {dest: (not v) if invert else bool(v)}

    def dec(get: Get) -> Fields:
        v = truth(get(dest))
        return {field: (not v) if invert else v}

    return Row(field, enc, dec)


def choice(field: str, dest: str, mapping: Mapping[Any, Any], say_default: bool = True) -> Row:
    """A field whose values are Megatron's choices under other names (`say_default` False: Megatron's default
    is left unsaid)."""
    back = {str(v).lower(): k for k, v in mapping.items()}

    def enc(f: Fields) -> Args:
        v = f.get(field)
        quiet = v is not None and not say_default and mapping[v] == megatron_default(dest)
        return {} if v is None or quiet else {dest: mapping[v]}

    def dec(get: Get) -> Fields:
        v = get(dest)
        key = str(v).lower() if v is not None else None
        if key not in back:
            raise BtacalcError(f"Megatron {dest} {v!r}: btacalc models {', '.join(map(str, mapping.values()))}")
        return {field: back[key]}

    return Row(field, enc, dec)


def attention_backend(get: Get) -> str:
    """The launch's AttnBackend name (auto, flash, fused, unfused, local), local under --transformer-impl local; auto
    where none is given (TransformerConfig.attention_backend's default, transformer_config.py L151 @ d98e8a64)."""
    if str(get("transformer_impl")) == "local":
        return "local"
    backend = get("attention_backend")
    return "auto" if backend is None else str(backend).split(".")[-1].split(":")[0].strip("<> ")
