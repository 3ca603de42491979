"""The sympy symbols of the formula notation (see `btacalc.vocabulary.NOTATION`).

Formulas are written in the papers' single-letter notation; the library API uses descriptive names.
"""

from __future__ import annotations

import sympy as sp

from ..vocabulary import NOTATION

SYMBOLS: dict[str, sp.Symbol] = {
    name: sp.Symbol(name, positive=True, integer=(name not in ("beta", "beta_s"))) for name in NOTATION
}
