"""Megatron-Bridge's model bridges as data (btacalc/data/bridge_model_bridges.toml): the provider fields the bridge
AutoBridge picks for a Hugging Face config sets over GPTModelProvider's defaults, which a Bridge run that leaves them
out trains with. AutoBridge picks by the config's architecture class; btacalc keys the table by the config's
model_type (ModelSpec.hf_model_type), each entry naming the architecture that model_type's config.json gives (Kimi-K2's
is DeepSeek-V3's). Until this table (review24's note), a Bridge file for DeepSeek-V3 or Kimi-K2 that left the loss
fields out was planned with the native fused cross-entropy, where their bridge sets TransformerEngine's."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Collection, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from .named_tables import load_named_tables
from .text import CleanText

ProviderValue = Union[bool, int, float, str]


class ModelBridge(BaseModel):
    """One model bridge: its class, the provider fields it sets (Megatron-LM destinations) and where they are set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the Hugging Face model_type of the configs the entry is for (btacalc's key)")
    architecture: str = Field(description="the architecture class those configs name, which AutoBridge dispatches on")
    bridge: str = Field(description="Megatron-Bridge's class registered for that architecture")
    source: CleanText
    provider: dict[str, ProviderValue] = Field(description="Megatron-LM destination -> the value the bridge sets")


# The model_types btacalc reads (config/hf.py) whose architecture no bridge at the pin registers (the table's header):
# a Bridge file planned under such a --model is one AutoBridge would not build
UNBRIDGED = {"mixtral": "MixtralForCausalLM", "gpt2": "GPT2LMHeadModel", "gptj": "GPTJForCausalLM",
             "qwen2_moe": "Qwen2MoeForCausalLM", "llama4": "Llama4ForConditionalGeneration",
             "llama4_text": "Llama4ForCausalLM"}


@lru_cache(maxsize=1)
def model_bridges() -> dict[str, ModelBridge]:
    return load_named_tables("bridge_model_bridges.toml", "model_type", ModelBridge)


def _bridge(hf_model_type: Optional[str]) -> Optional[ModelBridge]:
    """The listed model bridge for `hf_model_type` (None without one, or for a model not from a config.json)."""
    return model_bridges().get(hf_model_type) if hf_model_type else None


def bridge_provider_defaults(hf_model_type: Optional[str]) -> dict[str, Any]:
    """The launch arguments the model bridge for `hf_model_type` sets (none for a model_type without a listed
    bridge, or a model not from a Hugging Face config)."""
    bridge = _bridge(hf_model_type)
    return dict(bridge.provider) if bridge is not None else {}


def bridge_provider_note(hf_model_type: Optional[str], given: Collection[str], key: Any) -> Optional[str]:
    """What the plan took from the model bridge where the run leaves the fields out and --model's architecture does
    not give them (`given`: the destinations the run and the architecture give; `key` gives a destination's Bridge
    key), or None when it took nothing."""
    bridge = _bridge(hf_model_type)
    if bridge is None and hf_model_type in UNBRIDGED:
        return (f"model_type {hf_model_type}: Megatron-Bridge @ 067f987d has no model bridge for its architecture "
                f"({UNBRIDGED[hf_model_type]}), so AutoBridge refuses its Hugging Face config; planned with "
                "GPTModelProvider's defaults where the run leaves a field out")
    if bridge is None:
        return None
    taken = [dest for dest in bridge.provider if dest not in given]
    if not taken:
        return None
    fields = ", ".join(f"{key(dest) or dest}={str(bridge.provider[dest]).lower()}" for dest in taken)
    return (f"{fields}: as Megatron-Bridge's {bridge.bridge} sets them for a {bridge.architecture} config (model_type "
            f"{bridge.name}) where the run leaves them out ({bridge.source})")
