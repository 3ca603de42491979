"""Memory per GPU, stage by stage: the training state of the stage's layers (sharded as the layout
shards it, `state.py`), the activations of the micro-batches it holds in flight (`stages.py`), one
layer's recomputed activations, the largest phase's working set, and ZeRO-3 / FSDP gather buffers.
The plan must fit the worst stage.

Stage j holds, per device:
    non-expert parameters  layers_j x one layer's (TP-split) + embedding (first) + head (last; with tied
                           embeddings and PP > 1 the last stage keeps its own copy of the word
                           embeddings, Megatron-Core's shared embedding: V·h/t)
    expert parameters      layers_j x one layer's routed experts / (EP·ETP)
    stored activations     held layer-micro-batches x one layer's (per micro-batch, per device: TP/SP
                           and CP divided, Korthikanti eq. 2-4) + embedding activations x the first
                           stage's micro-batches in flight + the head's of one micro-batch (last)
With layer kinds of different shapes, each stage holds them in proportion to their counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...config.model import LayerKind
from ..arrays import is_array, largest, maximum, where
from ..problem import Problem, padded_vocab
from ..state import StatePart, bytes_per_param, gathered_units_bytes, sharded_state
from .costs import Part, layer_parts, outside_parts
from .stages import PipelineStages, ratio

COMPONENTS = ("weights", "gradients", "optimizer_state", "gathered_weights", "stored_activations",
              "recompute_buffer", "working_set")


@dataclass(frozen=True)
class StageMemory:
    """One pipeline stage's memory per device (ints, or arrays over layouts)."""

    stage: int
    layers: Any
    in_flight: Any  # model-chunk passes held (see stages.py)
    components: dict[str, Any]
    state_parts: tuple[StatePart, ...]

    @property
    def total(self) -> Any:
        return sum(self.components.values())


class GpuMemory:
    """Per-stage memory of a GPU problem as a function of the batch shape (G tiles of b sequences per
    micro-batch per data-parallel rank)."""

    def __init__(self, problem: Problem):
        self.problem = problem
        lay = problem.layout
        self.stages = PipelineStages(problem.model.num_layers, lay.pipeline_parallel, lay.virtual_pipeline,
                                     lay.micro_batches)
        self.rates = bytes_per_param(problem)

    def stage_rows(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> list[StageMemory]:
        """Every stage (arrays: up to the largest PP, stages beyond a layout's PP zeroed)."""
        ev = self.problem.evaluate(tiles, tile_batch, seq_len)
        kinds = [(kind, part) for (kind, _), part in zip(ev.layers, layer_parts(self.problem, ev, memory_only=True))]
        first, last = outside_parts(self.problem, ev, memory_only=True)
        pp = self.problem.layout.pipeline_parallel
        count = largest(pp)
        return [self._stage(j, kinds, first, last) for j in range(count)]

    def total(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> Any:
        """The worst stage's bytes."""
        worst: Any = 0
        for row in self.stage_rows(tiles, tile_batch, seq_len):
            worst = maximum(worst, row.total)
        return worst

    def _stage(self, j: int, kinds: list[tuple[LayerKind, Part]], first: Part, last: Part) -> StageMemory:
        lay, model, st = self.problem.layout, self.problem.model, self.stages
        exists = st.exists(j)
        is_first, is_last = j == 0, where(exists, j == lay.pipeline_parallel - 1, False)
        layers = where(exists, st.layers(j), 0)
        dense, expert = stage_params(self.problem, layers, kinds, (first if is_first else None, is_last, last))
        parts = sharded_state(self.rates, _whole(dense), _whole(expert), lay)
        held = where(exists, st.held_layers(j), 0)
        stored = sum(ratio(held * kind.count, model.num_layers) * p.stored for kind, p in kinds) \
            + (st.embedding_in_flight() * first.stored if is_first else 0) + where(is_last, last.stored, 0)
        largest = max(kinds, key=lambda kp: kp[0].count)[1]
        layer_params = largest.dense_params + ratio(largest.routed_params, lay.expert_parallel * lay.expert_tensor_parallel)
        components = {
            "weights": _sum(parts, "weights"), "gradients": _sum(parts, "gradients"),
            "optimizer_state": _sum(parts, "optimizer"),
            "gathered_weights": where(layers > 0, gathered_units_bytes(self.rates, _whole(layer_params), lay), 0),
            "stored_activations": _whole(stored),
            "recompute_buffer": where(layers > 0, _whole(_max(p.recompute for _, p in kinds)), 0),
            "working_set": _whole(maximum(where(layers > 0, _max(p.transient for _, p in kinds), 0),
                                          maximum(first.transient if is_first else 0, where(is_last, last.transient, 0)))),
        }
        components = {k: where(exists, v, 0) for k, v in components.items()}
        return StageMemory(j, layers, where(exists, st.in_flight(j), 0), components, tuple(parts))


def stage_params(problem: Problem, layers: Any, kinds: list[tuple[LayerKind, Part]],
                 ends: tuple[Part | None, Any, Part]) -> tuple[Any, Any]:
    """(non-expert, expert) parameters per device of a stage with `layers` decoder layers; `ends` =
    (the first stage's outside part if this is the first stage, whether it is the last, the last
    stage's outside part). With tied embeddings and PP > 1 the last stage keeps its own copy of the word
    embeddings (Megatron-Core share_embeddings_and_output_weights: V·h/t, gradients all-reduced)."""
    lay, model = problem.layout, problem.model
    first, is_last, last = ends
    share = [(part, ratio(layers * kind.count, model.num_layers)) for kind, part in kinds]
    vocab = padded_vocab(model.vocab_size, lay.tensor_parallel)  # as the first stage's embedding (problem.py)
    tied = ratio(vocab * model.hidden_size, lay.tensor_parallel) if model.tied_embeddings else 0
    dense = sum(n * p.dense_params for p, n in share) + (first.dense_params if first is not None else 0) \
        + where(is_last, last.dense_params + where(lay.pipeline_parallel > 1, tied, 0), 0)
    expert = ratio(sum(n * p.routed_params for p, n in share), lay.expert_parallel * lay.expert_tensor_parallel)
    return dense, expert


def _sum(parts: tuple[StatePart, ...] | list[StatePart], component: str) -> Any:
    return sum((p.bytes for p in parts if p.component == component), start=0)


def _max(values: Any) -> Any:
    out: Any = 0
    for v in values:
        out = maximum(out, v)
    return out


def _whole(v: Any) -> Any:
    """Bytes or parameters rounded up to a whole number (a shard of a non-divisible count)."""
    if is_array(v):
        return np.ceil(v)
    return math.ceil(v) if not isinstance(v, int) else v
