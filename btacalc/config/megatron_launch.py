"""Megatron-LM launch text -> Megatron arguments: a launch script (variables, bash arrays, line
continuations, `export NAME=...`, `torchrun ... pretrain_gpt.py` prefixes) or a plain file of arguments,
read with `shlex`; then the arguments checked against Megatron-LM's own parser.

Megatron's flags, their argparse destinations and arities are data (btacalc/data/megatron_flags.tsv),
read from the parser `megatron/training/arguments.py` builds at the pinned commit (MEGATRON_LM_PIN):
an unknown flag, a value where a switch stands, or one flag given twice with two values is a
one-line error (exit 2), never a guess.
"""

from __future__ import annotations

import ast
import difflib
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional, TypeVar

from ..errors import BtacalcError
from ..paths import package_data
from .bash import (ASSIGNMENT, COMMAND_SUBSTITUTION, VARIABLE, assign_variable, assignments_of, commands_of,
                   defaults_taken, expand, forget_variable, mark_unexpandable, refuse_unexpanded, statements_of,
                   unset_defaulted, unset_statement)
from .bounded_arithmetic import safe_eval
from .text import blank_after_backslash, nearest_name
from .text import cut as _cut

MEGATRON_LM_PIN = "NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553"
MEGATRON_LM_SHORT = "Megatron-LM@d98e8a64"


@dataclass(frozen=True)
class Flag:
    """One Megatron-LM option: its argparse destination, arity (0 switch, 1 value, + or * list) and default."""

    flag: str
    dest: str
    arity: str
    default: str

    @property
    def store_false(self) -> bool:
        """A switch that turns its destination off (--disable-bias-linear sets add_bias_linear False)."""
        return self.arity == "0" and self.default == "True"


@lru_cache(maxsize=1)
def megatron_flags() -> dict[str, Flag]:
    """Every option string of Megatron-LM's parser at the pinned commit."""
    flags: dict[str, Flag] = {}
    for line in package_data("megatron_flags.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, dest, arity, default = line.split("\t")
        flags[name] = Flag(name, dest, arity, default)
    return flags


@lru_cache(maxsize=1)
def flags_by_dest() -> dict[str, list[Flag]]:
    out: dict[str, list[Flag]] = {}
    for f in megatron_flags().values():
        out.setdefault(f.dest, []).append(f)
    return out


@dataclass
class Launch:
    """What a launch text says: Megatron's arguments (dest -> value, in order), the flag each came from,
    the environment it sets and the devices its launcher starts."""

    args: dict[str, Any] = field(default_factory=dict)
    given_as: dict[str, str] = field(default_factory=dict)  # dest -> the flag the text used
    env: dict[str, str] = field(default_factory=dict)
    devices: Optional[int] = None
    devices_per_node: Optional[int] = None
    source: str = ""
    # a launcher size that is no number btacalc can read (`--nnodes $SLURM_NNODES`, `--nproc_per_node gpu`,
    # `--nnodes 1:4`), as written: the devices must then be given (megatron_run._devices)
    unknown_size: str = ""
    # what the plan cannot see and the reader says (hostile22: a file `source`d before `${NAME:-default}`)
    notes: list[str] = field(default_factory=list)
    # the Python script the launcher runs, as written (hostile25: megatron_run refuses the scripts of other models)
    script: str = ""
    # the variables the file leaves unset whose default (`NNODES=${SLURM_NNODES:-1}`) sets torchrun's process count:
    # the run's count is the scheduler's, so `--devices` gives it (freshuser21); and whether they set the processes
    # per node too (else a count must be a whole number of nodes of devices_per_node)
    scheduled: tuple[str, ...] = ()
    scheduled_per_node: bool = False
_LAUNCHERS = {"--nproc_per_node": "per_node", "--nproc-per-node": "per_node", "--nnodes": "nodes"}


def read_launch(text: str, source: str = "-", environment: Optional[dict[str, str]] = None) -> Launch:
    """The Megatron arguments of a launch script or of a file of arguments (see module docstring); `environment`:
    variables set before the script runs (the probe of _scheduled)."""
    text = re.sub(r"\\\r?\n", " ", text)
    variables: dict[str, str] = dict(environment or {})
    substituted: set[str] = set()  # variables set by a command's output, which btacalc does not run
    unexpandable: dict[str, str] = {}  # variables whose value holds a bash form btacalc does not expand (_leftover)
    launch = Launch(source=source)
    command: Optional[list[str]] = None
    plain: list[str] = []
    before = False  # flags outside the command came first
    unread: list[str] = []  # `source FILE`, `. FILE`, `eval ...`: variables btacalc cannot see
    for statement in (one for line in statements_of(text) for one in assignments_of(line)):
        if statement.split()[:1] in (["source"], ["."], ["eval"]):
            unread.append(_cut(statement.strip()))
        expanded = expand(statement, variables, substituted)
        by_command = COMMAND_SUBSTITUTION.match(expanded.strip())
        if by_command:  # `L=$(nproc)`: its value is unknown; a use of L stays "$L" (hostile20)
            substituted.add(by_command.group(1))
            forget_variable(by_command.group(1), variables)
            continue
        try:
            words = shlex.split(expanded)  # the comment is gone (statements_of): a `#` left is text, as in bash
            raw_pieces = commands_of(expanded) if _is_command(words) else []
            pieces = [shlex.split(piece) for piece in raw_pieces]
        except ValueError as exc:
            raise BtacalcError(f"{source}: cannot read the line {statement.strip()[:60]!r}: {exc}") from None
        if not words or unset_statement(words, (variables, unexpandable, launch.env), substituted, source):
            continue
        if pieces:  # `cd /x && torchrun ... pretrain_gpt.py ... 2>&1 | tee log`: the launch is the piece with the script
            for piece, raw in ((p, r) for p, r in zip(pieces, raw_pieces) if _is_command(p)):
                refuse_unexpanded(statement, raw, variables, unexpandable, source)
                if command is not None:  # hostile20: the second was passed over (an if/else of two launches)
                    scripts = [next(w for w in c if w.endswith(".py")) for c in (command, piece)]
                    raise BtacalcError(f"{source}: two commands run a Python script ({scripts[0]}, then "
                                       f"{scripts[1]}): btacalc reads one launch and runs no if/else or loop around "
                                       "it: give a file with the one launch")
                command = piece
            continue
        assigned = ASSIGNMENT.match(expanded.strip())
        if assigned and (assigned.group(3).startswith("(") or len(words) == 1 or words[0] == "export"):
            assign_variable(assigned, variables, launch.env)
            mark_unexpandable(assigned, statement, variables, unexpandable)
            continue
        if words[0].startswith("--") or words[0].startswith("-"):
            refuse_unexpanded(statement, expanded, variables, unexpandable, source)
            before = before or (command is None and not plain)
            plain += words
    if command is not None and plain:
        if before:  # hostile20: they were said to come after it
            raise BtacalcError(f"{source}: flags before the launch command ({plain[0]} ...): move them into it, after "
                               "its script")
        raise BtacalcError(f"{source}: flags after the launch command ({plain[0]} ...): join them to it with \\"
                           + blank_after_backslash(text))
    tokens = command if command is not None else plain
    launch.notes += defaults_taken(text, variables, unread, source)
    args = _split_launcher(tokens, launch)
    _parse_args(args, launch)
    _scheduled(text, source, launch, unset_defaulted(text, variables) if environment is None else [])  # not a probe's
    return launch


_PROBE = "7919"  # a prime, as no launch's own node or process count is


def _scheduled(text: str, source: str, launch: Launch, unset: list[str]) -> None:
    """Which of the variables the file reads unset (`${SLURM_NNODES:-1}`) move torchrun's process count: the file
    read again with each set to _PROBE. freshuser21: Megatron-LM's examples/mixtral/train_mixtral_8x7b_distributed.sh
    @ d98e8a64 (L12 NNODES=${SLURM_NNODES:-"1"}) was planned on 8 processes, `--devices 32` refused as contradicting
    them, and PP 4 x EP 8 = 32 refused as not dividing 8: the file could not be planned as it runs."""
    if launch.devices is None:
        return
    for name in unset:
        try:
            probe = read_launch(text, source, {name: _PROBE})
        except BtacalcError:  # a value that reads only at its default: not a count
            continue
        if probe.devices != launch.devices:
            launch.scheduled += (name,)
            launch.scheduled_per_node |= probe.devices_per_node != launch.devices_per_node


EXACT_FLOAT_INT = 2 ** 53  # the largest whole float every integer below is exact (a YAML 1e308 is no count)


_V = TypeVar("_V", bound="_BridgeValue")


class _BridgeValue:
    """A value as a Megatron-Bridge recipe's YAML gives it, named by its key (the refusals quote the key)."""

    key: str = ""

    @classmethod
    def of(cls: type[_V], value: Any, key: str) -> _V:
        out = cls(value)  # type: ignore[call-arg]  # object() takes no value; BridgeText and BridgeFloat do
        out.key = key
        return out


class BridgeText(_BridgeValue, str):
    """A string a Megatron-Bridge recipe's YAML gives (`ddp.num_buckets: '4'`), named by its key. Bridge keeps it a
    string: OmegaConf merges the YAML into an untyped config and `_apply_overrides` sets each value as given
    (NVIDIA-NeMo/Megatron-Bridge @ 067f987d src/megatron/bridge/training/utils/omegaconf_utils.py L147-148, L157,
    L515; only torch dtypes and activation names are converted, L499-513). Where Megatron wants a number, the
    string fails at the first arithmetic (config.py L1019-1024: world size % tensor_model_parallel_size); where it
    wants a switch, any non-empty string, 'false' too, is true. So a number or a switch given as a string is
    refused (`refuse_bridge_text`), not read as the number or switch it spells."""


class BridgeFloat(_BridgeValue, float):
    """A float a Megatron-Bridge recipe's YAML gives (`tensor_model_parallel_size: 4.0`), named by its key. Bridge sets
    it as given, as it does a string (BridgeText), so a whole float stays a float where Megatron takes an integer; a
    float parallel size makes Megatron-Core's group sizes floats, and `range()` of one raises (Megatron-LM @ d98e8a64
    megatron/core/parallel_state.py L359-367, generate_masked_orthogonal_rank_groups). A launch's text "4.0" is
    refused by Megatron-LM's argparse (type=int) as well, so a whole float is a count in neither."""


def refuse_bridge_text(value: Any, kind: str) -> None:
    """Raise for a Bridge YAML string where Megatron takes `kind` (a number or a switch: BridgeText)."""
    if isinstance(value, BridgeText):
        raise BtacalcError(f"{value.key}: {_cut(repr(str(value)))} is a string, which Megatron-Bridge sets as given "
                           f"(no conversion) where Megatron takes {kind}")


def integer(value: Any, dest: str) -> int:
    """An integer argument as Megatron-LM's argparse (type=int) reads a launch's text ("32", not "32.0",
    "1e3" or "nan"), or as a Bridge recipe's YAML gives it (a whole number; not a boolean, a list, a
    date or a quoted string: BridgeText). A value that is not one is refused naming its flag."""
    refuse_bridge_text(value, "an integer")
    if type(value) is int:
        return value
    if isinstance(value, BridgeFloat) and value.is_integer() and abs(value) <= EXACT_FLOAT_INT:
        raise BtacalcError(f"{value.key}: {float(value)!r} is a float, which Megatron-Bridge sets as given (no "
                           "conversion) where Megatron takes an integer: write it without the decimal point")
    if isinstance(value, float) and value.is_integer() and abs(value) <= EXACT_FLOAT_INT:
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise _not_a(value, dest, "an integer")


def real(value: Any, dest: str) -> float:
    """A number argument as Megatron-LM's argparse (type=float) reads it: "0.1", "1e-3", "nan"; not "abc"."""
    refuse_bridge_text(value, "a number")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # hostile24: an int flag's 310 digits ("the inputs take a number beyond the range")
            raise ArgumentValueError(dest, "a number", _cut(repr(value)), ": beyond a float's range (about 1.8e308), "
                                     "which Megatron computes in") from None
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise _not_a(value, dest, "a number")


class ArgumentValueError(BtacalcError):
    """A Megatron argument's value of the wrong kind, named by its flag; `dest`, `kind` and `got` let a reader that
    knows the argument by another name (a Bridge key) say it so."""

    def __init__(self, dest: str, kind: str, got: str, why: str = ""):
        flag = next(iter(flags_by_dest().get(dest, [])), None)
        super().__init__(f"Megatron-LM's {flag.flag if flag else dest} ({dest}) takes {kind}, got {got}{why}")
        self.dest, self.kind, self.got, self.why = dest, kind, got, why


# a command substitution, `$(...)` or a backquote (not bash arithmetic's `$((`)
_SUBSTITUTED = re.compile(r"\$\((?!\()|`")
COMMAND_OUTPUT = "a command's output, which btacalc does not run: give the value"


def _not_a(value: Any, dest: str, kind: str) -> BtacalcError:
    unexpanded = isinstance(value, str) and (VARIABLE.search(value) is not None or "$((" in value)
    why = (": a variable the file does not set, sets from a command's output (which btacalc does not run) or puts "
           "in single quotes (which bash passes on as written): give the value") if unexpanded else ""
    if not why and isinstance(value, str) and _SUBSTITUTED.search(value):  # hostile22: no reason was given
        why = f": $(...) or `...`, {COMMAND_OUTPUT}"
    return ArgumentValueError(dest, kind, _cut(repr(value)), why)


def _is_command(words: list[str]) -> bool:
    return any(w.endswith(".py") for w in words)


def _split_launcher(words: list[str], launch: Launch) -> list[str]:
    """Leading NAME=value words are environment; `torchrun --nproc_per_node N --nnodes M ... script.py` gives
    the devices; what follows the script are Megatron's arguments."""
    script = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
    if script is None:
        return words
    head, sizes = words[:script], {}
    launch.script = words[script]
    leading = 0
    while leading < len(head) and ASSIGNMENT.match(head[leading]):  # NAME=value before the launcher: environment
        name, _, value = head[leading].partition("=")
        launch.env[name] = value
        leading += 1
    for i, w in enumerate(head[leading:], start=leading):
        key, eq, inline = w.partition("=")
        if key in _LAUNCHERS:
            value = inline if eq else (head[i + 1] if i + 1 < len(head) else "")
            if re.fullmatch(r"0*[1-9][0-9]*", value):
                sizes[_LAUNCHERS[key]] = int(value)
            elif re.fullmatch(r"[-+]?[0-9]+", value) or not value or value.startswith("-"):
                raise BtacalcError(f"{launch.source}: {key} {value!r} is not a number of processes")
            else:  # hostile20: a variable the file does not set, torchrun's gpu / auto, an elastic 1:4 was refused
                launch.unknown_size = launch.unknown_size or f"{key} {value}"
    if "per_node" in sizes:
        launch.devices_per_node = sizes["per_node"]
    if "per_node" in sizes and not launch.unknown_size:
        launch.devices = sizes["per_node"] * sizes.get("nodes", 1)
    return words[script + 1:]


# Megatron-LM's argparse choices (case-sensitive) for its string options (megatron_choices.tsv, written by
# tools/megatron_choices.py: arguments.py's own `choices=` and the Literal fields of the config dataclasses that
# ArgumentGroupFactory turns into choices, megatron/training/argument_utils.py L120-155 @ d98e8a64, and the AttnBackend
# names). hostile23: `--normalization rmsnorm`, `--attention-backend FUSED` and `--moe-token-dispatcher-type AllToAll`
# were planned, `--moe-router-score-function Sigmoid` as softmax and `--attention-backend banana` as flash, where
# Megatron-LM's argparse stops with "invalid choice"; review21: its hand-written table held two of arguments.py's own,
# so `--optimizer Adam`, `--data-parallel-sharding-strategy OPTIM` or `--moe-router-load-balancing-type AUX_LOSS`
# (a list option, each item checked) were still read
@lru_cache(maxsize=1)
def argparse_choices() -> dict[str, tuple[tuple[str, ...], str]]:
    """dest -> (its choices, the file:line that states them)."""
    out: dict[str, tuple[tuple[str, ...], str]] = {}
    for line in package_data("megatron_choices.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        dest, values, where = line.split("\t")
        out[dest] = (tuple(values.split(",")), where)
    return out


def _check_choice(launch: Launch, flag: Flag, value: str) -> None:
    check, names, where = argparse_types().get(flag.flag, ("text", (), ""))
    # an enum's member names (`config_type[cli_arg]`, argument_utils.py L108-115; arguments.py L256-260)
    known = argparse_choices().get(flag.dest) or ((names, where) if check == "names" else None)
    if known is not None and value not in known[0]:
        near = nearest_name(value, known[0])
        raise BtacalcError(f"{launch.source}: {flag.flag} {_cut(repr(value))}: Megatron-LM's argparse takes one of "
                           f"{', '.join(known[0])} (case-sensitive; {MEGATRON_LM_SHORT} {known[1]}) and stops the "
                           "launch otherwise" + (f": did you mean {near}?" if near else ""))


# The type Megatron-LM's argparse converts each option's value with (megatron_types.tsv, written by
# tools/megatron_choices.py from arguments.py's type= and the config fields' annotations; argtypes24: `--hidden-dropout
# abc` and `--lr-warmup-iters x1` were planned with the flags listed as ignored, where argparse stops the launch with
# "invalid float value"). Each check is Python's own conversion, as argparse calls it: int('1e3'), int('0x10') and
# int('') fail, int(' +3 ') and int('1_000') work, float('nan') and float('1e3') work.
@lru_cache(maxsize=1)
def argparse_types() -> dict[str, tuple[str, tuple[str, ...], str]]:
    """flag -> (the check, the names it takes, the file:line that states the type)."""
    out: dict[str, tuple[str, tuple[str, ...], str]] = {}
    for line in package_data("megatron_types.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        flag, _dest, check, names, where = line.split("\t")
        out[flag] = (check, tuple(names.split(",")) if names else (), where)
    return out


_PATTERN_CHARACTERS = re.compile(r"[^,\d\[\]\(\)\+\*]")  # arguments.py _eval_pattern L247: what a layer pattern may hold
# what each check wants, in ArgumentValueError's words (the reader's own refusals of a value it reads), and argparse's
_TYPE_WORDS = {"int": ("an integer", "type=int"), "float": ("a number", "type=float"),
               "freq": ("an integer or a Python list expression of , digits [ ] ( ) + *", "its layer-pattern type"),
               "int_tuple": ("integers separated by commas", "its tuple_type")}


def _parses(expression: str) -> bool:
    """Whether Python's eval would parse `expression` (its SyntaxError stops Megatron's argparse with a traceback:
    argparse catches only TypeError and ValueError); nothing is evaluated."""
    try:
        ast.parse(expression, mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        return False
    return True


def _converts(check: str, names: tuple[str, ...], value: str) -> bool:
    """Whether argparse's type (and an integer option's choices) takes `value`: the conversion itself, run. A name
    (an enum member's) is checked with the choices (_check_choice)."""
    try:
        if check == "int":
            number = int(value)
            return not names or str(number) in names
        if check == "float":
            float(value)
        elif check == "freq" and "[" in value:  # _eval_pattern's characters, then eval's parse (not its evaluation)
            return _PATTERN_CHARACTERS.search(value) is None and _parses(value)
        elif check == "freq":
            int(value)
        elif check == "int_tuple":
            [int(item) for item in value.strip("()").split(",")]
    except ValueError:
        return False
    return True


def _check_type(launch: Launch, flag: Flag, value: str) -> None:
    """Refuse a value Megatron-LM's argparse cannot convert to its option's type, whether btacalc reads the option or
    not. A value that still holds a variable the file does not set or a command's output is the environment's, not
    known here: where btacalc reads it, the reader refuses it naming why (_not_a)."""
    check, names, where = argparse_types().get(flag.flag, ("text", (), ""))
    if _converts(check, names, value) or VARIABLE.search(value) or "$((" in value or _SUBSTITUTED.search(value):
        return
    kind, how = _TYPE_WORDS[check]
    kind = f"one of {', '.join(names)}" if names else kind
    raise BtacalcError(f"{launch.source}: Megatron-LM's {flag.flag} ({flag.dest}) takes {kind}, got "
                       f"{_cut(repr(value))}: its argparse ({how}, {MEGATRON_LM_SHORT} {where}) stops the launch")


def _check_count(launch: Launch, flag: Flag, items: list[str]) -> None:
    """argparse's count of a list option's values: nargs '+' at least one, nargs N exactly N (argtypes24:
    `--rampup-batch-size 16 16` and a bare `--moe-aux-loss-coeff` were read, where argparse stops with "expected 3
    arguments" / "expected at least one argument")."""
    if flag.arity == "+" and not items or flag.arity.isdigit() and len(items) != int(flag.arity):
        wants = "at least one value" if flag.arity == "+" else f"{flag.arity} values"
        raise BtacalcError(f"{launch.source}: {flag.flag} takes {wants}, got {len(items)}: Megatron-LM's "
                           f"argparse (nargs={flag.arity!r}) stops the launch"
                           + (" (`--flag=value` gives it one; give the values after the flag)" if len(items) == 1
                              and flag.arity.isdigit() else ""))


def _parse_args(words: list[str], launch: Launch) -> None:
    known, i = megatron_flags(), 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if not name.startswith("--"):
            split = any(_SUBSTITUTED.search(w) for w in words[:i])  # `$(echo 5)` unquoted: '$(echo', '5)'
            raise BtacalcError(f"{launch.source}: {word!r} is not a Megatron-LM flag ("
                               + (f"part of a $(...) or `...` split at its blanks: {COMMAND_OUTPUT}" if split
                                  else "a value without its flag?") + ")")
        flag = known.get(name)
        if flag is None:
            # difflib's default cutoff, 0.6, on the names without their "--": the shared dashes alone made "--tp"
            # 0.67 alike to "--sft" (review14)
            bare = {k.lstrip("-"): k for k in known}
            near = [bare[n] for n in difflib.get_close_matches(name.lstrip("-"), sorted(bare), n=1)]
            raise BtacalcError(f"{launch.source}: unknown Megatron-LM flag {name} (not in arguments.py at "
                               f"{MEGATRON_LM_SHORT})" + (f": did you mean {near[0]}?" if near else ""))
        i += 1
        if flag.arity == "0":
            if eq:
                raise BtacalcError(f"{launch.source}: {name} is a switch and takes no value")
            value: Any = not flag.store_false
        elif flag.arity == "1":
            if eq:
                value = inline
            elif i < len(words) and not words[i].startswith("--"):
                value, i = words[i], i + 1
            else:
                raise BtacalcError(f"{launch.source}: {name} needs a value")
            _check_type(launch, flag, value)
            _check_choice(launch, flag, value)
        else:
            # argparse: `--flag=value` is the option's one argument, the words after it are not its (argtypes24:
            # `--data-path=a b` read both, where argparse stops at "unrecognized arguments: b")
            items = [inline] if eq else []
            while not eq and i < len(words) and not words[i].startswith("--"):
                items.append(words[i])
                i += 1
            _check_count(launch, flag, items)
            for item in items:  # a list option's items (--moe-router-load-balancing-type aux_loss seq_aux_loss)
                _check_type(launch, flag, item)
                _check_choice(launch, flag, item)
            value = items
        _store(launch, flag, value)


def _same_value(flag: Flag, old: Any, new: Any) -> bool:
    """Whether two values of one option are the same to Megatron-LM's argparse: the same text, or the same number once
    its type converts them (hostile37: `--hidden-size 1024 ... --hidden-size 01024`, `--init-method-std 0.02 ...
    --init-method-std 2e-2` were refused as contradictory flags, though argparse reads one value twice)."""
    if old == new:
        return True
    convert = {"int": int, "float": float}.get(argparse_types().get(flag.flag, ("text", (), ""))[0])
    if convert is None or isinstance(old, list) != isinstance(new, list):
        return False
    try:
        if isinstance(old, list):
            return len(old) == len(new) and all(convert(a) == convert(b) for a, b in zip(old, new))
        return bool(convert(old) == convert(new))
    except (TypeError, ValueError):
        return False


def _store(launch: Launch, flag: Flag, value: Any) -> None:
    if flag.dest in launch.args and not _same_value(flag, launch.args[flag.dest], value):
        raise BtacalcError(f"{launch.source}: contradictory flags: {launch.given_as[flag.dest]} and {flag.flag} set "
                           f"{flag.dest} to {launch.args[flag.dest]!r} and {value!r}")
    launch.args[flag.dest] = value
    launch.given_as[flag.dest] = flag.flag


def pattern(value: Any, num_layers: int) -> list[int]:
    """Megatron's layer pattern (--moe-layer-freq, --window-attn-skip-freq; arguments.py moe_freq_type): an
    integer N, returned as [N] for the caller to expand by its flag's meaning, or a Python list expression
    such as "([0]*3+[1]*58)", evaluated (integers, lists, + and * only) to num_layers entries of 0 or 1."""
    if isinstance(value, int):
        return [value]
    text = str(value).strip()
    if "[" not in text:  # hostile24: Megatron's int(x) (arguments.py L345-350) takes '١' and '1_0', which eval refused
        try:
            return [int(text)]
        except ValueError:
            pass
    try:
        result = safe_eval(text)
    except ValueError as exc:
        raise BtacalcError(f"layer pattern {_cut(text)!r} is not an integer or a list expression like "
                           f"([0]*3+[1]*58): {exc}") from None
    if isinstance(result, int):
        return [result]
    items = list(result)
    if len(items) != num_layers or any(x not in (0, 1) for x in items):
        raise BtacalcError(f"layer pattern {text!r} must give {num_layers} entries of 0 or 1")
    return items


def list_expression(items: list[int]) -> str:
    """The shortest run-length list expression Megatron's moe_freq_type reads: "([0]*3+[1]*58)"."""
    runs: list[tuple[int, int]] = []
    for x in items:
        if runs and runs[-1][0] == x:
            runs[-1] = (x, runs[-1][1] + 1)
        else:
            runs.append((x, 1))
    return "(" + "+".join(f"[{x}]*{n}" for x, n in runs) + ")"
