"""Megatron's native fused cross-entropy (--cross-entropy-loss-fusion, --cross-entropy-fusion-impl native, the
default impl): the catalogue's loss variant native_fused, tested as its derivation (docs/memory.md "cenative").

Written from Megatron-LM @ d98e8a64, not from formulas/head.toml: fusions/fused_cross_entropy.py runs the same
steps as the unfused cross-entropy (tensor_parallel/cross_entropy.py: the fp32 copy of the logits L25, updated in
place and saved as the softmax L181), each under jit_fuser, which is torch.compile from torch 2.2 (core/jit.py
L16-L33). The backward step (calculate_gradients, L63-L84) updates the saved fp32 softmax with an index_put and an
in-place multiply and returns it cast to bf16. Compiled, that update is made out of place: torch 2.13's inductor
allocates a second [s*b, V/t] fp32 buffer, fills it from the softmax, updates it, writes it back and writes the
bf16 gradient (tools/compiled_ce_buffers.py prints the generated graph). So at the loss's backward a rank holds the
fp32 softmax (stored, as unfused), a second fp32 copy and the bf16 gradient: 4 more bytes per logit of one
micro-batch than the unfused loss.
"""

from __future__ import annotations

import io
import json
import math
import sys

import pytest
import sympy as sp

from btacalc.catalogue.selection import Selection
from btacalc.catalogue.symbols import SYMBOLS
from btacalc.config.hardware import resolve_hardware
from btacalc.config.megatron_codec import ROWS, decode, encode, render_flags
from btacalc.config.presets import resolve_model
from btacalc.planning.measured import express, load_runs
from btacalc.planning.plan import make_plan

from test_symbolic import QWEN3_MOE

s, b, G, V, beta, t = (SYMBOLS[n] for n in ("s", "b", "G", "V", "beta", "t"))


def _phase(loss: str, name: str, quantity: str, scope: str = "model") -> sp.Expr:
    sel = Selection.make({**QWEN3_MOE, "loss": loss, "sequence_parallel": True}, "none")
    phase = next(p for p in sel.phases(scope) if p.name == name)
    return sel.expression(phase, quantity)


def test_native_fused_holds_a_second_fp32_copy_in_the_backward():
    # the loss's working set: unfused, the bf16 gradient autograd casts the fp32 one to (beta bytes per logit of one
    # tile); compiled, also the out-of-place fp32 copy of the softmax (4 bytes per logit)
    unfused = _phase("vocab_parallel", "loss", "transient")
    assert sp.simplify(unfused - beta * s * b * V / t) == 0
    assert sp.simplify(_phase("native_fused", "loss", "transient") - unfused - 4 * s * b * V / t) == 0
    # what is kept for the backward, the HBM passes and the output layer are those of the unfused loss
    for name, quantity in (("loss", "stored"), ("loss", "bytes_moved"), ("lm_head", "transient"),
                           ("lm_head", "bytes_moved")):
        assert sp.simplify(_phase("native_fused", name, quantity) - _phase("vocab_parallel", name, quantity)) == 0


def test_the_toy_gpt_row_gains_one_fp32_copy_of_its_logits():
    """Megatron-LM's gpt3_mcore_te_tp2_pp2_cross_entropy_loss_fusion test: micro-batch 4 of 1,024 tokens, the GPT-2
    vocabulary (50,257) padded to a multiple of 128 x TP 2 = 256: 50,432, so 25,216 columns per rank. The last
    stage's working set grows by 4 x 1,024 x 4 x 25,216 B = 413,138,944 B (394.0 MiB), the 394 MiB of the 409 MiB
    the row read below its measurement before (its former memory_known_gap)."""
    run = next(r for r in load_runs() if r.id == "gpt-toy-megatron-ci-h100-8-te-tp2-pp2-cross-entropy-loss-fusion-dev")
    request, reason = express(run)
    assert reason == "" and request is not None and request.loss == "native_fused"
    model, hw = resolve_model(run.model), resolve_hardware(run.hw)
    fused = make_plan(model, hw, request).memory_stages[-1]
    unfused = make_plan(model, hw, request.with_changes(loss="vocab_parallel")).memory_stages[-1]
    assert fused.components["working_set"] - unfused.components["working_set"] == 4 * 1024 * 4 * 25_216
    assert fused.components["stored_activations"] == unfused.components["stored_activations"]
    assert fused.total - unfused.total == 413_138_944


def test_the_native_rows_are_expressed_with_the_compiled_loss():
    runs = [r for r in load_runs() if r.recipe is not None and r.recipe.cross_entropy_loss_fusion
            and r.recipe.cross_entropy_fusion_impl != "te"]
    assert runs
    for run in runs:
        request, reason = express(run)
        assert reason == "" and request is not None and request.loss == "native_fused", run.id


def test_the_codec_writes_and_reads_the_flag():
    row = tuple(r for r in ROWS if r.name == "cross-entropy")
    flags = " ".join(render_flags(encode({"run.loss": "native_fused"}, row)))
    assert "--cross-entropy-loss-fusion" in flags and "--cross-entropy-fusion-impl" not in flags  # native: the default
    assert decode({"cross_entropy_loss_fusion": True}, row)[0]["run.loss"] == "native_fused"
    assert decode({"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "native"}, row)[0]["run.loss"] \
        == "native_fused"
    assert decode({"cross_entropy_fusion_impl": "native"}, row)[0]["run.loss"] == "vocab_parallel"  # fusion off


PLAN = ("--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2", "--global-batch", "64",
        "--micro-batch", "1", "--recompute", "full")


@pytest.mark.parametrize("emit, reader", [("megatron", "--from-megatron"), ("bridge", "--from-bridge")])
def test_emit_and_read_back(cli, monkeypatch, emit, reader):
    code, text, err = cli("plan", *PLAN, "--loss", "native_fused", "--emit", emit)
    assert code == 0, err
    assert "cross-entropy-loss-fusion" in text.replace("_", "-")
    code, out, err = cli("plan", *PLAN, "--loss", "native_fused", "--json")
    original = json.loads(out)
    code, out, err = cli("plan", *PLAN, "--json")
    unfused = json.loads(out)
    # one fp32 copy of a micro-batch's logits on a rank: 4 x 4,096 x 64,128 (V = 128,256 over TP 2)
    assert original["memory_bytes"]["total"] - unfused["memory_bytes"]["total"] == 4 * 4096 * (128_256 // 2)
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code, out, err = cli("plan", "--hw", "h100", *(("--devices", "8") if emit == "bridge" else ()), reader, "-",
                         "--json")
    assert code == 0, err
    back = json.loads(out)
    assert back["inputs"]["loss"] == "native_fused" and back["memory_bytes"] == original["memory_bytes"]


@pytest.mark.slow
def test_the_compiled_gradient_step_copies_the_softmax():
    # the mechanism measured, not assumed: this machine's torch.compile (inductor, CPU) on the gradient step's three
    # operations over a 3-D [s, b, V/t] softmax allocates a second fp32 buffer of its full size beside the bf16 output
    # (on a 2-D input it updates in place: the copy comes from updating a view of the mutated 3-D input)
    import torch._dynamo.exc
    import torch._inductor.exc
    from loading import load_script
    tool = load_script("tools/compiled_ce_buffers.py")
    try:
        buffers = tool.generated_buffers()
    except (torch._dynamo.exc.BackendCompilerFailed, torch._inductor.exc.InvalidCxxCompiler,
            torch._inductor.exc.CppCompileError) as exc:  # no C++ compiler for inductor's CPU code on this machine
        pytest.skip(f"torch.compile cannot build here: {type(exc).__name__}")
    full = tool.TOKENS * tool.COLUMNS
    assert ("float32" in {d for shape, d in buffers if math.prod(shape) == full}
            and "bfloat16" in {d for shape, d in buffers if math.prod(shape) == full}), buffers
