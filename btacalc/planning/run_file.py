"""The measured-runs file (`validate --measured`, btacalc/data/measured_runs.json): its schema, one pydantic model
per part of a run (the measurement, the recipe it ran, the run with its layout), and the reader that refuses a
malformed file in one line. Predicting the runs and gating their errors is `planning.measured`."""


from __future__ import annotations

import datetime
import difflib
import functools
import json
import re
import sys
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any, Literal, Optional, Union, get_args

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_serializer, model_validator)

from ..config.execution import MAX_DEVICES, MAX_SEQUENCES
from ..config.hf import unique_keys
from ..config.model import ModelSpec, validate_model
from ..config.presets import resolve_model
from ..config.named_tables import did_you_mean
from ..config.attention_kernels import attention_kernel
from ..config.tp_overlap import UbTable, ub_table
from ..errors import BtacalcError, first_validation_error
from ..config.text import Name
from ..paths import package_data, read_input
from ..vocabulary import parse_recompute
from .precision_pairs import GAP_SUMMARY_MAX, PairInput, is_one_line

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


SHIPPED_RUNS = "measured_runs.json"


GIB = 2**30  # bytes per GiB: run files give memory in GiB as torch reports it
# The smallest measurement a run file may give (tokens/s, s, GiB). A run's error is predicted / measured - 1: a
# measured 1e-308 made it overflow to inf, printed "+inf%" and wrote `Infinity` into `validate --json` (not JSON;
# review12). As the hardware profiles' efficiencies start at 1e-6 so that every printed number is finite, a
# measurement starts there: a prediction within float range over 1e-6 stays finite. Not a fitted number: the
# shipped runs' smallest is 0.09 s.
MIN_MEASURED = 1e-6
# hostile40: a run's tokens/s per device and step time measure one step twice (global_batch x seq tokens over devices
# in step_time_s); the shipped runs agree within 0.3% (published figures rounded to three digits). Beyond this share
# one of them is not this run's, and validate would check the tokens/s and never read the step time.
MEASUREMENTS_AGREE = 0.05


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
    # Megatron's --ep-overlap-early-attn-memory-release (needs all_to_all: refused without, as Megatron-Core does)
    early_attn_release: bool = False
    # Megatron's --delay-wgrad-compute (Bridge comm_overlap.delay_wgrad_compute; needs all_to_all)
    delay_wgrad: bool = False
    # CUDA_DEVICE_MAX_CONNECTIONS as the run's launcher set it (execution.Overlaps.max_connections)
    max_connections: Optional[int] = Field(default=None, ge=1, le=32)


class Recipe(BaseModel):
    """Settings of the run's own configuration that the run's fields leave null or state differently,
    each read from the file `source` names (btacalc's extension of the run format). Fields named after
    Megatron-LM's flags mean what the flag means; a field left out takes the plan's default, or
    Megatron's where it differs (planning.measured `MEGATRON_RUN_DEFAULTS`), and `validate` lists every default a run
    took with its reason (`RunResult.defaulted`)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    source: str = Field(min_length=10)
    attention: Optional[Literal["eager", "flash"]] = None
    attention_kernel: Optional[str] = Field(None, description="the fused attention kernel the run used "
                                            "(btacalc/data/attention_kernels.toml, e.g. triton-flash: llm-foundry's "
                                            "attn_impl triton); default: TransformerEngine's fused attention, at its "
                                            "benchmarked rate where the file has one, else the large-GEMM rate")
    recompute: Optional[Union[str, list[str]]] = None

    @field_validator("recompute")
    @classmethod
    def _a_policy(cls, v: Optional[Union[str, list[str]]]) -> Optional[Union[str, list[str]]]:
        return _recompute_policy(v)

    fsdp_impl: Optional[Literal["megatron", "torch", "fsdp2"]] = Field(None, description="whose FSDP the run used "
                                                                       "(torch: PyTorch FSDP1 as llm-foundry runs it; "
                                                                       "fsdp2: PyTorch FSDP2 as torchtitan runs it); "
                                                                       "default megatron")
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
                                                      "the fp32 softmax of a micro-batch's logits (native: compiled, "
                                                      "loss native_fused)")
    torch_cross_entropy: Optional[Literal["torch_fp32", "torch_fp32_held"]] = Field(
        None, description="the harness's loss is PyTorch's F.cross_entropy on fp32 logits, cast in the loss with the "
        "16-bit ones deleted before the backward (torch_fp32) or cast in the model and held through the backward "
        "(torch_fp32_held), as torchtitan computes it (the loss of that name; not a Megatron flag, so not with "
        "cross_entropy_loss_fusion)")
    cross_entropy_fusion_impl: Optional[Literal["native", "te"]] = Field(
        None, description="--cross-entropy-fusion-impl (default native); te with the fusion on: TransformerEngine's "
        "fused cross-entropy, the 16-bit logits turned into their gradient in place (loss te_fused)")
    moe_token_dispatcher_type: Optional[Literal["allgather", "alltoall", "flex"]] = Field(
        None, description="--moe-token-dispatcher-type: allgather (Megatron-Core's default), alltoall, or flex "
        "(with deepep: DeepEP / HybridEP); a published recipe that leaves it out is planned with alltoall and says it "
        "(DISPATCHER_DEFAULT)")
    mtp_num_layers: Optional[int] = Field(None, ge=0, description="--mtp-num-layers: the model's multi-token-"
                                          "prediction modules train too when > 0 (default: none)")
    causal: Optional[bool] = Field(None, description="the attention kernel skips the masked half of the s^2 scores "
                                   "(a causal FlashAttention kernel); default: btacalc counts the full scores")
    deepep: bool = Field(False, description="the run dispatches MoE tokens with DeepEP (Megatron flex dispatcher)")
    hybridep: bool = Field(False, description="with deepep: the flex dispatcher's hybridep backend (NVIDIA's Hybrid-EP), "
                           "not DeepEP's kernels")
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
                                                     "layers kept in host memory (config.resolution.ACTIVATION_OFFLOAD)")
    use_precision_aware_optimizer: Optional[bool] = Field(None, description="--use-precision-aware-optimizer: "
                                                          "TransformerEngine's FusedAdam holds the optimizer state "
                                                          "(with bf16 parameters and an optimizer fp8_recipe of "
                                                          "none or delayed, `optimizer_fp8_recipe`, int16 master "
                                                          "remainders since Megatron-Core 0.13); implied by bf16 "
                                                          "moments")
    optimizer_fp8_recipe: Optional[Literal["delayed", "tensorwise", "mxfp8", "blockwise"]] = Field(
        None, description="the fp8_recipe the optimizer config holds where the precision has no FP8 recipe (bf16, "
        "fp16, nvfp4): Megatron-LM's --fp8-recipe (default delayed), Megatron-Bridge's mixed_precision.fp8_recipe "
        "(default tensorwise); with the precision-aware optimizer FusedAdam keeps int16 master remainders only under "
        "delayed (RunOptions.optimizer_fp8_recipe); None: Megatron-LM's default")
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
    moe_expert_capacity_factor: Optional[float] = Field(
        None, gt=0, allow_inf_nan=False, description="--moe-expert-capacity-factor: each expert takes at most this "
        "times its balanced share of a rank's routed copies (--capacity-factor); left out: dropless")
    moe_pad_expert_input_to_capacity: bool = Field(False, description="--moe-pad-expert-input-to-capacity: every "
                                                   "expert's input padded to its capacity (--pad-to-capacity)")
    routing_weights: Optional[Literal["combine", "experts"]] = Field(
        None, description="where the run's MoE layers apply their routing weights: 'combine' for Megatron-LM before "
        "MR 2668 (commit 2659630, main 2025-04-09; first released in core_v0.12.1, 2025-05-20; core_v0.12.0 "
        "megatron/core/transformer/moe/token_dispatcher.py L641-649: unpermute with probs at the combine, the tokens "
        "alone in the all-to-all), 'experts' after it; left out: the device family's default (execution REASONS)")
    checkpoint_early_stop: bool = Field(False, description="true: the run's full recompute is PyTorch's "
                                        "non-reentrant activation checkpoint with early stop (torch >= 2.1), "
                                        "--checkpoint-early-stop")
    eager_kernels: bool = Field(False, description="true: the run's layers are eager PyTorch modules (llm-foundry's "
                                "MPT block, no TransformerEngine): --eager-kernels")
    recompute_layers: Optional[int] = Field(None, ge=1, description="with recompute full: the number of decoder layers "
                                            "recomputed in each pipeline stage's model chunk, the others keeping their "
                                            "activations (Megatron's block method, --recompute-layers)")
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
                                              "te_releases.toml), under the other recipes but delayed FP8 whether the "
                                              "attention projection keeps a quantised copy of O; default: the TE of "
                                              "the run's container where te_releases.toml names it, else the pinned "
                                              "TE")
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
        if self.torch_cross_entropy is not None and self.cross_entropy_loss_fusion is not None:
            raise ValueError("torch_cross_entropy is PyTorch's loss, not Megatron's: give it or "
                             "cross_entropy_loss_fusion, not both")
        return self

    def loss(self) -> str:
        """The catalogue's loss variant of the recipe's cross-entropy flags: TransformerEngine's fused kernel with
        --cross-entropy-loss-fusion --cross-entropy-fusion-impl te, the compiled vocab-parallel steps with the native
        impl (native_fused: its backward holds a second fp32 copy), else Megatron's unfused vocab-parallel cross-entropy."""
        if not self.cross_entropy_loss_fusion:
            return "vocab_parallel"
        return "te_fused" if self.cross_entropy_fusion_impl == "te" else "native_fused"

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


def _recompute_policy(v: Optional[Union[str, list[str]]]) -> Optional[Union[str, list[str]]]:
    """A run's or recipe's recompute, checked as --recompute is (vocabulary.parse_recompute; a list is Megatron's
    --recompute-modules): hostile26: "banana" was reported as a run btacalc cannot express (exit 1), not as bad
    input."""
    if v is not None:
        parse_recompute(v if isinstance(v, str) else ",".join(v))
    return v


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
    known_gap_summary: str = Field("", max_length=GAP_SUMMARY_MAX, description="known_gap in one line for "
                                   "validate's table: the suspected mechanism; the full account stays in known_gap "
                                   "(validate --explain, --json); without it the table shows known_gap whole")
    memory_known_gap_summary: str = Field("", max_length=GAP_SUMMARY_MAX, description="memory_known_gap in one "
                                          "line, as known_gap_summary")
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
        (review5); so is a recipe field given beside the run's fields instead of under `recipe` (review34)."""
        for key in data if isinstance(data, dict) else ():
            if key not in cls.model_fields and key in Recipe.model_fields:  # review34: a recipe key one level up
                raise ValueError(f"key {str(key)[:60]!r} is a recipe field, not a run field: put it under 'recipe' "
                                 "(outside it, it would be carried through unread and the run planned without it)")
            near = None if key in cls.model_fields else _near_field(str(key), tuple(cls.model_fields))
            if near:
                raise ValueError(f"key {str(key)[:60]!r} is not a run field: did you mean {near!r}? (keys that are "
                                 "not near a field's name are carried through unread)")
        return data

    @field_validator("recompute")
    @classmethod
    def _a_policy(cls, v: Optional[Union[str, list[str]]]) -> Optional[Union[str, list[str]]]:
        return _recompute_policy(v)

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
    def _a_launch_is_the_whole_recipe(self) -> "MeasuredRun":
        """A run given as `megatron_args` is planned as that launch (planning/measured.py `_express_megatron`):
        a `recipe` or `router_force_load_balancing` beside it would be read in part (the recipe's tokenizer and
        notes) or not at all (its layout, overlaps and kernels; the forced balance), so the run would be planned
        without what it states. The launch states them (Megatron-LM's flags, `--moe-router-force-load-balancing`,
        and `# btacalc option:` lines for what no flag sets): refused, as a layout field the launch contradicts
        is (hostile33)."""
        beside = [k for k in ("recipe", "router_force_load_balancing") if getattr(self, k) is not None]
        if self.megatron_args is not None and beside:
            raise ValueError(f"{' and '.join(beside)} beside megatron_args: the launch is what is planned, and it "
                             "states the recipe (Megatron-LM's flags; `# btacalc option:` lines for what no flag "
                             "sets): give them in the launch, or give the run's fields without megatron_args")
        return self

    @model_validator(mode="after")
    def _one_step_measured_once(self) -> "MeasuredRun":
        """tokens_per_s_per_device and step_time_s of one run are one measurement: global_batch x seq tokens per
        step over `devices` (MEASUREMENTS_AGREE); two that contradict each other are refused, not one read silently."""
        rate, step = self.measured.tokens_per_s_per_device, self.measured.step_time_s
        if rate is None or step is None:
            return self
        implied = self.global_batch * self.seq / (step * self.devices)
        if abs(rate / implied - 1) > MEASUREMENTS_AGREE:
            raise ValueError(f"measured tokens_per_s_per_device {rate:g} and step_time_s {step:g} disagree: "
                             f"global_batch x seq / (step_time_s x devices) = {self.global_batch} x {self.seq} / "
                             f"({step:g} x {self.devices}) = {implied:.4g} tokens/s per device, and the given one is "
                             f"{rate / implied - 1:+.1%} off it (more than {MEASUREMENTS_AGREE:.0%}): give the run's "
                             "own, or one of them")
        return self

    @model_validator(mode="after")
    def _a_source_of_a_date(self) -> "MeasuredRun":
        """software_date_source says where software_date comes from: without a date it is the source of nothing
        (a date misplaced or left out), refused (review14)."""
        if self.software_date_source and self.software_date is None:
            raise ValueError("software_date_source is given without software_date: give the month (YYYY-MM) it "
                             "is the source of, or leave both out")
        return self

    @model_validator(mode="after")
    def _a_summary_of_a_gap(self) -> "MeasuredRun":
        """A gap's summary is one line of the gap it stands for: without the gap it would summarise nothing."""
        for field in ("known_gap", "memory_known_gap"):
            summary = getattr(self, field + "_summary")
            if summary and not getattr(self, field):
                raise ValueError(f"{field}_summary is given without {field}: the summary stands for the full "
                                 f"account, give {field} too (or leave both out)")
            if summary and not is_one_line(summary):
                raise ValueError(f"{field}_summary is not one line of text: it is what validate's table shows")
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


# A run file is a few kilobytes per run; this is thousands of runs.
MAX_RUN_FILE_BYTES = 16 << 20


def _no_constant(name: str) -> None:
    """JSON has no Infinity or NaN (Python's json module reads them unless told not to)."""
    raise ValueError(f"{name} is not a JSON number")


RUNS_FILE_KEYS = frozenset({"about", "runs"})  # the top level of a runs file: a note about the set, and its runs


def _names_known(run: MeasuredRun, origin: str) -> None:
    """The run's model and hardware name a preset or profile (or a file of one): hostile26: an unknown one ("nope",
    "/etc/passwd") was reported as a run btacalc cannot express (exit 1, nothing on standard error), not as the bad
    input it is, as an unknown precision or role is. Checked where a runs file is read, so that a run built in code
    (tests' synthetic runs) may name what it likes."""
    from ..config.hardware import resolve_hardware

    for field, resolve in (("model", resolve_model), ("hw", resolve_hardware)):
        try:
            resolve(getattr(run, field))
        except BtacalcError as exc:
            why = str(exc).removeprefix("hardware: " if field == "hw" else "model: ")
            raise BtacalcError(f"{{measured}}: {origin} run {run.id}: field {field}: {why}") from None


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
        _names_known(runs[-1], origin)
    # one pass (a list's count() per id would be quadratic); ids compared in Unicode's composed form (NFC): 'café'
    # written with U+00E9 and as 'e' + U+0301 print the same and name one run (review8: both were kept); and without
    # the spaces around them, which a table shows as none ('r7' and 'r7 ' were two runs: hostile36's note)
    counts = Counter(unicodedata.normalize("NFC", r.id).strip() for r in runs)
    dupes = sorted(i for i, c in counts.items() if c > 1)
    if dupes:
        raise BtacalcError(f"{{measured}}: {origin}: run ids given twice: {', '.join(dupes)}")
    if not runs:  # hostile21: {"runs": []} ended "within the documented bands", nothing checked
        raise BtacalcError(f"{{measured}}: {origin} holds no runs: nothing to predict or check (give at least one)")
    return runs
