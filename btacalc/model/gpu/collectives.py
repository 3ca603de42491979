"""Collective communication of a Megatron layout: the bytes a rank sends, the link they cross, the time
NCCL takes.

**Placement** (Megatron-Core parallel_state.py, default rank order tp-cp-ep-dp-pp; the expert grid
orders ETP, EP, EDP, PP): a group of n ranks at stride s is laid out in blocks of L = n·s consecutive
ranks (TP: stride 1; CP: stride TP; ETP: 1; EP: ETP; DP: TP·CP; the distributed optimizer's DP·CP
shard group: TP; EDP: ETP·EP), and the job fills NVLink domains of D ranks in order (the profile's
devices_per_node, or --gpus-per-node: 8 in a DGX/HGX node, 72 in a GB200 NVL72 rack). Block j starts
at rank j·L; where a domain boundary cuts it, the rank in the smaller piece shares its domain with
only floor(piece / s) members of its group, and that rank sets the pace (`local_members`). A 64-rank
EP group of a 64-GPU job sits in one 72-GPU domain and runs on NVLink; the second block of a 128-GPU
job (ranks 64-127) is cut at rank 72, leaving 8 of its members in the first domain.

**Time of one collective** (the alpha-beta model; NCCL-tests doc/PERFORMANCE.md, "bus bandwidth"):

    t = calls x alpha + bus bytes / (B x e)

A ring collective over a buffer of S bytes puts factor·(n - 1)/n·S on each rank's link (all-reduce 2,
reduce-scatter and all-gather 1: formulas/constants.toml [collectives]). B is the link's line rate and
e the share NCCL reaches on large messages; alpha the time of one small call; both per link class
from published nccl-tests results (the profile's [collectives] section, each number with its
source). The achieved bus bandwidth at x bus bytes per call is then

    busbw(x) = B·e·x / (x + h),   h = alpha·B·e  (half of B·e at x = h)

the efficiency-by-size curve of the profile (`efficiency_at`). Inside one domain the link is NVLink
(scale-up); a ring that crosses domains runs one ring per NIC rail, so a domain holding k members
drives k NICs and the ring moves min(B_up·e_up, k·B_out·e_out) bytes/s per rank, paying the network's
alpha per call. Without a [collectives] section e = 1 and alpha = 0 (line rate).

Ring collectives (all-gather, reduce-scatter, all-reduce) no longer pay one alpha per call: a call takes what
NCCL's tuning model gives for its group (`nccl.py`: ring latency growing with the steps in and between NVLink
domains, LL / LL128 / Simple, tree for all-reduce, the Simple ring at B·e), with the profile's [collectives]
section. Point-to-point sends and the all-to-all keep alpha.

**All-to-all** (expert dispatch and combine): each rank sends its EP - 1 peers their share at once, the
k - 1 peers in its domain over NVLink and the others through its NIC, concurrently. The NIC's share runs at
the profile's all-to-all efficiency (`all_to_all_link`: nccl-tests alltoall_perf across nodes, busbw =
algbw·(n - 1)/n, which on a network-only all-to-all is the NIC's own throughput), not the ring's: NCCL's
grouped send/recv gives each network peer up to max(NICs, ceil(NIC GB/s / 14)) channels (fewer when the
peers do not fit one round), each of 8 steps of 128 KB in flight (NVIDIA/nccl @ 5067397c src/graph/paths.cc
L918, L950, L993-1000; src/init.cc L818; src/include/device.h L26), so a per-peer message of a MB or more
keeps the NIC busy and no size term beyond alpha is added. With DeepEP
(Megatron --moe-token-dispatcher-type flex, DeepEP README "normal kernels": NVLink and RDMA forwarding;
DeepSeek-V3 report arXiv 2412.19437 §3.2.2) a token crosses to each remote domain once, however many
of its top-k experts live there, and is forwarded to them over NVLink: the cross-domain bytes shrink by

    dedup = E[distinct remote domains hit] / E[remote experts hit]
          = (m - 1)·(1 - P0) / (k·(m - 1)/m),   P0 = prod_{i<k} (E - E/m - i)/(E - i)

for k of E experts drawn uniformly without replacement over m = EP / (local members) domains (P0: a
given domain receives none of the k), and the forwarded copies add to the NVLink bytes.

DeepEP (and HybridEP) also send a token to each *rank* once, not once per expert there: the layout
kernel gives every token a destination-rank mask (`is_token_in_rank`) and the receiver permutes the
copy to its local experts (Megatron-LM @ 1e057005 megatron/core/transformer/moe/fused_a2a.py L72-106,
`get_dispatch_layout` then `dispatch(..., is_token_in_rank=...)`; HybridEP: the same file @ d98e8a64
L419-433, `dispatch_with_permute` receives per rank and permutes to `num_of_experts_per_rank` there).
The NVLink bytes (to the peers in the domain and the forwarded copies) therefore shrink by the same
expression over m = EP ranks, E/EP experts each:

    rank dedup = EP·(1 - P0) / k,   P0 = prod_{i<k} (E - E/EP - i)/(E - i)

0.667 for Qwen3-235B-A22B at EP 8 (16 experts per rank, top-8: P0 = C(112, 8)/C(128, 8) = 0.333).
The volume DeepEP's README measures its NVLink rate on is this deduplicated one (the received `recv_x`
per rank: 153 GB/s dispatch, 158 GB/s combine on 8 H800 of ~160 GB/s usable NVLink, docs/legacy.md
"Normal kernels"), 0.77 of H800's 200 GB/s per direction, the profile's NVLink bus efficiency of 0.80.
Megatron's alltoall dispatcher copies a token once per expert (`permute` to tokens x top-k rows before
its all-to-all) and keeps the per-expert volume.

**Calls** per step: each tensor-parallel, context-parallel and all-to-all exchange of a layer per
micro-batch (counted by `costs.py` with the volumes), each pipeline send, and the data-parallel
buckets: Megatron-Core reduces gradients in buckets of max(4e7, 1e6·DP) parameters when
--overlap-grad-reduce is on, else in one (Megatron-LM @ d98e8a64
megatron/core/distributed/distributed_data_parallel.py:131-137).

**Data-parallel synchronisation** per optimizer step (Megatron-Core distributed data parallel; ZeRO,
Rajbhandari et al. 2020 §7): ZeRO-0 all-reduces the gradients; the distributed optimizer (ZeRO-1)
reduce-scatters them once and all-gathers the updated 16-bit weights; ZeRO-2 reduce-scatters every
micro-batch; ZeRO-3 / FSDP all-gather each layer's weights before its forward and again before its
backward and reduce-scatter its gradients, every micro-batch (Megatron-LM megatron_fsdp.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ...catalogue.constants import constants
from ..arrays import ceil_div, is_array, largest, maximum, minimum, where
from ..problem import Problem
from ...memo import plain_key
from . import nccl
from .precision import param_gather_factor

# Megatron's default gradient bucket: max(4e7, 1e6 x |DP x CP group|) parameters (Megatron-LM @ d98e8a64
# megatron/training/training.py L2179-2194 `resolve_ddp_bucket_size`, called with pg_collection.dp_cp at L2497-2502;
# the module's own fallback, distributed_data_parallel.py L133-134, is not reached from pretrain)
BUCKET_PARAMS = 40_000_000
BUCKET_PARAMS_PER_DP_RANK = 1_000_000


@dataclass(frozen=True)
class Link:
    """One link class as NCCL uses it: line rate per device per direction, the share of it large
    collectives reach (bus efficiency) and the time of one small call."""

    bandwidth_bytes_per_s: float
    bus_efficiency: float
    latency_s: float
    latency_scale: float = 1.0  # NCCL's model latencies on this link x measured / model at the reference

    @property
    def bus_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.bus_efficiency

    @property
    def half_size_bytes(self) -> float:
        """h = alpha x B x e: the bus bytes per call at which half of B x e is reached."""
        return self.latency_s * self.bus_bytes_per_s


def links(problem: Problem) -> tuple[Link, Link]:
    """(scale-up NVLink, scale-out NIC) links of the problem's profile (once per problem)."""
    pair = problem.layout_cache.get("links")
    if pair is None:
        pair = problem.layout_cache["links"] = _links(problem)
    return pair


def _links(problem: Problem) -> tuple[Link, Link]:
    system, c = problem.hardware.system, problem.hardware.collectives
    up = system.scaleup_bandwidth_bytes_per_s.value  # type: ignore[union-attr]  # validated (multi_device)
    out = system.scaleout_bandwidth_bytes_per_s.value  # type: ignore[union-attr]  # validated (multi_device)
    if c is None:
        return Link(up, 1.0, 0.0), Link(out, 1.0, 0.0)
    scaleup = Link(up, c.scaleup_bus_efficiency.value, c.scaleup_latency_s.value)
    scaleout = Link(out, c.scaleout_bus_efficiency.value, c.scaleout_latency_s.value)
    return (_anchored(problem, scaleup, c.scaleup_reference, scaleup.bus_bytes_per_s),
            _anchored(problem, scaleout, c.scaleout_reference, scaleup.bus_bytes_per_s))


def _anchored(problem: Problem, link: Link, ref: Any, up_bus_bytes_per_s: float) -> Link:
    """The link with NCCL's latencies scaled to its measured latency at the profile's reference configuration
    (nccl.reference_scale); unscaled without a reference. The reference group's bus bandwidth is the ring's
    (`_ring_link`): NVLink in a node, else min(NVLink, ranks per node x NIC)."""
    if ref is None:
        return link
    per_node = ref.ranks // ref.nodes
    rate = up_bus_bytes_per_s if ref.nodes == 1 else min(up_bus_bytes_per_s, per_node * link.bus_bytes_per_s)
    # the reference was measured under NCCL's default algorithms, whatever the run's NCCL_ALGO
    group = replace(nccl_group(problem, (ref.ranks, ref.nodes), getattr(constants().collectives, ref.collective), rate),
                    ring_only=False)
    return replace(link, latency_scale=nccl.reference_scale(group, ref.message_bytes, link.latency_s))


def nccl_group(problem: Problem, ranks_nodes: tuple[Any, Any], kind: Any, rate: Any, scale: Any = 1.0) -> nccl.Group:
    """NCCL's view of a group of `ranks_nodes` = (ranks, NVLink domains) running a collective of factor `kind` with a
    Simple ring at `rate` bus bytes/s and latencies x `scale`: the run's NCCL_ALGO and LL's cap for the profile's GPU
    generation and the group's nodes (`nccl.ll_max_bytes_per_s`)."""
    ranks, nodes = ranks_nodes
    cc = problem.hardware.chip.compute_capability
    cap = nccl.ll_max_bytes_per_s(None if cc is None else float(cc.value), nodes)
    return nccl.Group(ranks, nodes, kind, rate, scale, problem.run.nccl_ring_only, cap)


def efficiency_at(link: Link, bus_bytes_per_call: Any) -> Any:
    """Achieved bus bandwidth over the line rate at `bus_bytes_per_call`: e·x / (x + h)."""
    return link.bus_efficiency * bus_bytes_per_call / (bus_bytes_per_call + link.half_size_bytes)


def ring_factor(kind: str, n: Any) -> Any:
    """Bus bytes per buffer byte of a ring collective on n ranks: all-reduce 2(n-1)/n, reduce-scatter and
    all-gather (n-1)/n (NCCL-tests PERFORMANCE.md)."""
    return getattr(constants().collectives, kind) * ring_share(n)


def ring_share(n: Any) -> Any:
    """(n - 1)/n: the share of a buffer a ring collective moves per rank (0 for one rank)."""
    return (n - 1) / n


_KEY = 1 << 21  # above the largest device count (2^20, config/execution.py): three fit one int64
_FEW_GROUPS = 64  # distinct groups walked one by one in Python integers; more: one walk over their arrays


def local_members(size: Any, stride: Any, devices: Any, domain: int) -> Any:
    """Members of a group (`size` ranks at `stride`) that share the NVLink domain of its worst-placed
    rank (see the module docstring): `size` when every block of L = size·stride ranks lies in one
    domain. Block j starts at r = j·L mod D; r repeats with a period of at most D blocks."""
    return _per_distinct_group(size, stride, devices, domain, _local_members)[0]


Walk = Callable[[Any, Any, Any, int], Any]


def _per_distinct_group(size: Any, stride: Any, devices: Any, domain: int, *walks: Walk) -> tuple[Any, ...]:
    """Each `walk(size, stride, devices, domain)`, a loop of up to D steps over its arguments. Over arrays of layouts
    (a search: thousands of layouts, a handful of distinct groups) the distinct (size, stride, devices) are found once,
    each walk runs once per distinct group and is spread back: the same integers per element."""
    if is_array(size, stride):  # (a scalar group over arrays of device counts: the walk as it is)
        size, stride, devices = np.broadcast_arrays(size, stride, devices)
        ints = all(x.dtype.kind in "iu" for x in (size, stride, devices))
        if ints and 0 < size.size and max(int(np.max(x)) for x in (size, stride, devices)) < _KEY:
            # one int64 per (size, stride, devices); each cast, as `_distinct` reads the bytes as int64 (an unsigned
            # 64-bit array promoted the sum to float64, whose bytes read as int64 gave other groups: review18)
            key = (size.astype(np.int64) * _KEY + stride.astype(np.int64)) * _KEY + devices.astype(np.int64)
            distinct, back = _distinct(key.reshape(-1).tobytes())
            pick = (distinct // _KEY // _KEY, distinct // _KEY % _KEY, distinct % _KEY)
            dtype = np.result_type(size, stride, devices)  # the dtype the walk itself gives
            if len(distinct) <= _FEW_GROUPS:  # a handful: each walked in Python integers, no array per step
                groups = list(zip(*(x.tolist() for x in pick)))
                outs = [np.array([_walked(walk, n, k, d, domain) for n, k, d in groups], dtype=dtype)
                        for walk in walks]
            else:
                outs = [np.asarray(walk(*pick, domain)).astype(dtype) for walk in walks]
            return tuple(out[back.reshape(-1)].reshape(size.shape) for out in outs)
    return tuple(walk(size, stride, devices, domain) for walk in walks)


@functools.lru_cache(maxsize=64)
def _distinct(keys: bytes) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(keys, return_inverse=True) of an int64 buffer. A search asks for the same layouts' groups
    thousands of times (a sort each: 2.2 of 11 s of a 256-GB200 search, profiled); the answer depends on the
    bytes alone, so it is kept for the last 64 distinct buffers (read-only arrays: a caller cannot alter them)."""
    distinct, back = np.unique(np.frombuffer(keys, dtype=np.int64), return_inverse=True)
    distinct.flags.writeable = back.flags.writeable = False
    return distinct, back


@functools.lru_cache(maxsize=4096)
def _walked(walk: Walk, size: int, stride: int, devices: int, domain: int) -> Any:
    """`walk` on one group in Python integers: a pure function of its integers, walked once per group (a
    search meets the same few hundred groups in every evaluation of its stages)."""
    return walk(size, stride, devices, domain)


def _local_members(size: Any, stride: Any, devices: Any, domain: int) -> Any:
    length = size * stride
    if not is_array(length) and domain % length == 0:  # blocks tile the domains: no block is cut
        return size
    worst = minimum(length, domain)
    blocks = maximum(devices // length, 1)
    for j in range(min(largest(blocks), domain)):
        r = (j * length) % domain
        first = where(r > 0, domain - r, domain)
        end = (r + length) % domain
        piece = minimum(minimum(first, where(end > 0, end, domain)), length)
        worst = where(j < blocks, minimum(worst, piece), worst)
    return minimum(size, maximum(worst // stride, 1))


def ring_time(problem: Problem, bytes_per_rank: Any, size: Any, stride: Any, calls: Any = 1, kind: Any = None) -> Any:
    """Time of `calls` ring collectives moving `bytes_per_rank` bus bytes in all (already x factor x
    (n-1)/n) over a group of `size` ranks at `stride` (see the module docstring); 0 for one rank. `kind` is the
    collective's factor (formulas/constants.toml [collectives]: all-reduce 2, all-gather / reduce-scatter 1): each
    call then takes what NCCL's tuning model gives (`nccl.call_time_s`); without it a call costs the link's alpha, as
    every call does on a profile without a [collectives] section (line rate, alpha 0). Point-to-point sends (the
    pipeline, the context-parallel K/V ring) are not rings of this kind: `p2p_link`."""
    if problem.layout.devices == 1:
        return 0.0
    if type(size) is int and type(stride) is int:  # one group: its link, once per problem
        key = ("ring link", size, stride)
        link = problem.layout_cache.get(key)
        if link is None:
            link = problem.layout_cache[key] = _ring_link(problem, size, stride)
    else:
        link = _ring_link(problem, size, stride)
    rate, alpha, nodes, scale = link
    if kind is None or problem.hardware.collectives is None:  # sends, or a profile at line rate (no NCCL data)
        return where(size > 1, calls * alpha + bytes_per_rank / rate, 0.0)
    many = calls > 0
    share = where(size > 1, kind * ring_share(where(size > 1, size, 2)), 1)
    nbytes = bytes_per_rank / where(many, calls, 1) / share  # NCCL's nBytes: the buffer of one call
    per_call = nccl.call_time_s(nccl_group(problem, (size, nodes), kind, rate, scale), nbytes)
    return where(size > 1, where(many, calls * per_call, bytes_per_rank / rate), 0.0)


def _ring_link(problem: Problem, size: Any, stride: Any) -> tuple[Any, Any, Any, Any]:
    """(bus bytes/s, latency per call, NVLink domains spanned, latency scale) of a group of `size` ranks at
    `stride`: NVLink when the group's worst-placed rank has all its members in its domain, else the scale-out
    NICs of its local members; the domains NCCL's ring crosses are those of the widest group (`domains_spanned`);
    the scale of NCCL's latencies is the link class's (`_anchored`)."""
    lay = problem.layout
    up, out = links(problem)
    k, spanned = _per_distinct_group(size, stride, lay.devices, lay.devices_per_node, _local_members, _domains_spanned)
    inside = k >= size
    rate = where(inside, up.bus_bytes_per_s, minimum(up.bus_bytes_per_s, k * out.bus_bytes_per_s))
    alpha = where(inside, up.latency_s, out.latency_s)
    nodes = where(inside, 1, spanned)
    return rate, alpha, nodes, where(inside, up.latency_scale, out.latency_scale)


def _ring_line_rate(problem: Problem, size: int, stride: int) -> float:
    """The line rate (bytes/s per direction) of the link that sets a ring's pace (`_ring_link`): NVLink inside the
    domain, and across it NVLink when its bus rate is at most the k NICs' (k members in the worst-placed rank's domain;
    at a tie both give the ring's rate), else the k NICs' (review31: a row's efficiency had taken the NIC's e times the
    share of an NVLink-bound rate)."""
    lay = problem.layout
    up, out = links(problem)
    k = local_members(size, stride, lay.devices, lay.devices_per_node)
    nvlink_paced = k >= size or up.bus_bytes_per_s <= k * out.bus_bytes_per_s
    return up.bandwidth_bytes_per_s if nvlink_paced else k * out.bandwidth_bytes_per_s


def domains_spanned(size: Any, stride: Any, devices: Any, domain: int) -> Any:
    """NVLink domains (NCCL's nodes) the widest group spans: block j of L = size·stride ranks starts at
    r = j·L mod D and touches ceil((r + L) / D) domains (at most `size`); r repeats within D blocks. Over arrays,
    once per distinct group (`_per_distinct_group`: a GB200 search walked 72 steps over every layout)."""
    return _per_distinct_group(size, stride, devices, domain, _domains_spanned)[0]


def _domains_spanned(size: Any, stride: Any, devices: Any, domain: int) -> Any:
    length = size * stride
    blocks = maximum(devices // length, 1)
    widest = ceil_div(length, domain)
    for j in range(min(largest(blocks), domain)):
        r = (j * length) % domain
        widest = where(j < blocks, maximum(widest, ceil_div(r + length, domain)), widest)
    return minimum(widest, size)


def tensor_parallel_kind(problem: Problem) -> Any:
    """The factor of a tensor-parallel collective: all-gather / reduce-scatter with sequence parallelism, else
    all-reduce (costs._volumes)."""
    c = constants().collectives
    return where(problem.layout.sequence_parallel, c.reduce_scatter, c.all_reduce)


def tensor_parallel_time(problem: Problem, volume: Any, calls: Any = 0) -> Any:
    """Tensor-parallel exchanges of `volume` collective units (part.Part.tp_bytes) in `calls` calls."""
    t = problem.layout.tensor_parallel
    return ring_time(problem, volume * ring_share(t), t, 1, calls, tensor_parallel_kind(problem))


def p2p_link(problem: Problem, size: Any, stride: Any) -> tuple[Any, Any]:
    """(latency per send, bytes/s) of the point-to-point sends between neighbours of a group of `size` ranks at
    `stride` (the pipeline, the context-parallel K/V ring): NVLink when the group's worst-placed rank has all its
    members in its domain, else the slowest hop crosses domains as one GPU's send to one remote GPU, through one NIC
    (review31: the K/V ring had taken the NICs of all the members in the domain, as a ring collective's channels
    do; a single send cannot spread over them)."""
    up, out = links(problem)
    inside = local_members(size, stride, problem.layout.devices, problem.layout.devices_per_node) >= size
    return where(inside, up.latency_s, out.latency_s), where(inside, up.bus_bytes_per_s, out.bus_bytes_per_s)


def context_parallel_time(problem: Problem, volume: Any, calls: Any = 0) -> Any:
    """The K/V ring: CP - 1 sends of `volume` per pass to the next rank (point-to-point, `p2p_link`), each of the
    `calls` exchanges in CP - 1 steps; 0 with one rank."""
    lay = problem.layout
    if lay.devices == 1:
        return 0.0
    cp = lay.context_parallel
    hit = problem.layout_cache.get("context parallel link")  # the layout's part, once per layout
    if hit is None:
        hit = problem.layout_cache["context parallel link"] = p2p_link(problem, cp, lay.tensor_parallel)
    alpha, rate = hit
    steps = cp - 1
    return where(cp > 1, calls * steps * alpha + volume * steps / rate, 0.0)


def deepep_dedup(problem: Problem, domains: Any) -> Any:
    """Share of the expert traffic DeepEP still sends (see the module docstring): distinct remote groups
    over remote experts a token's top-k reaches, experts spread evenly over `domains` groups (NVLink
    domains for the cross-domain bytes, EP ranks for the per-rank copies)."""
    model = problem.model
    e, k = float(model.num_experts), int(model.top_k)
    m = maximum(domains, 1)
    none = 1.0
    for i in range(k):
        none = none * maximum(e - e / m - i, 0.0) / (e - i)
    remote_copies = k * (m - 1) / m
    return where(m > 1, (m - 1) * (1 - none) / where(m > 1, remote_copies, 1.0), 1.0)


def all_to_all_time(problem: Problem, volume: Any, calls: Any = 0, token_calls: Any = None) -> Any:
    """Expert-parallel dispatch + combine of `volume` bytes (all passes, before the 1/EP kept locally)
    in `calls` all-to-alls (`token_calls` of them carry the tokens; None: all), plus the expert-tensor-parallel
    all-gather / reduce-scatter of the received copies."""
    return expert_exchange_time(problem, volume, calls) + expert_tensor_parallel_time(problem, volume, calls,
                                                                                      token_calls)


def expert_exchange_time(problem: Problem, volume: Any, calls: Any = 0) -> Any:
    """The expert-parallel dispatch + combine alone (`all_to_all_time` less the expert-tensor-parallel part)."""
    if problem.layout.devices == 1:
        return 0.0
    f = _all_to_all_layout(problem)
    inside, across, forwarded = _all_to_all_bytes(problem, volume)
    a2a = maximum((inside + forwarded) / f.up_rate, across / f.out_rate)
    return where(f.ep > 1, calls * f.alpha + a2a, 0.0)


def expert_tensor_parallel_bytes(problem: Problem, volume: Any) -> Any:
    """Bus bytes of the expert-tensor-parallel all-gather / reduce-scatter of the `volume` an expert all-to-all
    exchanges: each rank's received copies go to its t_e - 1 peers."""
    return volume * (problem.layout.expert_tensor_parallel - 1)


# the expert-tensor-parallel collective: an all-gather (forward) and a reduce-scatter (backward) of the received
# copies, each of the all-gather's factor (formulas/constants.toml [collectives]); its time and its `plan --json` row
# both take the kind from here (hostile24: the row wrote its own copy of the time's kind)
EXPERT_TENSOR_PARALLEL_COLLECTIVE = "all_gather+reduce_scatter"


def expert_tensor_parallel_kind() -> float:
    """The expert-tensor-parallel collective's factor (EXPERT_TENSOR_PARALLEL_COLLECTIVE)."""
    return constants().collectives.all_gather


def expert_tensor_parallel_time(problem: Problem, volume: Any, calls: Any = 0, token_calls: Any = None) -> Any:
    """The expert-tensor-parallel all-gather / reduce-scatter of the received copies (`all_to_all_time`'s
    second part): a ring over the t_e ranks of one expert-tensor-parallel group (stride 1, Megatron's
    expert rank order puts ETP innermost), 0 at ETP 1. The tokens' bytes go in their `token_calls` (None: every
    call); each other call gathers the routing probabilities (token_dispatcher.py L746-751 @ d98e8a64), whose bytes
    are not counted: NCCL's time of an empty call, its latency, each."""
    etp, kind = problem.layout.expert_tensor_parallel, expert_tensor_parallel_kind()
    tokens = calls if token_calls is None else token_calls
    t = ring_time(problem, expert_tensor_parallel_bytes(problem, volume), etp, 1, tokens, kind)
    if token_calls is None or (type(etp) is int and etp == 1):  # no other calls, or no ETP group to gather over
        return t
    return t + (calls - tokens) * ring_time(problem, 0.0, etp, 1, 1, kind)


def describe_expert_tensor_parallel(problem: Problem, volume: Any, calls: tuple[Any, Any],
                                    time_s: Any) -> CollectiveRow:
    """The `expert_tensor_parallel` row of the all-to-alls' `volume` bytes in `calls` = (all calls, those that carry
    the tokens: the message size is theirs), timed `time_s` (`expert_tensor_parallel_time`), with that time's kind
    and group."""
    every, tokens = calls
    row = describe(problem, "expert_tensor_parallel", (problem.layout.expert_tensor_parallel, 1),
                   (expert_tensor_parallel_bytes(problem, volume), tokens), time_s,
                   kind=expert_tensor_parallel_kind(), collective=EXPERT_TENSOR_PARALLEL_COLLECTIVE)
    return replace(row, calls=float(every))


# Megatron's allgather dispatcher (`Layout.allgather_dispatcher`, Megatron-LM @ d98e8a64
# megatron/core/transformer/moe/token_dispatcher.py L281-368): the dispatch all-gathers each rank's tokens over the
# tp_ep group (ETP x EP ranks, consecutive in Megatron's expert rank order tp-ep-dp-pp) and the combine
# reduce-scatters the unpermuted outputs back; their backward passes are the other collective. Each is the
# all-gather's factor (formulas/constants.toml [collectives]); the catalogue's `gather_bytes` is a rank's contribution
# (its tokens), so one call's buffer is n_g contributions and its bus bytes per rank (n_g - 1) of them.
ALLGATHER_DISPATCH_COLLECTIVE = "all_gather+reduce_scatter"


def allgather_dispatch_bytes(problem: Problem, volume: Any) -> Any:
    """Bus bytes per rank of the allgather dispatcher's collectives moving `volume`, the rank's own contributions
    (Part.gather_bytes): each call's buffer holds n_g of them and a ring passes (n_g - 1)/n_g of the buffer."""
    return volume * (problem.layout.expert_model_parallel - 1)


def allgather_dispatch_time(problem: Problem, volume: Any, calls: Any = 0) -> Any:
    """The allgather dispatcher's all-gathers and reduce-scatters of `volume` (Part.gather_bytes) in `calls`
    calls: NCCL rings over the n_g ranks of the tp_ep group at stride 1; 0 without the dispatcher (volume 0) or
    with one rank."""
    n = problem.layout.expert_model_parallel  # the tp_ep group (token_dispatcher.py L86-88, pg_collection.tp_ep)
    kind = constants().collectives.all_gather
    return ring_time(problem, allgather_dispatch_bytes(problem, volume), n, 1, calls, kind)


def describe_allgather_dispatch(problem: Problem, volume: Any, calls: Any, time_s: Any, name: str = "moe_allgather",
                                collective: str = ALLGATHER_DISPATCH_COLLECTIVE) -> CollectiveRow:
    """The `moe_allgather` row of the allgather dispatcher's `volume` (Part.gather_bytes, all passes) in `calls`
    calls, timed `time_s` (`allgather_dispatch_time`); `name` and `collective` another ring of the same tp_ep group
    (`describe_count_gather`)."""
    return describe(problem, name, (problem.layout.expert_model_parallel, 1),
                    (allgather_dispatch_bytes(problem, volume), calls), time_s,
                    kind=constants().collectives.all_gather, collective=collective)


# The alltoall dispatcher's all-gather of each rank's routed-copy count per expert over the tp_ep group, before its
# all-to-all (Phase.count_gathers; Megatron-LM @ d98e8a64 token_dispatcher.py L557-576): a ring all-gather whose
# buffer is n_g contributions of 8 E bytes (1 KiB at E = 128: NCCL's latency, for any model btacalc ships).
COUNT_GATHER_COLLECTIVE = "all_gather"


def count_gather_time(problem: Problem, volume: Any, calls: Any = 0) -> Any:
    """The count all-gathers of `volume` bytes (Part.count_bytes: the rank's contributions, all calls) in `calls`
    calls: NCCL rings over the n_g ranks of the tp_ep group at stride 1, as the allgather dispatcher's; 0 with one
    rank (mappings.py L133-135 skips the call)."""
    return allgather_dispatch_time(problem, volume, calls)


def describe_count_gather(problem: Problem, volume: Any, calls: Any, time_s: Any) -> CollectiveRow:
    """The `moe_token_counts` row of the count all-gathers' `volume` (Part.count_bytes) in `calls` calls, timed
    `time_s` (`count_gather_time`)."""
    return describe_allgather_dispatch(problem, volume, calls, time_s, "moe_token_counts", COUNT_GATHER_COLLECTIVE)


@dataclass(frozen=True)
class _AllToAllLayout:
    """What an expert all-to-all's time takes from the layout alone (`all_to_all_time`, `_all_to_all_bytes`),
    computed once per layout (kept in `Problem.layout_cache`): the same values each call computed."""

    ep: Any
    up_rate: float  # scale-up bus bytes/s
    out_rate: float  # scale-out bus bytes/s
    alpha: Any  # latency per call: NVLink when the EP group's worst-placed rank has every member in its domain
    share: Any  # ring_share(EP): the bytes leaving a rank
    intra: Any  # the share of those sent inside the NVLink domain
    per_rank: Any  # DeepEP: deduplication per destination rank (1.0 without DeepEP)
    per_domain: Any  # DeepEP: deduplication per destination domain (1.0 without DeepEP)


def all_to_all_link(problem: Problem) -> Link:
    """The NIC as an expert all-to-all's cross-domain bytes use it: grouped send/recv to every peer, at the
    profile's measured all-to-all efficiency (`scaleout_all_to_all_efficiency`, nccl-tests alltoall_perf), else
    at the ring collectives' (`scaleout_bus_efficiency`). Hybrid-EP (`Layout.hybridep`) at its own benchmark's
    share where the profile has one: across exactly two NVLink domains, or across more (`expert_domains`)."""
    out = links(problem)[1]
    c = problem.hardware.collectives
    a2a = c.scaleout_all_to_all_efficiency if c is not None else None
    if c is not None and problem.layout.hybridep:
        two, more = c.hybridep_scaleout_efficiency_two_nodes, c.hybridep_scaleout_efficiency
        if two is not None and more is not None:
            return replace(out, bus_efficiency=where(expert_domains(problem) <= 2, two.value, more.value))
    return out if a2a is None else replace(out, bus_efficiency=a2a.value)


def expert_domain_members(problem: Problem) -> Any:
    """Members of an expert-parallel group (EP ranks at stride ETP) in the worst-placed rank's NVLink domain."""
    lay = problem.layout
    return local_members(lay.expert_parallel, lay.expert_tensor_parallel, lay.devices, lay.devices_per_node)


def expert_domains(problem: Problem) -> Any:
    """NVLink domains an expert-parallel group spans: EP over the members of the worst-placed rank's domain."""
    return problem.layout.expert_parallel / maximum(expert_domain_members(problem), 1)


def all_to_all_nvlink(problem: Problem) -> Link:
    """NVLink as an expert all-to-all's bytes inside the domain use it. NCCL's all-to-all (Megatron's alltoall
    dispatcher: `all_to_all_single`, grouped send/recv to every peer) runs at the profile's measured all-to-all
    efficiency (`scaleup_all_to_all_efficiency`, nccl-tests alltoall_perf in one node), below the ring
    collectives' on NVLink5 (0.64 against 0.80 on B200); DeepEP and HybridEP move the bytes with their own kernels,
    which DeepEP measures at the ring's share of NVLink (153 of ~200 GB/s on H800, module docstring), and keep
    `scaleup_bus_efficiency`, as a profile without the field does."""
    up = links(problem)[0]
    c = problem.hardware.collectives
    a2a = c.scaleup_all_to_all_efficiency if c is not None else None
    return up if a2a is None or problem.layout.deepep else replace(up, bus_efficiency=a2a.value)


def _all_to_all_layout(problem: Problem) -> _AllToAllLayout:
    f = problem.layout_cache.get("all-to-all layout")
    if f is None:
        lay = problem.layout
        up, out = all_to_all_nvlink(problem), all_to_all_link(problem)
        ep = lay.expert_parallel
        k = expert_domain_members(problem)
        deepep = bool(lay.deepep)
        f = problem.layout_cache["all-to-all layout"] = _AllToAllLayout(
            ep=ep, up_rate=up.bus_bytes_per_s, out_rate=out.bus_bytes_per_s,
            alpha=where(k >= ep, up.latency_s, out.latency_s), share=ring_share(ep),
            intra=where(ep > 1, (k - 1) / where(ep > 1, ep - 1, 1), 1.0),
            per_rank=deepep_dedup(problem, ep) if deepep else 1.0,
            per_domain=deepep_dedup(problem, ep / k) if deepep else 1.0)
    return f


def all_to_all_wire_bytes(problem: Problem, volume: Any) -> Any:
    """Bytes one rank sends to its EP peers for an expert all-to-all of `volume` bytes (what the
    `plan --json` row reports): its (EP - 1)/EP share, after DeepEP's deduplication when the run uses it
    (per destination rank inside a domain, per domain across it; the forwarding hop inside the receiving
    domain is not counted again)."""
    if problem.layout.devices == 1:
        return 0.0
    inside, across, _ = _all_to_all_bytes(problem, volume)
    return inside + across


def _all_to_all_bytes(problem: Problem, volume: Any) -> tuple[Any, Any, Any]:
    """(sent inside the NVLink domain, sent across domains, forwarded on NVLink) for one rank's share of an
    all-to-all of `volume` bytes; DeepEP deduplicates per destination rank inside a domain and per domain
    across it, and forwards what arrives over RDMA to the experts' ranks (module docstring)."""
    f = _all_to_all_layout(problem)  # the layout's factors, once per layout
    sent = volume * f.share
    cross = sent * (1 - f.intra)
    if not problem.layout.deepep:
        return sent * f.intra, cross, 0.0
    # one copy per destination rank (docstring), one per destination domain across domains
    return sent * f.intra * f.per_rank, cross * f.per_domain, cross * f.per_rank


def pipeline_p2p_time(problem: Problem, volume: Any) -> Any:
    """Sends between pipeline neighbours of one micro-batch: forward activation and backward gradient,
    once per model chunk (VP times with interleaving), each a call."""
    lay = problem.layout
    if lay.devices == 1:
        return 0.0
    hit = problem.layout_cache.get("pipeline link")  # the layout's part, once per layout
    if hit is None:
        pp = lay.pipeline_parallel
        sends = where(pp > 1, 2 * lay.virtual_pipeline, 0)
        # point to point: the pipeline group is PP ranks at stride devices/PP (`p2p_link`)
        alpha, link_rate = p2p_link(problem, pp, maximum(lay.devices // pp, 1))
        hit = problem.layout_cache["pipeline link"] = (pp > 1, sends, alpha, link_rate)
    piped, sends, alpha, link_rate = hit
    return where(piped, sends * alpha + volume * sends / link_rate, 0.0)


def _bucket_params(problem: Problem, params: Any) -> Any:
    """Parameters per gradient bucket of a rank holding `params`: --ddp-bucket-size (the layout's), else
    Megatron's default max(4e7, 1e6 x DP x CP). With --ddp-num-buckets N Megatron-LM @ d98e8a64 sets
    bucket_size = params // N (training.py L2186-2187) and a bucket closes once it holds bucket_size elements,
    the last taking the rest (core/distributed/param_and_grad_buffer.py L980-995): buckets of ceil(params / N)
    here. `params` is the rank's whole count over its model chunks (training.py L2442-2444, num_parameters)."""
    lay = problem.layout
    bucket = lay.ddp_bucket_params
    if lay.ddp_num_buckets is not None:
        bucket = maximum(ceil_div(params, lay.ddp_num_buckets), 1)
    elif bucket is None:
        bucket = maximum(BUCKET_PARAMS, BUCKET_PARAMS_PER_DP_RANK * lay.data_parallel * lay.context_parallel)
    return bucket


def gradient_buckets(problem: Problem, params: Any) -> Any:
    """Data-parallel collectives per optimizer step for `params` parameters all cut into buckets
    (`_bucket_params`); one bucket without the overlapped reduce (Megatron sets bucket_size None then,
    training.py L2192-2193)."""
    return where(problem.layout.overlap.grad_reduce,
                 maximum(ceil_div(params, _bucket_params(problem, params)), 1), 1)


@dataclass(frozen=True)
class StageBuckets:
    """Which of a pipeline stage's buffers Megatron-Core's DDP cuts into buckets (Megatron-LM @ d98e8a64).
    training.py L2504-2514 hands each model chunk its bucket size: None (one bucket per buffer, i.e. per
    dtype group, dense and expert apart: distributed_data_parallel.py L160-171, param_and_grad_buffer.py
    L954-1000) for chunks after the first and on every pipeline rank > 0; so only pipeline rank 0's model
    chunk 0 is bucketed. That chunk holds 1/VP of the stage's layers and the first stage's word embedding
    (an estimate: equal layer slices, as `timing._first_chunk_share`). With tied embeddings over PP > 1
    the distributed optimizer gives the embedding, and the last stage's copy of it, a bucket of its own
    (distrib_optimizer.py L530-576 `_does_param_require_new_bucket`, flagged in language_module.py
    L270-290): one more bucket on each of those two stages (`shared`). The layout's
    `ddp_buckets_every_stage`: Apex DistributedFusedAdam as NeMo 1.0 runs it (the MLPerf GPT-3 rows),
    which buckets every stage and chunk alike (apex/contrib/optimizers/distributed_fused_adam.py b7a4acc1
    L731-738: one bucket size for the whole rank)."""

    first_stage: Any = True  # pipeline rank 0 (a bool, or an array over layouts)
    embedding: Any = 0  # the word embedding's parameters per device on that stage (all in chunk 0)
    shared: Any = False  # the stage holds the tied embedding or its copy, split into a bucket of its own

    def calls(self, problem: Problem, params: Any) -> Any:
        """Reduce-scatters (and all-gathers) per step of a buffer of `params` parameters of the stage."""
        lay = problem.layout
        if lay.ddp_buckets_every_stage:
            return gradient_buckets(problem, params)
        vp = lay.virtual_pipeline
        embedding = minimum(self.embedding, params)
        first_chunk = embedding + ceil_div(params - embedding, vp)
        bucketed = where(lay.overlap.grad_reduce,
                         maximum(ceil_div(first_chunk, _bucket_params(problem, params)), 1), 1)
        split = where(self.shared & (lay.zero_stage >= 1) & (lay.pipeline_parallel > 1), 1, 0)
        return where(self.first_stage, bucketed + vp - 1, vp) + split


def sharded_calls_per_micro_batch(problem: Problem, buckets: Any) -> Any:
    """ZeRO-2 / ZeRO-3 collectives per micro-batch. PyTorch FSDP1 FULL_SHARD as llm-foundry wraps it runs them per
    FSDP unit, each transformer block (llm-foundry @ 5e85bd62d llmfoundry/models/mpt/modeling_mpt.py L675-676
    `fsdp_wrap_fn`: isinstance(module, MPTBlock)) plus the root: a block all-gathers before its forward, again
    before its backward (FULL_SHARD frees it after the forward) and reduce-scatters its gradient; the root is not
    freed after the forward (pytorch/pytorch@00ae0bc9 torch/distributed/fsdp/_runtime_utils.py
    `_post_forward_reshard`, `_post_backward_hook`): 3 L + 2 calls. FSDP2 as torchtitan wraps it (fully_shard per
    TransformerBlock, then the root; torchtitan @ 157a12c5 torchtitan/parallelisms/parallelize_llama.py L230-239):
    the last block is not resharded after its forward (reshard_after_forward = layer_id < L - 1), nor is the root
    (FSDP2's lazy init, torch/distributed/_composable/fsdp/_fsdp_state.py `_lazy_init`: "For the root, do not
    reshard after forward"): 3 (L - 1) + 2 + 2 = 3 L + 1 calls, beside TP too (torchtitan's 2-D runs: the same
    units over the data-parallel mesh, parallelize_llama.py L344-367 @ 820504e2). Otherwise (Megatron): one
    reduce-scatter per gradient bucket with ZeRO-2, and two gathers and a reduce-scatter per bucket with ZeRO-3."""
    lay = problem.layout
    if lay.torch_fsdp:
        return 3 * problem.model.num_layers + (1 if lay.fsdp_impl == "fsdp2" else 2)
    return buckets * where(lay.zero_stage >= 3, 3, 1)


@dataclass(frozen=True)
class DataParallelTimes:
    """Data-parallel synchronisation of one stage, before overlap."""

    reduce_per_step: Any  # gradient all-reduce / reduce-scatter once per optimizer step
    gather_per_step: Any  # the distributed optimizer's all-gather of the updated weights
    per_micro_batch: Any  # ZeRO-2 reduce-scatter, ZeRO-3 / FSDP gathers and reduce-scatter


def data_parallel_traffic(problem: Problem, params: Any, size: Any, rates: dict[str, int],
                          stage: StageBuckets = StageBuckets(), part: str = "dense") -> dict[str, tuple[Any, Any]]:
    """(bus bytes per rank, calls) of the data-parallel collectives over a group of `size` ranks holding
    `params` parameters per device (module docstring): "reduce_per_step" (ZeRO-0 all-reduce, ZeRO-1
    reduce-scatter of the gradients), "gather_per_step" (ZeRO-1/2 all-gather of the updated weights),
    "per_micro_batch" (ZeRO-2 reduce-scatter; ZeRO-3 / FSDP two weight all-gathers and a reduce-scatter).
    The per-step calls of Megatron's DDP (ZeRO <= 1) are `stage`'s buckets; the sharded paths bucket alike. Under
    PyTorch's FSDP a block's experts travel in its own unit (review31): the expert `part` has bytes but no calls of
    its own (sharded_calls_per_micro_batch counts the units)."""
    c, zero = constants().collectives, problem.layout.zero_stage
    share = ring_share(size) * params
    # --fp8-param-gather: the weights all-gathered in FP8 / FP4 (precision.param_gather_factor)
    g_bytes, w_bytes = rates["gradients"] * share, rates["weights"] * share * param_gather_factor(problem)
    buckets = where(params > 0, gradient_buckets(problem, params), 0)
    per_step = where(params > 0, where(zero <= 1, stage.calls(problem, params), buckets), 0)
    return {
        "reduce_per_step": (where(zero == 0, c.all_reduce * g_bytes, where(zero == 1, c.reduce_scatter * g_bytes, 0)),
                            where(zero <= 1, per_step, 0)),
        "gather_per_step": (where((zero == 1) | (zero == 2), c.all_gather * w_bytes, 0),
                            where((zero == 1) | (zero == 2), per_step, 0)),
        "per_micro_batch": (where(zero == 2, c.reduce_scatter * g_bytes,
                                  where(zero >= 3, 2 * c.all_gather * w_bytes + c.reduce_scatter * g_bytes, 0)),
                            where(zero >= 2, 0 if part == "expert" and problem.layout.torch_fsdp
                                  else sharded_calls_per_micro_batch(problem, buckets), 0)),
    }


# the collective under each key of data_parallel_traffic: (with ZeRO-0, with ZeRO >= 1)
_DP_KINDS = {"reduce_per_step": ("all_reduce", "reduce_scatter"), "gather_per_step": ("all_gather", "all_gather"),
             "per_micro_batch": ("reduce_scatter", "reduce_scatter")}


def data_parallel_kind(problem: Problem, key: str) -> Any:
    """The factor of the data-parallel collectives under `key` (data_parallel_traffic): the gradients all-reduced
    with ZeRO-0, every other one an all-gather or a reduce-scatter (ZeRO-3's two gathers and one reduce-scatter
    all have factor 1)."""
    c = constants().collectives
    zero0, sharded = _DP_KINDS[key]
    return where(problem.layout.zero_stage == 0, getattr(c, zero0), getattr(c, sharded))


def data_parallel_collective(problem: Problem, key: str) -> str:
    """The operation of the data-parallel collectives under `key` (data_parallel_traffic; one layout): the
    gradients' all-reduce (ZeRO-0) or reduce-scatter, the weights' all-gather, and under ZeRO-3 / FSDP per
    micro-batch two all-gathers and a reduce-scatter."""
    zero = problem.layout.zero_stage
    if key == "per_micro_batch" and zero >= 3:
        return "all_gather+reduce_scatter"
    return _DP_KINDS[key][0 if zero == 0 else 1]


def data_parallel_groups(problem: Problem) -> dict[str, tuple[Any, Any]]:
    """(ranks, stride) of the dense part's DP·CP group (stride TP) and the experts' EDP group (stride
    ETP·EP)."""
    lay = problem.layout
    return {"dense": (lay.sharding_ranks, lay.tensor_parallel),
            "expert": (lay.expert_data_parallel, lay.expert_model_parallel)}


def data_parallel_times(problem: Problem, dense: Any, expert: Any, rates: dict[str, int],
                        stage: StageBuckets = StageBuckets()) -> DataParallelTimes:
    """Synchronisation of a stage holding `dense` non-expert and `expert` parameters per device
    (before ZeRO sharding) over DP·CP and EDP ranks (see the module docstring), cut into `stage`'s buckets:
    the dense part, then the experts, one after the other. A function of the layout, of the two counts and
    of the stage's buckets: kept per layout when they are plain numbers (`btacalc.memo.plain_key`: ints,
    bools and Fractions, not arrays of layouts)."""
    key = plain_key((dense, expert, tuple(rates.items()), stage.first_stage, stage.embedding, stage.shared))
    if key is None:
        return _data_parallel_times(problem, (dense, expert), rates, stage)
    cache = problem.layout_cache
    times = cache.get(("data parallel times", key))
    if times is None:
        times = cache[("data parallel times", key)] = _data_parallel_times(problem, (dense, expert), rates, stage)
    return times


def part_buckets(stage: StageBuckets, part: str) -> StageBuckets:
    """`stage`'s buckets of its dense or expert buffer: the word embedding is dense."""
    return stage if part == "dense" else replace(stage, embedding=0, shared=False)


def _data_parallel_times(problem: Problem, params: tuple[Any, Any], rates: dict[str, int],
                         stage: StageBuckets) -> DataParallelTimes:
    total = dict.fromkeys(("reduce_per_step", "gather_per_step", "per_micro_batch"), 0.0)
    for part, held in zip(("dense", "expert"), params):
        size, stride = data_parallel_groups(problem)[part]
        traffic = data_parallel_traffic(problem, held, size, rates, part_buckets(stage, part), part)
        for key, (bus, calls) in traffic.items():
            total[key] = total[key] + ring_time(problem, bus, size, stride, calls, data_parallel_kind(problem, key))
    return DataParallelTimes(total["reduce_per_step"], total["gather_per_step"], total["per_micro_batch"])


@dataclass(frozen=True)
class CollectiveRow:
    """One collective of the plan, per step on the critical stage (for `plan --json`)."""

    name: str
    ranks: int
    algorithm: str
    link: str  # nvlink or network
    calls: float
    message_bytes: float  # bus bytes of one call
    efficiency: float  # achieved bus bandwidth over the line rate at that size
    latency_s: float  # per call
    time_s: float
    protocol: str = ""  # NCCL's protocol for a ring / tree collective (LL, LL128, Simple; nccl.py)
    steps: int = 0  # its latency steps (ring: kind x (n - 1); tree: 2 x (hops in and between nodes))
    # the operation: all_reduce, reduce_scatter, all_gather, all_gather+reduce_scatter (sequence-parallel TP, ZeRO-3's
    # two gathers and one reduce-scatter), send_recv or all_to_all
    collective: str = ""
    buffer_bytes: float = 0.0  # the tensor one call reduces, gathers, sends or exchanges (NCCL's nBytes)
    bus_factor: float = 0.0  # message_bytes / buffer_bytes: all-reduce 2(n-1)/n, gather or scatter (n-1)/n, send 1
    # the calls that move message_bytes each (bytes per step = message_bytes x message_calls): all of them, but the
    # expert exchange's under the alltoall dispatcher, whose other calls move the routing probabilities (a latency)
    message_calls: float = 0.0
    # freshuser25: the expert all-to-all's bytes of one token call as timed, by link: what stays in the NVLink domain
    # (with DeepEP's forwarding hop) and what crosses it; its time is the slower of the two at their rates, so
    # message_bytes (every byte leaving the rank) over one link's rate did not give it across nodes
    nvlink_bytes: float = 0.0
    network_bytes: float = 0.0


def describe_all_to_all(problem: Problem, traffic: tuple[Any, Any], time_s: Any, volume: Any = None,
                        token_calls: Any = None) -> CollectiveRow:
    """The expert all-to-all's row (`describe`): its efficiency is the all-to-all's (`all_to_all_link` across
    domains, `all_to_all_nvlink` inside one), not the ring collectives'. `volume`: the bytes the rank's calls
    exchange before the (EP - 1)/EP that leaves it (and DeepEP's deduplication): the buffer (None: not given).
    `token_calls`: the calls that carry the tokens (Part.a2a_token_calls; None: all of them), whose message and
    buffer the row gives; the others exchange the routing probabilities, a latency each."""
    lay = problem.layout
    bus, calls = traffic
    carrying = calls if token_calls is None else token_calls
    row = describe(problem, "expert_all_to_all", (lay.expert_parallel, lay.expert_tensor_parallel), (bus, carrying),
                   time_s, "hybridep" if lay.hybridep else "deepep" if lay.deepep else "all-to-all")
    row = replace(row, calls=float(calls))
    if volume is not None:
        row = _with_buffer(row, "all_to_all", float(volume / carrying) if carrying else 0.0)
        inside, across, forwarded = _all_to_all_bytes(problem, volume)
        if carrying:
            row = replace(row, nvlink_bytes=float((inside + forwarded) / carrying),
                          network_bytes=float(across / carrying))
    if not row.message_bytes:
        return row
    link = all_to_all_link(problem) if row.link == "network" else all_to_all_nvlink(problem)
    return replace(row, efficiency=float(efficiency_at(link, row.message_bytes)))


def _with_buffer(row: CollectiveRow, collective: str, buffer_bytes: float) -> CollectiveRow:
    """`row` with its operation and the buffer of one call; bus_factor = message_bytes / buffer_bytes."""
    return replace(row, collective=collective, buffer_bytes=buffer_bytes,
                   bus_factor=row.message_bytes / buffer_bytes if buffer_bytes else 0.0)


def describe(problem: Problem, name: str, group: tuple[int, int], traffic: tuple[Any, Any], time_s: Any,
             algorithm: str = "ring", kind: Any = None, collective: str = "") -> CollectiveRow:
    """The row of one collective on a `group` of (ranks, stride): `traffic` = (bus bytes, calls) per step
    and its time; `kind` (the collective's factor) for the collectives NCCL's tuning model times, whose
    algorithm, protocol, steps and latency are NCCL's choice for one call (nccl.choose). `collective`: the operation
    (`CollectiveRow.collective`); its buffer is the bus bytes of a call over kind x (n - 1)/n (a ring collective) or
    the bytes sent (a point-to-point send, `kind` None)."""
    lay = problem.layout
    size, stride = group
    bus_bytes, calls = traffic
    up, out = links(problem)
    inside = local_members(size, stride, lay.devices, lay.devices_per_node) >= size
    link = up if inside else out
    per_call = float(bus_bytes / calls) if calls else 0.0
    row = CollectiveRow(name=name, ranks=int(size), algorithm=algorithm, link="nvlink" if inside else "network",
                        calls=float(calls), message_bytes=per_call, message_calls=float(calls),
                        efficiency=float(efficiency_at(link, per_call)) if per_call else 0.0,
                        latency_s=link.latency_s, time_s=float(time_s))
    if collective:
        factor = 1.0 if kind is None else float(kind * ring_share(size))
        row = _with_buffer(row, collective, per_call / factor if factor else 0.0)
    if kind is None or not per_call or problem.hardware.collectives is None:
        return row
    rate, _, nodes, scale = _ring_link(problem, size, stride)
    one = nccl_group(problem, (size, nodes), kind, rate, scale)
    choice = nccl.choose(one, per_call / (kind * ring_share(size)))
    achieved = per_call / choice.time_s / _ring_line_rate(problem, size, stride)
    return replace(row, algorithm=choice.algorithm, protocol=choice.protocol, steps=choice.steps,
                   latency_s=choice.latency_s, efficiency=achieved)
