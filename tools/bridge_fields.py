"""Write btacalc/data/bridge_fields.toml: the field names of each section of Megatron-Bridge's ConfigContainer, read
from the source text (Python's `ast`, nothing imported or run) of Megatron-Bridge and of the Megatron-LM its
3rdparty/Megatron-LM submodule pins at that commit (a check outside the test suite: it needs both git histories).

    python tools/bridge_fields.py BRIDGE_GIT_DIR BRIDGE_COMMIT MEGATRON_LM_GIT_DIR > btacalc/data/bridge_fields.toml

A section's names are the dataclass fields (class-level annotations of a @dataclass, ClassVar left out, as
`dataclasses.fields` lists them; Bridge builds its OmegaConf config from `dataclasses.fields`,
src/megatron/bridge/training/utils/omegaconf_utils.py _dataclass_to_omegaconf_dict) of every class the section's
annotation in ConfigContainer names, of their dataclass ancestors, and of every dataclass that subclasses one of
them (a recipe's model is a GPTModelProvider subclass: LlamaModelProvider, DeepSeekModelProvider, ...; btacalc does
not see which, so a section holds the union). Classes are matched by their bare name across both trees; a name
defined twice counts both definitions (the union only grows: a real field is never left out). A section whose
annotation is a dict (env_vars) holds any key; one that admits a str (mixed_precision) also takes a plain value.
A field whose annotation (in any class that defines it) admits keys below it (dict, Dict, Mapping, Any, or a dataclass
of either tree: model.tp_comm_overlap_cfg is `Optional[Union[str, dict[str, Any]]]`, gpt_provider.py L165) is listed in the section's
`nested_fields` (review14: --from-bridge refuses keys below a field btacalc reads unless the field is one of them).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field

CONTAINER_PATH = "src/megatron/bridge/training/config.py"
CONTAINER = "ConfigContainer"
PLAIN = {"str"}  # annotation names that admit a plain value for the section itself
FREE = {"dict", "Dict"}  # annotation names that admit any key below the section
MAPPING = FREE | {"Mapping", "MutableMapping", "Any"}  # annotation names that admit keys below a field
NOT_CLASSES = {"Optional", "Union", "None", "typing", "str", "dict", "Dict", "int", "float", "bool"}


@dataclass
class ClassInfo:
    name: str
    path: str  # repository:path
    bases: list[str]
    fields: list[str]
    is_dataclass: bool
    children: list[str] = field(default_factory=list)
    annotation_names: dict[str, set[str]] = field(default_factory=dict)  # per field, the names its annotation mentions


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True).stdout


def _bare(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _bare(node.value)
    if isinstance(node, ast.Call):
        return _bare(node.func)
    return ""


def _is_classvar(annotation: ast.expr) -> bool:
    return _bare(annotation) == "ClassVar" or (isinstance(annotation, ast.Constant)
                                                and str(annotation.value).startswith("ClassVar"))


def _classes(text: str, where: str) -> list[ClassInfo]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    # a base imported under another name (`from megatron.core.optimizer import OptimizerConfig as
    # MCoreOptimizerConfig`) is the class of its own name
    alias = {a.asname: a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names if a.asname}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        fields = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                  and not _is_classvar(s.annotation)]
        is_dc = any(_bare(d) == "dataclass" for d in node.decorator_list)
        names = {s.target.id: _names(s.annotation) for s in node.body
                 if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and not _is_classvar(s.annotation)}
        out.append(ClassInfo(node.name, where, [alias.get(_bare(b), _bare(b)) for b in node.bases], fields, is_dc,
                             annotation_names=names))
    return out


def _tree(git_dir: str, commit: str, prefix: str, label: str) -> list[ClassInfo]:
    paths = [p for p in _git(git_dir, "ls-tree", "-r", "--name-only", commit, prefix).splitlines() if p.endswith(".py")]
    out: list[ClassInfo] = []
    for path in paths:
        out.extend(_classes(_git(git_dir, "show", f"{commit}:{path}"), f"{label}:{path}"))
    return out


def _names(annotation: ast.expr) -> set[str]:
    """Every bare name an annotation mentions (X | Y, Optional[X], Union[X, str], "X")."""
    out: set[str] = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:  # a forward reference ("X"); a Literal's string ("async") is no annotation
                out |= _names(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                pass
    return out


def _members(annotation: ast.expr) -> set[str]:
    """The bare names of an annotation's top-level union (X | Y, Optional[X], Union[X, str]); dict[str, ...] is dict."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _members(annotation.left) | _members(annotation.right)
    if isinstance(annotation, ast.Subscript) and _bare(annotation.value) in ("Optional", "Union"):
        inner = annotation.slice
        return set().union(*(_members(e) for e in (inner.elts if isinstance(inner, ast.Tuple) else [inner])))
    return {_bare(annotation)} if not isinstance(annotation, ast.Constant) else {str(annotation.value)}


def main(bridge_git: str, bridge_commit: str, mlm_git: str) -> None:
    bridge_commit = _git(bridge_git, "rev-parse", bridge_commit).strip()
    submodule = _git(bridge_git, "ls-tree", bridge_commit, "3rdparty/Megatron-LM").split()
    mlm_commit = submodule[2]
    bridge_label, mlm_label = f"Megatron-Bridge@{bridge_commit[:8]}", f"Megatron-LM@{mlm_commit[:8]}"
    classes = (_tree(bridge_git, bridge_commit, "src/megatron/bridge", bridge_label)
               + _tree(mlm_git, mlm_commit, "megatron", mlm_label))
    by_name: dict[str, list[ClassInfo]] = {}
    for c in classes:
        by_name.setdefault(c.name, []).append(c)
    for c in classes:
        for b in c.bases:
            for parent in by_name.get(b, []):
                parent.children.append(c.name)

    def ancestors(name: str, seen: set[str]) -> None:
        for c in by_name.get(name, []):
            for b in c.bases:
                if b in by_name and b not in seen:
                    seen.add(b)
                    ancestors(b, seen)

    def descendants(name: str, seen: set[str]) -> None:
        for c in by_name.get(name, []):
            for child in c.children:
                if child not in seen:
                    seen.add(child)
                    descendants(child, seen)

    container = next(c for c in _classes(_git(bridge_git, "show", f"{bridge_commit}:{CONTAINER_PATH}"), "")
                     if c.name == CONTAINER)
    tree = ast.parse(_git(bridge_git, "show", f"{bridge_commit}:{CONTAINER_PATH}"))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == CONTAINER)
    annotations = {s.target.id: s.annotation for s in node.body
                   if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    dataclasses_ = {c.name for c in classes if c.is_dataclass}

    def admits_keys(names: set[str]) -> bool:
        return bool(names & MAPPING) or bool(names & dataclasses_)

    print(f"# The field names of Megatron-Bridge's config sections (ConfigContainer, {CONTAINER_PATH}) at")
    print(f"# NVIDIA-NeMo/Megatron-Bridge@{bridge_commit}, with the Megatron-Core classes they build on at")
    print(f"# NVIDIA/Megatron-LM@{mlm_commit} (Bridge's 3rdparty/Megatron-LM submodule at that commit).")
    print("# Written by tools/bridge_fields.py (read its docstring for the rule); do not edit by hand.")
    print("# Per section: the classes whose dataclass fields are counted (repository@commit:path:Class), the names,")
    print("# whether any key below the section is Bridge's (a dict: free) and whether the section takes a plain value;")
    print("# nested_fields: the fields whose annotation admits keys below them (a dict, Any or a dataclass).")
    print()
    print(f'bridge = "NVIDIA-NeMo/Megatron-Bridge@{bridge_commit}"')
    print(f'megatron_lm = "NVIDIA/Megatron-LM@{mlm_commit}"')
    print(f'container = "{CONTAINER_PATH}:{CONTAINER}"')
    for section in container.fields:
        if section.startswith("_"):
            continue
        mentioned = _names(annotations[section])
        roots = sorted(n for n in mentioned if n in by_name and n not in NOT_CLASSES)
        seen: set[str] = set(roots)
        for r in roots:
            descendants(r, seen)
        # a descendant's own ancestors outside the roots' line (a mixin dataclass) add fields too
        for name in list(seen):
            ancestors(name, seen)
        counted = sorted({(c.path, c.name) for n in seen for c in by_name[n] if c.is_dataclass and c.fields})
        names = sorted({f for n in seen for c in by_name[n] if c.is_dataclass for f in c.fields})
        nested = sorted({f for n in seen for c in by_name[n] if c.is_dataclass
                         for f, mentioned_by_f in c.annotation_names.items() if admits_keys(mentioned_by_f)})
        print()
        print(f"[sections.{section}]")
        print(f"annotation = {ast.unparse(annotations[section])!r}".replace("'", '"'))
        print(f"free = {'true' if mentioned & FREE else 'false'}")
        print(f"plain_value = {'true' if _members(annotations[section]) & PLAIN else 'false'}")
        print("classes = [")
        for path, name in counted:
            print(f'  "{path}:{name}",')
        print("]")
        for key, listed in (("fields", names), ("nested_fields", nested)):
            print(f"{key} = [")
            line = " "
            for n in listed:
                if len(line) + len(n) + 4 > 118:
                    print(line.rstrip())
                    line = " "
                line += f' "{n}",'
            if line.strip():
                print(line.rstrip())
            print("]")


if __name__ == "__main__":
    main(*sys.argv[1:4])
