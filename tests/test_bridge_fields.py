"""bridgetypo: the field names of Megatron-Bridge's config (btacalc/data/bridge_fields.toml) tell a field Bridge has
but btacalc does not model (a plan note, as before) from a name Bridge does not have (one line, exit 2, the nearest
real name). The bad-input cases are in tests/test_bad_input.py."""

from __future__ import annotations

import re

import pytest

from btacalc.config.bridge_fields import bridge_fields, check_bridge_key
from btacalc.config.megatron_codec import BRIDGE_PIN
from btacalc.config.bridge_codec import BRIDGE_KEYS
from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import NOT_MODELLED
from btacalc.errors import BtacalcError

# ConfigContainer's fields, as Megatron-Bridge @ 067f987d src/megatron/bridge/training/config.py L962-1010 lists them
CONTAINER_SECTIONS = ("env_vars", "rng", "rerun_state_machine", "train", "model", "optimizer",
                      "optimizer_config_override_provider", "ddp", "validation", "scheduler", "dataset", "logger",
                      "tokenizer", "checkpoint", "dist", "ft", "straggler", "nvrx_straggler", "profiling", "peft",
                      "comm_overlap", "mixed_precision", "tensor_inspect", "inprocess_restart")


def test_the_data_file_parses_and_names_its_source():
    data = bridge_fields()
    assert data.bridge == BRIDGE_PIN  # the commit every other Bridge citation of btacalc reads
    assert tuple(data.sections) == CONTAINER_SECTIONS
    bridge_short, mlm_short = data.bridge.split("@")[1][:8], data.megatron_lm.split("@")[1][:8]
    for name, section in data.sections.items():
        for entry in section.classes:  # repository@commit:path:Class, at the two commits the header names
            m = re.fullmatch(r"(Megatron-Bridge|Megatron-LM)@([0-9a-f]{8}):([\w/.-]+\.py):(\w+)", entry)
            assert m, (name, entry)
            assert m.group(2) == (bridge_short if m.group(1) == "Megatron-Bridge" else mlm_short), entry
        assert section.free or section.fields or name == "optimizer_config_override_provider", name


@pytest.mark.parametrize("key, defined_in", [
    # literal names read in the cited source (Megatron-LM @ 2a75ac12, Bridge's 3rdparty/Megatron-LM submodule at
    # 067f987d; Megatron-Bridge @ 067f987d)
    ("model.tensor_model_parallel_size", "megatron/core/model_parallel_config.py ModelParallelConfig"),
    ("model.num_moe_experts", "megatron/core/transformer/transformer_config.py TransformerConfig"),
    ("model.kv_lora_rank", "megatron/core/transformer/transformer_config.py MLATransformerConfig"),
    ("model.seq_length", "src/megatron/bridge/models/gpt_provider.py GPTModelProvider"),
    ("train.global_batch_size", "megatron/training/config/training_config.py TrainingConfig"),
    ("ddp.overlap_grad_reduce", "megatron/core/distributed/distributed_data_parallel_config.py"),
    ("comm_overlap.tp_comm_overlap", "src/megatron/bridge/training/comm_overlap.py CommOverlapConfig"),
    ("mixed_precision.fp8_recipe", "src/megatron/bridge/training/mixed_precision.py MixedPrecisionConfig"),
    ("rng.seed", "megatron/training/config RNGConfig"),
])
def test_known_fields_are_stored(key, defined_in):
    section, name = key.split(".")
    assert name in bridge_fields().sections[section].fields, defined_in
    check_bridge_key(key, "t")


def test_every_key_btacalc_emits_and_reads_is_a_bridge_field():
    """BRIDGE_KEYS are the keys `--emit bridge` prints and `--from-bridge` reads: each must pass the check, or a plan's
    own emitted overrides would be refused when read back."""
    for key, _, _ in BRIDGE_KEYS.values():
        check_bridge_key(key, "t")


@pytest.mark.parametrize("key, message", [
    ("model.tensor_model_paralell_size", "did you mean model.tensor_model_parallel_size?"),
    ("train.global_batch_sise", "did you mean train.global_batch_size?"),
    ("ddp.overlap_grad_reduc", "did you mean ddp.overlap_grad_reduce?"),
    ("trian.global_batch_size", "trian is not one of its sections (Megatron-Bridge@067f987d ConfigContainer): "
     "did you mean train?"),
    # nothing at difflib's default cutoff (0.6): no suggestion
    ("ddp.qqqq", "ddp.qqqq is not a field of Megatron-Bridge's ddp config (Megatron-Bridge@067f987d, "
     "btacalc/data/bridge_fields.toml)"),
])
def test_a_misspelt_key_names_the_nearest_real_one(key, message):
    with pytest.raises(BtacalcError) as exc:
        check_bridge_key(key, "o.txt")
    assert message in str(exc.value) and str(exc.value).startswith("o.txt: ")
    assert str(exc.value).endswith(message)  # the suggestion, if any, closes the line


def test_what_passes_unchecked_below_a_field_or_a_free_section():
    check_bridge_key("mixed_precision", "t")  # a recipe's name for the whole section (MixedPrecisionConfig | str)
    check_bridge_key("comm_overlap", "t")  # a section given whole (null) is not a field name
    check_bridge_key("env_vars.NCCL_ANYTHING", "t")  # dict[str, ...]: any key
    check_bridge_key("model.transformer.num_layers", "t")  # below a field (GPTModelConfig.transformer): its value


def test_keys_below_a_field_btacalc_reads_only_where_bridge_admits_them():
    """review14: nested_fields are the fields whose annotation admits keys below them. Literal annotations at the
    file's commits: ModelParallelConfig.tensor_model_parallel_size `int = 1` (Megatron-LM @ 2a75ac12
    megatron/core/model_parallel_config.py) admits none, so `model.tensor_model_parallel_size.a` is refused (it was
    listed as ignored and the plan ran at TP 1, L55 `tensor_model_parallel_size: int = 1`); the model's
    `tp_comm_overlap_cfg` is `Optional[Union[str, dict[str, Any]]]` (Megatron-Bridge @ 067f987d
    src/megatron/bridge/models/gpt_provider.py L165) and comm_overlap's `dict` / `Optional[TransformerLayerTPOverlapCfg]`
    (src/megatron/bridge/training/comm_overlap.py L357, L385), so a key below it stays a note."""
    from btacalc.config.bridge_codec import bridge_value_field
    from btacalc.config.presets import load_preset

    model = bridge_fields().sections["model"]
    assert "tp_comm_overlap_cfg" in model.nested_fields and "tensor_model_parallel_size" not in model.nested_fields
    assert "tp_comm_overlap_cfg" in bridge_fields().sections["comm_overlap"].nested_fields
    assert bridge_value_field("model.tensor_model_parallel_size.a") == "model.tensor_model_parallel_size"
    assert bridge_value_field("train.micro_batch_size.x") == "train.micro_batch_size"
    assert bridge_value_field("model.tp_comm_overlap_cfg.qkv_fprop.method") is None
    assert bridge_value_field("model.tensor_model_parallel_size") is None  # the field itself
    base = load_preset("llama-3-8b")
    with pytest.raises(BtacalcError, match="model.tensor_model_parallel_size takes one value"):
        import_bridge(LLAMA_8B + "model.tensor_model_parallel_size.a=2\n", "o.txt", 8, base)
    run = import_bridge(LLAMA_8B + "model.tp_comm_overlap_cfg.qkv_fprop.method=ring_exchange\n", "o.txt", 8, base)
    assert "model.tp_comm_overlap_cfg.qkv_fprop.method" in dict(run.ignored)


LLAMA_8B = ("train.global_batch_size=64\ntrain.micro_batch_size=1\nmodel.seq_length=4096\n"
            "mixed_precision=bf16_mixed\n")


def test_a_real_but_unmodelled_field_still_plans_with_its_note():
    from btacalc.config.presets import load_preset

    base = load_preset("llama-3-8b")
    # rng.seed: RNGConfig's field, no effect on the step; model.apply_rope_fusion: a TransformerConfig kernel choice
    run = import_bridge(LLAMA_8B + "rng.seed=1234\nmodel.apply_rope_fusion=true\n", "o.txt", 8, base)
    ignored = dict(run.ignored)
    assert ignored["rng.seed"] == "optimiser hyper-parameter or initialisation: no effect on memory or step time"
    assert ignored["model.apply_rope_fusion"].startswith("kernel choice")
    run = import_bridge(LLAMA_8B + "rng.te_rng_tracker=true\n", "o.txt", 8, base)
    assert dict(run.ignored)["rng.te_rng_tracker"] == NOT_MODELLED


def test_the_reproduction_plans_tp2_once_spelt_right(cli, tmp_path):
    """The brief's reproduction: misspelt, exit 2 naming the real field; spelt right, planned at TP 2."""
    text = "model.tensor_model_paralell_size=2\n" + LLAMA_8B
    (tmp_path / "o.txt").write_text(text)
    code, out, err = cli("plan", "--from-bridge", str(tmp_path / "o.txt"), "--hw", "h100", "--devices", "8",
                         "-m", "llama-3-8b")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.strip().endswith("did you mean model.tensor_model_parallel_size?")
    from btacalc.config.presets import load_preset

    run = import_bridge(text.replace("paralell", "parallel"), "o.txt", 8, load_preset("llama-3-8b"))
    assert run.request.tensor_parallel == 2
