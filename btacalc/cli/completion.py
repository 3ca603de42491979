"""Shell completion of names (issue 25): preset model names for --model, hardware profile names for --hw
(also after a comma in a list of profiles), from the files btacalc ships. Paths are left to the shell.
typer calls these with the word being typed (`autocompletion=`); `btacalc --install-completion`
installs the completion script."""

from __future__ import annotations

import os
from pathlib import Path

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


# typer's completion options (`btacalc --install-completion`, `--show-completion`): with shellingham installed they are
# flags and typer detects the shell; with detection off (_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION) they take a shell
# name, which click checks against typer's choices itself (typer/completion.py @ 0.29.2
# _install_completion_placeholder_function and its no-auto twin)
PROG = "btacalc"
COMPLETION_OPTIONS = ("--install-completion", "--show-completion")


def check_completion_shell(args: list[str]) -> None:
    """A completion flag in a shell typer has no script for is bad input (one line, exit 2): typer printed "Shell
    sh not supported." and exited 1, the code of a plan that does not fit (hostile27). Only the options before the
    command are btacalc's own; the shell is the detected one (review22: the word after the flag is not a shell)."""
    from ..errors import BtacalcError

    given = [a for a in _leading_options(args) if a in COMPLETION_OPTIONS]
    if not given or os.getenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"):
        return
    try:
        import shellingham  # type: ignore[import-untyped]  # noqa: F401  # typer detects the shell only with it
        from typer._completion_shared import _completion_scripts, _get_shell_name
    except ImportError:  # another typer: its own message stands
        return
    shell = _get_shell_name() or ""
    if shell not in _completion_scripts:
        raise BtacalcError(f"{given[0]}: btacalc's completion is for {', '.join(sorted(_completion_scripts))}; the "
                           f"shell here is {shell or 'not known'}")
    if "--install-completion" in given:
        check_install_targets(shell, PROG)  # app.py: command.main(prog_name="btacalc")


# the files typer's installer writes per shell, under the home folder: the start-up file it appends a line to, then
# the completion script (typer/_completion_shared.py @ 0.29.2 install_bash, install_zsh, install_fish; PowerShell
# asks the shell for its profile path, not checked here)
_INSTALL_TARGETS = {"bash": (".bashrc", ".bash_completions/{prog}.sh"), "zsh": (".zshrc", ".zfunc/_{prog}"),
                    "fish": (None, ".config/fish/completions/{prog}.fish")}


def check_install_targets(shell: str, prog: str) -> None:
    """typer writes the start-up file first and then creates the script's folder, so a script path it cannot
    create (a file where its folder goes) failed after the start-up file had gained a `source` line to a script
    that never came: every new shell then reported the missing file. Each path is checked before anything is
    written: the start-up file is a readable UTF-8 file or absent, every folder on the script's path a folder or
    absent, the script itself not a folder. Bad input: one line, exit 2."""
    from ..errors import BtacalcError

    home = Path.home()
    rc, script = _INSTALL_TARGETS.get(shell, (None, None))
    problem = _startup_file_problem(home / rc) if rc else None
    if problem is None and script:
        problem = _script_path_problem(home, script.format(prog=prog))
    if problem is not None:
        raise BtacalcError(f"--install-completion: {problem}; nothing was installed")


def _startup_file_problem(path: Path) -> str | None:
    if not path.exists():
        return None if not path.is_symlink() else f"{path} is a link to nothing"
    if not path.is_file():
        return f"{path} is not a file"
    try:
        path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read {path} as text ({type(exc).__name__})"
    return None if os.access(path, os.W_OK) else f"cannot write {path}"


def _script_path_problem(home: Path, relative: str) -> str | None:
    path = home / relative
    for folder in reversed(path.parents):
        if folder.exists() and not folder.is_dir():
            return f"{folder} is not a folder (the completion script goes in {path.parent})"
    return f"{path} is a folder" if path.is_dir() else None


def _leading_options(args: list[str]) -> list[str]:
    """The options before the first word that is not one (the command)."""
    out = []
    for arg in args:
        if not arg.startswith("-"):
            break
        out.append(arg)
    return out
