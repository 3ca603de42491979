"""Training state: weights, gradients and optimizer state, their bytes per parameter and how a
layout divides them over devices. The only module that knows the buckets and their divisors.

Bytes per parameter come from the catalogue's `training_state` terms (mixed-precision Adam:
2 + 2 + 12 = 16, Anthony et al., Transformer Math 101; with Megatron-LM's fp32 main gradients
2 + 4 + 12 = 18).

Buckets (Megatron-LM theoretical_memory_usage.py; DeepSpeed-MoE, Rajbhandari et al. 2022): the routed
experts' weights (`expert`) are split over the EP x ETP devices of an expert group and replicated over
the EDP = N/(ETP·EP·PP) expert-data-parallel ranks; every other weight (`non_expert`) is split by
tensor parallelism where the catalogue says so (`tp = "split"`), held by the pipeline stage of its
layer, and replicated over the DP = N/(TP·PP·CP) data-parallel ranks.

ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054) shards a component over the data-parallel ranks of
its parameters (the dense part over DP·CP, Megatron's dp_cp group; the experts over EDP): stage 1 the
optimizer state (Megatron's distributed optimizer), stage 2 also the gradients, stage 3 (or FSDP)
also the 16-bit weights. A shard holds ceil(P / divisor) parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config.execution import Layout
from .arrays import ceil_div, where
from .problem import Problem

COMPONENTS = ("weights", "gradients", "optimizer")

ZERO_SHARDS = {  # component -> lowest ZeRO stage that shards it (ZeRO paper §5: P_os, P_os+g, P_os+g+p)
    "optimizer": 1,
    "gradients": 2,
    "weights": 3,
}


@dataclass(frozen=True)
class StatePart:
    """One bucket of training state on one device: `params` parameters of `part` at
    `bytes_per_param` bytes, divided over `divisor` ZeRO shards."""

    component: str  # weights | gradients | optimizer
    part: str  # non_expert | expert
    params: Any  # parameters of the bucket this device's model-parallel shard holds (before ZeRO)
    bytes_per_param: int
    divisor: Any
    bytes: Any  # per device

    @property
    def formula(self) -> str:
        return f"{self.bytes_per_param} B x ceil({self.params:,} / {self.divisor})"


def bytes_per_param(problem: Problem) -> dict[str, int]:
    """Training-state bytes per parameter for each component, from the catalogue (once per problem; a
    copy each time)."""
    rates = problem.layout_cache.get("state rates")
    if rates is None:
        beta = problem.run.bytes_per_element
        per_param = problem.compiled.state_rates
        rates = problem.layout_cache["state rates"] = {c: int(per_param[c](beta)) for c in COMPONENTS}
    return dict(rates)


def state_bytes(problem: Problem, params: int) -> dict[str, int]:
    """Weights, gradients and optimizer bytes for `params` parameters, unsharded."""
    return {c: rate * params for c, rate in bytes_per_param(problem).items()}


def sharded_state(rates: dict[str, int], dense: Any, expert: Any, layout: Layout) -> list[StatePart]:
    """Per-device weights, gradients and optimizer state of `dense` non-expert and `expert` parameters
    (this device's model-parallel shard: after TP, PP, EP and ETP), each sharded by ZeRO where its stage
    shards the component. Ints or arrays."""
    out = []
    for component, rate in rates.items():
        zero = layout.zero_stage >= ZERO_SHARDS[component]
        for part, params, ranks in (("non_expert", dense, layout.sharding_ranks),
                                    ("expert", expert, layout.expert_data_parallel)):
            shard = where(zero, ranks, 1)
            out.append(StatePart(component, part, params, rate, shard, rate * ceil_div(params, shard)))
    return out


def gathered_units_bytes(rates: dict[str, int], layer_params: Any, layout: Layout) -> Any:
    """Unsharded weights live at once under ZeRO-3 / FSDP, for `layer_params` (one layer's parameters on
    this device): ZeRO-3 gathers one layer's weights (ZeRO paper §5.3); FSDP keeps two units of
    unsharded weights and gradients (the one computing and the prefetched one; Megatron-LM
    docs/user-guide/features/megatron_fsdp.md, double buffering). Zero below ZeRO-3 or on one device."""
    zero3 = rates["weights"] * layer_params
    fsdp = 2 * (rates["weights"] + rates["gradients"]) * layer_params
    sharded = (layout.zero_stage >= 3) & (layout.devices > 1)
    return where(sharded, where(layout.fsdp, fsdp, zero3), 0)


@dataclass(frozen=True)
class TorchFsdp:
    """(FSDP2 as torchtitan runs it, `--fsdp-impl fsdp2`, is planned with these buffers too: the same units and dtypes;
    beside TP, its units hold the device's DTensor shards, so every count here is per device: `stage_params`.)
    PyTorch FSDP1 (FULL_SHARD, limit_all_gathers, one FlatParameter per MPT block and one for the root
    module) with Composer's `mixed_precision: DEFAULT`, as llm-foundry @ 5e85bd62d runs it (torch 2.1.0,
    Composer 0.17.2: setup.py L50, L54). Its buffers differ from Megatron-FSDP's:

    - the persistent shard is the fp32 flat parameter itself (`_local_shard`, the optimizer's master copy);
      the 16-bit shard `_mp_shard` is made for the all-gather and freed right after it (torch v2.1.0
      `torch/distributed/fsdp/flat_param.py`, `_flat_param.py` in later releases: FlatParameter docstring
      `_local_shard` / `_mp_shard`, `FlatParamHandle.post_unshard` -> `_free_low_precision_sharded_param`):
      no 16-bit weight shard;
    - the sharded gradient is kept in the flat parameter's dtype (fp32, `_saved_grad_shard`), whatever
      the reduce dtype;
    - at most two all-gathered 16-bit blocks are live (`_limiter_utils._FreeEventQueue`,
      `_max_num_inflight_all_gathers = 2`, used when `limit_all_gathers`, Composer's default);
    - in a block's post-backward hook its unsharded gradient, computed in the 16-bit param dtype, is
      copied to `reduce_dtype` before the reduce-scatter (`_runtime_utils._post_backward_hook`:
      `flat_param.grad.data = flat_param.grad.to(handle._reduce_dtype)` when the dtypes differ; Composer
      `mosaic_fsdp_utils.get_mixed_precision` L94-97: DEFAULT is param bf16, reduce fp32);
    - the root unit (embedding, final norm, an untied head) is not resharded after the forward
      (`_runtime_utils._post_forward_reshard`: `not state._is_root`), so its 16-bit parameters stay
      gathered through the backward, and the head's 16-bit gradient waits for the embedding's (one
      AccumulateGrad per flat parameter) until the end of the backward (an estimate from autograd's
      accumulation: the head runs first in the backward, the embedding last).
    """

    param_bytes: int  # 16-bit param dtype
    reduce_bytes: int  # reduce dtype: 4 under Composer's DEFAULT (fp32), 2 under PURE
    shard_bytes: int = 4  # the fp32 sharded flat parameter's dtype (its gradient's too)

    @classmethod
    def of(cls, rates: dict[str, int]) -> "TorchFsdp":
        """The run's 16-bit weights and its gradient bytes as FSDP's param and reduce dtypes."""
        return cls(param_bytes=rates["weights"], reduce_bytes=rates["gradients"])

    def state_rates(self, rates: dict[str, int]) -> dict[str, int]:
        """Sharded bytes per parameter: no 16-bit weights, the fp32 gradient shard, the optimizer state as
        the catalogue counts it (its fp32 master copy is the sharded flat parameter)."""
        return {"weights": 0, "gradients": self.shard_bytes, "optimizer": rates["optimizer"]}

    @property
    def unit_bytes_per_param(self) -> int:
        """Per parameter of the largest block: two gathered 16-bit blocks, one block's 16-bit unsharded
        gradient and its copy in the reduce dtype (none when the reduce dtype is the param dtype)."""
        cast = self.reduce_bytes if self.reduce_bytes != self.param_bytes else 0
        return 2 * self.param_bytes + self.param_bytes + cast

    @property
    def root_bytes_per_param(self) -> int:
        """Per parameter of the root unit: its gathered 16-bit parameters and 16-bit gradient."""
        return 2 * self.param_bytes

    def buffers_bytes(self, layer_params: Any, root_params: Any) -> Any:
        return self.unit_bytes_per_param * layer_params + self.root_bytes_per_param * root_params
