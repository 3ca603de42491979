"""Data for `btacalc formulas`: the catalogue's terms, or a model's summed formulas, as plain data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import sympy as sp
from ..catalogue.selection import Selection
from ..catalogue.terms import load_catalogue
from ..config.execution import RunOptions
from ..config.resolution import op_recompute_refusal, recompute_refusal, torchtitan_recompute_refusal
from ..config.presets import resolve_model
from ..errors import BtacalcError
from ..vocabulary import DESCRIPTIONS, OP_POLICY, QUANTITIES, QUANTITY_UNITS, TORCH_LOSSES


def _show(expr: sp.Expr, latex: bool) -> str:
    e = sp.factor(expr) if expr.free_symbols else expr
    return sp.latex(e) if latex else str(e)


@dataclass(frozen=True)
class TpPlan:
    """How a model's listing splits its tensor-parallel layers: Megatron's sequence parallelism, and under it
    DTensor's TP plan (PyTorch FSDP2 beside TP, torchtitan: the catalogue's feature `dtensor_tp`, Layout.dtensor_tp),
    whose column-parallel linears save the gathered input (TP class `column_input`) and whose op policy keeps the
    reduce-scatter outputs (`op_cache`)."""

    sequence_parallel: bool = False
    dtensor: bool = False


def _check_tp_plan(tp_plan: TpPlan, run: RunOptions, moe: bool) -> None:
    """The listing's TP plan as plan lays it out: review34's 1-D rule (torchtitan's op policy and PyTorch's
    cross-entropy without Megatron's TP), and DTensor's TP as plan takes it (sequence-parallel, dense models, no
    PyTorch cross-entropy: Layout._validate_fsdp_impl, `_validate_torch_tp`, `check_torch_loss`)."""
    if tp_plan.dtensor and not tp_plan.sequence_parallel:
        raise BtacalcError("{dtensor_tp} is DTensor's sequence-parallel TP plan (torchtitan's 2-D FSDP2 x TP): it "
                           "needs {sequence_parallel}")
    refusal = torchtitan_recompute_refusal(run.recompute) if tp_plan.dtensor else None  # review26 D2: as plan
    if refusal is not None:
        raise BtacalcError(refusal)
    if tp_plan.dtensor and moe:
        raise BtacalcError("{dtensor_tp}: btacalc plans DTensor's TP for dense models, as plan lays out PyTorch "
                           "FSDP2 beside TP (torchtitan's 2-D Llama runs)")
    if tp_plan.sequence_parallel and run.loss in TORCH_LOSSES:
        raise BtacalcError("{sequence_parallel} splits a tensor-parallel layer; PyTorch's cross-entropy is planned "
                           "without tensor parallelism (beside TP, the loss-parallel cross-entropy)")
    if tp_plan.sequence_parallel and not tp_plan.dtensor and run.recompute == OP_POLICY:
        raise BtacalcError("{sequence_parallel} splits a tensor-parallel layer; torchtitan's op policy is planned "
                           "under PyTorch's FSDP: 1-D without tensor parallelism, or beside TP with {dtensor_tp}")


def formula_listing(phase: Optional[str], quantity: Optional[str], model: Optional[str], run: RunOptions,
                    latex: bool = False, tp_plan: TpPlan = TpPlan()) -> dict[str, Any]:
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
    _check_tp_plan(tp_plan, run, spec.is_moe)
    feats = {**spec.features(), **run.features(), "sequence_parallel": tp_plan.sequence_parallel,
             "master": "remainders" if run.param_remainders else "fp32",  # (Problem.features, without a layout)
             "dtensor_tp": tp_plan.dtensor}
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
