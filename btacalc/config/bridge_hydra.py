"""Megatron-Bridge's command-line overrides (Hydra `key=value`), as its scripts read them, into dotted keys.

Megatron-Bridge's performance scripts pass the words after their own options to
`process_config_with_overrides(recipe, cli_overrides=...)` (NVIDIA-NeMo/Megatron-Bridge @ 067f987d
scripts/performance/run_recipe.py L211-215), which applies them with `parse_hydra_overrides`: the config in struct
mode, Hydra's `OverridesParser` and `ConfigLoaderImpl._apply_overrides_to_config`
(src/megatron/bridge/training/utils/omegaconf_utils.py L163-188), then `OmegaConf.to_container(resolve=True)` and
`_apply_overrides` set each value as given (L157-158, L454-). Bridge needs hydra-core >1.3,<=1.3.2
(pyproject.toml L91). This module parses the words with Hydra's own parser and gives the flat dotted-key mapping
the YAML path (`bridge_run.import_bridge`) builds, so both forms plan the same run; what Bridge would refuse, or
what btacalc cannot know (the recipe's own values), is refused in one line.
"""

from __future__ import annotations

import re
import reprlib
import shlex
from typing import Any, Callable

from ..errors import BtacalcError
from .bridge_fields import check_bridge_key
from .text import blank_after_backslash, parse_value_error, uncommented
from .text import cut as _cut

# A line of the file that is an override (`key=value`, `+key=`, `++key=`, `~key`) or a YAML mapping's `key:`.
_OVERRIDE_LINE = re.compile(r"^\s*(?:~+[A-Za-z_][\w.@/-]*\s*(?:=|$)|\+*[A-Za-z_][\w.@/-]*=)")
_YAML_LINE = re.compile(r"^\s*(?:-\s+)?[^\s#=:'\"][^=:]*:(?:\s|$)")


def _lines(text: str, rule: re.Pattern[str]) -> list[tuple[int, str]]:
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#") and rule.match(line)]


def form_of(text: str, source: str) -> str:
    """"overrides", "yaml" or "empty": which of Bridge's two forms the text is. A file with both is refused (Bridge
    reads a YAML file with OmegaConf.load and overrides from the command line, never one file as both)."""
    if not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
        return "empty"
    overrides, yaml_lines = _lines(text, _OVERRIDE_LINE), _lines(text, _YAML_LINE)
    if overrides and yaml_lines:
        (n, a), (m, b) = overrides[0], yaml_lines[0]
        raise BtacalcError(f"{source}: a mix of Hydra overrides (line {n}: {_cut(a)}) and YAML (line {m}: {_cut(b)}): "
                           "give one form (key=value lines, or a YAML mapping)")
    return "overrides" if overrides else "yaml"


def _words(text: str, source: str) -> list[str]:
    """The words of the file as a POSIX shell splits them (quotes removed, `#` comments dropped, a backslash-newline
    joining two lines), one or more overrides per line."""
    # a backslash-newline continues the line, also before a CRLF line end (hostile20: "'\\r' is not a Hydra override");
    # a comment is a word that begins with `#` (text.uncommented; hostile22: shlex's cut `run#3` and the line after it)
    joined = "\n".join(uncommented(line) for line in re.sub(r"\\\r?\n", "", text).split("\n"))
    lexer = shlex.shlex(joined, posix=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        words = list(lexer)
    except ValueError as exc:  # an unclosed quote
        raise BtacalcError(f"{source}: {exc} (the file is split into words as a shell splits a command line)") from None
    blank = next((w for w in words if not w.strip()), None)
    if blank is not None:  # an escaped blank, as a backslash with blanks after it at a line's end leaves
        raise BtacalcError(f"{source}: {blank!r} (a word of blanks) is not a Hydra override"
                           + blank_after_backslash(text))
    return words


def read_overrides(text: str, source: str, reads: Callable[[str], bool] = lambda key: True) -> dict[str, Any]:
    """The dotted keys and values of a file of Hydra overrides, applied in order (a later value of a key replaces
    an earlier one, as Hydra applies them; a dict value merges into its section, as OmegaConf.update(merge=True)).
    An interpolation is refused in a key btacalc `reads` (in another it is listed as ignored, as the key is)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out: dict[str, Any] = {}
    for word in _words(text, source):
        if word.startswith("-"):
            raise BtacalcError(f"{source}: {_cut(word)} is a command-line option of the launching script, not a "
                               "Hydra override (key=value): give the overrides only")
        try:
            override = parser.parse_override(word)
        except HydraException as exc:
            raise BtacalcError(f"{source}: {_cut(word)!r} is not a Hydra override: "
                               f"{str(exc).splitlines()[0]}") from None
        except ValueError as exc:  # hostile36: Hydra's int() of a 5,000-digit value was an internal error (exit 3)
            raise BtacalcError(f"{source}: {_cut(word)!r}: {parse_value_error(exc)}") from None
        key = override.key_or_group
        if override.package is not None:
            raise BtacalcError(f"{source}: {_cut(word)}: a config group's @package, and Bridge's config has no groups "
                               "(Hydra: 'looks like a config group override')")
        if key:  # a misspelt key is named as such before what +/~ would do with it
            check_bridge_key(key, source)
        if override.is_delete():
            raise BtacalcError(f"{source}: {_cut(word)} deletes {key}: Bridge then keeps the recipe's own value, which "
                               "btacalc does not know: leave the line out or give key=value")
        if override.is_add():
            raise BtacalcError(f"{source}: {_cut(word)} adds {key}, which Bridge refuses where the recipe holds a value "
                               f"and btacalc cannot see the recipe: write {key}=... (or ++{key}=...)")
        if override.is_sweep_override():
            kind = override.value_type.name.lower() if override.value_type is not None else "sweep"
            raise BtacalcError(f"{source}: {_cut(word)} is a Hydra sweep ({kind}), one run "
                               "per value, which Bridge's single run cannot set: give one value (a list is [a,b])")
        if not key:
            raise BtacalcError(f"{source}: {_cut(word)!r} names no key (Hydra's key=value)")
        value = override.value()
        refuse_interpolation(value, key, source, reads=reads)
        for name, leaf in _leaves(value, key, source):
            # struct mode (omegaconf_utils.py L180): a key not in the config is refused by Hydra ("Could not
            # override"); a misspelt field names the nearest real one
            check_bridge_key(name, source)
            out.pop(name, None)  # a key given again moves to where Hydra applies it last
            out[name] = leaf
    if not out:
        raise BtacalcError(f"{source}: no overrides (only comments)")
    return out


def refuse_interpolation(value: Any, key: str, source: str, yaml: bool = False,
                         reads: Callable[[str], bool] = lambda key: True) -> None:
    """OmegaConf resolves `${...}` against the recipe's config (to_container(resolve=True)), whose values btacalc
    does not have: in a Hydra override, or (`yaml`) in a YAML file's value (hostile37: there it was read as the string
    and refused as one Bridge "sets as given", which it does not: omegaconf_utils.py L157 resolves it first). Refused
    where btacalc `reads` the key (asked only of a key that holds one); elsewhere the key is listed as ignored."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, (dict, list)):
            refuse_interpolation(item, key, source, yaml, reads)
        elif isinstance(item, str) and "${" in item and reads(key):
            given = f"{key}: {_cut(repr(item))}" if yaml else f"{key}={_cut(item)}"
            raise BtacalcError(f"{source}: {given}: an interpolation, which Bridge resolves against the "
                               "recipe's config, which btacalc does not have: give the value")


def _leaves(value: Any, key: str, source: str) -> list[tuple[str, Any]]:
    """A dict value as its dotted keys (merged into the section); other values as given."""
    if not isinstance(value, dict):
        return [(key, value)]
    if not value:
        return []
    out: list[tuple[str, Any]] = []
    for name, item in value.items():
        if not isinstance(name, str):
            raise BtacalcError(f"{source}: {key}: key {reprlib.repr(name)} is not a name")
        out.extend(_leaves(item, f"{key}.{name}", source))
    return out
