"""The field names of Megatron-Bridge's config (btacalc/data/bridge_fields.toml): which `section.field` of a recipe's
overrides Bridge has, so that a misspelt name is refused with the nearest real one instead of being listed as "not
modelled" and planned without (a `model.tensor_model_paralell_size=2` planned at TP 1).

The file is written by tools/bridge_fields.py from ConfigContainer (src/megatron/bridge/training/config.py) at the
Megatron-Bridge commit it names and the Megatron-Core classes of the Megatron-LM submodule at that commit: per
section, the union of the dataclass fields of every class the section may hold (a recipe's model is one of ~50
providers, which btacalc does not see). Only the first name below a section is checked: deeper keys
(`model.transformer.num_layers` of a GPTModelConfig, a dict field's keys) are the field's own values.
"""

from __future__ import annotations

import functools
import sys

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BtacalcError
from ..paths import package_data
from .text import nearest_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BRIDGE_FIELDS_FILE = "bridge_fields.toml"


class BridgeSection(BaseModel):
    """One ConfigContainer field: its annotation, the classes whose fields it holds and their names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    annotation: str
    free: bool  # a dict: any key below the section is Bridge's (env_vars)
    plain_value: bool  # admits a plain value for the section itself (mixed_precision: a recipe's name)
    classes: tuple[str, ...]  # "Megatron-Bridge@commit:path:Class", the provenance of `fields`
    fields: frozenset[str]
    # the fields whose annotation admits keys below them (a dict, Any or a dataclass: model.tp_comm_overlap_cfg)
    nested_fields: frozenset[str]


class BridgeFields(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bridge: str = Field(pattern=r"^NVIDIA-NeMo/Megatron-Bridge@[0-9a-f]{40}$")
    megatron_lm: str = Field(pattern=r"^NVIDIA/Megatron-LM@[0-9a-f]{40}$")
    container: str
    sections: dict[str, BridgeSection]  # in ConfigContainer's order

    @property
    def short(self) -> str:
        return f"Megatron-Bridge@{self.bridge.split('@')[1][:8]}"


@functools.lru_cache(maxsize=1)
def bridge_fields() -> BridgeFields:
    with package_data(BRIDGE_FIELDS_FILE).open("rb") as fh:
        return BridgeFields.model_validate(tomllib.load(fh))


def _did_you_mean(name: str, names: frozenset[str] | list[str], prefix: str = "") -> str:
    near = nearest_name(name, names)
    return f": did you mean {prefix}{near}?" if near else ""


def check_bridge_key(key: str, source: str) -> None:
    """Refuse, in one line naming the nearest real name, a dotted override key whose section is not one of
    ConfigContainer's or whose field is not one of that section's (bridge_fields.toml). A section given whole
    (`mixed_precision=bf16_mixed`, `comm_overlap: null`) and the keys below a free section or a field pass."""
    data = bridge_fields()
    if "" in key.split("."):  # hostile22: YAML's `model: {"": 1}` was read as the section and listed "ignored model."
        raise BtacalcError(f"{source}: {key!r} has an empty name (a YAML key \"\" or a dot at an end or doubled), which "
                           f"no field of Megatron-Bridge's config has ({data.short})")
    section, _, rest = key.partition(".")
    entry = data.sections.get(section)
    if entry is None:
        raise BtacalcError(f"{source}: {key} is not a key of Megatron-Bridge's config: {section} is not one of its "
                           f"sections ({data.short} ConfigContainer){_did_you_mean(section, list(data.sections))}")
    # the section's class (bridge_codec: comm_overlap bridgeparse, mixed_precision bridgemp), which reads it
    if not rest or entry.free or key in ("comm_overlap._target_", "mixed_precision._target_"):
        return
    name = rest.split(".")[0]
    if name not in entry.fields:
        where = f"{key}: {section}.{name}" if key != f"{section}.{name}" else key
        raise BtacalcError(f"{source}: {where} is not a field of Megatron-Bridge's {section} config "
                           f"({data.short}, btacalc/data/{BRIDGE_FIELDS_FILE})"
                           f"{_did_you_mean(name, entry.fields, section + '.')}")
