"""Pipeline stages: which layers each stage holds and how many micro-batches' activations it keeps.

Layers: each stage and virtual chunk holds its real layers by index, placed by Megatron-LM's rules
(`btacalc.config.pipeline`: the even split, the account-for flags, uneven first/last stages, layout
strings; model chunk i is virtual chunk i // PP of stage i % PP, Narayanan et al. 2021 §2.2). A stage's
layers of each kind (dense or MoE FFN, windowed or full attention, MTP) are counted from those indices,
so a mixed stack's dense layers sit where the model has them (DeepSeek-V3's first three on stage 0).
Memory and time sum over these counts (`memory.py`, `timing.py`).

In flight (activations kept for backward at a stage's peak), Megatron-Core schedules.py:
- 1F1B (VP = 1): stage j runs PP - j - 1 warm-up forward passes before its first backward, so it holds
  min(PP - j, M) micro-batches (the first stage PP: Korthikanti et al. 2022 §4.2.3);
- interleaved (VP > 1, micro-batch groups of PP): stage j runs 2(PP - j - 1) + (VP - 1)·PP warm-up
  forwards of one model chunk each, so it holds K_j = min(2(PP - j - 1) + (VP - 1)·PP + 1, M·VP) chunk
  passes. The forwards visit the chunks in groups of PP micro-batches (chunk 0 for micro-batches 0..PP-1,
  then chunk 1, ...; schedules.py get_model_chunk_id), so pass k runs virtual chunk (k // PP) mod VP and
  chunk v holds n_v = (K // (PP·VP))·PP + clip(K mod (PP·VP) - v·PP, 0, PP) of them. The held layer
  activations are sum over v of n_v x the layers of chunk v; with equal chunks that is K_j x the stage's
  layers / VP, Korthikanti's interleaving factor 1 + (PP - 1)/(PP·VP) for the first stage.
The embedding counts the first stage's in-flight passes / VP (as Megatron's theoretical_memory_usage.py
does); the head and loss of the last stage one (its last chunk's backward follows its forward directly).

Bubble: the step's is the makespan of Megatron's schedule (schedule.py, timing.py); with equal stages and chunks it
is Narayanan et al. 2021 §2.2's (PP - 1)/VP times one micro-batch's time on a stage (`bubble_micro_batches`).

Layouts may be arrays (the layout search): the placement is computed once per distinct (PP, VP) and the
per-stage counts gathered into arrays.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from functools import cached_property
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ...config.pipeline import Placement, StageSplit, place
from .schedule import schedule_table
from ..arrays import is_array, largest, minimum, where
from ...memo import remembered

if TYPE_CHECKING:
    from ...config.model import ModelSpec
    from ..problem import Problem


def ratio(a: Any, b: Any) -> Any:
    """a / b: an exact Fraction (or int) on ints, a float on arrays."""
    if is_array(a, b):
        return a / b
    return Fraction(a, b) if a % b else a // b


@dataclass(frozen=True)
class PipelineStages:
    """The stages of one pipeline: `pp`, `vp`, `micro_batches` may be ints or arrays (one per layout).

    `kind_of_layer` gives each decoder layer's kind index (`ModelSpec.layer_kind_indices`; empty: one
    kind); `mtp_layers` MTP layers are trained, of kind `mtp_kind`."""

    num_layers: int
    pp: Any
    vp: Any
    micro_batches: Any
    split: StageSplit = field(default_factory=StageSplit)
    kind_of_layer: tuple[int, ...] = ()
    mtp_layers: int = 0
    mtp_kind: int = -1
    group: Optional[int] = None  # the interleaved schedule's micro-batch group N (None: PP, Megatron's default)

    @classmethod
    def of(cls, problem: "Problem", micro_batches: Any = None) -> "PipelineStages":
        """The stages of a problem's model and layout (its M unless `micro_batches` is given); kept per
        layout for one M of a plain int (with the placement it computes on first use)."""
        if micro_batches is None or type(micro_batches) is int:
            key = ("pipeline stages", micro_batches)
            stages = problem.layout_cache.get(key)
            if stages is None:
                stages = problem.layout_cache[key] = cls._of(problem, micro_batches)
            return stages
        return cls._of(problem, micro_batches)

    @classmethod
    def _of(cls, problem: "Problem", micro_batches: Any) -> "PipelineStages":
        lay, model = problem.layout, problem.model
        mtp = model.mtp_layers if problem.run.multi_token_prediction else 0
        kinds = _kind_indices(model, problem.run.bf16_ends, problem.stored_layers)
        return cls(model.num_layers, lay.pipeline_parallel, lay.virtual_pipeline,
                   lay.micro_batches if micro_batches is None else micro_batches, lay.stage_split, kinds, mtp,
                   max(kinds) + 1 if mtp else -1, lay.microbatch_group)

    @property
    def group_size(self) -> Any:
        """N: micro-batches per model chunk in a row in the interleaved schedule (default PP)."""
        return self.pp if self.group is None else self.group

    @property
    def kinds(self) -> int:
        return max(max(self.kind_of_layer, default=0), self.mtp_kind) + 1

    def placement(self, pp: int, vp: int) -> Placement:
        return place(self.num_layers, pp, vp, self.split, self.mtp_layers)

    @cached_property
    def _table(self) -> tuple[np.ndarray, Any]:
        """Layers of each kind per (distinct layout, stage, virtual chunk), and each layout's row."""
        if is_array(self.pp, self.vp):
            pp, vp = np.broadcast_arrays(np.asarray(self.pp), np.asarray(self.vp))
            pairs, inverse = np.unique(np.stack([pp.ravel(), vp.ravel()], axis=1), axis=0, return_inverse=True)
            rows: Any = inverse.reshape(pp.shape)
        else:
            pairs, rows = np.array([[int(self.pp), int(self.vp)]]), 0
        table = np.zeros((len(pairs), int(pairs[:, 0].max()), int(pairs[:, 1].max()), self.kinds), dtype=np.int64)
        for row, (p, v) in enumerate(pairs):
            pl = self.placement(int(p), int(v))
            for i, c in enumerate(pl.chunks):
                cell = table[row, i % pl.pp, i // pl.pp]
                for layer in c.layers:
                    cell[self.kind_of_layer[layer] if self.kind_of_layer else 0] += 1
                if c.mtp:
                    cell[self.mtp_kind] += c.mtp
        return table, rows

    def exists(self, j: int) -> Any:
        return j < self.pp

    @cached_property
    def _cells(self) -> Optional[tuple[tuple[tuple[int, ...], ...], ...]]:
        """One layout (ints): `_table` as Python ints per stage and virtual chunk, placed once per model
        and layout (`_one_layout_cells`); None for arrays of layouts."""
        if is_array(self.pp, self.vp):
            return None
        return _one_layout_cells(self.num_layers, int(self.pp), int(self.vp), self.split, self.kind_of_layer,
                                 self.mtp_layers, self.mtp_kind)

    def chunk_kinds(self, j: int, v: int) -> list[Any]:
        """Layers of each kind in virtual chunk v of stage j (0 where the stage or chunk does not exist)."""
        cells = self._cells
        if cells is not None:
            return list(cells[j][v]) if j < len(cells) and v < len(cells[j]) else [0] * self.kinds
        table, rows = self._table
        if j >= table.shape[1] or v >= table.shape[2]:
            return [0] * self.kinds
        cell = table[rows, j, v]  # (kinds,) for one layout, (layouts..., kinds) for arrays
        return [int(cell[k]) for k in range(self.kinds)] if not is_array(self.pp, self.vp) \
            else [cell[..., k] for k in range(self.kinds)]

    def kind_counts(self, j: int) -> list[Any]:
        """Layers of each kind on stage j (for one layout, summed once per stage: `_stage_counts`)."""
        if self._cells is not None:
            counts = self._stage_counts
            return list(counts[j]) if j < len(counts) else [0] * self.kinds
        return self._kind_counts(j)

    @cached_property
    def _stage_counts(self) -> tuple[tuple[int, ...], ...]:
        """`_kind_counts` of every stage of one layout (Python ints)."""
        return tuple(tuple(self._kind_counts(j)) for j in range(len(self._cells or ())))

    def _kind_counts(self, j: int) -> list[Any]:
        out: list[Any] = [0] * self.kinds
        for v in range(largest(self.vp)):
            out = [a + b for a, b in zip(out, self.chunk_kinds(j, v))]
        return out

    def layers(self, j: int) -> Any:
        """Decoder (and MTP) layers on stage j."""
        return sum(self.kind_counts(j))

    @cached_property
    def _kept(self) -> Optional[dict[tuple[str, int], Any]]:
        """Per-stage values of one layout of Python ints (pp, vp, M), computed once per stage (the stages
        of a layout are kept per layout: `PipelineStages.of`); None for arrays of layouts or of M."""
        return {} if self._cells is not None and type(self.micro_batches) is int else None

    def in_flight(self, j: int) -> Any:
        """Model-chunk passes whose activations stage j holds at its peak (see the module docstring)."""
        kept = self._kept
        if kept is None:
            return self._in_flight(j)
        if ("in flight", j) not in kept:
            kept["in flight", j] = self._in_flight(j)
        return kept["in flight", j]

    def _in_flight(self, j: int) -> Any:
        plain = minimum(self.pp - j, self.micro_batches)
        interleaved = minimum(2 * (self.pp - j - 1) + (self.vp - 1) * self.group_size + 1, self.micro_batches * self.vp)
        return where(self.vp == 1, plain, interleaved)

    def chunk_passes(self, j: int, v: int) -> Any:
        """n_v: of stage j's in-flight passes, those of virtual chunk v (module docstring)."""
        k, n = self.in_flight(j), self.group_size
        if not is_array(k, self.pp, self.vp, self.micro_batches) and self.micro_batches % n:
            # a last group of M mod N micro-batches: count the passes of Megatron's own table (schedule.py)
            table = schedule_table(int(self.micro_batches), int(self.vp), int(n), first=int(k))
            return sum(1 for _, chunk in table if chunk == v)
        group = n * self.vp
        full = (k // group) * n
        partial = np.clip(k % group - v * n, 0, n) if is_array(k, n) \
            else min(max(k % group - v * n, 0), n)
        return where(v < self.vp, full + partial, 0)

    def held_kinds(self, j: int) -> list[Any]:
        """Layer activations of each kind stage j holds, in layer-micro-batches: sum over its chunks of
        the chunk's in-flight passes x its layers of that kind."""
        kept = self._kept
        if kept is None:
            return self._held_kinds(j)
        if ("held", j) not in kept:
            kept["held", j] = tuple(self._held_kinds(j))
        return list(kept["held", j])

    def _held_kinds(self, j: int) -> list[Any]:
        out: list[Any] = [0] * self.kinds
        for v in range(largest(self.vp)):
            passes = self.chunk_passes(j, v)
            out = [a + passes * b for a, b in zip(out, self.chunk_kinds(j, v))]
        return out

    def leading_kinds(self, n: int) -> list[int]:
        """Layers of each kind among the model's first `n` decoder layers (what Megatron's activation
        offloading takes to host memory: resolution.ACTIVATION_OFFLOAD)."""
        out = [0] * self.kinds
        for layer in range(min(n, self.num_layers)):
            out[self.kind_of_layer[layer] if self.kind_of_layer else 0] += 1
        return out

    def held_layers(self, j: int) -> Any:
        """Layer activations stage j holds, in layer-micro-batches."""
        return sum(self.held_kinds(j))

    def embedding_in_flight(self) -> Any:
        """Micro-batches of embedding activations the first stage holds (in_flight / VP)."""
        return ratio(self.in_flight(0), self.vp)

    @property
    def bubble_micro_batches(self) -> Any:
        """The pipeline bubble in units of one micro-batch's time on a stage: (PP - 1) / VP."""
        return ratio(self.pp - 1, self.vp)


@remembered
@functools.lru_cache(maxsize=256)
def _one_layout_cells(num_layers: int, pp: int, vp: int, split: StageSplit, kind_of_layer: tuple[int, ...],
                      mtp_layers: int, mtp_kind: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Layers of each kind per (stage, virtual chunk) of one layout: its `_table` row as Python ints (the
    placement is the same whatever the micro-batches, so every evaluation of the layout shares it)."""
    table, _ = PipelineStages(num_layers, pp, vp, 1, split, kind_of_layer, mtp_layers, mtp_kind)._table
    return tuple(tuple(tuple(int(x) for x in cell) for cell in stage) for stage in table[0])


@remembered
@functools.lru_cache(maxsize=64)
def _kind_indices(model: "ModelSpec", bf16_ends: tuple[int, int] = (0, 0),
                  stored: Optional[frozenset[int]] = None) -> tuple[int, ...]:
    """`model.layer_kind_indices(bf16_ends, stored)`, once per model (frozen), BF16 ends and block recompute's
    stored layers."""
    return model.layer_kind_indices(bf16_ends, stored)
