"""Hugging Face transformers ``config.json`` files -> `ModelSpec`.

Every field btacalc reads is type-checked (integers are integers, not booleans or floats; strings are
strings; lists are lists) and bounded; a feature btacalc does not model is a one-line error naming it.
Field names and defaults follow the transformers configuration classes (v5.24.0) of each family.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Optional

from ..paths import read_input
from ..errors import BtacalcError, clean_text
from .model import (GPT_OSS_GLU_CLAMP, ModelSpec, every_nth, rotary_dimensions, rotary_share, turns_pairs,
                    validate_model)
from .text import input_kind

# Counts and sizes beyond this are not a model: the arithmetic (Python ints, numpy int64 in sweeps) and
# every table assume sizes well below it.
MAX_SIZE = 2**40
# JSON nesting deeper than this is refused before parsing (a config.json nests 3 levels).
MAX_DEPTH = 64

_MISSING = object()


class _Config:
    """The raw config with typed, bounded accessors that fail with one line naming the field."""

    def __init__(self, raw: dict[str, Any], origin: str, model_type: str):
        self.raw, self.origin, self.model_type = raw, origin, model_type

    def error(self, message: str) -> BtacalcError:
        return BtacalcError(f"{self.origin}: {message}")

    def get(self, *keys: str, default: Any = _MISSING) -> Any:
        for key in keys:
            if self.raw.get(key) is not None:
                return self.raw[key]
        if default is _MISSING:
            raise self.error(f"field {keys[0]!r} is missing (needed for model_type {self.model_type})")
        return default

    def integer(self, *keys: str, default: Any = _MISSING, minimum: int = 1) -> Any:
        value = self.get(*keys, default=default)
        if default is not _MISSING and value is default:  # not in the file: the family's default
            return value
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(f"field {keys[0]!r} must be an integer, got {json.dumps(value)}")
        if value < minimum or value > MAX_SIZE:
            raise self.error(f"field {keys[0]!r} = {value} is out of range ({minimum} to 2**40)")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default=default)
        if not isinstance(value, bool):
            raise self.error(f"field {key!r} must be true or false, got {json.dumps(value)}")
        return value

    def string(self, key: str, default: Optional[str]) -> Optional[str]:
        value = self.get(key, default=default)
        if value is not None and not isinstance(value, str):
            raise self.error(f"field {key!r} must be a string, got {json.dumps(value)}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.get(key, default=default)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.error(f"field {key!r} must be a number, got {json.dumps(value)}")
        try:
            return float(value)
        except OverflowError:  # hostile24: a 400-digit integer ("the inputs take a number beyond ... range")
            raise self.error(f"field {key!r} is an integer of {len(str(value))} digits, beyond a float's range (about "
                             "1.8e308)") from None

    def probability(self, key: str, default: float) -> float:
        """A dropout rate: a number in [0, 1] (hostile22: NaN, -0.1 and 2.0 were refused "attention_dropout > 0 is not
        modelled", and GPT-2's / GPT-J's rates of 1.5 or NaN read as no dropout)."""
        value = self.number(key, default)
        if not 0 <= value <= 1:
            raise self.error(f"field {key!r} must be a probability in [0, 1], got {json.dumps(value)}")
        return value

    def array(self, key: str) -> list[Any]:
        value = self.get(key, default=[])
        if not isinstance(value, list):
            raise self.error(f"field {key!r} must be a list, got {json.dumps(value)}")
        return value

    def unsupported(self, feature: str) -> BtacalcError:
        return self.error(f"{feature} is not modelled (model_type {self.model_type})")


def _common(c: _Config, h_key: str = "hidden_size") -> dict[str, Any]:
    """Fields every decoder family has: sizes, heads (GQA), head dim, vocabulary, positions, tied head."""
    h = c.integer(h_key, "n_embd")
    heads = c.integer("num_attention_heads", "n_head")
    kv = c.integer("num_key_value_heads", default=heads)
    if heads % kv:
        raise c.error(f"num_key_value_heads ({kv}) must divide num_attention_heads ({heads})")
    head_dim = c.integer("head_dim", default=None)
    if head_dim is None:
        if h % heads:
            raise c.error(f"hidden_size ({h}) is not divisible by num_attention_heads ({heads}) and no head_dim is given")
        head_dim = h // heads
    return {
        "hidden_size": h, "num_layers": c.integer("num_hidden_layers", "n_layer"), "num_heads": heads,
        "num_kv_heads": kv, "head_dim": head_dim, "vocab_size": c.integer("vocab_size"),
        "tied_embeddings": c.flag("tie_word_embeddings", False),
        "max_position_embeddings": c.integer("max_position_embeddings", "n_positions", default=None),
    }


def _silu(c: _Config) -> None:
    act = c.string("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise c.unsupported(f"hidden_act {act!r} (SwiGLU/silu only)")


def _on(rate: float) -> bool:
    """A dropout that keeps a mask: torch's dropout at p = 0 returns its input, at p = 1 multiplies by zero (ATen
    Dropout.cpp _dropout_impl); in between CUDA's native_dropout keeps a 1-byte mask."""
    return 0 < rate < 1


def _dropouts(c: _Config) -> dict[str, Any]:
    """dropout35: the two switches. GPT-2 and GPT-J: attn_pdrop on the attention probabilities, resid_pdrop on the
    attention and MLP outputs and embd_pdrop on the embeddings (transformers GPT2Attention.attn_dropout / resid_dropout,
    GPT2MLP.dropout, GPT2Model.drop), the last two btacalc's one hidden switch (Megatron-LM's hidden_dropout: the
    residual bias-dropout-adds and the embedding dropout). The other families: attention_dropout, the attention
    probabilities' dropout of their attention interface (eager: nn.functional.dropout on the weights); no hidden one."""
    if c.model_type not in ("gpt2", "gptj"):
        return {"attention_dropout": _on(c.probability("attention_dropout", 0.0))}
    resid, embd = (_on(c.probability(k, 0.1)) for k in ("resid_pdrop", "embd_pdrop"))
    if resid != embd:
        raise c.unsupported("dropout on one of resid_pdrop, embd_pdrop only (btacalc's hidden_dropout is both)")
    return {"attention_dropout": _on(c.probability("attn_pdrop", 0.1)), "hidden_dropout": resid}


def _window(c: _Config, enabled: bool = True) -> dict[str, Any]:
    """A sliding window on every layer (Mistral, Mixtral), unless the config has none."""
    window = c.integer("sliding_window", default=None)
    return {"sliding_window": window} if enabled and window is not None else {}


def _qwen_window(c: _Config) -> None:
    if c.flag("use_sliding_window", False):
        raise c.unsupported("use_sliding_window (windows on the lower max_window_layers layers)")


def _llama_like(c: _Config) -> dict[str, Any]:
    _silu(c)
    bias = c.flag("attention_bias", False)
    if c.flag("mlp_bias", False):
        raise c.unsupported("mlp_bias on a SwiGLU MLP")
    return {**_common(c), "ffn_size": c.integer("intermediate_size"), "qkv_bias": bias, "linear_bias": bias}


def _qwen2(c: _Config) -> dict[str, Any]:
    _qwen_window(c)
    _silu(c)
    return {**_common(c), "ffn_size": c.integer("intermediate_size"), "qkv_bias": True}


def _qwen3(c: _Config) -> dict[str, Any]:
    _qwen_window(c)
    return {**_llama_like(c), "qk_norm": "head"}


def _mistral(c: _Config) -> dict[str, Any]:
    return {**_llama_like(c), **_window(c)}


def _moe_stack(c: _Config, experts_key: str) -> dict[str, Any]:
    """Routed experts, top-k and the dense/MoE layer pattern of the Qwen-MoE families."""
    only = c.array("mlp_only_layers")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise c.error("field 'mlp_only_layers' must be a list of integers")
    layers = c.integer("num_hidden_layers", "n_layer")
    seen: set[int] = set()
    for i in only:  # hostile37: refused as "dense_layer_indices must be ...", a field no config.json has
        if not 0 <= i < layers or i in seen:
            raise c.error(f"field 'mlp_only_layers' must list distinct layers in 0..{layers - 1}, got {i}"
                          + (" twice" if i in seen else ""))
        seen.add(i)
    return {"num_experts": c.integer(experts_key), "top_k": c.integer("num_experts_per_tok"),
            "ffn_size": c.integer("moe_intermediate_size"), "router_renormalize": c.flag("norm_topk_prob", False),
            "moe_layer_interval": c.integer("decoder_sparse_step", default=1), "dense_layer_indices": tuple(only),
            "dense_ffn_size": c.integer("intermediate_size", default=None)}


def _qwen3_moe(c: _Config) -> dict[str, Any]:
    _qwen_window(c)
    _silu(c)
    return {**_common(c), **_moe_stack(c, "num_experts"), "qk_norm": "head",
            "qkv_bias": c.flag("attention_bias", False), "linear_bias": c.flag("attention_bias", False)}


def _qwen2_moe(c: _Config) -> dict[str, Any]:
    _qwen_window(c)
    _silu(c)
    shared = c.integer("shared_expert_intermediate_size", default=0, minimum=0)
    return {**_common(c), **_moe_stack(c, "num_experts"), "qkv_bias": c.flag("qkv_bias", True),
            "shared_expert_size": shared, "shared_expert_gate": shared > 0}


def _mixtral(c: _Config) -> dict[str, Any]:
    _silu(c)
    if c.number("router_jitter_noise", 0.0) != 0:
        raise c.unsupported("router_jitter_noise > 0")
    return {**_common(c), **_window(c), "ffn_size": c.integer("intermediate_size"),
            "num_experts": c.integer("num_local_experts"), "top_k": c.integer("num_experts_per_tok")}


def _olmoe(c: _Config) -> dict[str, Any]:
    _silu(c)
    if c.get("clip_qkv", default=None) is not None:
        raise c.unsupported("clip_qkv")
    bias = c.flag("attention_bias", False)
    return {**_common(c), "ffn_size": c.integer("intermediate_size"), "num_experts": c.integer("num_experts"),
            "top_k": c.integer("num_experts_per_tok"), "qk_norm": "full", "qkv_bias": bias, "linear_bias": bias,
            "router_renormalize": c.flag("norm_topk_prob", False)}


def _deepseek_v3(c: _Config) -> dict[str, Any]:
    _silu(c)
    experts, groups, chosen = c.integer("n_routed_experts"), c.integer("n_group", default=1), c.integer("topk_group", default=1)
    if experts % groups or chosen > groups:
        raise c.error(f"n_group ({groups}) must divide n_routed_experts ({experts}) and topk_group ({chosen}) "
                      "must not exceed it")
    if c.integer("moe_layer_freq", default=1) != 1:
        raise c.unsupported("moe_layer_freq != 1 (transformers' DeepseekV3 ignores it)")
    scoring = c.string("scoring_func", "sigmoid")
    if scoring not in ("sigmoid", "softmax"):
        raise c.unsupported(f"scoring_func {scoring!r}")
    method = c.string("topk_method", "noaux_tc")
    if method not in ("noaux_tc", "greedy", "group_limited_greedy"):
        raise c.unsupported(f"topk_method {method!r}")
    rope, nope = c.integer("qk_rope_head_dim"), c.integer("qk_nope_head_dim")
    bias = c.flag("attention_bias", False)
    if bias:
        raise c.unsupported("attention_bias with MLA")
    base = _common(c)
    base["num_kv_heads"] = base["num_heads"]  # MLA materialises keys and values for every head
    return {**base, "head_dim": nope + rope, "ffn_size": c.integer("moe_intermediate_size"), "num_experts": experts,
            "top_k": c.integer("num_experts_per_tok"), "router": scoring, "router_renormalize": c.flag("norm_topk_prob", True),
            # group-limited routing, the weights' scale and the aux-loss-free correction bias (semantics20)
            "router_groups": groups if method != "greedy" else 1, "router_group_topk": chosen if method != "greedy" else 1,
            "router_scale": c.number("routed_scaling_factor", 1.0), "router_score_bias": method == "noaux_tc",
            "shared_expert_size": c.integer("n_shared_experts", default=0, minimum=0) * c.integer("moe_intermediate_size"),
            "first_dense_layers": c.integer("first_k_dense_replace", default=0, minimum=0),
            "dense_ffn_size": c.integer("intermediate_size"), "mtp_layers": c.integer("num_nextn_predict_layers", default=0, minimum=0),
            "mla": {"q_lora_rank": c.integer("q_lora_rank", default=0, minimum=0), "kv_lora_rank": c.integer("kv_lora_rank"),
                    "qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "v_head_dim": c.integer("v_head_dim")}, **_yarn(c)}


def _deepseek_v2(c: _Config) -> dict[str, Any]:
    """DeepSeek-V2 (-Lite): DeepSeek-V3's MLA and expert stack with V2's router, a softmax over every expert whose top
    k are taken greedily or from the best groups, not renormalised by default and with no correction bias
    (transformers v5.24.0 configuration_deepseek_v2.py: topk_method greedy, norm_topk_prob False,
    routed_scaling_factor 1.0; DeepSeek-V2 paper arXiv 2405.04434 §2.2). freshuser22: a DeepSeek-V2-Lite config.json
    was refused as an unsupported architecture, where Megatron-Bridge builds it (deepseek_v2_bridge.py L35-41)."""
    scoring = c.string("scoring_func", "softmax")  # V2's remote code names it; transformers' class has softmax only
    if scoring != "softmax":
        raise c.unsupported(f"scoring_func {scoring!r} (DeepSeek-V2 routes with a softmax)")
    method = c.string("topk_method", "greedy")
    if method not in ("greedy", "group_limited_greedy"):
        raise c.unsupported(f"topk_method {method!r}")
    v2 = {"scoring_func": scoring, "topk_method": method, "norm_topk_prob": c.flag("norm_topk_prob", False),
          "routed_scaling_factor": c.number("routed_scaling_factor", 1.0)}
    return _deepseek_v3(_Config({**c.raw, **v2}, c.origin, c.model_type))


def _layer_pattern(c: _Config, layers: int) -> int:
    """`full_attention_interval` from an explicit layer_types list (sliding / full), or an error."""
    types = c.array("layer_types")
    if not types:
        return 2  # GptOssConfig default: sliding on even layers
    if len(types) != layers or not all(t in ("sliding_attention", "full_attention") for t in types):
        raise c.error(f"field 'layer_types' must list 'sliding_attention' or 'full_attention' for each of the {layers} layers")
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    n = full[0] + 1 if full else 0  # every n-th layer full: the first full layer is layer n - 1
    if full == [i for i in range(layers) if n and (i + 1) % n == 0]:
        return n
    raise c.unsupported("a layer_types pattern other than every n-th layer full")


def _yarn(c: _Config) -> dict[str, Any]:
    """rope_scaling with rope_type (or type) yarn as ModelSpec.yarn; none or rope_type default: no field."""
    scaling = c.get("rope_scaling", default=None)
    if scaling is None or scaling == {}:
        # numerics23: transformers 5 writes it in rope_parameters (a GPT-OSS / DeepSeek config of that form read as
        # plain RoPE without a word)
        typed = _rope_scaling(c)
        if typed is None:
            return {}
        scaling = typed.raw
    if not isinstance(scaling, dict):
        raise c.error(f"field 'rope_scaling' must be an object, got {json.dumps(scaling)}")
    r = _Config(scaling, f"{c.origin} rope_scaling", c.model_type)
    kind = _kind(r)
    if kind == "default":
        return {}
    if kind != "yarn":
        raise c.unsupported(f"rope_scaling {kind!r}")
    if r.get("attention_factor", default=None) is not None:  # numerics23: it was dropped without a word
        raise c.unsupported("rope_scaling yarn with attention_factor (Megatron-Core derives the attention scale from "
                            "mscale and mscale_all_dim: yarn_rotary_pos_embedding.py @ d98e8a64)")
    yarn: dict[str, Any] = {"factor": r.number("factor", 1.0),
                            "original_max_position_embeddings": r.integer("original_max_position_embeddings"),
                            "beta_fast": r.number("beta_fast", 32.0), "beta_slow": r.number("beta_slow", 1.0),
                            "truncate": r.flag("truncate", True)}
    for key in ("mscale", "mscale_all_dim"):
        if r.get(key, default=None) is not None:
            yarn[key] = r.number(key, 0.0)
    if not math.isfinite(yarn["factor"]) or yarn["factor"] < 1:
        # hostile24: 0.5 and nan were read as plain RoPE without a word (factor > 1 false), where the launch reader
        # refuses the same factor (hostile23, megatron_model_rows._yarn_factor): Megatron-Core divides the interpolated
        # frequencies by it (yarn_rotary_pos_embedding.py inv_freq_inter @ d98e8a64); 1 is none
        raise r.error(f"yarn factor must be a finite context extension of at least 1 (1: none, plain RoPE), got "
                      f"{yarn['factor']:g}" + (": below 1 the positions are compressed, which btacalc does not model"
                                               if yarn["factor"] < 1 else ""))
    return {"yarn": yarn} if yarn["factor"] > 1 else {}


def _gpt_oss(c: _Config) -> dict[str, Any]:
    base = _common(c)
    interval = _layer_pattern(c, base["num_layers"])
    bias = c.flag("attention_bias", True)
    window = c.integer("sliding_window", default=128)
    # transformers' GptOssExperts: gate * sigmoid(1.702 gate) * (up + 1), gate and up clamped at swiglu_limit (7.0
    # in the released configs), which btacalc's clamped_quick_gelu is (Megatron's --quick-geglu with
    # --glu-linear-offset 1 and --activation-func-clamp-value 7, as Megatron-Bridge's gpt_oss_bridge.py L81-84 sets)
    limit = c.number("swiglu_limit", GPT_OSS_GLU_CLAMP)
    if limit != GPT_OSS_GLU_CLAMP:
        raise c.unsupported(f"swiglu_limit {limit:g} (btacalc models GPT-OSS's clamp of {GPT_OSS_GLU_CLAMP:g})")
    return {**base, "ffn_size": c.integer("intermediate_size"), "num_experts": c.integer("num_local_experts"),
            "top_k": c.integer("num_experts_per_tok"), "glu_activation": "clamped_quick_gelu",
            "qkv_bias": bias, "linear_bias": bias, "softmax_fp32": False,
            "attention_sinks": True, "router": "topk_softmax", "router_renormalize": False, "router_bias": True,
            # Megatron-Bridge trains GPT-OSS without a load-balancing loss (gpt_oss_bridge.py L71 @ 067f987d:
            # moe_router_load_balancing_type "none"); the config's router_aux_loss_coef is not read (_AUX_LOSS_KEYS)
            "load_balancing": "none",
            "expert_bias": True, **_yarn(c), **({"sliding_window": window, "full_attention_interval": interval} if interval != 1 else {})}


def _gelu(c: _Config) -> None:
    act = c.string("activation_function", "gelu_new")
    if act not in ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
        raise c.unsupported(f"activation_function {act!r} (GeLU only)")


def _gpt2(c: _Config) -> dict[str, Any]:
    _gelu(c)
    base = {**_common(c), "tied_embeddings": c.flag("tie_word_embeddings", True)}
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        if c.flag(flag, False):
            raise c.unsupported(flag)
    return {**base, "ffn_size": c.integer("n_inner", default=4 * base["hidden_size"]), "norm": "layernorm", "mlp": "gelu",
            "position_embedding": "learned",
            "softmax_fp32": False, "qkv_bias": True, "linear_bias": True, "mlp_bias": True,
            "max_position_embeddings": c.integer("n_positions", "max_position_embeddings")}


def _gptj(c: _Config) -> dict[str, Any]:
    _gelu(c)
    base = _common(c)
    return {**base, "ffn_size": c.integer("n_inner", default=4 * base["hidden_size"]), "norm": "layernorm", "mlp": "gelu",
            "position_embedding": "rope", "rotary_interleaved": True,  # modeling_gptj.py rotate_every_two
            "mlp_bias": True, "lm_head_bias": True, "parallel_block": True}


# llama4: Llama 4 (Scout, Maverick) as transformers v5.24.0 defines it (src/transformers/models/llama4/
# configuration_llama4.py Llama4TextConfig and its __post_init__; modeling_llama4.py): every layer a GQA attention and
# an FFN, the FFN an MoE (Llama4TextMoe: num_local_experts routed SwiGLU experts of intermediate_size, top
# num_experts_per_tok by the router's logits, each weighted by the sigmoid of its logit and applied to the expert's
# input, plus one always-on shared expert of intermediate_size, ungated) on the layers of moe_layers (default every
# interleave_moe_layer_step-th: range(step - 1, L, step)), else a dense SwiGLU of intermediate_size_mlp; a NoPE layer
# (no_rope_layers 0, default every no_rope_layer_interval-th) has no rotary embedding, no QK norm and full causal
# attention, the others rotate, L2-normalise q and k (use_qk_norm) and attend within attention_chunk_size tokens
# (layer_types chunked_attention). Its eager attention keeps the scores in the activation dtype (no fp32 softmax).
# The rotary embedding pairs adjacent dimensions (apply_rotary_emb's complex view): ModelSpec.rotary_interleaved,
# Megatron's --rotary-interleaved (rotate-half up to a fixed permutation of each q and k head: the same FLOPs).
def _llama4(c: _Config) -> dict[str, Any]:
    _silu(c)
    if c.number("router_jitter_noise", 0.0) != 0:
        raise c.unsupported("router_jitter_noise > 0")
    layers = c.integer("num_hidden_layers")
    bias = c.flag("attention_bias", False)
    moe = _llama4_moe_layers(c, layers)
    nope = _llama4_nope(c, layers)
    # null: no chunking (transformers' create_chunked_causal_mask then masks causally)
    unchunked = "attention_chunk_size" in c.raw and c.raw["attention_chunk_size"] is None
    chunk = None if unchunked else c.integer("attention_chunk_size", default=8192)
    _llama4_layer_types(c, layers, nope, chunk)
    interval, dense = _llama4_pattern(c, layers, moe)
    f = c.integer("intermediate_size")
    return {**_common(c), "ffn_size": f, "num_experts": c.integer("num_local_experts"),
            "top_k": c.integer("num_experts_per_tok"), "shared_expert_size": f, "router": "sigmoid",
            "router_renormalize": False, "router_probs_on_input": True, "moe_layer_interval": interval,
            "dense_layer_indices": dense, "qk_norm": "l2" if c.flag("use_qk_norm", True) else "none",
            "no_rope_interval": nope, "attention_chunk": chunk or 0, "qkv_bias": bias, "linear_bias": bias,
            "rotary_interleaved": True,
            "softmax_fp32": False,
            **({"dense_ffn_size": c.integer("intermediate_size_mlp")} if len(moe) < layers else {})}


def _indices(c: _Config, key: str, layers: int) -> Optional[list[int]]:
    """A list of distinct layer indices (None: not given)."""
    if c.raw.get(key) is None:
        return None
    items = c.array(key)
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in items) \
            or len(set(items)) != len(items):
        raise c.error(f"field {key!r} must list distinct layers in 0..{layers - 1}")
    return items


def _llama4_moe_layers(c: _Config, layers: int) -> set[int]:
    """The MoE layers: moe_layers, else every interleave_moe_layer_step-th (Llama4TextConfig.__post_init__)."""
    given = _indices(c, "moe_layers", layers)
    if given is not None:
        if not given:
            raise c.error("field 'moe_layers' lists no layer: a dense Llama 4 is not modelled")
        return set(given)
    step = c.integer("interleave_moe_layer_step", default=1)
    if step > layers:
        raise c.error(f"field 'interleave_moe_layer_step' = {step} leaves none of the {layers} layers an MoE layer")
    return set(range(step - 1, layers, step))


def _llama4_pattern(c: _Config, layers: int, moe: set[int]) -> tuple[int, tuple[int, ...]]:
    """The MoE layers as ModelSpec's pattern: every n-th (moe_layer_interval n), else the dense ones listed."""
    n = every_nth(moe, layers)  # hostile39: one pass (every n from 1 to L took 15 s at 10,000 layers)
    if n:
        return n, ()
    return 1, tuple(i for i in range(layers) if i not in moe)


def _llama4_nope(c: _Config, layers: int) -> int:
    """The NoPE layers as an interval n (every n-th layer; 0: none): no_rope_layers (1 rotates, 0 NoPE; at least one
    entry per layer), else no_rope_layer_interval (Llama4TextConfig.__post_init__: an empty list is the default)."""
    flags = c.array("no_rope_layers")
    if flags:
        if len(flags) < layers or any(f not in (0, 1) or isinstance(f, bool) for f in flags):
            raise c.error(f"field 'no_rope_layers' must give 1 (RoPE) or 0 (NoPE) for each of the {layers} layers")
        nope = {i for i in range(layers) if flags[i] == 0}
    else:
        n = c.integer("no_rope_layer_interval", default=4)
        nope = {i for i in range(layers) if (i + 1) % n == 0}
    if not nope:
        return 0
    n = every_nth(nope, layers)
    if n >= 2:
        return n
    raise c.unsupported("NoPE layers other than every n-th layer (n >= 2; no_rope_layers, no_rope_layer_interval)")


def _llama4_layer_types(c: _Config, layers: int, nope: int, chunk: Optional[int]) -> None:
    """An explicit layer_types list must be the one Llama4TextConfig derives: chunked_attention on the rotary layers,
    full_attention on the NoPE ones (anything else is another attention than the one planned)."""
    types = c.array("layer_types")
    if not types:
        return
    want = ["full_attention" if nope and (i + 1) % nope == 0 else "chunked_attention" for i in range(layers)]
    if types[:layers] != want or len(types) != layers:
        raise c.unsupported("a layer_types list other than chunked_attention on the rotary layers and full_attention "
                            "on the NoPE ones")
    if chunk is None:
        raise c.unsupported("layer_types chunked_attention without an attention_chunk_size")


# model_type -> builder of the ModelSpec fields
_HF_FAMILIES: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "qwen3_moe": _qwen3_moe, "qwen2_moe": _qwen2_moe, "mixtral": _mixtral, "olmoe": _olmoe,
    "deepseek_v3": _deepseek_v3, "kimi_k2": _deepseek_v3, "deepseek_v2": _deepseek_v2, "gpt_oss": _gpt_oss,
    "qwen3": _qwen3, "qwen2": _qwen2,
    "llama": _llama_like, "mistral": _mistral, "gptj": _gptj, "gpt2": _gpt2,
    "llama4": _llama4, "llama4_text": _llama4,
}
_ARCH_TO_TYPE = {
    "Qwen3MoeForCausalLM": "qwen3_moe", "Qwen2MoeForCausalLM": "qwen2_moe", "MixtralForCausalLM": "mixtral",
    "OlmoeForCausalLM": "olmoe", "DeepseekV3ForCausalLM": "deepseek_v3", "DeepseekV2ForCausalLM": "deepseek_v2",
    "GptOssForCausalLM": "gpt_oss",
    "Qwen3ForCausalLM": "qwen3", "Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral", "GPTJForCausalLM": "gptj", "GPT2LMHeadModel": "gpt2",
    "Llama4ForConditionalGeneration": "llama4", "Llama4ForCausalLM": "llama4_text",
}


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once, as `object_pairs_hook` (Python's json keeps the last of
    a repeated key and drops the others silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {clean_text(key)[:60]!r} is given twice in one object")
        out[key] = value
    return out


def json_depth(text: str) -> int:
    """The deepest nesting of [ and { in JSON text, outside strings (checked before parsing)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def model_name(path: Path) -> str:
    """A config's model name: its folder's for config.json (the Hugging Face layout), else its stem."""
    return (path.resolve().parent.name or path.stem) if path.name == "config.json" else path.stem


def load_hf_config(path: Path, name: Optional[str] = None) -> ModelSpec:
    """Read a Hugging Face transformers config.json (see `_HF_FAMILIES` for the supported model_type)."""
    try:  # type and size checked before the read (paths.read_input)
        text = read_input(path)
    except OSError as exc:
        raise BtacalcError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if json_depth(text) > MAX_DEPTH:
        raise BtacalcError(f"{path}: JSON nested deeper than {MAX_DEPTH} levels")
    try:
        raw = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        kind = input_kind(text)
        if kind:
            what = "which --model does not read" if "preset" in kind else "not a model's config.json"
            raise BtacalcError(f"{path}: {kind}, {what} (a model is a preset name, a Hugging Face config.json or a "
                               "folder holding one)" + (": give it to --hw" if "profile" in kind else "")) from None
        raise BtacalcError(f"{path}: not valid JSON: {exc.msg.removesuffix(' at')} (line {exc.lineno}, column {exc.colno})") from None
    except (RecursionError, ValueError) as exc:  # ValueError: e.g. an integer too long to convert
        raise BtacalcError(f"{path}: not valid JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise BtacalcError(f"{path}: expected a JSON object")
    return hf_config_to_spec(raw, name=name or model_name(path), origin=str(path))


def _model_type(raw: dict[str, Any], origin: str) -> str:
    mtype = raw.get("model_type")
    if mtype is not None and not isinstance(mtype, str):
        raise BtacalcError(f"{origin}: field 'model_type' must be a string, got {type(mtype).__name__}")
    archs = raw.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise BtacalcError(f"{origin}: field 'architectures' must be a list of strings")
    by_arch = next((_ARCH_TO_TYPE[a] for a in archs or [] if a in _ARCH_TO_TYPE), None)
    if mtype is not None and mtype not in _HF_FAMILIES and by_arch is not None:
        # never a silent fallback: a model_type btacalc does not know may be a different model
        raise BtacalcError(f"{origin}: unsupported model_type {mtype!r}; its architectures name a {by_arch!r} model: "
                           f"set model_type to {by_arch!r} if it is one")
    if mtype is None:
        mtype = by_arch
    if mtype not in _HF_FAMILIES:
        label = raw.get("model_type") or (archs or ["(none given)"])[0]
        raise BtacalcError(
            f"{origin}: unsupported architecture {label!r} (supported model_type: {', '.join(sorted(_HF_FAMILIES))})")
    return mtype


# semantics22: the numerics Megatron-LM has flags for (ModelSpec.numerics), under the keys transformers' configuration
# classes give them; Megatron-Bridge's AutoBridge maps the same keys (Megatron-Bridge @ 067f987df
# src/megatron/bridge/models/conversion/model_bridge.py L466-467 rms_norm_eps -> layernorm_epsilon, initializer_range ->
# init_method_std; L476-477 rope_theta -> rotary_base, partial_rotary_factor -> rotary_percent). GPT-2 and GPT-J name
# the epsilon layer_norm_epsilon; GPT-J turns rotary_dim of each head's dimensions. A key the file leaves out is None
# (a trimmed config: the launch says it trains Megatron-LM's default), not the family's default.
_NUMERIC_KEYS = {"rope_theta": ("rope_theta",), "norm_eps": ("rms_norm_eps", "layer_norm_epsilon"),
                 "init_std": ("initializer_range",)}


def _numerics(c: _Config, spec: dict[str, Any]) -> dict[str, Any]:
    rope = spec.get("position_embedding", "rope") == "rope"
    out: dict[str, Any] = {}
    read = []
    # transformers 5 writes the RoPE settings in a rope_parameters object (Megatron-Bridge reads rope_theta from either:
    # conversion/transformers_compat.py L27-60 @ 067f987df)
    params = c.raw.get("rope_parameters")
    nested = _Config(params, f"{c.origin} rope_parameters", c.model_type) if isinstance(params, dict) else None
    if rope and nested is not None:
        _check_rope_twice(c, nested)
    for field, keys in _NUMERIC_KEYS.items():
        key = next((k for k in keys if c.raw.get(k) is not None), None)
        if field == "rope_theta" and rope and key is None and nested is not None \
                and nested.raw.get("rope_theta") is not None:
            out[field] = nested.number("rope_theta", 0.0)
            read.append("rope_parameters.rope_theta")
            continue
        if key is None or (field == "rope_theta" and not rope):
            continue
        out[field] = c.number(key, 0.0)
        read.append(key)
    if rope and c.raw.get("partial_rotary_factor") is not None:
        out["rotary_percent"] = c.number("partial_rotary_factor", 1.0)
        read.append("partial_rotary_factor")
    elif rope and nested is not None and nested.raw.get("partial_rotary_factor") is not None:
        # review33: transformers 5 writes it in rope_parameters too, as the rope_theta above (a Qwen3.5-style config
        # of that form read as turning every dimension; Megatron-Bridge's Gemma 4 bridge reads it there,
        # gemma4_bridge.py L250, L283 @ 067f987df)
        out["rotary_percent"] = nested.number("partial_rotary_factor", 1.0)
        read.append("rope_parameters.partial_rotary_factor")
    elif rope and c.model_type == "gptj" and c.raw.get("rotary_dim") is not None:
        out["rotary_percent"] = rotary_share(c.integer("rotary_dim"), spec["head_dim"])  # a count: review33
        read.append("rotary_dim / head_dim")
    if rope and out.get("rotary_percent", 1) != 1:
        _check_rotary_dimensions(c, spec["head_dim"], out["rotary_percent"], read[-1])
    scaled = _scaling_numerics(c) if rope else {}
    if scaled:
        out.update(scaled)
        read.append("rope_scaling (llama3)" if "rope_scaling_factor" in scaled else "rope_scaling (linear)")
    _check_numerics(c, out, dict(zip(out, read)))
    return {"numerics": {**out, "source": f"{c.origin}: {', '.join(read)}"}} if read else {}


def _check_rotary_dimensions(c: _Config, head_dim: int, share: float, key: str) -> None:
    """hostile41: the dimensions of each head the rotary embedding turns (int(head_dim x partial_rotary_factor), or
    GPT-J's rotary_dim) are pairs: an odd count fails in transformers (modeling_gptj.py apply_rotary_pos_emb @
    00b676f8 repeats each of ceil(n / 2) frequencies twice: n + 1 against n), none is no rotary embedding. Refused
    naming the key it was read from (ModelSpec._check_rotary_share states the rule for every source)."""
    turned = rotary_dimensions(head_dim, share)
    if turns_pairs(turned):
        return
    given = (f"rotary_dim = {turned}" if key.startswith("rotary_dim") else
             f"{key} = {share!r} (int({head_dim} x {share!r}) = {turned} of head_dim {head_dim})")
    raise c.error(f"field {given}: the rotary embedding turns pairs of dimensions, so {turned} is not a model; "
                  f"give an even number of at least 2 dimensions of each head")


# hostile42: a config.json giving a RoPE setting both at the top (transformers 4's key) and in rope_parameters
# (transformers 5's) with two values was read from the top key alone, in silence. The two readers disagree there:
# transformers 5 keeps rope_parameters' own rope_theta over the top-level one (RotaryEmbeddingConfigMixin
# .convert_rope_params_to_dict, src/transformers/modeling_rope_utils.py: "Priority ... 1. Values in `rope_parameters`
# dict", setdefault), transformers 4 reads the top-level attribute, and Megatron-Bridge's rope_theta_from_hf reads
# whichever attribute the loaded config holds (Megatron-Bridge @ 067f987df
# src/megatron/bridge/models/conversion/transformers_compat.py L27-60): which the run trains depends on the library
_ROPE_TWICE = ("rope_theta", "partial_rotary_factor")


def _check_rope_twice(c: _Config, nested: _Config) -> None:
    """A RoPE setting given at the top and in rope_parameters with two values: refused naming both (_ROPE_TWICE)."""
    for key in _ROPE_TWICE:
        if c.raw.get(key) is None or nested.raw.get(key) is None:
            continue
        top, inner = c.number(key, 0.0), nested.number(key, 0.0)
        if top != inner:
            raise c.error(f"field {key!r} = {c.raw[key]!r} and rope_parameters.{key} = {nested.raw[key]!r} disagree: "
                          "transformers 5 reads rope_parameters' value, transformers 4 the top-level one; give one "
                          "(or the same value in both)")


def _check_numerics(c: _Config, out: dict[str, Any], keys: dict[str, str]) -> None:
    """The numerics' bounds (Numerics), a value out of them refused naming the config.json key it was read from.
    hostile38: `initializer_range: 2.0` was refused as "field numerics.init_std: Input should be less than 1", a
    field no config.json has (as were rms_norm_eps, rope_theta, partial_rotary_factor and a Llama 3 rope_scaling
    factor below 1)."""
    from pydantic import ValidationError

    from .model import Numerics

    try:
        Numerics.model_validate(out)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        key = keys.get(field, field).replace("rope_scaling (llama3)", "rope_scaling.factor").replace(
            "rope_scaling (linear)", "rope_scaling.factor")
        raise c.error(f"field {key!r} = {out.get(field)!r}: {err['msg'].removeprefix('Value error, ')}") from None


# freshuser22: the router's auxiliary load-balancing loss, under the key each family's config gives it (DeepSeek's
# remote code aux_loss_alpha with seq_aux, its sequence-wise variant; transformers' MoE classes router_aux_loss_coef,
# added over all tokens by load_balancing_loss_func). Megatron-Bridge's AutoBridge maps both keys to moe_aux_loss_coeff
# (Megatron-Bridge @ 067f987df src/megatron/bridge/models/conversion/model_bridge.py L483-484) and its DeepSeek bridges
# train seq_aux_loss (deepseek_v3_bridge.py L68). GPT-OSS's 0.9 is transformers' class default, which Megatron-Bridge
# does not train (gpt_oss_bridge.py L71: load balancing none): not read. A key the file leaves out is None, as the
# numerics' (the launch then says it trains Megatron-LM's default, 0).
_AUX_LOSS_KEYS = {"deepseek_v3": "aux_loss_alpha", "kimi_k2": "aux_loss_alpha", "deepseek_v2": "aux_loss_alpha",
                  "qwen3_moe": "router_aux_loss_coef",
                  "qwen2_moe": "router_aux_loss_coef", "mixtral": "router_aux_loss_coef",
                  "olmoe": "router_aux_loss_coef",
                  # llama4: the configs state 0.001, though transformers' Llama4ForCausalLM adds no such loss
                  # (modeling_llama4.py: no load_balancing_loss_func); read as the coefficient the run trains
                  "llama4": "router_aux_loss_coef", "llama4_text": "router_aux_loss_coef"}


# freshuser25: Megatron-Bridge's DeepSeek-V3 bridge trains the sequence-wise balancing loss at aux_loss_alpha, and at
# 0.0001 where the config omits it, as the released V3 configs do (Megatron-Bridge @ 067f987d
# src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py L68-71; the paper's alpha, arXiv 2412.19437 §4.2)
DEEPSEEK_V3_AUX_LOSS = {"aux_loss_coeff": 0.0001, "aux_loss_per_sequence": True}


def _aux_loss(c: _Config) -> dict[str, Any]:
    key = _AUX_LOSS_KEYS.get(c.model_type)
    if c.model_type == "deepseek_v3" and c.raw.get("aux_loss_alpha") is None:
        return dict(DEEPSEEK_V3_AUX_LOSS)
    if key is None or c.raw.get(key) is None:
        return {}
    coeff = c.number(key, 0.0)
    if not math.isfinite(coeff) or coeff < 0:
        raise c.error(f"field {key!r} must be a finite coefficient of at least 0, got {json.dumps(c.raw[key])}")
    per_sequence = key == "aux_loss_alpha" and c.flag("seq_aux", False)
    return {"aux_loss_coeff": coeff, "aux_loss_per_sequence": per_sequence}


# Megatron-Core's Llama 3.x RoPE scaling (--use-rope-scaling, --rope-scaling-factor) fixes the rest of rope_scaling at
# Llama 3.1's (Megatron-LM @ d98e8a64 megatron/core/models/common/embeddings/rotary_pos_embedding.py L92-98:
# low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192); Megatron-Bridge's Llama bridge maps
# rope_type llama3 to rope_scaling and its factor (llama_bridge.py L67-71 @ 067f987df)
LLAMA3_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _rope_scaling(c: _Config) -> Optional[_Config]:
    """The rope_scaling object (transformers 5: rope_parameters) with a type other than default, else None."""
    for key in ("rope_scaling", "rope_parameters"):
        scaling = c.raw.get(key)
        if scaling is None or scaling == {}:
            continue
        if not isinstance(scaling, dict):
            raise c.error(f"field {key!r} must be an object, got {json.dumps(scaling)}")
        r = _Config(scaling, f"{c.origin} {key}", c.model_type)
        if _kind(r) != "default":
            return r
        if key == "rope_scaling":
            return None
    return None


def _kind(r: _Config) -> str:
    rope_type, legacy = r.string("rope_type", None), r.string("type", None)
    if rope_type and legacy and rope_type != legacy:
        # hostile24: transformers reads rope_type first, Megatron-Bridge's Llama bridge `type` first
        # (llama_bridge.py L68 @ 067f987df): {"type": "linear", "rope_type": "llama3"} was planned llama3 in silence,
        # where Bridge imports the linear scaling
        raise r.error(f"rope_type {rope_type!r} and type {legacy!r} disagree: transformers reads rope_type, "
                      "Megatron-Bridge's Llama bridge type (llama_bridge.py L68): give one")
    return rope_type or legacy or "default"


def _scaling_numerics(c: _Config) -> dict[str, Any]:
    """A Llama 3.x rope_scaling (llama3: its factor, refused where the rest is not Megatron's) or a linear one (its
    integer factor), as ModelSpec.numerics fields; {} for none or another type (semantics22: the reader dropped a Llama
    3.1 / 3.2 config's scaling without a word; numerics23: a linear one too)."""
    r = _rope_scaling(c)
    if r is None or _kind(r) not in ("llama3", "linear") or c.model_type in ("gpt2", "gptj"):
        return {}  # GPT-2 / GPT-J: transformers' classes apply no rope_scaling
    if _kind(r) == "linear":
        # hostile24: Megatron-Bridge's Llama bridge passes the factor as given to its float field (llama_bridge.py
        # L72-73, gpt_provider.py L148 @ 067f987df); Megatron-Core multiplies the positions by 1 / factor
        # (rotary_pos_embedding.py L135-136 @ d98e8a64): any finite factor above 0 (a non-integer one has no
        # Megatron-LM flag: `--emit megatron` refuses it)
        factor = r.number("factor", 1.0)
        if not math.isfinite(factor) or factor <= 0:
            raise c.error(f"rope_scaling linear factor must be a finite number above 0 (Megatron-Core multiplies the "
                          f"positions by 1 / factor: rotary_pos_embedding.py L135-136 @ d98e8a64), got {factor:g}")
        return {"rope_interpolation_factor": factor} if factor != 1 else {}
    high: dict[str, Any] = {}
    for key, fixed in LLAMA3_FIXED.items():
        value = r.number(key, float(fixed))
        if value != fixed and key == "high_freq_factor" and c.model_type in ("llama4", "llama4_text"):
            # llama4: Scout's 1 (meta-llama/llama-models @ a9c89c4 models/llama4/args.py L100-107: "Only Llama-4-Scout
            # uses scaled rope", factor 16, high_freq_factor 1), which no Megatron flag states: read, and the launch
            # says it trains Megatron's 4 (output.megatron)
            high = {"rope_scaling_high_freq_factor": value}
            continue
        if value != fixed:
            raise c.unsupported(f"rope_scaling llama3 with {key} {r.number(key, 0.0):g} (Megatron-Core fixes {fixed:g}: "
                                "rotary_pos_embedding.py L92-98 @ d98e8a64)")
    return {"rope_scaling_factor": r.number("factor", 8.0), **high}


# numerics23: the rope_scaling types transformers' Llama-like classes apply (ROPE_INIT_FUNCTIONS) and what Megatron says
# of each: linear is --rotary-seq-len-interpolation-factor (numerics.rope_interpolation_factor), llama3 --use-rope-scaling
# (numerics.rope_scaling_factor), yarn --position-embedding-type yarn (ModelSpec.yarn, as GPT-OSS's). Megatron-Core @
# d98e8a64 has no dynamic NTK rotary embedding (megatron/core/models/common/embeddings: rotary, YaRN, multimodal only),
# and Megatron-Bridge's Llama bridge maps llama3 and linear only (llama_bridge.py L67-73 @ 067f987df): a dynamic,
# longrope or other type would train plain RoPE, another model, so it is refused in one line.
_MEGATRON_SCALINGS = ("linear", "llama3", "yarn")
# the families whose builder reads rope_scaling itself (_yarn) or whose transformers class ignores it (GPT-2, GPT-J)
_OWN_SCALING = ("deepseek_v3", "kimi_k2", "deepseek_v2", "gpt_oss", "gpt2", "gptj")


def _llama_like_scaling(c: _Config) -> dict[str, Any]:
    """A Llama-like config's YaRN (ModelSpec.yarn); a type Megatron cannot state refused in one line naming it."""
    r = _rope_scaling(c)
    if r is None or c.model_type in _OWN_SCALING:
        return {}
    kind = _kind(r)
    if kind == "dynamic":
        raise c.unsupported("rope_scaling 'dynamic' (dynamic NTK scaling: Megatron-Core has no such rotary embedding, "
                            "only linear, llama3 and yarn scalings)")
    if kind not in _MEGATRON_SCALINGS:
        raise c.unsupported(f"rope_scaling {kind!r} (Megatron-LM and Megatron-Bridge state linear, llama3 and yarn "
                            "scalings only)")
    return _yarn(_Config({**c.raw, "rope_scaling": r.raw}, c.origin, c.model_type)) if kind == "yarn" else {}


# hostile35: what transformers' configuration class takes for a key the file leaves out, where the reader's own
# fallback (the class's rule for the key given as null, in its __post_init__: num_key_value_heads None -> the heads,
# head_dim None -> hidden / heads, sliding_window None -> none) differs. A config without num_key_value_heads was read
# with one key-value head per head, a Qwen3 or GPT-OSS one without head_dim as hidden / heads (80 for Qwen3-4B's 2560 /
# 32, 45 for GPT-OSS's 2880 / 64), a Mistral one without sliding_window as full attention, a Qwen-MoE one with dense
# layers and no intermediate_size refused. transformers v5.24.0
# src/transformers/models/<family>/configuration_<family>.py, the line of each default: qwen3 L66-67, qwen2 L65,
# qwen3_moe L82 and L85, qwen2_moe L80, L83 and L97, mistral L67 and L79, mixtral L71, gpt_oss L56, L58 and its
# __post_init__'s YaRN L89-97, gptj L72, deepseek_v3 L88, L91, L93, L97-98, L100. kimi_k2 is remote code (its own
# class): not here.
_GPT_OSS_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                 "original_max_position_embeddings": 4096}
_LLAMA4_DEFAULTS = {"num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
                    "intermediate_size_mlp": 16384, "num_local_experts": 16, "num_experts_per_tok": 1}
_ABSENT_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128}, "qwen2": {"num_key_value_heads": 32},
    "qwen3_moe": {"num_key_value_heads": 4, "intermediate_size": 6144},
    "qwen2_moe": {"num_key_value_heads": 16, "shared_expert_intermediate_size": 5632, "intermediate_size": 5632},
    "mistral": {"num_key_value_heads": 8, "sliding_window": 4096}, "mixtral": {"num_key_value_heads": 8},
    "gpt_oss": {"num_key_value_heads": 8, "head_dim": 64}, "gptj": {"rotary_dim": 64},
    "deepseek_v3": {"n_shared_experts": 1, "routed_scaling_factor": 2.5, "q_lora_rank": 1536, "n_group": 8,
                    "topk_group": 4, "first_k_dense_replace": 3},
    # freshuser22: configuration_deepseek_v2.py's class fields (n_shared_experts 2, q_lora_rank 1536)
    "deepseek_v2": {"n_shared_experts": 2, "q_lora_rank": 1536},
    # llama4: configuration_llama4.py Llama4TextConfig's fields (the text_config of a llama4 config.json)
    "llama4": _LLAMA4_DEFAULTS, "llama4_text": _LLAMA4_DEFAULTS,
}


def with_class_defaults(raw: dict[str, Any], model_type: str) -> dict[str, Any]:
    """`raw` with the keys it leaves out that transformers' class of `model_type` defaults otherwise than the reader
    (`_ABSENT_DEFAULTS`); a key given (null too) is kept. GPT-OSS without rope_scaling or rope_parameters takes the
    class's YaRN."""
    out = {**_ABSENT_DEFAULTS.get(model_type, {}), **raw}
    if model_type == "gpt_oss" and "rope_scaling" not in raw and "rope_parameters" not in raw:
        out["rope_parameters"] = dict(_GPT_OSS_ROPE)
    return out


def hf_config_to_spec(raw: dict[str, Any], name: str, origin: str) -> ModelSpec:
    mtype = _model_type(raw, origin)
    source = origin
    if mtype == "llama4":
        raw, origin = _text_config(raw, origin), f"{origin} text_config"
        source = f"{source} (text_config, the text model: vision_config's vision encoder and projector are not planned)"
    config = _Config(with_class_defaults(raw, mtype), origin, mtype)
    spec = {**_HF_FAMILIES[mtype](config), **_llama_like_scaling(config), **_dropouts(config)}
    return validate_model({"name": name, "source": source, **spec, **_numerics(config, spec), **_aux_loss(config),
                           "hf_model_type": mtype}, origin=origin)


def _text_config(raw: dict[str, Any], origin: str) -> dict[str, Any]:
    """llama4: the text model's fields of a multimodal config.json (Llama4Config: text_config, a Llama4TextConfig,
    beside vision_config), with the file's tie_word_embeddings where text_config gives none (Llama4Config's own field,
    default False)."""
    text = raw.get("text_config")
    if not isinstance(text, dict):
        raise BtacalcError(f"{origin}: field 'text_config' must be an object (model_type llama4 keeps the text model's "
                           f"fields there), got {json.dumps(text)[:60]}")
    kind = text.get("model_type")
    if kind is not None and kind != "llama4_text":
        raise BtacalcError(f"{origin}: text_config has model_type {json.dumps(kind)[:60]}; a llama4 config's text "
                           "model is llama4_text")
    tie = raw.get("tie_word_embeddings")
    return {**({"tie_word_embeddings": tie} if tie is not None else {}), **text}
