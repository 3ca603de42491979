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


# typer's completion options (`btacalc --install-completion [SHELL]`, `--show-completion [SHELL]`), whose shell
# typer detects when none is given
COMPLETION_OPTIONS = ("--install-completion", "--show-completion")


def check_completion_shell(args: list[str]) -> None:
    """A completion option for a shell typer has no script for is bad input (one line, exit 2): typer printed "Shell
    sh not supported." and exited 1, the code of a plan that does not fit (hostile27)."""
    from typer._completion_shared import _completion_scripts, _get_shell_name

    from ..errors import BtacalcError

    for i, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if name not in COMPLETION_OPTIONS:
            continue
        given = value or (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else "")
        shell = given or _get_shell_name() or ""
        if shell not in _completion_scripts:
            raise BtacalcError(f"{name}: btacalc's completion is for {', '.join(sorted(_completion_scripts))}; "
                               f"the shell is {shell or 'not known'}")
