"""What TransformerEngine's userbuffers tensor-parallel overlap costs, GEMM by GEMM (--tp-comm-overlap).

With sequence parallelism each TP collective of a layer is hidden behind one GEMM pass (btacalc/data/tp_overlap.toml:
TransformerEngine's default table, TE @ bee4649c transformer_engine/pytorch/module/base.py L224-262). What each
method does (TE @ bee4649c transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp):

- ring exchange (`split_overlap_ag`, L828-866): the GEMM runs as TP chunks of tokens/TP rows while the TP - 1 chunk
  copies go round the ring on copy engines (no SMs); chunk i+1 waits only for its own data (L862) and the chunks
  rotate over min(3, TP) compute streams (L851; base.py L47), so one chunk's last wave shares the SMs with the next
  and the chunks run as one GEMM of G seconds. The copies start with the first chunk and the last chunk runs after
  the last copy: the pass takes max(G, c + G/TP), exposing max(0, c + G/TP - G);
- pipeline (`split_overlap_rs`, L405-530): with `set_sm_margin` the GEMM is launched on SMs - num_sm SMs for its
  whole run (L84: `_math_sms`), in num_splits chunks, each reduce-scattered after it; the last chunk's collective
  runs after the GEMM. An SM-bound GEMM then takes G x S / (S - s), and the pass exposes
      G x s / (S - s) + c / splits + max(0, (c - G x S/(S - s)) x (splits - 1) / splits);
- bulk (`bulk_overlap`, L251-306): one collective kernel on num_sm SMs beside one GEMM launched on all SMs
  (`set_sm_margin` false): the SMs are shared while both run (the `sm_share.py` bound) and a collective longer than
  the GEMM shows its excess: min(c, G) x s / S + max(0, c - G).

G is the GEMM pass's time (gemm.py at its shape), c the time of the one collective it hides
(`collectives.tensor_parallel_time` of the layer's mean collective: its TP bytes over its TP calls), S the device's
SMs, s num_sm. The layer's exposed TP time is then the larger of this sum and the excess of all its collectives over
all its compute (model/gpu/timing.py), so a layer whose traffic outlasts its GEMMs still shows it. A run's own table
(`Layout.tp_overlap_cfg`, a measured recipe's `tp_overlap_cfg`) replaces TE's defaults. Not modelled: picking
Megatron-Bridge's named per-model tables, ring-exchange reduce-scatter's final reduce kernel, the chunks'
per-step copy latency; the SM share of bulk overlaps is a bound (docs/clock.md "moe5": Bridge's profile puts the
all-to-all's at about a quarter of it).
"""

from __future__ import annotations

from typing import Any

from ...config.execution import Layout
from ...config.tp_overlap import UbOverlap, ub_overlaps
from ..arrays import maximum, minimum, where
from ..problem import Problem
from .collectives import tensor_parallel_time


def _ring_exchange(o: UbOverlap, gemm_s: Any, comm_s: Any, sms: int, tp: Any) -> Any:
    margin = gemm_s * o.num_sm / (sms - o.num_sm) if o.set_sm_margin else 0.0
    return margin + maximum(0.0, comm_s + gemm_s / tp - gemm_s)


def _pipeline(o: UbOverlap, gemm_s: Any, comm_s: Any, sms: int, tp: Any) -> Any:
    slowed = gemm_s * sms / (sms - o.num_sm) if o.set_sm_margin else gemm_s
    tail = maximum(0.0, comm_s - slowed) * (o.num_splits - 1) / o.num_splits
    return slowed - gemm_s + comm_s / o.num_splits + tail


def _bulk(o: UbOverlap, gemm_s: Any, comm_s: Any, sms: int, tp: Any) -> Any:
    return minimum(comm_s, gemm_s) * o.num_sm / sms + maximum(0.0, comm_s - gemm_s)


# each method of tp_overlap.toml (UbOverlap.method) and its cost (the module docstring)
_COST = {"ring_exchange": _ring_exchange, "pipeline": _pipeline, "bulk": _bulk}


def overlap_cost(o: UbOverlap, gemm_s: Any, comm_s: Any, sms: int, tp: Any) -> Any:
    """Seconds one overlapped GEMM pass of `gemm_s` adds to the layer while it hides a collective of `comm_s`
    (module docstring), on a device of `sms` SMs at tensor parallelism `tp`."""
    return _COST[o.method](o, gemm_s, comm_s, sms, tp)


def userbuffers_timed(layout: Layout) -> bool:
    """Whether a layout runs TE's userbuffers overlap, which layer_overlap_s times (`Layout.userbuffers`)."""
    return layout.userbuffers


def layer_overlap_s(problem: Problem, tp_gemm_s: dict[str, Any], tp_bytes: Any, tp_calls: Any) -> Any:
    """The TP overlap's cost over one layer's GEMM passes (`part.Part.tp_gemm_s`) for one micro-batch: the sum of
    `overlap_cost` over the table's GEMMs the layer has (TE's userbuffers table, or under torchtitan's async TP
    `ASYNC_TP_OVERLAPS`, whose unfused collectives, `ASYNC_TP_UNFUSED`, each add the collective's whole time); 0 where
    the layout runs no such overlap (`userbuffers_timed`, `Layout.async_tp`) or the layer has no TP collective."""
    lay = problem.layout
    if not tp_gemm_s or not (userbuffers_timed(lay) or lay.async_tp):
        return 0.0
    calls = where(tp_calls > 0, tp_calls, 1)
    comm = tensor_parallel_time(problem, tp_bytes / calls, 1)
    sms = int(problem.hardware.chip.cores.value)
    total: Any = 0.0
    table = ASYNC_TP_OVERLAPS if lay.async_tp else lay.tp_overlap_cfg or ub_overlaps()
    for o in table:
        gemm_s = tp_gemm_s.get(f"{o.family}_{o.gemm_pass}")
        if gemm_s is not None:
            total = total + overlap_cost(o, gemm_s, comm, sms, lay.tensor_parallel)
    if lay.async_tp:
        total = total + comm * sum(1 for name in ASYNC_TP_UNFUSED if name in tp_gemm_s)
    return where(tp_calls > 0, total, 0.0)


_ASYNC_TP_SOURCE = ("torchtitan's async TP: pytorch/torchtitan @ 820504e2 torchtitan/models/llama3/parallelize_llama.py "
                    "L205-209 (torch._inductor.config._micro_pipeline_tp, enable_symm_mem_for_group); PyTorch's "
                    "micro-pipeline TP pass (torch/_inductor/fx_passes/micro_pipeline_tp.py fuse_all_gather_matmul, "
                    "fuse_matmul_reduce_scatter: an all-gather feeding mms, an mm feeding a reduce-scatter) and its "
                    "ops (torch/distributed/_symmetric_memory/__init__.py _pipelined_multi_all_gather_and_consume, "
                    "_pipelined_produce_and_all2all: per-rank chunks copied peer to peer while the matmul runs on "
                    "the chunks already there)")

# The passes the micro-pipeline pass fuses, each timed as a ring exchange (the module docstring's max(G, c + G/TP),
# copies peer to peer with no SM margin): the forward all-gathers before W_qkv and W_gate_up (one gathered input,
# several mms: fused_all_gather_matmul takes a list of B), the forward reduce-scatters after W_o and W_down (an mm's
# output), and the backward all-gathers of their output gradients before the data-gradient mm.
ASYNC_TP_OVERLAPS = tuple(UbOverlap(name=f"{family}_{gemm_pass}", family=family, gemm_pass=gemm_pass,
                                    method="ring_exchange", num_sm=0, num_splits=0, set_sm_margin=False,
                                    source=_ASYNC_TP_SOURCE)
                          for family, gemm_pass in (("qkv", "fprop"), ("fc1", "fprop"), ("proj", "fprop"),
                                                    ("fc2", "fprop"), ("proj", "dgrad"), ("fc2", "dgrad")))
# The backward reduce-scatters of the column-parallel inputs' gradients are not fused: their input is the sum of
# several data-gradient mms (wq + wk + wv, w1 + w3), not one mm's output (`_find_producer_matmul` matches an mm or a
# reshape of one), so they run as plain collectives on the critical path, whole
ASYNC_TP_UNFUSED = ("qkv_dgrad", "fc1_dgrad")
