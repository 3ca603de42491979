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

    @classmethod
    def of(cls, compute: Any, backward: Any, recompute: Any, pre: tuple[Any, Any, Any], a2a: Any,
           delayed_wgrad: bool = False, wgrad: tuple[Any, Any] = (0.0, 0.0)) -> "LayerNodes":
        """From a part's compute, backward and recompute seconds and its pre-dispatch phases' three (`pre`), the
        layer's all-to-all time (four calls), and the part's and its pre-dispatch phases' weight-gradient GEMM
        seconds (`wgrad`; each node's at most its backward)."""
        pre_all, pre_bwd, pre_rec = pre
        pre_fwd = pre_all - pre_bwd - pre_rec
        forward = compute - backward - recompute
        w_all, w_pre = wgrad
        return cls(pre_fwd, pre_bwd + pre_rec, forward - pre_fwd, backward + recompute - pre_bwd - pre_rec, a2a / 4,
                   delayed_wgrad, minimum(w_pre, pre_bwd), minimum(w_all - w_pre, backward - pre_bwd))

    @property
    def compute(self) -> Any:
        return self.pre_forward + self.pre_backward + self.mlp_forward + self.mlp_backward


def pair_time(n: LayerNodes, early_release: bool) -> Any:
    """A forward layer beside a backward layer of the same kind, both streams: when the pair's last node ends.
    Without delayed weight gradients a backward node runs both gradients before the next node may start; with them
    (`--delay-wgrad-compute`) the MLP's weight gradient runs after its data gradient, beside the dispatch's backward,
    and the pre-dispatch node's at the pair's end (L296-298)."""
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
