"""Where memory goes for a batch shape (G tiles of b sequences), per the device's memory model.

Weight streaming (Cerebras; DESIGN notes): weights and optimizer state live off-wafer (MemoryX)
and stream in one layer at a time; gradients stream out. On-wafer SRAM holds the activations kept
for backward of all L layers for G*b sequences, the working set of the largest phase, and buffers
for the streamed weights and outgoing gradients.

Resident (a GPU, or a small model kept whole on a wafer): device memory holds 16-bit weights,
gradients and the optimizer state (Transformer Math 101: 16 bytes/parameter for mixed-precision
Adam), sharded over devices by expert parallelism and ZeRO (`parallel.py`), plus the stored
activations and working set of the device's own G*b sequences. ZeRO-3 adds a buffer holding one
layer's gathered weights.

The working set is the largest phase's transient bytes; it may overlap a few tensors that are also
counted as stored for the current layer (at most one layer's worth), a conservative choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .catalogue import PhaseValues, state_expression
from .errors import BtacalcError
from .parallel import StatePart, sharded_state
from .run import Problem
from .symbols import SYMBOLS


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    non_embedding: int
    per_layer: int
    largest_block: int  # largest unit of weights streamed at once (a phase, one expert, or the LM head)
    expert: int = 0  # routed-expert parameters, all layers

    @property
    def non_expert(self) -> int:
        return self.total - self.expert


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
    expert = model.num_layers * int(pv.value("experts", "params")) if model.is_moe else 0
    return ParamCounts(total, active, total - embedding, layer, largest, expert)


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
    state_parts: tuple[StatePart, ...] = ()  # resident: how weights/gradients/optimizer are sharded

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
        self.params = problem.params
        hw = problem.hardware
        beta = problem.run.bytes_per_element
        if problem.memory_model not in ("weight_streaming", "resident"):
            raise ValueError(f"unresolved memory model {problem.memory_model!r}")
        if problem.memory_model == "weight_streaming" and hw.family != "wse":
            raise BtacalcError("--memory-model weight_streaming is modelled for wafer-scale profiles only")
        self.streaming = problem.memory_model == "weight_streaming"
        self.state_parts: tuple[StatePart, ...] = ()
        if self.streaming:
            n_buf = int(hw.weight_buffer_units.value)  # type: ignore[union-attr]
            block = self.params.largest_block * beta
            self.fixed = {"weight_buffers": n_buf * block, "gradient_buffers": n_buf * block}
            self.offchip = {**state_bytes(problem, self.params.total), "capacity": int(hw.offchip_memory_bytes.value)}
        else:
            par = problem.parallel
            rates = state_bytes(problem, 1)
            self.state_parts = tuple(sharded_state(rates, self.params.non_expert, self.params.expert, par))
            per = {c: sum(p.bytes for p in self.state_parts if p.component == c) for c in rates}
            self.fixed = {"weights": per["weights"], "gradients": per["gradients"], "optimizer_state": per["optimizer"]}
            if par.zero_stage >= 3 and par.devices > 1:
                # ZeRO-3 all-gathers one layer's weights before using them (non-expert part whole,
                # this device's experts whole): a buffer of one layer's unsharded local weights.
                local_layer = self.params.per_layer - (self.params.expert // self.problem.model.num_layers) * (
                    1 - 1 / par.expert_parallel)
                self.fixed["gathered_weights"] = int(rates["weights"] * local_layer)
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
        return self.offchip_fits and self.total(tiles, tile_batch) <= self.usable

    @property
    def offchip_fits(self) -> bool:
        """Weight streaming: weights, gradients and optimizer state fit the off-wafer store (MemoryX)."""
        if not self.streaming:
            return True
        return sum(v for k, v in self.offchip.items() if k != "capacity") <= self.offchip["capacity"]

    def breakdown(self, tiles: int, tile_batch: int) -> MemoryBreakdown:
        pv = self.problem.evaluate(tiles, tile_batch)
        comps = {k: int(v) for k, v in self.activations(pv).items()}
        comps.update(self.fixed)
        return MemoryBreakdown(comps, self.capacity, self.usable, pv.argmax("transient"), self.offchip,
                               self.state_parts)


def resolve_memory_model(problem: Problem) -> Problem:
    """Resolve `--memory-model auto` (and the default on wafers): keep the whole training state
    resident when it fits with one sequence (Cerebras' pipelined execution for small models),
    else stream weights (wafer) / stay resident (GPU)."""
    hw = problem.hardware
    choice = problem.run.memory_model
    if choice not in (None, "auto"):
        return problem
    if hw.family == "wse":
        resident = problem.with_run(memory_model="resident")
        if MemoryModel(resident).fits(1, 1):
            return resident
        return problem.with_run(memory_model="weight_streaming")
    return problem.with_run(memory_model="resident")
