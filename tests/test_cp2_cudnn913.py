"""cp2: the cuDNN 9.13 fused-attention rate on B200 (btacalc/data/attention_kernels.toml `cudnn-9-13`), derived here
from the benchmark's times typed from their source, and the MLPerf v5.1 Llama 3.1 8B rows that ran it (their images
pin cuDNN 9.13.1)."""

from __future__ import annotations

import pytest

from btacalc.config.attention_kernels import attention_kernel
from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.rates import attention_core_peak
from btacalc.model.problem import make_problem
from btacalc.planning.measured import load_runs

# github.com/NVIDIA/cudnn-frontend @ 0b1577c8 benchmark/sdpa_benchmark_training/artifacts/
# sdpa_bf16_benchmark_results_NVIDIA_B200.csv, pyt_cudnn rows (b = 1, 128 query / 8 KV heads, d = 128, causal):
# s -> (forward ms, backward ms); L11, L15, L19, L23. sample_b200_bf16_run.txt L7: cuDNN 91300 (9.13.0).
CUDNN913_B200_MS = {2048: (0.287, 0.925), 4096: (0.642, 1.960), 8192: (1.877, 5.833), 16384: (6.602, 20.460)}
# the same rows' forward TFLOP/s column, on the half-square count 4 b h s^2 d / 2
CUDNN913_B200_FWD_TFLOPS = {4096: 855.678, 8192: 1171.278}
B200_BF16_PEAK = 2250e12  # FLOP/s, HGX B200 datasheet dense BF16 (hardware_profiles/b200.toml)
BWD_PER_FWD = 2.5  # five matmuls against two (the benchmark's own convention)
HEADS, HEAD_DIM, BLOCK = 128, 128, 128


def _share(s: int) -> float:
    """Forward + backward FLOPs of the causal blocks the kernel runs, over the two measured times, over B200's peak."""
    nb = s // BLOCK
    fwd = 4 * HEADS * s * s * HEAD_DIM * (nb * (nb + 1) / 2) / (nb * nb)
    return fwd * (1 + BWD_PER_FWD) / (sum(CUDNN913_B200_MS[s]) * 1e-3) / B200_BF16_PEAK


def test_the_benchmark_rows_are_on_the_half_square_count():
    """4 x 128 x 4096^2 x 128 / 2 = 549.8 GFLOP in 0.642 ms = 856 TFLOP/s, the row's 855.678 (its times rounded)."""
    for s, tflops in CUDNN913_B200_FWD_TFLOPS.items():
        half_square = 4 * HEADS * s * s * HEAD_DIM / 2
        assert half_square / (CUDNN913_B200_MS[s][0] * 1e-3) / 1e12 == pytest.approx(tflops, rel=2e-3)


def test_cudnn_913_on_b200_at_each_length_is_its_derivation():
    """4k: 3.5 x 566.9 GFLOP / 2.602 ms = 762.6 TFLOP/s = 0.339 of 2250; 2k 0.187, 8k 0.451, 16k 0.510."""
    assert _share(4096) == pytest.approx(0.3389, abs=5e-4)
    assert _share(2048) == pytest.approx(0.1874, abs=5e-4)
    kernel = attention_kernel("cudnn-9-13")
    for s in CUDNN913_B200_MS:
        assert kernel.fraction_of_peak(10.0, s) == pytest.approx(_share(s), abs=5e-4)
    assert kernel.fraction_of_peak(9.0, 4096) is None  # no Hopper rate: the large-GEMM rate there
    assert kernel.fraction_of_peak(10.0, 4096, "fp8") is None


def test_the_913_kernel_loses_most_on_the_short_calls_context_parallelism_makes():
    """Against cuDNN 9.18.1 (the `default` entry): 0.339 / 0.486 at 4k (s / CP at CP 2 of 8192) but 0.451 / 0.559 at
    8k (CP 1): the 4k call loses more. The B200 core at CP 2 runs at the 4k share of 2250 TFLOP/s."""
    old, new = attention_kernel("default"), attention_kernel("cudnn-9-13")
    assert new.fraction_of_peak(10.0, 4096) / old.fraction_of_peak(10.0, 4096) < \
        new.fraction_of_peak(10.0, 8192) / old.fraction_of_peak(10.0, 8192)
    run = RunOptions(seq_len=8192, attention="flash", recompute="none", attention_kernel="cudnn-9-13")
    problem = make_problem(load_preset("llama-3-8b"), resolve_hardware("b200"), run,
                           Layout(devices=32, context_parallel=2))
    assert attention_core_peak(problem, 1.0) == pytest.approx(_share(4096) * B200_BF16_PEAK, rel=2e-3)


def test_every_mlperf_v51_llama_8b_row_runs_the_913_kernel():
    """NVIDIA's and UF's v5.1 Llama 3.1 8B Dockerfiles (L21 pytorch:25.09, L43 libcudnn9-cuda-13=9.13.1.26-1)."""
    rows = [r for r in load_runs() if r.id.startswith("llama-3-8b-") and "mlperf-v51" in r.id]
    assert len(rows) == 9
    for row in rows:
        assert row.recipe.attention_kernel == "cudnn-9-13"
        assert "libcudnn9-cuda-13=9.13.1.26" in row.recipe.source
