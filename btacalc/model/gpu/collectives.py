"""Collective communication of a Megatron layout: the bytes a rank sends, the link they cross, the time.

Placement (Megatron-Core parallel_state.py, default rank order tp-cp-ep-dp-pp; the expert grid orders
ETP, EP, EDP, PP): a tensor-parallel group is t adjacent ranks, a context-parallel group strides TP, a
data-parallel group strides TP·CP (the expert one ETP·EP), the pipeline is outermost. A group spans

    TP: t ranks at stride 1    CP: stride TP    ETP: stride 1    EP: stride ETP
    DP: stride TP·CP    DP·CP (the distributed optimizer's / FSDP's shard group): stride TP    EDP: stride ETP·EP

and stays on the scale-up link (NVLink: the profile's devices_per_node, 8 in a DGX/HGX node, 72 in a
GB200 NVL72 rack) when size x stride fits one domain. Otherwise its ring crosses domains: NCCL runs one
ring per NIC rail, so a domain holding k = D/stride members of the group drives k NICs at once and the
ring moves min(NVLink, k x NIC) bytes/s per rank (one NIC's worth when every member sits in its own
domain). A ring collective sends factor·(n - 1)/n of the buffer from each rank (all-reduce 2,
reduce-scatter and all-gather 1: formulas/constants.toml, NCCL-tests PERFORMANCE.md "bus bandwidth").
An all-to-all sends each of its EP - 1 peers its share at once: the peers in the domain over NVLink, the
others through the rank's own NIC, concurrently. Pipeline neighbours are devices/PP apart: on NVLink
only when the job fits one domain, else through one NIC.

Data-parallel synchronisation per optimizer step (Megatron-Core distributed data parallel; ZeRO,
Rajbhandari et al. 2020 §7): ZeRO-0 all-reduces the gradients; the distributed optimizer (ZeRO-1)
reduce-scatters them once and all-gathers the updated 16-bit weights; ZeRO-2 reduce-scatters every
micro-batch; ZeRO-3 / FSDP all-gather each layer's weights before its forward and again before its
backward and reduce-scatter its gradients, every micro-batch (Megatron-LM megatron_fsdp.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...catalogue.constants import constants
from ..arrays import maximum, minimum, where
from ..problem import Problem
from .precision import param_gather_factor


def _bandwidths(problem: Problem) -> tuple[float, float]:
    system = problem.hardware.system
    up = system.scaleup_bandwidth_bytes_per_s.value  # type: ignore[union-attr]  # validated (multi_device)
    out = system.scaleout_bandwidth_bytes_per_s.value  # type: ignore[union-attr]  # validated (multi_device)
    return up, out


def ring_time(problem: Problem, bytes_per_rank: Any, size: Any, stride: Any) -> Any:
    """Time to send `bytes_per_rank` (already x factor x (n-1)/n) around a ring of `size` ranks at
    `stride` (see the module docstring)."""
    if problem.layout.devices == 1:
        return 0.0
    up, out = _bandwidths(problem)
    node = problem.layout.devices_per_node
    rails = maximum(node // stride, 1)
    return bytes_per_rank / where(size * stride <= node, up, minimum(up, rails * out))


def ring_share(n: Any) -> Any:
    """(n - 1)/n: the share of a buffer a ring collective moves per rank (0 for one rank)."""
    return (n - 1) / n


def tensor_parallel_time(problem: Problem, volume: Any) -> Any:
    """Tensor-parallel exchanges of `volume` collective units (costs.Part.tp_bytes)."""
    t = problem.layout.tensor_parallel
    return ring_time(problem, volume * ring_share(t), t, 1)


def context_parallel_time(problem: Problem, volume: Any) -> Any:
    """The K/V ring: CP - 1 sends of `volume` per pass to the next rank (point-to-point)."""
    lay = problem.layout
    return ring_time(problem, volume * (lay.context_parallel - 1), lay.context_parallel, lay.tensor_parallel)


def all_to_all_time(problem: Problem, volume: Any) -> Any:
    """Expert-parallel dispatch + combine of `volume` bytes (all passes, before the 1/EP kept locally),
    plus the expert-tensor-parallel all-gather / reduce-scatter of the received copies."""
    lay = problem.layout
    if lay.devices == 1:
        return 0.0
    up, out = _bandwidths(problem)
    ep, etp, node = lay.expert_parallel, lay.expert_tensor_parallel, lay.devices_per_node
    sent = volume * ring_share(ep)
    peers_in_domain = maximum(minimum(ep, node // etp), 1) - 1
    intra = where(ep > 1, peers_in_domain / where(ep > 1, ep - 1, 1), 1.0)
    a2a = maximum(sent * intra / up, sent * (1 - intra) / out)
    gather = ring_time(problem, volume * (etp - 1), etp, 1)  # each rank sends its received copies to t_e - 1 peers
    return a2a + gather


def pipeline_p2p_time(problem: Problem, volume: Any) -> Any:
    """Sends between pipeline neighbours of one micro-batch: forward activation and backward gradient,
    once per model chunk (VP times with interleaving)."""
    lay = problem.layout
    sends = where(lay.pipeline_parallel > 1, 2 * lay.virtual_pipeline, 0)
    # point to point: one NIC unless the neighbour shares the domain (the whole job in one domain)
    return ring_time(problem, volume * sends, where(lay.devices <= lay.devices_per_node, 1, 2), lay.devices_per_node)


@dataclass(frozen=True)
class DataParallelTimes:
    """Data-parallel synchronisation of one stage, before overlap."""

    reduce_per_step: Any  # gradient all-reduce / reduce-scatter once per optimizer step
    gather_per_step: Any  # the distributed optimizer's all-gather of the updated weights
    per_micro_batch: Any  # ZeRO-2 reduce-scatter, ZeRO-3 / FSDP gathers and reduce-scatter


def data_parallel_times(problem: Problem, dense: Any, expert: Any, rates: dict[str, int]) -> DataParallelTimes:
    """Synchronisation of a stage holding `dense` non-expert and `expert` parameters per device
    (before ZeRO sharding) over DP·CP and EDP ranks (see the module docstring)."""
    lay, c = problem.layout, constants().collectives
    zero = lay.zero_stage

    def times(params: Any, size: Any, stride: Any) -> tuple[Any, Any, Any]:
        share = ring_share(size) * params
        # --fp8-param-gather: the weights all-gathered in FP8 / FP4 (precision.param_gather_factor)
        g_bytes, w_bytes = rates["gradients"] * share, rates["weights"] * share * param_gather_factor(problem)
        reduce_step = where(zero == 0, c.all_reduce * g_bytes, where(zero == 1, c.reduce_scatter * g_bytes, 0))
        gather_step = where((zero == 1) | (zero == 2), c.all_gather * w_bytes, 0)
        per_mb = where(zero == 2, c.reduce_scatter * g_bytes,
                       where(zero >= 3, 2 * c.all_gather * w_bytes + c.reduce_scatter * g_bytes, 0))
        return (ring_time(problem, reduce_step, size, stride), ring_time(problem, gather_step, size, stride),
                ring_time(problem, per_mb, size, stride))

    # the dense part over the DP·CP group (stride TP), the experts over EDP (stride ETP·EP): one after the other
    d = times(dense, lay.sharding_ranks, lay.tensor_parallel)
    e = times(expert, lay.expert_data_parallel, lay.expert_tensor_parallel * lay.expert_parallel)
    return DataParallelTimes(d[0] + e[0], d[1] + e[1], d[2] + e[2])
