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


# The methods TE runs a GEMM's overlap with, by its default method (its role: ring_exchange = an all-gather GEMM, pipeline
# = a reduce-scatter GEMM, bulk = a collective beside an unrelated GEMM), and why any other is refused. TE @ bee4649c:
# transformer_engine/pytorch/module/base.py (L292-295, L352-361), common/include/transformer_engine/comm_gemm_overlap.h
# (CommOverlapBase L176-181, CommOverlapP2PBase L233-238), pytorch/csrc/extensions/gemm.cpp (L184-207: a bulk flag
# calls bulk_overlap, else the GEMM's all-gather or reduce-scatter overlap on whatever object the method made).
_TE = "TransformerEngine @ bee4649c"
_REFUSED: dict[tuple[str, str], str] = {
    ("ring_exchange", "pipeline"): f"{_TE} refuses a pipeline overlap on an all-gather (base.py L292-295)",
    ("ring_exchange", "bulk"): f"a bulk overlap's object has no all-gather GEMM overlap: {_TE} stops with \"Operation "
                               "not supported\" (comm_gemm_overlap.h L176-181)",
    ("pipeline", "bulk"): f"{_TE} runs a reduce-scatter GEMM on a bulk overlap's object as a pipeline "
                          "(gemm.cpp L207 split_overlap_rs): give method pipeline",
    ("bulk", "ring_exchange"): f"a ring exchange's object has no bulk overlap: {_TE} stops with \"Operation not "
                               "supported\" (comm_gemm_overlap.h L233-238)",
    ("bulk", "pipeline"): f"{_TE} runs a bulk GEMM on a pipeline overlap's object as a bulk overlap (gemm.cpp "
                          "L184-187): give method bulk",
}
# A dgrad GEMM given a ring exchange or pipeline becomes TE's dgrad reduce-scatter overlap in place of its wgrad's bulk
# one (base.py L352-361); TE asserts the table then names no wgrad (L355)
_DGRAD_RS = {"qkv_dgrad": "qkv_wgrad", "fc1_dgrad": "fc1_wgrad"}


def _method_refusal(name: str, default: str, given: str, table: UbTable) -> str:
    """Why TE refuses (or btacalc cannot time) `given` as the method of GEMM `name` whose TE default is `default`."""
    if name in _DGRAD_RS and given != "bulk":
        wgrad = _DGRAD_RS[name]
        if wgrad in table.gemms:
            return f"a {given} dgrad replaces {wgrad}'s overlap, and {_TE} asserts the table then names no {wgrad} " \
                   "(base.py L352-355)"
        return f"a {given} dgrad is TE's dgrad reduce-scatter overlap in place of {wgrad}'s bulk one (base.py " \
               "L352-361): not modelled"
    return _REFUSED.get((default, given), "")


def ub_table(table: UbTable) -> tuple[UbOverlap, ...]:
    """The shipped table (TE's defaults) with `table`'s entries applied, each changed GEMM citing `table.source`.

    Raises BtacalcError for a GEMM TE's table does not name, a method TE does not run that GEMM's overlap with
    (_REFUSED, _method_refusal), or a pipeline overlap without splits."""
    shipped = {o.name: o for o in ub_overlaps()}
    unknown = sorted(set(table.gemms) - set(shipped))
    if unknown:
        raise BtacalcError(f"{{tp_overlap_cfg}} names {', '.join(unknown)}: TransformerEngine's overlapped GEMMs "
                           f"are {', '.join(shipped)}")
    out = []
    for name, o in shipped.items():
        given = table.gemms.get(name)
        if given is not None:
            why = _method_refusal(name, o.method, given.method or o.method, table)
            if why:
                raise BtacalcError(f"{{tp_overlap_cfg}} {name}: method {given.method}: {why}")
            o = o.model_copy(update={**given.model_dump(exclude_none=True), "source": table.source})
        if o.method == "pipeline" and o.num_splits < 1:
            raise BtacalcError(f"{{tp_overlap_cfg}} {name}: a pipeline overlap needs num_splits >= 1")
        out.append(o)
    return tuple(out)
