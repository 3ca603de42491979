"""Resolving an execution: the user's `ExecutionRequest` becomes an `Execution` (config/execution.py) with every
default chosen once and its reason kept, and every rule a run or a layout must meet checked (one-line errors).
Split from config/execution.py, which keeps the data classes (run options, layout, batch limits, request)."""

from __future__ import annotations

import math
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any, Literal, Optional

from ..errors import BtacalcError
from ..memo import Memo, plain_key
from .precision import (DEFAULT_PRECISION, NON_TN_FP8_CC_TEXT, Recipe, check_fp8_attention, check_precision, recipe,
                        recipes)
from .attention_kernels import DEFAULT_ATTENTION_KERNEL, attention_kernel
from .cuda_graphs import scopes
from ..vocabulary import MEGATRON_LOSSES, OP_POLICY, SELECTIVE_MODULES, TORCH_LOSSES, parse_recompute
from .pipeline import parse_layout
from .te_release import default_te_version, te_behaviour, te_release_key, te_releases
from .execution import (BatchLimits, DEFAULT_SEQ_LEN, DEFAULT_SEQ_LEN_SOURCE, DEFAULT_TOKENS_PER_STEP, Execution,
                        ExecutionRequest, Layout, MAX_SEQUENCES, MEGATRON, OBJECTIVES, Overlaps, REASONS, RunOptions,
                        TORCH_FSDP_IMPLS, WAFER_BATCH_RULE, multiples_text, pipeline_reason)

if TYPE_CHECKING:
    from .hardware import HardwareProfile
    from .model import ModelSpec


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


def _optimizer_fields(request: ExecutionRequest, chosen: "_Defaults") -> dict[str, Any]:
    """The optimizer whose state the run holds and its moments' bytes: Megatron-LM's defaults, Adam (--optimizer adam,
    arguments.py L2913) with fp32 moments, unless the request says (the CLI's and the codec's choices check the name);
    each default taken with its reason (freshuser22: none was recorded)."""
    return {"moment_bytes": chosen.pick("moment_bytes", request.moment_bytes, 4, REASONS["moment_bytes"]),
            "optimizer": chosen.pick("optimizer", request.optimizer, "adam", REASONS["optimizer"]),
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
        causal=chosen.pick("causal", request.causal, False, REASONS["causal"]),
        attention_kernel=attention_kernel(DEFAULT_ATTENTION_KERNEL if request.attention_kernel is None
                                         else request.attention_kernel).name,
        loss=chosen.pick("loss", request.loss, "vocab_parallel" if gpu else "fused", REASONS["loss_gpu" if gpu else "loss"]),
        accounting=chosen.pick("accounting", request.accounting, "ideal", REASONS["accounting"]),
        memory_model=chosen.pick("memory_model", request.memory_model, "auto", REASONS["memory_model"]),
        overlap_streaming=request.overlap_streaming,
        gradient_bytes=chosen.pick("gradient_bytes", request.gradient_bytes, 4 if gpu else 2,
                                   REASONS["gradient_bytes_gpu" if gpu else "gradient_bytes_wse"]),
        routing_imbalance=request.routing_imbalance,
        multi_token_prediction=_mtp(request, model, chosen.reasons),
        precision=chosen.pick("precision", request.precision, DEFAULT_PRECISION,  # fu23: a wafer's too
                              REASONS["precision" if gpu else "precision_wse"]),
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
        **_optimizer_fields(request, chosen),
        routing_weights=_routing_weights(model, gpu, chosen, request.routing_weights),
    )
    check_precision(run.precision, profile, run.low_precision_param_gather, run.rht_cast_fusion)
    if gpu:
        run = replace(run, te_version=_te_version(request, chosen, run.recipe))
    if request.te_version is not None and profile.family == "gpu":
        _check_te_version_decides(run.recipe, run.precision, profile)
        _check_te_version_recipe(run)
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


def _check_te_version_decides(r: Recipe, precision: str, profile: "HardwareProfile") -> None:
    """--te-version is refused where no TE release changes the plan (an option parsed but ignored): a recipe with
    neither per-tensor FP8 transposes nor the attention projection's quantised copy (`Recipe.te_release_decides`),
    or delayed-scaling FP8 on a GPU whose FP8 GEMMs are TN-only (every release writes its transposes there, and
    Megatron-Core never sets the projection's save_original_input under delayed scaling)."""
    if not r.te_release_decides:
        decides = ", ".join(n for n, x in recipes().items() if x.te_release_decides)
        raise BtacalcError(f"{{te_version}} decides which transposes TransformerEngine writes for per-tensor FP8 and "
                           f"whether the attention output projection keeps a quantised copy of its input ({decides}); "
                           f"{precision} runs the same under every release btacalc knows")
    cc = profile.chip.capability
    if not r.te_release_decides_on(cc):
        # review: on Hopper the option was shown in the run options and changed nothing; review14: 12.x too
        raise BtacalcError(f"{{te_version}} decides, under {precision}, which transposes TransformerEngine writes "
                           f"where FP8 GEMMs take non-TN layouts (compute capability {NON_TN_FP8_CC_TEXT}); "
                           f"{profile.name} has {cc:.1f}, whose FP8 GEMMs are TN-only: every release writes the "
                           "transposes (and Megatron-Core keeps the projection's quantised copy under every release)")


def _check_te_version_recipe(run: RunOptions) -> None:
    """A --te-version older than the recipe (precision.toml `since_te`: review34, since --te-version reaches
    fp8-blockwise and mxfp8 for the projection's copy, `--te-version 1.10` planned MXFP8 on a TE Megatron-Core builds
    no MXFP8 recipe with; hostile42 found it under NVFP4) is refused. hostile42: under NVFP4 one before the fused RHT
    cast (2.8-2.13: precision.toml rht_cast_fusion_since_te, Recipe.rht_cast_fused_in, which a measured run's TE
    already sets) was timed with the fused cast: the given TE and --rht-cast-fusion must agree."""
    r = run.recipe
    if r.since_te and te_release_key(run.te_version) < te_release_key(r.since_te):
        raise BtacalcError(f"{{te_version}} {run.te_version}: {run.precision} ({r.te_recipe}) needs TransformerEngine "
                           f"{r.since_te} or later (precision.toml since_te: {r.since_te_source.split(':')[0]})")
    fused = r.rht_cast_fused_in(run.te_version)
    if r.rht_cast_fusion_since_te and fused != run.rht_cast_fusion:
        kernels = "one kernel (from" if fused else "two kernels (one from"
        raise BtacalcError(f"{{te_version}} {run.te_version} casts {run.precision}'s rowwise and Hadamard-transformed "
                           f"copies in {kernels} TE {r.rht_cast_fusion_since_te}, precision.toml): "
                           + ("{rht_cast_fusion} contradicts it; leave it out" if fused else
                              "give {rht_cast_fusion} with it"))


def _te_version(request: ExecutionRequest, chosen: Any, r: Recipe) -> str:
    """The GPU run's TransformerEngine version, checked (te_releases.toml; a malformed one is a one-line error); the
    default, with its reason where the release changes the recipe's plan (`Recipe.te_release_decides`)."""
    if request.te_version is None and not r.te_release_decides:
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
    # hostile39 / freshuser24: accepted on a wafer, where they changed the plan's loss memory for kernels it has not
    (lambda run, layout: run.loss in MEGATRON_LOSSES,  # Megatron-Core's and TransformerEngine's (formulas/head.toml)
     "{loss} vocab_parallel, native_fused and te_fused are Megatron-Core's and TransformerEngine's cross-entropy on a "
     "GPU; a wafer-scale run's loss is the compiler's: fused (the default) or stored"),
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
    ("vocab_multiple", "vocab_multiple", None),
    ("overlap_grad_reduce", "overlaps.grad_reduce", None),
    ("overlap_param_gather", "overlaps.param_gather", None),
    ("tp_comm_overlap", "overlaps.tp_comm", None),
    ("overlap_p2p", "overlaps.p2p", None),
    ("overlap_all_to_all", "overlap_all_to_all", False),
    ("overlap_all_to_all", "overlaps.all_to_all", False),
    ("early_attn_release", "overlaps.early_attn_release", False),
    ("delay_wgrad", "overlaps.delay_wgrad", False),
    ("cuda_max_connections", "overlaps.max_connections", None),
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
    check_torchtitan_recompute(run, layout, profile.name if "recompute" in chosen.reasons else None)
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
    layout.validate_divides()  # the batch's rule takes DP = devices / (TP·PP·CP)
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
    """The overlaps Megatron-LM refuses beside the options given, each a one-line error (megatron_rules.overlap_refusal),
    and TransformerEngine's userbuffers on a TP group that leaves its NVLink domain (userbuffers_domain_refusal)."""
    from .megatron_rules import overlap_refusal, userbuffers_domain_refusal

    o = layout.overlap
    why = overlap_refusal(layout.tensor_parallel, layout.sequence_parallel, o.tp_comm, o.grad_reduce, o.param_gather,
                          layout.zero_stage >= 1 or layout.fsdp)
    if why is None and layout.userbuffers:
        why = userbuffers_domain_refusal(layout.tensor_parallel, layout.devices, layout.devices_per_node)
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


def torchtitan_recompute_refusal(policy: str, default_of: Optional[str] = None) -> Optional[str]:
    """Why torchtitan (PyTorch FSDP2, 1-D or beside DTensor's TP) cannot recompute `policy` (None: it can):
    `selective` and a module list are Megatron-Core's recompute modules, which torchtitan has none of. Plan
    (`check_torchtitan_recompute`) and `formulas --dtensor-tp` ask this."""
    if policy in TORCHTITAN_RECOMPUTE:
        return None
    given = f"{default_of}'s default {{recompute}}" if default_of else "{recompute}"  # hostile32: not typed by the user
    return (f"{given} {policy} is Megatron-Core's module recomputation: torchtitan (PyTorch FSDP2) checkpoints "
            "no layer, whole layers (all, or every n-th by its layer frequency) or its per-op policy (activation "
            "checkpoint mode none / full / selective op): give {recompute} none, full or op")


def check_torchtitan_recompute(run: RunOptions, layout: "Layout", default_of: Optional[str] = None) -> None:
    """A PyTorch FSDP2 plan (torchtitan) recomputes as torchtitan can (`torchtitan_recompute_refusal`; the plan had
    counted Megatron's modules, and a search under FSDP2 ranked them). FSDP1 (llm-foundry, whose
    activation_checkpointing_target picks modules) is not checked here. `default_of`: the profile whose default
    the policy is, where the user gave none (the refusal names it, not an option the user did not type)."""
    refusal = torchtitan_recompute_refusal(run.recompute, default_of) if layout.fsdp2 else None
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
    (L2860-2867); a recomputed module not inside its own graph under the dropout it draws random numbers for
    (core_attn with attn under attention dropout, L2875-2881; mlp with mlp under hidden dropout, L2882-2895)."""
    if not scope or policy == "none":
        return None
    given = f"{{cuda_graph_scope}} {','.join(scope)}"
    if policy == "full":
        return (f"{{recompute}} full with {given}: Megatron-Core runs full recomputation only under a full-iteration "
                "CUDA graph, not per-layer ones (transformer_config.py L2852-2855 @ d98e8a64)")
    modules = set(SELECTIVE_MODULES if policy == "selective" else policy.split(","))
    refused = [(module, graph) for module, graph, needed in (("moe", "moe_router", True),
                                                              ("core_attn", "attn", model.attention_dropout),
                                                              ("mlp", "mlp", model.hidden_dropout))
               if module in modules and graph in scope and needed]
    if not refused:
        return None
    module, graph = refused[0]
    why = ("refuses the moe recompute module with the moe_router graph (transformer_config.py L2860-2867" if
           module == "moe" else f"refuses recomputing a graphed module under the model's "
           f"{'attention' if graph == 'attn' else 'hidden'} dropout (transformer_config.py "
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
    chunked = model.chunk_refusal(run.seq_len)
    if chunked is not None:
        raise BtacalcError(chunked)
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
    if profile.family == "gpu" and request.vocab_multiple is None:
        chosen.reasons["vocab_multiple"] = REASONS["vocab_multiple"]
    return Layout(devices=devices, expert_parallel=ep, zero_stage=zero, devices_per_node=node,
                  tensor_parallel=tp, sequence_parallel=sp, pipeline_parallel=pp,
                  virtual_pipeline=sizes["virtual_pipeline"], context_parallel=sizes["context_parallel"],
                  expert_tensor_parallel=etp, fsdp=request.fsdp, fsdp_impl=request.fsdp_impl,
                  stage_split=request.stage_split,
                  deepep=request.deepep, allgather_dispatcher=request.allgather_dispatcher, hybridep=request.hybridep,
                  dispatcher_sms=request.dispatcher_sms,
                  nccl_ub=request.nccl_ub, nvls=request.nvls, ddp_bucket_params=request.ddp_bucket_params,
                  ddp_num_buckets=request.ddp_num_buckets, microbatch_group=request.microbatch_group,
                  vocab_multiple=request.vocab_multiple, ddp_buckets_every_stage=request.ddp_buckets_every_stage,
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
                    delay_wgrad=o.delay_wgrad,
                    max_connections=chosen.pick("cuda_max_connections", o.max_connections, None,
                                                REASONS["cuda_max_connections"]) if all_to_all else o.max_connections)


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


def pipeline_micro_batch(limits: BatchLimits, micro_batches: Optional[int], pipeline_parallel: int) -> Optional[int]:
    """The micro-batch a plan runs under pipeline parallelism when a global batch is given without --micro-batch or
    --grad-accum (README, --grad-accum's default): one sequence, as Megatron's published recipes, or with --tiles G
    and --tile-batch b given, the smallest micro-batch they leave, G x b (a missing one at 1); None otherwise.
    freshuser23: with --tiles 2 the rule fixed a micro-batch of 1 beside them and refused the plan naming a --grad-accum
    the user never gave ("--grad-accum 32 x --tiles 2 = 64 does not divide --global-batch 1024")."""
    if pipeline_parallel <= 1 or limits.global_batch is None or micro_batches is not None \
            or limits.micro_batch is not None:
        return None
    return (limits.tiles or 1) * (limits.tile_batch or 1)


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
    smallest = pipeline_micro_batch(limits, m, layout.pipeline_parallel)
    if smallest is not None:
        # review30: a global batch the ranks or the given tile sizes do not divide is refused naming them (the rule's
        # micro-batch was refused as a --micro-batch nobody gave: "not a multiple of DP 8 x --micro-batch 3")
        limits.validate(dp)
        mb = chosen.pick("micro_batch", None, smallest, REASONS["micro_batch_pipeline"])
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
                           f"accumulation M = N / (DP·micro batch)): give {multiples_text(n, dp * mb)}")
    if m is not None and m != n // (dp * mb):
        raise BtacalcError(f"{{micro_batches}} {m} differs from {{global_batch}} {n} / (DP {dp} x {{micro_batch}} "
                           f"{mb}) = {n // (dp * mb)}")
    return replace(limits, micro_batches=n // (dp * mb), micro_batch=None)
