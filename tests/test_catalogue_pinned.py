"""No catalogue term is unpinned: doubling any term of formulas/*.toml changes a golden value.

A term changes a pinned value exactly when it applies in some golden case (model x selection) and
evaluates to a non-zero number at that case's shape: values are sums of non-negative terms, so
doubling such a term moves the sum. The first test checks that condition for every term; the second
doubles terms for real and watches the goldens move, so the condition is not taken on trust.
"""

from __future__ import annotations

import functools
import json
import random
from typing import Any

import pytest
import sympy as sp

from btacalc.catalogue.symbols import SYMBOLS
from btacalc.catalogue.terms import Term, load_catalogue
from btacalc.vocabulary import BASE_QUANTITIES
from test_goldens import (COMMANDS, GOLDEN_DIR, MODELS, SHAPES, _golden_name, golden_model, golden_problem,
                          golden_selections, phase_values)

# Per-phase quantities written as terms whose sums the "values" goldens pin (directly, or through
# flops_bwd / recompute_bytes / arithmetic_intensity derived from them): every base quantity but the
# per-parameter training state, which the plan goldens pin.
PINNED_BY_VALUES = tuple(q for q in BASE_QUANTITIES if q != "state")


def _nonzero(term: Term, values: dict[str, Any]) -> bool:
    """The term at the case's values. Every notation symbol is declared positive, but some are 0 in a case (x_s, x_g,
    n_g: a dispatcher's switches), so sympy's positivity proves nothing: the term is evaluated (the lead, thirty-fourth
    session: a chunk-sort term times x_s = 0 was counted as pinned by every wafer case and moved no golden)."""
    return sp.sympify(term.sym).subs({SYMBOLS[k]: v for k, v in values.items()}) != 0


def _golden_has(case: str, *keys: str) -> bool:
    data: Any = json.loads(_golden_name(case).read_text(encoding="utf-8"))["output"]
    for k in keys:
        if not isinstance(data, dict) or k not in data:
            return False
        data = data[k]
    return bool(data)


def _golden_input(case: str, key: str) -> Any:
    """A plan golden's resolved input `key` (None when the case is not a plan)."""
    data: Any = json.loads(_golden_name(case).read_text(encoding="utf-8"))["output"]
    return data.get("inputs", {}).get(key) if isinstance(data, dict) else None


@functools.lru_cache(maxsize=1)
def pinned_terms() -> frozenset[int]:
    """ids of the terms that some golden pins (see module docstring)."""
    pinned: set[int] = set()
    state_pinned = any(_golden_has(c, "memory_bytes", "optimizer_state") for c in COMMANDS)
    bf16_moments = any(_golden_has(c, "memory_bytes", "optimizer_state") and _golden_input(c, "moment_bytes") == 2
                       for c in COMMANDS)
    remainders = any(_golden_has(c, "memory_bytes", "optimizer_state") and _golden_input(c, "master_weights") == "remainders"
                     for c in COMMANDS)
    for name in MODELS:
        model = golden_model(name)
        for sel in golden_selections(name):
            for s, b, g in SHAPES:
                problem = golden_problem(model, s, sel)
                for kind, compiled in problem.kinds:
                    # the symbols as the golden evaluates them (Problem.shape_values: x_s, x_g, n_g, t, ... of
                    # the golden's layout), P = 1 so that per-parameter terms count
                    values = {**model.symbol_values(), **dict(kind.symbols), **problem.shape_values(g, b, s), "P": 1}
                    selection = compiled.selection
                    f = selection.feature_dict
                    for phase in selection.phases():
                        # state terms: as the plan goldens run them, on wafers (16-bit gradients) and
                        # GPUs (fp32 main gradients, Megatron's default; bf16 Adam moments where a plan
                        # golden asks for them)
                        applicable = [t for t in phase.terms if t.applies(f) or (
                            t.q == "state" and (t.applies({**f, "main_grads": "fp32"})
                                                or (bf16_moments and t.applies({**f, "moments": "bf16"}))
                                                or (remainders and t.applies({**f, "master": "remainders"}))))]
                        chosen = {id(t) for q in PINNED_BY_VALUES for t in selection.terms(phase, q)}
                        for t in applicable:
                            # a dropped stored tensor counts in recompute_bytes; an op cache's is no tensor
                            # outside the op policy (catalogue/selection.py)
                            by_values = id(t) in chosen or (t.q == "stored" and phase.scope == "layer"
                                                             and t.recompute not in ("checkpoint", "op_cache",
                                                                                     "op_cache_saved"))
                            by_plans = t.q == "state" and state_pinned
                            # a term already pinned needs no second case (the set is the same)
                            if (by_values or by_plans) and id(t) not in pinned and _nonzero(t, values):
                                pinned.add(id(t))
    return frozenset(pinned)


def test_every_catalogue_term_is_pinned():
    pinned = pinned_terms()
    unpinned = [f"{p.name}/{t.q}: {t.tensor} (when {t.when})" for p in load_catalogue() for t in p.terms
                if id(t) not in pinned]
    assert not unpinned, f"{len(unpinned)} catalogue terms change no golden value when doubled: " + "; ".join(unpinned)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_doubling_a_term_moves_a_golden(seed, monkeypatch):
    """Double randomly chosen pinned per-phase terms for real and check the values goldens move."""
    from btacalc.catalogue import compiled as compiled_mod
    from btacalc.model import params as params_mod
    from btacalc.model import problem as problem_mod

    pinned = pinned_terms()
    terms = [t for p in load_catalogue() for t in p.terms if id(t) in pinned and t.q in PINNED_BY_VALUES]
    term = random.Random(seed).choice(terms)

    def clear() -> None:
        compiled_mod.compile_selection.cache_clear()
        problem_mod.kind_selections.cache_clear()
        params_mod._param_counts.cache_clear()

    monkeypatch.setattr(compiled_mod, "read_entry", lambda name: None)  # generate from the doubled term, not the disk cache
    monkeypatch.setattr(compiled_mod, "write_entry", lambda name, payload: None)
    original = term.sym
    try:
        term._sym = 2 * original
        clear()
        moved = False
        for name in MODELS:
            golden = json.loads(_golden_name(f"values:{name}").read_text(encoding="utf-8"))
            if json.loads(json.dumps(phase_values(name))) != golden:
                moved = True
                break
        assert moved, f"doubling {term.tensor!r} moved no golden"
    finally:
        term._sym = original
        clear()
    assert GOLDEN_DIR.is_dir()
