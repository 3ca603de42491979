"""freshuser18: a new user's pass over the README on a clean install (no extras) and the numbers checked by hand.

docs/story.md "freshuser18" says what each test pins and what happened before.
"""

from __future__ import annotations

import sys

import pytest


def _no_matplotlib(monkeypatch) -> None:
    """matplotlib not importable, as on a `pip install '.[test]'` without the plot extra (a sys.modules entry
    of None makes `import` raise ImportError)."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)


def _refuse_work(monkeypatch, target: str) -> None:
    def work(*args, **kwargs):
        raise AssertionError(f"{target} ran before --plot's missing extra was refused")

    monkeypatch.setattr(target, work)


# The README's own --plot commands (crossover: 4 s of work, validate --cross-validate: 21 s, then the refusal)
@pytest.mark.parametrize("args,work", [
    (("crossover", "--hidden", "2048", "--plot", "crossover.png"), "btacalc.planning.crossover.crossover"),
    (("validate", "--cross-validate", "--plot", "crossval.png"), "btacalc.planning.crossval.validate_cross"),
    (("validate", "--plot", "accuracy.png"), "btacalc.planning.measured.measured_report"),
    (("compare", "--hw", "wse3,b200", "--plot", "compare.png"), "btacalc.cli.cluster._compared"),
])
def test_a_missing_plot_extra_is_refused_before_any_work(cli, tmp_path, monkeypatch, args, work):
    monkeypatch.chdir(tmp_path)
    _no_matplotlib(monkeypatch)
    _refuse_work(monkeypatch, work)
    code, out, err = cli(*args)
    assert code == 2, err
    assert err == "btacalc: error: --plot needs matplotlib: pip install 'btacalc[plot]'\n"
    assert out == "" and list(tmp_path.iterdir()) == []
