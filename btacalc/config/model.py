"""Model specifications (`ModelSpec`) and the overrides a user may apply to them.

Loading presets and Hugging Face ``config.json`` files is in `btacalc.config.presets` and `btacalc.config.hf`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import BtacalcError, first_validation_error


@dataclass(frozen=True)
class LayerKind:
    """A group of identical decoder layers: how many, and how they differ from the model's defaults
    (catalogue features such as `moe`, and symbol values such as the FFN width `f`)."""

    name: str
    count: int
    features: tuple[tuple[str, Any], ...] = ()
    symbols: tuple[tuple[str, int], ...] = ()


class PublishedParams(BaseModel):
    """Parameter counts as published by the model's authors, for validation."""

    model_config = ConfigDict(extra="forbid", frozen=True)
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

    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """The decoder stack as groups of identical layers (one group: every layer alike)."""
        return (LayerKind("decoder", self.num_layers),)

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
            raise BtacalcError(f"model {self.name!r} is dense: {{experts}}/{{top_k}}/{{expert_ffn}}/{{fixed_active}} "
                               "need an MoE model")
        for name, v in (("experts", experts), ("top_k", top_k), ("expert_ffn", expert_ffn)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise BtacalcError(f"{{{name}}} must be a positive integer, got {v!r}")
        if fixed_active and expert_ffn is not None:
            raise BtacalcError("{fixed_active} and {expert_ffn} both set the expert width: give one")
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
                    f"{{fixed_active}}: k*f = {self.top_k}*{self.ffn_size} = {active_width} is not divisible by "
                    f"{{top_k}} {top_k}"
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
