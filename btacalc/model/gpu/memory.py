"""Memory per GPU, stage by stage: the training state of the stage's layers (sharded as the layout
shards it, `state.py`), the activations of the micro-batches it holds in flight (`stages.py`), one
layer's recomputed activations, the largest phase's working set, and ZeRO-3 / FSDP gather buffers.
The plan must fit the worst stage.

Stage j holds, per device, summed over the layers it really holds (`stages.py`: n_jk layers of kind k,
placed by Megatron's rules):
    non-expert parameters  sum_k n_jk x one kind-k layer's (TP-split) + embedding (first) + head (last;
                           with tied embeddings and PP > 1 the last stage keeps its own copy of the
                           word embeddings, Megatron-Core's shared embedding: V·h/t)
    expert parameters      sum_k n_jk x one kind-k layer's routed experts / (EP·ETP)
    stored activations     sum_k held kind-k layer-micro-batches x one kind-k layer's (per micro-batch,
                           per device: TP/SP and CP divided, Korthikanti eq. 2-4; less the first N
                           layers' with --cpu-offloading-num-layers N, which wait in host memory) + embedding
                           activations x the first stage's micro-batches in flight + the head's of one
                           micro-batch (last); with --overlap-moe-expert-parallel-comm, one layer's pre-dispatch
                           activations more (Megatron's merged 1F1B schedule: `GpuMemory._merged_layer`)
    recompute buffer,      the largest of the kinds the stage holds
    working set, ZeRO-3 /
    FSDP gather buffer
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ...config.model import LayerKind
from ..arrays import is_array, largest, maximum, where
from ..problem import Problem, padded_vocab
from ..state import StatePart, TorchFsdp, bytes_per_param, gathered_units_bytes, sharded_state
from .costs import layer_parts, outside_parts, pre_dispatch_stored
from .global_buffer import global_buffer_bytes
from .part import Part
from .precision import weight_cache_bytes
from .stages import PipelineStages, ratio

COMPONENTS = ("weights", "gradients", "optimizer_state", "gathered_weights", "stored_activations",
              "recompute_buffer", "working_set", "low_precision_weights", "global_buffer")


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
        self.stages = PipelineStages.of(problem)
        self.rates = bytes_per_param(problem)

    def stage_rows(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> list[StageMemory]:
        """Every stage (arrays: up to the largest PP, stages beyond a layout's PP zeroed)."""
        ev = self.problem.evaluate(tiles, tile_batch, seq_len)
        kinds = [(kind, part) for (kind, _), part in zip(ev.layers, layer_parts(self.problem, ev, memory_only=True))]
        first, last = outside_parts(self.problem, ev, memory_only=True)
        merged = pre_dispatch_stored(self.problem, ev) if self.problem.layout.overlap.all_to_all else None
        pp = self.problem.layout.pipeline_parallel
        count = largest(pp)
        return [self._stage(j, kinds, (first, last), merged, (tile_batch, seq_len)) for j in range(count)]

    def total(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> Any:
        """The worst stage's bytes."""
        worst: Any = 0
        for row in self.stage_rows(tiles, tile_batch, seq_len):
            worst = maximum(worst, row.total)
        return worst

    def _stage(self, j: int, kinds: list[tuple[LayerKind, Part]], ends: tuple[Part, Part],
               merged: Optional[list[Any]], shape: tuple[Any, Any]) -> StageMemory:
        """Stage j's components; `ends`: the parts outside the layers (first stage's, last's); `shape`: the
        attention tile's sequences and the sequence length (Megatron-Core's global buffer)."""
        (first, last), lay, st = ends, self.problem.layout, self.stages
        exists = st.exists(j)
        is_first, is_last = j == 0, where(exists, j == lay.pipeline_parallel - 1, False)
        counts = st.kind_counts(j)
        layers = sum(counts)
        # the MoE layers the stage holds (a stage of only dense layers, DeepSeek-V3's first three, runs no dispatcher)
        moe_layers = sum(n for n, (kind, _) in zip(counts, kinds) if dict(kind.features).get("moe"))
        parts, gathered, low_precision, (weights, gradients, optimizer) = self._state(
            j, counts, kinds, (first if is_first else None, is_last, last))
        held = self._on_device(st.held_kinds(j))
        stored = sum(n * p.stored for n, (_, p) in zip(held, kinds)) \
            + (st.embedding_in_flight() * first.stored if is_first else 0) + _or_zero(is_last, last.stored) \
            + (0 if merged is None else self._merged_layer(counts, merged, [p.stored for _, p in kinds]))
        components = {
            "weights": weights, "gradients": gradients, "optimizer_state": optimizer,
            "gathered_weights": gathered,
            "stored_activations": _whole(stored),
            "recompute_buffer": _whole(_max(_or_zero(n > 0, p.recompute) for n, (_, p) in zip(counts, kinds))),
            "working_set": _whole(maximum(_max(_or_zero(n > 0, p.transient) for n, (_, p) in zip(counts, kinds)),
                                          maximum(first.transient if is_first else 0, _or_zero(is_last, last.transient)))),
            "low_precision_weights": low_precision,
            "global_buffer": global_buffer_bytes(self.problem, *shape, layers > 0, is_last, moe_layers > 0),
        }
        components = {k: _or_zero(exists, v) for k, v in components.items()}
        return StageMemory(j, layers, where(exists, st.in_flight(j), 0), components, tuple(parts))


    def _state(self, j: int, counts: list[Any], kinds: list[tuple[LayerKind, Part]],
               ends: tuple[Part | None, Any, Part]) -> tuple[tuple[StatePart, ...], Any, Any, tuple[Any, Any, Any]]:
        """Stage j's training state, ZeRO-3 / FSDP gather buffer and low-precision weight copies (and the state's
        weights, gradients and optimizer state each summed over its parts, `_sum`): functions
        of the layout and of the parameters of the parts it holds, not of the batch shape. A search
        probes the memory of many shapes of one layout, so when the layer counts and the parameters are
        Python ints (not arrays of layouts, not floats that would equal an int and compute otherwise) they
        are kept per problem, keyed on those values."""
        first, _, last = ends
        key = stage_key("gpu stage state", j, counts, kinds, ends, _STATE_FIELDS)
        cache = self.problem.layout_cache
        if key is not None and key in cache:
            return cache[key]
        lay = self.problem.layout
        layers = sum(counts)
        dense, expert = stage_params(self.problem, counts, kinds, ends)
        torch_fsdp = TorchFsdp.of(self.rates) if lay.torch_fsdp else None
        rates = self.rates if torch_fsdp is None else torch_fsdp.state_rates(self.rates)
        parts = tuple(sharded_state(rates, _whole(dense), _whole(expert), lay))
        # ZeRO-3 / FSDP gather one layer at a time: the largest layer the stage holds
        layer_params = _max(where(n > 0, p.dense_params + ratio(p.routed_params, lay.expert_parallel
                                                                 * lay.expert_tensor_parallel), 0)
                            for n, (_, p) in zip(counts, kinds))
        if torch_fsdp is None:
            gathered = where(layers > 0, gathered_units_bytes(self.rates, _whole(layer_params), lay), 0)
        else:  # one stage (validated): the root unit holds the parts outside the layers
            root = (0 if first is None else first.dense_params) + last.dense_params
            gathered = torch_fsdp.buffers_bytes(_whole(layer_params), _whole(root))
        low_precision = _whole(weight_cache_bytes(self.problem, _low_precision_params(self.problem, counts, kinds)))
        sums = (_sum(parts, "weights"), _sum(parts, "gradients"), _sum(parts, "optimizer"))
        if key is not None:
            cache[key] = (parts, gathered, low_precision, sums)
        return parts, gathered, low_precision, sums

    def _merged_layer(self, counts: list[Any], merged: list[tuple[Any, Any]], stored: list[Any]) -> Any:
        """Megatron's merged 1F1B schedule (--overlap-moe-expert-parallel-comm) runs a forward layer beside a
        backward one, node by node (model_chunk_schedule_plan.py L236-L300 @ d98e8a64): the backward layer frees
        its pre-dispatch activations (attention, norms, router) only after the forward layer has finished, so at
        its peak a stage holds, beyond its in-flight passes, one layer's pre-dispatch activations: the largest of
        the kinds it holds. (Its extra warm-up forward, schedules.py L966-L970, is what the merged steady state
        takes back: the in-flight passes are those of the plain schedule.) With one micro-batch and no
        interleaving nothing runs merged.

        With --ep-overlap-early-attn-memory-release the backward layer's pre-dispatch node runs after its dispatch
        backward and before the forward layer's MLP (L280-281 against L291-292): its P bytes are freed while the
        forward layer holds its pre-dispatch and dispatch parts, P + D, before the forward's experts and combine
        add the rest of its S. Against the plain schedule's moment (the forward layer whole, S, the backward
        layer's freed) the stage holds P + D + P there: max(0, 2P + D - S) more, nothing where a layer's experts
        and combine store more than its attention. The two layers of a pair can be of different kinds (the
        forward's layer i beside the backward's layer n-1-i, of another chunk under interleaving: L551-563; a dense
        first layer beside an MoE one): the backward layer's P_b with the forward layer's P_f + D_f - S_f, each at
        its largest over the kinds the stage holds (review25: per kind, a small dense layer beside an MoE one was
        left out)."""
        lay = self.problem.layout
        any_merged = lay.micro_batches * lay.virtual_pipeline > 1
        backward = _max(_or_zero(n > 0, p) for n, (p, _) in zip(counts, merged))
        if not lay.overlap.early_attn_release:
            return where(any_merged, _whole(backward), 0)
        forward: Any = None
        for n, (p, d), s in zip(counts, merged, stored):
            held = where(n > 0, p + d - s, -backward)  # a kind the stage does not hold pairs with nothing
            forward = held if forward is None else maximum(forward, held)
        return where(any_merged, _whole(maximum(backward + forward, 0)), 0)

    def _on_device(self, held: list[Any]) -> list[Any]:
        """The held layer-micro-batches of each kind that stay on the device: with --cpu-offloading-num-layers
        N (PP 1, one micro-batch in flight) the first N decoder layers' activations wait in host memory, so
        the device keeps (num_layers - N) layers' (TE cpu_offload.py L748-751: resolution.ACTIVATION_OFFLOAD)."""
        n = self.problem.run.cpu_offload_layers
        if not n:
            return held
        single = self.problem.layout.pipeline_parallel == 1  # a layout search's PP > 1 candidates keep them all
        return [where(single, h - off, h) for h, off in zip(held, self.stages.leading_kinds(n))]


_STATE_FIELDS = ("dense_params", "routed_params", "low_precision_params", "low_precision_routed")  # GpuMemory._state


def stage_key(name: str, j: int, counts: list[Any], kinds: list[tuple[Any, Part]], ends: tuple[Part | None, Any, Part],
              fields: tuple[str, ...]) -> Optional[tuple[Any, ...]]:
    """The per-layout cache key (`problem.layout_cache`) of a value of stage j that depends only on its layer counts,
    its ends' dense parameters and the `fields` of each kind's part (GpuMemory._state, timing._stage_state): None
    when any of them is not a Python int (arrays of layouts, floats that would equal an int and compute otherwise)."""
    first, _, last = ends
    values = [*counts, last.dense_params, 0 if first is None else first.dense_params]
    for _, p in kinds:
        values += [getattr(p, f) for f in fields]
    for v in values:  # a plain loop: one evaluation runs this per stage
        if type(v) is not int:
            return None
    return (name, j, first is not None, tuple(values))


def stage_params(problem: Problem, counts: list[Any], kinds: list[tuple[LayerKind, Part]],
                 ends: tuple[Part | None, Any, Part]) -> tuple[Any, Any]:
    """(non-expert, expert) parameters per device of a stage holding counts[k] layers of kind k (its real
    layers: `PipelineStages.kind_counts`); `ends` = (the first stage's outside part if this is the first
    stage, whether it is the last, the last stage's outside part). With tied embeddings and PP > 1 the
    last stage keeps its own copy of the word embeddings (Megatron-Core share_embeddings_and_output_weights:
    V·h/t, gradients all-reduced)."""
    lay, model = problem.layout, problem.model
    first, is_last, last = ends
    share = [(part, n) for n, (_, part) in zip(counts, kinds)]
    # as the first stage's embedding (problem.py)
    vocab = padded_vocab(model.vocab_size, lay.tensor_parallel, lay.vocab_multiple)
    tied = ratio(vocab * model.hidden_size, lay.tensor_parallel) if model.tied_embeddings else 0
    dense = sum(_times(n, p.dense_params) for p, n in share) + (first.dense_params if first is not None else 0) \
        + where(is_last, last.dense_params + where(lay.pipeline_parallel > 1, tied, 0), 0)
    expert = ratio(sum(_times(n, p.routed_params) for p, n in share), lay.expert_parallel * lay.expert_tensor_parallel)
    return dense, expert


def _times(n: Any, params: Any) -> Any:
    """n x params where n may be an int64 array (layers per stage over layouts) and params a Python int
    beyond int64 (a model of 2^62 experts): then in float64, finite and to 16 digits, never wrapped."""
    if is_array(n) and isinstance(params, int) and abs(params) >= 2 ** 53:
        return n.astype(float) * float(params)
    return n * params


def _low_precision_params(problem: Problem, counts: list[Any], kinds: list[tuple[LayerKind, Part]]) -> Any:
    """Parameters per device of the low-precision (TransformerEngine linear) phases of a stage holding counts[k]
    layers of kind k (its real layers, `PipelineStages.kind_counts`, as `stage_params`: the first/last layers kept
    in BF16 cache none): the dense ones and the device's 1/(EP·ETP) of the routed experts; under ZeRO-3 / FSDP the
    quantised copies are sharded as the weights are (DP·CP ranks, EDP for the experts: the gathered unit's copy is
    transient)."""
    lay = problem.layout
    share = [(part, n) for n, (_, part) in zip(counts, kinds)]
    sharded = lay.zero_stage >= 3
    dense = ratio(sum(_times(n, p.low_precision_params) for p, n in share), where(sharded, lay.sharding_ranks, 1))
    routed = ratio(sum(_times(n, p.low_precision_routed) for p, n in share),
                   lay.expert_parallel * lay.expert_tensor_parallel * where(sharded, lay.expert_data_parallel, 1))
    return dense + routed


def _or_zero(cond: Any, v: Any) -> Any:
    """`where(cond, v, 0)`: where `cond` is the Python True (a stage that exists, a kind it holds, the last
    stage, of one layout), `v` itself, where np.where(True, v, 0) would give an equal copy of the same dtype (a
    float64 or int64 array: numpy's promotion with the Python int 0 keeps those) or `v` (a scalar); anything
    else asks `where`."""
    if cond is True and (type(v) in (int, float) or (type(v) is np.ndarray and v.dtype in _KEPT_DTYPES)):
        return v
    return where(cond, v, 0)


_KEPT_DTYPES = (np.dtype(np.float64), np.dtype(np.int64))


def _sum(parts: tuple[StatePart, ...] | list[StatePart], component: str) -> Any:
    return sum([p.bytes for p in parts if p.component == component], start=0)


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
