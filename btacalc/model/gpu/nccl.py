"""One collective call as NCCL's own tuning model times it (NVIDIA/nccl@5067397c, v2.30.7, src/graph/tuning.cc
`ncclTopoTuneModel` and `ncclTopoGetAlgoTime`; constants in formulas/constants.toml [nccl], each with its line).

NCCL predicts a call of `nBytes` (the buffer: all-reduce's, all-gather's output, reduce-scatter's input) by each
algorithm a and protocol p (LL, LL128, Simple) as latency(a, p) + nBytes / bandwidth(a, p), and runs the smallest.
btacalc takes the bandwidth of the Simple ring from the profile (the measured nccl-tests bus bandwidth of large
messages, B·e of the link class: `collectives.links`) and NCCL's ratios for the others:

- **ring** (all-gather, reduce-scatter: n - 1 steps; all-reduce 2(n - 1)), of which the steps between nodes are
  (nodes - 1), 2(nodes - 1) for all-reduce (L289-291, L411):

      latency = base(p) + (steps - inter) x intra(p) + inter x net(p)

  intra(p) the NVLink step latency, at least the network post overhead once the ring leaves the node
  (L404-410); net(p) the network step latency, the tree's when each node holds one rank (L386-388). A multi-node
  Simple ring all-reduce pays x1.4 (L647-650). Bandwidth: the Simple ring's bus bandwidth x share(p) (LL 0.5, LL128
  0.92, L327-329), LL's at most llMaxBw (L177-183, L267-272: inside one node by GPU generation, 141 GB/s on Hopper;
  across nodes 39 GB/s on 2, 20.4 on more); the bus bytes are btacalc's factor·(n-1)/n·nBytes (algorithm
  bandwidth = bus x n / steps, L379).
- **tree** (all-reduce only, L289-298, L414-416):

      latency = base(p) + 2 x ((ranks per node - 1) x nvlink(p) + floor(log2 nodes) x net(p))

  and an algorithm bandwidth of half the tree's bus bandwidth (L380): the ring's x 0.92 x the protocol's share
  (L330-335; LL's at most llMaxBw) x the correction for the size (L639-642).

**Anchored to the profile's measurement** (docs/comm.md "nccl2"): NCCL's constants select an algorithm; they
are not an absolute time (a 2 x 8 Hopper all-reduce of 8 bytes: 25.2 us against 46.3 measured). Every latency of
a link class is scaled by measured / model at the configuration the profile's latency was measured at
(`[collectives] scaleup_reference`, `scaleout_reference`): latency(n) = model(n) x measured / model(ref). The
growth with ranks, nodes, protocol and algorithm stays NCCL's.

Not modelled: NVLS / NVLS-tree (NVLink SHARP), CollNet and PAT (PAT runs only with one GPU per node, L220); the
per-channel caps of LL128 and of the tree (they need NCCL's channel count); several calls aggregated into one launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ...catalogue.constants import constants
from ..arrays import is_array, maximum, where

PROTOCOLS = ("LL", "LL128", "Simple")
LL, SIMPLE = PROTOCOLS.index("LL"), PROTOCOLS.index("Simple")
_US = 1e-6
# NCCL's size unit in its tuning model (tuning.cc L639-642 `log2i(nBytes >> 6)`, L647-650 `nBytes / (nChannels x
# nRanks) >= 64`): the tree correction's first size, and the ring plateau's least bytes per rank and channel
SIZE_UNIT_BYTES = 64
# the tree correction applies below 2^23 size units (tuning.cc L641 `logSize < 23`; the table has 24 entries, the
# last never read)
TREE_CORRECTION_SIZES = 23
# a tree's algorithm bandwidth over its bus bandwidth (tuning.cc L380: `ratio *= .5` for an algorithm neither ring
# nor NVLS)
TREE_ALGORITHM_RATIO = 0.5


@dataclass(frozen=True)
class Group:
    """A collective's ranks as NCCL sees them: `ranks` over `nodes` NVLink domains, `kind` the collective's
    factor (all-reduce 2, all-gather / reduce-scatter 1: formulas/constants.toml [collectives]), the Simple
    ring's bus bandwidth in bytes/s, the scale of the link class's latencies (`reference_scale`), LL's cap
    (`ll_max_bytes_per_s`: none by default); `ring_only`
    under NCCL_ALGO=Ring (RunOptions.nccl_ring_only), where NCCL weighs no tree (tuning.cc L458-462 read
    NCCL_ALGO into algoEnable; L538 a disabled algorithm gets bandwidth 0, which ncclTopoGetAlgoTime answers
    with time -1 (L634-637) and src/enqueue.cc L2038 never picks)."""

    ranks: Any
    nodes: Any
    kind: Any
    bus_bytes_per_s: Any
    latency_scale: Any = 1.0
    ring_only: bool = False
    ll_max_bus_bytes_per_s: Any = np.inf


def ll_max_bytes_per_s(capability: Optional[float], nodes: Any) -> Any:
    """NCCL's llMaxBw in bytes/s (tuning.cc L177-183, L267-272; formulas/constants.toml [nccl]): inside one node the
    row of the GPU's generation (compute capability: Volta's 39 GB/s below 8.0; none given: no cap), across nodes the
    Intel / default CPU's, 39 GB/s on 2 nodes and 20.4 GB/s on more."""
    c = constants().nccl
    rows = [gb for cc, gb in c.ll_max_bandwidth_one_node_gb_per_s if capability is not None and cc <= capability]
    one = rows[-1] * 1e9 if rows else np.inf
    two, more = (gb * 1e9 for gb in c.ll_max_bandwidth_nodes_gb_per_s)
    return where(nodes > 2, more, where(nodes > 1, two, one))


@dataclass(frozen=True)
class Choice:
    """What NCCL would run for one call: algorithm, protocol, its latency and the call's time (seconds)."""

    algorithm: str
    protocol: str
    latency_s: float
    time_s: float
    steps: int


def ring_steps(group: Group) -> tuple[Any, Any]:
    """(steps, steps between nodes) of a ring: kind x (n - 1) and kind x (nodes - 1) (tuning.cc L289, L411)."""
    return group.kind * (group.ranks - 1), where(group.nodes > 1, group.kind * (group.nodes - 1), 0)


def ring_latency_s(group: Group, p: int) -> Any:
    """NCCL's latency of one ring call with protocol p (module docstring)."""
    c = constants().nccl
    steps, inter = ring_steps(group)
    multi = group.nodes > 1
    intra = where(multi, maximum(c.nvlink_ring_latency_us[p], c.net_overhead_us[p]), c.nvlink_ring_latency_us[p])
    net = where(group.ranks == group.nodes, c.net_tree_latency_us[p], c.net_ring_latency_us[p])
    lat = c.ring_base_latency_us[p] + (steps - inter) * intra + inter * net
    return lat * _US * group.latency_scale


def tree_latency_s(group: Group, p: int) -> Any:
    """NCCL's latency of one tree all-reduce with protocol p (module docstring)."""
    c = constants().nccl
    per_node = group.ranks // group.nodes
    hops = (per_node - 1) * c.nvlink_tree_latency_us[p] + np.floor(np.log2(group.nodes)) * c.net_tree_latency_us[p]
    return (c.tree_base_latency_us[p] + 2 * hops) * _US * group.latency_scale


def ring_call_latency_s(group: Group, nbytes: Any, p: int) -> Any:
    """The ring latency of a call of `nbytes`: a multi-node Simple all-reduce of at least 64 bytes per rank (one
    channel taken) x the plateau factor (tuning.cc L647-650)."""
    lat = ring_latency_s(group, p)
    if p != SIMPLE:
        return lat
    all_reduce = group.kind == constants().collectives.all_reduce
    plateau = all_reduce & (group.nodes > 1) & (nbytes >= SIZE_UNIT_BYTES * group.ranks)
    return where(plateau, lat * constants().nccl.ring_all_reduce_plateau, lat)


def ring_time_s(group: Group, nbytes: Any, p: int) -> Any:
    """One ring call of `nbytes` (the buffer) with protocol p."""
    bus = nbytes * group.kind * (group.ranks - 1) / group.ranks
    rate = group.bus_bytes_per_s * constants().nccl.ring_bandwidth_share[p]
    if p == LL:
        rate = np.minimum(rate, group.ll_max_bus_bytes_per_s)
    return ring_call_latency_s(group, nbytes, p) + bus / rate


def tree_time_s(group: Group, nbytes: Any, p: int) -> Any:
    """One tree all-reduce of `nbytes` with protocol p (module docstring)."""
    c = constants().nccl
    share = where(group.nodes > 1, c.tree_protocol_share_nodes[p], c.tree_protocol_share_one_node[p])
    log_size = np.floor(np.log2(np.maximum(nbytes, 1) / SIZE_UNIT_BYTES))
    index = np.clip(log_size, 0, len(c.tree_correction[p]) - 1).astype(int)
    correct = np.where((nbytes >= SIZE_UNIT_BYTES) & (log_size < TREE_CORRECTION_SIZES),
                       np.asarray(c.tree_correction[p])[index], 1.0)
    bus = group.bus_bytes_per_s * c.tree_all_reduce_share * share
    if p == LL:
        bus = np.minimum(bus, group.ll_max_bus_bytes_per_s)
    algorithm_bw = TREE_ALGORITHM_RATIO * bus * correct
    return tree_latency_s(group, p) + nbytes / algorithm_bw


def candidates(group: Group, nbytes: Any) -> list[tuple[str, int, Any]]:
    """(algorithm, protocol, time) of every choice NCCL weighs for this call: ring with each protocol, and
    tree with each for an all-reduce (tuning.cc L293-298) unless the group runs rings alone."""
    out = [("ring", p, ring_time_s(group, nbytes, p)) for p in range(len(PROTOCOLS))]
    tree_ok = (group.kind == constants().collectives.all_reduce) & (not group.ring_only)
    if is_array(tree_ok) or tree_ok:
        out += [("tree", p, where(tree_ok, tree_time_s(group, nbytes, p), np.inf)) for p in range(len(PROTOCOLS))]
    return out


def call_time_s(group: Group, nbytes: Any) -> Any:
    """Time of one call: the fastest of NCCL's choices (scalar or elementwise over arrays of layouts)."""
    times = [t for _, _, t in candidates(group, nbytes)]
    best = times[0]
    for t in times[1:]:
        best = np.minimum(best, t)
    return best if is_array(best) else float(best)


def choose(group: Group, nbytes: float) -> Choice:
    """NCCL's choice for one call of one group (scalars: `plan --json`'s row)."""
    name, p, t = min(candidates(group, nbytes), key=lambda c: float(c[2]))
    lat = ring_call_latency_s(group, nbytes, p) if name == "ring" else tree_latency_s(group, p)
    steps = int(ring_steps(group)[0]) if name == "ring" else int(2 * np.floor(np.log2(group.nodes)) +
                                                                   2 * (group.ranks // group.nodes - 1))
    return Choice(algorithm=name, protocol=PROTOCOLS[p], latency_s=float(lat), time_s=float(t), steps=steps)


def reference_scale(reference: Group, nbytes: float, measured_s: float) -> float:
    """measured / model: the measured time of one call of `nbytes` on the `reference` group over the latency of
    NCCL's (unscaled) choice for it. A small nccl-tests call is all latency (8 bytes at 300 GB/s: 0.03 ns)."""
    return measured_s / choose(reference, nbytes).latency_s
