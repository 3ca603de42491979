"""scipy is in the extra that needs it (issue 25, item 7): `validate --calibrate` alone uses it.

The install's required dependencies do not name scipy, no btacalc module imports it when loaded (only
inside the function that fits), and without it `--calibrate` is one line on stderr with exit 2 naming the
extra to install.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _name(requirement: str) -> str:
    return requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip().lower()


def test_scipy_is_only_in_the_extras():
    project = _project()
    assert "scipy" not in {_name(r) for r in project["dependencies"]}
    assert "scipy" in {_name(r) for r in project["optional-dependencies"]["calibrate"]}


def test_no_module_imports_scipy_when_loaded():
    """Every `import scipy...` in btacalc/ sits inside a function body (loaded only when the fit runs)."""
    top_level = []
    for path in sorted((ROOT / "btacalc").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f)}
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "scipy" for n in names) and id(node) not in inside:
                top_level.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not top_level, top_level


def test_calibrate_without_scipy_is_one_line_naming_the_extra(monkeypatch):
    """With scipy not importable (sys.modules entry None makes `import` raise ImportError) the fit refuses
    with the install command, as a BtacalcError (the CLI's one line, exit 2)."""
    import pytest

    from btacalc.errors import BtacalcError
    from btacalc.planning.calibration import fit_family, load_families

    for name in [m for m in sys.modules if m == "scipy" or m.startswith("scipy.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    with pytest.raises(BtacalcError, match=r"needs scipy: pip install 'btacalc\[calibrate\]'") as exc:
        fit_family(load_families()[0])
    assert "\n" not in str(exc.value)
