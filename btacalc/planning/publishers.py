"""Publisher baselines (btacalc/data/publisher_recipes.toml) as validated data: the recipe a published GPU run
took where its measured-run row does not state it.

A row that names its layout but no recipe would otherwise be planned with Megatron-LM's command-line defaults
(no overlap, fp32 main gradients, free routing), which none of NVIDIA's performance pages ran. The publisher is
read from the row's `source` (its provenance), the baseline is that publisher's performance recipe as its code
sets it, and `validate` names it among the defaults the run took.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..config.named_tables import load_named_tables

PUBLISHERS_FILE = "publisher_recipes.toml"


class PublisherBaseline(BaseModel):
    """One publisher: how a run's source names it, and the recipe its published runs took."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    summary: str = Field(min_length=10)
    source_contains: tuple[str, ...] = Field(min_length=1)
    recipe: dict[str, Any]
    moe: dict[str, Any] = Field(default_factory=dict)
    by_precision: dict[str, dict[str, Any]] = Field(default_factory=dict)
    by_recompute: dict[str, dict[str, Any]] = Field(default_factory=dict)
    force_balanced_moe_routing: bool = False
    routing_source: str = ""

    def matches(self, source: str) -> bool:
        low = source.lower()
        return any(part in low for part in self.source_contains)

    def _overrides(self, precision: str, moe: bool, recompute: Optional[str]) -> list[dict[str, Any]]:
        picked = ((self.moe if moe else {}), self.by_precision.get(precision, {}),
                  self.by_recompute.get(recompute, {}) if recompute is not None else {})
        return [o for o in picked if o]

    def recipe_for(self, precision: str, moe: bool, recompute: Optional[str] = None) -> dict[str, Any]:
        """The recipe's fields for a run of `precision`, an MoE model or not, and the recompute the row states:
        `by_recompute[recompute]` over `by_precision[precision]` over `moe` (an MoE model's) over `recipe`; an
        override's own `source` cites it and is not a field."""
        out = dict(self.recipe)
        for override in self._overrides(precision, moe, recompute):
            out.update({k: v for k, v in override.items() if k != "source"})
        return out

    def reason(self, precision: str, moe: bool, recompute: Optional[str] = None) -> str:
        """What the run took, for `validate`'s list of defaults, with the sources of the recipe and its overrides."""
        fields = ", ".join(f"{k} {v}" for k, v in self.recipe_for(precision, moe, recompute).items() if k != "source")
        cited = "; ".join([self.recipe["source"]] + [o["source"] for o in self._overrides(precision, moe, recompute)])
        return (f"{self.name}: the run's source names this publisher, so what its own recipe leaves out of the "
                f"publisher's performance recipe ({fields}) is taken from it: {cited}")


@functools.lru_cache(maxsize=1)
def publishers() -> tuple[PublisherBaseline, ...]:
    """Every publisher of the data file, in its order (the first that matches a source is taken)."""
    return tuple(load_named_tables(PUBLISHERS_FILE, "publisher", PublisherBaseline).values())


def publisher_of(source: str) -> Optional[PublisherBaseline]:
    """The first publisher whose `source_contains` names `source`, or None."""
    return next((p for p in publishers() if p.matches(source)), None)
