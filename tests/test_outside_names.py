"""freshuser15: a user who types another tool's flag (Megatron-LM's `--tensor-model-parallel-size`, a launcher's
`--gpus`) is told btacalc's name for it, in one line and exit 2, instead of click's spelling guesses ("--gpus
(Possible options: --pp, --tp, --vp)"). The name each option's help gives for the outside flag is the one this
test derives from `plan --emit megatron`: the btacalc option given a value, the Megatron flag written with it."""

from __future__ import annotations

import re

import pytest

# (Megatron-LM flag, btacalc option, the value both carry in the layout below)
MEGATRON = [("--tensor-model-parallel-size", "--tp", "2"), ("--pipeline-model-parallel-size", "--pp", "2"),
            ("--num-virtual-stages-per-pipeline-rank", "--vp", "2"), ("--context-parallel-size", "--cp", "2"),
            ("--expert-model-parallel-size", "--ep", "4"), ("--expert-tensor-parallel-size", "--etp", "1"),
            ("--micro-batch-size", "--micro-batch", "1"), ("--global-batch-size", "--global-batch", "64"),
            ("--seq-length", "--seq", "4096")]


def test_each_named_option_is_the_flag_emit_megatron_writes(cli):
    """32 H100s as TP 2 x PP 2 x CP 2 x DP 4 (EP 4, ETP 1; Qwen3-30B-A3B's 48 layers over PP 2 x VP 2; micro-batch 1,
    global batch 64: M = 16, a multiple of PP): the launch carries every Megatron flag with its option's value."""
    args = [arg for _, ours, value in MEGATRON for arg in (ours, value)]
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "32", *args, "--emit", "megatron")
    assert code == 0, err
    for theirs, _, value in MEGATRON:
        assert re.search(rf"{re.escape(theirs)} {value}\b", out), theirs


@pytest.mark.parametrize("theirs, ours, value", MEGATRON, ids=[m[0] for m in MEGATRON])
def test_a_megatron_flag_is_answered_with_btacalcs_name(cli, theirs, ours, value):
    code, out, err = cli("plan", "--hw", "h100", theirs, value)
    assert (code, out) == (2, "")
    assert err == f"btacalc: error: No such option: {theirs}: btacalc's name for it is {ours}\n"


@pytest.mark.parametrize("command", [("plan", "--hw", "h100"), ("compare", "--hw", "h100"),
                                     ("whatif", "--hw", "wse2", "--target", "relative_to_dense=0.9",
                                      "--solve-for", "sram_bytes")])
@pytest.mark.parametrize("theirs", ["--gpus", "--num-gpus"])
def test_a_gpu_count_is_devices(cli, command, theirs):
    code, _, err = cli(*command, theirs, "8")
    assert code == 2 and err == f"btacalc: error: No such option: {theirs}: btacalc's name for it is --devices\n"


def test_an_unknown_name_keeps_clicks_message(cli):
    """A flag no help names as an outside tool's (a typo) keeps click's own suggestions."""
    code, _, err = cli("plan", "--hw", "h100", "--tpp", "2")
    assert code == 2 and err.startswith("btacalc: error: No such option: --tpp") and "btacalc's name" not in err
