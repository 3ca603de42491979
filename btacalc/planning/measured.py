"""`btacalc validate --measured`: predictions against measured training runs.

A run file is ``{"runs": [...]}`` (the format of btacalc/data/measured_runs.json, shipped with its
sources; its schema and reader are `planning.run_file`).
Each run is expressed as an `ExecutionRequest` on the run's model and hardware, planned
with the run's batch, and its predicted tokens/s per device (and step time) set against the measured
ones: error = predicted / measured - 1.

A run may also give its peak memory per device (`measured.peak_alloc_gib`: torch
`max_memory_allocated`; `measured.peak_reserved_gib`: `max_memory_reserved`; GiB = 2^30 B): the
run's plan predicts both (the worst pipeline stage's allocated and reserved bytes, config/hardware.py
`Reserves`) and the memory error (predicted / measured - 1, allocated when given, else reserved) is
shown beside the time error and gated by its own bands. A memory-only run (no tokens/s, no step time)
has a memory error only; a run whose plan does not fit still has its memory predicted.

Runs marked `role: fit` may be used by `validate --calibrate` to fit the named efficiency factors of
the calibration family (btacalc/data/calibration.toml: one per GPU architecture, and the wafers) that
holds their profile; every `role: check` run is a prediction. A run btacalc cannot express yet (a
layout it does not model, an unknown model or device) is listed with the reason, never counted as
passing.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from pydantic import (BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler,
                      model_serializer, model_validator)

from ..config.execution import MEGATRON, BatchLimits, ExecutionRequest, OverlapRequest
from ..config.hardware import HardwareProfile, resolve_hardware
from ..config.pipeline import StageSplit
from ..config.precision import recipe as precision_recipe
from ..config.te_release import container_te
from ..config.cerebras_release import release_gain
from ..config.presets import resolve_model
from ..config.attention_kernels import attention_kernel
from ..config.tp_overlap import ub_table
from ..config.workspaces import Workspace
from ..errors import BtacalcError
from ..vocabulary import parse_recompute
from ..model.routing_balance import forced_balance_imbalance
from ..config.text import Name
from ..paths import package_data
from .plan import device_memory, make_plan
from .precision_pairs import PairBands, PairReport, precision_pairs
from .publishers import PublisherBaseline, publisher_of
from .report import ErrorSummary, PlanReport, summarize_errors
from .run_file import GIB, Measured, MeasuredRun, Recipe, load_runs, software_year

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BANDS_FILE = "validation_bands.toml"


class RunPrediction(BaseModel):
    tokens_per_s_per_device: Optional[float] = None
    step_time_s: Optional[float] = None
    peak_alloc_gib: Optional[float] = None
    peak_reserved_gib: Optional[float] = None


class RunResult(BaseModel):
    id: Name
    role: str
    family: str = Field(description="device family (gpu / wse) the run's errors are summarised and gated by; the "
                        "factors are calibrated per calibration family (calibration.toml: one per GPU architecture)")
    model: str
    hw: str
    devices: int
    expressible: bool
    reason: str = Field("", description="why the run cannot be expressed or predicted")
    predicted: RunPrediction = RunPrediction()
    measured: Measured
    error: Optional[float] = Field(None, description="predicted / measured - 1 (tokens/s per device, else step time)")
    memory_error: Optional[float] = Field(None, description="predicted / measured - 1 (peak allocated memory, else "
                                          "peak reserved)")
    known_gap: str = ""
    memory_known_gap: str = ""
    known_gap_summary: str = Field("", description="known_gap in one line (the run's known_gap_summary; empty: none "
                                   "given)")
    memory_known_gap_summary: str = Field("", description="memory_known_gap in one line, as known_gap_summary")
    ep_overlap: bool = Field(False, description="the run's plan hides the expert exchange behind another micro-batch "
                             "(Megatron's --overlap-moe-expert-parallel-comm, as the plan runs it): what a plan's "
                             "expected error is matched on (docs/clock.md 'ovlprof')")
    software_date: Optional[str] = Field(None, description="YYYY-MM of the software that measured the run (the run's "
                                         "software_date)")
    defaulted: dict[str, str] = Field(default_factory=dict, description="what the run's plan took by default "
                                      "because neither the run nor its recipe states it, and why")
    not_timed: dict[str, str] = Field(default_factory=dict, description="what the run's recipe sets that btacalc "
                                      "expresses but does not time (recipe field -> what and why)")
    carried: dict[str, Any] = Field(default_factory=dict, description="other keys of the run, carried through")
    release_gain: Optional[float] = Field(None, description="a wafer run of an older Cerebras release (its `release`): "
                                          "the training-speed gains Cerebras states for the releases after it "
                                          "(btacalc/data/cerebras_releases.toml), by which its predicted rate is "
                                          "divided; null: none")
    release_gain_sources: list[str] = Field(default_factory=list, description="where each gain in release_gain is "
                                            "stated")

    @model_serializer(mode="wrap")
    def _release_gain_only_where_counted(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The release gain's two keys only on a run whose release lacks a gain: a GPU run's result, or a wafer
        run's of a recent release, reads as it did before wafer25 (validate --json compares byte for byte)."""
        data: dict[str, Any] = handler(self)
        if self.release_gain is None:
            data.pop("release_gain", None)
            data.pop("release_gain_sources", None)
        return data


class FamilySummary(BaseModel):
    role: str
    family: str
    n: int
    mean_abs_error: Optional[float]
    median_abs_error: Optional[float]
    max_abs_error: Optional[float]
    not_expressible: list[str] = Field(default_factory=list, description="run id: reason")
    memory_n: int = 0
    memory_mean_abs_error: Optional[float] = None
    memory_max_abs_error: Optional[float] = None


def device_family(profile: HardwareProfile) -> str:
    """Runs are summarised and gated per device family, GPUs together and wafers together (the factors are
    fitted per calibration family instead, planning/calibration.py: one per GPU architecture)."""
    return profile.family


# Run fields -> ExecutionRequest fields (every layout field a run file can carry is modelled).
LAYOUT_FIELDS: dict[str, str] = {
    "ep": "expert_parallel",
    "zero": "zero_stage",
    "tp": "tensor_parallel",
    "pp": "pipeline_parallel",
    "vp": "virtual_pipeline",
    "cp": "context_parallel",
    "etp": "expert_tensor_parallel",
    "fsdp": "fsdp",
    "sequence_parallel": "sequence_parallel",
}


# The plan's parameters a run file sets under another name (LAYOUT_FIELDS' and the sequence length's): a plan's
# refusal of a run names the run file's field, not the library's parameter (`tp`, not tensor_parallel)
RUN_FIELD_NAMES: dict[str, str] = {**{request: field for field, request in LAYOUT_FIELDS.items()}, "seq_len": "seq"}


def _recipe_names() -> dict[str, str]:
    """The request fields a run's `recipe` block sets under another name (_RECIPE_COPIED), as `recipe.FIELD`
    (review29: a refusal of `recipe.gpus_per_node` named devices_per_node)."""
    return {request: f"recipe.{field}" for field, request in _RECIPE_COPIED.items() if field != request}


def in_run_names(exc: BtacalcError) -> str:
    """`exc`'s message with each parameter a run file sets written as the run file's field (RUN_FIELD_NAMES)."""
    names = {**_recipe_names(), **RUN_FIELD_NAMES}
    return exc.render({p: names.get(p, p) for p in exc.params})


# What Megatron-LM does when a GPU run file leaves a setting out, where btacalc's plan default (chosen for
# planning, with its own reason) differs: field -> (value, reason). `validate` lists each one it applies.
MEGATRON_RUN_DEFAULTS: dict[str, tuple[Any, str]] = {
    "recompute": ("none", "none: Megatron-LM's default without --recompute-granularity / --recompute-modules "
                          f"({MEGATRON} megatron/core/transformer/transformer_config.py L532: "
                          "recompute_granularity None)"),
}


# What a --deterministic-mode run does that btacalc does not time (Megatron-LM @ d98e8a64 megatron/training/
# determinism.py L25-31 sets the environment, L158 torch.use_deterministic_algorithms(True)); said in the run's notes.
# NCCL_ALGO=Ring: NCCL's tuning model then weighs rings alone (RunOptions.nccl_ring_only; gpu/nccl.py would
# otherwise take a tree for an all-reduce where its model says the tree is faster). Its
# --no-gradient-accumulation-fusion is a recipe field of its own (gradient_accumulation_fusion).
DETERMINISTIC_UNMODELLED = (
    "--deterministic-mode: NCCL_ALGO=Ring is timed (NCCL's tuning model weighs rings alone, no tree all-reduce); "
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 is timed where the deterministic attention backward has a published cost "
    "(attention_kernels.toml deterministic_backward: cuDNN on sm100, 1.152x the default backward, cudnn-frontend @ "
    "3929da2e GB200 benchmark); not timed: TransformerEngine's deterministic attention backward on sm90 (cuDNN's "
    "dP-workspace backward, cudnn-frontend scaled_dot_product_flash_attention.h L1482-1487) and sm80 (FlashAttention's "
    "deterministic backward: TE @ 4329ff84 dot_product_attention/utils.py L1399-1462 drops cuDNN there), which have "
    "no published cost against the default backward, torch.use_deterministic_algorithms (the word embedding's "
    "backward is PyTorch's sort-based kernel either way above 3,072 indices, pytorch/pytorch @ 1c94016e "
    "aten/src/ATen/native/cuda/Embedding.cu embedding_dense_backward_cuda; the vocab-parallel cross-entropy's "
    "index_put: one sort of the micro-batch's token indices, microseconds) and "
    "CUBLAS_WORKSPACE_CONFIG=:4096:8 (a smaller cuBLAS workspace)")

LAYERNORM_SM_MARGIN_UNMODELLED = (
    "NVTE_FWD/BWD_LAYERNORM_SM_MARGIN {n}: TransformerEngine launches its LayerNorm kernels on SMs - {n} SMs "
    "(TransformerEngine @ d0067d0d transformer_engine/pytorch/csrc/extensions/normalization.cpp L41, L54, L178), "
    "leaving them to overlapped communication; not timed: the norms are bandwidth-bound, so they slow by at most "
    "SMs / (SMs - {n}) (docs/runs.md)")


# An MoE run that does not name its dispatcher: what btacalc assumes, said in the run's defaults.
DISPATCHER_DEFAULT = ("alltoall: the published recipe does not name its dispatcher, and the MoE recipes of NVIDIA's "
                      "publications btacalc holds that do name one use alltoall or flex; Megatron-LM's own default "
                      f"--moe-token-dispatcher-type is allgather ({MEGATRON} "
                      "megatron/core/transformer/transformer_config.py L891), which a launch without the flag runs "
                      "and btacalc plans as such (--allgather-dispatcher): state the dispatcher in the recipe")


def run_defaults(run: MeasuredRun, family: str) -> dict[str, tuple[Any, str]]:
    """The defaults a GPU run takes because neither the run nor its recipe states them: its publisher's baseline
    recipe (planning/publishers.py) for the fields its own recipe leaves out, its routing, and Megatron's defaults
    after that."""
    if family != "gpu":
        return {}
    out: dict[str, tuple[Any, str]] = {}
    baseline = _baseline_of(run)
    taken = with_publisher_baseline(run)
    if baseline is not None and _recipe_dump(taken.recipe) != _recipe_dump(run.recipe):  # it filled something in
        out["recipe"] = (baseline.name, baseline.reason(run.precision, resolve_model(run.model).is_moe,
                                                        _stated_recompute(run)))
        if _takes_baseline_routing(run, baseline):
            out["router_force_load_balancing"] = (True, f"{baseline.name}: MoE runs ran force-balanced routing "
                                                  f"({baseline.routing_source})")
    stated = taken.with_recipe()
    out.update({k: v for k, v in MEGATRON_RUN_DEFAULTS.items() if getattr(stated, k) is None})
    return out


def _recipe_dump(recipe: Optional[Recipe]) -> Optional[dict[str, Any]]:
    return None if recipe is None else recipe.model_dump(exclude={"source"})


def _baseline_of(run: MeasuredRun) -> Optional[PublisherBaseline]:
    """The publisher baseline a run takes: a GPU run given by its layout fields."""
    if run.megatron_args is not None:
        return None
    return publisher_of(run.source)


def _stated_recompute(run: MeasuredRun) -> Optional[str]:
    """The recompute granularity the row (or its own recipe) states as one word, for a publisher's by_recompute."""
    stated = run.with_recipe().recompute
    return stated if isinstance(stated, str) else None


# Layout settings a run states in its own fields, which a recipe's same-named field would override (with_recipe)
_ROW_STATED = ("vp", "sequence_parallel", "zero", "recompute", "micro_batch")


def _merged_recipe(run: MeasuredRun, fields: dict[str, Any]) -> Recipe:
    """The publisher's recipe `fields` under what the row states, field by field: the row's own recipe, and its layout
    fields (a baseline never overrides the row's recompute, SP, ZeRO, VP or micro-batch); the gradient precision
    counts as stated by grad_reduce_in_bf16 or grad_bytes, each overlap by itself; the rest of the row's recipe is
    kept as it is."""
    base = Recipe.model_validate(fields, strict=False)
    own = run.recipe if run.recipe is not None else Recipe(source=base.source)
    changes: dict[str, Any] = {
        name: getattr(base, name) for name in base.model_fields_set - {"source", "overlaps", "grad_reduce_in_bf16"}
        if name not in own.model_fields_set and not (name in _ROW_STATED and getattr(run, name) is not None)}
    if "grad_reduce_in_bf16" in base.model_fields_set and own.grad_reduce_in_bf16 is None and own.grad_bytes is None:
        changes["grad_reduce_in_bf16"] = base.grad_reduce_in_bf16
    o, b = own.overlaps, base.overlaps
    changes["overlaps"] = o.model_copy(update={k: getattr(b, k) for k in ("grad_reduce", "param_gather", "tp_comm")
                                               if getattr(o, k) is None})
    return own.model_copy(update=changes)


def _takes_baseline_routing(run: MeasuredRun, baseline: PublisherBaseline) -> bool:
    return (baseline.force_balanced_moe_routing and run.router_force_load_balancing is None
            and resolve_model(run.model).is_moe)


def with_publisher_baseline(run: MeasuredRun) -> MeasuredRun:
    """`run` with its publisher's baseline recipe under its own (the fields it leaves out) and routing; else `run`."""
    baseline = _baseline_of(run)
    if baseline is None:
        return run
    fields = baseline.recipe_for(run.precision, resolve_model(run.model).is_moe, _stated_recompute(run))
    changes: dict[str, Any] = {"recipe": _merged_recipe(run, fields)}
    if _takes_baseline_routing(run, baseline):
        changes["router_force_load_balancing"] = True
    return run.model_copy(update=changes)


def express(run: MeasuredRun, family: str = "gpu") -> tuple[Optional[ExecutionRequest], str]:
    """The request that reproduces `run`, or None and the reason it cannot be expressed yet.

    The global batch is the batch per optimizer step over all data-parallel ranks (Megatron) or all
    systems (Cerebras); a given micro-batch fixes G*b and gradient accumulation follows (M = N / (DP
    micro-batch)); without one, the micro-batching is chosen (on wafers, as the compiler would)."""
    if run.megatron_args is not None:
        return _express_megatron(run)
    if family == "gpu":
        run = with_publisher_baseline(run)
    recipe = run.recipe
    run = run.with_recipe()
    changes: dict[str, Any] = {target: getattr(run, name) for name, target in LAYOUT_FIELDS.items()
                               if getattr(run, name) is not None}
    if changes.get("fsdp") is False:
        changes.pop("fsdp")
    recompute = ",".join(run.recompute) if isinstance(run.recompute, list) else run.recompute
    if recompute is None and "recompute" in run_defaults(run, family):
        recompute = MEGATRON_RUN_DEFAULTS["recompute"][0]
    limits = BatchLimits(global_batch=run.global_batch, micro_batch=run.micro_batch)
    if recipe is not None:
        changes.update(_recipe_changes(recipe, run, family))
    if run.router_force_load_balancing:
        imbalance, why = forced_balance_of(run)
        if imbalance is None:
            return None, why
        changes["routing_imbalance"] = imbalance
    # the published low-precision runs use Megatron-Bridge's mixed-precision recipes (btacalc/data/precision.toml
    # bridge_param_gather: FP8 parameters and their all-gather where the recipe turns them on)
    changes.setdefault("fp8_param_gather", precision_recipe(run.precision).bridge_param_gather)
    te = _timed_te_version(run, recipe, family)
    if te is not None:
        changes["te_version"] = te
    return ExecutionRequest(seq_len=run.seq, recompute=recompute, devices=run.devices, limits=limits,
                            precision=run.precision, **changes), ""


# A recipe's fields that pass to the request as they are when the recipe sets them (recipe field: request field)
_RECIPE_COPIED = {"causal": "causal", "attention_kernel": "attention_kernel", "fsdp_impl": "fsdp_impl",
                  "memory_model": "memory_model", "gradient_accumulation_fusion": "gradient_accumulation_fusion",
                  "gpus_per_node": "devices_per_node", "ddp_bucket_size": "ddp_bucket_params",
                  "recompute_layers": "recompute_layers", "routing_weights": "routing_weights",
                  "moe_expert_capacity_factor": "capacity_factor"}
# A recipe's switches that turn request options on when on (recipe field: the request fields it sets);
# --deterministic-mode sets both NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 and NCCL_ALGO=Ring (DETERMINISTIC_UNMODELLED)
_RECIPE_SWITCHES = {"fp8_dot_product_attention": ("fp8_attention",),
                    "checkpoint_early_stop": ("checkpoint_early_stop",), "eager_kernels": ("eager_kernels",),
                    "deterministic_mode": ("deterministic_attention", "nccl_ring_only"),
                    "apex_distributed_adam": ("ddp_buckets_every_stage",),
                    "moe_pad_expert_input_to_capacity": ("pad_to_capacity",)}


def _recipe_changes(recipe: Recipe, run: MeasuredRun, family: str) -> dict[str, Any]:
    """The request options `recipe` sets for `run` (its recipe applied) on a `family` device."""
    o = recipe.overlaps
    changes: dict[str, Any] = dict(
        overlaps=OverlapRequest(grad_reduce=o.grad_reduce, param_gather=o.param_gather, tp_comm=o.tp_comm,
                                early_attn_release=o.early_attn_release, delay_wgrad=o.delay_wgrad,
                                max_connections=o.max_connections),
        overlap_all_to_all=o.all_to_all, attention=recipe.attention, gradient_bytes=recipe.gradient_bytes(),
        deepep=recipe.deepep, hybridep=recipe.hybridep,
        allgather_dispatcher=recipe.moe_token_dispatcher_type == "allgather",
        dispatcher_sms=recipe.dispatcher_sms, cuda_graph_scope=tuple(recipe.cuda_graph_scope),
        nccl_ub=recipe.nccl_ub, nvls=recipe.nvls)
    changes.update({target: getattr(recipe, name) for name, target in _RECIPE_COPIED.items()
                    if getattr(recipe, name) is not None})
    changes.update({target: True for name, targets in _RECIPE_SWITCHES.items() if getattr(recipe, name)
                    for target in targets})
    if recipe.mtp_num_layers is not None:
        changes["multi_token_prediction"] = recipe.mtp_num_layers > 0
    if recipe.cross_entropy_loss_fusion is not None and family == "gpu":
        changes.update(loss=recipe.loss())
    if recipe.torch_cross_entropy is not None and family == "gpu":
        changes.update(loss=recipe.torch_cross_entropy)
    if recipe.exp_avg_dtype is not None:
        changes["moment_bytes"] = 2 if recipe.exp_avg_dtype == "bf16" else 4
    if recipe.use_precision_aware_optimizer:
        changes["precision_aware_optimizer"] = True
    if recipe.optimizer_fp8_recipe is not None:
        changes["optimizer_fp8_recipe"] = recipe.optimizer_fp8_recipe
    if recipe.transformer_engine is not None:
        changes["rht_cast_fusion"] = precision_recipe(run.precision).rht_cast_fused_in(recipe.transformer_engine)
    if recipe.fp8_param_gather is not None:
        changes["fp8_param_gather"] = recipe.fp8_param_gather
    if recipe.tp_overlap_cfg is not None:
        changes["tp_overlap_cfg"] = ub_table(recipe.tp_overlap_cfg)
    if recipe.cpu_offloading_num_layers:
        changes["cpu_offload_layers"] = recipe.cpu_offloading_num_layers
    if recipe.pipeline_layout is not None or recipe.account_for_embedding or recipe.account_for_loss:
        changes["stage_split"] = StageSplit(pipeline_layout=recipe.pipeline_layout,
                                            account_for_embedding=recipe.account_for_embedding,
                                            account_for_loss=recipe.account_for_loss)
    return changes


def run_te_version(run: MeasuredRun, recipe: Optional[Recipe]) -> Optional[str]:
    """The TransformerEngine the run used: its recipe's `transformer_engine` where it states one, else its container's
    where btacalc/data/te_releases.toml names the container its `release` gives; None: the default (the pinned TE)."""
    if recipe is not None and recipe.transformer_engine is not None:
        return recipe.transformer_engine
    found = container_te(run.release)
    return found[0] if found else None


def _timed_te_version(run: MeasuredRun, recipe: Optional[Recipe], family: str = "gpu") -> Optional[str]:
    """The run's TE (`run_te_version`) where it moves the plan: on a GPU, under a recipe whose per-tensor FP8 casts
    follow the TE release there (te_releases.toml) or whose attention projection keeps its quantised copy of O before
    a TE release (precision.toml `proj_saves_original_input_since_te`); None otherwise, as plan refuses --te-version
    for any other recipe, which runs the same under every release (`Recipe.te_release_decides_on`)."""
    te = run_te_version(run, recipe) if family == "gpu" else None
    if te is None:
        return None
    capability = resolve_hardware(run.hw).chip.capability
    return te if precision_recipe(run.precision).te_release_decides_on(capability) else None


def forced_balance_of(run: MeasuredRun) -> tuple[Optional[float], str]:
    """The routing imbalance of a force-balanced run (its recipe applied): the busiest of its EP ranks' expected
    routed tokens over the mean when the micro-batch's tokens of the whole expert-parallel group, EP x b x s /
    (TP x CP) (each rank dispatches its sequence-parallel shard; Megatron requires sequence parallelism for MoE
    with TP > 1), pick their experts at random; or None and why not."""
    model = resolve_model(run.model)
    if not model.is_moe or run.micro_batch is None:
        return None, "router_force_load_balancing needs an MoE model and the run's micro-batch"
    ep, tp, cp = run.ep or 1, run.tp or 1, run.cp or 1
    tokens = ep * run.micro_batch * run.seq // (tp * cp)
    return forced_balance_imbalance(tokens, model.num_experts, model.top_k, ep), ""


# hostile33: a run's layout fields beside megatron_args label it in the report (the launch is what is planned); one that
# contradicts the launch (tp 4 beside --tensor-model-parallel-size 2) was predicted as the launch's in silence
_LAUNCH_SIZES = (("tp", "tensor_parallel"), ("pp", "pipeline_parallel"), ("vp", "virtual_pipeline"),
                 ("cp", "context_parallel"), ("ep", "expert_parallel"), ("etp", "expert_tensor_parallel"),
                 ("zero", "zero_stage"), ("fsdp", "fsdp"), ("sequence_parallel", "sequence_parallel"))


def _check_layout_fields(run: MeasuredRun, req: ExecutionRequest) -> None:
    """A run's size fields must agree with what its megatron_args state (a size the launch leaves out is not
    compared); one line naming the first that does not."""
    pairs = [(f, getattr(run, f), getattr(req, r)) for f, r in _LAUNCH_SIZES]
    pairs.append(("micro_batch", run.micro_batch, req.limits.micro_batch))
    if run.recompute is not None and req.recompute is not None:  # both in canonical form ("core_attn" is selective)
        given = run.recompute if isinstance(run.recompute, str) else ",".join(run.recompute)
        pairs.append(("recompute", parse_recompute(given), parse_recompute(req.recompute)))
    for field, given, launched in pairs:
        if given is not None and launched is not None and given != launched:
            raise BtacalcError(f"{{measured}}: run {run.id}: megatron_args give {field} {launched}, the run's field "
                               f"{field} {given}: make them agree (the launch is what is planned)")


def _express_megatron(run: MeasuredRun) -> tuple[Optional[ExecutionRequest], str]:
    """A run given as Megatron-LM arguments: its request as --from-megatron reads it; the run's own seq, global
    batch and precision must agree with the arguments (they label the run in the report; the precision also pairs
    it with its bf16 twin, precision_pairs)."""
    from ..config.megatron_run import import_megatron, launch_domain

    assert run.megatron_args is not None  # the caller checked
    try:
        imported = import_megatron(run.megatron_args, f"run {run.id}", run.devices)
    except BtacalcError as exc:  # hostile19: the shared decoder's refusals named neither the run nor its field
        reason = exc.template.removeprefix(f"run {run.id}: ")  # import_megatron names its source (hostile20)
        raise BtacalcError(f"{{measured}}: run {run.id}: megatron_args: {reason}") from None
    # as plan --from-megatron --hw reads it
    req = launch_domain(imported.request, resolve_hardware(run.hw), imported.stated_domain)
    if (req.seq_len, req.limits.global_batch) != (run.seq, run.global_batch):
        raise BtacalcError(f"{{measured}}: run {run.id}: megatron_args give seq {req.seq_len} and global batch "
                           f"{req.limits.global_batch}, the run's fields {run.seq} and {run.global_batch}")
    if req.precision != run.precision:  # hostile24: a bf16 row whose launch gives --fp8-format was predicted at FP8
        raise BtacalcError(f"{{measured}}: run {run.id}: megatron_args train {req.precision}, the run's field "
                           f"precision {run.precision}")
    _check_layout_fields(run, req)
    req = _with_release_te(run, req)
    model, shape = resolve_model(run.model), ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size",
                                               "num_experts", "top_k", "vocab_size")
    differ = [k for k in shape if getattr(model, k) != getattr(imported.model, k)]
    if differ:
        return None, f"megatron_args describe another model than {run.model} ({', '.join(differ)} differ)"
    return req, ""


def _with_release_te(run: MeasuredRun, req: ExecutionRequest) -> ExecutionRequest:
    """The TransformerEngine of the run's container (`release`, te_releases.toml) for a launch, as for a run given
    by its fields (`express`): no Megatron-LM flag names the TE, so a launch states it only as a `# btacalc
    option: --te-version` line, which must then agree with the container. Without this a launch's row was planned
    at the pinned TE whatever its container ran."""
    release_te = _timed_te_version(run, None)
    if release_te is None:
        return req
    if req.te_version is not None and req.te_version != release_te:
        raise BtacalcError(f"{{measured}}: run {run.id}: megatron_args give --te-version {req.te_version}, the "
                           f"container its release names ran TransformerEngine {release_te} (te_releases.toml): make "
                           "them agree")
    return req.with_changes(te_version=release_te)


def recipe_unmodelled_notes(run: MeasuredRun) -> dict[str, str]:
    """What a run's recipe asks for that btacalc expresses but does not time, keyed by the recipe field (`validate`
    lists the keys in the run's note, the texts in its JSON)."""
    r = run.recipe
    if r is None:
        return {}
    notes = {}
    if r.deterministic_mode:
        notes["deterministic_mode"] = DETERMINISTIC_UNMODELLED
    if r.layernorm_sm_margin:
        notes["layernorm_sm_margin"] = LAYERNORM_SM_MARGIN_UNMODELLED.format(n=r.layernorm_sm_margin)
    return notes


def predict(run: MeasuredRun, hardware: Callable[[str], HardwareProfile] = resolve_hardware) -> RunResult:
    """`run` predicted; `hardware` resolves the run's device (calibration passes trial profiles)."""
    carried = {k: v for k, v in (run.model_extra or {}).items()}
    base = dict(id=run.id, role=run.role, model=run.model, hw=run.hw, devices=run.devices, measured=run.measured,
                known_gap=run.known_gap, memory_known_gap=run.memory_known_gap, software_date=run.software_date,
                known_gap_summary=run.known_gap_summary, memory_known_gap_summary=run.memory_known_gap_summary,
                carried=carried)
    try:
        profile = hardware(run.hw)
        family = device_family(profile)
        model = run.model_spec()
        # the wafer factors are fitted on runs of recent releases: an older one trains slower by the gains Cerebras
        # states for the releases since (config/cerebras_release.py)
        gain, gain_sources = release_gain(run.release, run.model) if family == "wse" else (1.0, [])
    except BtacalcError as exc:
        return RunResult(**base, family="unknown", expressible=False, reason=str(exc))
    request, reason = express(run, family)
    if request is None:
        return RunResult(**base, family=family, expressible=False, reason=reason)
    try:
        report = make_plan(model, profile, request, baselines=False)
    except BtacalcError as exc:
        return RunResult(**base, family=family, expressible=False, reason=in_run_names(exc))
    memory = _memory_prediction(profile, report, run.measured.peak_rank)
    memory_error = _memory_error(memory, run.measured)
    th = report.throughput
    defaulted = {**report.inputs.defaults, **{k: why for k, (_, why) in run_defaults(run, family).items()}}
    if (model.is_moe and family == "gpu" and run.megatron_args is None
            and (run.recipe is None or run.recipe.moe_token_dispatcher_type is None)):
        defaulted["moe_token_dispatcher_type"] = DISPATCHER_DEFAULT
    if not report.plan.fits or th is None:
        return RunResult(**base, family=family, expressible=False, predicted=memory, memory_error=memory_error,
                         defaulted=defaulted,
                         reason="btacalc says this layout does not fit: " + ("; ".join(report.suggestions) or "memory"))
    pred = memory.model_copy(update=dict(tokens_per_s_per_device=th.tokens_per_s / run.devices / gain,
                                         step_time_s=th.step_time_s * gain))
    return RunResult(**base, family=family, expressible=True, predicted=pred, error=_error(pred, run.measured),
                     ep_overlap=report.parallelism.overlap_all_to_all, memory_error=memory_error, defaulted=defaulted,
                     not_timed=recipe_unmodelled_notes(run),
                     release_gain=gain if gain_sources else None, release_gain_sources=gain_sources)


def _memory_prediction(profile: HardwareProfile, report: PlanReport, rank: str) -> RunPrediction:
    """The allocated and reserved bytes in GiB of the worst pipeline stage, or of the last when the run
    measured the last rank (a GPU plan; a wafer's none)."""
    tensors = report.memory_stages[-1].total if rank == "last" and report.memory_stages else report.memory_bytes["total"]
    dm = report.device_memory
    held = [] if dm is None else [Workspace(w.name, w.library, w.count, w.bytes_each, w.when, w.source)
                                  for w in dm.library_workspaces]
    device = None if dm is None else device_memory(profile, tensors, held)
    if device is None:
        return RunPrediction()
    return RunPrediction(peak_alloc_gib=device.allocated_bytes / GIB, peak_reserved_gib=device.reserved_bytes / GIB)


def _memory_error(pred: RunPrediction, measured: Measured) -> Optional[float]:
    """predicted / measured - 1 of the peak allocated memory when the run gives it, else of the reserved."""
    return _first_error(((pred.peak_alloc_gib, measured.peak_alloc_gib),
                         (pred.peak_reserved_gib, measured.peak_reserved_gib)))


def _error(pred: RunPrediction, measured: Measured) -> Optional[float]:
    """predicted / measured - 1 of the tokens/s per device when the run gives it, else of the step time."""
    return _first_error(((pred.tokens_per_s_per_device, measured.tokens_per_s_per_device),
                         (pred.step_time_s, measured.step_time_s)))


def _first_error(pairs: tuple[tuple[Optional[float], Optional[float]], ...]) -> Optional[float]:
    """predicted / measured - 1 of the first (predicted, measured) pair where both are given."""
    for predicted, value in pairs:
        if value and predicted:
            return predicted / value - 1
    return None


def summarize(results: list[RunResult]) -> list[FamilySummary]:
    out = []
    for role in ("fit", "check"):
        for family in sorted({r.family for r in results if r.role == role}):
            mine = [r for r in results if r.role == role and r.family == family]
            errs = [abs(r.error) for r in mine if r.error is not None]
            mem = [abs(r.memory_error) for r in mine if r.memory_error is not None]
            out.append(FamilySummary(
                role=role, family=family, n=len(errs),
                mean_abs_error=statistics.fmean(errs) if errs else None,
                median_abs_error=statistics.median(errs) if errs else None,
                max_abs_error=max(errs) if errs else None,
                not_expressible=[f"{r.id}: {r.reason}" for r in mine if not r.expressible],
                memory_n=len(mem), memory_mean_abs_error=statistics.fmean(mem) if mem else None,
                memory_max_abs_error=max(mem) if mem else None,
            ))
    return out


class SoftwareYearSummary(ErrorSummary):
    """The time errors of one device family's check runs measured on software of one year (software_date), the
    known gaps left out (each is a mechanism btacalc lacks, not the age of the software); the signed mean is positive
    where btacalc is too fast (the software ran slower than btacalc's clock)."""

    family: str
    software_year: str = Field(description="YYYY, or unknown: the run gives no software_date")
    known_gaps: int = Field(0, description="check runs of the group left out as known gaps")


def by_software_year(results: list[RunResult]) -> list[SoftwareYearSummary]:
    """Check runs' time errors grouped by device family and software year (known gaps left out, counted)."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        if r.role == "check" and r.error is not None:
            groups.setdefault((r.family, software_year(r.software_date)), []).append(r)
    out = []
    for (family, year), mine in sorted(groups.items()):
        errs = [r.error for r in mine if not r.known_gap and r.error is not None]
        out.append(SoftwareYearSummary(family=family, software_year=year, known_gaps=len(mine) - len(errs),
                                       **summarize_errors(errs).model_dump()))
    return out


class Bands(BaseModel):
    """The documented error bands `validate` enforces on check runs (btacalc/data/validation_bands.toml)."""

    model_config = ConfigDict(extra="forbid")
    per_run_abs_error: float = Field(gt=0)
    family_mean_abs_error: float = Field(gt=0)
    memory_per_run_abs_error: float = Field(gt=0, description="peak memory of a check run")
    memory_family_mean_abs_error: float = Field(gt=0, description="mean peak-memory error of a family's check runs")
    precision_pairs: PairBands = Field(description="a pair's speed-up ratio error (planning/precision_pairs.py)")
    note: str = ""


def load_bands() -> Bands:
    return Bands.model_validate(tomllib.loads(package_data(BANDS_FILE).read_text(encoding="utf-8")))


class GateVerdict(BaseModel):
    ok: bool
    failures: list[str]


def _verdict(inside: bool, gap: bool) -> str:
    """One check's verdict, in the words of the published points' status: inside its band or not, marked a
    known gap or not (a known gap inside its band is an unexpected pass: its note must go)."""
    return {(True, False): "pass", (False, True): "KNOWN GAP", (False, False): "FAIL",
            (True, True): "UNEXPECTED PASS"}[(inside, gap)]


def time_status(r: RunResult, bands: Bands) -> str:
    """A run's time verdict under the per-run band, as `gate` judges it: "fit" for a fit run (it sets the factors,
    nothing gates it), "-" where nothing was predicted, else `_verdict`'s."""
    if r.role != "check":
        return "fit"
    return "-" if r.error is None else _verdict(abs(r.error) <= bands.per_run_abs_error, bool(r.known_gap))


def memory_status(r: RunResult, bands: Bands) -> str:
    """A run's peak-memory verdict under the memory band, as `memory_gate` judges it ("fit", "-" or `_verdict`'s)."""
    if r.role != "check":
        return "fit"
    if r.memory_error is None:
        return "-"
    return _verdict(abs(r.memory_error) <= bands.memory_per_run_abs_error, bool(r.memory_known_gap))


def run_status(r: RunResult, bands: Bands) -> str:
    """Both verdicts in one ("pass; mem KNOWN GAP"): "fit" for a fit run, "-" where nothing was predicted, else the
    time's (`time_status`) and, for a run that measured memory, the memory's (`memory_status`) after it."""
    if r.role != "check":
        return "fit"
    parts = [p for p in (time_status(r, bands), "mem " + memory_status(r, bands)) if p not in ("-", "mem -")]
    return "; ".join(parts) or "-"


def gate(results: list[RunResult], summaries: list[FamilySummary], bands: Bands) -> GateVerdict:
    """Check runs outside the per-run band fail unless they are known gaps; a known gap that passes
    fails too (its note must go); a family whose check-run mean leaves its band fails."""
    failures = []
    for r in results:
        if r.role != "check" or r.error is None:
            continue
        verdict = _verdict(abs(r.error) <= bands.per_run_abs_error, bool(r.known_gap))
        if verdict == "FAIL":
            failures.append(f"{r.id}: error {r.error:+.1%} outside ±{bands.per_run_abs_error:.0%}")
        if verdict == "UNEXPECTED PASS":
            failures.append(f"{r.id}: marked a known gap but now within ±{bands.per_run_abs_error:.0%}")
    gaps = {r.id for r in results if r.known_gap}
    for s in summaries:
        if s.role != "check" or s.mean_abs_error is None:
            continue
        errs = [abs(r.error) for r in results if r.role == "check" and r.family == s.family
                and r.error is not None and r.id not in gaps]
        mean = statistics.fmean(errs) if errs else 0.0
        if mean > bands.family_mean_abs_error:
            failures.append(f"{s.family}: mean |error| of check runs {mean:.1%} outside ±{bands.family_mean_abs_error:.0%}")
    failures += memory_gate(results, bands)
    if results and all(r.error is None and r.memory_error is None for r in results):
        # hostile21: a file whose every run is not expressible (a layout that does not divide its devices, FP8 on an
        # A100) ended "within the documented bands", exit 0, with nothing predicted
        failures.append(f"none of the {len(results):,} measured runs was predicted (the line under the runs table "
                        "says why for each): nothing was checked against the bands")
    return GateVerdict(ok=not failures, failures=failures)


def memory_gate(results: list[RunResult], bands: Bands) -> list[str]:
    """Check runs whose peak memory leaves its per-run band fail unless they are memory known gaps (a memory
    known gap inside the band fails too: its note must go); a family whose mean memory error over its other
    check runs leaves its band fails."""
    failures = []
    checks = [r for r in results if r.role == "check" and r.memory_error is not None]
    band = bands.memory_per_run_abs_error
    for r in checks:
        verdict = _verdict(abs(r.memory_error) <= band, bool(r.memory_known_gap))  # type: ignore[arg-type]  # filtered above
        if verdict == "FAIL":
            failures.append(f"{r.id}: memory error {r.memory_error:+.1%} outside ±{band:.0%}")
        if verdict == "UNEXPECTED PASS":
            failures.append(f"{r.id}: marked a memory known gap but now within ±{band:.0%}")
    checks = [r for r in checks if not r.memory_known_gap]
    for family in sorted({r.family for r in checks}):
        mean = statistics.fmean(abs(r.memory_error) for r in checks if r.family == family)  # type: ignore[arg-type]
        if mean > bands.memory_family_mean_abs_error:
            failures.append(f"{family}: mean |memory error| of check runs {mean:.1%} outside "
                            f"±{bands.memory_family_mean_abs_error:.0%}")
    return failures


class MeasuredReport(BaseModel):
    runs: list[RunResult]
    summary: list[FamilySummary]
    bands: Bands
    pairs: PairReport
    gate: GateVerdict
    by_software_year: list[SoftwareYearSummary] = Field(default_factory=list, description="check runs' time errors "
                                                        "by device family and the year of their software_date")


def validate_measured(path: Optional[Path] = None) -> MeasuredReport:
    """Every run of `path` (default: the shipped set) predicted, summarised per role and family, its precision
    pairs found, all gated by the bands: `measured_report(load_runs(path))`."""
    return measured_report(load_runs(path))


def measured_report(runs: list[MeasuredRun], progress: Optional[Callable[[int], None]] = None) -> MeasuredReport:
    """`runs` predicted, summarised per role and family, their precision pairs found, all gated by the bands.
    `progress(1)`, if given, after each run's prediction."""
    results = []
    for run in runs:
        results.append(predict(run))
        if progress:
            progress(1)
    summary = summarize(results)
    bands = load_bands()
    pairs = precision_pairs([run.pair_input(res.predicted.tokens_per_s_per_device) for run, res in zip(runs, results)],
                            bands.precision_pairs)
    verdict = gate(results, summary, bands)
    verdict = GateVerdict(ok=verdict.ok and not pairs.failures, failures=verdict.failures + pairs.failures)
    return MeasuredReport(runs=results, summary=summary, bands=bands, pairs=pairs, gate=verdict,
                          by_software_year=by_software_year(results))
