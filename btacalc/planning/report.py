"""The plan report: a pydantic model with a documented JSON schema (`btacalc plan --schema`).

Units: bytes, FLOP, FLOP/byte, seconds; no scaled units in JSON.
"""

from __future__ import annotations

import statistics
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from ..errors import clean_text

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
    devices_per_host: Optional[int] = Field(None, description="GPU: devices one host holds where fewer than one "
                                            "NVLink domain (a GB200 tray of 4 in an NVL72 rack); None: one host "
                                            "per domain")
    compute_capability: Optional[float] = Field(None, description="GPU: the CUDA compute capability of its profile "
                                                "(which attention backend a launch states for btacalc's default "
                                                "kernel); None: a wafer")


class ParallelInfo(BaseModel):
    devices: int = Field(description="devices")
    expert_parallel: int = Field(description="EP: devices the experts are split over (E/EP experts each)")
    expert_data_parallel: int = Field(description="EDP = devices/(ETP·EP·PP): replicas of each expert shard")
    zero_stage: int = Field(description="ZeRO stage: 1 shards optimizer state (Megatron's distributed optimizer), "
                            "2 + gradients, 3 + weights")
    micro_batches: int = Field(1, description="M: micro-batches (gradient accumulation steps) per optimizer step")
    devices_per_node: int = Field(description="devices in one scale-up (NVLink) domain")
    overlap_all_to_all: bool
    deepep: bool = Field(False, description="MoE tokens dispatched by DeepEP/HybridEP, one copy per destination rank "
                         "(Megatron's flex dispatcher)")
    hybridep: bool = Field(False, description="with deepep: the flex dispatcher's hybridep backend (NVIDIA's Hybrid-EP)")
    allgather_dispatcher: bool = Field(False, description="MoE tokens all-gathered over the ETP x EP group and the "
                                       "outputs reduce-scattered back (Megatron's allgather dispatcher)")
    dispatcher_sms: Optional[int] = Field(None, description="SMs DeepEP/HybridEP hold while it runs (None: "
                                          "Megatron-Core's default, 20)")
    nccl_ub: bool = Field(False, description="Megatron's nccl_ub with NCCL_CTA_POLICY=1: registered data-parallel "
                          "buffers (--use-nccl-ub)")
    nvls: bool = Field(False, description="NVLink SHARP on with nccl_ub (NCCL_NVLS_ENABLE=1)")
    nccl_ub_path: str = Field("", description="with nccl_ub: the path NCCL takes for the data-parallel collectives "
                              "(the NVLS path on fewer SMs, or the ring channels as without it and why); \"\" without")
    ddp_bucket_params: Optional[int] = Field(None, description="parameters per gradient bucket as given "
                                             "(--ddp-bucket-size; None: Megatron's default, max(4e7, 1e6 x DP x CP))")
    ddp_num_buckets: Optional[int] = Field(None, description="gradient buckets asked for (--ddp-num-buckets: "
                                           "the rank's parameters // this many per bucket); None: not given")
    microbatch_group: Optional[int] = Field(None, description="micro-batches the interleaved schedule runs each "
                                            "model chunk for in a row (--microbatch-group-size-per-virtual-pipeline-"
                                            "stage); None: Megatron's default, PP")
    vocab_multiple: Optional[int] = Field(None, description="the vocabulary is padded to a multiple of this x TP "
                                          "(--make-vocab-size-divisible-by); None: Megatron's default, 128")
    dp_collective_ctas: dict[str, int] = Field(default_factory=dict, description="SMs one data-parallel all-gather, "
                                               "reduce-scatter and all-reduce holds while it hides behind compute "
                                               "(NCCL's ring channels, or its NVLS path with nccl_ub: "
                                               "btacalc/model/gpu/sm_share.py)")
    cuda_graph_scope: list[str] = Field(default_factory=list, description="Megatron's per-layer CUDA-graph scopes "
                                        "(--cuda-graph-impl transformer_engine); empty: no CUDA graphs")
    tensor_parallel: int = Field(1, description="TP (Megatron --tensor-model-parallel-size)")
    sequence_parallel: bool = Field(False, description="sequence parallelism with TP (Korthikanti et al. 2022)")
    pipeline_parallel: int = Field(1, description="PP (--pipeline-model-parallel-size)")
    virtual_pipeline: int = Field(1, description="VP: interleaved model chunks per stage (1: plain 1F1B)")
    context_parallel: int = Field(1, description="CP (--context-parallel-size)")
    expert_tensor_parallel: int = Field(1, description="ETP (--expert-tensor-parallel-size)")
    data_parallel: int = Field(1, description="DP = devices/(TP·PP·CP)")
    fsdp: bool = Field(False, description="fully sharded data parallel (ZeRO-3 state, gathers every micro-batch)")
    fsdp_impl: str = Field("megatron", description="whose FSDP: megatron (Megatron-FSDP), torch (PyTorch FSDP1 "
                           "as llm-foundry runs it) or fsdp2 (PyTorch FSDP2 as torchtitan runs it); --fsdp-impl")
    pipeline_split: str = Field("even", description="even (Megatron's default), embedding_loss / embedding / loss "
                                "(the account-for flags: the embedding and/or the loss count as one layer), "
                                "first_last (uneven first/last stage) or layout (a layout string)")
    stage_layers: list[int] = Field(default_factory=list, description="decoder layers on each pipeline stage")
    first_stage_layers: Optional[int] = Field(None, description="--decoder-first-pipeline-num-layers")
    last_stage_layers: Optional[int] = Field(None, description="--decoder-last-pipeline-num-layers")
    pipeline_layout: Optional[str] = Field(None, description="--pipeline-model-parallel-layout")
    overlaps: dict[str, bool] = Field(default_factory=dict, description="communication hidden behind compute, by "
                                      "Megatron-Core option")
    cuda_max_connections: Optional[int] = Field(None, description="CUDA_DEVICE_MAX_CONNECTIONS as given "
                                                "(--cuda-max-connections); None: unset (CUDA's 8 queues), or the 1 "
                                                "--emit megatron sets where Megatron asserts it")
    tp_overlap_table: Optional[str] = Field(None, description="the TransformerEngine userbuffers table the TP-comm "
                                            "overlap is timed with: TE's defaults (btacalc/data/tp_overlap.toml) or "
                                            "the run's own (a measured recipe's tp_overlap_cfg: its source); None when "
                                            "no userbuffers overlap is timed (off, TP 1 or no sequence parallelism)")


class StateRow(BaseModel):
    component: str = Field(description="weights, gradients or optimizer")
    part: str = Field(description="non_expert (data-parallel) or expert (expert-parallel)")
    params: int = Field(description="parameters of this part the device's model-parallel shard holds (after TP, "
                        "PP, EP, ETP)")
    bytes_per_param: int
    divisor: int = Field(description="ZeRO shards: the data-parallel ranks (DP·CP for non-expert, EDP for expert "
                         "parameters) when the ZeRO stage shards this component, else 1")
    bytes_per_device: int
    formula: str


class StageRow(BaseModel):
    stage: int = Field(description="pipeline stage (0 holds the embedding, the last the head and loss)")
    layers: int
    in_flight: int = Field(description="model-chunk passes whose activations the stage holds at its peak")
    components: dict[str, int] = Field(description="bytes per device: state, activations, buffers")
    total: int


class Inputs(BaseModel):
    memory_model: str = Field("", description="weight_streaming or resident, as used")
    seq_len: int
    recompute: str
    attention: str
    causal: bool
    attention_kernel: str = Field("default", description="the fused attention kernel whose FLOP rate the attention "
                                  "core runs at (btacalc/data/attention_kernels.toml; default: TransformerEngine's fused "
                                  "attention, its benchmarked rate where the file has one, else the large-GEMM rate)")
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
    micro_batch: Optional[int] = Field(None, description="G·b fixed: sequences per micro-batch per data-parallel rank")
    gradient_bytes: int = Field(2, description="bytes per gradient element (4: fp32 main gradients)")
    routing_imbalance: float = Field(1.0, description="the busiest expert's routed tokens over the mean")
    capacity_factor: Optional[float] = Field(None, description="MoE token dropping: each expert's capacity over its "
                                             "balanced share (Megatron --moe-expert-capacity-factor; null: dropless)")
    pad_to_capacity: bool = Field(False, description="every expert's input padded to its capacity (Megatron "
                                  "--moe-pad-expert-input-to-capacity)")
    precision: str = Field("bf16", description="training precision (btacalc/data/precision.toml)")
    te_recipe: str = Field("", description="the TransformerEngine recipe class of the precision ('' for 16-bit)")
    fp8_param_gather: bool = Field(False, description="parameters kept and all-gathered in the low precision")
    fp8_attention: bool = Field(False, description="the attention core in TransformerEngine's FP8 fused attention "
                                "(--fp8-attention; Megatron --fp8-dot-product-attention)")
    rht_cast_fusion: bool = Field(True, description="NVFP4: an activation's rowwise and Hadamard-transformed "
                                  "columnwise copies cast in one kernel (TransformerEngine 2.14 and later); false: one "
                                  "kernel per copy (--no-rht-cast-fusion)")
    te_version: str = Field("", description="the TransformerEngine release the run uses (--te-version; "
                            "btacalc/data/te_releases.toml): which per-tensor FP8 transposes it writes on compute "
                            "capability 10.x")
    gradient_accumulation_fusion: bool = Field(True, description="weight-gradient GEMMs accumulate into the fp32 main "
                                               "gradient (Megatron's default); false: a separate add per parameter "
                                               "and micro-batch (--no-gradient-accumulation-fusion)")
    deterministic_mode: bool = Field(False, description="Megatron --deterministic-mode (a launch's or a run's "
                                     "recipe): the attention backward at its deterministic kernel's time where one "
                                     "is published (attention_kernels.toml), NCCL rings only (NCCL_ALGO=Ring)")
    checkpoint_early_stop: bool = Field(False, description="full recompute as PyTorch's non-reentrant checkpoint "
                                        "with early stop: the MLP's second linear is not re-run "
                                        "(--checkpoint-early-stop)")
    eager_kernels: bool = Field(False, description="element-wise kernels as eager PyTorch launches them "
                                "(llm-foundry's MPT block; --eager-kernels)")
    transformer_engine: bool = Field(True, description="the layers are TransformerEngine's (Megatron's default "
                                     "--transformer-impl transformer_engine); false: Megatron-Core's own (local), or a "
                                     "wafer-scale plan")
    expert_grouped_gemm: bool = Field(True, description="an MoE model's experts run as TransformerEngine grouped GEMMs "
                                      "(--moe-grouped-gemm); false: Megatron-Core's SequentialMLP, without TE's "
                                      "grouped-GEMM workspaces")
    cpu_offload_layers: int = Field(0, description="decoder layers whose activations wait in host memory "
                                    "(--cpu-offloading-num-layers)")
    bf16_layers_at_start: int = Field(0, description="the first decoder layers kept out of the low-precision recipe "
                                      "(--bf16-layers-at-start; Megatron --num-layers-at-start-in-bf16)")
    bf16_layers_at_end: int = Field(0, description="the last decoder layers kept out of the low-precision recipe "
                                    "(--bf16-layers-at-end; Megatron --num-layers-at-end-in-bf16)")
    bf16_layers: list[int] = Field(default_factory=list, description="0-based indices of the decoder layers whose "
                                   "linear layers run in BF16 under the low-precision recipe (the first and last kept "
                                   "out of it); every other decoder layer runs in the recipe")
    recompute_layers: int = Field(0, description="with recompute full: the first N decoder layers of each pipeline "
                                  "stage's model chunk are recomputed and the others keep their activations (--recompute-layers; Megatron --recompute-method "
                                  "block --recompute-num-layers N); 0: every layer")
    moment_bytes: int = Field(4, description="bytes of each Adam moment (2: bf16, the precision-aware optimizer)")
    precision_aware_optimizer: bool = Field(False, description="Megatron's --use-precision-aware-optimizer: "
                                            "TransformerEngine's FusedAdam holds the master weights and moments (implied "
                                            "by bf16 moments)")
    optimizer_fp8_recipe: Optional[str] = Field("delayed", description="the fp8_recipe Megatron-Core's optimizer "
                                                "config holds where the precision has no FP8 recipe (Megatron-LM's "
                                                "--fp8-recipe, default delayed; Megatron-Bridge's mixed_precision."
                                                "fp8_recipe, default tensorwise): under the precision-aware optimizer "
                                                "FusedAdam keeps remainders only with none or delayed")
    master_weights: str = Field("fp32", description="the optimizer's master weights: fp32, or remainders (the low "
                                "16 bits of each fp32 master weight as int16 beside its bf16 parameter: FusedAdam's "
                                "store_param_remainders under the precision-aware optimizer without FP8 or with "
                                "delayed-scaling FP8)")
    routing_weights: str = Field("combine", description="where an MoE layer applies its routing weights: combine "
                                 "(after the experts) or experts (inside their activation, Megatron-Core)")
    micro_batches: Optional[int] = Field(None, description="M as given (--grad-accum); None: chosen by the solver")
    objective: str = Field("density", description="what the solver maximised: throughput (tokens/s) or density "
                           "(the largest G*b that fits)")
    defaults: dict[str, str] = Field(default_factory=dict, description="inputs left at their default, and why")
    changed_overlaps: dict[str, bool] = Field(default_factory=dict, description="the overlaps planned otherwise than "
                                              "asked, as Megatron would run the plan (why: `defaults`): each key and "
                                              "whether the plan runs it")

    def run_options(self) -> list[tuple[str, str]]:
        """The run options set away from their defaults that change the numbers, as (what it does, the flag that
        sets it): the one list the plan header and compare's rows show. --no-rht-cast-fusion changes only a recipe
        that casts through the Hadamard transform (precision.toml rht_cast_fusion_since_te)."""
        from ..config.precision import recipe

        out = []
        if self.fp8_param_gather:
            out.append(("parameters kept and gathered in the low precision", "--fp8-param-gather"))
        if self.fp8_attention:
            out.append(("attention core in FP8", "--fp8-attention"))
        if not self.rht_cast_fusion and recipe(self.precision).rht_cast_fusion_since_te:
            out.append((f"{self.precision} casts one kernel per copy", "--no-rht-cast-fusion"))
        if self.te_version and "te_version" not in self.defaults and recipe(self.precision).te_release_decides:
            out.append((f"TransformerEngine {self.te_version}'s FP8 transposes and saved copies", "--te-version"))
        if not self.gradient_accumulation_fusion:
            out.append(("weight gradients added to the main gradient by a separate kernel",
                        "--no-gradient-accumulation-fusion"))
        if self.checkpoint_early_stop:
            out.append(("re-runs stop after the last saved tensor (PyTorch checkpoint)", "--checkpoint-early-stop"))
        if self.capacity_factor is not None:
            padded = " --pad-to-capacity" if self.pad_to_capacity else ""
            out.append((f"experts capped at {self.capacity_factor:g} x their balanced share"
                        + (", every expert padded to it" if self.pad_to_capacity else ", the rest dropped"),
                        f"--capacity-factor {self.capacity_factor:g}{padded}"))
        if self.recompute_layers:
            out.append((f"the first {self.recompute_layers} decoder layers of each pipeline chunk recomputed (Megatron's "
                        "block method), any others and MTP layers keeping their activations",
                        f"--recompute-layers {self.recompute_layers}"))
        if self.eager_kernels:
            out.append(("element-wise kernels of eager PyTorch (llm-foundry)", "--eager-kernels"))
        if self.cpu_offload_layers:
            out.append((f"the first {self.cpu_offload_layers} layers' activations in host memory",
                        f"--cpu-offloading-num-layers {self.cpu_offload_layers}"))
        if self.bf16_layers:
            flags = " ".join(f"--bf16-layers-at-{end} {n}" for end, n in (("start", self.bf16_layers_at_start),
                                                                          ("end", self.bf16_layers_at_end)) if n)
            out.append((f"decoder layers {_layer_ranges(self.bf16_layers)} in BF16, outside {self.precision}", flags))
        if self.moment_bytes == 2:
            out.append(("bf16 Adam moments", "--optimizer-moments bf16"))
        if self.precision_aware_optimizer and self.moment_bytes != 2:
            out.append(("TransformerEngine's FusedAdam holds the optimizer state", "--precision-aware-optimizer"))
        if self.optimizer == "sgd":
            out.append(("SGD: fp32 master weights and one momentum, no second moment", "--optimizer sgd"))
        return out


def _layer_ranges(layers: list[int]) -> str:
    """0-based layer indices as ranges: [0, 1, 2, 59] -> "0-2, 59"."""
    runs: list[list[int]] = []
    for i in layers:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


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
    tokens_per_step: int = Field(description="G*b*s: the tokens of one micro-batch of one data-parallel rank (its "
                                 "TP x CP devices share them; a step runs M micro-batches on each of DP ranks: "
                                 "cluster_tokens_per_step); one step's only on a plan of one micro-batch")
    devices: int = 1
    cluster_tokens_per_step: int = Field(0, description="DP*M*G*b*s: tokens per optimizer step over all devices")
    tokens_per_expert: float = Field(description="T_e = (EP*ETP/(TP*CP))*G*b*s*k/E per expert replica under uniform "
                                     "routing (G*b*s for dense)")
    fits: bool
    binding_constraint: str = Field(description="what stops a larger G*b: memory, max_global_batch, global_batch, tiles, ...")
    tile_constraint: str = Field(description="what stops a larger tile b (density: at that G*b; throughput: at that G)")
    explanation: str
    memory_evaluations: int = Field(description="batch shapes whose memory the solver evaluated")
    objective: str = Field("density", description="throughput: the fastest fitting shape; density: the largest G*b")
    alternative: Optional[AlternativePlan] = Field(None, description="the other objective's plan, when it differs")


class FlopsPerStep(BaseModel):
    """All layers, one micro-batch (G·b sequences) of one data-parallel rank, one device's share under tensor and
    context parallelism: a step is plan.micro_batches of these on each data-parallel rank (the name predates
    gradient accumulation; with M = 1 it is the step)."""

    forward: int
    backward: int
    total: int = Field(description="model FLOPs: forward + backward (Korthikanti's 72BLsh^2(...))")
    recompute: int = Field(description="extra forward FLOPs re-run by recomputation / FlashAttention")
    hardware_total: int = Field(description="total + recompute")
    elementwise: int = Field(description="approximate non-matmul work, not in the totals")


class GemmShape(BaseModel):
    """One matmul of a phase on the GPU, per device (model/gpu/gemm.py)."""

    name: str = Field(description="the weight it multiplies (catalogue `gemm` entry); the attention core: Q K^T or P V")
    m: float = Field(description="rows of the output: tokens (per expert for a grouped GEMM, x EP x routing imbalance); "
                     "the attention core: the rank's queries s/CP")
    n: float = Field(description="columns of the output (Q K^T: the keys, s or the window; P V: the value head)")
    k: float = Field(description="the contracted dimension (Q K^T: the query/key head; P V: the keys)")
    groups: float = Field(description="GEMMs sharing the SMs' waves: for a grouped expert GEMM the local experts TransformerEngine runs at once (one per CUDA stream, at most 4), else 1")
    launches: float = Field(description="launches per forward pass (a grouped expert GEMM: rounds of `groups` experts)")
    efficiency: float = Field(description="forward: achieved share of the datasheet peak (compute_efficiency x tile and "
                              "wave quantisation, or the memory floor)")
    backward_efficiency: float = Field(description="the data- and weight-gradient GEMMs together")
    binding: str = Field(description="compute, waves (quantisation costs > 5%) or memory (the HBM floor); the "
                         "attention core: compute, memory (FlashAttention's IO count binds) or measured (the kernel's "
                         "benchmarked wall-clock rate, btacalc/data/attention_kernels.toml)")
    batch: float = Field(1.0, description="matrices of this shape each launch multiplies: the attention core's "
                         "sequences x query heads per device (b·a/TP), 1 for a linear")
    causal_fraction: float = Field(1.0, description="share of the m x n blocks the kernel runs: a causal "
                                   "FlashAttention kernel skips the blocks above the diagonal (nb(nb+1)/2 of nb² "
                                   "blocks of 128); 1 for a linear, a sliding window's band and eager attention")
    kernel: str = Field("gemm", description="how it is timed: gemm (the GEMM shape model), fused_attention (the "
                        "attention core as one FlashAttention kernel at the run's attention kernel rate: efficiency "
                        "is the kernel's FLOPs over its time, the same for every core matmul) or eager_attention "
                        "(the phase's roofline at the large-GEMM rate)")


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
    time_s: float = Field(0.0, description="modelled time of this phase for one micro-batch (plan.micro_batches "
                          "of them make a step; one layer for layer phases)")
    precision: str = Field("bf16", description="the dtype the phase's GEMMs run in (--precision for the linear "
                           "layers, 16-bit for the rest)")
    cast_time_s: float = Field(0.0, description="low precision: the phase's quantise/cast kernels on time_s's "
                               "basis (one layer, one micro-batch; the weights' once-per-step cast as 1/M), "
                               "included in time_s but for that weights' share, which the step charges once "
                               "(throughput.phase_share weight_casts)")
    gemms: list[GemmShape] = Field(default_factory=list, description="GPU: the phase's matmuls on the critical stage")


class LayerKindRows(BaseModel):
    name: str = Field(description="dense / moe, -sliding / -full, mtp; -bf16: the first/last layers kept out of the "
                      "low-precision recipe (inputs.bf16_layers)")
    count: int = Field(description="layers of this kind")
    phases: list[PhaseRow] = Field(description="one layer of this kind, at the plan's G and b, one micro-batch "
                                   "(as flops_per_step)")


class ErrorSummary(BaseModel):
    """n errors (predicted / measured - 1) summarised: mean |error|, max |error|, signed mean."""

    n: int
    mean_abs_error: Optional[float]
    max_abs_error: Optional[float]
    mean_error: Optional[float] = Field(None, description="signed: positive = btacalc too fast")


def summarize_errors(errors: list[float]) -> ErrorSummary:
    """The summary of `errors` (None where there are none); validate's software-year groups and every
    cross-validation group (planning/crossval.py) are summarised by it."""
    if not errors:
        return ErrorSummary(n=0, mean_abs_error=None, max_abs_error=None)
    return ErrorSummary(n=len(errors), mean_abs_error=statistics.fmean(abs(e) for e in errors),
                        max_abs_error=max(abs(e) for e in errors), mean_error=statistics.fmean(errors))


EXPECTED_ERROR_SOURCE = ("btacalc validate --cross-validate: each shipped measured run predicted with the calibration "
                         "factors fitted without its model family where its device family keeps as many fit runs as "
                         "factors without it, else with the shipped factors (held_out false; README, 'How accurate is "
                         "btacalc?')")


class ExpectedError(BaseModel):
    """The held-out errors of the measured runs most like a plan (planning/expected_error.py)."""

    basis: str = Field(description="the group of measured runs, in words")
    runs: int
    median_abs_error: float = Field(description="the typical miss: half the runs are within it")
    mean_abs_error: float
    max_abs_error: float
    mean_error: float = Field(description="signed: positive = btacalc too fast on these runs")
    narrower: str = Field("", description="the narrower groups passed over, each with its number of runs (fewer "
                          "than min_runs)")
    min_runs: int = Field(description="the fewest runs a group must hold to be reported")
    not_held_out: int = Field(0, description="of `runs`, those predicted with the shipped factors: without their "
                              "model family too few fit runs are left to fit the factors on (crossval 'shipped "
                              "factors (nothing left to fit on)')")
    source: str = EXPECTED_ERROR_SOURCE


class Throughput(BaseModel):
    step_time_s: float
    tokens_per_s: float = Field(description="all devices")
    tokens_per_s_per_kw: float = Field(0.0, description="tokens/s over the system power of the devices (profile system_power_w, else power_w)")
    mfu: float = Field(description="model FLOPs / (step time x devices x the profile's 16-bit peak "
                       "chip.peak_flops_per_s), under FP8/FP4 recipes too")
    relative_to_dense: Optional[float] = Field(description="tokens/s over the dense model (same active params) at its best plan")
    tokens_per_s_g1: Optional[float] = Field(description="tokens/s at G = 1 (the objective's best untiled batch: "
                                             "under throughput the fastest, under density the largest)")
    relative_to_dense_g1: Optional[float]
    step_time_s_g1: Optional[float]
    tile_batch_g1: Optional[int]
    dense_tokens_per_s: Optional[float]
    dense_global_batch: Optional[int] = Field(description="the dense reference's G·b per micro-batch per rank (named "
                                              "like plan.global_batch, which predates gradient accumulation)")
    dense_micro_batches: Optional[int] = Field(None, description="the dense reference's M: with the plan's global "
                                               "batch fixed, DP x M x dense_global_batch is that same global batch (plan; a sweep's "
                                               "points leave it null)")
    tiling_overhead_s: float = Field(description="the per-tile overhead of the step (G x layers, a GPU stage's, x "
                                     "micro-batches x the profile's per-tile cost, calibration.tile_overhead_s; a "
                                     "wafer with a [mesh] derives it from the mesh), a part of step_time_s that "
                                     "phase_share leaves out. 0 on the shipped GPU profiles: a GPU issues each tile's "
                                     "kernels and module calls from the host, in the `launch` term")
    stream_bound_share: float = Field(description="share of the step during which weight streaming is the bottleneck")
    overlap_streaming: Optional[bool] = Field(description="the weight stream overlapped with compute (--no-overlap "
                                              "off); null where no weights stream (GPU plans, a resident wafer plan)")
    compute_efficiency: float
    phase_share: dict[str, float] = Field(description="share of step time per phase (each layer phase, each exposed "
                                          "collective, the bubble, the synchronisation and the optimizer); with "
                                          "tiling_overhead_s / step_time_s the shares add up to 1")
    dominant_phase: str = ""
    communication_s: dict[str, float] = Field(default_factory=dict, description="multi-GPU: each collective's "
                                              "time per step before overlap")
    collectives: list[dict[str, Any]] = Field(default_factory=list, description="multi-GPU: each collective of "
                                              "the critical stage per step, one object each: name, ranks, "
                                              "algorithm, link (nvlink or network), calls (per step), message_bytes "
                                              "(bus bytes of one call: what each rank sends, (n-1)/n of the "
                                              "gathered or reduced tensor for a ring, the tokens leaving the rank "
                                              "for the all-to-all), efficiency (achieved bus bandwidth over the "
                                              "line rate at that size), latency_s (per call), time_s (per step); "
                                              "protocol and steps: NCCL's protocol and latency steps for ring / "
                                              "tree collectives; collective: the operation (all_reduce, "
                                              "reduce_scatter, all_gather, all_gather+reduce_scatter, send_recv, "
                                              "all_to_all); buffer_bytes: the tensor one call reduces, gathers, "
                                              "sends or exchanges (NCCL's nBytes); bus_factor: message_bytes over "
                                              "buffer_bytes (all-reduce 2(n-1)/n, reduce-scatter and all-gather "
                                              "(n-1)/n, send 1, all-to-all (n-1)/n); message_calls: the calls that "
                                              "move message_bytes each (bytes per step = message_bytes x "
                                              "message_calls): all of them but under the alltoall dispatcher, whose "
                                              "other expert exchanges move the routing probabilities, a latency "
                                              "each; the expert all-to-all also gives nvlink_bytes and "
                                              "network_bytes, the bytes of one token call as timed inside the NVLink "
                                              "domain (with DeepEP's forwarding hop) and across it: its time is the "
                                              "slower of the two links, so across nodes network_bytes, not "
                                              "message_bytes, over the network rate gives it")
    critical_stage: int = Field(0, description="GPU: the pipeline stage that sets the pace")
    routing_sensitivity: Optional[float] = Field(None, description="MoE with EP > 1: tokens/s at 1.25x the routing "
                                                 "imbalance over tokens/s as planned")
    expected_error: Optional[ExpectedError] = Field(None, description="the leave-one-model-family-out errors of "
                                                    "the measured runs most like this plan (planning/expected_error.py)")


class ScalingRow(BaseModel):
    systems: int
    per_system_batch: int = Field(description="sequences per system per optimizer step")
    micro_batches: int
    tokens_per_s: float = Field(description="all systems")
    tokens_per_s_per_system: float
    efficiency: float = Field(description="tokens/s over systems x tokens/s of one system")
    stream_bound_share: float
    step_boundary_share: float = Field(description="share of the step spent at the step boundary (gradients out, "
                                       "MemoryX optimizer step, SwarmX latency), after overlap")
    limited_by: str


class WaferInfo(BaseModel):
    """A wafer plan as Cerebras runs it: the systems, the batch split, SwarmX/MemoryX and the mesh-derived costs."""

    systems: int = Field(description="D: CS systems in strict data parallel (Model Zoo num_csx)")
    global_batch: int = Field(description="N = D*M*G*b: sequences per optimizer step over all systems (batch_size)")
    per_system_batch: int = Field(description="N / D")
    micro_batches: int = Field(description="M: micro-batches per system per step; the weight stream runs M times")
    micro_batch_size: int = Field(description="n = G*b: sequences per micro-batch (micro_batch_size)")
    batch_rule: str = Field(description="the divisibility rule applied")
    tokens_per_s: Optional[float] = None
    tokens_per_s_per_system: Optional[float] = None
    stream_bandwidth_bytes_per_s: float = Field(description="per system: min(system I/O, MemoryX bandwidth)")
    stream_limited_by: str = Field(description="system_io or memoryx")
    swarmx_levels: int = Field(description="ceil(log_F D) levels of the SwarmX tree")
    swarmx_latency_s: float = Field(description="lambda(D): MemoryX to a system through the tree")
    memoryx_capacity_bytes: int
    memoryx_state_bytes: int = Field(description="weights, gradients and optimizer state held in MemoryX")
    memoryx_fits: bool
    offloaded_activation_bytes: int = Field(0, description="stored activations (checkpoints, then recomputed ones) "
                                            "of one micro-batch held off the wafer on the activation servers "
                                            "(Cerebras R2.0+ dynamic memory offload, btacalc's estimate: "
                                            "model/wafer/offload.py): the checkpoints out in forward and back in "
                                            "backward, the recomputed activations (offloaded_recompute_bytes of "
                                            "them) out and back within their layer's backward; "
                                            "memory_bytes.stored_activations and recompute_buffer are what stays "
                                            "in SRAM")
    offloaded_recompute_bytes: int = Field(0, description="the part of offloaded_activation_bytes that is one "
                                           "layer's recomputed activations, which exist only during its backward")
    gradient_out_s: Optional[float] = Field(None, description="per step, before overlap with the last backward pass")
    optimizer_update_s: Optional[float] = Field(None, description="MemoryX's optimizer step, before overlap")
    step_boundary_s: Optional[float] = Field(None, description="what the step boundary adds after overlap")
    tile_overhead_s: Optional[float] = Field(None, description="per attention tile per step, all layers "
                                             "(mesh-derived when the profile has a [mesh])")
    mesh_dispatch_s: Optional[float] = Field(None, description="on-wafer token dispatch + combine per step")
    scaling: list[ScalingRow] = Field(default_factory=list, description="the same plan on 1, 2, 4, ... D systems")
    linear_until: Optional[int] = Field(None, description="the most systems with efficiency >= 0.95 at every "
                                        "count up to it")
    scaling_note: str = ""


class SensitivityRow(BaseModel):
    parameter: str = Field(description="'section.field' of the hardware profile")
    value: float
    kind: str
    tokens_per_s_minus: Optional[float]
    tokens_per_s_plus: Optional[float]
    elasticity_minus: Optional[float] = Field(description="(relative change of tokens/s) / (relative change of the "
                                              "parameter) for the step down")
    elasticity_plus: Optional[float]
    shape_minus: str = Field(description="G x b x M at the step down")
    shape_plus: str


class IgnoredFlag(BaseModel):
    flag: str
    reason: str


class ImportedInfo(BaseModel):
    """A plan read from a Megatron-LM launch or a Megatron-Bridge recipe: what was left out and why."""

    source: str
    ignored: list[IgnoredFlag] = Field(default_factory=list, description="flags or keys btacalc does not model")
    notes: list[str] = Field(default_factory=list)
    environment: dict[str, str] = Field(default_factory=dict, description="variables the launch exports")


def imported_info(run: Any) -> ImportedInfo:
    """The report section of a btacalc.config.megatron_run.ImportedRun. The file's name passes the sanitiser
    (errors.clean_text) as every name the report holds does (hostile37: a name with a newline put a line of its own
    into the `--emit megatron` launch, a shell command, and one with a byte that is not UTF-8 stopped `--json` with an
    internal error)."""
    return ImportedInfo(source=clean_text(run.source), ignored=[IgnoredFlag(flag=f, reason=r) for f, r in run.ignored],
                        notes=list(run.notes), environment=dict(run.env))


class WorkspaceRow(BaseModel):
    """One kind of library workspace the run holds in PyTorch's allocator (config/workspaces.py WORKSPACES)."""

    name: str
    library: str
    count: int
    bytes_each: int
    bytes: int
    when: str = Field(description="the run's condition that allocates it")
    source: str = Field(description="the code that allocates it, at a named commit and lines")


class DeviceMemory(BaseModel):
    """GPU: the worst stage's memory as PyTorch and the driver count it (config/hardware.py `Reserves`)."""

    allocated_bytes: int = Field(description="btacalc's tensors + library workspaces: compare with "
                                 "torch.cuda.max_memory_allocated")
    reserved_bytes: int = Field(description="allocated x (1 + allocator fragmentation): compare with "
                                "torch.cuda.max_memory_reserved")
    device_bytes: int = Field(description="reserved + CUDA context + communicator buffers: what nvidia-smi shows "
                              "used; the plan fits when it is at most capacity_bytes")
    capacity_bytes: int = Field(description="the capacity the driver reports")
    cuda_context_bytes: int
    communicator_buffers_bytes: int
    library_workspace_bytes: int = Field(description="the sum of library_workspaces")
    library_workspaces: list[WorkspaceRow] = Field(default_factory=list, description="the libraries' workspaces "
                                                   "this run holds, each from the code that allocates it")
    allocator_fragmentation_fraction: float
    capacity_kind: Literal["published", "derived", "estimate", "calibrated"] = Field(
        "published", description="the profile's kind of memory.offchip_memory_bytes, its Number.kind (`estimate` on "
        "a GPU: no driver total of this GPU is published, so the capacity is estimated from a sibling GPU's)")


class PlanReport(BaseModel):
    schema_version: int = SCHEMA_VERSION
    model: ModelInfo
    hardware: HardwareInfo
    inputs: Inputs
    parallelism: ParallelInfo
    plan: PlanInfo
    memory_bytes: dict[str, int] = Field(description="total, capacity, usable_capacity and one key per component")
    offchip_bytes: dict[str, int] = Field(description="weight streaming: state held off-wafer (MemoryX)")
    device_memory: Optional[DeviceMemory] = Field(None, description="GPU: allocated and reserved bytes and the "
                                                  "named reserves of the worst stage")
    state_sharding: list[StateRow] = Field(default_factory=list, description="resident: weights, gradients and "
                                           "optimizer state per device (the worst pipeline stage), by part and divisor")
    memory_stages: list[StageRow] = Field(default_factory=list, description="GPU: memory per device of every "
                                          "pipeline stage; memory_bytes holds the worst one's")
    flops_per_step: FlopsPerStep
    phases: list[PhaseRow] = Field(description="one decoder layer, at the plan's G and b, one micro-batch (as "
                                   "flops_per_step; with several "
                                   "layer kinds: one layer of the most common kind)")
    layer_kinds: list[LayerKindRows] = Field(default_factory=list, description="models with more than one layer "
                                             "kind (dense/MoE, sliding/full attention, MTP): each kind's layers; "
                                             "absent for a model of one kind")
    outside_layers: list[PhaseRow] = Field(description="embedding, final norm, LM head, loss")
    throughput: Optional[Throughput] = None
    suggestions: list[str] = Field(default_factory=list, description="what would fit, when the plan does not")
    wafer: Optional[WaferInfo] = Field(None, description="wafer plans only: systems, batch split, SwarmX/MemoryX, "
                                       "mesh-derived costs, scaling over systems")
    sensitivity: Optional[list[SensitivityRow]] = Field(None, description="with --sensitivity: tokens/s when each "
                                                        "hardware number moves by -x% and +x%")
    imported: Optional[ImportedInfo] = Field(None, description="with --from-megatron / --from-bridge: the flags "
                                             "btacalc does not model, and notes")

    @model_serializer(mode="wrap")
    def _omit_absent_sections(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Sections that apply to some plans only appear when present: `wafer` (wafer plans),
        `sensitivity` (with --sensitivity), `layer_kinds` (models with more than one layer kind)."""
        data = handler(self)
        for key in ("wafer", "sensitivity", "layer_kinds", "imported"):
            if not data.get(key):
                data.pop(key, None)
        return data
