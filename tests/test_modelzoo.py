"""`--emit modelzoo`: the Model Zoo model section, checked against Model Zoo's own configs for the same models
(Cerebras/modelzoo Release_2.10.0: src/cerebras/modelzoo/models/nlp/llama/configs/params_llama2_7b.yaml,
nlp/mixtral/configs/params_mixtral_8x7b.yaml, nlp/gptj/configs/params_gptj_6B.yaml), whose values are
transcribed below."""

from __future__ import annotations

import pytest
import yaml

from btacalc.config.presets import resolve_model
from btacalc.planning.modelzoo import ZOO_KEYS, ZOO_MODELS, used_keys, zoo_model

# Model Zoo's own values (the configs named above)
LLAMA2_7B = {"name": "llama", "vocab_size": 32000, "hidden_size": 4096, "position_embedding_type": "rotary",
             "rotary_dim": 128, "share_embedding_weights": False, "max_position_embeddings": 4096,
             "num_hidden_layers": 32, "dropout_rate": 0.0, "norm_type": "rmsnorm", "num_heads": 32,
             "attention_dropout_rate": 0.0, "use_projection_bias_in_attention": False,
             "use_ffn_bias_in_attention": False, "filter_size": 11008, "nonlinearity": "swiglu",
             "use_ffn_bias": False, "use_bias_in_output": False}
MIXTRAL_8X7B = {"name": "mixtral", "vocab_size": 32000, "hidden_size": 4096, "max_position_embeddings": 32768,
                "num_hidden_layers": 32, "num_heads": 32, "attention_module": "multiquery_attention",
                "extra_attention_params": {"num_kv_groups": 8}, "filter_size": 14336, "nonlinearity": "swiglu",
                "moe": {"num_experts": 8, "top_k": 2}}
# (Model Zoo's GPT-J config has vocab_size 50257, the tokenizer's; btacalc's preset the checkpoint's padded 50400)
GPTJ_6B = {"name": "gptj", "hidden_size": 4096, "num_heads": 16, "num_hidden_layers": 28,
           "max_position_embeddings": 2048, "use_projection_bias_in_attention": False,
           "use_ffn_bias_in_attention": False, "use_ffn_bias": True, "filter_size": 16384, "nonlinearity": "gelu",
           "use_bias_in_output": True, "share_embedding_weights": False, "position_embedding_type": "rotary"}


@pytest.mark.parametrize("preset, expected", [("llama-2-7b", LLAMA2_7B), ("mixtral-8x7b", MIXTRAL_8X7B),
                                              ("gpt-j-6b", GPTJ_6B)])
def test_model_section_matches_model_zoos_own_config(preset, expected):
    model, _ = zoo_model(resolve_model(preset))
    for key, value in expected.items():
        assert model[key] == value, key


@pytest.mark.parametrize("preset", sorted(ZOO_MODELS))
def test_every_key_is_defined_at_the_cited_release(preset):
    model, notes = zoo_model(resolve_model(preset))
    for key in used_keys(model):
        family, gptj = ZOO_KEYS[key]
        assert (gptj if model["name"] == "gptj" else family) is not None, key
    assert "Release_2.10.0" in notes[0]


def test_presets_model_zoo_lacks_get_no_section_and_say_so(cli):
    model, notes = zoo_model(resolve_model("qwen3-30b-a3b"))
    assert model is None and "has no model for qwen3-30b-a3b" in notes[0]


def test_emitted_yaml_parses_and_marks_docs_only_keys(cli):
    code, out, err = cli("plan", "--model", "llama-2-7b", "--hw", "wse3", "--seq", "2048", "--emit", "modelzoo")
    assert code == 0, err
    config = yaml.safe_load(out)
    assert config["trainer"]["init"]["model"]["name"] == "llama"
    flags = [line for line in out.splitlines() if "ws_opt_" in line and not line.startswith("#")]
    assert flags and all("in Cerebras' docs only" in line for line in flags)
