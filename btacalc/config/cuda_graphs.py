"""Megatron-LM's per-layer CUDA-graph scopes (`--cuda-graph-impl transformer_engine --cuda-graph-scope ...`) as
data: which catalogue phases each scope captures and which of their host-issued counts the graph replaces
(btacalc/data/cuda_graph_scopes.toml, every entry with its source; docs/host-time.md "CUDA-graph scopes").

A captured phase's kernels (and module calls, glue) are replayed from the layer's graph: the host issues one
forward and one backward graph launch per layer and micro-batch instead (model/gpu/costs.py); GPU time is
unchanged.
"""

from __future__ import annotations

import functools
from typing import Literal, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BtacalcError
from .named_tables import load_named_tables

SCOPES_FILE = "cuda_graph_scopes.toml"
# the host-issued counts of a layer (model/gpu/costs.py ISSUED_COUNTS is this tuple), each of which a scope may take over
ISSUED = ("kernels", "expert_gemms", "module_calls", "glue_ops")
# Megatron-LM @ 554ce493 megatron/training/arguments.py L1540: scopes other than full_iteration need the
# TransformerEngine implementation (the only per-layer one btacalc emits)
GRAPH_IMPL = "transformer_engine"


class Scope(BaseModel):
    """One `--cuda-graph-scope` value: the phases it captures in the layers it applies to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    layer: Literal["any", "dense", "moe"]
    phases: tuple[str, ...]
    counts: tuple[Literal["kernels", "expert_gemms", "module_calls", "glue_ops"], ...] = ISSUED  # type: ignore[assignment]
    requires: tuple[str, ...] = ()
    refused: Optional[str] = None
    source: str = Field(min_length=1)


@functools.lru_cache(maxsize=1)
def scopes() -> dict[str, Scope]:
    return load_named_tables(SCOPES_FILE, "scope", Scope)


def check_scopes(names: Sequence[str]) -> tuple[str, ...]:
    """The scopes as given, after Megatron's checks: known, expressible in btacalc, with what they require,
    no repeats (one-line errors)."""
    table = scopes()
    for n in names:
        if n not in table:
            raise BtacalcError(f"{{cuda_graph_scope}} {n!r} is not a CUDA-graph scope: one of "
                               f"{', '.join(k for k, s in table.items() if s.refused is None)}")
        if table[n].refused is not None:
            raise BtacalcError(f"{{cuda_graph_scope}} {n} {table[n].refused}")
        missing = [r for r in table[n].requires if r not in names]
        if missing:
            raise BtacalcError(f"{{cuda_graph_scope}} {n} must be given with {', '.join(missing)} (Megatron-LM)")
    if len(set(names)) != len(names):
        raise BtacalcError(f"{{cuda_graph_scope}} names a scope twice: {', '.join(names)}")
    return tuple(names)


def captured_counts(names: Sequence[str], phase_names: Sequence[str], moe_layer: bool) -> dict[str, frozenset[str]]:
    """Per phase of a layer, the host-issued counts its CUDA graphs take over (empty dict: nothing graphed)."""
    out: dict[str, set[str]] = {}
    kind = "moe" if moe_layer else "dense"
    for n in names:
        s = scopes()[n]
        if s.layer not in ("any", kind):
            continue
        for p in s.phases:
            if p in phase_names:
                out.setdefault(p, set()).update(s.counts)
    return {p: frozenset(c) for p, c in out.items()}
