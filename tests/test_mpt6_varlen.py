"""Task mpt6: llm-foundry's flash path, the attention of the large-scale H100 MPT rows (attention_kernel
flash-attn-2-varlen).

llm-foundry @ 5e85bd62d's large-scale sweep (scripts/train/benchmarking/sweep.py L56-60, L77-81) runs MPT-7B and
MPT-70B with `--attn_impl flash` and flash-attn 2.4.2 (submit_benchmarks.py L402 `.[gpu-flash2]`, setup.py L100-103).
`flash_attn_fn` (llmfoundry/models/layers/attention.py L216-368) wraps FlashAttention-2's varlen kernel in
flash_attn.bert_padding (v2.4.2): with a mask of ones, q, k and v are each gathered (IndexFirstAxis.forward,
torch.gather: read beta, write beta per element) and the output scattered back (IndexPutFirstAxis.forward:
torch.zeros writes beta, index_put reads and writes beta); backward, the output gradient is gathered (2 beta) and
dq, dk, dv each scattered into zeros (3 beta). Per token and layer, MHA (a_kv = a, a d_h = h):

    forward   2 beta (h + h + h) + 3 beta h = 9 beta h
    backward  2 beta h + 3 beta (h + h + h) = 11 beta h

each re-run repeating the forward. The kernel's FLOPs run at FlashAttention-2's H100 rate (the flash-attn-2 entry's
figures: the same kernels behind another entry point), and the Triton wrapper's fp32 dq buffer goes. The expected
values are that arithmetic on mpt-7b's shape (d_model 4096, 32 layers) over the H100's streaming bandwidth (3.35 TB/s
datasheet x 0.870, RRZE-HPC gpu-stream), not btacalc's catalogue."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from btacalc.config.attention_kernels import attention_kernels

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "btacalc" / "data" / "measured_runs.json"
ENV = {"PYTHONPATH": str(ROOT), "PATH": ""}
H100_STREAM = 3.35e12 * 0.870
BETA = 2
H, TOKENS = 4096, 6 * 2048  # mpt-7b-h100-512: micro-batch 6 x 2048 tokens


def _plan(kernel: str, recompute: str = "none") -> dict:
    args = [sys.executable, "-m", "btacalc", "plan", "--model", "mpt-7b", "--hw", "h100", "--devices", "512",
            "--seq", "2048", "--global-batch", "3072", "--micro-batch", "6", "--json", "--fsdp", "--fsdp-impl",
            "torch", "--attention", "flash", "--recompute", recompute, "--eager-kernels", "--attention-kernel", kernel]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def _phase_s(plan: dict) -> dict[str, float]:
    return {p["name"]: p["time_s"] for p in plan["phases"]}


def test_one_mpt_7b_layer_by_hand():
    kernel = _phase_s(_plan("flash-attn-2"))
    wrapped = _phase_s(_plan("flash-attn-2-varlen"))
    per_token = (9 + 11) * BETA * H
    assert wrapped["qkv_proj"] - kernel["qkv_proj"] == pytest.approx(per_token * TOKENS / H100_STREAM, rel=1e-9)
    for name in set(kernel) - {"qkv_proj"}:
        assert wrapped[name] == kernel[name], name


def test_a_full_re_run_repeats_the_forward_gathers():
    kernel = _phase_s(_plan("flash-attn-2", "full"))
    wrapped = _phase_s(_plan("flash-attn-2-varlen", "full"))
    per_token = (2 * 9 + 11) * BETA * H
    assert wrapped["qkv_proj"] - kernel["qkv_proj"] == pytest.approx(per_token * TOKENS / H100_STREAM, rel=1e-9)


def test_the_wrapper_runs_flash_attention_2s_rates():
    kernels = attention_kernels()
    for cc in (8.0, 9.0):
        for s in (1024, 2048, 8192):
            assert kernels["flash-attn-2-varlen"].fraction_of_peak(cc, s) == kernels["flash-attn-2"].fraction_of_peak(cc, s)
    # 2,048 tokens on an H100: the FlashAttention-3 paper's FlashAttention-2 bars, 0.273 of the peak, not the Triton
    # kernel's 0.175
    assert kernels["flash-attn-2-varlen"].fraction_of_peak(9.0, 2048) == pytest.approx(0.273)
    assert kernels["triton-flash"].fraction_of_peak(9.0, 2048) == pytest.approx(0.175)


def test_a_kernel_may_not_have_rates_of_its_own_and_anothers():
    from btacalc.config.attention_kernels import AttentionKernel

    rate = attention_kernels()["flash-attn-2"].rate
    assert rate
    with pytest.raises(ValueError, match="rates_of"):
        AttentionKernel(name="x", summary="x", source="a source text", rate=rate, rates_of="flash-attn-2")


def test_the_large_scale_rows_that_ran_the_flash_path():
    """sweep.py: flash for 7b and 70b, triton for 13b and 30b; the October table's rows (sweep.sh, attn_impl's default
    triton) keep the Triton kernel."""
    runs = {r["id"]: r for r in json.loads(RUNS.read_text())["runs"]}
    varlen = {i for i, r in runs.items() if (r.get("recipe") or {}).get("attention_kernel") == "flash-attn-2-varlen"}
    assert varlen == {"mpt-7b-h100-512-bf16-llmfoundry", "mpt-70b-h100-128-bf16-llmfoundry",
                      "mpt-70b-h100-256-bf16-llmfoundry", "mpt-70b-h100-512-bf16-llmfoundry"}
    assert runs["mpt-30b-h100-256-bf16-llmfoundry"]["recipe"]["attention_kernel"] == "triton-flash"
    for i in varlen:
        assert "sweep.py" in runs[i]["recipe"]["source"]


def _llama_plan(kernel: str) -> dict:
    """llama-3-8b: GQA, a = 32 query heads, a_kv = 8 key/value heads of d_h = 128 (h = 4096), one GPU's micro-batch
    of 2 x 2048 tokens."""
    args = [sys.executable, "-m", "btacalc", "plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8",
            "--seq", "2048", "--global-batch", "16", "--micro-batch", "2", "--json", "--fsdp", "--fsdp-impl", "torch",
            "--attention", "flash", "--recompute", "none", "--eager-kernels", "--attention-kernel", kernel]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def test_grouped_query_attention_by_hand():
    """review19: the MHA case cannot tell a from a_kv. With GQA the gathers of k and v are a_kv d_h wide (FA2 takes
    them unrepeated: llm-foundry attention.py L671 should_repeat_kv_for_gqa = not is_flash_v2_installed()):
    forward 2 beta (a + 2 a_kv) d_h + 3 beta a d_h = (5 x 32 + 4 x 8) beta d_h = 192 beta d_h,
    backward 2 beta a d_h + 3 beta (a + 2 a_kv) d_h = (5 x 32 + 6 x 8) beta d_h = 208 beta d_h per token."""
    kernel = _phase_s(_llama_plan("flash-attn-2"))
    wrapped = _phase_s(_llama_plan("flash-attn-2-varlen"))
    per_token = (192 + 208) * BETA * 128
    assert wrapped["qkv_proj"] - kernel["qkv_proj"] == pytest.approx(per_token * 2 * 2048 / H100_STREAM, rel=1e-9)


def test_the_output_is_kept_twice():
    """review19: FlashAttention-2's varlen function keeps its unpadded output (flash_attn_interface.py L591-593) and
    pad_input writes the padded copy the output projection keeps: one more beta s b a d_v per layer."""
    kernel, wrapped = _llama_plan("flash-attn-2"), _llama_plan("flash-attn-2-varlen")
    per_layer = BETA * 2 * 2048 * 32 * 128  # beta x b s x a d_v
    moved = {p["name"]: w["stored_activation_bytes"] - p["stored_activation_bytes"]
             for p, w in zip(kernel["phases"], wrapped["phases"])}
    assert {k: v for k, v in moved.items() if v} == {"attn_out_proj": per_layer}
    layers = 32
    assert (wrapped["memory_bytes"]["stored_activations"] - kernel["memory_bytes"]["stored_activations"]
            == per_layer * layers)


def test_no_megatron_launch_runs_llm_foundrys_attention(cli):
    for kernel in ("triton-flash", "flash-attn-2-varlen"):
        for emit in ("megatron", "bridge"):
            code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--tp", "2",
                                 "--attention-kernel", kernel, "--emit", emit)
            assert code == 2 and out == "" and "llm-foundry's own attention" in err, (kernel, emit, err)
    code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--tp", "2",
                         "--attention-kernel", "flash-attn-2", "--emit", "megatron")
    assert code == 0 and "--attention-backend flash" in out


@pytest.mark.parametrize("kernel", ["flash-attn-2", "flash-attn-2-varlen", "triton-flash"])
def test_a_kernel_without_a_learnable_softmax_refuses_attention_sinks(cli, kernel):
    """TransformerEngine @ d0067d0 utils.py L1113-1124 runs a learnable softmax on FusedAttention or unfused attention
    only; FlashAttention-2's varlen function and llm-foundry's Triton kernel take no such term."""
    code, out, err = cli("plan", "--model", "gpt-oss-20b", "--hw", "h100", "--devices", "8", "--attention-kernel",
                         kernel)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no learnable softmax" in err, err
    code, out, err = cli("plan", "--model", "gpt-oss-20b", "--hw", "h100", "--devices", "8")
    assert code in (0, 1), err  # the default kernel (cuDNN's FusedAttention) runs them


def test_rates_of_needs_a_kernel_with_rates(monkeypatch):
    from btacalc.config import attention_kernels as ak
    from btacalc.errors import DataError

    table = {"base": ak.AttentionKernel(name="base", summary="no rates", source="a source text"),
             "wrapper": ak.AttentionKernel(name="wrapper", summary="x", source="a source text", rates_of="base")}
    monkeypatch.setattr(ak, "load_named_tables", lambda *a: dict(table))
    ak.attention_kernels.cache_clear()
    try:
        with pytest.raises(DataError, match="rates_of 'base'"):
            ak.attention_kernels()
    finally:
        monkeypatch.undo()
        ak.attention_kernels.cache_clear()
