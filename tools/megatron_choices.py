"""Regenerate btacalc/data/megatron_choices.tsv: the string choices Megatron-LM's argparse takes for its options at the
pin (btacalc.config.megatron_launch.MEGATRON_LM_PIN), read from a Megatron-LM git directory without running it.

Two kinds (review21: hostile23's table held 23 of them by hand and left out arguments.py's own but two, so
`--optimizer Adam`, `--data-parallel-sharding-strategy OPTIM` or `--moe-router-load-balancing-type AUX_LOSS` were
read where Megatron-LM's argparse stops):
- `choices=[...]` of megatron/training/arguments.py's add_argument calls whose choices are strings;
- the string Literal fields of the config dataclasses arguments.py turns into options with ArgumentGroupFactory
  (megatron/training/argument_utils.py `_extract_type`: a Literal's values are the choices), less each factory's
  `exclude`; and the AttnBackend enum's names (`_get_enum_kwargs`: the member name, `config_type[cli_arg]`).
A dest Megatron's parser does not have (megatron_flags.tsv) is left out.

    python tools/megatron_choices.py /work/.mirror/NVIDIA+Megatron-LM/repo
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PIN = "d98e8a64"
DATA = Path(__file__).resolve().parent.parent / "btacalc" / "data"
ARGUMENTS = "megatron/training/arguments.py"
# the dataclasses arguments.py builds options of (ArgumentGroupFactory), and their files
CLASSES = {
    "ModelParallelConfig": "megatron/core/model_parallel_config.py",  # TransformerConfig's base
    "TransformerConfig": "megatron/core/transformer/transformer_config.py",
    "RNGConfig": "megatron/training/config/common_config.py",
    "ProfilingConfig": "megatron/training/config/common_config.py",
    "RerunStateMachineConfig": "megatron/training/config/resilience_config.py",
    "StragglerDetectionConfig": "megatron/training/config/resilience_config.py",
    "TrainingConfig": "megatron/training/config/training_config.py",
    "SchedulerConfig": "megatron/training/config/training_config.py",
    "LoggerConfig": "megatron/training/config/training_config.py",
    "CheckpointConfig": "megatron/training/config/training_config.py",
}
FACTORY_CLASS = {"ModelParallelConfig": "TransformerConfig"}  # built as part of TransformerConfig's group
ENUMS = {"attention_backend": ("megatron/core/transformer/enums.py", "AttnBackend")}


def _show(git_dir: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"{PIN}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def _strings(node: ast.AST) -> list[str]:
    return [e.value for e in ast.walk(node) if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _excludes(tree: ast.Module) -> dict[str, set[str]]:
    """Each factory's `exclude` (a keyword list, or the name of a list assigned before it)."""
    lists = {t.id: set(ast.literal_eval(n.value)) for n in ast.walk(tree) if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.List)
             and all(isinstance(e, ast.Constant) for e in n.value.elts)}
    out: dict[str, set[str]] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "ArgumentGroupFactory":
            cls = n.args[0].id  # type: ignore[attr-defined]
            for kw in n.keywords:
                if kw.arg == "exclude":
                    out[cls] = lists[kw.value.id] if isinstance(kw.value, ast.Name) else set(ast.literal_eval(kw.value))
            out.setdefault(cls, set())
    return out


def choices(git_dir: str) -> dict[str, tuple[tuple[str, ...], str]]:
    known = {line.split("\t")[1] for line in (DATA / "megatron_flags.tsv").read_text().splitlines()
             if line and not line.startswith("#")}
    flags = {line.split("\t")[0]: line.split("\t")[1] for line in (DATA / "megatron_flags.tsv").read_text().splitlines()
             if line and not line.startswith("#")}
    out: dict[str, tuple[tuple[str, ...], str]] = {}
    arguments = ast.parse(_show(git_dir, ARGUMENTS))
    excludes = _excludes(arguments)
    for cls, path in CLASSES.items():
        tree = ast.parse(_show(git_dir, path))
        body = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls).body
        for item in body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            name, literal = item.target.id, None
            for sub in ast.walk(item.annotation):
                if isinstance(sub, ast.Subscript) and getattr(sub.value, "id", None) == "Literal":
                    literal = sub
            if literal is None or name in excludes[FACTORY_CLASS.get(cls, cls)] or name not in known:
                continue
            values = _strings(literal.slice)
            if values:
                out[name] = (tuple(values), f"{path}:{item.lineno}")
    for dest, (path, enum) in ENUMS.items():
        tree = ast.parse(_show(git_dir, path))
        node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == enum)
        names = [t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
        out[dest] = (tuple(names), f"{path}:{node.lineno}")
    for n in ast.walk(arguments):
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "add_argument":
            kw = {k.arg: k.value for k in n.keywords}
            if "choices" not in kw or not isinstance(kw["choices"], (ast.List, ast.Tuple)):
                continue
            values = ast.literal_eval(kw["choices"])
            name = n.args[0].value  # type: ignore[attr-defined]
            if all(isinstance(v, str) for v in values) and name in flags:
                out[flags[name]] = (tuple(values), f"{ARGUMENTS}:{n.lineno}")
    return dict(sorted(out.items()))


def main() -> None:
    rows = [f"{dest}\t{','.join(values)}\t{where}" for dest, (values, where) in choices(sys.argv[1]).items()]
    head = ["# The string choices of Megatron-LM's argparse options at NVIDIA/Megatron-LM@d98e8a64 (case-sensitive):",
            "# argparse stops a launch whose value is not one of them. Written by tools/megatron_choices.py from",
            "# arguments.py's choices= and the Literal fields (and AttnBackend's names) of the config dataclasses it",
            "# turns into options. Columns: argparse dest, its choices (comma-separated), file:line of the source."]
    (DATA / "megatron_choices.tsv").write_text("\n".join(head + rows) + "\n")


if __name__ == "__main__":
    main()
