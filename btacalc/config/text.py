"""User-supplied text in configuration (names, sources, ids) passes `errors.clean_text` on validation,
so no renderer (terminal, JSON, CSV) ever sees a control character or a lone surrogate."""

from __future__ import annotations

import difflib
import errno
import os
import re
import unicodedata
from contextlib import contextmanager
from typing import Annotated, Any, Iterable, Iterator, Optional

from pydantic import AfterValidator

from ..errors import BtacalcError, clean_text

CleanText = Annotated[str, AfterValidator(clean_text)]


def visible(text: str) -> bool:
    r"""Whether `text` shows anything: a character that is not a space and not a format character (Unicode category
    Cf: the zero-width space U+200B, the byte-order mark U+FEFF, the soft hyphen U+00AD, the direction isolates).
    hostile15: `--name $'\u200b'` and a measured run's id "\u200b" passed the check of spaces alone and printed as
    nothing."""
    return any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in text)


def _not_blank(text: str) -> str:
    if not visible(text):
        raise ValueError("must not be empty (or only spaces, control and invisible format characters)")
    return text


def name_text(text: str) -> str:
    r"""A name the user typed (`--name`), cleaned as a `Name` field is (clean_text, then visible); ValueError when
    nothing visible is left (hostile15: `--name $'\x01'` passed its check of spaces and named the model "")."""
    return _not_blank(clean_text(text))


@contextmanager
def name_not_file(option: str, what: str, name: str) -> Iterator[None]:
    """Looking `name` up as a file: a name too long for one (ENAMETOOLONG) is an unknown name, said in one short line.
    hostile23: `--hw` or `--model` of 300 characters was "cannot read or write /.../hardware_profiles/hhh...: File
    name too long", the whole name echoed (100,000 characters on one line)."""
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        raise BtacalcError(f"{{{option}}}: unknown {what} {cut(repr(name))}: no built-in name, and at {len(name):,} "
                           "characters too long to be a file's") from None


# a path's folder separators: "/" and the system's own (Windows: a backslash too)
PATH_SEPARATORS = tuple(dict.fromkeys(("/", os.sep)))


def check_path_text(option: str, text: str) -> None:
    """hostile29: a path option's text as given, before pathlib reads it. pathlib takes '' as '.', the working folder
    (`--config ''` said "--config '.': not a regular file"; `--model ''` looked for the working folder's config.json),
    and drops a trailing slash: `--model m.json/` read m.json, which a shell and open() refuse ("Not a directory").
    `option` names the option (a flag, or a `{param}` the command line renders). An empty text, and one ending in a
    separator whose name without it is a file (or anything but a folder), are one-line errors (the name is quoted
    whole: it exists, so it is no longer than a path can be); a name that does not exist is left to its reader."""
    if not text:
        raise BtacalcError(f"{option} '': an empty path")
    if text.endswith(PATH_SEPARATORS) and not os.path.isdir(text) \
            and os.path.lexists(text.rstrip("".join(PATH_SEPARATORS))):
        raise BtacalcError(f"{option} {text!r}: not a directory (a trailing slash names a folder)")


# A number as a user writes one (an option's value, a what-if target): ASCII digits, an optional sign, point and
# exponent. hostile31: Python's float() also reads a literal's digit grouping (`--capacity-factor 1_0.5` was
# 10.5, `--target relative_to_dense=0.8_5` 0.85) and other scripts' digits (`relative_to_dense=٠.٨٥`), which
# review8 refused for integer options (`--devices 8_0` read as 80).
DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def exact_number(value: float) -> str:
    """`value` as a message states a setting: every digit it has (a whole number without its ".0"). review21: `:g`
    keeps six digits, so a read-back note said "the run trains the RoPE base 1e+06, not qwen3-30b-a3b's rope_theta
    1e+06" of --rotary-base 1000001, and "the model's RoPE base 500000 is no integer" of 500000.5."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 2 ** 63 else repr(float(value))


def cut(text: str) -> str:
    """`text` for an error message: at most 60 characters, a longer one ending in "..." (launch and override
    files quote the offending word back)."""
    return text if len(text) <= 60 else text[:57] + "..."


# a name or id (review5: a profile named "" planned and compared as a row with no device name)
Name = Annotated[str, AfterValidator(clean_text), AfterValidator(_not_blank)]


_BLANK_AFTER_BACKSLASH = re.compile(r"\\[ \t]+\r?$", re.M)


def blank_after_backslash(text: str) -> str:
    """A hint for a refusal of a launch or overrides file: "" or, when a line ends in a backslash followed by blanks,
    why that line does not continue (a shell reads `\\ ` as an escaped blank, and the newline then ends the command).
    hostile20: such a launch was refused "flags after the launch command ...: join them to it with \\", which the
    file did, and such overrides "' ' is not a Hydra override"."""
    found = _BLANK_AFTER_BACKSLASH.search(text)
    if found is None:
        return ""
    line = text.count("\n", 0, found.start()) + 1
    return (f" (line {line} ends in a backslash and then blanks, which a shell reads as an escaped blank, not a line "
            "continuation: remove the blanks after the \\)")


def uncommented(line: str) -> str:
    """`line` without its shell comment: a `#` that begins a word outside quotes (after the line's start, a blank or
    one of `;&|()<>`), as bash reads it ("a word beginning with # causes that word and all remaining characters on
    that line to be ignored", bash manual, Comments). A `#` inside a word (`run#3`, `${#L}`), quoted or escaped is
    text. hostile22: shlex's comments cut at any `#`, so `--wandb-exp-name run#3 --tensor-model-parallel-size 2`
    dropped the rest of the launch (planned TP 1 in silence)."""
    quote, start, i = "", True, 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote != "'":
                i += 2
                continue
            if c == quote[-1]:
                quote = ""
        elif c == "\\":
            start, i = False, i + 2
            continue
        elif c == "#" and start:
            return line[:i]
        elif c in "'\"`":
            quote = "$'" if c == "'" and line[i - 1:i] == "$" else c
        start = c in " \t;&|()<>" and not quote
        i += 1
    return line


def exceeds_int_digits(exc: BaseException) -> bool:
    """`exc` is Python's refusal of an integer literal past sys.get_int_max_str_digits (its message's words)."""
    return isinstance(exc, ValueError) and "integer string conversion" in str(exc)


def parse_value_error(exc: Exception) -> str:
    """What a parser's plain ValueError (tomllib's, not its TOMLDecodeError; Hydra's) means, in one line. hostile36: an
    integer literal of more than Python's 4,300 digits (sys.get_int_max_str_digits) in a profile, a run file or a
    Bridge override ended as an internal error, "Exceeds the limit (4300 digits) for integer string conversion"."""
    import sys

    text = str(exc)
    if exceeds_int_digits(exc):
        limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
        return f"an integer of more than {limit:,} digits (no size btacalc reads has that many)"
    return text.splitlines()[0] if text else type(exc).__name__


def input_kind(text: str) -> str:
    """What another of btacalc's input files `text` is, for a refusal of it where it was given in the wrong place:
    "a hardware profile", "a Hugging Face config.json", "a model in btacalc's preset form" or "" (none of them).
    hostile20: a profile given to --model read "not valid JSON: Expecting value (line 1, column 1)", a config.json
    given to --hw "not valid TOML: Invalid statement", a preset's TOML given to --hw "unknown field source"."""
    import json
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    raw: Any = None
    for parse in (tomllib.loads, json.loads):
        try:
            raw = parse(text)
            break
        except (ValueError, RecursionError):
            continue
    if not isinstance(raw, dict):
        return ""
    if "family" in raw and "chip" in raw:
        return "a hardware profile"
    if "model_type" in raw or "architectures" in raw:
        return "a Hugging Face config.json"
    if "hidden_size" in raw and "num_layers" in raw:
        return "a model in btacalc's preset form"
    return ""


# difflib.get_close_matches' own default cutoff: a name at least 0.6 alike (2 x matches / total length)
NEAR_CUTOFF = 0.6


def _folded(name: str) -> str:
    return name.casefold().replace("_", "-")


def nearest_name(name: str, names: Iterable[str]) -> Optional[str]:
    """The known name `name` most likely meant, or None: first one equal to it but for case and `_` for `-`
    (`H100`, `Qwen3-30B-A3B`: a Hugging Face repository's spelling), else difflib's closest at least
    NEAR_CUTOFF alike, compared the same way (`qwen3-30b` -> qwen3-30b-a3b)."""
    known = sorted(names)
    folded: dict[str, str] = {}
    for known_name in known:
        folded.setdefault(_folded(known_name), known_name)
    if _folded(name) in folded:
        return folded[_folded(name)]
    near = difflib.get_close_matches(_folded(name), sorted(folded), n=1, cutoff=NEAR_CUTOFF)
    return folded[near[0]] if near else None
