"""The catalogue's vocabulary: recomputation policies and the features a term's `when` may test.

A module of its own, free of sympy, so the command line can build its choices from it without
paying for the formula machinery at start-up.
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
