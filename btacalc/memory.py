"""Where memory goes for a batch shape (G tiles of b sequences), per the device's memory model.

Weight streaming (Cerebras; DESIGN notes): weights and optimizer state live off-wafer (MemoryX)
and stream in one layer at a time; gradients stream out. On-wafer SRAM holds the activations kept
for backward of all L layers for G*b sequences, the working set of the largest phase, and buffers
for the streamed weights and outgoing gradients.

Resident (one GPU): HBM holds 16-bit weights, gradients and the optimizer state (Transformer Math
101: 16 bytes/parameter for mixed-precision Adam), the stored activations and the working set.

The working set is the largest phase's transient bytes; it may overlap a few tensors that are also
counted as stored for the current layer (at most one layer's worth), a conservative choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .catalogue import PhaseValues, state_expression
from .run import Problem
from .symbols import SYMBOLS


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    non_embedding: int
    per_layer: int
    largest_block: int  # largest unit of weights streamed at once (a phase, one expert, or the LM head)


def param_counts(problem: Problem) -> ParamCounts:
    """Total, active (per token) and non-embedding parameters, from the catalogue's `params` terms.

    Active counts k of the E experts; the embedding table and LM head count as active (the Qwen3
    and Mixtral convention). Non-embedding excludes the embedding table and the LM head.
    Learned position embeddings are counted at max_position_embeddings positions.
    """
    model = problem.model
    seq = model.max_position_embeddings or problem.run.seq_len
    pv = problem.evaluate(1, 1, seq_len=seq)
    layer = int(pv.total("params", "layer"))
    outside = int(pv.total("params", "model"))
    total = model.num_layers * layer + outside
    embedding = int(pv.value("embedding", "params")) + int(pv.value("lm_head", "params"))
    active = total
    if model.is_moe:
        experts = int(pv.value("experts", "params"))
        active -= model.num_layers * (experts - experts * model.top_k // model.num_experts)
    # Weights stream in units: a phase's weights, one expert at a time for the experts (each expert is
    # an independent block of 3hf); the embedding is a row gather and does not stream whole.
    units = [int(pv.value(p, "params")) for p in pv.phase_names("layer") if p != "experts"]
    if model.is_moe:
        units.append(int(pv.value("experts", "params")) // model.num_experts)
    largest = max(units + [int(pv.value("lm_head", "params"))])
    return ParamCounts(total, active, total - embedding, layer, largest)


def state_bytes(problem: Problem, params: int) -> dict[str, int]:
    """Weights, gradients and optimizer bytes for `params` parameters (training_state.toml)."""
    feats = problem.selection.feature_dict
    subs = {SYMBOLS["P"]: params, SYMBOLS["beta"]: problem.run.bytes_per_element}
    return {c: int(state_expression(feats, c).subs(subs)) for c in ("weights", "gradients", "optimizer")}


@dataclass(frozen=True)
class MemoryBreakdown:
    components: dict[str, int]  # bytes, on the capacity the plan must fit (SRAM or HBM)
    capacity: int
    usable: int
    largest_phase: str  # phase whose transient bytes set the working set
    offchip: dict[str, int]  # weight streaming: state held off-chip

    @property
    def total(self) -> int:
        return sum(self.components.values())

    @property
    def fits(self) -> bool:
        return self.total <= self.usable


class MemoryModel:
    """Memory of a problem as a function of (G, b); the fixed parts are computed once."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.params = param_counts(problem)
        hw = problem.hardware
        beta = problem.run.bytes_per_element
        self.streaming = hw.memory_model == "weight_streaming"
        state = state_bytes(problem, self.params.total)
        if self.streaming:
            n_buf = int(hw.weight_buffer_units.value)  # type: ignore[union-attr]
            block = self.params.largest_block * beta
            self.fixed = {"weight_buffers": n_buf * block, "gradient_buffers": n_buf * block}
            self.offchip = {**state, "capacity": int(hw.offchip_memory_bytes.value)}
        else:
            self.fixed = {"weights": state["weights"], "gradients": state["gradients"], "optimizer_state": state["optimizer"]}
            self.offchip = {}
        self.capacity = hw.memory_capacity_bytes
        self.usable = hw.usable_capacity_bytes

    def activations(self, pv: PhaseValues) -> dict[str, Any]:
        """Activation components: stored for backward (all layers), one layer's recomputed
        activations (live during its backward), and the largest phase's working set."""
        layers = self.problem.model.num_layers
        return {
            "stored_activations": layers * pv.total("stored", "layer") + pv.total("stored", "model"),
            "recompute_buffer": pv.total("recompute_bytes", "layer"),
            "working_set": pv.max("transient"),
        }

    def total(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> Any:
        """Total bytes on the capacity; works on ints (exact) and numpy arrays."""
        acts = self.activations(self.problem.evaluate(tiles, tile_batch, seq_len))
        return sum(acts.values()) + sum(self.fixed.values())

    def fits(self, tiles: int, tile_batch: int) -> bool:
        return self.total(tiles, tile_batch) <= self.usable

    def breakdown(self, tiles: int, tile_batch: int) -> MemoryBreakdown:
        pv = self.problem.evaluate(tiles, tile_batch)
        comps = {k: int(v) for k, v in self.activations(pv).items()}
        comps.update(self.fixed)
        return MemoryBreakdown(comps, self.capacity, self.usable, pv.argmax("transient"), self.offchip)
