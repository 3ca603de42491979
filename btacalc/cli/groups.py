"""Option groups every planning command shares: declared once as a dataclass and its command-line options, and
spliced into each command's signature by `takes_option_groups`.

- `RecipeOptions`: the training recipe (MTP, FP8 details, the TransformerEngine release, the layers kept in BF16,
  early-stop recomputation, capacity).
- `LayoutOptions`: the GPU layout and its kernels (Megatron's TP/SP/PP/VP/CP/ETP, the pipeline split, FSDP, the
  MoE dispatcher, NCCL's registered buffers, the DDP buckets, CUDA graphs, the optimizer's state).

plan, sweep, compare and whatif each plan as `plan` plans, so each takes both groups under the same flags, with
the same defaults (review6: a default written in two places meant two things); a command whose rows include
wafer-scale systems applies the layout group to its GPU rows only (planning/compare.py)."""

from __future__ import annotations

import functools
import inspect
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

from ..errors import BtacalcError
from .options import (AccountEmbeddingOpt, AccountLossOpt, AllgatherDispatcherOpt, AttentionKernelOpt, Bf16EndOpt,
                      Bf16StartOpt, CapacityFactorOpt, CheckpointEarlyStopOpt, CpOpt, CpuOffloadOpt,
                      CudaGraphScopeOpt, CudaMaxConnectionsOpt, DdpBucketSizeOpt, DdpNumBucketsOpt, DeepEpOpt,
                      DelayWgradOpt,
                      DispatcherSmsOpt, EagerKernelsOpt, EarlyAttnReleaseOpt, EtpOpt, FirstStageOpt, Fp8AttentionOpt,
                      Fp8ParamGatherOpt, FsdpImplOpt, FsdpOpt, GradBytesOpt, HybridEpOpt, LastStageOpt,
                      MicrobatchGroupOpt, MomentsOpt, MOMENT_BYTES, Moments, MtpOpt, NcclUbOpt, NvlsOpt, Optimizer,
                      OptimizerOpt, OverlapGradOpt, OverlapP2pOpt, OverlapParamOpt, PadToCapacityOpt,
                      PipelineLayoutOpt, PpOpt, PrecisionAwareOpt, RecomputeLayersOpt, RhtCastFusionOpt, RoutingOpt,
                      SpOpt, TeVersionOpt, TpOpt, TpOverlapOpt, VocabMultipleOpt, VpOpt, WgradFusionOpt, value)


@dataclass(frozen=True)
class RecipeOptions:
    """The recipe options plan, sweep, compare and whatif share (each command's --precision is its own: compare takes
    a list of them), as the command line gave them."""

    mtp: Optional[bool] = None
    fp8_param_gather: bool = False
    fp8_attention: bool = False
    rht_cast_fusion: bool = True
    te_version: Optional[str] = None
    gradient_accumulation_fusion: bool = True
    bf16_layers_at_start: int = 0
    bf16_layers_at_end: int = 0
    checkpoint_early_stop: bool = False
    recompute_layers: int = 0
    capacity_factor: Optional[float] = None
    pad_to_capacity: bool = False

    def request_fields(self) -> dict[str, Any]:
        """The ExecutionRequest fields these options set (--mtp is multi_token_prediction; the rest keep their name)."""
        fields = asdict(self)
        fields["multi_token_prediction"] = fields.pop("mtp")
        return fields


# RecipeOptions' fields as command-line options: (type, option), in the order --help lists them
RECIPE_OPTIONS: dict[str, tuple[Any, Any]] = {
    "mtp": (Optional[bool], MtpOpt), "fp8_param_gather": (bool, Fp8ParamGatherOpt),
    "fp8_attention": (bool, Fp8AttentionOpt), "rht_cast_fusion": (bool, RhtCastFusionOpt),
    "te_version": (Optional[str], TeVersionOpt),
    "gradient_accumulation_fusion": (bool, WgradFusionOpt), "bf16_layers_at_start": (int, Bf16StartOpt),
    "bf16_layers_at_end": (int, Bf16EndOpt), "checkpoint_early_stop": (bool, CheckpointEarlyStopOpt),
    "recompute_layers": (int, RecomputeLayersOpt), "capacity_factor": (Optional[float], CapacityFactorOpt),
    "pad_to_capacity": (bool, PadToCapacityOpt)}


@dataclass(frozen=True)
class LayoutOptions:
    """The GPU layout and kernel options plan, sweep, compare and whatif share, as the command line gave them (None:
    not given, the plan's default and its reason stand)."""

    tp: Optional[int] = None
    sequence_parallel: Optional[bool] = None
    pp: Optional[int] = None
    vp: Optional[int] = None
    cp: Optional[int] = None
    etp: Optional[int] = None
    first_stage_layers: Optional[int] = None
    last_stage_layers: Optional[int] = None
    pipeline_layout: Optional[str] = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    fsdp: bool = False
    fsdp_impl: Optional[str] = None
    grad_bytes: Optional[int] = None
    routing_imbalance: float = 1.0
    overlap_grad_reduce: Optional[bool] = None
    overlap_param_gather: Optional[bool] = None
    tp_comm_overlap: Optional[bool] = None
    overlap_p2p: Optional[bool] = None
    early_attn_release: bool = False
    delay_wgrad_compute: bool = False
    cuda_max_connections: Optional[int] = None
    deepep: bool = False
    hybridep: bool = False
    allgather_dispatcher: bool = False
    dispatcher_sms: Optional[int] = None
    nccl_ub: bool = False
    nvls: bool = False
    ddp_bucket_size: Optional[int] = None
    ddp_num_buckets: Optional[int] = None
    microbatch_group_size: Optional[int] = None
    vocab_multiple: Optional[int] = None
    cuda_graph_scope: Optional[str] = None
    attention_kernel: Optional[str] = None
    eager_kernels: bool = False
    cpu_offloading_num_layers: int = 0
    optimizer_moments: Optional[Moments] = None
    precision_aware_optimizer: Optional[bool] = None
    optimizer: Optional[Optimizer] = None

    def request_fields(self) -> dict[str, Any]:
        """The ExecutionRequest fields these options set (bad combinations: one-line errors)."""
        from ..config.execution import OverlapRequest
        from ..config.pipeline import StageSplit

        moments = None if self.optimizer_moments is None else MOMENT_BYTES[self.optimizer_moments.value]
        if self.precision_aware_optimizer is False and moments == 2:
            # review28: bf16 moments imply the precision-aware optimizer; an explicit --no-... was overridden in silence
            raise BtacalcError("{precision_aware_optimizer} off with {moment_bytes} bf16: Megatron-Core keeps Adam's "
                               "moments in bf16 only under the precision-aware optimizer (optimizer_config.py L466-479 "
                               "@ d98e8a64); give one")
        return {
            "tensor_parallel": self.tp, "sequence_parallel": self.sequence_parallel, "pipeline_parallel": self.pp,
            "virtual_pipeline": self.vp, "context_parallel": self.cp, "expert_tensor_parallel": self.etp,
            "stage_split": StageSplit(self.first_stage_layers, self.last_stage_layers, self.pipeline_layout,
                                      self.account_for_embedding_in_pipeline_split,
                                      self.account_for_loss_in_pipeline_split),
            "fsdp": self.fsdp, "fsdp_impl": self.fsdp_impl, "gradient_bytes": self.grad_bytes,
            "routing_imbalance": self.routing_imbalance,
            "overlaps": OverlapRequest(grad_reduce=self.overlap_grad_reduce, param_gather=self.overlap_param_gather,
                                       tp_comm=self.tp_comm_overlap, p2p=self.overlap_p2p,
                                       early_attn_release=self.early_attn_release,
                                       delay_wgrad=self.delay_wgrad_compute,
                                       max_connections=self.cuda_max_connections),
            "deepep": self.deepep, "hybridep": self.hybridep, "allgather_dispatcher": self.allgather_dispatcher,
            "dispatcher_sms": self.dispatcher_sms, "nccl_ub": self.nccl_ub, "nvls": self.nvls,
            "ddp_bucket_params": self.ddp_bucket_size, "ddp_num_buckets": self.ddp_num_buckets,
            "microbatch_group": self.microbatch_group_size, "vocab_multiple": self.vocab_multiple,
            "cuda_graph_scope": cuda_graph_scopes(self.cuda_graph_scope),
            "attention_kernel": self.attention_kernel, "eager_kernels": self.eager_kernels,
            "cpu_offload_layers": self.cpu_offloading_num_layers, "moment_bytes": moments,
            "precision_aware_optimizer": bool(self.precision_aware_optimizer), "optimizer": value(self.optimizer)}


# LayoutOptions' fields as command-line options: (type, option), in the order --help lists them
LAYOUT_OPTIONS: dict[str, tuple[Any, Any]] = {
    "tp": (Optional[int], TpOpt), "sequence_parallel": (Optional[bool], SpOpt), "pp": (Optional[int], PpOpt),
    "vp": (Optional[int], VpOpt), "cp": (Optional[int], CpOpt), "etp": (Optional[int], EtpOpt),
    "first_stage_layers": (Optional[int], FirstStageOpt), "last_stage_layers": (Optional[int], LastStageOpt),
    "pipeline_layout": (Optional[str], PipelineLayoutOpt),
    "account_for_embedding_in_pipeline_split": (bool, AccountEmbeddingOpt),
    "account_for_loss_in_pipeline_split": (bool, AccountLossOpt),
    "fsdp": (bool, FsdpOpt), "fsdp_impl": (Optional[str], FsdpImplOpt), "grad_bytes": (Optional[int], GradBytesOpt),
    "routing_imbalance": (float, RoutingOpt),
    "overlap_grad_reduce": (Optional[bool], OverlapGradOpt), "overlap_param_gather": (Optional[bool], OverlapParamOpt),
    "tp_comm_overlap": (Optional[bool], TpOverlapOpt), "overlap_p2p": (Optional[bool], OverlapP2pOpt),
    "early_attn_release": (bool, EarlyAttnReleaseOpt), "delay_wgrad_compute": (bool, DelayWgradOpt),
    "cuda_max_connections": (Optional[int], CudaMaxConnectionsOpt),
    "deepep": (bool, DeepEpOpt), "hybridep": (bool, HybridEpOpt),
    "allgather_dispatcher": (bool, AllgatherDispatcherOpt),
    "dispatcher_sms": (Optional[int], DispatcherSmsOpt), "nccl_ub": (bool, NcclUbOpt), "nvls": (bool, NvlsOpt),
    "ddp_bucket_size": (Optional[int], DdpBucketSizeOpt), "ddp_num_buckets": (Optional[int], DdpNumBucketsOpt),
    "microbatch_group_size": (Optional[int], MicrobatchGroupOpt), "vocab_multiple": (Optional[int], VocabMultipleOpt),
    "cuda_graph_scope": (Optional[str], CudaGraphScopeOpt),
    "attention_kernel": (Optional[str], AttentionKernelOpt), "eager_kernels": (bool, EagerKernelsOpt),
    "cpu_offloading_num_layers": (int, CpuOffloadOpt), "optimizer_moments": (Optional[Moments], MomentsOpt),
    "precision_aware_optimizer": (Optional[bool], PrecisionAwareOpt), "optimizer": (Optional[Optimizer], OptimizerOpt)}

# a command's parameter of these names receives the group, gathered from its options
GROUPS: dict[str, tuple[type, dict[str, tuple[Any, Any]]]] = {
    "recipe": (RecipeOptions, RECIPE_OPTIONS), "layout": (LayoutOptions, LAYOUT_OPTIONS)}


def takes_option_groups(command: Callable[..., int]) -> Callable[..., int]:
    """`command` with each option group (GROUPS) it names as a parameter (`recipe`, `layout`) spread into its
    command-line options in that parameter's place; the parameter receives them gathered. One declaration of each
    set for every command that takes it."""
    own = list(inspect.signature(command, eval_str=True).parameters.values())
    taken = {p.name: GROUPS[p.name] for p in own if p.name in GROUPS}
    params = [q for p in own for q in ([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                          default=option, annotation=kind)
                                        for name, (kind, option) in taken[p.name][1].items()]
                                       if p.name in taken else [p])]

    @functools.wraps(command)
    def with_groups(**given: Any) -> int:
        gathered = {group: cls(**{name: given.pop(name) for name in options})
                    for group, (cls, options) in taken.items()}
        return command(**gathered, **given)

    # typer reads the signature
    with_groups.__signature__ = inspect.Signature(params, return_annotation=int)  # type: ignore[attr-defined]
    with_groups.__annotations__ = {p.name: p.annotation for p in params} | {"return": int}
    return with_groups


def cuda_graph_scopes(text: Optional[str], default: tuple[str, ...] = ()) -> tuple[str, ...]:
    """--cuda-graph-scope's comma-separated scopes (checked with the layout: config/cuda_graphs.py); not given:
    `default` (an imported run's)."""
    from .parsing import comma_entries

    if text is None:
        return tuple(default)
    scopes = comma_entries(text, "--cuda-graph-scope", unique=False)  # repeats: named by check_scopes
    if not scopes:
        raise BtacalcError(f"--cuda-graph-scope {text!r} names no scope (leave the option out for none)")
    return tuple(scopes)
