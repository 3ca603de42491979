"""Which dimensions the rotary embedding turns together (ModelSpec.rotary_interleaved; thirty-second session).

Meta's Llama 4 turns adjacent dimensions (2i, 2i + 1) as complex pairs (transformers' modeling_llama4.py
apply_rotary_emb), and so does GPT-J (modeling_gptj.py rotate_every_two); Hugging Face's Llama 1-3 and
Megatron-Core's default turn the two halves (i, i + d/2). Megatron-LM's --rotary-interleaved selects the first
(TransformerConfig.rotary_interleaved, Megatron-LM @ d98e8a64 transformer_config.py L243) and NVIDIA's own Llama 4
launch sets it (examples/post_training/modelopt/conf/meta-llama/Llama-4-Scout-17B-16E-Instruct.sh L44).
btacalc's Llama 4 launches left it out: they trained the other convention, whose checkpoints do not load into
Llama 4's. The two differ by a fixed permutation of each head's dimensions, so the plan's numbers are the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from btacalc.config.bridge_run import import_bridge
from btacalc.config.hf import load_hf_config
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("config, interleaved", [("llama4-scout.config.json", True),
                                                 ("llama4-maverick.config.json", True),
                                                 ("gpt-j-6b.config.json", True)])
def test_a_config_json_says_which_pairs_its_model_rotates(config, interleaved):
    assert load_hf_config(DATA / config).rotary_interleaved is interleaved


@pytest.mark.parametrize("preset, interleaved", [("llama4-scout", True), ("llama4-maverick", True),
                                                 ("gpt-j-6b", True), ("llama-3-8b", False), ("qwen3-30b-a3b", False),
                                                 ("mixtral-8x7b", False)])
def test_the_presets_rotate_as_their_models(preset, interleaved):
    assert load_preset(preset).rotary_interleaved is interleaved


@pytest.mark.parametrize("preset, flag", [("llama4-scout", True), ("llama-3-8b", False)])
def test_the_megatron_launch_sets_rotary_interleaved_where_the_model_does_and_reads_it_back(cli, tmp_path, preset,
                                                                                          flag):
    launch = tmp_path / "run.sh"
    common = ("--hw", "h100", "--devices", "64", "--global-batch", "256")
    layout = ("--ep", "8") if preset.startswith("llama4") else ()
    code, _, err = cli("plan", "--model", preset, *common, *layout, "--emit", "megatron", "-o", str(launch))
    assert code in (0, 1), err
    assert ("--rotary-interleaved" in launch.read_text()) is flag
    run = import_megatron(launch.read_text(), str(launch))
    assert run.model.rotary_interleaved is flag
    assert not [flag for flag, _ in run.ignored if "rotary" in flag]


def test_the_bridge_file_sets_it_and_reads_it_back(cli, tmp_path):
    overrides = tmp_path / "run.yaml"
    code, _, err = cli("plan", "--model", "llama4-scout", "--hw", "h100", "--devices", "64", "--ep", "8",
                       "--global-batch", "256", "--emit", "bridge", "-o", str(overrides))
    assert code in (0, 1), err
    assert "model.rotary_interleaved=True" in overrides.read_text()
    run = import_bridge(overrides.read_text(), str(overrides), base=load_preset("llama4-scout"))
    assert run.model.rotary_interleaved is True
    assert not [key for key, _ in run.ignored if "rotary" in key]


def test_the_pairing_changes_no_number():
    """A fixed permutation of each q and k head's dimensions: the same FLOPs, memory and time."""
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.planning.plan import make_plan

    scout = load_preset("llama4-scout")
    halves = scout.model_copy(update={"rotary_interleaved": False})
    request = ExecutionRequest(devices=64, expert_parallel=8)
    a, b = (make_plan(m, resolve_hardware("h100"), request).model_dump(exclude={"model"}) for m in (scout, halves))
    assert a == b


def test_megatron_refuses_it_with_multi_latent_attention(cli, tmp_path):
    """transformer_config.py L2526-2527 @ d98e8a64: "rotary_interleaved does not work with multi_latent_attention"."""
    launch = tmp_path / "mla.sh"
    code, _, err = cli("plan", "--model", "deepseek-v3", "--hw", "h100", "--devices", "256", "--ep", "32", "--pp", "8",
                       "--emit", "megatron", "-o", str(launch))
    assert code in (0, 1), err
    launch.write_text(launch.read_text().replace("--multi-latent-attention", "--multi-latent-attention --rotary-interleaved"))
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "rotary_interleaved" in err
