"""The attention output projection's quantised copy of its input O (formulas/attention.toml attn_out_proj).

TransformerEngine's Linear keeps the quantised input it multiplied for its weight gradient; FlashAttention keeps its
own 16-bit O for its backward. Megatron-Core has linear_proj keep the 16-bit O instead (save_original_input) for
every FP8 recipe but delayed scaling from TE 2.6.0.dev0 and for FP4 from TE 2.7.0.dev0 (Megatron-LM @ d98e8a64
megatron/core/transformer/attention.py L428-444). So per layer and micro-batch, with O of s x a*d_v / TP elements:

- no recompute: a delayed-scaling (or older-TE) plan keeps 2 bytes (FlashAttention's O) + 1 byte (the copy) per
  element, a plan with save_original_input 2 bytes (one tensor);
- selective recompute (core_attn): the checkpoint keeps its inputs, not its output O, so FlashAttention's O goes; the
  projection then keeps 1 byte (its copy) or 2 (O itself).

The expected differences below are that arithmetic, for Llama 3 8B (L = 32, a*d_v = 4096) at TP 2, s = 4096, one
sequence: 32 x 4096 x 4096 / 2 = 268,435,456 elements.
"""

from __future__ import annotations

import json

import pytest

O_ELEMENTS = 32 * 4096 * (4096 // 2)
BASE = ("plan", "--model", "llama-3-8b", "--devices", "8", "--tp", "2", "--tiles", "1", "--tile-batch", "1", "--json")


def _stored(cli, hw: str, precision: str, recompute: str, *extra: str) -> int:
    code, out, err = cli(*BASE, "--hw", hw, "--precision", precision, "--recompute", recompute, *extra)
    assert code in (0, 1), err
    return json.loads(out)["memory_bytes"]["stored_activations"]


@pytest.mark.parametrize("recompute, extra_bytes", [("none", 1), ("selective", 1 - 2)])
def test_delayed_scaling_keeps_the_projection_copy(cli, recompute, extra_bytes):
    """Against current scaling at the pinned TE (save_original_input on): +1 byte per O element without recompute,
    -1 under core_attn recompute (1 byte of copy instead of 2 of O). Both recipes quantise every other linear input
    to 1 byte alike, so the difference is the projection's alone."""
    delayed = _stored(cli, "h100", "fp8", recompute)
    current = _stored(cli, "h100", "fp8-current", recompute)
    assert delayed - current == extra_bytes * O_ELEMENTS


@pytest.mark.parametrize("te, copy", [("2.5", True), ("2.6.0.dev0", False), ("2.20.0.dev0", False)])
def test_current_scaling_keeps_the_copy_before_te_2_6(cli, te, copy):
    """--te-version is taken where it changes per-tensor FP8's casts (Blackwell); there it also decides the copy. The
    2.5 plan's transposes are 2.5's too, but on Blackwell every 2.x release writes none for a local cast
    (te_releases.toml cast_transpose_guarded_since 2.0) and at TP 2 without sequence parallelism nothing is gathered,
    so the copy is the whole difference."""
    old = _stored(cli, "b200", "fp8-current", "none", "--te-version", te)
    new = _stored(cli, "b200", "fp8-current", "none")
    assert old - new == (O_ELEMENTS if copy else 0)


def test_nvfp4_and_mxfp8_at_the_pinned_te_keep_no_copy(cli):
    """At the pinned TE (2.20.0.dev0: after NVFP4's 2.7.0.dev0 and MXFP8's 2.6.0.dev0), both keep O itself: selective
    recompute drops only FlashAttention's logsumexp (4 bytes x a x s per layer), as in 16 bits."""
    for precision in ("nvfp4", "mxfp8"):
        none, selective = (_stored(cli, "b200", precision, r) for r in ("none", "selective"))
        assert none - selective == 4 * 32 * 4096 * 32 // 2


def test_bf16_has_no_copy(cli):
    """16-bit training: O is one tensor, FlashAttention's and the projection's, with or without recompute."""
    assert _stored(cli, "h100", "bf16", "none") - _stored(cli, "h100", "bf16", "selective") == 4 * 32 * 4096 * 32 // 2
