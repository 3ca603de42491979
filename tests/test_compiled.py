"""The generated numeric code: equal to sympy's lambdify of the same formulas, cached on disk under
XDG_CACHE_HOME, written atomically, compiled in memory when the cache cannot be written, and loaded
without sympy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from btacalc.catalogue import cache, compiled
from btacalc.catalogue.compiled import CompiledSelection, generate_source, load_module
from btacalc.catalogue.selection import Selection, state_expression
from btacalc.catalogue.symbols import SYMBOLS
from btacalc.catalogue.terms import check_expression
from btacalc.errors import DataError
from btacalc.vocabulary import ARG_ORDER, FEATURES, RECIPROCAL_SYMBOLS, RECOMPUTE_POLICIES

ROOT = Path(__file__).resolve().parents[1]

selections = st.builds(
    lambda f, r: Selection.make(f, r),
    st.fixed_dictionaries({name: st.sampled_from(values) for name, values in FEATURES.items()}),
    st.sampled_from(RECOMPUTE_POLICIES),
)
symbol_values = st.fixed_dictionaries({name: st.integers(1, 5000) for name in ARG_ORDER if name != "P"})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(selection=selections, values=symbol_values)
def test_generated_code_equals_lambdify(selection, values):
    """Every (phase, quantity) of a random selection at random integer symbol values: the generated
    coefficients give exactly what sympy's lambdify of the summed expression gives."""
    code = CompiledSelection(selection)
    pv = code.evaluate({**values, "P": 0})
    args = [SYMBOLS[n] for n in ARG_ORDER]
    # the reference divides by t and t_e as Fractions, exactly
    exact = {n: Fraction(values[n]) if n in RECIPROCAL_SYMBOLS else values.get(n, 0) for n in ARG_ORDER}
    reference = sp.lambdify(args, code.expressions, modules="math")(*(exact[n] for n in ARG_ORDER))
    i = 0
    for phase in code.phases:
        for q in code.quantities:
            got, want = pv.value(phase.name, q), reference[i]
            i += 1
            if q == "arithmetic_intensity":
                assert got == pytest.approx(want, rel=1e-12), (phase.name, q)
            else:  # exact: an int, or a Fraction where a formula divides (by t, t_e, or a causal half);
                # lambdify's own reference rounds where it divides by a literal (x/2 -> float)
                assert isinstance(got, (int, Fraction)), (phase.name, q, got, want)
                assert got == (want if not isinstance(want, float) else pytest.approx(want, rel=1e-12)), (phase.name, q)


def test_state_rates_equal_the_state_formulas():
    sel = Selection.make({name: values[0] for name, values in FEATURES.items()}, "full")
    code = CompiledSelection(sel)
    for component, rate in code.state_rates.items():
        expr = state_expression(sel.feature_dict, component).subs(SYMBOLS["P"], 1)
        assert rate(2) == expr.subs(SYMBOLS["beta"], 2)


def test_arrays_evaluate_elementwise():
    sel = Selection.make({name: values[-1] for name, values in FEATURES.items()}, "selective")
    code = CompiledSelection(sel)
    base = {n: 7 for n in ARG_ORDER}
    seqs, tiles, batch = np.array([128, 1024, 4096]), np.array([1, 3, 8]), np.array([2, 1, 5])
    vec = code.evaluate({**base, "s": seqs, "G": tiles, "b": batch})
    for j in range(3):
        one = code.evaluate({**base, "s": int(seqs[j]), "G": int(tiles[j]), "b": int(batch[j])})
        for p in code.phases:
            for q in ("stored", "transient", "flops_fwd", "bytes_moved", "recompute_bytes"):
                assert np.broadcast_to(vec.value(p.name, q), 3)[j] == one.value(p.name, q)


def test_formulas_must_be_at_most_linear_in_tiles_and_tile_batch():
    G, b, s = SYMBOLS["G"], SYMBOLS["b"], SYMBOLS["s"]
    assert compiled._coefficients_of(3 + 2 * b * s + G * b * s**2, "ok") == [3, 2 * s, 0, s**2]
    with pytest.raises(DataError, match="at most linear"):
        compiled._coefficients_of(G * b**2 * s, "phase x, quantity stored")


@pytest.mark.parametrize("expr, message", [("2*x*h", "unknown symbols"), ("s*(h", "cannot parse"),
                                           ("sqrt(h)", "cannot parse"), ("h.real", "cannot parse"), ("1.5*h", "cannot parse")])
def test_catalogue_expressions_are_checked_without_sympy(expr, message):
    with pytest.raises(ValueError, match=message):
        check_expression(expr)


def _selection():
    return Selection.make({name: values[0] for name, values in FEATURES.items()}, "full")


def test_cache_follows_xdg_cache_home_and_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    sel = _selection()
    load_module(sel)
    files = list((tmp_path / "btacalc" / "compiled").rglob("*.code"))
    assert len(files) == 1 and files[0].parent.name == cache.fingerprint()
    assert not [p for p in files[0].parent.iterdir() if p.name.startswith(".")]  # no temporary file left
    monkeypatch.setattr(compiled, "generate_source", lambda s: pytest.fail("regenerated instead of read"))
    assert load_module(sel).SELECTION == compiled._selection_key(sel)  # read from the cache, not regenerated


def test_damaged_or_foreign_cache_file_is_regenerated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    sel = _selection()
    load_module(sel)
    path = next((tmp_path / "btacalc").rglob("*.code"))
    good = path.read_bytes()
    path.write_bytes(b"this is not code(")
    assert load_module(sel).SELECTION == compiled._selection_key(sel) and path.read_bytes() == good
    # another program's code with the right header but no valid tag is never run
    import marshal

    marker = tmp_path / "ran"
    evil = marshal.dumps(compile(f"open({str(marker)!r}, 'w').close()\nSELECTION = {compiled._selection_key(sel)!r}",
                                 "x", "exec"))
    path.write_bytes(good[:len(cache._MAGIC) + 32] + evil)
    assert load_module(sel).SELECTION == compiled._selection_key(sel) and not marker.exists()
    assert path.read_bytes() == good


def test_unwritable_cache_falls_back_to_memory(tmp_path, monkeypatch):
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # btacalc/compiled cannot be created under a file
    module = load_module(_selection())
    assert module.coefficients and blocked.read_text() == ""


def test_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / ".cache" / "btacalc" / "compiled" / cache.fingerprint()


def test_fingerprint_changes_with_the_catalogue(tmp_path, monkeypatch):
    import shutil

    folder = tmp_path / "formulas"
    shutil.copytree(ROOT / "formulas", folder)
    monkeypatch.setattr(cache, "data_dir", lambda name: folder)
    cache.fingerprint.cache_clear()
    try:
        before = cache.fingerprint()
        (folder / "mlp.toml").write_text((folder / "mlp.toml").read_text() + "\n# edited\n")
        cache.fingerprint.cache_clear()
        assert cache.fingerprint() != before
    finally:
        cache.fingerprint.cache_clear()


def test_plan_json_does_not_import_sympy(tmp_path):
    """`btacalc plan --json` from a warm cache: sympy never imported (it is only needed to generate)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    probe = ("import sys, json\nfrom btacalc.cli import main\n"
             "try:\n    main(['plan', '--json'])\nexcept SystemExit:\n    pass\n"
             "print(json.dumps('sympy' in sys.modules), file=sys.stderr)\n")
    first = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    second = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert json.loads(first.stderr.strip().splitlines()[-1]) is True  # cold cache: generated with sympy
    assert json.loads(second.stderr.strip().splitlines()[-1]) is False, second.stderr
    assert json.loads(second.stdout)["plan"]["fits"]
