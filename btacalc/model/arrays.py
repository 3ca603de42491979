"""Scalar-or-array helpers: exact Python arithmetic on scalars (ints and Fractions stay exact), numpy
elementwise operations on arrays (one element per layout of a search)."""

from __future__ import annotations

from typing import Any

import numpy as np


def is_array(*values: Any) -> bool:
    for v in values:  # a plain loop: this runs per phase and quantity, a generator costs twice as much
        if isinstance(v, np.ndarray):
            return True
    return False


# where/maximum/minimum test for arrays inline (not through is_array): they run several hundred times
# per configuration, and the extra call was a third of their cost. The common scalar types are recognised
# first by their exact type (one set lookup each, half the cost of the isinstance tests); none of them is an
# array, so they take the branch the isinstance tests give them.
_ARRAY = np.ndarray
_SCALARS = frozenset({bool, int, float, np.bool_, np.int64, np.float64})


def where(cond: Any, a: Any, b: Any) -> Any:
    """`a if cond else b`, elementwise when anything is an array."""
    if type(cond) in _SCALARS and type(a) in _SCALARS and type(b) in _SCALARS:
        return a if cond else b
    if isinstance(cond, _ARRAY) or isinstance(a, _ARRAY) or isinstance(b, _ARRAY):
        return np.where(cond, a, b)
    return a if cond else b


def maximum(a: Any, b: Any) -> Any:
    if type(a) in _SCALARS and type(b) in _SCALARS:
        return a if a >= b else b
    if isinstance(a, _ARRAY) or isinstance(b, _ARRAY):
        return np.maximum(a, b)
    return a if a >= b else b


def minimum(a: Any, b: Any) -> Any:
    if type(a) in _SCALARS and type(b) in _SCALARS:
        return a if a <= b else b
    if isinstance(a, _ARRAY) or isinstance(b, _ARRAY):
        return np.minimum(a, b)
    return a if a <= b else b


def ceil_div(a: Any, b: Any) -> Any:
    """ceil(a / b) for positive integers (or integer-valued arrays)."""
    return -(-a // b)


def largest(v: Any) -> int:
    """The largest element of an int or an integer array (how many pipeline stages to walk)."""
    return int(np.max(v)) if is_array(v) else int(v)
