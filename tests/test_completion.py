"""Shell completion completes preset model names and hardware profile names (issue 25, item 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from btacalc.cli.completion import complete_hardware, complete_hardware_list, complete_model

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (ROOT / "btacalc" / "data" / "presets").glob("*.toml"))
PROFILES = sorted(p.stem for p in (ROOT / "hardware_profiles").glob("*.toml"))


def test_the_functions_complete_shipped_names():
    assert complete_model("") == PRESETS and complete_hardware("") == PROFILES
    assert complete_model("qwen3") == [n for n in PRESETS if n.startswith("qwen3")] != []
    assert complete_hardware("wse") == ["wse2", "wse3"]
    assert complete_hardware("no-such-device") == []
    # a list of profiles: the last name, each profile once, the head kept
    assert complete_hardware_list("wse3,wse") == ["wse3,wse2"]
    assert complete_hardware_list("b") == [n for n in PROFILES if n.startswith("b")]


@pytest.mark.parametrize("words, expected", [
    ("btacalc plan --hw wse", ["wse2", "wse3"]),
    ("btacalc plan --model qwen3", [n for n in PRESETS if n.startswith("qwen3")]),
    ("btacalc sweep --hw h", [n for n in PROFILES if n.startswith("h")]),
    ("btacalc whatif -m ", PRESETS),
    ("btacalc compare --hw wse3,wse", ["wse3,wse2"]),
    ("btacalc crossover --hw a100-", [n for n in PROFILES if n.startswith("a100-")]),
    ("btacalc hw show gb", [n for n in PROFILES if n.startswith("gb")]),
    ("btacalc models show ", PRESETS),
    ("btacalc formulas --model ", PRESETS),
])
def test_the_shell_gets_names(cli, monkeypatch, words, expected):
    """As bash asks: the completion variable set, the words typed so far, the index of the one typed."""
    parts = words.split(" ")
    monkeypatch.setenv("_BTACALC_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(len(parts) - 1))
    code, out, _ = cli()
    assert code == 0 and out.split() == expected
