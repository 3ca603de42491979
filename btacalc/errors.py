"""Errors. `BtacalcError` means "the user's input is wrong": the CLI prints it on one line and exits 2.

Library messages name the *parameter* that is wrong, written ``{name}`` in the message template
(``"{expert_parallel} 3 does not divide {devices} 8"``). ``str(error)`` gives the API names
("expert_parallel 3 does not divide devices 8"); the command line renders the same message with its
flags (``error.render({"expert_parallel": "--ep", ...})`` -> "--ep 3 does not divide --devices 8").
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

_PARAM = re.compile(r"\{([a-z][a-z0-9_]*)\}")


class BtacalcError(ValueError):
    """Invalid user input: unknown name, bad size, malformed file. The message is one line."""

    def __init__(self, template: str):
        super().__init__(template)
        self.template = template

    @property
    def params(self) -> list[str]:
        """The parameters the message names."""
        return _PARAM.findall(self.template)

    def render(self, names: Mapping[str, str] | None = None, literals: Sequence[str] = ()) -> str:
        """The message with each ``{param}`` replaced by ``names[param]`` (default: the parameter name), except inside
        `literals`, text the user gave that the message quotes as it is (review19: a file named ``{seq_len}.sh`` was
        printed as ``--seq.sh``)."""
        names = names or {}

        def sub(text: str) -> str:
            return _PARAM.sub(lambda m: names.get(m.group(1), m.group(1)), text)

        kept = sorted({t for t in literals if _PARAM.search(t)}, key=len, reverse=True)
        if not kept:
            return sub(self.template)
        parts = re.split("(" + "|".join(map(re.escape, kept)) + ")", self.template)
        return "".join(part if i % 2 else sub(part) for i, part in enumerate(parts))

    def __str__(self) -> str:
        return self.render()


class DataError(RuntimeError):
    """A shipped data file (formula catalogue, profile, preset) is broken: a bug in btacalc."""


def first_validation_error(exc: Any) -> str:
    """One line from a pydantic ValidationError: 'field a.b: reason'."""
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"field {loc}: {msg}" if loc else msg


# ---------------------------------------------------------------------------------------------------
# The one sanitiser of user-supplied text (names, folders, ids, paths) on its way to a terminal, JSON
# or a file name.

# Bidirectional overrides and isolates: invisible, they reorder what a terminal shows ("Trojan source",
# CVE-2021-42574).
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def clean_text(text: str, keep: str = "") -> str:
    """`text` safe to print, serialise or use in a file name: control characters (C0 incl. ESC, DEL,
    C1) and bidirectional overrides removed (those in `keep`, e.g. a newline, stay); lone surrogates
    (undecodable bytes of a file name, as os.fsdecode gives them) written as the escape of their byte
    (\\xff) or code point (\\udc00). Everything else, letters of any script included, is kept."""
    if text.isprintable():  # the usual case: nothing to do (False for Cc, Cf, Cs, Zl, Zp, ...)
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if 0xD800 <= o <= 0xDFFF:
            out.append(f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else f"\\u{o:04x}")
        elif ch in keep:
            out.append(ch)
        elif o < 0x20 or 0x7F <= o <= 0x9F or ch in _BIDI or ch in "\u2028\u2029":
            continue
        else:
            out.append(ch)
    return "".join(out)
