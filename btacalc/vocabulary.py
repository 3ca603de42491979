"""The shared vocabulary: recomputation policies, the features a formula term may test, the
quantities the catalogue defines and the formula notation.

A module of its own, free of sympy and of every other btacalc module, so that the command line can
build its choices from it without paying for the formula machinery at start-up, and so that the
configuration and the catalogue agree on names without importing each other.
"""

from __future__ import annotations

from typing import Any

RECOMPUTE_POLICIES = ("none", "selective", "full")

# Feature names a term's `when` may test, with their allowed values.
FEATURES: dict[str, tuple[Any, ...]] = {
    # model architecture
    "norm": ("rmsnorm", "layernorm"),
    "mlp": ("swiglu", "gelu"),
    "moe": (True, False),
    "dropout": (True, False),
    "qkv_bias": (True, False),
    "linear_bias": (True, False),
    "qk_norm": ("none", "head", "full"),
    "position_embedding": ("rope", "learned"),
    "tied_embeddings": (True, False),
    "softmax_fp32": (True, False),
    # run options
    "attention": ("eager", "flash"),
    "causal": (True, False),
    "loss": ("stored", "fused"),
    "accounting": ("ideal", "pytorch"),
    "optimizer": ("adam", "sgd"),
}

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
    "state",
)
# Quantities btacalc derives from the base ones (catalogue.selection.Selection.expression).
DERIVED_QUANTITIES = ("flops_bwd", "recompute_bytes", "arithmetic_intensity")
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
    "recompute_bytes": "bytes",
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
    "beta": ("bytes per activation and weight element (2 for bf16/fp16)", "bytes_per_element"),
    "P": ("number of parameters (training-state formulas only)", "params"),
}
# The order in which compiled numeric functions take their arguments.
ARG_ORDER: tuple[str, ...] = tuple(NOTATION)
DESCRIPTIONS: dict[str, str] = {name: desc for name, (desc, _) in NOTATION.items()}
API_NAMES: dict[str, str] = {name: api for name, (_, api) in NOTATION.items()}
