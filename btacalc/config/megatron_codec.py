"""btacalc's resolved run <-> Megatron-LM arguments <-> Megatron-Bridge config keys, as one table.

A run is a flat dict of *fields* (`model.hidden_size`, `layout.tensor_parallel`, `batch.micro_batch`, ...:
what btacalc resolved). Each row of `ROWS` turns some fields into Megatron argparse destinations
(`encode`) and back (`decode`); `render_flags` writes destinations as Megatron-LM flags (names from
btacalc/data/megatron_flags.tsv, MEGATRON_LM_PIN); bridge_codec's `BRIDGE_KEYS` names the same destinations as
Megatron-Bridge's ConfigContainer keys (BRIDGE_PIN) and reads Bridge overrides back into them. A new execution field is one new row: e.g.
`Same("layout.first_stage_layers", "decoder_first_pipeline_num_layers")`.

A destination absent from a launch takes Megatron's own default (the parser's, from the flags table):
a script without --untie-embeddings-and-output-weights trains tied embeddings, one without
--hidden-dropout trains with dropout 0.1, as Megatron would.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from pydantic import ValidationError

from ..errors import BtacalcError
from ..vocabulary import FEATURES, OP_POLICY, SELECTIVE_MODULES
from .attention_kernels import DEFAULT_ATTENTION_KERNEL
from .cuda_graphs import GRAPH_IMPL
from .pipeline import parse_layout
from .model import GPT_OSS_GLU_CLAMP, GPT_OSS_GLU_OFFSET, MEGATRON_LINEAR_BIASES, Numerics
from .megatron_rules import ATTENTION_SWITCHES, BACKEND_SWITCHES
from .megatron_launch import (ArgumentValueError, flags_by_dest, integer, list_expression, pattern, real,
                              refuse_bridge_text)

if TYPE_CHECKING:
    from .model import ModelSpec

BRIDGE_PIN = "NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a"

Fields = dict[str, Any]
Args = dict[str, Any]


def megatron_default(dest: str) -> Any:
    """The parser's default of a destination (None when it is not a literal)."""
    flags = flags_by_dest().get(dest)
    if not flags:
        return None
    try:
        return ast.literal_eval(flags[0].default)
    except (ValueError, SyntaxError):
        return None


class Get:
    """Reads destinations with Megatron's defaults, remembering which ones were read."""

    def __init__(self, args: Args):
        self.args, self.read = args, set[str]()

    def __call__(self, dest: str) -> Any:
        self.read.add(dest)
        return self.args[dest] if dest in self.args else megatron_default(dest)

    def given(self, dest: str) -> bool:
        self.read.add(dest)
        return dest in self.args


def _int(v: Any, dest: str) -> Optional[int]:
    return None if v is None else integer(v, dest)


def truth(v: Any) -> bool:
    """A switch's value as Megatron-LM or a Bridge file gives it (a Bridge string "true"/"1"/"yes"; bridge_codec
    reads its keys with it too)."""
    refuse_bridge_text(v, "true or false")
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes")
    return bool(v)


@dataclass(frozen=True)
class Row:
    """One concept: the fields it covers, the destinations it writes, and both directions."""

    name: str
    encode: Callable[[Fields], Args]
    decode: Callable[[Get], Fields]


def same(field: str, dest: str, kind: Callable[[Any], Any] = int, skip: Any = None) -> Row:
    """A field that is one destination, value for value (omitted when it equals `skip`)."""
    def enc(f: Fields) -> Args:
        v = f.get(field)
        return {} if v is None or v == skip else {dest: v}

    def dec(get: Get) -> Fields:
        v = get(dest)
        return {field: None if v is None else (_int(v, dest) if kind is int else kind(v))}

    return Row(field, enc, dec)


def switch(field: str, dest: str, invert: bool = False) -> Row:
    """A boolean field that is a Megatron switch (inverted: the switch means the opposite)."""
    def enc(f: Fields) -> Args:
        v = f.get(field)
        return {} if v is None else {dest: (not v) if invert else bool(v)}

    def dec(get: Get) -> Fields:
        v = truth(get(dest))
        return {field: (not v) if invert else v}

    return Row(field, enc, dec)


def choice(field: str, dest: str, mapping: Mapping[Any, Any], say_default: bool = True) -> Row:
    """A field whose values are Megatron's choices under other names (`say_default` False: Megatron's default
    is left unsaid)."""
    back = {str(v).lower(): k for k, v in mapping.items()}

    def enc(f: Fields) -> Args:
        v = f.get(field)
        quiet = v is not None and not say_default and mapping[v] == megatron_default(dest)
        return {} if v is None or quiet else {dest: mapping[v]}

    def dec(get: Get) -> Fields:
        v = get(dest)
        key = str(v).lower() if v is not None else None
        if key not in back:
            raise BtacalcError(f"Megatron {dest} {v!r}: btacalc models {', '.join(map(str, mapping.values()))}")
        return {field: back[key]}

    return Row(field, enc, dec)


# --- the rows that are not one destination each -------------------------------------------------------

def _enc_heads(f: Fields) -> Args:
    a, kv = f["model.num_heads"], f["model.num_kv_heads"]
    out: Args = {"num_attention_heads": a}
    if kv != a:
        out.update(group_query_attention=True, num_query_groups=kv)
    if f.get("model.mla") is None and f["model.head_dim"] != f["model.hidden_size"] // a:
        out["kv_channels"] = f["model.head_dim"]
    return out


def _dec_heads(get: Get) -> Fields:
    a = _int(get("num_attention_heads"), "num_attention_heads")
    h = _int(get("hidden_size"), "hidden_size")
    if a is None or h is None:
        raise BtacalcError("the launch gives no --num-attention-heads or --hidden-size: btacalc needs the model")
    gqa = truth(get("group_query_attention"))
    kv = _int(get("num_query_groups"), "num_query_groups") if gqa else None
    kv_channels = _int(get("kv_channels"), "kv_channels")
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
    mla = {"q_lora_rank": _int(get("q_lora_rank"), "q_lora_rank") or 0}
    for key, dest in (("kv_lora_rank", "kv_lora_rank"), ("qk_nope_head_dim", "qk_head_dim"),
                      ("qk_rope_head_dim", "qk_pos_emb_head_dim"), ("v_head_dim", "v_head_dim")):
        mla[key] = _int(get(dest), dest) or 0  # Megatron's defaults are numbers (32, 128, 64, 128)
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
    h = _int(get("hidden_size"), "hidden_size") or 0
    dense = _int(get("ffn_hidden_size"), "ffn_hidden_size") or 4 * h  # TransformerConfig: None -> 4h
    experts = _int(get("num_experts"), "num_experts") or 0
    out: Fields = {"model.dense_ffn": dense, "model.num_experts": experts, "model.moe_pattern": None}
    if not experts:
        for dest in ("moe_router_topk", "moe_ffn_hidden_size", "moe_layer_freq", "moe_shared_expert_intermediate_size"):
            get(dest)
        out.update({"model.top_k": 0, "model.moe_ffn": None, "model.shared_expert_size": 0})
        return out
    layers = _int(get("num_layers"), "num_layers") or 0
    freq = get("moe_layer_freq")
    items = pattern(freq, layers)
    if len(items) == 1:  # integer N: Megatron-Core makes layer i an MoE layer when i % N == 0
        if items[0] == 0:  # hostile22: "the inputs take a number beyond the arithmetic's range (ZeroDivisionError ...)"
            raise ArgumentValueError("moe_layer_freq", "an N of at least 1 (layer i is an MoE layer when i % N == 0, "
                                     "megatron/core/models/gpt/gpt_layer_specs.py L649 @ d98e8a64) or a list such as "
                                     "([0]*3+[1]*58)", "0")
        items = [1 if i % items[0] == 0 else 0 for i in range(layers)]
    out.update({"model.top_k": _int(get("moe_router_topk"), "moe_router_topk"),
                "model.moe_ffn": _int(get("moe_ffn_hidden_size"), "moe_ffn_hidden_size") or dense,
                "model.shared_expert_size": _int(get("moe_shared_expert_intermediate_size"), "moe_shared_expert_intermediate_size") or 0,
                "model.moe_pattern": None if all(items) else items})
    return out


# semantics19: btacalc's sliding window w is the keys a query attends to, itself included (ModelSpec.sliding_window;
# Hugging Face's sliding_window), and TransformerEngine's window_size (left, right) the keys [i - left, i + right]
# *inclusive* (TransformerEngine @ d0067d0 pytorch/attention/dot_product_attention/utils.py L1780-1782), so w keys
# are (w - 1, 0), as Megatron-Bridge converts them (BRIDGE_PIN src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py
# L87, gemma/gemma2_bridge.py L55; conversion/utils.py L27-39 back: left + 1). The codec wrote (w, 0): w + 1 keys.
# A left of -1 is TransformerEngine's "no window" (utils.py L1808).


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
    layers = _int(get("num_layers"), "num_layers") or 0
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
    groups = _int(get("moe_router_num_groups"), "moe_router_num_groups")
    chosen = _int(get("moe_router_group_topk"), "moe_router_group_topk")
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
    return {"model.router": router, "model.router_renormalize": not (pre and score != "sigmoid"),
            "model.shared_expert_gate": truth(get("moe_shared_expert_gate")), **_dec_routing(get)}


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
    moe = linear and (_int(get("num_experts"), "num_experts") or 0) > 0
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
    return {"qk_layernorm": True} if f.get("model.qk_norm_head") or f.get("model.mla") is not None else {}


def _dec_qk_norm(get: Get) -> Fields:
    on = truth(get("qk_layernorm"))
    if not truth(get("multi_latent_attention")):
        return {"model.qk_norm_head": on}
    return {"model.qk_norm_head": False, **({} if on else {"run.mla_norm_note": MLA_NORMS_NOTE})}


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


def _enc_dropout(f: Fields) -> Args:
    p = 0.1 if f.get("model.dropout") else 0.0
    return {"attention_dropout": p, "hidden_dropout": p}


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
    return {"model.dropout": attention > 0 or hidden > 0, **nan}


# hostile24: an attention dropout of nan (review22's leftover: planned as no dropout, "nn.Dropout takes nan"), by the
# attention btacalc plans for the launch (_attention_backend). Unfused: Megatron-Core's DotProductAttention builds
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
NAN_AUTO_NOTE = (", and --attention-backend auto is TE's choice: fused attention from sm90 (utils.py L1647-1653), "
                 "flash-attn below, where the run stops (flash_api.cpp L150 @ 0251105a)")


def _nan_attention_dropout(get: Get) -> Fields:
    """An attention dropout of nan: refused where the attention btacalc plans stops on it, else a note
    (NAN_ATTENTION_DROPOUT)."""
    backend = _attention_backend(get)
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
            else _int(given["yarn_original_max_position_embeddings"], "yarn_original_max_position_embeddings"),
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
# read leaves unset unless the preset of the run's shape states a value (megatron_run._implied_numerics), so a launch
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
    seq = _int(get("seq_length"), "seq_length")
    if seq is None:
        raise BtacalcError("the launch gives no --seq-length")
    return {"run.seq_len": seq, "model.max_position_embeddings": _int(get("max_position_embeddings"), "max_position_embeddings")}


# review36: a launch runs only with a run length and a learning rate (Megatron-LM @ d98e8a64 training.py L2586 'either
# train-iters or train-samples should be provided'; optimizer_param_scheduler.py L148 float(max_lr)); btacalc plans one
# step, so the emitted launch gives a short benchmark run the output's notes call placeholders
PLACEHOLDER_RUN = {"train_iters": 100, "lr": 1.0e-4}


def _enc_vocab(f: Fields) -> Args:
    return {"vocab_size": f["model.vocab_size"], "tokenizer_type": "NullTokenizer", "mock_data": True, **PLACEHOLDER_RUN}


def _dec_vocab(get: Get) -> Fields:
    get("tokenizer_type")
    get("mock_data")
    return {"model.vocab_size": _int(get("vocab_size"), "vocab_size")}


def _enc_recompute(f: Fields) -> Args:
    policy = f["run.recompute"]
    if policy == "none":
        return {}
    if policy == "full" and f.get("run.recompute_layers", 0):  # the first N layers (RunOptions.recompute_layers)
        return {"recompute_granularity": "full", "recompute_method": "block",
                "recompute_num_layers": f["run.recompute_layers"]}
    if policy == "full":
        return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    if policy == OP_POLICY:  # (the emit refuses it first: cli/plan.py _NOT_MEGATRON)
        raise BtacalcError("{recompute} op is torchtitan's per-op activation checkpoint: Megatron has no such policy")
    modules = list(SELECTIVE_MODULES) if policy == "selective" else policy.split(",")
    return {"recompute_granularity": "selective", "recompute_modules": modules}


# The selective recompute modules Megatron-Core accepts (transformer_config.py L1945-1957 @ d98e8a64); those btacalc
# does not model (the gated-delta-net and mHC modules) are refused later as modules it does not know
MEGATRON_RECOMPUTE_MODULES = frozenset({"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                                        "shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"})


def _dec_recompute(get: Get) -> Fields:
    granularity = get("recompute_granularity")
    if truth(get("recompute_activations")):
        # review30: Megatron-LM sets the granularity to selective whatever --recompute-granularity says (arguments.py
        # L606-607 @ d98e8a64); btacalc kept a given full
        granularity = "selective"
    if granularity is None:
        # no recomputation: Megatron-Core reads --recompute-method / -num-layers / -modules only under a
        # granularity (transformer_config.py L1900-1932), so they stay unread and are listed (megatron_run.IGNORED)
        return {"run.recompute": "none"}
    method, layers, modules = get("recompute_method"), get("recompute_num_layers"), get("recompute_modules")
    if granularity == "full":
        count = _int(layers, "recompute_num_layers")
        if method is None or count is None:
            # review30: Megatron-Core refuses a full granularity without a method (transformer_config.py L1908-1917 @
            # d98e8a64) or without a layer count (L1919-1924)
            missing = " and ".join(f for f, v in (("--recompute-method", method), ("--recompute-num-layers", count))
                                   if v is None)
            raise BtacalcError(f"--recompute-granularity full without {missing}: Megatron-Core refuses it "
                               "(transformer_config.py L1908-1924 @ d98e8a64); give --recompute-method uniform "
                               "--recompute-num-layers 1 (every layer) or block N (the first N)")
        if method == "block" and count >= 1:
            # Megatron-Core's block method: the first N layers of each pipeline stage's model chunk are checkpointed,
            # the rest keep their activations (recompute.py L167-180 @ d98e8a64; RunOptions.recompute_layers,
            # Problem.stored_layers)
            return {"run.recompute": "full", "run.recompute_layers": count}
        if method != "uniform" or count != 1:
            raise BtacalcError(f"--recompute-method {method} --recompute-num-layers {layers}: btacalc models full "
                               "recomputation of every layer (uniform, 1 layer per checkpoint) or of each chunk's "
                               "first N (block, N >= 1)")
        return {"run.recompute": "full"}
    if granularity != "selective":
        raise BtacalcError(f"--recompute-granularity {granularity!r}: Megatron takes full or selective")
    if method is not None or layers is not None:
        # review30: Megatron-LM asserts no method under selective (arguments.py L1424-1427; --recompute-activations
        # makes it selective), Megatron-Core no layer count (transformer_config.py L1926-1932); both were dropped
        given = " ".join(f"--recompute-{k} {v}" for k, v in (("method", method), ("num-layers", layers)) if v is not None)
        raise BtacalcError(f"{given} with selective recomputation (--recompute-granularity selective or "
                           "--recompute-activations): Megatron refuses a method or a layer count there "
                           "(arguments.py L1424-1427, transformer_config.py L1926-1932 @ d98e8a64)")
    chosen = list(modules) if modules else list(SELECTIVE_MODULES)
    invalid = sorted(set(chosen) - MEGATRON_RECOMPUTE_MODULES)
    if invalid:
        # review34: `op` (btacalc's torchtitan policy) was refused with the torchtitan wording; Megatron-Core refuses
        # it as a module it does not know
        raise BtacalcError(f"--recompute-modules {' '.join(invalid)}: Megatron-Core refuses modules outside "
                           f"{', '.join(sorted(MEGATRON_RECOMPUTE_MODULES))} (transformer_config.py L1943-1962 @ "
                           "d98e8a64)")
    return {"run.recompute": ",".join(sorted(chosen)) if sorted(chosen) != list(SELECTIVE_MODULES) else "selective"}


def _enc_sharding(f: Fields) -> Args:
    zero = f.get("layout.zero_stage", 0)
    if zero == 1:
        return {"use_distributed_optimizer": True}
    if zero >= 2:
        return {"use_megatron_fsdp": True, "ckpt_format": "fsdp_dtensor",
                "data_parallel_sharding_strategy": "optim_grads" if zero == 2 else "optim_grads_params"}
    return {}


def _dec_sharding(get: Get) -> Fields:
    get("ckpt_format")
    if truth(get("use_torch_fsdp2")):  # review25: listed as not modelled, the launch was planned as Megatron DDP
        raise BtacalcError("--use-torch-fsdp2 (Megatron-Bridge's dist.use_torch_fsdp2: Megatron-LM's wrapper of "
                           "PyTorch FSDP2 around its own layers) is not "
                           "modelled, and planning it as data parallel without it would count the whole model on every "
                           "GPU: btacalc plans Megatron-FSDP (--use-megatron-fsdp) and PyTorch FSDP2 as torchtitan "
                           "runs it (btacalc plan --fsdp --fsdp-impl fsdp2)")
    if truth(get("use_megatron_fsdp")):
        strategy = get("data_parallel_sharding_strategy")
        stages = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
        if strategy not in stages:
            raise BtacalcError(f"--data-parallel-sharding-strategy {strategy!r}: not one of {', '.join(stages)}")
        get("use_distributed_optimizer")  # Megatron-FSDP v1 turns it on itself (arguments.py:1127-1135)
        return {"layout.zero_stage": stages[strategy], "layout.fsdp": stages[strategy] == 3}
    get("data_parallel_sharding_strategy")
    return {"layout.zero_stage": 1 if truth(get("use_distributed_optimizer")) else 0, "layout.fsdp": False}


def _enc_precision(f: Fields) -> Args:
    """--bf16 (gradients reduced in fp32 unless --grad-reduce-in-bf16) or --fp16, whose gradients Megatron-LM reduces
    in fp16 unless --accumulate-allreduce-grads-in-fp32: only --bf16 turns that on (MEGATRON_LM_PIN
    megatron/training/arguments.py L1195-1217; training.py L2635 grad_reduce_in_fp32 =
    accumulate_allreduce_grads_in_fp32). hostile16: --precision fp16 was an internal error (KeyError) here."""
    if f.get("run.precision") == "fp16":
        return {"fp16": True} if f.get("run.gradient_bytes") == 2 else \
            {"fp16": True, "accumulate_allreduce_grads_in_fp32": True}
    out: Args = {"bf16": True}
    if f.get("run.gradient_bytes") == 2:
        out["grad_reduce_in_bf16"] = True
    return out


def _dec_precision(get: Get) -> Fields:
    bf16, fp16 = truth(get("bf16")), truth(get("fp16"))
    if not (bf16 or fp16):
        raise BtacalcError("the launch trains in fp32 (no --bf16 or --fp16): btacalc models 16-bit training")
    if bf16 and fp16:  # Megatron-LM asserts one of them (arguments.py L1195-1206)
        raise BtacalcError("--bf16 and --fp16 together: Megatron-LM refuses both (arguments.py L1196, L1205); give one")
    if fp16:  # --grad-reduce-in-bf16 not read: listed ignored, with megatron_run.IGNORED's reason (hostile17)
        return {"run.gradient_bytes": 4 if truth(get("accumulate_allreduce_grads_in_fp32")) else 2}
    # --bf16 turns accumulate_allreduce_grads_in_fp32 on itself unless --grad-reduce-in-bf16, or (review28) the
    # precision-aware optimizer's --main-grads-dtype bf16, which Megatron-LM asserts against the flag given
    # (arguments.py L1209-1216): then the gradient buffers are bf16 (training.py L2635 grad_reduce_in_fp32)
    grads = str(get("main_grads_dtype") or "fp32")
    accumulate = truth(get("accumulate_allreduce_grads_in_fp32"))
    if accumulate and grads != "fp32":
        raise BtacalcError(f"--main-grads-dtype {grads} with --accumulate-allreduce-grads-in-fp32: Megatron-LM asserts "
                           "fp32 main gradients there (arguments.py L1209-1211 @ d98e8a64); give one")
    if grads not in ("fp32", "bf16"):
        raise BtacalcError(f"--main-grads-dtype {grads}: Megatron-LM takes fp32 or bf16 (arguments.py L3671)")
    low = truth(get("grad_reduce_in_bf16")) or (grads == "bf16" and not accumulate)
    return {"run.gradient_bytes": 2 if low else 4}


def _enc_pipeline(f: Fields) -> Args:
    out: Args = {"pipeline_model_parallel_size": f["layout.pipeline_parallel"]}
    vp = f.get("layout.virtual_pipeline", 1)
    if vp > 1 and f.get("layout.pipeline_layout") is None:  # a layout sets VP: Megatron refuses both
        out["num_virtual_stages_per_pipeline_rank"] = vp
    if vp > 1 and not f.get("overlap.p2p", True):
        out["overlap_p2p_comm"] = False
    if vp > 1 and f.get("layout.microbatch_group") is not None:
        out["microbatch_group_size_per_vp_stage"] = f["layout.microbatch_group"]
    split = f.get("layout.pipeline_split")  # btacalc.config.pipeline Placement.method
    if split in ("embedding_loss", "embedding"):
        out["account_for_embedding_in_pipeline_split"] = True
    if split in ("embedding_loss", "loss"):
        out["account_for_loss_in_pipeline_split"] = True
    return out


def _dec_pipeline(get: Get) -> Fields:
    pp = _int(get("pipeline_model_parallel_size"), "pipeline_model_parallel_size") or 1
    vp = _int(get("num_virtual_stages_per_pipeline_rank"), "num_virtual_stages_per_pipeline_rank")
    per_stage = _int(get("num_layers_per_virtual_pipeline_stage"), "num_layers_per_virtual_pipeline_stage")
    if per_stage and not vp:  # arguments.py L953-975: VP = ((L + account-for flags) / PP) / layers per virtual stage
        layers = ((_int(get("num_layers"), "num_layers") or 0) + truth(get("account_for_embedding_in_pipeline_split"))
                  + truth(get("account_for_loss_in_pipeline_split")))
        vp = layers // pp // per_stage
    layout = get("pipeline_model_parallel_layout")
    if layout is not None and not vp and not per_stage:
        # a layout sets VP: its model chunks / PP (MEGATRON_LM_PIN megatron/training/arguments.py L941-950); chunks
        # that PP does not divide are left to the placement's check, which names both
        chunks = len(parse_layout(str(layout)))
        vp = chunks // pp if chunks % pp == 0 else None
    embedding, loss = (truth(get("account_for_embedding_in_pipeline_split")),
                       truth(get("account_for_loss_in_pipeline_split")))
    vp = vp or 1
    split = {(True, True): "embedding_loss", (True, False): "embedding", (False, True): "loss"}.get((embedding, loss),
                                                                                                  "even")
    # hostile28: the group is read with virtual stages only (Megatron's other schedules do not use it); without
    # them a launch's value is left unread, so listed as ignored, not planned as a setting that changes nothing
    group = _int(get("microbatch_group_size_per_vp_stage"), "microbatch_group_size_per_vp_stage") if vp > 1 else None
    return {"layout.pipeline_parallel": pp, "layout.virtual_pipeline": vp,
            "layout.pipeline_split": split, "layout.microbatch_group": group,
            "overlap.p2p": truth(get("overlap_p2p_comm")) and vp > 1}


def _enc_sp(f: Fields) -> Args:
    return {"sequence_parallel": True} if f.get("layout.sequence_parallel") else {}


def _dec_sp(get: Get) -> Fields:
    """Megatron switches sequence parallelism off with TP = 1 (arguments.py:1430-1431)."""
    tp = _int(get("tensor_model_parallel_size"), "tensor_model_parallel_size") or 1
    return {"layout.sequence_parallel": truth(get("sequence_parallel")) and tp > 1}


def _enc_dispatcher(f: Fields) -> Args:
    """The dispatcher btacalc timed, always stated for an MoE model: Megatron's default is allgather
    (transformer_config.py L891 @ d98e8a64), which btacalc times only with `layout.allgather_dispatcher`; otherwise
    the alltoall dispatcher (model/gpu/collectives.py), also at EP 1, where the two dispatchers differ in what the
    expert-tensor-parallel group exchanges. DeepEP (`layout.deepep`) is the flex dispatcher with its deepep backend
    (transformer_config.py L891-900: moe_enable_deepep is deprecated for --moe-flex-dispatcher-backend deepep,
    L1743-1753) and its SMs --moe-flex-dispatcher-num-sms (L964)."""
    if not f.get("model.num_experts"):
        return {}
    if f.get("layout.allgather_dispatcher"):
        return {"moe_token_dispatcher_type": "allgather"}
    if not f.get("layout.deepep"):
        return {"moe_token_dispatcher_type": "alltoall"}
    out: Args = {"moe_token_dispatcher_type": "flex",
                 "moe_flex_dispatcher_backend": "hybridep" if f.get("layout.hybridep") else "deepep"}
    if f.get("layout.dispatcher_sms") is not None:
        out["moe_flex_dispatcher_num_sms"] = f["layout.dispatcher_sms"]
    return out


def _dec_dispatcher(get: Get) -> Fields:
    """Megatron's dispatcher, its default (allgather) when the launch names none: the allgather dispatcher
    (`layout.allgather_dispatcher`), the alltoall one, or the flex dispatcher with the deepep or hybridep backend
    (or the deprecated --moe-enable-deepep), which sends one copy of a token per destination rank, as btacalc's
    DeepEP dispatch times it; its SMs come from --moe-flex-dispatcher-num-sms or the deprecated
    --moe-deepep-num-sms / --moe-hybridep-num-sms (transformer_config.py L964-975, routed to it in __post_init__).
    A dense model reads none of them."""
    kind = get("moe_token_dispatcher_type")
    if kind == "allgather":  # --num-experts 0 is a dense model (arguments.py L1648-1649 @ d98e8a64 sets it None)
        return {"layout.allgather_dispatcher": True} if _int(get("num_experts"), "num_experts") else {}
    if kind != "flex":
        return {}
    backend = "deepep" if truth(get("moe_enable_deepep")) else get("moe_flex_dispatcher_backend")
    if backend not in ("deepep", "hybridep"):
        return {"run.dispatcher_note": f"--moe-flex-dispatcher-backend {backend}: btacalc times an all-to-all"}
    sms = next((_int(get(d), d) for d in ("moe_flex_dispatcher_num_sms", "moe_deepep_num_sms", "moe_hybridep_num_sms")
                if get(d) is not None), None)
    return {"layout.deepep": True, "layout.hybridep": backend == "hybridep", "layout.dispatcher_sms": sms}


def _enc_cuda_graphs(f: Fields) -> Args:
    """Per-layer CUDA graphs (config/cuda_graphs.py): the TransformerEngine implementation with the scopes.
    Megatron-LM @ d98e8a64 (btacalc's flag table) names them --cuda-graph-modules (arguments.py L2050-2064;
    --cuda-graph-scope, the name of the 25.x/26.0x releases (554ce493 L1529), is its hidden deprecated alias,
    L2047-2049, moved to it in validate_args L633-641)."""
    scope = f.get("layout.cuda_graph_scope") or ()
    if not scope:
        return {}
    return {"cuda_graph_impl": GRAPH_IMPL, "cuda_graph_modules": list(scope)}


def _dec_cuda_graphs(get: Get) -> Fields:
    """--cuda-graph-impl transformer_engine with its scopes (--cuda-graph-modules or the deprecated
    --cuda-graph-scope); a whole-layer graph (no scope, or "full") and the local / full-iteration graphs are
    not expressed: planned without graphs, with a note."""
    impl = get("cuda_graph_impl")
    if impl in (None, "none"):
        return {}
    scope = get("cuda_graph_modules") or get("cuda_graph_scope_deprecated") or []
    scope = [scope] if isinstance(scope, str) else [str(s) for s in scope]
    if impl != GRAPH_IMPL or not scope or "full" in scope:
        return {"run.cuda_graph_note": f"--cuda-graph-impl {impl} {' '.join(scope) or '(whole layer)'}: btacalc "
                                       "models per-layer scopes only (attn, mlp, moe_router, moe_preprocess); "
                                       "planned without CUDA graphs"}
    return {"layout.cuda_graph_scope": tuple(scope)}


# The attention kernels (btacalc/data/attention_kernels.toml) that Megatron's --attention-backend flash runs: the
# flash-attn package through TransformerEngine. Every other fused kernel btacalc times is cuDNN's (TE's
# FusedAttention: `default`, `cudnn-9-13`), which is --attention-backend fused; `flash` sets NVTE_FUSED_ATTN=0
# (Megatron-LM @ d98e8a64 language_module.py L133-136) and so ran the flash-attn package where btacalc timed cuDNN,
# and found no backend at all for a learnable softmax (GPT-OSS's sinks: TransformerEngine @ d0067d0
# attention/dot_product_attention/utils.py L1114-1124 disables FlashAttention for it). Megatron's default `auto`
# would pick cuDNN too on Hopper and later (utils.py L1647-1653); on Ampere FlashAttention-2 (below).
FLASH_BACKEND_KERNELS = frozenset({"flash-attn-2"})
# semantics20: below compute capability 9.0 (A100) btacalc's default kernel is FlashAttention-2, not cuDNN:
# attention_kernels.toml times `default` on sm80 at FlashAttention-2's own A100 figure (Dao 2023, Figure 4; a100attn),
# because Megatron-LM's default --attention-backend auto takes FlashAttention-2 there (TE @ d0067d0 utils.py
# L1647-1653 prefer FusedAttention only from sm90; the profile's attention note), and it is the only fused backend TE keeps under --deterministic-mode there (utils.py L1555-1567
# turn FusedAttention's F16 backend off for training below sm90): `fused` left a deterministic A100 launch no backend.
# A learnable softmax (GPT-OSS's sinks) has no FlashAttention (utils.py L1122-1124): fused, as before.
FLASH_BELOW_CAPABILITY = 9.0


# TransformerEngine's backend switches as Megatron-Core sets them for each AttnBackend (megatron_rules.BACKEND_SWITCHES,
# language_module.py L129-145 @ d98e8a64). `local` (all three off there) is left out: no environment makes a Bridge run
# local (BRIDGE_LOCAL_ATTENTION), and `auto` (all three on) is TE's own choice
ATTENTION_BACKEND_ENVIRONMENT = {name: BACKEND_SWITCHES[name] for name in ("flash", "fused", "unfused")}


# review22: what a Bridge override's model.attention_backend=local runs. The string matches neither GPTModelProvider's
# check that swaps in Megatron-Core's DotProductAttention (gpt_provider.py L278-280 @ 067f987df: == AttnBackend.local)
# nor _set_attention_backend's, so the layers keep TransformerEngine's attention and TE picks its kernel; no environment
# changes that (all three NVTE_* switches off leave TE no kernel at all). The lead's note advised those three switches.
BRIDGE_LOCAL_ATTENTION = ("{key}=local: a Hydra override sets the string 'local', which neither Megatron-Bridge's "
                          "GPTModelProvider (gpt_provider.py L278-280: DotProductAttention only for AttnBackend.local) "
                          "nor Megatron-Core (language_module.py L129-145) matches, so the run keeps "
                          "TransformerEngine's attention and TE chooses the kernel, and no NVTE_* environment makes it "
                          "local (all three switches off leave TE none); planned as given (unfused)")


def bridge_attention_environment(args: Args) -> dict[str, str]:
    """The NVTE_* variables that make a Bridge run use the attention backend `args` name: a Hydra override leaves
    model.attention_backend a string (Bridge's omegaconf_utils.py _apply_overrides sets the value as given), which
    Megatron-Core's _set_attention_backend compares with AttnBackend's members only, so it sets no switch and
    TransformerEngine chooses the kernel; `auto` (TE's choice) needs none. `local` has none either (review22): its
    three switches off leave TransformerEngine no kernel, and what makes a Bridge run local is GPTModelProvider's
    DotProductAttention swap (gpt_provider.py L278-280 @ 067f987df), which compares with AttnBackend.local and so is
    not made for the string either (BRIDGE_LOCAL_ATTENTION)."""
    switches = ATTENTION_BACKEND_ENVIRONMENT.get(str(args.get("attention_backend", "auto")))
    if switches is None:
        return {}
    return {name: str(v) for name, v in zip(ATTENTION_SWITCHES, switches)}


def _enc_attention(f: Fields) -> Args:
    """Fused attention as --attention-backend fused (cuDNN, TransformerEngine's FusedAttention: btacalc's default
    kernel from sm90, and the only one TE runs FP8 attention on, TE @ d0067d0 common/recipe/__init__.py L222-227), or
    flash where the plan is timed at the flash-attn package's kernel (FLASH_BACKEND_KERNELS; the default kernel below
    FLASH_BELOW_CAPABILITY)."""
    if f["run.attention"] != "flash":
        return {"attention_backend": "unfused"}
    kernel, cc = f.get("run.attention_kernel"), f.get("run.compute_capability")
    ampere = (kernel == DEFAULT_ATTENTION_KERNEL and cc is not None and 0 < cc < FLASH_BELOW_CAPABILITY
              and not f.get("model.attention_sinks"))
    flash = (kernel in FLASH_BACKEND_KERNELS or ampere) and not f.get("run.fp8_attention")
    return {"attention_backend": "flash" if flash else "fused"}


def _dec_attention(get: Get) -> Fields:
    """Unfused attention (materialised scores) for --attention-backend unfused or local, and for --transformer-impl
    local whatever the backend: its layers are Megatron-Core's own modules, whose core attention is
    DotProductAttention (Megatron-LM @ d98e8a64 gpt_builders.py L35 use_te, L109-149 get_gpt_layer_local_spec
    unless use_te; core/models/backends.py L129-131 LocalSpecProvider.core_attention). memci: the CI's
    gpt3_mcore_tp1_pp{2,4} tests (--transformer-impl local) were planned with fused attention, -27% and -18%."""
    return {"run.attention": "eager" if _attention_backend(get) in ("unfused", "local") else "flash"}


def _attention_backend(get: Get) -> str:
    """The launch's AttnBackend name (auto, flash, fused, unfused, local), local under --transformer-impl local; auto
    where none is given (TransformerConfig.attention_backend's default, transformer_config.py L151 @ d98e8a64)."""
    if str(get("transformer_impl")) == "local":
        return "local"
    backend = get("attention_backend")
    return "auto" if backend is None else str(backend).split(".")[-1].split(":")[0].strip("<> ")


def _enc_loss(f: Fields) -> Args:
    """TransformerEngine's fused cross-entropy (loss te_fused) is Megatron's --cross-entropy-loss-fusion with
    --cross-entropy-fusion-impl te (language_module.py L173-L194), native_fused the flag with the native impl,
    Megatron's default impl (L197); the unfused vocab-parallel cross-entropy is the default without the flag."""
    loss = f.get("run.loss")
    if loss == "te_fused":
        return {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}
    return {"cross_entropy_loss_fusion": True} if loss == "native_fused" else {}


def _dec_loss(get: Get) -> Fields:
    """Unfused and native both keep the fp32 softmax of the logits; native runs the steps compiled, whose backward
    holds a second fp32 copy (native_fused); te fuses in place (te_fused)."""
    impl = str(get("cross_entropy_fusion_impl"))
    if impl not in ("native", "te"):
        raise BtacalcError(f"Megatron cross_entropy_fusion_impl {impl!r}: Megatron-LM's choices are native and te")
    if not truth(get("cross_entropy_loss_fusion")):
        return {"run.loss": "vocab_parallel"}
    return {"run.loss": "te_fused" if impl == "te" else "native_fused"}


def _enc_mtp(f: Fields) -> Args:
    return {"mtp_num_layers": f["model.mtp_layers"]} if f.get("run.mtp") and f.get("model.mtp_layers") else {}


def _dec_mtp(get: Get) -> Fields:
    n = _int(get("mtp_num_layers"), "mtp_num_layers") or 0
    return {"model.mtp_layers": n, "run.mtp": n > 0}


# btacalc's precisions (the precision work's --precision) as Megatron's FP8/FP4 settings, the way Megatron-Bridge's
# mixed-precision recipes set them (BRIDGE_PIN src/megatron/bridge/training/mixed_precision.py:217-414: delayed
# hybrid, current-scaling tensorwise hybrid, subchannel blockwise hybrid, mxfp8 e4m3, nvfp4 e2m1);
# Megatron-Core's recipe names at MEGATRON_LM_PIN megatron/core/enums.py Fp8Recipe.
PRECISIONS: dict[str, dict[str, str]] = {
    "bf16": {},
    "fp8": {"fp8": "hybrid", "fp8_recipe": "delayed"},
    "fp8-current": {"fp8": "hybrid", "fp8_recipe": "tensorwise"},
    "fp8-blockwise": {"fp8": "hybrid", "fp8_recipe": "blockwise"},
    "mxfp8": {"fp8": "e4m3", "fp8_recipe": "mxfp8"},
    "nvfp4": {"fp4": "e2m1", "fp4_recipe": "nvfp4"},
}


FP8_FORMATS = ("e4m3", "hybrid")  # Megatron-Core's TransformerConfig.fp8 (transformer_config.py L587 @ d98e8a64)


def _enc_low_precision(f: Fields) -> Args:
    """The low-precision recipe's Megatron settings (bf16 and fp16 set none: `_enc_precision` says which)."""
    precision = f.get("run.precision") or "bf16"
    return {} if precision == "fp16" else dict(PRECISIONS[precision])


def _dec_low_precision(get: Get) -> Fields:
    fp8, fp4 = get("fp8"), get("fp4")
    fp16 = truth(get("fp16"))
    if fp8 is None and fp4 is None:
        return {"run.precision": "fp16" if fp16 else "bf16"}
    if fp16:  # btacalc's FP8/FP4 recipes run over bf16 (Megatron-Bridge's bf16_with_* recipes): fp16 would be lost
        raise BtacalcError(f"--fp16 with --{'fp8' if fp8 is not None else 'fp4'}-format: btacalc models the low-"
                           "precision recipes over bf16 (give --bf16), or fp16 alone")
    given = {"fp8": fp8, "fp8_recipe": get("fp8_recipe")} if fp8 is not None else \
        {"fp4": fp4, "fp4_recipe": get("fp4_recipe")}
    if fp8 is not None and str(fp8) in FP8_FORMATS:
        # hostile16: the recipe decides; Megatron-Core hands --fp8-format e4m3 or hybrid to every FP8 recipe
        # (MEGATRON_LM_PIN megatron/core/fp8_utils.py L761-787; transformer_config.py L587 Literal['e4m3', 'hybrid']),
        # and btacalc's cost of a recipe does not depend on it: `--fp8-format e4m3 --fp8-recipe tensorwise`, the flags
        # btacalc/data/precision.toml itself gives for fp8-current, was refused because the emitter writes hybrid
        given = {**given, "fp8": "hybrid" if str(given["fp8_recipe"]) != "mxfp8" else "e4m3"}
    name = next((k for k, v in PRECISIONS.items() if v and all(str(given.get(d)) == x for d, x in v.items())), None)
    if name is None:
        raise BtacalcError(f"low precision {given}: btacalc models {', '.join(PRECISIONS)} "
                           "(Megatron-Bridge's recipes)")
    if str(get("transformer_impl")) == "local":
        flag = "--fp8-format" if fp8 is not None else "--fp4-format"
        return {"run.precision": "bf16", "run.precision_note": LOCAL_LOW_PRECISION_NOTE.format(flag=flag, name=name)}
    return {"run.precision": name}


# hostile24: --transformer-impl local builds Megatron-Core's own ColumnParallelLinear / RowParallelLinear
# (LocalSpecProvider, core/models/backends.py L102-108 @ d98e8a64, experts too: L136-140), which multiply in the 16-bit
# weights' dtype
# (tensor_parallel/layers.py has no FP8 or FP4 path); the low-precision recipe reaches TransformerEngine's modules
# only (its fp8_autocast), and the local layers have none. btacalc planned the recipe's GEMMs (FP8 rates and bytes).
LOCAL_LOW_PRECISION_NOTE = ("{flag} ({name}) with --transformer-impl local: the local layers are Megatron-Core's "
                            "ColumnParallelLinear / RowParallelLinear (core/models/backends.py L102-108 @ d98e8a64), "
                            "which TransformerEngine's low-precision recipe does not reach, so the launch multiplies "
                            "in bf16: planned bf16 (--transformer-impl transformer_engine runs {name})")
LOCAL_PARAM_GATHER_NOTE = ("--fp8-param-gather / --fp4-param-gather with --transformer-impl local: the local layers' "
                           "parameters stay 16-bit (TransformerEngine's low-precision parameters are its own "
                           "modules'), so the gather moves bf16: planned without it")


def _enc_param_gather(f: Fields) -> Args:
    """--fp8-param-gather (--fp4-param-gather under nvfp4): the parameters kept and all-gathered in the low
    precision (btacalc/data/precision.toml param_gather_flag)."""
    if not f.get("run.fp8_param_gather"):
        return {}
    return {"fp4_param_gather" if f.get("run.precision") == "nvfp4" else "fp8_param_gather": True}


def _dec_param_gather(get: Get) -> Fields:
    fp8, fp4 = truth(get("fp8_param_gather")), truth(get("fp4_param_gather"))  # both read: neither is "ignored"
    if (fp8 or fp4) and str(get("transformer_impl")) == "local":  # hostile24: LOCAL_LOW_PRECISION_NOTE
        return {"run.fp8_param_gather": False, "run.param_gather_note": LOCAL_PARAM_GATHER_NOTE}
    return {"run.fp8_param_gather": fp8 or fp4}


def _enc_fp8_attention(f: Fields) -> Args:
    """FP8 attention sets TransformerConfig.fp8_dot_product_attention (Megatron-LM @ d98e8a64 transformer_config.py
    L640, passed to TransformerEngine's recipe as fp8_dpa: transformer_engine.py L3350, fp8_utils.py L779/L787,
    fp4_utils.py L225), which has no command-line flag (arguments.py L2332-2334, 'no CLI argument exists for
    these'): no destination; the launch's notes and the Bridge overrides say it (output/megatron.py)."""
    return {}


def _dec_fp8_attention(get: Get) -> Fields:
    """Read from Megatron-Bridge's mixed_precision.fp8_dot_product_attention (`from_bridge`; no flag sets it)."""
    return {"run.fp8_attention": truth(get(FP8_ATTENTION_DEST))}


def _enc_capacity(f: Fields) -> Args:
    """Token dropping: --moe-expert-capacity-factor CF and, padding every expert to it,
    --moe-pad-expert-input-to-capacity (Megatron-LM @ d98e8a64 transformer_config.py L917-924)."""
    cf = f.get("run.capacity_factor")
    if cf is None:
        return {}
    out: Args = {"moe_expert_capacity_factor": cf}
    if f.get("run.pad_to_capacity"):
        out["moe_pad_expert_input_to_capacity"] = True
    return out


def _dec_capacity(get: Get) -> Fields:
    """A capacity factor below 0 is dropless in Megatron-Core (transformer_config.py L1836-1838); padding without a
    factor is refused by the plan, as Megatron-Core refuses it (L1862-1866)."""
    cf = get("moe_expert_capacity_factor")
    value = None if cf is None else real(cf, "moe_expert_capacity_factor")
    return {"run.capacity_factor": None if value is None or value < 0 else value,
            "run.pad_to_capacity": truth(get("moe_pad_expert_input_to_capacity"))}


def _enc_offload(f: Fields) -> Args:
    """--cpu-offloading-num-layers N: the first N layers' activations in host memory (Megatron-LM turns
    cpu_offloading on when N > 0: arguments.py L1950-1951; config.resolution.ACTIVATION_OFFLOAD)."""
    n = f.get("run.cpu_offload_layers", 0)
    return {"cpu_offloading_num_layers": n} if n else {}


def _dec_offload(get: Get) -> Fields:
    return {"run.cpu_offload_layers": _int(get("cpu_offloading_num_layers"), "cpu_offloading_num_layers") or 0}


def _enc_bf16_ends(f: Fields) -> Args:
    """--first-last-layers-bf16 --num-layers-at-start-in-bf16 N --num-layers-at-end-in-bf16 M: the first N and last M
    decoder layers outside the low-precision recipe (config.resolution.BF16_LAYERS_SOURCE); both counts written, as
    Megatron's parser defaults each to 1 (megatron_flags.tsv)."""
    start, end = f.get("run.bf16_layers_at_start", 0), f.get("run.bf16_layers_at_end", 0)
    if not (start or end):
        return {}
    return {"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": start, "num_layers_at_end_in_bf16": end}


def _dec_bf16_ends(get: Get) -> Fields:
    """The counts take effect only with --first-last-layers-bf16 and an FP8 or FP4 recipe (MLM @ d98e8a64 fp8_utils.py
    L711-727 and L848-850, fp4_utils.py L247-263: without a recipe no layer enters a low-precision context)."""
    on = truth(get("first_last_layers_bf16"))
    start = _int(get("num_layers_at_start_in_bf16"), "num_layers_at_start_in_bf16") or 0
    end = _int(get("num_layers_at_end_in_bf16"), "num_layers_at_end_in_bf16") or 0
    if not on or (get("fp8") is None and get("fp4") is None):
        return {"run.bf16_layers_at_start": 0, "run.bf16_layers_at_end": 0}
    return {"run.bf16_layers_at_start": start, "run.bf16_layers_at_end": end}


# Bytes of an Adam moment for --exp-avg-dtype / --exp-avg-sq-dtype (Megatron-LM optimizer_config.py L203-206)
MOMENT_BYTES = {"fp32": 4, "bf16": 2}


def _enc_moments(f: Fields) -> Args:
    """--use-precision-aware-optimizer (TransformerEngine's FusedAdam), with bf16 Adam moments where the plan has
    them (they need it: optimizer_config.py L466-478 @ d98e8a64), and, where the precision has no FP8 recipe of its
    own, the --fp8-recipe the optimizer config holds when it is not Megatron-LM's default delayed (review28:
    RunOptions.optimizer_fp8_recipe, a Megatron-Bridge run's tensorwise)."""
    bf16 = f.get("run.moment_bytes", 4) == 2
    if not (bf16 or f.get("run.precision_aware_optimizer")):
        return {}
    out: Args = {"use_precision_aware_optimizer": True}
    if bf16:
        out.update({"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"})
    recipe = f.get("run.optimizer_fp8_recipe", "delayed")
    if "fp8_recipe" not in PRECISIONS.get(f.get("run.precision") or "bf16", {}) and recipe not in (None, "delayed"):
        out["fp8_recipe"] = recipe
    return out


# Megatron-Core's FP8 recipe names (transformer_config.py L594-596 @ d98e8a64: TransformerConfig.fp8_recipe)
FP8_RECIPE_NAMES = ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")
# review28: the optimizer settings Megatron-Core asserts fp32 for without --use-precision-aware-optimizer
# (optimizer_config.py L466-479 @ d98e8a64: main_grads_dtype, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype)
_AWARE_ONLY = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")


def _dec_moments(get: Get) -> Fields:
    """The precision-aware optimizer (its master weights: RunOptions.param_remainders, with the fp8_recipe its config
    holds where the precision has no FP8 recipe: Megatron-LM's --fp8-recipe, default delayed, training.py L2609-2616,
    transformer_config.py L594-596 @ d98e8a64) and its moments' dtype."""
    aware = truth(get("use_precision_aware_optimizer"))
    dtypes = {str(get("exp_avg_dtype") or "fp32"), str(get("exp_avg_sq_dtype") or "fp32")}
    if truth(get("optimizer_cpu_offload")):  # review28 (Megatron-LM asserts it needs the precision-aware optimizer,
        # arguments.py L1884-1887); it was listed "not modelled" and planned with the whole state on the device
        raise BtacalcError("--optimizer-cpu-offload: Megatron-Core's HybridDeviceOptimizer keeps the optimizer state "
                           "(--optimizer-offload-fraction of it, default all) in host memory and steps it on the CPU "
                           "(optimizer/__init__.py L504-545 @ d98e8a64); btacalc models the state on the device: plan "
                           "without it")
    if not aware:
        lower = [f"--{d.replace('_', '-')} {get(d)}" for d in _AWARE_ONLY if str(get(d) or "fp32") != "fp32"]
        if lower:
            raise BtacalcError(f"{', '.join(lower)} without --use-precision-aware-optimizer: Megatron-Core asserts fp32 "
                               "there (optimizer_config.py L466-479 @ d98e8a64); give --use-precision-aware-optimizer")
        return {"run.moment_bytes": 4, "run.precision_aware_optimizer": False}
    master = str(get("main_params_dtype") or "fp32")
    if master != "fp32":
        raise BtacalcError(f"--main-params-dtype {master}: FusedAdam would keep {master} master weights under every "
                           "recipe (optimizer_config.py L407-414, optimizer/__init__.py L574-588 @ d98e8a64); btacalc "
                           "models fp32 master weights or FusedAdam's int16 remainders: give --main-params-dtype fp32")
    out: Fields = {"run.precision_aware_optimizer": True}
    if get("fp8") is None:
        recipe = get("fp8_recipe")
        if recipe is not None and str(recipe) not in FP8_RECIPE_NAMES:
            raise BtacalcError(f"fp8_recipe {recipe!r}: Megatron-Core's recipes are {', '.join(FP8_RECIPE_NAMES)} "
                               "(transformer_config.py L594-596 @ d98e8a64); under the precision-aware optimizer it "
                               "decides FusedAdam's master weights")
        out["run.optimizer_fp8_recipe"] = "delayed" if recipe is None else str(recipe)
    if dtypes == {"fp32"}:
        return {**out, "run.moment_bytes": 4}
    if len(dtypes) > 1 or not dtypes <= set(MOMENT_BYTES):
        raise BtacalcError(f"--exp-avg-dtype / --exp-avg-sq-dtype {' / '.join(sorted(dtypes))}: btacalc models both "
                           "Adam moments in fp32 or both in bf16")
    return {**out, "run.moment_bytes": MOMENT_BYTES[dtypes.pop()]}


# The optimizers whose state btacalc's catalogue holds (formulas/training_state.toml: Adam's fp32 master weights and two
# moments, SGD's master weights and one momentum); Megatron-LM @ d98e8a64 arguments.py L2913 offers more (muon, lion,
# soap, ...), whose state btacalc does not model: refused, not planned as Adam.
OPTIMIZERS = FEATURES["optimizer"]


def _enc_optimizer(f: Fields) -> Args:
    """--optimizer sgd (adam is Megatron-LM's default, arguments.py L2913: nothing to say)."""
    return {} if f.get("run.optimizer", "adam") == "adam" else {"optimizer": f["run.optimizer"]}


def _dec_optimizer(get: Get) -> Fields:
    name = str(get("optimizer") or "adam")
    if name not in OPTIMIZERS:
        raise BtacalcError(f"--optimizer {name}: btacalc holds the optimizer state of {' and '.join(OPTIMIZERS)} only "
                           "(formulas/training_state.toml); plan with the nearest and add the difference yourself")
    return {"run.optimizer": name}


def _enc_stages(f: Fields) -> Args:
    """Uneven first/last pipeline stages and explicit layouts (btacalc.config.pipeline.StageSplit)."""
    out: Args = {}
    if f.get("layout.first_stage_layers") is not None:
        out["decoder_first_pipeline_num_layers"] = f["layout.first_stage_layers"]
    if f.get("layout.last_stage_layers") is not None:
        out["decoder_last_pipeline_num_layers"] = f["layout.last_stage_layers"]
    if f.get("layout.pipeline_layout") is not None:
        out["pipeline_model_parallel_layout"] = f["layout.pipeline_layout"]
    return out


def _dec_stages(get: Get) -> Fields:
    return {"layout.first_stage_layers": _int(get("decoder_first_pipeline_num_layers"), "decoder_first_pipeline_num_layers"),
            "layout.last_stage_layers": _int(get("decoder_last_pipeline_num_layers"), "decoder_last_pipeline_num_layers"),
            "layout.pipeline_layout": get("pipeline_model_parallel_layout")}


def _enc_grouped_gemm(f: Fields) -> Args:
    """--moe-grouped-gemm for an MoE model whose experts run as grouped GEMMs (btacalc's plans: one kernel over the
    local experts, and what the moe_act recompute module needs, transformer_config.py L1964-1967 @ d98e8a64)."""
    grouped = f.get("model.num_experts") and f.get("run.expert_grouped_gemm", True)
    return {"moe_grouped_gemm": True} if grouped else {}


def _dec_grouped_gemm(get: Get) -> Fields:
    """An MoE launch without --moe-grouped-gemm (Megatron-LM's default: off, megatron_flags.tsv) builds SequentialMLP,
    one linear pair per local expert (Megatron-Core @ d98e8a64 models/gpt/moe_module_specs.py, core/models/backends.py
    L133-142), which asks TransformerEngine for no grouped GEMM and so none of its grouped-GEMM workspaces
    (config/workspaces.py). A dense launch's flag is read and has no experts to change."""
    grouped = truth(get("moe_grouped_gemm"))
    if not (_int(get("num_experts"), "num_experts") or 0):
        return {}
    return {"run.expert_grouped_gemm": grouped,
            **({} if grouped else {"run.expert_gemm_note": SEQUENTIAL_EXPERTS_NOTE})}


SEQUENTIAL_EXPERTS_NOTE = (
    "no --moe-grouped-gemm: Megatron-Core runs the experts as SequentialMLP (one linear pair per local expert); btacalc "
    "holds none of TransformerEngine's grouped-GEMM workspaces for it and times the experts as TransformerEngine's "
    "grouped GEMM, itself one GEMM per local expert (model/gpu/fixed.py); SequentialMLP's own per-expert Python is "
    "not timed")


def _enc_transformer_impl(f: Fields) -> Args:
    """--transformer-impl local when the plan's layers are Megatron-Core's own; TransformerEngine's (Megatron's default,
    megatron_flags.tsv) is left unsaid."""
    return {"transformer_impl": "local"} if f.get("run.transformer_engine") is False else {}


def _dec_transformer_impl(get: Get) -> Fields:
    """tews: a local launch runs no TransformerEngine GEMM (Megatron-Core's ColumnParallelLinear: torch.matmul, apex's
    weight-gradient kernels; layers.py L459, L683, L721-726 @ d98e8a64), so it holds none of TE's cuBLAS workspaces
    (config/workspaces.py); its attention is _dec_attention's."""
    return {"run.transformer_engine": str(get("transformer_impl")) != "local"}


# hostile31: Megatron-Core cuts the gradient reduce into buckets only with overlap_grad_reduce (training.py
# L2192-2193 sets bucket_size None without it); without it a launch's bucket flags are left unread, so listed as
# ignored, not planned as settings that change nothing
def _enc_buckets(f: Fields) -> Args:
    if not f.get("overlap.grad_reduce"):
        return {}
    return {dest: f[field] for field, dest in (("layout.ddp_bucket_params", "ddp_bucket_size"),
                                                ("layout.ddp_num_buckets", "ddp_num_buckets")) if f.get(field) is not None}


def _dec_buckets(get: Get) -> Fields:
    if not truth(get("overlap_grad_reduce")):
        return {"layout.ddp_bucket_params": None, "layout.ddp_num_buckets": None}
    size, count = get("ddp_bucket_size"), get("ddp_num_buckets")
    return {"layout.ddp_bucket_params": None if size is None else _int(size, "ddp_bucket_size"),
            "layout.ddp_num_buckets": None if count is None else _int(count, "ddp_num_buckets")}


def _enc_wgrad_fusion(f: Fields) -> Args:
    """--no-gradient-accumulation-fusion when the plan turns the fusion off; Megatron's default (on:
    megatron_flags.tsv, the flag stores False) is left unsaid."""
    return {"gradient_accumulation_fusion": False} if f.get("run.gradient_accumulation_fusion") is False else {}


def _dec_wgrad_fusion(get: Get) -> Fields:
    return {"run.gradient_accumulation_fusion": truth(get("gradient_accumulation_fusion"))}


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
    Row("numerics", _enc_numerics, _dec_numerics),
    Row("zero-centred norm", lambda f: {"layernorm_zero_centered_gamma": True} if f.get("model.norm_zero_centered") else {},
        lambda get: {"model.norm_zero_centered": truth(get("layernorm_zero_centered_gamma"))}),
    switch("model.tied_embeddings", "untie_embeddings_and_output_weights", invert=True),
    switch("model.softmax_fp32", "attention_softmax_in_fp32"),
    choice("model.attention_sinks", "softmax_type", {False: "vanilla", True: "learnable"}, say_default=False),
    Row("biases", _enc_bias, _dec_bias),
    Row("dropout", _enc_dropout, _dec_dropout),
    Row("mtp", _enc_mtp, _dec_mtp),
)
RUN_ROWS: tuple[Row, ...] = (
    same("layout.tensor_parallel", "tensor_model_parallel_size"),
    Row("sequence parallel", _enc_sp, _dec_sp),
    Row("pipeline", _enc_pipeline, _dec_pipeline),
    Row("uneven stages", _enc_stages, _dec_stages),
    same("layout.context_parallel", "context_parallel_size"),
    same("layout.expert_parallel", "expert_model_parallel_size"),
    same("layout.expert_tensor_parallel", "expert_tensor_parallel_size"),
    Row("sharding", _enc_sharding, _dec_sharding),
    same("batch.micro_batch", "micro_batch_size"),
    same("batch.global_batch", "global_batch_size"),
    Row("recompute", _enc_recompute, _dec_recompute),
    Row("attention", _enc_attention, _dec_attention),
    Row("transformer implementation", _enc_transformer_impl, _dec_transformer_impl),
    Row("expert GEMMs", _enc_grouped_gemm, _dec_grouped_gemm),
    Row("cross-entropy", _enc_loss, _dec_loss),
    Row("precision", _enc_precision, _dec_precision),
    Row("low precision", _enc_low_precision, _dec_low_precision),
    Row("low-precision parameter gather", _enc_param_gather, _dec_param_gather),
    Row("FP8 attention", _enc_fp8_attention, _dec_fp8_attention),
    Row("activation offloading", _enc_offload, _dec_offload),
    Row("first/last layers in BF16", _enc_bf16_ends, _dec_bf16_ends),
    Row("optimizer moments", _enc_moments, _dec_moments),
    Row("optimizer", _enc_optimizer, _dec_optimizer),
    Row("dispatcher", _enc_dispatcher, _dec_dispatcher),
    Row("token dropping", _enc_capacity, _dec_capacity),
    Row("cuda graphs", _enc_cuda_graphs, _dec_cuda_graphs),
    Row("gradient accumulation fusion", _enc_wgrad_fusion, _dec_wgrad_fusion),
    switch("run.deterministic_mode", "deterministic_mode"),
    switch("layout.nccl_ub", "nccl_ub"),
    Row("gradient buckets", _enc_buckets, _dec_buckets),
    switch("overlap.grad_reduce", "overlap_grad_reduce"),
    switch("overlap.param_gather", "overlap_param_gather"),
    switch("overlap.tp_comm", "tp_comm_overlap"),
    switch("overlap.all_to_all", "overlap_moe_expert_parallel_comm"),
    switch("overlap.early_attn_release", "ep_overlap_early_attn_memory_release"),
    switch("overlap.delay_wgrad", "delay_wgrad_compute"),
)
ROWS = MODEL_ROWS + RUN_ROWS


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
        "model.qk_norm_head": spec.qk_norm == "head", "model.tied_embeddings": spec.tied_embeddings,
        "model.softmax_fp32": spec.softmax_fp32, "model.attention_sinks": spec.attention_sinks,
        "model.linear_bias": spec.linear_bias, "model.mlp_bias": spec.mlp_bias, "model.qkv_bias": spec.qkv_bias,
        "model.dropout": spec.dropout, "model.max_position_embeddings": spec.max_position_embeddings,
        "model.mtp_layers": spec.mtp_layers, "model.yarn": spec.yarn.model_dump() if spec.yarn else None,
        "model.router_groups": spec.router_groups, "model.router_group_topk": spec.router_group_topk,
        "model.router_scale": spec.router_scale, "model.router_score_bias": spec.router_score_bias,
        # a source that states no Llama 3 RoPE scaling: none, as the launch trains it (1.0)
        "model.numerics": {**spec.numerics.model_dump(exclude={"source"}),
                           "rope_scaling_factor": spec.numerics.rope_scaling_factor or 1.0},
    }


def encode(fields: Fields, rows: tuple[Row, ...] = ROWS) -> Args:
    """Megatron destinations of a run (see module docstring)."""
    out: Args = {}
    for row in rows:
        out.update(row.encode(fields))
    return out


def decode(args: Args, rows: tuple[Row, ...] = ROWS) -> tuple[Fields, set[str]]:
    """The fields of a Megatron run and the destinations the rows read."""
    get, fields = Get(args), Fields()
    for row in rows:
        fields.update(row.decode(get))
    return fields, get.read


# Megatron-LM flag to use for a destination several flags share (the rest are aliases).
_PREFERRED = {"num_experts": "--num-experts"}

# The request parameters a refusal names (`{tensor_parallel}`, BtacalcError) that are one Megatron-LM destination
# each, value for value (the `same` rows above, the pipeline row's size, the sequence row's seq_length and the
# sequence-parallel switch): a plan-level refusal of an imported launch names them as the file does
# (`imported_names`). The others (the micro-batch count, recomputation, what btacalc alone decides) have no one flag.
PARAM_DESTS = {
    "tensor_parallel": "tensor_model_parallel_size", "pipeline_parallel": "pipeline_model_parallel_size",
    "context_parallel": "context_parallel_size", "expert_parallel": "expert_model_parallel_size",
    "expert_tensor_parallel": "expert_tensor_parallel_size", "global_batch": "global_batch_size",
    "seq_len": "seq_length", "sequence_parallel": "sequence_parallel", "ddp_bucket_params": "ddp_bucket_size",
    "ddp_num_buckets": "ddp_num_buckets", "microbatch_group": "microbatch_group_size_per_vp_stage",
}


def megatron_flag(dest: str) -> str:
    """The flag `render_flags` writes for a destination that takes a value (or the switch that sets it True)."""
    flags = flags_by_dest()[dest]
    valued = [f for f in flags if f.arity != "0"]
    if not valued:
        return next(f.flag for f in flags if not f.store_false)
    return next((f.flag for f in valued if f.flag == _PREFERRED.get(dest)), valued[0].flag)



def render_flags(args: Args) -> list[str]:
    """Destinations as Megatron-LM flags, one "--flag [value ...]" string each; a switch at its default is left out."""
    out = []
    for dest, value in args.items():
        flags = flags_by_dest().get(dest)
        if not flags:
            raise KeyError(f"no Megatron-LM flag sets {dest}")  # a bug in ROWS, caught by the tests
        if isinstance(value, bool) and all(f.arity == "0" for f in flags):
            flag = next((f for f in flags if f.store_false != value), None)
            if flag is not None:
                out.append(flag.flag)
            continue
        name = megatron_flag(dest)
        out.append(" ".join([name, *map(str, value)]) if isinstance(value, list) else f"{name} {_shell(value)}")
    return out


def _shell(value: Any) -> str:
    text = str(value)
    return f"'{text}'" if any(c in text for c in "()[]* ") else text


# TransformerConfig.fp8_dot_product_attention: set by Megatron-Bridge's mixed-precision config (Megatron-Bridge @
# 067f987d src/megatron/bridge/training/mixed_precision.py L58; perf_recipes/qwen/common.py L55 @ 51885cf1), no flag
FP8_ATTENTION_DEST = "fp8_dot_product_attention"
FP8_ATTENTION_BRIDGE_KEY = "mixed_precision.fp8_dot_product_attention"
