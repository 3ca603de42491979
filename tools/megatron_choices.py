"""Regenerate btacalc/data/megatron_choices.tsv and btacalc/data/megatron_types.tsv: the string choices and the value
type Megatron-LM's argparse takes for its options at the pin (btacalc.config.megatron_launch.MEGATRON_LM_PIN), read from
a Megatron-LM git directory without running it.

Two kinds (review21: hostile23's table held 23 of them by hand and left out arguments.py's own but two, so
`--optimizer Adam`, `--data-parallel-sharding-strategy OPTIM` or `--moe-router-load-balancing-type AUX_LOSS` were
read where Megatron-LM's argparse stops):
- `choices=[...]` of megatron/training/arguments.py's add_argument calls whose choices are strings;
- the string Literal fields of the config dataclasses arguments.py turns into options with ArgumentGroupFactory
  (megatron/training/argument_utils.py `_extract_type`: a Literal's values are the choices), less each factory's
  `exclude`; and the AttnBackend enum's names (`_get_enum_kwargs`: the member name, `config_type[cli_arg]`).
A dest Megatron's parser does not have (megatron_flags.tsv) is left out.

The types (argtypes24: `--hidden-dropout abc` or `--lr-warmup-iters x1` were planned, with the flag listed as ignored,
where argparse's type=float / type=int stops the launch): each option string's `type=` in arguments.py's add_argument
calls, and for the dataclass fields ArgumentGroupFactory builds options of, the type `_extract_type` derives from the
annotation (argument_utils.py L117-160: Optional[X] is X's, list[X] X's with nargs '+', a Literal its values' type, an
Enum's member names, bool a switch), each overridden by the field's `argparse_meta` (L182-214). Every option string of
megatron_flags.tsv gets one row; a type btacalc does not check as argparse does is written "unchecked", never guessed.

    python tools/megatron_choices.py /work/.mirror/NVIDIA+Megatron-LM/repo
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Iterator

PIN = "d98e8a64"
DATA = Path(__file__).resolve().parent.parent / "btacalc" / "data"
ARGUMENTS = "megatron/training/arguments.py"
# the dataclasses arguments.py builds options of (ArgumentGroupFactory), and their files
CLASSES = {
    "ModelParallelConfig": "megatron/core/model_parallel_config.py",  # TransformerConfig's base
    "TransformerConfig": "megatron/core/transformer/transformer_config.py",
    "RNGConfig": "megatron/training/config/common_config.py",
    "ProfilingConfig": "megatron/training/config/common_config.py",
    "DistributedInitConfig": "megatron/training/config/common_config.py",
    "ValidationConfig": "megatron/training/config/training_config.py",
    "TokenizerConfig": "megatron/training/config/training_config.py",
    "FaultInjectorConfig": "megatron/core/fault_injector.py",
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


def _config_fields(git_dir: str, excludes: dict[str, set[str]]) -> Iterator[tuple[str, ast.AnnAssign]]:
    """(path, field) of each config field ArgumentGroupFactory turns into an option (less its `exclude`)."""
    for cls, path in CLASSES.items():
        tree = ast.parse(_show(git_dir, path))
        body = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls).body
        for item in body:
            if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    and item.target.id not in excludes[FACTORY_CLASS.get(cls, cls)]):
                yield path, item


def choices(git_dir: str) -> dict[str, tuple[tuple[str, ...], str]]:
    known = {line.split("\t")[1] for line in (DATA / "megatron_flags.tsv").read_text().splitlines()
             if line and not line.startswith("#")}
    flags = {line.split("\t")[0]: line.split("\t")[1] for line in (DATA / "megatron_flags.tsv").read_text().splitlines()
             if line and not line.startswith("#")}
    out: dict[str, tuple[tuple[str, ...], str]] = {}
    arguments = ast.parse(_show(git_dir, ARGUMENTS))
    for path, item in _config_fields(git_dir, _excludes(arguments)):
        name, literal = item.target.id, None  # type: ignore[attr-defined]
        for sub in ast.walk(item.annotation):
            if isinstance(sub, ast.Subscript) and getattr(sub.value, "id", None) == "Literal":
                literal = sub
        if literal is None or name not in known:
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


# arguments.py's own type callables (L256-388): what each accepts, checked by btacalc as it reads (argtypes24)
CALLABLES = {
    "moe_freq_type": "freq",  # int(x), or with '[' a pattern _eval_pattern (L243-253) takes
    "la_freq_type": "freq",
    "no_rope_freq_type": "freq",
    "tuple_type": "int_tuple",  # tuple(int(i) for i in x.strip('()').split(','))
    "_parse_cuda_graph_modules_arg": "names",  # "full", "full_iteration", "full_iteration_inference" or a member name
}
CUDA_GRAPH_FULL = ("full", "full_iteration", "full_iteration_inference")  # arguments.py L258
ENUM_FILES = {"AttnBackend": "megatron/core/transformer/enums.py", "CudaGraphModule": "megatron/core/transformer/enums.py",
              "InferenceCudaGraphScope": "megatron/core/transformer/enums.py"}
PRIMITIVE = {"int", "float", "str", "bool"}


def _enum_names(git_dir: str, enum: str) -> tuple[str, ...]:
    tree = ast.parse(_show(git_dir, ENUM_FILES[enum]))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == enum)
    return tuple(t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name))


def _annotation_type(node: ast.expr) -> str:
    """The type `_extract_type` derives from a field's annotation (argument_utils.py L117-160; a list's nargs '+'
    gives each item the same): a primitive's name, "Literal:<value type>", an Enum's name, or "?" where it raises
    TypeInferenceError (a Union, a Callable, a tuple; argparse_meta must then give the type)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None
        return _annotation_type(node.left) if ast.unparse(node.right) == "None" else "?"
    if isinstance(node, ast.Subscript):
        head, args = ast.unparse(node.value), node.slice
        elts = args.elts if isinstance(args, ast.Tuple) else [args]
        if head == "Optional" or head == "Union" and len(elts) == 2 and ast.unparse(elts[1]) == "None":
            return _annotation_type(elts[0])
        if head in ("list", "List") and len(elts) == 1:
            return _annotation_type(elts[0])
        if head == "Literal":
            kinds = {type(ast.literal_eval(e)).__name__ for e in elts}
            return f"Literal:{kinds.pop()}"
        return "?"
    name = ast.unparse(node)
    return name if name in PRIMITIVE or name in ENUM_FILES else f"other:{name}"


def _meta(value: ast.expr | None) -> dict[str, ast.expr]:
    """A field's `metadata={"argparse_meta": {...}}` keywords, as AST."""
    if not (isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field"):
        return {}
    for kw in value.keywords:
        if kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
            for k, v in zip(kw.value.keys, kw.value.values):
                if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(v, ast.Dict):
                    return {str(ast.literal_eval(mk)): mv for mk, mv in zip(v.keys, v.values) if mk is not None}
    return {}


def _int_choices(node: ast.expr) -> str:
    """The integer values of a Literal in an annotation (Literal[0, 1, 2]: argparse's type=int with choices), or of a
    choices= list, comma-separated; "" when there are none."""
    values = [e.value for e in ast.walk(node) if isinstance(e, ast.Constant) and type(e.value) is int]
    literal = any(isinstance(e, ast.Subscript) and ast.unparse(e.value) == "Literal" for e in ast.walk(node))
    return ",".join(map(str, values)) if values and (literal or isinstance(node, (ast.List, ast.Tuple))) else ""


def _field_options(git_dir: str, excludes: dict[str, set[str]]) -> dict[str, tuple[str, str, str]]:
    """dest -> (type, its choices where _int_choices or an enum's names give them, file:line) of every option
    ArgumentGroupFactory builds from a config field."""
    out: dict[str, tuple[str, str, str]] = {}
    for path, item in _config_fields(git_dir, excludes):
        kind = _annotation_type(item.annotation)
        meta = _meta(item.value)
        if "type" in meta:
            kind = ast.unparse(meta["type"])
        dest = str(ast.literal_eval(meta["dest"])) if "dest" in meta else item.target.id  # type: ignore[attr-defined]
        listed = meta.get("choices")
        if isinstance(listed, ast.ListComp) and ast.unparse(listed.generators[0].iter) in ENUM_FILES:
            names = ",".join(_enum_names(git_dir, ast.unparse(listed.generators[0].iter)))  # [s.name for s in E]
        else:
            names = _int_choices(listed or item.annotation)
        out[dest] = (kind, names, f"{path}:{item.lineno}")
    return out


def _checked(git_dir: str, kind: str) -> tuple[str, str]:
    """(the check btacalc applies, its accepted names) for an argparse type."""
    if kind.startswith("Literal:"):
        kind = kind.split(":")[1]
    if kind in ("int", "float"):
        return kind, ""
    if kind in ("str", "bool"):  # str(x) and bool(x) take any text (bool('') is False, not an error)
        return "text", ""
    if kind in ENUM_FILES:  # `config_type[cli_arg]` (argument_utils.py L108-115): a member's name
        return "names", ",".join(_enum_names(git_dir, kind))
    if kind == "_parse_cuda_graph_modules_arg":
        return "names", ",".join(CUDA_GRAPH_FULL + _enum_names(git_dir, "CudaGraphModule"))
    if kind in CALLABLES:
        return CALLABLES[kind], ""
    return "unchecked", kind.removeprefix("other:")


def types(git_dir: str) -> dict[str, tuple[str, str, str, str]]:
    """flag -> (dest, the check, its accepted names, file:line) for every value-taking option of megatron_flags.tsv;
    a switch gets "switch"."""
    flags = {line.split("\t")[0]: line.split("\t") for line in (DATA / "megatron_flags.tsv").read_text().splitlines()
             if line and not line.startswith("#")}
    arguments = ast.parse(_show(git_dir, ARGUMENTS))
    fields = _field_options(git_dir, _excludes(arguments))
    own: dict[str, tuple[str, str, str]] = {}
    for n in ast.walk(arguments):
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "add_argument":
            kw = {k.arg: k.value for k in n.keywords}
            kind = ast.unparse(kw["type"]) if "type" in kw else "str"  # no type=: the text as given
            names = [str(ast.literal_eval(a)) for a in n.args]
            if "action" in kw and ast.unparse(kw["action"]).endswith("BooleanOptionalAction"):  # adds --no-X
                names += ["--no-" + a[2:] for a in names]
            for a in names:
                own[a] = (kind, _int_choices(kw["choices"]) if "choices" in kw else "", f"{ARGUMENTS}:{n.lineno}")
    out: dict[str, tuple[str, str, str, str]] = {}
    for flag, (_, dest, arity, _default) in flags.items():
        if dest == "help":  # argparse's own -h, --help
            kind, ints, where = "str", "", "argparse"
        elif flag in own:
            kind, ints, where = own[flag]
        elif dest in fields:
            kind, ints, where = fields[dest]
        else:
            raise SystemExit(f"{flag} ({dest}): no add_argument call or config field found")
        check, names = ("switch", "") if arity == "0" else _checked(git_dir, kind)
        names = names or ints
        if check == "text" and names:  # argparse_meta's choices of a str option (inference_cuda_graph_scope)
            check = "names"
        out[flag] = (dest, check, names, where)
    return dict(sorted(out.items()))


def main() -> None:
    rows = [f"{dest}\t{','.join(values)}\t{where}" for dest, (values, where) in choices(sys.argv[1]).items()]
    head = ["# The string choices of Megatron-LM's argparse options at NVIDIA/Megatron-LM@d98e8a64 (case-sensitive):",
            "# argparse stops a launch whose value is not one of them. Written by tools/megatron_choices.py from",
            "# arguments.py's choices= and the Literal fields (and AttnBackend's names) of the config dataclasses it",
            "# turns into options. Columns: argparse dest, its choices (comma-separated), file:line of the source."]
    (DATA / "megatron_choices.tsv").write_text("\n".join(head + rows) + "\n")
    rows = ["\t".join((flag, *row)) for flag, row in types(sys.argv[1]).items()]
    head = ["# The type Megatron-LM's argparse converts each option's value(s) with, at NVIDIA/Megatron-LM@d98e8a64:",
            "# argparse stops a launch whose value the type refuses, whether the run reads the option or not. Written",
            "# by tools/megatron_choices.py from arguments.py's add_argument(type=...) and the annotations (and",
            "# argparse_meta) of the config fields ArgumentGroupFactory turns into options. Columns: flag, argparse",
            "# dest, the check, the names it takes, file:line of the source. Checks: int: Python's int() (and one of",
            "# the names where it lists them); float: float(); text: any text; switch: takes no value; names: one of",
            "# the names; freq: int(), or with '[' only , digits [ ] ( ) + * (arguments.py _eval_pattern; the",
            "# expression's value is checked where btacalc reads it); int_tuple: int() of each comma-separated item",
            "# after stripping ( and ); unchecked: a type btacalc does not check (named in the names column)."]
    (DATA / "megatron_types.tsv").write_text("\n".join(head + rows) + "\n")


if __name__ == "__main__":
    main()
