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

- NCCL's ring all-gather / reduce-scatter of PyTorch FSDP1 (`--fsdp-impl torch`, task mpt2, docs/runs.md): a
  ring collective is one kernel with one CTA per collective channel (src/enqueue.cc L1756-1758, the grid is the
  plan's channel mask), and FSDP1 issues each unit's all-gathers and its reduce-scatter on its own streams while
  the blocks compute (pytorch@00ae0bc9 torch/distributed/fsdp/_runtime_utils.py: the unshard and post-backward
  streams), so for the whole of the per-micro-batch traffic up to the compute it hides behind, the collective
  channels' SMs are not the GEMMs'. Collective channels inside one NVLink domain: 24, the same on Ampere and
  Hopper at the NCCL releases the runs used (torch 1.13.1: 2.14.3, torch 2.1.0: 2.18.1) and at 5067397c: the ring search's top speed over the
  GPU's NVLink bandwidth (A100 12 x 20 GB/s at 40 GB/s, H100 18 x 20 GB/s at 60 GB/s: 6 channels;
  v2.18.1-1 src/graph/topo.h L16-17, src/graph/search.cc L776, L781), duplicated (L954-961: 25 GB/s on sm80,
  50 GB/s on sm90) and doubled (src/graph/connect.cc L389): 6 -> 12 -> 24, as the p5 log prints ("24 coll
  channels", L77-82). Across NVLink domains the network graph gives the count: 16 on the two-node p5 log
  (L90-95); with 8 NICs per node below 50 GB/s each (a 400 Gb/s NIC runs at the inter list's top speed, 48 GB/s,
  L777 / L782) the same steps give 8 -> 8 (no duplication) -> 16 (an estimate: the MosaicML H100 cluster's NICs
  are not published).

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
  FSDP1's (one rule, `dp_sm_share_loss`). Megatron's `nccl_ub` (registered buffers, NCCL_CTA_POLICY=1)
  takes NCCL's SM-efficient path instead: 4 / 5 SMs for all-gather / reduce-scatter inside one NVLink domain,
  16 / 16 across it without SHARP (Megatron-LM @ d98e8a64 distributed_data_parallel_config.py L121-136;
  NVIDIA/nccl @ 5067397c src/enqueue.cc L2152-2173, src/transport/nvls.cc L1086-1097): not a layout option
  here, so such a run is charged the ring count (docs/clock.md 'dpsm').

Every count is the bound's SM count: the loss assumes the compute beside the collective is SM-bound for the
whole window (moe5's measured check put the real loss near a quarter of the bound, docs/clock.md).

Not modelled here: TransformerEngine userbuffers TP overlap (its SM margins, pipeline tails and bulk SM share,
GEMM by GEMM: tp_overlap.py), docs/clock.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..arrays import minimum, where
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

# CTAs of a ring all-gather / reduce-scatter (one per collective channel), by where the group's ranks are
# (module docstring).
NCCL_RING_CTAS = {
    "in_domain": CtaCount(
        24, "derived", f"{_V218}src/graph/search.cc L776, L781, L954-961; src/graph/connect.cc L389; src/graph/topo.h "
        f"L16-17; {_P5_LOG} L77-82",
        "collective channels in one 8-GPU A100 or H100 NVLink node: 6 ring-search channels, duplicated, doubled "
        "(NCCL 2.14.3 gives the same 24: 12 x 22 GB/s at 44 GB/s); printed as '24 coll channels' on p5"),
    "across_domains": CtaCount(
        16, "estimate", f"{_P5_LOG} L90-95; {_V218}src/graph/search.cc L777, L782, L954-961; src/graph/connect.cc L389",
        "collective channels of a multi-node H100 job ('16 coll channels' on two p5 nodes); 8 NICs under "
        "50 GB/s each give 8 search channels, not duplicated, doubled: 16; depends on the NICs"),
}


def nccl_ring_ctas(problem: Problem) -> Any:
    """SMs one ring collective over the dense data-parallel (FSDP) group holds: the in-domain count when the
    group lies in the worst-placed rank's NVLink domain, else the cross-domain count."""
    lay = problem.layout
    size, stride = lay.sharding_ranks, lay.tensor_parallel
    k = local_members(size, stride, lay.devices, lay.devices_per_node)
    return where(k >= size, NCCL_RING_CTAS["in_domain"].value, NCCL_RING_CTAS["across_domains"].value)


def dp_sm_share_loss(problem: Problem, hidden_s: Any) -> Any:
    """Compute time the data-parallel ring collectives take from the compute they hide behind: `hidden_s`
    (the part of the traffic the overlap hides: min(traffic, window)) x collective channels / SMs, for every
    data parallelism btacalc overlaps through NCCL (PyTorch FSDP1, Megatron-FSDP / ZeRO-3's per-micro-batch
    traffic, Megatron DDP's --overlap-grad-reduce / --overlap-param-gather buckets: module docstring)."""
    sms = problem.hardware.chip.cores.value
    return where(problem.layout.sharding_ranks > 1, hidden_s * nccl_ring_ctas(problem) / sms, 0.0)


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
