"""A path option takes its path as written (hostile29): typer's Path type reads '' as '.', the working folder
(`plan --config ''` said "--config '.': not a regular file"). The text is checked before the option converts it,
on the command line (repeats.py) and in a run file (runfile.py), as integers are (integers.py). The options that
take a name or a path as text (--model, and `models show`) are checked where they are looked up (config.presets);
the outputs where they are opened (output.files.target: "--output '': not a file name")."""

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
    """Refuse `raw` for a path option if it is empty (one line naming the option)."""
    if takes_path(param) and isinstance(raw, str):
        check_path_text(param.opts[0], raw)
