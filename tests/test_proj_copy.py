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
    """On Blackwell --te-version decides per-tensor FP8's transposes and the copy. The 2.5 plan's transposes are
    2.5's too, but on Blackwell every 2.x release writes none for a local cast
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


@pytest.mark.parametrize("precision, te, per_element", [("fp8-current", "2.5", 1), ("fp8-current", "2.6.0.dev0", 0),
                                                        ("fp8-blockwise", "2.5", 1 + 4 / 128),
                                                        ("fp8-blockwise", "2.6", 0)])
def test_hopper_takes_the_te_release_where_it_decides_the_copy(cli, precision, te, per_element):
    """--te-version on an H100 was refused for every recipe (Hopper's FP8 GEMMs are TN-only, so no release changes
    per-tensor FP8's transposes there), yet the release decides the projection's copy on every GPU (attention.py
    L428-444 tests the TE version, not the chip): a Hopper user on NeMo 25.04's TE 2.2 could not state it. The copy
    is 1 byte per O element, plus under blockwise scaling one fp32 scale per 1 x 128 activation block (DeepSeek-V3's
    recipe, TE Float8BlockScaling); nothing else in the plan follows the release on Hopper."""
    old = _stored(cli, "h100", precision, "none", "--te-version", te)
    new = _stored(cli, "h100", precision, "none")
    assert old - new == pytest.approx(per_element * O_ELEMENTS, rel=1e-9)


@pytest.mark.parametrize("precision, te, copy, extra", [("mxfp8", "2.5", True, ()), ("mxfp8", "2.6.0.dev0", False, ()),
                                                        ("nvfp4", "2.7.0.dev0", False, ("--no-rht-cast-fusion",)),
                                                        ("nvfp4", "2.14", False, ())])
def test_block_scaled_recipes_take_the_te_release(cli, precision, te, copy, extra):
    """MXFP8 from TE 2.6.0.dev0 and NVFP4 from 2.7.0.dev0 (precision.toml proj_saves_original_input_since_te, from
    attention.py L428-444): before, the projection's copy is 1 byte (MXFP8) per O element plus its E8M0 scale, one per
    32 elements; the expected bytes are that arithmetic. NVFP4 has no TE before 2.7.0.dev0 (hostile42: Megatron-Bridge
    refuses fp4 there, mixed_precision.py L110-111; TE 2.6 was planned with the copy), so it never keeps the copy; its
    TE before 2.14 runs the unfused RHT casts, which the plan must be told (--no-rht-cast-fusion)."""
    per_element = {"mxfp8": 1 + 1 / 32, "nvfp4": 0.5 + 1 / 16}[precision]
    old = _stored(cli, "b200", precision, "none", "--te-version", te, *extra)
    new = _stored(cli, "b200", precision, "none")
    assert old - new == pytest.approx(per_element * O_ELEMENTS if copy else 0, rel=1e-9)


@pytest.mark.parametrize("hw, precision, says", [("h100", "fp8", "h100 has 9.0"),
                                                 ("h100", "bf16", "bf16 runs the same"),
                                                 ("b200", "bf16", "bf16 runs the same")])
def test_te_version_is_refused_where_no_release_changes_the_plan(cli, hw, precision, says):
    """Delayed-scaling FP8 on Hopper (transposes under every release, the copy under every release) and 16-bit
    training (no quantised tensor at all): an option that would change nothing is one line and exit 2."""
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", hw, "-n", "8", "--precision", precision,
                         "--te-version", "2.2")
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err, err


def test_compare_gives_the_release_to_each_row_it_changes(cli):
    """compare over H100 and B200 in fp8 (delayed) and fp8-current with --te-version: the H100 delayed row is planned
    without it (no release changes it); the other three rows take it and their run options say so."""
    code, out, err = cli("compare", "-m", "llama-3-8b", "--hw", "h100,b200", "--devices", "8",
                         "--precision", "fp8,fp8-current", "--te-version", "2.2")
    assert code == 0, err
    took = {row for row in ("h100 x8 fp8:", "h100 x8 fp8-current:", "b200 x8 fp8:", "b200 x8 fp8-current:")
            if f"{row} run options --te-version" in out or any(
                line.startswith(row) and "--te-version" in line for line in out.splitlines())}
    assert took == {"h100 x8 fp8-current:", "b200 x8 fp8:", "b200 x8 fp8-current:"}, out
