"""Options shared by several commands, the choices they allow, and the step from options to the
library's `ExecutionRequest`. Library errors name parameters; `FLAGS` maps them back to flags."""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Callable, Optional, Sequence

import typer

from ..config.execution import OBJECTIVES
from ..config.precision import DEFAULT_PRECISION, recipes
from ..errors import BtacalcError
from ..vocabulary import FEATURES, RECOMPUTE_MODULES
from .completion import complete_hardware, complete_model

# Library parameter name -> the flag a user types (names not listed map to --name-with-dashes).
FLAGS = {
    "seq_len": "--seq",
    "expert_parallel": "--ep",
    "zero_stage": "--zero",
    "micro_batches": "--grad-accum",
    "devices_per_node": "--gpus-per-node",
    "ddp_bucket_params": "--ddp-bucket-size",
    "microbatch_group": "--microbatch-group-size",
    "overlap_all_to_all": "--overlap-a2a",
    "hardware": "--hw",
    "solve_for": "--solve-for",
    "multi_token_prediction": "--mtp",
    "tensor_parallel": "--tp",
    "pipeline_parallel": "--pp",
    "virtual_pipeline": "--vp",
    "context_parallel": "--cp",
    "expert_tensor_parallel": "--etp",
    "gradient_bytes": "--grad-bytes",
    "fp8_param_gather": "--fp8-param-gather",
    "fp8_attention": "--fp8-attention",
    "gradient_accumulation_fusion": "--no-gradient-accumulation-fusion",
    "rht_cast_fusion": "--no-rht-cast-fusion",
    "cpu_offload_layers": "--cpu-offloading-num-layers",
    "moment_bytes": "--optimizer-moments",
    "precision_aware_optimizer": "--precision-aware-optimizer",
    "overlap_streaming": "--no-overlap",
    "stage_split": "--first-stage-layers/--last-stage-layers/--pipeline-layout/--account-for-*-in-pipeline-split",
}


def flag(param: str) -> str:
    return FLAGS.get(param, "--" + param.replace("_", "-"))


def with_flags(exc: BtacalcError, literals: Sequence[str] = ()) -> str:
    """A library error's message with the flags a user types in place of the parameters it names (not inside
    `literals`: the command line's own words, such as a file name holding braces)."""
    return exc.render({p: flag(p) for p in exc.params}, literals)


def help_text(text: str) -> str:
    """Help text shown literally: typer's rich help would read "[default: ...]" as markup and drop it.

    The same result as `rich.markup.escape` (rich 13-15: a "[" that opens a tag, i.e. is followed by a
    lower-case letter, "#", "/" or "@" and closed by a "]" before any other "[", gets a backslash, and the
    backslashes right before it are doubled; a lone trailing backslash is doubled), without importing rich,
    which costs 20-30 ms of a cold `plan --json` that prints no help. tests/test_speed3.py checks the two
    agree."""
    text = _MARKUP_TAG.sub(lambda m: m.group(1) * 2 + "\\[", text)
    return text + "\\" if text.endswith("\\") and not text.endswith("\\\\") else text


_MARKUP_TAG = re.compile(r"(\\*)\[(?=[a-z#/@][^\[]*?\])")


def _choices(name: str, values: Any) -> Any:
    """A str Enum for typer from the library's own list of allowed values (one source of truth)."""
    return Enum(name, {str(v): str(v) for v in values}, type=str)


# Allowed values come from the formula catalogue's features and the run options.
Attention = _choices("Attention", FEATURES["attention"])
Loss = _choices("Loss", FEATURES["loss"])
Accounting = _choices("Accounting", FEATURES["accounting"])
Optimizer = _choices("Optimizer", FEATURES["optimizer"])
MemoryModelChoice = _choices("MemoryModelChoice", ("auto", "weight_streaming", "resident"))
Emit = _choices("Emit", ("cerebras", "modelzoo", "megatron", "bridge"))
Match = _choices("Match", ("power", "devices"))
Objective = _choices("Objective", OBJECTIVES)
Precision = _choices("Precision", tuple(recipes()))


def value(choice: Optional[Enum]) -> Optional[str]:
    return None if choice is None else choice.value


ModelOpt = typer.Option("qwen3-30b-a3b", "--model", "-m", help="Preset name or path to a Hugging Face config.json.",
                         autocompletion=complete_model)
NameOpt = typer.Option(None, "--name", help=help_text("Name the model in the output [default: the preset name, the file's "
                                                    "stem, or the folder of a config.json]."))
MtpOpt = typer.Option(None, "--mtp/--no-mtp", help=help_text("Also train the model's multi-token-prediction modules "
                      "(DeepSeek-V3) [default: off, as Hugging Face transformers trains it and as its 671B is counted]."))
HwOpt = typer.Option("wse3", "--hw", help="Hardware profile name (btacalc hw list) or path to a profile .toml.",
                      autocompletion=complete_hardware)
SeqOpt = typer.Option(None, "--seq", min=1, help=help_text("Sequence length s (Megatron's --seq-length) [default: "
                      "4096, Qwen3 pre-training]."))
RECOMPUTE_HELP = ("Activation recomputation: none, selective, full, op (torchtitan's per-op selective checkpoint, under "
                  "PyTorch's FSDP, which plan lays out), or "
                  "Megatron recompute modules, comma-separated (" + ", ".join(RECOMPUTE_MODULES) + ")")
RecomputeOpt = typer.Option(None, "--recompute", help=help_text(RECOMPUTE_HELP + " [default: per device]."))


def refuse_fsdp_only(command: str, recompute: Optional[str], loss: Optional[str]) -> None:
    """review34: torchtitan's per-op checkpoint and PyTorch's cross-entropy need PyTorch's FSDP (config/execution.py
    check_op_recompute, check_torch_loss), which only `plan` lays out (--fsdp --fsdp-impl): sweep, compare and
    whatif refused each use and told the user to add --fsdp, which they do not take. One line naming plan."""
    from ..vocabulary import OP_POLICY, TORCH_LOSSES, parse_recompute

    try:  # read as the run reads it; a policy it cannot read is refused there, with its own message
        policy = parse_recompute(recompute) if recompute is not None else None
    except ValueError:
        policy = None
    what = (f"--recompute {OP_POLICY} (torchtitan's per-op checkpoint)" if policy == OP_POLICY
            else f"--loss {loss} (PyTorch's cross-entropy)" if loss in TORCH_LOSSES else None)
    if what is not None:
        raise BtacalcError(f"{what} runs under PyTorch's FSDP, which only `btacalc plan` lays out (--fsdp --fsdp-impl "
                           f"fsdp2 or torch); {command} plans Megatron layouts and wafers")


AttentionOpt = typer.Option(None, "--attention", help=help_text("eager (materialised s² scores; no context "
                                                                 "parallelism on GPUs) or flash [default: per device]."))
AttentionKernelOpt = typer.Option(None, "--attention-kernel", help=help_text(
    "The fused attention kernel: default (TransformerEngine's fused attention in Megatron-LM: cuDNN's benchmarked "
    "rate on Hopper and on B200 / GB200, FlashAttention-2's on A100, else the device's large-GEMM rate) or triton-flash (llm-foundry's attn_impl triton: on Hopper at half of "
    "FlashAttention-2's published 35% of the peak on the causal blocks it runs) or flash-attn-2 (the CUDA "
    "FlashAttention-2 TransformerEngine 1.0 ran: 0.293 of the peak on Hopper) or flash-attn-2-varlen (llm-foundry's "
    "attn_impl flash: FlashAttention-2's rate, plus bert_padding's gathers and scatters of q, k, v and the output) or "
    "cudnn-9-13 (cuDNN 9.13's fused attention); btacalc/data/attention_kernels.toml [default: default]."))
CausalOpt = typer.Option(None, "--causal/--full-scores", show_default=False, help=help_text(
    "Count only the causal half of the s² matmuls (Megatron-LM's logged TFLOP/s does) [default: the full s², Korthikanti et al. 2022's convention; the time is the kernel's either way]."))
LossOpt = typer.Option(None, "--loss", help=help_text("fused: logits one sequence at a time; stored: Korthikanti's "
                                                  "4sbv fp32 logits; vocab_parallel: Megatron's cross-entropy (bf16 "
                                                  "logits and their fp32 softmax per micro-batch); native_fused: the same steps compiled "
                                                  "(--cross-entropy-loss-fusion: a second fp32 copy in the backward); "
                                                  "te_fused: TransformerEngine's fused "
                                                  "cross-entropy (--cross-entropy-fusion-impl te: the bf16 logits "
                                                  "turned into their gradient in place; Megatron-LM refuses it since "
                                                  "168cb15, so --emit bridge only); torch_fp32: PyTorch's "
                                                  "F.cross_entropy on the logits cast to fp32 in the loss, the 16-bit "
                                                  "ones deleted before the backward, as torchtitan computes it (the "
                                                  "fp32 log-softmax kept; its backward holds two more fp32 copies); "
                                                  "torch_fp32_held: the same on fp32 logits the model casts and the "
                                                  "loop holds through the backward (torchtitan in April 2024); both "
                                                  "under PyTorch's FSDP; all but fused and stored are GPU kernels, "
                                                  "which a wafer refuses [default: vocab_parallel on GPUs, fused on "
                                                  "wafers]."))
AccountingOpt = typer.Option(None, "--accounting", help=help_text("ideal (Korthikanti-style) or pytorch (what a "
                             "PyTorch layer keeps, measured: README) [default: ideal]."))
GlobalBatchOpt = typer.Option(None, "--global-batch", min=1, help="Sequences per optimizer step over all data-parallel "
                              "ranks (Megatron's --global-batch-size, Cerebras' batch_size): N = DP·M·G·b. On GPUs, "
                              "with plan's or whatif's --micro-batch it sets M = N/(DP·micro batch); alone the solver "
                              "splits it into M, G and b (under --pp > 1 one sequence per micro-batch, M = N/DP, or the "
                              "G·b a given --tiles/--tile-batch leaves); on wafer systems it is split into micro-batches "
                              "that fit.")
TilesOpt = typer.Option(None, "--tiles", min=1, help="Fix the number of attention tiles G.")
TileBatchOpt = typer.Option(None, "--tile-batch", min=1, help="Fix the tile batch b.")
MaxGlobalBatchOpt = typer.Option(None, "--max-global-batch", min=1, help="Cap the sequences per optimizer step "
                                 "N = DP·M·G·b (convergence); one device: G·b.")
MaxTileBatchOpt = typer.Option(None, "--max-tile-batch", min=1, help="Cap the tile batch b (like the vendor's tile cap).")
ExpertsOpt = typer.Option(None, "--experts", min=1, help="Override the number of experts E.")
TopKOpt = typer.Option(None, "--top-k", min=1, help="Override experts per token k.")
ExpertFfnOpt = typer.Option(None, "--expert-ffn", min=1, help="Override the expert width f.")
FixedActiveOpt = typer.Option(False, "--fixed-active/--no-fixed-active", show_default=False,
                              help="Keep k·f constant when --top-k changes (BTA paper's top-k sweep).")
OverlapOpt = typer.Option(True, "--overlap/--no-overlap", help="Weight streaming overlaps compute (max) or not (sum).")
MemoryModelOpt = typer.Option(None, "--memory-model", help=help_text("auto: resident when the whole training state fits, "
                              "else weight streaming (wafer); a GPU always holds its state resident, so there auto "
                              "and resident are the same plan and weight_streaming is refused [default: auto]."))
DevicesOpt = typer.Option(1, "--devices", "-n", min=1, help="GPUs (all ranks: Megatron's world size, also called --gpus "
                          "or --num-gpus), or wafer systems (CS-2/CS-3 in strict data parallel over SwarmX/MemoryX).")
EpOpt = typer.Option(None, "--ep", min=1, help=help_text(
                     "Expert-parallel degree: experts split over EP devices (Megatron's --expert-model-parallel-size) "
                     "[default: gcd(devices / (ETP·PP), E): ETP is --etp, else TP for an MoE model without expert "
                     "biases; 1 under PyTorch's FSDP]."))
ZeroOpt = typer.Option(None, "--zero", min=0, max=3, help=help_text("ZeRO stage 0-3 [default: 1 with several devices]."))
GpusPerNodeOpt = typer.Option(None, "--gpus-per-node", min=1, help=help_text("Devices per NVLink domain [default: the profile's]."))
OverlapA2aOpt = typer.Option(False, "--overlap-a2a/--no-overlap-a2a", help="Hide the all-to-all behind expert compute "
                             "(chunked) or not.")
DeepEpOpt = typer.Option(False, "--deepep/--no-deepep", show_default=False, help=help_text(
    "MoE dispatch with DeepEP (Megatron --moe-token-dispatcher-type flex): a token crosses to each other NVLink "
    "domain once, not once per expert there [default: off, the alltoall dispatcher]."))
HybridEpOpt = typer.Option(False, "--hybridep/--no-hybridep", show_default=False, help=help_text(
    "With --deepep: the flex dispatcher's hybridep backend (Megatron --moe-flex-dispatcher-backend hybridep), whose "
    "cross-node bytes run at Hybrid-EP's own measured rate where the profile has one [default: off, DeepEP's kernels]."))
AllgatherDispatcherOpt = typer.Option(False, "--allgather-dispatcher/--no-allgather-dispatcher", show_default=False,
                                      help=help_text(
    "MoE dispatch with Megatron's allgather dispatcher (--moe-token-dispatcher-type allgather, Megatron-Core's "
    "default): every token all-gathered over the ETP x EP group, the expert outputs reduce-scattered back "
    "[default: off, the alltoall dispatcher]."))
DispatcherSmsOpt = typer.Option(None, "--dispatcher-sms", help=help_text(
    "With --deepep: SMs DeepEP / HybridEP's dispatch and combine kernels hold (Megatron "
    "moe_flex_dispatcher_num_sms); an overlapped all-to-all takes them from compute [default: 20, Megatron-Core's]."))
NcclUbOpt = typer.Option(False, "--nccl-ub/--no-nccl-ub", show_default=False, help=help_text(
    "Megatron's --use-nccl-ub (DistributedDataParallelConfig.nccl_ub) with NCCL_CTA_POLICY=1: the data-parallel "
    "buffers registered with NCCL, whose SM-efficient path the overlapped all-gather / reduce-scatter then take "
    "with --nvls inside one NVLink domain [default: off, NCCL's ring channels]."))
NvlsOpt = typer.Option(False, "--nvls/--no-nvls", show_default=False, help=help_text(
    "With --nccl-ub: NVLink SHARP on (NCCL_NVLS_ENABLE=1), so a registered all-gather / reduce-scatter inside one "
    "NVLink domain holds ceil(32 or 40-48 / GPUs) SMs, not the ring channels (sm90+, not across a multi-node NVLink "
    "rack) [default: off, as Megatron-Bridge's perf runs set NCCL_NVLS_ENABLE=0]."))
DdpBucketSizeOpt = typer.Option(None, "--ddp-bucket-size", min=1, help=help_text(
    "Megatron's --ddp-bucket-size: parameters per gradient bucket, one overlapped data-parallel reduce-scatter / "
    "all-gather each, every call paying NCCL's latency [default: Megatron's max(4e7, 1e6 x DP x CP)]."))
DdpNumBucketsOpt = typer.Option(None, "--ddp-num-buckets", min=1, help=help_text(
    "Megatron's --ddp-num-buckets N: the rank's parameters // N per gradient bucket (Megatron-LM training.py "
    "resolve_ddp_bucket_size), so N overlapped data-parallel reduce-scatters / all-gathers; not with "
    "--ddp-bucket-size [default: Megatron's buckets of max(4e7, 1e6 x DP x CP) parameters]."))
MicrobatchGroupOpt = typer.Option(None, "--microbatch-group-size", min=1, help=help_text(
    "Megatron's --microbatch-group-size-per-virtual-pipeline-stage N: the interleaved schedule runs each model chunk "
    "for N micro-batches in a row; PP <= N <= M and M mod N 0 or at least PP (Megatron-Core schedules.py "
    "L1160-1180), so M need not be a multiple of PP [default: N = PP, Megatron's]."))
VocabMultipleOpt = typer.Option(None, "--vocab-multiple", min=1, help=help_text(
    "Megatron's --make-vocab-size-divisible-by m: the vocabulary padded up to a multiple of m x TP (the embedding, "
    "output layer and logits that wide; megatron/training/vocab_utils.py L58-59) [default: 128, Megatron-LM's]."))
CudaGraphScopeOpt = typer.Option(None, "--cuda-graph-scope", help=help_text(
    "Megatron's per-layer CUDA graphs (--cuda-graph-impl transformer_engine), comma-separated scopes: attn, mlp, "
    "moe_router, moe_preprocess (with moe_router); their kernels, module calls and eager glue replay from one "
    "forward and one backward graph launch per layer and micro-batch, GPU time unchanged "
    "(btacalc/data/cuda_graph_scopes.toml) [default: none]."))
GradAccumOpt = typer.Option(None, "--grad-accum", min=1, help=help_text(
    "Gradient accumulation: M micro-batches of G·b per optimizer step (the gradient sync runs once per step) "
    "[default: with --global-batch, chosen by the solver (N / (DP x micro batch) with plan's and whatif's "
    "--micro-batch; N / DP with --pp > 1); else 1]."))
MicroBatchOpt = typer.Option(None, "--micro-batch", min=1, help="Sequences per micro-batch per data-parallel rank "
                             "(Megatron's --micro-batch-size): fixes G·b.")
TpOpt = typer.Option(None, "--tp", min=1, help="Tensor-parallel size (Megatron --tensor-model-parallel-size).")
SpOpt = typer.Option(None, "--sequence-parallel/--no-sequence-parallel", help=help_text("Sequence parallelism with TP "
                     "(TP must divide the tokens per context-parallel rank) [default: on when --tp > 1]."))
PpOpt = typer.Option(None, "--pp", min=1, help="Pipeline-parallel size (Megatron's --pipeline-model-parallel-size).")
VpOpt = typer.Option(None, "--vp", min=1, help="Interleaved model chunks per pipeline stage (virtual pipeline; "
                 "Megatron's --num-virtual-stages-per-pipeline-rank).")
FirstStageOpt = typer.Option(None, "--first-stage-layers", min=1, help="Decoder layers on the first pipeline stage "
                             "(Megatron's --decoder-first-pipeline-num-layers); the middle stages share the rest.")
LastStageOpt = typer.Option(None, "--last-stage-layers", min=1, help="Decoder layers on the last pipeline stage "
                            "(Megatron's --decoder-last-pipeline-num-layers).")
PipelineLayoutOpt = typer.Option(None, "--pipeline-layout", help=help_text(
    "Megatron's --pipeline-model-parallel-layout: model chunks split by |, E embedding, t decoder layer, m MTP layer, "
    "L loss, x*n and (...)*n repeat, e.g. 'Et*3|(tt|)*29,m|L'; VP = chunks / PP."))
_EMBEDDING_SPLIT, _LOSS_SPLIT = "account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split"
AccountEmbeddingOpt = typer.Option(False, f"--{_EMBEDDING_SPLIT}/--no-{_EMBEDDING_SPLIT}", show_default=False,
                                   help="Count the embedding as one layer of the first model chunk (Megatron's flag of "
                                   "the same name).")
AccountLossOpt = typer.Option(False, f"--{_LOSS_SPLIT}/--no-{_LOSS_SPLIT}", show_default=False,
                              help="Count the loss as one layer of the last model chunk (Megatron's flag of the same "
                              "name).")
CpOpt = typer.Option(None, "--cp", min=1, help="Context-parallel size (ring attention over sequence chunks; "
                 "Megatron's --context-parallel-size).")
EtpOpt = typer.Option(None, "--etp", min=1, help=help_text("Expert tensor-parallel size (Megatron's "
                     "--expert-tensor-parallel-size) [default: --tp, as Megatron-Core]."))
FsdpOpt = typer.Option(False, "--fsdp/--no-fsdp", show_default=False,
                       help="Fully sharded data parallel (ZeRO-3 state; weights gathered every "
                       "micro-batch).")
FsdpImplOpt = typer.Option(None, "--fsdp-impl", help=help_text(
    "Whose FSDP --fsdp plans: megatron (Megatron-FSDP: two double-buffered units of 16-bit weights and fp32 "
    "gradients) or torch (PyTorch FSDP1 FULL_SHARD with Composer's mixed precision, as llm-foundry runs it: an fp32 "
    "sharded flat parameter, at most two gathered 16-bit blocks, one block's gradient cast to the reduce dtype, the "
    "root unit gathered through the backward; data parallel only) or fsdp2 (PyTorch's fully_shard as torchtitan runs "
    "it: the same units and dtypes, plus its all-gather copy-out and reduce-scatter copy-in on the compute stream) "
    "[default: megatron]."))
GradBytesOpt = typer.Option(None, "--grad-bytes", help=help_text("Bytes per gradient, 2 or 4: 4 (fp32 main "
                            "gradients, Megatron's default with bf16) or 2; on a wafer, the gradients MemoryX holds "
                            "(they leave the wafer in the weights' 16 bits) [default: 4 on GPUs, 2 on wafers]."))
RoutingOpt = typer.Option(1.0, "--routing-imbalance", min=1.0, help="Busiest expert's routed tokens over the mean "
                          "(1.0: balanced, as forced-balance benchmarks).")
OverlapGradOpt = typer.Option(None, "--overlap-grad-reduce/--no-overlap-grad-reduce", help=help_text("Hide the "
                              "data-parallel gradient reduction behind the backward pass [default: off, Megatron-Core]."))
OverlapParamOpt = typer.Option(None, "--overlap-param-gather/--no-overlap-param-gather", help=help_text("Hide the "
                               "distributed optimizer's weight all-gather behind the forward pass [default: off, "
                               "Megatron-Core]."))
TpOverlapOpt = typer.Option(None, "--tp-comm-overlap/--no-tp-comm-overlap", help=help_text("Hide tensor-parallel "
                            "collectives behind the GEMMs [default: off, Megatron-Core]."))
OverlapP2pOpt = typer.Option(None, "--overlap-p2p/--no-overlap-p2p", help=help_text("Hide pipeline sends behind "
                             "compute [default: on with --vp > 1, as Megatron-LM]."))
EarlyAttnReleaseOpt = typer.Option(False, "--early-attn-release/--no-early-attn-release", show_default=False,
                                  help=help_text(
    "With --overlap-a2a: Megatron's --ep-overlap-early-attn-memory-release, the backward layer's attention pass run "
    "before the forward layer's experts in the merged schedule, which frees its activations earlier and leaves the "
    "forward combine without compute beside it "
    "[default: off, Megatron-Core]."))
DelayWgradOpt = typer.Option(False, "--delay-wgrad-compute/--no-delay-wgrad-compute", show_default=False,
                             help=help_text(
    "With --overlap-a2a: Megatron's --delay-wgrad-compute, the merged schedule's weight gradients run after the data "
    "gradients, beside the dispatch's backward (Megatron-Bridge's performance runs turn it on with the EP overlap) "
    "[default: off, Megatron-Core]."))
CudaMaxConnectionsOpt = typer.Option(None, "--cuda-max-connections", min=1, max=32, help=help_text(
    "CUDA_DEVICE_MAX_CONNECTIONS of the launch (1-32 hardware work queues). At 1, as tensor-parallel Megatron launches "
    "set it, kernels start in the order they were launched, so under --overlap-a2a the merged schedule's exchange "
    "waits for the compute node issued before it (NVIDIA/Megatron-LM pull 6311) "
    "[default: unset, CUDA's 8; --emit megatron sets 1 where Megatron asserts it]."))
ObjectiveOpt = typer.Option(None, "--objective", help=help_text("What the solver maximises: throughput (predicted "
                            "tokens/s) or density (the largest G·b that fits, then the largest tile) [default: "
                            "throughput]."))
TokensPerStepOpt = typer.Option(None, "--tokens-per-step", min=1, help=help_text("GPU plans that fix no batch "
                                "size: tokens per optimizer step, rounded up to whole sequences per data-parallel "
                                "rank [default: 4,194,304 (4M), Llama 3 405B's initial batch]."))
PrecisionOpt = typer.Option(None, "--precision", help=help_text(
    "Training precision, as TransformerEngine / Megatron-LM name the recipes: bf16, fp16, fp8 (delayed scaling), "
    "fp8-current (per-tensor current scaling), fp8-blockwise (128x128 weights, 1x128 activations), mxfp8 (32-element "
    f"blocks, E8M0 scales), nvfp4 (16-element blocks, E4M3 scales) [default: {DEFAULT_PRECISION}]."))
Fp8ParamGatherOpt = typer.Option(False, "--fp8-param-gather/--no-fp8-param-gather", show_default=False,
                                 help="Keep the parameters in the low precision and "
                                 "all-gather them so (Megatron --fp8-param-gather; --fp4-param-gather under nvfp4): "
                                 "halves the parameter all-gather and drops the 16-bit weight copy (--emit megatron: "
                                 "FP8 needs --zero 1 or more, as Megatron-LM asserts).")
Fp8AttentionOpt = typer.Option(False, "--fp8-attention/--no-fp8-attention", show_default=False,
                               help="Run the attention core in TransformerEngine's FP8 "
                               "fused attention (Megatron TransformerConfig.fp8_dot_product_attention, TE fp8_dpa): cuDNN's "
                               "FP8 kernel at its benchmarked rate, plus the casts of Q, K, V and dO; needs --precision "
                               "fp8, fp8-current (Blackwell) or mxfp8 and --attention flash.")
RhtCastFusionOpt = typer.Option(True, "--rht-cast-fusion/--no-rht-cast-fusion", help="NVFP4: cast an activation's "
                                "rowwise and Hadamard-transformed columnwise copies in one kernel, as TransformerEngine "
                                "2.14 and later do; --no-rht-cast-fusion: one kernel per copy (TE 2.8-2.13).")
TeVersionOpt = typer.Option(None, "--te-version", help=help_text(
    "The TransformerEngine release the run uses, as TE numbers it (e.g. 2.2.0.dev0+bee4649c, NeMo 25.04's; 1.10, "
    "NeMo 24.09's). It decides two things. Under fp8-current, fp8-blockwise and mxfp8 before TE 2.6 (nvfp4 before "
    "2.7), Megatron-Core has the attention output projection keep its own quantised copy of O beside the fused "
    "attention's 16-bit O (docs/memory.md 'projcopy'; delayed-scaling fp8 keeps it under every release). Under fp8 "
    "and fp8-current on a GPU whose FP8 GEMMs take non-TN layouts (B200, GB200, B300, GB300: compute capability "
    "10.x-11.x), a TE 1.x cast writes the FP8 transposes as on Hopper, a TE before 2.2.0 still transposes the "
    "sequence-parallel gathered tensors, and one before 2.4 the inputs --tp-comm-overlap gathers (bulk dgrad) "
    "(btacalc/data/te_releases.toml, docs/precision.md 'te22'). Refused where neither applies (bf16; fp8 on "
    "H100/H200) and below the first TE that runs the recipe (precision.toml since_te) [default: "
    "2.20.0.dev0+d0067d0, the TE btacalc pins]."))
WgradFusionOpt = typer.Option(True, "--gradient-accumulation-fusion/--no-gradient-accumulation-fusion", help=(
    "Accumulate each weight gradient into the fp32 main gradient inside its GEMM (Megatron's default); "
    "--no-gradient-accumulation-fusion: the GEMM writes a 16-bit gradient and a separate kernel adds it, "
    "per parameter and micro-batch (docs/clock.md)."))
CheckpointEarlyStopOpt = typer.Option(False, "--checkpoint-early-stop/--no-checkpoint-early-stop", show_default=False,
                                      help=(
    "With --recompute full: each layer's re-run stops once it has rebuilt every saved tensor, as PyTorch's "
    "non-reentrant activation checkpoint does (torch >= 2.1, its default; llm-foundry's MPT), so the MLP's second "
    "linear is not re-run (docs/runs.md \"mpt3\"); off: the whole layer re-runs (Megatron)."))
EagerKernelsOpt = typer.Option(False, "--eager-kernels/--no-eager-kernels", show_default=False, help=(
    "The layer's element-wise kernels as eager PyTorch launches them in llm-foundry's MPT block (no "
    "TransformerEngine): bias gradients as separate reductions, the fused QKV gradient concatenated from dq, dk, dv, "
    "LayerNorm's weight gradients as a second pass (docs/runs.md \"mpt4\"); off: Megatron/TE's fused kernels."))
CpuOffloadOpt = typer.Option(0, "--cpu-offloading-num-layers", show_default=False, help=help_text(
    "Offload the activations of the first N decoder layers to host memory until their backward (Megatron "
    "--cpu-offloading-num-layers N; needs PP 1 and no recomputation) [default: 0, none]."))
Bf16StartOpt = typer.Option(0, "--bf16-layers-at-start", show_default=False, help=help_text(
    "Keep the first N decoder layers out of the low-precision recipe: their linear layers run in BF16, unquantised "
    "(Megatron --first-last-layers-bf16 --num-layers-at-start-in-bf16 N; needs a --precision other than bf16, fp16 "
    "and fp8) [default: 0]."))
Bf16EndOpt = typer.Option(0, "--bf16-layers-at-end", show_default=False, help=help_text(
    "Keep the last M decoder layers out of the low-precision recipe (Megatron --first-last-layers-bf16 "
    "--num-layers-at-end-in-bf16 M) [default: 0]."))
RecomputeLayersOpt = typer.Option(0, "--recompute-layers", show_default=False, help=help_text(
    "With --recompute full: recompute only the first N decoder layers; the others keep their activations (Megatron "
    "--recompute-method block --recompute-num-layers N: the first N of each pipeline stage's model chunk) [default: 0, "
    "every layer]."))
CapacityFactorOpt = typer.Option(None, "--capacity-factor", show_default=False, help=help_text(
    "MoE token dropping: each expert takes at most this times its balanced share of a rank's routed copies, the rest "
    "dropped (Megatron --moe-expert-capacity-factor); the busiest rank then carries min(its routing imbalance, this) "
    "[default: none, dropless]."))
PadToCapacityOpt = typer.Option(False, "--pad-to-capacity/--no-pad-to-capacity", show_default=False, help=(
    "With --capacity-factor: pad every expert's input to its capacity (Megatron --moe-pad-expert-input-to-capacity, "
    "drop-and-pad): every rank carries the capacity factor times its balanced share, and the all-to-all dispatcher "
    "needs neither its count all-gather nor its host sync."))
OptimizerOpt = typer.Option(None, "--optimizer", help=help_text("The optimizer whose state the plan holds: adam (fp32 master weights and two moments) or sgd (fp32 master weights and a momentum), as Megatron-LM's --optimizer (arguments.py L2913) [default: adam]."))
MOMENT_BYTES = {"fp32": 4, "bf16": 2}  # --optimizer-moments -> bytes per Adam moment (RunOptions.moment_bytes)
Moments = _choices("Moments", tuple(MOMENT_BYTES))
MomentsOpt = typer.Option(None, "--optimizer-moments", help=help_text("Adam's two moments in fp32 or bf16 (Megatron "
                          "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; the master "
                          "weights as --precision-aware-optimizer keeps them) [default: fp32]."))
PrecisionAwareOpt = typer.Option(None, "--precision-aware-optimizer/--no-precision-aware-optimizer", show_default=False,
                                 help=help_text(
    "Megatron's --use-precision-aware-optimizer: TransformerEngine's FusedAdam holds the optimizer state; with bf16 "
    "parameters and no FP8 or delayed-scaling FP8 it keeps each fp32 master weight as its low 16 bits beside the "
    "bf16 parameter (store_param_remainders, Megatron-Core's default): 2 B per parameter, not 4. Implied by "
    "--optimizer-moments bf16 [default: off]."))
JsonOpt = typer.Option(False, "--json", help="Print the result as JSON on stdout.")
OutputOpt = typer.Option(None, "--output", "-o", help="Write the JSON to this file (atomically; - for standard output).")
QuietOpt = typer.Option(False, "--quiet", "-q", help="No progress report on stderr.")


def outputs(output: Optional[str] = None, as_json: bool = False, csv_path: Optional[str] = None,
            plot_path: Optional[str] = None, inputs: Optional[dict[str, Optional[str]]] = None,
            stdout_flag: str = "--json") -> Any:
    """The command's output targets, checked before any work starts (`btacalc.output.files`; a `--plot`
    also needs matplotlib, the plot extra, then and not after the work): none may
    be one of `inputs` (flag -> the value given: a path, a folder holding config.json, or a comma list;
    preset and profile names that are not files are ignored); `stdout_flag` is the option that prints on standard
    output (plan's --emit and --schema print where --json does)."""
    from ..output.files import STDOUT, Outputs

    if plot_path is not None:
        from ..output.plots import check_plot_path

        check_plot_path(plot_path)
    outs = Outputs({"--plot": plot_path, "--csv": csv_path, "--output": output, "--json": STDOUT if as_json else None},
                   inputs=input_files(inputs or {}), labels={"--json": stdout_flag})
    if plot_path is not None:
        from ..output.plots import pyplot

        pyplot(plot_path)  # after the paths' own faults: a missing plot extra is refused before any work too
    return outs


def check_bounds(values: dict[str, Optional[int]]) -> None:
    """Counts the library folds into others (--micro-batch into the global batch, --systems into the
    device count) are checked under their own flag first, so an error names what the user typed. The model
    overrides (--experts, --top-k, --expert-ffn) are bounded by the model itself (config.model.MAX_COUNT,
    ModelSpec.with_overrides), as every other way of building a model is."""
    from ..config.execution import LIMIT_TEXT, MAX_DEVICES, MAX_SEQUENCES

    bounds = {"--micro-batch": (MAX_SEQUENCES, LIMIT_TEXT[MAX_SEQUENCES]),
              "--grad-accum": (MAX_SEQUENCES, LIMIT_TEXT[MAX_SEQUENCES]),
              "--systems": (MAX_DEVICES, LIMIT_TEXT[MAX_DEVICES])}
    for flag, v in values.items():
        if v is not None and v > bounds[flag][0]:
            raise BtacalcError(f"{flag} {v} is beyond {bounds[flag][1]}")


def input_files(given: dict[str, Optional[str]]) -> dict[str, str]:
    """The files behind input options: each comma-separated value that is a file, or a folder's config.json."""
    import os

    from ..config.hardware import is_builtin_name
    from .parsing import path_pieces

    files: dict[str, str] = {}
    for flag, value in given.items():
        names = is_builtin_name if flag == "--hw" else (lambda _: False)  # as comma_entries(paths=True) splits
        for i, part in enumerate(path_pieces(str(value), names) if value else []):  # a path may hold commas
            path = os.path.join(part, "config.json") if os.path.isdir(part) else part
            if os.path.isfile(path):
                files[f"{flag}#{i}" if i else flag] = path
    return files


def write_outputs(outs: Any, payloads: dict[str, Any], table: Optional[Callable[[], Any]]) -> None:
    """Write every output together (all-or-nothing); print the table (if any) unless standard
    output is taken."""
    from .console import print_stdout, write_stdout

    finish: Optional[Callable[[], None]] = None
    if table is not None and not outs.stdout_taken:
        render = table

        def finish() -> None:
            print_stdout(render())
            files = [f"{t.path} ({flag})" for flag, t in outs.targets.items() if t.kind == "file"]
            if files:  # issue 25: the terminal says where the data went
                write_stdout(f"written to {', '.join(files)}\n")

    outs.commit(payloads, stdout=write_stdout, finish=finish)


def emit_result(result: Any, as_json: bool, output: Optional[str], csv_path: Optional[str],
                to_csv: Callable[[Any], str], plot_path: Optional[str], plot: Callable[[Any, str], bytes],
                renderable: Callable[[Any], Any], outs: Any = None) -> None:
    """The outputs of a table command: plot, CSV and JSON files, JSON on stdout, else the rich table.
    `outs`: the targets checked before the work (else checked now)."""
    from .console import model_json

    outs = outs if outs is not None else outputs(output, as_json, csv_path, plot_path)
    text = model_json(result)
    payloads: dict[str, Any] = {"--output": text, "--json": text}
    if plot_path:
        payloads["--plot"] = plot(result, plot_path)
    if csv_path:
        payloads["--csv"] = to_csv(result)
    write_outputs(outs, payloads, lambda: renderable(result))
