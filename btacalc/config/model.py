"""Model specifications (`ModelSpec`) and the overrides a user may apply to them.

Loading presets and Hugging Face ``config.json`` files is in `btacalc.config.presets` and `btacalc.config.hf`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Collection, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import BtacalcError, first_validation_error
from .text import CleanText, Name


@dataclass(frozen=True)
class LayerKind:
    """A group of identical decoder layers: how many, and how they differ from the model's defaults
    (catalogue features such as `moe`, and symbol values such as the FFN width `f`)."""

    name: str
    count: int
    features: tuple[tuple[str, Any], ...] = ()
    symbols: tuple[tuple[str, int], ...] = ()


Convention = Literal["within_0.5%", "rounded", "truncated"]


class PublishedParams(BaseModel):
    """Parameter counts as published by the model's authors, for validation, with the publisher's
    conventions written out: how the figure was rounded and what "active" counts."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    total: Optional[float] = None
    active: Optional[float] = None
    non_embedding: Optional[float] = None
    source: str = ""
    total_source: str = ""
    active_source: str = ""
    # how each figure relates to the exact count: within 0.5%, or the exact count rounded / truncated to
    # `precision` (the unit of the last digit the publisher wrote, e.g. 1e9 for "70B", 1e8 for "6.7B")
    total_convention: Convention = "within_0.5%"
    active_convention: Convention = "within_0.5%"
    non_embedding_convention: Convention = "within_0.5%"
    total_precision: float = Field(1e9, gt=0)
    active_precision: float = Field(1e9, gt=0)
    non_embedding_precision: float = Field(1e9, gt=0)
    # what the publisher's active count includes: both embedding tables, or the LM head but not the
    # input-embedding lookup (a gather, no FLOPs: GPT-OSS model card, DeepSeek-V3 README_WEIGHTS)
    active_counts: Literal["embedding_and_head", "head_only"] = "embedding_and_head"
    note: str = ""


# Every count and size of a model within 2^62 (about 4.6e18), also the bound of `sweep --vary`, `--seq` and the
# batch sizes (execution.MAX_SEQUENCES is this constant): a model's products (parameters, FLOPs, bytes) then stay
# within the solver's 64-bit integers and print as numbers (review12: `plan --experts 10^30` printed a 10^31-byte
# plan, an import of `--num-experts 10^30` was planned as given). Checked here, on the model, for every way a model
# is built.
MAX_COUNT = 1 << 62
MAX_COUNT_TEXT = "2^62"


def _bounded_field(value: Any) -> Any:
    """`value`, or ValueError when it is an integer beyond MAX_COUNT; as a field validator pydantic names the field
    ("field num_experts: 10^30 is beyond 2^62")."""
    if type(value) is int and value > MAX_COUNT:
        raise ValueError(f"{value} is beyond {MAX_COUNT_TEXT}")
    return value


def bounded_count(value: Any, name: str) -> Any:
    """_bounded_field's check as a BtacalcError naming `name` (a template parameter such as `{experts}`)."""
    try:
        return _bounded_field(value)
    except ValueError as exc:
        raise BtacalcError(f"{name} {exc}") from None


class MultiHeadLatentAttention(BaseModel):
    """MLA (DeepSeek-V2, arXiv 2405.04434 §2.1; DeepSeek-V3): queries and keys/values through low-rank
    projections with RMSNorm, a decoupled RoPE key shared by all heads. Training materialises the
    up-projected keys and values (no weight absorption): attention runs on a heads of d_h = nope + rope."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    q_lora_rank: int = Field(0, ge=0, description="r_q; 0: one q_proj h -> a d_h, no query compression")
    kv_lora_rank: int = Field(gt=0, description="r_kv")
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0, description="d_r")
    v_head_dim: int = Field(gt=0, description="d_v")

    _bounded = field_validator("*")(_bounded_field)


class YarnScaling(BaseModel):
    """YaRN RoPE scaling (Peng et al. 2023, arXiv 2309.00071) as a Hugging Face config's `rope_scaling` with rope_type
    yarn gives it (openai/gpt-oss-120b's config.json: factor 32, original_max_position_embeddings 4096, beta_fast 32,
    beta_slow 1, truncate false): the rotary frequencies interpolated by `factor` below the beta_slow..beta_fast
    correction range, the cosines and sines scaled by 0.1 ln(factor) + 1 (or mscale over mscale_all_dim where the
    config gives both). Numerics of the same shapes: no change to memory, FLOPs or time; the launch states them."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # hostile23: inf and nan were taken (an MLA launch's --mscale nan, --rotary-scaling-factor inf planned)
    factor: float = Field(gt=1, allow_inf_nan=False, description="the context extension (rope_scaling factor)")
    original_max_position_embeddings: int = Field(gt=0, description="the positions the rotary base was trained on")
    beta_fast: float = Field(32.0, gt=0, allow_inf_nan=False)
    beta_slow: float = Field(1.0, gt=0, allow_inf_nan=False)
    mscale: Optional[float] = Field(None, allow_inf_nan=False)
    mscale_all_dim: Optional[float] = Field(None, allow_inf_nan=False)
    truncate: bool = Field(True, description="round the correction range to whole dimensions (Megatron-Core's "
                           "yarn_correction_range_round_to_int)")

    _bounded = field_validator("*")(_bounded_field)


def rotary_dimensions(head_dim: int, share: float) -> int:
    """The dimensions of each head the rotary embedding turns at `share` of `head_dim`: Megatron-Core's
    int(kv_channels x rotary_percent) (rotary_pos_embedding.py L72-74 @ d98e8a64) and Hugging Face's
    int(head_dim x partial_rotary_factor) (modeling_rope_utils.py _compute_default_rope_parameters @ 0044e3b3), one
    truncation. review33: a share a hair below a whole count was read as that count, so 0.7 of head_dim 90 (62.99...,
    which both turn as 62) was refused as 63, and 0.7 of 180 (125 in both) was written 0.7000000000000001 (126). A
    count given as such (GPT-J's rotary_dim) is stored as `rotary_share`."""
    return int(head_dim * share)


def turns_pairs(turned: int) -> bool:
    """Whether `turned` dimensions of a head are something a rotary embedding can turn: pairs, at least one
    (ModelSpec._check_rotary_share gives the sources; Hugging Face configs are checked by the same rule)."""
    return turned >= 2 and turned % 2 == 0


def rotary_share(turned: int, head_dim: int) -> float:
    """The share of `head_dim` whose truncation (`rotary_dimensions`) gives `turned`: turned / head_dim, raised by
    floating point's least step while it truncates short (hostile41 D2: GPT-J's rotary_dim 30 of head_dim 44 as
    30 / 44, which Megatron-Core reads as 29)."""
    share = turned / head_dim
    while int(head_dim * share) < turned:
        share = math.nextafter(share, 2.0)
    return share


class Numerics(BaseModel):
    """The numerics of the same shapes that Megatron-LM has flags for and that differ across models (semantics22):
    the RoPE base (Hugging Face's rope_theta, Megatron's --rotary-base), the norms' epsilon (rms_norm_eps /
    layer_norm_epsilon, --norm-epsilon), the weights' initial standard deviation (initializer_range,
    --init-method-std) and the share of each head the rotary embedding turns (partial_rotary_factor, GPT-J's
    rotary_dim over head_dim; --rotary-percent). No change to memory, FLOPs or time: a launch that leaves them out
    trains Megatron-LM's defaults (10000, 1e-05, 0.02, 1.0), another model. None where the model's source does not
    state the value (a trimmed config.json, a paper): the launch then says it trains Megatron's."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rope_theta: Optional[float] = Field(None, gt=0, allow_inf_nan=False, description="the rotary embedding's base (rope_theta)")
    norm_eps: Optional[float] = Field(None, gt=0, allow_inf_nan=False, lt=1, description="the norms' epsilon (rms_norm_eps, "
                                      "layer_norm_epsilon)")
    init_std: Optional[float] = Field(None, gt=0, allow_inf_nan=False, lt=1, description="the initial weights' standard deviation "
                                      "(initializer_range)")
    rotary_percent: float = Field(1.0, gt=0, le=1, allow_inf_nan=False, description="the share of each head's dimensions the rotary "
                                  "embedding turns (partial_rotary_factor; GPT-J rotary_dim / head_dim)")
    rope_scaling_factor: Optional[float] = Field(None, ge=1, allow_inf_nan=False, description="Llama 3.x's RoPE "
                                                 "scaling (rope_scaling rope_type llama3) by this factor; 1: none")
    # numerics23: rope_scaling type linear (positions times 1 / factor: Megatron-Core RotaryEmbedding, whose
    # seq_len_interpolation_factor is a float, rotary_pos_embedding.py L63, L135-136 @ d98e8a64), Megatron-Bridge's
    # seq_len_interpolation_factor (Optional[float], gpt_provider.py L148 @ 067f987df; llama_bridge.py L72-73 passes
    # the config.json's factor as given). hostile24: a float, as both take it (0 divides by zero there); Megatron-LM's
    # --rotary-seq-len-interpolation-factor (type=int, arguments.py L2422) states only a whole one, so `--emit megatron`
    # refuses another (output.megatron.check_megatron_numerics)
    rope_interpolation_factor: Optional[float] = Field(None, gt=0, allow_inf_nan=False, description="linear RoPE "
                                                       "scaling (rope_scaling type linear): positions divided by this "
                                                       "factor; None: none")
    # llama4: Llama 4 Scout's Llama 3 scaling keeps the frequencies above high_freq_factor 1 unscaled (meta-llama/
    # llama-models @ a9c89c4 models/llama4/args.py L100-107); Megatron-Core fixes 4 (rotary_pos_embedding.py L92-98 @
    # d98e8a64) and no flag or Bridge field sets it: the launch says it trains 4. No change to memory, FLOPs or time
    rope_scaling_high_freq_factor: Optional[float] = Field(None, gt=0, allow_inf_nan=False, description="the "
                                                           "high_freq_factor of a Llama 3 RoPE scaling where it is "
                                                           "not Megatron-Core's fixed 4 (Llama 4 Scout: 1)")
    source: CleanText = Field("", description="the file and keys these values come from")

    _bounded = field_validator("*")(_bounded_field)

    def known(self) -> dict[str, float]:
        """The values the model's source states (the rotary share always: 1.0 unless the source says otherwise)."""
        return {k: v for k, v in self.model_dump(exclude={"source"}).items() if v is not None}


# Ten times the deepest transformer trained (DeepNet, 1,000 layers: Wang et al. 2022, arXiv 2203.00555);
# the layer stack is grouped layer by layer, so the bound also bounds the work.
MAX_LAYERS = 10_000


# GPT-OSS's gated activation (glu_activation "clamped_quick_gelu"): transformers' GptOssExperts computes
# gate * sigmoid(1.702 gate) * (up + 1) with gate and up clamped at the config's swiglu_limit (7.0 in
# openai/gpt-oss-120b's and -20b's config.json); Megatron-LM's quick_gelu is x sigmoid(1.702 x), and Megatron-Bridge's
# gpt_oss_bridge.py L81-84 @ 067f987d sets glu_linear_offset 1.0 and activation_func_clamp_value 7.0.
GPT_OSS_GLU_OFFSET = 1.0
GPT_OSS_GLU_CLAMP = 7.0
# The linears whose bias Megatron-LM's one --add-bias-linear decides, all or none (Megatron-LM @ d98e8a64: attention
# projection, MLP, and in MoE layers moe/router.py L67-70 and moe/experts.py L223, L246)
MEGATRON_LINEAR_BIASES = ("linear_bias", "mlp_bias", "router_bias", "expert_bias")


class ModelSpec(BaseModel):
    """A decoder-only transformer, dense or Mixture-of-Experts, possibly mixing layer kinds (dense and MoE
    layers, sliding-window and full attention)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    source: CleanText = Field(description="where the architecture numbers come from (URL)")
    hidden_size: int = Field(gt=0, description="h")
    num_layers: int = Field(gt=0, le=MAX_LAYERS, description="L")
    num_heads: int = Field(gt=0, description="a")
    num_kv_heads: int = Field(gt=0, description="a_kv")
    head_dim: int = Field(gt=0, description="d_h (query/key head dimension)")
    vocab_size: int = Field(gt=0, description="V")
    ffn_size: int = Field(gt=0, description="f: expert width for MoE, MLP width for dense")
    num_experts: int = Field(0, ge=0, description="E; 0 for a dense model")
    top_k: int = Field(0, ge=0, description="k; 0 for a dense model")
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    # the MLP of every layer, the routed and shared experts' too: one activation for the model, as Megatron-Core's
    # one TransformerConfig gives MLP, SharedExpertMLP and the experts (gated_linear_unit, activation_func)
    mlp: Literal["swiglu", "gelu"] = "swiglu"
    glu_activation: Literal["silu", "clamped_quick_gelu"] = Field(
        "silu", description="the gated MLP's activation: silu (SwiGLU), or GPT-OSS's quick-GELU gate "
        "(x sigmoid(1.702 x)) times (linear + 1), both clamped at 7; the same matmuls and saved tensors")
    mlp_activation: Literal["gelu", "squared_relu"] = Field(
        "gelu", description="the ungated MLP's activation (mlp gelu): GeLU, or Nemotron-4's squared ReLU; the same "
        "matmuls and saved tensors (Megatron-LM's --squared-relu)")
    norm_zero_centered: bool = Field(False, description="LayerNorm with a zero-centred gamma (the norm scales by "
                                     "1 + gamma: Nemotron-4; Megatron-LM's --apply-layernorm-1p); the same shapes")
    # l2 (llama4): Llama 4's weightless L2 norm of each query and key head (transformers' Llama4TextL2Norm:
    # x rsqrt(mean(x^2) + eps); Megatron-LM's --qk-l2-norm), on the layers that rotate only (a NoPE layer has none:
    # modeling_llama4.py Llama4TextAttention builds qk_norm where use_qk_norm and use_rope)
    qk_norm: Literal["none", "head", "full", "l2"] = "none"
    position_embedding: Literal["rope", "learned"] = "rope"
    # rope: which dimensions the rotary embedding turns together. Meta's Llama 4 (transformers' modeling_llama4.py
    # apply_rotary_emb: each head viewed as complex pairs of adjacent dimensions) and GPT-J (modeling_gptj.py
    # rotate_every_two) pair (2i, 2i + 1); Hugging Face's Llama 1-3, Mistral, Qwen and Megatron-Core's default pair
    # (i, i + d/2) (rotate_half). Megatron-LM's --rotary-interleaved (TransformerConfig.rotary_interleaved,
    # transformer_config.py L243 @ d98e8a64) selects the first; NVIDIA's own Llama 4 launches set it
    # (examples/post_training/modelopt/conf/meta-llama/Llama-4-Scout-17B-16E-Instruct.sh L44). The two differ by a fixed
    # permutation of each q and k head's dimensions: the same FLOPs, memory and time; a launch that leaves it out
    # trains a model whose checkpoints do not load into the other convention
    rotary_interleaved: bool = Field(False, description="the rotary embedding turns adjacent dimensions (2i, 2i + 1) "
                                     "together, as Llama 4 and GPT-J (Megatron-LM's --rotary-interleaved); False: "
                                     "the two halves (i, i + d/2), as Llama 1-3 in Hugging Face's layout. The same "
                                     "FLOPs and memory")
    # llama4: Llama 4's interleaved NoPE layers and chunked attention (transformers v5.24.0 configuration_llama4.py
    # no_rope_layers, no_rope_layer_interval, attention_chunk_size; modeling_llama4.py Llama4TextDecoderLayer)
    no_rope_interval: int = Field(0, ge=0, description="layer i (0-based) applies no rotary embedding (NoPE) when "
                                  "(i + 1) is a multiple of this (Llama 4's no_rope_layers, 4: every fourth layer; "
                                  "Megatron-LM's --no-rope-freq); 0: every layer rotates")
    attention_chunk: int = Field(0, ge=0, description="the rotary layers attend within chunks of this many tokens "
                                 "(Llama 4's attention_chunk_size); at a sequence of at most this many tokens that is "
                                 "full causal attention, and a longer sequence is refused (not modelled); 0: none")
    # dropout35: two switches, as Megatron-LM has two probabilities (TransformerConfig.hidden_dropout and
    # attention_dropout, Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_config.py L188, L191, both 0.1 by
    # default); a switch is on where its probability makes torch keep a 1-byte mask. A model file's `dropout` sets both
    attention_dropout: bool = Field(False, description="dropout on the attention probabilities (Megatron-Core's core "
                                    "attention, dot_product_attention.py L114-116, L216-220): under eager attention "
                                    "the a s^2 b mask and the 2 a s^2 b dropped-out probabilities; flash attention "
                                    "keeps only its RNG state")
    hidden_dropout: bool = Field(False, description="dropout on the hidden states: the residual bias-dropout-adds "
                                 "after attention and after the MLP (transformer_layer.py L754-756, L1105-1106) and "
                                 "the embedding dropout (language_model_embedding.py L90), an s b h 1-byte mask each")
    qkv_bias: bool = False
    linear_bias: bool = Field(False, description="bias on the attention output projection")
    mlp_bias: bool = Field(False, description="biases on the dense (GeLU) MLP's linears")
    lm_head_bias: bool = False
    parallel_block: bool = Field(False, description="GPT-J: attention and MLP both read the one norm's output")
    tied_embeddings: bool = False
    softmax_fp32: bool = Field(True, description="eager attention computes softmax in fp32 (HF transformers); "
                               "False: 16-bit (Megatron fused softmax, Korthikanti's count)")
    max_position_embeddings: Optional[int] = Field(None, gt=0)
    yarn: Optional[YarnScaling] = Field(None, description="YaRN scaling of the rotary embedding (GPT-OSS)")
    numerics: Numerics = Field(Numerics(), description="RoPE base, norm epsilon, initial std, rotary share: the "
                               "launch states them (no effect on the plan)")
    encoder: bool = Field(False, description="a bidirectional encoder (BERT, ESM-2, DiT): every position attends to "
                          "every other; not a causal decoder")
    # attention variants
    mla: Optional[MultiHeadLatentAttention] = None
    sliding_window: int = Field(0, ge=0, description="w: keys a sliding-window layer attends to; 0: no window")
    full_attention_interval: int = Field(0, ge=0, description="with a window, layer i (0-based) uses full "
                                         "attention when (i + 1) is a multiple of this; 0: every layer windowed")
    attention_sinks: bool = Field(False, description="GPT-OSS: a learned logit per head in every softmax row")
    # MoE variants
    router: Literal["softmax", "sigmoid", "topk_softmax"] = "softmax"
    router_renormalize: bool = Field(True, description="divide the k selected weights by their sum")
    router_bias: bool = False
    expert_bias: bool = False
    router_probs_on_input: bool = Field(False, description="the routing weight scales the token entering its expert, "
                                        "not the expert's output (Llama 4's Llama4TextMoe; Megatron-LM's "
                                        "--moe-apply-probs-on-input, top-1 only); the same FLOPs and tensors")
    router_groups: int = Field(1, ge=1, description="group-limited routing (DeepSeek-V3's n_group): the experts in this "
                               "many equal groups, a token's top k taken from its router_group_topk best groups")
    router_group_topk: int = Field(1, ge=1, description="the groups a token's experts come from (topk_group)")
    router_scale: float = Field(1.0, gt=0, allow_inf_nan=False, description="the k routing weights times this (routed_scaling_factor)")
    router_score_bias: bool = Field(False, description="aux-loss-free balancing (DeepSeek-V3's topk_method noaux_tc, "
                                    "e_score_correction_bias): a per-expert bias added to the scores for the choice "
                                    "only")
    # freshuser22: the router's load-balancing loss a config.json states, which Megatron-Bridge's AutoBridge maps
    # (Megatron-Bridge @ 067f987d src/megatron/bridge/models/conversion/model_bridge.py L483-484: aux_loss_alpha and
    # router_aux_loss_coef -> moe_aux_loss_coeff); no change to memory, FLOPs or time: the launch states it
    aux_loss_coeff: Optional[float] = Field(None, ge=0, allow_inf_nan=False, description="the router's auxiliary "
                                            "load-balancing loss coefficient (aux_loss_alpha, router_aux_loss_coef; "
                                            "Megatron's --moe-aux-loss-coeff); None: the model's source gives none")
    aux_loss_per_sequence: bool = Field(False, description="that loss balances each sequence (DeepSeek's seq_aux: "
                                        "Megatron's --moe-router-load-balancing-type seq_aux_loss), not the batch")
    # fu22: the loss's kind as Megatron-LM names it (--moe-router-load-balancing-type, arguments.py L3532 @ d98e8a64;
    # Megatron-Core's router adds the aux_loss over the micro-batch, seq_aux_loss per sequence, global_aux_loss over
    # the global batch and with none no loss at all: moe/router.py L388-408, L410-548), so that a launch read back keeps
    # it; aux_loss_per_sequence is the same as load_balancing seq_aux_loss (either may be given)
    load_balancing: Literal["aux_loss", "seq_aux_loss", "global_aux_loss", "none"] = Field(
        "aux_loss", description="which load-balancing loss the router trains (Megatron's default aux_loss: over the "
        "batch; seq_aux_loss: per sequence; global_aux_loss: over the global batch; none: no loss)")
    shared_expert_size: int = Field(0, ge=0, description="f_s: width of the always-on shared expert(s); 0: none")
    shared_expert_gate: bool = Field(False, description="Qwen2-MoE: sigmoid gate on the shared expert's output")
    first_dense_layers: int = Field(0, ge=0, description="the first layers are dense (first_k_dense_replace)")
    moe_layer_interval: int = Field(1, ge=1, description="layer i is MoE when (i + 1) is a multiple of this "
                                    "(decoder_sparse_step, interleave_moe_layer_step)")
    dense_layer_indices: tuple[int, ...] = Field((), description="further dense layers, 0-based (mlp_only_layers)")
    dense_ffn_size: Optional[int] = Field(None, gt=0, description="MLP width of the dense layers of an MoE model")
    mtp_layers: int = Field(0, ge=0, description="multi-token-prediction modules the model defines (DeepSeek-V3: "
                            "1); trained only with the mtp run option")
    published_params: Optional[PublishedParams] = None
    hf_model_type: Optional[str] = Field(
        None, pattern=r"^[a-z][a-z0-9_]*$", max_length=64,
        description="the Hugging Face model_type of the config.json the architecture comes from: btacalc's key to "
                    "the model bridge Megatron-Bridge's AutoBridge picks by that config's architecture, whose provider "
                    "fields stand where a Bridge run leaves them out (btacalc/data/bridge_model_bridges.toml); None: no "
                    "such config")

    _bounded = field_validator("*")(_bounded_field)

    @model_validator(mode="before")
    @classmethod
    def _one_dropout_key(cls, data: Any) -> Any:
        """A model file's `dropout` (before dropout35 the one switch) sets both switches; beside a switch it
        contradicts it is refused."""
        if not isinstance(data, dict) or "dropout" not in data:
            return data
        data = dict(data)
        both = data.pop("dropout")
        if not isinstance(both, bool):
            raise ValueError(f"dropout must be true or false (both attention_dropout and hidden_dropout), got {both!r}")
        clash = [k for k in ("attention_dropout", "hidden_dropout") if k in data and data[k] != both]
        if clash:
            raise ValueError(f"dropout = {str(both).lower()} sets attention_dropout and hidden_dropout both, but "
                             f"{clash[0]} = {str(data[clash[0]]).lower()} is given too: give the two switches only")
        return {**data, "attention_dropout": both, "hidden_dropout": both}

    @model_validator(mode="before")
    @classmethod
    def _one_balancing(cls, data: Any) -> Any:
        """aux_loss_per_sequence and load_balancing seq_aux_loss say the same: either sets the other; a pair that
        contradicts itself is refused."""
        if not isinstance(data, dict) or not ("aux_loss_per_sequence" in data or "load_balancing" in data):
            return data
        per_sequence, kind = data.get("aux_loss_per_sequence"), data.get("load_balancing")
        if kind is None:
            return {**data, "load_balancing": "seq_aux_loss" if per_sequence is True else "aux_loss"}
        if per_sequence is None:
            return {**data, "aux_loss_per_sequence": kind == "seq_aux_loss"}
        if isinstance(per_sequence, bool) and per_sequence is not (kind == "seq_aux_loss"):
            raise ValueError(f"aux_loss_per_sequence = {str(per_sequence).lower()} contradicts load_balancing = "
                             f"{kind!r} (the per-sequence loss is load_balancing seq_aux_loss): give one of them")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) is not divisible by num_kv_heads ({self.num_kv_heads})"
            )
        self._check_moe()
        self._check_attention()
        return self

    def _check_moe(self) -> None:
        if self.is_moe:
            if self.top_k < 1:
                raise ValueError("an MoE model needs top_k >= 1")
            if self.top_k > self.num_experts:
                raise ValueError(f"top_k ({self.top_k}) is larger than the number of experts ({self.num_experts})")
            if self.dense_positions() and self.dense_ffn_size is None:
                raise ValueError("an MoE model with dense layers needs dense_ffn_size")
            if len(self.dense_positions()) == self.num_layers:
                raise ValueError("every layer is dense: set num_experts 0 for a dense model")
        else:
            if self.top_k:
                raise ValueError("top_k is set but num_experts is 0 (dense model)")
            if self.shared_expert_size or self.shared_expert_gate or self.router_bias or self.expert_bias:
                raise ValueError("shared experts, router and expert biases need an MoE model (num_experts > 0)")
            if self.router_groups > 1 or self.router_group_topk > 1 or self.router_scale != 1 or self.router_score_bias:
                raise ValueError("router groups, scale and score bias need an MoE model (num_experts > 0)")
        if self.num_experts % self.router_groups or self.router_group_topk > self.router_groups:
            # Megatron-Core's own checks of group-limited routing (transformer_config.py L2682-2689 @ d98e8a64)
            raise ValueError(f"router_groups ({self.router_groups}) must divide num_experts ({self.num_experts}) and "
                             f"router_group_topk ({self.router_group_topk}) must not exceed it")
        if self.router_score_bias and self.router != "sigmoid":
            # transformer_config.py L2617-2625 @ d98e8a64: the aux-loss-free bias with sigmoid (or sqrtsoftplus) scores
            raise ValueError("router_score_bias (aux-loss-free balancing) needs the sigmoid router")
        if self.mlp_activation != "gelu" and self.mlp != "gelu":
            raise ValueError(f"mlp_activation {self.mlp_activation} is the ungated MLP's (mlp gelu)")
        if self.glu_activation != "silu" and self.mlp != "swiglu":
            raise ValueError(f"glu_activation {self.glu_activation} needs the gated MLP (mlp swiglu)")
        if self.router_probs_on_input and not (self.is_moe and self.top_k == 1):
            # Megatron-LM @ d98e8a64 moe/experts.py L918-921: "`moe_apply_probs_on_input` only works with
            # `moe_router_topk`=1"
            raise ValueError("router_probs_on_input (the weight on the expert's input) needs an MoE model with top_k 1")
        if self.shared_expert_gate and not self.shared_expert_size:
            raise ValueError("shared_expert_gate needs shared_expert_size > 0")
        if self.first_dense_layers >= self.num_layers:
            raise ValueError(f"first_dense_layers ({self.first_dense_layers}) must be below num_layers ({self.num_layers})")
        bad = [i for i in self.dense_layer_indices if not 0 <= i < self.num_layers]
        if bad or len(set(self.dense_layer_indices)) != len(self.dense_layer_indices):
            raise ValueError(f"dense_layer_indices must be distinct layers in 0..{self.num_layers - 1}")

    def _check_attention(self) -> None:
        if self.mla is not None:
            if self.num_kv_heads != self.num_heads:
                raise ValueError("MLA materialises keys and values for every head: num_kv_heads must equal num_heads")
            if self.head_dim != self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim:
                raise ValueError("MLA: head_dim must be qk_nope_head_dim + qk_rope_head_dim")
            if self.qk_norm != "none" or self.qkv_bias:
                raise ValueError("MLA has its own normalised projections: qk_norm none, qkv_bias false")
        if self.yarn is not None and self.position_embedding != "rope":
            raise ValueError("yarn scales the rotary embedding: it needs position_embedding rope")
        if self.position_embedding != "rope" and (self.numerics.rope_theta is not None
                                                  or self.numerics.rotary_percent != 1
                                                  or (self.numerics.rope_scaling_factor or 1) != 1
                                                  or self.numerics.rope_interpolation_factor is not None):
            raise ValueError("numerics rope_theta / rotary_percent / rope_scaling_factor / rope_interpolation_factor "
                             "set the rotary embedding: they need position_embedding rope")
        if self.numerics.rope_interpolation_factor is not None and ((self.numerics.rope_scaling_factor or 1) != 1
                                                                    or self.yarn is not None or self.mla is not None):
            raise ValueError("numerics rope_interpolation_factor is rope_scaling type linear: not with Llama 3's "
                             "rope_scaling_factor, YaRN or multi-latent attention")
        self._check_nope()
        if self.full_attention_interval and not self.sliding_window:
            raise ValueError("full_attention_interval needs a sliding_window")
        if self.attention_sinks and self.softmax_fp32:
            raise ValueError("attention sinks are modelled as GPT-OSS computes them, softmax in the activation "
                             "dtype: set softmax_fp32 false")

    def _check_nope(self) -> None:
        """NoPE layers and chunked attention (Llama 4) are rotary-model variants, one per model."""
        rotary = self.position_embedding == "rope" and self.mla is None
        if (self.no_rope_interval or self.attention_chunk) and not rotary:
            raise ValueError("no_rope_interval and attention_chunk are Llama 4's: they need position_embedding rope "
                             "without multi-latent attention")
        if self.no_rope_interval == 1:
            raise ValueError("no_rope_interval 1 leaves every layer without its rotary embedding: set "
                             "position_embedding otherwise, or 0 (every layer rotates)")
        if self.attention_chunk and self.sliding_window:
            raise ValueError("attention_chunk (Llama 4's chunked attention) and a sliding_window: give one")
        if self.qk_norm == "l2" and self.mla is not None:
            raise ValueError("qk_norm l2 needs the model's own q and k heads, not multi-latent attention")
        if self.rotary_interleaved and not rotary:
            # Megatron-Core: "rotary_interleaved does not work with multi_latent_attention" (transformer_config.py
            # L2526-2527 @ d98e8a64)
            raise ValueError("rotary_interleaved needs position_embedding rope without multi-latent attention")
        if rotary:
            self._check_rotary_share()

    def _check_rotary_share(self) -> None:
        """hostile41: RoPE turns pairs of dimensions, so the share of each head it turns is an even number of them,
        at least two. Hugging Face builds ceil(n / 2) frequencies for n and repeats each twice (modeling_gptj.py
        create_sinusoidal_positions and apply_rotary_pos_emb @ 00b676f8), n + 1 values against n dimensions when n is
        odd, which fails; Megatron-Core turns 2 ceil(n / 2) dimensions at frequencies spaced for n
        (rotary_pos_embedding.py L72-81 @ d98e8a64), another model; at n = 0 neither turns any."""
        share = self.numerics.rotary_percent
        turned = rotary_dimensions(self.head_dim, share)
        if share == 1 and turned % 2:
            raise ValueError(f"head_dim {self.head_dim} is odd and the rotary embedding turns every dimension of each "
                             "head: RoPE turns pairs (Hugging Face and Megatron-Core build ceil(d / 2) frequencies, "
                             "d + 1 values against d dimensions), so give an even head_dim or a rotary share that "
                             "turns an even number of dimensions")
        even = max(2, turned - turned % 2)
        if not turns_pairs(turned):
            raise ValueError(f"numerics rotary_percent {share!r} (--rotary-percent, model.rotary_percent) of head_dim "
                             f"{self.head_dim} turns {turned} dimensions of each head (int({self.head_dim} x "
                             f"{share!r})): RoPE turns pairs, so give an even number of at least 2 (e.g. "
                             f"{rotary_share(even, self.head_dim)!r} for {even})")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def dropout(self) -> bool:
        """Either dropout switch on (what a rule that asks for no dropout at all tests)."""
        return self.attention_dropout or self.hidden_dropout

    def dense_positions(self) -> set[int]:
        """0-based indices of the layers whose FFN is a dense MLP in an MoE model."""
        return ({i for i in range(self.num_layers) if i < self.first_dense_layers or (i + 1) % self.moe_layer_interval}
                | set(self.dense_layer_indices))

    def window_positions(self) -> set[int]:
        """0-based indices of the sliding-window layers."""
        if not self.sliding_window:
            return set()
        n = self.full_attention_interval
        return {i for i in range(self.num_layers) if not n or (i + 1) % n}

    def nope_positions(self) -> set[int]:
        """0-based indices of the layers without a rotary embedding (Llama 4's NoPE layers, full causal attention and
        no QK norm)."""
        n = self.no_rope_interval
        return {i for i in range(self.num_layers) if n and (i + 1) % n == 0}

    def chunk_refusal(self, seq_len: int) -> Optional[str]:
        """Why a sequence of `seq_len` tokens is not planned for this model (None: it is): Llama 4's rotary layers
        attend within attention_chunk tokens, which at a longer sequence is no attention btacalc models."""
        if not self.attention_chunk or seq_len <= self.attention_chunk:
            return None
        return (f"{{seq_len}} {seq_len} is longer than the {self.attention_chunk:,}-token attention chunk of "
                f"{self.name} (attention_chunk_size): its rotary layers then attend within chunks, which btacalc does "
                f"not model (at {self.attention_chunk:,} tokens or fewer that is full causal attention)")

    def linear_biases(self) -> dict[str, bool]:
        """The linears whose bias Megatron's --add-bias-linear decides that this model has, and whether each has one:
        the MLP's where the model has dense layers, the router's and the experts' where it has MoE layers, and q/k/v's
        once any other has one (Megatron gives linear_qkv a bias under add_bias_linear or add_qkv_bias)."""
        out = {"attention projection": self.linear_bias}
        if not self.is_moe or self.dense_positions():
            out["MLP"] = self.mlp_bias
        if self.is_moe:
            out.update(router=self.router_bias, experts=self.expert_bias)
        if any(out.values()):
            out["attention q/k/v"] = self.qkv_bias
        return out

    def biased_moe(self) -> bool:
        """An MoE model whose launch keeps Megatron's --add-bias-linear (any of MEGATRON_LINEAR_BIASES), so its MoE
        layers have biases, which Megatron-Core takes only at ETP 1 (transformer_config.py L2612-2615)."""
        return self.is_moe and any(getattr(self, name) for name in MEGATRON_LINEAR_BIASES)

    def features(self) -> dict[str, Any]:
        """The architecture features the formula catalogue's `when` clauses test (a layer kind overrides
        the per-layer ones: moe, sliding_window, mtp_module, bf16_layer; a NoPE kind nope_layer and qk_norm)."""
        return {
            "norm": self.norm,
            "mlp": self.mlp,
            "moe": self.is_moe,
            "attention_dropout": self.attention_dropout,
            "hidden_dropout": self.hidden_dropout,
            "qkv_bias": self.qkv_bias,
            "linear_bias": self.linear_bias,
            "qk_norm": self.qk_norm,
            "position_embedding": self.position_embedding,
            "tied_embeddings": self.tied_embeddings,
            "softmax_fp32": self.softmax_fp32,
            "mlp_bias": self.mlp_bias,
            "lm_head_bias": self.lm_head_bias,
            "parallel_block": self.parallel_block,
            "mla": self.mla is not None,
            "q_lora": self.mla is not None and self.mla.q_lora_rank > 0,
            "sliding_window": False,
            "attention_sinks": self.attention_sinks,
            "router": self.router,
            "router_renormalize": self.router_renormalize,
            "router_bias": self.router_bias,
            "expert_bias": self.expert_bias,
            "shared_experts": self.shared_expert_size > 0,
            "shared_expert_gate": self.shared_expert_gate,
            "mtp_module": False,
            "bf16_layer": False,
            "nope_layer": False,
        }

    def symbol_values(self) -> dict[str, int]:
        """Values of the architecture symbols (h, a, a_kv, d_h, E, k, f, L, V and the variants' own);
        symbols a model does not use get 1 (their terms do not apply)."""
        mla = self.mla
        return {
            "h": self.hidden_size,
            "a": self.num_heads,
            "a_kv": self.num_kv_heads,
            "d_h": self.head_dim,
            "E": max(self.num_experts, 1),
            "k": max(self.top_k, 1),
            "f": self.ffn_size,
            "L": self.num_layers,
            "V": self.vocab_size,
            "d_v": mla.v_head_dim if mla else self.head_dim,
            "r_q": max(mla.q_lora_rank, 1) if mla else 1,
            "r_kv": mla.kv_lora_rank if mla else 1,
            "d_r": mla.qk_rope_head_dim if mla else 1,
            "f_s": max(self.shared_expert_size, 1),
            "w": max(self.sliding_window, 1),
        }

    def layer_kinds(self, multi_token_prediction: bool = False, bf16_ends: tuple[int, int] = (0, 0),
                    stored: Optional[frozenset[int]] = None) -> tuple[LayerKind, ...]:
        """The decoder stack as groups of identical layers, in order of first appearance: MoE or dense FFN
        (dense layers of an MoE model have width dense_ffn_size), sliding-window or full attention; the first and
        last layers a low-precision recipe keeps in BF16 (`bf16_ends` = (at start, at end): `bf16_layer_positions`)
        as kinds of their own, after the others (feature `bf16_layer`); the layers a block recompute leaves alone
        (`stored`: their indices, Problem.stored_layers; None without the block method) likewise (feature
        `recompute_off`, named -stored); with `multi_token_prediction`, the model's MTP modules as one more kind (not
        recomputed under the block method: resolution.check_recompute_layers)."""
        keys = self._layer_keys(bf16_ends, stored)
        groups = {key: keys.count(key) for key in _kind_order(keys)}
        single = len({(key[0], key[1], key[4]) for key in groups}) == 1
        kinds = [self._kind(moe_position, windowed, count, single, bf16, stored, nope)
                 for (moe_position, windowed, bf16, stored, nope), count in groups.items()]
        if multi_token_prediction and self.mtp_layers:
            mtp = self._kind(True, False, self.mtp_layers, single=False, stored=stored is not None)
            kinds.append(LayerKind("mtp", self.mtp_layers, mtp.features + (("mtp_module", True),), mtp.symbols))
        return tuple(kinds)

    def layer_kind_indices(self, bf16_ends: tuple[int, int] = (0, 0),
                           stored: Optional[frozenset[int]] = None) -> tuple[int, ...]:
        """For each decoder layer by index, the index of its kind in `layer_kinds()` (pipeline stages hold
        real layers: btacalc.config.pipeline)."""
        keys = self._layer_keys(bf16_ends, stored)
        order = _kind_order(keys)
        return tuple(order.index(k) for k in keys)

    def bf16_layer_positions(self, bf16_ends: tuple[int, int]) -> set[int]:
        """0-based indices of the decoder layers a low-precision recipe keeps in BF16: the first `start` and the
        last `end` of `bf16_ends` = (start, end), as Megatron-LM counts them, on global layer numbers whatever
        the pipeline stage (MLM @ d98e8a64 megatron/core/fp8_utils.py L711-727 is_first_last_bf16_layer:
        layer_no < num_layers_at_start_in_bf16 or layer_no >= num_layers - num_layers_at_end_in_bf16; MTP layers
        ask with layer_no -1 and stay in the recipe, multi_token_prediction.py L1388-1389)."""
        start, end = bf16_ends
        return {i for i in range(self.num_layers) if i < start or i >= self.num_layers - end}

    def _layer_keys(self, bf16_ends: tuple[int, int] = (0, 0),
                    stored: Optional[frozenset[int]] = None) -> list[tuple[bool, bool, bool, bool, bool]]:
        """Per decoder layer: (an MoE position, a sliding-window layer, kept in BF16, not recomputed, a NoPE layer),
        the key of its kind."""
        dense, window, bf16 = self.dense_positions(), self.window_positions(), self.bf16_layer_positions(bf16_ends)
        kept, nope = stored or frozenset(), self.nope_positions()
        return [(i not in dense, i in window, i in bf16, i in kept, i in nope) for i in range(self.num_layers)]

    def _kind(self, moe_position: bool, windowed: bool, count: int, single: bool, bf16: bool = False,
              stored: bool = False, nope: bool = False) -> LayerKind:
        features: dict[str, Any] = {"moe": self.is_moe and moe_position, "sliding_window": windowed}
        symbols: dict[str, int] = {}
        if not moe_position and self.dense_ffn_size is not None:
            symbols["f"] = self.dense_ffn_size
        if single:
            name = "decoder"
        else:
            # a dense-equivalent model keeps its MoE positions apart (their width is k*f): "ffn"
            name = ("moe" if features["moe"] else "ffn" if moe_position else "dense") + (
                ("-sliding" if windowed else "-full") if self.sliding_window else "") + ("-nope" if nope else "")
        if nope:
            # llama4: no rotary embedding and no QK norm (modeling_llama4.py Llama4TextAttention: qk_norm only where
            # use_rope); full causal attention, which the rotary layers' chunks equal at s <= attention_chunk
            features.update(nope_layer=True, qk_norm="none")
        if bf16:
            # the layer's TransformerEngine modules run outside the recipe's autocast, so its attention core too
            # (--fp8-attention is TE's fp8_dpa, read from that recipe): MLM @ d98e8a64 fp8_utils.py L850-852
            features.update(bf16_layer=True, fp8_attention=False)
            name += "-bf16"
        if stored:
            # outside a block recompute's first N layers: no activation checkpoint (kind_selections: recompute none)
            features.update(recompute_off=True)
            name += "-stored"
        return LayerKind(name, count, tuple(sorted(features.items())), tuple(sorted(symbols.items())))

    def dense_equivalent(self) -> "ModelSpec":
        """The dense model with the same active parameters: one SwiGLU FFN of width k*f (+ the shared
        experts' width) in the MoE layers; dense layers keep their width.

        This is the reference of the BTA paper's comparison ("dense model with the same active
        parameters"); the router disappears, attention and embeddings are unchanged.
        """
        if not self.is_moe:
            return self
        return self.model_copy(
            update={
                "name": f"{self.name}-dense-equivalent",
                "num_experts": 0,
                "top_k": 0,
                "ffn_size": self.top_k * self.ffn_size + self.shared_expert_size,
                "shared_expert_size": 0,
                "shared_expert_gate": False,
                "router_bias": False,
                "expert_bias": False,
                "router_probs_on_input": False,
                "router_groups": 1,
                "router_group_topk": 1,
                "router_scale": 1.0,
                "router_score_bias": False,
                "published_params": None,
                "hf_model_type": None,  # a model no Hugging Face config describes, so no model bridge's
            }
        )

    def with_overrides(
        self,
        experts: Optional[int] = None,
        top_k: Optional[int] = None,
        expert_ffn: Optional[int] = None,
        fixed_active: bool = False,
    ) -> "ModelSpec":
        """Apply the CLI overrides; `fixed_active` keeps k*f constant when top-k changes."""
        if (experts is not None or top_k is not None or expert_ffn is not None or fixed_active) and not self.is_moe:
            raise BtacalcError(f"model {self.name!r} is dense: {{experts}}/{{top_k}}/{{expert_ffn}}/{{fixed_active}} "
                               "need an MoE model")
        for name, v in (("experts", experts), ("top_k", top_k), ("expert_ffn", expert_ffn)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise BtacalcError(f"{{{name}}} must be a positive integer, got {v!r}")
            bounded_count(v, f"{{{name}}}")
        if fixed_active and top_k is None:
            raise BtacalcError("{fixed_active} keeps k*f constant when {top_k} changes: give {top_k} (or the sweep's "
                               "--vary top-k=...)")
        if fixed_active and expert_ffn is not None:
            raise BtacalcError("{fixed_active} and {expert_ffn} both set the expert width: give one")
        update: dict[str, Any] = {}
        if experts is not None:
            update["num_experts"] = experts
        if top_k is not None:
            update["top_k"] = top_k
        if expert_ffn is not None:
            update["ffn_size"] = expert_ffn
        if fixed_active and top_k is not None:
            active_width = self.top_k * self.ffn_size
            if active_width % top_k:
                raise BtacalcError(
                    f"{{fixed_active}}: k*f = {self.top_k}*{self.ffn_size} = {active_width} is not divisible by "
                    f"{{top_k}} {top_k}"
                )
            update["ffn_size"] = active_width // top_k
        if not update:
            return self
        changed = ", ".join(f"{k}={v}" for k, v in update.items())
        update["name"] = f"{self.name} ({changed})"
        update["published_params"] = None
        if top_k is not None and top_k != 1:
            # Megatron-Core weights the expert's input at top-1 only (experts.py L918-921)
            update["router_probs_on_input"] = False
        if experts is not None and experts % self.router_groups:
            update.update(router_groups=1, router_group_topk=1)  # the published grouping of other experts: none
        data = self.model_dump()
        data.update(update)
        return validate_model(data, origin="overrides")


def every_nth(flagged: Collection[int], count: int) -> int:
    """n when the layers `flagged` are exactly every n-th of `count` layers (layers n - 1, 2n - 1, ...), else 0 (also
    when none is). One pass: the first flagged layer fixes the only candidate n (hostile39: the readers of a config's or
    a launch's layer list tried every n from 1 to L, quadratic: seconds at 10,000 layers)."""
    layers = set(flagged)
    if not layers:
        return 0
    n = min(layers) + 1
    return n if layers == set(range(n - 1, count, n)) else 0


def validate_model(data: dict[str, Any], origin: str) -> ModelSpec:
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise BtacalcError(f"{origin}: {first_validation_error(exc)}") from None


def _kind_order(keys: list[tuple[bool, bool, bool, bool, bool]]) -> list[tuple[bool, bool, bool, bool, bool]]:
    """The distinct layer keys in order of first appearance, those of layers kept in BF16, then those a block
    recompute leaves stored, after every other: the first kind (which also evaluates the parts outside the layers)
    stays the one the model has without the options."""
    return sorted(dict.fromkeys(keys), key=lambda key: (key[2], key[3]))
