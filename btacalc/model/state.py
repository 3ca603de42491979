"""Training state: weights, gradients and optimizer state, their bytes per parameter and how a
layout divides them over devices. The only module that knows the buckets and their divisors.

Bytes per parameter come from the catalogue's `training_state` terms (mixed-precision Adam:
2 + 2 + 12 = 16; Anthony et al., Transformer Math 101).

Buckets (DeepSpeed-MoE, Rajbhandari et al. 2022; Megatron-LM's MoE layout without tensor or pipeline
parallelism): the routed experts' weights (`expert`) are split over the EP devices of an
expert-parallel group and replicated over the N/EP expert-data-parallel ranks; every other weight
(`non_expert`) is replicated over the N data-parallel ranks.

ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054) shards a component over the data-parallel ranks of
its parameters: stage 1 the optimizer state, stage 2 also the gradients, stage 3 also the 16-bit
weights. A shard holds ceil(P / divisor) parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config.execution import Layout
from .params import ParamCounts
from .problem import Problem

COMPONENTS = ("weights", "gradients", "optimizer")

ZERO_SHARDS = {  # component -> lowest ZeRO stage that shards it (ZeRO paper §5: P_os, P_os+g, P_os+g+p)
    "optimizer": 1,
    "gradients": 2,
    "weights": 3,
}


@dataclass(frozen=True)
class StatePart:
    """One bucket of training state on one device: `params` parameters of `part` at
    `bytes_per_param` bytes, divided over `divisor` devices (expert sharding x ZeRO sharding)."""

    component: str  # weights | gradients | optimizer
    part: str  # non_expert | expert
    params: int  # parameters in the bucket, whole model
    bytes_per_param: int
    divisor: int
    bytes: int  # per device

    @property
    def formula(self) -> str:
        return f"{self.bytes_per_param} B x ceil({self.params:,} / {self.divisor})"


def bytes_per_param(problem: Problem) -> dict[str, int]:
    """Training-state bytes per parameter for each component, from the catalogue."""
    beta = problem.run.bytes_per_element
    rates = problem.compiled.state_rates
    return {c: int(rates[c](beta)) for c in COMPONENTS}


def state_bytes(problem: Problem, params: int) -> dict[str, int]:
    """Weights, gradients and optimizer bytes for `params` parameters, unsharded."""
    return {c: rate * params for c, rate in bytes_per_param(problem).items()}


def sharded_state(rates: dict[str, int], counts: ParamCounts, layout: Layout) -> list[StatePart]:
    """Per-device weights, gradients and optimizer state, split non-expert / expert."""
    out = []
    for component, rate in rates.items():
        zero = layout.zero_stage >= ZERO_SHARDS[component]
        for part, params, shard in (
            ("non_expert", counts.non_expert, layout.data_parallel if zero else 1),
            ("expert", counts.expert, layout.expert_parallel * (layout.expert_data_parallel if zero else 1)),
        ):
            if not np.any(params):  # (an array when many models are solved at once)
                continue
            out.append(StatePart(component, part, params, rate, shard, rate * -(-params // shard)))
    return out


def gathered_layer_bytes(rates: dict[str, int], counts: ParamCounts, layout: Layout) -> int:
    """ZeRO-3 all-gathers one layer's weights before using them (the non-expert part whole, this
    device's E/EP experts whole): a buffer of one layer's unsharded local weights."""
    local_layer = counts.per_layer - counts.expert_per_layer * (1 - 1 / layout.expert_parallel)
    return int(rates["weights"] * local_layer)


def gradient_buckets(counts: ParamCounts, layout: Layout) -> list[tuple[float, int]]:
    """(parameters whose gradients one device synchronises, ranks it synchronises them over) per bucket:
    the non-expert gradients over all N data-parallel ranks, the device's E/EP share of the expert
    gradients over the N/EP expert-data-parallel ranks."""
    return [(counts.non_expert, layout.data_parallel),
            (counts.expert / layout.expert_parallel, layout.expert_data_parallel)]
