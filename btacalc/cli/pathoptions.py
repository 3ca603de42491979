"""A path option takes its path as written (hostile29): typer's Path type reads '' as '.', the working folder
(`plan --config ''` said "--config '.': not a regular file"), and drops a trailing slash (`--from-megatron a.sh/`
read a.sh, which a shell and open() refuse: "Not a directory"). The text is checked before the option converts it,
on the command line (repeats.py) and in a run file (runfile.py), as integers are (integers.py). The options that
take a name or a path as text (--model, --hw, and `models show`, `hw show`, `hw check`) are checked where they are
looked up (config.presets, config.hardware); the outputs where they are opened (output.files.target)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ..config.text import check_path_text


def takes_path(param: Any) -> bool:
    """An option whose value is one path (its annotation Path, or Optional[Path])."""
    runtime = getattr(param, "get_runtime_param", None)
    annotation = getattr(runtime(), "annotation", None) if runtime is not None else None
    return annotation in (Path, Optional[Path]) and not getattr(param, "multiple", False)


def check_path(param: Any, raw: Any) -> None:
    """Refuse `raw` for a path option if it is empty, or ends in a slash but names a file (one line naming the
    option)."""
    if takes_path(param) and isinstance(raw, str):
        check_path_text(param.opts[0], raw)
