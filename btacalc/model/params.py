"""Parameter counts of a model, from the catalogue's `params` terms and each phase's data attributes.

- total: every layer of every layer kind (count x one layer) + the parts outside the layers;
- active (per token): the routed experts' weights count k of E (`param_bucket = "routed"`); the
  embedding table and LM head count as active (the Qwen3 and Mixtral convention);
- non-embedding: total minus the phases marked `embedding` (token/position embedding, LM head);
- expert: the routed experts' weights, all layers (the bucket expert parallelism splits);
- largest_block: the largest unit of weights streamed at once (`stream_unit`: a phase, one expert);
- gathered: weights read by token id, not multiplied (`stream_unit = "none"`: the input embedding), which
  some publishers leave out of the active count (`PublishedParams.active_counts = "head_only"`).

Learned position embeddings are counted at max_position_embeddings positions, or at the sequence length where that
is longer (the table a run builds: `position_rows`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..catalogue.compiled import CompiledSelection
from ..config.model import LayerKind, ModelSpec
from .problem import Evaluation, Problem, kind_values


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    non_embedding: int
    per_layer: int  # the largest layer's parameters
    largest_block: int  # largest unit of weights streamed at once (a phase, one expert, or the LM head)
    expert: int = 0  # routed-expert parameters, all layers
    expert_per_layer: int = 0  # routed-expert parameters of the largest MoE layer
    gathered: int = 0  # weights gathered by token id (input embedding): no FLOPs per token

    @property
    def non_expert(self) -> int:
        return self.total - self.expert


def param_counts(problem: Problem) -> ParamCounts:
    """Parameter counts of `problem.model` (see module docstring); computed once per model and selection.
    A problem of many points carries its models' counts (arrays, `Problem.counts`)."""
    if problem.counts is not None:
        return problem.counts
    model = problem.model
    seq = problem.run.seq_len
    if isinstance(seq, np.ndarray):  # a sweep's points: one sequence length where the counts depend on it (sweep.py)
        seq = int(seq.max())
    return _param_counts(model, problem.kinds, position_rows(model, seq))


def model_param_counts(problem: Problem) -> ParamCounts:
    """The model's own counts, its published figures' basis: a learned table at its max_position_embeddings, whatever
    the run's sequence (`param_counts` counts the table the run builds)."""
    model = problem.model
    return _param_counts(model, problem.kinds, model.max_position_embeddings or problem.run.seq_len)


def position_rows(model: ModelSpec, seq_len: int) -> int:
    """The positions the parameter counts are taken at: the model's max_position_embeddings, or the sequence where it
    gives none; a learned table shorter than the sequence grows to it (semantics20: Megatron-LM needs
    --max-position-embeddings >= --seq-length, arguments.py L1353-1356 @ d98e8a64, and the launch raises it, so the
    run builds seq_len rows; btacalc's memory already counted them: formulas/head.toml)."""
    rows = model.max_position_embeddings or seq_len
    return max(rows, seq_len) if model.position_embedding == "learned" else rows


def short_table(model: ModelSpec, seq_len: int) -> int:
    """The rows of a learned position table shorter than the sequence (`position_rows` grows it), else 0."""
    rows = model.max_position_embeddings or 0
    return rows if position_rows(model, seq_len) > rows > 0 else 0


@functools.lru_cache(maxsize=256)
def _param_counts(model: ModelSpec, kinds: tuple[tuple[LayerKind, CompiledSelection], ...], seq: int) -> ParamCounts:
    shape = {"s": seq, "b": 1, "G": 1, "beta": 2, "beta_s": 2, "P": 0, "t": 1, "t_e": 1, "c": 1, "M_sram": 1, "x_s": 0, "x_g": 0, "n_g": 0}
    ev = Evaluation([(kind, compiled.evaluate(kind_values(model, kind, shape))) for kind, compiled in kinds])
    total = int(ev.layers_total("params")) + int(ev.outside_total("params"))
    embedding = sum(int(pv.value(p.name, "params")) for n, pv, p in ev.items() if p.embedding)
    routed = [(n, int(pv.value(p.name, "params"))) for n, pv, p in ev.items() if p.param_bucket == "routed"]
    inactive = sum(n * (r - r * model.top_k // model.num_experts) for n, r in routed) if model.is_moe else 0
    units = [int(pv.value(p.name, "params")) // (model.num_experts if p.stream_unit == "expert" else 1)
             for _, pv, p in ev.items() if p.stream_unit != "none"]
    gathered = sum(n * int(pv.value(p.name, "params")) for n, pv, p in ev.items() if p.stream_unit == "none")
    return ParamCounts(total, total - inactive, total - embedding, int(ev.largest_layer("params")), max(units),
                       sum(n * r for n, r in routed), max((r for _, r in routed), default=0), gathered)


@dataclass(frozen=True)
class PublishedCheck:
    """One published parameter count against btacalc's, under the publisher's convention."""

    quantity: str  # total, active or non_embedding
    computed: int  # btacalc's count as the publisher counts it (head_only: without the gathered embedding)
    published: float
    convention: str  # within_0.5%, rounded or truncated (to `precision`)
    precision: float
    matches: bool

    @property
    def relative(self) -> float:
        return (self.computed - self.published) / self.published


def published_checks(model: ModelSpec, counts: ParamCounts) -> list[PublishedCheck]:
    """Each count the model's publisher gave, with btacalc's under the same convention: within 0.5%, or
    the exact count rounded / truncated to the unit of the publisher's last digit equals the figure."""
    pub = model.published_params
    if pub is None:
        return []
    head_only = pub.active_counts == "head_only"
    out = []
    for quantity, computed in (("total", counts.total), ("active", counts.active - (counts.gathered if head_only else 0)),
                               ("non_embedding", counts.non_embedding)):
        published = getattr(pub, quantity)
        if published is None:
            continue
        convention, precision = getattr(pub, f"{quantity}_convention"), getattr(pub, f"{quantity}_precision")
        target = round(published / precision)
        matches = {"within_0.5%": abs(computed - published) <= 0.005 * published,
                   "rounded": round(computed / precision) == target,
                   "truncated": math.floor(computed / precision) == target}[convention]
        out.append(PublishedCheck(quantity, computed, published, convention, precision, matches))
    return out
