"""bridgeprov: what Megatron-Bridge's model bridge sets where a Bridge run leaves a field out.

AutoBridge builds the model provider from the Hugging Face config and picks the model bridge by the config's
architecture class (auto_bridge.py _causal_lm_architecture L2153-2215; each bridge registered under its `source`
class, model_bridge.py L2379-2397); btacalc keys the table by the config's model_type, each entry naming the
architecture that model_type's config.json gives (review25: Kimi-K2's names DeepseekV3ForCausalLM, so AutoBridge
builds it with DeepSeekV3Bridge, not KimiK2Bridge, registered for KimiK2ForCausalLM). GPTModelProvider turns the cross-entropy fusion on with Megatron-Core's
native impl (Megatron-Bridge @ 067f987df src/megatron/bridge/models/gpt_provider.py L205; TransformerConfig's
cross_entropy_fusion_impl default "native"), which a Bridge file leaving the loss out trains: native_fused
(docs/memory.md "cenative"). DeepSeek-V3's and Kimi-K2's bridges set cross_entropy_fusion_impl = "te" and the bias
fusions on (deepseek_v3_bridge.py L80-83, kimi_bridge.py L68-71): TransformerEngine's fused loss, te_fused, whose
backward holds no second fp32 copy of the logits. Before this table both read as native_fused.
"""

from __future__ import annotations

import csv
import json

import pytest

from btacalc.config.bridge_codec import bridge_key
from btacalc.config.bridge_model_bridges import bridge_provider_defaults, model_bridges
from btacalc.config.hf import load_hf_config
from btacalc.config.bridge_run import import_bridge
from btacalc.config.presets import load_preset, preset_names
from btacalc.paths import package_data

# a Bridge run that leaves the loss and the fusions out; the architecture is --model's (AutoBridge's HF config)
OVERRIDES = ("train.micro_batch_size: 1\ntrain.global_batch_size: 1024\nmodel.expert_model_parallel_size: 64\n"
             "mixed_precision: bf16_mixed\n")


def _loss(text: str, model: str) -> str:
    return import_bridge(text, "run.yaml", devices=1024, base=load_preset(model)).request.loss


@pytest.mark.parametrize("model, loss", [
    ("deepseek-v3", "te_fused"),  # deepseek_v3_bridge.py L82-83: impl te, fusion on
    ("kimi-k2", "te_fused"),  # kimi_bridge.py L70-71
    ("qwen3-30b-a3b", "native_fused"),  # qwen3_moe_bridge.py sets neither: GPTModelProvider's fusion on, impl native
    ("qwen3-235b-a22b", "native_fused"),
])
def test_a_bridge_run_that_leaves_the_loss_out_trains_its_model_bridges(model, loss):
    assert _loss(OVERRIDES, model) == loss


@pytest.mark.parametrize("line, loss", [
    ("model.cross_entropy_fusion_impl: native", "native_fused"),  # the file's impl over the bridge's
    ("model.cross_entropy_loss_fusion: false", "vocab_parallel"),  # no fusion: the impl is not read
])
def test_the_runs_own_fields_stand_over_the_bridges(line, loss):
    assert _loss(OVERRIDES + line + "\n", "deepseek-v3") == loss


def test_the_plan_says_what_it_took_from_the_bridge_and_only_that():
    run = import_bridge(OVERRIDES + "model.cross_entropy_fusion_impl: native\n", "run.yaml", devices=1024,
                        base=load_preset("deepseek-v3"))
    [note] = [n for n in run.notes if "DeepSeekV3Bridge" in n]
    assert "model.cross_entropy_loss_fusion=true" in note and "model.bias_activation_fusion=true" in note
    assert "cross_entropy_fusion_impl" not in note  # the file gives it
    # Qwen3MoEBridge sets the dispatcher and the hidden dropout (qwen3_moe_bridge.py L59, L67); the dropout is the
    # preset's here (the run gives no architecture), so the note names the dispatcher alone
    qwen = import_bridge(OVERRIDES, "run.yaml", devices=1024, base=load_preset("qwen3-30b-a3b"))
    [note] = [n for n in qwen.notes if "Megatron-Bridge's" in n and "sets them" in n]
    assert note.startswith("model.moe_token_dispatcher_type=alltoall: as Megatron-Bridge's Qwen3MoEBridge")
    assert "hidden_dropout" not in note
    # Qwen2Bridge sets the hidden dropout alone (qwen2_bridge.py L54), which the preset gives here: no note
    plain = import_bridge(OVERRIDES, "run.yaml", devices=1024, base=load_preset("qwen2.5-7b"))
    assert not [n for n in plain.notes if "Megatron-Bridge's" in n and "sets them" in n]


def test_the_tables_fields_are_megatron_destinations_bridge_keys_name():
    with package_data("megatron_flags.tsv").open(encoding="utf-8") as f:
        dests = {row[1] for row in csv.reader((ln for ln in f if not ln.startswith("#")), delimiter="\t") if len(row) > 1}
    for bridge in model_bridges().values():
        for dest in bridge.provider:
            assert dest in dests, (bridge.name, dest)
            assert bridge_key(dest), (bridge.name, dest)


def test_every_listed_model_type_is_a_stored_config_jsons_with_the_entrys_architecture(data_dir):
    """Each model_type is one btacalc's config.json reader reads from a stored config.json (a preset's, or
    qwen3-8b's for qwen3, which no preset states), whose architectures name the class the entry's bridge is
    registered for: the class AutoBridge dispatches on."""
    for name, bridge in model_bridges().items():
        stored = [f for f in sorted(data_dir.glob("*.config.json")) if json.loads(f.read_text())["model_type"] == name]
        assert stored, name
        for path in stored:
            assert load_hf_config(path).hf_model_type == name
            assert json.loads(path.read_text())["architectures"] == [bridge.architecture], path.name


def test_every_preset_from_a_config_json_states_its_model_type(data_dir):
    for name in preset_names():
        spec = load_preset(name)
        if spec.source.endswith("config.json") or "/config.json " in spec.source:
            assert spec.hf_model_type, name
        stored = data_dir / f"{name}.config.json"
        if stored.is_file():
            assert spec.hf_model_type == json.loads(stored.read_text())["model_type"], name


def test_the_dense_equivalent_is_no_hugging_face_model():
    assert load_preset("deepseek-v3").dense_equivalent().hf_model_type is None
    assert bridge_provider_defaults(None) == {} and bridge_provider_defaults("mixtral") == {}


def test_an_emitted_plan_reads_back_with_its_loss_under_the_models_bridge(cli, tmp_path):
    """`--emit bridge` states the impl (BRIDGE_UNSAID: native where the plan's loss is not TE's), so re-reading it
    under --model deepseek-v3 keeps the plan's loss rather than taking the bridge's te."""
    layout = ("--hw", "h100", "--devices", "1024", "--tp", "1", "--pp", "16", "--ep", "64", "--recompute", "full")
    for loss in ("native_fused", "te_fused", "vocab_parallel"):
        code, out, err = cli("plan", "-m", "deepseek-v3", *layout, "--loss", loss, "--emit", "bridge")
        assert code == 0, err
        path = tmp_path / f"{loss}.txt"
        path.write_text(out)
        code, back, err = cli("plan", "-m", "deepseek-v3", "--from-bridge", str(path), "--hw", "h100",
                              "--devices", "1024", "--json")
        assert code == 0, err
        assert json.loads(back)["inputs"]["loss"] == loss


def test_a_bridge_file_for_a_model_no_bridge_builds_says_so():
    """No bridge at 067f987d registers MixtralForCausalLM (the table's header; review25): AutoBridge refuses
    Mixtral's config, and the plan says it takes GPTModelProvider's defaults."""
    from btacalc.config.bridge_model_bridges import UNBRIDGED

    run = import_bridge(OVERRIDES.replace("64", "8"), "run.yaml", devices=1024, base=load_preset("mixtral-8x7b"))
    [note] = [n for n in run.notes if "has no model bridge" in n]
    assert "MixtralForCausalLM" in note and "GPTModelProvider's defaults" in note
    assert not set(UNBRIDGED) & set(model_bridges())
    qwen = import_bridge(OVERRIDES, "run.yaml", devices=1024, base=load_preset("qwen3-30b-a3b"))
    assert not [n for n in qwen.notes if "has no model bridge" in n]
