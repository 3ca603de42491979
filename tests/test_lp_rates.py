"""Issue 22, dense FP8 runs predicted too slow: the two mechanisms found (docs/precision.md, "Why dense FP8
runs were predicted too slow"), each as its derivation.

1. The FP8 GEMM ceiling per generation, from the published FP8 Maximum Achievable Matmul FLOPS table
   (stas00/ml-engineering @ 744d01e1 compute/accelerator/README.md L365-376: torch._scaled_mm with
   per-tensor scales), derived through btacalc's GEMM shape model as the BF16 ceiling is (tests/test_clock.py).
2. The TP-comm overlap of the low-precision rows' own performance configs (Megatron-Bridge recipes:
   CommOverlapConfig(tp_comm_overlap=True), switched off for NVFP4), recorded in each row's recipe.
3. TransformerEngine's quantised sequence-parallel all-gathers (the reduce-scatters stay 16-bit).
"""

from __future__ import annotations

import json

import pytest

from btacalc.config.execution import Layout
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.rates import rates_of
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.gemm import GemmDevice, gemm_time
from btacalc.paths import package_data
from support import resolved

# FP8 (float8_e4m3fn) rows of the table: TFLOP/s and the best shape m x n x k
FP8_MAMF = {"b200": (3432.5e12, (15360, 4096, 3072)), "gb200": (3615.6e12, (19456, 5120, 1536)),
            "h100": (1402.6e12, (1024, 9216, 14336))}


def _fp8_device(hw: str, ceiling: float) -> GemmDevice:
    """The profile's GEMM device at its FP8 datasheet peak x `ceiling` (no compute_efficiency: a microbenchmark)."""
    p = resolve_hardware(hw)
    assert p.kernels is not None and p.chip.peak_fp8_flops_per_s is not None
    return GemmDevice(p.chip.peak_fp8_flops_per_s.value * ceiling, p.memory.offchip_bandwidth_bytes_per_s.value,
                      int(p.chip.cores.value), p.kernels.gemm_tiles, p.kernels.gemm_wave_overhead_s.value,
                      p.kernels.gemm_overlap_exponent.value)


@pytest.mark.parametrize("hw", ["b200", "gb200"])
def test_fp8_ceiling_reproduces_the_published_fp8_gemm_rate(hw):
    """Blackwell: the FP8 ceiling makes the best-shape FP8 GEMM (1-byte operands) run at the published rate. By
    hand for the B200: 15360x4096x3072 in 128x256 tiles is 120 x 16 = 1,920 tiles, 12.97 of 13 waves on 148 SMs:
    2mnk / (4.5e15 x 0.785) x 13 / 12.97 (the profile's per-wave time is 0 on Blackwell), against (mk + kn + mn)
    x 1 B through 8 TB/s, combined by the smooth roofline (p = 1.6): 3,432 TFLOP/s."""
    measured, (m, n, k) = FP8_MAMF[hw]
    ceiling = resolve_hardware(hw).kernels.fp8_gemm_ceiling_fraction.value
    achieved = 2 * m * n * k / gemm_time(m, n, k, 1, _fp8_device(hw, ceiling)).time_s
    assert achieved == pytest.approx(measured, rel=0.005)
    if hw == "b200":
        compute = 2 * m * n * k / (4.5e15 * 0.785) * 13 / (1920 / 148)
        memory = (m * k + k * n + m * n) / 8e12
        assert 2 * m * n * k / (compute ** 1.6 + memory ** 1.6) ** (1 / 1.6) == pytest.approx(measured, rel=0.002)
    # FP8 GEMMs reach a little less of their peak than BF16 GEMMs of theirs on Blackwell (76.3% vs 77.6% on
    # B200 in the same table)
    assert ceiling < resolve_hardware(hw).kernels.gemm_ceiling_fraction.value


def test_h100_fp8_gemms_already_run_at_their_measured_rate():
    """H100 keeps the BF16 ceiling for FP8 GEMMs: through the shape model, 0.90 x 1,979 TFLOP/s gives the
    published FP8 rate of its best shape (1024x9216x14336: 8 x 36 = 288 tiles of 128x256, 2.18 of 3 waves on 132
    SMs) within 1%. The FP8 GEMM efficiency is not why dense FP8 H100 runs were predicted too slow."""
    measured, (m, n, k) = FP8_MAMF["h100"]
    h100 = resolve_hardware("h100")
    assert h100.kernels.fp8_gemm_ceiling_fraction is None
    achieved = 2 * m * n * k / gemm_time(m, n, k, 1, _fp8_device("h100", h100.kernels.gemm_ceiling_fraction.value)).time_s
    assert achieved == pytest.approx(measured, rel=0.01)


def test_fp8_gemms_run_at_the_fp8_ceiling_and_bf16_ones_do_not_move():
    """On a B200 an FP8 linear runs at 4.5e15 x 0.785 x compute_efficiency; under BF16 the same phase runs at
    2.25e15 x 0.823 x compute_efficiency, as before; NVFP4 at 9e15 x its own ceiling (0.9468 x 0.823 = 0.779,
    tests/test_lp_cast_bandwidth.py derives it from torchao PR 2427's B200 NVFP4 / BF16 benchmark)."""
    kw = dict(recompute="none", attention="flash", seq_len=4096)
    b200 = resolve_hardware("b200")
    eff = b200.calibration.compute_efficiency.value
    fp8 = rates_of(resolved(load_preset("llama-3-8b"), b200, **kw, precision="fp8-current"))
    bf16 = rates_of(resolved(load_preset("llama-3-8b"), b200, **kw))
    nvfp4 = rates_of(resolved(load_preset("llama-3-8b"), b200, **kw, precision="nvfp4"))
    assert fp8.low_peak == pytest.approx(4.5e15 * 0.785 * eff)
    assert fp8.low_share == pytest.approx(0.785 * eff)
    assert bf16.peak == pytest.approx(2.25e15 * 0.823 * eff) and bf16.peak == pytest.approx(fp8.peak)
    assert nvfp4.low_peak == pytest.approx(9e15 * 0.779 * eff)
    # the phase's GEMM report row: forward efficiency as a share of the FP8 datasheet peak, at most the ceiling
    p = resolved(load_preset("llama-3-8b"), b200, **kw, precision="fp8-current")
    row = layer_parts(p, p.evaluate(1, 1))[0].gemms["mlp"][0]
    assert 0.5 * 0.785 * eff < row.efficiency <= 0.785 * eff


def _runs() -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(package_data("measured_runs.json").read_text())["runs"]}


# The low-precision dense rows with TP > 1 whose performance config is pinned (Megatron-Bridge v0.1.0rc3 to
# v0.5.0, NeMo 2.2 / 2.3): Bridge's Llama recipes set CommOverlapConfig(tp_comm_overlap=True) and the performance
# scripts switch it off for NVFP4 only ("tp_comm_overlap = False if precision == 'nvfp4'"); NeMo's GPT-3 175B
# performance recipe adds MegatronCommOverlapCallback(tp_comm_overlap=True).
PINNED = ["llama-3-70b-h100-64-fp8-69", "llama-3-70b-gb200-64-mxfp8-67", "llama-3-70b-gb200-64-nvfp4-68",
          "llama-3.1-405b-gb200-256-fp8-35", "llama-3.1-405b-gb200-256-mxfp8-36", "llama-3.1-405b-gb200-256-nvfp4-37",
          "llama-3.1-405b-gb200-256-nvfp4-162", "llama-3-70b-h100-64-fp8-current-250",
          "llama-3.1-405b-gb200-256-fp8-current-235", "llama-3.1-405b-b200-128-fp8-current-243",
          "llama-3.1-405b-b200-128-mxfp8-244", "llama-3-70b-gb200-64-mxfp8-258",
          "llama-3.1-405b-gb200-128-fp8-current-259", "gpt3-175b-h100-512-fp8-289", "gpt3-175b-b200-512-fp8-286",
          "gpt3-175b-gb200-128-fp8-current-283"]


@pytest.mark.parametrize("run_id", PINNED)
def test_low_precision_rows_overlap_tp_comm_as_their_config_does(run_id):
    run = _runs()[run_id]
    assert run["tp"] > 1 and run["precision"] != "bf16"
    recipe = run["recipe"]
    assert recipe["overlaps"]["tp_comm"] is (run["precision"] != "nvfp4")
    assert "tp_comm_overlap" in recipe["source"] and "overlaps (issue 22)" in recipe["source"]


@pytest.mark.parametrize("precision, hw, q", [("bf16", "h100", 2), ("fp8", "h100", 1), ("mxfp8", "gb200", 1 + 1 / 32),
                                               ("nvfp4", "gb200", 0.5 + 1 / 16)])
def test_sequence_parallel_all_gathers_move_quantised_bytes(precision, hw, q):
    """Llama 3 8B, one layer, TP 4 with sequence parallelism, one 4,096-token sequence. Each of the four TP
    boundaries carries X = s·h·2 B at 16 bits: the QKV and MLP inputs (all-gather forward, again for wgrad,
    reduce-scatter of the input gradient backward: 3 X each) and the attention-output and MLP outputs
    (reduce-scatter forward, all-gather of the output gradient backward: 2 X each), 10 X in all. TE quantises
    before it all-gathers, so each all-gather moves q/2 of X (FP8 1 B, MXFP8 1 + 1/32 B, NVFP4 0.5 + 1/16 B per
    element); the reduce-scatters stay 16-bit: 2·(2·q/2 + 1) X + 2·(1 + q/2) X."""
    p = resolved(load_preset("llama-3-8b"), hw, Layout(tensor_parallel=4, sequence_parallel=True, devices=4),
                 recompute="none", attention="flash", seq_len=4096, precision=precision)
    x = 4096 * 4096 * 2
    a = q / 2
    assert layer_parts(p, p.evaluate(1, 1))[0].tp_bytes == pytest.approx((2 * (2 * a + 1) + 2 * (1 + a)) * x)
