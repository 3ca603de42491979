"""The rank-0 Nsight Systems profile of the check rows -388 / -389 against btacalc's split (docs/clock.md 'ovlprof').

NVIDIA-NeMo/Megatron-Bridge @ 067f987d skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md L68-87 profiles the same
Qwen3-30B-A3B layout on 16 H100 (EP 16, HybridEP) with the EP overlap off (-388) and on (-389): per step, the
communication kernels' time concurrent with GEMM / attention kernels, that time's share of all communication time,
and the union of the intervals in which any kernel runs (GPU-active). So the communication total per step is the
concurrent time over its share, and with the overlap off (0.11% concurrent) the compute kernels' union is the
GPU-active union less the communication plus the little that overlapped. Both figures follow from the page's table;
the test derives them and checks btacalc's -388 against them.
"""

from __future__ import annotations

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.paths import package_data
from btacalc.planning.measured import device_family, express, make_plan
from btacalc.planning.run_file import load_runs

# SKILL.md L68-72 (step times) and L81-87 (the profile table)
STEP_OFF_S = 24.7138
ACTIVE_OFF_S, ACTIVE_ON_S = 22.821, 21.221
CONCURRENT_OFF_S, CONCURRENT_ON_S = 9.079e-3, 3958.997e-3
# the shares as printed: 0.11% (two digits: 0.105% to 0.115%) and 36.55% (36.545% to 36.555%)
SHARE_OFF = (0.00105, 0.00115)
SHARE_ON = (0.36545, 0.36555)


def _exchange_s(concurrent_s: float, share: tuple[float, float]) -> tuple[float, float]:
    """The communication total per step the profile implies: concurrent time / its share, over the share's rounding."""
    return concurrent_s / share[1], concurrent_s / share[0]


def test_the_overlapped_exchange_runs_about_a_third_longer_than_the_exposed_one():
    off, on = _exchange_s(CONCURRENT_OFF_S, SHARE_OFF), _exchange_s(CONCURRENT_ON_S, SHARE_ON)
    assert off == pytest.approx((7.895, 8.647), abs=1e-3)
    assert on == pytest.approx((10.830, 10.833), abs=1e-3)
    assert 1.25 < on[0] / off[1] and on[1] / off[0] < 1.38  # 10.83 / 8.25 = 1.31 at the printed shares
    # with the overlap on, active_on = compute_on + exchange_on - hidden: what the exchange shows (exchange_on -
    # hidden) plus what it slows the compute by (compute_on - compute_off) is active_on - compute_off, whatever
    # the split; with the overlap off, compute_off = active_off - exchange_off + the 9 ms that overlapped
    compute_off = (ACTIVE_OFF_S - off[1] + CONCURRENT_OFF_S, ACTIVE_OFF_S - off[0] + CONCURRENT_OFF_S)
    assert compute_off == pytest.approx((14.183, 14.935), abs=1e-3)
    shown = (ACTIVE_ON_S - compute_off[1], ACTIVE_ON_S - compute_off[0])
    assert shown == pytest.approx((6.286, 7.038), abs=1e-3)  # 6.645 s at the printed shares
    assert STEP_OFF_S - ACTIVE_OFF_S == pytest.approx(1.893, abs=1e-3)  # the GPU idles with the overlap off


@pytest.fixture(scope="module")
def plan_388():
    run = next(r for r in load_runs(package_data("measured_runs.json")) if r.id == "qwen3-30b-a3b-h100-16-388")
    hw = resolve_hardware(run.hw)
    request, reason = express(run, device_family(hw))
    assert reason == "" and request is not None
    return make_plan(run.model_spec(), hw, request, baselines=False)


def test_btacalc_times_the_388_exchange_and_compute_as_the_profile_splits_them(plan_388):
    t = plan_388.throughput
    names = [p.name for p in plan_388.phases] + [p.name for p in plan_388.outside_layers]
    compute = t.step_time_s * sum(t.phase_share[n] for n in names)
    exchange = t.communication_s["all_to_all"]
    off = _exchange_s(CONCURRENT_OFF_S, SHARE_OFF)
    assert off[0] <= exchange <= off[1]
    assert ACTIVE_OFF_S - off[1] + CONCURRENT_OFF_S <= compute <= ACTIVE_OFF_S - off[0] + CONCURRENT_OFF_S
    # the overlap is off: the whole exchange shows in the step, beside the compute
    assert t.step_time_s == pytest.approx(compute + exchange, rel=0.01)


def _layer_gemm_seconds(free_sms: int) -> float:
    """-389's layer GEMMs (Qwen3-30B-A3B at EP 16, micro-batch 1 of 4,096 tokens, TP 1: 8 local experts of
    4,096 tokens each under forced balance, 4,096 x 8 x 16 / 128, run in 2 rounds of 4 on TransformerEngine's
    streams) forward, data and weight gradients, timed by the shape model on `free_sms` of the H100's 132 SMs at
    free_sms / 132 of its achieved peak (the SMs a concurrent kernel holds compute nothing for the GEMM)."""
    from btacalc.model.gpu.gemm import GemmDevice, gemm_passes

    hw = resolve_hardware("h100")
    k, sms = hw.kernels, int(hw.chip.cores.value)
    peak = hw.chip.peak_flops_per_s.value * k.gemm_ceiling_fraction.value * hw.calibration.compute_efficiency.value
    device = GemmDevice(peak * free_sms / sms, hw.memory.offchip_bandwidth_bytes_per_s.value, free_sms, k.gemm_tiles,
                        k.gemm_wave_overhead_s.value, k.gemm_overlap_exponent.value)
    t, h, q, kv, d, f = 4096, 2048, 32, 4, 128, 768  # HF config: hidden 2048, 32 / 4 heads of 128, expert FFN 768
    shapes = [(t, (q + 2 * kv) * d, h, 1, 1), (t, h, q * d, 1, 1), (t, 128, h, 1, 1),  # QKV, projection, router
              (t, 2 * f, h, 4, 2), (t, h, f, 4, 2)]  # the experts' fc1 (gate and up) and fc2: 2 rounds of 4
    return sum(rounds * sum(p.time_s for p in gemm_passes(m, n, kk, 2, device, groups))
               for m, n, kk, groups, rounds in shapes)


@pytest.mark.parametrize("held", [32, 20])
def test_wave_quantised_sm_share_on_the_389_layer_is_the_linear_share_within_two_points(held):
    """docs/clock.md 'ovlsched': with `held` SMs taken by the exchange's kernels (HybridEP's 32 in the recipe,
    Megatron's default 20), the layer's GEMMs lose 1 - T(132) / T(132 - held) of their rate, wave and tile
    quantisation included; sm_share.py charges the linear held / 132. Measured by the shape model: 25.3% against
    24.2% at 32, 17.0% against 15.2% at 20: quantisation adds at most two points, not the miss ovlprof sizes."""
    full, reduced = _layer_gemm_seconds(132), _layer_gemm_seconds(132 - held)
    quantised, linear = 1 - full / reduced, held / 132
    assert linear <= quantised <= linear + 0.02
