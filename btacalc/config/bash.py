"""What btacalc reads of a bash launch script: its statements (line continuations, here-documents, several commands
on a line), variable assignments and arrays, `export` and `unset`, and the expansions bash makes (`$NAME`, `${NAME:-x}`,
`${NAME[@]}`, `$((...))`, `$'...'`, quoting); every bash form it does not expand as bash would is refused where the
launch uses it, never passed on as written. megatron_launch.read_launch walks a script with these; split out of
megatron_launch.py (twenty-sixth session), the rules unchanged."""

from __future__ import annotations

import re
import shlex
from typing import Optional

from ..errors import BtacalcError
from .bounded_arithmetic import bash_arithmetic
from .text import cut as _cut
from .text import uncommented


ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
# `$NAME`, `${NAME}`, `${NAME[@]}` and bash's `${NAME-word}`, `${NAME+word}`, `${NAME?word}`, `${NAME=word}`, each also
# with the colon (the empty value counts as unset; bash manual, Shell Parameter Expansion); a positional parameter
# (`${1:-32}`, `$1`) is unset, as in a script run without arguments (hostile22: `${1:-32}` was kept as written)
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(\[@\]|\[\*\]|\[[0-9]+\])?(?:(:?[-+?=])([^}]*))?\}"
                  r"|\$([A-Za-z_][A-Za-z0-9_]*|[1-9])")
_QUOTED_ARRAY = re.compile(r'"\$\{([A-Za-z_][A-Za-z0-9_]*)\[@\]\}"')
_ARRAY_OR_VAR = re.compile(_QUOTED_ARRAY.pattern + "|" + VARIABLE.pattern)
# $((...)) and its old spelling $[...] (bash manual, Arithmetic Expansion; hostile23: $[...] was kept as written)
_ARITH = re.compile(r"\$\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)|\$\[([^\[\]]*)\]")
# ${#NAME} (a value's length), ${#NAME[@]} (an array's elements); the script's arguments, none as btacalc reads it
# (a script run without arguments): "$@" is no word, $@ and $* nothing, $# 0
_LENGTH = re.compile(r"\$\{#([A-Za-z_][A-Za-z0-9_]*)(\[[@*]\])?\}")
_ARGUMENTS = re.compile(r'"\$(?:\{[@*]\}|[@*])"|\$(?:\{[@*#]\}|[@*#])')
# `NAME=$(command)` or NAME=`command` (also exported, quoted): a command substitution as a variable's whole value.
# hostile20: `L=$(echo 16)` was passed over and a later `${L:-32}` read as 32 in silence; `export L=$(echo 16)` set
# L to "$(echo"
COMMAND_SUBSTITUTION = re.compile(r"""^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=("?)(?:\$\((?!\().*\)|`[^`]*`)\2$""", re.S)


# what bash expands that btacalc does not (hostile23: each was passed on as written, or split, without a word)
_PARAMETER_OPS = {"%": "removes a suffix", "#": "removes a prefix", "/": "replaces a pattern", "^": "changes case",
                  ",": "changes case", ":": "takes a substring", "@": "transforms the value", "[": "indexes an array"}
_SPECIALS = {"0": "the script's name", "$": "the shell's process id", "?": "the last command's status",
             "!": "the last background process", "-": "the shell's options"}
_LEFTOVER = re.compile(r"\$\{(!?)([A-Za-z_][A-Za-z0-9_]*)?([^}]*)\}|\$\(\(|\$\[|\$([0$?!-])")
_BRACES = re.compile(r"(?<!\$)\{(?:[^{}\s,]*,[^{}\s]*|-?\d+\.\.-?\d+(?:\.\.-?\d+)?|[A-Za-z]\.\.[A-Za-z](?:\.\.-?\d+)?)\}")


def _leftover(text: str, variables: dict[str, str]) -> str:
    """The first bash form in `text` (after expand, outside single quotes and command substitutions) that btacalc
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


def mark_unexpandable(assigned: "re.Match[str]", statement: str, variables: dict[str, str],
                      unexpandable: dict[str, str]) -> None:
    """Remember a variable whose value holds a bash form btacalc does not expand (refused where the launch uses it);
    bash brace-expands an array's elements, not a scalar's value (`X=a{b,c}` keeps the braces)."""
    name, value = assigned.group(1), assigned.group(3)
    form = (value.startswith("(") and _brace_expansion(statement)) or _leftover(value, variables)
    if form:
        unexpandable[name] = form
    else:
        unexpandable.pop(name, None)


def refuse_unexpanded(statement: str, expanded: str, variables: dict[str, str], unexpandable: dict[str, str],
                       source: str) -> None:
    """Refuse a launch command that holds a bash form btacalc does not expand as bash would (_leftover,
    _brace_expansion), directly or through a variable whose value holds one."""
    used = [n for n in unexpandable if re.search(r"\$\{?" + n + r"(?![A-Za-z0-9_])", statement)]
    form = _brace_expansion(statement) or _leftover(expanded, variables)
    if used:
        form = f"{used[0]} holds {unexpandable[used[0]]}"
    if form:
        raise BtacalcError(f"{source}: {form}, which btacalc does not expand as bash does: give the value")


def unset_defaulted(text: str, variables: dict[str, str]) -> list[str]:
    """The variables `text` reads with a default (`${NAME:-default}`, `${NAME=default}`) that `variables` leaves
    unset: the values the script takes from the environment it runs in (`${SLURM_NNODES:-1}`), and its arguments."""
    return sorted({m.group(1) for m in VARIABLE.finditer(text)
                   if m.group(1) and (m.group(3) or "").endswith(("-", "=")) and m.group(1) not in variables})


def defaults_taken(text: str, variables: dict[str, str], unread: list[str], source: str) -> list[str]:
    """What the plan took as unset that the run may not: the defaults (`${NAME:-default}`, `${NAME=default}`) of
    variables the file does not set beside a file it reads (`unread`: `source`, `.`, `eval`), and of the script's
    arguments. hostile22: `source env.sh` then `${TP:-1}` planned TP 1 without a word."""
    defaulted = unset_defaulted(text, variables)
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


def commands_of(line: str) -> list[str]:
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


def assignments_of(line: str) -> list[str]:
    """A line as the statements bash makes of it, left to right, each assignment a statement of its own: several
    commands of assignments (`A=1; B=2`, `A=1 && B=2`), several words (`A=1 B=2`, `export A=1 B=2`) or a declaring
    builtin (`declare -i A=1`, `readonly A=1`, `local A=1`); a line of no assignment as it is. hostile22: `export TP=4
    PP=2` set TP to 4 and left PP unset (a later `${PP:-1}` planned PP 1 in silence), and `A=1; B=2` or `declare -i
    A=1` set nothing. hostile38: an assignment beside another command on one line (`export NCCL_CTA_POLICY=1;
    torchrun ...`, `L=4; torchrun ... --num-layers $L`) was no statement: the launch lost its environment (planned
    without --use-nccl-ub's buffers, "without NCCL_CTA_POLICY=1 in the launch's environment") or refused `$L` as a
    variable the file does not set. The commands bash runs in turn (`sequence_of`) are statements of their own."""
    if "=(" in line:  # an array keeps its own statement (statements_of)
        return [line]
    out: list[str] = []
    assigns = False
    for command in sequence_of(line):
        assigned = _assigned_words(command)
        assigns = assigns or assigned is not None
        out += [command] if assigned is None else assigned
    return out if assigns else [line]


def _assigned_words(command: str) -> Optional[list[str]]:
    """The assignments of a command that only assigns (`A=1 B=2`, `export A=1`, `declare -i A=1`), one statement each
    (exported ones as `export NAME=value`); None for another command, and for one run in the background (`A=1 &`,
    a subshell: it sets nothing)."""
    if len(_cut_at(command, ("&",))) > 1:
        return None
    out: list[str] = []
    for piece in commands_of(command):
        words = _shell_words(piece)
        exported = _DECLARING.get(words[0]) if words else None
        if exported is not None:
            options = [w for w in words[1:] if w.startswith("-")]
            exported = exported or any("x" in o for o in options)
            words = [w for w in words[1:] if not w.startswith("-") and "=" in w]
        if not words or not all(_NAME_IS.match(w) for w in words):
            return None
        out += [("export " if exported else "") + w for w in words]
    return out or None


def sequence_of(line: str) -> list[str]:
    """The commands of a line that bash runs one after the other whenever the line's launch runs, as written (their
    redirections and pipes kept): split at `;`, and an and-list (`a && b`) at its `&&` where each part runs before
    the next either way: a list of assignments, or one that runs a Python script (the launch, which runs only when
    every part before it did). A list with `||` or `&`, or whose assignment follows a test (`[ -z "$TP" ] && TP=2`,
    conditional), stays one command."""
    out: list[str] = []
    for listed in _cut_at(line, (";",)):
        parts = _cut_at(listed, ("&&",))
        ors = len(_cut_at(listed, ("||", "&"))) > 1
        runs = any(w.endswith(".py") for w in _shell_words(listed))
        ordered = all(_assigned_words(p) is not None for p in parts[:-1])
        out += parts if len(parts) > 1 and not ors and (runs or ordered) else [listed]
    return [c for c in out if c.strip()]


def _cut_at(line: str, operators: tuple[str, ...]) -> list[str]:
    """`line` cut at each of `operators` outside quotes, `$(...)`, backquotes and the other control operators that
    share its characters (`;;`, `||`, `|&`, `&>`, `>&`)."""
    pieces, start, i, n, quote, depth = [], 0, 0, len(line), "", 0
    while i < n:
        c = line[i]
        if quote:
            i += 2 if c == "\\" and quote != "'" else 1
            quote = "" if c == quote else quote
            continue
        if c == "\\":
            i += 2
            continue
        if c in "'\"`":
            quote = c
        elif line.startswith("$(", i):
            depth, i = depth + 1, i + 2
            continue
        elif c == ")" and depth:
            depth -= 1
        elif depth == 0:
            op = next((o for o in ("&&", "||", ";;", "|&", "&>", ">&", ";", "|", "&") if line.startswith(o, i)), "")
            if op in operators:
                pieces.append(line[start:i])
                start = i + len(op)
            i += max(len(op), 1)
            continue
        i += 1
    return pieces + [line[start:]]


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


def statements_of(text: str) -> list[str]:
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


def expand(text: str, variables: dict[str, str], substituted: frozenset[str] | set[str] = frozenset()) -> str:
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
        if text.startswith("${", i):  # to its closing brace, quotes and all: VARIABLE reads it as one expansion
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
            return expand(word, variables, substituted) if given else ""
        if given:
            return value or ""
        if op[-1] == "?":
            unset = "empty or not set" if op == ":?" else "not set"
            raise BtacalcError(f"{m.group(0)}: {name} is {unset} in the file, so bash stops the script there "
                               f"({_cut(word) or 'parameter null or not set'}) and the launch never runs: set it in "
                               "the file")
        default = expand(word, variables, substituted)
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
                return str(bash_arithmetic(expr))
            except ValueError as exc:
                raise BtacalcError(f"bash arithmetic {_cut(m.group())}: {exc}") from None
        return m.group(0)

    return _ARITH.sub(arith, text)


def assign_variable(m: "re.Match[str]", variables: dict[str, str], env: dict[str, str]) -> None:
    """A NAME=value (or NAME=(...), NAME+=...) assignment into `variables`; an exported one also into `env`."""
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
    _exported(m, name, variables, env)


def _elements(name: str, variables: dict[str, str]) -> list[str]:
    if name + "[@]" in variables:
        return shlex.split(variables[name + "[@]"])
    return [variables[name]] if name in variables else []


def forget_variable(name: str, variables: dict[str, str]) -> None:
    for key in [k for k in variables if k == name or k.startswith(name + "[")]:
        del variables[key]


def unset_statement(words: list[str], tables: tuple[dict[str, str], ...], substituted: set[str], source: str) -> bool:
    """bash's `unset [-v] NAME...` (True; False for another statement): each variable (and its exported value) is
    gone, so a later `${NAME:-default}` takes the default (review21: `L=3; unset L; ... ${L:-9}` read 3, and an unset
    NCCL_ or CUDA_ export stayed in the launch's environment). `unset -f` removes functions, which btacalc does not
    read; an array element's unset is refused, as is what btacalc does not follow of a variable (_refuse_unfollowed)."""
    _refuse_unfollowed(words, source)
    if words[0] != "unset" or words[1:2] == ["-f"]:
        return words[0] == "unset"
    for name in words[2:] if words[1:2] in (["-v"], ["-n"]) else words[1:]:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise BtacalcError(f"{source}: unset {_cut(name)}: btacalc follows the unset of a variable, not of "
                               "an array element or another form: give the values")
        for table in tables:
            forget_variable(name, table)
        substituted.discard(name)
    return True


_ELEMENT = re.compile(r"^(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*\[[^\]]*\]\+?=")


def _refuse_unfollowed(words: list[str], source: str) -> None:
    """hostile38: two statements that change a variable btacalc reads were passed over in silence. `A[1]=8` sets an
    array's element (bash manual, Arrays): a later "${A[@]}" has it, btacalc kept the element the array was made with.
    `set -- 4` (or `set a b`) sets the script's positional parameters: a later `${1:-2}` is 4 in bash, and btacalc
    reads a script run without arguments (its positional parameters unset: 2). Both are refused, as an array element's
    unset is; `set -e`, `set -o pipefail` and `set --` alone (no parameters, as btacalc reads them) stay."""
    if _ELEMENT.match(" ".join(words)):
        raise BtacalcError(f"{source}: {_cut(' '.join(words))}: btacalc follows the assignment of a variable or a "
                           "whole array, not of an array element: give the array's values where it is made")
    if words[0] != "set":
        return
    rest = words[1:]
    while rest and (rest[0].startswith(("-", "+")) and rest[0] not in ("-", "--")):
        rest = rest[2:] if "o" in rest[0][1:] else rest[1:]  # -o / -euo take an option's name
    if rest[1:] if rest[:1] in (["-"], ["--"]) else rest:
        raise BtacalcError(f"{source}: {_cut(' '.join(words))}: sets the script's positional parameters ($1, $2, ...), "
                           "which btacalc reads unset, as in a script run without arguments: give the values")


def _set_array(name: str, elements: list[str], variables: dict[str, str]) -> None:
    """NAME's elements: "${NAME[@]}" as words, unquoted ${NAME[@]} and ${NAME[*]} split again at blanks, ${NAME[i]},
    and $NAME, the first element (bash manual, Arrays). hostile23: $NAME of an array was every element, so
    `pretrain_gpt.py $MODEL_ARGS` read all the flags where bash passes the first alone."""
    forget_variable(name, variables)
    variables[name] = elements[0] if elements else ""
    variables[name + "[@]"] = shlex.join(elements)
    variables[name + "[*]"] = " ".join(elements)
    for i, element in enumerate(elements):
        variables[f"{name}[{i}]"] = element


def _exported(m: "re.Match[str]", name: str, variables: dict[str, str], env: dict[str, str]) -> None:
    if m.group(0).lstrip().startswith("export") or name.isupper() and name.startswith(("CUDA_", "NCCL_", "NVTE_",
                                                                                         "TORCH_", "PYTORCH_")):
        env[name] = variables[name]
