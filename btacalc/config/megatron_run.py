"""A Megatron-LM launch or a Megatron-Bridge recipe's overrides -> the model and the run btacalc plans.

`import_megatron` reads a launch script or file of arguments (megatron_launch), `bridge_run.import_bridge` a
recipe's YAML overrides; both decode Megatron destinations through the table of megatron_codec into a `ModelSpec`
and an `ExecutionRequest` that plan exactly that run. Every flag no row reads is listed with the reason
btacalc leaves it out (`IGNORED`); a flag with no reason there is reported as "not modelled".
"""

from __future__ import annotations

import math
import re
import reprlib
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from ..errors import BtacalcError, clean_text
from .execution import DEFAULT_TOKENS_PER_STEP, MAX_DEVICES, ExecutionRequest
from .megatron_codec import PARAM_DESTS, decode, megatron_flag
from .megatron_rows import Fields, truth
from .bridge_codec import bridge_key
from .launch_fields import model_from_fields, request_from_fields
from .megatron_launch import (MEGATRON_LM_SHORT, ArgumentValueError, BridgeText, Launch, flags_by_dest, integer,
                              read_launch)
from .megatron_rules import describe, violations
from .model import MAX_LAYERS, ModelSpec
from .text import DECIMAL

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
    # fu22: read as the MoE model's load-balancing loss (megatron_model_rows._dec_balancing) unless listed here
    (r"(moe_router_load_balancing_type|moe_aux_loss_coeff)",
     "not read: the model holds one load-balancing loss of type aux_loss, seq_aux_loss, global_aux_loss or none and "
     "its coefficient; sinkhorn or quantile_balancing routing, several types at once, or a dense model's router "
     "settings are not carried (the plan routes top-k; routing balance is btacalc's --routing-imbalance)"),
    (r"(moe_z_loss_coeff|"
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
    (r"decoder_seq_length", "an encoder-decoder model's target length: pretrain_gpt.py's GPTModel trains at "
                            "--seq-length (Megatron-LM checks only that the positions cover it, arguments.py L1357)"),
    # make_vocab_size_divisible_by is read, a Megatron-LM launch's and a Bridge file's alike (Layout.vocab_multiple,
    # megatron_model_rows._dec_vocab), so that `--emit bridge` reads back as the plan it came from; Megatron-Bridge
    # itself pads only a vocabulary the model leaves unset (training/setup.py L741-781 @ 067f987d), as the emitted
    # overrides say (output/megatron.py BRIDGE_VOCAB_NOTE). review30: the entry that listed it as ignored was never
    # reached and said a Bridge file's was not read
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

# freshuser23: switches btacalc plans off, which `--emit bridge` writes off (bridge_codec.BRIDGE_UNSAID_MOE, over a
# recipe's own) and a file may say off: read back, an off value is what the plan runs, not a setting it ignores (the
# emitted overrides of every shared-expert model listed model.moe_shared_expert_overlap as ignored)
PLANNED_OFF = frozenset({"moe_shared_expert_overlap"})


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


# freshuser21: a launch that does not fit was told to add btacalc's options (`--recompute full`, `--seq 3881`,
# `--search`), each refused beside the file ("the file gives the run"): each suggestion names the change as the file
# makes it. (btacalc's words, the launch's flags, the Bridge file's keys), as --emit megatron / bridge write them.
SUGGESTED_IN_FILE = (
    (r"--recompute full", "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
     "model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1"),
    (r"dropping --recompute-layers \d+", "--recompute-method uniform --recompute-num-layers 1",
     "model.recompute_method=uniform model.recompute_num_layers=1"),
    (r"--attention flash", "--attention-backend fused", "model.attention_backend=fused"),
    (r"--seq (\d+)", r"--seq-length \1", r"model.seq_length=\1"),
    (r"--micro-batch (\d+)", r"--micro-batch-size \1", r"train.micro_batch_size=\1"),
    (r"--devices (\d+) --ep (\d+) --zero (\d)", r"\1 GPUs at --expert-model-parallel-size \2, ZeRO-\3,",
     r"\1 GPUs at model.expert_model_parallel_size=\2, ZeRO-\3,"),
    (r"--devices (\d+) --zero (\d)", r"\1 GPUs at ZeRO-\2,", r"\1 GPUs at ZeRO-\2,"),
    (r"--search finds", "plan --search, given the model and --devices instead of the file (which fixes the layout), "
     "finds", "plan --search, given the model and --devices instead of the file (which fixes the layout), finds"),
)


def suggestions_in_file(suggestions: list[str], bridge: bool) -> list[str]:
    """What would fit an imported run, in the words of its file (SUGGESTED_IN_FILE): each btacalc option a
    suggestion names at its start, or after a ZeRO stage (`--recompute full`), as the file's flags or keys."""
    out = []
    for text in suggestions:
        for words, flags, keys in SUGGESTED_IN_FILE:
            text = re.sub(rf"(^|, | )({words})(?=[ ,:]|$)", _in_file(words, keys if bridge else flags), text)
        out.append(text)
    return out


def _in_file(words: str, replacement: str) -> Callable[["re.Match[str]"], str]:
    return lambda m: m.group(1) + re.sub(words, replacement, m.group(2))


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
    # freshuser21: the variables the file leaves unset that set torchrun's process count (Launch.scheduled)
    scheduled: tuple[str, ...] = ()


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
    "--gpus-per-node": ("devices_per_node", int),
    # freshuser20: the device count, which Bridge overrides (no launcher) do not hold: read before the run is built
    # (`stated_devices`)
    "--devices": ("devices", int)}
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
            if not DECIMAL.fullmatch(given):  # hostile37: float() read '1_5' as 15, and '１.5' and '٢' too
                raise BtacalcError(f"{where} {flag} takes a number written in decimal digits, got {given!r}")
            changes[field] = number
        else:
            changes[field] = given
    return changes


def stated_devices(text: str, source: str, devices: Optional[int]) -> Optional[int]:
    """The device count: the command line's, else the file's `# btacalc option: --devices N` (what `--emit bridge`
    writes, since Megatron-Bridge overrides hold no launcher); given both, they must agree."""
    written = option_comments(text, source).get("devices")
    if devices is not None and written is not None and devices != written:
        raise BtacalcError(f"{{devices}} {devices} contradicts the file's `# btacalc option: --devices {written}`")
    return devices if devices is not None else written


def with_option_comments(run: "ImportedRun", text: str) -> "ImportedRun":
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
    with source_naming(source):
        launch = read_launch(text, source)
        run = imported_run(launch, stated_devices(text, source, devices))
        return with_option_comments(with_launch_environment(run, launch.env), text)


@contextmanager
def source_naming(source: str, bridge: bool = False) -> Iterator[None]:
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


def with_launch_environment(run: ImportedRun, env: dict[str, str]) -> ImportedRun:
    """The settings of a launch's environment btacalc reads. --use-nccl-ub takes NCCL's SM-efficient path only
    with NCCL_CTA_POLICY=1 (NVIDIA/nccl @ 5067397c src/enqueue.cc L2152-2173), over NVLink SHARP unless
    NCCL_NVLS_ENABLE=0 (NCCL's default 2 enables it where the system supports it, src/transport/nvls.cc). Under the
    EP all-to-all overlap, the one place the clock reads it, the launch's CUDA_DEVICE_MAX_CONNECTIONS, a whole
    number 1-32, is the plan's --cuda-max-connections (execution.Overlaps.max_connections); elsewhere it is the 1 a
    tensor-parallel launch sets (output/megatron.py `_environment` writes it back), and another value is left to
    CUDA."""
    connections = env.get("CUDA_DEVICE_MAX_CONNECTIONS", "")
    overlapped = run.request.overlap_all_to_all or run.request.overlaps.all_to_all
    if overlapped and connections.isascii() and connections.isdigit() and 1 <= int(connections) <= 32:
        o = run.request.overlaps
        run = replace(run, request=run.request.with_changes(overlaps=replace(o, max_connections=int(connections))))
    elif overlapped and connections:
        # hostile41: 0, 64, 1e0 or eight under the overlap were planned as unset with no word
        run = replace(run, notes=run.notes + (
            f"CUDA_DEVICE_MAX_CONNECTIONS={clean_text(connections)!r} in the launch's environment is not a whole "
            "number 1-32, the hardware work queues CUDA takes: not read, the all-to-all overlap is planned with it "
            "unset (CUDA's 8 queues): export a number 1-32",))
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
# fu23: the destinations imported_run's own checks read beside the row codec and the rules (megatron_reads): a
# configuration read from elsewhere, the encoder's depth and length that stand for the model's, the checkpoint's
# arguments, the sizes checked to be at least 1
LAUNCH_CHECKED = frozenset({*ARGUMENTS_ELSEWHERE, "encoder_num_layers", "encoder_seq_length", "use_checkpoint_args"})
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


def _megatron_seq_length(launch: Launch) -> None:
    """hostile35: the sequence length of a Megatron-LM launch is --seq-length or --encoder-seq-length, never both
    (arguments.py L1346-1351 @ d98e8a64: `assert args.encoder_seq_length is None` when --seq-length is given, else
    seq_length = encoder_seq_length). A launch with --encoder-seq-length alone was refused as giving no --seq-length;
    one with both was planned at --seq-length, the other listed as not modelled."""
    seq, encoder = launch.args.get("seq_length"), launch.args.get("encoder_seq_length")
    if encoder is None:
        return
    if seq is not None:
        flags = f"{launch.given_as['seq_length']} and {launch.given_as['encoder_seq_length']}"
        raise BtacalcError(f"{launch.source}: Megatron-LM would refuse this launch: {flags} together (it asserts "
                           f"encoder_seq_length is None when seq_length is given, {_ELSEWHERE_ARGS} L1346-1348 @ "
                           "d98e8a64); give one")
    launch.args["seq_length"] = launch.args.pop("encoder_seq_length")
    launch.given_as["seq_length"] = launch.given_as.pop("encoder_seq_length")


def _check_required(launch: Launch) -> None:
    """Megatron-LM's required arguments, in its order (arguments.py L1314-1317 @ d98e8a64: num_layers, hidden_size,
    num_attention_heads, max_position_embeddings; --num-layers is checked with --encoder-num-layers,
    `_check_model_source`). hostile34: a launch without --max-position-embeddings was refused by the later check that
    it is at least --seq-length (L1354). A Megatron-Bridge file has no such field (its GPT provider sizes positions by
    seq_length: bridge_codec.py)."""
    for dest in ("hidden_size", "num_attention_heads", "max_position_embeddings"):
        if launch.args.get(dest) is None:
            raise BtacalcError(f"{launch.source}: Megatron-LM would refuse this launch: --{dest.replace('_', '-')} is "
                               f"a required argument ({_ELSEWHERE_ARGS} L1314-1317 @ d98e8a64)")


def in_bridge_keys(text: str) -> str:
    """`text` with each Megatron-LM flag in it written as Megatron-Bridge's key for the same destination
    (bridge_codec.bridge_key); a flag Bridge has no key for stays."""
    dest_of = {f.flag: dest for dest, flags in flags_by_dest().items() for f in flags}

    def key(m: "re.Match[str]") -> str:
        dest = dest_of.get(m.group(0))
        return (bridge_key(dest) or m.group(0)) if dest is not None else m.group(0)
    return re.sub(r"--[a-z0-9][a-z0-9-]*", key, text)


def imported_run(launch: Launch, devices: Optional[int], name: Optional[str] = None,
                 bridge: bool = False) -> ImportedRun:
    _check_model_source(launch)
    _check_divisors(launch)
    _check_modules(launch)
    if not bridge:
        _check_required(launch)
        _megatron_seq_length(launch)
        launch = _megatron_ffn(launch)
    devices = _devices(launch, devices, bridge)
    refused = [r for r in violations(dict(launch.args, world=devices), launch.env, bridge)
               if r.name not in ENVIRONMENT_RULES]
    if refused and bridge:  # review19: a Bridge file's refusal named Megatron-LM's flags, which the file never used
        raise BtacalcError(f"{launch.source}: Megatron would refuse this run: {in_bridge_keys(describe(refused[0]))}")
    if refused:
        raise BtacalcError(f"{launch.source}: Megatron-LM would refuse this launch: {describe(refused[0])}")
    fields, read = decode(launch.args)
    notes: list[str] = list(launch.notes) + scheduled_note(launch, devices)
    if truth(launch.args.get("use_checkpoint_args")):
        notes.append(CHECKPOINT_ARGS_NOTE)
    spec = model_from_fields(fields, launch.source, notes, name)
    if not bridge:
        _vocab_padding(launch)
        _megatron_batch(launch, fields, devices, notes)
    elif fields.get("batch.global_batch") is None:
        notes.append(BRIDGE_NO_GLOBAL_BATCH)
    request = request_from_fields(fields, spec, devices, launch.devices_per_node, notes)
    ignored = tuple((launch.given_as.get(d, d), ignore_reason(d)) for d in launch.args
                    if d not in read and d in launch.given_as and not (d in PLANNED_OFF and not truth(launch.args[d])))
    notes += [fields[key] for key in ("run.dispatcher_note", "run.cuda_graph_note", "run.mla_norm_note",
                                      "run.dropout_note", "run.precision_note", "run.param_gather_note",
                                      "run.expert_gemm_note", "run.softmax_note")
              if fields.get(key)]
    return ImportedRun(spec, request, launch.source, ignored, tuple(notes), tuple(launch.env.items()),
                       torchrun_devices=launch.devices is not None, scheduled=launch.scheduled)


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


def _vocab_padding(launch: Launch) -> None:
    """Megatron-LM trains the vocabulary padded up to a multiple of --make-vocab-size-divisible-by x TP
    (megatron/training/vocab_utils.py L44-59 @ d98e8a64; the flag's default 128, arguments.py L2441), and so does the
    plan (Layout.vocab_multiple, model/problem.py padded_vocab). hostile35 refused a multiple that padded the
    vocabulary otherwise than the default; session 31 plans it (Megatron-LM's own examples give 1, 64, 1187, 3232).
    Megatron-LM refuses 0 or below (L53-54)."""
    given = launch.args.get("make_vocab_size_divisible_by")
    if given is None:
        return
    flag, multiple = launch.given_as["make_vocab_size_divisible_by"], integer(given, "make_vocab_size_divisible_by")
    if multiple < 1:
        raise BtacalcError(f"{launch.source}: Megatron-LM would refuse this launch: {flag} {multiple} (it raises "
                           "'make_vocab_size_divisible_by must be positive', megatron/training/vocab_utils.py L53-54)")


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


def scheduled_names(names: tuple[str, ...]) -> str:
    """`${SLURM_NNODES:-...}`: how a note or refusal names the variables of Launch.scheduled."""
    return ", ".join("${" + n + ":-...}" for n in names)


def scheduled_note(launch: Launch, devices: int) -> list[str]:
    """What the plan took for a process count the file leaves to the environment it runs in (freshuser21)."""
    if not launch.scheduled:
        return []
    where = scheduled_names(launch.scheduled)
    if devices != launch.devices:
        return [f"torchrun's process count reads {where}, unset in the file: planned on --devices {devices}, not the "
                f"{launch.devices} processes of its default"]
    return [f"torchrun's process count reads {where}, unset in the file: planned on the {devices} processes of its "
            "default; --devices N plans the run on N"]


def _devices(launch: Launch, devices: Optional[int], bridge: bool = False) -> int:
    if launch.scheduled and devices is not None and devices != launch.devices:
        per_node = launch.devices_per_node
        if per_node and not launch.scheduled_per_node and devices % per_node:
            raise BtacalcError(f"{{devices}} {devices} is no whole number of nodes of the launch's torchrun "
                               f"--nproc_per_node {per_node} (its {scheduled_names(launch.scheduled)} sets the "
                               f"nodes): give a multiple of {per_node}")
        return devices
    if launch.devices is not None and devices is not None and devices != launch.devices:
        raise BtacalcError(f"{{devices}} {devices} contradicts the launch's torchrun ({launch.devices} processes)")
    chosen = devices if devices is not None else launch.devices
    if chosen is None and launch.unknown_size:
        raise BtacalcError(f"{launch.source}: torchrun's {launch.unknown_size} is no number of processes btacalc can "
                           "read (a variable the file does not set, gpu, auto or an elastic range): give {devices}")
    if chosen is None and bridge:  # freshuser20: the torchrun this named is Megatron-LM's, not in a Bridge file
        raise BtacalcError(f"{launch.source}: Megatron-Bridge overrides hold no device count (--emit bridge writes it "
                           "as `# btacalc option: --devices N`): give {devices}")
    if chosen is None:
        raise BtacalcError(f"{launch.source}: no torchrun --nproc_per_node/--nnodes: give {{devices}}")
    return chosen
