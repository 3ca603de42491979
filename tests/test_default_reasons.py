"""Every default a plan takes is recorded with its reason and marked in the header (freshuser22; session 30).

The FLOP convention (full s² or causal), the activation accounting, the optimizer and Adam's moment bytes were taken
as plain values: a plan's `inputs.defaults` had no entry for them and the header no "(default)" mark, so a user could
not tell a choice from a default. The parallelism line marked neither a default EP (gcd(devices, E), which can span
every NVLink domain) nor a default ZeRO stage nor the default step batch. Each reason cites where the default comes
from; given explicitly, the same value is no default."""

from __future__ import annotations

import json

import pytest

PLAN = ("plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "64")


def _inputs(cli, *extra: str) -> dict:
    code, out, err = cli(*PLAN, *extra, "--json")
    assert code in (0, 1), err
    return json.loads(out)["inputs"]


def test_the_four_defaults_carry_their_reasons(cli):
    defaults = _inputs(cli)["defaults"]
    assert defaults["causal"].startswith("full s²") and "Korthikanti" in defaults["causal"]
    assert "training.py L1163-1169" in defaults["causal"]  # Megatron-LM's own count halves it
    assert defaults["accounting"].startswith("ideal") and "§4.1" in defaults["accounting"]
    assert defaults["optimizer"].startswith("adam") and "arguments.py L2913" in defaults["optimizer"]
    assert defaults["moment_bytes"].startswith("4") and "optimizer_config.py L203, L206" in defaults["moment_bytes"]


@pytest.mark.parametrize("given, key", [(("--full-scores",), "causal"), (("--causal",), "causal"),
                                        (("--accounting", "ideal"), "accounting"),
                                        (("--optimizer", "adam"), "optimizer"),
                                        (("--optimizer-moments", "fp32"), "moment_bytes")])
def test_a_value_given_is_no_default(cli, given, key):
    inputs = _inputs(cli, *given)
    assert key not in inputs["defaults"]
    assert inputs["causal"] is (given == ("--causal",))


def test_the_header_marks_them(cli):
    code, out, err = cli(*PLAN)
    text = " ".join(out.split())
    for words in ("full s² attention FLOPs (default)", "ideal accounting (default)", "adam (default)",
                  "EP 64 (default)", "ZeRO-1 (default)", "micro-batches (default)"):
        assert words in text, words
    code, out, err = cli(*PLAN, "--ep", "8", "--zero", "1", "--full-scores", "--global-batch", "256")
    text = " ".join(out.split())
    assert "EP 8," in text and "ZeRO-1;" in text and "full s² attention FLOPs," in text
    assert "micro-batches (default)" not in text
