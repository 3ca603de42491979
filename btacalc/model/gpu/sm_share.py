"""Compute lost to the streaming multiprocessors an overlapped communication kernel occupies.

An overlapped collective is not free: its kernel runs on SMs of the same device, and the GEMMs and
attention kernels it hides behind run on the rest. DeepEP's and HybridEP's dispatch / combine kernels
(Megatron's flex dispatcher, `--deepep` here) occupy a fixed number of SMs for as long as they run. While
they do, compute that fills the device runs at (SMs - reserved) / SMs of its rate, so a window of w
seconds in which an exchange of c seconds hides behind compute of t seconds (w = min(c, t)) costs

    loss = min(c, t) x reserved / SMs

seconds of compute: exact when the compute is SM-bound (its time scales with the SMs it gets), a bound
otherwise (a memory-bound kernel loses less). Summed per layer and micro-batch like the exchange itself.

Reserved SMs (named data, with their sources):

- DeepEP / HybridEP: Megatron-Core sets DeepEP's `Buffer.num_sms` to `moe_flex_dispatcher_num_sms`, or
  20 when it is unset (Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py
  L1287-1291; transformer_config.py L964-975: HybridEP takes DeepEP's default when unset). Megatron-Bridge
  recipes override it per model (e.g. @ 067f987d src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py L69
  `moe_hybridep_num_sms = 16`, L209 = 32; perf_recipes/gpt_oss/common.py L32 = 32): the layout's
  `dispatcher_sms` (`--dispatcher-sms`, a measured run's recipe), else the default.
- NCCL's all-to-all (Megatron's alltoall dispatcher, `deepep` off): one CTA per p2p channel the exchange
  touches (`NCCL_ALLTOALL_CTAS`, below). The dropless dispatcher's uneven `all_to_all_single` is a group of
  ncclSend / ncclRecv, one pair per peer (pytorch/pytorch @ 0033e774 torch/csrc/cuda/nccl.cpp
  `all2all_single_unequal_split`). NCCL (NVIDIA/nccl @ 5067397c) launches one kernel per plan with one CTA
  per channel in the plan's mask (src/enqueue.cc L1756-1758: grid = popcount(channelMask)). The p2p channel
  count is p2pnChannels = pow2Up(min(nChannels, NCCL_MAX_P2P_NCHANNELS)) (src/graph/paths.cc L957-958,
  L977-991; the default cap is MAXCHANNELS = 64, src/include/device.h L91), nChannels being the collective
  channels of the topology search. Each peer gets between nChannelsMin and p2pnChannelsPerPeer channels,
  nChannelsMin halved until nChannelsMin x nRanks <= p2pnChannels (src/enqueue.cc L1143-1146), and each
  peer's round starts at a bit-reversed base (src/include/channel.h L21-32), so an all-to-all over all its
  peers covers every p2p channel: the exchange holds p2pnChannels SMs. NVLS channels carry collectives only,
  not send / recv.
  Inside one NVLink domain on an 8-GPU H100 node, NCCL_DEBUG prints "24 coll channels, 16 nvls channels, 32
  p2p channels, 32 p2p channels per peer" (AWS p5.48xlarge, aws-samples/aws-do-eks @ 701c554a
  Container-Root/eks/deployment/nccl-test/README.md L77-82): 24 collective channels (6 search channels at
  60 GB/s of the H100's 18 x 20.6 GB/s, duplicated, src/graph/search.cc L1036-1047, then doubled,
  src/graph/connect.cc L460) rounded up to 32. Blackwell (18 x 40.1 GB/s, src/graph/topo.h L22-24; search
  speeds from 90 GB/s, search.cc L1063) gives 8 x 90 -> 16 -> 32 by the same steps: 32, an estimate (no
  published Blackwell log was found). Across nodes the same test on two p5 nodes prints "16 coll channels, 16
  nvls channels, 16 p2p channels, 2 p2p channels per peer" (L90-95): 16 (estimate: the network channel count
  depends on the NICs, src/graph/paths.cc L942-951).

- NCCL's ring all-gather / reduce-scatter of PyTorch FSDP1 (`--fsdp-impl torch`, task mpt2, docs/runs.md; FSDP2,
  `--fsdp-impl fsdp2`, issues them on its own all-gather and reduce-scatter streams alike): a
  ring collective is one kernel with one CTA per collective channel (src/enqueue.cc L1756-1758, the grid is the
  plan's channel mask), and FSDP1 issues each unit's all-gathers and its reduce-scatter on its own streams while
  the blocks compute (pytorch@00ae0bc9 torch/distributed/fsdp/_runtime_utils.py: the unshard and post-backward
  streams), so for the whole of the per-micro-batch traffic up to the compute it hides behind, the collective
  channels' SMs are not the GEMMs'. Collective channels inside one NVLink domain, per GPU generation
  (`NCCL_RING_CTAS`, keyed by compute capability as NCCL keys its NVLink bandwidth and search speeds): 24 on
  Ampere and Hopper at the NCCL releases the runs used (torch 1.13.1: 2.14.3, torch 2.1.0: 2.18.1) and at 2.27:
  the ring search's top speed over the GPU's NVLink bandwidth (A100 12 x 20 GB/s at 40 GB/s, H100 18 x 20 GB/s
  at 60 GB/s: 6 channels; v2.18.1-1 src/graph/topo.h L16-17, src/graph/search.cc L776, L781), duplicated
  (L954-961: 25 GB/s on sm80, 50 GB/s on sm90) and doubled (src/graph/connect.cc L389): 6 -> 12 -> 24, as the
  p5 log prints ("24 coll channels", L77-82). Blackwell (task ncclsm) at NCCL 2.25-2.29, the releases of the
  NeMo 25.x / 26.x containers: 18 x 40.1 GB/s (v2.27.7-1 src/graph/topo.h L21, L258) searched from 90 GB/s
  (search.cc L962, L1041): 8 channels, duplicated (L937-949), doubled (connect.cc L452): 32; a GB200 NVL72 rack
  runs as multi-node NVLink, whose clique's topologies NCCL fuses into one NVSwitch graph with the same 18 links
  per GPU (src/graph/topo.cc L1387-1392), so 32 there too; a B200 node's NCCL 2.27.3 log lists 32 ring channels
  for a 4-GPU communicator ('Channel 00/32 ... 31/32', anindya-saha/training-parallelism-strategies-from-scratch
  @ a13cfacc tp_inference_72b.md, p6-b200.48xlarge). Across NVLink domains the network graph gives the count: 16
  on the two-node p5 log (L90-95); with 8 NICs per node below 50 GB/s each (a 400 Gb/s NIC runs at the inter
  lists' top speed, 48 GB/s, L777 / L782; 2.27's sm100 list starts at 96 GB/s, above the NIC) the same steps
  give 8 -> 8 (no duplication) -> 16, and 2.27's extra doubling (connect.cc L463-466) needs fewer than 16 (an
  estimate: the clusters' NICs are not published).

- Megatron-LM's DDP (task dpsm, docs/clock.md): with --overlap-grad-reduce each bucket's reduce-scatter (the
  distributed optimizer) or all-reduce is issued with async_op=True as the backward fills it, so it runs on
  the process group's NCCL stream beside the compute stream (Megatron-LM @ d98e8a64
  megatron/core/distributed/param_and_grad_buffer.py L674-685 (the stream diagram and async_op), L718-731);
  with --overlap-param-gather the distributed optimizer's all-gathers are async the same way (L408, L510-526).
  Buckets hold max(40M, 1M x DP) parameters by default (distributed_data_parallel.py L133-134), far above the
  size below which NCCL drops ring channels (nBytes < nChannels x threads x 64, NVIDIA/nccl @ 5067397c
  src/enqueue.cc L2090-2096, src/include/comm.h L51), so every collective channel runs: the ring counts above.
  NVLink SHARP is off in the perf runs (Megatron-Bridge @ 568b3a3e scripts/performance/utils/executors.py L42
  `NCCL_NVLS_ENABLE=0`, kept at 067f987d src/megatron/bridge/recipes/utils/environment_utils.py L27). The
  window is what the overlap hides of the per-step traffic (timing.py: traffic - exposed), charged inside
  the step's synchronisation; Megatron-FSDP's and ZeRO-3's hidden per-micro-batch traffic pays the same as
  FSDP1's (one rule, `dp_sm_share_loss`).
- Megatron's `nccl_ub` (task ncclsm: `Layout.nccl_ub`, `--use-nccl-ub`, Bridge `ddp.nccl_ub`) registers the DP
  buffers with NCCL; with NCCL_CTA_POLICY=1 (Megatron-Bridge's perf plugin sets it, Megatron-LM does not) NCCL
  sends a registered all-gather / reduce-scatter down its NVLS path with ceil(factor / heads) CTAs, factor 4 x 8
  (all-gather), 5 x 8 (reduce-scatter, sm90) or 6 x 8 (sm100), heads the group's GPUs in the node (NVIDIA/nccl @
  5067397c src/transport/nvls.cc L1086-1097, the same from v2.27.3-1 to v2.29.3-1): 4 / 5 SMs on 8 H100, as
  Megatron's table says (distributed_data_parallel_config.py L121-136). Only where NCCL takes that path
  (src/enqueue.cc L2152-2173): NVLink SHARP on (`Layout.nvls`; the perf runs set NCCL_NVLS_ENABLE=0), sm90 or
  later (src/graph/search.cc L1124), the whole group in one node (across nodes it needs SHARP's CollNet, not
  modelled: Megatron's table's "NVL+IB without SHARP 16 / 16" is the ring count), no MNNVL (a GB200 NVL72 rack:
  the profile's `devices_per_host` below its domain), all-gather and reduce-scatter only (an all-reduce keeps
  the ring). Elsewhere the ring count. The per-micro-batch FSDP traffic, all-gathers and reduce-scatters
  together, is charged the reduce-scatter's count (the larger).

Every count is the bound's SM count: the loss assumes the compute beside the collective is SM-bound for the
whole window (moe5's measured check put the real loss near a quarter of the bound, docs/clock.md).

Not modelled here: TransformerEngine userbuffers TP overlap (its SM margins, pipeline tails and bulk SM share,
GEMM by GEMM: tp_overlap.py), docs/clock.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..arrays import ceil_div, minimum, where
from ..problem import Problem
from .collectives import local_members

# Megatron-Core's SM count for DeepEP / HybridEP dispatch and combine when moe_flex_dispatcher_num_sms is
# unset (Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py L1287-1291).
FLEX_DISPATCHER_SMS = 20


@dataclass(frozen=True)
class CtaCount:
    """CTAs (one SM each) a communication kernel holds while it runs, with its provenance."""

    value: int
    kind: str  # published | derived | estimate
    source: str
    note: str


_NCCL = "https://github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/"
_P5_LOG = ("https://github.com/aws-samples/aws-do-eks/blob/701c554a6f00012781e83e5a2ea020fe6bb8cd46/"
           "Container-Root/eks/deployment/nccl-test/README.md")

# CTAs of NCCL's send/recv all-to-all (the alltoall dispatcher), by where the EP group's peers are
# (module docstring): one CTA per p2p channel, every p2p channel touched by an all-to-all over all peers.
NCCL_ALLTOALL_CTAS = {
    "in_domain": CtaCount(
        32, "estimate", f"{_P5_LOG} L77-82; {_NCCL}src/graph/paths.cc L977-991, src/enqueue.cc L1143-1146, L1756-1758",
        "p2p channels of an 8-GPU H100 NVLink node (NCCL_DEBUG: 32 p2p channels); Blackwell derived as 32 by "
        "the same search steps (src/graph/search.cc L1036-1063, src/graph/connect.cc L460), no published log"),
    "across_domains": CtaCount(
        16, "estimate", f"{_P5_LOG} L90-95; {_NCCL}src/graph/paths.cc L942-951, L993-1001",
        "p2p channels of a two-node H100 job (NCCL_DEBUG: 16 p2p channels, 2 per peer); depends on the NICs"),
}


_V218 = "https://github.com/NVIDIA/nccl/blob/v2.18.1-1/"
_V227 = "https://github.com/NVIDIA/nccl/blob/v2.27.7-1/"
_P6_LOG = ("https://github.com/anindya-saha/training-parallelism-strategies-from-scratch/blob/"
           "a13cfacc0c8f915070e3115d5cca46bebcc1c4d0/tp_inference_72b.md")


@dataclass(frozen=True)
class RingChannels:
    """NCCL's collective (ring) channels on GPUs from compute capability `min_capability` up, by where the
    group's ranks are: one CTA each for a ring all-gather / reduce-scatter / all-reduce (module docstring)."""

    min_capability: float
    in_domain: CtaCount
    across_domains: CtaCount


_ACROSS = CtaCount(
    16, "estimate", f"{_P5_LOG} L90-95; {_V218}src/graph/search.cc L777, L782, L954-961; src/graph/connect.cc L389; "
    f"{_V227}src/graph/search.cc L953, L958, L963, L941; src/graph/connect.cc L452, L463-466",
    "collective channels of a multi-node job ('16 coll channels' on two H100 p5 nodes); 8 NICs under 50 GB/s "
    "each give 8 search channels at 48 GB/s (every generation's inter list), not duplicated (below 50 GB/s), "
    "doubled: 16, under the 16 of NCCL 2.27's second doubling (L463-466); depends on the NICs")

# Keyed by compute capability, as NCCL keys the NVLink bandwidth (src/graph/topo.h) and the search speeds
# (src/graph/search.cc) on it (module docstring). Ampere and Hopper: 6 search channels -> 12 -> 24; Blackwell:
# 8 -> 16 -> 32.
NCCL_RING_CTAS: tuple[RingChannels, ...] = (
    RingChannels(8.0, CtaCount(
        24, "derived", f"{_V218}src/graph/search.cc L776, L954-961; src/graph/connect.cc L389; src/graph/topo.h L16",
        "A100 (sm80): 12 NVLinks x 20 GB/s searched at 40 GB/s: 6 channels, duplicated (>= 25 GB/s), doubled: 24 "
        "(NCCL 2.14.3: 12 x 22 GB/s at 44 GB/s, the same 24)"), _ACROSS),
    RingChannels(9.0, CtaCount(
        24, "derived", f"{_V218}src/graph/search.cc L781, L954-961; src/graph/connect.cc L389; src/graph/topo.h L17; "
        f"{_V227}src/graph/topo.h L19; {_P5_LOG} L77-82",
        "H100 (sm90): 18 x 20.6 GB/s searched at 60 GB/s: 6 channels, duplicated (>= 50 GB/s), doubled: 24, the "
        "same at NCCL 2.27; printed as '24 coll channels' on an 8-GPU p5 node"), _ACROSS),
    RingChannels(10.0, CtaCount(
        32, "derived", f"{_V227}src/graph/topo.h L21, L258; src/graph/search.cc L962, L1041, L937-949; "
        f"src/graph/connect.cc L452; src/graph/topo.cc L1387-1392 (MNNVL: the clique's topologies fused); {_P6_LOG}",
        "Blackwell (sm100) at NCCL 2.25-2.29: 18 x 40.1 GB/s searched from 90 GB/s: 8 channels, duplicated "
        "(>= 50 GB/s), doubled: 32; the same in a GB200 NVL72 rack (MNNVL fuses the clique into one NVSwitch "
        "topology, 18 links per GPU); a B200 node's NCCL 2.27.3 log lists 'Channel 00/32 ... 31/32' for a "
        "4-GPU communicator (p6-b200.48xlarge)"), _ACROSS),
)


def ring_channels(capability: Optional[float]) -> RingChannels:
    """The row of `NCCL_RING_CTAS` for a GPU of this compute capability (none given: the first row)."""
    rows = [r for r in NCCL_RING_CTAS if capability is not None and r.min_capability <= capability]
    return rows[-1] if rows else NCCL_RING_CTAS[0]


# Megatron's nccl_ub (registered buffers) with NCCL_CTA_POLICY=1: NCCL's NVLS path for a registered all-gather /
# reduce-scatter inside one NVLink domain holds ceil(factor / heads) CTAs, heads being the group's GPUs in the
# node (the intra-node NVLS graph takes one head per GPU), by collective and compute capability (NVIDIA/nccl @
# 5067397c src/transport/nvls.cc L1086-1097; v2.27.3-1 to v2.29.3-1 the same factors; src/enqueue.cc L2152-2173:
# only without MNNVL, only all-gather and reduce-scatter, only with NVLS support, which needs sm90, src/graph/
# search.cc L1124). Values: (min compute capability, factor).
NVLS_UB_FACTORS: dict[str, tuple[tuple[float, int], ...]] = {
    "all_gather": ((9.0, 4 * 8),),
    "reduce_scatter": ((9.0, 5 * 8), (10.0, 6 * 8)),
}
NVLS_MAX_HEADS = 32  # NCCL_MAX_NVLS_ARITY (src/include/device.h L213)
NVLS_MIN_CAPABILITY = 9.0  # NVLS search needs sm90 (src/graph/search.cc L1124)


def _nvls_factor(collective: str, capability: float) -> int:
    return [f for cc, f in NVLS_UB_FACTORS[collective] if cc <= capability][-1]


def _dp_in_domain(problem: Problem) -> Any:
    lay = problem.layout
    size, stride = lay.sharding_ranks, lay.tensor_parallel
    return local_members(size, stride, lay.devices, lay.devices_per_node) >= size


def nccl_ring_ctas(problem: Problem) -> Any:
    """SMs one ring collective over the dense data-parallel (FSDP) group holds: the in-domain count of the GPU's
    generation when the group lies in the worst-placed rank's NVLink domain, else the cross-domain count."""
    row = ring_channels(_capability(problem))
    return where(_dp_in_domain(problem), row.in_domain.value, row.across_domains.value)


def _capability(problem: Problem) -> Optional[float]:
    cc = problem.hardware.chip.compute_capability
    return None if cc is None else float(cc.value)


def _multi_node_nvlink(problem: Problem) -> bool:
    """NCCL's MNNVL: the NVLink domain spans several hosts (a GB200 NVL72 rack's 18 trays of 4)."""
    per_host = problem.hardware.system.host_devices
    return per_host is not None and per_host < problem.layout.devices_per_node


def _nvls_missed(problem: Problem) -> str:
    """The first of NCCL's conditions for the NVLS path of registered buffers (NVLS on, sm90+, no MNNVL: module
    docstring) the plan misses, "" for none: one list for the clock (`nvls_ub_applies`) and the report
    (`nccl_ub_path`)."""
    cc = _capability(problem)
    if not problem.layout.nvls:
        return "NCCL_NVLS_ENABLE off (give --nvls)"
    if cc is None or cc < NVLS_MIN_CAPABILITY:
        return "NVLS needs sm90 or later"
    if _multi_node_nvlink(problem):
        return "the NVLink domain spans several hosts (MNNVL), where NCCL does not take it"
    return ""


def nvls_ub_applies(problem: Problem) -> bool:
    """Whether the layout's nccl_ub takes NCCL's NVLS path (registered buffers, NVLS on, sm90+, no MNNVL)."""
    return bool(problem.layout.nccl_ub) and not _nvls_missed(problem)


def dp_collective_ctas(problem: Problem, collective: str) -> Any:
    """SMs one data-parallel `collective` (all_gather, reduce_scatter, all_reduce) holds: with nccl_ub on NCCL's
    NVLS path inside one NVLink domain, ceil(factor / heads) (NVLS_UB_FACTORS); otherwise the ring channels."""
    ring = nccl_ring_ctas(problem)
    if collective not in NVLS_UB_FACTORS or not nvls_ub_applies(problem):
        return ring
    heads = minimum(problem.layout.sharding_ranks, NVLS_MAX_HEADS)
    nvls = ceil_div(_nvls_factor(collective, _capability(problem) or 0.0), heads)
    return where(_dp_in_domain(problem), nvls, ring)


DP_COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")


def nccl_ub_path(problem: Problem) -> str:
    """What nccl_ub does in this plan, for the report (freshuser26: `--nccl-ub`, with or without `--nvls`, changed
    nothing on a GB200 NVL72 rack and nothing said so): "" without nccl_ub; the NVLS path; else the ring channels as
    without it, and why: no data-parallel group, ZeRO 0 (the gradients are all-reduced, and the NVLS path takes the
    all-gather and reduce-scatter only: `dp_step_sm_share`; review33: it was said to take the NVLS path, the clock
    unchanged), the first of NCCL's conditions the plan misses (`_nvls_missed`; src/enqueue.cc L2152-2173), or the
    data-parallel group leaving the NVLink domain (`dp_collective_ctas`)."""
    lay = problem.layout
    if not lay.nccl_ub:
        return ""
    why = ("no data-parallel group" if lay.sharding_ranks <= 1
           else "ZeRO 0 all-reduces the gradients (no distributed optimizer), and an all-reduce keeps the ring"
           if lay.zero_stage == 0
           else _nvls_missed(problem)
           or ("the data-parallel group leaves the NVLink domain" if not bool(_dp_in_domain(problem)) else ""))
    return ("NVLS path: all-gather and reduce-scatter on fewer SMs" if not why
            else f"ring channels as without it: {why}")


def dp_ctas(problem: Problem) -> dict[str, int]:
    """The CTAs of each data-parallel collective (`dp_collective_ctas`) of a GPU plan with DP > 1, for the
    report; empty otherwise."""
    if problem.hardware.family != "gpu" or problem.layout.sharding_ranks <= 1:
        return {}
    return {kind: int(dp_collective_ctas(problem, kind)) for kind in DP_COLLECTIVES}


def dp_sm_share_loss(problem: Problem, hidden_s: Any, collective: str) -> Any:
    """Compute time the data-parallel `collective` takes from the compute it hides behind: `hidden_s` (the part of
    the traffic the overlap hides: min(traffic, window)) x its CTAs / SMs, for every data parallelism btacalc
    overlaps through NCCL (PyTorch FSDP1, Megatron-FSDP / ZeRO-3's per-micro-batch traffic, Megatron DDP's
    --overlap-grad-reduce / --overlap-param-gather buckets: module docstring)."""
    sms = problem.hardware.chip.cores.value
    return where(problem.layout.sharding_ranks > 1, hidden_s * dp_collective_ctas(problem, collective) / sms, 0.0)


def dp_step_sm_share(problem: Problem, hidden_reduce_s: Any, hidden_gather_s: Any) -> Any:
    """The step's hidden gradient reduction (an all-reduce without the distributed optimizer, else a
    reduce-scatter) and parameter all-gather, each x its CTAs / SMs (`dp_sm_share_loss`)."""
    zero = problem.layout.zero_stage
    reduce = where(zero == 0, dp_sm_share_loss(problem, hidden_reduce_s, "all_reduce"),
                   dp_sm_share_loss(problem, hidden_reduce_s, "reduce_scatter"))
    return reduce + dp_sm_share_loss(problem, hidden_gather_s, "all_gather")


def nccl_alltoall_ctas(problem: Problem) -> Any:
    """SMs NCCL's all-to-all over the EP group holds: the in-domain count when every EP peer shares the
    worst-placed rank's NVLink domain, else the cross-domain count; none without expert parallelism."""
    lay = problem.layout
    k = local_members(lay.expert_parallel, lay.expert_tensor_parallel, lay.devices, lay.devices_per_node)
    ctas = where(k >= lay.expert_parallel, NCCL_ALLTOALL_CTAS["in_domain"].value,
                 NCCL_ALLTOALL_CTAS["across_domains"].value)
    return where(lay.expert_parallel > 1, ctas, 0)


def reserved_sms(problem: Problem) -> Any:
    """SMs the overlapped expert all-to-all's kernels hold: the flex dispatcher's with DeepEP / HybridEP,
    NCCL's p2p CTAs with the alltoall dispatcher (module docstring)."""
    lay = problem.layout
    if not lay.deepep:
        return nccl_alltoall_ctas(problem)
    return FLEX_DISPATCHER_SMS if lay.dispatcher_sms is None else lay.dispatcher_sms


def sm_share_loss(problem: Problem, comm_s: Any, compute_s: Any) -> Any:
    """Compute time lost while an exchange of `comm_s` hides behind `compute_s`: min(c, t) x reserved / SMs
    (module docstring)."""
    sms = problem.hardware.chip.cores.value
    return minimum(comm_s, compute_s) * reserved_sms(problem) / sms
