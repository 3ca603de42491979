"""freshuser19: btacalc's launches pasted into Megatron-LM / Megatron-Bridge and its numbers checked by hand.

docs/story.md "freshuser19" says what each test pins and what happened before.
"""

from __future__ import annotations

import pytest

from btacalc.config.presets import resolve_model
from btacalc.paths import preset_names
from tests.support import emitted

BIASED_MOE = [name for name in preset_names() if resolve_model(name).biased_moe()]
UNBIASED_MOE = [name for name in preset_names() if resolve_model(name).is_moe and not resolve_model(name).biased_moe()]


def test_the_built_in_presets_hold_both_kinds_of_moe_model():
    assert "gpt-oss-120b" in BIASED_MOE and "qwen3-30b-a3b" in UNBIASED_MOE


# A biased MoE model (GPT-OSS: q/k/v/o, router and expert biases) at an ETP the user gave: `plan` planned it and
# `--emit megatron` printed a launch with a "MEGATRON WOULD REFUSE THIS" line, which `--from-megatron` then refused
# (megatron_rules moe-bias-etp, transformer_config.py L2612-2615). The default and the search keep ETP 1.
@pytest.mark.parametrize("name", BIASED_MOE)
@pytest.mark.parametrize("emit", [(), ("--emit", "megatron"), ("--emit", "bridge")])
def test_a_biased_moe_model_at_etp_above_1_is_refused_before_any_output(cli, name, emit):
    code, out, err = cli("plan", "--model", name, "--hw", "h100", "--devices", "16", "--tp", "2", "--etp", "2",
                         "--ep", "8", *emit)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and "--etp 2" in err and "ETP 1" in err and "give --etp 1" in err, err


@pytest.mark.parametrize("name", BIASED_MOE)
def test_the_same_plan_at_etp_1_emits_a_launch_megatron_takes_and_reads_back(cli, tmp_path, name):
    launch = emitted(cli, f"--model {name} --hw h100 --devices 16 --tp 2 --etp 1 --ep 8")
    assert "--expert-tensor-parallel-size 1" in launch and "MEGATRON WOULD REFUSE" not in launch
    path = tmp_path / "launch.sh"
    path.write_text(launch)
    code, _, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code in (0, 1), err


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "mixtral-8x7b"])
def test_an_unbiased_moe_model_keeps_the_etp_given(cli, name):
    assert name in UNBIASED_MOE
    code, out, err = cli("plan", "--model", name, "--hw", "h100", "--devices", "16", "--tp", "2", "--etp", "2",
                         "--ep", "8", "--emit", "megatron")
    assert code in (0, 1), err
    assert "--expert-tensor-parallel-size 2" in out and "MEGATRON WOULD REFUSE" not in out
