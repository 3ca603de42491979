"""A *selection*: which terms apply for a model's features, the run options and the recomputation
policy; their sums per phase and quantity are the formulas btacalc evaluates.

Choosing terms needs no sympy; building the summed expressions (`expression`, `state_expression`)
does, and only the code generator (`compiled`), the formula listing and the tests call them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..vocabulary import FEATURES, RECOMPUTE_POLICIES
from .constants import constants
from .terms import Phase, Term, load_catalogue

if TYPE_CHECKING:
    import sympy as sp


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

    def expression(self, phase: Phase, quantity: str) -> "sp.Expr":
        """The formula for `quantity` of `phase`, per training step of G*b sequences."""
        import sympy as sp

        from .symbols import SYMBOLS

        if quantity == "flops_bwd":
            # Backward of a matmul is two matmuls of the same size (dX and dW): 2x forward.
            return constants().passes.backward_matmul_factor * self.expression(phase, "flops_fwd")
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

    def _policy_recompute(self, phase: Phase) -> "sp.Expr":
        """Forward FLOPs re-run in the backward pass because the policy dropped their activations.

        Selective: the attention core (Korthikanti 2022 §5; hardware FLOPs 72BLsh^2(1 + s/(3h) + ...)).
        With FlashAttention the core is already recomputed by the kernel (counted as a term).
        Full: the whole layer's forward pass (Korthikanti 2022 §5, Chen et al. 2016).
        """
        import sympy as sp

        if phase.scope != "layer":
            return sp.Integer(0)
        f = self.feature_dict
        if self.recompute == "full" or (
            self.recompute == "selective" and phase.core and f["attention"] == "eager"
        ):
            return constants().passes.recompute_passes * self.expression(phase, "flops_fwd")
        return sp.Integer(0)


def state_terms(features: dict[str, Any]) -> list[Term]:
    """The per-parameter training-state terms (weights, gradients, optimizer) that apply."""
    return [t for p in load_catalogue() if p.scope == "state" for t in p.terms if t.q == "state" and t.applies(features)]


def state_expression(features: dict[str, Any], component: str | None = None) -> "sp.Expr":
    """Training-state bytes for P parameters, optionally of one component."""
    import sympy as sp

    return sp.Add(*[t.sym for t in state_terms(features) if component in (None, t.component)])
