"""Issue 22 item 5: B300 and GB300 (Blackwell Ultra, compute capability 10.3) take the measured kernel shares of the
Blackwell GPU they are built like, as labelled estimates, instead of falling back to ideal rates.

No measurement taken on a B300 or GB300 is used (HELD-BACK.md). Before this, their profiles had the BF16 GEMM
ceiling carried from the B200 / GB200 but not the FP8, MXFP8 and FP4 ceilings, the quantise-kernel shares or the
streaming share, and attention_kernels.toml covered compute capability 10.0 only. So a B300 ran its memory-bound
phases and casts at 100% of HBM bandwidth, its FP8 / MXFP8 / NVFP4 GEMMs at the BF16 ceiling (0.823 where the B200's
measured FP8 one is 0.785) and its attention core at the large-GEMM rate, slower than the B200's measured cuDNN
kernel at 8k: a B300 predicted faster than a B200 at low precision and slower at long-sequence attention for no
reason on its datasheet.

Expected values are the B200 / GB200 measurements as their own tests derive them, typed here from the sources the
profiles cite, times the B300 / GB300 datasheet peaks.
"""

from __future__ import annotations

import pytest

from btacalc.config.attention_kernels import attention_kernel
from btacalc.config.execution import Layout
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.rates import attention_core_peak, matmul_ceiling
from btacalc.model.gpu.precision import cast_bandwidth_shares
from support import resolved

CARRIED = ("memory.achievable_bandwidth_fraction", "kernels.fp8_gemm_ceiling_fraction",
           "kernels.mxfp8_gemm_ceiling_fraction", "kernels.fp4_gemm_ceiling_fraction",
           "kernels.cast_bandwidth_fraction", "kernels.cast_two_copy_bandwidth_fraction")

# cudnn-frontend's GB200 benchmark (cuDNN 9.18.1, 64/8 heads, d = 128, causal; attention_kernels.toml, the sm100
# entry): forward + backward ms at s = 4096 and 8192, on the blocks the kernel runs, backward 2.5 x forward FLOPs
CUDNN_GB200_MS = {4096: (0.212, 0.622), 8192: (0.704, 2.150)}  # its L14 and L10
GB200_BF16_PEAK = 2450e12


def _cudnn_share(s: int) -> float:
    nb = s // 128
    flops = 4 * 64 * s * s * 128 * (nb * (nb + 1) / 2) / (nb * nb) * 3.5
    return flops / (sum(CUDNN_GB200_MS[s]) * 1e-3) / GB200_BF16_PEAK


def _field(profile, dotted: str):
    section, name = dotted.split(".")
    return getattr(getattr(profile, section), name)


@pytest.mark.parametrize("ultra, base", [("b300", "b200"), ("gb300", "gb200")])
def test_ultra_profiles_carry_their_base_gpus_measured_shares_as_estimates(ultra, base):
    """Each share the base GPU measured is the Ultra's too, labelled an estimate that names the base GPU and says
    no measurement of the Ultra itself is used; the measured numbers stay 'derived' (or their own kind) on the
    base profile."""
    u, b = resolve_hardware(ultra), resolve_hardware(base)
    for dotted in CARRIED:
        carried, measured = _field(u, dotted), _field(b, dotted)
        assert carried is not None and measured is not None, dotted
        assert carried.value == measured.value, dotted
        assert carried.kind == "estimate", dotted
        assert f"the {base.upper()} value" in carried.note and "no measurement taken on this GPU" in carried.note


def test_b300_low_precision_gemms_and_casts_run_at_the_b200_measured_shares():
    """FP8 at the B200's mamf-finder ceiling 0.785 (3432.5 of 4500 TFLOP/s through the tile model), MXFP8 at
    0.785 x 0.991 = 0.778 (flashinfer's bmm_mxfp8 / bmm_fp8, 2347.650 / 2369.049), NVFP4 at 0.9468 x 0.823 = 0.779
    (torchao's B200 NVFP4 / BF16 shares); casts at TransformerEngine's B200 quantise kernels, 5.84 / 8 = 0.730 for
    one copy and 5.21 / 8 = 0.651 for two."""
    hw = resolve_hardware("b300")
    p = resolved(load_preset("llama-3-8b"), hw, recompute="none", attention="flash", seq_len=8192, precision="mxfp8")
    assert matmul_ceiling(p, "fp8") == pytest.approx(0.785, abs=1e-3)
    assert matmul_ceiling(p, "mxfp8") == pytest.approx(0.785 * 2347.650 / 2369.049, abs=1e-3)
    assert matmul_ceiling(p, "fp4") == pytest.approx(0.9468 * 0.823, abs=1e-3)
    assert cast_bandwidth_shares(hw.kernels, 1) == pytest.approx((5.84 / 8, 5.84 / 8), abs=2e-3)
    assert cast_bandwidth_shares(hw.kernels, 2) == pytest.approx((5.84 / 8, 5.21 / 8), abs=2e-3)
    assert hw.memory.achievable_bandwidth_fraction.value == pytest.approx(6.72 / 8, abs=1e-3)


@pytest.mark.parametrize("hw, peak", [("b300", 36e15 / 8 / 2), ("gb300", 360e15 / 72 / 2)])
def test_ultra_attention_core_runs_at_the_sm100_cudnn_share_of_its_own_peak(hw, peak):
    """The fused core on compute capability 10.3 at the sm100 cuDNN share (0.486 at 4k, 0.559 at 8k) of the
    Ultra's dense BF16 datasheet peak (HGX B300 36 PFLOP/s sparse / 8 / 2; GB300 NVL72 360 PFLOP/s sparse / 72 / 2),
    not at the large-GEMM rate it fell back to."""
    profile = resolve_hardware(hw)
    assert profile.chip.compute_capability.value == 10.3
    assert profile.chip.peak_flops_per_s.value == pytest.approx(peak)
    for s in (4096, 8192):
        problem = resolved(load_preset("llama-3-8b"), profile, Layout(devices=8), recompute="none",
                           attention="flash", seq_len=s)
        assert attention_core_peak(problem, 1.0) == pytest.approx(_cudnn_share(s) * peak, rel=2e-3)


def test_every_sm100_attention_rate_has_a_carried_sm103_estimate():
    """Every Blackwell (10.0) entry of the default kernel, 16-bit, FP8 and MXFP8, and its deterministic backward,
    gives the same value at 10.3, and the 10.3 entries are estimates; cuDNN's FP8 kernel therefore runs on a B300
    at the GB200 benchmark's FP8 share (0.550 at 4k: 3.5 x 566.9 GFLOP / 1.472 ms / 2450 TFLOP/s)."""
    kernel = attention_kernel("default")
    for dtype in ("bf16", "fp8", "mxfp8"):
        for s in (2048, 4096, 8192, 16384):
            assert kernel.fraction_of_peak(10.3, s, dtype) == kernel.fraction_of_peak(10.0, s, dtype)
    assert kernel.deterministic_backward_ratio(10.3) == kernel.deterministic_backward_ratio(10.0) == 1.152
    assert [r.kind for r in kernel.rate if r.min_compute_capability == 10.3] == ["estimate"] * 3
    assert kernel.fraction_of_peak(10.3, 4096, "fp8") == pytest.approx(3.5 * 566.9e9 / 1.472e-3 / 2450e12, abs=1e-3)
    assert kernel.fraction_of_peak(11.0, 4096) is None
