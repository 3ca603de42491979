"""Shell completion of names (issue 25): preset model names for --model, hardware profile names for --hw
(also after a comma in a list of profiles), from the files btacalc ships. Paths are left to the shell.
typer calls these with the word being typed (`autocompletion=`); `btacalc --install-completion`
installs the completion script."""

from __future__ import annotations

from ..paths import preset_names, profile_names  # the file names only: completion imports no model code


def complete_model(incomplete: str) -> list[str]:
    return [n for n in preset_names() if n.startswith(incomplete)]


def complete_hardware(incomplete: str) -> list[str]:
    return [n for n in profile_names() if n.startswith(incomplete)]


def complete_hardware_list(incomplete: str) -> list[str]:
    """The last name of a comma-separated list (`wse3,b2` -> `wse3,b200`), each profile once."""
    head, _, last = incomplete.rpartition(",")
    given = set(head.split(",")) if head else set()
    prefix = head + "," if head else ""
    return [prefix + n for n in profile_names() if n.startswith(last) and n not in given]
