"""The expert all-to-all under Megatron's merged 1F1B schedule (--overlap-moe-expert-parallel-comm), node by node.

Megatron-LM @ d98e8a64 runs a forward layer beside a backward layer (models/common/model_chunk_schedule_plan.py
L236-L300), each split into nodes (models/gpt/fine_grained_callables.py): pre-dispatch (attention, norms, router,
shared experts), dispatch, MLP (the experts), combine. Communication nodes run on the comm stream, compute nodes on
the compute stream, each waiting for its input. The order the schedule issues them:

    comm:    combine_bwd | dispatch_fwd -> dispatch_bwd | combine_fwd
    compute: pre_dispatch_fwd | mlp_bwd -> mlp_bwd_dw -> mlp_fwd | pre_dispatch_bwd

and with --ep-overlap-early-attn-memory-release the backward layer's pre_dispatch_bwd moves before mlp_fwd (L280-281
against L291-292). The next pair's forward layer needs this pair's combine_fwd (its input) and the next backward
layer this pair's pre_dispatch_bwd (its output gradient), so pairs run one after the other: a pair lasts the later
of the two streams' ends. Each call is one node: combine_bwd waits for nothing; dispatch_fwd for pre_dispatch_fwd;
mlp_bwd for combine_bwd; dispatch_bwd for mlp_bwd; mlp_fwd for dispatch_fwd; combine_fwd for mlp_fwd;
pre_dispatch_bwd for dispatch_bwd.

One hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1, `one_queue`). CUDA then feeds every stream's kernels to the GPU
through one work queue, so kernels start in the order the host launched them (TransformerEngine's maintainer,
pytorch/pytorch issue 143890: "forcing the kernels to start in the order they were launched"; Megatron-LM pull 6311
measured the overlap's gain at +3.7% with it against +7.8% with 32 queues, DeepSeek-V3 proxy on 64 H100). A node
therefore starts no earlier than the node issued before it, and a node issued after a compute node waits for that
node's last kernel to have all its blocks placed, which this model takes as the compute node's end (a node is many
kernels; the last one's blocks go out within its final wave). In the issue order below the forward dispatch follows
the backward MLP, so it no longer runs beside it; the other calls are issued before the compute they overlap and
keep it. Megatron's MoE README asks for more than one queue with the overlap (megatron/core/transformer/moe/
README.md L437 @ d98e8a64).

What the pair exposes beyond the two layers' compute is the merged schedule's all-to-all time. Where the attention
side of a layer is short beside a call, the call shows even when the experts' compute would have room: the lumped
max(0, a2a - compute) btacalc used before (merged2, docs/clock.md) hid every call behind any compute. Inputs per
layer and micro-batch: the four calls share the exchange equally (dispatch and combine move the same k·T·h, forward
and backward alike: formulas/moe.toml; the alltoall dispatcher's second call per dispatch pass, the routing
probabilities', is a latency of its own, shared with the rest here rather than put on the dispatch nodes: tens of
µs per layer, docs/comm.md "a2aprobs"); what --delay-wgrad-compute moves out of a backward node is its
weight-gradient GEMMs' time (`Part.wgrad_s`: the wgrad passes costs.py times; backward_dw runs the TE linears and
grouped linears of the node's modules, fine_grained_callables.py L272), not the attention core's backward, the
norms' or activations', nor the re-run: a recomputed forward runs in the backward node that needs it, first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..arrays import maximum, minimum, where


@dataclass(frozen=True)
class LayerNodes:
    """One layer's node times for one micro-batch (seconds; scalars or arrays over shapes and layouts)."""

    pre_forward: Any  # P_f: the pre-dispatch node's forward
    pre_backward: Any  # P_b: its backward (with what it recomputes)
    mlp_forward: Any  # M_f: the experts' forward (and the other post-dispatch phases')
    mlp_backward: Any  # M_b: their backward, data and weight gradients
    call: Any  # A: one all-to-all call (dispatch or combine, forward or backward)
    delayed_wgrad: bool = False  # --delay-wgrad-compute: weight gradients run in backward_dw, after the data gradients
    pre_wgrad: Any = 0.0  # of P_b: the pre-dispatch node's weight-gradient GEMMs (what its backward_dw runs)
    mlp_wgrad: Any = 0.0  # of M_b: the MLP node's weight-gradient GEMMs
    one_queue: bool = False  # CUDA_DEVICE_MAX_CONNECTIONS=1: both streams feed one hardware work queue (module doc)

    @classmethod
    def of(cls, compute: Any, backward: Any, recompute: Any, pre: tuple[Any, Any, Any], a2a: Any,
           delayed_wgrad: bool = False, wgrad: tuple[Any, Any] = (0.0, 0.0), one_queue: bool = False) -> "LayerNodes":
        """From a part's compute, backward and recompute seconds and its pre-dispatch phases' three (`pre`), the
        layer's all-to-all time (four calls), and the part's and its pre-dispatch phases' weight-gradient GEMM
        seconds (`wgrad`; each node's at most its backward)."""
        pre_all, pre_bwd, pre_rec = pre
        pre_fwd = pre_all - pre_bwd - pre_rec
        forward = compute - backward - recompute
        w_all, w_pre = wgrad
        return cls(pre_fwd, pre_bwd + pre_rec, forward - pre_fwd, backward + recompute - pre_bwd - pre_rec, a2a / 4,
                   delayed_wgrad, minimum(w_pre, pre_bwd), minimum(w_all - w_pre, backward - pre_bwd), one_queue)

    def stretched(self, factor: Any) -> "LayerNodes":
        """The compute nodes' times x `factor` (the calls' unchanged): compute slowed by what runs beside it."""
        return LayerNodes(self.pre_forward * factor, self.pre_backward * factor, self.mlp_forward * factor,
                          self.mlp_backward * factor, self.call, self.delayed_wgrad, self.pre_wgrad * factor,
                          self.mlp_wgrad * factor, self.one_queue)

    @property
    def compute(self) -> Any:
        return self.pre_forward + self.pre_backward + self.mlp_forward + self.mlp_backward


def pair_time(n: LayerNodes, early_release: bool) -> Any:
    """A forward layer beside a backward layer of the same kind, both streams: when the pair's last node ends (with one
    hardware queue, the issue-order simulation of `host_pair_time` with no host time). Without delayed weight gradients a backward node runs both gradients before the next node may start; with them
    (`--delay-wgrad-compute`) the MLP's weight gradient runs after its data gradient, beside the dispatch's backward,
    and the pre-dispatch node's at the pair's end (L296-298)."""
    if n.one_queue:
        return host_pair_time(n, NodeHost(sync=False), early_release)
    mlp_dw, pre_dw = (n.mlp_wgrad, n.pre_wgrad) if n.delayed_wgrad else (0.0, 0.0)
    # the backward MLP and the forward dispatch both start once combine_bwd (one call) and pre_dispatch_fwd are done
    both_ready = maximum(n.pre_forward, n.call)
    mlp_bwd_end = both_ready + n.mlp_backward - mlp_dw
    dispatch_fwd_end = both_ready + n.call
    dw_end = mlp_bwd_end + mlp_dw
    dispatch_bwd_end = maximum(dispatch_fwd_end, mlp_bwd_end) + n.call
    if early_release:
        pre_bwd_end = maximum(dw_end, dispatch_bwd_end) + n.pre_backward - pre_dw
        mlp_fwd_end = maximum(pre_bwd_end, dispatch_fwd_end) + n.mlp_forward
        combine_fwd_end = maximum(mlp_fwd_end, dispatch_bwd_end) + n.call
        return maximum(combine_fwd_end, mlp_fwd_end + pre_dw)
    mlp_fwd_end = maximum(dw_end, dispatch_fwd_end) + n.mlp_forward
    after = maximum(mlp_fwd_end, dispatch_bwd_end)
    return maximum(after + n.call, after + n.pre_backward)


def merged_exposed(n: LayerNodes, early_release: bool) -> Any:
    """The all-to-all time a merged layer pair shows beyond its compute (per layer and micro-batch); a difference at
    rounding level (the pair's sums taken in another order) is none."""
    exposed = pair_time(n, early_release) - n.compute
    return where(exposed > ROUNDING * n.compute, exposed, 0.0)


ROUNDING = 1e-12  # relative: a pair time that differs from its compute by this little is its compute


@dataclass(frozen=True)
class NodeHost:
    """The host's issue seconds of one merged pair's nodes (forward layer f, backward layer b), in the order Megatron's
    `TransformerLayerSchedulePlan.run` calls them (module docstring of `host_pair_time`), each node's own kernels,
    module calls and glue with the schedule's per-node work; `build`: making the layer's nodes (once per layer and
    micro-batch, taken at the pair's start). `dispatch_forward` is what the host issues before the dispatcher's sync;
    `sync`: the forward dispatch waits on the host for the GPU (the dispatcher's device-to-host sync), `comm_sync`:
    that wait also covers the comm stream's work before it (HybridEP's stream sync, DeepEP's received counts, the
    alltoall dispatcher when its copies are issued on the comm stream) rather than the pre-dispatch node's alone."""

    build: Any = 0.0
    combine_backward: Any = 0.0
    pre_forward: Any = 0.0
    mlp_backward: Any = 0.0
    dispatch_forward: Any = 0.0
    mlp_dw: Any = 0.0
    dispatch_backward: Any = 0.0
    mlp_forward: Any = 0.0
    combine_forward: Any = 0.0
    pre_backward: Any = 0.0
    pre_dw: Any = 0.0
    sync: bool = True
    comm_sync: bool = True


# (node, stream, the node of the same micro-batch whose CUDA event it waits for) in the host's issue order:
# Megatron-LM @ d98e8a64 models/common/model_chunk_schedule_plan.py L261-301; the dw calls record no event
# (models/common/utils.py L323-358), so a node's event is the last node of its micro-batch issued before it
_ORDER = (("combine_backward", "comm", None), ("pre_forward", "comp", None),
          ("mlp_backward", "comp", "combine_backward"), ("dispatch_forward", "comm", "pre_forward"),
          ("mlp_dw", "comp", None), ("dispatch_backward", "comm", "mlp_backward"),
          ("mlp_forward", "comp", "dispatch_forward"),
          ("combine_forward", "comm", "mlp_forward"), ("pre_backward", "comp", "dispatch_backward"),
          ("pre_dw", "comp", None))
_EARLY = _ORDER[:6] + (_ORDER[8], _ORDER[6], _ORDER[7], _ORDER[9])  # pre_backward before mlp_forward (L280-281)
PAIRS_TO_STEADY = 6  # pairs simulated from an idle start: the host's lead at a pair's start settles within them


def _gpu_times(n: LayerNodes) -> dict[str, Any]:
    mlp_dw, pre_dw = (n.mlp_wgrad, n.pre_wgrad) if n.delayed_wgrad else (0.0, 0.0)
    return {"combine_backward": n.call, "pre_forward": n.pre_forward, "mlp_backward": n.mlp_backward - mlp_dw,
            "dispatch_forward": n.call, "mlp_dw": mlp_dw, "dispatch_backward": n.call, "mlp_forward": n.mlp_forward,
            "combine_forward": n.call, "pre_backward": n.pre_backward - pre_dw, "pre_dw": pre_dw}


def _one_pair(gpu: dict[str, Any], h: NodeHost, order: tuple[tuple[str, str, Any], ...], lead: Any,
              one_queue: bool = False) -> tuple[Any, Any]:
    """(the pair's end, the host's end of issuing it), from the pair's GPU start 0 with the host starting at `lead`
    (<= 0: the host already issuing while the GPU ends the pair before). Each node's GPU work starts once its stream
    and its event's node are done and its issue has begun, and ends no earlier than its issue (each node's kernels
    interleaved with their issue, as the sync's flow shop takes them: fixed.py); the forward dispatch's exchange
    starts after the sync, which holds the host until the GPU has run the pre-dispatch node (and the comm stream).
    `one_queue`: a node also starts no earlier than the node issued before it starts, or, after a compute node, ends
    (module docstring)."""
    t = lead + h.build
    stream: dict[str, Any] = {"comp": 0.0, "comm": 0.0}
    end: dict[str, Any] = {}
    queue: Any = 0.0  # one_queue: the earliest start the node issued before leaves the next
    for name, on, after in order:
        issued = t
        t = t + getattr(h, name)
        ready = stream[on] if after is None else maximum(stream[on], end[after])
        start = maximum(maximum(ready, issued), queue)
        if name == "dispatch_forward" and h.sync:
            awaited = maximum(end["pre_forward"], end["combine_backward"]) if h.comm_sync else end["pre_forward"]
            t = maximum(t, awaited)
            start = maximum(maximum(ready, t), queue)
        end[name] = stream[on] = maximum(start + gpu[name], t)
        if one_queue:
            queue = end[name] if on == "comp" else start
    last = end["combine_forward"]
    for e in end.values():
        last = maximum(last, e)
    return last, t


def host_pair_time(n: LayerNodes, h: NodeHost, early_release: bool) -> Any:
    """A merged pair's time when the host issues it (Megatron-LM @ d98e8a64 TransformerLayerSchedulePlan.run): its
    GPU nodes as `pair_time` runs them, each also waiting for the host to issue it, the host issuing one node after
    another from one thread and held at the forward dispatch's sync until the GPU work that sync awaits is done. The
    host may issue a pair's first nodes while the GPU still runs the pair before (the GPU starts a pair when the one
    before ends, as `pair_time` takes it); the time of a pair in the steady state of a chain of such pairs (the
    host's lead at a pair's start settles: `PAIRS_TO_STEADY`). With every host time 0 it is `pair_time`."""
    gpu = _gpu_times(n)
    order = _EARLY if early_release else _ORDER
    lead: Any = 0.0
    pair: Any = 0.0
    for _ in range(PAIRS_TO_STEADY):
        pair, host_end = _one_pair(gpu, h, order, lead, n.one_queue)
        lead = host_end - pair
    return pair
