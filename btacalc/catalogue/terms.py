"""The symbolic formula catalogue: phases and terms read from ``formulas/*.toml``.

Each term is one sympy expression for one tensor or matmul, with the tensor it counts and its
source. A *selection* (model features + run options + recomputation policy) picks the terms that
apply; their sums per phase and quantity are the formulas btacalc evaluates. The sums are compiled
once per selection with ``sympy.lambdify`` and evaluated on plain ints (exact) or numpy arrays
(vectorised sweeps): the expressions are the single source of truth.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal, Union

import numpy as np
import sympy as sp
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator
from sympy.parsing.sympy_parser import parse_expr

from .errors import DataError
from .features import FEATURES, RECOMPUTE_POLICIES  # noqa: F401  (re-exported: the catalogue's vocabulary)
from .paths import data_dir
from .symbols import ARG_ORDER, SYMBOLS

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib  # type: ignore[no-redef]

# Quantities written in the catalogue files.
BASE_QUANTITIES = (
    "params",
    "flops_fwd",
    "flops_recompute",
    "flops_elementwise",
    "stored",
    "transient",
    "bytes_moved",
    "state",
)
# Quantities btacalc derives from the base ones (see `Selection.expression`).
DERIVED_QUANTITIES = ("flops_bwd", "recompute_bytes", "arithmetic_intensity")
QUANTITIES = BASE_QUANTITIES[:-1] + DERIVED_QUANTITIES  # per-phase quantities ("state" is per parameter)

QUANTITY_UNITS = {
    "params": "parameters",
    "flops_fwd": "FLOP",
    "flops_bwd": "FLOP",
    "flops_recompute": "FLOP",
    "flops_elementwise": "FLOP",
    "stored": "bytes",
    "transient": "bytes",
    "bytes_moved": "bytes",
    "recompute_bytes": "bytes",
    "arithmetic_intensity": "FLOP/byte",
    "state": "bytes",
}

FeatureValue = Union[bool, str]
Condition = dict[str, Union[FeatureValue, list[FeatureValue]]]
When = Union[Condition, list[Condition]]  # a list means: any of these conditions


def _check_when(when: When) -> When:
    for cond in when if isinstance(when, list) else [when]:
        for key, value in cond.items():
            if key not in FEATURES:
                raise ValueError(f"unknown feature {key!r} in 'when' (known: {', '.join(FEATURES)})")
            for v in value if isinstance(value, list) else [value]:
                if v not in FEATURES[key]:
                    raise ValueError(f"feature {key!r} has no value {v!r} (allowed: {FEATURES[key]})")
    return when


def _matches(when: When, features: dict[str, Any]) -> bool:
    if isinstance(when, list):
        return any(_matches(cond, features) for cond in when)
    for key, value in when.items():
        allowed = value if isinstance(value, list) else [value]
        if features[key] not in allowed:
            return False
    return True


class Term(BaseModel):
    """One tensor or matmul: an expression, what it counts and where it comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    q: Literal[BASE_QUANTITIES]  # type: ignore[valid-type]
    expr: str
    tensor: str = Field(min_length=3)
    source: str = Field(min_length=3)
    when: When = {}
    # layer: dropped by full recomputation; core: also by selective; never: always kept;
    # checkpoint: kept only under full recomputation (what the checkpoint itself saves)
    recompute: Literal["layer", "core", "never", "checkpoint"] = "layer"
    component: str = ""  # state terms only: weights / gradients / optimizer

    _sym: sp.Expr = PrivateAttr()

    @field_validator("when")
    @classmethod
    def _check(cls, v: When) -> When:
        return _check_when(v)

    @model_validator(mode="after")
    def _parse(self) -> "Term":
        try:
            sym = parse_expr(self.expr, local_dict=dict(SYMBOLS), evaluate=True)
        except Exception as exc:  # sympy raises many kinds
            raise ValueError(f"cannot parse expression {self.expr!r}: {exc}") from None
        unknown = {str(x) for x in sym.free_symbols} - set(SYMBOLS)
        if unknown:
            raise ValueError(f"expression {self.expr!r} uses unknown symbols {sorted(unknown)}")
        self._sym = sym
        return self

    @property
    def sym(self) -> sp.Expr:
        return self._sym

    def applies(self, features: dict[str, Any]) -> bool:
        return _matches(self.when, features)


class Phase(BaseModel):
    """A phase of a decoder layer (scope 'layer') or a part outside the layers (scope 'model')."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    order: int
    group: Literal["norm", "attention", "moe", "mlp", "head", "state"]
    scope: Literal["layer", "model", "state"]
    batch: Literal["tile", "global"]
    summary: str
    core: bool = False
    when: When = {}
    term: list[Term] = []

    @field_validator("when")
    @classmethod
    def _check(cls, v: When) -> When:
        return _check_when(v)

    @property
    def terms(self) -> list[Term]:
        return self.term

    def applies(self, features: dict[str, Any]) -> bool:
        return _matches(self.when, features)


@functools.lru_cache(maxsize=1)
def load_catalogue() -> tuple[Phase, ...]:
    """Read every ``formulas/*.toml`` file; phases sorted by their `order`."""
    folder = data_dir("formulas")
    phases: list[Phase] = []
    for path in sorted(folder.glob("*.toml")):
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
            phases.extend(Phase.model_validate(p) for p in raw.get("phase", []))
        except Exception as exc:
            raise DataError(f"formula file {path.name}: {exc}") from exc
    names = [p.name for p in phases]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise DataError(f"phase names defined twice in the catalogue: {sorted(dupes)}")
    return tuple(sorted(phases, key=lambda p: p.order))


def phase_by_name(name: str) -> Phase:
    for p in load_catalogue():
        if p.name == name:
            return p
    raise KeyError(name)


@dataclass(frozen=True)
class Selection:
    """Which terms apply: model features, run options and the recomputation policy."""

    features: tuple[tuple[str, Any], ...]
    recompute: str

    @classmethod
    def make(cls, features: dict[str, Any], recompute: str) -> "Selection":
        missing = set(FEATURES) - set(features)
        if missing:
            raise ValueError(f"selection lacks features {sorted(missing)}")
        if recompute not in RECOMPUTE_POLICIES:
            raise ValueError(f"unknown recompute policy {recompute!r}")
        return cls(tuple(sorted(features.items())), recompute)

    @property
    def feature_dict(self) -> dict[str, Any]:
        return dict(self.features)

    def phases(self, scope: str | None = None) -> list[Phase]:
        f = self.feature_dict
        return [p for p in load_catalogue() if p.applies(f) and (scope is None or p.scope == scope)]

    def terms(self, phase: Phase, quantity: str) -> list[Term]:
        """The terms of `phase` that count toward `quantity` under this selection."""
        f = self.feature_dict
        chosen = [t for t in phase.terms if t.q == quantity and t.applies(f)]
        if quantity == "stored":
            if self.recompute == "full":
                chosen = [t for t in chosen if t.recompute in ("never", "checkpoint")]
            else:
                chosen = [t for t in chosen if t.recompute != "checkpoint"]
                if self.recompute == "selective":
                    chosen = [t for t in chosen if t.recompute != "core"]
        return chosen

    def expression(self, phase: Phase, quantity: str) -> sp.Expr:
        """The formula for `quantity` of `phase`, per training step of G*b sequences."""
        if quantity == "flops_bwd":
            # Backward of a matmul is two matmuls of the same size (dX and dW): 2x forward.
            return 2 * self.expression(phase, "flops_fwd")
        if quantity == "recompute_bytes":
            # Activations the policy dropped are rebuilt during this layer's backward pass and live
            # together while it runs: attention phases one tile at a time (b), the rest on G*b.
            kept = {id(t) for t in self.terms(phase, "stored")}
            f = self.feature_dict
            dropped = sp.Add(*[t.sym for t in phase.terms
                               if t.q == "stored" and t.applies(f) and id(t) not in kept and t.recompute != "checkpoint"])
            if phase.scope != "layer":
                return sp.Integer(0)
            return dropped.subs(SYMBOLS["G"], 1) if phase.batch == "tile" else dropped
        if quantity == "arithmetic_intensity":
            num, den = self.expression(phase, "flops_fwd"), self.expression(phase, "bytes_moved")
            return sp.Integer(0) if den == 0 else num / den
        total = sp.Add(*[t.sym for t in self.terms(phase, quantity)])
        if quantity == "flops_recompute":
            total += self._policy_recompute(phase)
        return total

    def _policy_recompute(self, phase: Phase) -> sp.Expr:
        """Forward FLOPs re-run in the backward pass because the policy dropped their activations.

        Selective: the attention core (Korthikanti 2022 §5; hardware FLOPs 72BLsh^2(1 + s/(3h) + ...)).
        With FlashAttention the core is already recomputed by the kernel (counted as a term).
        Full: the whole layer's forward pass (Korthikanti 2022 §5, Chen et al. 2016).
        """
        if phase.scope != "layer":
            return sp.Integer(0)
        f = self.feature_dict
        if self.recompute == "full" or (
            self.recompute == "selective" and phase.core and f["attention"] == "eager"
        ):
            return self.expression(phase, "flops_fwd")
        return sp.Integer(0)


@functools.lru_cache(maxsize=64)
def compile_selection(selection: Selection) -> "CompiledSelection":
    return CompiledSelection(selection)


class CompiledSelection:
    """All per-phase formulas of a selection, lambdified into one numeric function."""

    def __init__(self, selection: Selection):
        self.selection = selection
        self.phases = selection.phases(scope=None)
        self.phases = [p for p in self.phases if p.scope != "state"]
        self.quantities = QUANTITIES
        exprs = [selection.expression(p, q) for p in self.phases for q in self.quantities]
        self.expressions = exprs
        args = [SYMBOLS[name] for name in ARG_ORDER]
        # One generated function for every formula; plain Python arithmetic on ints is exact.
        self._fn = sp.lambdify(args, exprs, modules="numpy")

    def evaluate(self, values: dict[str, Any]) -> "PhaseValues":
        """Evaluate at `values` (symbol name -> int or numpy array). Missing symbols are an error."""
        missing = [n for n in ARG_ORDER if n not in values]
        if missing:
            raise ValueError(f"values missing for symbols {missing}")
        flat = self._fn(*(values[n] for n in ARG_ORDER))
        return PhaseValues(self, flat)


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


def state_terms(features: dict[str, Any]) -> list[Term]:
    """The per-parameter training-state terms (weights, gradients, optimizer) that apply."""
    phase = phase_by_name("training_state")
    return [t for t in phase.terms if t.q == "state" and t.applies(features)]


def state_expression(features: dict[str, Any], component: str | None = None) -> sp.Expr:
    """Training-state bytes for P parameters, optionally of one component."""
    return sp.Add(*[t.sym for t in state_terms(features) if component in (None, t.component)])
