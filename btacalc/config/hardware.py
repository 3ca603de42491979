"""Hardware profiles: one TOML file per device in ``hardware_profiles/``, every number with its source.

A profile has five sections, kept apart on purpose (cf. Calculon's system/application split):

- ``chip``: datasheet numbers of one device (cores, peak FLOP/s, on-chip SRAM, power);
- ``memory``: the memory the device trains from, off the chip (HBM on a GPU; MemoryX and the
  system I/O link that streams weights on a wafer);
- ``system``: topology and system-level numbers (devices per node, scale-up and scale-out links,
  system power, weight-streaming buffers);
- ``calibration``: named correction factors (compute efficiency, usable memory fraction, per-tile
  overhead), each an estimate with its reasoning or a calibrated value with what it was fitted to;
- ``defaults``: run-policy defaults (memory model, attention kernel, recomputation) with their reason.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import BtacalcError, DataError, first_validation_error
from ..paths import data_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class Number(BaseModel):
    """A hardware number with its provenance.

    kind: `published` (vendor datasheet or paper), `derived` (computed from published numbers;
    `note` gives the arithmetic), `estimate` (not published; `note` says how it was made),
    `calibrated` (fitted; `fitted_to` names the points or runs it was fitted on).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float = Field(ge=0)
    kind: Literal["published", "derived", "estimate", "calibrated"]
    source: str
    note: str = ""
    fitted_to: list[str] = Field(default_factory=list, description="calibrated numbers: what they were fitted on")

    @field_validator("source")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"source must be a URL, got {v!r}")
        return v

    @model_validator(mode="after")
    def _explained(self) -> "Number":
        if self.kind != "published" and len(self.note.strip()) < 10:
            raise ValueError(f"a {self.kind} number needs a note saying how it was obtained")
        if self.kind == "calibrated" and not self.fitted_to:
            raise ValueError("a calibrated number needs fitted_to: the points or runs it was fitted on")
        return self


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Chip(_Section):
    cores: Number = Field(description="cores (wafer) or streaming multiprocessors (GPU)")
    peak_flops_per_s: Number = Field(description="dense 16-bit peak")
    sram_bytes: Number
    sram_bytes_per_core: Number
    sram_bandwidth_bytes_per_s: Optional[Number] = None
    power_w: Number


class Memory(_Section):
    offchip_memory_bytes: Number = Field(description="HBM (GPU) or MemoryX capacity (wafer)")
    offchip_bandwidth_bytes_per_s: Number = Field(description="HBM bandwidth (GPU) or the weight-streaming "
                                                  "system I/O link (wafer)")


class System(_Section):
    devices_per_node: Optional[Number] = Field(None, description="devices sharing one scale-up domain")
    scaleup_bandwidth_bytes_per_s: Optional[Number] = Field(
        None, description="device-to-device bandwidth inside a node (NVLink), per device per direction")
    scaleout_bandwidth_bytes_per_s: Optional[Number] = Field(
        None, description="network bandwidth between nodes (InfiniBand NIC), per device per direction")
    system_power_w: Optional[Number] = Field(
        None, description="power of the whole system per device (host CPUs, NICs, switches, fans), for tokens/s "
        "per kW; defaults to the chip's power_w")
    weight_buffer_units: Optional[Number] = Field(
        None, description="weight streaming: units of weights (and of gradients) buffered on-chip at once")


class Calibration(_Section):
    usable_memory_fraction: Number = Field(description="share of the capacity tensors may use")
    compute_efficiency: Optional[Number] = Field(
        None, description="achieved share of peak FLOP/s on matmul phases (estimate or calibrated)")
    tile_overhead_s: Optional[Number] = Field(
        None, description="fixed cost per attention tile per layer per step (BTA tiling overhead)")


class Defaults(_Section):
    memory_model: Literal["weight_streaming", "resident"] = Field(
        description="weight_streaming: weights and optimizer off-chip, activations in on-chip SRAM (Cerebras);"
        " resident: weights, gradients, optimizer and activations in device memory (GPU HBM)")
    attention: Literal["eager", "flash"]
    recompute: Literal["none", "selective", "full"]
    note: str = Field(min_length=10, description="why these defaults")


SECTIONS = ("chip", "memory", "system", "calibration")


class HardwareProfile(BaseModel):
    """A device. Field names carry units; every number is a `Number` with a source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    display_name: str
    family: Literal["wse", "gpu"]
    defaults: Defaults
    chip: Chip
    memory: Memory
    system: System = System()
    calibration: Calibration

    @model_validator(mode="after")
    def _consistent(self) -> "HardwareProfile":
        if not 0 < self.calibration.usable_memory_fraction.value <= 1:
            raise ValueError("calibration.usable_memory_fraction.value must be in (0, 1]")
        if self.defaults.memory_model == "weight_streaming" and self.system.weight_buffer_units is None:
            raise ValueError("weight_streaming profiles need system.weight_buffer_units")
        if self.family == "wse" and self.defaults.memory_model != "weight_streaming":
            raise ValueError("wse profiles declare defaults.memory_model = 'weight_streaming' (resident is a run option)")
        for section, field in (("chip", "cores"), ("chip", "sram_bytes"), ("memory", "offchip_memory_bytes"),
                               ("chip", "peak_flops_per_s")):
            if getattr(getattr(self, section), field).value <= 0:
                raise ValueError(f"{section}.{field}.value must be positive")
        return self

    @property
    def power_per_device_w(self) -> float:
        return (self.system.system_power_w or self.chip.power_w).value

    @property
    def memory_capacity_bytes(self) -> int:
        """The memory the plan must fit in: on-chip SRAM on a wafer (its only device memory, whether
        weights stream or stay resident), HBM on a GPU."""
        if self.family == "wse":
            return int(self.chip.sram_bytes.value)
        return int(self.memory.offchip_memory_bytes.value)

    @property
    def multi_device(self) -> bool:
        return (self.system.scaleup_bandwidth_bytes_per_s is not None
                and self.system.scaleout_bandwidth_bytes_per_s is not None)

    @property
    def usable_capacity_bytes(self) -> int:
        return int(self.memory_capacity_bytes * self.calibration.usable_memory_fraction.value)

    def numbers(self) -> dict[str, Number]:
        """Every number, keyed 'section.field'."""
        out: dict[str, Number] = {}
        for section in SECTIONS:
            for field, value in getattr(self, section):
                if isinstance(value, Number):
                    out[f"{section}.{field}"] = value
        return out


def parse_profile(text: str, origin: str) -> HardwareProfile:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BtacalcError(f"{origin}: not valid TOML: {exc}") from None
    try:
        return HardwareProfile.model_validate(raw)
    except ValidationError as exc:
        raise BtacalcError(f"{origin}: {first_validation_error(exc)}") from None


@functools.lru_cache(maxsize=1)
def builtin_profiles() -> dict[str, HardwareProfile]:
    return {path.stem: _builtin_profile(path.stem) for path in sorted(data_dir("hardware_profiles").glob("*.toml"))}


@functools.lru_cache(maxsize=None)
def _builtin_profile(name: str) -> HardwareProfile:
    path = data_dir("hardware_profiles") / f"{name}.toml"
    try:
        prof = parse_profile(path.read_text(encoding="utf-8"), origin=path.name)
    except BtacalcError as exc:
        raise DataError(f"shipped hardware profile broken: {exc}") from exc
    if prof.name != path.stem:
        raise DataError(f"{path.name}: name {prof.name!r} differs from the file name")
    return prof


def resolve_hardware(name_or_path: str) -> HardwareProfile:
    """A built-in profile name, or the path of a user's TOML profile file."""
    if "/" not in name_or_path and (data_dir("hardware_profiles") / f"{name_or_path}.toml").is_file():
        return _builtin_profile(name_or_path)  # one file read, not every profile
    profiles = builtin_profiles()
    path = Path(name_or_path)
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BtacalcError(f"{path}: cannot read: {exc}") from None
        return parse_profile(text, origin=str(path))
    if path.suffix or "/" in name_or_path:
        raise BtacalcError(f"{{hardware}}: hardware profile file {name_or_path!r} not found")
    raise BtacalcError(f"{{hardware}}: unknown hardware {name_or_path!r} (built-in: {', '.join(profiles)}; "
                       "or give a profile .toml path)")
