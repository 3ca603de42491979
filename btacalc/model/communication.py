"""Communication between devices, per device per step: what is sent, over which link, for how long.

- Expert-parallel all-to-all (dispatch and combine): the catalogue's `a2a_bytes` terms give each
  phase's forward volume; it is sent once forward, once backward (the inverse permutation of the
  gradients) and again when the phase is recomputed. A device keeps the 1/EP share it routes to its
  own experts, so it sends (1 - 1/EP) of it. With Qwen3-style dispatch + combine this is
  4·T·k·h·β·(1 - 1/EP) per MoE layer, 6·T·k·h·β·(1 - 1/EP) with full recomputation.
- Gradient synchronisation: ring all-reduce, 2(n-1)/n of the gradient bytes for ZeRO 0-2 (or
  reduce-scatter + all-gather of the updated weights, the same volume); ZeRO-3 reduce-scatters the
  gradients and all-gathers the weights twice (forward and backward), 3(n-1)/n (ZeRO paper §7:
  2Ψ vs 3Ψ). Collective factors are named data (`formulas/constants.toml`).

Links: EP groups are packed on consecutive devices, so of an all-to-all's EP - 1 peers,
min(EP, node) - 1 share the node (scale-up link, NVLink) and the rest are reached over the NIC
(scale-out); both shares are sent concurrently. Gradient sync crosses the NIC when the job spans
nodes, else the scale-up link.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..catalogue.compiled import PhaseValues
from ..catalogue.constants import constants
from .params import ParamCounts
from .problem import Evaluation, Problem
from .state import bytes_per_param, gradient_buckets


def link_time(problem: Problem, bytes_intra: Any, bytes_inter: Any) -> Any:
    """Time to send bytes to peers in the node (scale-up link) and in other nodes (NIC), concurrently.
    Layouts on several devices are validated to have both bandwidths (Layout.validate)."""
    system = problem.hardware.system
    up = system.scaleup_bandwidth_bytes_per_s.value  # type: ignore[union-attr]  # validated
    out = system.scaleout_bandwidth_bytes_per_s.value  # type: ignore[union-attr]  # validated
    return np.maximum(bytes_intra / up, bytes_inter / out)


def recomputed(pv: PhaseValues, phase: str) -> Any:
    """Extra forward passes of the phase the recomputation policy runs in the backward pass (0 or 1;
    catalogue quantity `reruns`)."""
    return pv.value(phase, "reruns")


def exchanges(ev: Evaluation) -> tuple[Any, Any]:
    """(bytes, number of exchanges) of the token permutations (MoE dispatch and combine) per step, all
    layers: each phase's forward volume (catalogue `a2a_bytes`), again backward (the inverse
    permutation) and when the phase is recomputed."""
    passes = constants().passes
    sent: Any = 0
    count: Any = 0
    for n, pv, phase in ev.items():
        volume = pv.value(phase.name, "a2a_bytes")
        repeats = 1 + passes.backward_exchange_factor + passes.recompute_passes * recomputed(pv, phase.name)
        sent = sent + n * volume * repeats
        count = count + n * repeats * (np.asarray(volume) > 0)
    return sent, count


def all_to_all_bytes(problem: Problem, ev: Evaluation) -> Any:
    """Bytes one device sends per step over all MoE layers' all-to-alls (see module docstring)."""
    return exchanges(ev)[0] * (1 - 1 / problem.layout.expert_parallel)


def gradient_sync_bytes(gradient_bytes: Any, ranks: int, zero_stage: int) -> Any:
    """Bytes a device sends to synchronise `gradient_bytes` of gradients over `ranks` ranks."""
    if ranks <= 1:
        return 0.0
    c = constants().collectives
    # ZeRO-3: reduce-scatter the gradients, all-gather the weights for the forward and backward passes
    factor = c.reduce_scatter + 2 * c.all_gather if zero_stage >= 3 else c.all_reduce
    return factor * (ranks - 1) / ranks * gradient_bytes


def communication_time(problem: Problem, ev: Evaluation, counts: ParamCounts) -> dict[str, Any]:
    """All-to-all (per step, all MoE layers) and gradient synchronisation time of one device."""
    layout, model = problem.layout, problem.model
    if layout.devices == 1 or problem.hardware.family == "wse":  # wafer clusters: model.wafer.cluster
        return {}
    node = layout.devices_per_node
    out: dict[str, Any] = {}
    ep = layout.expert_parallel
    if model.is_moe and ep > 1:
        sent = all_to_all_bytes(problem, ev)
        peers_in_node = min(ep, node) - 1
        share_intra = peers_in_node / (ep - 1)
        out["all_to_all"] = link_time(problem, sent * share_intra, sent * (1 - share_intra))
    grad_rate = bytes_per_param(problem)["gradients"]
    spans_nodes = layout.devices > node
    sync = 0.0
    for params, ranks in gradient_buckets(counts, layout):
        b = gradient_sync_bytes(grad_rate * params, ranks, layout.zero_stage)
        sync = sync + (link_time(problem, 0, b) if spans_nodes else link_time(problem, b, 0))
    out["gradient_sync"] = sync
    return out
