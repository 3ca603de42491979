"""Data and expert parallelism over several GPUs: sharded training state and communication volumes.

Layout (DeepSpeed-MoE, Rajbhandari et al. 2022; Megatron-LM's MoE layout without tensor or pipeline
parallelism): every one of the N devices is a data-parallel rank for the non-expert parameters; the
E routed experts are split over expert-parallel groups of EP devices (E/EP experts per device), and
each expert shard is replicated over the N/EP expert-data-parallel ranks.

ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054; Transformer Math 101) shards over the data-parallel
ranks of each parameter: stage 1 the optimizer state, stage 2 also the gradients, stage 3 also the
16-bit weights. Non-expert parameters shard over N ranks, expert parameters over N/EP ranks (the
split Megatron-LM's theoretical memory estimate makes). A shard holds ceil(P / ranks) parameters.

Communication per device per step (ring algorithms, bytes sent = bytes received):
- all-to-all (expert parallelism), per MoE layer: dispatch and combine in the forward pass and their
  transposes in the backward pass, 4·T·k·h·β·(1 - 1/EP) for T local tokens; +2·T·k·h·β·(1 - 1/EP)
  when the experts' forward is recomputed (full recomputation replays dispatch and combine);
- gradient synchronisation: 2·(n-1)/n of the gradient bytes for ZeRO 0-2 (all-reduce, or
  reduce-scatter + all-gather of the updated weights), 3·(n-1)/n for ZeRO-3 (the weights are
  all-gathered again for the backward pass): ZeRO paper §7 (2Ψ vs 3Ψ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from .errors import BtacalcError

if TYPE_CHECKING:
    from .hardware import HardwareProfile

ZERO_SHARDS = {  # component -> lowest ZeRO stage that shards it
    "optimizer": 1,
    "gradients": 2,
    "weights": 3,
}


@dataclass(frozen=True)
class Parallelism:
    """How a training job spreads over devices. The defaults are one device."""

    devices: int = 1
    expert_parallel: int = 1
    zero_stage: int = 0
    devices_per_node: Optional[int] = None  # None: the hardware profile's
    overlap_all_to_all: bool = False
    micro_batches: int = 1  # gradient accumulation: M micro-batches per optimizer step

    @property
    def data_parallel(self) -> int:
        return self.devices

    @property
    def expert_data_parallel(self) -> int:
        return self.devices // self.expert_parallel

    def validate(self, num_experts: int, profile: "HardwareProfile") -> None:
        for name, v in (("--devices", self.devices), ("--ep", self.expert_parallel),
                        ("--grad-accum", self.micro_batches)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise BtacalcError(f"{name} must be a positive integer, got {v!r}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise BtacalcError(f"--zero must be 0, 1, 2 or 3, got {self.zero_stage!r}")
        if self.devices_per_node is not None and self.devices_per_node < 1:
            raise BtacalcError(f"--gpus-per-node must be a positive integer, got {self.devices_per_node}")
        if profile.family == "wse" and (self.devices > 1 or self.expert_parallel > 1 or self.zero_stage):
            raise BtacalcError("--devices/--ep/--zero apply to GPU profiles: one wafer-scale system is modelled "
                               "(multi-system Cerebras clusters are not)")
        if self.devices > 1 and not profile.multi_device:
            raise BtacalcError(f"{profile.name} has no scale-up/scale-out bandwidth in its profile: --devices needs them")
        if self.devices % self.expert_parallel:
            raise BtacalcError(f"--ep {self.expert_parallel} does not divide --devices {self.devices}")
        if self.expert_parallel > 1:
            if num_experts == 0:
                raise BtacalcError("--ep needs an MoE model (the model is dense)")
            if num_experts % self.expert_parallel:
                raise BtacalcError(f"--ep {self.expert_parallel} does not divide the {num_experts} experts")

    def node_size(self, profile_default: Optional[int]) -> int:
        return self.devices_per_node or profile_default or 1


def auto_expert_parallel(devices: int, num_experts: int) -> int:
    """Default EP degree: the largest divisor of the experts that divides the devices (gcd)."""
    return math.gcd(devices, num_experts) if num_experts else 1


@dataclass(frozen=True)
class StatePart:
    """One bucket of training state on one device: `params` parameters of `part` at
    `bytes_per_param` bytes, divided over `divisor` devices (expert sharding x ZeRO sharding)."""

    component: str  # weights | gradients | optimizer
    part: str  # non_expert | expert
    params: int  # parameters in the bucket, whole model
    bytes_per_param: int
    divisor: int
    bytes: int  # per device

    @property
    def formula(self) -> str:
        return f"{self.bytes_per_param} B x ceil({self.params:,} / {self.divisor})"


def sharded_state(per_param_bytes: dict[str, int], non_expert_params: int, expert_params: int,
                  par: Parallelism) -> list[StatePart]:
    """Per-device weights, gradients and optimizer state, split non-expert / expert."""
    out = []
    for component, rate in per_param_bytes.items():
        zero = par.zero_stage >= ZERO_SHARDS[component]
        for part, params, shard in (
            ("non_expert", non_expert_params, par.data_parallel if zero else 1),
            ("expert", expert_params, par.expert_parallel * (par.expert_data_parallel if zero else 1)),
        ):
            if params == 0:
                continue
            out.append(StatePart(component, part, params, rate, shard, rate * -(-params // shard)))
    return out


def all_to_all_bytes(tokens: int, top_k: int, hidden: int, beta: int, ep: int, recomputed: bool) -> float:
    """Bytes one device sends per MoE layer per step for expert parallelism (see module docstring)."""
    passes = 6 if recomputed else 4
    return passes * tokens * top_k * hidden * beta * (1 - 1 / ep)


def gradient_sync_bytes(gradient_bytes: float, ranks: int, zero_stage: int) -> float:
    """Bytes one device sends to synchronise `gradient_bytes` of gradients over `ranks` ranks."""
    if ranks <= 1:
        return 0.0
    factor = 3 if zero_stage >= 3 else 2
    return factor * (ranks - 1) / ranks * gradient_bytes
