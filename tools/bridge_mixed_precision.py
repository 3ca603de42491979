"""Write btacalc/data/bridge_mixed_precision.toml: Megatron-Bridge's mixed-precision presets as data, read from the
source text of src/megatron/bridge/training/mixed_precision.py (Python's `ast`, nothing imported or run; a check
outside the test suite: it needs Bridge's git history).

    python tools/bridge_mixed_precision.py BRIDGE_GIT_DIR BRIDGE_COMMIT > btacalc/data/bridge_mixed_precision.toml

What it reads:
- MixedPrecisionConfig's dataclass fields, in order, each with its annotation and default (the source text of the
  expression) and its line;
- every function decorated `@register` (the names Bridge's get_mixed_precision_config takes; it registers each with
  hyphens too), whose body is either `return MixedPrecisionConfig(field=value, ...)` or `cfg = <another preset>()`,
  then `cfg.<field> = value` lines and `return cfg`: the preset it starts from (`base`, "" for the class itself) and
  each field it sets, with the line. Any other statement stops the tool (a preset it could not read is not guessed).

A value is the source text of the expression (`True`, `'hybrid'`, `1024`, `None`, `torch.bfloat16`): btacalc reads a
literal with ast.literal_eval and a `torch.<name>` as that torch attribute (btacalc.config.bridge_mixed).
"""

from __future__ import annotations

import ast
import subprocess
import sys

PATH = "src/megatron/bridge/training/mixed_precision.py"
CLASS = "MixedPrecisionConfig"


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True).stdout


def _toml_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _fields(tree: ast.Module) -> tuple[int, list[tuple[str, str, str, int]]]:
    """MixedPrecisionConfig's line and its (name, annotation, default, line) in order."""
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS)
    out = []
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.value is None:
                raise SystemExit(f"{CLASS}.{stmt.target.id} (L{stmt.lineno}) has no default")
            out.append((stmt.target.id, ast.unparse(stmt.annotation), ast.unparse(stmt.value), stmt.lineno))
    return node.lineno, out


def _preset(func: ast.FunctionDef, names: set[str]) -> tuple[str, list[tuple[str, str, int]]]:
    """The preset a registered function starts from and the (field, value, line) it sets."""
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    first, sets = body[0], []
    if isinstance(first, ast.Return) and isinstance(first.value, ast.Call) and ast.unparse(first.value.func) == CLASS:
        if first.value.args:
            raise SystemExit(f"{func.name} (L{func.lineno}): positional arguments")
        return "", [(k.arg or "", ast.unparse(k.value), k.value.lineno) for k in first.value.keywords]
    if not (isinstance(first, ast.Assign) and isinstance(first.value, ast.Call) and len(first.targets) == 1
            and isinstance(first.targets[0], ast.Name) and ast.unparse(first.value.func) in names | {CLASS}
            and not first.value.args and not first.value.keywords):
        raise SystemExit(f"{func.name} (L{first.lineno}): not `cfg = <preset>()`")
    var, base = first.targets[0].id, ast.unparse(first.value.func)
    for stmt in body[1:-1]:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)
                and ast.unparse(stmt.targets[0].value) == var):
            raise SystemExit(f"{func.name} (L{stmt.lineno}): not `{var}.<field> = value`")
        sets.append((stmt.targets[0].attr, ast.unparse(stmt.value), stmt.lineno))
    last = body[-1]
    if not (isinstance(last, ast.Return) and last.value is not None and ast.unparse(last.value) == var):
        raise SystemExit(f"{func.name} (L{last.lineno}): not `return {var}`")
    return ("" if base == CLASS else base), sets


def main(bridge_git: str, bridge_commit: str) -> None:
    commit = _git(bridge_git, "rev-parse", bridge_commit).strip()
    tree = ast.parse(_git(bridge_git, "show", f"{commit}:{PATH}"))
    class_line, fields = _fields(tree)
    registered = [n for n in tree.body if isinstance(n, ast.FunctionDef)
                  and any(ast.unparse(d) == "register" for d in n.decorator_list)]
    names = {f.name for f in registered}
    module = PATH.removeprefix("src/").removesuffix(".py").replace("/", ".")
    print(f"# Megatron-Bridge's mixed-precision presets (the functions {PATH} registers)")
    print(f"# and {CLASS}'s own fields and defaults, at")
    print(f"# NVIDIA-NeMo/Megatron-Bridge@{commit}.")
    print("# Written by tools/bridge_mixed_precision.py (read its docstring for the rule); do not edit by hand.")
    print("# A value is the source text of the expression; `line` is the line of that text in the file.")
    print()
    print(f'bridge = "NVIDIA-NeMo/Megatron-Bridge@{commit}"')
    print(f'path = "{PATH}"')
    print(f'config_class = "{module}.{CLASS}"')
    print(f"class_line = {class_line}")
    print()
    print("[fields]  # name = the annotation, the default and its line, in the dataclass's order")
    for name, annotation, default, line in fields:
        print(f"{name} = {{ annotation = {_toml_text(annotation)}, default = {_toml_text(default)}, line = {line} }}")
    known = {name for name, *_ in fields}
    for func in registered:
        base, sets = _preset(func, names)
        unknown = [f for f, _, _ in sets if f not in known]
        if unknown:
            raise SystemExit(f"{func.name}: sets {unknown}, which {CLASS} does not have")
        print()
        print(f"[presets.{func.name}]")
        print(f"line = {func.lineno}  # the def line")
        print(f'base = "{base}"  # the preset it starts from ("": {CLASS} with its defaults)')
        print("sets = [")
        for field, value, line in sets:
            print(f"  {{ field = \"{field}\", value = {_toml_text(value)}, line = {line} }},")
        print("]")


if __name__ == "__main__":
    main(*sys.argv[1:3])
