"""TransformerEngine userbuffers TP overlap per GEMM (btacalc/data/tp_overlap.toml) as validated data: which GEMM pass
hides which tensor-parallel collective, by which method and on how many SMs (the cost: model/gpu/tp_overlap.py)."""

from __future__ import annotations

import functools
import sys
from typing import Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BtacalcError, DataError
from ..paths import package_data
from .named_tables import load_named_tables

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TP_OVERLAP_FILE = "tp_overlap.toml"
UbFamily = Literal["qkv", "proj", "fc1", "fc2"]  # TE's GEMM families (initialize_ub's names)


class UbOverlap(BaseModel):
    """One overlapped GEMM of a transformer layer (TE's `ub_cfgs` entry)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str
    family: UbFamily
    gemm_pass: Literal["fprop", "dgrad", "wgrad"] = Field(alias="pass")
    method: Literal["ring_exchange", "pipeline", "bulk"]
    num_sm: int = Field(ge=0)
    num_splits: int = Field(ge=0)
    set_sm_margin: bool
    source: str = Field(min_length=10)


@functools.lru_cache(maxsize=1)
def ub_overlaps() -> tuple[UbOverlap, ...]:
    """Every overlapped GEMM of the shipped table."""
    out = tuple(load_named_tables(TP_OVERLAP_FILE, "overlaps", UbOverlap).values())
    for o in out:
        if o.method == "pipeline" and o.num_splits < 1:
            raise DataError(f"btacalc/data/{TP_OVERLAP_FILE}: {o.name}: a pipeline overlap needs num_splits >= 1")
    return out


@functools.lru_cache(maxsize=1)
def ub_families() -> dict[str, str]:
    """Catalogue GEMM name -> TE GEMM family (qkv, proj, fc1, fc2)."""
    raw = tomllib.loads(package_data(TP_OVERLAP_FILE).read_text(encoding="utf-8"))["families"]
    families = {k: v for k, v in raw.items() if k != "source"}
    known = set(get_args(UbFamily))
    for gemm, family in families.items():
        if family not in known:  # a misspelt family would silently leave the GEMM's passes out of the overlap
            raise DataError(f"btacalc/data/{TP_OVERLAP_FILE}: [families] {gemm} = {family!r}: not one of "
                            f"{', '.join(sorted(known))}")
    return families


class UbOverride(BaseModel):
    """A run's own entry of TE's `ub_cfgs` for one GEMM (NeMo `model.ub_tp_comm_overlap_cfg`, a per-model
    `tp_overlap/*.yaml`): the fields it sets replace the shipped table's (TE's defaults); the cost model
    (model/gpu/tp_overlap.py) uses these four. `cga_size`, `aggregate`, `atomic_gemm` and `fp8_buf` are not timed, and
    an entry giving one is refused (extra="forbid") rather than read without it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    method: Optional[Literal["ring_exchange", "pipeline", "bulk"]] = None
    num_sm: Optional[int] = Field(None, ge=0)
    num_splits: Optional[int] = Field(None, ge=0)
    set_sm_margin: Optional[bool] = None


class UbTable(BaseModel):
    """A run's userbuffers table: per overlapped GEMM (TE's names: qkv_fprop, proj_fprop, ...) the fields its
    config sets, with the file they were read from."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    source: str = Field(min_length=10)
    gemms: dict[str, UbOverride]


def ub_table(table: UbTable) -> tuple[UbOverlap, ...]:
    """The shipped table (TE's defaults) with `table`'s entries applied, each changed GEMM citing `table.source`.

    Raises BtacalcError for a GEMM TE's table does not name, or a pipeline overlap without splits."""
    shipped = {o.name: o for o in ub_overlaps()}
    unknown = sorted(set(table.gemms) - set(shipped))
    if unknown:
        raise BtacalcError(f"{{tp_overlap_cfg}} names {', '.join(unknown)}: TransformerEngine's overlapped GEMMs "
                           f"are {', '.join(shipped)}")
    out = []
    for name, o in shipped.items():
        given = table.gemms.get(name)
        if given is not None:
            o = o.model_copy(update={**given.model_dump(exclude_none=True), "source": table.source})
        if o.method == "pipeline" and o.num_splits < 1:
            raise BtacalcError(f"{{tp_overlap_cfg}} {name}: a pipeline overlap needs num_splits >= 1")
        out.append(o)
    return tuple(out)
