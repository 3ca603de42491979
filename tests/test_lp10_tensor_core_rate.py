"""Issue 22 (lp10): does the tensor-core issue rate give Blackwell's low-precision GEMMs less than btacalc assumes?

lp8 found that the missing time of the dense Blackwell FP8/MXFP8/NVFP4 rows scales with the low-precision GEMM time
(x1.17 FP8, x1.24 MXFP8, x1.31 NVFP4). This test sets btacalc's LP/BF16 large-GEMM rate ratios against the B200's
measured tcgen05 issue rate per dtype (docs/precision.md, "lp10"): no dtype loses rate at the instruction, and the
model keeps every LP/BF16 ratio at or under the measured one.

Source: SemiAnalysisAI/microbench-blackwell @ 9a068d85, umma_throughput/tput_results_max.csv: tcgen05 MMA issue rate
on a B200, FLOP per cycle of a 2-SM pair, M = N = 256, both operands in shared memory (SS).
"""

from __future__ import annotations

import pytest

from btacalc.config.hardware import resolve_hardware

# tcgen05 FLOP per cycle of a 2-SM pair, 256 x 256 tile, SS (the CSV's rows)
UMMA_FLOP_PER_CYCLE = {"bf16": 16288.60982869073, "e4m3": 32672.611290318808, "mxf8": 32670.549875449637,
                       "f4": 65427.176204578485, "mxf4": 65425.339172415406}


@pytest.mark.parametrize("hardware", ["b200", "gb200"])
def test_lp_ceilings_stay_under_the_tensor_core_issue_ratio(hardware):
    """The tcgen05 issue rate per cycle is 32,672.6 / 16,288.6 = 2.006 (E4M3 over BF16), 32,670.5 / 16,288.6 = 2.006
    (MXF8: the block scales cost no issue rate) and 65,427.2 / 16,288.6 = 4.017 (FP4) on a B200. So no dtype loses
    rate at the MMA instruction; a loss must come from the clock, the operand pipeline or the library. btacalc's
    large-GEMM rates keep the LP GEMMs at or below that ratio of the BF16 rate: B200 4.5 x 0.785 / (2.25 x 0.823) =
    1.908, MXFP8 1.891, FP4 9 x 0.779 / (2.25 x 0.823) = 3.786; GB200 1.973, 1.955 and 3.864."""
    u = UMMA_FLOP_PER_CYCLE
    assert u["e4m3"] / u["bf16"] == pytest.approx(2.006, abs=5e-4)
    assert u["mxf8"] / u["e4m3"] == pytest.approx(1.0, abs=1e-4)
    assert u["f4"] / u["bf16"] == pytest.approx(4.017, abs=5e-4)
    p = resolve_hardware(hardware)
    c, k = p.chip, p.kernels
    bf16 = c.peak_flops_per_s.value * k.gemm_ceiling_fraction.value
    fp8 = c.peak_fp8_flops_per_s.value * k.fp8_gemm_ceiling_fraction.value
    mxfp8 = c.peak_fp8_flops_per_s.value * k.mxfp8_gemm_ceiling_fraction.value
    fp4 = c.peak_fp4_flops_per_s.value * k.fp4_gemm_ceiling_fraction.value
    assert max(fp8, mxfp8) / bf16 <= u["e4m3"] / u["bf16"]
    assert fp4 / bf16 <= u["f4"] / u["bf16"]
    expected = {"b200": (1.908, 1.891, 3.786), "gb200": (1.973, 1.955, 3.864)}[hardware]
    assert (fp8 / bf16, mxfp8 / bf16, fp4 / bf16) == pytest.approx(expected, abs=1.5e-3)
