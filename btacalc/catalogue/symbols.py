"""The notation of the formula catalogue (see shared DESIGN notes and Korthikanti et al. 2022).

Formulas are written in the papers' single-letter notation; the library API uses descriptive names.
`SYMBOLS` maps each formula symbol to its sympy symbol, and `DESCRIPTIONS` says what it means.
"""

from __future__ import annotations

import sympy as sp

# name in formula files -> (description, api name)
_NOTATION: dict[str, tuple[str, str]] = {
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

SYMBOLS: dict[str, sp.Symbol] = {
    name: sp.Symbol(name, positive=True, integer=(name not in ("beta",))) for name in _NOTATION
}
# Pretty names used when printing (beta -> β)
SYMBOLS["beta"] = sp.Symbol("beta", positive=True)

DESCRIPTIONS: dict[str, str] = {name: desc for name, (desc, _) in _NOTATION.items()}
API_NAMES: dict[str, str] = {name: api for name, (_, api) in _NOTATION.items()}

# The order in which compiled numeric functions take their arguments.
ARG_ORDER: tuple[str, ...] = tuple(_NOTATION)
