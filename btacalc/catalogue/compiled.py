"""Numeric evaluation of a selection: every per-phase formula as generated Python, cached on disk.

Every per-phase quantity of the catalogue (arithmetic intensity aside: a ratio of two of them) is a
polynomial at most linear in each of G and b, which the generator checks (`_coefficients_of`), so at
any batch shape

    value(G, b) = c0 + c_b*b + c_G*G + c_Gb*G*b

where c0, c_b, c_G and c_Gb are polynomials in the model's symbols, s and beta. sympy derives them
once per selection from `Selection.expression` (the single source of truth) and prints them, common
subexpressions shared, as one Python function (`generate_source`). That module is kept in the
catalogue's cache (`catalogue.cache`: keyed by a fingerprint of the catalogue and of this code,
written atomically, compiled in memory when the cache cannot be written). Loading a cached module
does not import sympy.

Where a formula divides by a parallel size (t, t_e: `vocabulary.RECIPROCAL_SYMBOLS`), the generated
function multiplies by its reciprocal, passed in as an int 1 or an exact `Fraction`, so a formula
divided by t = 1 stays an exact integer and t > 1 gives an exact `Fraction` on ints; `ceiling` is printed as an exact integer ceiling (`_ceil`).

Evaluation is plain Python arithmetic: exact on ints, elementwise on numpy arrays (the solver's
candidate shapes, vectorised sweeps). `PhaseValues` computes a value on first use, and sums or
sums over phases through the coefficients (a total is one affine form, not a sum of arrays).
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import operator
import types
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from .. import profiling
from ..errors import DataError
from ..vocabulary import ARG_ORDER, QUANTITIES, RECIPROCAL_SYMBOLS
from .cache import fingerprint, read_entry, write_entry
from .selection import Selection
from .terms import Phase

if TYPE_CHECKING:
    import sympy as sp

# Arguments of the generated coefficient function: every symbol but the batch shape (and P, which
# only the per-parameter training-state formulas use).
MODEL_ARGS: tuple[str, ...] = tuple(n for n in ARG_ORDER if n not in ("G", "b", "P"))
# Quantities with one generated row per phase; arithmetic intensity is their ratio.
ROW_QUANTITIES: tuple[str, ...] = tuple(q for q in QUANTITIES if q != "arithmetic_intensity")
# Monomials G^i b^j of a row, in the order of its coefficients: 1, b, G, G*b.
MONOMIALS = ((0, 0), (0, 1), (1, 0), (1, 1))
STATE_COMPONENTS = ("weights", "gradients", "optimizer")
# The generated function's parameters: the model arguments, then the reciprocals of the divisors.
PARAMETERS: tuple[str, ...] = MODEL_ARGS + tuple(f"inv_{n}" for n in RECIPROCAL_SYMBOLS)


def _selection_key(selection: Selection) -> str:
    return repr((selection.features, selection.recompute))


@functools.lru_cache(maxsize=64)
def compile_selection(selection: Selection) -> "CompiledSelection":
    return CompiledSelection(selection)


class CompiledSelection:
    """The generated numeric functions of one selection: the coefficients of every (phase, quantity)
    row and the training-state bytes per parameter."""

    def __init__(self, selection: Selection):
        self.selection = selection
        self.phases: list[Phase] = [p for p in selection.phases(scope=None) if p.scope != "state"]
        self.quantities = QUANTITIES
        module = load_module(selection)
        if tuple(module.PHASES) != tuple(p.name for p in self.phases):
            raise DataError(f"generated module {module.__name__} lists other phases than the catalogue")
        self._coefficients: Callable[..., tuple[Any, ...]] = module.coefficients
        self.masks: tuple[int, ...] = module.MASKS  # per row: bit i set when coefficient i is not identically 0
        self.row: dict[tuple[str, str], int] = {
            (p.name, q): i * len(ROW_QUANTITIES) + j for i, p in enumerate(self.phases) for j, q in enumerate(ROW_QUANTITIES)
        }
        self.state_rates: dict[str, Callable[[Any], Any]] = {
            c: functools.partial(module.state_rate, c) for c in STATE_COMPONENTS}

    def coefficients(self, values: dict[str, Any]) -> "Coefficients":
        """The coefficients at `values` (symbol name -> int or numpy array; G and b are not needed)."""
        missing = [n for n in MODEL_ARGS if n not in values]
        if missing:
            raise ValueError(f"values missing for symbols {missing}")
        profiling.count("model evaluations")
        args = [values[n] for n in MODEL_ARGS] + [_reciprocal(values[n]) for n in RECIPROCAL_SYMBOLS]
        # the coefficients are arrays exactly when some input is (the generated code is arithmetic)
        scalar = not any(isinstance(a, np.ndarray) for a in args)
        return Coefficients(self, self._coefficients(*args), scalar)

    def evaluate(self, values: dict[str, Any]) -> "PhaseValues":
        """Every per-phase quantity at `values` (symbol name -> int or numpy array)."""
        return self.coefficients(values).at(values["G"], values["b"])

    @property
    def expressions(self) -> list["sp.Expr"]:
        """The summed sympy expressions, phase by phase and quantity by quantity (imports sympy)."""
        return [self.selection.expression(p, q) for p in self.phases for q in self.quantities]


def _reciprocal(v: Any) -> Any:
    """1/v: exact for ints (1 stays the int 1, others a Fraction), elementwise for arrays."""
    if isinstance(v, (int, Fraction)) and not isinstance(v, bool):
        return 1 if v == 1 else Fraction(1) / v
    return 1 / v


class Coefficients:
    """c0, c_b, c_G, c_Gb of every row at one set of symbol values (ints, or arrays of points)."""

    def __init__(self, compiled: CompiledSelection, flat: tuple[Any, ...], scalar: Optional[bool] = None):
        self.compiled = compiled
        self.flat = flat
        # one point: Python numbers (given by the caller when it knows, else found by looking)
        self.scalar = scalar if scalar is not None else not any(isinstance(c, np.ndarray) for c in flat)
        self._sums: dict[tuple[str, str], tuple[int, tuple[Any, ...]]] = {}
        self._stacked: dict[str, tuple[int, np.ndarray]] = {}
        self.derived: dict[Any, Any] = {}  # what callers compute once from these coefficients (model/gpu/costs.py)
        self._templates: dict[int, Any] = {}  # `phase_template` per phase (its first row)

    def at(self, tiles: Any, tile_batch: Any) -> "PhaseValues":
        return PhaseValues(self, tiles, tile_batch)

    def rows_at(self, tiles: Any, tile_batch: Any, n: Any) -> dict[int, Any]:
        """Every row at one shape of Python numbers (row -> c0 + c_b*b + c_G*G + c_Gb*G*b). With ints
        throughout, the rows whose only coefficient is c0 are c0 (the zero terms add int zeros) and only
        the others are computed; otherwise every term, as written."""
        f = self.flat
        if type(tiles) is int and type(tile_batch) is int and self._integer_rows is not None:
            constant, varying = self._integer_rows
            values = constant.copy()
            for r, c0, c_b, c_g, c_n in varying:
                values[r] = c0 + c_b * tile_batch + c_g * tiles + c_n * n
            return values
        return dict(enumerate(f[i] + f[i + 1] * tile_batch + f[i + 2] * tiles + f[i + 3] * n
                              for i in range(0, len(f), 4)))

    def phase_template(self, base: int) -> Optional[tuple[dict[str, int], tuple[tuple[str, int, int, int, int], ...]]]:
        """One phase's rows (base, base + 1, ... in `ROW_QUANTITIES` order) split as `rows_at` splits every row
        when every coefficient is an int (`_integer_rows`): (quantity -> c0 of every row, in that order; the
        quantities with a shape term and their c0, c_b, c_G, c_Gb), else None. `PhaseValues.of` at one shape of
        ints computes the phase's rows from it, the same int arithmetic as `rows_at` on the same terms, without
        every other phase's rows (kept per coefficients and phase)."""
        try:
            return self._templates[base]
        except KeyError:
            pass
        rows = self._integer_rows
        template = None
        if rows is not None:
            constant, by_row = rows[0], self._varying_rows
            quantities = list(enumerate(ROW_QUANTITIES, start=base))
            template = ({q: constant[r] for r, q in quantities},
                        tuple([(q, *by_row[r]) for r, q in quantities if r in by_row]))
        self._templates[base] = template
        return template

    @cached_property
    def _varying_rows(self) -> dict[int, tuple[int, int, int, int]]:
        """Row -> (c0, c_b, c_G, c_Gb) of the rows with a shape term (`_integer_rows`; all ints)."""
        rows = self._integer_rows
        return {} if rows is None else {r: (c0, c_b, c_g, c_n) for r, c0, c_b, c_g, c_n in rows[1]}

    @cached_property
    def _integer_rows(self) -> Optional[tuple[dict[int, int], list[tuple[int, int, int, int, int]]]]:
        """(constant rows, the other rows with their coefficients) when every coefficient is an int,
        else None."""
        f = self.flat
        if not self.scalar or any(type(c) is not int for c in f):
            return None
        constant: dict[int, int] = {}
        varying = []
        masks = self.compiled.masks
        for r, i in enumerate(range(0, len(f), 4)):
            constant[r] = f[i]  # in row order; a varying row's value replaces it
            # a shape term by the row's mask, as `affine` reads it, even where a layout symbol makes it 0 here
            # (x_g = 0: the allgather dispatcher's bytes under another dispatcher): an array of shapes then gives an
            # array of zeros on both paths
            if f[i + 1] or f[i + 2] or f[i + 3] or masks[r] & 14:
                varying.append((r, f[i], f[i + 1], f[i + 2], f[i + 3]))
        return constant, varying

    @cached_property
    def varying_columns(self) -> Optional[tuple[list[int], np.ndarray]]:
        """(the rows with a coefficient of b, G or G*b, their c0, c_b, c_G, c_Gb as a (4, rows, 1) float
        array) when every coefficient is an int below 2^53 in size (float64 holds each exactly, so each
        term is the float64 product `affine` forms), else None. `PhaseValues` evaluates these rows for
        an array of shapes in four operations instead of four per row."""
        if self._integer_rows is None or any(abs(c) >= 2 ** 53 for c in self.flat):
            return None
        varying = self._integer_rows[1]
        rows = [r for r, *_ in varying]
        columns = np.array([[row[i] for row in varying] for i in range(1, 5)], dtype=float).reshape(4, len(rows), 1)
        return rows, columns

    def take(self, index: np.ndarray) -> "Coefficients":
        """The coefficients of points `index` (these hold arrays of points): gathered row by row on
        first use, sums included, rather than computed again."""
        return _Gathered(self, index)

    def row(self, r: int) -> tuple[int, tuple[Any, ...]]:
        return self.compiled.masks[r], self.flat[4 * r:4 * r + 4]

    def summed(self, quantity: str, scope: str) -> tuple[int, tuple[Any, ...]]:
        """The row of `quantity` summed over the phases of `scope`."""
        key = (quantity, scope)
        if key not in self._sums:
            mask, total = 0, [0, 0, 0, 0]
            for p in self.compiled.phases:
                if p.scope == scope:
                    m, c = self.row(self.compiled.row[(p.name, quantity)])
                    mask |= m
                    total = [t + ci if m >> i & 1 else t for i, (t, ci) in enumerate(zip(total, c))]
            self._sums[key] = (mask, tuple(total))
        return self._sums[key]

    def stacked(self, quantity: str) -> tuple[int, np.ndarray]:
        """The rows of `quantity` (every phase, identically zero ones left out) as one float array of
        shape (4, rows, ...): what an array of shapes needs to take their maximum in a few operations.
        Exact while the values stay below 2^53 (bytes and FLOPs of one shape do)."""
        if quantity not in self._stacked:
            rows = self.rows(quantity)
            mask = 0
            for r in rows:
                mask |= self.compiled.masks[r]
            coefs = [self.row(r)[1] for r in rows] or [(0, 0, 0, 0)]
            shape = np.broadcast_shapes(*(np.shape(c) for row in coefs for c in row))
            stack = np.array([[np.broadcast_to(np.asarray(row[i], dtype=float), shape) for row in coefs]
                              for i in range(4)])
            self._stacked[quantity] = (mask, stack)
        return self._stacked[quantity]

    def rows(self, quantity: str, names: Optional[list[str]] = None) -> list[int]:
        """Rows of `quantity` over `names` (default every phase) that are not identically zero."""
        compiled = self.compiled
        names = names if names is not None else [p.name for p in compiled.phases]
        return [r for r in (compiled.row[(n, quantity)] for n in names) if compiled.masks[r]]


class _Gathered(Coefficients):
    """`Coefficients.take`: rows and sums of the parent at some of its points, gathered lazily."""

    def __init__(self, parent: Coefficients, index: np.ndarray):
        super().__init__(parent.compiled, ())
        self.scalar = False
        self.parent, self.index = parent, index
        self._rows: dict[int, tuple[int, tuple[Any, ...]]] = {}

    def _gather(self, row: tuple[int, tuple[Any, ...]]) -> tuple[int, tuple[Any, ...]]:
        mask, c = row
        return mask, tuple(v[self.index] if isinstance(v, np.ndarray) and v.ndim else v for v in c)

    def row(self, r: int) -> tuple[int, tuple[Any, ...]]:
        if r not in self._rows:
            self._rows[r] = self._gather(self.parent.row(r))
        return self._rows[r]

    def summed(self, quantity: str, scope: str) -> tuple[int, tuple[Any, ...]]:
        key = (quantity, scope)
        if key not in self._sums:
            self._sums[key] = self._gather(self.parent.summed(quantity, scope))
        return self._sums[key]

    def stacked(self, quantity: str) -> tuple[int, np.ndarray]:
        if quantity not in self._stacked:
            mask, stack = self.parent.stacked(quantity)
            self._stacked[quantity] = (mask, stack[..., self.index] if stack.ndim > 2 else stack)
        return self._stacked[quantity]


# Up to this many values (shapes x phases) the maximum over phases is taken on one stacked array.
_STACKED_ELEMENTS = 1 << 16


# A row's mask: bit i set where its coefficient i of (c0, c_b, c_G, c_Gb) is not identically zero
CONSTANT_TERM = 1  # c0
SHAPE_TERMS = 2 | 4 | 8  # c_b, c_G, c_Gb: the row varies with the shape


def affine(mask: int, c: tuple[Any, ...], tiles: Any, tile_batch: Any, n: Any) -> Any:
    """c0 + c_b*b + c_G*G + c_Gb*G*b, skipping the coefficients that are identically zero."""
    value: Any = c[0] if mask & CONSTANT_TERM else 0
    if mask & 2:
        value = value + c[1] * tile_batch
    if mask & 4:
        value = value + c[2] * tiles
    if mask & 8:
        value = value + c[3] * n
    return value


class PhaseValues:
    """Evaluated formulas at one batch shape: value(phase, quantity) -> int/float or numpy array."""

    def __init__(self, coefficients: Coefficients, tiles: Any, tile_batch: Any):
        self.coefficients = coefficients
        self.compiled = coefficients.compiled
        self.tiles, self.tile_batch = tiles, tile_batch
        self.n = tiles * tile_batch
        self._values: dict[int, Any] = {}
        self._phase_rows: dict[str, dict[str, Any]] = {}
        self._complete = False  # every row computed (one shape of ints)
        # one shape: every row at once, in plain (exact) integer arithmetic, on the first row read (`_one_shape`;
        # a caller that reads only sums, `total`, such as the model FLOPs of the unsplit problem, needs none)
        self._rows_pending = isinstance(tiles, int) and isinstance(tile_batch, int) and coefficients.scalar

    def _one_shape(self) -> None:
        """Every row of one shape of ints at once (`Coefficients.rows_at`)."""
        self._values = self.coefficients.rows_at(self.tiles, self.tile_batch, self.n)
        self._complete, self._rows_pending = True, False

    @property
    def phases(self) -> list[Phase]:
        return self.compiled.phases

    @cached_property
    def integer_bounds(self) -> Optional[tuple[int, int, int]]:
        """(largest G, largest b, largest G*b) as ints when the shapes are arrays of non-negative integers
        with G*b below 2^53 (float64 then holds every integer a sum of coefficient x shape terms below 2^53
        reaches, exactly), else None."""
        if not isinstance(self.n, np.ndarray) or not self.n.size:
            return None
        shapes = [np.asarray(x, dtype=float) for x in (self.tiles, self.tile_batch)]
        # min, max and any as their ufuncs' reductions (what the methods run, without their Python wrappers)
        low, high = np.minimum.reduce, np.maximum.reduce
        g, b = shapes
        # both at once where they are 1-D arrays (the solver's probes): one array, one test of each kind
        both = np.concatenate(shapes) if g.ndim == 1 and b.ndim == 1 else None
        if both is not None:
            if low(both) < 0 or np.logical_or.reduce(both % 1):
                return None
        elif any(low(x, axis=None) < 0 or np.logical_or.reduce(x % 1, axis=None) for x in shapes):
            return None
        top = float(high(self.n, axis=None))
        return (int(high(shapes[0], axis=None)), int(high(shapes[1], axis=None)), int(top)) if top < 2.0 ** 53 else None

    def _row(self, r: int) -> Any:
        try:
            return self._values[r]
        except KeyError:
            if self._rows_pending:
                self._one_shape()
                return self._values[r]
            if self._columns_pending and self._all_varying_rows():
                return self._row(r)
            self._values[r] = value = affine(*self.coefficients.row(r), self.tiles, self.tile_batch, self.n)
            return value

    @cached_property
    def _columns_pending(self) -> bool:
        """Whether `_all_varying_rows` may answer (asked once: it answers on the first row read)."""
        return isinstance(self.n, np.ndarray)

    def _all_varying_rows(self) -> bool:
        """Every row with a shape term at once, for a small 1-D array of shapes of positive finite floats
        and int coefficients below 2^53 (`Coefficients.varying_columns`): ((c0 + c_b*b) + c_G*G) + c_Gb*G*b
        as `affine` adds them, a missing term adding c*x = +0.0, which leaves every sum as it is since
        every term and partial sum of positive shapes is non-zero or +0.0. Rows without a shape term
        stay Python ints (`affine`). False (nothing computed) when the shapes do not qualify."""
        self._columns_pending = False
        stack = self.coefficients.varying_columns
        g, b, n = self.tiles, self.tile_batch, self.n
        if stack is None or not all(isinstance(x, np.ndarray) and x.dtype == np.float64 and x.ndim == 1
                                    and x.shape == n.shape for x in (g, b, n)):
            return False
        rows, (c0, c_b, c_g, c_n) = stack
        all_of = np.logical_and.reduce  # (1-D: `ndarray.all` is this reduction behind a Python wrapper)
        if len(rows) * n.size > _STACKED_ELEMENTS or not (all_of(np.isfinite(n)) and all_of(g > 0) and all_of(b > 0)):
            return False
        values = c0 + c_b * b + c_g * g + c_n * n
        every = self.coefficients._integer_rows[0].copy()  # type: ignore[index]  # the constants, as `affine` gives them
        every.update(zip(rows, values))
        every.update(self._values)  # rows already read keep their objects
        self._values = every
        self._complete = True
        return True

    def of(self, phase: str) -> dict[str, Any]:
        """Every row quantity of `phase` (quantity -> value), for code that reads many of one phase:
        computed once per phase (all at once for one shape, on first use of each for arrays)."""
        try:
            return self._phase_rows[phase]
        except KeyError:
            pass
        base = self.compiled.row[(phase, ROW_QUANTITIES[0])]
        if self._rows_pending:
            tiles, tile_batch = self.tiles, self.tile_batch
            template = self.coefficients.phase_template(base) if type(tiles) is int and type(tile_batch) is int else None
            if template is not None:  # `rows_at`'s integer rows, this phase's alone (round "speed7")
                constant, varying = template
                rows: dict[str, Any] = constant.copy()
                n = self.n
                for q, c0, c_b, c_g, c_n in varying:
                    rows[q] = c0 + c_b * tile_batch + c_g * tiles + c_n * n
                self._phase_rows[phase] = rows
                return rows
            self._one_shape()
        if self._complete or (self._columns_pending and self._all_varying_rows()):
            row: dict[str, Any] = dict(zip(ROW_QUANTITIES, _phase_rows(base)(self._values)))
        else:
            row = _LazyRow(self, base)
        self._phase_rows[phase] = row
        return row

    def value(self, phase: str, quantity: str) -> Any:
        try:
            return self._row(self.compiled.row[(phase, quantity)])
        except KeyError:
            if quantity != "arithmetic_intensity":
                raise
        masks, row = self.compiled.masks, self.compiled.row
        if not masks[row[(phase, "flops_fwd")]] or not masks[row[(phase, "bytes_moved")]]:
            return 0  # as sympy simplifies 0/x, and x/0 where nothing moves
        return self.value(phase, "flops_fwd") / self.value(phase, "bytes_moved")

    def phase_names(self, scope: str | None = None) -> list[str]:
        return [p.name for p in self.compiled.phases if scope is None or p.scope == scope]

    def total(self, quantity: str, scope: str) -> Any:
        """Sum of `quantity` over the phases of `scope` ('layer' or 'model')."""
        return affine(*self.coefficients.summed(quantity, scope), self.tiles, self.tile_batch, self.n)

    def max(self, quantity: str, names: list[str] | None = None) -> Any:
        rows = self.coefficients.rows(quantity, names)
        size = np.size(self.n)
        if names is None and size > 1 and size * len(rows) <= _STACKED_ELEMENTS:
            mask, stack = self.coefficients.stacked(quantity)  # a few shapes: all phases at once
            if stack.ndim == 2:  # one coefficient per row: a column of rows against the shapes
                stack = stack.reshape(stack.shape + (1,) * np.ndim(self.n))
            return np.maximum.reduce(affine(mask, tuple(stack), self.tiles, self.tile_batch, self.n), axis=0)  # np.max
        out: Any = 0  # a running maximum, one phase at a time (at most one array in memory)
        for r in rows:
            value = self._row(r)
            out = np.maximum(out, value) if isinstance(value, np.ndarray) or isinstance(out, np.ndarray) else \
                max(out, value)
        return out

    def argmax(self, quantity: str) -> str:
        names = self.phase_names()
        return max(names, key=lambda n: self.value(n, quantity))


_QUANTITY_INDEX = {q: j for j, q in enumerate(ROW_QUANTITIES)}


@functools.lru_cache(maxsize=None)
def _phase_rows(base: int) -> Callable[[dict[int, Any]], tuple[Any, ...]]:
    """Reads the rows base, base + 1, ... of one phase's quantities (in `ROW_QUANTITIES` order) at once."""
    return operator.itemgetter(*range(base, base + len(ROW_QUANTITIES)))


class _LazyRow(dict[str, Any]):
    """`PhaseValues.of` for arrays of shapes: a quantity's row is evaluated when first read."""

    def __init__(self, values: PhaseValues, base: int):
        super().__init__()
        self._source, self._base = values, base

    def __missing__(self, quantity: str) -> Any:
        self[quantity] = value = self._source._row(self._base + _QUANTITY_INDEX[quantity])
        return value


# ---------------------------------------------------------------------------------------------------
# Loading and generating the modules


def load_module(selection: Selection) -> types.ModuleType:
    """The generated module of `selection`: its compiled code from the cache when it is there and
    verified (`cache.read_entry`: tagged with this user's key), else generated (with sympy), compiled,
    and written to the cache when possible. Cached code is never imported from a file Python would
    also read bytecode for (`__pycache__` could be replaced by anyone who can write there)."""
    key = _selection_key(selection)
    name = "sel_" + hashlib.sha256(key.encode()).hexdigest()[:20]
    module = types.ModuleType(f"btacalc.catalogue.generated.{name}")
    cached = read_entry(f"{name}.code")
    if cached is not None:
        try:
            exec(marshal.loads(cached), module.__dict__)
            if module.__dict__.get("SELECTION") == key:
                return module
        except Exception:  # verified but unusable: regenerated
            pass
        module = types.ModuleType(f"btacalc.catalogue.generated.{name}")
    code = compile(generate_source(selection), f"<btacalc generated {name}>", "exec")
    write_entry(f"{name}.code", marshal.dumps(code))
    exec(code, module.__dict__)
    return module


def _coefficients_of(expr: "sp.Expr", where: str) -> list["sp.Expr"]:
    """c0, c_b, c_G, c_Gb of `expr`; a DataError when `expr` is not bilinear in G and b."""
    import sympy as sp

    from .symbols import SYMBOLS

    terms = sp.Poly(sp.expand(expr), SYMBOLS["G"], SYMBOLS["b"]).as_dict()
    extra = sorted(set(terms) - set(MONOMIALS))
    if extra:
        raise DataError(f"{where} has terms G^i*b^j with (i, j) in {extra}: every formula must be at most linear "
                        "in each of G and b (c0 + c_b*b + c_G*G + c_Gb*G*b), which the numeric core evaluates")
    return [terms.get(m, sp.Integer(0)) for m in MONOMIALS]


# Helpers of every generated module: an exact ceiling and an exact division by an integer (p/q x) on
# ints and Fractions (floats and elementwise on arrays otherwise), and math for the odd sqrt.
_PRELUDE = ("import math", "from fractions import Fraction", "", "", "def _ceil(x):", "    return -(-x // 1)", "",
            "", "def _div(x, q):", "    if isinstance(x, (int, Fraction)) and isinstance(q, (int, Fraction)):",
            "        r = Fraction(x) / q", "        return r.numerator if r.denominator == 1 else r", "    return x / q")


def _printer() -> Any:
    import sympy as sp
    from sympy.printing.pycode import PythonCodePrinter

    class Printer(PythonCodePrinter):
        def _print_ceiling(self, expr: Any) -> str:
            return f"_ceil({self._print(expr.args[0])})"

        # every division as _div(numerator, denominator): exact on ints and Fractions
        def _print_Rational(self, expr: Any) -> str:
            return f"_div({expr.p}, {expr.q})"

        def _print_Mul(self, expr: Any) -> str:
            num, den = sp.fraction(expr)
            if den != 1:
                return f"_div({self._print(num)}, {self._print(den)})"
            return str(super()._print_Mul(expr))

        def _print_Pow(self, expr: Any, rational: bool = False) -> str:
            if expr.exp.is_Integer and expr.exp < 0:
                return f"_div(1, {self._print(expr.base ** -expr.exp)})"
            return str(super()._print_Pow(expr, rational))

    return Printer({"fully_qualified_modules": True})


def generate_source(selection: Selection) -> str:
    """Python source of the selection's numeric functions (see the module docstring)."""
    import sympy as sp

    from .selection import state_expression
    from .symbols import SYMBOLS

    printer = _printer()
    pycode = printer.doprint
    inverse = {SYMBOLS[n]: sp.Symbol(f"inv_{n}", positive=True) for n in RECIPROCAL_SYMBOLS}

    def divide_exactly(expr: sp.Expr) -> sp.Expr:  # x / t -> x * inv_t (t stays where it multiplies)
        return expr.replace(lambda e: e.is_Pow and e.base in inverse and e.exp.is_negative,
                            lambda e: inverse[e.base] ** (-e.exp))

    phases = [p for p in selection.phases(scope=None) if p.scope != "state"]
    coefs: list[sp.Expr] = []
    for p in phases:
        for q in ROW_QUANTITIES:
            expr = divide_exactly(sp.expand(selection.expression(p, q)))
            coefs += _coefficients_of(expr, f"phase {p.name}, quantity {q}")
    masks = [sum(1 << i for i in range(4) if coefs[4 * r + i] != 0) for r in range(len(coefs) // 4)]
    temps, reduced = sp.cse(coefs, symbols=sp.numbered_symbols("_t"), optimizations=None)
    rates = {c: sp.expand(state_expression(selection.feature_dict, c).subs(SYMBOLS["P"], 1)) for c in STATE_COMPONENTS}
    lines = [
        "# Generated by btacalc.catalogue.compiled from the formula catalogue: do not edit.",
        f"# Catalogue fingerprint {fingerprint()}.",
        f"SELECTION = {_selection_key(selection)!r}",
        f"PHASES = {tuple(p.name for p in phases)!r}",
        f"MASKS = {tuple(masks)!r}",
        *_PRELUDE,
        "",
        "",
        f"def coefficients({', '.join(PARAMETERS)}):",
        *(f"    {t} = {pycode(e)}" for t, e in temps),
        "    return (" + ", ".join(pycode(e) for e in reduced) + ",)",
        "",
        "",
        "def state_rate(component, beta):",
        *(f"    if component == {c!r}:\n        return {pycode(e)}" for c, e in rates.items()),
        "    raise KeyError(component)",
        "",
    ]
    return "\n".join(lines)
