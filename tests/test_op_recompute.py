"""torchtitan's per-op selective activation checkpoint (--recompute op), written as its derivation from the code:

- pytorch/torchtitan @ 157a12c5 torchtitan/parallelisms/parallelize_llama.py L35-L71: each TransformerBlock runs under
  PyTorch's non-reentrant checkpoint with a caching policy that keeps the outputs of aten.mm, SDPA's flash and
  efficient kernels and the reduce-scatter, except the mms whose count in the block (and pass) is even; every other op
  is re-run in the backward;
- torchtitan/models/llama/model.py L187, L204-209, L248 @ 157a12c5: the block's mms in order are wq, wk, wv (1-3),
  wo (4), w1, w3, w2 (5-7) around one F.scaled_dot_product_attention.

So per layer and token the step keeps the layer input (the checkpoint's) and the cached outputs, Q (a d_h), V
(a_kv d_h), SDPA's O (a d_h) and its fp32 logsumexp (a), w1's (f) and w2's (h), all 16-bit but the logsumexp; and the
backward re-runs wk, wo and w3: 2 h (a_kv d_h + a d_h + f) FLOPs, besides the element-wise ops. Outside the layers
nothing changes, so the differences to the full and the no-recompute plans are these terms alone.
"""

from __future__ import annotations

import json

import pytest

from btacalc.catalogue.selection import Selection
from btacalc.catalogue.terms import load_catalogue
from btacalc.config.execution import ExecutionRequest
from btacalc.config.presets import load_preset
from btacalc.paths import preset_names

LAYOUT = ("-m llama-3-8b --hw a100-80gb --devices 64 --fsdp --fsdp-impl fsdp2 --seq 8192 --micro-batch 1 "
          "--global-batch 64").split()
BASE = [*LAYOUT, "--attention", "flash"]
TORCHTITAN = ExecutionRequest(devices=64, attention="flash", recompute="op", fsdp=True, fsdp_impl="fsdp2")


def _plan(cli, *extra: str) -> dict:
    code, out, err = cli("plan", *BASE, *extra, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_step_keeps_the_checkpoint_and_the_cached_outputs(cli):
    spec = load_preset("llama-3-8b")
    h, a, a_kv, f, L = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.ffn_size, spec.num_layers
    d_h = h // a
    tokens = 8192 * 1
    full, op = _plan(cli, "--recompute", "full"), _plan(cli, "--recompute", "op")
    cached = 2 * (a * d_h + a_kv * d_h + a * d_h + f + h) + 4 * a  # Q, V, O, w1, w2 in bf16; logsumexp fp32
    expected = L * tokens * cached  # the layer input is the checkpoint's under both policies
    got = op["memory_bytes"]["stored_activations"] - full["memory_bytes"]["stored_activations"]
    assert got == pytest.approx(expected, rel=1e-12)
    assert cached == 55_424  # 2 x (4096 + 1024 + 4096 + 14336 + 4096) + 4 x 32 (Llama 3 8B)


def test_the_backward_re_runs_wk_wo_and_w3(cli):
    spec = load_preset("llama-3-8b")
    h, a, a_kv, f, L = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.ffn_size, spec.num_layers
    d_h = h // a
    none, op = _plan(cli, "--recompute", "none"), _plan(cli, "--recompute", "op")
    # (under both, FlashAttention's backward recomputes its scores in the kernel: the same FLOPs)
    extra = op["flops_per_step"]["recompute"] - none["flops_per_step"]["recompute"]
    assert extra == pytest.approx(L * 8192 * 2 * h * (a_kv * d_h + a * d_h + f), rel=1e-12)
    assert none["throughput"]["step_time_s"] < op["throughput"]["step_time_s"] \
        < _plan(cli, "--recompute", "full")["throughput"]["step_time_s"]


def test_the_attention_core_is_not_re_run():
    features = {**_llama_features(), "attention": "flash"}
    sel = Selection.make(features, "op")
    core = [p for p in sel.phases("layer") if p.core]
    assert core and not any(sel.reruns(p) for p in core)
    assert all(sel.reruns(p) for p in sel.phases("layer") if not p.core)


def _llama_features() -> dict:
    from btacalc.config.resolution import resolve_execution
    from btacalc.config.hardware import resolve_hardware

    spec = load_preset("llama-3-8b")
    hw = resolve_hardware("a100-80gb")
    ex = resolve_execution(TORCHTITAN.with_changes(devices=8), spec, hw)
    return {**spec.features(), **ex.run.features(), "sequence_parallel": False, "master": "fp32", "dtensor_tp": False}


def test_every_model_the_policy_accepts_has_a_share_for_each_layer_gemm():
    """The refusals (config/resolution.py _OP_REFUSALS) and the catalogue's op_recompute shares agree: a model the
    policy plans runs no layer GEMM without a derived share (outside the attention core, which it caches whole)."""
    from btacalc.config.resolution import resolve_execution
    from btacalc.config.hardware import resolve_hardware
    from btacalc.errors import BtacalcError

    hw = resolve_hardware("a100-80gb")
    accepted = []
    for name in preset_names():
        spec = load_preset(name)
        try:
            ex = resolve_execution(TORCHTITAN.with_changes(devices=8), spec, hw)
        except BtacalcError:
            continue
        accepted.append(name)
        features = {**spec.features(), **ex.run.features(), "sequence_parallel": False, "master": "fp32", "dtensor_tp": False}
        for phase in load_catalogue():
            if phase.scope == "layer" and phase.applies(features) and not phase.core:
                missing = [g.name for g in phase.gemm if g.applies(features) and g.op_recompute is None]
                assert not missing, (name, phase.name, missing)
    assert {"llama-3-8b", "llama-2-13b", "llama-2-70b"} <= set(accepted)


@pytest.mark.parametrize("extra, says", [
    (["--pp", "2"], "data parallel over every rank"),
    (["--attention-kernel", "triton-flash"], "not the output of --attention-kernel triton-flash"),
    (["--attention-kernel", "flash-attn-2-varlen"], "not the output of --attention-kernel flash-attn-2-varlen"),
    (["--attention-kernel", "cudnn-9-13"], "not the output of --attention-kernel cudnn-9-13"),
    (["--attention", "eager"], "{attention} flash"),
    (["--precision", "fp8", "--hw", "h100"], "16-bit linears"),
    (["--checkpoint-early-stop"], "needs --recompute full"),
    (["--recompute-layers", "4"], "needs --recompute full"),
])
def test_refused_where_the_derivation_does_not_hold(cli, extra, says):
    attention = [] if "--attention" in extra else ["--attention", "flash"]
    layout = [w for w in LAYOUT if w not in ("--hw", "a100-80gb")] if "--hw" in extra else LAYOUT
    code, out, err = cli("plan", *layout, *attention, "--recompute", "op", *extra)
    assert code == 2 and "Traceback" not in err
    assert says.replace("{attention}", "--attention") in err


@pytest.mark.parametrize("model, says", [
    ("qwen3-30b-a3b", "not the Llama block"),  # MoE
    ("gpt3-175b", "not the Llama block"),  # GeLU MLP, biases
    ("gpt-j-6b", "not the Llama block"),  # parallel block
    ("qwen2.5-7b", "PyTorch runs them as addmm"),  # the QKV biases of a Llama-shaped block
])
def test_refused_for_another_block(cli, model, says):
    code, out, err = cli("plan", "-m", model, "--hw", "h100", "--devices", "8", "--attention", "flash", "--fsdp",
                         "--fsdp-impl", "fsdp2", "--recompute", "op")
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("extra", [[], ["--fsdp"], ["--fsdp", "--fsdp-impl", "fsdp2", "--cuda-graph-scope", "attn"]])
def test_only_pytorch_s_own_modules(cli, extra):
    """review32: under btacalc's Megatron plans (TransformerEngine's modules) or CUDA graphs the policy sees no mm."""
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--attention", "flash",
                         "--recompute", "op", *extra)
    assert code == 2 and "needs PyTorch's own modules" in err, err


def test_not_on_a_wafer_and_not_in_a_megatron_launch(cli):
    code, _, err = cli("plan", "-m", "llama-3-8b", "--hw", "wse3", "--recompute", "op")
    assert code == 2 and "wafer-scale" in err
    code, _, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--attention", "flash",
                       "--recompute", "op", "--emit", "megatron")
    assert code == 2 and "--recompute op is torchtitan's" in err


def test_the_layout_search_keeps_pp_and_cp_at_one(cli):
    # (FSDP2 beside TP is torchtitan's 2-D run: tests/test_fsdp2_tp.py; PP and CP stay refused under PyTorch's FSDP)
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--seq", "4096",
                         "--global-batch", "64", "--attention", "flash", "--fsdp", "--fsdp-impl", "fsdp2",
                         "--recompute", "op", "--search", "--json")
    assert code == 0, err
    rows = json.loads(out)["ranking"]
    assert rows and all(r["pipeline_parallel"] == 1 and r["context_parallel"] == 1 and r["recompute"] == "op"
                        for r in rows)


@pytest.mark.parametrize("recompute, micro_batch, fits", [("op", 1, True), ("op", 2, False), ("full", 2, True)])
def test_llama_2_70b_fits_where_torchtitan_ran_it(cli, recompute, micro_batch, fits):
    """torchtitan docs/performance.md @ 157a12c5 L31-L32 and footnote 1 (L41): on 64 A100 80GB, Llama 2 70B ran
    selective op checkpointing at local batch 1 because batch 2 ran out of memory, and full checkpointing at 2."""
    code, out, err = cli("plan", "-m", "llama-2-70b", "--hw", "a100-80gb", "--devices", "64", "--fsdp", "--fsdp-impl",
                         "fsdp2", "--seq", "4096", "--micro-batch", str(micro_batch), "--global-batch",
                         str(64 * micro_batch), "--attention", "flash", "--attention-kernel", "flash-attn-2",
                         "--eager-kernels", "--loss", "torch_fp32_held", "--recompute", recompute, "--json")
    assert code == (0 if fits else 1), err


@pytest.mark.parametrize("accounting", ["ideal", "pytorch"])
def test_the_re_run_takes_the_cached_tensors_it_reads_from_the_cache(cli, accounting):
    """review32: the buffer one layer's backward rebuilds is a full recompute's less what the cache hands back of the
    tensors the backward reads: SDPA's O (a d_v) and fp32 logsumexp (a), and w1's output, the gate SiLU saves (f)."""
    spec = load_preset("llama-3-8b")
    a, f, d_v = spec.num_heads, spec.ffn_size, spec.hidden_size // spec.num_heads
    full = _plan(cli, "--recompute", "full", "--accounting", accounting)
    op = _plan(cli, "--recompute", "op", "--accounting", accounting)
    handed_back = 8192 * (2 * a * d_v + 4 * a + 2 * f)
    assert full["memory_bytes"]["recompute_buffer"] - op["memory_bytes"]["recompute_buffer"] == handed_back


def test_each_gemm_s_share_is_the_policy_on_the_block_s_mm_order():
    """The catalogue's op_recompute shares, derived from the order: torchtitan's block runs wq, wk, wv, wo, w1, w3, w2
    (model.py L187, L209, L248 @ 157a12c5) and the policy re-runs the mms whose count is even (L49-L57); btacalc fuses
    wq, wk, wv into W_qkv ((a + 2 a_kv) d_h columns) and w1, w3 into W_gate_up (2f)."""
    import sympy as sp

    from btacalc.catalogue.symbols import SYMBOLS

    order = ["wq", "wk", "wv", "wo", "w1", "w3", "w2"]
    re_run = {mm for count, mm in enumerate(order, start=1) if count % 2 == 0}
    a, a_kv, d_h, f, h = (SYMBOLS[k] for k in ("a", "a_kv", "d_h", "f", "h"))
    width = {"wq": a * d_h, "wk": a_kv * d_h, "wv": a_kv * d_h, "wo": h, "w1": f, "w3": f, "w2": h}
    fused = {"W_qkv": ["wq", "wk", "wv"], "W_o": ["wo"], "W_gate_up": ["w1", "w3"], "W_down": ["w2"]}
    gemms = {g.name: g for p in load_catalogue() for g in p.gemm if g.name in fused}
    for name, parts in fused.items():
        expected = sum(width[m] for m in parts if m in re_run) / sum(width[m] for m in parts)
        got = sp.sympify(gemms[name].op_recompute, locals=SYMBOLS)
        assert sp.simplify(got - expected) == 0, (name, got, expected)


# The op policy's save list at 157a12c5 names PyTorch's own SDPA kernels only; each kernel btacalc knows says in
# attention_kernels.toml whether its output is one of them. Under PyTorch's FSDP (the only layout --recompute op
# plans) two of btacalc's kernels stand for an SDPA kernel on the list: `default`, which such a plan runs as SDPA's
# flash backend (PyTorch made its cuDNN backend opt-in: pytorch PR 138522, the torchtitan rows' notes), and
# `flash-attn-2`, the FlashAttention-2 code PyTorch vendors as that backend (review20: the summaries, written for
# Megatron plans, do not say this). The set is written here, not read from the flag, so a kernel given the wrong
# flag fails.
SDPA_KERNELS = {"default", "flash-attn-2"}


def test_the_save_list_is_data_per_kernel():
    from btacalc.config.attention_kernels import attention_kernels
    table = attention_kernels()
    assert {name for name, k in table.items() if k.op_policy_saved} == SDPA_KERNELS
    for name, kernel in table.items():
        assert kernel.op_policy_saved or "157a12c5" in kernel.op_policy_source, name


def test_a_kernel_off_the_save_list_needs_its_source():
    from pydantic import ValidationError

    from btacalc.config.attention_kernels import AttentionKernel
    with pytest.raises(ValidationError, match="op_policy_source"):
        AttentionKernel(name="x", summary="x", source="somewhere long enough", op_policy_saved=False)


@pytest.mark.parametrize("kernel", sorted(SDPA_KERNELS - {"default"}))
def test_an_sdpa_kernel_is_planned_under_the_policy(cli, kernel):
    code, out, err = cli("plan", *BASE, "--recompute", "op", "--attention-kernel", kernel, "--json")
    assert code == 0, err
