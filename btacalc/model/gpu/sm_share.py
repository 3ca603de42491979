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
- NCCL's all-to-all (the alltoall dispatcher): one CTA per NCCL channel; its channel count depends on the
  topology search and is not modelled (no loss counted).

Not modelled here: TransformerEngine userbuffers TP overlap (its SM counts are per GEMM in each model's
`ub_cfgs`, 1 for ring exchange through copy engines, 2-32 for bulk and pipelined methods: Megatron-Bridge
@ 067f987d src/megatron/bridge/training/comm_overlap.py L99-174) and the overlapped data-parallel
reduce-scatter / all-gather (NCCL channels), docs/clock.md.
"""

from __future__ import annotations

from typing import Any

from ..arrays import minimum
from ..problem import Problem

# Megatron-Core's SM count for DeepEP / HybridEP dispatch and combine when moe_flex_dispatcher_num_sms is
# unset (Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py L1287-1291).
FLEX_DISPATCHER_SMS = 20


def reserved_sms(problem: Problem) -> int:
    """SMs the overlapped expert all-to-all's kernels hold: the flex dispatcher's with DeepEP / HybridEP,
    none counted for NCCL's all-to-all (module docstring)."""
    lay = problem.layout
    if not lay.deepep:
        return 0
    return FLEX_DISPATCHER_SMS if lay.dispatcher_sms is None else lay.dispatcher_sms


def sm_share_loss(problem: Problem, comm_s: Any, compute_s: Any) -> Any:
    """Compute time lost while an exchange of `comm_s` hides behind `compute_s`: min(c, t) x reserved / SMs
    (module docstring)."""
    sms = problem.hardware.chip.cores.value
    return minimum(comm_s, compute_s) * reserved_sms(problem) / sms
