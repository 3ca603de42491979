"""`btacalc validate --measured`: predictions against measured training runs.

A run file is ``{"runs": [...]}`` (the format of btacalc/data/measured_runs.json, shipped with its
sources). Each run is expressed as an `ExecutionRequest` on the run's model and hardware, planned
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

from collections import Counter

import datetime
import difflib
import functools
import json
import re
import statistics
import sys
import unicodedata
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union, get_args

from pydantic import (BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, field_validator,
                      model_serializer, model_validator)

from ..config.execution import MAX_DEVICES, MAX_SEQUENCES, MEGATRON, BatchLimits, ExecutionRequest, OverlapRequest
from ..config.hardware import HardwareProfile, resolve_hardware
from ..config.hf import unique_keys
from ..config.model import ModelSpec, validate_model
from ..config.pipeline import StageSplit
from ..config.precision import recipe as precision_recipe
from ..config.te_release import container_te
from ..config.cerebras_release import release_gain
from ..config.presets import resolve_model
from ..config.named_tables import did_you_mean
from ..config.attention_kernels import attention_kernel
from ..config.tp_overlap import UbTable, ub_table
from ..errors import BtacalcError, first_validation_error
from ..model.routing_balance import forced_balance_imbalance
from ..config.text import Name
from ..paths import package_data, read_input
from .plan import device_memory, make_plan
from .precision_pairs import PairBands, PairInput, PairReport, precision_pairs
from .publishers import PublisherBaseline, publisher_of
from .report import ErrorSummary, PlanReport, summarize_errors

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SHIPPED_RUNS = "measured_runs.json"
BANDS_FILE = "validation_bands.toml"


GIB = 2**30  # bytes per GiB: run files give memory in GiB as torch reports it
# The smallest measurement a run file may give (tokens/s, s, GiB). A run's error is predicted / measured - 1: a
# measured 1e-308 made it overflow to inf, printed "+inf%" and wrote `Infinity` into `validate --json` (not JSON;
# review12). As the hardware profiles' efficiencies start at 1e-6 so that every printed number is finite, a
# measurement starts there: a prediction within float range over 1e-6 stays finite. Not a fitted number: the
# shipped runs' smallest is 0.09 s.
MIN_MEASURED = 1e-6


class Measured(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tokens_per_s_per_device: Optional[float] = Field(None, ge=MIN_MEASURED, allow_inf_nan=False)
    step_time_s: Optional[float] = Field(None, ge=MIN_MEASURED, allow_inf_nan=False)
    peak_alloc_gib: Optional[float] = Field(None, ge=MIN_MEASURED, allow_inf_nan=False, description="per device, GiB "
                                            "= 2^30 B: torch.cuda.max_memory_allocated (the most loaded rank)")
    peak_reserved_gib: Optional[float] = Field(None, ge=MIN_MEASURED, allow_inf_nan=False, description="per device, GiB: "
                                               "torch.cuda.max_memory_reserved (the most loaded rank)")
    peak_rank: Literal["max", "last"] = Field("max", description="whose peak: the most loaded rank (max), or the "
                                              "last rank, whose pipeline stage is the last (Megatron-LM logs memory "
                                              "to TensorBoard from rank world_size - 1: training/global_vars.py L241)")

    @model_validator(mode="after")
    def _something_measured(self) -> "Measured":
        """hostile19: `"measured": {}` (or only `peak_rank`) was read as a run that measured nothing: it entered no
        band, and `validate --measured` said "within the documented bands" with n = 0."""
        if all(v is None for v in (self.tokens_per_s_per_device, self.step_time_s, self.peak_alloc_gib,
                                    self.peak_reserved_gib)):
            raise ValueError("no measurement: give tokens_per_s_per_device, step_time_s, peak_alloc_gib or "
                             "peak_reserved_gib")
        return self

    @model_validator(mode="after")
    def _allocated_within_reserved(self) -> "Measured":
        """PyTorch's caching allocator hands out tensors from the segments it reserved: the peak allocated is at
        most the peak reserved (torch.cuda.max_memory_allocated <= max_memory_reserved)."""
        alloc, reserved = self.peak_alloc_gib, self.peak_reserved_gib
        if alloc is not None and reserved is not None and alloc > reserved:
            raise ValueError(f"peak_alloc_gib {alloc:g} exceeds peak_reserved_gib {reserved:g}: allocated memory is "
                             "part of the reserved")
        return self


class Overlaps(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    grad_reduce: Optional[bool] = None
    param_gather: Optional[bool] = None
    tp_comm: Optional[bool] = None
    all_to_all: bool = False


class Recipe(BaseModel):
    """Settings of the run's own configuration that the run's fields leave null or state differently,
    each read from the file `source` names (btacalc's extension of the run format). Fields named after
    Megatron-LM's flags mean what the flag means; a field left out takes the plan's default, or
    Megatron's where it differs (`MEGATRON_RUN_DEFAULTS`), and `validate` lists every default a run
    took with its reason (`RunResult.defaulted`)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    source: str = Field(min_length=10)
    attention: Optional[Literal["eager", "flash"]] = None
    attention_kernel: Optional[str] = Field(None, description="the fused attention kernel the run used "
                                            "(btacalc/data/attention_kernels.toml, e.g. triton-flash: llm-foundry's "
                                            "attn_impl triton); default: TransformerEngine's fused attention, at its "
                                            "benchmarked rate where the file has one, else the large-GEMM rate")
    recompute: Optional[Union[str, list[str]]] = None
    fsdp_impl: Optional[Literal["megatron", "torch"]] = Field(None, description="whose FSDP the run used (torch: "
                                                              "PyTorch FSDP1 as llm-foundry runs it); default megatron")
    sequence_parallel: Optional[bool] = None
    vp: Optional[int] = Field(None, ge=1, le=MAX_DEVICES)
    zero: Optional[int] = Field(None, ge=0, le=3)
    grad_bytes: Optional[Literal[2, 4]] = None
    memory_model: Optional[Literal["weight_streaming", "resident"]] = Field(
        None, description="wafer: how the run kept its weights (Cerebras appliance runs stream them)")
    grad_reduce_in_bf16: Optional[bool] = Field(None, description="--grad-reduce-in-bf16: 16-bit main gradients "
                                                "(default off: fp32 main gradients, grad_bytes 4)")
    cross_entropy_loss_fusion: Optional[bool] = Field(None, description="--cross-entropy-loss-fusion (default off); "
                                                      "unfused or native, Megatron's vocab-parallel cross-entropy keeps "
                                                      "the fp32 softmax of a micro-batch's logits")
    cross_entropy_fusion_impl: Optional[Literal["native", "te"]] = Field(
        None, description="--cross-entropy-fusion-impl (default native); te with the fusion on: TransformerEngine's "
        "fused cross-entropy, the 16-bit logits turned into their gradient in place (loss te_fused)")
    moe_token_dispatcher_type: Optional[Literal["allgather", "alltoall", "flex"]] = Field(
        None, description="--moe-token-dispatcher-type; btacalc models the all-to-all exchange (alltoall, and "
        "flex's DeepEP all-to-all); an MoE run that leaves it out is planned so and says it (DISPATCHER_DEFAULT)")
    mtp_num_layers: Optional[int] = Field(None, ge=0, description="--mtp-num-layers: the model's multi-token-"
                                          "prediction modules train too when > 0 (default: none)")
    causal: Optional[bool] = Field(None, description="the attention kernel skips the masked half of the s^2 scores "
                                   "(a causal FlashAttention kernel); default: btacalc counts the full scores")
    deepep: bool = Field(False, description="the run dispatches MoE tokens with DeepEP (Megatron flex dispatcher)")
    dispatcher_sms: Optional[int] = Field(None, ge=1, description="moe_flex_dispatcher_num_sms (or the deprecated "
                                          "moe_deepep_num_sms / moe_hybridep_num_sms): SMs DeepEP / HybridEP's "
                                          "kernels hold (default: Megatron-Core's 20)")
    nccl_ub: bool = Field(False, description="ddp.nccl_ub / --use-nccl-ub with NCCL_CTA_POLICY=1: registered "
                          "data-parallel buffers (default off)")
    nvls: bool = Field(False, description="NCCL_NVLS_ENABLE=1 with nccl_ub: NCCL's NVLS path for the registered "
                       "all-gather / reduce-scatter (default off, as Megatron-Bridge's perf runs set it)")
    cuda_graph_scope: list[str] = Field(default_factory=list, description="--cuda-graph-scope with --cuda-graph-impl "
                                        "transformer_engine: Megatron's per-layer CUDA-graph scopes "
                                        "(btacalc/data/cuda_graph_scopes.toml); empty: no per-layer graphs")
    micro_batch: Optional[int] = Field(None, ge=1, description="--micro-batch-size where the recipe and the published "
                                       "row's other columns (GA = GBS / (DP x MBS)) say otherwise than its MBS column")
    pipeline_layout: Optional[str] = Field(None, description="--pipeline-model-parallel-layout (Megatron's string)")
    account_for_embedding: bool = Field(False, description="--account-for-embedding-in-pipeline-split")
    account_for_loss: bool = Field(False, description="--account-for-loss-in-pipeline-split")
    cpu_offloading_num_layers: Optional[int] = Field(None, ge=0, description="--cpu-offloading "
                                                     "--cpu-offloading-num-layers: activations of the first N decoder "
                                                     "layers kept in host memory (config.execution.ACTIVATION_OFFLOAD)")
    exp_avg_dtype: Optional[Literal["fp32", "bf16"]] = Field(None, description="--use-precision-aware-optimizer "
                                                             "--exp-avg-dtype / --exp-avg-sq-dtype: Adam's moments "
                                                             "(default fp32)")
    tokenizer_vocab_size: Optional[int] = Field(None, ge=1, description="the vocabulary of the tokenizer the run "
                                                "trained with where it is not the model's (NeMo 1.0 recipes that train "
                                                "with the GPT-2 BPE tokenizer: 50,257); btacalc pads it as Megatron "
                                                "does, to a multiple of 128 x TP (model/problem.py padded_vocab)")
    deterministic_mode: bool = Field(False, description="--deterministic-mode (Megatron-LM @ d98e8a64 megatron/"
                                     "training/determinism.py: NCCL_ALGO Ring, NVTE_ALLOW_NONDETERMINISTIC_ALGO 0, "
                                     "CUBLAS_WORKSPACE_CONFIG, torch.use_deterministic_algorithms): expressed with the "
                                     "parts btacalc does not time stated in the run's notes (DETERMINISTIC_UNMODELLED)")
    checkpoint_early_stop: bool = Field(False, description="true: the run's full recompute is PyTorch's "
                                        "non-reentrant activation checkpoint with early stop (torch >= 2.1), "
                                        "--checkpoint-early-stop")
    eager_kernels: bool = Field(False, description="true: the run's layers are eager PyTorch modules (llm-foundry's "
                                "MPT block, no TransformerEngine): --eager-kernels")
    gradient_accumulation_fusion: Optional[bool] = Field(None, description="false: --no-gradient-accumulation-fusion "
                                                         "(a separate main-gradient add per parameter and micro-batch, "
                                                         "gpu/fixed.py); default: Megatron's fused accumulation")
    layernorm_sm_margin: Optional[int] = Field(None, ge=0, description="NVTE_FWD_LAYERNORM_SM_MARGIN / "
                                               "NVTE_BWD_LAYERNORM_SM_MARGIN: SMs TransformerEngine's LayerNorm kernels "
                                               "leave free; not timed (LAYERNORM_SM_MARGIN_UNMODELLED)")
    fp8_dot_product_attention: bool = Field(False, description="Megatron-Bridge's mixed_precision."
                                            "fp8_dot_product_attention (TransformerEngine's FP8 fused attention, "
                                            "fp8_dpa): planned with --fp8-attention")
    transformer_engine: Optional[str] = Field(None, description="the TransformerEngine release the run used (e.g. "
                                              "2.8.0+7cde9a33): under NVFP4 it decides whether an activation's two "
                                              "casts are one kernel (precision.toml rht_cast_fusion_since_te), under "
                                              "per-tensor FP8 which transposes Blackwell writes (plan --te-version, "
                                              "te_releases.toml); default: the TE of the run's container where "
                                              "te_releases.toml names it, else the pinned TE")
    fp8_param_gather: Optional[bool] = Field(None, description="--fp8-param-gather (NeMo 1.0's model.fp8_params): "
                                             "FP8 parameters and their all-gather; default: the precision recipe's "
                                             "Megatron-Bridge setting (precision.toml bridge_param_gather)")
    gpus_per_node: Optional[int] = Field(None, ge=1, le=MAX_DEVICES, description="devices the job's allocation "
                                         "places in each NVLink domain where fewer than the profile's (plan "
                                         "--gpus-per-node): e.g. SLURM --segment 16 trays x 4 GPUs = 64 of a GB200 "
                                         "NVL72 rack's 72; default: the profile's domain")
    ddp_bucket_size: Optional[int] = Field(None, ge=1, description="--ddp-bucket-size / DistributedDataParallelConfig."
                                           "bucket_size: parameters per gradient bucket (default: Megatron's "
                                           "max(4e7, 1e6 x DP x CP))")
    apex_distributed_adam: bool = Field(False, description="the optimizer as NeMo 1.0 ran it: Apex "
                                        "DistributedFusedAdam, whose buckets are one size on every pipeline stage "
                                        "and model chunk; default: Megatron-Core's DDP, which buckets only pipeline "
                                        "rank 0's first model chunk (model/gpu/collectives.py StageBuckets)")
    tp_overlap_cfg: Optional[UbTable] = Field(None, description="the run's TransformerEngine userbuffers table "
                                              "(NeMo model.ub_tp_comm_overlap_cfg, a tp_overlap/*.yaml): per GEMM "
                                              "the method, num_sm, num_splits and set_sm_margin as TE read them; "
                                              "default: TE's table (btacalc/data/tp_overlap.toml)")
    overlaps: Overlaps = Overlaps()

    @model_validator(mode="after")
    def _known_names(self) -> "Recipe":
        if self.tp_overlap_cfg is not None:
            ub_table(self.tp_overlap_cfg)  # names only TE's GEMMs, pipelines split
        if self.attention_kernel is not None:
            attention_kernel(self.attention_kernel)  # a catalogue kernel, as --attention-kernel takes it
        return self

    def unmodelled(self) -> str:
        """Why btacalc cannot express this recipe, or "" when it can."""
        if self.moe_token_dispatcher_type == "allgather":
            return "--moe-token-dispatcher-type allgather is not modelled (btacalc models the all-to-all dispatcher)"
        return ""

    def loss(self) -> str:
        """The catalogue's loss variant of the recipe's cross-entropy flags: TransformerEngine's fused kernel with
        --cross-entropy-loss-fusion --cross-entropy-fusion-impl te, else Megatron's vocab-parallel cross-entropy
        (unfused and native keep the same buffers)."""
        return "te_fused" if self.cross_entropy_loss_fusion and self.cross_entropy_fusion_impl == "te" else "vocab_parallel"

    def gradient_bytes(self) -> Optional[int]:
        """Bytes per main-gradient element the recipe states (grad_bytes, or --grad-reduce-in-bf16)."""
        if self.grad_reduce_in_bf16 is not None:
            return 2 if self.grad_reduce_in_bf16 else 4
        return self.grad_bytes


SOFTWARE_DATE_PATTERN = r"^[0-9]{4}-(0[1-9]|1[0-2])$"  # YYYY-MM in ASCII digits (\d would take "２０２５-04")
# No GPU or wafer training software predates CUDA 1.0 (developer.nvidia.com/content/cuda-10, the CUDA 1.0 downloads;
# its month, June 2007, as commonly cited: the stored copy of developer.nvidia.com/cuda-toolkit-archive ends before
# 1.0, and CUDA 1.1 is "December 2007" there): an earlier software_date is a typo; a later-than-now one names
# software not yet released
FIRST_SOFTWARE_MONTH = "2007-06"
UNKNOWN_SOFTWARE_YEAR = "unknown"  # the group of the runs that give no software_date


def software_year(date: Optional[str]) -> str:
    """The group a run's errors fall in by the age of its software: the year of its software_date, else unknown."""
    return date[:4] if date else UNKNOWN_SOFTWARE_YEAR


class MeasuredRun(BaseModel):
    """One measured training run with its layout (fields as in the run file; null = not stated / 1).
    Strict types: a count is a JSON integer (not true, "8" or 8.0), a measurement a finite number."""

    model_config = ConfigDict(extra="allow", strict=True)

    id: Name
    source: str
    model: str
    hw: str
    devices: int = Field(ge=1, le=MAX_DEVICES)
    # btacalc's --precision names (btacalc/data/precision.toml): fp8 = delayed scaling, fp8-current = per-tensor
    # current scaling, fp8-blockwise, mxfp8, nvfp4
    precision: Literal["bf16", "fp16", "fp8", "fp8-current", "fp8-blockwise", "mxfp8", "nvfp4"]
    seq: int = Field(ge=1, le=MAX_SEQUENCES)
    global_batch: int = Field(ge=1, le=MAX_SEQUENCES)
    micro_batch: Optional[int] = Field(None, ge=1, le=MAX_SEQUENCES)
    tp: Optional[int] = Field(None, ge=1, le=MAX_DEVICES)
    pp: Optional[int] = Field(None, ge=1, le=MAX_DEVICES)
    vp: Optional[int] = Field(None, ge=1, le=MAX_DEVICES)
    cp: Optional[int] = Field(None, ge=1, le=MAX_DEVICES)
    ep: Optional[int] = Field(None, ge=1, le=MAX_DEVICES)
    etp: Optional[int] = Field(None, ge=1, le=MAX_DEVICES)
    zero: Optional[int] = Field(None, ge=0, le=3)
    fsdp: Optional[bool] = None
    sequence_parallel: Optional[bool] = None
    recompute: Optional[Union[str, list[str]]] = None
    measured: Measured
    role: Literal["fit", "check"]
    known_gap: str = Field("", description="btacalc is known to miss this run: the mechanism it lacks")
    memory_known_gap: str = Field("", description="btacalc is known to miss this run's peak memory: what the "
                                  "measurement shows that the prediction lacks (exempts the run from the memory "
                                  "bands, as known_gap does from the time bands)")
    release: Optional[str] = Field(None, description="the container or harness version that measured the run; "
                                   "runs of one publication and release form same-source precision pairs; on a wafer, "
                                   "the Cerebras software release (\"Cerebras R_1.9.x\"), which decides the "
                                   "release gains it lacks (btacalc/data/cerebras_releases.toml)")
    software_date: Optional[str] = Field(None, description="YYYY-MM: the month the "
                                         "software that measured the run was released (its container's YY.MM tag, its "
                                         "MLPerf round's submission month), else the month its measurement was "
                                         "published; errors are grouped by its year (validate, --cross-validate); "
                                         "optional in a user's file (grouped as unknown), given for every shipped run")
    software_date_source: str = Field("", description="where software_date comes from, and whether it is only a bound")
    recipe: Optional[Recipe] = None
    megatron_args: Optional[str] = Field(None, description="the run as its Megatron-LM launch or arguments (read as "
                                         "plan --from-megatron reads them) instead of the layout fields")
    router_force_load_balancing: Optional[bool] = Field(None, description="--moe-router-force-load-balancing: the "
                                                        "benchmark drew each token's experts at random (balanced in "
                                                        "expectation); the plan's routing imbalance is the busiest "
                                                        "expert-parallel rank's expected load under that routing "
                                                        "(model/routing_balance.py); null: not stated (the publisher's "
                                                        "baseline, planning/publishers.py, or free routing)")

    @model_validator(mode="before")
    @classmethod
    def _no_misspelt_field(cls, data: Any) -> Any:
        """Other keys of a run are carried through unread (confidence, notes, ...); one that is a near spelling of a
        field (`micro_bach`, `Devices`) would leave that field unset and the run planned without it: refused
        (review5)."""
        for key in data if isinstance(data, dict) else ():
            near = None if key in cls.model_fields else _near_field(str(key), tuple(cls.model_fields))
            if near:
                raise ValueError(f"key {str(key)[:60]!r} is not a run field: did you mean {near!r}? (keys that are "
                                 "not near a field's name are carried through unread)")
        return data

    @field_validator("precision", mode="before")
    @classmethod
    def _a_precision(cls, v: Any) -> Any:
        """hostile23: "BF16" was refused listing the names, as --precision BF16 is now refused naming bf16."""
        names = get_args(cls.model_fields["precision"].annotation)
        if isinstance(v, str) and v not in names:
            raise ValueError(f"{v[:20]!r} is not one of {', '.join(names)}{did_you_mean(v, names)}")
        return v

    @field_validator("software_date")
    @classmethod
    def _a_month(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.fullmatch(SOFTWARE_DATE_PATTERN, v):
            raise ValueError(f"software_date {v[:20]!r} is not a month written YYYY-MM (e.g. 2025-04)")
        if v is not None and not FIRST_SOFTWARE_MONTH <= v <= datetime.date.today().strftime("%Y-%m"):
            raise ValueError(f"software_date {v} is not a release month of training software: from "
                             f"{FIRST_SOFTWARE_MONTH} (CUDA 1.0) to this month")
        return v

    @model_validator(mode="after")
    def _a_source_of_a_date(self) -> "MeasuredRun":
        """software_date_source says where software_date comes from: without a date it is the source of nothing
        (a date misplaced or left out), refused (review14)."""
        if self.software_date_source and self.software_date is None:
            raise ValueError("software_date_source is given without software_date: give the month (YYYY-MM) it "
                             "is the source of, or leave both out")
        return self

    @model_validator(mode="after")
    def _gaps_excuse_a_measured_check(self) -> "MeasuredRun":
        """A known gap exempts a check run's measured number from its band (validate's gate); one on a fit run, or
        on a run that does not measure what it excuses (time: tokens/s or step time; memory: peak allocated or
        reserved), exempts nothing and would sit unread in the report (review6)."""
        m = self.measured
        for field, text, measured in (("known_gap", self.known_gap, (m.tokens_per_s_per_device, m.step_time_s)),
                                      ("memory_known_gap", self.memory_known_gap, (m.peak_alloc_gib,
                                                                                   m.peak_reserved_gib))):
            if text and not text.strip():  # exempted the run with nothing to read (review7)
                raise ValueError(f"{field} is blank: it says what btacalc lacks for this run (or leave it out)")
            if text and (self.role != "check" or not any(measured)):
                what = "a fit run" if self.role != "check" else "a run that measures no " + (
                    "time" if field == "known_gap" else "peak memory")
                raise ValueError(f"{field} is set on {what}: it exempts a check run's measured number from its band")
        return self

    def model_spec(self) -> ModelSpec:
        """The run's model as it trained: the preset, with the vocabulary of the tokenizer the recipe states."""
        model = resolve_model(self.model)
        vocab = self.recipe.tokenizer_vocab_size if self.recipe is not None else None
        if vocab is None or vocab == model.vocab_size:
            return model
        data = model.model_dump()
        data.update(name=f"{model.name} (tokenizer vocab {vocab})", vocab_size=vocab, published_params=None)
        return validate_model(data, origin=f"run {self.id}")

    def with_recipe(self) -> "MeasuredRun":
        """The run with its recipe's corrections applied to the layout fields."""
        if self.recipe is None:
            return self
        r = self.recipe
        changes = {k: v for k, v in (("vp", r.vp), ("sequence_parallel", r.sequence_parallel), ("zero", r.zero),
                                     ("recompute", r.recompute), ("micro_batch", r.micro_batch)) if v is not None}
        return self.model_copy(update=changes)

    def pair_input(self, predicted_tokens_per_s: Optional[float]) -> PairInput:
        """The run as precision pairing sees it (planning/precision_pairs.py): its layout key after the recipe's
        corrections, (model, hw, devices, TP, PP, VP, CP, EP, ETP, micro batch, global batch, seq), an unstated
        TP/PP/VP/CP/EP read as 1 and an unstated ETP as TP (Megatron-LM's --expert-tensor-parallel-size default,
        megatron/training/arguments.py @ d98e8a64); its source, the first word of `source` without its scheme
        (the publication) with its `release`."""
        r = self.with_recipe()
        tp = r.tp or 1
        layout = (r.model, r.hw, r.devices, tp, r.pp or 1, r.vp or 1, r.cp or 1, r.ep or 1, r.etp or tp,
                  r.micro_batch, r.global_batch, r.seq)
        words = self.source.split()
        publication = words[0].removeprefix("https://").removeprefix("http://").rstrip(";,") if words else ""
        return PairInput(id=self.id, model=self.model, hw=self.hw, devices=self.devices, precision=self.precision,
                         layout=layout, source=(publication, self.release),
                         measured_tokens_per_s=self.measured.tokens_per_s_per_device,
                         predicted_tokens_per_s=predicted_tokens_per_s)


@functools.lru_cache(maxsize=256)
def _near_field(key: str, fields: tuple[str, ...]) -> Optional[str]:
    """The field `key` is a near spelling of (difflib ratio >= 0.8), if any; one lookup per distinct key, so a file of
    8,000 runs carrying the same notes keys costs a handful."""
    near = difflib.get_close_matches(key, fields, n=1, cutoff=0.8)
    return near[0] if near else None


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


# A run file is a few kilobytes per run; this is thousands of runs.
MAX_RUN_FILE_BYTES = 16 << 20


def _no_constant(name: str) -> None:
    """JSON has no Infinity or NaN (Python's json module reads them unless told not to)."""
    raise ValueError(f"{name} is not a JSON number")


RUNS_FILE_KEYS = frozenset({"about", "runs"})  # the top level of a runs file: a note about the set, and its runs


def load_runs(path: Optional[Path] = None) -> list[MeasuredRun]:
    """The runs of `path` (default: the shipped measured set)."""
    origin = str(path) if path else f"btacalc/data/{SHIPPED_RUNS}"
    source = path or package_data(SHIPPED_RUNS)
    if path is not None and not path.exists():
        raise BtacalcError(f"{{measured}}: {origin} not found")
    if path is not None and not path.is_file():  # a FIFO would block, /dev/zero never end
        raise BtacalcError(f"{{measured}}: {origin} is not a regular file")
    try:
        raw = json.loads(read_input(source, MAX_RUN_FILE_BYTES), parse_constant=_no_constant,  # capped before the read
                         object_pairs_hook=unique_keys)
    except OSError as exc:
        raise BtacalcError(f"{{measured}}: cannot read {origin}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, a 5,000-digit number
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0]
        raise BtacalcError(f"{{measured}}: {origin} is not valid JSON: {why}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("runs"), list):
        raise BtacalcError(f"{{measured}}: {origin} must be a JSON object with a list under 'runs'")
    unknown = sorted(set(raw) - RUNS_FILE_KEYS)
    if unknown:  # a misspelt or misplaced key would otherwise be read as nothing
        raise BtacalcError(f"{{measured}}: {origin}: unknown key {unknown[0]!r} (a runs file holds "
                           f"{' and '.join(sorted(RUNS_FILE_KEYS))})")
    runs = []
    for i, item in enumerate(raw["runs"]):
        try:
            runs.append(MeasuredRun.model_validate(item))
        except ValidationError as exc:
            label = item.get("id", f"#{i}") if isinstance(item, dict) else f"#{i}"
            raise BtacalcError(f"{{measured}}: {origin} run {label}: {first_validation_error(exc)}") from None
    # one pass (a list's count() per id would be quadratic); ids compared in Unicode's composed form (NFC): 'café'
    # written with U+00E9 and as 'e' + U+0301 print the same and name one run (review8: both were kept)
    counts = Counter(unicodedata.normalize("NFC", r.id) for r in runs)
    dupes = sorted(i for i, c in counts.items() if c > 1)
    if dupes:
        raise BtacalcError(f"{{measured}}: {origin}: run ids given twice: {', '.join(dupes)}")
    if not runs:  # hostile21: {"runs": []} ended "within the documented bands", nothing checked
        raise BtacalcError(f"{{measured}}: {origin} holds no runs: nothing to predict or check (give at least one)")
    return runs


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
DISPATCHER_DEFAULT = ("alltoall: btacalc models the expert-parallel all-to-all exchange; Megatron-LM's own default "
                      f"--moe-token-dispatcher-type is allgather ({MEGATRON} "
                      "megatron/core/transformer/transformer_config.py L891), which btacalc does not model: state "
                      "the dispatcher in the recipe")


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
    if recipe is not None and recipe.unmodelled():
        return None, recipe.unmodelled()
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
    # the run's TE decides per-tensor FP8's transposes (te_releases.toml); plan refuses --te-version for any other
    # recipe, whose casts no release changes
    te = run_te_version(run, recipe) if family == "gpu" else None
    if te is not None and precision_recipe(run.precision).follows_te_release_on(resolve_hardware(run.hw).chip.capability):
        changes["te_version"] = te
    return ExecutionRequest(seq_len=run.seq, recompute=recompute, devices=run.devices, limits=limits,
                            precision=run.precision, **changes), ""


# A recipe's fields that pass to the request as they are when the recipe sets them (recipe field: request field)
_RECIPE_COPIED = {"causal": "causal", "attention_kernel": "attention_kernel", "fsdp_impl": "fsdp_impl",
                  "memory_model": "memory_model", "gradient_accumulation_fusion": "gradient_accumulation_fusion",
                  "gpus_per_node": "devices_per_node", "ddp_bucket_size": "ddp_bucket_params"}
# A recipe's switches that turn request options on when on (recipe field: the request fields it sets);
# --deterministic-mode sets both NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 and NCCL_ALGO=Ring (DETERMINISTIC_UNMODELLED)
_RECIPE_SWITCHES = {"fp8_dot_product_attention": ("fp8_attention",),
                    "checkpoint_early_stop": ("checkpoint_early_stop",), "eager_kernels": ("eager_kernels",),
                    "deterministic_mode": ("deterministic_attention", "nccl_ring_only"),
                    "apex_distributed_adam": ("ddp_buckets_every_stage",)}


def _recipe_changes(recipe: Recipe, run: MeasuredRun, family: str) -> dict[str, Any]:
    """The request options `recipe` sets for `run` (its recipe applied) on a `family` device."""
    o = recipe.overlaps
    changes: dict[str, Any] = dict(
        overlaps=OverlapRequest(grad_reduce=o.grad_reduce, param_gather=o.param_gather, tp_comm=o.tp_comm),
        overlap_all_to_all=o.all_to_all, attention=recipe.attention, gradient_bytes=recipe.gradient_bytes(),
        deepep=recipe.deepep, dispatcher_sms=recipe.dispatcher_sms, cuda_graph_scope=tuple(recipe.cuda_graph_scope),
        nccl_ub=recipe.nccl_ub, nvls=recipe.nvls)
    changes.update({target: getattr(recipe, name) for name, target in _RECIPE_COPIED.items()
                    if getattr(recipe, name) is not None})
    changes.update({target: True for name, targets in _RECIPE_SWITCHES.items() if getattr(recipe, name)
                    for target in targets})
    if recipe.mtp_num_layers is not None:
        changes["multi_token_prediction"] = recipe.mtp_num_layers > 0
    if recipe.cross_entropy_loss_fusion is not None and family == "gpu":
        changes.update(loss=recipe.loss())
    if recipe.exp_avg_dtype is not None:
        changes["moment_bytes"] = 2 if recipe.exp_avg_dtype == "bf16" else 4
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


def _express_megatron(run: MeasuredRun) -> tuple[Optional[ExecutionRequest], str]:
    """A run given as Megatron-LM arguments: its request as --from-megatron reads it; the run's own seq and
    global batch must agree with the arguments (they label the run in the report)."""
    from ..config.megatron_run import import_megatron, launch_domain

    assert run.megatron_args is not None  # the caller checked
    try:
        imported = import_megatron(run.megatron_args, f"run {run.id}", run.devices)
    except BtacalcError as exc:  # hostile19: the shared decoder's refusals named neither the run nor its field
        reason = exc.template.removeprefix(f"run {run.id}: ")  # import_megatron names its source (hostile20)
        raise BtacalcError(f"{{measured}}: run {run.id}: megatron_args: {reason}") from None
    req = launch_domain(imported.request, resolve_hardware(run.hw))  # as plan --from-megatron --hw reads it
    if (req.seq_len, req.limits.global_batch) != (run.seq, run.global_batch):
        raise BtacalcError(f"{{measured}}: run {run.id}: megatron_args give seq {req.seq_len} and global batch "
                           f"{req.limits.global_batch}, the run's fields {run.seq} and {run.global_batch}")
    model, shape = resolve_model(run.model), ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size",
                                               "num_experts", "top_k", "vocab_size")
    differ = [k for k in shape if getattr(model, k) != getattr(imported.model, k)]
    if differ:
        return None, f"megatron_args describe another model than {run.model} ({', '.join(differ)} differ)"
    return req, ""


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
        return RunResult(**base, family=family, expressible=False, reason=str(exc))
    memory = _memory_prediction(profile, report, run.measured.peak_rank)
    memory_error = _memory_error(memory, run.measured)
    th = report.throughput
    defaulted = {**report.inputs.defaults, **{k: why for k, (_, why) in run_defaults(run, family).items()}}
    if model.is_moe and family == "gpu" and (run.recipe is None or run.recipe.moe_token_dispatcher_type is None):
        defaulted["moe_token_dispatcher_type"] = DISPATCHER_DEFAULT
    if not report.plan.fits or th is None:
        return RunResult(**base, family=family, expressible=False, predicted=memory, memory_error=memory_error,
                         defaulted=defaulted,
                         reason="btacalc says this layout does not fit: " + ("; ".join(report.suggestions) or "memory"))
    pred = memory.model_copy(update=dict(tokens_per_s_per_device=th.tokens_per_s / run.devices / gain,
                                         step_time_s=th.step_time_s * gain))
    return RunResult(**base, family=family, expressible=True, predicted=pred, error=_error(pred, run.measured),
                     memory_error=memory_error, defaulted=defaulted, not_timed=recipe_unmodelled_notes(run),
                     release_gain=gain if gain_sources else None, release_gain_sources=gain_sources)


def _memory_prediction(profile: HardwareProfile, report: PlanReport, rank: str) -> RunPrediction:
    """The allocated and reserved bytes in GiB of the worst pipeline stage, or of the last when the run
    measured the last rank (a GPU plan; a wafer's none)."""
    tensors = report.memory_stages[-1].total if rank == "last" and report.memory_stages else report.memory_bytes["total"]
    device = device_memory(profile, tensors)
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


def run_status(r: RunResult, bands: Bands) -> str:
    """A run's verdict under the per-run bands, as `gate` judges it: "fit" for a fit run (it sets the factors,
    nothing gates it), "-" where nothing was predicted, else the time's verdict (`_verdict`) and, for a run that
    measured memory, the memory's after it ("pass; mem KNOWN GAP")."""
    if r.role != "check":
        return "fit"
    parts = []
    if r.error is not None:
        parts.append(_verdict(abs(r.error) <= bands.per_run_abs_error, bool(r.known_gap)))
    if r.memory_error is not None:
        parts.append("mem " + _verdict(abs(r.memory_error) <= bands.memory_per_run_abs_error, bool(r.memory_known_gap)))
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
        failures.append(f"none of the {len(results):,} measured runs was predicted (each row's note says why): "
                        "nothing was checked against the bands")
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
