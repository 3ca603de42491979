"""Errors. `BtacalcError` means "the user's input is wrong": the CLI prints it on one line and exits 2.

Library messages name the *parameter* that is wrong, written ``{name}`` in the message template
(``"{expert_parallel} 3 does not divide {devices} 8"``). ``str(error)`` gives the API names
("expert_parallel 3 does not divide devices 8"); the command line renders the same message with its
flags (``error.render({"expert_parallel": "--ep", ...})`` -> "--ep 3 does not divide --devices 8").
"""

from __future__ import annotations

import re
from typing import Any, Mapping

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

    def render(self, names: Mapping[str, str] | None = None) -> str:
        """The message with each ``{param}`` replaced by ``names[param]`` (default: the parameter name)."""
        names = names or {}
        return _PARAM.sub(lambda m: names.get(m.group(1), m.group(1)), self.template)

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
