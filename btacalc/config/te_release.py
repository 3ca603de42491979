"""TransformerEngine releases (btacalc/data/te_releases.toml): which TE a container ran, and which of TE's per-tensor
FP8 transposes that TE still writes on a GPU whose FP8 GEMMs take non-TN layouts (compute capability 10.x and later),
where the pinned TE (d0067d0) writes none.

`te_behaviour(version)` gives a `PerTensorFp8` for a version string; `container_te(release)` the TE of a measured
run's container where te_releases.toml names it. Versions compare as TE numbers them: a ``.devN`` build before its
release, the ``+commit`` suffix ignored (`te_release_key`)."""

from __future__ import annotations

import functools
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

TE_RELEASES_FILE = "te_releases.toml"
_VERSION = re.compile(r"^(\d+(?:\.\d+){0,2})(?:\.dev(\d+))?(?:\+[0-9A-Za-z.]+)?$", re.ASCII)


def te_release_key(version: str) -> tuple[int, ...]:
    """The order of a TE version string: "2.2.0.dev0+bee4649c" -> (2, 2, 0, 0, 0), before "2.2" -> (2, 2, 0, 1, 0)
    (a .devN build precedes its release); one-line error for anything else."""
    m = _VERSION.match(version.strip())
    if not m:
        raise BtacalcError(f"{{te_version}} {version!r}: expected a TransformerEngine version such as 2.2.0.dev0+bee4649c, "
                           "2.4 or 1.10")
    parts = [int(p) for p in m.group(1).split(".")] + [0, 0]
    dev = m.group(2)
    return (*parts[:3], 0 if dev is not None else 1, int(dev or 0))


class PerTensorFp8(BaseModel):
    """The first TE release that guards each per-tensor FP8 transpose by compute capability (te_releases.toml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cast_transpose_guarded_since: str
    gather_transpose_guarded_since: str
    ub_bulk_dgrad_transpose_guarded_since: str


class Container(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str = Field(min_length=3)  # a regular expression over a measured run's `release`
    te: str
    source: str = Field(min_length=10)


class TeReleases(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    default: str
    default_reason: str
    per_tensor_fp8: PerTensorFp8
    container: dict[str, Container]


class TeBehaviour(BaseModel):
    """What one TE does with per-tensor FP8 where FP8 GEMMs take non-TN layouts (config/precision.py non_tn_fp8_gemms): True
    where it still writes the transpose it writes on Hopper (te_releases.toml fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    cast_transposes: bool  # the local cast writes the columnwise (transposed) copy too: TE 1.x
    gather_transposes: bool  # _all_gather_fp8 transposes the gathered tensor (no Userbuffers): TE < 2.2.0
    ub_bulk_dgrad_transposes: bool  # LayerNormLinear's Userbuffers bulk-dgrad gathered input: TE < 2.4


@functools.lru_cache(maxsize=1)
def te_releases() -> TeReleases:
    raw = tomllib.loads(package_data(TE_RELEASES_FILE).read_text(encoding="utf-8"))
    try:
        table = TeReleases(**raw)
        for name in (table.default, *(c.te for c in table.container.values()),
                     *table.per_tensor_fp8.model_dump().values()):
            te_release_key(name)
    except (ValueError, BtacalcError) as e:
        raise DataError(f"btacalc/data/{TE_RELEASES_FILE}: {e}") from e
    return table


def default_te_version() -> str:
    return te_releases().default


@functools.lru_cache(maxsize=64)
def te_behaviour(version: str) -> TeBehaviour:
    """The per-tensor FP8 behaviour of TE `version` where FP8 GEMMs take non-TN layouts (one-line error for a malformed one)."""
    key, since = te_release_key(version), te_releases().per_tensor_fp8
    return TeBehaviour(version=version,
                       cast_transposes=key < te_release_key(since.cast_transpose_guarded_since),
                       gather_transposes=key < te_release_key(since.gather_transpose_guarded_since),
                       ub_bulk_dgrad_transposes=key < te_release_key(since.ub_bulk_dgrad_transpose_guarded_since))


def container_te(release: Optional[str]) -> Optional[tuple[str, str]]:
    """(TE version, container name) of the container a measured run's `release` text names, where te_releases.toml
    has it; None otherwise."""
    if not release:
        return None
    found = [(c.te, name) for name, c in te_releases().container.items() if re.search(c.pattern, release)]
    if len(found) > 1:
        raise DataError(f"btacalc/data/{TE_RELEASES_FILE}: release {release!r} matches containers "
                        f"{', '.join(n for _, n in found)}")
    return found[0] if found else None
