"""Megatron-Bridge's side of megatron_codec: the ConfigContainer key of each Megatron-LM destination (BRIDGE_KEYS,
at BRIDGE_PIN), a run written as Bridge overrides (`to_bridge`), and Bridge overrides read back into Megatron
destinations (`from_bridge`) for megatron_codec's rows to decode; with the Bridge-only rules (its mixed-precision
recipes, the values it states where Megatron-LM's parser would default, its Literal fields).
"""

from __future__ import annotations

import ast

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from ..errors import BtacalcError
from .bridge_fields import bridge_fields
from .bridge_mixed import SECTION as MIXED_SECTION
from .bridge_mixed import (bridge_mixed_presets, preset_values, read_whole_section, section_values, source_value,
                           whole_section)
from .megatron_launch import BridgeFloat, BridgeText, integer, megatron_flags, pattern
from .text import cut as _cut
from .text import nearest_name
from .megatron_codec import BRIDGE_PIN, FP8_ATTENTION_BRIDGE_KEY, FP8_ATTENTION_DEST, PRECISIONS
from .megatron_model_rows import MLA_YARN_BRIDGE
from .megatron_rows import Args, truth


# Megatron-Bridge ConfigContainer keys of the destinations, at BRIDGE_PIN: model.* are TransformerConfig /
# GPTModelProvider fields (src/megatron/bridge/models/gpt_provider.py), train.* TrainingConfig, ddp.*
# DistributedDataParallelConfig, checkpoint.* CheckpointConfig (src/megatron/bridge/training/config.py),
# comm_overlap.* CommOverlapConfig (src/megatron/bridge/training/comm_overlap.py:377-397). A destination with
# a different name or sense in Bridge carries its converters (to Bridge, from Bridge).
def _neg(v: Any) -> Any:
    return not truth(v)


def _as_is(v: Any) -> Any:
    return v


# A Bridge key that holds Megatron's value unchanged: (to Bridge, from Bridge).
_AS_IS: tuple[Callable[[Any], Any], Callable[[Any], Any]] = (_as_is, _as_is)

# The dtype names Megatron-Bridge turns a string override of a torch.dtype field into (its _apply_overrides calls
# str_to_dtype where the field's current value is a torch.dtype: Megatron-Bridge @ 067f987d
# src/megatron/bridge/training/utils/omegaconf_utils.py L498-505; the names: utils/activation_map.py L94-115, with
# the "torch.<name>" aliases of the names without a dot, a leading digit or a hyphen), as Megatron-LM's flags spell
# the same dtype (arguments.py L3671-3677 @ d98e8a64: fp32, fp16, bf16, fp8). An OptimizerConfig dtype is such a field
# (optimizer_config.py L197-207 @ d98e8a64, torch.float32 by default).
_BRIDGE_DTYPE_NAMES = {"fp32": ("fp32", "float32", "32", "32-true"), "fp16": ("fp16", "float16", "16", "16-mixed"),
                       "bf16": ("bf16", "bfloat16", "bf16-mixed"), "fp8": ("fp8", "float8_e4m3fn"),
                       "fp8-e5m2": ("float8_e5m2",)}
BRIDGE_DTYPES: dict[str, str] = {name: dtype for dtype, names in _BRIDGE_DTYPE_NAMES.items() for name in names}
BRIDGE_DTYPES.update({f"torch.{name}": dtype for name, dtype in list(BRIDGE_DTYPES.items())
                      if "." not in name and not name[0].isdigit() and "-" not in name})


def _dtype(key: str) -> tuple[str, Callable[[Any], Any], Callable[[Any], Any]]:
    """An OptimizerConfig dtype field `key`: Megatron's name written as it is (str_to_dtype reads fp32, bf16, fp16 and
    fp8), read back through BRIDGE_DTYPES. A name str_to_dtype does not know is refused (Bridge keeps the string,
    and Megatron-Core's checks and TransformerEngine's FusedAdam fail on it), and so is a value that is not a string:
    Bridge sets it as given, unconverted (omegaconf_utils.py L498-499), where Megatron-Core compares torch dtypes."""
    def read(value: Any) -> Any:
        dtype = BRIDGE_DTYPES.get(str(value)) if isinstance(value, str) else None
        if value is not None and dtype is None:
            raise BtacalcError(f"{key}={_cut(repr(value))}: Megatron-Bridge reads a dtype from a string, one of "
                               f"{', '.join(n for n in BRIDGE_DTYPES if not n.startswith('torch.'))} or "
                               "torch.<name> (utils/activation_map.py L94-115 @ 067f987d)")
        return dtype
    return key, _as_is, read

BRIDGE_KEYS: dict[str, tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = {
    "num_experts": ("model.num_moe_experts", *_AS_IS),
    # the releases' TransformerConfig field (Megatron-LM @ d98e8a64 transformer_config.py L1129, deprecated for
    # cuda_graph_modules L1090) that Megatron-Bridge's perf configs set (cuda_graph_scope=[...]): read back only
    "cuda_graph_scope_deprecated": ("model.cuda_graph_scope", *_AS_IS),
    "swiglu": ("model.gated_linear_unit", *_AS_IS),
    # gelu: Megatron-LM's --no-bias-gelu-fusion is the ungated MLP's bias_activation_fusion (argument_utils.py L319)
    "bias_gelu_fusion": ("model.bias_activation_fusion", *_AS_IS),
    "untie_embeddings_and_output_weights": ("model.share_embeddings_and_output_weights", _neg, _neg),
    "micro_batch_size": ("train.micro_batch_size", *_AS_IS),
    "global_batch_size": ("train.global_batch_size", *_AS_IS),
    "use_distributed_optimizer": ("ddp.use_distributed_optimizer", *_AS_IS),
    "use_megatron_fsdp": ("ddp.use_megatron_fsdp", *_AS_IS),
    # hostile30: DistributedInitConfig.use_torch_fsdp2 (Megatron-Bridge @ 067f987d training/config.py), refused as
    # Megatron-LM's --use-torch-fsdp2 is (megatron_codec._dec_sharding), not planned as Megatron DDP
    "use_torch_fsdp2": ("dist.use_torch_fsdp2", *_AS_IS),
    "data_parallel_sharding_strategy": ("ddp.data_parallel_sharding_strategy", *_AS_IS),
    "overlap_grad_reduce": ("ddp.overlap_grad_reduce", *_AS_IS),
    "overlap_param_gather": ("ddp.overlap_param_gather", *_AS_IS),
    "nccl_ub": ("ddp.nccl_ub", *_AS_IS),
    "ddp_bucket_size": ("ddp.bucket_size", *_AS_IS),
    "ddp_num_buckets": ("ddp.num_buckets", *_AS_IS),
    # Megatron-Bridge @ 067f987df: a ModelParallelConfig field of the model provider (recipes/glm/h100/glm5.py L60)
    "microbatch_group_size_per_vp_stage": ("model.microbatch_group_size_per_vp_stage", *_AS_IS),
    "grad_reduce_in_bf16": ("ddp.grad_reduce_in_fp32", _neg, _neg),
    "ckpt_format": ("checkpoint.ckpt_format", *_AS_IS),
    "tp_comm_overlap": ("comm_overlap.tp_comm_overlap", *_AS_IS),
    "overlap_moe_expert_parallel_comm": ("comm_overlap.overlap_moe_expert_parallel_comm", *_AS_IS),
    # CommOverlapConfig.delay_wgrad_compute (comm_overlap.py L373, L419 @ 067f987d: it sets the model's), where
    # Megatron-Bridge's performance harness turns it on with the EP overlap (scripts/performance/utils/overrides.py
    # L189-197)
    "delay_wgrad_compute": ("comm_overlap.delay_wgrad_compute", *_AS_IS),
    "num_virtual_stages_per_pipeline_rank": ("model.virtual_pipeline_model_parallel_size", *_AS_IS),
    "window_size": ("model.window_size", *_AS_IS),
    "use_rope_scaling": ("model.rope_scaling", *_AS_IS),  # GPTModelProvider.rope_scaling (gpt_provider.py L145)
    # GPTModelProvider.seq_len_interpolation_factor (gpt_provider.py L148): numerics23, linear RoPE scaling
    "rotary_seq_len_interpolation_factor": ("model.seq_len_interpolation_factor", *_AS_IS),
    "decoder_first_pipeline_num_layers": ("model.num_layers_in_first_pipeline_stage", *_AS_IS),
    "decoder_last_pipeline_num_layers": ("model.num_layers_in_last_pipeline_stage", *_AS_IS),
    "bf16": ("mixed_precision", lambda v: "bf16_mixed" if v else None, lambda v: str(v).startswith("bf16")),
    "num_attention_heads": ("model.num_attention_heads", *_AS_IS),
    "attention_dropout": ("model.attention_dropout", *_AS_IS),
    "use_precision_aware_optimizer": ("optimizer.use_precision_aware_optimizer", *_AS_IS),
    "optimizer": ("optimizer.optimizer", *_AS_IS),  # megatron.core.optimizer OptimizerConfig.optimizer ('adam', 'sgd')
    "exp_avg_dtype": _dtype("optimizer.exp_avg_dtype"),
    "exp_avg_sq_dtype": _dtype("optimizer.exp_avg_sq_dtype"),
    # the precision-aware optimizer's master weights (megatron_codec._dec_moments: refused unless fp32) and main
    # gradients (from_bridge: Megatron-Core reads them only in OptimizerConfig's assertion)
    "main_params_dtype": _dtype("optimizer.main_params_dtype"),
    "main_grads_dtype": _dtype("optimizer.main_grads_dtype"),
    # review28: refused (megatron_codec._dec_moments); read so that a Bridge file's is refused as a launch's is
    "optimizer_cpu_offload": ("optimizer.optimizer_cpu_offload", *_AS_IS),
    # MixedPrecisionConfig's fields, copied onto the model config (BRIDGE_PIN mixed_precision.py L53, L73-74, L138-164)
    "first_last_layers_bf16": ("mixed_precision.first_last_layers_bf16", *_AS_IS),
    "num_layers_at_start_in_bf16": ("mixed_precision.num_layers_at_start_in_bf16", *_AS_IS),
    "num_layers_at_end_in_bf16": ("mixed_precision.num_layers_at_end_in_bf16", *_AS_IS),
}
# Not Bridge config keys: data and tokenizer are Bridge's dataset/tokenizer configs, not the model's.
# max_position_embeddings: GPTModelProvider sizes positions by seq_length (no such field in gpt_provider.py).
# fp8/fp4: Bridge names the whole precision recipe (BRIDGE_PRECISION).
# train_iters, lr: the launch's placeholder run (megatron_model_rows.PLACEHOLDER_RUN); a Bridge recipe sets its own.
BRIDGE_SKIP = {"mock_data", "tokenizer_type", "group_query_attention", "max_position_embeddings",
               "fp8", "fp8_recipe", "fp4", "fp4_recipe", "train_iters", "lr"}
# btacalc precision -> Megatron-Bridge's mixed-precision recipe (src/megatron/bridge/training/mixed_precision.py:
# bf16_mixed 185, ..._fp8_delayed_scaling 217, ..._mxfp8 255, ..._fp8_current_scaling 285,
# ..._fp8_subchannel_scaling 373, ..._nvfp4 405).
BRIDGE_PRECISION = {"bf16": "bf16_mixed", "fp8": "bf16_with_fp8_delayed_scaling_mixed",
                    "fp8-current": "bf16_with_fp8_current_scaling_mixed",
                    "fp8-blockwise": "bf16_with_fp8_subchannel_scaling_mixed", "mxfp8": "bf16_with_mxfp8_mixed",
                    "nvfp4": "bf16_with_nvfp4_mixed"}
# hostile16: Megatron-Bridge applies its MixedPrecisionConfig last: whenever `mixed_precision` is set (a recipe's name,
# or its fields), runtime_config_update resolves the name and calls setup (BRIDGE_PIN src/megatron/bridge/training/
# config.py L2012-2016), which writes every MixedPrecisionConfig field onto the same-named field of the model, the
# optimizer and the DDP config whenever the two differ (mixed_precision.py L113-164,
# update_config_with_precision_overrides). So the mixed-precision value of these fields is the one Bridge trains with
# and a ddp.grad_reduce_in_fp32 or model.fp8_param_gather beside it is overwritten. The recipes' values (BRIDGE_PIN
# mixed_precision.py: the dataclass defaults L47, L61, L66; bf16_mixed L185-198 grad_reduce_in_fp32 True; fp16_mixed
# L201-214 False; fp8_param_gather = True in the delayed (L231), MXFP8 (L264) and current-scaling (L302) recipes, False
# in the subchannel one (L384); bf16_with_nvfp4_mixed L405-418 fp4_param_gather = True). fp8_param / fp4_param are
# kept equal to them by MixedPrecisionConfig.__setattr__ (L77-95).
BRIDGE_FP16_RECIPE = "fp16_mixed"
# the recipe fields btacalc reads, from the preset table (btacalc/data/bridge_mixed_precision.toml, read from Bridge's
# source; bridgemp): one copy of Bridge's values, not a second hand-written one (review33)
_RECIPE_FIELD_NAMES = ("bf16", "fp16", "grad_reduce_in_fp32", "fp8_param_gather", "fp4_param_gather")
BRIDGE_RECIPE_FIELDS: dict[str, dict[str, bool]] = {
    precision: {k: preset_values(name)[k] for k in _RECIPE_FIELD_NAMES}
    for precision, name in {**BRIDGE_PRECISION, "fp16": BRIDGE_FP16_RECIPE}.items()}
# MixedPrecisionConfig's own defaults (mixed_precision.py L40-66), for `mixed_precision.*` fields without a recipe name
BRIDGE_MIXED_DEFAULTS = {k: source_value(bridge_mixed_presets().fields[k].default) for k in _RECIPE_FIELD_NAMES}
# the mixed-precision fields btacalc reads, with the synonyms __setattr__ keeps equal
_MIXED_FIELDS = {"bf16": "bf16", "fp16": "fp16", "grad_reduce_in_fp32": "grad_reduce_in_fp32",
                 "fp8_param_gather": "fp8_param_gather", "fp8_param": "fp8_param_gather",
                 "fp4_param_gather": "fp4_param_gather", "fp4_param": "fp4_param_gather"}
# the low-precision recipe's fields (strings, or null), MixedPrecisionConfig's defaults (mixed_precision.py L49-52,
# L64-65: note fp8_recipe "tensorwise", where Megatron-LM's --fp8-recipe defaults to delayed)
_MIXED_LOW_DEFAULTS: dict[str, Optional[str]] = {"fp8": None, "fp8_recipe": "tensorwise", "fp4": None,
                                                 "fp4_recipe": "nvfp4"}
# the keys btacalc would read that Bridge's mixed precision overwrites (listed as ignored, with the reason)
MIXED_PRECISION_OVERWRITES = {"model.bf16": "bf16", "model.fp16": "fp16", "ddp.grad_reduce_in_fp32":
                              "grad_reduce_in_fp32", "model.fp8_param_gather": "fp8_param_gather",
                              "model.fp4_param_gather": "fp4_param_gather",
                              **{f"model.{k}": k for k in _MIXED_LOW_DEFAULTS}}
OVERWRITTEN_REASON = ("overwritten by mixed_precision: Megatron-Bridge copies its mixed-precision fields onto the model, "
                      "optimizer and DDP configs (mixed_precision.py L138-164, config.py L2012-2016 @ 067f987d)")
_MIXED_DESTS = ("bf16", "fp16", "grad_reduce_in_bf16", "accumulate_allreduce_grads_in_fp32", "fp8_param_gather",
                "fp4_param_gather")


def _bridge_precision_name(args: Args) -> str:
    """btacalc's precision of Megatron destinations (bf16 / fp16 and the FP8/FP4 recipe)."""
    if truth(args.get("fp16")):
        return "fp16"
    return next(k for k, v in PRECISIONS.items() if all(args.get(d) == x for d, x in v.items())
                and (v or ("fp8" not in args and "fp4" not in args)))


def _to_bridge_mixed(args: Args, out: dict[str, Any]) -> None:
    """The mixed-precision recipe of `args`, with `mixed_precision.<field>` wherever the plan differs from the
    recipe's value: Bridge takes these from the mixed precision, not from ddp / model (BRIDGE_RECIPE_FIELDS)."""
    name = _bridge_precision_name(args)
    out["mixed_precision"] = BRIDGE_FP16_RECIPE if name == "fp16" else BRIDGE_PRECISION[name]
    recipe = BRIDGE_RECIPE_FIELDS[name]
    fp32 = truth(args.get("accumulate_allreduce_grads_in_fp32")) if name == "fp16" else \
        not truth(args.get("grad_reduce_in_bf16"))
    wanted = {"grad_reduce_in_fp32": fp32,
              "fp4_param_gather" if name == "nvfp4" else "fp8_param_gather":
                  truth(args.get("fp8_param_gather")) or truth(args.get("fp4_param_gather"))}
    for field, value in wanted.items():
        if value != recipe[field]:
            out[f"mixed_precision.{field}"] = value
    # review28: Bridge copies its mixed precision's fp8_recipe onto the optimizer config too (mixed_precision.py
    # L113-157 @ 067f987d), tensorwise where the recipe has no FP8 one (L50-52); under the precision-aware optimizer it
    # decides FusedAdam's master weights (RunOptions.param_remainders), so the plan's (Megatron-LM's delayed unless
    # the plan says) is written where it differs
    if truth(args.get("use_precision_aware_optimizer")) and "fp8_recipe" not in PRECISIONS.get(name, {}):
        optimizer_recipe = args.get("fp8_recipe", "delayed")
        if optimizer_recipe != _MIXED_LOW_DEFAULTS["fp8_recipe"]:
            out["mixed_precision.fp8_recipe"] = optimizer_recipe


def _mixed_field(key: str) -> Optional[str]:
    """The field of a `mixed_precision.<field>` override key, else None."""
    head, _, field = key.partition(".")
    return field if head == "mixed_precision" and field else None


@dataclass(frozen=True)
class BridgeMixed:
    """A Bridge file's mixed precision, as written and as Bridge resolves it (see BRIDGE_RECIPE_FIELDS).

    Written: `recipe` (the `mixed_precision` value: a recipe's name, or None), `given` (its `mixed_precision.<switch>`
    values, by the field's own name) and `low_given` (its `mixed_precision.fp8 / fp8_recipe / fp4 / fp4_recipe`).
    Resolved: `fields` (the switches Bridge trains with: the recipe's, else MixedPrecisionConfig's defaults, under the
    given ones) and `low` (the FP8 / FP4 recipe fields, likewise)."""

    recipe: Any
    given: Mapping[str, Any]
    low_given: Mapping[str, Any]
    fields: Mapping[str, bool]
    low: Mapping[str, Optional[str]]

    @classmethod
    def read(cls, overrides: Mapping[str, Any], name: Optional[str]) -> Optional["BridgeMixed"]:
        """The mixed precision of `overrides` (`name`: btacalc's precision of its recipe, None for none), refused
        where Bridge or Megatron-Core would refuse it; None when the file sets no mixed precision at all."""
        fields_of = {k: _mixed_field(k) for k in overrides}
        given = {f: _bridge_value(overrides[k], k) for k, f in fields_of.items()  # a string is refused (truth)
                 if f in _MIXED_FIELDS}
        # hostile16: mixed_precision.fp8 / fp8_recipe / fp4 / fp4_recipe were listed "ignored: low-precision details"
        # and the run planned in bf16, though Bridge copies them onto the model's (an FP8 run)
        low_given = {f: overrides[k] for k, f in fields_of.items() if f in _MIXED_LOW_DEFAULTS}
        if name is None and not given and not low_given:
            return None  # no MixedPrecisionConfig: Bridge leaves the model's and the DDP config's own fields
        low = dict(_MIXED_LOW_DEFAULTS)
        if name is not None and name in PRECISIONS:
            low.update(PRECISIONS[name])
        for field, value in low_given.items():
            if value is not None and not isinstance(value, str):
                raise BtacalcError(f"mixed_precision.{field}={value!r}: Megatron-Bridge takes a recipe name (a string) "
                                   "or null")
            low[field] = value
        fields = dict(BRIDGE_RECIPE_FIELDS[name] if name is not None else BRIDGE_MIXED_DEFAULTS)
        for field, value in given.items():
            target = _MIXED_FIELDS[field]
            if target in given and field != target and truth(given[target]) != truth(value):
                raise BtacalcError(f"mixed_precision.{field}={value} and mixed_precision.{target}={given[target]}: "
                                   "Megatron-Bridge keeps the two equal (mixed_precision.py L77-95); give one")
            fields[target] = truth(value)
        mixed = cls(overrides.get("mixed_precision"), given, low_given, fields, low)
        mixed.check_gather_has_low()
        if fields["bf16"] and fields["fp16"]:
            raise BtacalcError("mixed_precision sets both bf16 and fp16: Megatron-Bridge refuses both "
                               "(config.py _validate_mixed_precision_consistency); give one")
        return mixed

    def check_gather_has_low(self) -> None:
        """A parameter gather in FP8 (FP4) with no FP8 (FP4) recipe, refused in the Bridge fields the file gives.
        hostile17: `mixed_precision=bf16_with_fp8_delayed_scaling_mixed` with `mixed_precision.fp8=null` keeps the
        recipe's fp8_param_gather (mixed_precision.py L231 @ 067f987d), which Bridge copies onto the model as
        fp8_param: Megatron-Core refuses fp8_param without fp8 (transformer_config.py L1566-1567 @ d98e8a64; fp4
        L1578-1579). The refusal came from the plan and named btacalc's --fp8-param-gather, an option the user had
        not written."""
        for kind in ("fp8", "fp4"):
            gather = f"{kind}_param_gather"
            if not self.fields[gather] or self.low[kind] is not None:
                continue
            said = [f"mixed_precision.{k}={str(truth(v)).lower()}" for k, v in self.given.items()
                    if _MIXED_FIELDS[k] == gather]
            on = said[0] if said else f"mixed_precision={self.recipe}, whose recipe sets {gather} = True"
            off = (f"mixed_precision.{kind}=null" if kind in self.low_given else
                   f"mixed_precision={self.recipe} (no {kind})" if isinstance(self.recipe, str) else
                   f"no mixed_precision.{kind}")
            big = kind.upper()
            raise BtacalcError(f"{off} with {on}: a parameter gather in {big} needs an {big} recipe (Megatron-Core "
                               f"refuses {kind}_param without {kind}, transformer_config.py "
                               f"{'L1566-1567' if kind == 'fp8' else 'L1578-1579'} @ d98e8a64); give "
                               f"mixed_precision.{gather}=false, or an {big} recipe")


def _from_bridge_mixed(overrides: Mapping[str, Any], args: Args, unread: list[str], name: Optional[str]) -> None:
    """Bridge's mixed precision (BridgeMixed) over the model / DDP fields: the recipe's values (`name`, btacalc's
    precision; None: MixedPrecisionConfig's defaults), then its `mixed_precision.<field>` overrides; the fields it
    overwrites become `unread` (ignored, OVERWRITTEN_REASON)."""
    unread[:] = [k for k in unread if not (_mixed_field(k) in _MIXED_FIELDS or _mixed_field(k) in _MIXED_LOW_DEFAULTS)]
    mixed = BridgeMixed.read(overrides, name)
    if mixed is None:
        return
    low, fields = mixed.low, mixed.fields
    for dest in _MIXED_LOW_DEFAULTS:
        args.pop(dest, None)
    if low["fp8"] is not None:
        args.update({"fp8": low["fp8"], "fp8_recipe": low["fp8_recipe"]})
    elif truth(args.get("use_precision_aware_optimizer")):
        # review28: without FP8 the recipe's fp8_recipe still reaches the optimizer config (tensorwise unless given:
        # mixed_precision.py L50-52, L113-157 @ 067f987d), where the precision-aware optimizer reads it
        # (megatron_codec._dec_moments)
        args["fp8_recipe"] = low["fp8_recipe"]
    if low["fp4"] is not None:
        args.update({"fp4": low["fp4"], "fp4_recipe": low["fp4_recipe"]})
    for dest in _MIXED_DESTS:
        args.pop(dest, None)
    unread += [k for k in MIXED_PRECISION_OVERWRITES if k in overrides]
    args["bf16"] = fields["bf16"]
    settings = {"fp16": fields["fp16"], "fp8_param_gather": fields["fp8_param_gather"],
                "fp4_param_gather": fields["fp4_param_gather"],
                "accumulate_allreduce_grads_in_fp32" if fields["fp16"] else "grad_reduce_in_bf16":
                    fields["grad_reduce_in_fp32"] == fields["fp16"]}
    args.update({dest: True for dest, on in settings.items() if on})  # Megatron's switches: only those turned on


# (start, end) layers a Bridge mixed-precision recipe keeps in BF16 unless the overrides say otherwise: the current-
# scaling recipe sets first_last_layers_bf16 with 1 and 1 (BRIDGE_PIN mixed_precision.py L285-303); the others
# leave MixedPrecisionConfig's False, 0, 0 (L53, L73-74)
BRIDGE_BF16_ENDS = {"fp8-current": (1, 1)}




# Megatron-LM's unprefixed YaRN flags as Megatron-Bridge's GPTModelProvider names them (Megatron-LM's
# _apply_yarn_config_from_args maps them the same way, argument_utils.py L407-412 @ d98e8a64; MLA's own fields keep
# the unprefixed names)
YARN_BRIDGE = {"rotary_scaling_factor": "model.yarn_rotary_scaling_factor", "mscale": "model.yarn_mscale",
               "mscale_all_dim": "model.yarn_mscale_all_dim"}


def bridge_key(dest: str) -> Optional[str]:
    if dest in BRIDGE_SKIP:
        return None
    return BRIDGE_KEYS[dest][0] if dest in BRIDGE_KEYS else f"model.{dest}"


def to_bridge(args: Args) -> dict[str, Any]:
    """Bridge overrides (dotted key -> value) of Megatron destinations."""
    out: dict[str, Any] = {}
    for dest, value in args.items():
        key = bridge_key(dest)
        if key is None or (dest in _MIXED_DESTS and dest not in ("bf16", "fp16")):
            continue  # the mixed precision's fields: _to_bridge_mixed
        if dest in ("bf16", "fp16"):
            if value:
                _to_bridge_mixed(args, out)
            continue
        convert = BRIDGE_KEYS[dest][1] if dest in BRIDGE_KEYS else (lambda v: v)
        if dest == "squared_relu" and truth(value):
            out["model.gated_linear_unit"] = False  # Bridge's activation_map.py name (L48 @ 067f987d)
            out["model.activation_func"] = "squared_relu"
            continue
        if dest in ("swiglu", "quick_geglu") and truth(value):
            # Bridge's provider holds the activation as a callable, which its overrides name (utils/activation_map.py
            # @ 067f987d: "silu", "quick_gelu"); a recipe's own stood under --swiglu's gated_linear_unit alone
            out["model.gated_linear_unit"] = True
            out["model.activation_func"] = "quick_gelu" if dest == "quick_geglu" else "silu"
            continue
        if dest in YARN_BRIDGE and args.get("position_embedding_type") == "yarn":
            out[YARN_BRIDGE[dest]] = value  # GPTModelProvider's yarn_* fields (gpt_provider.py, gpt_oss_bridge.py L93-99)
            continue
        if dest == "window_size" and isinstance(value, str):
            value = tuple(ast.literal_eval(value))
        if dest in ("moe_layer_freq", "window_attn_skip_freq", "no_rope_freq") and isinstance(value, str) \
                and "num_layers" in args:
            # Megatron-LM's list expression ("([0]*3+[1]*58)", which its argparse evaluates) as the list of 0/1 a
            # Bridge provider holds (BRIDGE_PIN src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py L92 sets
            # moe_layer_freq = [0] * first_k_dense_replace + [1] * ...): Bridge sets an override's string as given
            value = tuple(pattern(value, integer(args["num_layers"], "num_layers")))
        out[key] = convert(value)
    if "model.num_query_groups" not in out and "num_attention_heads" in args:
        out["model.num_query_groups"] = args["num_attention_heads"]
    if out.get("model.cpu_offloading_num_layers"):
        # Megatron-LM derives cpu_offloading from the layer count (arguments.py L1950-1951); a Bridge
        # TransformerConfig does not, so the recipes set both (Megatron-Bridge @ 7af9601c
        # scripts/performance/utils/helpers.py set_recompute_overrides L163-179: cpu_offloading = True)
        out["model.cpu_offloading"] = True
    if "mixed_precision" in out:
        name = _bridge_precision_name(args)
        if name in BRIDGE_BF16_ENDS and "first_last_layers_bf16" not in args:
            out["mixed_precision.first_last_layers_bf16"] = False  # the plan runs every layer in the recipe
    return out


# freshuser17: what Megatron-Bridge derives over a recipe's overrides, at BRIDGE_PIN, so that `--emit bridge` states it:
# - the distributed optimizer: Bridge turns it on in both the DDP and the optimizer config when either has it
#   (src/megatron/bridge/training/config.py L2101-2123), and its recipes set both (recipes/common.py L87,
#   recipes/utils/optimizer_utils.py L150): a plan without it (ZeRO-0) wrote nothing and ran ZeRO-1;
# - the data-parallel overlaps, the gradient bucket and the p2p overlap: CommOverlapConfig.setup (config.py L2027-2029)
#   writes its own values over the DDP and model configs (training/comm_overlap.py L453-462 p2p on with VP; L576-585
#   overlap_grad_reduce, overlap_param_gather on and a 128 Mi-parameter bucket with DP > 1 and the distributed
#   optimizer, L639-643) unless the comm_overlap section gives them (_override_user_cfgs L594-602): the ddp.* and
#   model.* values alone were overwritten (a plan without the overlaps ran with them).
BRIDGE_COMM_OVERLAP = {"overlap_grad_reduce": "comm_overlap.overlap_grad_reduce",
                       "overlap_param_gather": "comm_overlap.overlap_param_gather",
                       "ddp_bucket_size": "comm_overlap.bucket_size", "overlap_p2p_comm": "comm_overlap.overlap_p2p_comm"}
BRIDGE_OPTIMIZER_KEY = "optimizer.use_distributed_optimizer"
# bridgeparse: a recipe may hold no CommOverlapConfig (BRIDGE_PIN src/megatron/bridge/recipes/common.py L128
# comm_overlap=None, which the Qwen3-30B-A3B pretrain recipes keep, recipes/qwen/h100/qwen3_moe.py L116), and Hydra's
# struct mode refuses `comm_overlap.<field>=` below a None ("Could not override ... use +comm_overlap...":
# omegaconf_utils.py L180-184), so every file btacalc wrote stopped there. `++` sets the field whether or not the
# recipe has it, and the `_target_` makes Bridge build the section's class from the dict where there was none
# (omegaconf_utils.py L478-486 instantiate; over a recipe's CommOverlapConfig the fields merge and the same class is
# built). Bridge then runs CommOverlapConfig.setup over the DDP and model configs, whose fields the file states.
BRIDGE_COMM_OVERLAP_TARGET = ("comm_overlap._target_", "megatron.bridge.training.comm_overlap.CommOverlapConfig")
# Megatron-LM's value of each destination the emitted launch leaves out, which the plan takes; a Bridge recipe holds
# its own (e.g. recipes/llama/h100/llama3.py L343 sequence_parallel = True, the 70B recipes VP 5 and
# cross_entropy_fusion_impl "te", recipes/common.py L86 Megatron-FSDP's sharding strategy), which overrides that
# leave the field out keep: so --emit bridge writes them (a pipeline layout sets VP itself: left out there).
# review24: and --cross-entropy-loss-fusion, which GPTModelProvider turns on (gpt_provider.py L205 @ 067f987df;
# AutoBridge's model configs too, conversion/model_bridge.py L665): a vocab_parallel plan's overrides left it out and
# Bridge trained the native fused loss, whose backward holds one more fp32 copy of the logits (native_fused)
BRIDGE_UNSAID: dict[str, Any] = {
    "sequence_parallel": False, "num_virtual_stages_per_pipeline_rank": None, "recompute_granularity": None,
    "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
    "decoder_first_pipeline_num_layers": None, "decoder_last_pipeline_num_layers": None,
    "pipeline_model_parallel_layout": None, "cpu_offloading_num_layers": 0, "gradient_accumulation_fusion": True,
    "cross_entropy_loss_fusion": False, "cross_entropy_fusion_impl": "native", "cuda_graph_impl": "none",
    "use_precision_aware_optimizer": False, "use_megatron_fsdp": False, "add_bias_linear": True}
# review18: the router's fields at Megatron-LM's values where an MoE launch leaves them out (`_enc_router`): a Bridge
# model provider sets its own (BRIDGE_PIN src/megatron/bridge/models/olmoe/olmoe_provider.py L89, deepseek_v2_bridge.py
# L57 and kimi_bridge.py L58 moe_router_pre_softmax = True; deepseek_v3_bridge.py sigmoid with expert bias), which
# stood under a Qwen3 or Mixtral plan's overrides: the unnormalised top-k weights --emit megatron no longer trains.
# review23: and the experts' GEMMs: a SequentialMLP plan (no --moe-grouped-gemm) wrote no moe_grouped_gemm, which the
# MoE bridges set on and import_bridge reads as on (bridge_run.BRIDGE_MOE_DEFAULTS): stated off.
# review25: and the shared experts' overlap, which DeepSeek-V3's model bridge turns on (deepseek_v3_bridge.py L72), where
# Megatron-LM's --moe-shared-expert-overlap is off: Megatron-Core refused the overrides of a plan with the EP overlap
# (transformer_config.py L3039-3041 @ d98e8a64) or shared_experts recomputation (L1991-1997); btacalc times the
# shared experts in series
BRIDGE_UNSAID_MOE: dict[str, Any] = {
    "moe_router_score_function": "softmax", "moe_router_pre_softmax": False, "moe_router_enable_expert_bias": False,
    "moe_shared_expert_gate": False, "moe_router_num_groups": None, "moe_router_group_topk": None,
    "moe_router_topk_scaling_factor": None, "moe_grouped_gemm": False, "moe_shared_expert_overlap": False}


def bridge_stated(args: Args, out: dict[str, Any]) -> dict[str, Any]:
    """`to_bridge`'s overrides with what Bridge would otherwise derive over them or keep from the recipe (above): the
    fields the launch leaves at Megatron-LM's value (BRIDGE_UNSAID; an MoE model's router, BRIDGE_UNSAID_MOE), the distributed optimizer in both configs (off for
    ZeRO-0; Megatron-FSDP turns it on itself, config.py L1082-1085) and the overlaps and the bucket in the
    comm_overlap section too."""
    stated = dict(out)
    unsaid = BRIDGE_UNSAID | (BRIDGE_UNSAID_MOE if args.get("num_experts") else {})
    for dest, value in unsaid.items():
        # semantics20: the aux-loss-free routing bias is the model's (router_score_bias), stated either way: a sigmoid
        # router kept the recipe's (DeepSeek-V3's is on, deepseek_v3_bridge.py), as the group limit and scale did
        if dest not in args and not (dest == "num_virtual_stages_per_pipeline_rank"
                                     and args.get("pipeline_model_parallel_layout") is not None):
            stated[str(bridge_key(dest))] = value
    if not args.get("cpu_offloading_num_layers"):
        stated["model.cpu_offloading"] = False
    if not truth(args.get("use_megatron_fsdp")):
        on = truth(args.get("use_distributed_optimizer"))
        stated["ddp.use_distributed_optimizer"] = on
        stated[BRIDGE_OPTIMIZER_KEY] = on
    for dest, key in BRIDGE_COMM_OVERLAP.items():
        if dest in args:
            stated[key] = args[dest]
    if "model.seq_length" in stated:
        stated[BRIDGE_DATASET_SEQ] = stated["model.seq_length"]
    return stated


# bridgeparse: ConfigContainer.validate() asserts the model's and the dataset's sequence length are one (BRIDGE_PIN
# src/megatron/bridge/training/config.py L1628-1644); a recipe's dataset holds its own (recipes/common.py L95: 4096;
# scripts/performance/run_recipe.py L98-99: --seq_length, else 8192), so a plan at another length stopped there. The
# reader already reads the key (bridge_run._dataset_seq_length, hostile35)
BRIDGE_DATASET_SEQ = "dataset.seq_length"


def bridge_word_key(key: str) -> str:
    """The Hydra key a written override is given with: `++` below the comm_overlap section, which a recipe may
    leave None (BRIDGE_COMM_OVERLAP_TARGET), and below the mixed_precision section, which `bridge_written` gives
    only whole (a recipe holds a preset's name there)."""
    return f"++{key}" if key.startswith(("comm_overlap.", f"{MIXED_SECTION}.")) else key


def bridge_written(stated: Mapping[str, Any], fp8_attention: bool = False) -> dict[str, Any]:
    """`bridge_stated`'s overrides as `--emit bridge` writes them. bridgemp: where the plan's mixed precision differs
    from its preset's (a `mixed_precision.<field>` beside the name, or FP8 attention, FP8_ATTENTION_BRIDGE_KEY), the
    section is written whole in the name's place (bridge_mixed.whole_section): Hydra sets no field below the name
    (Megatron-Bridge @ 067f987d training/utils/omegaconf_utils.py L163-188)."""
    changes = {key.split(".", 1)[1]: value for key, value in stated.items() if key.startswith(f"{MIXED_SECTION}.")}
    if fp8_attention:
        changes[FP8_ATTENTION_BRIDGE_KEY.split(".", 1)[1]] = True
    name = stated.get(MIXED_SECTION)
    if not isinstance(name, str) or not changes:
        return dict(stated)
    out: dict[str, Any] = {}
    for key, value in stated.items():
        if key == MIXED_SECTION:
            out.update(whole_section(name, changes))
        elif not key.startswith(f"{MIXED_SECTION}."):
            out[key] = value
    return out


def whole_mixed_preset(written: Mapping[str, Any]) -> Optional[tuple[str, dict[str, Any]]]:
    """The preset a whole mixed_precision section (bridge_written) stands for and the fields where it differs from
    it: the preset btacalc names for the precision its fields give (BRIDGE_PRECISION, BRIDGE_FP16_RECIPE); None for
    no whole section, or fields no such preset has."""
    given = read_whole_section(written)
    return None if given is None else _preset_of(given)


def _preset_of(given: Mapping[str, Any]) -> Optional[tuple[str, dict[str, Any]]]:
    """whole_mixed_preset of a section's fields as read_whole_section gives them."""
    low = {k: given.get(k) for k in ("fp8", "fp8_recipe", "fp4", "fp4_recipe")}
    if truth(given.get("fp16")) and low["fp8"] is None and low["fp4"] is None:
        name: Optional[str] = BRIDGE_FP16_RECIPE
    else:
        name = next((BRIDGE_PRECISION[p] for p, dests in PRECISIONS.items() if dests
                     and all(low[k] == v for k, v in dests.items())), None)
        name = name or (BRIDGE_PRECISION["bf16"] if low["fp8"] is None and low["fp4"] is None else None)
    if name is None:
        return None
    preset = preset_values(name)
    return name, {k: v for k, v in given.items() if k in preset and preset[k] != v}


def check_bridge_comm_overlap_target(overrides: Mapping[str, Any]) -> None:
    """The one `_target_` btacalc reads: the comm_overlap section's own class, which Bridge instantiates from the
    section's fields (omegaconf_utils.py L478-486); another class would be built with those fields as its arguments."""
    key, target = BRIDGE_COMM_OVERLAP_TARGET
    if key in overrides and overrides[key] != target:
        raise BtacalcError(f"{key}={_cut(repr(overrides[key]))}: btacalc reads the comm_overlap section as "
                           f"Megatron-Bridge's {target.rsplit('.', 1)[1]} ({target}), which Bridge builds from it; "
                           "another class is not read")


def _from_bridge_stated(overrides: Mapping[str, Any], args: Args) -> None:
    """The keys `bridge_stated` writes, read as Bridge applies them: the distributed optimizer on when either config
    has it; a comm_overlap value over the DDP / model one (None: not given)."""
    if truth(_bridge_value(overrides.get(BRIDGE_OPTIMIZER_KEY), BRIDGE_OPTIMIZER_KEY)):
        args["use_distributed_optimizer"] = True
    for dest, key in BRIDGE_COMM_OVERLAP.items():
        value = _bridge_value(overrides.get(key), key)
        if value is not None:
            args[dest] = value


def _bridge_bf16_ends(args: Args, recipe_ends: tuple[int, int]) -> None:
    """The first/last BF16 layers a Bridge run trains with: the overrides' fields over the mixed-precision recipe's
    (`BRIDGE_BF16_ENDS`), whose counts, not Megatron-LM's parser defaults (1 each), stand where the overrides give none."""
    if "first_last_layers_bf16" not in args and recipe_ends == (0, 0):
        return
    args.setdefault("first_last_layers_bf16", True)
    args.setdefault("num_layers_at_start_in_bf16", recipe_ends[0])
    args.setdefault("num_layers_at_end_in_bf16", recipe_ends[1])


def _bridge_value(value: Any, key: str) -> Any:
    """A Bridge YAML value as Bridge sets it (as given): a string is BridgeText, a float BridgeFloat, and a list's
    floats too (`window_size: [128.0, 0]` is a pair of floats where Megatron-Core's TransformerConfig.window_size
    takes integers), each named by its key and index."""
    if isinstance(value, str):
        return BridgeText.of(value, key)
    if type(value) is float:
        return BridgeFloat.of(value, key)
    if isinstance(value, list):
        return [BridgeFloat.of(v, f"{key}[{i}]") if type(v) is float else v for i, v in enumerate(value)]
    return value


def bridge_value_field(key: str) -> Optional[str]:
    """The `section.field` above `key` when btacalc reads that field as one value (a number, a string, a boolean or
    a list: a BRIDGE_KEYS target or a Megatron flag's model field), so that a key below it is no key of Bridge's
    config (Hydra: a key under a value node is refused) and the field would be planned at its default; None for a
    key of two names, below a field btacalc does not read or below one whose Bridge annotation admits keys
    (bridge_fields.toml `nested_fields`) (review14)."""
    parts = key.split(".")
    if len(parts) < 3:
        return None
    field = ".".join(parts[:2])
    section = bridge_fields().sections.get(parts[0])
    if section is None or parts[1] in section.nested_fields:
        return None  # Bridge's annotation admits keys below it (gpt_provider.py L165 tp_comm_overlap_cfg: str | dict)
    read = {conv[0] for conv in BRIDGE_KEYS.values()} | {FP8_ATTENTION_BRIDGE_KEY, "model.cpu_offloading"}
    if field in read or (parts[0] == "model" and parts[1] in {f.dest for f in megatron_flags().values()}):
        return field
    return None


def check_bridge_sixteen_bit(args: Args) -> None:
    """A whole set of Bridge overrides (`from_bridge`'s args) must train in 16 bits: refused in Bridge's keys (review14:
    the Megatron decoder's "no --bf16 or --fp16" named flags the file does not have)."""
    if not (truth(args.get("bf16")) or truth(args.get("fp16"))):
        raise BtacalcError("the overrides train in fp32 (no mixed_precision such as bf16_mixed, no model.bf16 or "
                           "model.fp16): btacalc models 16-bit training")


def check_bridge_experts(args: Args) -> None:
    """Bridge hands model.num_moe_experts to Megatron-Core's TransformerConfig as given, which refuses 0 or fewer
    (Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_config.py L1682-1683: "num_moe_experts must be
    non-negative."); only Megatron-LM's own --num-experts 0 is read as dense (megatron/training/arguments.py
    L1648-1649 sets it to None). hostile15: `model.num_moe_experts=0` was planned as a dense model."""
    experts = args.get("num_experts")
    if isinstance(experts, int) and not isinstance(experts, bool) and experts <= 0:
        raise BtacalcError(f"model.num_moe_experts={experts}: Megatron-Core refuses 0 or fewer experts "
                           "(transformer_config.py L1682-1683 @ d98e8a64); a dense model leaves it out or sets null")


# argtypes24: a Bridge override of a Literal-typed Megatron-Core field is set as given: the config is an untyped
# OmegaConf DictConfig built from a plain dict (NVIDIA-NeMo/Megatron-Bridge @ 067f987d omegaconf_utils.py L78
# OmegaConf.create, L157 to_container, L515 setattr), so neither OmegaConf nor Bridge checks the Literal, and a string
# stays the string (review10's BridgeText). Megatron-Core then compares it with its exact values and raises where none
# matches (Megatron-LM @ 2a75ac12, Bridge's 3rdparty/Megatron-LM): these are the fields btacalc reads whose refusal was
# traced; btacalc read `model.normalization: rmsnorm` as RMSNorm (case folded) and `model.moe_token_dispatcher_type:
# AllToAll` as an all-to-all with a note.
BRIDGE_LITERALS: dict[str, tuple[tuple[str, ...], str, bool]] = {  # dest -> (values, the refusal, MoE only)
    "normalization": (("LayerNorm", "RMSNorm"), "transformer_config.py L249 Literal; TENorm raises 'Only LayerNorm and "
                      "RMSNorm are currently supported' (extensions/transformer_engine.py L1050-1064), as do the "
                      "torch norm (torch_norm.py L56-70)", False),
    "moe_token_dispatcher_type": (("allgather", "alltoall", "flex"), "transformer_config.py L869 Literal; MoELayer "
                                  "raises 'Unsupported token dispatcher type' (transformer/moe/moe_layer.py L306-330)",
                                  True),
}


def check_bridge_literals(args: Args, moe: bool) -> None:
    """Refuse a Literal field's value Megatron-Core raises on (BRIDGE_LITERALS), named by its Bridge key."""
    for dest, (values, where, moe_only) in BRIDGE_LITERALS.items():
        value = args.get(dest)
        if value is None or value in values or (moe_only and not moe):
            continue
        near = nearest_name(str(value), values)
        raise BtacalcError(f"model.{dest}: {_cut(repr(str(value)))} is not one of {', '.join(values)} (case-sensitive): "
                           f"Megatron-Bridge sets it as given and Megatron-Core stops (Megatron-LM@2a75ac12 {where})"
                           + (f": did you mean {near}?" if near else ""))


# review22: Bridge keys that share a Megatron-LM option's name but not its effect, each listed unread with why.
# model.transformer_impl: Megatron-LM's --transformer-impl local builds Megatron-Core's own layers (_dec_attention),
# but Bridge's GPTModelProvider builds TransformerEngine's layer spec whatever the field says; only an AttnBackend.local
# attention_backend swaps in Megatron-Core's DotProductAttention (memci's reading made model.transformer_impl=local
# plan unfused attention for a run whose attention is TransformerEngine's)
BRIDGE_NOT_AS_MEGATRON = {
    "model.transformer_impl": ("no effect on a GPT model's layers: Megatron-Bridge's GPTModelProvider builds "
                               f"TransformerEngine's layer spec whatever it says ({BRIDGE_PIN} src/megatron/bridge/"
                               "models/gpt_provider.py L120-125 default_layer_spec, L171; only attention_backend "
                               "AttnBackend.local swaps in DotProductAttention, L278-280)"),
    # session 31 (fu23's finding): read as Megatron-LM's --encoder-num-layers it met a preset's num_layers and the
    # refusal's message named a flag the file does not give (an internal error, KeyError)
    "model.encoder_num_layers": ("a T5 encoder's depth (T5ModelProvider's alone, "
                                 f"{BRIDGE_PIN} src/megatron/bridge/models/t5_provider.py L63, L114): the GPT model "
                                 "btacalc plans takes its depth from model.num_layers"),
}

# Keys read (and refused where Megatron-Core refuses them) that then change nothing in a Bridge run: listed with why.
BRIDGE_MAIN_GRADS_KEY = "optimizer.main_grads_dtype"
BRIDGE_NO_EFFECT = {
    BRIDGE_MAIN_GRADS_KEY: ("no effect under the precision-aware optimizer: Megatron-Core reads OptimizerConfig."
                            "main_grads_dtype only in its check (optimizer_config.py L466-471 @ d98e8a64); the "
                            "gradient buffers are the DDP config's grad_reduce_in_fp32, which the mixed precision "
                            "sets (Megatron-LM's --main-grads-dtype bf16 turns them bf16 through its own arguments, "
                            "arguments.py L1209-1216, which Megatron-Bridge does not run)"),
}


def _from_bridge_main_grads(args: Args, unread: list[str]) -> None:
    """Under the precision-aware optimizer a Bridge file's main_grads_dtype changes nothing (BRIDGE_NO_EFFECT): it
    is listed, not handed to the decoder, where it would be Megatron-LM's flag that turns the gradient buffers bf16.
    Without the optimizer it stays, to be refused as Megatron-Core's check refuses it."""
    if truth(args.get("use_precision_aware_optimizer")) and args.pop("main_grads_dtype", None) is not None:
        unread.append(BRIDGE_MAIN_GRADS_KEY)


def _from_bridge_recipe(recipe: Any, args: Args) -> Optional[str]:
    """btacalc's precision of a Bridge file's named mixed-precision recipe (None: no name), whose FP8/FP4 fields and
    BF16 first/last layers go into `args`."""
    if not isinstance(recipe, str):
        return None
    # Bridge registers each recipe also with hyphens and reads a name with them as underscores
    # (mixed_precision.py L167-181, L444 name.replace("-", "_"))
    recipes = {**{v: k for k, v in BRIDGE_PRECISION.items()}, BRIDGE_FP16_RECIPE: "fp16"}
    name = recipes.get(recipe.replace("-", "_"))
    if name is None:
        raise BtacalcError(f"mixed_precision {recipe!r}: btacalc reads {', '.join(recipes)}")
    if name != "fp16":
        args.update(PRECISIONS[name])
    _bridge_bf16_ends(args, BRIDGE_BF16_ENDS.get(name, (0, 0)))
    return name


# the MixedPrecisionConfig fields btacalc reads (a whole section's others: _from_bridge_whole_mixed)
_MIXED_READ = {*_MIXED_FIELDS, *_MIXED_LOW_DEFAULTS, "first_last_layers_bf16", "num_layers_at_start_in_bf16",
               "num_layers_at_end_in_bf16", FP8_ATTENTION_BRIDGE_KEY.split(".", 1)[1]}


def _from_bridge_whole_mixed(overrides: Mapping[str, Any]) -> Mapping[str, Any]:
    """bridgemp: a mixed_precision section given whole (`mixed_precision._target_`, bridge_written) read as its fields:
    the class is checked (bridge_mixed.read_whole_section), a field btacalc does not read that holds its preset's value
    (whole_mixed_preset) is left out, one that does not stays to be listed as ignored. A preset's name given before
    the section is replaced by it, as Hydra replaces it; after it, refused."""
    given = read_whole_section(overrides)
    if given is None:
        return overrides
    preset = _preset_of(given)
    keys = list(overrides)
    target = f"{MIXED_SECTION}._target_"
    if MIXED_SECTION in overrides and keys.index(MIXED_SECTION) > keys.index(target):
        raise BtacalcError(f"{MIXED_SECTION}={_cut(str(overrides[MIXED_SECTION]))} after {target}: Hydra cannot set "
                           "a name over the section's keys; give the name or the section whole")
    expected = section_values(preset[0], {k: v for k, v in preset[1].items() if k in _MIXED_READ}) \
        if preset is not None else {}
    out = {}
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        field = rest.split(".", 1)[0]
        if key in (MIXED_SECTION, target):
            continue
        if head == MIXED_SECTION and field not in _MIXED_READ and field in expected and given.get(field) == \
                expected[field]:
            continue  # what btacalc writes for the fields it reads (a torch dtype's _target_ and _call_ too)
        if head == MIXED_SECTION and rest.endswith("._call_"):
            continue  # listed by its _target_
        out[key] = value
    return out


def from_bridge(overrides: Mapping[str, Any]) -> tuple[Args, list[str]]:
    """Megatron destinations of Bridge overrides, and the keys no row reads (to be listed as ignored)."""
    overrides = _from_bridge_whole_mixed(overrides)
    back = {key: (dest, conv[2]) for dest, conv in BRIDGE_KEYS.items() for key in (conv[0],)}
    back.update({key: (dest, _as_is) for dest, key in YARN_BRIDGE.items()})
    known = {f.dest for f in megatron_flags().values()}
    args: Args = {}
    unread = []
    for key, value in overrides.items():
        value = _bridge_value(value, key)
        if key == "model.cpu_offloading":
            continue  # implied by model.cpu_offloading_num_layers, as Megatron-LM derives it (to_bridge)
        if key == FP8_ATTENTION_BRIDGE_KEY:
            args[FP8_ATTENTION_DEST] = value
        elif key == "model.activation_func" and str(value).rsplit(".", 1)[-1] in ("quick_gelu", "silu",
                                                                                 "squared_relu", "relu2"):
            # to_bridge's names (activation_map.py); silu is --swiglu's, which model.gated_linear_unit carries
            if str(value).rsplit(".", 1)[-1] == "quick_gelu":
                args["quick_geglu"] = True
                args.pop("swiglu", None)
            elif str(value).rsplit(".", 1)[-1] in ("squared_relu", "relu2"):  # activation_map.py L47-48
                args["squared_relu"] = True
        elif key == "model.variable_seq_lengths":
            # Bridge's alone (Megatron-LM sets it False, arguments.py L1272 @ d98e8a64): read by the rules
            # (megatron_rules variable-seq-lengths-dispatcher), listed as not modelled
            args["variable_seq_lengths"] = value
        elif key in BRIDGE_NOT_AS_MEGATRON:
            unread.append(key)
        elif key.startswith("model.") and key[6:] in MLA_YARN_BRIDGE:
            args[key[6:]] = value  # read under multi-latent attention (_dec_mla_yarn)
        elif key in back:
            dest, convert = back[key]
            args[dest] = convert(value)
        elif key.startswith("model.") and key[6:] in known:
            args[key[6:]] = value
        else:
            unread.append(key)
    check_bridge_comm_overlap_target(overrides)
    unread[:] = [k for k in unread if k not in (BRIDGE_OPTIMIZER_KEY, BRIDGE_COMM_OVERLAP_TARGET[0])
                 and k not in BRIDGE_COMM_OVERLAP.values()]
    _from_bridge_stated(overrides, args)
    name = _from_bridge_recipe(overrides.get("mixed_precision"), args)
    _from_bridge_mixed(overrides, args, unread, name)
    _from_bridge_main_grads(args, unread)
    if truth(args.get("fp16")) and "grad_reduce_in_bf16" in args and "accumulate_allreduce_grads_in_fp32" not in args:
        # hostile17: Bridge hands ddp.grad_reduce_in_fp32 to Megatron-Core's DDP as it is (DistributedDataParallelConfig
        # .grad_reduce_in_fp32, distributed_data_parallel_config.py L15 @ d98e8a64), under fp16 too; Megatron-LM's
        # --grad-reduce-in-bf16, which it stands for here, is read only under --bf16 (arguments.py L1213)
        args["accumulate_allreduce_grads_in_fp32"] = not truth(args.pop("grad_reduce_in_bf16"))
    if "num_query_groups" in args and args.get("num_query_groups") != args.get("num_attention_heads"):
        args["group_query_attention"] = True
    return args, unread
