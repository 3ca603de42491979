"""TransformerEngine's fused cross-entropy (Megatron --cross-entropy-loss-fusion --cross-entropy-fusion-impl te),
the catalogue's loss variant te_fused, tested as its derivation.

The expectations below are written from TransformerEngine @ v2.3 (5de3e148), not from formulas/head.toml:
- transformer_engine/pytorch/triton/cross_entropy.py L297-L317: the second kernel stores the gradient over its
  [s*b, V/t] input, in the input's dtype, and the input is returned; pytorch/cross_entropy.py L46 saves it for
  backward. So the loss keeps the 16-bit logits (beta bytes each) and no fp32 copy (Megatron's own cross-entropy
  keeps 4 bytes per logit, its fp32 softmax).
- L261 loss_1d (s*b fp32), L264 m_d_X_y (3 s*b fp32), L290-L293 the all-gathered m_d_X_y (3 s*b t fp32).
- HBM: online_softmax_kernel reads each logit (L70-L78); cross_entropy_kernel reads it and writes the gradient
  (L162-L171); backward, element_mul_kernel reads and writes it once (L238-L241).
"""

from __future__ import annotations

import io
import json
import sys

import pytest
import sympy as sp

from btacalc.catalogue.selection import Selection
from btacalc.catalogue.symbols import SYMBOLS
from btacalc.config.execution import BatchLimits, ExecutionRequest
from btacalc.config.hardware import resolve_hardware
from btacalc.config.megatron_codec import ROWS, decode, encode, render_flags
from btacalc.config.presets import resolve_model
from btacalc.errors import BtacalcError
from btacalc.planning.measured import express, load_runs
from btacalc.planning.plan import make_plan

from test_symbolic import QWEN3_MOE

s, b, G, V, beta, t = (SYMBOLS[n] for n in ("s", "b", "G", "V", "beta", "t"))


def _phase(loss: str, name: str, quantity: str) -> sp.Expr:
    sel = Selection.make({**QWEN3_MOE, "loss": loss, "sequence_parallel": True}, "none")
    phase = next(p for p in sel.phases("model") if p.name == name)
    return sel.expression(phase, quantity)


def test_te_fused_keeps_the_16_bit_logits_and_no_fp32_copy():
    # per rank: the [s*b, V/t] logits of each of the G tiles, beta bytes each (in place: they become the gradient)
    assert sp.simplify(_phase("te_fused", "loss", "stored") - beta * s * G * b * V / t) == 0
    # Megatron's vocab-parallel cross-entropy keeps 4 bytes per logit: the TE kernel keeps beta/4 of it
    assert sp.simplify(_phase("vocab_parallel", "loss", "stored") - 4 * s * G * b * V / t) == 0
    # the per-token statistics: loss_1d (1), m/d/X_y (3), gathered m/d/X_y (3t), fp32, for all s*b tokens
    assert sp.simplify(_phase("te_fused", "loss", "transient") - 4 * s * b * (1 + 3 + 3 * t)) == 0
    # no 16-bit logits beside an fp32 copy, no cast of an fp32 gradient: the output layer's tile adds nothing
    assert _phase("te_fused", "lm_head", "transient") == 0
    assert sp.simplify(_phase("vocab_parallel", "lm_head", "transient") - beta * s * b * V / t) == 0


def test_te_fused_hbm_passes():
    # forward: read (online softmax) + read and write (gradient in place) = 3 passes over beta-byte logits
    assert sp.simplify(_phase("te_fused", "loss", "bytes_moved") - 3 * beta * s * G * b * V / t) == 0
    # backward: one read and one write of the saved gradient (scaled by the per-token output gradient)
    assert sp.simplify(_phase("te_fused", "loss", "bytes_moved_bwd") - 2 * beta * s * G * b * V / t) == 0
    # the output layer writes 16-bit logits, not fp32 ones: (4 - beta) bytes per logit less than the others
    diff = _phase("vocab_parallel", "lm_head", "bytes_moved") - _phase("te_fused", "lm_head", "bytes_moved")
    assert sp.simplify(diff - G * (4 - beta) * s * b * V / t) == 0


def test_te_fused_plan_bytes_for_a_small_shape():
    """Llama-3-8B, TP 2, s = 4,096, one sequence per micro-batch: V = 128,256 = 128 x 1,002 is a multiple of
    128 x TP, so each rank holds 64,128 vocabulary columns of 4,096 tokens."""
    def rows(loss: str) -> dict:
        report = make_plan(resolve_model("llama-3-8b"), resolve_hardware("h100"), ExecutionRequest(
            seq_len=4096, devices=8, tensor_parallel=2, recompute="full", loss=loss,  # type: ignore[arg-type]
            limits=BatchLimits(global_batch=4, micro_batch=1)))
        return {r.name: r for r in report.outside_layers}

    te, native = rows("te_fused"), rows("vocab_parallel")
    logits_per_rank = 4096 * (128_256 // 2)
    assert te["loss"].stored_activation_bytes == 2 * logits_per_rank
    assert native["loss"].stored_activation_bytes == 4 * logits_per_rank
    assert te["loss"].transient_bytes == 4 * 4096 * (1 + 3 + 3 * 2)
    assert te["lm_head"].transient_bytes == 0 and native["lm_head"].transient_bytes == 2 * logits_per_rank


def test_the_te_runs_are_expressed_with_the_te_kernel():
    runs = [r for r in load_runs() if r.recipe is not None and r.recipe.cross_entropy_fusion_impl == "te"
            and r.recipe.cross_entropy_loss_fusion]
    # the seven NeMo/dgxc rows, the four llama-3-8b-b200-8-*-nemo2509-vuiseng9 (NeMo 25.09) and the ten Nemotron-4
    # rows of task runs7 (the same dgxc recipe: two GB200 BF16, eight FP8), and the two MLPerf v5.1 Llama 3.1 8B GB200
    # rows of task mlperf (config_common_8b.sh CE_FUSION_IMPL=te, custom.yaml cross_entropy_loss_fusion default True),
    # and the seven MLPerf v5.1 Llama 3.1 8B B200 rows of task mlperf2 (six University of Florida, one Oracle: the same
    # config_common_8b.sh line): 23 + 7; and (the twelfth session's audit) the 38 Megatron-Bridge rows: the provider turns
    # the fusion on and every release's performance harness sets impl te after the recipe (docs/story.md); and the
    # three Llama 3 70B SFT rows of task newruns (26.06: scripts/performance/utils/overrides.py L69-70 @ v0.5.0); and
    # the seven Megatron-LM moe_recipes rows (their ARGS: cross_entropy_loss_fusion, cross_entropy_fusion_impl te)
    # and the seven runs36 rows whose configurations set it (Megatron-MoE-ModelZoo's Qwen3-235B yaml after 8017e112:
    # four H100 long-context, the GB200 128k and the 2026-03 H100 best-practice rows; the DeepSeek-V3 GB200 guide);
    # and the seven Megatron-Bridge rows of task runs37 (other releases: overrides.py L64 @ v0.3.0, L66 @ v0.4.x);
    # and three of task runs39: Bridge 25.11's DeepSeek-V3 (v0.2.0's harness sets impl te), Megatron-LM's DeepSeek-V3
    # moe_recipe (its ARGS), NeMo 25.04's Mixtral 8x22B GB200 (NeMo v2.3.0's script default)
    assert len(runs) == 23 + 7 + 38 + 3 + 7 + 7 + 7 + 3
    for run in runs:
        request, reason = express(run)
        assert reason == "" and request is not None and request.loss == "te_fused", run.id
    native = next(r for r in load_runs() if r.recipe is not None and r.recipe.cross_entropy_fusion_impl == "native")
    request, _ = express(native)
    assert request is not None and request.loss == "native_fused"  # cenative: the compiled steps (test_cenative.py)


def test_the_codec_writes_and_reads_the_two_flags():
    row = tuple(r for r in ROWS if r.name == "cross-entropy")
    flags = " ".join(render_flags(encode({"run.loss": "te_fused"}, row)))
    assert "--cross-entropy-loss-fusion" in flags and "--cross-entropy-fusion-impl te" in flags
    assert encode({"run.loss": "vocab_parallel"}, row) == {}  # Megatron's default cross-entropy
    te = {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}
    assert decode(te, row)[0]["run.loss"] == "te_fused"
    assert decode({"cross_entropy_fusion_impl": "te"}, row)[0]["run.loss"] == "vocab_parallel"  # the fusion is off
    assert decode({"cross_entropy_loss_fusion": True}, row)[0]["run.loss"] == "native_fused"  # native (cenative)
    with pytest.raises(BtacalcError, match="native and te"):
        decode({"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "liger"}, row)


PLAN = ("--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2", "--global-batch", "64",
        "--micro-batch", "1", "--recompute", "full")


def test_emit_and_read_back(cli, monkeypatch):
    """review35: Megatron-LM refuses --cross-entropy-fusion-impl te since 168cb15 (arguments.py L1697-1702 @ d98e8a64),
    so --emit megatron refuses the loss in one line; Megatron-Bridge (whose DeepSeek-V3 bridge sets it) writes it, and
    the overrides read back give the same plan."""
    code, text, err = cli("plan", *PLAN, "--loss", "te_fused", "--emit", "megatron")
    assert code == 2 and text == "" and len(err.strip().splitlines()) == 1 and "168cb15" in err, err
    code, text, err = cli("plan", *PLAN, "--loss", "te_fused", "--emit", "bridge")
    assert code == 0, err
    assert "model.cross_entropy_loss_fusion=True" in text and "model.cross_entropy_fusion_impl=te" in text
    code, out, err = cli("plan", *PLAN, "--loss", "te_fused", "--json")
    original = json.loads(out)
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-bridge", "-", "--json")
    assert code == 0, err
    back = json.loads(out)
    assert back["inputs"]["loss"] == "te_fused"
    assert back["memory_bytes"] == original["memory_bytes"]
    assert back["throughput"]["step_time_s"] == pytest.approx(original["throughput"]["step_time_s"], rel=1e-12)


def test_bad_loss_and_bad_impl_are_one_line_errors(cli, monkeypatch):
    code, out, err = cli("plan", *PLAN, "--loss", "te")
    assert code == 2 and out == ""
    monkeypatch.setattr(sys, "stdin", io.StringIO(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 "
        "--micro-batch-size 1 --bf16 --vocab-size 1024 --cross-entropy-loss-fusion --cross-entropy-fusion-impl liger"))
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", "-")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
