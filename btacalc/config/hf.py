"""Hugging Face transformers ``config.json`` files -> `ModelSpec`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import BtacalcError
from .model import ModelSpec, validate_model

# model_type -> how its fields map onto ModelSpec
_HF_FAMILIES: dict[str, dict[str, Any]] = {
    "qwen3_moe": {"experts": "num_experts", "ffn": "moe_intermediate_size", "qk_norm": "head"},
    "mixtral": {"experts": "num_local_experts", "ffn": "intermediate_size", "qk_norm": "none"},
    "olmoe": {"experts": "num_experts", "ffn": "intermediate_size", "qk_norm": "full"},
    "qwen3": {"experts": None, "ffn": "intermediate_size", "qk_norm": "head"},
    "qwen2": {"experts": None, "ffn": "intermediate_size", "qk_norm": "none", "qkv_bias": True},
    "llama": {"experts": None, "ffn": "intermediate_size", "qk_norm": "none"},
    "mistral": {"experts": None, "ffn": "intermediate_size", "qk_norm": "none"},
}
_ARCH_TO_TYPE = {
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "MixtralForCausalLM": "mixtral",
    "OlmoeForCausalLM": "olmoe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen2ForCausalLM": "qwen2",
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
}


def load_hf_config(path: Path) -> ModelSpec:
    """Read a Hugging Face transformers config.json (Qwen3-MoE, Mixtral, OLMoE, Llama, Qwen2/3)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise BtacalcError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BtacalcError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(raw, dict):
        raise BtacalcError(f"{path}: expected a JSON object")
    return hf_config_to_spec(raw, name=path.parent.name or path.stem, origin=str(path))


def hf_config_to_spec(raw: dict[str, Any], name: str, origin: str) -> ModelSpec:
    mtype = raw.get("model_type")
    if mtype not in _HF_FAMILIES:
        for arch in raw.get("architectures") or []:
            if arch in _ARCH_TO_TYPE:
                mtype = _ARCH_TO_TYPE[arch]
                break
    if mtype not in _HF_FAMILIES:
        label = raw.get("model_type") or (raw.get("architectures") or ["(none given)"])[0]
        raise BtacalcError(
            f"{origin}: unsupported architecture {label!r} (supported model_type: {', '.join(sorted(_HF_FAMILIES))})"
        )
    fam = _HF_FAMILIES[mtype]

    def need(key: str) -> Any:
        if key not in raw or raw[key] is None:
            raise BtacalcError(f"{origin}: field {key!r} is missing (needed for model_type {mtype})")
        return raw[key]

    h, heads = need("hidden_size"), need("num_attention_heads")
    head_dim = raw.get("head_dim")
    if head_dim is None:
        if not isinstance(h, int) or not isinstance(heads, int) or heads <= 0 or h % heads:
            raise BtacalcError(f"{origin}: hidden_size ({h}) is not divisible by num_attention_heads ({heads}) and no head_dim is given")
        head_dim = h // heads
    if fam["experts"] is not None:
        if raw.get("shared_expert_intermediate_size") or raw.get("n_shared_experts"):
            raise BtacalcError(f"{origin}: shared experts are not modelled yet")
        if mtype == "qwen3_moe" and (raw.get("mlp_only_layers") or raw.get("decoder_sparse_step", 1) != 1):
            raise BtacalcError(f"{origin}: models mixing dense and MoE layers (mlp_only_layers, decoder_sparse_step) are not modelled yet")
        experts, top_k = need(fam["experts"]), need("num_experts_per_tok")
    else:
        experts, top_k = 0, 0
    data = {
        "name": name,
        "source": origin,
        "hidden_size": h,
        "num_layers": need("num_hidden_layers"),
        "num_heads": heads,
        "num_kv_heads": raw.get("num_key_value_heads") or heads,
        "head_dim": head_dim,
        "vocab_size": need("vocab_size"),
        "ffn_size": need(fam["ffn"]),
        "num_experts": experts,
        "top_k": top_k,
        "qk_norm": fam["qk_norm"],
        "qkv_bias": bool(raw.get("attention_bias", fam.get("qkv_bias", False))),
        "tied_embeddings": bool(raw.get("tie_word_embeddings", False)),
        "max_position_embeddings": raw.get("max_position_embeddings"),
    }
    if raw.get("hidden_act", "silu") not in ("silu", "swish"):
        raise BtacalcError(f"{origin}: hidden_act {raw.get('hidden_act')!r} is not modelled (SwiGLU/silu only for {mtype})")
    return validate_model(data, origin=origin)
