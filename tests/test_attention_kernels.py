"""The attention kernel's own FLOP rate (btacalc/data/attention_kernels.toml, model/gpu/costs.py
`attention_core_peak`), each tested as its derivation from the published numbers, typed here from their
sources rather than read back from the data file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from btacalc.config.attention_kernels import attention_kernel, attention_kernels
from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.problem import make_problem

ROOT = Path(__file__).resolve().parents[1]
H100_BF16_PEAK = 989e12  # FLOP/s, NVIDIA H100 SXM datasheet (dense BF16)
FA2_ON_H100 = 0.35  # Shah et al. 2024 (FlashAttention-3, arXiv 2407.08608), abstract: FlashAttention-2's H100 utilization


def _core_s(model: str, hw: str, kernel: str, seq: int = 2048, batch: int = 6) -> float:
    """The fused attention core's time of one decoder layer, one micro-batch of `batch` sequences."""
    run = RunOptions(seq_len=seq, attention="flash", gradient_bytes=4, recompute="none", attention_kernel=kernel)
    problem = make_problem(load_preset(model), resolve_hardware(hw), run, Layout(devices=8, zero_stage=3, fsdp=True))
    ev = problem.evaluate(1, batch)
    return layer_parts(problem, ev)[0].core_s


def test_triton_flash_on_h100_runs_the_core_at_half_of_flashattention_2_on_its_causal_blocks():
    """MPT-7B (h = 4096, 32 heads of 128), b = 6 sequences of s = 2048: the kernel's FLOPs on the whole
    square are the forward Q K^T and P V (2 x 2bs²h), the backward's four matmuls (8bs²h) and its
    recomputation of Q K^T (2bs²h), 14bs²h. It runs the nb(nb+1)/2 = 136 of nb² = 256 blocks of 128 x 128 on
    or below the diagonal (flash_attn_triton.py L129, L302) at half of FlashAttention-2's 35% of the H100
    peak (FlashAttention-2 ~2x the FlashAttention of the Triton kernel's era):
    t = 14bs²h x 136/256 / (0.35/2 x 989 TFLOP/s)."""
    b, s, h = 6, 2048, 4096
    derived = 14 * b * s * s * h * (136 / 256) / (FA2_ON_H100 / 2 * H100_BF16_PEAK)
    assert _core_s("mpt-7b", "h100", "triton-flash") == pytest.approx(derived, rel=1e-9)


def test_the_default_kernel_runs_the_core_at_the_large_gemm_rate():
    """Without a kernel rate the core runs at datasheet x GEMM ceiling x compute_efficiency: the H100
    profile's 0.900 (stas00/ml-engineering MAMF 794.5 of 989 TFLOP/s through the shape model) x the GPU
    family's fitted 0.6661, so Triton's core takes 0.900 x 0.6661 / 0.175 = 3.43 times as long where both
    are compute-bound (at s = 2048, b = 6 the default core is bound by FlashAttention's HBM traffic)."""
    hw = resolve_hardware("h100")
    share = hw.kernels.gemm_ceiling_fraction.value * hw.calibration.compute_efficiency.value
    assert share == pytest.approx(0.900 * 0.6661, rel=1e-3)
    # s = 8192, one sequence: 14 x 8192² x 4096 = 3.85 TFLOP per layer on the whole square, of which the
    # causal kernel runs nb(nb + 1)/2 of nb² = 64² blocks of 128: 2080/4096; compute-bound under both kernels
    flops = 14 * 8192**2 * 4096 * 2080 / 4096
    default = _core_s("mpt-7b", "h100", "default", seq=8192, batch=1)
    assert default == pytest.approx(flops / (share * H100_BF16_PEAK), rel=1e-9)
    ratio = _core_s("mpt-7b", "h100", "triton-flash", seq=8192, batch=1) / default
    assert ratio == pytest.approx(share / (FA2_ON_H100 / 2), rel=1e-9)


@pytest.mark.parametrize("hw", ["a100-80gb", "b200"])
def test_triton_flash_without_a_published_rate_keeps_the_gemm_rate(hw):
    """Ampere (the kernel's own architecture, compute capability 8.0) and Blackwell (10.0) have no rate in
    the data file: the core's time is the default kernel's exactly."""
    assert _core_s("mpt-7b", hw, "triton-flash") == _core_s("mpt-7b", hw, "default")


def test_the_hopper_rate_covers_h100_and_h200_and_carries_its_source():
    kernel = attention_kernel("triton-flash")
    for hw in ("h100", "h200"):
        cc = resolve_hardware(hw).chip.compute_capability.value
        assert kernel.fraction_of_peak(cc) == FA2_ON_H100 / 2
    for k in attention_kernels().values():
        for rate in k.rate:
            assert "arXiv" in rate.source and rate.kind in ("published", "derived", "estimate")
    assert attention_kernel("default").fraction_of_peak(9.0) is None


def test_an_unknown_kernel_is_a_one_line_error():
    with pytest.raises(BtacalcError, match="attention_kernel"):
        attention_kernel("flash-4")
    proc = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--model", "mpt-7b", "--hw", "h100", "--devices",
                           "8", "--fsdp", "--attention-kernel", "flash-4"], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--attention-kernel" in proc.stderr


def test_the_mpt_runs_select_the_triton_kernel_and_the_plan_reports_it():
    """Every llm-foundry MPT row ran attn_impl: triton (submit_benchmarks.py L305 @ 5e85bd62d); the plan's
    inputs say which kernel was used."""
    from btacalc.planning.measured import express, load_runs

    runs = [r for r in load_runs() if r.id.endswith("-llmfoundry")]
    assert len(runs) == 12
    for r in runs:
        request, _ = express(r)
        assert request is not None and request.attention_kernel == "triton-flash"
    out = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--model", "mpt-7b", "--hw", "h100", "--devices", "8",
                          "--fsdp", "--seq", "2048", "--global-batch", "48", "--micro-batch", "6", "--recompute", "none",
                          "--attention", "flash", "--attention-kernel", "triton-flash", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert json.loads(out.stdout)["inputs"]["attention_kernel"] == "triton-flash"
