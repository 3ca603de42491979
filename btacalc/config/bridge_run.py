"""A Megatron-Bridge recipe's overrides -> the model and the run btacalc plans (`import_bridge`).

Bridge recipes take the architecture from Hugging Face (AutoBridge); their overrides come as a YAML mapping (nested
sections or dotted keys) or as Hydra's `key=value` words (bridge_hydra). Both are read into the same dotted keys,
decoded through bridge_codec into Megatron-LM's destinations, and planned as megatron_run plans a launch
(`imported_run`), with the defaults Bridge's providers set where a file leaves a key out. Split out of
megatron_run.py (twenty-seventh session), which keeps the Megatron-LM launch reader and what both share.
"""

from __future__ import annotations

import collections.abc
import re
import reprlib
from dataclasses import replace
from typing import Any, Optional

from ..errors import BtacalcError
from .bridge_codec import (BRIDGE_NO_EFFECT, BRIDGE_NOT_AS_MEGATRON, MIXED_PRECISION_OVERWRITES, OVERWRITTEN_REASON,
                           bridge_key, bridge_value_field, check_bridge_experts, check_bridge_literals,
                           check_bridge_sixteen_bit, from_bridge)
from .bridge_fields import check_bridge_key
from .bridge_hydra import form_of, read_overrides, refuse_interpolation
from .bridge_model_bridges import bridge_provider_defaults, bridge_provider_note
from .megatron_codec import BRIDGE_LOCAL_ATTENTION, bridge_attention_environment, encode
from .megatron_launch import Launch, flags_by_dest, integer
from .megatron_model_rows import MODEL_ROWS, model_fields
from .megatron_reads import read_anywhere
from .megatron_run import (ImportedRun, ignore_reason, imported_run, source_naming, stated_devices, with_launch_environment,
                           with_option_comments)
from .model import MAX_COUNT, MAX_COUNT_TEXT, ModelSpec
from .text import exceeds_int_digits, parse_value_error


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
    with source_naming(source, bridge=True):
        return _import_bridge(text, source, devices, base)


def _import_bridge(text: str, source: str, devices: Optional[int], base: Optional[ModelSpec]) -> ImportedRun:
    form = form_of(text, source)
    if form == "empty":
        raise BtacalcError(f"{source}: no overrides (the file is empty): give a YAML mapping or key=value lines")
    try:
        flat = read_overrides(text, source, _read_by_btacalc) if form == "overrides" else _yaml_overrides(text, source)
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
    args, unread = from_bridge(flat)  # its refusals name the file (import_bridge's source_naming; review14)
    unread = _dataset_seq_length(flat, args, unread, source)
    _check_bridge_nulls(flat, args)
    _check_bridge_batch_nulls(flat)
    check_bridge_sixteen_bit(args)
    check_bridge_experts(args)
    given_as = {d: bridge_key(d) or d for d in args}  # a sequence length the dataset's (_dataset_seq_length) gave:
    given_as.update({"seq_length": k for k in DATASET_SEQ_KEYS[::-1] if k in flat and "model.seq_length" not in flat})
    # the sequence bounds the positions Bridge derives from it: refused as itself (hostile20: "field
    # max_position_embeddings: 10^26 is beyond 2^62", a field the file does not name)
    if "seq_length" in args and integer(args["seq_length"], "seq_length") > MAX_COUNT:
        raise BtacalcError(f"{given_as['seq_length']} {args['seq_length']}: beyond {MAX_COUNT_TEXT} tokens")
    args, given = _bridge_provided(args, base, source)
    experts = args.get("num_experts")
    check_bridge_literals(args, moe=type(experts) is int and experts > 0)
    launch = Launch(args=args, given_as=given_as, source=source)
    devices = stated_devices(text, source, devices)
    run = imported_run(launch, devices, base.name if base is not None and "num_layers" not in flat else None, bridge=True)
    extra = tuple((key, _bridge_reason(key)) for key in unread)
    bridged = bridge_provider_note(base.hf_model_type if base is not None else None, given, bridge_key)
    notes = run.notes + ((bridged,) if bridged else ())
    if run.model.is_moe and "moe_token_dispatcher_type" not in args:  # review27
        notes += (BRIDGE_DEFAULT_DISPATCHER,)
    run = ImportedRun(run.model, run.request, source, run.ignored + extra, notes, bridge=True)
    env = environment_comments(text)
    if env:  # freshuser17: --nvls was lost (the file said NCCL_NVLS_ENABLE=1; planned without NVLink SHARP)
        run = replace(with_launch_environment(run, env), env=tuple(env.items()))
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
    return with_option_comments(run, text)


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


# GPTDatasetConfig's sequence length, under its own name and Bridge's alias (Megatron-Bridge @ 067f987df
# src/megatron/bridge/training/config.py L223-304)
DATASET_SEQ_KEYS = ("dataset.seq_length", "dataset.sequence_length")


def _dataset_seq_length(flat: dict[str, Any], args: dict[str, Any], unread: list[str], source: str) -> list[str]:
    """hostile35: Bridge asserts that the model's and the dataset's sequence lengths match (ConfigContainer.validate,
    config.py L1630-1648 @ 067f987df: for GPTDatasetConfig, the pretraining recipes' dataset (recipes/common.py L90-95),
    and the SFT and Energon configs). `dataset.seq_length=2048` beside `model.seq_length=4096` was listed as ignored
    (outside the training step) and planned at 4096, a run Bridge refuses; alone it was planned at --model's positions
    (8192 for Llama 3 8B) where the run that passes the assertion trains the dataset's length. Returns `unread`
    without the dataset key it read."""
    given = {key: flat[key] for key in DATASET_SEQ_KEYS if key in flat}
    if not given:
        return unread
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise BtacalcError(f"{source}: {key}: takes a whole number of tokens from 1 to {MAX_COUNT_TEXT}, got "
                               f"{reprlib.repr(value)}")
    (key, length), *others = given.items()
    for other, second in others:
        if second != length:
            raise BtacalcError(f"{source}: {key}={length} and {other}={second}: one field (Bridge's alias): give one")
    if "seq_length" in args:
        model = integer(args["seq_length"], "model.seq_length")
        if model != length:
            raise BtacalcError(f"{source}: Megatron-Bridge would refuse this run: model.seq_length={model} and {key}="
                               f"{length} differ (it asserts they match, src/megatron/bridge/training/config.py "
                               "L1644-1648 @ 067f987df): give one length")
    else:
        args["seq_length"] = length
    return [k for k in unread if k not in given]


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
    if args.get("seq_length") is None:  # hostile35: refused as "the launch gives no --seq-length", another tool's flag
        raise BtacalcError(f"{source}: the overrides give no model.seq_length (nor dataset.seq_length): the run takes "
                           "its recipe's, which btacalc does not see: add model.seq_length")
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
        if exceeds_int_digits(exc):  # hostile36: it said so in Python's words, with its set_int_max_str_digits
            raise BtacalcError(f"{source}: not YAML btacalc reads: {parse_value_error(exc)}") from None
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
    for key, value in flat.items():
        refuse_interpolation(value, key, source, yaml=True, reads=_read_by_btacalc)
    return flat


def _read_by_btacalc(key: str) -> bool:
    """Whether btacalc reads `key`: an interpolation there is refused (hostile37), one in a key btacalc ignores
    (`checkpoint.save: ${oc.env:HOME}/ckpt`) is listed as ignored as before (the lead: a real recipe's paths are
    interpolated). fu23: a key is read where from_bridge does not list it as ignored and a Megatron destination it
    gives is one the row codec, the rules or the launch checks read under some setting (megatron_reads.read_anywhere):
    `model.moe_router_dtype: ${oc.env:DTYPE}`, listed as ignored when given a value, was refused. It errs towards
    refusing: a destination read only under settings other than the file's counts as read, and so does a key whose
    reading depends on its value (model.activation_func) or on another key (ddp.grad_reduce_in_fp32, which a mixed
    precision overwrites), that from_bridge refuses as "${}", or that gives no destination without being listed
    (model.cpu_offloading). A dataset's sequence length is read in the model's stead (_dataset_seq_length); a
    section (a Hydra override's dict value) holds keys btacalc may read."""
    if key in DATASET_SEQ_KEYS or key in VALUE_READ_KEYS or "." not in key:
        return True
    try:
        args, unread = from_bridge({key: "${}"})
    except BtacalcError:
        return True
    if key in unread:
        return False
    return not args or any(dest in read_anywhere() for dest in args)


# from_bridge reads model.activation_func for some values only (quick_gelu, squared_relu) and lists the others
VALUE_READ_KEYS = frozenset({"model.activation_func"})


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
