"""review21: a second engineer's review of the ninth session's merged work (a100attn, semantics22, attngemm,
hostile23, runs10); docs/story.md "review21". The argparse-choice cases are in tests/test_bad_input.py."""

from __future__ import annotations

from btacalc.cli.options import AttentionKernelOpt
from btacalc.config.attention_kernels import attention_kernel
from btacalc.config.hardware import resolve_hardware
from btacalc.planning.measured import Recipe
from btacalc.planning.report import Inputs


def _default_kernel_texts() -> list[str]:
    return [str(AttentionKernelOpt.help), str(Recipe.model_fields["attention_kernel"].description),
            str(Inputs.model_fields["attention_kernel"].description)]


def test_the_default_kernel_is_not_described_as_the_large_gemm_rate_where_it_has_a_rate():
    """a100attn gave the default kernel FlashAttention-2's A100 rate, on top of cuDNN's Hopper and Blackwell rates;
    the --attention-kernel help and the report's and a run's field descriptions still said the default kernel runs
    the core at the large-GEMM rate. Each built-in A100 / H100 / B200 profile's default kernel has a rate."""
    for hw in ("a100-40gb", "h100", "b200"):
        capability = resolve_hardware(hw).chip.capability
        assert attention_kernel("default").fraction_of_peak(capability, 4096, "bf16") is not None, hw
    for text in _default_kernel_texts():
        assert "default: the large-GEMM rate" not in text and "default (the attention core at the device's " \
            "large-GEMM rate" not in text, text
        assert "large-GEMM rate" in text  # the fallback where the file has no rate is still said
