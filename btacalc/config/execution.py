"""The execution: how a model is run on a device (run options), how the job spreads over devices
(layout) and what the batch-shape solver may choose (batch limits), with every default resolved
once, in `resolve_execution` (config/resolution.py, with the rules a run and a layout must meet), and
the reason for each default kept beside it.

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
from .precision import DEFAULT_PRECISION, Recipe, recipe, recipes
from .attention_kernels import DEFAULT_ATTENTION_KERNEL, attention_kernel
from .cuda_graphs import check_scopes, scopes
from .pipeline import Placement, StageSplit, group_rule, place
from .te_release import default_te_version, te_release_key, te_releases
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
    "causal": ("full s²: attention's score and value matmuls counted over the whole s x s square, the convention of "
               "Korthikanti et al. 2022 App. A (72BLsh²(1 + s/6h + ...); the published points validate checks); the "
               "kernel's time skips the masked blocks either way (README \"FlashAttention IO\"). Megatron-LM's logged "
               f"TFLOP/s counts the causal half ({MEGATRON} megatron/training/training.py L1163-1169): give --causal to "
               "compare MFU with it"),
    "accounting": ("ideal: the saved activations counted tensor by tensor as Korthikanti et al. 2022 §4.1 does; "
                   "pytorch: what a PyTorch layer keeps, measured (btacalc measure)"),
    "optimizer": f"adam: Megatron-LM's default --optimizer ({MEGATRON} megatron/training/arguments.py L2913)",
    "moment_bytes": ("4: Adam's two moments in fp32, Megatron-Core's default (--exp-avg-dtype and --exp-avg-sq-dtype "
                     f"fp32, {MEGATRON} megatron/core/optimizer/optimizer_config.py L203, L206)"),
    "vocab_multiple": (f"128 x TP: Megatron-LM pads the vocabulary up to a multiple of --make-vocab-size-divisible-by "
                       f"(default 128, {MEGATRON} megatron/training/arguments.py L2441) times TP (vocab_utils.py "
                       "L58-59); the embedding, the output layer and the logits are that wide (--vocab-multiple sets "
                       "the flag)"),
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
    "cuda_max_connections": ("unset: CUDA's 8 hardware work queues, as Megatron's MoE README asks with the all-to-all "
                             f"overlap ({MEGATRON} megatron/core/transformer/moe/README.md L437: "
                             "CUDA_DEVICE_MAX_CONNECTIONS > 1); --cuda-max-connections 1 plans the one queue a "
                             "tensor-parallel launch sets, where the merged schedule's exchange waits for the compute "
                             "issued before it"),
    "global_batch_gpu": ("{tokens} tokens per optimizer step (4M: Llama 3 405B's initial batch, arXiv 2407.21783 "
                         "§3.4.1; GPT-3 used 3.2M), rounded up to whole sequences per data-parallel rank; "
                         "--tokens-per-step changes it, --global-batch fixes it"),
    "micro_batch_pipeline": ("1 sequence per micro-batch under pipeline parallelism (M = N / DP), as Megatron's "
                             "published pipeline recipes (with --tiles or --tile-batch: the G x b they leave); give "
                             "--micro-batch or --grad-accum to change it"),
    "precision": ("bf16: Megatron-LM's --bf16 mixed precision; low-precision recipes (--precision fp8, fp8-current, "
                  "fp8-blockwise, mxfp8, nvfp4) are TransformerEngine's (btacalc/data/precision.toml)"),
    "precision_wse": ("bf16: a wafer-scale system trains in 16-bit (--precision fp16 plans the same 2-byte elements; "
                      "the low-precision recipes are GPU TransformerEngine's, btacalc/data/precision.toml)"),
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
    def proj_quantised_input(self) -> bool:
        """The attention output projection keeps a quantised copy of its input O for its weight gradient beside the
        16-bit O the fused attention keeps: under a low-precision recipe unless Megatron-Core sets save_original_input
        on linear_proj, which it does for every FP8 recipe but delayed scaling from TE 2.6.0.dev0 and for FP4 from TE
        2.7.0.dev0 (Megatron-LM @ d98e8a64 megatron/core/transformer/attention.py L428-444, "linear_proj also saves
        the quantized tensor of this output"; precision.toml `proj_saves_original_input_since_te`)."""
        r = self.recipe
        since = r.proj_saves_original_input_since_te
        return r.low and not (since and te_release_key(self.te_version) >= te_release_key(since))

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
            "proj_quantised_input": self.proj_quantised_input,
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
    # CUDA_DEVICE_MAX_CONNECTIONS as the launch sets it (None: not stated). At 1 every stream feeds one hardware work
    # queue and kernels start in the order the host launched them (NVIDIA/Megatron-LM pull 6311; TransformerEngine's
    # maintainer in pytorch/pytorch issue 143890): the merged schedule's exchange then waits for the compute node
    # issued before it (model/gpu/merged_pair.py `one_queue`); Megatron's MoE README asks for > 1 with the overlap
    max_connections: Optional[int] = None

    @property
    def one_queue(self) -> bool:
        return self.max_connections == 1


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
    # Megatron's --make-vocab-size-divisible-by m: the vocabulary is padded up to a multiple of m x TP (megatron/training/
    # vocab_utils.py L58-59); None: Megatron-LM's default (formulas/constants.toml [megatron]), applied by
    # model/problem.py padded_vocab
    vocab_multiple: Optional[int] = None
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
        if self.vocab_multiple is not None:
            sizes += (("vocab_multiple", self.vocab_multiple),)
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
        self.validate_divides()
        self._validate_expert_grid()
        if self.fsdp and self.zero_stage != 3:
            raise BtacalcError(f"{{fsdp}} shards weights, gradients and optimizer state: it is ZeRO-3, not "
                               f"{{zero_stage}} {self.zero_stage}")
        self._validate_fsdp_impl()

    def validate_divides(self) -> None:
        """The model-parallel grid divides the devices. hostile36: resolution checks it before the batch,
        whose rule N = DP·M·micro batch took DP = devices // (TP·PP·CP) and named a DP that does not exist (`--tp 3`
        on 8 GPUs: "not a multiple of DP 2 x --micro-batch 4 ... give 8", then, given 8, this error)."""
        tp, pp, cp = self.tensor_parallel, self.pipeline_parallel, self.context_parallel
        if self.devices % self.model_parallel:
            fix = _divisor_fix([("tensor_parallel", tp), ("pipeline_parallel", pp), ("context_parallel", cp)],
                               self.devices)
            raise BtacalcError(f"{{tensor_parallel}} {tp} x {{pipeline_parallel}} {pp} x {{context_parallel}} {cp} = "
                               f"{self.model_parallel} does not divide {{devices}} {self.devices} (data parallel = "
                               f"devices / (TP·PP·CP)): {fix}")

    def _validate_expert_grid(self) -> None:
        pp = self.pipeline_parallel
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
        if self.deepep and not self.hybridep and self.expert_parallel * self.expert_tensor_parallel == 1:
            # hostile33: planned as the alltoall dispatcher and emitted as a flex launch Megatron-Core refuses
            raise BtacalcError("{deepep} exchanges tokens over the expert tensor x expert parallel ranks: it needs "
                               "{expert_parallel} or {expert_tensor_parallel} above 1 (Megatron-Core: 'DeepEP "
                               "dispatcher requires TPxEP > 1', token_dispatcher.py L1836)")
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
        self.check_sequence(model, seq_len)
        cp = self.context_parallel
        if cp > 1 and model.attention_sinks:
            # review19: TE @ d0067d0 dot_product_attention/utils.py L1148-1155 runs a learnable softmax under context
            # parallelism only with the all-to-all exchange (FlashAttention takes none, unfused no CP): the ring
            # btacalc times (Megatron's default --cp-comm-type p2p) has no attention backend
            raise BtacalcError(f"{{context_parallel}} {cp}: TransformerEngine runs attention sinks (a learnable "
                               "softmax) under context parallelism only with the all-to-all exchange (cp_comm_type "
                               "a2a, TE @ d0067d0 dot_product_attention/utils.py L1148-1155), not the ring btacalc "
                               "times")

    def check_sequence(self, model: "ModelSpec", seq_len: int) -> None:
        """The rules a sequence length must meet under this layout (`sequence_multiple`), each a one-line error: 2·CP
        load-balanced causal chunks, and TP dividing each CP rank's tokens under sequence parallelism (hostile39: a
        sweep over --vary seq checks each point's length here, as `plan` checks its own through `validate`)."""
        cp, tp = self.context_parallel, self.tensor_parallel
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
                               f"{multiples_text(seq_len, self.sequence_multiple())}{off}")

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


def multiples_text(n: int, unit: int) -> str:
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
                "microbatch_group": (MAX_SEQUENCES, LIMIT_TEXT[MAX_SEQUENCES]),
                # times TP (at most 2^20) it stays inside int64 for numpy's arrays of layouts
                "vocab_multiple": (1 << 40, "2^40, far wider than any vocabulary")}


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
                               f"{data_parallel} ({multiples_text(n, data_parallel)})")
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
    max_connections: Optional[int] = None  # CUDA_DEVICE_MAX_CONNECTIONS (Overlaps.max_connections)


@dataclass(frozen=True)
class ExecutionRequest:
    """What the user asked for; None means "use the default" (resolved by `resolve_execution`)."""

    seq_len: Optional[int] = None
    recompute: Optional[str] = None
    attention: Optional[str] = None
    causal: Optional[bool] = None  # None: full s² (REASONS "causal")
    attention_kernel: Optional[str] = None  # None: DEFAULT_ATTENTION_KERNEL (attention_kernels.toml)
    loss: Optional[str] = None
    accounting: Optional[str] = None  # None: ideal (REASONS "accounting")
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
    vocab_multiple: Optional[int] = None  # Layout.vocab_multiple (Megatron --make-vocab-size-divisible-by)
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
