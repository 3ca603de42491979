"""The execution: how a model is run on a device (run options), how the job spreads over devices
(layout) and what the batch-shape solver may choose (batch limits), with every default resolved
once, in `resolve_execution`, and the reason for each default kept beside it.

Nothing downstream re-derives a default: the planning, sweep, compare and validation code build an
`ExecutionRequest` (the user's choices, None meaning "default") and call `resolve_execution`.
The one default that needs the memory model to decide, `memory_model = "auto"`, is resolved in
`btacalc.model.memory.resolve_memory_model`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Optional

from ..errors import BtacalcError

if TYPE_CHECKING:
    from .hardware import HardwareProfile
    from .model import ModelSpec

# Default sequence length: Qwen3's pre-training stages S1 and S2 used 4,096 tokens
# (Qwen3 technical report, arXiv 2505.09388, §3.2). The BTA paper does not state its length.
DEFAULT_SEQ_LEN = 4096
DEFAULT_SEQ_LEN_SOURCE = "Qwen3 technical report (arXiv 2505.09388) §3.2: stages S1-S2 at 4,096 tokens"

# What the batch-shape solver maximises (btacalc.model.solver): predicted tokens/s, or the largest
# G*b that fits (tokens per expert; the rule of the BTA design card).
OBJECTIVES = ("throughput", "density")

REASONS = {
    "objective": "throughput: the fitting batch shape with the highest predicted tokens/s (ties: more tokens per "
                 "expert, then fewer tiles)",
    "loss": "fused linear cross-entropy: logits materialised one sequence at a time",
    "memory_model": ("auto: the whole training state resident on the device when it fits with one sequence, "
                     "else weights streamed (wafer)"),
    "zero_stage": "1: optimizer state sharded over data-parallel ranks (Megatron-LM distributed optimizer)",
}


@dataclass(frozen=True)
class RunOptions:
    """How one device runs the model: every field resolved (see `resolve_execution`)."""

    seq_len: int = DEFAULT_SEQ_LEN
    recompute: Literal["none", "selective", "full"] = "full"
    attention: Literal["eager", "flash"] = "eager"
    causal: bool = False
    loss: Literal["stored", "fused"] = "fused"
    accounting: Literal["ideal", "pytorch"] = "ideal"
    optimizer: Literal["adam", "sgd"] = "adam"
    bytes_per_element: int = 2
    # auto: `btacalc.model.memory.resolve_memory_model` keeps the whole training state resident when it
    # fits with one sequence, else streams weights (wafer) or stays resident (GPU).
    memory_model: Literal["weight_streaming", "resident", "auto"] = "auto"
    overlap_streaming: bool = True  # weight streaming overlaps compute (max) or not (sum)

    def features(self) -> dict[str, Any]:
        """The run options the formula catalogue's `when` clauses test."""
        return {
            "attention": self.attention,
            "causal": self.causal,
            "loss": self.loss,
            "accounting": self.accounting,
            "optimizer": self.optimizer,
        }


@dataclass(frozen=True)
class Layout:
    """How a training job spreads over devices (data and expert parallelism, ZeRO, gradient
    accumulation). The defaults are one device."""

    devices: int = 1
    expert_parallel: int = 1
    zero_stage: int = 0
    devices_per_node: int = 1
    overlap_all_to_all: bool = False
    micro_batches: int = 1  # gradient accumulation: M micro-batches per optimizer step (the solver may choose it)

    @property
    def data_parallel(self) -> int:
        return self.devices

    @property
    def expert_data_parallel(self) -> int:
        return self.devices // self.expert_parallel

    def validate(self, num_experts: int, profile: "HardwareProfile") -> None:
        for name, v in (("devices", self.devices), ("expert_parallel", self.expert_parallel),
                        ("micro_batches", self.micro_batches), ("devices_per_node", self.devices_per_node)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise BtacalcError(f"{{{name}}} must be a positive integer, got {v!r}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise BtacalcError(f"{{zero_stage}} must be 0, 1, 2 or 3, got {self.zero_stage!r}")
        if profile.family == "wse" and (self.devices > 1 or self.expert_parallel > 1 or self.zero_stage):
            raise BtacalcError("{devices}/{expert_parallel}/{zero_stage} apply to GPU profiles: one wafer-scale "
                               "system is modelled (multi-system Cerebras clusters are not)")
        if self.devices > 1 and not profile.multi_device:
            raise BtacalcError(f"{profile.name} has no scale-up/scale-out bandwidth in its profile: {{devices}} "
                               "needs them")
        if self.devices % self.expert_parallel:
            raise BtacalcError(f"{{expert_parallel}} {self.expert_parallel} does not divide {{devices}} {self.devices}")
        if self.expert_parallel > 1:
            if num_experts == 0:
                raise BtacalcError("{expert_parallel} needs an MoE model (the model is dense)")
            if num_experts % self.expert_parallel:
                raise BtacalcError(f"{{expert_parallel}} {self.expert_parallel} does not divide the {num_experts} experts")


@dataclass(frozen=True)
class BatchLimits:
    """User constraints on the batch shape; None means free.

    An optimizer step processes N = DP x M x G x b sequences: DP data-parallel ranks, each running M
    micro-batches (gradient accumulation) of G tiles of b sequences. `global_batch` is N (Megatron's
    and Cerebras' global batch size), `max_global_batch` caps it; G*b is what one rank's router and
    experts see per micro-batch (the BTA paper's B~).
    """

    global_batch: Optional[int] = None
    tiles: Optional[int] = None
    tile_batch: Optional[int] = None
    max_global_batch: Optional[int] = None
    max_tile_batch: Optional[int] = None
    micro_batches: Optional[int] = None  # None: 1, or chosen by the solver when global_batch is fixed

    def validate(self, data_parallel: int = 1) -> None:
        """Check the limits against each other for `data_parallel` ranks."""
        for name, v in self.__dict__.items():
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise BtacalcError(f"{{{name}}} must be a positive integer, got {v!r}")
        n = self.global_batch
        if n is not None:
            self._check_divisible(n, data_parallel)
            if self.max_global_batch is not None and n > self.max_global_batch:
                raise BtacalcError(f"{{global_batch}} {n} exceeds {{max_global_batch}} {self.max_global_batch}")
        b = self.tile_batch
        if b is not None and self.max_tile_batch is not None and b > self.max_tile_batch:
            raise BtacalcError(f"{{tile_batch}} {b} exceeds {{max_tile_batch}} {self.max_tile_batch}")

    def _check_divisible(self, n: int, data_parallel: int) -> None:
        if n % data_parallel:
            raise BtacalcError(f"{{global_batch}} {n} is not divisible by the {data_parallel} data-parallel ranks")
        per_rank = n // data_parallel
        what = f"{{global_batch}} {n}" + (f" over {data_parallel} data-parallel ranks ({per_rank} per rank)"
                                            if data_parallel > 1 else "")
        fixed = [(name, v) for name, v in (("micro_batches", self.micro_batches), ("tiles", self.tiles),
                                           ("tile_batch", self.tile_batch)) if v is not None]
        for name, v in fixed:
            if per_rank % v:
                raise BtacalcError(f"{what} is not divisible by {{{name}}} {v}")
        product = math.prod(v for _, v in fixed)
        if per_rank % product or (len(fixed) == 3 and product != per_rank):
            shown = " x ".join(f"{{{name}}} {v}" for name, v in fixed)
            raise BtacalcError(f"{shown} = {product} does not divide {what}" if per_rank % product
                               else f"{shown} = {product} differs from {what}")

    def free(self) -> "BatchLimits":
        """The same caps and gradient accumulation with the shape left to the solver (for the dense
        comparison)."""
        return BatchLimits(max_global_batch=self.max_global_batch, micro_batches=self.micro_batches)


@dataclass(frozen=True)
class ExecutionRequest:
    """What the user asked for; None means "use the default" (resolved by `resolve_execution`)."""

    seq_len: Optional[int] = None
    recompute: Optional[str] = None
    attention: Optional[str] = None
    causal: bool = False
    loss: Optional[str] = None
    accounting: str = "ideal"
    memory_model: Optional[str] = None
    overlap_streaming: bool = True
    devices: int = 1
    expert_parallel: Optional[int] = None
    zero_stage: Optional[int] = None
    devices_per_node: Optional[int] = None
    overlap_all_to_all: bool = False
    limits: BatchLimits = field(default_factory=BatchLimits)
    objective: Optional[str] = None

    def with_changes(self, **changes: Any) -> "ExecutionRequest":
        return replace(self, **changes)


@dataclass(frozen=True)
class Execution:
    """A resolved execution: run options, layout and batch limits, and why each default was chosen."""

    run: RunOptions
    layout: Layout
    limits: BatchLimits = BatchLimits()
    objective: str = "throughput"
    defaults: tuple[tuple[str, str], ...] = ()
    request: Optional[ExecutionRequest] = None  # what the user asked for, before the defaults

    @property
    def default_reasons(self) -> dict[str, str]:
        return dict(self.defaults)


def auto_expert_parallel(devices: int, num_experts: int) -> int:
    """Default EP degree: the largest divisor of the experts that divides the devices (gcd)."""
    return math.gcd(devices, num_experts) if num_experts else 1


def resolve_execution(request: ExecutionRequest, model: "ModelSpec", profile: "HardwareProfile") -> Execution:
    """Fill every default of `request` for `model` on `profile`, validate, and record the reasons."""
    reasons: dict[str, str] = {}
    d = profile.defaults

    def pick(name: str, given: Any, default: Any, reason: str) -> Any:
        if given is not None:
            return given
        reasons[name] = reason
        return default

    run = RunOptions(
        seq_len=pick("seq_len", request.seq_len, DEFAULT_SEQ_LEN, DEFAULT_SEQ_LEN_SOURCE),
        recompute=pick("recompute", request.recompute, d.recompute, f"{profile.name} default: {d.note}"),
        attention=pick("attention", request.attention, d.attention, f"{profile.name} default: {d.note}"),
        causal=request.causal,
        loss=pick("loss", request.loss, "fused", REASONS["loss"]),
        accounting=request.accounting,  # type: ignore[arg-type]  # validated by the CLI choices / catalogue
        memory_model=pick("memory_model", request.memory_model, "auto", REASONS["memory_model"]),
        overlap_streaming=request.overlap_streaming,
    )
    devices = request.devices
    ep = request.expert_parallel
    if ep is None:
        ep = auto_expert_parallel(devices, model.num_experts) if isinstance(devices, int) else 1
        if devices > 1:
            reasons["expert_parallel"] = f"gcd(devices, E) = {ep}: experts split as far as the device count allows"
    zero = request.zero_stage
    if zero is None:
        zero = 1 if devices > 1 else 0
        if devices > 1:
            reasons["zero_stage"] = REASONS["zero_stage"]
    node = request.devices_per_node
    if node is None:
        node = int(profile.system.devices_per_node.value) if profile.system.devices_per_node else 1
    layout = Layout(devices, ep, zero, node, request.overlap_all_to_all, request.limits.micro_batches or 1)
    layout.validate(model.num_experts, profile)
    request.limits.validate(layout.data_parallel)
    objective = pick("objective", request.objective, OBJECTIVES[0], REASONS["objective"])
    if objective not in OBJECTIVES:
        raise BtacalcError(f"{{objective}} must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    return Execution(run, layout, request.limits, objective, tuple(reasons.items()), request)
