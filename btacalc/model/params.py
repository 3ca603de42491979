"""Parameter counts of a model, from the catalogue's `params` terms and each phase's data attributes.

- total: L x (one layer) + the parts outside the layers;
- active (per token): the routed experts' weights count k of E (`param_bucket = "routed"`); the
  embedding table and LM head count as active (the Qwen3 and Mixtral convention);
- non-embedding: total minus the phases marked `embedding` (token/position embedding, LM head);
- expert: the routed experts' weights, all layers (the bucket expert parallelism splits);
- largest_block: the largest unit of weights streamed at once (`stream_unit`: a phase, one expert).

Learned position embeddings are counted at max_position_embeddings positions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..catalogue.compiled import compile_selection
from ..catalogue.selection import Selection
from ..config.model import ModelSpec
from .problem import Problem


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    non_embedding: int
    per_layer: int
    largest_block: int  # largest unit of weights streamed at once (a phase, one expert, or the LM head)
    expert: int = 0  # routed-expert parameters, all layers
    layers: int = 1

    @property
    def non_expert(self) -> int:
        return self.total - self.expert

    @property
    def expert_per_layer(self) -> int:
        return self.expert // self.layers


def param_counts(problem: Problem) -> ParamCounts:
    """Parameter counts of `problem.model` (see module docstring); computed once per model and selection."""
    model = problem.model
    seq = model.max_position_embeddings or problem.run.seq_len
    return _param_counts(model, problem.selection, seq)


@functools.lru_cache(maxsize=256)
def _param_counts(model: ModelSpec, selection: Selection, seq: int) -> ParamCounts:
    values = {**model.symbol_values(), "s": seq, "b": 1, "G": 1, "beta": 2, "P": 0}
    pv = compile_selection(selection).evaluate(values)
    layers = model.num_layers
    per_layer = int(pv.total("params", "layer"))
    total = layers * per_layer + int(pv.total("params", "model"))
    embedding = sum(int(pv.value(p.name, "params")) for p in pv.phases if p.embedding)
    routed = sum(int(pv.value(p.name, "params")) for p in pv.phases if p.param_bucket == "routed" and p.scope == "layer")
    active = total
    if model.is_moe:
        active -= layers * (routed - routed * model.top_k // model.num_experts)
    units = [int(pv.value(p.name, "params")) // (model.num_experts if p.stream_unit == "expert" else 1)
             for p in pv.phases if p.stream_unit != "none"]
    return ParamCounts(total, active, total - embedding, per_layer, max(units), layers * routed, layers)
