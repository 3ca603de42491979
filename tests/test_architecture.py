"""The shape of the code, checked: layer contracts (import-linter), types (mypy), small functions
with few loose parameters in the modelling core, and no Python branching on phase names."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "btacalc"
CORE = ("model", "catalogue", "config")  # the modelling core


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter not installed (test extra)")
def test_import_layers_and_no_cycles():
    res = _run("lint-imports")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]


def test_type_check():
    pytest.importorskip("mypy")
    res = _run(sys.executable, "-m", "mypy")
    assert res.returncode == 0, res.stdout[-4000:]


def _functions(folder: Path):
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node


@pytest.mark.parametrize("part", CORE)
def test_core_functions_are_small_with_few_loose_parameters(part):
    too_long, too_wide = [], []
    for path, fn in _functions(PKG / part):
        lines = fn.end_lineno - fn.lineno + 1  # type: ignore[operator]  # end_lineno is set by ast.parse
        args = fn.args
        params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]
        if lines > 60:
            too_long.append(f"{path.relative_to(ROOT)}:{fn.name} ({lines} lines)")
        if len(params) > 8:
            too_wide.append(f"{path.relative_to(ROOT)}:{fn.name} ({len(params)} parameters)")
    assert not too_long and not too_wide, too_long + too_wide


def _phase_name_uses(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """Where code singles out a phase by name: `x.name == "experts"`, `pv.value("experts", q)`,
    `phase_time["experts"]`."""
    def named(node: ast.AST) -> str | None:
        return node.value if isinstance(node, ast.Constant) and node.value in names else None

    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Attribute) and o.attr == "name" for o in operands):
                hits += [(node.lineno, n) for n in map(named, operands) if n]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("value", "phase_by_name") and named(node.args[0]):
                hits.append((node.lineno, named(node.args[0])))
        elif isinstance(node, ast.Subscript) and named(node.slice):
            hits.append((node.lineno, named(node.slice)))
    return hits


def test_no_python_branches_on_phase_names():
    from btacalc.catalogue.terms import load_catalogue

    names = {p.name for p in load_catalogue()}
    found = []
    for part in ("model", "planning", "catalogue", "output"):  # config maps file fields, not phases
        for path in sorted((PKG / part).rglob("*.py")):
            for line, name in _phase_name_uses(ast.parse(path.read_text(encoding="utf-8")), names):
                found.append(f"{path.relative_to(ROOT)}:{line} {name!r}")
    assert not found, "phase behaviour belongs in the catalogue (phase attributes), not in Python: " + ", ".join(found)


def test_the_phase_name_check_can_fail():
    code = 'if phase.name == "experts": pass\nx = pv.value("embedding", "params")\ny = t["lm_head"]'
    assert [n for _, n in _phase_name_uses(ast.parse(code), {"experts", "embedding", "lm_head"})] == \
        ["experts", "embedding", "lm_head"]


def test_no_module_imports_another_modules_private_names():
    # review23: bridge_codec.py, split out of megatron_codec.py, imported its `_bool`; a name another module needs is
    # public (a `name as _alias` import of a public name is fine)
    found = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                found += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []
