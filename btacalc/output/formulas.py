"""Rich rendering of `btacalc formulas` listings."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table

from .fit import fit_all


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
                if term.get("tp", "replicated") != "replicated":
                    when = (when + "; " if when else "") + f"TP {term['tp']}"
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
    return Group(*fit_all(parts))  # on a terminal, a phase's table taller than it is cut (Fit)
