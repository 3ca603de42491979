"""Numeric evaluation of a selection: every per-phase formula compiled once into one function.

The sums are compiled with ``sympy.lambdify`` and evaluated on plain ints (exact) or numpy arrays
(vectorised sweeps): the symbolic expressions stay the single source of truth. The parallel sizes
that divide (t, t_e) enter the compiled functions as reciprocals, so a formula divided by t = 1 stays an
exact integer (and t > 1 gives an exact `Fraction` on ints).
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any, Callable

import numpy as np
import sympy as sp

from ..vocabulary import ARG_ORDER, QUANTITIES, RECIPROCAL_SYMBOLS
from .selection import Selection, state_terms
from .symbols import SYMBOLS
from .terms import Phase


@functools.lru_cache(maxsize=64)
def compile_selection(selection: Selection) -> "CompiledSelection":
    return CompiledSelection(selection)


class CompiledSelection:
    """All per-phase formulas of a selection, lambdified into one numeric function."""

    def __init__(self, selection: Selection):
        self.selection = selection
        self.phases: list[Phase] = [p for p in selection.phases(scope=None) if p.scope != "state"]
        self.quantities = QUANTITIES
        exprs = [selection.expression(p, q) for p in self.phases for q in self.quantities]
        self.expressions = exprs
        inverse = {name: sp.Symbol(f"inv_{name}", positive=True) for name in RECIPROCAL_SYMBOLS}
        exprs = [e.subs({SYMBOLS[n]: 1 / inv for n, inv in inverse.items()}) for e in exprs]
        args = [inverse.get(name, SYMBOLS[name]) for name in ARG_ORDER]
        # One generated function for every formula; plain Python arithmetic on ints is exact.
        self._fn = sp.lambdify(args, exprs, modules="numpy")
        self.state_rates = _compile_state_rates(selection)

    def evaluate(self, values: dict[str, Any]) -> "PhaseValues":
        """Evaluate at `values` (symbol name -> int or numpy array). Missing symbols are an error."""
        missing = [n for n in ARG_ORDER if n not in values]
        if missing:
            raise ValueError(f"values missing for symbols {missing}")
        flat = self._fn(*(_reciprocal(values[n]) if n in RECIPROCAL_SYMBOLS else values[n] for n in ARG_ORDER))
        return PhaseValues(self, flat)


def _reciprocal(v: Any) -> Any:
    """1/v: exact for ints (1 stays the int 1, others a Fraction), elementwise for arrays."""
    if isinstance(v, (int, Fraction)) and not isinstance(v, bool):
        return 1 if v == 1 else Fraction(1) / v
    return 1 / v


def _compile_state_rates(selection: Selection) -> dict[str, Callable[[int], Any]]:
    """Training-state bytes per parameter for each component (weights, gradients, optimizer), as
    functions of beta: the catalogue's state terms are linear in P."""
    terms = state_terms(selection.feature_dict)
    out: dict[str, Callable[[int], Any]] = {}
    for component in dict.fromkeys(t.component for t in terms):
        expr = sp.Add(*[t.sym for t in terms if t.component == component]).subs(SYMBOLS["P"], 1)
        out[component] = sp.lambdify([SYMBOLS["beta"]], expr, modules="math")
    return out


class PhaseValues:
    """Evaluated formulas: value(phase, quantity) -> int/float or numpy array."""

    def __init__(self, compiled: CompiledSelection, flat: list[Any]):
        self.compiled = compiled
        nq = len(compiled.quantities)
        self._table = {
            (p.name, q): flat[i * nq + j]
            for i, p in enumerate(compiled.phases)
            for j, q in enumerate(compiled.quantities)
        }

    @property
    def phases(self) -> list[Phase]:
        return self.compiled.phases

    def value(self, phase: str, quantity: str) -> Any:
        return self._table[(phase, quantity)]

    def phase_names(self, scope: str | None = None) -> list[str]:
        return [p.name for p in self.compiled.phases if scope is None or p.scope == scope]

    def total(self, quantity: str, scope: str) -> Any:
        """Sum of `quantity` over the phases of `scope` ('layer' or 'model')."""
        return sum((self._table[(n, quantity)] for n in self.phase_names(scope)), start=0)

    def max(self, quantity: str, names: list[str] | None = None) -> Any:
        names = names if names is not None else self.phase_names()
        vals = [self._table[(n, quantity)] for n in names]
        if any(isinstance(v, np.ndarray) for v in vals):
            return np.maximum.reduce(np.broadcast_arrays(*vals))
        return max(vals)

    def argmax(self, quantity: str) -> str:
        names = self.phase_names()
        return max(names, key=lambda n: self._table[(n, quantity)])
