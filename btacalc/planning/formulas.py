"""Data for `btacalc formulas`: the catalogue's terms, or a model's summed formulas, as plain data."""

from __future__ import annotations

from typing import Any, Optional

import sympy as sp
from rich.console import Group
from rich.markup import escape
from rich.table import Table

from .catalogue import QUANTITIES, QUANTITY_UNITS, Selection, load_catalogue
from .errors import BtacalcError
from .symbols import DESCRIPTIONS


def _show(expr: sp.Expr, latex: bool) -> str:
    e = sp.factor(expr) if expr.free_symbols else expr
    return sp.latex(e) if latex else str(e)


def formula_listing(phase: Optional[str], quantity: Optional[str], model: Optional[str], recompute: str,
                    attention: str, causal: bool, loss: str, accounting: str, latex: bool) -> dict[str, Any]:
    phases = list(load_catalogue())
    names = [p.name for p in phases]
    if phase is not None and phase not in names:
        raise BtacalcError(f"unknown phase {phase!r} (phases: {', '.join(names)})")
    all_q = sorted(set(QUANTITIES) | {"state"})
    if quantity is not None and quantity not in all_q:
        raise BtacalcError(f"unknown quantity {quantity!r} (quantities: {', '.join(all_q)})")
    listing: dict[str, Any] = {"notation": DESCRIPTIONS, "selection": None, "phases": []}
    if model is None:
        for p in phases:
            if phase and p.name != phase:
                continue
            terms = [
                {"quantity": t.q, "expr": _show(t.sym, latex), "tensor": t.tensor, "source": t.source,
                 "when": t.when, **({"recompute": t.recompute} if t.q == "stored" else {})}
                for t in p.terms if quantity in (None, t.q)
            ]
            listing["phases"].append({"name": p.name, "group": p.group, "scope": p.scope, "batch": p.batch,
                                      "summary": p.summary, "when": p.when, "terms": terms})
        return listing

    from .models import resolve_model

    spec = resolve_model(model)
    feats = {**spec.features(), "attention": attention, "causal": causal, "loss": loss, "accounting": accounting,
             "optimizer": "adam"}
    sel = Selection.make(feats, recompute)
    listing["selection"] = {"model": spec.name, "recompute": recompute, **{k: v for k, v in feats.items()}}
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
            terms = [{"expr": _show(t.sym, latex), "tensor": t.tensor, "source": t.source} for t in sel.terms(p, q)]
            formulas.append({"quantity": q, "unit": QUANTITY_UNITS[q], "formula": _show(expr, latex), "terms": terms})
        listing["phases"].append({"name": p.name, "group": p.group, "scope": p.scope, "batch": p.batch,
                                  "summary": p.summary, "formulas": formulas})
    return listing


def formula_renderable(listing: dict[str, Any]) -> Group:
    parts: list[Any] = []
    sel = listing["selection"]
    for p in listing["phases"]:
        title = f"{p['name']} [{p['group']}, {p['scope']}, batch {'b (per tile, G tiles)' if p['batch'] == 'tile' else 'G·b'}] — {p['summary']}"
        t = Table(title=escape(title), title_justify="left", show_lines=True, expand=False)
        if sel is None:
            for c in ("q", "expression", "tensor", "source", "when"):
                t.add_column(c, overflow="fold")
            for term in p["terms"]:
                conds = term["when"] if isinstance(term["when"], list) else [term["when"]]
                when = " or ".join("(" * (len(conds) > 1) + ", ".join(f"{k}={v}" for k, v in c.items()) + ")" * (len(conds) > 1)
                                   for c in conds)
                if "recompute" in term and term["recompute"] != "layer":
                    when = (when + "; " if when else "") + f"recompute class {term['recompute']}"
                t.add_row(term["quantity"], term["expr"], escape(term["tensor"]), f"[dim]{escape(term['source'])}[/dim]", when)
        else:
            for c in ("quantity", "formula", "terms (tensor — source)"):
                t.add_column(c, overflow="fold")
            for f in p["formulas"]:
                terms = "\n".join(f"{x['expr']}: {escape(x['tensor'])} [dim]— {escape(x['source'])}[/dim]" for x in f["terms"])
                t.add_row(f"{f['quantity']} [{f['unit']}]", f["formula"], terms or "[dim](derived)[/dim]")
        parts.append(t)
    if sel is not None:
        parts.insert(0, "Selection: " + ", ".join(f"{k}={v}" for k, v in sel.items()) +
                     "\nPer training step of G·b sequences; backward = 2 × forward matmul FLOPs (Korthikanti 2022 App. A).")
    return Group(*parts)
