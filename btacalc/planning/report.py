"""The plan report: a pydantic model with a documented JSON schema (`btacalc plan --schema`).

Units: bytes, FLOP, FLOP/byte, seconds; no scaled units in JSON.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, Field

SCHEMA_VERSION = 1


class ModelInfo(BaseModel):
    name: str
    source: str
    params_total: int
    params_active: int
    params_non_embedding: int
    params_per_layer: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    ffn_size: int = Field(description="expert width f (MoE) or MLP width (dense)")
    num_experts: int
    top_k: int


class HardwareInfo(BaseModel):
    name: str
    display_name: str
    memory_model: str
    memory_capacity_bytes: int = Field(description="SRAM (weight streaming) or device memory (resident)")
    usable_memory_bytes: int
    peak_flops_per_s: float
    offchip_bandwidth_bytes_per_s: float


class ParallelInfo(BaseModel):
    devices: int = Field(description="N: devices; every device is a data-parallel rank")
    expert_parallel: int = Field(description="EP: devices the experts are split over (E/EP experts each)")
    expert_data_parallel: int = Field(description="N/EP: replicas of each expert shard")
    zero_stage: int = Field(description="ZeRO stage: 1 shards optimizer state, 2 + gradients, 3 + weights")
    micro_batches: int = Field(1, description="M: gradient accumulation steps per optimizer step")
    devices_per_node: int
    overlap_all_to_all: bool


class StateRow(BaseModel):
    component: str = Field(description="weights, gradients or optimizer")
    part: str = Field(description="non_expert (data-parallel) or expert (expert-parallel)")
    params: int = Field(description="parameters of this part in the whole model")
    bytes_per_param: int
    divisor: int = Field(description="devices the part is split over: EP for experts, x data-parallel ranks when ZeRO shards it")
    bytes_per_device: int
    formula: str


class Inputs(BaseModel):
    memory_model: str = Field("", description="weight_streaming or resident, as used")
    seq_len: int
    recompute: str
    attention: str
    causal: bool
    loss: str
    accounting: str
    optimizer: str
    bytes_per_element: int
    global_batch: Optional[int] = Field(None, description="N as given: sequences per optimizer step over all "
                                        "data-parallel ranks")
    tiles: Optional[int] = None
    tile_batch: Optional[int] = None
    max_global_batch: Optional[int] = None
    max_tile_batch: Optional[int] = None
    micro_batches: Optional[int] = Field(None, description="M as given (--grad-accum); None: chosen by the solver")
    objective: str = Field("density", description="what the solver maximised: throughput (tokens/s) or density "
                           "(the largest G*b that fits)")
    defaults: dict[str, str] = Field(default_factory=dict, description="inputs left at their default, and why")


class AlternativePlan(BaseModel):
    """The plan the other objective picks, when it differs."""

    objective: str
    tiles: int
    tile_batch: int
    micro_batches: int
    global_batch: int = Field(description="G*b")
    step_batch: int = Field(description="N = DP*M*G*b")
    tokens_per_expert: float
    tokens_per_s: float = Field(description="predicted, all devices")


class PlanInfo(BaseModel):
    tiles: int = Field(description="G: attention tiles")
    tile_batch: int = Field(description="b: sequences per attention tile")
    global_batch: int = Field(description="G*b: sequences one data-parallel rank's router and experts see per "
                              "micro-batch (the BTA paper's B~)")
    micro_batches: int = Field(1, description="M: micro-batches per optimizer step (gradient accumulation)")
    step_batch: int = Field(0, description="N = DP*M*G*b: sequences per optimizer step over all data-parallel ranks")
    tokens_per_step: int = Field(description="G*b*s, per device")
    devices: int = 1
    cluster_tokens_per_step: int = Field(0, description="N*M*G*b*s: tokens per optimizer step over all devices")
    tokens_per_expert: float = Field(description="T_e = EP*G*b*s*k/E per expert replica under uniform routing (G*b*s for dense)")
    fits: bool
    binding_constraint: str = Field(description="what stops a larger G*b: memory, max_global_batch, global_batch, tiles, ...")
    tile_constraint: str = Field(description="what stops a larger tile b (density: at that G*b; throughput: at that G)")
    explanation: str
    memory_evaluations: int = Field(description="batch shapes whose memory the solver evaluated")
    objective: str = Field("density", description="throughput: the fastest fitting shape; density: the largest G*b")
    alternative: Optional[AlternativePlan] = Field(None, description="the other objective's plan, when it differs")


class FlopsPerStep(BaseModel):
    forward: int
    backward: int
    total: int = Field(description="model FLOPs: forward + backward (Korthikanti's 72BLsh^2(...))")
    recompute: int = Field(description="extra forward FLOPs re-run by recomputation / FlashAttention")
    hardware_total: int = Field(description="total + recompute")
    elementwise: int = Field(description="approximate non-matmul work, not in the totals")


class PhaseRow(BaseModel):
    name: str
    group: str
    batch: str = Field(description="tile: runs G times on b sequences; global: once on G*b")
    params: int
    flops_forward: int
    flops_backward: int
    flops_recompute: int
    flops_elementwise: int
    stored_activation_bytes: int
    recompute_bytes: int
    transient_bytes: int
    bytes_moved: int
    arithmetic_intensity: float = Field(description="flops_forward / bytes_moved, FLOP/byte")
    time_s: float = Field(0.0, description="modelled time of this phase per step (one layer for layer phases)")


class Throughput(BaseModel):
    step_time_s: float
    tokens_per_s: float = Field(description="all devices")
    tokens_per_s_per_kw: float = Field(0.0, description="tokens/s over the system power of the devices (profile system_power_w, else power_w)")
    mfu: float = Field(description="model FLOPs / (step time x peak)")
    relative_to_dense: Optional[float] = Field(description="tokens/s over the dense model (same active params) at its best plan")
    tokens_per_s_g1: Optional[float] = Field(description="tokens/s at G = 1 (largest untiled batch that fits)")
    relative_to_dense_g1: Optional[float]
    step_time_s_g1: Optional[float]
    tile_batch_g1: Optional[int]
    dense_tokens_per_s: Optional[float]
    dense_global_batch: Optional[int]
    tiling_overhead_s: float
    stream_bound_share: float = Field(description="share of the step during which weight streaming is the bottleneck")
    overlap_streaming: bool
    compute_efficiency: float
    phase_share: dict[str, float] = Field(description="share of step time per phase")
    dominant_phase: str = ""
    communication_s: dict[str, float] = Field(default_factory=dict, description="multi-GPU: all_to_all and "
                                              "gradient_sync time per step before overlap")


class PlanReport(BaseModel):
    schema_version: int = SCHEMA_VERSION
    model: ModelInfo
    hardware: HardwareInfo
    inputs: Inputs
    parallelism: ParallelInfo
    plan: PlanInfo
    memory_bytes: dict[str, int] = Field(description="total, capacity, usable_capacity and one key per component")
    offchip_bytes: dict[str, int] = Field(description="weight streaming: state held off-wafer (MemoryX)")
    state_sharding: list[StateRow] = Field(default_factory=list, description="resident: weights, gradients and "
                                           "optimizer state per device, by part and divisor")
    flops_per_step: FlopsPerStep
    phases: list[PhaseRow] = Field(description="one decoder layer, at the plan's G and b, per step")
    outside_layers: list[PhaseRow] = Field(description="embedding, final norm, LM head, loss")
    throughput: Optional[Throughput] = None
    suggestions: list[str] = Field(default_factory=list, description="what would fit, when the plan does not")
