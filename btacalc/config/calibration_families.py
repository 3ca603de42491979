"""The calibration families (btacalc/data/calibration.toml [[family]]): which named efficiency factors a device
family has and which built-in profiles share them. Fitting them is `btacalc validate --calibrate`
(planning/calibration.py); this module only reads what the families are, so the planning layer's plan can name a
profile's family without importing the fit.
"""

from __future__ import annotations

import sys
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BtacalcError
from ..paths import package_data
from .hardware import Calibration

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_FACTORS = 3


class FamilySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    profiles: list[str] = Field(min_length=1)
    factors: list[str] = Field(min_length=1, max_length=MAX_FACTORS)
    source: str = Field(description="URL of the publication the family's fit runs come from (each run in "
                                    "measured_runs.json carries its own full source)")
    note: str = ""


def load_families() -> list[FamilySpec]:
    raw = tomllib.loads(package_data("calibration.toml").read_text(encoding="utf-8"))
    families = [FamilySpec.model_validate(f) for f in raw["family"]]
    owner: dict[str, str] = {}
    for f in families:
        for name in f.profiles:
            if name in owner:  # one profile, one factor: a second family would overwrite the first's fit
                raise BtacalcError(f"calibration.toml: profile {name!r} is in two families ({owner[name]}, {f.name})")
            owner[name] = f.name
        for factor in f.factors:
            if factor not in Calibration.model_fields:
                raise BtacalcError(f"calibration.toml: family {f.name}: {factor!r} is not a calibration factor")
    return families


def family_of(profile_name: str, families: Optional[list[FamilySpec]] = None) -> Optional[FamilySpec]:
    """The calibration family whose profiles hold `profile_name` (load_families refuses a profile in two), or
    None for a profile outside every family."""
    return next((f for f in (families if families is not None else load_families()) if profile_name in f.profiles),
                None)
