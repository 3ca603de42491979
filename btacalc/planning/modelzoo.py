"""The `trainer.init.model` section of a Cerebras Model Zoo config for the presets Model Zoo has.

Model Zoo's model names and keys at Cerebras/modelzoo Release_2.10.0 (commit f1fd1e09, MODELZOO_PIN): the
GPT-family configuration class GPT2LMHeadModelConfig (src/cerebras/modelzoo/models/nlp/gpt2/gpt2_model.py)
that the gpt2, llama and mixtral models take, GPTJModelConfig (nlp/gptj/gptj_model.py) for gptj, and
MoEConfig (src/cerebras/modelzoo/layers/FeedForwardNetwork.py) under `moe`. Every key the section writes is
in ZOO_KEYS with the line that defines it; Model Zoo's own configs set them the same way (e.g.
nlp/llama/configs/params_llama2_7b.yaml, nlp/mixtral/configs/params_mixtral_8x7b.yaml with
`attention_module: multiquery_attention` and `extra_attention_params.num_kv_groups` for GQA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..config.model import ModelSpec

MODELZOO_PIN = "Cerebras/modelzoo@f1fd1e091dc67917b91ec213ecd63e48fd144477 (Release_2.10.0)"
_GPT2 = "src/cerebras/modelzoo/models/nlp/gpt2/gpt2_model.py"
_GPTJ = "src/cerebras/modelzoo/models/nlp/gptj/gptj_model.py"
_MOE = "src/cerebras/modelzoo/layers/FeedForwardNetwork.py"

# Model Zoo model per preset (the presets whose architecture Model Zoo has a model for at MODELZOO_PIN).
ZOO_MODELS = {"gpt2-small": "gpt2", "gpt-j-6b": "gptj", "llama-7b": "llama", "llama-2-7b": "llama",
              "llama-3-8b": "llama", "llama-3-70b": "llama", "llama-3.1-405b": "llama",
              "mixtral-8x7b": "mixtral", "mixtral-8x22b": "mixtral"}



@dataclass(frozen=True)
class ZooClass:
    """A Model Zoo configuration class a model section is written for: its column in ZOO_KEYS (which keys it
    has), the files that define it, and where it rotates only part of each head, the note that says so (the
    section then writes no `rotary_dim`)."""

    column: int  # 0: the GPT-2 family config, 1: GPT-J's
    sources: tuple[str, ...]
    partial_rotary_note: Optional[str] = None

    def has(self, key: str) -> bool:
        return ZOO_KEYS[key][self.column] is not None


_GPT2_FAMILY = ZooClass(0, (_GPT2, _MOE))
ZOO_CLASSES = {"gpt2": _GPT2_FAMILY, "llama": _GPT2_FAMILY, "mixtral": _GPT2_FAMILY,
               "gptj": ZooClass(1, (_GPTJ,), "rotary_dim: GPT-J rotates 64 of each head's 256 dimensions (Model "
                                "Zoo's params_gptj_6B.yaml); btacalc models rotation of the whole head")}

# A model's dropout switch on is GPT-2's rate, 0.1: hidden_dropout on every fully connected layer's output and the
# embeddings (Model Zoo's dropout_rate), attention_dropout on the attention probabilities (attention_dropout_rate)
# (openai-community/gpt2 config.json resid_pdrop, embd_pdrop, attn_pdrop; also Model Zoo's defaults, gpt2_model.py
# dropout_rate and attention_dropout_rate)
DROPOUT_RATE = 0.1
# Estimate: btacalc's value where the model gives no max_position_embeddings. Every preset in ZOO_MODELS gives
# one, so only a model file named like one of them reaches it; Model Zoo's own default is 1024 (gpt2_model.py).
DEFAULT_MAX_POSITION_EMBEDDINGS = 2048

# key -> (line in the GPT-2 family config, line in the GPT-J config, or None where GPT-J has no such field)
ZOO_KEYS: dict[str, tuple[str, Optional[str]]] = {
    "vocab_size": (f"{_GPT2}:63", f"{_GPTJ}:55"),
    "max_position_embeddings": (f"{_GPT2}:69", f"{_GPTJ}:58"),
    "position_embedding_type": (f"{_GPT2}:77", f"{_GPTJ}:69"),
    "hidden_size": (f"{_GPT2}:96", f"{_GPTJ}:51"),
    "share_embedding_weights": (f"{_GPT2}:99", f"{_GPTJ}:66"),
    "rotary_dim": (f"{_GPT2}:108", f"{_GPTJ}:82"),
    "num_hidden_layers": (f"{_GPT2}:129", f"{_GPTJ}:101"),
    "dropout_rate": (f"{_GPT2}:132", None),
    "norm_type": (f"{_GPT2}:135", None),
    "num_heads": (f"{_GPT2}:145", f"{_GPTJ}:134"),
    "attention_module": (f"{_GPT2}:160", f"{_GPTJ}:137"),
    "extra_attention_params": (f"{_GPT2}:211", f"{_GPTJ}:153"),
    "use_projection_bias_in_attention": (f"{_GPT2}:229", f"{_GPTJ}:178"),
    "use_ffn_bias_in_attention": (f"{_GPT2}:232", f"{_GPTJ}:181"),
    "attention_dropout_rate": (f"{_GPT2}:238", f"{_GPTJ}:170"),
    "filter_size": (f"{_GPT2}:270", f"{_GPTJ}:104"),
    "nonlinearity": (f"{_GPT2}:273", f"{_GPTJ}:112"),
    "use_ffn_bias": (f"{_GPT2}:280", f"{_GPTJ}:124"),
    "use_bias_in_output": (f"{_GPT2}:291", f"{_GPTJ}:190"),
    "moe": (f"{_GPT2}:432", None),
    "moe.num_experts": (f"{_MOE}:36", None),
    "moe.num_shared_experts": (f"{_MOE}:38", None),
    "moe.top_k": (f"{_MOE}:40", None),
}


def zoo_model(spec: ModelSpec) -> tuple[Optional[dict[str, Any]], list[str]]:
    """The model section (None when Model Zoo has no model for the preset) and comment lines."""
    name = ZOO_MODELS.get(spec.name)
    if name is None:
        return None, [f"no model section: Model Zoo {MODELZOO_PIN} has no model for {spec.name} (models with one: "
                      f"{', '.join(sorted(ZOO_MODELS))}); take trainer.init.model from your own config"]
    zoo = ZOO_CLASSES[name]
    rope = spec.position_embedding == "rope"
    model: dict[str, Any] = {
        "name": name, "vocab_size": spec.vocab_size, "hidden_size": spec.hidden_size,
        "position_embedding_type": "rotary" if rope else "learned",
        "share_embedding_weights": spec.tied_embeddings,
        "max_position_embeddings": spec.max_position_embeddings or DEFAULT_MAX_POSITION_EMBEDDINGS,
        "num_hidden_layers": spec.num_layers, "num_heads": spec.num_heads,
        "filter_size": spec.ffn_size, "nonlinearity": spec.mlp,
        "use_projection_bias_in_attention": spec.qkv_bias, "use_ffn_bias_in_attention": spec.linear_bias,
        "use_ffn_bias": spec.mlp_bias, "use_bias_in_output": spec.lm_head_bias,
        "attention_dropout_rate": DROPOUT_RATE if spec.attention_dropout else 0.0,
    }
    notes = [f"model section: keys of Model Zoo {MODELZOO_PIN} ({', '.join(zoo.sources)}); your initializers, "
             "epsilons and losses are yours to add"]
    if zoo.partial_rotary_note is not None:
        notes.append(zoo.partial_rotary_note)
    elif rope:
        model["rotary_dim"] = spec.head_dim
    if zoo.has("dropout_rate"):
        model["dropout_rate"] = DROPOUT_RATE if spec.hidden_dropout else 0.0
    if zoo.has("norm_type"):
        model["norm_type"] = spec.norm
    if spec.num_kv_heads != spec.num_heads:
        model["attention_module"] = "multiquery_attention"
        model["extra_attention_params"] = {"num_kv_groups": spec.num_kv_heads}
    if spec.is_moe:
        moe: dict[str, Any] = {"num_experts": spec.num_experts, "top_k": spec.top_k}
        if spec.shared_expert_size and spec.shared_expert_size % spec.ffn_size == 0:
            moe["num_shared_experts"] = spec.shared_expert_size // spec.ffn_size
        model["moe"] = moe
    return model, notes


def used_keys(model: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key of a model section, dotted (for the check against ZOO_KEYS)."""
    keys = []
    for key, value in model.items():
        if key == "name":
            continue
        keys.append(prefix + key)
        if isinstance(value, dict) and key == "moe":
            keys += used_keys(value, prefix + key + ".")
    return keys
