"""Bounded integer arithmetic for launch texts: bash's `$((...))` as bash evaluates it, and the integer and list
expressions Megatron-LM evaluates for its layer patterns (`([0]*3+[1]*58)`), within bash's 64-bit integers and lists
of at most MAX_LAYERS entries, so that a hostile expression can neither allocate gigabytes nor recurse without end.
Split out of megatron_launch.py (twenty-sixth session); the rules are unchanged."""

from __future__ import annotations

import ast
import re
from typing import Any, Callable

from .model import MAX_LAYERS
from .text import cut as _cut
BASH_INT = 2**63  # bash arithmetic: 64-bit signed integers


def bash_arithmetic(expr: str) -> int:
    """An integer expression of + - * / % ** and parentheses as bash evaluates it (bash manual, Shell Arithmetic), by
    its own precedence: a unary sign binds tighter than `**` (-2**2 is 4), `**` is right-associative, a leading 0 is
    octal (010 is 8), `//` is a syntax error. hostile23: Python's reading (safe_eval) gave -4, 10 and 3."""
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


def safe_eval(expr: str) -> Any:
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
