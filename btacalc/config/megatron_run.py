"""A Megatron-LM launch or a Megatron-Bridge recipe's overrides -> the model and the run btacalc plans.

`import_megatron` reads a launch script or file of arguments (megatron_launch), `import_bridge` a recipe's
YAML overrides; both decode Megatron destinations through the table of megatron_codec into a `ModelSpec`
and an `ExecutionRequest` that plan exactly that run. Every flag no row reads is listed with the reason
btacalc leaves it out (`IGNORED`); a flag with no reason there is reported as "not modelled".
"""

from __future__ import annotations

import collections.abc
import math
import re
import reprlib
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

from ..errors import BtacalcError
from .execution import DEFAULT_TOKENS_PER_STEP, MAX_DEVICES, ExecutionRequest
from .bridge_fields import check_bridge_key
from .bridge_model_bridges import bridge_provider_defaults, bridge_provider_note
from .bridge_hydra import form_of, read_overrides
from .megatron_codec import (BRIDGE_LOCAL_ATTENTION, PARAM_DESTS, bridge_attention_environment, decode, encode,
                             megatron_flag)
from .megatron_model_rows import MODEL_ROWS, model_fields
from .megatron_rows import Fields, truth
from .bridge_codec import (BRIDGE_NO_EFFECT, BRIDGE_NOT_AS_MEGATRON, MIXED_PRECISION_OVERWRITES, OVERWRITTEN_REASON,
                           bridge_key, bridge_value_field, check_bridge_experts, check_bridge_literals,
                           check_bridge_sixteen_bit, from_bridge)
from .launch_fields import model_from_fields, request_from_fields
from .megatron_launch import (MEGATRON_LM_SHORT, ArgumentValueError, BridgeText, Launch, flags_by_dest, integer,
                              read_launch)
from .megatron_rules import describe, violations
from .model import MAX_COUNT, MAX_COUNT_TEXT, MAX_LAYERS, ModelSpec

if TYPE_CHECKING:
    from .hardware import HardwareProfile

# Why a Megatron destination is not part of the plan (regular expressions over argparse destinations).
IGNORED: tuple[tuple[str, str], ...] = (
    (r"(lr|min_lr|lr_.*|decoupled_.*|weight_decay.*|(start|end)_weight_decay|adam_.*|sgd_.*|clip_grad|"
     r"init_method_std|init_model_with_meta_device|.*loss_scale.*|hysteresis|seed)",
     "optimiser hyper-parameter or initialisation: no effect on memory or step time"),
    (r"(train_iters|train_samples|exit_.*|step_batch_size_schedule|rampup_batch_size)",
     "run length or batch ramp-up: btacalc plans one step at the final --global-batch-size"),
    (r"(data_path|split|data_cache_path|num_workers|vocab_file|merge_file|tokenizer_model|tiktoken_.*|"
     r"mmap_bin_files|create_attention_mask_in_dataloader|dataloader_type|.*_data_path|reset_.*|eod_mask_loss)",
     "data loading and tokenizer files: outside the training step"),
    (r"(log_.*|save.*|load.*|eval_.*|tensorboard_.*|wandb_.*|no_load_.*|finetune|use_dist_ckpt|async_save|"
     r"ckpt_.*|dist_ckpt_.*|timing_log_.*|logging_level|profile.*)",
     "logging, evaluation and checkpointing: outside the modelled step"),
    (r"use_checkpoint_args", "the checkpoint's architecture replaces the launch's (a note says so)"),
    (r"(ddp_bucket_size|ddp_num_buckets)", "the gradient buckets: without --overlap-grad-reduce Megatron-Core reduces "
     "each gradient buffer in one bucket (training.py L2192-2193)"),
    (r"microbatch_group_size_per_vp_stage", "the interleaved schedule's micro-batch group: without virtual pipeline "
     "stages Megatron's schedule does not use it"),
    (r"(deprecated_use_mcore_models|use_legacy_models)", "Megatron-Core models are the models btacalc counts"),
    (r"(nccl_ub|fsdp_double_buffer|fsdp_manual_registration)",
     "Megatron-FSDP buffer registration: btacalc's FSDP gathers one layer's weights at a time, in the same bytes"),
    (r"(masked_softmax_fusion|bias_.*_fusion|"
     r"apply_rope_fusion|moe_permute_fusion|persist_layer_norm|"
     r"use_flash_attn)",
     "kernel choice: the same FLOPs and stored tensors (btacalc's device efficiency covers kernels)"),
    (r"(rotary_.*|add_position_embedding|layernorm_zero_centered_gamma|norm_epsilon|"
     r"apply_residual_connection_post_layernorm)",
     "numerics of the same shapes (RoPE base and fraction, LayerNorm variants): no change to memory or FLOPs"),
    (r"(moe_router_load_balancing_type|moe_aux_loss_coeff|moe_z_loss_coeff|"
     r"moe_router_bias_update_rate|moe_router_dtype|"
     r"moe_token_drop_policy|moe_router_fusion)",
     "router losses, dtype, bias update rate and which tokens a full expert drops: routing balance is btacalc's "
     "--routing-imbalance, the capacity --capacity-factor"),
    (r"(manual_gc.*|empty_unused_memory_level|calculate_per_token_loss|distributed_timeout_minutes|"
     r"distributed_backend|use_cpu_initialization|check_for_nan_in_loss_and_grad|check_for_nan_in_grad|"
     r"log_throughput|average_in_collective)",
     "runtime housekeeping: no effect on the modelled memory or time"),
    (r"(fp8.*|fp4.*)",
     "low-precision details btacalc does not model: the amax history (a few KB per module) and its reduction, "
     "FP8 margins (btacalc/data/precision.toml)"),
    (r"make_vocab_size_divisible_by", "vocabulary padding: btacalc counts --vocab-size as given"),
    (r"(cuda_graph_.*|enable_cuda_graph|external_cuda_graph)",
     "CUDA graphs beyond --cuda-graph-impl transformer_engine's per-layer scopes (read): warm-up steps, the "
     "graphs' static buffers and the local implementation are not modelled"),
    (r"(fine_grained_activation_offloading|offload_modules|cpu_offloading_.*)",
     "activation offloading beyond --cpu-offloading-num-layers (module-wise offloading, weights, double "
     "buffering): not modelled (btacalc keeps those activations on the device)"),
    (r"recompute_(method|num_layers|modules)",
     "no effect without --recompute-granularity (or --recompute-activations): Megatron-Core reads them only under a "
     "granularity (megatron/core/transformer/transformer_config.py L1900-1932 @ d98e8a64)"),
    # review28: read under --bf16 (megatron_codec._dec_precision, as --grad-reduce-in-bf16) and checked against the
    # precision-aware optimizer (_dec_moments); listed only beside --fp16
    (r"main_grads_dtype",
     "no effect under --fp16: Megatron-LM reads it only under --bf16 (megatron/training/arguments.py L1209-1216 @ "
     "d98e8a64); fp16 gradients are reduced in fp16, or in fp32 with --accumulate-allreduce-grads-in-fp32"),
    (r"tp_comm_overlap_cfg",
     "a userbuffers table (TE's ub_cfgs: a YAML file for Megatron-LM, a named table for Megatron-Bridge): not read, "
     "the run is timed with TransformerEngine's default table (btacalc/data/tp_overlap.toml); a measured run's "
     "recipe tp_overlap_cfg carries a run's own"),
    (r"(tp_comm_overlap_.*|tp_comm_.*_(ag|rs|dgrad|wgrad).*|tp_comm_bulk_.*)",
     "tensor-parallel overlap tuning: btacalc models --tp-comm-overlap on or off"),
    (r"(attention_dropout|hidden_dropout)",
     "read as the model's two dropout switches, each on when its probability is above 0"),
    (r"moe_shared_expert_overlap",
     "the shared experts beside the dispatch: btacalc times them in series; checked against the EP overlap, the "
     "dispatcher and shared_experts recomputation as Megatron-Core checks it"),
    # freshuser19: `--emit bridge` writes model.num_query_groups (the head count, over a recipe's GQA) for an MLA model
    # too, and its read-back listed it as "not modelled by btacalc"
    (r"num_query_groups",
     "no key/value groups to read: Megatron-LM passes --num-query-groups only with --group-query-attention "
     "(megatron/training/argument_utils.py L330-333 @ d98e8a64), and multi-latent attention takes its keys and values "
     "from the --kv-lora-rank latent, not from query groups"),
    # read unless --squared-relu takes the MLP (megatron_model_rows._dec_mlp)
    (r"quick_geglu",
     "passed over under --squared-relu: Megatron-LM trains squared ReLU (megatron/training/argument_utils.py "
     "L320-326 @ d98e8a64: `elif args.quick_geglu`)"),
    # Read under --bf16; listed only beside --fp16 (hostile17: it was read there without a word)
    (r"grad_reduce_in_bf16",
     "no effect under --fp16: Megatron-LM reads it only under --bf16 (megatron/training/arguments.py L1213 @ "
     "d98e8a64); fp16 gradients are reduced in fp16, or in fp32 with --accumulate-allreduce-grads-in-fp32 "
     "(L1195-1217, training.py L2635)"),
)

NOT_MODELLED = "not modelled by btacalc"


def ignore_reason(dest: str) -> str:
    return next((reason for pattern, reason in IGNORED if re.fullmatch(pattern, dest)), NOT_MODELLED)


def imported_names(bridge: bool) -> dict[str, str]:
    """{request parameter: the name a Megatron-LM launch (`bridge` False: its flag) or a Megatron-Bridge file
    (True: its ConfigContainer key) gives that setting}, for PARAM_DESTS."""
    names = {p: bridge_key(d) if bridge else megatron_flag(d) for p, d in PARAM_DESTS.items()}
    # the way out of a sequence-parallel refusal: a launch leaves the switch out, a Bridge file sets the key False
    switch = names["sequence_parallel"]
    names["no_sequence_parallel"] = f"{switch} false" if bridge else f"no {switch}"
    return {p: n for p, n in names.items() if n}


@dataclass(frozen=True)
class ImportedRun:
    """The model and the request of a Megatron run, with what btacalc left out and why."""

    model: ModelSpec
    request: ExecutionRequest
    source: str
    ignored: tuple[tuple[str, str], ...] = ()  # (flag as given, reason)
    notes: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # hostile25: the NVLink domain a `# btacalc option: --gpus-per-node` line states (launch_domain keeps it)
    stated_domain: bool = False
    # a Megatron-Bridge file (its settings are ConfigContainer keys), not a Megatron-LM launch (flags)
    bridge: bool = False
    # the GPUs are the launch's torchrun processes (review19: a refusal named them btacalc's --devices)
    torchrun_devices: bool = False


# hostile16: the plan options no Megatron-LM flag or Bridge key sets, which `--emit megatron` / `--emit bridge` write
# as whole comment lines `# btacalc option: --flag [value] (what it means)` (output.megatron.option_lines) and the
# readers take back: flag -> (the request's field, the value a switch sets, or the type of the value it takes)
LOSS_COMMENTS = ("fused", "stored")
OPTION_COMMENTS: dict[str, tuple[str, Any]] = {
    "--routing-imbalance": ("routing_imbalance", float), "--no-rht-cast-fusion": ("rht_cast_fusion", False),
    "--rht-cast-fusion": ("rht_cast_fusion", True), "--te-version": ("te_version", str),
    "--fp8-attention": ("fp8_attention", True),
    # hostile18: modelling choices a launch cannot carry either; a value outside a tuple's choices is refused
    "--attention-kernel": ("attention_kernel", str), "--accounting": ("accounting", ("ideal", "pytorch")),
    # hostile19: how btacalc counts the scores' FLOPs, and the two losses no launch flag selects (te_fused and
    # native_fused are --cross-entropy-loss-fusion with each impl, vocab_parallel Megatron's default: the launch says those)
    "--causal": ("causal", True), "--loss": ("loss", LOSS_COMMENTS),
    # hostile25: the NVLink domain, where torchrun's --nproc_per_node (or, in Bridge overrides, nothing) states another
    "--gpus-per-node": ("devices_per_node", int)}
_OPTION_LINE = re.compile(r"^\s*#\s*btacalc option:(.*)$")
_OPTION_WORDS = re.compile(r"^\s*(--[A-Za-z0-9-]+)(?:\s+([^\s(]+))?\s*(?:\(.*\))?\s*$")


def option_comments(text: str, source: str) -> dict[str, Any]:
    """The request fields of a launch's or overrides' `# btacalc option:` lines (OPTION_COMMENTS); a line btacalc
    would not write is refused in one line, never skipped."""
    changes: dict[str, Any] = {}
    for n, line in enumerate(text.splitlines(), 1):
        found = _OPTION_LINE.match(line)
        if found is None:
            continue
        words = _OPTION_WORDS.match(found.group(1))
        where = f"{source}: line {n}: # btacalc option:"
        if words is None:
            raise BtacalcError(f"{where} takes --flag [value] (what it means), got {found.group(1).strip()[:60]!r}")
        flag, given = words.groups()
        if flag not in OPTION_COMMENTS:
            raise BtacalcError(f"{where} {flag} is not an option btacalc writes in a comment (it writes "
                               f"{', '.join(OPTION_COMMENTS)})")
        field, kind = OPTION_COMMENTS[flag]
        if field in changes:
            raise BtacalcError(f"{where} {flag}: {field.replace('_', '-')} is given twice; give it once")
        if isinstance(kind, bool):
            if given is not None:
                raise BtacalcError(f"{where} {flag} is a switch and takes no value, got {given!r}")
            changes[field] = kind
            continue
        if given is None:
            raise BtacalcError(f"{where} {flag} needs a value")
        if isinstance(kind, tuple) and given not in kind:
            raise BtacalcError(f"{where} {flag} takes one of {', '.join(kind)}, got {given!r}")
        if kind is int:
            if not re.fullmatch(r"[1-9][0-9]{0,6}", given) or int(given) > MAX_DEVICES:
                raise BtacalcError(f"{where} {flag} takes a whole number of devices from 1 to {MAX_DEVICES}, got "
                                   f"{given!r}")
            changes[field] = int(given)
        elif kind is float:
            try:
                number = float(given)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                raise BtacalcError(f"{where} {flag} takes a finite number, got {given!r}")
            changes[field] = number
        else:
            changes[field] = given
    return changes


def _with_options(run: "ImportedRun", text: str) -> "ImportedRun":
    changes = option_comments(text, run.source)
    if "loss" in changes and run.request.loss in ("te_fused", "native_fused"):
        kind = {"te_fused": "TransformerEngine's fused cross-entropy",
                "native_fused": "Megatron's compiled (native) fused cross-entropy"}[run.request.loss]
        raise BtacalcError(f"{run.source}: # btacalc option: --loss {changes['loss']} beside {kind} "
                           f"({run.request.loss}), which the file's settings (or Megatron-Bridge's defaults) select: give one loss")
    if not changes:
        return run
    return replace(run, request=run.request.with_changes(**changes), stated_domain="devices_per_node" in changes)


def import_megatron(text: str, source: str, devices: Optional[int] = None) -> ImportedRun:
    """Plan inputs of a Megatron-LM launch script or file of arguments. `devices`: when the text has no
    torchrun prefix (else the two must agree)."""
    with _naming(source):
        launch = read_launch(text, source)
        return _with_options(_nccl_settings(_imported(launch, devices), launch.env), text)


@contextmanager
def _naming(source: str, bridge: bool = False) -> Iterator[None]:
    """Every refusal of an imported file names the file, as the readers' own do, and a Bridge file's value of the
    wrong kind is named by its Bridge key. hostile20: the shared decoder's refusals ("Megatron-LM's --num-layers
    (num_layers) takes an integer, got '$L'") named no file, and in a Bridge file a Megatron-LM flag the file does
    not use (`train.micro_batch_size: true` read "Megatron-LM's --micro-batch-size (micro_batch_size) takes an
    integer, got True")."""
    try:
        yield
    except ArgumentValueError as exc:
        if not bridge:
            raise BtacalcError(f"{source}: {exc.template}") from None
        # hostile24: the reason (`why`: torch's dropout check, Megatron-Core's division) was dropped for a Bridge key
        raise BtacalcError(f"{source}: {bridge_key(exc.dest) or exc.dest} takes {exc.kind}, got {exc.got}{exc.why}") \
            from None
    except BtacalcError as exc:
        if exc.template.startswith(f"{source}:"):
            raise
        raise BtacalcError(f"{source}: {exc.template}") from None


def _nccl_settings(run: ImportedRun, env: dict[str, str]) -> ImportedRun:
    """--use-nccl-ub takes NCCL's SM-efficient path only with NCCL_CTA_POLICY=1 (NVIDIA/nccl @ 5067397c
    src/enqueue.cc L2152-2173), over NVLink SHARP unless NCCL_NVLS_ENABLE=0 (NCCL's default 2 enables it where
    the system supports it, src/transport/nvls.cc)."""
    if not run.request.nccl_ub:
        return run
    if env.get("NCCL_CTA_POLICY") != "1":
        note = ("--use-nccl-ub without NCCL_CTA_POLICY=1 in the launch's environment: NCCL's default CTA policy "
                "runs the data-parallel collectives on their ring channels (planned without nccl_ub)")
        return replace(run, request=run.request.with_changes(nccl_ub=False), notes=run.notes + (note,))
    return replace(run, request=run.request.with_changes(nvls=env.get("NCCL_NVLS_ENABLE") != "0"))


def launch_domain(request: ExecutionRequest, profile: "HardwareProfile", stated: bool = False) -> ExecutionRequest:
    """An imported launch's NVLink domain on `profile`: torchrun's --nproc_per_node is one host's GPUs, which is
    the domain except where the profile's domain spans hosts (a GB200 NVL72 rack of trays of 4,
    system.devices_per_host): there a launch of one host's GPUs per node runs in the profile's domain, as
    btacalc's emitted launch (output/megatron.py) starts it. `stated`: the file's `# btacalc option: --gpus-per-node`
    gave the domain (ImportedRun.stated_domain), which stands."""
    host = profile.system.host_devices
    if not stated and host is not None and request.devices_per_node == host:
        return request.with_changes(devices_per_node=None)
    return request


# gelu: where a Bridge file leaves them, TransformerConfig's own defaults (transformer_config.py L496, L510 @ d98e8a64:
# off), not Megatron-LM's argparse ones (on), for the fused bias-GeLU and bias-dropout-add that the MoE expert rules
# test (megatron_rules.py moe-grouped-bias-dropout, moe-gelu-bias-fusion)
BRIDGE_FUSION_DEFAULTS = {"bias_gelu_fusion": False, "bias_dropout_fusion": False}
# review24: and the cross-entropy fusion, which GPTModelProvider turns on (Megatron-Bridge @ 067f987df
# models/gpt_provider.py L205; AutoBridge's model configs too, conversion/model_bridge.py L665), where Megatron-LM's
# flag is off: a Bridge file that leaves it out trains the native fused loss (native_fused, docs/memory.md "cenative")
BRIDGE_LOSS_DEFAULTS = {"cross_entropy_loss_fusion": True}
# Where a Bridge file leaves model.moe_grouped_gemm out, an MoE model's experts run as grouped GEMMs: the model
# bridges of the MoE families btacalc plans set it (Megatron-Bridge @ 067f987df models/qwen/qwen3_moe_bridge.py L63,
# deepseek/deepseek_v3_bridge.py L65, gpt_oss/gpt_oss_bridge.py L68, olmoe/olmoe_bridge.py L90), where
# GPTModelProvider's own default is off (gpt_provider.py L188); a Megatron-LM launch without --moe-grouped-gemm is
# SequentialMLP (megatron_codec._dec_grouped_gemm)
BRIDGE_MOE_DEFAULTS = {"moe_grouped_gemm": True}


# review27: an MoE Bridge file that leaves the dispatcher out, with no model bridge btacalc knows to set it (no --model
# from a Hugging Face config), trains TransformerConfig's default, allgather; the model bridges of Megatron-Bridge's MoE
# families set alltoall (bridge_model_bridges.toml), so the plan says which it took
BRIDGE_DEFAULT_DISPATCHER = (
    "model.moe_token_dispatcher_type left out: planned with TransformerConfig's default, the allgather dispatcher "
    "(Megatron-LM @ d98e8a64 transformer_config.py L891); the model bridges of Megatron-Bridge's MoE families set "
    "alltoall (btacalc/data/bridge_model_bridges.toml): give the key, or --model for a model whose bridge btacalc knows")


def import_bridge(text: str, source: str, devices: Optional[int] = None,
                  base: Optional[ModelSpec] = None) -> ImportedRun:
    """Plan inputs of a Megatron-Bridge recipe's overrides: a YAML mapping (nested sections or dotted keys), or
    Hydra's command-line overrides (`key=value` words, what Bridge's scripts take and `--emit bridge` prints;
    bridge_hydra), read into the same dotted keys. Bridge recipes take the architecture from Hugging Face
    (AutoBridge): without model.num_layers in the overrides, the architecture is `base`'s (the plan's --model)."""
    with _naming(source, bridge=True):
        return _import_bridge(text, source, devices, base)


def _import_bridge(text: str, source: str, devices: Optional[int], base: Optional[ModelSpec]) -> ImportedRun:
    form = form_of(text, source)
    if form == "empty":
        raise BtacalcError(f"{source}: no overrides (the file is empty): give a YAML mapping or key=value lines")
    try:
        flat = read_overrides(text, source) if form == "overrides" else _yaml_overrides(text, source)
    except RecursionError:  # hostile15: 5,000 nested lists were an internal error in YAML's and Hydra's parsers
        raise BtacalcError(f"{source}: nested too deeply to read (a value is a number, a string, a boolean, null "
                           "or a list of them)") from None
    for key, value in flat.items():
        # a key Bridge's config does not have: Hydra refuses it (bridge_hydra), Bridge's YAML merge skips it with a
        # warning (omegaconf_utils.py _apply_overrides L470-474); a misspelt field is refused naming the nearest
        check_bridge_key(key, source)
        field = bridge_value_field(key)
        if field is not None:
            raise BtacalcError(f"{source}: {key}: {field} takes one value (a number, string, boolean or list; "
                               "btacalc reads it), not keys below it: give the field its value")
        if not _plain(value):
            raise BtacalcError(f"{source}: {key}: {type(value).__name__} {reprlib.repr(value)} is not an override "
                               "value (a number, a string, a boolean, null or a list of them)")
    args, unread = from_bridge(flat)  # its refusals name the file (import_bridge's _naming; review14)
    _check_bridge_nulls(flat, args)
    _check_bridge_batch_nulls(flat)
    check_bridge_sixteen_bit(args)
    check_bridge_experts(args)
    given_as = {d: bridge_key(d) or d for d in args}
    # the sequence bounds the positions Bridge derives from it: refused as itself (hostile20: "field
    # max_position_embeddings: 10^26 is beyond 2^62", a field the file does not name)
    if "seq_length" in args and integer(args["seq_length"], "seq_length") > MAX_COUNT:
        raise BtacalcError(f"{given_as['seq_length']} {args['seq_length']}: beyond {MAX_COUNT_TEXT} tokens")
    args, given = _bridge_provided(args, base, source)
    experts = args.get("num_experts")
    check_bridge_literals(args, moe=type(experts) is int and experts > 0)
    launch = Launch(args=args, given_as=given_as, source=source)
    run = _imported(launch, devices, base.name if base is not None and "num_layers" not in flat else None, bridge=True)
    extra = tuple((key, _bridge_reason(key)) for key in unread)
    bridged = bridge_provider_note(base.hf_model_type if base is not None else None, given, bridge_key)
    notes = run.notes + ((bridged,) if bridged else ())
    if run.model.is_moe and "moe_token_dispatcher_type" not in args:  # review27
        notes += (BRIDGE_DEFAULT_DISPATCHER,)
    run = ImportedRun(run.model, run.request, source, run.ignored + extra, notes, bridge=True)
    env = environment_comments(text)
    if env:  # freshuser17: --nvls was lost (the file said NCCL_NVLS_ENABLE=1; planned without NVLink SHARP)
        run = replace(_nccl_settings(run, env), env=tuple(env.items()))
    wanted = bridge_attention_environment(args)
    key = given_as.get("attention_backend", "model.attention_backend")
    if str(args.get("attention_backend")) == "local":
        run = replace(run, notes=run.notes + (BRIDGE_LOCAL_ATTENTION.format(key=key),))
    elif any(env.get(name) != value for name, value in wanted.items()):
        run = replace(run, notes=run.notes + (
            f"{key}={args['attention_backend']} without "
            + " ".join(f"{k}={v}" for k, v in wanted.items()) + " in the environment: a Hydra override sets the "
            "string, which Megatron-Core does not map to TransformerEngine's switches (language_module.py "
            "L129-145), so TransformerEngine may choose another kernel; planned as given",))
    return _with_options(run, text)


# The Megatron-LM options with a default other than None whose Bridge / Megatron-Core field is Optional (None there is
# a setting: num_query_groups None is one group per head, transformer_config.py L175 @ d98e8a64; rotary_scaling_factor,
# gpt_provider.py L147 @ 067f987d): a null is read as given. tests/test_hostile25.py derives the set from the mirrors'
# annotations (GPTModelProvider, TransformerConfig, ModelParallelConfig, DistributedDataParallelConfig, OptimizerConfig,
# Bridge's and Megatron-LM's training configs)
NULLABLE_WITH_DEFAULT = frozenset({
    "async_ckpt_io_priority", "cp_comm_type", "eval_iters", "fp4_recipe", "fp8_recipe", "linear_conv_kernel_dim",
    "linear_key_head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_value_head_dim",
    "megatron_fsdp_grad_comm_dtype", "megatron_fsdp_main_grads_dtype", "megatron_fsdp_main_params_dtype", "min_lr",
    "mtp_loss_scaling_factor", "num_query_groups", "offload_modules", "rotary_scaling_factor"})
# and a field annotated without None that Bridge's own recipes set to None: attention_backend (llama3.py's 70B recipe,
# tests/data/megatron/llama3-70b-32gpu-h100-bridge.yaml), which Megatron-Core's _set_attention_backend matches to no
# AttnBackend member and sets no NVTE_* switch for (language_module.py L129-148 @ d98e8a64): TransformerEngine chooses;
# review25: and moe_flex_dispatcher_backend (annotated Literal['deepep', 'hybridep', 'ncclep'], transformer_config.py
# L898), which Bridge's Qwen3 MoE performance recipes set to None beside the alltoall dispatcher (Megatron-Bridge @
# 067f987df src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py L158-159, the b200 ones L57, L105, ...; and
# scripts/performance/utils/utils.py L396): only the flex dispatcher reads it, and btacalc times a flex dispatcher
# without a DeepEP or HybridEP backend as an all-to-all (megatron_codec._dec_dispatcher); a dump of such a recipe was refused
NULL_IN_RECIPES = frozenset({"attention_backend", "moe_flex_dispatcher_backend"})


def _check_bridge_nulls(flat: dict[str, Any], args: dict[str, Any]) -> None:
    """hostile25: a key btacalc reads set to null, whose Megatron-LM option takes a value and has a default other than
    None (model.hidden_dropout, model.rotary_base, model.tensor_model_parallel_size, model.moe_router_topk): Bridge
    sets the field to None as given (omegaconf_utils.py L454-515 @ 067f987d), and btacalc planned Megatron-LM's default
    or the preset's in silence (moe_router_topk: "field top_k: Input should be a valid integer"). A switch's null reads
    as off, as Megatron-Core's `if` reads None; fields whose default is None (the emitted
    model.virtual_pipeline_model_parallel_size=null) stay None."""
    from .megatron_launch import flags_by_dest

    for dest, value in args.items():
        key = bridge_key(dest) or f"model.{dest}"
        if value is not None or key not in flat or flat[key] is not None:
            continue
        flags = flags_by_dest().get(dest, [])
        if flags and flags[0].arity != "0" and flags[0].default != "None" and dest not in NULLABLE_WITH_DEFAULT | NULL_IN_RECIPES:
            raise BtacalcError(f"{key}=null: Megatron-Bridge sets the field to None as given (omegaconf_utils.py "
                               f"_apply_overrides L454-515 @ 067f987d), where Megatron-LM's {flags[0].flag} defaults "
                               f"to {flags[0].default}: give a value, or leave the key out")


# Megatron-Bridge asserts both training batch sizes before it trains (ConfigContainer.validate, training/config.py
# L1433-1442 @ 067f987d: they set the evaluation's when it gives none) and sizes the micro-batch calculator from
# them (Megatron-LM's num_microbatches_calculator takes an int), where Megatron-LM's own --global-batch-size defaults
# to micro-batch x DP: a null, which btacalc read as left out (hostile25's note), is refused
BRIDGE_BATCH_KEYS = ("train.global_batch_size", "train.micro_batch_size")


def _check_bridge_batch_nulls(flat: dict[str, Any]) -> None:
    for key in BRIDGE_BATCH_KEYS:
        if key in flat and flat[key] is None:
            raise BtacalcError(f"{key}=null: Megatron-Bridge needs the training batch sizes (training/config.py "
                               "L1433-1442 @ 067f987d asserts them): give a whole number, or leave the key out")


# semantics22 / review20: a field Bridge overrides leave out keeps the model provider's value, not Megatron-LM's argparse
# default, which only a launch's absent flag takes (megatron_rows.Get). An MLA provider is an MLATransformerConfig
# (Megatron-Bridge @ 067f987df src/megatron/bridge/models/mla_provider.py L28), whose YaRN factor is 40, mscale 1.0 and
# mscale_all_dim 0.0 (Megatron-LM @ d98e8a64 transformer_config.py L3315-3331), over which AutoBridge writes the Hugging
# Face config's rope_scaling (model_bridge.py MLA_ROPE_SCALING_MAPPING L516-523, applied L607) and the DeepSeek-V3 recipe 40 again
# (recipes/deepseek/h100/deepseek_v3.py L143): the reader took factor 1 ("no YaRN") where Bridge trains 40. The RoPE
# base, norm epsilon and initial std come from the Hugging Face config (model_bridge.py L466-467, L476-477): the plan's
# --model's where given, else unknown (None: the preset of the same shape gives them, megatron_run._from_preset).
MLA_PROVIDER_YARN = {"rotary_scaling_factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.0}


def _bridge_provided(args: dict[str, Any], base: Optional[ModelSpec], source: str) -> tuple[dict[str, Any], set[str]]:
    """The overrides over what the model provider holds where they leave a field out: the architecture (--model's,
    AutoBridge's Hugging Face config, when the overrides give none), GPTModelProvider's and TransformerConfig's
    defaults, and over those the fields the model bridge AutoBridge picks for --model's Hugging Face config sets
    (DeepSeek-V3's: TransformerEngine's fused cross-entropy, the bias fusions, the alltoall dispatcher, the shared
    experts' overlap; bridge_model_bridges.toml). And the destinations the overrides and the architecture give (what
    the bridge's note leaves out)."""
    if "num_layers" not in args:
        if base is None:
            raise BtacalcError(f"{source}: the overrides give no architecture (model.num_layers ...): add {{model}}")
        seq = integer(args.get("seq_length") or base.max_position_embeddings or 4096, "seq_length")
        args = {**encode({**model_fields(base), "run.seq_len": seq}, MODEL_ROWS), **args}
    else:
        args = {**_bridge_provider_values(args, base), **args}
    given = set(args)
    args = {**BRIDGE_FUSION_DEFAULTS, **BRIDGE_LOSS_DEFAULTS, **BRIDGE_MOE_DEFAULTS,
            **bridge_provider_defaults(base.hf_model_type if base is not None else None), **args}
    if "max_position_embeddings" not in args and "seq_length" in args:  # GPTModelProvider: positions = seq_length
        integer(args["seq_length"], "seq_length")  # refused as itself, not as the positions it gives (hostile20)
        args["max_position_embeddings"] = args["seq_length"]
    return args, given


def _bridge_provider_values(args: dict[str, Any], base: Optional[ModelSpec]) -> dict[str, Any]:
    """The destinations Bridge overrides that give the architecture leave to the model provider (above): the plan's
    --model's (`base`, AutoBridge's Hugging Face config) where given, else the provider's own or None."""
    from .megatron_model_rows import MLA_YARN_DESTS, NUMERIC_DESTS, ROPE_SCALING_SWITCH

    given = encode({**model_fields(base), "run.seq_len": 4096}, MODEL_ROWS) if base is not None else {}
    out: dict[str, Any] = {dest: given.get(dest) for dest in (*NUMERIC_DESTS.values(), ROPE_SCALING_SWITCH)}
    if base is not None and ROPE_SCALING_SWITCH not in given:
        out[ROPE_SCALING_SWITCH] = False if base.numerics.rope_scaling_factor is not None else None
    if base is not None:  # the Hugging Face config's attention_dropout (model_bridge.py L469 @ 067f987df); the hidden
        out["attention_dropout"] = given["attention_dropout"]  # dropout is the model bridge's (bridge_model_bridges)
    if args.get("multi_latent_attention") in (True, "true", "True"):
        out.update({dest: given.get(dest, MLA_PROVIDER_YARN[dest]) if base is not None and base.mla is not None
                    else MLA_PROVIDER_YARN[dest] for dest in MLA_YARN_DESTS})
    return out


# The environment `--emit bridge` states beside the overrides (output.megatron.bridge_overrides): a Bridge recipe sets
# no environment variable, so the launch's exports are comment lines `# environment: NAME=VALUE`
_ENVIRONMENT_LINE = re.compile(r"^\s*#\s*environment:\s*([A-Za-z_][A-Za-z0-9_]*)=(\S*)\s*$")


def environment_comments(text: str) -> dict[str, str]:
    """The `# environment: NAME=VALUE` lines of a Bridge overrides file, read as a launch's exports (the last wins)."""
    return {m.group(1): m.group(2) for m in map(_ENVIRONMENT_LINE.match, text.splitlines()) if m}


# Bridge ConfigContainer sections outside the model and the step (src/megatron/bridge/training/config.py).
_BRIDGE_SECTIONS = {
    "dataset": "data loading and tokenizer: outside the training step",
    "tokenizer": "data loading and tokenizer: outside the training step",
    "validation": "logging, evaluation and checkpointing: outside the modelled step",
    "logger": "logging, evaluation and checkpointing: outside the modelled step",
    "checkpoint": "logging, evaluation and checkpointing: outside the modelled step",
    "profiling": "logging, evaluation and checkpointing: outside the modelled step",
    "scheduler": "optimiser hyper-parameter or initialisation: no effect on memory or step time",
}


# OmegaConf's YAML, which Megatron-Bridge reads a recipe's overrides with (OmegaConf.load, omegaconf_utils.py L147):
# PyYAML's SafeLoader with floats also without a dot ("1e3" is 1000.0, where YAML 1.1 reads the string "1e3") and no
# dates ("2024-01-01" stays a string) (omry/omegaconf @ 350bdb632865c5dd2286f2f6521acefe4abd843d, v2.3.0,
# omegaconf/_utils.py L154-174; Bridge needs omegaconf>=2.3.0, pyproject.toml L82)
_DIGITS = r"[0-9]+(?:_[0-9]+)*"
_OMEGACONF_FLOAT = re.compile(rf"""^(?:[-+]?{_DIGITS}\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?{_DIGITS}[eE][-+]?[0-9]+
    |\.{_DIGITS}(?:[eE][-+][0-9]+)?
    |[-+]?{_DIGITS}(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)


def _yaml_overrides(text: str, source: str) -> dict[str, Any]:
    """The dotted keys of a recipe's YAML overrides, read as OmegaConf reads them (_unique_keys_loader)."""
    import yaml

    try:
        data = yaml.load(text, Loader=_unique_keys_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise BtacalcError(f"{source}: not YAML: {str(exc).splitlines()[0]}") from None
    except (ValueError, TypeError, AttributeError, KeyError) as exc:  # hostile22: were internal errors (exit 3)
        raise BtacalcError(f"{source}: not YAML: a value its tag cannot take (such as !!int 4.5): "
                           f"{type(exc).__name__}: {str(exc)[:80]}") from None
    if not isinstance(data, dict):
        raise BtacalcError(f"{source}: a Bridge recipe's overrides are a YAML mapping (model:, train:, ddp:, ...) "
                           "or Hydra's key=value overrides")
    flat: dict[str, Any] = {}
    try:
        _flatten(data, "", flat)
    except BtacalcError as exc:
        raise BtacalcError(f"{source}: {exc}") from None
    return flat


def _unique_keys_loader() -> Any:
    """OmegaConf's reading of YAML (_OMEGACONF_FLOAT), refusing a key given twice in one mapping, as OmegaConf does
    (SafeLoader keeps the last silently). A merge key (`<<: *defaults`) is no key given twice: SafeLoader merges
    it, the mapping's own keys winning, and OmegaConf reads it so (its loader passes over keys of other tags;
    _utils.py get_yaml_loader); hostile20: it was refused "could not determine a constructor for the tag
    'tag:yaml.org,2002:merge'"."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, collections.abc.Hashable) and key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice",
                                                            key_node.start_mark)
                seen.add(key) if isinstance(key, collections.abc.Hashable) else None
            return super().construct_mapping(node, deep=deep)

    UniqueKeys.add_implicit_resolver("tag:yaml.org,2002:float", _OMEGACONF_FLOAT, list("-+0123456789."))
    UniqueKeys.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in rules if tag != "tag:yaml.org,2002:timestamp"]
                                          for first, rules in UniqueKeys.yaml_implicit_resolvers.items()}
    return UniqueKeys


def _bridge_reason(key: str) -> str:
    if key in MIXED_PRECISION_OVERWRITES:  # listed unread only where a mixed precision overwrites it (from_bridge)
        return OVERWRITTEN_REASON
    if key in BRIDGE_NOT_AS_MEGATRON or key in BRIDGE_NO_EFFECT:
        return {**BRIDGE_NOT_AS_MEGATRON, **BRIDGE_NO_EFFECT}[key]
    section, _, leaf = key.partition(".")
    return _BRIDGE_SECTIONS.get(section) or ignore_reason(leaf.split(".")[-1] or section)


# The most keys (sections and values) a recipe's YAML overrides may hold: Megatron-Bridge's config has 1,168
# fields (btacalc/data/bridge_fields.toml). YAML aliases repeat a section wherever they are used, so 9 sections of 9
# aliases of the one before name 9^9 keys in 1 KB of text: walking them took minutes and gigabytes (hostile20)
MAX_BRIDGE_KEYS = 10_000


def _flatten(data: dict[str, Any], prefix: str, out: dict[str, Any], within: tuple[int, ...] = (),
             walked: Optional[list[int]] = None) -> None:
    """Dotted keys of nested sections. A key given twice (`train.global_batch_size` beside `train:` with the
    same key), a section that holds itself (a YAML alias to its own anchor) or a value that is not a
    number, a string, a boolean, null or a list of them (a YAML date, binary, set) is refused: each would
    leave one of two values or none read. More than MAX_BRIDGE_KEYS keys, counted as aliases repeat them, are
    refused before they are walked."""
    if id(data) in within:
        raise BtacalcError(f"section {prefix.rstrip('.') or '(top)'} holds itself (a YAML alias of its own anchor)")
    walked = walked if walked is not None else [0]
    walked[0] += len(data)
    if walked[0] > MAX_BRIDGE_KEYS:
        raise BtacalcError(f"more than {MAX_BRIDGE_KEYS:,} keys with the YAML aliases expanded (reached at "
                           f"{prefix.rstrip('.') or '(top)'}); Megatron-Bridge's config has 1,168 fields")
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, name + ".", out, (*within, id(data)), walked)
            continue
        if name in out:
            raise BtacalcError(f"{name} is given twice (as a dotted key and in its section)")
        if not _plain(value):
            raise BtacalcError(f"{name}: {type(value).__name__} {reprlib.repr(value)} is not an override value "
                               "(a number, a string, a boolean, null or a list of them)")
        out[name] = value


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(not isinstance(v, (list, dict)) and _plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


# Rules about the launch environment: a file of arguments does not show the environment it runs in.
ENVIRONMENT_RULES = ("fsdp-connections", "tp-cp-connections")


# Sizes Megatron-LM divides by (the world size by TP x PP x CP, the experts' ranks, a stage's layers by its virtual
# stages): 0 stopped the rules' check with a bare ZeroDivisionError or was read as not given (review7)
DIVISORS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
            "expert_model_parallel_size", "expert_tensor_parallel_size", "num_layers_per_virtual_pipeline_stage",
            "num_virtual_stages_per_pipeline_rank", "micro_batch_size")
# Counts that are sizes, never divisors: 0 or less is no run (review13: a global batch of -64 sequences was read
# as gradient accumulation -64 and refused naming --grad-accum, which the launch does not give)
POSITIVE_SIZES = ("global_batch_size",)
# The model's sizes (hostile20): 0 or less stopped the plan with "the inputs take a number beyond the arithmetic's
# range (ZeroDivisionError ...)" (seq_length, num_attention_heads), was refused as "no preset of this shape"
# (num_layers, hidden_size), or was read as not given (kv_channels, num_query_groups, moe_ffn_hidden_size 0 planned
# h/a, MHA and the dense FFN, where Megatron-LM takes the 0 it is given)
MODEL_SIZES = ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "max_position_embeddings",
               "ffn_hidden_size", "num_query_groups", "kv_channels", "moe_ffn_hidden_size", "moe_router_topk",
               "vocab_size")


def _check_divisors(launch: Launch) -> None:
    """Sizes Megatron-LM divides by (DIVISORS; micro_batch_size: the global batch over micro batch x DP,
    num_microbatches_calculator.py L381, where 0 stopped the rules' check with a ZeroDivisionError, review13) and
    the batch sizes (POSITIVE_SIZES) and the model's sizes (MODEL_SIZES) are at least 1, refused naming the
    argument as the launch gives it."""
    for dest in (*DIVISORS, *POSITIVE_SIZES, *MODEL_SIZES):
        value = launch.args.get(dest)
        if value is not None and integer(value, dest) < 1:
            why = ("Megatron-LM divides by it" if dest in DIVISORS else "a count of sequences" if dest in POSITIVE_SIZES
                   else "a size of the model")
            raise BtacalcError(f"{launch.source}: {launch.given_as.get(dest, dest)} {value}: must be at least 1 "
                               f"({why})")
    # hostile22: the layers are counted one by one (an MoE pattern, a window pattern) before the model is validated, so
    # --num-layers 9223372036854775807 ran until it was stopped, its memory growing
    layers = launch.args.get("num_layers")
    if layers is not None and integer(layers, "num_layers") > MAX_LAYERS:
        raise BtacalcError(f"{launch.source}: {launch.given_as.get('num_layers', 'num_layers')} {layers}: more than "
                           f"{MAX_LAYERS:,} layers, btacalc's bound on a model (ModelSpec.num_layers)")


def _check_modules(launch: Launch) -> None:
    """recompute_modules is a list of module names (Megatron-Core's TransformerConfig.recompute_modules:
    Optional[List[str]], which it iterates). hostile22: a Bridge file's `model.recompute_modules=core_attn` was read
    letter by letter ("--recompute: recompute '_,a,c,e,n,o,r,t,t' names t twice"), and a number, a boolean or
    [1,2] was an internal error."""
    modules = launch.args.get("recompute_modules")
    if modules is not None and not (isinstance(modules, list) and all(type(m) in (str, BridgeText) for m in modules)):
        raise ArgumentValueError("recompute_modules", "a list of module names (such as [core_attn,mlp])",
                                 reprlib.repr(str(modules) if isinstance(modules, BridgeText) else modules))


# hostile25: arguments that make Megatron-LM train another model than the flags btacalc reads (they were planned from
# the flags, each listed as "not modelled by btacalc"): refused naming the argument and where Megatron-LM reads it
_ELSEWHERE_ARGS = "megatron/training/arguments.py"
ARGUMENTS_ELSEWHERE = {
    "yaml_cfg": f"Megatron-LM replaces every argument with that YAML file's ({_ELSEWHERE_ARGS} L137-140 load_yaml, "
                "validated by yaml_arguments.validate_yaml, L103-104 @ d98e8a64), which btacalc does not read: give "
                "its arguments as the launch's flags",
    "heterogeneous_layers_config_path": f"Megatron-LM builds each layer's attention and MLP from the JSON's "
                                        f"block_configs, a heterogeneous model ({_ELSEWHERE_ARGS} L172-243, L409 @ "
                                        "d98e8a64), which btacalc does not model: every layer it plans is alike",
}
ARGUMENTS_ELSEWHERE["heterogeneous_layers_config_encoded_json"] = ARGUMENTS_ELSEWHERE["heterogeneous_layers_config_path"]
CHECKPOINT_ARGS_NOTE = ("--use-checkpoint-args: Megatron-LM takes the model's layers, sizes, heads, experts, "
                        "positions and parallel sizes from the checkpoint it loads (megatron/training/checkpointing.py L2199-2365 @ "
                        "d98e8a64, load_args_from_checkpoint, most with force=True), which btacalc does not read: "
                        "planned with the launch's own flags")


# hostile25: Megatron-LM's training scripts (at d98e8a64) that build another model than pretrain_gpt.py's GPTModel, which
# btacalc plans; a launch of one was planned as a GPT without a word
OTHER_MODEL_SCRIPTS = {
    "pretrain_hybrid.py": "a HybridModel of Mamba, attention and MLP layers (pretrain_hybrid.py L44, model_provider)",
    "pretrain_mamba.py": "a HybridModel of Mamba, attention and MLP layers (pretrain_mamba.py runs pretrain_hybrid.py, "
                         "L16-19)",
    "pretrain_vlm.py": "a LLaVAModel, a vision encoder before the language model (pretrain_vlm.py L20, L207)",
}


# Megatron-LM's training script whose step btacalc plans (pretrain_gpt.py's GPTModel), and the other one at d98e8a64
# that trains a GPTModel, in another loop: planned with a note (hostile25 left them planned without a word)
GPT_SCRIPT = "pretrain_gpt.py"
OTHER_LOOP_SCRIPTS = {
    "train_rl.py": "reinforcement learning (train_rl.py L383-420 @ d98e8a64: inference arguments, rollouts generated "
                   "between the optimizer steps): btacalc plans the training step of its GPTModel, not the rollouts",
}


def _script_note(launch: Launch) -> None:
    """A note on a launch whose script is not pretrain_gpt.py (and not one of OTHER_MODEL_SCRIPTS, refused)."""
    script = Path(launch.script).name
    if not script or script == GPT_SCRIPT:
        return
    why = OTHER_LOOP_SCRIPTS.get(script, "a script Megatron-LM @ d98e8a64 does not have: btacalc plans it as "
                                         f"{GPT_SCRIPT}'s GPTModel from the launch's flags")
    launch.notes.append(f"{launch.script}: {why}")


def _check_model_source(launch: Launch) -> None:
    """hostile25: the model Megatron-LM trains comes from the launch's flags (not a YAML file or a heterogeneous
    layer config) in a script that builds a GPT, and its depth from --num-layers or --encoder-num-layers, never both
    (arguments.py L1304-1311 @ d98e8a64: with --encoder-num-layers alone Megatron-LM sets num_layers to it)."""
    script = Path(launch.script).name
    if script in OTHER_MODEL_SCRIPTS:
        raise BtacalcError(f"{launch.source}: {launch.script} builds {OTHER_MODEL_SCRIPTS[script]} at Megatron-LM "
                           "@ d98e8a64, not pretrain_gpt.py's GPTModel, which is the model btacalc plans")
    _script_note(launch)
    for dest, why in ARGUMENTS_ELSEWHERE.items():
        if launch.args.get(dest) is not None:
            raise BtacalcError(f"{launch.source}: {launch.given_as.get(dest, dest)} {launch.args[dest]}: {why}")
    layers, encoder = launch.args.get("num_layers"), launch.args.get("encoder_num_layers")
    if layers is not None and encoder is not None:
        raise BtacalcError(f"{launch.source}: Megatron-LM would refuse this launch: {launch.given_as['num_layers']} "
                           f"and {launch.given_as['encoder_num_layers']} together ('cannot have both num-layers and "
                           f"encoder-num-layers specified', {_ELSEWHERE_ARGS} L1304-1306 @ d98e8a64); give one")
    if encoder is not None:
        launch.args["num_layers"] = launch.args.pop("encoder_num_layers")
        launch.given_as["num_layers"] = launch.given_as.pop("encoder_num_layers")
    elif layers is None:
        if "num_layers" in launch.args:  # a Bridge file's model.num_layers: null, which Bridge sets as given
            raise BtacalcError(f"{launch.source}: {launch.given_as.get('num_layers', 'num_layers')}=null leaves the "
                               "model no number of layers: give one")
        raise BtacalcError(f"{launch.source}: the launch gives no --num-layers (Megatron-LM requires it or "
                           f"--encoder-num-layers: 'either num-layers or encoder-num-layers should be specified', "
                           f"{_ELSEWHERE_ARGS} L1308-1311 @ d98e8a64)")


def in_bridge_keys(text: str) -> str:
    """`text` with each Megatron-LM flag in it written as Megatron-Bridge's key for the same destination
    (bridge_codec.bridge_key); a flag Bridge has no key for stays."""
    dest_of = {f.flag: dest for dest, flags in flags_by_dest().items() for f in flags}

    def key(m: "re.Match[str]") -> str:
        dest = dest_of.get(m.group(0))
        return (bridge_key(dest) or m.group(0)) if dest is not None else m.group(0)
    return re.sub(r"--[a-z0-9][a-z0-9-]*", key, text)


def _imported(launch: Launch, devices: Optional[int], name: Optional[str] = None, bridge: bool = False) -> ImportedRun:
    _check_model_source(launch)
    _check_divisors(launch)
    _check_modules(launch)
    if not bridge:
        launch = _megatron_ffn(launch)
    devices = _devices(launch, devices)
    refused = [r for r in violations(dict(launch.args, world=devices), launch.env, bridge)
               if r.name not in ENVIRONMENT_RULES]
    if refused and bridge:  # review19: a Bridge file's refusal named Megatron-LM's flags, which the file never used
        raise BtacalcError(f"{launch.source}: Megatron would refuse this run: {in_bridge_keys(describe(refused[0]))}")
    if refused:
        raise BtacalcError(f"{launch.source}: Megatron-LM would refuse this launch: {describe(refused[0])}")
    fields, read = decode(launch.args)
    notes: list[str] = list(launch.notes)
    if truth(launch.args.get("use_checkpoint_args")):
        notes.append(CHECKPOINT_ARGS_NOTE)
    spec = model_from_fields(fields, launch.source, notes, name)
    if not bridge:
        _megatron_batch(launch, fields, devices, notes)
    elif fields.get("batch.global_batch") is None:
        notes.append(BRIDGE_NO_GLOBAL_BATCH)
    request = request_from_fields(fields, spec, devices, launch.devices_per_node, notes)
    ignored = tuple((launch.given_as.get(d, d), ignore_reason(d)) for d in launch.args
                    if d not in read and d in launch.given_as)
    notes += [fields[key] for key in ("run.dispatcher_note", "run.cuda_graph_note", "run.mla_norm_note",
                                      "run.dropout_note", "run.precision_note", "run.param_gather_note",
                                      "run.expert_gemm_note")
              if fields.get(key)]
    return ImportedRun(spec, request, launch.source, ignored, tuple(notes), tuple(launch.env.items()),
                       torchrun_devices=launch.devices is not None)


# hostile34 (noted): overrides without train.global_batch_size were planned at btacalc's default batch in silence
BRIDGE_NO_GLOBAL_BATCH = ("the file sets no train.global_batch_size: the run takes its recipe's, which btacalc does "
                          "not see (it reads the overrides, not the recipe function), so the plan takes btacalc's "
                          f"default batch (whole sequences of {DEFAULT_TOKENS_PER_STEP:,} tokens per step); add "
                          "train.global_batch_size to the file to plan the recipe's")


def _megatron_ffn(launch: Launch) -> Launch:
    """A SwiGLU launch without --ffn-hidden-size: Megatron-LM sets int(4h x 2/3 / 64) x 64 (arguments.py L1320-1327
    @ d98e8a64), before TransformerConfig's 4h (which a Bridge provider without one takes). hostile34: the launch was
    read at 4h, 16,384 for h 4,096 where Megatron-LM builds 10,880."""
    h = launch.args.get("hidden_size")
    if launch.args.get("ffn_hidden_size") is not None or h is None or not truth(launch.args.get("swiglu")):
        return launch
    ffn = int((4 * integer(h, "hidden_size") * 2 / 3) / 64) * 64
    return replace(launch, args={**launch.args, "ffn_hidden_size": ffn})


def _megatron_batch(launch: Launch, f: Fields, devices: int, notes: list[str]) -> None:
    """A launch's batch as Megatron-LM takes it (hostile34: without --global-batch-size the plan took btacalc's
    default 4M-token batch, 64 micro-batches where Megatron runs one). Megatron-LM asserts --micro-batch-size
    (arguments.py L693), and without --global-batch-size runs micro-batch x DP sequences per step (L702-704), DP the
    world size over TP x PP x CP (L442-448)."""
    if f.get("batch.micro_batch") is None:
        raise BtacalcError(f"{launch.source}: the launch gives no --micro-batch-size, which Megatron-LM asserts "
                           f"({MEGATRON_LM_SHORT} megatron/training/arguments.py L693): give it")
    if f.get("batch.global_batch") is not None:
        return
    model_size = f["layout.tensor_parallel"] * f["layout.pipeline_parallel"] * f["layout.context_parallel"]
    f["batch.global_batch"] = f["batch.micro_batch"] * (devices // model_size)
    notes.append(f"the launch gives no --global-batch-size: Megatron-LM runs --micro-batch-size x data-parallel size = "
                 f"{f['batch.micro_batch']} x {devices // model_size} = {f['batch.global_batch']} sequences per step, "
                 f"one micro-batch per rank ({MEGATRON_LM_SHORT} megatron/training/arguments.py L702-704)")


def _devices(launch: Launch, devices: Optional[int]) -> int:
    if launch.devices is not None and devices is not None and devices != launch.devices:
        raise BtacalcError(f"{{devices}} {devices} contradicts the launch's torchrun ({launch.devices} processes)")
    chosen = devices if devices is not None else launch.devices
    if chosen is None and launch.unknown_size:
        raise BtacalcError(f"{launch.source}: torchrun's {launch.unknown_size} is no number of processes btacalc can "
                           "read (a variable the file does not set, gpu, auto or an elastic range): give {devices}")
    if chosen is None:
        raise BtacalcError(f"{launch.source}: no torchrun --nproc_per_node/--nnodes: give {{devices}}")
    return chosen
