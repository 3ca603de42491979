"""Data for `btacalc formulas`: the catalogue's terms, or a model's summed formulas, as plain data."""

from __future__ import annotations

from typing import Any, Optional

import sympy as sp
from ..catalogue.selection import Selection
from ..catalogue.terms import load_catalogue
from ..config.execution import RunOptions, op_recompute_refusal, recompute_refusal
from ..config.presets import resolve_model
from ..errors import BtacalcError
from ..vocabulary import DESCRIPTIONS, OP_POLICY, QUANTITIES, QUANTITY_UNITS, TORCH_LOSSES


def _show(expr: sp.Expr, latex: bool) -> str:
    e = sp.factor(expr) if expr.free_symbols else expr
    return sp.latex(e) if latex else str(e)


def formula_listing(phase: Optional[str], quantity: Optional[str], model: Optional[str], run: RunOptions,
                    latex: bool = False, sequence_parallel: bool = False) -> dict[str, Any]:
    """The catalogue's terms (no `model`), or the summed formulas of `model` under `run`, as plain data:
    per device, in the tensor-parallel size t (t = 1: the whole layer)."""
    phases = list(load_catalogue())
    names = [p.name for p in phases]
    if phase is not None and phase not in names:
        raise BtacalcError(f"{{phase}}: unknown phase {phase!r} (phases: {', '.join(names)})")
    all_q = sorted(set(QUANTITIES) | {"state"})
    if quantity is not None and quantity not in all_q:
        raise BtacalcError(f"{{quantity}}: unknown quantity {quantity!r} (quantities: {', '.join(all_q)})")
    listing: dict[str, Any] = {"notation": DESCRIPTIONS, "selection": None, "phases": []}
    if model is None:
        for p in phases:
            if phase and p.name != phase:
                continue
            terms = [
                {"quantity": t.q, "expr": _show(t.sym, latex), "tensor": t.tensor, "source": t.source,
                 "when": t.when, "tp": p.tp_class(t), **({"recompute": t.recompute} if t.q == "stored" else {})}
                for t in p.terms if quantity in (None, t.q)
            ]
            listing["phases"].append({"name": p.name, "group": p.group, "scope": p.scope, "batch": p.batch,
                                      "summary": p.summary, "when": p.when, "terms": terms})
        return listing

    spec = resolve_model(model)
    refusal = recompute_refusal(run.recompute, spec, run.recipe) or op_recompute_refusal(run, spec)
    if refusal is not None:  # the listing sums what `plan` would plan: not a policy it refuses for this model
        raise BtacalcError(refusal)
    if sequence_parallel and (run.recompute == OP_POLICY or run.loss in TORCH_LOSSES):  # review34: plan's 1-D rule
        raise BtacalcError("{sequence_parallel} splits a tensor-parallel layer; torchtitan's op policy and PyTorch's "
                           "cross-entropy are planned under PyTorch's 1-D FSDP, without tensor parallelism")
    feats = {**spec.features(), **run.features(), "sequence_parallel": sequence_parallel,
             "master": "remainders" if run.param_remainders else "fp32",  # (Problem.features, without a layout:
             "dtensor_tp": False}  # Megatron's; the listing's sequence_parallel is Megatron's, above)
    sel = Selection.make(feats, run.recompute)
    listing["selection"] = {"model": spec.name, "recompute": run.recompute, **feats}
    applies = [p.name for p in sel.phases()]
    if phase is not None and phase not in applies:
        raise BtacalcError(f"{{phase}} {phase} does not apply to {spec.name} (its phases: {', '.join(applies)})")
    for p in sel.phases():
        if phase and p.name != phase:
            continue
        quantities = ["state"] if p.scope == "state" else list(QUANTITIES)
        formulas = []
        for q in quantities:
            if quantity not in (None, q):
                continue
            expr = sel.expression(p, q) if q != "state" else sp.Add(*[t.sym for t in sel.terms(p, "state")])
            if expr == 0 and quantity is None:
                continue
            terms = [{"expr": _show(sel.term_expression(t), latex), "tensor": t.tensor, "source": t.source}
                     for t in sel.terms(p, q)]
            formulas.append({"quantity": q, "unit": QUANTITY_UNITS[q], "formula": _show(expr, latex), "terms": terms})
        listing["phases"].append({"name": p.name, "group": p.group, "scope": p.scope, "batch": p.batch,
                                  "summary": p.summary, "formulas": formulas})
    return listing
