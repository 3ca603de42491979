"""Load one of the repository's scripts (tools/*.py, or a test module read for its tables) as a module, by path:
tools/ is not a package, so the tests that check a tool's arithmetic import it through this one helper."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str | None = None) -> ModuleType:
    """The script at ROOT / `relative`, executed as a fresh module named `name` (default: the file's stem); not
    entered in sys.modules, so two tests loading one script get independent modules."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
