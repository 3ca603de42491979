"""The attention kernel's own FLOP rate (btacalc/data/attention_kernels.toml, model/gpu/costs.py
`attention_core_peak`), each tested as its derivation from the published numbers, typed here from their
sources rather than read back from the data file."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from btacalc.config.attention_kernels import attention_kernel, attention_kernels
from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError
from btacalc.model.gpu.rates import attention_core_peak
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


# cuDNN fused attention on H100 SXM5, head dim 128, BF16, s = 4096 (Shah et al. 2024, FlashAttention-3,
# arXiv 2407.08608, Figure 5: forward; Figure 6: backward; TFLOP/s as the bars are labelled)
CUDNN_FWD_CAUSAL_4K = 518.0  # causal forward, FLOPs counted on the half square (4 s² d / 2)
CUDNN_FWD_FULL_4K = 609.0  # forward without the mask
CUDNN_BWD_FULL_4K = 499.0  # backward without the mask (the paper shows no causal backward)
BWD_PER_FWD = 2.5  # backward FLOPs per forward FLOP, recomputed Q K^T included (flash-attention issue #1525)


def _cudnn_hopper_share() -> float:
    """The combined forward + backward rate of cuDNN on H100, on the blocks the kernel runs, over 989."""
    nb = 4096 // 128
    fwd = CUDNN_FWD_CAUSAL_4K * (nb * (nb + 1) / 2) / (nb * nb / 2)  # half-square count -> blocks run
    mask_cost = fwd / CUDNN_FWD_FULL_4K  # the causal mask's cost per block, forward
    bwd = CUDNN_BWD_FULL_4K * mask_cost  # the same cost assumed in the backward
    combined = (1 + BWD_PER_FWD) / (1 / fwd + BWD_PER_FWD / bwd)
    return combined * 1e12 / H100_BF16_PEAK


def test_the_default_kernel_on_hopper_is_cudnn_at_its_published_rate():
    """518 x 33/32 = 534.2 TFLOP/s forward on the blocks run, 534.2/609 = 0.877 of the unmasked per-block
    rate, 499 x 0.877 = 437.7 backward, 3.5 / (1/534.2 + 2.5/437.7) = 461.5 TFLOP/s = 0.467 of 989."""
    assert _cudnn_hopper_share() == pytest.approx(0.4666, abs=5e-4)
    for hw in ("h100", "h200"):
        cc = resolve_hardware(hw).chip.compute_capability.value
        assert attention_kernel("default").fraction_of_peak(cc) == pytest.approx(_cudnn_hopper_share(), abs=5e-4)


# cuDNN 9.18.1 fused attention on a GB200 through cudnn-frontend (TransformerEngine's path), BF16, causal (top-left),
# b = 1, s = 4096, 64 query heads of 128 (github.com/NVIDIA/cudnn-frontend @ 9072c4e7
# benchmark/sdpa_benchmark_training/results/gb200_918_only_cudnn/llama3.1_20260126_110503.csv L14: median times)
CUDNN_GB200_FWD_MS_4K = 0.212
CUDNN_GB200_BWD_MS_4K = 0.622
CUDNN_GB200_FWD_TFLOPS_4K = 1297.0  # the same row's rates, on its unmasked-element count s(s+1)/2
CUDNN_GB200_BWD_TFLOPS_4K = 1105.0
GB200_BF16_PEAK = 2450e12  # FLOP/s, NVIDIA dgxc-benchmarking README (dense BF16, the MFU reference)


def _cudnn_blackwell_share() -> float:
    """Forward + backward FLOPs of the blocks the kernel runs over the two measured times, over GB200's peak."""
    s, heads, d, nb = 4096, 64, 128, 4096 // 128
    fwd_flops = 4 * heads * s * s * d * (nb * (nb + 1) / 2) / (nb * nb)  # Q K^T and P V on the blocks run
    kernel_flops = fwd_flops * (1 + BWD_PER_FWD)
    return kernel_flops / ((CUDNN_GB200_FWD_MS_4K + CUDNN_GB200_BWD_MS_4K) * 1e-3) / GB200_BF16_PEAK


def test_the_default_kernel_on_blackwell_is_cudnn_at_its_benchmarked_rate():
    """4 x 64 x 4096^2 x 128 x 33/64 = 283.5 GFLOP forward on the blocks run, x 3.5 with the backward = 992.1
    GFLOP in 0.212 + 0.622 ms: 1189.6 TFLOP/s = 0.486 of 2450. The row's own TFLOP/s columns (half-square
    count, 2.5 x forward for the backward) give the same within their rounding: 3.5 / (1/1297 + 2.5/1105)
    x 33/32 = 1189.9. B200 (the same compute capability 10.0) takes the same share of its own peak."""
    assert _cudnn_blackwell_share() == pytest.approx(0.4856, abs=5e-4)
    from_rates = (1 + BWD_PER_FWD) / (1 / CUDNN_GB200_FWD_TFLOPS_4K + BWD_PER_FWD / CUDNN_GB200_BWD_TFLOPS_4K)
    assert from_rates * 1e12 * 33 / 32 / GB200_BF16_PEAK == pytest.approx(_cudnn_blackwell_share(), rel=2e-3)
    for hw in ("b200", "gb200"):
        cc = resolve_hardware(hw).chip.compute_capability.value
        assert attention_kernel("default").fraction_of_peak(cc) == pytest.approx(_cudnn_blackwell_share(), abs=5e-4)
    assert resolve_hardware("gb200").chip.peak_flops_per_s.value == GB200_BF16_PEAK


# the same file's other rows (median times, ms): s -> (forward, backward); L18, L10
CUDNN_GB200_MS = {2048: (0.067, 0.209), 4096: (CUDNN_GB200_FWD_MS_4K, CUDNN_GB200_BWD_MS_4K), 8192: (0.704, 2.150)}


def _cudnn_gb200_share(s: int) -> float:
    """The combined rate at sequence s (64 heads of 128, causal blocks of 128 run) over GB200's peak."""
    nb = s // 128
    kernel_flops = 4 * 64 * s * s * 128 * (nb * (nb + 1) / 2) / (nb * nb) * (1 + BWD_PER_FWD)
    return kernel_flops / (sum(CUDNN_GB200_MS[s]) * 1e-3) / GB200_BF16_PEAK


def test_the_blackwell_share_follows_the_benchmark_over_sequence_lengths():
    """2k: 3.5 x 73.01 GFLOP / 0.276 ms = 925.9 TFLOP/s = 0.378; 8k: 3.5 x 1116.7 GFLOP / 2.854 ms = 1369.5 =
    0.559 of 2450. Between the points the share is linear in log2(s): at 6k 0.486 + (0.559 - 0.486) x
    log2(1.5); outside them the end point's; under context parallelism each kernel call spans s / CP."""
    kernel = attention_kernel("default")
    assert _cudnn_gb200_share(2048) == pytest.approx(0.3779, abs=5e-4)
    assert _cudnn_gb200_share(8192) == pytest.approx(0.5590, abs=5e-4)
    for s in (2048, 4096, 8192):
        assert kernel.fraction_of_peak(10.0, s) == pytest.approx(_cudnn_gb200_share(s), abs=5e-4)
    six_k = _cudnn_gb200_share(4096) + (_cudnn_gb200_share(8192) - _cudnn_gb200_share(4096)) * math.log2(1.5)
    assert kernel.fraction_of_peak(10.0, 6144) == pytest.approx(six_k, abs=1e-3)
    assert kernel.fraction_of_peak(10.0, 512) == kernel.fraction_of_peak(10.0, 2048)


# The same FlashAttention-3 figures at every sequence length they show (H100 SXM5, head dim 128, BF16; bar labels
# in TFLOP/s): s -> (causal forward, forward without the mask, backward without the mask). cuDNN and
# FlashAttention-2 bars (Figure 5 causal / unmasked forward, Figure 6 backward).
CUDNN_H100_FIGURES = {1024: (410.0, 574.0, 408.0), 2048: (484.0, 617.0, 465.0),
                      4096: (CUDNN_FWD_CAUSAL_4K, CUDNN_FWD_FULL_4K, CUDNN_BWD_FULL_4K),
                      8192: (529.0, 600.0, 518.0), 16384: (539.0, 595.0, 516.0)}
FA2_H100_FIGURES = {1024: (260.0, 350.0, 260.0), 2048: (298.0, 362.0, 291.0), 4096: (319.0, 368.0, 310.0),
                    8192: (333.0, 370.0, 318.0), 16384: (335.0, 370.0, 322.0)}


def _figure_share(bars: tuple[float, float, float], s: int) -> float:
    """The 4k derivation (_cudnn_hopper_share) at any length: the causal forward on the nb(nb+1)/2 blocks
    run, the mask's per-block cost carried to the unmasked backward, combined as 3.5 / (1/F + 2.5/B)."""
    causal, full, bwd_full = bars
    nb = s // 128
    fwd = causal * (nb + 1) / nb
    bwd = bwd_full * fwd / full
    return (1 + BWD_PER_FWD) / (1 / fwd + BWD_PER_FWD / bwd) * 1e12 / H100_BF16_PEAK


def test_the_hopper_shares_follow_the_figures_over_sequence_lengths():
    """cuDNN at 2k: 484 x 17/16 = 514.3 forward on the blocks run, mask cost 514.3/617 = 0.834, backward
    465 x 0.834 = 387.6, 3.5 / (1/514.3 + 2.5/387.6) = 416.9 TFLOP/s = 0.422 of 989; at 8k: 529 x 65/64 =
    537.3, 0.895, 463.8, 482.7 = 0.488; at 16k 0.495; at 1k 0.361. FlashAttention-2 (the v3.1 MLPerf rows'
    kernel): 0.273 at 2k, 0.293 at 4k, 0.306 at 8k. Between the points linear in log2(s), outside them the end
    point's; the 4k point stays each kernel's reference share."""
    assert _figure_share(CUDNN_H100_FIGURES[2048], 2048) == pytest.approx(0.4215, abs=5e-4)
    assert _figure_share(CUDNN_H100_FIGURES[8192], 8192) == pytest.approx(0.4881, abs=5e-4)
    assert _figure_share(FA2_H100_FIGURES[2048], 2048) == pytest.approx(0.2726, abs=5e-4)
    for name, figures in (("default", CUDNN_H100_FIGURES), ("flash-attn-2", FA2_H100_FIGURES)):
        kernel = attention_kernel(name)
        for s, bars in figures.items():
            assert kernel.fraction_of_peak(9.0, s) == pytest.approx(_figure_share(bars, s), abs=5e-4)
        assert kernel.fraction_of_peak(9.0) == pytest.approx(_figure_share(figures[4096], 4096), abs=5e-4)
        assert kernel.fraction_of_peak(9.0, 512) == kernel.fraction_of_peak(9.0, 1024)
        three_k = _figure_share(figures[2048], 2048) + (_figure_share(figures[4096], 4096)
                                                        - _figure_share(figures[2048], 2048)) * math.log2(1.5)
        assert kernel.fraction_of_peak(9.0, 3072) == pytest.approx(three_k, abs=1e-3)


def test_the_default_core_on_b200_is_kernel_flops_over_the_cudnn_rate_alone():
    """MPT-7B, one sequence of 8192 on a B200: 14 s^2 h x 65/128 blocks at cuDNN's 8k share (0.559) x 2250
    TFLOP/s; neither the fitted compute_efficiency nor the IO-count bound applies to a benchmarked rate. With
    context parallelism 2 each kernel call spans 4096 tokens: the 4k share (0.486)."""
    s, h = 8192, 4096
    b200_peak = 2250e12  # B200 dense BF16 2,250 TFLOP/s (HGX B200 datasheet; hardware_profiles/b200.toml)
    derived = 14 * s * s * h * (65 / 128) / (_cudnn_gb200_share(8192) * b200_peak)
    assert _core_s("mpt-7b", "b200", "default", seq=s, batch=1) == pytest.approx(derived, rel=2e-3)
    run = RunOptions(seq_len=s, attention="flash", gradient_bytes=4, recompute="none")
    problem = make_problem(load_preset("mpt-7b"), resolve_hardware("b200"), run,
                           Layout(devices=8, context_parallel=2, zero_stage=3, fsdp=True))
    assert attention_core_peak(problem, 1.0) == pytest.approx(_cudnn_gb200_share(4096) * b200_peak, rel=2e-3)


def test_the_default_core_on_h100_is_kernel_flops_over_the_cudnn_rate_alone():
    """MPT-7B (h = 4096 = 32 heads of 128), one sequence of 8192: the kernel runs 14 s² h FLOPs on the whole
    square (forward 4, backward 8, recomputed Q K^T 2) x 65/128 blocks on or below the diagonal (nb = 64), at
    cuDNN's 8k share (0.488, below) x 989 TFLOP/s: the fitted compute_efficiency does not multiply a benchmarked
    kernel rate."""
    s, h = 8192, 4096
    share = _figure_share(CUDNN_H100_FIGURES[8192], 8192)
    derived = 14 * s * s * h * (65 / 128) / (share * H100_BF16_PEAK)
    assert _core_s("mpt-7b", "h100", "default", seq=s, batch=1) == pytest.approx(derived, rel=1e-3)  # 3-digit share


def _io_count_bytes_per_token_head(sram_bytes: int, s: int, d: int = 128, beta: int = 2) -> tuple[float, float]:
    """FlashAttention's IO count per query head and token (Dao et al. 2022, Algorithms 1 and 4, blocks of
    B_c = M/(4d) keys, causal: (T_c + 1)/2 key-block passes): forward and backward HBM bytes."""
    block = -(-(sram_bytes // beta) // (4 * d))  # B_c = ceil(M / 4d), M in elements
    t_c = -(-s // block)
    passes = (t_c + 1) / 2
    fwd = beta * (2 * d + 3 * d * passes) + 16 * passes
    bwd = beta * (4 * d + 5 * d * passes) + 8 * passes
    return fwd, bwd


def test_the_io_count_bound_is_below_the_measured_cudnn_forward_so_it_is_not_applied_on_top():
    """H100: 227 KiB of shared memory per SM (116,224 BF16 elements) gives B_c = ceil(116224/512) = 227 keys. At
    s = 4096 (T_c = 19, 10 passes under the mask) the causal forward moves 2(256 + 384 x 10) + 16 x 10 = 8352 B
    per token and head for 4 x 4096 x 128 x 33/64 = 1,081,344 FLOPs: 129.5 FLOP/B x 3.35 TB/s = 434 TFLOP/s,
    below cuDNN's measured 534 on the blocks run (L2 serves the K/V re-reads the IO count sends to HBM)."""
    hw = resolve_hardware("h100")
    fwd_bytes, _ = _io_count_bytes_per_token_head(int(hw.attention_sram_bytes_per_core), 4096)
    assert fwd_bytes == pytest.approx(8352)
    bound = 4 * 4096 * 128 * (33 / 64) / fwd_bytes * hw.memory.offchip_bandwidth_bytes_per_s.value
    assert bound < CUDNN_FWD_CAUSAL_4K * 1e12 * 33 / 32
    # s = 512 with b = 64 (T_c = 3, 2 passes): the IO count (forward + backward) would bind the core at
    # 338 TFLOP/s < 357 (the figures' shortest point, 1k: 0.361 x 989, held below it); the benchmarked rate alone
    # sets the time
    s, b, h = 512, 64, 4096
    share = _figure_share(CUDNN_H100_FIGURES[1024], 1024)
    flops = 14 * b * s * s * h * (5 / 8)
    fwd_bytes, bwd_bytes = _io_count_bytes_per_token_head(int(hw.attention_sram_bytes_per_core), s)
    traffic_s = b * s * (h // 128) * (fwd_bytes + bwd_bytes) / hw.memory.offchip_bandwidth_bytes_per_s.value
    assert traffic_s > flops / (share * H100_BF16_PEAK)
    assert _core_s("mpt-7b", "h100", "default", seq=s, batch=b) == pytest.approx(flops / (share * H100_BF16_PEAK),
                                                                                  rel=2e-3)  # 3-digit share


@pytest.mark.parametrize("hw,kernel", [("a100-80gb", "triton-flash"), ("b200", "triton-flash")])
def test_without_a_published_rate_the_core_keeps_the_gemm_roofline(hw, kernel):
    """The Triton kernel has no rate taken on A100 (compute capability 8.0: the published one's Triton release is
    unknown, attention_kernels.toml) nor on B200 (10.0): the core runs at datasheet x GEMM ceiling x compute_efficiency, and FlashAttention's IO count
    still bounds it at the streaming HBM rate (s = 512, b = 64)."""
    device = resolve_hardware(hw)
    assert attention_kernel(kernel).fraction_of_peak(device.chip.compute_capability.value) is None
    s, b, h = 512, 64, 4096
    rate = (device.chip.peak_flops_per_s.value * device.kernels.gemm_ceiling_fraction.value
            * device.calibration.compute_efficiency.value)
    flops = 14 * b * s * s * h * (5 / 8)
    fwd_bytes, bwd_bytes = _io_count_bytes_per_token_head(int(device.attention_sram_bytes_per_core), s)
    # the IO count streams at the datasheet x the streaming kernels' share (tests/test_streaming_bandwidth.py)
    traffic_s = b * s * (h // 128) * (fwd_bytes + bwd_bytes) / (
        device.memory.offchip_bandwidth_bytes_per_s.value * device.memory.achievable_bandwidth_fraction.value)
    assert _core_s("mpt-7b", hw, kernel, seq=s, batch=b) == pytest.approx(max(flops / rate, traffic_s), rel=1e-9)


# FlashAttention-2 on an A100 80GB SXM4, causal, head dim 128, forward + backward together (Dao 2023, arXiv
# 2307.08691, Figure 4(d); TFLOP/s as the bars are labelled, on the benchmark's half-square count: §4.1)
FA2_A100_FWD_BWD_CAUSAL = {512: 99.0, 1024: 133.0, 2048: 155.0, 4096: 173.0, 8192: 182.0, 16384: 189.0}
A100_BF16_PEAK = 312e12  # FLOP/s, NVIDIA A100 datasheet (dense BF16)


def _fa2_a100_share(s: int) -> float:
    """The bar is 3.5 x 4bs²hd/2 over the time of both passes; the kernel runs nb(nb+1)/2 of nb² blocks of 128,
    (nb + 1)/nb times the half square: the rate on the blocks run over the A100's peak."""
    nb = s // 128
    return FA2_A100_FWD_BWD_CAUSAL[s] * 1e12 * (nb + 1) / nb / A100_BF16_PEAK


def test_the_default_kernel_on_ampere_is_flashattention_2_at_its_papers_a100_rate():
    """TransformerEngine takes flash-attn before cuDNN below sm90 (TE @ d0067d0 dot_product_attention/utils.py
    L1647-1652), so the default core on an A100 is FlashAttention-2: MPT-7B (32 heads of 128), b = 6, s = 2048,
    t = 14bs²h x 136/256 / (155 x 17/16 TFLOP/s), the figure's 2k bar on the blocks run (the data file keeps three
    digits of the share: rel 2e-3). The flash-attn-2 kernel is the same on this architecture."""
    b, s, h = 6, 2048, 4096
    derived = 14 * b * s * s * h * (136 / 256) / (_fa2_a100_share(s) * A100_BF16_PEAK)
    assert _core_s("mpt-7b", "a100-80gb", "default", seq=s, batch=b) == pytest.approx(derived, rel=2e-3)
    assert _core_s("mpt-7b", "a100-80gb", "flash-attn-2", seq=s, batch=b) == _core_s("mpt-7b", "a100-80gb",
                                                                                     "default", seq=s, batch=b)
    for seq in FA2_A100_FWD_BWD_CAUSAL:
        assert attention_kernel("default").fraction_of_peak(8.0, seq) == pytest.approx(_fa2_a100_share(seq),
                                                                                        abs=6e-4)
    # the Triton kernel keeps the large-GEMM rate there, 1.25x faster than FlashAttention-2's paper rate at 2k
    assert _core_s("mpt-7b", "a100-80gb", "triton-flash", seq=s, batch=b) < _core_s("mpt-7b", "a100-80gb", "default",
                                                                                    seq=s, batch=b)


def test_the_hopper_rate_covers_h100_and_h200_and_carries_its_source():
    kernel = attention_kernel("triton-flash")
    for hw in ("h100", "h200"):
        cc = resolve_hardware(hw).chip.compute_capability.value
        assert kernel.fraction_of_peak(cc) == pytest.approx(FA2_ON_H100 / 2)
    for k in attention_kernels().values():
        for rate in k.rate:
            assert ("arXiv" in rate.source or "github.com" in rate.source) and len(rate.note) > 100
            assert rate.kind in ("published", "derived", "estimate")
    assert attention_kernel("triton-flash").fraction_of_peak(8.0) is None  # Ampere: the GEMM rate
    assert attention_kernel("default").fraction_of_peak(8.0) == pytest.approx(_fa2_a100_share(4096), abs=6e-4)


def test_an_unknown_kernel_is_a_one_line_error():
    with pytest.raises(BtacalcError, match="attention_kernel"):
        attention_kernel("flash-4")
    proc = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--model", "mpt-7b", "--hw", "h100", "--devices",
                           "8", "--fsdp", "--attention-kernel", "flash-4"], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--attention-kernel" in proc.stderr


def test_the_mpt_runs_select_the_triton_kernel_and_the_plan_reports_it():
    """Every llm-foundry MPT row ran attn_impl: triton (submit_benchmarks.py L305 @ 5e85bd62d) but the large-scale
    table's MPT-7B and MPT-70B rows, whose sweep passed attn_impl flash (sweep.py L56-60, L77-81; docs/runs.md
    "mpt6"); the plan's inputs say which kernel was used."""
    from btacalc.planning.measured import express, load_runs

    runs = [r for r in load_runs() if r.id.endswith("-llmfoundry")]
    assert len(runs) == 12 + 14  # the fsdp1 round's twelve, runs8's fourteen (docs/runs.md "runs8")
    flash = {"mpt-7b-h100-512-bf16-llmfoundry", *(f"mpt-70b-h100-{n}-bf16-llmfoundry" for n in (128, 256, 512))}
    for r in runs:
        request, _ = express(r)
        assert request is not None
        assert request.attention_kernel == ("flash-attn-2-varlen" if r.id in flash else "triton-flash"), r.id
    out = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--model", "mpt-7b", "--hw", "h100", "--devices", "8",
                          "--fsdp", "--seq", "2048", "--global-batch", "48", "--micro-batch", "6", "--recompute", "none",
                          "--attention", "flash", "--attention-kernel", "triton-flash", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert json.loads(out.stdout)["inputs"]["attention_kernel"] == "triton-flash"
