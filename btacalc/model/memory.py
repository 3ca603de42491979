"""Where memory goes for a batch shape (G tiles of b sequences), per the device's memory model.

Weight streaming (Cerebras; DESIGN notes): weights and optimizer state live off-wafer (MemoryX)
and stream in one unit at a time; gradients stream out. On-wafer SRAM holds the activations kept
for backward of all L layers for G*b sequences, the working set of the largest phase, and buffers
for the streamed weights and outgoing gradients; on a profile with an offload path the kept
activations that do not fit go to the activation servers (wafer/offload.py, Cerebras R2.0+).

Resident (a small model kept whole on a wafer): device memory holds the training state (weights,
gradients, optimizer, `state.py`), plus the stored activations and working set of its G*b sequences.

GPU (resident, any layout): `btacalc.model.gpu.memory`, stage by stage: the training state sharded as
the layout shards it, the activations of the micro-batches in flight, ZeRO-3 / FSDP buffers; the plan
must fit the worst pipeline stage.

The working set is the largest phase's transient bytes; it may overlap a few tensors that are also
counted as stored for the current layer (at most one layer's worth), a conservative choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import BtacalcError
from .gpu.memory import GpuMemory, StageMemory
from .params import ParamCounts, param_counts
from .problem import Evaluation, Problem
from .state import StatePart, bytes_per_param, sharded_state, state_bytes
from .wafer.offload import ActivationSplit, offload_bandwidth, split_activations


@dataclass(frozen=True)
class MemoryBreakdown:
    components: dict[str, int]  # bytes, on the capacity the plan must fit (SRAM or HBM)
    capacity: int
    usable: int
    offchip: dict[str, int]  # weight streaming: state held off-chip
    state_parts: tuple[StatePart, ...] = ()  # resident: how weights/gradients/optimizer are sharded
    stages: tuple[StageMemory, ...] = ()  # GPU: every pipeline stage (components are the worst one's)
    offloaded_activations: int = 0  # wafer: stored activations held off the wafer (wafer/offload.py), bytes

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
        hw = problem.hardware
        if problem.memory_model not in ("weight_streaming", "resident"):
            raise ValueError(f"unresolved memory model {problem.memory_model!r}")
        if problem.memory_model == "weight_streaming" and hw.family != "wse":
            raise BtacalcError("{memory_model} weight_streaming is modelled for wafer-scale profiles only")
        self.streaming = problem.memory_model == "weight_streaming"
        self.capacity = hw.memory_capacity_bytes
        self.usable = hw.usable_capacity(problem.workspace_bytes)
        # GPU: per pipeline stage (btacalc.model.gpu.memory)
        self.gpu = GpuMemory(problem) if hw.family == "gpu" else None

    @cached_property
    def params(self) -> ParamCounts:
        return param_counts(self.problem)

    @cached_property
    def state_parts(self) -> tuple[StatePart, ...]:
        if self.streaming:
            return ()
        if self.gpu is not None:
            return self._worst_stage(1, 1).state_parts
        return tuple(sharded_state(bytes_per_param(self.problem), self.params.non_expert, self.params.expert,
                                   self.problem.layout))

    def _worst_stage(self, tiles: int, tile_batch: int) -> StageMemory:
        assert self.gpu is not None  # only called on GPU problems
        return max(self.gpu.stage_rows(tiles, tile_batch), key=lambda row: row.total)

    @cached_property
    def fixed(self) -> dict[str, int]:
        """Memory that does not depend on the batch shape."""
        if self.streaming:
            n_buf = int(self.problem.hardware.system.weight_buffer_units.value)  # type: ignore[union-attr]  # validated
            block = self.params.largest_block * self.problem.run.bytes_per_element
            return {"weight_buffers": n_buf * block, "gradient_buffers": n_buf * block}
        if self.gpu is not None:
            comps = self._worst_stage(1, 1).components
            state = ("weights", "gradients", "optimizer_state", "gathered_weights")
            return {k: int(comps[k]) for k in state if k != "gathered_weights" or comps[k]}
        per = {c: sum(p.bytes for p in self.state_parts if p.component == c) for c in ("weights", "gradients", "optimizer")}
        return {"weights": per["weights"], "gradients": per["gradients"], "optimizer_state": per["optimizer"]}

    @cached_property
    def offchip(self) -> dict[str, int]:
        """Weight streaming: the training state held off-wafer (MemoryX) and its capacity."""
        if not self.streaming:
            return {}
        cap = int(self.problem.hardware.memory.offchip_memory_bytes.value)
        return {**state_bytes(self.problem, self.params.total), "capacity": cap}

    def activation_split(self, ev: Evaluation) -> ActivationSplit:
        """Checkpoints (all layers) and one layer's recomputed activations, kept in SRAM or held off the
        wafer (wafer/offload.py: weight streaming on a profile that offloads; otherwise all kept)."""
        other = ev.max("transient") + sum(self.fixed.values())
        stored = ev.layers_total("stored") + ev.outside_total("stored")
        return split_activations(self.problem, stored, ev.largest_layer("recompute_bytes"),
                                 ev.largest_layer("stored"), other, self.usable)

    def activations(self, ev: Evaluation) -> dict[str, Any]:
        """Activation components: stored for backward (all layers), one layer's recomputed activations
        (live during its backward; the largest layer's), each the part kept on the wafer when weights
        stream and activations offload, and the largest phase's working set."""
        split = self.activation_split(ev)
        return {
            "stored_activations": split.stored_on_wafer,
            "recompute_buffer": split.recompute_on_wafer,
            "working_set": ev.max("transient"),
        }

    @property
    def offloads(self) -> bool:
        """Whether activations may leave the wafer (weight streaming on a profile with an offload path)."""
        return self.streaming and offload_bandwidth(self.problem) is not None

    def total_kept(self, tiles: Any, tile_batch: Any) -> Any:
        """Total bytes if every activation stayed on the wafer (no offload): at or below the usable
        memory exactly where a shape fits without offloading (wafer/offload.py: S_off = 0 iff
        S + W <= usable or S <= KEPT_LAYERS layers, the latter only fitting when S + W does too).
        Non-decreasing in G and b, like the memory without an offload path."""
        ev = self.problem.evaluate(tiles, tile_batch)
        return (ev.layers_total("stored") + ev.outside_total("stored") + ev.largest_layer("recompute_bytes")
                + ev.max("transient") + sum(self.fixed.values()))

    def total(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> Any:
        """Total bytes on the capacity (GPU: the worst pipeline stage); works on ints (exact) and numpy arrays."""
        if self.gpu is not None:
            return self.gpu.total(tiles, tile_batch, seq_len)
        acts = self.activations(self.problem.evaluate(tiles, tile_batch, seq_len))
        return sum(acts.values()) + sum(self.fixed.values())

    def fits(self, tiles: Any, tile_batch: Any) -> Any:
        """Whether shape(s) (G, b) fit: a bool, or an array of them for arrays of shapes."""
        return np.logical_and(self.offchip_fits, self.total(tiles, tile_batch) <= self.usable)

    @property
    def offchip_fits(self) -> bool:
        """Weight streaming: weights, gradients and optimizer state fit the off-wafer store (MemoryX)."""
        if not self.streaming:
            return True
        return sum(v for k, v in self.offchip.items() if k != "capacity") <= self.offchip["capacity"]

    def breakdown(self, tiles: int, tile_batch: int) -> MemoryBreakdown:
        if self.gpu is not None:
            rows = tuple(self.gpu.stage_rows(tiles, tile_batch))
            worst = max(rows, key=lambda row: row.total)
            # every component is shown, zero or not, but the gathered weights, which only ZeRO-3/FSDP has
            comps = {k: int(v) for k, v in worst.components.items() if v or k != "gathered_weights"}
            return MemoryBreakdown(comps, self.capacity, self.usable, {}, worst.state_parts, rows)
        ev = self.problem.evaluate(tiles, tile_batch)
        comps = {k: int(v) for k, v in self.activations(ev).items()}
        comps.update(self.fixed)
        return MemoryBreakdown(comps, self.capacity, self.usable, self.offchip,
                               self.state_parts, offloaded_activations=int(self.activation_split(ev).offloaded))


def resolve_memory_model(problem: Problem) -> Problem:
    """Resolve `memory_model = "auto"`: keep the whole training state resident when it fits with one
    sequence (Cerebras' pipelined execution for small models), else stream weights (wafer) / stay
    resident (GPU)."""
    if problem.run.memory_model != "auto":
        return problem
    return problem.with_run(memory_model="resident" if auto_resident(problem) else "weight_streaming")


def auto_resident(problem: Problem) -> Any:
    """Whether "auto" keeps the training state resident (see `resolve_memory_model`): a bool, or a bool
    array when the problem's sequence length is an array of points. A GPU always; a wafer cluster never
    (its systems stream weights from MemoryX: wafer/cluster.py); one wafer when its state fits with
    one sequence."""
    if problem.hardware.family != "wse":
        return True
    if problem.layout.devices > 1:
        return False
    return MemoryModel(problem.with_run(memory_model="resident")).fits(1, 1)
