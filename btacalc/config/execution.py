"""The execution: how a model is run on a device (run options), how the job spreads over devices
(layout) and what the batch-shape solver may choose (batch limits), with every default resolved
once, in `resolve_execution`, and the reason for each default kept beside it.

Nothing downstream re-derives a default: the planning, sweep, compare and validation code build an
`ExecutionRequest` (the user's choices, None meaning "default") and call `resolve_execution`.
The one default that needs the memory model to decide, `memory_model = "auto"`, is resolved in
`btacalc.model.memory.resolve_memory_model`.

The layout speaks Megatron-LM's language (Shoeybi et al. 2019; Narayanan et al. 2021; Korthikanti et
al. 2022): tensor (TP, with sequence parallelism), pipeline (PP, with VP interleaved virtual stages),
context (CP), expert (EP) and expert-tensor (ETP) parallelism; data parallelism is what is left,
DP = devices / (TP·PP·CP) for the dense part and EDP = devices / (ETP·EP·PP) for the experts (Megatron
"MoE parallel folding": megatron/core/parallel_state.py); ZeRO 0-3 or FSDP shard the training state
over the DP·CP ranks (Megatron's dp_cp group). A micro-batch is G·b sequences per data-parallel rank;
M micro-batches make an optimizer step of N = DP·M·G·b sequences (gradient accumulation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Optional

from ..divisors import divisors
from ..errors import BtacalcError
from ..memo import Memo, plain_key
from .precision import DEFAULT_PRECISION, NON_TN_FP8_CC_TEXT, Recipe, check_fp8_attention, check_precision, recipe, recipes
from .attention_kernels import DEFAULT_ATTENTION_KERNEL, attention_kernel
from .cuda_graphs import check_scopes, scopes
from ..vocabulary import OP_POLICY, SELECTIVE_MODULES, TORCH_LOSSES, parse_recompute
from .pipeline import Placement, StageSplit, group_rule, parse_layout, place
from .te_release import default_te_version, te_behaviour, te_releases
from .tp_overlap import UbOverlap
from .model import MAX_COUNT

if TYPE_CHECKING:
    from .hardware import HardwareProfile
    from .model import ModelSpec

# Default sequence length: Qwen3's pre-training stages S1 and S2 used 4,096 tokens
# (Qwen3 technical report, arXiv 2505.09388, §3.2). The BTA paper does not state its length.
DEFAULT_SEQ_LEN = 4096
DEFAULT_SEQ_LEN_SOURCE = "Qwen3 technical report (arXiv 2505.09388) §3.2: stages S1-S2 at 4,096 tokens"

MEGATRON = "Megatron-LM @ d98e8a64 (2026-08-22)"

# Tokens per optimizer step when a GPU plan fixes none of the batch's sizes: 4M (2^22), Llama 3 405B's
# initial batch (Dubey et al. 2024, arXiv 2407.21783 §3.4.1: 4M tokens of 4,096); GPT-3 175B used 3.2M
# (Brown et al. 2020, Table 2.1). One default for plan, sweep, compare and --search (planning/search.py).
DEFAULT_TOKENS_PER_STEP = 1 << 22

# What the batch-shape solver maximises (btacalc.model.solver): predicted tokens/s, or the largest
# G*b that fits (tokens per expert; the rule of the BTA design card).
OBJECTIVES = ("throughput", "density")

REASONS = {
    "objective": "throughput: the fitting batch shape with the highest predicted tokens/s (ties: more tokens per "
                 "expert, then fewer tiles)",
    "loss": "fused linear cross-entropy: logits materialised one sequence at a time",
    "loss_gpu": (f"vocab_parallel: Megatron-Core's cross-entropy ({MEGATRON} megatron/core/tensor_parallel/"
                 "cross_entropy.py L25, L181): the output layer's bf16 logits of a micro-batch, their fp32 copy "
                 "turned in place into the softmax kept for backward (Megatron-LM's default, without "
                 "--cross-entropy-loss-fusion; with it, native_fused or te_fused); no chunked linear cross-entropy"),
    "memory_model": ("auto: the whole training state resident on the device when it fits with one sequence, "
                     "else weights streamed (wafer)"),
    "zero_stage": "1: optimizer state sharded over data-parallel ranks (Megatron-LM distributed optimizer)",
    "zero_stage_aware": ("1: Megatron-LM's distributed optimizer, which the precision-aware optimizer needs "
                         f"({MEGATRON} megatron/core/optimizer/__init__.py L1054-1060); on one GPU it shards nothing"),
    "gradient_bytes_gpu": (f"4: fp32 main gradients, Megatron-LM's default with --bf16 ({MEGATRON} "
                           "megatron/training/arguments.py forces accumulate_allreduce_grads_in_fp32 unless "
                           "--grad-reduce-in-bf16)"),
    "gradient_bytes_wse": "2: gradients leave the wafer in the weights' 16-bit format",
    "sequence_parallel": ("on with tensor parallelism: Korthikanti et al. 2022 §4.2.2 (activations split t ways at "
                          "the same communication volume); Megatron-Core needs it for MoE layers under TP "
                          "(moe_layer.py) though its CLI default is off"),
    "expert_tensor_parallel": (f"= TP: Megatron-Core's default ({MEGATRON} model_parallel_config.py: "
                               "expert_tensor_parallel_size None becomes the TP size)"),
    "expert_tensor_parallel_biased": (f"1: the model's linears have biases (GPT-OSS), which Megatron-Core's MoE layers "
                                      f"take only at ETP 1 ({MEGATRON} transformer_config.py L2612-2615), not its "
                                      "default ETP = TP"),
    "overlap_grad_reduce": (f"off: Megatron-Core's default ({MEGATRON} distributed_data_parallel_config.py "
                            "overlap_grad_reduce = False; Megatron-Bridge recipes turn it on)"),
    "overlap_param_gather": (f"off: Megatron-Core's default ({MEGATRON} distributed_data_parallel_config.py "
                             "overlap_param_gather = False)"),
    "tp_comm_overlap": f"off: Megatron-Core's default ({MEGATRON} model_parallel_config.py tp_comm_overlap = False)",
    "overlap_p2p": (f"on with interleaving only: Megatron-LM's default ({MEGATRON} arguments.py: "
                    "overlap_p2p_comm is switched off without a virtual pipeline)"),
    "global_batch_gpu": ("{tokens} tokens per optimizer step (4M: Llama 3 405B's initial batch, arXiv 2407.21783 "
                         "§3.4.1; GPT-3 used 3.2M), rounded up to whole sequences per data-parallel rank; "
                         "--tokens-per-step changes it, --global-batch fixes it"),
    "micro_batch_pipeline": ("1 sequence per micro-batch under pipeline parallelism (M = N / DP), as Megatron's "
                             "published pipeline recipes; give --micro-batch or --grad-accum to change it"),
    "precision": ("bf16: Megatron-LM's --bf16 mixed precision; low-precision recipes (--precision fp8, fp8-current, "
                  "fp8-blockwise, mxfp8, nvfp4) are TransformerEngine's (btacalc/data/precision.toml)"),
    "routing_weights_gpu": (f"experts: Megatron-Core multiplies each routed copy by its routing weight inside the "
                            f"experts' activation ({MEGATRON} megatron/core/transformer/moe/experts.py L943-1023: "
                            "weighted_bias_swiglu_impl keeps its input and the weights) and combines the expert "
                            "outputs without them (moe/token_dispatcher.py L891-899, L1459-1466: unpermute without "
                            "probs keeps only its index map), so no expert output waits for the weights' gradient"),
    "routing_weights_wse": ("combine: the routing weights scale the expert outputs in the weighted sum after the "
                            "experts, which keeps the outputs for the weights' gradient (formulas/moe.toml combine)"),
    "multi_token_prediction": ("off: the main model only, as Hugging Face transformers trains DeepSeek-V3 (it does not "
                               "build the MTP module) and as the published parameter counts are given"),
}


@dataclass(frozen=True)
class RunOptions:
    """How one device runs the model: every field resolved (see `resolve_execution`)."""

    seq_len: int = DEFAULT_SEQ_LEN
    # none | selective | full | a comma-separated list of Megatron recompute modules (vocabulary)
    recompute: str = "full"
    attention: Literal["eager", "flash"] = "eager"
    causal: bool = False
    # the fused attention kernel (btacalc/data/attention_kernels.toml): its FLOP rate where it is not the GEMM rate
    attention_kernel: str = DEFAULT_ATTENTION_KERNEL
    loss: Literal["stored", "fused", "vocab_parallel", "native_fused", "te_fused", "torch_fp32", "torch_fp32_held"] = "fused"
    accounting: Literal["ideal", "pytorch"] = "ideal"
    optimizer: Literal["adam", "sgd"] = "adam"
    bytes_per_element: int = 2
    # auto: `btacalc.model.memory.resolve_memory_model` keeps the whole training state resident when it
    # fits with one sequence, else streams weights (wafer) or stays resident (GPU).
    memory_model: Literal["weight_streaming", "resident", "auto"] = "auto"
    overlap_streaming: bool = True  # weight streaming overlaps compute (max) or not (sum)
    gradient_bytes: int = 2  # bytes per gradient element: the 16-bit parameter dtype, or 4 (fp32 main grads)
    routing_imbalance: float = 1.0  # busiest expert's routed tokens over the mean (1 = balanced)
    # Megatron --moe-expert-capacity-factor: each expert takes at most CF x its balanced share of a rank's routed
    # copies, the rest dropped (None: dropless, Megatron's default); --moe-pad-expert-input-to-capacity pads every
    # expert to exactly that (drop-and-pad): `expert_load`
    capacity_factor: Optional[float] = None
    pad_to_capacity: bool = False
    # train the model's multi-token-prediction modules too (DeepSeek-V3 MTP; a model without any ignores it)
    multi_token_prediction: bool = False
    # the training precision (btacalc/data/precision.toml): the linear layers' GEMM dtype and its casts
    precision: str = DEFAULT_PRECISION
    # Megatron --fp8-param-gather / --fp4-param-gather: parameters kept and all-gathered in the low precision
    low_precision_param_gather: bool = False
    # Megatron --fp8-dot-product-attention (TE fp8_dpa): the fused attention core in FP8 (precision.toml
    # fp8_attention_kernel; its rate in attention_kernels.toml, its casts in model/gpu/costs.py)
    fp8_attention: bool = False
    # NVFP4: TransformerEngine writes an activation's rowwise and random-Hadamard-transformed columnwise copies in one
    # kernel (TE >= 2.14, the pinned TE); False: one kernel per copy (TE 2.8-2.13; precision.toml rht_cast_fusion_since_te)
    rht_cast_fusion: bool = True
    # the TransformerEngine release the run uses (btacalc/data/te_releases.toml): which per-tensor FP8 transposes it
    # still writes where FP8 GEMMs take non-TN layouts (precision.non_tn_fp8_gemms); default: the pinned TE's
    te_version: str = field(default_factory=default_te_version)
    # Megatron's gradient accumulation fusion (its default with TransformerEngine): each weight-gradient GEMM accumulates
    # into the fp32 main gradient; False (--no-gradient-accumulation-fusion): the GEMM writes a 16-bit gradient that a
    # separate kernel adds to the main gradient, once per parameter and micro-batch (gpu/fixed.py wgrad_accumulate_s)
    gradient_accumulation_fusion: bool = True
    # TransformerEngine's deterministic attention backward (Megatron --deterministic-mode sets
    # NVTE_ALLOW_NONDETERMINISTIC_ALGO=0): the fused core's backward at the kernel's published deterministic/
    # non-deterministic time ratio on this architecture (attention_kernels.toml deterministic_backward), where one is
    # published (else untimed, listed in the run's notes)
    deterministic_attention: bool = False
    # NCCL_ALGO=Ring (Megatron --deterministic-mode sets it: megatron/training/determinism.py, as the recipe's
    # deterministic_mode cites it): NCCL's tuning model weighs rings alone, no tree all-reduce (gpu/nccl.py)
    nccl_ring_only: bool = False
    # PyTorch's non-reentrant activation checkpoint with early stop (torch >= 2.1, its default): a full re-run ends
    # once every saved tensor is rebuilt, skipping the layer's GEMMs after its last save (catalogue/selection.py
    # skipped_by_early_stop); False: the whole layer re-runs (Megatron's checkpoint, torch <= 2.0)
    checkpoint_early_stop: bool = False
    # eager PyTorch's element-wise kernels as llm-foundry's MPT block launches them (no TransformerEngine): the
    # catalogue's `eager_kernels` terms (bias-gradient reductions, the dQKV concatenation, LayerNorm's second
    # backward pass); False: Megatron/TransformerEngine's fused kernels (docs/runs.md "mpt4")
    eager_kernels: bool = False
    # Megatron --transformer-impl: TransformerEngine's layers (True, Megatron's default) or Megatron-Core's own (False,
    # `local`: torch matmuls and apex's weight-gradient kernels, no TransformerEngine GEMM, so none of TE's cuBLAS
    # workspaces; config/workspaces.py). The launch reader also plans `local` with unfused attention (_dec_attention)
    transformer_engine: bool = True
    # Megatron --moe-grouped-gemm: an MoE model's experts as TransformerEngine grouped GEMMs (True: btacalc's plans emit
    # the flag) or, without it, Megatron-Core's SequentialMLP (one linear pair per local expert), which holds none of
    # TE's grouped-GEMM workspaces (config/workspaces.py); the time is the same (model/gpu/fixed.py)
    expert_grouped_gemm: bool = True
    # Megatron --cpu-offloading --cpu-offloading-num-layers N: the activations of the first N decoder layers
    # wait for their backward in host memory (ACTIVATION_OFFLOAD; 0: none)
    cpu_offload_layers: int = 0
    # bytes of each of Adam's two moments: 4 (fp32, Megatron's default) or 2 (--use-precision-aware-optimizer
    # --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)
    moment_bytes: int = 4
    # Megatron --use-precision-aware-optimizer (TransformerEngine's FusedAdam holds the master weights and moments;
    # implied by bf16 moments, which need it): with bf16 parameters and no FP8 or delayed-scaling FP8 the master
    # weights are int16 remainders (`param_remainders`)
    precision_aware_optimizer: bool = False
    # the fp8_recipe Megatron-Core's OptimizerConfig holds where the precision has no FP8 recipe of its own (bf16, fp16,
    # nvfp4): Megatron-LM copies every argument it has a field for, --fp8-recipe too, whose default is delayed
    # (Megatron-LM @ d98e8a64 megatron/training/training.py L2609-2616; transformer_config.py L594-596); Megatron-Bridge
    # copies its MixedPrecisionConfig's, whose default is tensorwise (Megatron-Bridge @ 067f987d
    # src/megatron/bridge/training/mixed_precision.py L50-52, setup L113-157; config.py L2012-2016 before the
    # optimizer's finalize, L1395); None: OptimizerConfig's own default (a Bridge file with no mixed precision).
    # It decides `param_remainders` (review28)
    optimizer_fp8_recipe: Optional[str] = "delayed"
    # where an MoE layer applies its routing weights (vocabulary "routing_weights"; REASONS)
    routing_weights: Literal["combine", "experts"] = "combine"
    # Megatron --first-last-layers-bf16 --num-layers-at-start-in-bf16 N --num-layers-at-end-in-bf16 M: the first N and
    # last M decoder layers run outside the low-precision recipe (`bf16_ends`; check_bf16_layers)
    bf16_layers_at_start: int = 0
    bf16_layers_at_end: int = 0
    # Megatron --recompute-granularity full --recompute-method block --recompute-num-layers N: in each pipeline stage's
    # model chunk the first N decoder layers re-run their forward in the backward, the others keep their activations
    # (Problem.stored_layers; check_recompute_layers); 0: every layer under `recompute`
    recompute_layers: int = 0

    @property
    def saved_input_bytes(self) -> float:
        """Bytes per element of a linear layer's saved input (the catalogue's beta_s): the quantised copy
        TransformerEngine saves for wgrad under a low-precision recipe (TE linear.py saves the quantised
        input, not the 16-bit one), else the 16-bit element."""
        r = self.recipe
        return r.bytes_per_element if r.low else self.bytes_per_element

    @property
    def bf16_ends(self) -> tuple[int, int]:
        """(first, last) decoder layers the low-precision recipe leaves in BF16 (ModelSpec.bf16_layer_positions)."""
        return self.bf16_layers_at_start, self.bf16_layers_at_end

    @property
    def optimizer_recipe(self) -> Optional[str]:
        """The fp8_recipe Megatron-Core's OptimizerConfig holds: the precision's own FP8 recipe (its --fp8-recipe,
        precision.toml `megatron`), else `optimizer_fp8_recipe`."""
        own = next((flag.split()[1] for flag in self.recipe.megatron if flag.startswith("--fp8-recipe ")), None)
        return own if own is not None else self.optimizer_fp8_recipe

    @property
    def precision_aware(self) -> bool:
        """Whether the run asks for Megatron-Core's precision-aware optimizer: --use-precision-aware-optimizer, or bf16
        Adam moments, which only it keeps (optimizer_config.py L466-479 @ d98e8a64)."""
        return self.precision_aware_optimizer or self.moment_bytes == 2

    @property
    def param_remainders(self) -> bool:
        """Whether TransformerEngine's FusedAdam keeps each fp32 master weight as its low 16 bits (int16) beside the
        bf16 parameter: Megatron-Core passes master_weights and store_param_remainders (OptimizerConfig default True)
        to FusedAdam when use_precision_aware_optimizer_no_fp8_or_ds_fp8 holds (Megatron-LM @ d98e8a64
        megatron/core/optimizer/optimizer_config.py L192-195, L407-414: precision-aware, and the optimizer config's
        fp8_recipe None or delayed: `optimizer_recipe`; optimizer/__init__.py L574-588) and the parameters are bf16
        (distrib_optimizer.py L1007-1009; TransformerEngine @ d0067d0 pytorch/optimizers/fused_adam.py L213-214, L626:
        fp32 master weights of bf16 parameters only). review28: the FP8 recipe is the optimizer config's, not the
        precision's: a Megatron-LM NVFP4 launch keeps --fp8-recipe's default delayed (remainders), a Megatron-Bridge
        bf16 or NVFP4 run its mixed precision's tensorwise (fp32 main weights, distrib_optimizer.py L422-447). Not
        with NVFP4 parameters (--fp4-param-gather): the distributed optimizer hands FusedAdam no shard of them
        (distrib_optimizer.py L404-409, L485-494). Megatron-FSDP keeps its own main weights, and without the
        distributed optimizer Megatron-Core refuses the precision-aware optimizer (`check_precision_aware_sharded`;
        Problem.features)."""
        bf16_params = self.precision != "fp16" and not (self.precision == "nvfp4" and self.low_precision_param_gather)
        return (self.precision_aware and self.optimizer == "adam" and bf16_params
                and self.optimizer_recipe in (None, "delayed"))

    @property
    def recipe(self) -> Recipe:
        """The resolved precision's recipe (TransformerEngine class, Megatron flags, cast costs)."""
        return recipe(self.precision)

    def features(self) -> dict[str, Any]:
        """The run options the formula catalogue's `when` clauses test."""
        return {
            "attention": self.attention,
            "causal": self.causal,
            "loss": self.loss,
            "accounting": self.accounting,
            "optimizer": self.optimizer,
            "main_grads": "fp32" if self.gradient_bytes == 4 else "param",
            "moments": "bf16" if self.moment_bytes == 2 else "fp32",
            "routing_weights": self.routing_weights,
            "pad_to_capacity": self.pad_to_capacity,
            "fp8_attention": self.fp8_attention,
            "checkpoint_early_stop": self.checkpoint_early_stop,
            "eager_kernels": self.eager_kernels,
            "attention_kernel": self.attention_kernel,
        }


@dataclass(frozen=True)
class Overlaps:
    """Which communication hides behind compute; Megatron-Core's names, defaults stated in REASONS."""

    all_to_all: bool = False  # --overlap-moe-expert-parallel-comm (EP dispatch/combine behind another micro-batch)
    grad_reduce: bool = False  # --overlap-grad-reduce (bucketed DP reduction behind the backward pass)
    param_gather: bool = False  # --overlap-param-gather (distributed optimizer / FSDP all-gathers behind compute)
    tp_comm: bool = False  # --tp-comm-overlap (TP all-gather/reduce-scatter behind the GEMMs)
    p2p: bool = False  # overlap_p2p_comm (pipeline sends behind compute; Megatron: with interleaving)
    # --ep-overlap-early-attn-memory-release (ModelParallelConfig.ep_overlap_early_attn_memory_release, off by
    # default): under the all-to-all overlap the backward layer's attention node runs before the forward layer's
    # MLP (model_chunk_schedule_plan.py L280-292 @ d98e8a64): its memory (model/gpu/memory.py _merged_layer) and the
    # all-to-alls it leaves without compute beside them (model/gpu/merged_pair.py)
    early_attn_release: bool = False
    # --delay-wgrad-compute (TransformerConfig.delay_wgrad_compute, off by default; Megatron-Bridge's performance
    # harness turns it on with the EP overlap): the merged schedule's weight gradients run after the data gradients
    # (model_chunk_schedule_plan.py L272-298): time only (model/gpu/merged_pair.py)
    delay_wgrad: bool = False


@dataclass(frozen=True)
class Layout:
    """How a training job spreads over devices. The defaults are one device.

    DP = devices / (TP·PP·CP) ranks hold the dense part; EDP = devices / (ETP·EP·PP) the experts.
    """

    devices: int = 1
    expert_parallel: int = 1
    zero_stage: int = 0
    devices_per_node: int = 1  # devices in one scale-up (NVLink) domain
    micro_batches: int = 1  # gradient accumulation: M micro-batches per optimizer step
    tensor_parallel: int = 1
    sequence_parallel: bool = False
    pipeline_parallel: int = 1
    virtual_pipeline: int = 1  # interleaved model chunks per pipeline stage (1: plain 1F1B)
    # Megatron's --microbatch-group-size-per-virtual-pipeline-stage (ModelParallelConfig.microbatch_group_size_per_vp_
    # stage): the interleaved schedule runs each model chunk for N micro-batches in a row; None: Megatron's default
    # N = PP (model_parallel_config.py L567-568). Read by the schedule (model/gpu/schedule.py) and the in-flight
    # count (model/gpu/stages.py); ignored without interleaving, as Megatron ignores it
    microbatch_group: Optional[int] = None
    # M came from the global batch (N / (DP x micro-batch)), not from {micro_batches}: a refusal of M says so rather
    # than name the option (review35)
    micro_batches_derived: bool = False
    context_parallel: int = 1
    expert_tensor_parallel: int = 1
    fsdp: bool = False  # fully sharded data parallel (ZeRO-3 state; gathers per micro-batch)
    # whose FSDP: "megatron" (Megatron-FSDP's double-buffered units), "torch" (PyTorch FSDP1 FULL_SHARD as
    # Composer / llm-foundry configure it: btacalc.model.state.TorchFsdp) or "fsdp2" (PyTorch's fully_shard as
    # torchtitan configures it: the same units and dtypes, plus its copies, gpu/fixed.py fsdp2_copy_s); None: none
    # named (FSDP is then Megatron-FSDP, DEFAULT_FSDP_IMPL). A named one needs `fsdp` (_validate_fsdp_impl)
    fsdp_impl: Optional[str] = None
    overlap: Overlaps = Overlaps()
    # DeepEP dispatch (Megatron --moe-token-dispatcher-type flex --moe-enable-deepep): a token crosses to
    # another NVLink domain once per domain, not once per expert there; off: the alltoall dispatcher
    deepep: bool = False
    # Megatron's allgather dispatcher (--moe-token-dispatcher-type allgather, Megatron-Core's default,
    # transformer_config.py L891 @ d98e8a64): every token all-gathered over the ETP x EP group, each rank permuting
    # out its local experts' copies, the outputs reduce-scattered back (token_dispatcher.py L232-373;
    # model/gpu/collectives.py allgather_dispatch_time); off: the alltoall dispatcher (or DeepEP with `deepep`)
    allgather_dispatcher: bool = False
    # with `deepep`: the flex dispatcher's hybridep backend (--moe-flex-dispatcher-backend hybridep, NVIDIA's Hybrid-EP
    # in DeepEP's hybrid-ep branch) rather than DeepEP's kernels: the same node-deduplicated dispatch, its cross-node
    # bytes at Hybrid-EP's own measured rate where the profile has one (collectives.all_to_all_link)
    hybridep: bool = False
    # SMs DeepEP / HybridEP's kernels hold (Megatron moe_flex_dispatcher_num_sms); None: Megatron-Core's
    # default (model/gpu/sm_share.py FLEX_DISPATCHER_SMS)
    dispatcher_sms: Optional[int] = None
    # Megatron's nccl_ub (--use-nccl-ub, DistributedDataParallelConfig.nccl_ub): the DP / FSDP buffers registered
    # with NCCL and NCCL_CTA_POLICY=1, as Megatron-Bridge's perf runs set them; with NVLink SHARP on (`nvls`,
    # NCCL_NVLS_ENABLE) NCCL's registered all-gather / reduce-scatter in one NVLink domain take few SMs
    # (model/gpu/sm_share.py dp_collective_ctas); nvls off: the ring channels, as without nccl_ub
    nccl_ub: bool = False
    nvls: bool = False
    # Megatron's --ddp-bucket-size (DistributedDataParallelConfig.bucket_size): parameters per gradient bucket, one
    # overlapped reduce-scatter / all-gather each; None: Megatron's default, max(4e7, 1e6 x DP x CP)
    # (model/gpu/collectives.py gradient_buckets)
    ddp_bucket_params: Optional[int] = None
    # Megatron's --ddp-num-buckets (DistributedDataParallelConfig.num_buckets): the rank's parameters split into this
    # many buckets, bucket_size = parameters // num_buckets (Megatron-LM @ d98e8a64 megatron/training/training.py
    # L2179-2194 resolve_ddp_bucket_size, applied at L2497); None: not given. Not with ddp_bucket_params
    # (distributed_data_parallel_config.py L275-277)
    ddp_num_buckets: Optional[int] = None
    # True: Apex DistributedFusedAdam's buckets, as NeMo 1.0 runs them (the MLPerf GPT-3 recipes), one bucket size on
    # every pipeline stage and model chunk; False: Megatron-Core DDP's, which buckets only pipeline rank 0's first
    # model chunk (Megatron-LM @ d98e8a64 training.py L2504-2514; model/gpu/collectives.py StageBuckets)
    ddp_buckets_every_stage: bool = False
    # Megatron's per-layer CUDA-graph scopes (--cuda-graph-impl transformer_engine --cuda-graph-scope): what they
    # capture issues from one graph launch (config/cuda_graphs.py); empty: no CUDA graphs
    cuda_graph_scope: tuple[str, ...] = ()
    # the run's own TransformerEngine userbuffers table (NeMo's ub_tp_comm_overlap_cfg, config/tp_overlap.py
    # ub_table: TE's defaults with the run's entries applied); None: TE's defaults (btacalc/data/tp_overlap.toml)
    tp_overlap_cfg: Optional[tuple[UbOverlap, ...]] = None
    stage_split: StageSplit = StageSplit()  # the user's pipeline split options (config/pipeline.py)

    @property
    def userbuffers(self) -> bool:
        """Whether the layout runs TransformerEngine's userbuffers TP overlap: the TP-comm overlap on, TP > 1 and
        sequence parallelism (the overlap runs on the sequence-parallel all-gathers and reduce-scatters). The one
        reading of that condition (model/gpu/tp_overlap.py times it, model/gpu/precision.py's gathered transposes
        follow the paths it takes, the plan report's `tp_overlap_table` names the table only where it holds)."""
        return bool(self.overlap.tp_comm and self.sequence_parallel and self.every_tp_above_one and not self.torch_fsdp)

    @property
    def async_tp(self) -> bool:
        """Whether the layout runs torchtitan's async TP (`enable_async_tensor_parallel`: PyTorch's micro-pipelined
        all-gather / reduce-scatter matmuls over SymmetricMemory): the TP-comm overlap on a PyTorch FSDP2 x TP plan
        (model/gpu/tp_overlap.py times it; TransformerEngine's userbuffers, `userbuffers`, are not involved)."""
        return bool(self.overlap.tp_comm and self.sequence_parallel and self.dtensor_tp)

    @property
    def dtensor_tp(self) -> bool:
        """Whether TP runs as DTensor's TP plan (torchtitan's ColwiseParallel / RowwiseParallel / SequenceParallel):
        PyTorch's FSDP beside TP > 1. The one reading of that condition: the catalogue's feature `dtensor_tp`
        (Problem.features), a search's evaluation key (planning/search.py `_evaluate`), async TP, the precision
        check (`check_dtensor_precision`) and the MoE refusal (`_validate_torch_tp`)."""
        return bool(self.torch_fsdp and self.every_tp_above_one)

    @property
    def every_tp_above_one(self) -> bool:
        """Whether every TP size is above 1 (a layout search's stacked layouts hold TP as an array, grouped so that
        this is one value for all: the search keys its evaluation by it, planning/search.py `_evaluate`; a mixed
        stack, which the search does not build where it matters, gives False)."""
        tp = self.tensor_parallel
        sizes = tp.tolist() if hasattr(tp, "tolist") else tp  # (a numpy array or scalar's Python value)
        return all(t > 1 for t in (sizes if isinstance(sizes, list) else [sizes]))

    @property
    def overlap_all_to_all(self) -> bool:
        return self.overlap.all_to_all

    @property
    def model_parallel(self) -> int:
        """TP·PP·CP: the devices one data-parallel replica of the dense part spans."""
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel

    @property
    def data_parallel(self) -> int:
        return self.devices // self.model_parallel

    @property
    def sharding_ranks(self) -> int:
        """Ranks the distributed optimizer / FSDP shard the dense state over: DP·CP (Megatron's dp_cp group)."""
        return self.data_parallel * self.context_parallel

    @property
    def expert_data_parallel(self) -> int:
        return self.devices // (self.expert_model_parallel * self.pipeline_parallel)

    @property
    def expert_model_parallel(self) -> Any:
        """ETP x EP: the ranks an expert's weights are split over, Megatron-Core's tp_ep group (consecutive in its
        expert rank order tp-ep-dp-pp), over which the allgather dispatcher gathers."""
        return self.expert_tensor_parallel * self.expert_parallel

    def placement(self, num_layers: int, mtp_layers: int = 0) -> Placement:
        """Which layers each stage and virtual chunk holds (Megatron's rules: config/pipeline.py)."""
        return place(num_layers, self.pipeline_parallel, self.virtual_pipeline, self.stage_split, mtp_layers)

    @property
    def parallel(self) -> bool:
        """Model parallelism beyond data and expert parallelism (TP, PP or CP)."""
        return self.model_parallel > 1

    def validate(self, model: "ModelSpec", profile: "HardwareProfile", seq_len: int, mtp_layers: int = 0) -> None:
        """Every rule a layout must satisfy, each a one-line error naming it (`mtp_layers`: the MTP layers the
        run trains, which a pipeline layout string must place)."""
        sizes: tuple[tuple[str, int], ...] = (("devices", self.devices), ("expert_parallel", self.expert_parallel),
                 ("micro_batches", self.micro_batches), ("devices_per_node", self.devices_per_node),
                 ("tensor_parallel", self.tensor_parallel), ("pipeline_parallel", self.pipeline_parallel),
                 ("virtual_pipeline", self.virtual_pipeline), ("context_parallel", self.context_parallel),
                 ("expert_tensor_parallel", self.expert_tensor_parallel))
        if self.ddp_bucket_params is not None:
            sizes += (("ddp_bucket_params", self.ddp_bucket_params),)
        if self.microbatch_group is not None:
            sizes += (("microbatch_group", self.microbatch_group),)
        if self.ddp_num_buckets is not None:
            sizes += (("ddp_num_buckets", self.ddp_num_buckets),)
            if self.ddp_bucket_params is not None:
                raise BtacalcError("{ddp_num_buckets} sets the bucket size from the rank's parameters: it needs no "
                                   "{ddp_bucket_params} (Megatron-Core distributed_data_parallel_config.py L275-277)")
        for name, v in sizes:
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise BtacalcError(f"{{{name}}} must be a positive integer, got {v!r}")
            limit, text = _SIZE_LIMITS.get(name, (MAX_DEVICES, LIMIT_TEXT[MAX_DEVICES]))
            if v > limit:
                raise BtacalcError(f"{{{name}}} {v} is beyond {text}")
        if self.data_parallel * self.micro_batches > MAX_SEQUENCES:
            raise BtacalcError(f"{{micro_batches}} {self.micro_batches} on {self.data_parallel} data-parallel ranks is "
                               f"more than {LIMIT_TEXT[MAX_SEQUENCES]} per step")
        if self.zero_stage not in (0, 1, 2, 3):
            raise BtacalcError(f"{{zero_stage}} must be 0, 1, 2 or 3, got {self.zero_stage!r}")
        if profile.family == "wse" and (self.expert_parallel > 1 or self.zero_stage or self.parallel
                                        or self.expert_tensor_parallel > 1 or self.fsdp):
            raise BtacalcError("{expert_parallel}/{zero_stage}/{tensor_parallel}/{pipeline_parallel}/{context_parallel}/"
                               "{expert_tensor_parallel}/{fsdp} apply to GPU profiles: wafer-scale systems train in "
                               "strict data parallel (MemoryX holds the state, SwarmX broadcasts and reduces)")
        if self.devices > 1 and not profile.multi_device:
            links = "SwarmX numbers (system.swarmx_*)" if profile.family == "wse" else "scale-up/scale-out bandwidth"
            raise BtacalcError(f"{profile.name} has no {links} in its profile: {{devices}} needs them")
        self._validate_torch_tp(model)
        self._validate_grids()
        self._validate_dispatcher(profile)
        self._validate_nccl_ub(profile)
        self._validate_ub_table(profile, model)
        check_scopes(self.cuda_graph_scope)
        if self.cuda_graph_scope and profile.family != "gpu":
            raise BtacalcError(f"{{cuda_graph_scope}} is Megatron's CUDA graphs on GPUs: {profile.name} is not a GPU")
        self._validate_model(model, seq_len)
        self._validate_pipeline(model.num_layers, mtp_layers)

    def _validate_torch_tp(self, model: "ModelSpec") -> None:
        """review24: PyTorch FSDP2 beside TP is planned as torchtitan's dense 2-D Llama runs (`_validate_fsdp_impl`);
        an MoE model's experts under DTensor TP (torchtitan's own expert and expert-tensor parallelism) are not
        modelled, and the message says so before the grid's implicit ETP = TP would name an option not given."""
        if self.fsdp2 and self.dtensor_tp and model.is_moe:
            raise BtacalcError(f"{{fsdp_impl}} {self.fsdp_impl} with {{tensor_parallel}} {self.tensor_parallel}: btacalc "
                               f"plans PyTorch FSDP2 beside TP for dense models (torchtitan's 2-D Llama runs); "
                               f"{model.name}'s experts under torchtitan's expert or expert-tensor parallelism are not "
                               "modelled: plan it without {tensor_parallel} (1-D FSDP2) or under Megatron")

    def _validate_grids(self) -> None:
        tp, pp, cp = self.tensor_parallel, self.pipeline_parallel, self.context_parallel
        if self.devices % self.model_parallel:
            fix = _divisor_fix([("tensor_parallel", tp), ("pipeline_parallel", pp), ("context_parallel", cp)],
                               self.devices)
            raise BtacalcError(f"{{tensor_parallel}} {tp} x {{pipeline_parallel}} {pp} x {{context_parallel}} {cp} = "
                               f"{self.model_parallel} does not divide {{devices}} {self.devices} (data parallel = "
                               f"devices / (TP·PP·CP)): {fix}")
        expert_grid = self.expert_tensor_parallel * self.expert_parallel * pp
        if self.devices % expert_grid:
            fix = _divisor_fix([("expert_tensor_parallel", self.expert_tensor_parallel),
                                ("expert_parallel", self.expert_parallel), ("pipeline_parallel", pp)], self.devices)
            if self.expert_tensor_parallel > 1 and self.devices % (self.expert_parallel * pp) == 0:
                # `--tp 2 --ep 16` on 16 GPUs: the user never typed ETP, which took TP's value
                fix = ("{expert_tensor_parallel} 1 would divide (ETP is TP unless given, Megatron-Core's default; "
                       "the MoE README recommends 1 for fine-grained experts)")
            raise BtacalcError(f"{{expert_tensor_parallel}} {self.expert_tensor_parallel} x {{expert_parallel}} "
                               f"{self.expert_parallel} x {{pipeline_parallel}} {pp} = {expert_grid} does not divide "
                               f"{{devices}} {self.devices} (expert data parallel = devices / (ETP·EP·PP)): {fix}")
        if self.fsdp and self.zero_stage != 3:
            raise BtacalcError(f"{{fsdp}} shards weights, gradients and optimizer state: it is ZeRO-3, not "
                               f"{{zero_stage}} {self.zero_stage}")
        self._validate_fsdp_impl()

    def _validate_fsdp_impl(self) -> None:
        """The rule for `fsdp_impl`, given as a request option or set on a layout: one of FSDP_IMPLS, and only
        with `fsdp` (naming whose FSDP shards a model that FSDP does not shard would be ignored)."""
        if self.fsdp_impl is None:
            return
        if self.fsdp_impl not in FSDP_IMPLS:
            raise BtacalcError(f"{{fsdp_impl}} must be one of {', '.join(FSDP_IMPLS)}, got {self.fsdp_impl!r}")
        if not self.fsdp:
            raise BtacalcError(f"{{fsdp_impl}} {self.fsdp_impl} names whose FSDP shards the model: it needs {{fsdp}}")
        if self.fsdp_impl not in TORCH_FSDP_IMPLS:
            return
        two_d = self.fsdp_impl == "fsdp2" and self.tensor_parallel > 1  # torchtitan's 2-D FSDP2 x TP (below)
        others = self.model_parallel // (self.tensor_parallel if two_d else 1)  # PP·CP (·TP under FSDP1)
        if others > 1 or self.expert_parallel > 1 or self.expert_tensor_parallel > 1:
            raise BtacalcError(f"{{fsdp_impl}} {self.fsdp_impl}: btacalc models PyTorch's FSDP as data parallel over "
                               "every rank (llm-foundry's FSDP1, torchtitan's FSDP2 1-D runs), or FSDP2 over the "
                               "data-parallel ranks beside {tensor_parallel} (torchtitan's 2-D runs): no "
                               "{pipeline_parallel}, {context_parallel}, {expert_parallel} or "
                               "{expert_tensor_parallel}, and FSDP1 "
                               "({fsdp_impl} torch) no {tensor_parallel}")
        if self.tp_overlap_cfg is not None:
            raise BtacalcError(f"{{tp_overlap_cfg}} is TransformerEngine's userbuffers table: a PyTorch FSDP run "
                               f"({{fsdp_impl}} {self.fsdp_impl}) has none (torchtitan's async TP, "
                               "{tp_comm_overlap} with {tensor_parallel}, pipelines its own matmuls)")
        if two_d and not self.sequence_parallel:
            raise BtacalcError(f"{{fsdp_impl}} fsdp2 with {{tensor_parallel}} {self.tensor_parallel} is torchtitan's "
                               "2-D run, whose TP plan shards the norms along the sequence (parallelize_llama.py "
                               "apply_tp: SequenceParallel): it needs {sequence_parallel}")

    def sequence_multiple(self) -> int:
        """What every sequence length must be a multiple of (`_validate_model`): 2·CP load-balanced causal chunks
        under context parallelism, and TP dividing each CP rank's tokens under sequence parallelism."""
        cp = self.context_parallel
        return math.lcm(2 * cp if cp > 1 else 1, cp * self.tensor_parallel if self.sequence_parallel else 1)

    @property
    def torch_fsdp(self) -> bool:
        """PyTorch's FSDP (FSDP1 or FSDP2) shards the model: TorchFsdp's buffers and per-block collectives."""
        return self.fsdp and self.fsdp_impl in TORCH_FSDP_IMPLS

    @property
    def fsdp2(self) -> bool:
        """PyTorch's FSDP2 (fully_shard, torchtitan) shards the model: its copies in and out of the flat buffers
        (model/gpu/fixed.py, timing.py), torchtitan's recomputation (`check_torchtitan_recompute`)."""
        return self.fsdp and self.fsdp_impl == "fsdp2"

    def _validate_nccl_ub(self, profile: "HardwareProfile") -> None:
        if self.nvls and not self.nccl_ub:
            raise BtacalcError("{nvls} chooses NCCL's path for nccl_ub's registered buffers: it needs {nccl_ub}")
        if self.nccl_ub and profile.family != "gpu":
            raise BtacalcError(f"{{nccl_ub}} registers NCCL buffers on GPUs: {profile.name} is not a GPU")

    def _validate_ub_table(self, profile: "HardwareProfile", model: "ModelSpec") -> None:
        """A run's userbuffers table needs the TP-comm overlap it configures; no GEMM's num_sm exceeds the device's
        SMs, and where they are taken from the GEMM (set_sm_margin launches it on SMs - num_sm; a bulk collective
        shares them) they leave it some. A pipeline splits its GEMM's m = hidden_size output rows (proj / fc2 fprop:
        TE's weight is [hidden, in / TP], transa) into num_splits chunks of m / num_splits rows (TE @ bee4649c
        comm_gemm_overlap.cpp L418); more splits than rows are empty chunks, which TE refuses ("Attempted to get empty
        tensor chunk", TE @ d0067d0d comm_gemm_overlap.cpp L256). The chunk is the integer m / num_splits and the
        loop runs num_splits chunks (TE @ d0067d0d L634, L670), so a num_splits that does not divide m leaves the last
        m mod num_splits rows uncomputed: a wrong result, refused as well."""
        if self.tp_overlap_cfg is None:
            return
        if not self.overlap.tp_comm:
            raise BtacalcError("{tp_overlap_cfg} is TransformerEngine's userbuffers table: it needs the TP-comm overlap")
        sms = int(profile.chip.cores.value)
        for o in self.tp_overlap_cfg:
            if o.num_sm > sms:
                raise BtacalcError(f"{{tp_overlap_cfg}} {o.name}: num_sm {o.num_sm} is more SMs than {profile.name} "
                                   f"has ({sms})")
            if o.num_sm >= sms and (o.set_sm_margin or o.method == "bulk"):
                raise BtacalcError(f"{{tp_overlap_cfg}} {o.name}: num_sm {o.num_sm} must leave compute SMs: 0 to "
                                   f"{sms - 1} on {profile.name}")
            if o.method == "pipeline" and o.num_splits > model.hidden_size:
                raise BtacalcError(f"{{tp_overlap_cfg}} {o.name}: num_splits {o.num_splits} is more chunks than the "
                                   f"GEMM's {model.hidden_size} output rows (hidden_size): TransformerEngine refuses "
                                   "an empty chunk")
            if o.method == "pipeline" and model.hidden_size % o.num_splits:
                raise BtacalcError(f"{{tp_overlap_cfg}} {o.name}: num_splits {o.num_splits} does not divide the "
                                   f"GEMM's {model.hidden_size} output rows (hidden_size): TransformerEngine computes "
                                   f"{o.num_splits} chunks of {model.hidden_size // o.num_splits} rows and drops the "
                                   f"last {model.hidden_size % o.num_splits}")

    @property
    def dispatcher(self) -> str:
        """Megatron's --moe-token-dispatcher-type the layout runs: flex (DeepEP / HybridEP), allgather or alltoall."""
        return "flex" if self.deepep else "allgather" if self.allgather_dispatcher else "alltoall"

    def _validate_dispatcher(self, profile: "HardwareProfile") -> None:
        if self.allgather_dispatcher and self.deepep:
            raise BtacalcError("{allgather_dispatcher} and {deepep} are two MoE token dispatchers (Megatron's "
                               "--moe-token-dispatcher-type allgather or flex): choose one")
        if self.allgather_dispatcher and self.overlap.all_to_all:
            raise BtacalcError("{overlap_all_to_all} hides the alltoall or flex dispatcher's exchange: Megatron-Core "
                               "refuses it with {allgather_dispatcher} (transformer_config.py L3016-3019)")
        if self.hybridep and not self.deepep:
            raise BtacalcError("{hybridep} is the flex dispatcher's hybridep backend: it needs {deepep}")
        if self.dispatcher_sms is None:
            return
        if not self.deepep:
            raise BtacalcError("{dispatcher_sms} sets DeepEP / HybridEP's SMs: it needs {deepep}")
        sms = int(profile.chip.cores.value)
        if not 1 <= self.dispatcher_sms < sms:
            raise BtacalcError(f"{{dispatcher_sms}} {self.dispatcher_sms} must leave compute SMs: 1 to {sms - 1} "
                               f"on {profile.name}")

    def _validate_model(self, model: "ModelSpec", seq_len: int) -> None:
        tp, etp, ep = self.tensor_parallel, self.expert_tensor_parallel, self.expert_parallel
        if model.num_heads % tp or model.num_kv_heads % tp:
            heads = math.gcd(model.num_heads, model.num_kv_heads)
            raise BtacalcError(f"{{tensor_parallel}} {tp} does not divide the {model.num_heads} query and "
                               f"{model.num_kv_heads} key/value heads (each rank holds whole heads): "
                               f"{_divisor_fix([('tensor_parallel', tp)], heads)}")
        if not model.is_moe and model.ffn_size % tp:
            raise BtacalcError(f"{{tensor_parallel}} {tp} does not divide the MLP width {model.ffn_size}: "
                               f"{_divisor_fix([('tensor_parallel', tp)], model.ffn_size)}")
        if model.is_moe:
            if tp > 1 and not self.sequence_parallel:
                raise BtacalcError("{tensor_parallel} > 1 in MoE layers needs {sequence_parallel} (Megatron-Core "
                                   "moe_layer.py refuses MoE with tensor parallelism but without it)")
            if model.num_experts % ep:
                raise BtacalcError(f"{{expert_parallel}} {ep} does not divide the {model.num_experts} experts: "
                                   f"{_divisor_fix([('expert_parallel', ep)], model.num_experts)}")
            if model.ffn_size % etp:
                raise BtacalcError(f"{{expert_tensor_parallel}} {etp} does not divide the expert width {model.ffn_size}: "
                                   f"{_divisor_fix([('expert_tensor_parallel', etp)], model.ffn_size)}")
            if etp > 1 and model.biased_moe():
                # freshuser19: planned and emitted with a MEGATRON WOULD REFUSE THIS line, which the launch reader
                # then refused (megatron_rules moe-bias-etp); the search and the default already keep ETP 1
                raise BtacalcError(f"{{expert_tensor_parallel}} {etp}: model {model.name!r} has biases in its MoE layers, "
                                   f"which Megatron-Core takes only at ETP 1 ({MEGATRON} transformer_config.py "
                                   "L2612-2615): give {expert_tensor_parallel} 1")
        elif ep > 1 or etp > 1:
            # review19: the pair was named where one was given (a Bridge file read "...expert_tensor_parallel_size")
            given = [f"{{{n}}} {v}" for n, v in (("expert_parallel", ep), ("expert_tensor_parallel", etp)) if v > 1]
            raise BtacalcError(f"{' and '.join(given)} {'needs' if len(given) == 1 else 'need'} an MoE model (the model "
                               "is dense)")
        self._validate_scope_layers(model)
        if self.sequence_parallel and tp == 1:
            raise BtacalcError("{sequence_parallel} needs {tensor_parallel} > 1 (it splits the sequence over the "
                               "tensor-parallel ranks)")
        cp = self.context_parallel
        if cp > 1 and seq_len % (2 * cp):
            raise BtacalcError(f"{{context_parallel}} {cp}: the sequence {seq_len} must be a multiple of 2·CP = "
                               f"{2 * cp} (load-balanced causal chunks; Megatron-LM arguments.py)")
        if self.sequence_parallel and seq_len % self.sequence_multiple():  # 2·CP divides it: TP must divide s / CP
            # review35: the embedding's scatter to the sequence-parallel region asserts it at the first forward
            # (Megatron-LM language_model_embedding.py L145, tensor_parallel/mappings.py L71-74)
            each = f"sequence of {seq_len}" if cp == 1 else f"{seq_len // cp} tokens per context-parallel rank"
            # review of review35: an MoE model at TP > 1 needs sequence parallelism, so only the sequence can change
            off = "" if model.is_moe or self.torch_fsdp else ", or {no_sequence_parallel}"
            # (FSDP2 x TP needs sequence parallelism, `_validate_fsdp_impl`; torchtitan checks the tokens of a
            # micro-batch against TP, trainer.py L295-307 @ b5bcd76c, where btacalc splits each sequence evenly)
            why = (f"{MEGATRON} tensor_parallel/mappings.py L71-74 asserts it at the first forward"
                   if not self.torch_fsdp else "btacalc splits each sequence evenly over DTensor's sequence shards")
            raise BtacalcError(f"sequence parallelism splits the {each} over {{tensor_parallel}} {tp}, which must "
                               f"divide it ({why}): give {{seq_len}} "
                               f"{_multiples_text(seq_len, self.sequence_multiple())}{off}")
        if cp > 1 and model.attention_sinks:
            # review19: TE @ d0067d0 dot_product_attention/utils.py L1148-1155 runs a learnable softmax under context
            # parallelism only with the all-to-all exchange (FlashAttention takes none, unfused no CP): the ring
            # btacalc times (Megatron's default --cp-comm-type p2p) has no attention backend
            raise BtacalcError(f"{{context_parallel}} {cp}: TransformerEngine runs attention sinks (a learnable "
                               "softmax) under context parallelism only with the all-to-all exchange (cp_comm_type "
                               "a2a, TE @ d0067d0 dot_product_attention/utils.py L1148-1155), not the ring btacalc "
                               "times")

    def _validate_scope_layers(self, model: "ModelSpec") -> None:
        """A CUDA-graph scope for a kind of layer the model has none of (cuda_graph_scopes.toml `layer`) captures
        nothing: refused, as an option with no effect."""
        kinds = {"any"} | ({"moe"} if model.is_moe else set()) | ({"dense"} if not model.is_moe or
                                                                   model.dense_positions() else set())
        for name in self.cuda_graph_scope:
            layer = scopes()[name].layer
            if layer not in kinds:
                raise BtacalcError(f"{{cuda_graph_scope}} {name} captures {layer} layers: model {model.name!r} has none")

    def _validate_pipeline(self, num_layers: int, mtp_layers: int) -> None:
        pp, vp = self.pipeline_parallel, self.virtual_pipeline
        if vp > 1 and pp == 1:
            raise BtacalcError("{virtual_pipeline} > 1 needs {pipeline_parallel} > 1 (Megatron-Core parallel_state.py)")
        if self.stage_split.given and pp == 1:
            raise BtacalcError("{first_stage_layers}/{last_stage_layers}/{pipeline_layout}/the account-for flags split "
                               "the layers over pipeline stages: they need {pipeline_parallel} > 1")
        self.placement(num_layers, mtp_layers)
        if vp > 1:  # Megatron-LM @ d98e8a64 schedules.py L1160-1180 (the group size N, default PP)
            why = group_rule(pp, self.micro_batches, self.microbatch_group or pp)
            if why:
                given = "" if self.microbatch_group else " ({microbatch_group} not given: N = PP)"
                # review35: a derived M was named as the user's {micro_batches}
                what = (f"M = {self.micro_batches} micro-batches (the global batch over DP x the micro-batch)"
                        if self.micro_batches_derived else f"{{micro_batches}} {self.micro_batches}")
                raise BtacalcError(f"{what}: the interleaved schedule refuses it: {why}{given}; Megatron-Core "
                                   "schedules.py L1160-1180")


def _multiples_text(n: int, unit: int) -> str:
    """The multiples of `unit` nearest `n`, to give instead of it: "96 or 112" (the one above below `unit`)."""
    below, above = n // unit * unit, (n // unit + 1) * unit
    return f"{below} or {above}" if below else f"the smallest: {above}"


# a list of the sizes that divide is shown up to this many values (2048 devices: 12), else "a divisor of N"
MAX_LISTED_DIVISORS = 16


def _divisor_fix(factors: list[tuple[str, int]], total: int) -> str:
    """What to give when the product of `factors` ((flag placeholder, value) pairs) does not divide `total`:
    with one factor moved from 1, the values of it that divide (a necessary condition, not a recommendation:
    the model's heads or experts may rule some out, and say so); else that the product must divide."""
    moved = [name for name, v in factors if v != 1]
    if len(moved) != 1:
        return f"give sizes whose product divides {total}"
    options = divisors(total)
    if len(options) > MAX_LISTED_DIVISORS:
        return f"{{{moved[0]}}} must divide {total}"
    if len(options) == 1:  # review25: one device read "--tp must divide 1: or 1"
        return f"{{{moved[0]}}} must be 1 on {total} device"
    return f"{{{moved[0]}}} must divide {total}: " + ", ".join(map(str, options[:-1])) + f" or {options[-1]}"


def pipeline_reason(placement: Placement, num_layers: int) -> str:
    """Why btacalc picked this split when the user gave none (shown with the plan's defaults)."""
    chunks = placement.pp * placement.vp
    why = f"{chunks} model chunks do not divide the {num_layers} layers (Megatron's even split)"
    if placement.method == "embedding_loss":
        return (f"--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split: {why}, but "
                f"{num_layers} + 2 do")
    sp = placement.split
    if placement.method == "first_last":
        flags = " ".join(f for f in (f"--decoder-first-pipeline-num-layers {sp.first_stage_layers}"
                                     if sp.first_stage_layers is not None else "",
                                     f"--decoder-last-pipeline-num-layers {sp.last_stage_layers}"
                                     if sp.last_stage_layers is not None else "") if f)
        return f"{flags}: {why}; the smallest even share for the middle stages, the last stage lighter"
    return (f"--pipeline-model-parallel-layout {sp.pipeline_layout}: {why}, nor (by VP) the first/last form; the "
            "layers spread as evenly as whole layers allow, the embedding and the loss one layer each")


# No training batch comes near 2^62 sequences (about 4.6e18); the bound keeps every batch size within
# the vectorised solver's 64-bit integers (btacalc.model.solver) and its factorisation
# (btacalc.divisors) well under a second. The same 2^62 as a model's counts (config.model.MAX_COUNT).
MAX_SEQUENCES = MAX_COUNT
# No training cluster comes near 2^20 devices (the largest reported hold about 10^5 GPUs); the bound
# keeps products of parallel sizes and batches within 64-bit integers.
MAX_DEVICES = 1 << 20
# Layout.fsdp_impl: Megatron-FSDP; PyTorch FSDP1 as llm-foundry runs it; PyTorch FSDP2 (fully_shard) as torchtitan runs it
FSDP_IMPLS = ("megatron", "torch", "fsdp2")
TORCH_FSDP_IMPLS = ("torch", "fsdp2")  # PyTorch's FSDP: per-block units over every rank (model/state.py TorchFsdp)
DEFAULT_FSDP_IMPL = FSDP_IMPLS[0]  # FSDP with no implementation named: Megatron-FSDP
LIMIT_TEXT = {MAX_SEQUENCES: "2^62 sequences, more than any training batch",
              MAX_DEVICES: "2^20 = 1,048,576 devices, more than any training cluster"}
# A layout size's bound and how it reads where it is not MAX_DEVICES (Layout.validate); a bucket of 2^62
# parameters still fits numpy's int64 and holds any model's parameters in one bucket
_SIZE_LIMITS = {"micro_batches": (MAX_SEQUENCES, LIMIT_TEXT[MAX_SEQUENCES]),
                "ddp_bucket_params": (MAX_SEQUENCES, "2^62 parameters, more than any model's"),
                "ddp_num_buckets": (MAX_SEQUENCES, "2^62 buckets, more than any model's parameters"),
                "microbatch_group": (MAX_SEQUENCES, LIMIT_TEXT[MAX_SEQUENCES])}


# How Cerebras splits a wafer cluster's global batch (model/wafer/batching.py has the sources); checked
# with the other batch rules in BatchLimits.validate and shown in the plan's wafer section.
WAFER_BATCH_RULE = ("Cerebras Model Zoo R_2.0.3-2.2.0: batch_size % num_csx == 0 and (batch_size / num_csx) % "
                    "micro_batch_size == 0 (later releases round up instead)")


@dataclass(frozen=True)
class BatchLimits:
    """User constraints on the batch shape; None means free.

    An optimizer step processes N = DP x M x G x b sequences: DP data-parallel ranks, each running M
    micro-batches (gradient accumulation) of G tiles of b sequences. `global_batch` is N (Megatron's
    and Cerebras' global batch size), `max_global_batch` caps it; G*b is what one rank's router and
    experts see per micro-batch (the BTA paper's B~).

    `micro_batch` is the user's G*b per micro-batch per rank (--micro-batch, Megatron's
    --micro-batch-size); `resolve_execution` folds it into N and M, so the solver never sees it.
    """

    global_batch: Optional[int] = None
    tiles: Optional[int] = None
    tile_batch: Optional[int] = None
    max_global_batch: Optional[int] = None
    max_tile_batch: Optional[int] = None
    micro_batch: Optional[int] = None
    micro_batches: Optional[int] = None  # None: 1, or chosen by the solver when global_batch is fixed

    def validate(self, data_parallel: int = 1, ranks: str = "") -> None:
        """Check the limits against each other for `data_parallel` ranks (`ranks` names them in errors)."""
        for name, v in self.__dict__.items():
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise BtacalcError(f"{{{name}}} must be a positive integer, got {v!r}")
            if v is not None and v > MAX_SEQUENCES:
                raise BtacalcError(f"{{{name}}} {v} is beyond {LIMIT_TEXT[MAX_SEQUENCES]}")
        n = self.global_batch
        if n is not None:
            self._check_divisible(n, data_parallel, ranks or f"the {data_parallel} data-parallel ranks")
            if self.max_global_batch is not None and n > self.max_global_batch:
                raise BtacalcError(f"{{global_batch}} {n} exceeds {{max_global_batch}} {self.max_global_batch}")
        b = self.tile_batch
        if b is not None and self.max_tile_batch is not None and b > self.max_tile_batch:
            raise BtacalcError(f"{{tile_batch}} {b} exceeds {{max_tile_batch}} {self.max_tile_batch}")
        self._check_smallest_batch()

    def _check_smallest_batch(self) -> None:
        """hostile26: fixed tiles, tile batch or micro-batches that by themselves (one data-parallel rank, the free
        factors at 1) make a global batch over --max-global-batch were planned and reported "does not fit" (exit 1),
        where the same contradiction given as --global-batch is bad input. The data-parallel ranks' share of an
        excess stays the plan's verdict (README "A plan that does not fit": a cap below one sequence per rank),
        whether or not a factor of 1 is given (review20)."""
        cap = self.max_global_batch
        if cap is None or self.global_batch is not None:
            return
        fixed = [(name, v) for name, v in (("tiles", self.tiles), ("tile_batch", self.tile_batch),
                                           ("micro_batches", self.micro_batches)) if v is not None]
        smallest = math.prod(v for _, v in fixed)
        if smallest > cap:
            given = " x ".join(f"{{{name}}} {v}" for name, v in fixed)
            verb = "makes" if len(fixed) == 1 else "make"
            raise BtacalcError(f"{given} {verb} a global batch of at least {smallest}, above {{max_global_batch}} "
                               f"{cap}")

    def _check_divisible(self, n: int, data_parallel: int, ranks: str) -> None:
        if n % data_parallel:
            raise BtacalcError(f"{{global_batch}} {n} does not divide over {ranks}: give a multiple of "
                               f"{data_parallel} ({_multiples_text(n, data_parallel)})")
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
        names = {name for name, _ in fixed}
        if names == {"micro_batches", "tiles"} and self.max_tile_batch is not None \
                and per_rank // product > self.max_tile_batch:  # b = N / (DP M G) is then fixed too
            raise BtacalcError(f"{what} in {{micro_batches}} {self.micro_batches} x {{tiles}} {self.tiles} leaves "
                               f"tiles of b = {per_rank // product}, more than {{max_tile_batch}} {self.max_tile_batch}")

    def free(self, keep_global_batch: bool = True) -> "BatchLimits":
        """The same caps with the shape left to the solver (for the dense comparison): a fixed global batch N
        stays fixed, with the micro-batch and M = N / (DP x micro-batch) the solver's (review36: keeping M
        and freeing the micro-batch compared the dense model at other tokens per optimizer step, 2-12x the
        plan's on the README's GPU examples); without one, or with `keep_global_batch` False (the density
        objective's G = 1 reference, as before review36), the same gradient accumulation M."""
        if self.global_batch is not None and keep_global_batch:
            return BatchLimits(global_batch=self.global_batch, max_global_batch=self.max_global_batch)
        return BatchLimits(max_global_batch=self.max_global_batch, micro_batches=self.micro_batches)


@dataclass(frozen=True)
class OverlapRequest:
    """The user's overlap choices; None means Megatron-Core's default (REASONS)."""

    all_to_all: bool = False
    grad_reduce: Optional[bool] = None
    param_gather: Optional[bool] = None
    tp_comm: Optional[bool] = None
    p2p: Optional[bool] = None
    early_attn_release: bool = False
    delay_wgrad: bool = False


@dataclass(frozen=True)
class ExecutionRequest:
    """What the user asked for; None means "use the default" (resolved by `resolve_execution`)."""

    seq_len: Optional[int] = None
    recompute: Optional[str] = None
    attention: Optional[str] = None
    causal: bool = False
    attention_kernel: Optional[str] = None  # None: DEFAULT_ATTENTION_KERNEL (attention_kernels.toml)
    loss: Optional[str] = None
    accounting: str = "ideal"
    memory_model: Optional[str] = None
    overlap_streaming: bool = True
    devices: int = 1
    expert_parallel: Optional[int] = None
    zero_stage: Optional[int] = None
    devices_per_node: Optional[int] = None
    overlap_all_to_all: bool = False
    # gradient accumulation M (None: N / (DP·micro batch) with both given; else chosen by the solver with
    # a global batch (on GPUs without pipeline parallelism), else 1)
    micro_batches: Optional[int] = None
    limits: BatchLimits = field(default_factory=BatchLimits)
    # None: 1 in a plan; free in a layout search (btacalc.planning.search)
    tensor_parallel: Optional[int] = None
    sequence_parallel: Optional[bool] = None
    pipeline_parallel: Optional[int] = None
    virtual_pipeline: Optional[int] = None
    context_parallel: Optional[int] = None
    expert_tensor_parallel: Optional[int] = None
    fsdp: bool = False
    fsdp_impl: Optional[str] = None  # Layout.fsdp_impl (None: none named; checked there)
    deepep: bool = False  # DeepEP node-deduplicated dispatch (Layout.deepep); default the alltoall dispatcher
    allgather_dispatcher: bool = False  # Layout.allgather_dispatcher (Megatron's allgather dispatcher)
    hybridep: bool = False  # Layout.hybridep (the flex dispatcher's hybridep backend, with deepep)
    dispatcher_sms: Optional[int] = None  # Layout.dispatcher_sms
    nccl_ub: bool = False  # Layout.nccl_ub (Megatron --use-nccl-ub with NCCL_CTA_POLICY=1)
    nvls: bool = False  # Layout.nvls (NCCL_NVLS_ENABLE=1 with nccl_ub)
    ddp_bucket_params: Optional[int] = None  # Layout.ddp_bucket_params (Megatron --ddp-bucket-size)
    ddp_num_buckets: Optional[int] = None  # Layout.ddp_num_buckets (Megatron --ddp-num-buckets)
    microbatch_group: Optional[int] = None  # Layout.microbatch_group (Megatron --microbatch-group-size-per-...)
    ddp_buckets_every_stage: bool = False  # Layout.ddp_buckets_every_stage (Apex DistributedFusedAdam's buckets)
    cuda_graph_scope: tuple[str, ...] = ()  # Layout.cuda_graph_scope
    tp_overlap_cfg: Optional[tuple[UbOverlap, ...]] = None  # Layout.tp_overlap_cfg (a run's userbuffers table)
    gradient_bytes: Optional[int] = None
    routing_imbalance: float = 1.0
    capacity_factor: Optional[float] = None  # RunOptions.capacity_factor (Megatron --moe-expert-capacity-factor)
    pad_to_capacity: bool = False  # RunOptions.pad_to_capacity (Megatron --moe-pad-expert-input-to-capacity)
    # where an MoE layer applies its routing weights (RunOptions.routing_weights; None: as the device family does,
    # REASONS); a run's recipe states "combine" for Megatron-Core before 0.12.1
    routing_weights: Optional[Literal["combine", "experts"]] = None
    overlaps: OverlapRequest = field(default_factory=OverlapRequest)
    multi_token_prediction: Optional[bool] = None
    objective: Optional[str] = None
    # GPU plans that fix no batch size: the global batch in tokens (None: DEFAULT_TOKENS_PER_STEP)
    tokens_per_step: Optional[int] = None
    stage_split: StageSplit = field(default_factory=StageSplit)  # first/last stage layers, layout, account-for
    precision: Optional[str] = None  # None: bf16 (REASONS)
    fp8_param_gather: bool = False  # Megatron --fp8-param-gather (--fp4-param-gather under nvfp4)
    fp8_attention: bool = False  # Megatron --fp8-dot-product-attention (RunOptions.fp8_attention)
    rht_cast_fusion: bool = True  # NVFP4's rowwise and RHT columnwise casts in one kernel (RunOptions.rht_cast_fusion)
    te_version: Optional[str] = None  # None: te_releases.toml's default, the pinned TE (RunOptions.te_version)
    gradient_accumulation_fusion: bool = True  # RunOptions.gradient_accumulation_fusion
    deterministic_attention: bool = False  # RunOptions.deterministic_attention (a recipe's deterministic_mode)
    nccl_ring_only: bool = False  # RunOptions.nccl_ring_only (a recipe's deterministic_mode: NCCL_ALGO=Ring)
    checkpoint_early_stop: bool = False  # RunOptions.checkpoint_early_stop (--checkpoint-early-stop)
    eager_kernels: bool = False  # RunOptions.eager_kernels (--eager-kernels)
    transformer_engine: bool = True  # RunOptions.transformer_engine (a launch's --transformer-impl)
    expert_grouped_gemm: bool = True  # RunOptions.expert_grouped_gemm (a launch's --moe-grouped-gemm)
    cpu_offload_layers: int = 0  # Megatron --cpu-offloading-num-layers (RunOptions.cpu_offload_layers)
    bf16_layers_at_start: int = 0  # Megatron --num-layers-at-start-in-bf16 (RunOptions.bf16_layers_at_start)
    bf16_layers_at_end: int = 0  # Megatron --num-layers-at-end-in-bf16 (RunOptions.bf16_layers_at_end)
    recompute_layers: int = 0  # Megatron --recompute-method block --recompute-num-layers (RunOptions.recompute_layers)
    moment_bytes: Optional[int] = None  # None: 4 (fp32 Adam moments); 2: bf16 (RunOptions.moment_bytes)
    precision_aware_optimizer: bool = False  # RunOptions.precision_aware_optimizer (Megatron's flag)
    optimizer_fp8_recipe: Optional[str] = "delayed"  # RunOptions.optimizer_fp8_recipe (Megatron-LM's default)
    optimizer: Optional[str] = None  # None: adam, Megatron-LM's default --optimizer (RunOptions.optimizer)

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
    # overlaps planned otherwise than asked, as Megatron runs the plan (their reasons are in `defaults`): key ->
    # whether the plan runs it (_runnable_overlaps)
    changed_overlaps: tuple[tuple[str, bool], ...] = ()

    @property
    def default_reasons(self) -> dict[str, str]:
        return dict(self.defaults)


def auto_expert_parallel(devices: int, num_experts: int) -> int:
    """Default EP degree: the largest divisor of the experts that divides the devices (gcd)."""
    return math.gcd(devices, num_experts) if num_experts else 1


class _Defaults:
    """Picks request values or defaults, recording the reason for each default taken."""

    def __init__(self) -> None:
        self.reasons: dict[str, str] = {}
        # the overlaps planned otherwise than asked so that Megatron runs the plan: key -> whether the plan runs it
        self.changed_overlaps: dict[str, bool] = {}

    def pick(self, name: str, given: Any, default: Any, reason: str) -> Any:
        if given is not None:
            return given
        self.reasons[name] = reason
        return default


_RESOLVED: Memo[Execution] = Memo()  # by the request's value (and the model and profile objects)
_RESOLVED_OBJECTS: Memo[Execution] = Memo()  # by the three objects: the same request asked again


def resolve_execution(request: ExecutionRequest, model: "ModelSpec", profile: "HardwareProfile") -> Execution:
    """Fill every default of `request` for `model` on `profile`, validate, and record the reasons. A pure
    function of its arguments (frozen), remembered per request of plain values (`btacalc.memo`: a request
    holding numpy numbers is resolved again) and the model and profile objects; errors are not remembered."""
    return _RESOLVED_OBJECTS.get((), (request, model, profile), lambda: _RESOLVED.get(
        plain_key(request), (model, profile), lambda: _resolve(request, model, profile)))


def resolve_run(request: ExecutionRequest, model: "ModelSpec", profile: "HardwareProfile") -> RunOptions:
    """The run options `resolve_execution` resolves for `request` (its defaults: attention, precision, ...), checked
    as it checks them (precision and FP8 attention on `profile`), without the layout: for a caller that must know a
    run option before it chooses the devices (planning/compare.py skips the precisions a device cannot run)."""
    return _run_options(request, model, profile, _Defaults())


def _optimizer_fields(request: ExecutionRequest) -> dict[str, Any]:
    """The optimizer whose state the run holds and its moments' bytes: Megatron-LM's defaults, Adam (--optimizer adam,
    arguments.py L2913) with fp32 moments, unless the request says (the CLI's and the codec's choices check the name)."""
    return {"moment_bytes": 4 if request.moment_bytes is None else request.moment_bytes,
            "optimizer": "adam" if request.optimizer is None else request.optimizer,
            "precision_aware_optimizer": request.precision_aware_optimizer,
            "optimizer_fp8_recipe": request.optimizer_fp8_recipe}


def _bounded_seq(seq_len: int) -> int:
    """A sequence length within 64-bit products, as `sweep --vary seq` bounds it (review12: `plan --seq 10^30` was
    planned on a wafer, 1.3e62 GB printed, and was a bare OverflowError on a GPU)."""
    if seq_len > MAX_SEQUENCES:
        raise BtacalcError(f"{{seq_len}} {seq_len} is beyond 2^62")
    return seq_len


def _run_options(request: ExecutionRequest, model: "ModelSpec", profile: "HardwareProfile",
                 chosen: "_Defaults") -> RunOptions:
    d = profile.defaults
    try:
        recompute = parse_recompute(chosen.pick("recompute", request.recompute, d.recompute,
                                                f"{profile.name} default: {d.note}"))
    except ValueError as exc:
        raise BtacalcError("{recompute}: " + str(exc)) from None
    gpu = profile.family == "gpu"
    run = RunOptions(
        seq_len=_bounded_seq(chosen.pick("seq_len", request.seq_len, DEFAULT_SEQ_LEN, DEFAULT_SEQ_LEN_SOURCE)),
        recompute=recompute,
        attention=chosen.pick("attention", request.attention, d.attention, f"{profile.name} default: {d.note}"),
        causal=request.causal,
        attention_kernel=attention_kernel(DEFAULT_ATTENTION_KERNEL if request.attention_kernel is None
                                         else request.attention_kernel).name,
        loss=chosen.pick("loss", request.loss, "vocab_parallel" if gpu else "fused", REASONS["loss_gpu" if gpu else "loss"]),
        accounting=request.accounting,  # type: ignore[arg-type]  # validated by the CLI choices / catalogue
        memory_model=chosen.pick("memory_model", request.memory_model, "auto", REASONS["memory_model"]),
        overlap_streaming=request.overlap_streaming,
        gradient_bytes=chosen.pick("gradient_bytes", request.gradient_bytes, 4 if gpu else 2,
                                   REASONS["gradient_bytes_gpu" if gpu else "gradient_bytes_wse"]),
        routing_imbalance=request.routing_imbalance,
        multi_token_prediction=_mtp(request, model, chosen.reasons),
        precision=(chosen.pick("precision", request.precision, DEFAULT_PRECISION, REASONS["precision"]) if gpu
                   else request.precision or DEFAULT_PRECISION),
        low_precision_param_gather=request.fp8_param_gather,
        fp8_attention=request.fp8_attention,
        rht_cast_fusion=request.rht_cast_fusion,
        te_version=default_te_version(),  # a GPU run's is `_te_version`'s (below); a wafer refuses one given
        gradient_accumulation_fusion=request.gradient_accumulation_fusion,
        deterministic_attention=request.deterministic_attention,
        nccl_ring_only=request.nccl_ring_only,
        checkpoint_early_stop=request.checkpoint_early_stop, eager_kernels=request.eager_kernels,
        transformer_engine=request.transformer_engine, expert_grouped_gemm=request.expert_grouped_gemm,
        cpu_offload_layers=request.cpu_offload_layers, capacity_factor=request.capacity_factor,
        bf16_layers_at_start=request.bf16_layers_at_start, bf16_layers_at_end=request.bf16_layers_at_end,
        recompute_layers=request.recompute_layers, pad_to_capacity=request.pad_to_capacity,
        **_optimizer_fields(request),
        routing_weights=_routing_weights(model, gpu, chosen, request.routing_weights),
    )
    check_precision(run.precision, profile, run.low_precision_param_gather, run.rht_cast_fusion)
    if gpu:
        run = replace(run, te_version=_te_version(request, chosen, run.recipe))
    if request.te_version is not None and profile.family == "gpu" and not run.recipe.follows_te_release:
        per_tensor = ", ".join(n for n, r in recipes().items() if r.follows_te_release)
        raise BtacalcError(f"{{te_version}} decides which transposes TransformerEngine writes for per-tensor FP8 "
                           f"({per_tensor}); {run.precision} casts the same under every release btacalc knows")
    cc = profile.chip.capability
    if request.te_version is not None and profile.family == "gpu" and not run.recipe.follows_te_release_on(cc):
        # review: on Hopper the option was shown in the run options and changed nothing; review14: 12.x too
        raise BtacalcError(f"{{te_version}} decides which transposes TransformerEngine writes for per-tensor FP8 where "
                           f"FP8 GEMMs take non-TN layouts (compute capability {NON_TN_FP8_CC_TEXT}); {profile.name} "
                           f"has {cc:.1f}, whose FP8 GEMMs are TN-only: every release writes the transposes")
    if run.fp8_attention:
        check_fp8_attention(run.precision, profile, run.attention, run.attention_kernel)
        _check_fp8_attention_masks(model, profile)
    check_bf16_layers(run, model)
    _check_run(run, model)
    return run


def _check_kernel_softmax(run: RunOptions, model: "ModelSpec") -> None:
    """review19: GPT-OSS (attention sinks, a learnable softmax) was planned with FlashAttention-2 and llm-foundry's
    kernels, which have no such softmax (attention_kernels.toml `attention_sinks`, each with its source)."""
    kernel = attention_kernel(run.attention_kernel)
    if model.attention_sinks and run.attention == "flash" and not kernel.attention_sinks:
        raise BtacalcError(f"{{attention_kernel}} {kernel.name} has no learnable softmax, which the attention sinks of "
                           f"{model.name!r} need ({kernel.sinks_source}): give {{attention_kernel}} default")


def _check_fp8_attention_masks(model: "ModelSpec", profile: "HardwareProfile") -> None:
    """semantics19: TransformerEngine (@ d0067d0 pytorch/attention/dot_product_attention/utils.py L1125-1134 and
    L1344-1352) switches FusedAttention, FP8 attention's only backend, off in FP8 for a learnable softmax (attention
    sinks) and for a sliding window before compute capability 10.0 (and before cuDNN 9.21), and then finds no backend
    (dot_product_attention.py L2159-2165): GPT-OSS with --fp8-attention on an H100 was planned and emitted."""
    what = [w for w, has in (("attention sinks", model.attention_sinks), ("a sliding window", model.sliding_window))
            if has]
    cc = profile.chip.capability
    if what and cc < 10:
        raise BtacalcError(f"{{fp8_attention}} with {' and '.join(what)} (model {model.name!r}): TransformerEngine runs "
                           f"them in FP8 only from compute capability 10.0 with cuDNN 9.21 (utils.py L1125-1134, "
                           f"L1344-1352 @ d0067d0); {profile.name} has {cc:.1f}")


def _te_version(request: ExecutionRequest, chosen: Any, r: Recipe) -> str:
    """The GPU run's TransformerEngine version, checked (te_releases.toml; a malformed one is a one-line error); the
    default, with its reason where the recipe's casts depend on it (per-tensor FP8)."""
    if request.te_version is None and not r.follows_te_release:
        return default_te_version()
    given = None if request.te_version is None else request.te_version.strip()  # " 1.10 " is TE 1.10 (review13)
    version = chosen.pick("te_version", given, default_te_version(), te_releases().default_reason)
    te_behaviour(version)
    return str(version)


# Run and layout options that only mean something on a GPU (Megatron's and TransformerEngine's kernels and
# dispatchers): set on a wafer-scale profile, each is refused in one line instead of being ignored.
_GPU_ONLY: tuple[tuple[Any, str], ...] = (
    (lambda run, layout: run.recompute_layers > 0,  # Megatron's block recompute (check_recompute_layers)
     "{recompute_layers}: recomputing some layers and not others is Megatron's block method on a GPU; a wafer-scale "
     "run recomputes as its compiler decides"),
    (lambda run, layout: not run.gradient_accumulation_fusion,  # Megatron DDP's main-gradient add (gpu/fixed.py)
     "{gradient_accumulation_fusion}: the separate main-gradient add is Megatron's (GPU) data-parallel hook; a "
     "wafer-scale run has none"),
    (lambda run, layout: not run.rht_cast_fusion,  # TransformerEngine's NVFP4 cast kernels (precision.toml)
     "{rht_cast_fusion}: the rowwise and Hadamard-transformed casts are TransformerEngine's NVFP4 kernels (GPU); a "
     "wafer-scale run has none"),
    (lambda run, layout: run.attention_kernel != DEFAULT_ATTENTION_KERNEL,  # attention_kernels.toml: GPU kernels
     "{attention_kernel}: the fused attention kernels' rates are GPU kernels' (btacalc/data/attention_kernels.toml); "
     "a wafer-scale run has none"),
    (lambda run, layout: run.checkpoint_early_stop,  # PyTorch's activation checkpoint (torch.utils.checkpoint)
     "{checkpoint_early_stop}: the early-stopping re-run is PyTorch's activation checkpoint on a GPU; a wafer-scale "
     "run's recomputation is the compiler's"),
    (lambda run, layout: run.eager_kernels,  # eager PyTorch's CUDA kernels (docs/runs.md "mpt4")
     "{eager_kernels}: eager PyTorch's element-wise kernels are GPU kernels; a wafer-scale run's are the compiler's"),
    (lambda run, layout: run.deterministic_attention or run.nccl_ring_only,  # Megatron's --deterministic-mode (det3)
     "{deterministic_attention}: cuDNN's deterministic attention backward and NCCL_ALGO=Ring are GPU libraries' "
     "(Megatron's --deterministic-mode); a wafer-scale run has neither"),
    (lambda run, layout: layout.deepep,  # a wafer run is strict data parallel: no expert-parallel dispatch to route
     "{deepep} is a GPU MoE dispatcher between expert-parallel ranks; a wafer-scale run has no expert parallelism"),
    (lambda run, layout: run.precision_aware_optimizer,  # TransformerEngine's FusedAdam (RunOptions.param_remainders)
     "{precision_aware_optimizer} is TransformerEngine's FusedAdam on a GPU; a wafer-scale run's optimizer state is "
     "MemoryX's"),
    (lambda run, layout: run.loss in TORCH_LOSSES,  # PyTorch's F.cross_entropy on a GPU (formulas/head.toml)
     "{loss} torch_fp32 and torch_fp32_held are PyTorch's cross-entropy as torchtitan runs it on a GPU; a wafer-scale "
     "run's loss is the compiler's"),
    (lambda run, layout: layout.allgather_dispatcher,  # likewise
     "{allgather_dispatcher} is a GPU MoE dispatcher between expert-parallel ranks; a wafer-scale run has no expert "
     "parallelism"),
    (lambda run, layout: run.capacity_factor is not None,  # Megatron's router (moe_utils.get_capacity)
     "{capacity_factor} is Megatron's token dropping at the router on a GPU; a wafer-scale run's MoE layers are "
     "dropless"),
)


# Options that change nothing for this model, layout or device: each refused in one line instead of being planned
# as without it (a dense model has no all-to-all to dispatch or hide; one expert-parallel rank runs every routed
# token however unbalanced the routing, model/gpu/costs.py; a GPU plan keeps its weights resident, so there is no
# weight streaming to overlap, model/timing.py).
_NO_EFFECT: tuple[tuple[Any, str], ...] = (
    (lambda run, layout, model, gpu: layout.overlap.all_to_all and not model.is_moe,
     "{overlap_all_to_all} hides the MoE all-to-all behind expert compute: the model is dense (no all-to-all)"),
    (lambda run, layout, model, gpu: run.capacity_factor is not None and not model.is_moe,
     "{capacity_factor} caps the tokens each expert takes: the model is dense (no experts)"),
    (lambda run, layout, model, gpu: layout.deepep and not model.is_moe,
     "{deepep} dispatches MoE tokens between expert-parallel ranks: the model is dense (no dispatch)"),
    (lambda run, layout, model, gpu: layout.allgather_dispatcher and not model.is_moe,
     "{allgather_dispatcher} dispatches MoE tokens between expert-parallel ranks: the model is dense (no dispatch)"),
    (lambda run, layout, model, gpu: model.is_moe and run.routing_imbalance != 1.0 and layout.expert_parallel == 1,
     "{routing_imbalance} loads the busiest expert-parallel rank: with {expert_parallel} 1 one rank holds every "
     "expert and runs every routed token whatever the balance"),
    (lambda run, layout, model, gpu: gpu and not run.overlap_streaming,
     "{overlap_streaming} sets how wafer weight streaming overlaps compute: a GPU plan keeps its weights resident"),
    (lambda run, layout, model, gpu: not gpu and run.memory_model == "resident" and not run.overlap_streaming,
     "{overlap_streaming} sets how wafer weight streaming overlaps compute: {memory_model} resident streams no weights"),
    *((lambda run, layout, model, gpu, given=given: layout.torch_fsdp and given(run, layout),
       f"{{{name}}} is a Megatron-LM option ({what}): a PyTorch FSDP run ({{fsdp_impl}} fsdp2 or torch: torchtitan, "
       "llm-foundry) has none") for name, what, given in (
        ("nccl_ub", "its DDP / FSDP buffers registered with NCCL", lambda run, layout: layout.nccl_ub),
        ("gradient_accumulation_fusion", "TransformerEngine's wgrad GEMM accumulating into Megatron's main gradient",
         lambda run, layout: not run.gradient_accumulation_fusion),
        ("cpu_offload_layers", "Megatron-Core's activation offloading", lambda run, layout: run.cpu_offload_layers > 0),
        ("cuda_graph_scope", "TransformerEngine's per-layer CUDA graphs", lambda run, layout: bool(layout.cuda_graph_scope)),
        ("ddp_bucket_params", "Megatron DDP's gradient buckets", lambda run, layout: layout.ddp_bucket_params is not None),
        ("ddp_num_buckets", "Megatron DDP's gradient buckets", lambda run, layout: layout.ddp_num_buckets is not None),
        ("microbatch_group", "the interleaved pipeline's micro-batch group",
         lambda run, layout: layout.microbatch_group is not None),
        # review of review35: more options a PyTorch FSDP run has none of, planned as without them
        ("overlap_all_to_all", "Megatron-Core's expert-parallel all-to-all overlap",
         lambda run, layout: layout.overlap.all_to_all or layout.overlap.delay_wgrad or layout.overlap.early_attn_release),
        ("deepep", "Megatron-Core's flex dispatcher", lambda run, layout: layout.deepep),
        ("allgather_dispatcher", "Megatron-Core's allgather dispatcher", lambda run, layout: layout.allgather_dispatcher),
        ("overlap_grad_reduce", "Megatron DDP's bucketed gradient reduce-scatter overlap",
         lambda run, layout: bool(layout.overlap.grad_reduce)),
        ("overlap_param_gather", "the distributed optimizer's parameter all-gather overlap",
         lambda run, layout: bool(layout.overlap.param_gather)),
        ("precision_aware_optimizer", "TransformerEngine's FusedAdam under Megatron-Core's distributed optimizer",
         lambda run, layout: run.precision_aware_optimizer),
        # hostile30: bf16 moments are that optimizer's (RunOptions.param_remainders), accepted here and modelled
        ("moment_bytes", "bf16 Adam moments, TransformerEngine's FusedAdam under Megatron-Core's distributed "
         "optimizer", lambda run, layout: run.moment_bytes == 2))),
    # review24: at TP 1 a PyTorch FSDP2 run has no tensor-parallel collective for async TP to overlap (torchtitan
    # applies enable_async_tensor_parallel under parallel_dims.tp_enabled only, parallelize_llama.py L49-73, L205-209
    # @ 820504e2)
    # (FSDP1 has no TP at all, `Layout._validate_fsdp_impl`; with FSDP2 at TP > 1 it is Layout.async_tp)
    (lambda run, layout, model, gpu: layout.torch_fsdp and layout.overlap.tp_comm and not layout.every_tp_above_one,
     "{tp_comm_overlap} on a PyTorch FSDP plan is torchtitan's async TP, which overlaps the tensor-parallel "
     "collectives with their matmuls: it needs {fsdp_impl} fsdp2 and {tensor_parallel} > 1"),
    # hostile31: Megatron-Core sets bucket_size None without overlap_grad_reduce (training.py L2192-2193), and the plan
    # (collectives.gradient_buckets) was the same at any bucket size
    (lambda run, layout, model, gpu: not layout.torch_fsdp and not layout.overlap.grad_reduce
     and (layout.ddp_bucket_params is not None or layout.ddp_num_buckets is not None),
     "{ddp_bucket_params} / {ddp_num_buckets} cut the gradient reduce into buckets: they need "
     "{overlap_grad_reduce} (without it Megatron-Core reduces each gradient buffer in one bucket, training.py "
     "L2192-2193)"),
    # hostile28: without virtual stages Megatron's schedule has no chunks to group (schedules.py L1160-1180 read
    # it in the interleaved schedule only) and the plan's step was the same at any N, even one above M
    (lambda run, layout, model, gpu: layout.microbatch_group is not None and layout.virtual_pipeline == 1,
     "{microbatch_group} sets how many micro-batches the interleaved schedule runs each model chunk for: it needs "
     "{virtual_pipeline} > 1 (without virtual stages Megatron's schedule does not use it)"),
)


# The request's GPU layout options (the NVLink domain, Megatron's communication overlaps, the MoE all-to-all
# overlap): (the option's name, its request field, its value when not given), the one table of them.
# `gpu_layout_options` names those a request gives (a wafer-scale plan refuses them: _check_wafer_request);
# `without_gpu_layout` sets them back (planning/compare.py: a wafer row's request beside GPU rows).
_GPU_LAYOUT: tuple[tuple[str, str, Any], ...] = (
    ("devices_per_node", "devices_per_node", None),
    ("ddp_bucket_size", "ddp_bucket_params", None),
    ("ddp_num_buckets", "ddp_num_buckets", None),
    ("microbatch_group_size", "microbatch_group", None),
    ("overlap_grad_reduce", "overlaps.grad_reduce", None),
    ("overlap_param_gather", "overlaps.param_gather", None),
    ("tp_comm_overlap", "overlaps.tp_comm", None),
    ("overlap_p2p", "overlaps.p2p", None),
    ("overlap_all_to_all", "overlap_all_to_all", False),
    ("overlap_all_to_all", "overlaps.all_to_all", False),
    ("early_attn_release", "overlaps.early_attn_release", False),
    ("delay_wgrad", "overlaps.delay_wgrad", False),
)


def _request_field(request: ExecutionRequest, path: str) -> Any:
    head, _, tail = path.partition(".")
    return getattr(getattr(request, head), tail) if tail else getattr(request, head)


def gpu_layout_options(request: ExecutionRequest) -> list[str]:
    """The GPU layout options `request` gives (_GPU_LAYOUT), each named once, in the table's order."""
    given = [name for name, path, unset in _GPU_LAYOUT if _request_field(request, path) != unset]
    return list(dict.fromkeys(given))


def without_gpu_layout(request: ExecutionRequest) -> ExecutionRequest:
    """`request` with every GPU layout option (_GPU_LAYOUT) as when not given."""
    nested = {path.partition(".")[2]: unset for _, path, unset in _GPU_LAYOUT if "." in path}
    top = {path: unset for _, path, unset in _GPU_LAYOUT if "." not in path}
    return request.with_changes(overlaps=replace(request.overlaps, **nested), **top)


def _check_wafer_request(request: ExecutionRequest, profile: "HardwareProfile") -> None:
    """A wafer-scale run is strict data parallel (MemoryX holds the state, SwarmX broadcasts the weights and
    reduces the gradients, model/wafer): it has no NVLink domain and none of Megatron's communication overlaps,
    so each of those options would be ignored; refused in one line instead."""
    given = gpu_layout_options(request)
    if given:
        names = "/".join("{" + name + "}" for name in given)
        raise BtacalcError(f"{names}: GPU layout option{'s' if len(given) > 1 else ''} (the NVLink domain, Megatron's "
                           f"communication overlaps); {profile.name} is a wafer-scale profile, strict data parallel "
                           "with no such choice")
    # asked of the request, not of the run options: a wafer's run carries the default TE, so a --te-version equal to
    # it (or "", which `or` read as not given) was accepted in silence (review13)
    if request.te_version is not None:
        raise BtacalcError("{te_version}: the TransformerEngine release decides GPU FP8 casts and transposes; a "
                           "wafer-scale run has none")


def _resolve(request: ExecutionRequest, model: "ModelSpec", profile: "HardwareProfile") -> Execution:
    chosen = _Defaults()
    if profile.family != "gpu":
        _check_wafer_request(request, profile)
    run = _run_options(request, model, profile, chosen)
    gpu, recompute = profile.family == "gpu", run.recompute
    layout = _resolve_layout(request, model, profile, chosen)
    check_activation_offload(run, model, layout, gpu)
    check_op_recompute(run, layout, model, gpu)
    check_torchtitan_recompute(run, layout)
    check_torch_loss(run, layout, gpu)
    check_dtensor_precision(run, layout)
    check_nvfp4_master_shards(run, layout)
    check_precision_aware_sharded(run, layout, gpu)
    check_eager_context_parallel(run, layout, gpu)
    refusal = graph_recompute_refusal(recompute, layout.cuda_graph_scope, model)
    if refusal is not None:
        raise BtacalcError(refusal)
    if not gpu:
        for applies, message in _GPU_ONLY:
            if applies(run, layout):
                raise BtacalcError(message)
    for applies_to, message in _NO_EFFECT:
        if applies_to(run, layout, model, gpu):
            raise BtacalcError(message)
    _check_dropping(run, layout)
    if profile.family == "gpu":
        layout = _runnable_overlaps(layout, recompute, chosen)
        _check_overlaps(layout)
    limits = _resolve_batch(request, layout, chosen, run.seq_len if gpu else None)
    layout = replace(layout, micro_batches=limits.micro_batches or 1,  # the solver may choose M: plan.py
                     micro_batches_derived=request.micro_batches is None)
    mtp_layers = model.mtp_layers if run.multi_token_prediction else 0
    layout.validate(model, profile, run.seq_len, mtp_layers)
    if not layout.stage_split.given and layout.pipeline_parallel > 1:
        placed = layout.placement(model.num_layers, mtp_layers)
        if placed.method != "even":
            chosen.reasons["pipeline_split"] = pipeline_reason(placed, model.num_layers)
    wafers = f"{{devices}} {layout.devices} wafer systems ({WAFER_BATCH_RULE})"
    limits.validate(layout.data_parallel, wafers if profile.family == "wse" else "")
    objective = chosen.pick("objective", request.objective, OBJECTIVES[0], REASONS["objective"])
    if objective not in OBJECTIVES:
        raise BtacalcError(f"{{objective}} must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    return Execution(run, layout, limits, objective, tuple(chosen.reasons.items()), request,
                     tuple(chosen.changed_overlaps.items()))


def _check_overlaps(layout: Layout) -> None:
    """The overlaps Megatron-LM refuses beside the options given, each a one-line error (megatron_rules.overlap_refusal)."""
    from .megatron_rules import overlap_refusal

    o = layout.overlap
    why = overlap_refusal(layout.tensor_parallel, layout.sequence_parallel, o.tp_comm, o.grad_reduce, o.param_gather,
                          layout.zero_stage >= 1 or layout.fsdp)
    if why is not None:
        raise BtacalcError(why)


def _runnable_overlaps(layout: Layout, recompute: str, chosen: _Defaults) -> Layout:
    """The nearest plan Megatron runs: without the all-to-all overlap where Megatron-Core refuses it, with p2p
    overlap where the interleaved schedule needs it (btacalc.config.megatron_rules); the reason is kept with
    the defaults."""
    from .megatron_rules import a2a_refusal, dropped_overlaps, p2p_refusal

    pp, vp = layout.pipeline_parallel, layout.virtual_pipeline
    dropped = dropped_overlaps(layout.tensor_parallel, vp, layout.overlap.tp_comm, layout.overlap.p2p)
    if dropped:
        chosen.reasons.update(dropped)
        chosen.changed_overlaps.update(dict.fromkeys(dropped, False))
        layout = replace(layout, overlap=replace(layout.overlap, p2p=layout.overlap.p2p and "overlap_p2p" not in dropped,
                                                 tp_comm=layout.overlap.tp_comm and "tp_comm_overlap" not in dropped))
    why = p2p_refusal(pp, vp, layout.overlap.p2p)
    if why is not None:
        chosen.reasons["overlap_p2p"] = why
        chosen.changed_overlaps["overlap_p2p"] = True
        layout = replace(layout, overlap=replace(layout.overlap, p2p=True))
    why = a2a_refusal(recompute, pp, vp, layout.expert_parallel) if layout.overlap.all_to_all else None
    if why is None:
        return layout
    chosen.reasons["overlap_all_to_all"] = why
    chosen.changed_overlaps["overlap_all_to_all"] = False
    return replace(layout, overlap=replace(layout.overlap, all_to_all=False, early_attn_release=False,
                                           delay_wgrad=False))


def _routing_weights(model: "ModelSpec", gpu: bool, chosen: _Defaults,
                     given: Optional[Literal["combine", "experts"]] = None) -> Literal["combine", "experts"]:
    """Where an MoE layer applies its routing weights: where the request says (a run's recipe: Megatron-Core before
    0.12.1 applied them at the combine), else as Megatron-Core does on GPUs, after the experts on a wafer (REASONS;
    a dense model has none to apply, so no reason is recorded)."""
    if given is not None:
        return given
    where_: Literal["combine", "experts"] = "experts" if gpu else "combine"
    if model.is_moe:
        chosen.reasons["routing_weights"] = REASONS["routing_weights_gpu" if gpu else "routing_weights_wse"]
    return where_


def _mtp(request: ExecutionRequest, model: "ModelSpec", reasons: dict[str, str]) -> bool:
    if request.multi_token_prediction is None:
        if model.mtp_layers:
            reasons["multi_token_prediction"] = REASONS["multi_token_prediction"]
        return False
    if request.multi_token_prediction and not model.mtp_layers:
        raise BtacalcError(f"{{multi_token_prediction}}: model {model.name!r} has no multi-token-prediction module")
    return request.multi_token_prediction


# Activation offloading as Megatron-Core builds it: TransformerBlock wraps each decoder layer's forward in
# TransformerEngine's CPU-offload context (Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_block.py
# L302-316: get_cpu_offload_context(cpu_offloading, cpu_offloading_num_layers, num_layers, ...)), which copies the
# tensors the first N layers save for backward to pinned host memory and brings them back for their backward, so
# that the device holds (num_layers - N) layers' activations (TE @ d0067d0 transformer_engine/pytorch/
# cpu_offload.py L748-751). Megatron-Core refuses N outside [0, num_layers), pipeline parallelism and
# recomputation with it (transformer_config.py L1884-1899).
ACTIVATION_OFFLOAD = ("Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_block.py L302-316; TE @ d0067d0 "
                      "transformer_engine/pytorch/cpu_offload.py L748-751")


def check_activation_offload(run: RunOptions, model: "ModelSpec", layout: "Layout", gpu: bool) -> None:
    """Megatron-Core's rules for --cpu-offloading-num-layers (ACTIVATION_OFFLOAD), each a one-line error."""
    n = run.cpu_offload_layers
    if n == 0:
        return
    if not gpu:
        raise BtacalcError("{cpu_offload_layers}: activation offloading is a Megatron (GPU) option")
    if not 0 < n < model.num_layers:
        raise BtacalcError(f"{{cpu_offload_layers}} must be from 0 to {model.num_layers - 1} (Megatron offloads fewer "
                           f"layers than the model's {model.num_layers}), got {n}")
    if layout.pipeline_parallel != 1:
        raise BtacalcError(f"{{cpu_offload_layers}} {n} needs {{pipeline_parallel}} 1: Megatron-Core does not offload "
                           f"activations under pipeline parallelism, got {layout.pipeline_parallel}")
    if run.recompute != "none":
        raise BtacalcError(f"{{cpu_offload_layers}} {n} needs {{recompute}} none: Megatron-Core does not offload "
                           f"activations with recomputation, got {run.recompute}")
    if layout.cuda_graph_scope:  # semantics19: planned, emitted, and refused by Megatron-Core
        raise BtacalcError(f"{{cpu_offload_layers}} {n} needs no {{cuda_graph_scope}}: Megatron-Core refuses per-layer "
                           "CUDA graphs with CPU offloading (transformer_config.py L2800-2801 @ d98e8a64), got "
                           f"{','.join(layout.cuda_graph_scope)}")


# Megatron-Core's block recompute (Megatron-LM @ d98e8a64 megatron/core/recompute.py L167-180): in each pipeline rank's
# model chunk the first recompute_num_layers layers run under the activation checkpoint (their input saved, the forward
# re-run in the backward), the rest as they are (Problem.stored_layers); MTP layers are not recomputed under it
# (transformer/multi_token_prediction.py L1630-1633); transformer_config.py L1908-1931: full granularity needs a method.
# Under FP8/FP4 the window moves past layers whose input needs no gradient (recompute.py L170-175); a chunk's input
# needs one (the embedding's output on the first stage, a received activation, which the pipeline's receive makes
# require a gradient, on the others), so the first N layers are the ones.


def check_recompute_layers(run: RunOptions, model: "ModelSpec") -> None:
    """--recompute-layers N: with a full recompute only, N >= 1; N of a chunk's layers or more is all of them, as
    Megatron-Core runs it (recompute.py L174-180 @ d98e8a64 checkpoints layer_idx < N and never bounds N; review30:
    N above the model's layers was refused)."""
    n = run.recompute_layers
    if n == 0:
        return
    if n < 0:
        raise BtacalcError(f"{{recompute_layers}} counts the decoder layers recomputed: 1 or more (0: every layer), "
                           f"got {n}")
    if run.recompute != "full":
        raise BtacalcError(f"{{recompute_layers}} {n} chooses which layers a full recompute re-runs (Megatron's "
                           f"--recompute-method block); it needs {{recompute}} full, got {run.recompute}")


# --recompute op (vocabulary OP_POLICY) is torchtitan's per-op checkpoint on its Llama block: the catalogue's GEMMs
# carry the share of each the policy re-runs, derived from that block's mm order (wq, wk, wv, wo, w1, w3, w2:
# formulas/attention.toml and mlp.toml `op_recompute`). Each condition below changes which ops the policy counts or
# keeps, so the derivation does not hold and the plan is refused (tests/test_op_recompute.py checks that every model
# it accepts has a share for each of its layer GEMMs).
_OP_REFUSALS: tuple[tuple[Any, str], ...] = (
    (lambda run, model: model.is_moe or model.mla is not None or model.mlp != "swiglu" or model.parallel_block,
     "the model's layer is not the Llama block the policy's mm order is derived for (dense, GQA or MHA attention, "
     "a SwiGLU MLP, one after the other)"),
    (lambda run, model: model.qkv_bias or model.linear_bias or model.mlp_bias,
     "the model's linears have biases: PyTorch runs them as addmm, which the policy neither counts nor keeps"),
    (lambda run, model: model.dropout or model.sliding_window or model.attention_sinks,
     "the model has dropout, a sliding window or attention sinks, which torchtitan's Llama block has not"),
    (lambda run, model: run.multi_token_prediction or run.attention != "flash",
     "it needs {attention} flash as PyTorch's SDPA runs it (the flash and efficient kernels are on the policy's save "
     "list) and no multi-token prediction"),
    (lambda run, model: not attention_kernel(run.attention_kernel).op_policy_saved,
     "the policy's save list keeps SDPA's flash and efficient kernels, not the output of {attention_kernel} KERNEL, "
     "which it would re-run (btacalc/data/attention_kernels.toml op_policy_saved)"),
    (lambda run, model: run.precision not in ("bf16", "fp16"),
     "its mm count is derived for 16-bit linears; a low-precision linear runs other ops (float8_experimental's "
     "_scaled_mm)"),
)
_OP_LAYOUT_REFUSAL = ("it needs PyTorch's own modules, which btacalc plans under PyTorch's FSDP ({fsdp} {fsdp_impl} "
                      "fsdp2 or torch, 1-D, or fsdp2 with {tensor_parallel}) without CUDA graphs: TransformerEngine's linears and attention, which "
                      "btacalc's other GPU plans run, are no aten ops the policy sees")


def op_recompute_refusal(run: RunOptions, model: "ModelSpec") -> Optional[str]:
    """Why torchtitan's per-op policy (--recompute op) would count other ops for this model and run, whatever the
    layout (`_OP_REFUSALS`; None: it applies). `formulas --model` asks this too, so it never sums the op policy's
    shares for a model `plan` refuses."""
    if run.recompute != OP_POLICY:
        return None
    why = next((why for refused, why in _OP_REFUSALS if refused(run, model)), None)
    if why is None:
        return None
    return f"{{recompute}} op (torchtitan's per-op activation checkpoint): {why.replace('KERNEL', run.attention_kernel)}"


def check_torch_loss(run: RunOptions, layout: "Layout", gpu: bool) -> None:
    """--loss torch_fp32 / torch_fp32_held is F.cross_entropy on whole logits in a PyTorch training loop (torchtitan
    model.py L432 and train.py L162-L163, L289-L292 @ 157a12c5; train.py L131-L134, L304-L307 @ 9dec370), which btacalc
    plans under PyTorch's FSDP, 1-D (review33: on a Megatron plan it was planned inside Megatron's pipeline, context
    and expert parallelism, where no such loop runs; torchtitan's own tensor-parallel runs compute a loss-parallel
    cross-entropy by default, parallel_dims.py L119-L120 @ 9dec370)."""
    if run.loss in TORCH_LOSSES and gpu and not layout.torch_fsdp:  # (a wafer: _GPU_ONLY says why)
        raise BtacalcError(f"{{loss}} {run.loss} is PyTorch's cross-entropy in a PyTorch training loop, which btacalc "
                           "plans under PyTorch's FSDP ({fsdp} {fsdp_impl} fsdp2 or torch, 1-D); Megatron's plans run its "
                           "own vocab-parallel cross-entropy")
    if run.loss in TORCH_LOSSES and gpu and layout.tensor_parallel > 1:
        raise BtacalcError(f"{{loss}} {run.loss} is PyTorch's cross-entropy on whole logits: torchtitan's tensor-"
                           "parallel runs compute a loss-parallel cross-entropy on the vocabulary shards (parallel_dims.py "
                           "loss_parallel_enabled; parallelize_llama.py L144-148 @ 820504e2, the output layer's Shard(-1) "
                           "logits), planned as {loss} vocab_parallel")


# the precisions whose sequence-parallel gathers and saved inputs the FSDP2 x TP plan models: 16-bit, and float8
# tensorwise (fp8-current), which torchtitan casts before the gather (Float8 TP); its other recipes use regular TP,
# gathering and saving the 16-bit input (parallelize_llama.py L56-65 @ 820504e2), where btacalc's recipes gather
# and keep TransformerEngine's quantised input
DTENSOR_TP_PRECISIONS = ("bf16", "fp16", "fp8-current")


def check_dtensor_precision(run: RunOptions, layout: "Layout") -> None:
    """review25: PyTorch FSDP2 beside TP (DTensor's TP plan) only in the precisions torchtitan's TP plan runs as
    btacalc counts it (DTENSOR_TP_PRECISIONS)."""
    if layout.dtensor_tp and run.precision not in DTENSOR_TP_PRECISIONS:
        raise BtacalcError(f"{{precision}} {run.precision} with {{fsdp_impl}} fsdp2 and {{tensor_parallel}} "
                           f"{layout.tensor_parallel}: torchtitan's TP gathers a float8 input only under tensorwise "
                           "scaling (fp8-current); its other recipes gather and keep the 16-bit input "
                           "(parallelize_llama.py L56-65 @ 820504e2), which btacalc does not model: use "
                           f"{'/'.join(DTENSOR_TP_PRECISIONS)}, or plan without {{tensor_parallel}}")


def check_op_recompute(run: RunOptions, layout: "Layout", model: "ModelSpec", gpu: bool) -> None:
    """--recompute op: refused in one line where torchtitan's per-op policy would count other ops
    (`op_recompute_refusal`, then the layout: PyTorch's FSDP without CUDA graphs) or on a wafer (PyTorch's
    checkpoint)."""
    if run.recompute != OP_POLICY:
        return
    if not gpu:
        raise BtacalcError("{recompute} op is torchtitan's per-op activation checkpoint (PyTorch, on a GPU); a "
                           "wafer-scale run's recomputation is the compiler's")
    refusal = op_recompute_refusal(run, model)
    if refusal is not None:
        raise BtacalcError(refusal)
    if not layout.torch_fsdp or layout.cuda_graph_scope:
        raise BtacalcError(f"{{recompute}} op (torchtitan's per-op activation checkpoint): {_OP_LAYOUT_REFUSAL}")


# torchtitan's activation checkpointing (ActivationCheckpoint.mode none / full / selective, selective_ac_option "op"
# or a layer frequency: torchtitan @ 820504e2 torchtitan/config_manager.py L462-470,
# models/llama3/parallelize_llama.py L236-247): what a PyTorch FSDP2 plan recomputes (a layer frequency as full over
# some layers, --recompute-layers); Megatron-Core's recompute modules are not among them
TORCHTITAN_RECOMPUTE = ("none", "full", OP_POLICY)


def torchtitan_recompute_refusal(policy: str) -> Optional[str]:
    """Why torchtitan (PyTorch FSDP2, 1-D or beside DTensor's TP) cannot recompute `policy` (None: it can):
    `selective` and a module list are Megatron-Core's recompute modules, which torchtitan has none of. Plan
    (`check_torchtitan_recompute`) and `formulas --dtensor-tp` ask this."""
    if policy in TORCHTITAN_RECOMPUTE:
        return None
    return (f"{{recompute}} {policy} is Megatron-Core's module recomputation: torchtitan (PyTorch FSDP2) checkpoints "
            "no layer, whole layers (some of them with {recompute_layers}) or its per-op policy (activation "
            "checkpoint mode none / full / selective op): give {recompute} none, full or op")


def check_torchtitan_recompute(run: RunOptions, layout: "Layout") -> None:
    """A PyTorch FSDP2 plan (torchtitan) recomputes as torchtitan can (`torchtitan_recompute_refusal`; the plan had
    counted Megatron's modules, and a search under FSDP2 ranked them). FSDP1 (llm-foundry, whose
    activation_checkpointing_target picks modules) is not checked here."""
    refusal = torchtitan_recompute_refusal(run.recompute) if layout.fsdp2 else None
    if refusal is not None:
        raise BtacalcError(refusal)


def check_eager_context_parallel(run: RunOptions, layout: "Layout", gpu: bool) -> None:
    """review35: eager (materialised-score) attention is TransformerEngine's unfused backend, which TE switches off
    under context parallelism (TE @ d0067d0 dot_product_attention/utils.py L1169-1173), leaving a Megatron-LM run no
    attention backend at the first forward; Megatron-Core's local attention asserts CP 1 (Megatron-LM @ d98e8a64
    transformer/dot_product_attention.py L57-59). PyTorch FSDP runs (torchtitan) are not checked here."""
    if gpu and run.attention == "eager" and layout.context_parallel > 1 and not layout.torch_fsdp:
        raise BtacalcError(f"{{attention}} eager with {{context_parallel}} {layout.context_parallel}: Megatron has no "
                           "materialised-score attention under context parallelism (TransformerEngine's unfused "
                           "backend is switched off there, TE @ d0067d0 dot_product_attention/utils.py L1169-1173; "
                           f"Megatron-Core's local attention asserts CP 1, {MEGATRON} dot_product_attention.py "
                           "L57-59): give {attention} flash or {context_parallel} 1")


def check_precision_aware_sharded(run: RunOptions, layout: "Layout", gpu: bool) -> None:
    """hostile29: Megatron-Core builds the precision-aware optimizer only under its distributed optimizer (or
    Megatron-FSDP v2, which btacalc does not plan; Megatron-FSDP v1 forces the distributed optimizer on, arguments.py
    L1124-1135): get_megatron_optimizer raises "--use-precision-aware-optimizer only supported with distributed
    optimizer" (Megatron-LM @ d98e8a64 megatron/core/optimizer/__init__.py L1054-1060), which Megatron-LM and
    Megatron-Bridge both call before the first step. btacalc planned ZeRO 0 with fp32 main weights; Megatron trains
    no such run. (bf16 Adam moments are the precision-aware optimizer's too: RunOptions.param_remainders.)"""
    if gpu and run.precision_aware and layout.zero_stage == 0 and not layout.fsdp:
        raise BtacalcError("{precision_aware_optimizer} (or bf16 Adam moments) without the distributed optimizer "
                           "({zero_stage} 0): Megatron-Core refuses it, '--use-precision-aware-optimizer only "
                           "supported with distributed optimizer' (megatron/core/optimizer/__init__.py L1054-1060 @ "
                           "d98e8a64); give {zero_stage} 1 or more")


def check_nvfp4_master_shards(run: RunOptions, layout: "Layout") -> None:
    """NVFP4 parameters under the precision-aware optimizer whose FusedAdam keeps the master weights (the optimizer
    config's fp8_recipe None or delayed: use_precision_aware_optimizer_no_fp8_or_ds_fp8, optimizer_config.py
    L407-414 @ d98e8a64): Megatron-Core's distributed optimizer makes no shard of an NVFP4 parameter
    (distrib_optimizer.py L404-409: it does not view(-1)) and no fp32 main weight either (L422-453: FusedAdam holds
    them), so FusedAdam is handed None for every such parameter (L485-494). btacalc planned it with fp32 master
    weights; Megatron cannot train it. Under another fp8_recipe Megatron-Core keeps fp32 main weights itself
    (L422-447), which btacalc plans."""
    distributed = layout.zero_stage >= 1 and not layout.fsdp
    if (run.precision_aware and distributed and run.precision == "nvfp4" and run.low_precision_param_gather
            and run.optimizer_recipe in (None, "delayed")):
        raise BtacalcError("{precision_aware_optimizer} with {precision} nvfp4 and NVFP4 parameters "
                           "({fp8_param_gather}): Megatron-Core's distributed optimizer hands FusedAdam no "
                           "shard of an NVFP4 parameter where FusedAdam keeps the master weights (optimizer fp8_recipe "
                           "delayed, Megatron-LM's default; distrib_optimizer.py L404-409, L485-494 @ d98e8a64); drop "
                           "one of them (bf16 Adam moments need the precision-aware optimizer too), or launch with "
                           "--fp8-recipe tensorwise (Megatron-Bridge's default), under which Megatron-Core keeps the "
                           "fp32 main weights itself")


# The first/last layers in BF16 as Megatron-Core builds them (Megatron-LM @ d98e8a64): each decoder layer's forward
# runs in the recipe's fp8_autocast / FP4 context unless its global layer number is among the first
# num_layers_at_start_in_bf16 or the last num_layers_at_end_in_bf16 (fp8_utils.py L711-727 is_first_last_bf16_layer,
# L850-852 get_fp8_context; fp4_utils.py L247-263 get_fp4_context; transformer_block.py L352-364 builds the layer's
# parameters under the same test, L684-714 runs it), for FP8 and FP4 recipes alike; delayed scaling is refused
# (transformer_config.py L1528-1530: the per-layer context breaks its amax reduction).
BF16_LAYERS_SOURCE = ("Megatron-LM @ d98e8a64 megatron/core/fp8_utils.py L711-727, L850-852; fp4_utils.py L247-263; "
                      "transformer_block.py L352-364, L684-714; transformer_config.py L649-658, L1528-1556")


def check_bf16_layers(run: RunOptions, model: "ModelSpec") -> None:
    """Megatron's rules for keeping the first/last decoder layers in BF16 (BF16_LAYERS_SOURCE), one-line errors:
    counts from 0, a low-precision recipe other than delayed scaling, no more layers than the model has."""
    start, end = run.bf16_ends
    if start == end == 0:
        return
    for name, n in (("bf16_layers_at_start", start), ("bf16_layers_at_end", end)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise BtacalcError(f"{{{name}}} counts decoder layers: a whole number from 0, got {n!r}")
    r = run.recipe
    if not r.low:
        raise BtacalcError(f"{{bf16_layers_at_start}}/{{bf16_layers_at_end}} keep layers out of a low-precision recipe: "
                           f"they need a low {{precision}} (fp8-current, fp8-blockwise, mxfp8, nvfp4), got {run.precision}")
    if r.te_recipe == "DelayedScaling":
        raise BtacalcError("{bf16_layers_at_start}/{bf16_layers_at_end}: Megatron-Core refuses first/last layers in BF16 "
                           "with delayed scaling ({precision} fp8; transformer_config.py L1528-1530): use fp8-current")
    if start + end > model.num_layers:
        raise BtacalcError(f"{{bf16_layers_at_start}} {start} + {{bf16_layers_at_end}} {end} = {start + end} layers in "
                           f"BF16, more than the model's {model.num_layers}")


# Recompute modules Megatron-Core refuses for a model or a precision recipe (TransformerConfig.__post_init__ for a
# selective module list, Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_config.py): mla_up_proj without
# multi-latent attention (L1969-1973); moe_act without MoE layers (L1964-1967: it needs moe_grouped_gemm); moe_act or
# layernorm under FP8 delayed scaling (L2000-2006).
# freshuser17: both were planned, and emitted as launches Megatron stops at start-up (`plan --search --precision fp8`
# chose `layernorm,moe_act`).
def recompute_refusal(policy: str, model: "ModelSpec", recipe_: Recipe, scope: tuple[str, ...] = ()) -> Optional[str]:
    """Why Megatron-Core refuses the recompute module list `policy` for this model and recipe, and beside the
    per-layer CUDA-graph scopes `scope` (None: it runs)."""
    return _module_refusal(policy, model, recipe_) or graph_recompute_refusal(policy, scope, model)


def graph_recompute_refusal(policy: str, scope: tuple[str, ...], model: "ModelSpec") -> Optional[str]:
    """semantics19: Megatron-Core's rules for recomputation beside per-layer CUDA graphs (--cuda-graph-impl
    transformer_engine, transformer_config.py L2851-2895 @ d98e8a64), which btacalc planned and emitted: full
    recomputation only with a full-iteration graph (L2852-2855); the moe module not with the moe_router graph
    (L2860-2867); with dropout (the model's 0.1 on attention and hidden states), a recomputed module not inside its
    own graph (core_attn with attn, L2875-2881; mlp with mlp, L2882-2895)."""
    if not scope or policy == "none":
        return None
    given = f"{{cuda_graph_scope}} {','.join(scope)}"
    if policy == "full":
        return (f"{{recompute}} full with {given}: Megatron-Core runs full recomputation only under a full-iteration "
                "CUDA graph, not per-layer ones (transformer_config.py L2852-2855 @ d98e8a64)")
    modules = set(SELECTIVE_MODULES if policy == "selective" else policy.split(","))
    refused = [(module, graph) for module, graph, needs_dropout in (("moe", "moe_router", False),
                                                                     ("core_attn", "attn", True), ("mlp", "mlp", True))
               if module in modules and graph in scope and (model.dropout or not needs_dropout)]
    if not refused:
        return None
    module, graph = refused[0]
    why = ("refuses the moe recompute module with the moe_router graph (transformer_config.py L2860-2867" if
           module == "moe" else f"refuses recomputing a graphed module under the model's dropout (transformer_config.py "
           f"{'L2875-2881' if graph == 'attn' else 'L2882-2895'}")
    return f"{{recompute}} {module} with {given}: Megatron-Core {why} @ d98e8a64)"


def _module_refusal(policy: str, model: "ModelSpec", recipe_: Recipe) -> Optional[str]:
    modules = set(policy.split(",")) if policy not in ("none", "selective", "full") else set()
    if "mla_up_proj" in modules and model.mla is None:
        return ("{recompute} mla_up_proj recomputes multi-latent attention's up-projections: the model has no MLA "
                "(Megatron-Core refuses it, transformer_config.py L1969-1973 @ d98e8a64)")
    if "moe_act" in modules and not model.is_moe:
        return ("{recompute} moe_act recomputes the experts' activation: the model has no MoE layers (Megatron-Core "
                "refuses it without --moe-grouped-gemm, an MoE option, transformer_config.py L1964-1967 @ d98e8a64)")
    refused = sorted(modules & {"moe_act", "layernorm"})
    if refused and recipe_.te_recipe == "DelayedScaling":
        return (f"{{recompute}} {','.join(refused)}: Megatron-Core refuses the moe_act and layernorm recompute modules "
                "with FP8 delayed scaling ({precision} fp8; transformer_config.py L2000-2006 @ d98e8a64): use "
                "fp8-current, or other modules")
    return None


def _check_run(run: RunOptions, model: "ModelSpec") -> None:
    _check_kernel_softmax(run, model)
    refusal = recompute_refusal(run.recompute, model, run.recipe)
    if refusal is not None:
        raise BtacalcError(refusal)
    check_recompute_layers(run, model)
    if run.checkpoint_early_stop and run.recompute != "full":
        raise BtacalcError(f"{{checkpoint_early_stop}} shortens a full re-run of each layer (PyTorch's activation "
                           f"checkpoint); it needs {{recompute}} full, got {run.recompute}")
    if run.gradient_bytes not in (2, 4):
        raise BtacalcError(f"{{gradient_bytes}} must be 2 (the 16-bit parameter dtype) or 4 (fp32), got {run.gradient_bytes!r}")
    if run.moment_bytes not in (2, 4):
        raise BtacalcError(f"{{moment_bytes}} must be 2 (bf16 Adam moments) or 4 (fp32), got {run.moment_bytes!r}")
    if run.moment_bytes == 2 and run.optimizer != "adam":
        raise BtacalcError(f"{{moment_bytes}} asks for bf16 Adam moments; the optimizer is {run.optimizer}, which has no "
                           "Adam moments")
    if run.precision_aware_optimizer and run.optimizer != "adam":
        raise BtacalcError(f"{{precision_aware_optimizer}} is TransformerEngine's FusedAdam; the optimizer is "
                           f"{run.optimizer} (Megatron-Core: '--use-precision-aware-optimizer only supported with adam', "
                           "optimizer_config.py L433-436)")
    # the busiest expert receives at most every token once: T tokens against the mean T·k/E, so R <= E/k
    most = model.num_experts / model.top_k if model.is_moe else 1.0
    _check_capacity(run, most)
    if not 1.0 <= run.routing_imbalance <= most:
        raise BtacalcError(f"{{routing_imbalance}} is the busiest expert's tokens over the mean: from 1.0 to E/k = "
                           f"{most:g} (every token on one expert), got {run.routing_imbalance!r}")


# The least capacity factor btacalc plans, a guard (hostile27: a subnormal factor made every step time NaN): its load
# (model/gpu/rates.py expert_load) is CF times the balanced share, without Megatron's round-up of each capacity to a
# whole copy (moe_utils.py L263 ceil), whose share of the capacity is below E / (T k CF) for a rank's T tokens
# (review22: that error depends on T k / E, so no factor bounds it; at 0.01 it is under 10% once T k / E >= 1,000)
MIN_CAPACITY_FACTOR = 0.01


def _check_dropping(run: RunOptions, layout: Layout) -> None:
    """Token dropping with a dispatcher or a graph Megatron-Core refuses it with (transformer_config.py @ d98e8a64)."""
    if run.pad_to_capacity and layout.deepep and not layout.hybridep:
        raise BtacalcError("{pad_to_capacity} with {deepep}: Megatron-Core refuses it ('Flex token dispatcher with "
                           "deepep backend does not support moe_pad_expert_input_to_capacity', L1754-1761)")
    if (run.capacity_factor is not None and not run.pad_to_capacity and layout.dispatcher == "alltoall"
            and "moe_preprocess" in layout.cuda_graph_scope):
        raise BtacalcError("{cuda_graph_scope} moe_preprocess with {capacity_factor} and no {pad_to_capacity}: "
                           "Megatron-Core refuses it (the dropped routing's sizes go to the host in the preprocess: "
                           "'moe_preprocess cuda graph is not supported when there are DtoH copies', L2839-2850)")


def _check_capacity(run: RunOptions, most: float) -> None:
    """Megatron-Core's rules for token dropping (Megatron-LM @ d98e8a64 megatron/core/transformer/
    transformer_config.py L1862-1866: padding needs a capacity factor); a factor of 0 or less keeps no token
    (Megatron reads a negative one as dropless, L1836-1838: give none for that). Padded beyond E/k (`most`), each
    expert's capacity would exceed every copy a rank routes (moe_utils.py L263: ceil(T k / E x CF) > T k / k)."""
    if run.capacity_factor is not None and not MIN_CAPACITY_FACTOR <= run.capacity_factor < math.inf:
        raise BtacalcError(f"{{capacity_factor}} is each expert's capacity over its balanced share: a finite number "
                           f"from {MIN_CAPACITY_FACTOR:g} (leave it out for dropless routing; btacalc's load does not "
                           f"count Megatron's round-up of each capacity to a whole copy, which grows as the factor "
                           f"shrinks), got {run.capacity_factor!r}")
    if run.pad_to_capacity and run.capacity_factor is not None and run.capacity_factor > most:
        raise BtacalcError(f"{{capacity_factor}} {run.capacity_factor!r} with {{pad_to_capacity}} pads each expert "
                           f"beyond every token a rank routes: at most E/k = {most:g}")
    if run.pad_to_capacity and run.capacity_factor is None:
        raise BtacalcError("{pad_to_capacity} pads each expert's input to its capacity: it needs {capacity_factor} "
                           "(Megatron-Core: 'moe_expert_capacity_factor must be set to use "
                           "moe_pad_expert_input_to_capacity', transformer_config.py L1862-1866)")


def _resolve_layout(request: ExecutionRequest, model: "ModelSpec", profile: "HardwareProfile",
                    chosen: _Defaults) -> Layout:
    devices = request.devices
    sizes = _model_parallel_sizes(request, chosen)
    tp, pp = sizes["tensor_parallel"], sizes["pipeline_parallel"]
    if profile.family == "wse":  # wafer clusters: strict data parallel, the state in MemoryX
        request = request.with_changes(expert_parallel=1 if request.expert_parallel is None else request.expert_parallel,
                                       zero_stage=0 if request.zero_stage is None else request.zero_stage)
    ep, etp = _expert_sizes(request, model, chosen, tp, pp)
    zero = request.zero_stage
    if zero is None:
        # (one GPU: ZeRO 0, unless the precision-aware optimizer asks for Megatron's distributed optimizer)
        aware = profile.family == "gpu" and (request.precision_aware_optimizer or request.moment_bytes == 2)
        zero = 3 if request.fsdp else (1 if devices > 1 or aware else 0)
        if zero == 1:
            chosen.reasons["zero_stage"] = REASONS["zero_stage" if devices > 1 else "zero_stage_aware"]
    node = request.devices_per_node
    if node is None:
        node = profile.system.domain_devices
    sp = bool(request.sequence_parallel)
    if tp > 1:
        sp = chosen.pick("sequence_parallel", request.sequence_parallel, True, REASONS["sequence_parallel"])
    return Layout(devices=devices, expert_parallel=ep, zero_stage=zero, devices_per_node=node,
                  tensor_parallel=tp, sequence_parallel=sp, pipeline_parallel=pp,
                  virtual_pipeline=sizes["virtual_pipeline"], context_parallel=sizes["context_parallel"],
                  expert_tensor_parallel=etp, fsdp=request.fsdp, fsdp_impl=request.fsdp_impl,
                  stage_split=request.stage_split,
                  deepep=request.deepep, allgather_dispatcher=request.allgather_dispatcher, hybridep=request.hybridep,
                  dispatcher_sms=request.dispatcher_sms,
                  nccl_ub=request.nccl_ub, nvls=request.nvls, ddp_bucket_params=request.ddp_bucket_params,
                  ddp_num_buckets=request.ddp_num_buckets, microbatch_group=request.microbatch_group,
                  ddp_buckets_every_stage=request.ddp_buckets_every_stage,
                  cuda_graph_scope=tuple(request.cuda_graph_scope), tp_overlap_cfg=request.tp_overlap_cfg,
                  overlap=_resolve_overlaps(request, chosen, devices > 1, sizes["virtual_pipeline"] > 1))


def _model_parallel_sizes(request: ExecutionRequest, chosen: _Defaults) -> dict[str, int]:
    """TP, PP, VP and CP: as given, else 1 (the reason recorded when there are several devices)."""
    sizes: dict[str, int] = {}
    for name, what in (("tensor_parallel", "no tensor parallelism"), ("pipeline_parallel", "no pipeline parallelism"),
                       ("virtual_pipeline", "no interleaved virtual stages"),
                       ("context_parallel", "no context parallelism")):
        given: Optional[int] = getattr(request, name)
        if given is None and request.devices > 1:
            chosen.reasons[name] = f"1: {what} unless given (--search chooses it)"
        sizes[name] = 1 if given is None else given
    layout = request.stage_split.pipeline_layout
    if layout is not None and request.virtual_pipeline is None:  # Megatron: VP = the layout's chunks / PP
        chunks = len(parse_layout(layout))
        sizes["virtual_pipeline"] = max(chunks // sizes["pipeline_parallel"], 1)
        chosen.reasons.pop("virtual_pipeline", None)
    return sizes


def _expert_sizes(request: ExecutionRequest, model: "ModelSpec", chosen: _Defaults, tp: int, pp: int) -> tuple[int, int]:
    """EP and ETP: as given; else ETP = TP (Megatron-Core) and EP = gcd(devices / (ETP·PP), E)."""
    devices, etp = request.devices, request.expert_tensor_parallel
    if etp is None:
        biased = model.biased_moe()
        etp = tp if model.is_moe and not biased else 1
        if model.is_moe and tp > 1:
            chosen.reasons["expert_tensor_parallel"] = REASONS["expert_tensor_parallel_biased" if biased
                                                               else "expert_tensor_parallel"]
    ep = request.expert_parallel
    if ep is None and request.fsdp and request.fsdp_impl in TORCH_FSDP_IMPLS:
        # review31: PyTorch's FSDP as btacalc models it is data parallel only (Layout._validate_fsdp_impl): its
        # blocks hold their experts whole, so EP 1, not the gcd that the refusal then blamed on an --ep never given
        chosen.reasons["expert_parallel"] = "1: PyTorch's FSDP shards every block, its experts whole, over all ranks"
        ep = 1
    if ep is None:
        ranks = devices // (etp * pp) if devices % (etp * pp) == 0 else 1
        ep = auto_expert_parallel(ranks, model.num_experts)
        if devices > 1:
            over = "devices" if etp * pp == 1 else "devices / (ETP·PP)"
            chosen.reasons["expert_parallel"] = (f"gcd({over}, E) = {ep}: experts split as far as the device count "
                                                 "allows")
    return ep, etp


def _resolve_overlaps(request: ExecutionRequest, chosen: _Defaults, several: bool, interleaved: bool) -> Overlaps:
    o = request.overlaps

    def pick(name: str, given: Optional[bool], default: bool) -> bool:
        return chosen.pick(name, given, default, REASONS[name]) if several else bool(given)

    all_to_all = request.overlap_all_to_all or o.all_to_all
    if o.early_attn_release and not all_to_all:
        raise BtacalcError(EARLY_RELEASE_NEEDS_A2A)
    if o.delay_wgrad and not all_to_all:
        raise BtacalcError(DELAY_WGRAD_NEEDS_A2A)
    return Overlaps(all_to_all=all_to_all,
                    grad_reduce=pick("overlap_grad_reduce", o.grad_reduce, False),
                    param_gather=pick("overlap_param_gather", o.param_gather, False),
                    tp_comm=pick("tp_comm_overlap", o.tp_comm, False),
                    p2p=pick("overlap_p2p", o.p2p, interleaved), early_attn_release=o.early_attn_release,
                    delay_wgrad=o.delay_wgrad)


# Megatron-Core asserts the all-to-all overlap under the early release (transformer_config.py L3097-3101 @ d98e8a64)
EARLY_RELEASE_NEEDS_A2A = ("{early_attn_release} runs the all-to-all overlap's attention backward earlier: it needs "
                           "{overlap_all_to_all} (Megatron-Core refuses it without, transformer_config.py L3097-3101)")
# and under the delayed weight gradients (L3074-3077)
DELAY_WGRAD_NEEDS_A2A = ("{delay_wgrad} delays the merged schedule's weight gradients: it needs {overlap_all_to_all} "
                         "(Megatron-Core refuses it without, transformer_config.py L3074-3077)")


def default_global_batch(request: ExecutionRequest, seq_len: int, data_parallel: int) -> Optional[int]:
    """The global batch of a GPU plan that fixes none of the batch's sizes (global batch, gradient
    accumulation, tiles, tile batch, caps): `tokens_per_step` (default 2^22) in whole sequences, rounded up
    to a multiple of DP x the micro-batch (when --micro-batch is given) so every rank runs whole
    micro-batches. None when the user fixed a size (their numbers then decide)."""
    lim = request.limits
    if _fixed_batch_sizes(request):
        return None
    tokens = DEFAULT_TOKENS_PER_STEP if request.tokens_per_step is None else request.tokens_per_step
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1 or tokens > MAX_SEQUENCES:
        raise BtacalcError(f"{{tokens_per_step}} must be a positive integer up to {MAX_SEQUENCES}, got {tokens!r}")
    return whole_sequences(tokens, seq_len, data_parallel * (lim.micro_batch or 1))


def _fixed_batch_sizes(request: ExecutionRequest) -> list[str]:
    """The batch sizes `request` fixes, by parameter name: with any, `default_global_batch` gives none. The
    micro-batch alone fixes no global batch (the default is rounded to a multiple of it)."""
    lim = request.limits
    return [name for name, v in (("global_batch", lim.global_batch), ("micro_batches", request.micro_batches),
                                 ("tiles", lim.tiles), ("tile_batch", lim.tile_batch),
                                 ("max_global_batch", lim.max_global_batch), ("max_tile_batch", lim.max_tile_batch))
            if v is not None]


def whole_sequences(tokens: Any, seq_len: Any, unit: Any) -> Any:
    """ceil(tokens / s) sequences rounded up to a multiple of `unit` (ints or arrays): ceil(ceil(t/s)/u)·u,
    which equals ceil(t/(s·u))·u and never forms the product s·u (no overflow)."""
    return -(-(-(-tokens // seq_len)) // unit) * unit


def _resolve_batch(request: ExecutionRequest, layout: Layout, chosen: _Defaults,
                   gpu_seq_len: Optional[int] = None) -> BatchLimits:
    """The solver's limits, N = DP·M·G·b (see BatchLimits): --micro-batch fixes G·b, so with --global-batch
    M = N / (DP·micro batch) and without it N = DP·M·micro batch. A global batch alone leaves M to the
    solver, except under pipeline parallelism (memory and the schedule depend on M), where the
    micro-batch is 1 sequence as in Megatron's published recipes. A GPU plan (`gpu_seq_len` given) that
    fixes no batch size gets `default_global_batch`; a wafer's batch is the BTA solver's answer."""
    limits, m = request.limits, request.micro_batches
    dp = max(layout.data_parallel, 1)
    if gpu_seq_len is not None:
        default = default_global_batch(request, gpu_seq_len, dp)
        if default is None and request.tokens_per_step is not None:
            raise BtacalcError(f"{{tokens_per_step}} sets the global batch of a GPU plan that fixes no batch size: "
                               f"{{{_fixed_batch_sizes(request)[0]}}} fixes it here")
        if default is not None:
            tokens = DEFAULT_TOKENS_PER_STEP if request.tokens_per_step is None else request.tokens_per_step
            limits = replace(limits, global_batch=chosen.pick(
                "global_batch", None, default, REASONS["global_batch_gpu"].replace("{tokens}", f"{tokens:,}")))
    elif request.tokens_per_step is not None:
        raise BtacalcError("{tokens_per_step} sets a GPU plan's default global batch; on a wafer the batch is "
                           "the solver's answer (give --global-batch to fix it)")
    n, mb = limits.global_batch, limits.micro_batch
    if mb is None and n is not None and m is None and layout.pipeline_parallel > 1:
        mb = chosen.pick("micro_batch", None, 1, REASONS["micro_batch_pipeline"])
    if mb is None:
        return replace(limits, micro_batches=m)
    if n is None:
        m = 1 if m is None else m
        cap = limits.max_global_batch
        if cap is not None and dp * m * mb > cap:  # hostile26: it was refused as a --global-batch the user never gave
            raise BtacalcError(f"{{micro_batch}} {mb} x {dp} data-parallel ranks" + (f" x {{micro_batches}} {m}" if m > 1
                               else "") + f" make a global batch of {dp * m * mb}, above {{max_global_batch}} {cap}")
        return replace(limits, global_batch=dp * m * mb, micro_batches=m, micro_batch=None)
    if n % (dp * mb):
        raise BtacalcError(f"{{global_batch}} {n} is not a multiple of DP {dp} x {{micro_batch}} {mb} (gradient "
                           f"accumulation M = N / (DP·micro batch)): give {_multiples_text(n, dp * mb)}")
    if m is not None and m != n // (dp * mb):
        raise BtacalcError(f"{{micro_batches}} {m} differs from {{global_batch}} {n} / (DP {dp} x {{micro_batch}} "
                           f"{mb}) = {n // (dp * mb)}")
    return replace(limits, micro_batches=n // (dp * mb), micro_batch=None)
