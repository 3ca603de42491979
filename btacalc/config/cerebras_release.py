"""Cerebras software releases (btacalc/data/cerebras_releases.toml): the training-speed gains Cerebras states for a
release, by the models it names.

`release_gain(release, model)` is the product of the gains a run on `release` (a measured wafer run's `release` text,
"Cerebras R_1.9.x" or "Release_2.0.3") lacks for preset `model`: those of every release after it. The wafer factors
are fitted on runs of releases after every gain listed, so a run of an older release is predicted at the fitted rate
divided by this (planning/measured.py)."""

from __future__ import annotations

import functools
import math
import re
import sys
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BtacalcError, DataError
from ..paths import package_data

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CEREBRAS_RELEASES_FILE = "cerebras_releases.toml"
# Model Zoo's tags (Release_2.0.2, R_1.7.1) and ALCF's paths (~/R_1.8.0); "x" where only the minor release is known
_RELEASE = re.compile(r"\bR(?:elease)?_(\d+)\.(\d+)(?:\.(\d+|x))?\b")


class Gain(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    since: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    speedup: float = Field(gt=1.0, lt=10.0)
    models: dict[str, str] = Field(min_length=1, description="btacalc preset -> why the source's words name it")
    source: str = Field(min_length=10)


class CerebrasReleases(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    gain: list[Gain]


@functools.lru_cache(maxsize=1)
def cerebras_releases() -> CerebrasReleases:
    raw = tomllib.loads(package_data(CEREBRAS_RELEASES_FILE).read_text(encoding="utf-8"))
    try:
        return CerebrasReleases(**raw)
    except ValueError as e:
        raise DataError(f"btacalc/data/{CEREBRAS_RELEASES_FILE}: {e}") from e


def cerebras_release(text: Optional[str]) -> Optional[tuple[int, int, Optional[int]]]:
    """(major, minor, patch) of the Cerebras release `text` names (patch None for "R_1.9.x"); None when it names none."""
    m = _RELEASE.search(text or "")
    if m is None:
        return None
    patch = m.group(3)
    return int(m.group(1)), int(m.group(2)), None if patch in (None, "x") else int(patch)


def _before(release: tuple[int, int, Optional[int]], since: str, text: str) -> bool:
    major, minor, patch = (int(p) for p in since.split("."))
    if release[:2] != (major, minor):
        return release[:2] < (major, minor)
    if release[2] is None:
        raise BtacalcError(f"release {text[:60]!r}: give the patch release (R_{major}.{minor}.N): release "
                           f"{since} changed the training speed (btacalc/data/{CEREBRAS_RELEASES_FILE})")
    return release[2] < patch


def release_gain(release: Optional[str], model: str) -> tuple[float, list[str]]:
    """The training-speed gain a run of Cerebras `release` lacks for preset `model` (1.0: none, or no release named),
    and the source of each gain counted."""
    parsed = cerebras_release(release)
    if parsed is None or release is None:
        return 1.0, []
    gains = [g for g in cerebras_releases().gain if model in g.models and _before(parsed, g.since, release)]
    return float(math.prod(g.speedup for g in gains)), [f"release {g.since}: x{g.speedup:g} ({g.source})" for g in gains]
