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
from typing import Any, Callable, Optional, TypeVar

from ..errors import BtacalcError
from ..paths import package_data
from .model import MAX_LAYERS
from .text import blank_after_backslash, nearest_name, uncommented
from .text import cut as _cut

MEGATRON_LM_PIN = "NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553"
MEGATRON_LM_SHORT = "Megatron-LM@d98e8a64"
BASH_INT = 2**63  # bash arithmetic: 64-bit signed integers


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


_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
# `$NAME`, `${NAME}`, `${NAME[@]}` and bash's `${NAME-word}`, `${NAME+word}`, `${NAME?word}`, `${NAME=word}`, each also
# with the colon (the empty value counts as unset; bash manual, Shell Parameter Expansion); a positional parameter
# (`${1:-32}`, `$1`) is unset, as in a script run without arguments (hostile22: `${1:-32}` was kept as written)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(\[@\]|\[\*\]|\[[0-9]+\])?(?:(:?[-+?=])([^}]*))?\}"
                  r"|\$([A-Za-z_][A-Za-z0-9_]*|[1-9])")
_QUOTED_ARRAY = re.compile(r'"\$\{([A-Za-z_][A-Za-z0-9_]*)\[@\]\}"')
_ARRAY_OR_VAR = re.compile(_QUOTED_ARRAY.pattern + "|" + _VAR.pattern)
# $((...)) and its old spelling $[...] (bash manual, Arithmetic Expansion; hostile23: $[...] was kept as written)
_ARITH = re.compile(r"\$\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)|\$\[([^\[\]]*)\]")
# ${#NAME} (a value's length), ${#NAME[@]} (an array's elements); the script's arguments, none as btacalc reads it
# (a script run without arguments): "$@" is no word, $@ and $* nothing, $# 0
_LENGTH = re.compile(r"\$\{#([A-Za-z_][A-Za-z0-9_]*)(\[[@*]\])?\}")
_ARGUMENTS = re.compile(r'"\$(?:\{[@*]\}|[@*])"|\$(?:\{[@*#]\}|[@*#])')
# `NAME=$(command)` or NAME=`command` (also exported, quoted): a command substitution as a variable's whole value.
# hostile20: `L=$(echo 16)` was passed over and a later `${L:-32}` read as 32 in silence; `export L=$(echo 16)` set
# L to "$(echo"
_SUBSTITUTION = re.compile(r"""^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=("?)(?:\$\((?!\().*\)|`[^`]*`)\2$""", re.S)
_LAUNCHERS = {"--nproc_per_node": "per_node", "--nproc-per-node": "per_node", "--nnodes": "nodes"}


def read_launch(text: str, source: str = "-") -> Launch:
    """The Megatron arguments of a launch script or of a file of arguments (see module docstring)."""
    text = re.sub(r"\\\r?\n", " ", text)
    variables: dict[str, str] = {}
    substituted: set[str] = set()  # variables set by a command's output, which btacalc does not run
    unexpandable: dict[str, str] = {}  # variables whose value holds a bash form btacalc does not expand (_leftover)
    launch = Launch(source=source)
    command: Optional[list[str]] = None
    plain: list[str] = []
    before = False  # flags outside the command came first
    unread: list[str] = []  # `source FILE`, `. FILE`, `eval ...`: variables btacalc cannot see
    for statement in (one for line in _statements(text) for one in _assignments(line)):
        if statement.split()[:1] in (["source"], ["."], ["eval"]):
            unread.append(_cut(statement.strip()))
        expanded = _expand(statement, variables, substituted)
        by_command = _SUBSTITUTION.match(expanded.strip())
        if by_command:  # `L=$(nproc)`: its value is unknown; a use of L stays "$L" (hostile20)
            substituted.add(by_command.group(1))
            _forget(by_command.group(1), variables)
            continue
        try:
            words = shlex.split(expanded)  # the comment is gone (_statements): a `#` left is text, as in bash
            raw_pieces = _commands(expanded) if _is_command(words) else []
            pieces = [shlex.split(piece) for piece in raw_pieces]
        except ValueError as exc:
            raise BtacalcError(f"{source}: cannot read the line {statement.strip()[:60]!r}: {exc}") from None
        if not words or _unset(words, (variables, unexpandable, launch.env), substituted, source):
            continue
        if pieces:  # `cd /x && torchrun ... pretrain_gpt.py ... 2>&1 | tee log`: the launch is the piece with the script
            for piece, raw in ((p, r) for p, r in zip(pieces, raw_pieces) if _is_command(p)):
                _refuse_unexpanded(statement, raw, variables, unexpandable, source)
                if command is not None:  # hostile20: the second was passed over (an if/else of two launches)
                    scripts = [next(w for w in c if w.endswith(".py")) for c in (command, piece)]
                    raise BtacalcError(f"{source}: two commands run a Python script ({scripts[0]}, then "
                                       f"{scripts[1]}): btacalc reads one launch and runs no if/else or loop around "
                                       "it: give a file with the one launch")
                command = piece
            continue
        assigned = _ASSIGN.match(expanded.strip())
        if assigned and (assigned.group(3).startswith("(") or len(words) == 1 or words[0] == "export"):
            _assign(assigned, variables, launch)
            _mark(assigned, statement, variables, unexpandable)
            continue
        if words[0].startswith("--") or words[0].startswith("-"):
            _refuse_unexpanded(statement, expanded, variables, unexpandable, source)
            before = before or (command is None and not plain)
            plain += words
    if command is not None and plain:
        if before:  # hostile20: they were said to come after it
            raise BtacalcError(f"{source}: flags before the launch command ({plain[0]} ...): move them into it, after "
                               "its script")
        raise BtacalcError(f"{source}: flags after the launch command ({plain[0]} ...): join them to it with \\"
                           + blank_after_backslash(text))
    tokens = command if command is not None else plain
    launch.notes += _defaults_taken(text, variables, unread, source)
    args = _split_launcher(tokens, launch)
    _parse_args(args, launch)
    return launch


# what bash expands that btacalc does not (hostile23: each was passed on as written, or split, without a word)
_PARAMETER_OPS = {"%": "removes a suffix", "#": "removes a prefix", "/": "replaces a pattern", "^": "changes case",
                  ",": "changes case", ":": "takes a substring", "@": "transforms the value", "[": "indexes an array"}
_SPECIALS = {"0": "the script's name", "$": "the shell's process id", "?": "the last command's status",
             "!": "the last background process", "-": "the shell's options"}
_LEFTOVER = re.compile(r"\$\{(!?)([A-Za-z_][A-Za-z0-9_]*)?([^}]*)\}|\$\(\(|\$\[|\$([0$?!-])")
_BRACES = re.compile(r"(?<!\$)\{(?:[^{}\s,]*,[^{}\s]*|-?\d+\.\.-?\d+(?:\.\.-?\d+)?|[A-Za-z]\.\.[A-Za-z](?:\.\.-?\d+)?)\}")


def _leftover(text: str, variables: dict[str, str]) -> str:
    """The first bash form in `text` (after _expand, outside single quotes and command substitutions) that btacalc
    left as written though bash would expand it, described; "" when there is none. A variable the file does not set
    stays as written (the environment's, as `$NAME`), and so do its forms."""
    bare = "".join(" " * len(part) if literal else part for part, literal in _quoting(text))
    bare = re.sub(r"\$\((?!\()[^)]*\)|`[^`]*`", lambda m: " " * len(m.group()), bare)
    for m in _LEFTOVER.finditer(bare):
        form = text[m.start():m.end()]
        if m.group(4):
            return f"{form}, {_SPECIALS[m.group(4)]}"
        if m.group().startswith(("$((", "$[")):
            closing = bare.find("))" if m.group() == "$((" else "]", m.end())
            body = bare[m.end():closing if closing >= 0 else len(bare)]
            names = re.search(r"[A-Za-z_]", body)  # a variable the file does not set: the environment's, as $NAME
            if not names or re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*\b|[\d\s+*/%()-]", "", body) or re.search(r"\+\+|--", body):
                return (f"{text[m.start():closing + (2 if m.group() == '$((' else 1)]}, bash arithmetic with an operator "
                        "or number btacalc does not evaluate")
            continue
        if m.group(1):
            return f"{form}, an indirect expansion"
        rest = m.group(3)
        if m.group(2) in variables and rest and not re.fullmatch(r"\[[@*0-9]\]|\[[0-9]+\]|:?[-+?=].*", rest):
            return f"{form}, a parameter expansion that {_PARAMETER_OPS.get(rest[0], 'bash expands')}"
    return ""


def _brace_expansion(statement: str) -> str:
    """A brace expansion (`{1..4}`, `a{b,c}`) outside quotes in `statement`, which bash makes several words of."""
    bare = "".join(" " * len(part) if literal else part for part, literal in _quoting(statement))
    bare = re.sub(r'"(?:\\.|[^"\\])*"|\$\{[^}]*\}', lambda m: " " * len(m.group()), bare)
    found = _BRACES.search(bare)
    return f"{found.group()}, a brace expansion (bash makes a word of each item)" if found else ""


def _mark(assigned: "re.Match[str]", statement: str, variables: dict[str, str], unexpandable: dict[str, str]) -> None:
    """Remember a variable whose value holds a bash form btacalc does not expand (refused where the launch uses it);
    bash brace-expands an array's elements, not a scalar's value (`X=a{b,c}` keeps the braces)."""
    name, value = assigned.group(1), assigned.group(3)
    form = (value.startswith("(") and _brace_expansion(statement)) or _leftover(value, variables)
    if form:
        unexpandable[name] = form
    else:
        unexpandable.pop(name, None)


def _refuse_unexpanded(statement: str, expanded: str, variables: dict[str, str], unexpandable: dict[str, str],
                       source: str) -> None:
    """Refuse a launch command that holds a bash form btacalc does not expand as bash would (_leftover,
    _brace_expansion), directly or through a variable whose value holds one."""
    used = [n for n in unexpandable if re.search(r"\$\{?" + n + r"(?![A-Za-z0-9_])", statement)]
    form = _brace_expansion(statement) or _leftover(expanded, variables)
    if used:
        form = f"{used[0]} holds {unexpandable[used[0]]}"
    if form:
        raise BtacalcError(f"{source}: {form}, which btacalc does not expand as bash does: give the value")


def _defaults_taken(text: str, variables: dict[str, str], unread: list[str], source: str) -> list[str]:
    """What the plan took as unset that the run may not: the defaults (`${NAME:-default}`, `${NAME=default}`) of
    variables the file does not set beside a file it reads (`unread`: `source`, `.`, `eval`), and of the script's
    arguments. hostile22: `source env.sh` then `${TP:-1}` planned TP 1 without a word."""
    defaulted = sorted({m.group(1) for m in _VAR.finditer(text)
                        if m.group(1) and (m.group(3) or "").endswith(("-", "=")) and m.group(1) not in variables})
    named, arguments = [n for n in defaulted if not n.isdigit()], [n for n in defaulted if n.isdigit()]
    notes = []
    if unread and named:
        notes.append(f"{source} runs {unread[0]}, which btacalc does not read: the defaults of {', '.join(named)} "
                     "(${NAME:-default}) were taken, as for a variable the file does not set; if that file sets them, "
                     "give the values in the launch")
    if re.search(r"\$\{?[@*]", text):  # hostile23: "$@" was refused as a word without its flag
        notes.append(f"{source} passes its arguments on ($@): btacalc reads it as run without them; if you pass "
                     "arguments, add them to the launch")
    if arguments:
        notes.append(f"{source} reads its arguments ({', '.join('$' + n for n in arguments)}): btacalc reads it as run "
                     "without them, so their defaults (${1:-default}) were taken; if you pass arguments, give their "
                     "values in the launch")
    return notes


_REDIRECTION = re.compile(r"&>>?|>>?&?|>\||<<<|<<-?|<>|<&?")
_DESCRIPTOR = re.compile(r"\s*(?:\d+|-)?")
_FILE_WORD = re.compile(r"""\s*(?:'[^']*'|"(?:\\.|[^"\\])*"|\\.|[^\s;&|<>'"\\])*""")


def _commands(line: str) -> list[str]:
    """The commands of one shell line: split at the control operators outside quotes, `$(...)` and backquotes
    (`;`, `&`, `&&`, `||`, `|`, `|&`), each without its redirections (`> log`, `2>&1`, `&>> log`, `< in`): what
    each command's program is given. hostile20: `torchrun ... pretrain_gpt.py ... 2>&1 | tee log.txt` was refused
    "'2>&1' is not a Megatron-LM flag (a value without its flag?)"."""
    pieces: list[str] = []
    out: list[str] = []
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c in "'\"`":  # a quoted word or a backquoted command, copied as it is
            end = i + 1
            while end < n and line[end] != c:
                end += 2 if c != "'" and line[end] == "\\" else 1
            out.append(line[i:end + 1])
            i = end + 1
        elif c == "\\":
            out.append(line[i:i + 2])
            i += 2
        elif line.startswith("$(", i):  # a command substitution, to its closing parenthesis
            depth, end = 0, i + 1
            while end < n:
                depth += {"(": 1, ")": -1}.get(line[end], 0)
                if depth == 0:
                    break
                end += 1
            out.append(line[i:end + 1])
            i = end + 1
        elif line.startswith(("&&", "||", "|&"), i) or (c in ";|" or (c == "&" and not line.startswith("&>", i))):
            pieces.append("".join(out))
            out = []
            i += 2 if line.startswith(("&&", "||", "|&"), i) else 1
        elif c in "<>" or line.startswith("&>", i):
            text = "".join(out)
            fd = re.search(r"(?:^|\s)(\d+)$", text)  # `2>`: the descriptor's digits belong to the operator
            out = [text[:fd.start(1)]] if fd else [text]
            op = _REDIRECTION.match(line, i)
            assert op is not None  # c is < or >, or the text is &>
            # `2>&1`, `<&-`: a descriptor, no file word; else the file word after the blanks (both patterns match "")
            after = (_DESCRIPTOR if op.group().endswith("&") else _FILE_WORD).match(line, op.end())
            i = after.end() if after else op.end()
        else:
            out.append(c)
            i += 1
    pieces.append("".join(out))
    return [p for p in pieces if p.strip()]


_NAME_IS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
# bash's builtins that assign their NAME=value words (declare's -x, as export, puts them in the environment)
_DECLARING = {"export": True, "declare": False, "typeset": False, "readonly": False, "local": False}


def _assignments(line: str) -> list[str]:
    """A line of assignments only, as one assignment per statement, left to right as bash makes them: several
    commands (`A=1; B=2`, `A=1 && B=2`), several words (`A=1 B=2`, `export A=1 B=2`) or a declaring builtin
    (`declare -i A=1`, `readonly A=1`, `local A=1`); any other line as it is. hostile22: `export TP=4 PP=2` set TP to 4
    and left PP unset (a later `${PP:-1}` planned PP 1 in silence), and `A=1; B=2` or `declare -i A=1` set nothing."""
    if "=(" in line:  # an array keeps its own statement (_statements)
        return [line]
    out: list[str] = []
    for command in _commands(line):
        words = _shell_words(command)
        exported = _DECLARING.get(words[0]) if words else None
        if exported is not None:
            options = [w for w in words[1:] if w.startswith("-")]
            exported = exported or any("x" in o for o in options)
            words = [w for w in words[1:] if not w.startswith("-") and "=" in w]
        if not words or not all(_NAME_IS.match(w) for w in words):
            return [line]
        out += [("export " if exported else "") + w for w in words]
    return out or [line]


def _shell_words(text: str) -> list[str]:
    """`text`'s words split at the blanks outside quotes, `${...}`, `$(...)` and backquotes, each as written."""
    words: list[str] = []
    word, depth, quote, i = "", 0, "", 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote != "'":
                word, i = word + text[i:i + 2], i + 2
                continue
            quote = "" if c == quote else quote
        elif c == "\\":
            word, i = word + text[i:i + 2], i + 2
            continue
        elif c in "'\"`":
            quote = c
        elif c in "({":
            depth += 1
        elif c in ")}":
            depth -= 1
        elif c in " \t" and depth <= 0:
            words += [word] if word else []
            word, i = "", i + 1
            continue
        word += c
        i += 1
    return words + ([word] if word else [])


# a here-document's start (`cat > x <<EOF`, `<<-'EOF'`; not the here-string `<<<`): its body is text, not commands
_HEREDOC = re.compile(r"""(?<!<)<<(-?)\s*(['"]?)([A-Za-z_][A-Za-z0-9_]*)\2""")


def _statements(text: str) -> list[str]:
    """Lines without their comments (text.uncommented), with a bash array `NAME=( ... )` spanning several lines kept
    as one statement and a here-document's body left out (hostile20: its lines were read as the launch's flags)."""
    out: list[str] = []
    pending = ""
    heredoc: Optional[tuple[str, bool]] = None  # the delimiter, and whether leading tabs are stripped (<<-)
    for line in text.splitlines():
        if heredoc is not None:
            if (line.lstrip("\t") if heredoc[1] else line).rstrip("\r") == heredoc[0]:
                heredoc = None
            continue
        line = uncommented(line)
        started = _HEREDOC.search(line)
        if started:
            heredoc = (started.group(3), started.group(1) == "-")
        if pending:
            pending += " " + line
            if ")" in line:
                out.append(pending)
                pending = ""
            continue
        if re.match(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*\+?=\($", line.strip()) or (
                re.match(r"^\s*[A-Za-z_][A-Za-z0-9_]*\+?=\(", line) and ")" not in line):
            pending = line
            continue
        out.append(line)
    if pending:
        out.append(pending)
    return out


def _expand(text: str, variables: dict[str, str], substituted: frozenset[str] | set[str] = frozenset()) -> str:
    """`text` with its variables and arithmetic expanded as bash does, except inside single quotes: there bash
    expands nothing ("Enclosing characters in single quotes preserves the literal value of each character",
    bash manual, Single Quotes), so `--num-layers '$L'` passes `$L` on (and Megatron refuses it)."""
    return "".join(part if literal else _expand_words(part, variables, substituted)
                   for part, literal in _quoting(text))


def _quoting(text: str) -> list[tuple[str, bool]]:
    """`text` cut into runs that expand (False) and runs that bash passes on as written (True): single-quoted runs
    with their quotes, a backslash with the character it escapes (`\\$L` is `$L`; inside double quotes only before
    `"`, `\\`, `$` and a backquote, where the backslash is dropped), and an ANSI-C `$'...'` as its decoded text,
    quoted for shlex. A single quote inside double quotes opens nothing (bash manual, Quoting), nor does one inside a
    `${NAME:-default}` (its default is expanded as a word: `${U:-'4'}` is 4, review19); an unclosed one runs to the
    end (shlex then refuses the line)."""
    parts: list[tuple[str, bool]] = []
    start, i, double = 0, 0, False

    def literal(end: int, as_written: str | None = None) -> None:
        nonlocal start
        parts.extend([(text[start:i], False), (text[i:end] if as_written is None else as_written, True)])
        start = end

    while i < len(text):
        c = text[i]
        if c == "\\" and (not double or text[i + 1:i + 2] in ('"', "\\", "$", "`")):
            end = min(i + 2, len(text))
            literal(end, text[i + 1:end] if double and text[i + 1:end] in ("$", "`") else None)
            i = end
            continue
        if text.startswith("${", i):  # to its closing brace, quotes and all: _VAR reads it as one expansion
            end = text.find("}", i)
            i = len(text) if end < 0 else end + 1
            continue
        if c == '"':
            double = not double
        elif text.startswith('$"', i) and not double:  # hostile23: $"..." (a translated string) read as "$..."
            literal(i + 1, "")
            i += 1
            continue
        elif text.startswith("$'", i) and not double:
            m = _ANSI_C.match(text, i)
            end = m.end() if m else len(text)
            literal(end, shlex.quote(_ansi_c(m.group(1))) if m else None)
            i = end
            continue
        elif c == "'" and not double:
            end = text.find("'", i + 1)
            end = len(text) if end < 0 else end + 1
            literal(end)
            i = end
            continue
        i += 1
    return [p for p in parts + [(text[start:], False)] if p[0]]


# bash's ANSI-C quoting, $'...' (bash manual, ANSI-C Quoting): its backslash escapes, decoded
_ANSI_C = re.compile(r"\$'((?:\\.|[^'\\])*)'", re.S)
_ANSI_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.S)
_ANSI_NAMED = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
               "v": "\v"}


def _ansi_c(body: str) -> str:
    def one(m: "re.Match[str]") -> str:
        e = m.group(1)
        if e[0] in "xuU":
            code = int(e[1:], 16)
            return chr(code) if code < 0xD800 or 0xDFFF < code <= 0x10FFFF else m.group(0)
        if e[0].isdigit():
            return chr(int(e, 8) & 0xFF)
        if e[0] == "c" and len(e) == 2:
            return chr(ord(e[1]) & 0x1F)
        return _ANSI_NAMED.get(e, e if e in "\\'\"?" else "\\" + e)

    return _ANSI_ESCAPE.sub(one, body)


def _expand_words(text: str, variables: dict[str, str], substituted: frozenset[str] | set[str]) -> str:
    # "${NAME[@]}" is each element of an array as one word (bash's Arrays: "each element of name to a separate
    # word"): its elements, each quoted for shlex; unquoted, the elements are split again at blanks (below)
    # in the same pass as the other variables, so an element's own `$L` is not expanded again (review19)
    def var(m: "re.Match[str]") -> str:
        if m.group(1):
            return variables.get(m.group(1) + "[@]", m.group(0))
        name, op, word = m.group(2) or m.group(6), m.group(4), m.group(5)
        if name in substituted:  # set by a command btacalc does not run: not unset, so not ${NAME:-default}
            return m.group(0)
        # ${NAME[@]} and ${NAME[*]} unquoted: every element, split again; ${NAME[i]}: one element, unset past the end
        key = name + ("[*]" if m.group(3) in ("[@]", "[*]") else m.group(3) or "")
        value = variables.get(key)
        if op is None:
            return value if value is not None else "" if name in variables else m.group(0)
        given = value is not None and (value != "" or not op.startswith(":"))
        # the word is a word of its own: its variables expand, its single quotes keep theirs (review19). hostile22:
        # only `-` was read, and as `:-` (`E=` then `${E:-4}` gave the empty value); `${FP8:+--fp8-format hybrid}`
        # and `${L:?}` were refused as flags, `${L:=4}` kept as written
        if op[-1] == "+":
            return _expand(word, variables, substituted) if given else ""
        if given:
            return value or ""
        if op[-1] == "?":
            unset = "empty or not set" if op == ":?" else "not set"
            raise BtacalcError(f"{m.group(0)}: {name} is {unset} in the file, so bash stops the script there "
                               f"({_cut(word) or 'parameter null or not set'}) and the launch never runs: set it in "
                               "the file")
        default = _expand(word, variables, substituted)
        if op[-1] == "=":  # bash assigns the word to the variable
            _set_array(name, [default], variables)
        return default

    def length(m: "re.Match[str]") -> str:  # hostile23: kept as written
        name = m.group(1)
        if name not in variables or name in substituted:
            return m.group(0)
        return str(len(_elements(name, variables)) if m.group(2) else len(variables[name]))

    text = _ARGUMENTS.sub(lambda m: "0" if m.group().endswith(("#", "#}")) else "", _LENGTH.sub(length, text))
    text = _ARRAY_OR_VAR.sub(var, text)

    def arith(m: "re.Match[str]") -> str:
        # a bare name is its variable, as bash reads `$((GPUS_PER_NODE*NNODES))` (hostile20: refused "takes an
        # integer, got '$((L*2))'"), in parentheses (bash takes a variable's value as one operand: L=-2, L**2 is 4);
        # one the file does not set to an integer stays, and the expression with it
        body = m.group(1) if m.group(1) is not None else m.group(2)
        if re.search(r"(\+\+|--)\s*[A-Za-z_]|[A-Za-z_][A-Za-z0-9_]*\s*(\+\+|--)", body):
            return m.group(0)  # ++NAME, NAME-- change the variable: _leftover refuses them in the launch
        expr = re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*\b",
                      lambda n: f"({variables[n.group()]})" if re.fullmatch(r"-?\d+", variables.get(n.group(), ""))
                      else n.group(), body)
        if re.fullmatch(r"[\d\s+*/%()-]+", expr):
            try:
                return str(_bash_arithmetic(expr))
            except ValueError as exc:
                raise BtacalcError(f"bash arithmetic {_cut(m.group())}: {exc}") from None
        return m.group(0)

    return _ARITH.sub(arith, text)


def _bash_arithmetic(expr: str) -> int:
    """An integer expression of + - * / % ** and parentheses as bash evaluates it (bash manual, Shell Arithmetic), by
    its own precedence: a unary sign binds tighter than `**` (-2**2 is 4), `**` is right-associative, a leading 0 is
    octal (010 is 8), `//` is a syntax error. hostile23: Python's reading (_safe_eval) gave -4, 10 and 3."""
    tokens = re.findall(r"\d+|\*\*|\S", expr)
    try:
        value, end = _bash_sum(tokens, 0)
    except RecursionError:  # a thousand signs or powers in a row
        raise ValueError(f"{_cut(expr.strip())!r} nests too deeply") from None
    if end != len(tokens):
        raise ValueError(f"{_cut(expr.strip())!r} is not an integer expression (a syntax error at "
                         f"{' '.join(tokens[end:end + 2])!r}: bash stops the script there)")
    return value


_BASH_STEPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: _bounded(a + b), "-": lambda a, b: _bounded(a - b), "*": lambda a, b: _bounded(a * b),
    "/": lambda a, b: _divided(a, b), "%": lambda a, b: _remainder(a, b)}


def _bash_sum(t: list[str], i: int, ops: str = "+-") -> tuple[int, int]:
    """A sum (ops "+-") of products, or a product ("*/%") of powers, from token i: (value, the next token)."""
    value, i = _bash_sum(t, i, "*/%") if ops == "+-" else _bash_power(t, i)
    while i < len(t) and t[i] in ops:
        right, j = _bash_sum(t, i + 1, "*/%") if ops == "+-" else _bash_power(t, i + 1)
        value, i = _BASH_STEPS[t[i]](value, right), j
    return value, i


def _bash_power(t: list[str], i: int) -> tuple[int, int]:
    base, i = _bash_unary(t, i)
    if i < len(t) and t[i] == "**":
        exponent, i = _bash_power(t, i + 1)
        return _power(base, exponent), i
    return base, i


def _bash_unary(t: list[str], i: int) -> tuple[int, int]:
    if i >= len(t):
        raise ValueError("an operand is missing (a syntax error: bash stops the script there)")
    if t[i] in "+-":
        value, j = _bash_unary(t, i + 1)
        return _bounded(-value if t[i] == "-" else value), j
    if t[i] == "(":
        value, j = _bash_sum(t, i + 1)
        if j >= len(t) or t[j] != ")":
            raise ValueError("a parenthesis is not closed")
        return value, j + 1
    if not t[i].isdigit():
        raise ValueError(f"{t[i]!r} where an operand stands (a syntax error: bash stops the script there)")
    try:
        return _bounded(int(t[i], 8) if len(t[i]) > 1 and t[i].startswith("0") else int(t[i])), i + 1
    except ValueError:
        raise ValueError(f"{t[i]}: value too great for base (a leading 0 is octal in bash)") from None


def _safe_eval(expr: str) -> Any:
    """An integer arithmetic or list expression (bash $((...)), Megatron's "([0]*3+[1]*58)" patterns):
    integers, lists, + - * / // and unary minus, evaluated node by node within bash's 64-bit integers and
    lists of at most MAX_LAYERS entries (a model's layers), so a hostile expression can neither allocate
    gigabytes (`[0]*10**9`) nor recurse without end. ValueError names what is refused."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
        return _evaluate(tree.body)
    except (SyntaxError, RecursionError, MemoryError):
        raise ValueError(f"{_cut(expr)!r} is not an integer or list expression") from None


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _bounded(node.value)
    if isinstance(node, (ast.List, ast.Tuple)):
        return _items([_evaluate(e) for e in node.elts])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _bounded(-_whole(_evaluate(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError(f"{type(node).__name__} is not integer arithmetic or a list")


def _bounded(n: int) -> int:
    if not -BASH_INT <= n < BASH_INT:
        raise ValueError(f"{n} is beyond bash's 64-bit integers")
    return n


def _whole(v: Any) -> int:
    if type(v) is not int:
        raise ValueError("a list where an integer stands")
    return v


def _items(v: Any) -> list[int]:
    if not isinstance(v, list) or len(v) > MAX_LAYERS or any(type(x) is not int for x in v):
        raise ValueError(f"a list of at most {MAX_LAYERS:,} integers (a model's layers) is expected")
    return v


def _add(a: Any, b: Any) -> Any:
    return _items(_items(a) + _items(b)) if isinstance(a, list) or isinstance(b, list) else _bounded(a + b)


def _times(a: Any, b: Any) -> Any:
    if isinstance(a, list) or isinstance(b, list):
        items, n = (a, _whole(b)) if isinstance(a, list) else (b, _whole(a))
        if len(_items(items)) * max(n, 0) > MAX_LAYERS:
            raise ValueError(f"a list of more than {MAX_LAYERS:,} entries (a model's layers)")
        return items * n
    return _bounded(a * b)


def _divided(a: Any, b: Any) -> int:
    """bash's integer division: truncated toward zero."""
    a, b = _whole(a), _whole(b)
    if b == 0:
        raise ValueError("division by zero")
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _remainder(a: Any, b: Any) -> int:
    """bash's remainder: the sign of the dividend (a - b * (a / b), the quotient truncated)."""
    return _whole(a) - _whole(b) * _divided(a, b)


def _power(a: Any, b: Any) -> int:
    """bash's `**`: a negative exponent is an error, and the result must stay within 64 bits (checked before it is
    computed, so `2**10**10` takes no memory)."""
    a, b = _whole(a), _whole(b)
    if b < 0:
        raise ValueError("exponent less than 0")
    if abs(a) > 1 and (abs(a).bit_length() - 1) * b >= 64:
        raise ValueError(f"{a}**{b} is beyond bash's 64-bit integers")
    return _bounded(a ** b)


# hostile22: `$((2**10))` was refused "BinOp is not integer arithmetic" and `$((7%3))` kept as written
_OPERATORS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: _add, ast.Sub: lambda a, b: _bounded(_whole(a) - _whole(b)), ast.Mult: _times,
    ast.Div: _divided, ast.FloorDiv: _divided, ast.Mod: _remainder, ast.Pow: _power}


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
    unexpanded = isinstance(value, str) and (_VAR.search(value) is not None or "$((" in value)
    why = (": a variable the file does not set, sets from a command's output (which btacalc does not run) or puts "
           "in single quotes (which bash passes on as written): give the value") if unexpanded else ""
    if not why and isinstance(value, str) and _SUBSTITUTED.search(value):  # hostile22: no reason was given
        why = f": $(...) or `...`, {COMMAND_OUTPUT}"
    return ArgumentValueError(dest, kind, _cut(repr(value)), why)


def _is_command(words: list[str]) -> bool:
    return any(w.endswith(".py") for w in words)


def _assign(m: "re.Match[str]", variables: dict[str, str], launch: Launch) -> None:
    name, append, value = m.group(1), m.group(2), m.group(3).strip()
    if value.startswith("(") and value.endswith(")"):
        elements = (_elements(name, variables) if append else []) + shlex.split(value[1:-1])
    else:
        parts = shlex.split(value) if value else [""]
        value = parts[0] if parts else ""
        # hostile23: bash's += appends the text as it is (`L=3; L+=2` is 32; it was "3 2"); a value given to an
        # array sets its first element
        first = variables.get(name, "") + value if append else value
        elements = [first, *_elements(name, variables)[1:]]
    _set_array(name, elements, variables)
    _exported(m, name, variables, launch)


def _elements(name: str, variables: dict[str, str]) -> list[str]:
    if name + "[@]" in variables:
        return shlex.split(variables[name + "[@]"])
    return [variables[name]] if name in variables else []


def _forget(name: str, variables: dict[str, str]) -> None:
    for key in [k for k in variables if k == name or k.startswith(name + "[")]:
        del variables[key]


def _unset(words: list[str], tables: tuple[dict[str, str], ...], substituted: set[str], source: str) -> bool:
    """bash's `unset [-v] NAME...` (True; False for another statement): each variable (and its exported value) is
    gone, so a later `${NAME:-default}` takes the default (review21: `L=3; unset L; ... ${L:-9}` read 3, and an unset
    NCCL_ or CUDA_ export stayed in the launch's environment). `unset -f` removes functions, which btacalc does not
    read; an array element's unset is refused."""
    if words[0] != "unset" or words[1:2] == ["-f"]:
        return words[0] == "unset"
    for name in words[2:] if words[1:2] in (["-v"], ["-n"]) else words[1:]:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise BtacalcError(f"{source}: unset {_cut(name)}: btacalc follows the unset of a variable, not of "
                               "an array element or another form: give the values")
        for table in tables:
            _forget(name, table)
        substituted.discard(name)
    return True


def _set_array(name: str, elements: list[str], variables: dict[str, str]) -> None:
    """NAME's elements: "${NAME[@]}" as words, unquoted ${NAME[@]} and ${NAME[*]} split again at blanks, ${NAME[i]},
    and $NAME, the first element (bash manual, Arrays). hostile23: $NAME of an array was every element, so
    `pretrain_gpt.py $MODEL_ARGS` read all the flags where bash passes the first alone."""
    _forget(name, variables)
    variables[name] = elements[0] if elements else ""
    variables[name + "[@]"] = shlex.join(elements)
    variables[name + "[*]"] = " ".join(elements)
    for i, element in enumerate(elements):
        variables[f"{name}[{i}]"] = element


def _exported(m: "re.Match[str]", name: str, variables: dict[str, str], launch: Launch) -> None:
    if m.group(0).lstrip().startswith("export") or name.isupper() and name.startswith(("CUDA_", "NCCL_", "NVTE_",
                                                                                         "TORCH_", "PYTORCH_")):
        launch.env[name] = variables[name]


def _split_launcher(words: list[str], launch: Launch) -> list[str]:
    """Leading NAME=value words are environment; `torchrun --nproc_per_node N --nnodes M ... script.py` gives
    the devices; what follows the script are Megatron's arguments."""
    script = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
    if script is None:
        return words
    head, sizes = words[:script], {}
    launch.script = words[script]
    leading = 0
    while leading < len(head) and _ASSIGN.match(head[leading]):  # NAME=value before the launcher: environment
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
    if _converts(check, names, value) or _VAR.search(value) or "$((" in value or _SUBSTITUTED.search(value):
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


def _store(launch: Launch, flag: Flag, value: Any) -> None:
    if flag.dest in launch.args and launch.args[flag.dest] != value:
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
        result = _safe_eval(text)
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
