"""Shell completion of names (issue 25): preset model names for --model, hardware profile names for --hw
(also after a comma in a list of profiles), from the files btacalc ships. Paths are left to the shell.
typer calls these with the word being typed (`autocompletion=`); `btacalc --install-completion`
installs the completion script."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ..errors import BtacalcError
from ..paths import preset_names, profile_names  # the file names only: completion imports no model code


def complete_model(incomplete: str) -> list[str]:
    return [n for n in preset_names() if n.startswith(incomplete)]


def complete_hardware(incomplete: str) -> list[str]:
    return [n for n in profile_names() if n.startswith(incomplete)]


def complete_run(incomplete: str) -> list[str]:
    """The shipped measured runs' ids (`validate --explain`), read from the run file's JSON as it is (no
    validation: completion imports no model code); none when the file cannot be read."""
    import json

    from ..paths import package_data

    try:
        runs = json.loads(package_data("measured_runs.json").read_text(encoding="utf-8"))["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return sorted(r["id"] for r in runs if isinstance(r, dict) and str(r.get("id", "")).startswith(incomplete))


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


def check_completion_shell(args: list[str]) -> tuple[Path, ...]:
    """A completion flag in a shell typer has no script for is bad input (one line, exit 2): typer printed "Shell
    sh not supported." and exited 1, the code of a plan that does not fit (hostile27). Only the options before the
    command are btacalc's own; the shell is the detected one (review22: the word after the flag is not a shell).
    Returns the files `--install-completion` will write (`restored_on_failure` keeps them), none otherwise."""
    given = [a for a in _leading_options(args) if a in COMPLETION_OPTIONS]
    if not given or os.getenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"):
        return ()
    try:
        import shellingham  # type: ignore[import-untyped]  # noqa: F401  # typer detects the shell only with it
        from typer._completion_shared import _completion_scripts, _get_shell_name
    except ImportError:  # another typer: its own message stands
        return ()
    shell = _get_shell_name() or ""
    if shell not in _completion_scripts:
        raise BtacalcError(f"{given[0]}: btacalc's completion is for {', '.join(sorted(_completion_scripts))}; the "
                           f"shell here is {shell or 'not known'}")
    if "--install-completion" not in given:
        return ()
    return check_install_targets(shell, PROG)  # app.py: command.main(prog_name="btacalc")


# the files typer's installer writes per shell, under the home folder: the start-up file it appends a line to, then
# the completion script (typer/_completion_shared.py @ 0.29.2 install_bash, install_zsh, install_fish; PowerShell
# asks the shell for its profile path, not checked here)
_INSTALL_TARGETS = {"bash": (".bashrc", ".bash_completions/{prog}.sh"), "zsh": (".zshrc", ".zfunc/_{prog}"),
                    "fish": (None, ".config/fish/completions/{prog}.fish")}


def check_install_targets(shell: str, prog: str) -> tuple[Path, ...]:
    """typer writes the start-up file first and then creates the script's folder, so a script path it cannot
    create (a file where its folder goes) failed after the start-up file had gained a `source` line to a script
    that never came: every new shell then reported the missing file. Each path is checked before anything is
    written: the start-up file a writable UTF-8 file, or absent (or a link to nothing) in a writable folder; every
    folder on the script's path a folder (not a link to nothing) or absent under a writable one; the script a
    writable file or absent. Bad input: one line, exit 2. Returns the files to keep (start-up file, script)."""
    home = Path.home()
    rc, script = _INSTALL_TARGETS.get(shell, (None, None))
    problem = _startup_file_problem(home / rc) if rc else None
    if problem is None and script:
        problem = _script_path_problem(home, script.format(prog=prog))
    if problem is not None:
        raise BtacalcError(f"--install-completion: {problem}; nothing was installed")
    return tuple(home / p.format(prog=prog) for p in (rc, script) if p)


def _writable_folder(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def _startup_file_problem(path: Path) -> str | None:
    if not path.exists():  # absent, or a link to nothing, which typer's write_text creates at the link's target
        target = path.resolve() if path.is_symlink() else path
        return None if target.parent.is_dir() and _writable_folder(target.parent) else f"cannot create {target}"
    if not path.is_file():
        return f"{path} is not a file"
    try:
        path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read {path} as text ({type(exc).__name__})"
    return None if os.access(path, os.W_OK) else f"cannot write {path}"


def _script_path_problem(home: Path, relative: str) -> str | None:
    """review23: a link to nothing on the way, or a folder or script that cannot be written, failed only after
    the start-up file was written."""
    path = home / relative
    last = home.parent
    for folder in reversed(path.parents):
        if folder.is_symlink() and not folder.exists():
            return f"{folder} is a link to nothing (the completion script goes in {path.parent})"
        if folder.exists() and not folder.is_dir():
            return f"{folder} is not a folder (the completion script goes in {path.parent})"
        if folder.is_dir():
            last = folder
    if not _writable_folder(last) and not (path.is_file() and os.access(path, os.W_OK)):
        return f"cannot write in {last} (the completion script goes in {path.parent})"
    if path.is_symlink() and not path.exists():
        return f"{path} is a link to nothing"
    if path.is_dir():
        return f"{path} is a folder"
    return None if not path.exists() or os.access(path, os.W_OK) else f"cannot write {path}"


@contextmanager
def restored_on_failure(files: tuple[Path, ...]) -> Iterator[None]:
    """What an install that fails after all (a race with the checks, a full disk, a signal) leaves: each file as it
    was, its bytes put back or the new file removed, and the folders the install made removed while empty."""
    files = tuple(f.resolve() for f in files)  # a link is kept as it is: what is put back is the file it names
    saved = {f: (f.read_bytes() if f.is_file() else None) for f in files}
    made = [d for f in files for d in f.parents if not d.exists()]
    try:
        yield
    except SystemExit as done:  # typer's installer ends a finished install with exit 0
        if done.code in (0, None):
            raise
        _undo(saved, made)
        raise
    except BaseException:
        _undo(saved, made)
        raise


def _undo(saved: dict[Path, bytes | None], made: list[Path]) -> None:
    for f, before in saved.items():
        _put_back(f, before)
    for d in sorted(set(made), key=lambda d: len(d.parts), reverse=True):
        with suppress(OSError):
            d.rmdir()


def _put_back(path: Path, before: bytes | None) -> None:
    with suppress(OSError):
        if before is not None and (not path.is_file() or path.read_bytes() != before):
            path.write_bytes(before)
        elif before is None and path.is_file():
            path.unlink()


def _leading_options(args: list[str]) -> list[str]:
    """The options before the first word that is not one (the command)."""
    out = []
    for arg in args:
        if not arg.startswith("-"):
            break
        out.append(arg)
    return out
