"""The shared vocabulary: recomputation policies, the features a formula term may test, the
quantities the catalogue defines and the formula notation.

A module of its own, free of sympy and of every other btacalc module, so that the command line can
build its choices from it without paying for the formula machinery at start-up, and so that the
configuration and the catalogue agree on names without importing each other.
"""

from __future__ import annotations

from typing import Any

RECOMPUTE_POLICIES = ("none", "selective", "full", "op")
# `--recompute op`: torchtitan's per-op selective activation checkpoint (activation_checkpoint.mode "selective",
# selective_ac_option "op"): each block runs under PyTorch's non-reentrant checkpoint with a caching policy that keeps
# the outputs of the ops on its save list (aten.mm, SDPA's flash and efficient kernels, the reduce-scatter) except
# every second mm of the block, and re-runs every other op in the backward (pytorch/torchtitan @ 157a12c5
# torchtitan/parallelisms/parallelize_llama.py L35-L71). Not a Megatron policy (it has no recompute module list).
OP_POLICY = "op"
# The stored-term tags of the op policy's cache (catalogue/terms.py Term.recompute): an output it keeps, and one that is
# also a tensor the layer's backward reads, which the re-run takes from the cache instead of rebuilding.
OP_CACHE = ("op_cache", "op_cache_saved")
# PyTorch's own cross-entropy (F.cross_entropy) on fp32 logits, as torchtitan computes it: cast in the loss, the 16-bit
# logits deleted before the backward (torch_fp32), or cast in the model and held by the loop through the backward
# (torch_fp32_held) (formulas/head.toml)
TORCH_LOSSES = ("torch_fp32", "torch_fp32_held")
# Megatron-Core's and TransformerEngine's cross-entropy on a GPU (formulas/head.toml): with PyTorch's, the losses a
# wafer-scale run does not compute (its compiler's loss is `fused` or Korthikanti's `stored`)
MEGATRON_LOSSES = ("vocab_parallel", "native_fused", "te_fused")
GPU_LOSSES = MEGATRON_LOSSES + TORCH_LOSSES

# Megatron-Core's selective-recomputation modules (TransformerConfig.recompute_modules; Megatron-LM
# megatron/core/transformer/transformer_config.py, "recompute_modules" docstring and checks). A stored
# tensor of the catalogue names the module that discards it (term `recompute`); `within` says which
# module contains another (recomputing the whole MoE layer also recomputes its activation function).
RECOMPUTE_MODULES: dict[str, dict[str, str]] = {
    "core_attn": {"within": "", "what": "the attention core: Q K^T, softmax, dropout, P V (normal checkpoint)"},
    "mlp": {"within": "", "what": "the dense MLP submodule (normal checkpoint)"},
    "moe": {"within": "", "what": "the whole MoE layer: router, dispatch, experts, combine (normal checkpoint)"},
    "moe_act": {"within": "moe", "what": "the activation function inside the experts (output-discarding)"},
    "shared_experts": {"within": "moe", "what": "the shared-expert MLP (normal checkpoint)"},
    "layernorm": {"within": "", "what": "input_layernorm and pre_mlp_layernorm outputs (output-discarding)"},
    "mla_up_proj": {"within": "", "what": "MLA up-projections and RoPE (output-discarding)"},
}
# `--recompute selective` is Megatron's `--recompute-granularity selective` with its default module list
# (TransformerConfig.__post_init__ sets recompute_modules = ["core_attn"]).
SELECTIVE_MODULES = ("core_attn",)


def parse_recompute(value: str) -> str:
    """The canonical recomputation policy: none, selective, full, or a comma-separated list of Megatron
    recompute modules (sorted; the default module list ["core_attn"] is written `selective`).
    Raises ValueError naming the allowed values."""
    text = value.strip()
    if text in RECOMPUTE_POLICIES:
        return text
    given = [m.strip() for m in text.split(",")]
    if len(given) > 1 and not all(given):  # `core_attn,,mlp` may hide a module that was meant
        raise ValueError(f"recompute {value!r} has an empty entry (two commas in a row, or one at an end)")
    twice = sorted({m for m in given if given.count(m) > 1})
    if twice:
        raise ValueError(f"recompute {value!r} names {', '.join(twice)} twice")
    modules = sorted(given)
    unknown = [m for m in modules if m not in RECOMPUTE_MODULES]
    if not all(modules) or unknown:
        raise ValueError(f"recompute {value!r}: expected none, selective, full, op or a comma-separated list of "
                         f"{', '.join(RECOMPUTE_MODULES)}")
    return "selective" if tuple(modules) == SELECTIVE_MODULES else ",".join(modules)


def recompute_modules(policy: str) -> frozenset[str] | None:
    """The modules a canonical policy recomputes, with the modules they contain; None for full
    recomputation (every layer activation but the checkpointed input); none for the op-level policy, which names
    no Megatron module (catalogue/selection.py applies it)."""
    if policy == "full":
        return None
    named = {"none": (), "selective": SELECTIVE_MODULES, OP_POLICY: ()}.get(policy)
    chosen = set(named if named is not None else policy.split(","))
    chosen |= {m for m, info in RECOMPUTE_MODULES.items() if info["within"] in chosen}
    return frozenset(chosen)

# Feature names a term's `when` may test, with their allowed values.
FEATURES: dict[str, tuple[Any, ...]] = {
    # model architecture
    "norm": ("rmsnorm", "layernorm"),
    "mlp": ("swiglu", "gelu"),
    "moe": (True, False),
    # dropout35: two switches, Megatron-LM's two probabilities: the attention probabilities' (core attention) and the
    # hidden states' (the residual bias-dropout-adds and the embedding dropout)
    "attention_dropout": (True, False),
    "hidden_dropout": (True, False),
    "qkv_bias": (True, False),
    "linear_bias": (True, False),
    "qk_norm": ("none", "head", "full", "l2"),  # l2: Llama 4's weightless L2 norm of each q and k head
    "position_embedding": ("rope", "learned"),
    "tied_embeddings": (True, False),
    "softmax_fp32": (True, False),
    "mlp_bias": (True, False),  # biases on the dense MLP's linears (GPT-2/3, GPT-J)
    "lm_head_bias": (True, False),  # GPT-J's LM head has a bias
    "parallel_block": (True, False),  # GPT-J: attention and MLP read the same norm output (one norm per layer)
    "mla": (True, False),  # multi-head latent attention (DeepSeek-V2/V3)
    "q_lora": (True, False),  # MLA: queries through a low-rank down/up projection (q_lora_rank > 0)
    "sliding_window": (True, False),  # this layer kind attends to the last w tokens only
    "attention_sinks": (True, False),  # GPT-OSS: one learned logit per head joins every softmax row
    "router": ("softmax", "sigmoid", "topk_softmax"),  # scores over E then top-k; sigmoid (DeepSeek-V3); top-k then softmax (GPT-OSS)
    "router_renormalize": (True, False),  # the k selected weights are divided by their sum (norm_topk_prob)
    "router_bias": (True, False),  # the router linear has a bias (GPT-OSS)
    "expert_bias": (True, False),  # the expert linears have biases (GPT-OSS)
    "shared_experts": (True, False),  # always-on experts (SwiGLU or GeLU, as the routed ones) beside the routed ones
    "shared_expert_gate": (True, False),  # Qwen2-MoE: sigmoid(x w) scales the shared expert's output
    "mtp_module": (True, False),  # this layer kind is a multi-token-prediction module (DeepSeek-V3)
    # this layer kind is one of the first/last layers a low-precision recipe keeps in BF16 (Megatron-LM
    # --first-last-layers-bf16): its linear layers run in 16 bits, unquantised (model/gpu/costs.py)
    "bf16_layer": (True, False),
    # this layer kind applies no rotary embedding and no QK norm (Llama 4's NoPE layers, every fourth)
    "nope_layer": (True, False),
    # run options
    "attention": ("eager", "flash"),
    "causal": (True, False),
    "loss": ("stored", "fused", "vocab_parallel", "native_fused", "te_fused", "torch_fp32", "torch_fp32_held"),
    "accounting": ("ideal", "pytorch"),
    "optimizer": ("adam", "sgd"),
    # --fp8-attention: TransformerEngine's FP8 fused attention (fp8_dpa) quantises Q, K, V and dO around the kernel
    "fp8_attention": (True, False),
    # the attention output projection (TE Linear) keeps its own quantised copy of its input O for the weight gradient,
    # beside the 16-bit O the fused attention keeps for its backward: every low-precision recipe where Megatron-Core
    # does not set save_original_input on linear_proj (delayed scaling, or a TransformerEngine before the recipe's
    # precision.toml `proj_saves_original_input_since_te`; RunOptions.proj_quantised_input)
    "proj_quantised_input": (True, False),
    # --checkpoint-early-stop: PyTorch's non-reentrant checkpoint (torch >= 2.1) ends a layer's re-run once it has
    # rebuilt every saved tensor, so the GEMMs after the layer's last save are not re-run (selection.py)
    "checkpoint_early_stop": (True, False),
    # --eager-kernels: the layer's element-wise work as eager PyTorch launches it in llm-foundry's MPT block (no
    # TransformerEngine): bias gradients as separate reductions, the fused QKV output's gradient concatenated from
    # dq, dk, dv, LayerNorm's weight gradients as a second pass (formulas/*.toml; docs/runs.md "mpt4")
    "eager_kernels": (True, False),
    # the fused attention kernel (btacalc/data/attention_kernels.toml; tests/test_mpt4_eager_kernels.py keeps the
    # two lists equal): triton-flash's wrapper adds an fp32 dq buffer around its kernels, flash-attn-2-varlen's the
    # unpad and pad of q, k, v and the output (docs/runs.md "mpt6")
    "attention_kernel": ("default", "flash-attn-2", "flash-attn-2-varlen", "triton-flash", "cudnn-9-13"),
    # sequence parallelism (Korthikanti et al. 2022 §4.2.2): the tensors of `tp = "sequence"` terms are
    # split over the tensor-parallel ranks too
    "sequence_parallel": (True, False),
    # tensor parallelism as DTensor's TP plan runs it beside PyTorch FSDP2 (torchtitan's 2-D runs, TP > 1), not as
    # Megatron-Core and TransformerEngine do: a column-parallel linear keeps the whole gathered input autograd saves
    # for its matmul (`tp = "column_input"` terms; PrepareModuleInput hands it a Replicate tensor, parallelize_llama.py
    # L181-184, L190-193 @ 820504e2) where Megatron keeps the rank's sequence shard and gathers it again; and the op
    # policy's cache holds the row-parallel linears' reduce-scatter outputs (L218-227)
    "dtensor_tp": (True, False),
    # gradient buffer: fp32 main gradients (Megatron-LM's default with --bf16) or the parameter dtype
    "main_grads": ("fp32", "param"),
    # Adam's two moments: fp32 (Megatron-LM's default) or bf16 (--use-precision-aware-optimizer with
    # --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)
    "moments": ("fp32", "bf16"),
    # the optimizer's master weights: fp32, or the low 16 bits of each fp32 master weight as int16 beside the bf16
    # parameter that holds its high 16 (TransformerEngine FusedAdam's store_param_remainders, Megatron-Core's default
    # with --use-precision-aware-optimizer, no FP8 or delayed-scaling FP8, bf16 parameters: RunOptions)
    "master": ("fp32", "remainders"),
    # where an MoE layer multiplies each routed copy by its routing weight: in the combine after the experts
    # (the weighted sum keeps the expert outputs for the weights' gradient), or inside the experts' activation
    # (Megatron-Core: the weighted SwiGLU keeps its input and the weights, the combine keeps nothing)
    "routing_weights": ("combine", "experts"),
    # Megatron's drop-and-pad (--moe-pad-expert-input-to-capacity with a capacity factor): every expert's input padded
    # to its capacity, so the dispatcher knows the sizes on the host (no count all-gather, no sync)
    "pad_to_capacity": (True, False),
}

# How tensor parallelism (Shoeybi et al. 2019; Korthikanti et al. 2022 §4.2) splits the tensor or matmul a
# term counts over the t ranks of a tensor-parallel group (the term's per-device value is its expression
# divided by the divisor): `split` always (heads, FFN columns, vocabulary shards: /t); `sequence` only with
# sequence parallelism (norm inputs, dropout masks, the residual stream: /t with SP, else replicated);
# `replicated` never (norm weights, the router, the full input a column-parallel matmul all-gathers);
# `gathered`: routed token copies after the expert-tensor-parallel all-gather, t_e/t of the full count;
# `column_input`: the stored input of a column-parallel linear, a `sequence` tensor where the linear keeps the rank's
# shard (Megatron-Core, TransformerEngine) and `replicated` where it keeps the gathered input (feature dtensor_tp).
TP_CLASSES = ("split", "sequence", "replicated", "gathered", "column_input")

# Quantities written in the catalogue files.
BASE_QUANTITIES = (
    "params",
    "flops_fwd",
    "flops_recompute",
    "flops_elementwise",
    "stored",
    "transient",
    "bytes_moved",
    "a2a_bytes",
    "gather_bytes",
    "tp_in_bytes",
    "tp_out_bytes",
    "cp_bytes",
    "pp_bytes",
    "bytes_moved_bwd",
    "cast_elements",
    "sp_gather_cast_elements",
    "sp_gather_input_cast_elements",
    "attention_cast_elements",
    "attention_cast_elements_bwd",
    "elementwise_bytes",
    "elementwise_bytes_bwd",
    "state",
)
# Quantities btacalc derives from the base ones (catalogue.selection.Selection.expression).
DERIVED_QUANTITIES = ("flops_bwd", "recompute_bytes", "arithmetic_intensity", "reruns")
# Per-phase quantities ("state" is per parameter).
QUANTITIES = tuple(q for q in BASE_QUANTITIES if q != "state") + DERIVED_QUANTITIES

QUANTITY_UNITS = {
    "params": "parameters",
    "flops_fwd": "FLOP",
    "flops_bwd": "FLOP",
    "flops_recompute": "FLOP",
    "flops_elementwise": "FLOP",
    "stored": "bytes",
    "transient": "bytes",
    "bytes_moved": "bytes",
    "a2a_bytes": "bytes",
    "gather_bytes": "bytes",
    "tp_in_bytes": "bytes",
    "tp_out_bytes": "bytes",
    "cp_bytes": "bytes",
    "pp_bytes": "bytes",
    "bytes_moved_bwd": "bytes",
    "cast_elements": "elements",
    "sp_gather_cast_elements": "elements",
    "sp_gather_input_cast_elements": "elements",
    "attention_cast_elements": "elements",
    "attention_cast_elements_bwd": "elements",
    "elementwise_bytes": "bytes",
    "elementwise_bytes_bwd": "bytes",
    "recompute_bytes": "bytes",
    "reruns": "passes",
    "arithmetic_intensity": "FLOP/byte",
    "state": "bytes",
}

# Formula notation: symbol -> (description, name in the library API).
NOTATION: dict[str, tuple[str, str]] = {
    "s": ("sequence length (tokens per sequence)", "seq_len"),
    "b": ("per-tile batch: sequences attention sees at once (BTA paper's B)", "tile_batch"),
    "G": ("number of attention tiles (batch tiling factor); router and experts see G*b sequences", "tiles"),
    "h": ("hidden size", "hidden_size"),
    "a": ("query heads", "num_heads"),
    "a_kv": ("key/value heads (GQA); a_kv = a for multi-head attention", "num_kv_heads"),
    "d_h": ("head dimension (a*d_h need not equal h)", "head_dim"),
    "E": ("routed experts per MoE layer", "num_experts"),
    "k": ("experts per token (top_k)", "top_k"),
    "f": ("FFN width: expert width (moe_intermediate_size) or dense MLP width", "ffn_size"),
    "L": ("decoder layers", "num_layers"),
    "V": ("vocabulary size", "vocab_size"),
    "d_v": ("value head dimension (d_v = d_h except for MLA)", "value_head_dim"),
    "r_q": ("MLA query compression rank (q_lora_rank)", "q_lora_rank"),
    "r_kv": ("MLA key/value compression rank (kv_lora_rank)", "kv_lora_rank"),
    "d_r": ("MLA decoupled RoPE head dimension (qk_rope_head_dim); d_h - d_r is the no-position part", "qk_rope_head_dim"),
    "f_s": ("shared-expert width: all shared experts of a layer as one SwiGLU (n_shared * f for DeepSeek)",
            "shared_expert_size"),
    "w": ("keys each query attends to in a sliding-window layer: min(window, s); full-attention layers use s",
          "sliding_window"),
    "beta": ("bytes per activation and weight element (2 for bf16/fp16)", "bytes_per_element"),
    "beta_s": ("bytes per element of a linear layer's saved input: beta in 16-bit training; under a low-precision "
               "recipe the quantised copy TransformerEngine saves for wgrad, with its block scales (FP8 1, MXFP8 "
               "1 + 1/32, NVFP4 0.5 + 1/16)", "saved_input_bytes"),
    "P": ("number of parameters (training-state formulas only)", "params"),
    "t": ("tensor-parallel size (Korthikanti's t; 1 without tensor parallelism)", "tensor_parallel"),
    "t_e": ("expert tensor-parallel size (Megatron's ETP; 1 without it)", "expert_tensor_parallel"),
    "c": ("context-parallel size (Megatron's CP; 1 without it): a rank holds s/c of each sequence's tokens (the "
          "batch-linear terms see it through b, the per-sequence chunk of a fused loss through c)", "context_parallel"),
    "M_sram": ("on-chip SRAM per streaming multiprocessor, in elements, that a fused attention kernel tiles "
               "into (Dao et al. 2022's M)", "sram_elements_per_core"),
    "x_g": ("1 where the MoE layers dispatch with Megatron's allgather dispatcher (every token all-gathered over the "
            "ETP x EP group, the outputs reduce-scattered back), else 0", "allgather_dispatch"),
    "n_g": ("ranks of the allgather dispatcher's tp_ep group (ETP x EP) with it, else 0", "expert_model_parallel"),
    "x_s": ("chunk sorts by local expert per MoE dispatch and per combine: 1 where Megatron's alltoall dispatcher "
            "re-sorts the received copies (expert parallelism with more than one local expert, no DeepEP / HybridEP, "
            "whose kernels place tokens themselves), else 0", "expert_chunk_sorts"),
}
# Symbols the compiled functions take as their reciprocal (so that dividing by 1 stays an exact integer).
RECIPROCAL_SYMBOLS = ("t", "t_e", "c")
# The order in which compiled numeric functions take their arguments.
ARG_ORDER: tuple[str, ...] = tuple(NOTATION)
DESCRIPTIONS: dict[str, str] = {name: desc for name, (desc, _) in NOTATION.items()}
API_NAMES: dict[str, str] = {name: api for name, (_, api) in NOTATION.items()}
