"""det3 (issue 21): TransformerEngine's deterministic attention backward under Megatron's --deterministic-mode
(NVTE_ALLOW_NONDETERMINISTIC_ALGO=0), timed where a benchmark gives it against the default backward.

Expected values are written from the sources: cudnn-frontend @ 3929da2e benchmark/sdpa_benchmark_training/results/
llama3.1/gb200/llama3.1_20260424_100750.csv L38-40 (GB200, cuDNN 9.22.0, bfloat16, causal top-left, b = 2,
s = 8192, 64/8 heads, d = 128: backward 4.127 ms default, 4.754 ms with use_deterministic_algorithm), the same
benchmark's FLOP convention (forward 2 matmuls, backward 5 with the recomputed Q K^T, on the blocks on and below the
diagonal), the GB200's 2,450 dense BF16 TFLOP/s and cuDNN 9.18.1's 0.559 of it at s = 8192 (attention_kernels.toml,
derived from the same repository's gb200_918 file), and Llama 3 8B's shapes (32 layers, 32 query heads of 128)."""

from __future__ import annotations

import pytest

from btacalc.config.attention_kernels import attention_kernel
from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.problem import make_problem
from btacalc.planning.measured import load_runs, predict

DEFAULT_BWD_MS, DETERMINISTIC_BWD_MS = 4.127, 4.754  # the benchmark's two backward times (L39, L40)
GB200_ATTENTION_RATE = 0.559 * 2450e12  # cuDNN's causal fwd+bwd at s = 8192 on GB200 (FLOP/s on the blocks run)


def test_the_sm100_ratio_is_the_benchmarks_and_no_other_architecture_has_one():
    """4.754 / 4.127 = 1.152 on compute capability 10.0 (B200 / GB200); none on Hopper (cuDNN's dP-workspace
    deterministic backward has no published time pair) or Ampere (FlashAttention's deterministic backward)."""
    kernel = attention_kernel("default")
    assert kernel.deterministic_backward_ratio(10.0) == pytest.approx(DETERMINISTIC_BWD_MS / DEFAULT_BWD_MS, abs=5e-4)
    assert kernel.deterministic_backward_ratio(10.0) == 1.152
    assert kernel.deterministic_backward_ratio(9.0) is None
    assert kernel.deterministic_backward_ratio(8.0) is None
    assert kernel.deterministic_backward_ratio(10.0, "fp8") is None  # measured in BF16 only
    assert kernel.deterministic_backward_ratio(None) is None


def _step(hw: str, deterministic: bool, recompute: str = "none") -> float:
    run = RunOptions(seq_len=8192, attention="flash", causal=True, gradient_bytes=4, recompute=recompute,
                     deterministic_attention=deterministic)
    problem = make_problem(load_preset("llama-3-8b"), resolve_hardware(hw), run,
                           Layout(devices=8, tensor_parallel=4, micro_batches=1))
    return gpu_step_time(problem, 1, 1).step_time_s


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_gb200_step_pays_the_backward_kernel_times_0152(recompute):
    """Llama 3 8B at TP 4 on a GB200, s = 8192, causal, one micro-batch: each device holds 32 / 4 = 8 heads. The
    forward kernel runs 4 s^2 a d FLOPs on 65/128 of the score blocks (64 blocks of 128: 64 x 65 / 2 of 64^2),
    4 x 8192^2 x 8 x 128 x 65/128 = 139.6 GFLOP; the backward kernel 2.5 x that (it recomputes Q K^T), 0.2548 ms
    at 0.559 x 2,450 TFLOP/s. Deterministic, it takes 0.152 x that longer, in each of the 32 layers: 1.239 ms
    per step. A full re-run of the forward is a forward kernel: the same extra time with recompute full."""
    forward_flops = 4 * 8192**2 * 8 * 128 * 65 / 128
    assert forward_flops == pytest.approx(139.586e9, rel=1e-5)
    backward_s = 2.5 * forward_flops / GB200_ATTENTION_RATE
    expected = 32 * backward_s * (DETERMINISTIC_BWD_MS / DEFAULT_BWD_MS - 1)
    assert expected == pytest.approx(1.239e-3, rel=2e-3)
    extra = _step("gb200", True, recompute) - _step("gb200", False, recompute)
    assert extra == pytest.approx(32 * backward_s * 0.152, rel=1e-9)


@pytest.mark.parametrize("hw", ["h100", "a100-80gb"])
def test_hopper_and_ampere_keep_the_default_time(hw):
    """No published time of cuDNN's Hopper deterministic backward nor of FlashAttention's on an A100: the
    deterministic run is timed as the default one there (and the run's notes say so)."""
    assert _step(hw, True) == _step(hw, False)


CI_GB200 = [r for r in load_runs()
            if r.id.startswith("gpt-7b-megatron-ci-gb200") and r.id.endswith("-dev-time")]


@pytest.mark.parametrize("run", CI_GB200, ids=[r.id for r in CI_GB200])
def test_the_ci_gb200_rows_are_slower_with_their_deterministic_mode(run):
    """The CI rows' recipe sets deterministic_mode (Megatron-LM @ d98e8a64 model_config.yaml --deterministic-mode):
    on GB200 the prediction is slower than the same row without it, and the note says what stays untimed."""
    assert len(CI_GB200) == 2 and run.recipe.deterministic_mode
    result = predict(run)
    default = run.model_copy(update={"recipe": run.recipe.model_copy(update={"deterministic_mode": False})})
    assert predict(default).predicted.tokens_per_s_per_device > result.predicted.tokens_per_s_per_device
    note = result.not_timed["deterministic_mode"]
    assert "1.152x" in note and "sm90" in note and "sm80" in note
