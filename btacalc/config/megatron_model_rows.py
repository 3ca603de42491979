"""The architecture rows of btacalc's Megatron codec (config/megatron_codec.py): the `model.*` fields of a ModelSpec
(`model_fields`) as Megatron-LM destinations and back (`MODEL_ROWS`: heads, MLA, FFN and experts, router, window,
vocabulary, positions and RoPE, norms, activations, numerics, biases, dropout, MTP). Split from
config/megatron_codec.py, which keeps the run's rows."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Optional

from pydantic import ValidationError

from ..errors import BtacalcError
from .model import GPT_OSS_GLU_CLAMP, GPT_OSS_GLU_OFFSET, MEGATRON_LINEAR_BIASES, Numerics, every_nth
from .megatron_launch import ArgumentValueError, integer, list_expression, pattern, real, refuse_bridge_text
from .megatron_rows import Args, Fields, Get, Row, attention_backend, choice, optional_int, same, switch, truth
from .text import cut

if TYPE_CHECKING:
    from .model import ModelSpec


def _enc_heads(f: Fields) -> Args:
    a, kv = f["model.num_heads"], f["model.num_kv_heads"]
    out: Args = {"num_attention_heads": a}
    if kv != a:
        out.update(group_query_attention=True, num_query_groups=kv)
    if f.get("model.mla") is None and f["model.head_dim"] != f["model.hidden_size"] // a:
        out["kv_channels"] = f["model.head_dim"]
    return out


def _dec_heads(get: Get) -> Fields:
    a = optional_int(get("num_attention_heads"), "num_attention_heads")
    h = optional_int(get("hidden_size"), "hidden_size")
    if a is None or h is None:
        raise BtacalcError("the launch gives no --num-attention-heads or --hidden-size: btacalc needs the model")
    gqa = truth(get("group_query_attention"))
    kv = optional_int(get("num_query_groups"), "num_query_groups") if gqa else None
    kv_channels = optional_int(get("kv_channels"), "kv_channels")
    return {"model.num_heads": a, "model.num_kv_heads": kv or a, "model.head_dim": kv_channels or h // a}


def _enc_mla(f: Fields) -> Args:
    mla = f.get("model.mla")
    if mla is None:
        return {}
    out: Args = {"multi_latent_attention": True, "kv_lora_rank": mla["kv_lora_rank"],
                 "qk_head_dim": mla["qk_nope_head_dim"], "qk_pos_emb_head_dim": mla["qk_rope_head_dim"],
                 "v_head_dim": mla["v_head_dim"]}
    if mla["q_lora_rank"]:
        out["q_lora_rank"] = mla["q_lora_rank"]
    return out


def _dec_mla(get: Get) -> Fields:
    if not truth(get("multi_latent_attention")):
        for dest in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            get(dest)  # read: without MLA Megatron ignores them
        return {"model.mla": None}
    mla = {"q_lora_rank": optional_int(get("q_lora_rank"), "q_lora_rank") or 0}
    for key, dest in (("kv_lora_rank", "kv_lora_rank"), ("qk_nope_head_dim", "qk_head_dim"),
                      ("qk_rope_head_dim", "qk_pos_emb_head_dim"), ("v_head_dim", "v_head_dim")):
        mla[key] = optional_int(get(dest), dest) or 0  # Megatron's defaults are numbers (32, 128, 64, 128)
    return {"model.mla": mla, "model.head_dim": mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]}


def _enc_ffn(f: Fields) -> Args:
    """The experts' widths; how their GEMMs run (--moe-grouped-gemm) is the run row "expert GEMMs"."""
    out: Args = {"ffn_hidden_size": f["model.dense_ffn"]}
    if f.get("model.num_experts"):
        out.update(num_experts=f["model.num_experts"], moe_router_topk=f["model.top_k"],
                   moe_ffn_hidden_size=f["model.moe_ffn"])
        if f.get("model.moe_pattern") is not None:
            out["moe_layer_freq"] = list_expression(f["model.moe_pattern"])
        if f.get("model.shared_expert_size"):
            out["moe_shared_expert_intermediate_size"] = f["model.shared_expert_size"]
    return out


def _dec_ffn(get: Get) -> Fields:
    h = optional_int(get("hidden_size"), "hidden_size") or 0
    dense = optional_int(get("ffn_hidden_size"), "ffn_hidden_size") or 4 * h  # TransformerConfig: None -> 4h
    experts = optional_int(get("num_experts"), "num_experts") or 0
    out: Fields = {"model.dense_ffn": dense, "model.num_experts": experts, "model.moe_pattern": None}
    if not experts:
        for dest in ("moe_router_topk", "moe_ffn_hidden_size", "moe_layer_freq", "moe_shared_expert_intermediate_size"):
            get(dest)
        out.update({"model.top_k": 0, "model.moe_ffn": None, "model.shared_expert_size": 0})
        return out
    layers = optional_int(get("num_layers"), "num_layers") or 0
    freq = get("moe_layer_freq")
    items = pattern(freq, layers)
    if len(items) == 1:  # integer N: Megatron-Core makes layer i an MoE layer when i % N == 0
        if items[0] == 0:  # hostile22: "the inputs take a number beyond the arithmetic's range (ZeroDivisionError ...)"
            raise ArgumentValueError("moe_layer_freq", "an N of at least 1 (layer i is an MoE layer when i % N == 0, "
                                     "megatron/core/models/gpt/gpt_layer_specs.py L649 @ d98e8a64) or a list such as "
                                     "([0]*3+[1]*58)", "0")
        items = [1 if i % items[0] == 0 else 0 for i in range(layers)]
    out.update({"model.top_k": optional_int(get("moe_router_topk"), "moe_router_topk"),
                "model.moe_ffn": optional_int(get("moe_ffn_hidden_size"), "moe_ffn_hidden_size") or dense,
                "model.shared_expert_size": optional_int(get("moe_shared_expert_intermediate_size"), "moe_shared_expert_intermediate_size") or 0,
                "model.moe_pattern": None if all(items) else items})
    return out


def _enc_window(f: Fields) -> Args:
    w = f.get("model.sliding_window")
    if not w:
        return {}
    out: Args = {"window_size": f"({w - 1},0)"}
    if f.get("model.window_pattern") is not None and not all(f["model.window_pattern"]):
        out["window_attn_skip_freq"] = list_expression(f["model.window_pattern"])
    return out


def _dec_window(get: Get) -> Fields:
    size, skip = get("window_size"), get("window_attn_skip_freq")
    if size is None:
        return {"model.sliding_window": 0, "model.window_pattern": None}
    left = _window_left(size)
    if left == -1:  # TransformerEngine's no window (utils.py L1808): every layer attends to all earlier keys
        get("window_attn_skip_freq")
        return {"model.sliding_window": 0, "model.window_pattern": None}
    layers = optional_int(get("num_layers"), "num_layers") or 0
    items = None if skip is None else pattern(skip, layers)
    if items is not None and len(items) == 1:  # an integer N: (N-1) windowed layers, then one full (arguments.py help)
        n = items[0]
        if n < 1:
            raise BtacalcError(f"Megatron-LM's --window-attn-skip-freq {n}: one full-attention layer every N layers "
                               "needs N >= 1")
        items = [0 if (i + 1) % n == 0 else 1 for i in range(layers)]
    return {"model.sliding_window": left + 1, "model.window_pattern": items}


def _window_left(size: Any) -> int:
    """The left extent of Megatron's --window-size, given as "(L, R)", "L,R", a pair or an integer. A Bridge YAML's
    string (YAML has no tuple: `(128, 0)` is a string, quoted or not) is set by Bridge as given, where Megatron-Core's
    TransformerConfig.window_size is a pair of integers: refused (a YAML list `[128, 0]` is the pair)."""
    refuse_bridge_text(size, "a pair of integers (a YAML list: [L, R])")
    parts = size if isinstance(size, (tuple, list)) else str(size).strip().strip("()[]").split(",")
    if not parts or not str(parts[0]).strip():
        raise BtacalcError(f"Megatron-LM's --window-size (window_size) takes a pair of integers, got {size!r}")
    return integer(parts[0].strip() if isinstance(parts[0], str) else parts[0], "window_size")


def _enc_router(f: Fields) -> Args:
    if not f.get("model.num_experts"):
        return {}
    router = f.get("model.router", "softmax")
    out: Args = {}
    if router == "sigmoid":
        out["moe_router_score_function"] = "sigmoid"
    elif (router == "softmax" and not f.get("model.router_renormalize", True)) or f.get("model.top_k") == 1:
        # Megatron-LM @ d98e8a64 moe_utils.py L900-914: --moe-router-pre-softmax takes the top k of the softmax over
        # all E experts and keeps those weights (OLMoE's norm_topk_prob false); without it the softmax runs over the
        # k selected logits, which gives the renormalised weights of a norm_topk_prob router (Qwen3, Mixtral) and
        # GPT-OSS's top-k-then-softmax alike. review35: at top-1 Megatron-Core refuses the softmax over the one
        # selected logit (a weight of 1, no gradient to the router: transformer_config.py L2661-2669), so a top-1
        # softmax router is written pre-softmax, the expert weighted by its probability (output.megatron says so
        # where the model renormalises)
        out["moe_router_pre_softmax"] = True
    if f.get("model.shared_expert_gate"):
        out["moe_shared_expert_gate"] = True
    if f.get("model.router_probs_on_input"):
        out["moe_apply_probs_on_input"] = True  # llama4 (moe/experts.py L918-921 @ d98e8a64: top-1 only)
    out.update(_enc_routing(f))
    return out


# semantics20: the routing a DeepSeek-V3 / Kimi K2 preset has (model.py: Hugging Face's n_group, topk_group,
# routed_scaling_factor and topk_method noaux_tc) as Megatron-LM's flags (TransformerConfig fields, transformer_config.py
# L780-819 @ d98e8a64; Megatron-Bridge's CONFIG_MAPPING maps the same Hugging Face keys onto them, conversion/
# model_bridge.py L485-489 @ 067f987d). The launch trained ungrouped, unscaled top-k without the correction bias.
def _enc_routing(f: Fields) -> Args:
    out: Args = {}
    if (f.get("model.router_groups") or 1) > 1:
        out.update(moe_router_num_groups=f["model.router_groups"], moe_router_group_topk=f["model.router_group_topk"])
    if (f.get("model.router_scale") or 1.0) != 1.0:
        out["moe_router_topk_scaling_factor"] = f["model.router_scale"]
    if f.get("model.router_score_bias"):
        out["moe_router_enable_expert_bias"] = True
    return out


def _dec_routing(get: Get) -> Fields:
    groups = optional_int(get("moe_router_num_groups"), "moe_router_num_groups")
    chosen = optional_int(get("moe_router_group_topk"), "moe_router_group_topk")
    scale = get("moe_router_topk_scaling_factor")
    # a group limit needs both (megatron_rules router-groups); the number of groups alone limits nothing
    return {"model.router_groups": (groups or 1) if chosen else 1, "model.router_group_topk": chosen or 1,
            "model.router_scale": 1.0 if scale is None else real(scale, "moe_router_topk_scaling_factor"),
            "model.router_score_bias": truth(get("moe_router_enable_expert_bias"))}


def _dec_router(get: Get) -> Fields:
    given, pre = get("moe_router_score_function"), truth(get("moe_router_pre_softmax"))
    score = "softmax" if given is None else str(given)  # Megatron's default (a caller's getter may give None)
    # the weights a Megatron router gives (moe_utils.py L900-929): renormalised but with --moe-router-pre-softmax.
    # Megatron's default softmax router (top k of the logits, softmax over them) gives the renormalised top-k softmax
    # weights of btacalc's "softmax" router with router_renormalize (Qwen3, Mixtral); btacalc's "topk_softmax" is the
    # same weights with GPT-OSS's Hugging Face tensors saved, which a launch does not say: read as "softmax"
    if score not in ("softmax", "sigmoid"):  # hostile23: sqrtsoftplus was planned as the softmax router, in silence
        raise BtacalcError(f"--moe-router-score-function {score}: btacalc models the softmax and sigmoid routers "
                           "(Megatron-Core's sqrtsoftplus scores are not modelled)")
    router = score
    # llama4: a sigmoid router at top-1 keeps its one score unrenormalised (moe_utils.py L929 @ d98e8a64: `if topk > 1`)
    top1 = score == "sigmoid" and optional_int(get("moe_router_topk"), "moe_router_topk") == 1
    return {"model.router": router, "model.router_renormalize": not (pre and score != "sigmoid") and not top1,
            "model.shared_expert_gate": truth(get("moe_shared_expert_gate")),
            "model.router_probs_on_input": truth(get("moe_apply_probs_on_input")), **_dec_routing(get)}


# fu22: the router's load-balancing loss (ModelSpec.aux_loss_coeff, load_balancing) as Megatron-LM's flags, both nargs +
# (arguments.py L3532-3537 @ d98e8a64: --moe-router-load-balancing-type, default aux_loss, and --moe-aux-loss-coeff,
# default 0.0; a list of one is its value, L1661-1664). A coefficient the model's source does not give is left out
# (Megatron's 0.0, which output.megatron says), as is the default type. The types one ModelSpec holds: Megatron-Core's
# router weighs aux_loss, seq_aux_loss or global_aux_loss by the coefficient and with none adds no loss
# (moe/router.py L388-408); sinkhorn (S-BASE routing, L280-311) and quantile_balancing (a per-expert bias, L313-386)
# route otherwise, and several types at once weigh one coefficient each: none of these is read (the flags are listed
# with the reason, megatron_run.IGNORED, and the plan routes top-k, as it did).
BALANCINGS = ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")


def _enc_balancing(f: Fields) -> Args:
    if not f.get("model.num_experts"):
        return {}
    out: Args = {}
    if f.get("model.aux_loss_coeff") is not None:
        out["moe_aux_loss_coeff"] = f["model.aux_loss_coeff"]
    if f.get("model.load_balancing", "aux_loss") != "aux_loss":
        out["moe_router_load_balancing_type"] = f["model.load_balancing"]
    return out


def _one_value(v: Any) -> Any:
    """A nargs + value as Megatron-LM's validate_args leaves it: a list of one is its item (L1661-1664)."""
    return v[0] if isinstance(v, (list, tuple)) and len(v) == 1 else v


def _dec_balancing(get: Get) -> Fields:
    """The loss a launch gives its MoE router; a dense launch's flags, a type no ModelSpec holds or several types are
    left unread (listed). Read through `get` only when read, so that what is not read stays listed."""
    kind = _one_value(get.args.get("moe_router_load_balancing_type", "aux_loss"))
    coeff = _one_value(get.args.get("moe_aux_loss_coeff"))
    if not get.args.get("num_experts") or not isinstance(kind, str) or kind not in BALANCINGS \
            or isinstance(coeff, (list, tuple)):
        return {"model.aux_loss_coeff": None, "model.load_balancing": "aux_loss"}
    get("moe_router_load_balancing_type"), get("moe_aux_loss_coeff")
    value = None if coeff is None else real(coeff, "moe_aux_loss_coeff")
    if value is not None and (not math.isfinite(value) or value < 0):
        raise ArgumentValueError("moe_aux_loss_coeff", "a finite coefficient of at least 0", repr(coeff))
    return {"model.aux_loss_coeff": value, "model.load_balancing": kind}


BALANCING_ROW = Row("load balancing", _enc_balancing, _dec_balancing)


# Megatron's --add-bias-linear (on by default; --disable-bias-linear) gives a bias to every linear layer: the attention
# projections, the MLP's, and in an MoE layer the router's and each expert's (Megatron-LM @ d98e8a64
# moe/router.py L67-70, moe/experts.py L223 and L246). btacalc's expert_bias is those expert biases (GPT-OSS; Bridge's
# gpt_oss_bridge.py L62 sets add_bias_linear), not --moe-router-enable-expert-bias, the aux-loss-free routing bias
# (transformer_config.py L816-819), which the codec wrote for it until review19 and Megatron refuses beside a
# softmax router (L2617-2625).
BIAS_FIELDS = tuple(f"model.{name}" for name in MEGATRON_LINEAR_BIASES)


def _enc_bias(f: Fields) -> Args:
    if any(f.get(key) for key in BIAS_FIELDS):
        if not f.get("model.num_experts"):
            return {}
        # gelu: biased experts as the grouped GEMMs _enc_ffn writes: TEGroupedMLP asserts no fused bias-dropout-add
        # (moe/experts.py L205-207), and GeLU experts run no fused bias-GeLU with the routing weight (L982-985)
        return {"bias_dropout_fusion": False, **({"bias_gelu_fusion": False} if f.get("model.mlp") == "gelu" else {})}
    return {"add_bias_linear": False, **({"add_qkv_bias": True} if f.get("model.qkv_bias") else {})}


def _dec_bias(get: Get) -> Fields:
    linear = truth(get("add_bias_linear"))
    qkv = linear or truth(get("add_qkv_bias"))
    moe = linear and (optional_int(get("num_experts"), "num_experts") or 0) > 0
    return {"model.linear_bias": linear, "model.mlp_bias": linear, "model.qkv_bias": qkv,
            "model.router_bias": moe, "model.expert_bias": moe}


# semantics19: under --multi-latent-attention, Megatron's --qk-layernorm is what builds MLA's two latent RMSNorms (the
# compressed query's and the compressed key/value's, DeepSeek's q_a_layernorm and kv_a_layernorm): Megatron-LM @
# d98e8a64 megatron/core/models/gpt/gpt_layer_specs.py L244-255 make linear_q_up_proj and linear_kv_up_proj
# TELayerNormColumnParallelLinear with it and a plain TEColumnParallelLinear without, and Megatron-Bridge's DeepSeek
# and Kimi providers set it (BRIDGE_PIN deepseek_v3_bridge.py L62, kimi_bridge.py L54). btacalc's MLA always has them
# (formulas/mla.toml: "h -> r_q, RMSNorm, r_q -> a d_h"), and a model with MLA has qk_norm none (model.py), so the
# codec left the flag out: a DeepSeek-V3 launch trained MLA without its latent norms.
MLA_NORMS_NOTE = ("--multi-latent-attention without --qk-layernorm: Megatron-Core builds MLA without the latent "
                  "RMSNorms of the compressed query and key/value (gpt_layer_specs.py L244-255 @ d98e8a64); btacalc's "
                  "MLA has them (DeepSeek's): planned with them")


def _enc_qk_norm(f: Fields) -> Args:
    if f.get("model.qk_norm_l2"):
        return {"qk_l2_norm": True}
    return {"qk_layernorm": True} if f.get("model.qk_norm_head") or f.get("model.mla") is not None else {}


# llama4: Llama 4's weightless L2 norm of each query and key head (ModelSpec.qk_norm l2) as Megatron-LM's --qk-l2-norm
# (TransformerConfig.qk_l2_norm, transformer_config.py L262 @ d98e8a64, "llama 4-style qk L2 norm"), which Megatron-Core
# builds as L2Norm over --qk-layernorm's norm (attention.py L1709-1713; gpt_layer_specs.py L149-152) and refuses with
# multi-latent attention (gpt_layer_specs.py L105)
def _dec_qk_norm(get: Get) -> Fields:
    on, l2 = truth(get("qk_layernorm")), truth(get("qk_l2_norm"))
    if not truth(get("multi_latent_attention")):
        return {"model.qk_norm_head": on and not l2, "model.qk_norm_l2": l2}
    if l2:
        raise BtacalcError("Megatron --qk-l2-norm with --multi-latent-attention: Megatron-Core asserts 'qk_l2_norm is "
                           "not supported with MLA' (gpt_layer_specs.py L105 @ d98e8a64)")
    return {"model.qk_norm_head": False, "model.qk_norm_l2": False,
            **({} if on else {"run.mla_norm_note": MLA_NORMS_NOTE})}


# llama4: Llama 4's NoPE layers (ModelSpec.no_rope_interval) as Megatron-LM's --no-rope-freq (arguments.py L2428-2435 @
# d98e8a64): an integer N skips RoPE in every N-th layer, which Megatron-Core expands to [0]*(N-1)+[1] repeated and
# asserts divides the layers (transformer_config.py L3138-3150), else a list of 0/1 with 1 a NoPE layer; attention.py
# L1320-1325 then passes no rotary embedding to that layer
def _enc_no_rope(f: Fields) -> Args:
    n, layers = f.get("model.no_rope_interval") or 0, f["model.num_layers"]
    if not n:
        return {}
    if layers % n == 0:
        return {"no_rope_freq": n}
    return {"no_rope_freq": list_expression([1 if (i + 1) % n == 0 else 0 for i in range(layers)])}


def _dec_no_rope(get: Get) -> Fields:
    value, layers = get("no_rope_freq"), optional_int(get("num_layers"), "num_layers") or 0
    if value is None:
        return {"model.no_rope_interval": 0}
    items = pattern(value, layers)
    if len(items) == 1 and layers != 1:
        n = items[0]
        if not n:  # Megatron-Core's `if self.no_rope_freq:`: 0 skips no layer
            return {"model.no_rope_interval": 0}
        if n < 2 or layers % n:
            raise ArgumentValueError("no_rope_freq", f"an N of at least 2 that divides the {layers} layers (Megatron-"
                                     "Core asserts num_layers % no_rope_freq == 0, transformer_config.py L3141; 1 "
                                     "leaves no layer its rotary embedding)", repr(value))
        return {"model.no_rope_interval": n}
    if not any(items):
        return {"model.no_rope_interval": 0}
    n = every_nth([i for i, x in enumerate(items) if x], layers)  # hostile39: one pass, not every n from 2 to L
    if n >= 2:
        return {"model.no_rope_interval": n}
    raise BtacalcError(f"--no-rope-freq {cut(str(value))}: btacalc models one NoPE layer every N layers (Llama 4's)")


# rope: which dimensions RoPE turns together (ModelSpec.rotary_interleaved) as Megatron-LM's --rotary-interleaved
# (TransformerConfig.rotary_interleaved, transformer_config.py L243 @ d98e8a64), which Megatron-Core refuses with
# multi-latent attention (L2526-2527); a model without RoPE has no such choice (the flag changes nothing there)
def _enc_rotary_pairs(f: Fields) -> Args:
    return {"rotary_interleaved": True} if f.get("model.rotary_interleaved") else {}


def _dec_rotary_pairs(get: Get) -> Fields:
    rope = str(get("position_embedding_type")) in ("rope", "yarn")  # YaRN rotates as RoPE does
    if not rope and not truth(get("multi_latent_attention")):
        # hostile40: no rotary embedding, so the flag changes nothing: left unread, it is listed as ignored (it was
        # read and dropped, listed nowhere, where --rotary-base and --rotary-percent beside it were listed)
        return {"model.rotary_interleaved": False}
    on = truth(get("rotary_interleaved"))
    if on and truth(get("multi_latent_attention")):
        raise BtacalcError("Megatron --rotary-interleaved with --multi-latent-attention: Megatron-Core raises "
                           "'rotary_interleaved does not work with multi_latent_attention' (transformer_config.py "
                           "L2526-2527 @ d98e8a64)")
    return {"model.rotary_interleaved": on and rope}


# The gated MLP's activation as Megatron-LM's flags (arguments.py --swiglu, --quick-geglu, --glu-linear-offset,
# --activation-func-clamp-value; argument_utils.py L314-326 @ d98e8a64: --swiglu is F.silu, --quick-geglu is
# quick_gelu, x sigmoid(1.702 x), both gated). GPT-OSS's (transformers' GptOssExperts: gate * sigmoid(1.702 gate) *
# (up + 1), both clamped at swiglu_limit 7.0) is the quick-GELU GLU with offset 1 and clamp 7, as Megatron-Bridge's
# gpt_oss_bridge.py L81-84 @ 067f987d sets it; it was written as --swiglu, which trains SiLU.
GLU_ACTIVATIONS: dict[str, Args] = {
    "silu": {"swiglu": True},
    "clamped_quick_gelu": {"quick_geglu": True, "glu_linear_offset": GPT_OSS_GLU_OFFSET,
                           "activation_func_clamp_value": GPT_OSS_GLU_CLAMP},
}


# semantics22: Nemotron-4's ungated MLP is squared ReLU (NeMo @ c341fb38 nemotron.py L41; Megatron-Bridge's
# nemotron_bridge.py L62), which Megatron-LM builds with --squared-relu (argument_utils.py L320-322 @ d98e8a64); without
# it the ungated MLP is GeLU. Its LayerNorm has a zero-centred gamma (nemotron.py L52, nemotron_bridge.py L69):
# --apply-layernorm-1p (TransformerConfig.layernorm_zero_centered_gamma). The launch trained GeLU and plain LayerNorm.
def _enc_mlp(f: Fields) -> Args:
    if f.get("model.mlp") == "gelu":
        return {"swiglu": False, **({"squared_relu": True} if f.get("model.mlp_activation") == "squared_relu" else {})}
    return dict(GLU_ACTIVATIONS[f.get("model.glu_activation") or "silu"])


def _dec_mlp(get: Get) -> Fields:
    offset, clamp = (None if get(dest) is None else real(get(dest), dest)
                     for dest in ("glu_linear_offset", "activation_func_clamp_value"))
    squared = truth(get("squared_relu"))
    if squared and truth(get("swiglu")):  # argument_utils.py L320-321 asserts
        raise BtacalcError("Megatron --squared-relu with --swiglu: Megatron-LM asserts one activation "
                           "(argument_utils.py L320-321 @ d98e8a64)")
    if squared:
        # review21: Megatron-LM takes squared ReLU and passes --quick-geglu over (L320-326: `elif args.quick_geglu`);
        # the launch was refused as if it asserted. Left unread, --quick-geglu is listed (megatron_run.IGNORED)
        return {"model.mlp": "gelu", "model.glu_activation": "silu", "model.mlp_activation": "squared_relu"}
    if not truth(get("quick_geglu")):
        if offset or clamp is not None:
            raise BtacalcError("Megatron --glu-linear-offset / --activation-func-clamp-value without --quick-geglu: "
                               "btacalc models them as GPT-OSS's quick-GELU GLU only")
        return {"model.mlp": "swiglu" if truth(get("swiglu")) else "gelu", "model.glu_activation": "silu",
                "model.mlp_activation": "gelu"}
    if (offset, clamp) != (GPT_OSS_GLU_OFFSET, GPT_OSS_GLU_CLAMP):
        raise BtacalcError(f"Megatron --quick-geglu with --glu-linear-offset {offset or 0:g} and "
                           f"--activation-func-clamp-value {clamp}: btacalc models GPT-OSS's quick-GELU GLU (offset "
                           f"{GPT_OSS_GLU_OFFSET:g}, clamp {GPT_OSS_GLU_CLAMP:g})")
    return {"model.mlp": "swiglu", "model.glu_activation": "clamped_quick_gelu", "model.mlp_activation": "gelu"}


# dropout35: the two switches as Megatron-LM's two probabilities, each on its own (a launch's --attention-dropout 0
# --hidden-dropout 0.1 was read back as dropout on and written again as 0.1 for both): 0.1, Megatron-Core's default
# for both (transformer_config.py L188, L191 @ d98e8a64), or 0
def _enc_dropout(f: Fields) -> Args:
    return {dest: 0.1 if f.get(f"model.{dest}") else 0.0 for dest in ("attention_dropout", "hidden_dropout")}


def _dec_dropout(get: Get) -> Fields:
    # both read (argtypes24: `or` left hidden_dropout unread when attention_dropout was above 0, so a Bridge
    # `model.hidden_dropout` given as a string, which Megatron-Core's dropout cannot compare, was planned)
    attention, hidden = (real(get(d) or 0, d) for d in ("attention_dropout", "hidden_dropout"))
    # argtypes24: argparse takes any float, torch's dropout does not: hidden_dropout goes to F.dropout in every layer
    # (Megatron-LM @ d98e8a64 fused_bias_dropout.py L47, L54), which raises outside [0, 1] and on nan (torch 2.13
    # functional.py L1489 "dropout probability has to be between 0 and 1"); attention_dropout builds torch.nn.Dropout
    # (dot_product_attention.py L114; TransformerEngine's UnfusedDotProductAttention, always built), which raises
    # outside [0, 1] when the model is built. Both were planned (dropout on at 1.5 or inf, off at -0.1 or nan)
    for dest, p in (("attention_dropout", attention), ("hidden_dropout", hidden)):
        if p < 0 or p > 1 or (dest == "hidden_dropout" and math.isnan(p)):
            raise ArgumentValueError(dest, "a probability in [0, 1]", repr(p), ": torch's dropout raises on it, so "
                                     "Megatron stops at the model's build or first step")
    nan = _nan_attention_dropout(get) if math.isnan(attention) else {}
    # dropout35: each probability its own switch: the attention probabilities' mask and dropped-out copy (eager
    # attention) exist only with attention_dropout > 0, the residual and embedding masks only with hidden_dropout > 0
    # (torch's dropout at p = 0 returns its input and keeps nothing)
    return {"model.attention_dropout": attention > 0, "model.hidden_dropout": hidden > 0, **nan}


# hostile24: an attention dropout of nan (review22's leftover: planned as no dropout, "nn.Dropout takes nan"), by the
# attention btacalc plans for the launch (megatron_rows.attention_backend). Unfused: Megatron-Core's DotProductAttention builds
# torch.nn.Dropout(nan) (dot_product_attention.py L114-116 @ d98e8a64; nn.Dropout checks p < 0 or p > 1 only) and
# calls it on the probabilities in training (L216-220), where torch's ATen dropout raises "dropout probability has to
# be between 0 and 1, but got nan" (torch 2.13; TransformerEngine's UnfusedDotProductAttention the same, backends.py
# L388, L713-714 @ d0067d0). Flash: TransformerEngine's FlashAttention passes the probability to flash-attn
# (backends.py L1232), FlashAttention 3 / 4 being off for a probability != 0 (utils.py L1104-1111), and flash-attn 2's
# set_params_fprop stops on it (Dao-AILab/flash-attention @ 0251105a csrc/flash_attn/flash_api.cpp L150,
# TORCH_CHECK(p_dropout < 1.f), false for nan). Fused: TE checks nothing; its cuDNN backend choice takes a causal mask
# whatever the probability (common/fused_attn/fused_attn.cpp L232-488: only some masks and windows need dropout ==
# 0.0) and runs cuDNN's dropout (fused_attn_f16_arbitrary_seqlen.cu L81 is_dropout = p != 0, L393 set_dropout(p)):
# what cuDNN drops at nan is in no open source. auto: TE prefers fused attention from sm90 (utils.py L1647-1653),
# flash-attn below, where FlashAttention 2 stops.
NAN_ATTENTION_DROPOUT = {
    "unfused": "unfused attention's torch.nn.Dropout (Megatron-Core dot_product_attention.py L114-116, L216-220 @ "
               "d98e8a64) raises at the first training step (torch's ATen dropout: 'dropout probability has to be "
               "between 0 and 1, but got nan')",
    "flash": "TransformerEngine's FlashAttention hands it to flash-attn (backends.py L1232 @ d0067d0), whose "
             "set_params_fprop stops on it (flash_api.cpp L150 TORCH_CHECK(p_dropout < 1.f) @ 0251105a)"}


NAN_ATTENTION_DROPOUT_NOTE = (
    "--attention-dropout nan (model.attention_dropout): TransformerEngine's fused attention takes it unchecked and "
    "runs cuDNN's dropout with probability nan (TE @ d0067d0 backends.py L1123, fused_attn_f16_arbitrary_seqlen.cu "
    "L81, L393), which no open source says what it drops; planned as no attention dropout")


# freshuser24: Megatron-LM's own GPT-OSS example (examples/gptoss/02_train.sh @ d98e8a64) sets
# --attention-softmax-in-fp32 beside --softmax-type learnable, and its read-back was refused with "set softmax_fp32
# false", a preset field no launch has. Only Megatron-Core's own DotProductAttention reads the flag
# (dot_product_attention.py L106, FusedScaleMaskSoftmax), which the layers run under --attention-backend local
# (training/models/gpt.py L301-303) or --transformer-impl local; TransformerEngine's attention does not take it
# (core/extensions/transformer_engine.py holds no attention_softmax_in_fp32).
SINK_SOFTMAX_NOTE = ("the fp32 attention softmax (--attention-softmax-in-fp32, a Bridge file's "
                     "model.attention_softmax_in_fp32) has no effect here: only Megatron-Core's own DotProductAttention "
                     "reads it (dot_product_attention.py L106 @ d98e8a64), and the attention sinks (a learnable "
                     "softmax) run on TransformerEngine's attention; planned as without it")


def _dec_softmax_fp32(get: Get) -> Fields:
    """The softmax's dtype in eager attention; with a learnable softmax (attention sinks), which btacalc models in
    the activation dtype as GPT-OSS computes it, the fp32 switch is a note where TransformerEngine's attention runs
    and refused under Megatron-Core's own (local) attention, which reads it."""
    fp32 = truth(get("attention_softmax_in_fp32"))
    if not fp32 or str(get("softmax_type")).lower() != "learnable":
        return {"model.softmax_fp32": fp32}
    if attention_backend(get) == "local":
        raise ArgumentValueError("attention_softmax_in_fp32", "false with a learnable softmax (attention sinks) under "
                                 "Megatron-Core's local attention", "True", ": btacalc models the sinks as GPT-OSS "
                                 "computes them, the softmax in the activation dtype")
    return {"model.softmax_fp32": False, "run.softmax_note": SINK_SOFTMAX_NOTE}


NAN_AUTO_NOTE = (", and --attention-backend auto is TE's choice: fused attention from sm90 (utils.py L1647-1653), "
                 "flash-attn below, where the run stops (flash_api.cpp L150 @ 0251105a)")


def _nan_attention_dropout(get: Get) -> Fields:
    """An attention dropout of nan: refused where the attention btacalc plans stops on it, else a note
    (NAN_ATTENTION_DROPOUT)."""
    backend = attention_backend(get)
    kind = "unfused" if backend in ("unfused", "local") else "flash" if backend == "flash" else None
    if kind is not None:
        raise ArgumentValueError("attention_dropout", "a probability in [0, 1]", "nan",
                                 f": {NAN_ATTENTION_DROPOUT[kind]}")
    return {"run.dropout_note": NAN_ATTENTION_DROPOUT_NOTE + (NAN_AUTO_NOTE if backend == "auto" else "")}


# semantics20: GPT-OSS's YaRN (model.py YarnScaling) as Megatron-LM's flags: --position-embedding-type yarn builds
# YarnRotaryEmbedding (megatron/core/models/gpt/gpt_model.py L196-215 @ d98e8a64) from the config's yarn_* attributes,
# which Megatron-LM sets from --rotary-scaling-factor, --yarn-original-max-position-embeddings, --yarn-beta-fast,
# --yarn-beta-slow, --mscale, --mscale-all-dim and --[no-]yarn-correction-range-round-to-int (training/
# argument_utils.py L384-413, defaults 1.0, 4096, 32, 1, 1.0, 0.0, True: Megatron's default mscale pair gives the
# concentration 0.1 ln(factor) + 1 of a config without one, yarn_rotary_pos_embedding.py L275-294). Megatron-Bridge's
# GPT-OSS provider sets the same (gpt_oss_bridge.py L65, L93-98 @ 067f987d). The launch trained plain RoPE.
YARN_DEFAULTS = {"yarn_original_max_position_embeddings": 4096, "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0}


_YARN_DESTS = ("rotary_scaling_factor", "yarn_original_max_position_embeddings", "yarn_beta_fast", "yarn_beta_slow",
               "yarn_correction_range_round_to_int", "mscale", "mscale_all_dim")


POSITION_TYPES = {"rope": "rope", "learned": "learned_absolute"}


# semantics21: under multi-latent attention Megatron-Core builds the rotary embedding inside the attention, from
# MLATransformerConfig (rope_type "yarn" by default: transformer_config.py L3306-3331 @ d98e8a64; multi_latent_attention.py
# L188-198), and scales the softmax by mscale(rotary_scaling_factor, mscale_all_dim)^2 (L177-178). The factor and the
# two mscales come from --rotary-scaling-factor, --mscale and --mscale-all-dim (argument_utils.py L300-303 copies every
# argument named as a config field; arguments.py L3558-3563, defaults 1.0, 1.0, 0.0); the original positions and the
# betas have no flag (the config's 4096, 32, 1). Megatron-LM's own DeepSeek-V3 launch states the three
# (examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh L112-114). A DeepSeek-V3 / Kimi K2 launch trained YaRN at factor
# 1 and mscale_all_dim 0: another rotary embedding and softmax scale than the model's.
MLA_YARN_FIXED = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}


# review20: the fixed three are MLATransformerConfig fields Megatron-Bridge sets (model.<name>; its conversion maps an
# MLA model's rope_scaling onto them, Megatron-Bridge @ 067f987df conversion/model_bridge.py L515-522): --emit bridge
# states them and --from-bridge reads them (as these destinations, which no Megatron-LM flag has)
MLA_YARN_BRIDGE = ("original_max_position_embeddings", "beta_fast", "beta_slow")


MLA_YARN_DESTS = ("rotary_scaling_factor", "mscale", "mscale_all_dim")  # the flags (their defaults: Get's, the table's)


def mla_yarn_unsaid(yarn: Optional[Mapping[str, Any]]) -> dict[str, tuple[Any, Any]]:
    """The YaRN settings of an MLA model that Megatron-LM has no flag for and that differ from MLATransformerConfig's
    (MLA_YARN_FIXED), each as (the model's, Megatron's): the launch trains Megatron's."""
    if yarn is None:
        return {}
    return {k: (yarn[k], v) for k, v in MLA_YARN_FIXED.items() if yarn[k] != v}


def _enc_rope(f: Fields) -> Args:
    yarn = f.get("model.yarn")
    if f["model.position_embedding"] != "rope" or yarn is None:
        return {"position_embedding_type": POSITION_TYPES[f["model.position_embedding"]]}
    if f.get("model.mla") is not None:
        return {"position_embedding_type": "rope", "rotary_scaling_factor": yarn["factor"],
                **{k: yarn[k] for k in ("mscale", "mscale_all_dim") if yarn[k] is not None}}
    out: Args = {"position_embedding_type": "yarn", "rotary_scaling_factor": yarn["factor"],
                 "yarn_original_max_position_embeddings": yarn["original_max_position_embeddings"],
                 "yarn_beta_fast": yarn["beta_fast"], "yarn_beta_slow": yarn["beta_slow"]}
    if not yarn["truncate"]:
        out["yarn_correction_range_round_to_int"] = False
    for key in ("mscale", "mscale_all_dim"):
        if yarn[key] is not None:
            out[key] = yarn[key]
    return out


def _dec_rope(get: Get) -> Fields:
    kind = str(get("position_embedding_type"))
    if kind == "rope" and truth(get("multi_latent_attention")):
        # review20: --rope-type rope builds MLA a plain RotaryEmbedding (multi_latent_attention.py L180-187): no YaRN,
        # its flags stay unread (listed); None and yarn are MLATransformerConfig's default YaRN
        if get("rope_type") == "rope":
            return {"model.position_embedding": "rope", "model.yarn": None}
        return {"model.position_embedding": "rope", "model.yarn": _dec_mla_yarn(get)}
    if kind in ("rope", "learned_absolute"):  # the YaRN flags left unread: listed
        return {"model.position_embedding": "rope" if kind == "rope" else "learned", "model.yarn": None}
    if kind != "yarn":
        raise BtacalcError(f"Megatron position_embedding_type {kind!r}: btacalc models rope, yarn, learned_absolute")
    given = {dest: get(dest) for dest in _YARN_DESTS}
    factor = _yarn_factor(1.0 if given["rotary_scaling_factor"] is None else given["rotary_scaling_factor"])
    if factor <= 1:  # YaRN without extension: inv_freq_inter = inv_freq_extra, concentration 1: RoPE
        return {"model.position_embedding": "rope", "model.yarn": None}
    yarn = {"factor": factor,
            # hostile23: 0 was read as not given (4096); YaRN's correction range takes its logarithm
            "original_max_position_embeddings": YARN_DEFAULTS["yarn_original_max_position_embeddings"]
            if given["yarn_original_max_position_embeddings"] is None
            else optional_int(given["yarn_original_max_position_embeddings"], "yarn_original_max_position_embeddings"),
            "beta_fast": real(YARN_DEFAULTS["yarn_beta_fast"] if given["yarn_beta_fast"] is None
                              else given["yarn_beta_fast"], "yarn_beta_fast"),
            "beta_slow": real(YARN_DEFAULTS["yarn_beta_slow"] if given["yarn_beta_slow"] is None
                              else given["yarn_beta_slow"], "yarn_beta_slow"),
            "truncate": given["yarn_correction_range_round_to_int"] is None
            or truth(given["yarn_correction_range_round_to_int"]),
            **{key: None if not get.given(key) or given[key] is None else real(given[key], key)
               for key in ("mscale", "mscale_all_dim")}}
    return {"model.position_embedding": "rope", "model.yarn": yarn}


def _yarn_factor(value: Any) -> float:
    """--rotary-scaling-factor as YaRN's context extension: 1 is none (RoPE). hostile23: 0.5, 0 or -40 were read as
    RoPE, though Megatron-Core divides the interpolated frequencies by the factor whatever it is
    (yarn_rotary_pos_embedding.py `inv_freq_inter`), and inf was planned as a factor."""
    factor = real(value, "rotary_scaling_factor")
    if not math.isfinite(factor) or factor < 1:
        raise ArgumentValueError("rotary_scaling_factor", "a YaRN context extension of at least 1 (1: none, plain "
                                 "RoPE)", repr(value) if isinstance(value, str) else repr(factor),
                                 ": below 1 the positions are compressed, which btacalc does not model"
                                 if factor < 1 else "")
    return factor


def _dec_mla_yarn(get: Get) -> Optional[dict[str, Any]]:
    """An MLA launch's YaRN (semantics21, MLA_YARN_DESTS): None where its factor is at most 1 (no extension; the
    softmax scale's mscale is then 1 too, yarn_rotary_pos_embedding.py `_yarn_get_mscale`), else the flags' values over
    the config's fixed original positions and betas."""
    given = {dest: real(get(dest), dest) for dest in MLA_YARN_DESTS}
    if _yarn_factor(get("rotary_scaling_factor")) <= 1:
        return None
    bridge = {k: (integer if k == "original_max_position_embeddings" else real)(get(k), k)
              for k in MLA_YARN_BRIDGE if get.given(k)}
    return {"factor": given["rotary_scaling_factor"], **MLA_YARN_FIXED, **bridge, "mscale": given["mscale"],
            "mscale_all_dim": given["mscale_all_dim"]}


# semantics22: the model's numerics (ModelSpec.numerics) as Megatron-LM's flags: --rotary-base (an int, arguments.py
# L2418 @ d98e8a64, default 10000), --rotary-percent (L2420, 1.0), --norm-epsilon (layernorm_epsilon, 1e-05) and
# --init-method-std (0.02), each a TransformerConfig field (transformer_config.py L201, L400; MLATransformerConfig's
# rotary_base and rotary_percent L3309-3312, which MLA's rotary embeddings read, multi_latent_attention.py L184-192).
# The launch left them all at Megatron's defaults: a Qwen3 launch trained RoPE base 10000 where the model's is 1e6.
# A value the model's source does not state is left out (the launch notes it); a RoPE base that is no integer has no
# Megatron-LM flag (type=int): left out and noted (output.megatron._numerics).
# numerics23: linear RoPE scaling as --rotary-seq-len-interpolation-factor (type=int, default None: arguments.py
# L2422-2423), which Megatron-LM passes to the GPT model's rotary embedding (argument_utils.py L467, L518; positions
# divided by it, rotary_pos_embedding.py L135-136) and Megatron-Bridge names seq_len_interpolation_factor
# (gpt_provider.py L148; llama_bridge.py L72-73 maps rope_scaling type linear onto it)
NUMERIC_DESTS = {"rope_theta": "rotary_base", "norm_eps": "layernorm_epsilon", "init_std": "init_method_std",
                 "rotary_percent": "rotary_percent", "rope_scaling_factor": "rope_scaling_factor",
                 "rope_interpolation_factor": "rotary_seq_len_interpolation_factor"}


ROTARY_FIELDS = ("rope_theta", "rotary_percent", "rope_scaling_factor", "rope_interpolation_factor")


# what each field's flag must hold, in words, for the refusal that names the flag; the bounds themselves are
# ModelSpec.numerics' (config/model.py Numerics), which `_numeric` checks the value against
NUMERIC_KINDS = {"rope_theta": "a positive base", "norm_eps": "an epsilon between 0 and 1",
                 "init_std": "a standard deviation between 0 and 1",
                 "rotary_percent": "a share of each head above 0 and at most 1",
                 "rope_scaling_factor": "a factor of at least 1",
                 "rope_interpolation_factor": "a finite factor above 0 (1: none; Megatron-Core multiplies the "
                                              "positions by 1 / factor, rotary_pos_embedding.py L135-136)"}


# hostile29: the numerics a launch may leave at Megatron-LM's default where the model's source states none (the
# launch then says so: output.megatron NUMERICS_DEFAULTS); a flag left out is "model.numerics_implied", which the
# read leaves unset unless the preset of the run's shape states a value (launch_fields._implied_numerics), so a launch
# emitted without --init-method-std reads back without it and emits the same flags
IMPLIED_NUMERICS = ("rope_theta", "norm_eps", "init_std")


# Llama 3.x's RoPE scaling: --use-rope-scaling (off by default) with --rope-scaling-factor (8.0), arguments.py
# L2424-2427, read by GPTModel's RotaryEmbedding only (argument_utils.py L465-466; MLA builds its own)
ROPE_SCALING_SWITCH = "use_rope_scaling"


def _enc_numerics(f: Fields) -> Args:
    numerics = f.get("model.numerics") or {}
    out: Args = {}
    for field, dest in NUMERIC_DESTS.items():
        value = numerics.get(field)
        if value is None or (field in ROTARY_FIELDS and f["model.position_embedding"] != "rope"):
            continue
        if field == "rope_theta":
            if value != int(value):
                continue  # no Megatron-LM flag takes it (--rotary-base type=int): the launch notes it
            value = int(value)
        if field == "rotary_percent" and value == 1:
            continue  # the whole head: Megatron's default
        # otherwise the share as stored: Megatron truncates it as btacalc does (model.rotary_dimensions; a count such
        # as GPT-J's rotary_dim is stored as model.rotary_share, hostile41 D2)
        if field == "rope_scaling_factor":
            if value == 1 or f.get("model.mla") is not None:
                continue
            out[ROPE_SCALING_SWITCH] = True
        if field == "rope_interpolation_factor" and value == int(value):
            value = int(value)  # Megatron-LM's flag is type=int; a Bridge override of a whole factor is the same int
        out[dest] = value
    return out


def _numeric(field: str, dest: str, value: Any) -> float:
    """A launch's value of a numerics flag, within Numerics' bounds for `field` (one line naming the flag if not)."""
    number = real(value, dest)
    try:
        Numerics.model_validate({field: number})
    except ValidationError:
        raise ArgumentValueError(dest, NUMERIC_KINDS[field], repr(value)) from None
    return number


def _interpolation(dest: str, value: Any) -> Optional[float]:
    """A launch's linear RoPE scaling factor: finite and above 0 (1: positions unchanged, as none). Megatron-LM's
    argparse takes an integer (type=int, checked before), a Bridge file any float, as Megatron-Core's RotaryEmbedding
    does (hostile24: a Bridge factor of 2.5 was refused as "an integer factor")."""
    number = real(value, dest)
    if not math.isfinite(number) or number <= 0:
        raise ArgumentValueError(dest, NUMERIC_KINDS["rope_interpolation_factor"], repr(value))
    return None if number == 1 else number


def _dec_numerics(get: Get) -> Fields:
    """The numerics a launch trains: each flag, else Megatron-LM's default (the parser's, as `Get` reads it); in a
    Bridge file a key it leaves out is None (the recipe's or the Hugging Face config's: `import_bridge`)."""
    rope = str(get("position_embedding_type")) != "learned_absolute"
    numerics: dict[str, Any] = {}
    implied = tuple(field for field in IMPLIED_NUMERICS  # a rotary flag without RoPE stays unread (listed)
                    if (rope or field not in ROTARY_FIELDS) and not get.given(NUMERIC_DESTS[field]))
    for field, dest in NUMERIC_DESTS.items():
        if field in ROTARY_FIELDS and not rope:
            continue  # no rotary embedding: the flags stay unread (listed)
        if field == "rope_scaling_factor":
            on = get(ROPE_SCALING_SWITCH)
            if on is None or not truth(on):  # None: a Bridge key left to the Hugging Face config
                get(dest)
                numerics[field] = None if on is None else 1.0
                continue
        value = get(dest)
        if field == "rope_theta" and isinstance(value, str):
            value = integer(value, dest)  # Megatron-LM's argparse: type=int ("1e6" is refused); Bridge's float is one
        if field == "rope_interpolation_factor" and value is not None:
            numerics[field] = _interpolation(dest, value)
            continue
        numerics[field] = None if value is None else _numeric(field, dest, value)
    if numerics.get("rotary_percent") is None:
        numerics["rotary_percent"] = 1.0  # GPTModelProvider's and Megatron's default (gpt_provider.py L144)
    return {"model.numerics": numerics, "model.numerics_implied": implied}


def _enc_positions(f: Fields) -> Args:
    seq = f["run.seq_len"]
    given = f.get("model.max_position_embeddings") or seq
    return {"max_position_embeddings": max(given, seq), "seq_length": seq}


def _dec_positions(get: Get) -> Fields:
    seq = optional_int(get("seq_length"), "seq_length")
    if seq is None:
        raise BtacalcError("the launch gives no --seq-length")
    return {"run.seq_len": seq, "model.max_position_embeddings": optional_int(get("max_position_embeddings"), "max_position_embeddings")}


# review36: a launch runs only with a run length and a learning rate (Megatron-LM @ d98e8a64 training.py L2586 'either
# train-iters or train-samples should be provided'; optimizer_param_scheduler.py L148 float(max_lr)); btacalc plans one
# step, so the emitted launch gives a short benchmark run the output's notes call placeholders
PLACEHOLDER_RUN = {"train_iters": 100, "lr": 1.0e-4}


def _enc_vocab(f: Fields) -> Args:
    multiple = {"make_vocab_size_divisible_by": f["layout.vocab_multiple"]} if f.get("layout.vocab_multiple") else {}
    return {"vocab_size": f["model.vocab_size"], **multiple, "tokenizer_type": "NullTokenizer", "mock_data": True,
            **PLACEHOLDER_RUN}


def _dec_vocab(get: Get) -> Fields:
    """The vocabulary and its padding multiple (--make-vocab-size-divisible-by, read as Layout.vocab_multiple; not
    given: Megatron-LM's default, which the plan applies; Megatron-LM refuses 0 or below, megatron_run checks it)."""
    get("tokenizer_type")
    get("mock_data")
    multiple = optional_int(get("make_vocab_size_divisible_by"), "make_vocab_size_divisible_by") \
        if get.given("make_vocab_size_divisible_by") else None
    return {"model.vocab_size": optional_int(get("vocab_size"), "vocab_size"), "layout.vocab_multiple": multiple}


def _enc_mtp(f: Fields) -> Args:
    return {"mtp_num_layers": f["model.mtp_layers"]} if f.get("run.mtp") and f.get("model.mtp_layers") else {}


def _dec_mtp(get: Get) -> Fields:
    n = optional_int(get("mtp_num_layers"), "mtp_num_layers") or 0
    return {"model.mtp_layers": n, "run.mtp": n > 0}


MODEL_ROWS: tuple[Row, ...] = (
    same("model.num_layers", "num_layers"),
    same("model.hidden_size", "hidden_size"),
    Row("heads", _enc_heads, _dec_heads),
    Row("mla", _enc_mla, _dec_mla),
    Row("ffn and experts", _enc_ffn, _dec_ffn),
    Row("router", _enc_router, _dec_router),
    Row("window", _enc_window, _dec_window),
    Row("vocabulary", _enc_vocab, _dec_vocab),
    Row("positions", _enc_positions, _dec_positions),
    choice("model.norm", "normalization", {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}),
    Row("mlp activation", _enc_mlp, _dec_mlp),
    Row("position embedding", _enc_rope, _dec_rope),
    Row("qk norms", _enc_qk_norm, _dec_qk_norm),
    Row("nope layers", _enc_no_rope, _dec_no_rope),
    Row("rotary pairs", _enc_rotary_pairs, _dec_rotary_pairs),
    Row("numerics", _enc_numerics, _dec_numerics),
    Row("zero-centred norm", lambda f: {"layernorm_zero_centered_gamma": True} if f.get("model.norm_zero_centered") else {},
        lambda get: {"model.norm_zero_centered": truth(get("layernorm_zero_centered_gamma"))}),
    switch("model.tied_embeddings", "untie_embeddings_and_output_weights", invert=True),
    Row("softmax dtype", lambda f: {"attention_softmax_in_fp32": True} if f.get("model.softmax_fp32") else {},
        _dec_softmax_fp32),
    choice("model.attention_sinks", "softmax_type", {False: "vanilla", True: "learnable"}, say_default=False),
    Row("biases", _enc_bias, _dec_bias),
    Row("dropout", _enc_dropout, _dec_dropout),
    Row("mtp", _enc_mtp, _dec_mtp),
    BALANCING_ROW,
)


def model_fields(spec: "ModelSpec") -> Fields:
    """The architecture fields of a ModelSpec (the `model.*` fields the MODEL_ROWS read)."""
    moe = spec.is_moe
    dense = spec.dense_positions() if moe else set()
    window = spec.window_positions()
    return {
        "model.num_layers": spec.num_layers, "model.hidden_size": spec.hidden_size,
        "model.num_heads": spec.num_heads, "model.num_kv_heads": spec.num_kv_heads, "model.head_dim": spec.head_dim,
        "model.vocab_size": spec.vocab_size,
        "model.dense_ffn": (spec.dense_ffn_size or spec.ffn_size) if moe else spec.ffn_size,
        "model.moe_ffn": spec.ffn_size if moe else None, "model.num_experts": spec.num_experts,
        "model.top_k": spec.top_k, "model.router": spec.router, "model.router_renormalize": spec.router_renormalize,
        "model.router_bias": spec.router_bias, "model.expert_bias": spec.expert_bias,
        "model.shared_expert_size": spec.shared_expert_size, "model.shared_expert_gate": spec.shared_expert_gate,
        "model.moe_pattern": [0 if i in dense else 1 for i in range(spec.num_layers)] if dense else None,
        "model.mla": spec.mla.model_dump() if spec.mla else None,
        "model.sliding_window": spec.sliding_window,
        "model.window_pattern": ([1 if i in window else 0 for i in range(spec.num_layers)]
                                 if spec.sliding_window else None),
        "model.norm": spec.norm, "model.mlp": spec.mlp, "model.glu_activation": spec.glu_activation,
        "model.mlp_activation": spec.mlp_activation, "model.norm_zero_centered": spec.norm_zero_centered,
        "model.position_embedding": spec.position_embedding,
        "model.qk_norm_head": spec.qk_norm == "head", "model.qk_norm_l2": spec.qk_norm == "l2",
        "model.no_rope_interval": spec.no_rope_interval, "model.router_probs_on_input": spec.router_probs_on_input,
        "model.rotary_interleaved": spec.rotary_interleaved,
        "model.tied_embeddings": spec.tied_embeddings,
        "model.softmax_fp32": spec.softmax_fp32, "model.attention_sinks": spec.attention_sinks,
        "model.linear_bias": spec.linear_bias, "model.mlp_bias": spec.mlp_bias, "model.qkv_bias": spec.qkv_bias,
        "model.attention_dropout": spec.attention_dropout, "model.hidden_dropout": spec.hidden_dropout,
        "model.max_position_embeddings": spec.max_position_embeddings,
        "model.mtp_layers": spec.mtp_layers, "model.yarn": spec.yarn.model_dump() if spec.yarn else None,
        "model.router_groups": spec.router_groups, "model.router_group_topk": spec.router_group_topk,
        "model.router_scale": spec.router_scale, "model.router_score_bias": spec.router_score_bias,
        "model.aux_loss_coeff": spec.aux_loss_coeff, "model.load_balancing": spec.load_balancing,
        # a source that states no Llama 3 RoPE scaling: none, as the launch trains it (1.0)
        # llama4: Scout's high_freq_factor has no Megatron flag (the launch's comments say so): not a field
        "model.numerics": {**spec.numerics.model_dump(exclude={"source", "rope_scaling_high_freq_factor"}),
                           "rope_scaling_factor": spec.numerics.rope_scaling_factor or 1.0},
    }
