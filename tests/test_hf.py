"""Hugging Face config.json import: the new families against their presets, and validation of every
field read (one line, exit 2, never a traceback)."""

from __future__ import annotations

import json

import pytest

from btacalc.config.execution import RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.hf import MAX_DEPTH, json_depth, load_hf_config
from btacalc.config.presets import load_preset, resolve_model
from btacalc.errors import BtacalcError
from btacalc.model.params import model_param_counts
from btacalc.model.problem import make_problem


def counts(spec):
    return model_param_counts(make_problem(spec, resolve_hardware("wse3"), RunOptions()))


@pytest.mark.parametrize("config, preset", [
    ("deepseek-v3.config.json", "deepseek-v3"), ("kimi-k2.config.json", "kimi-k2"),
    ("gpt-oss-120b.config.json", "gpt-oss-120b"), ("gpt-j-6b.config.json", "gpt-j-6b"),
    ("gpt2-small.config.json", "gpt2-small"), ("mixtral-8x22b.config.json", "mixtral-8x22b"),
    ("qwen3-235b-a22b.config.json", "qwen3-235b-a22b"),
])
def test_config_matches_its_preset(data_dir, config, preset):
    hf, pre = load_hf_config(data_dir / config), load_preset(preset)
    a, b = counts(hf), counts(pre)
    assert (a.total, a.active, a.non_embedding, a.gathered) == (b.total, b.active, b.non_embedding, b.gathered)
    assert hf.features() == pre.features()
    assert hf.layer_kinds() == pre.layer_kinds()
    assert hf.name == config.removesuffix(".json")  # the file's stem (it is not called config.json)


def test_qwen2_moe_shared_expert_with_its_gate(data_dir):
    # Qwen1.5-MoE-A2.7B model card: "14.3B parameters in total and 2.7B activated"
    spec = load_hf_config(data_dir / "qwen1.5-moe-a2.7b.config.json")
    assert spec.shared_expert_size == 5632 and spec.shared_expert_gate and not spec.router_renormalize
    h, L, V, E, k, f, fs = 2048, 24, 151936, 60, 4, 1408, 5632
    layer = 2 * h + 4 * h * h + 3 * h + h * E + 3 * E * h * f + 3 * h * fs + h
    pc = counts(spec)
    assert pc.total == L * layer + 2 * V * h + h
    assert round(pc.total / 1e8) == 143 and round(pc.active / 1e8) == 27


def test_mixed_dense_and_moe_layers_from_the_qwen_fields(tmp_path, data_dir):
    raw = json.loads((data_dir / "qwen3-30b-a3b.config.json").read_text())
    raw.update({"mlp_only_layers": [0, 5], "decoder_sparse_step": 2})
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(raw))
    spec = load_hf_config(path)
    # layer i is MoE when (i + 1) % 2 == 0 and i is not listed: 1, 3, 7, ..., 47 (23 layers)
    assert [(k.name, k.count) for k in spec.layer_kinds()] == [("dense", 25), ("moe", 23)]
    assert dict(spec.layer_kinds()[0].symbols) == {"f": raw["intermediate_size"]}


def test_model_name_is_the_stem_or_the_folder_or_given(tmp_path, data_dir, cli):
    text = (data_dir / "mixtral-8x7b.config.json").read_text()
    folder = tmp_path / "my-mixtral"
    folder.mkdir()
    (folder / "config.json").write_text(text)
    (tmp_path / "other.json").write_text(text)
    assert resolve_model(str(folder)).name == "my-mixtral"
    assert resolve_model(str(folder / "config.json")).name == "my-mixtral"
    assert resolve_model(str(tmp_path / "other.json")).name == "other"
    assert resolve_model(str(tmp_path / "other.json"), "custom").name == "custom"
    assert resolve_model("qwen3-30b-a3b", "renamed").name == "renamed"
    for command in (("plan", "--json"), ("sweep", "--vary", "seq=1024", "--json"), ("compare", "--hw", "wse3", "--json")):
        code, out, err = cli(command[0], "--model", str(tmp_path / "other.json"), "--name", "custom", *command[1:])
        assert code in (0, 1), err
        assert '"custom' in out
    code, out, err = cli("models", "show", str(tmp_path / "other.json"), "--name", "custom", "--json")
    assert code == 0 and json.loads(out)["name"] == "custom", err


LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "vocab_size": 10, "intermediate_size": 16}


@pytest.mark.parametrize("change, fragment", [
    ({"num_hidden_layers": True}, "'num_hidden_layers' must be an integer"),
    ({"num_hidden_layers": 2.0}, "'num_hidden_layers' must be an integer"),
    ({"hidden_size": "64"}, "'hidden_size' must be an integer"),
    ({"num_key_value_heads": 0}, "'num_key_value_heads' = 0 is out of range"),
    ({"num_key_value_heads": 3}, "must divide num_attention_heads"),
    ({"num_key_value_heads": False}, "'num_key_value_heads' must be an integer"),
    ({"vocab_size": 2**41}, "out of range"),
    ({"num_hidden_layers": 2**40}, "num_layers"),  # within 2**40, beyond any model: 10,000 layers at most
    ({"num_hidden_layers": 10_001}, "less than or equal to 10000"),
    ({"model_type": ["llama"]}, "'model_type' must be a string"),
    ({"model_type": {"a": 1}}, "'model_type' must be a string"),
    ({"model_type": None, "architectures": 3}, "'architectures' must be a list of strings"),
    ({"model_type": None, "architectures": {"a": 1}}, "'architectures' must be a list of strings"),
    ({"tie_word_embeddings": "no"}, "'tie_word_embeddings' must be true or false"),
    ({"hidden_act": 1}, "'hidden_act' must be a string"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"model_type": "qwen3", "use_sliding_window": True}, "use_sliding_window"),
    ({"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
      "mlp_only_layers": "0"}, "'mlp_only_layers' must be a list"),
    ({"model_type": "gpt_oss", "num_local_experts": 4, "num_experts_per_tok": 2, "num_key_value_heads": 4,
      "layer_types": ["full_attention", "sliding_attention"]}, "layer_types pattern"),
    ({"model_type": "deepseek_v3", "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
      "kv_lora_rank": 8, "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 4, "moe_layer_freq": 2},
     "moe_layer_freq"),
])
def test_bad_config_fields_are_one_line_errors(cli, tmp_path, change, fragment):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **change}))
    code, out, err = cli("plan", "--model", str(path), "--json")
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and out == ""


def test_nesting_depth_is_bounded_before_parsing(cli, tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, _, err = cli("models", "show", str(path))
    assert code == 2 and f"deeper than {MAX_DEPTH}" in err and len(err.strip().splitlines()) == 1
    assert json_depth('{"a": "[[[[{{{{", "b": [[1]]}') == 3  # brackets inside strings do not count
    path.write_text('{"model_type": "llama", "x": ' + "[" * 60 + "]" * 60 + "}")
    code, _, err = cli("models", "show", str(path))
    assert code == 2 and "'hidden_size' is missing" in err  # parsed: 61 levels are allowed


def test_gpt_oss_layer_types_become_a_window_pattern(tmp_path, data_dir):
    raw = json.loads((data_dir / "gpt-oss-120b.config.json").read_text())
    for types, expected in ((["full_attention"] * 36, (0, 0)), (["sliding_attention"] * 36, (128, 0)),
                            (["sliding_attention", "sliding_attention", "full_attention"] * 12, (128, 3))):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**raw, "layer_types": types}))
        spec = load_hf_config(path)
        assert (spec.sliding_window, spec.full_attention_interval) == expected
        assert len(spec.window_positions()) == types.count("sliding_attention")


def test_a_long_layer_types_list_is_read_in_one_pass(tmp_path, data_dir):
    """10,000 layers, every 3rd full: the pattern is found from the first full layer (not by trying every
    interval); an irregular 10,000-layer list is refused as quickly."""
    raw = json.loads((data_dir / "gpt-oss-120b.config.json").read_text())
    layers = 9999
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**raw, "num_hidden_layers": layers,
                                "layer_types": ["sliding_attention", "sliding_attention", "full_attention"] * (layers // 3)}))
    spec = load_hf_config(path)
    assert (spec.full_attention_interval, len(spec.window_positions())) == (3, 2 * layers // 3)
    irregular = ["full_attention"] * 2 + ["sliding_attention"] * (layers - 2)
    path.write_text(json.dumps({**raw, "num_hidden_layers": layers, "layer_types": irregular}))
    with pytest.raises(BtacalcError, match="layer_types pattern"):
        load_hf_config(path)


def test_an_unknown_model_type_is_never_replaced_by_its_architectures(tmp_path, cli):
    """A model_type btacalc does not know is an error even when `architectures` names a known class: a
    silent fallback could plan a different model."""
    import json

    cfg = tmp_path / "m"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps({"model_type": "my_qwen", "architectures": ["Qwen3MoeForCausalLM"]}))
    code, out, err = cli("plan", "--model", str(cfg), "--hw", "wse3")
    assert code == 2 and "unsupported model_type 'my_qwen'" in err and "qwen3_moe" in err
    assert len(err.strip().splitlines()) == 1
