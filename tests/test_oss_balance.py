"""GPT-OSS trains without a load-balancing loss in Megatron-Bridge (Megatron-Bridge @ 067f987d
src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py L71: moe_router_load_balancing_type = "none"); the config's
router_aux_loss_coef 0.9 is transformers' class default, which btacalc does not read (config/hf.py _AUX_LOSS_KEYS).
The emitted launch kept Megatron-LM's default aux_loss at coefficient 0 and told the user to "give your model's
coefficient" (freshuser24). The presets and a GPT-OSS config.json now hold `load_balancing = "none"`, which the
launch writes as --moe-router-load-balancing-type none and the Bridge file as its key, and no such advice."""

from __future__ import annotations

from pathlib import Path

import pytest

from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset


@pytest.mark.parametrize("preset", ["gpt-oss-120b", "gpt-oss-20b"])
def test_gpt_oss_launches_train_no_balancing_loss_and_read_back_so(cli, tmp_path: Path, preset):
    assert load_preset(preset).load_balancing == "none"
    launch, overrides = tmp_path / "run.sh", tmp_path / "run.yaml"
    common = ("plan", "-m", preset, "--hw", "h100", "-n", "64", "--ep", "8", "--global-batch", "512")
    for emit, path in (("megatron", launch), ("bridge", overrides)):
        code, _, err = cli(*common, "--emit", emit, "-o", str(path))
        assert code in (0, 1), err
    text = launch.read_text()
    assert "--moe-router-load-balancing-type none" in text and "give your model's coefficient" not in text
    assert "model.moe_router_load_balancing_type=none" in overrides.read_text()
    assert import_megatron(text, str(launch)).model.load_balancing == "none"
    assert import_bridge(overrides.read_text(), str(overrides), base=load_preset(preset)).model.load_balancing == "none"


def test_a_gpt_oss_config_json_reads_as_the_bridge_trains_it():
    from btacalc.config.hf import load_hf_config

    path = Path(__file__).parent / "data" / "gpt-oss-120b.config.json"
    assert load_hf_config(path).load_balancing == "none"


def test_another_moe_model_keeps_the_advice(cli, tmp_path: Path):
    launch = tmp_path / "run.sh"
    code, _, err = cli("plan", "-m", "mixtral-8x7b", "--hw", "h100", "-n", "64", "--ep", "8", "--emit", "megatron", "-o",
                       str(launch))
    assert code in (0, 1), err
    assert load_preset("mixtral-8x7b").aux_loss_coeff is None  # its stored config gives none
    text = launch.read_text()
    assert "--moe-router-load-balancing-type" not in text and "give your model's coefficient" in text
