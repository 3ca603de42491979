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

REASONS = {
    "loss": "fused linear cross-entropy: logits materialised one sequence at a time",
    "memory_model": ("auto: the whole training state resident on the device when it fits with one sequence, "
                     "else weights streamed (wafer)"),
    "zero_stage": "1: optimizer state sharded over data-parallel ranks (Megatron-LM distributed optimizer)",
    "multi_token_prediction": ("off: the main model only, as Hugging Face transformers trains DeepSeek-V3 (it does not "
                               "build the MTP module) and as the published parameter counts are given"),
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
    # train the model's multi-token-prediction modules too (DeepSeek-V3 MTP; a model without any ignores it)
    multi_token_prediction: bool = False

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
    micro_batches: int = 1  # gradient accumulation: M micro-batches per optimizer step

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
        if profile.family == "wse" and (self.expert_parallel > 1 or self.zero_stage):
            raise BtacalcError("{expert_parallel}/{zero_stage} apply to GPU profiles: wafer-scale systems train in "
                               "strict data parallel (MemoryX holds the state, SwarmX broadcasts and reduces)")
        if self.devices > 1 and not profile.multi_device:
            links = "SwarmX numbers (system.swarmx_*)" if profile.family == "wse" else "scale-up/scale-out bandwidth"
            raise BtacalcError(f"{profile.name} has no {links} in its profile: {{devices}} needs them")
        if self.devices % self.expert_parallel:
            raise BtacalcError(f"{{expert_parallel}} {self.expert_parallel} does not divide {{devices}} {self.devices}")
        if self.expert_parallel > 1:
            if num_experts == 0:
                raise BtacalcError("{expert_parallel} needs an MoE model (the model is dense)")
            if num_experts % self.expert_parallel:
                raise BtacalcError(f"{{expert_parallel}} {self.expert_parallel} does not divide the {num_experts} experts")


# No training batch comes near 2^80 sequences (about 1.2e24); the bound also keeps the factorisation
# of a fixed global batch (btacalc.model.divisors) well under a second.
MAX_SEQUENCES = 1 << 80


@dataclass(frozen=True)
class BatchLimits:
    """User constraints on the batch shape; None means free."""

    global_batch: Optional[int] = None
    tiles: Optional[int] = None
    tile_batch: Optional[int] = None
    max_global_batch: Optional[int] = None
    max_tile_batch: Optional[int] = None

    def validate(self) -> None:
        for name, v in self.__dict__.items():
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise BtacalcError(f"{{{name}}} must be a positive integer, got {v!r}")
            if v is not None and v > MAX_SEQUENCES:
                raise BtacalcError(f"{{{name}}} {v} is beyond 2^80 sequences, more than any training batch")
        n, g, b = self.global_batch, self.tiles, self.tile_batch
        if n is not None and g is not None and n % g:
            raise BtacalcError(f"{{global_batch}} {n} is not divisible by {{tiles}} {g}")
        if n is not None and b is not None and n % b:
            raise BtacalcError(f"{{global_batch}} {n} is not divisible by {{tile_batch}} {b}")
        if n is not None and g is not None and b is not None and g * b != n:
            raise BtacalcError(f"{{tiles}} {g} x {{tile_batch}} {b} = {g * b} differs from {{global_batch}} {n}")
        if n is not None and self.max_global_batch is not None and n > self.max_global_batch:
            raise BtacalcError(f"{{global_batch}} {n} exceeds {{max_global_batch}} {self.max_global_batch}")
        if b is not None and self.max_tile_batch is not None and b > self.max_tile_batch:
            raise BtacalcError(f"{{tile_batch}} {b} exceeds {{max_tile_batch}} {self.max_tile_batch}")

    def free(self) -> "BatchLimits":
        """The same caps with the shape left to the solver (for the G = 1 and dense comparisons)."""
        return BatchLimits(max_global_batch=self.max_global_batch)


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
    multi_token_prediction: Optional[bool] = None
    devices: int = 1
    expert_parallel: Optional[int] = None
    zero_stage: Optional[int] = None
    devices_per_node: Optional[int] = None
    overlap_all_to_all: bool = False
    micro_batches: Optional[int] = None  # None: 1, or on a wafer with a global batch, chosen (model.wafer.batching)
    limits: BatchLimits = field(default_factory=BatchLimits)

    def with_changes(self, **changes: Any) -> "ExecutionRequest":
        return replace(self, **changes)


@dataclass(frozen=True)
class Execution:
    """A resolved execution: run options, layout and batch limits, and why each default was chosen."""

    run: RunOptions
    layout: Layout
    limits: BatchLimits = BatchLimits()
    defaults: tuple[tuple[str, str], ...] = ()
    request: Optional[ExecutionRequest] = None  # what the user asked for, before the defaults

    @property
    def default_reasons(self) -> dict[str, str]:
        return dict(self.defaults)


def auto_expert_parallel(devices: int, num_experts: int) -> int:
    """Default EP degree: the largest divisor of the experts that divides the devices (gcd)."""
    return math.gcd(devices, num_experts) if num_experts else 1


def _mtp(request: ExecutionRequest, model: "ModelSpec", reasons: dict[str, str]) -> bool:
    if request.multi_token_prediction is None:
        if model.mtp_layers:
            reasons["multi_token_prediction"] = REASONS["multi_token_prediction"]
        return False
    if request.multi_token_prediction and not model.mtp_layers:
        raise BtacalcError(f"{{multi_token_prediction}}: model {model.name!r} has no multi-token-prediction module")
    return request.multi_token_prediction


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
        multi_token_prediction=_mtp(request, model, reasons),
    )
    devices = request.devices
    ep, zero = request.expert_parallel, request.zero_stage
    if profile.family == "wse":  # wafer clusters: strict data parallel, the state in MemoryX
        ep, zero = (1 if ep is None else ep), (0 if zero is None else zero)
    if ep is None:
        ep = auto_expert_parallel(devices, model.num_experts) if isinstance(devices, int) else 1
        if devices > 1:
            reasons["expert_parallel"] = f"gcd(devices, E) = {ep}: experts split as far as the device count allows"
    if zero is None:
        zero = 1 if devices > 1 else 0
        if devices > 1:
            reasons["zero_stage"] = REASONS["zero_stage"]
    node = request.devices_per_node
    if node is None:
        node = int(profile.system.devices_per_node.value) if profile.system.devices_per_node else 1
    micro = 1 if request.micro_batches is None else request.micro_batches
    layout = Layout(devices, ep, zero, node, request.overlap_all_to_all, micro)
    layout.validate(model.num_experts, profile)
    request.limits.validate()
    return Execution(run, layout, request.limits, tuple(reasons.items()), request)
