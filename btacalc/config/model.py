"""Model specifications: built-in presets, Hugging Face ``config.json`` files, CLI overrides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import BtacalcError, first_validation_error
from .paths import presets_dir

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib  # type: ignore[no-redef]


class PublishedParams(BaseModel):
    """Parameter counts as published by the model's authors, for validation."""

    model_config = ConfigDict(extra="forbid")
    total: Optional[float] = None
    active: Optional[float] = None
    non_embedding: Optional[float] = None
    source: str = ""


class ModelSpec(BaseModel):
    """A decoder-only transformer, dense or Mixture-of-Experts (no shared experts)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    source: str = Field(description="where the architecture numbers come from (URL)")
    hidden_size: int = Field(gt=0, description="h")
    num_layers: int = Field(gt=0, description="L")
    num_heads: int = Field(gt=0, description="a")
    num_kv_heads: int = Field(gt=0, description="a_kv")
    head_dim: int = Field(gt=0, description="d_h")
    vocab_size: int = Field(gt=0, description="V")
    ffn_size: int = Field(gt=0, description="f: expert width for MoE, MLP width for dense")
    num_experts: int = Field(0, ge=0, description="E; 0 for a dense model")
    top_k: int = Field(0, ge=0, description="k; 0 for a dense model")
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    mlp: Literal["swiglu", "gelu"] = "swiglu"
    qk_norm: Literal["none", "head", "full"] = "none"
    position_embedding: Literal["rope", "learned"] = "rope"
    dropout: bool = False
    qkv_bias: bool = False
    linear_bias: bool = False
    tied_embeddings: bool = False
    softmax_fp32: bool = Field(True, description="eager attention computes softmax in fp32 (HF transformers); "
                               "False: 16-bit (Megatron fused softmax, Korthikanti's count)")
    max_position_embeddings: Optional[int] = Field(None, gt=0)
    published_params: Optional[PublishedParams] = None

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) is not divisible by num_kv_heads ({self.num_kv_heads})"
            )
        if self.is_moe:
            if self.top_k < 1:
                raise ValueError("an MoE model needs top_k >= 1")
            if self.top_k > self.num_experts:
                raise ValueError(f"top_k ({self.top_k}) is larger than the number of experts ({self.num_experts})")
            if self.mlp != "swiglu":
                raise ValueError("MoE experts are modelled as SwiGLU only")
        elif self.top_k:
            raise ValueError("top_k is set but num_experts is 0 (dense model)")
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def features(self) -> dict[str, Any]:
        """The architecture features the formula catalogue's `when` clauses test."""
        return {
            "norm": self.norm,
            "mlp": self.mlp,
            "moe": self.is_moe,
            "dropout": self.dropout,
            "qkv_bias": self.qkv_bias,
            "linear_bias": self.linear_bias,
            "qk_norm": self.qk_norm,
            "position_embedding": self.position_embedding,
            "tied_embeddings": self.tied_embeddings,
            "softmax_fp32": self.softmax_fp32,
        }

    def symbol_values(self) -> dict[str, int]:
        """Values of the architecture symbols (h, a, a_kv, d_h, E, k, f, L, V)."""
        return {
            "h": self.hidden_size,
            "a": self.num_heads,
            "a_kv": self.num_kv_heads,
            "d_h": self.head_dim,
            "E": max(self.num_experts, 1),
            "k": max(self.top_k, 1),
            "f": self.ffn_size,
            "L": self.num_layers,
            "V": self.vocab_size,
        }

    def dense_equivalent(self) -> "ModelSpec":
        """The dense model with the same active parameters: one SwiGLU FFN of width k*f.

        This is the reference of the BTA paper's comparison ("dense model with the same active
        parameters"); the router disappears, attention and embeddings are unchanged.
        """
        if not self.is_moe:
            return self
        return self.model_copy(
            update={
                "name": f"{self.name}-dense-equivalent",
                "num_experts": 0,
                "top_k": 0,
                "ffn_size": self.top_k * self.ffn_size,
                "published_params": None,
            }
        )

    def with_overrides(
        self,
        experts: Optional[int] = None,
        top_k: Optional[int] = None,
        expert_ffn: Optional[int] = None,
        fixed_active: bool = False,
    ) -> "ModelSpec":
        """Apply the CLI overrides; `fixed_active` keeps k*f constant when top-k changes."""
        if (experts is not None or top_k is not None or expert_ffn is not None or fixed_active) and not self.is_moe:
            raise BtacalcError(f"model {self.name!r} is dense: --experts/--top-k/--expert-ffn/--fixed-active need an MoE model")
        for flag, v in (("--experts", experts), ("--top-k", top_k), ("--expert-ffn", expert_ffn)):
            if v is not None and v < 1:
                raise BtacalcError(f"{flag} must be a positive integer, got {v}")
        if fixed_active and expert_ffn is not None:
            raise BtacalcError("--fixed-active and --expert-ffn both set the expert width: give one")
        update: dict[str, Any] = {}
        if experts is not None:
            update["num_experts"] = experts
        if top_k is not None:
            update["top_k"] = top_k
        if expert_ffn is not None:
            update["ffn_size"] = expert_ffn
        if fixed_active and top_k is not None:
            active_width = self.top_k * self.ffn_size
            if active_width % top_k:
                raise BtacalcError(
                    f"--fixed-active: k*f = {self.top_k}*{self.ffn_size} = {active_width} is not divisible by top-k {top_k}"
                )
            update["ffn_size"] = active_width // top_k
        if not update:
            return self
        changed = ", ".join(f"{k}={v}" for k, v in update.items())
        update["name"] = f"{self.name} ({changed})"
        update["published_params"] = None
        data = self.model_dump()
        data.update(update)
        return validate_model(data, origin="overrides")


def validate_model(data: dict[str, Any], origin: str) -> ModelSpec:
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise BtacalcError(f"{origin}: {first_validation_error(exc)}") from None


# --- presets ---------------------------------------------------------------------------------

def preset_names() -> list[str]:
    return sorted(p.stem for p in presets_dir().glob("*.toml"))


def load_preset(name: str) -> ModelSpec:
    path = presets_dir() / f"{name}.toml"
    if not path.is_file():
        raise BtacalcError(f"unknown model {name!r} (built-in: {', '.join(preset_names())}; or give a config.json path)")
    return validate_model(tomllib.loads(path.read_text(encoding="utf-8")), origin=f"preset {name}")


def resolve_model(name_or_path: str) -> ModelSpec:
    """A preset name, or the path of a Hugging Face config.json (or a folder holding one)."""
    path = Path(name_or_path)
    if name_or_path in preset_names():
        return load_preset(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return load_hf_config(path)
    if path.suffix == ".json" or "/" in name_or_path:
        raise BtacalcError(f"model file {name_or_path!r} not found")
    return load_preset(name_or_path)


# --- Hugging Face config.json ----------------------------------------------------------------

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
