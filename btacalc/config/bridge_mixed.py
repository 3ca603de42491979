"""Megatron-Bridge's mixed-precision presets as data (btacalc/data/bridge_mixed_precision.toml, written by
tools/bridge_mixed_precision.py from src/megatron/bridge/training/mixed_precision.py at the commit it names), and the
mixed_precision section written whole.

bridgemp: a plan whose mixed precision differs from its preset's (an FP8 plan without the parameter gather the preset
turns on, `--grad-bytes 2`, ...) was written `mixed_precision=<preset>` then `mixed_precision.<field>=`, which Hydra
cannot apply (it sets no field below a string: "Could not override 'mixed_precision.fp8_param_gather'"; Bridge
resolves the name only later, config.py L2012-2016 @ 067f987d). `++mixed_precision._target_=<MixedPrecisionConfig>`
replaces the name with a dict (OmegaConf.update turns a value it must go below into an empty mapping) and Bridge
builds the class from the section's fields (training/utils/omegaconf_utils.py L478-486 instantiate), so the section
is written whole: every field of the preset, with the plan's values over it (`whole_section`).
"""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BtacalcError
from ..paths import package_data
from .text import cut as _cut

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BRIDGE_MIXED_FILE = "bridge_mixed_precision.toml"
SECTION = "mixed_precision"
TARGET = "_target_"
CALL = "_call_"
# MixedPrecisionConfig.__setattr__ keeps each of these equal to its gather switch (mixed_precision.py L77-95): the
# dataclass __init__ sets fp8_param then fp8_param_gather (L60-61; L65-66), and the class attribute of the other
# name exists throughout, so after construction and after every later assignment of the switch the two are one
SYNCED = {"fp8_param": "fp8_param_gather", "fp4_param": "fp4_param_gather"}


@dataclass(frozen=True)
class TorchName:
    """A torch attribute a preset names (`torch.bfloat16`), written as Megatron's YAML writes a torch dtype: a
    `_target_` with `_call_: false`, which Bridge's instantiate resolves without calling (Megatron-LM @ d98e8a64
    megatron/training/config/yaml_utils.py L97-103; instantiate_utils.py L293-305)."""

    name: str


class MixedField(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    annotation: str
    default: str  # the source text of the default
    line: int


class PresetSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str
    value: str  # the source text of the value
    line: int


class MixedPreset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    line: int  # the def line
    base: str  # the preset it starts from; "" for MixedPrecisionConfig's defaults
    sets: tuple[PresetSet, ...]


class BridgeMixedPresets(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bridge: str = Field(pattern=r"^NVIDIA-NeMo/Megatron-Bridge@[0-9a-f]{40}$")
    path: str
    config_class: str
    class_line: int
    fields: dict[str, MixedField]  # in the dataclass's order
    presets: dict[str, MixedPreset]


@functools.lru_cache(maxsize=1)
def bridge_mixed_presets() -> BridgeMixedPresets:
    with package_data(BRIDGE_MIXED_FILE).open("rb") as fh:
        return BridgeMixedPresets.model_validate(tomllib.load(fh))


def source_value(text: str) -> Any:
    """A value's source text as the value: a literal, or a `torch.<name>` as TorchName."""
    node = ast.parse(text, mode="eval").body
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return TorchName(text)
    return ast.literal_eval(node)


def preset_values(name: str) -> dict[str, Any]:
    """Every MixedPrecisionConfig field of the preset `name` (hyphens read as underscores, mixed_precision.py L443),
    in the dataclass's order: the defaults, then what the presets it starts from set, then its own."""
    data = bridge_mixed_presets()
    chain: list[MixedPreset] = []
    key = name.replace("-", "_")
    while key:
        if key not in data.presets:
            raise BtacalcError(f"{SECTION} {name!r}: not one of Megatron-Bridge's presets "
                               f"({', '.join(data.presets)}; {data.path})")
        chain.insert(0, data.presets[key])
        key = data.presets[key].base
    values = {field: source_value(f.default) for field, f in data.fields.items()}
    for preset in chain:
        for row in preset.sets:
            values[row.field] = source_value(row.value)
    return _synced(values)


def _synced(values: dict[str, Any]) -> dict[str, Any]:
    for field, switch in SYNCED.items():
        values[field] = values[switch]
    return values


# The MXFP8 presets reuse the gradient buffer for the parameter all-gather (mixed_precision.py L265, L280), which
# Megatron-Core's DDP config refuses without the FP8 parameter gather ("Reuse grad buffer only when keeping params in
# MXFP8.", Megatron-LM @ d98e8a64 megatron/core/distributed/distributed_data_parallel_config.py L259-260; Bridge copies
# both fields onto it, mixed_precision.py L138-164): a plan without the gather goes without the reuse, as Megatron-LM's
# launch does (--reuse-grad-buf-for-mxfp8-param-ag, store_true: arguments.py L3080 @ d98e8a64)
REUSE_NEEDS_GATHER = ("reuse_grad_buf_for_mxfp8_param_ag", "fp8_param_gather")


def section_values(name: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Every field of the preset `name` with `changes` (field -> value) over it, the synonyms kept equal and the
    gradient buffer's reuse off without the gather (REUSE_NEEDS_GATHER)."""
    values = preset_values(name)
    unknown = [f for f in changes if f not in values]
    if unknown:
        raise BtacalcError(f"{SECTION}.{unknown[0]}: no field of MixedPrecisionConfig")
    values = _synced({**values, **changes})
    reuse, gather = REUSE_NEEDS_GATHER
    if reuse not in changes and values[reuse] and not values[gather]:
        values[reuse] = False
    return values


def whole_section(name: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The mixed_precision section written whole: dotted keys below the section (a TorchName as its `_target_` and
    `_call_`), the class first, then every field (section_values)."""
    values = section_values(name, changes)
    out: dict[str, Any] = {f"{SECTION}.{TARGET}": bridge_mixed_presets().config_class}
    for field, value in values.items():
        if isinstance(value, TorchName):
            out[f"{SECTION}.{field}.{TARGET}"] = value.name
            out[f"{SECTION}.{field}.{CALL}"] = False
        else:
            out[f"{SECTION}.{field}"] = value
    return out


def read_whole_section(overrides: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The fields of a mixed_precision section given whole (`mixed_precision._target_`), by name, a torch attribute
    (`<field>._target_` with `<field>._call_` false) as TorchName; None when the section has no `_target_`. Another
    class is refused, as Bridge would build it from the fields."""
    key = f"{SECTION}.{TARGET}"
    if key not in overrides:
        return None
    target = bridge_mixed_presets().config_class
    if overrides[key] != target:
        raise BtacalcError(f"{key}={_cut(repr(overrides[key]))}: btacalc reads the mixed_precision section as "
                           f"Megatron-Bridge's MixedPrecisionConfig ({target}), which Bridge builds from it; "
                           "another class is not read")
    out: dict[str, Any] = {}
    for name, value in overrides.items():
        head, _, field = name.partition(".")
        if head != SECTION or field == TARGET:
            continue
        field, _, below = field.partition(".")
        if below == TARGET and overrides.get(f"{SECTION}.{field}.{CALL}") is False and isinstance(value, str):
            out[field] = TorchName(value)
        elif not below:
            out[field] = value
    return out
