"""Megatron's --make-vocab-size-divisible-by as `--vocab-multiple` (Layout.vocab_multiple; session 31).

Megatron-LM pads the vocabulary up to a multiple of m x TP, m the flag's value, default 128 (Megatron-LM @ d98e8a64
megatron/training/arguments.py L2441, megatron/training/vocab_utils.py L58-59: ceil(V / (m t)) x m t). btacalc
planned only the default and refused a launch whose multiple padded otherwise (hostile35), though Megatron-LM's own
MoE examples give other multiples: 1187 for Qwen3's 151,936 (= 1187 x 128) and 3232 for DeepSeek-V3's 129,280
(= 3232 x 40). The expected values below are that arithmetic."""

from __future__ import annotations

import json

import pytest

from btacalc.model.problem import padded_vocab

QWEN_TP2 = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--tp", "2", "--ep", "8", "--global-batch", "64")


@pytest.mark.parametrize("vocab, tp, multiple, expected", [
    (151936, 2, None, 152064),   # 151,936 / 256 = 593.5 -> 594 x 256
    (151936, 2, 1187, 151936),   # 1187 x 2 = 2,374 divides 151,936 (64 times)
    (129280, 4, None, 129536),   # 129,280 / 512 = 252.5 -> 253 x 512
    (129280, 4, 3232, 129280),   # 3232 x 4 = 12,928 divides 129,280 (10 times)
    (50257, 1, 1, 50257),        # a multiple of 1 keeps the vocabulary as given
])
def test_the_padded_vocabulary_is_megatrons_ceiling(vocab, tp, multiple, expected):
    assert padded_vocab(vocab, tp, multiple) == expected


def _plan(cli, *args: str) -> dict:
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    return json.loads(out)


def test_a_multiple_that_pads_less_holds_less_weight(cli):
    """Qwen3-30B-A3B (h = 2,048, untied embedding and output layer) at TP 2: the default pads 151,936 to 152,064, 1187
    keeps it; 128 fewer rows in each of the two tables, each split over TP 2, of bf16 weights."""
    default, given = _plan(cli, *QWEN_TP2), _plan(cli, *QWEN_TP2, "--vocab-multiple", "1187")
    assert default["memory_bytes"]["weights"] - given["memory_bytes"]["weights"] == 128 * 2048 * 2 // 2 * 2
    assert given["parallelism"]["vocab_multiple"] == 1187 and default["parallelism"]["vocab_multiple"] is None
    assert "vocab_multiple" in default["inputs"]["defaults"] and "vocab_multiple" not in given["inputs"]["defaults"]
    assert "L2441" in default["inputs"]["defaults"]["vocab_multiple"]


def test_the_launch_carries_the_multiple_and_reads_back_as_the_same_plan(cli, tmp_path):
    code, out, err = cli("plan", *QWEN_TP2, "--vocab-multiple", "1187", "--emit", "megatron")
    assert code in (0, 1), err
    assert "--make-vocab-size-divisible-by 1187" in out
    path = tmp_path / "launch.sh"
    path.write_text(out)
    back, planned = _plan(cli, "--hw", "h100", "--from-megatron", str(path)), _plan(cli, *QWEN_TP2, "--vocab-multiple",
                                                                                      "1187")
    assert back["memory_bytes"]["weights"] == planned["memory_bytes"]["weights"]
    assert back["throughput"]["step_time_s"] == pytest.approx(planned["throughput"]["step_time_s"], rel=1e-12)
    code, out, err = cli("plan", *QWEN_TP2, "--emit", "megatron")
    command = [line for line in out.splitlines() if not line.lstrip().startswith("#")]
    assert command and not any("--make-vocab-size-divisible-by" in line for line in command)  # the default: not written


def test_a_wafer_has_no_vocabulary_padding(cli):
    code, out, err = cli("plan", "--hw", "wse3", "--vocab-multiple", "64")
    assert code == 2 and "--vocab-multiple" in err and len(err.strip().splitlines()) == 1, err
    assert "vocab_multiple" not in _plan(cli, "--hw", "wse3")["inputs"]["defaults"]
