"""Shell completion of names (issue 25): preset model names for --model, hardware profile names for --hw
(also after a comma in a list of profiles), from the files btacalc ships. Paths are left to the shell.
typer calls these with the word being typed (`autocompletion=`); `btacalc --install-completion`
installs the completion script."""

from __future__ import annotations

from ..paths import data_dir, presets_dir


def model_names() -> list[str]:
    """Built-in model presets (btacalc/data/presets/*.toml), sorted."""
    return sorted(p.stem for p in presets_dir().glob("*.toml"))


def hardware_names() -> list[str]:
    """Built-in hardware profiles (hardware_profiles/*.toml), sorted."""
    return sorted(p.stem for p in data_dir("hardware_profiles").glob("*.toml"))


def complete_model(incomplete: str) -> list[str]:
    return [n for n in model_names() if n.startswith(incomplete)]


def complete_hardware(incomplete: str) -> list[str]:
    return [n for n in hardware_names() if n.startswith(incomplete)]


def complete_hardware_list(incomplete: str) -> list[str]:
    """The last name of a comma-separated list (`wse3,b2` -> `wse3,b200`), each profile once."""
    head, _, last = incomplete.rpartition(",")
    given = set(head.split(",")) if head else set()
    prefix = head + "," if head else ""
    return [prefix + n for n in hardware_names() if n.startswith(last) and n not in given]
