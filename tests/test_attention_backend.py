"""--emit megatron's --attention-backend names the kernel the plan's attention core is timed at. Megatron-LM @
d98e8a64 language_module.py L133-144: `flash` sets NVTE_FLASH_ATTN=1, NVTE_FUSED_ATTN=0 (the flash-attn package
through TransformerEngine), `fused` the reverse (cuDNN's FusedAttention, the kernel of btacalc's default rates in
btacalc/data/attention_kernels.toml), `unfused` TE's eager softmax. TransformerEngine @ d0067d0
attention/dot_product_attention/utils.py L1114-1124 runs a learnable softmax (GPT-OSS's sinks) on FusedAttention or
unfused only, so `flash` left GPT-OSS with no backend."""

from __future__ import annotations

import re

import pytest

CASES = [
    ("--model llama-3-8b --hw h100 --devices 8", "fused"),  # the default kernel: cuDNN (was flash)
    ("--model gpt-oss-120b --hw b200 --devices 64", "fused"),  # learnable softmax: FlashAttention refuses it
    ("--model llama-3-8b --hw h100 --devices 8 --attention-kernel flash-attn-2", "flash"),  # the flash-attn package
    ("--model llama-3-8b --hw h100 --devices 8 --attention-kernel cudnn-9-13", "fused"),
    ("--model llama-3-8b --hw h100 --devices 8 --precision fp8 --fp8-attention", "fused"),  # TE's FP8 attention
    ("--model llama-3-8b --hw h100 --devices 8 --attention eager", "unfused"),
]


@pytest.mark.parametrize("given, backend", CASES)
def test_the_attention_backend_is_the_timed_kernels(cli, given, backend):
    code, out, err = cli("plan", *given.split(), "--emit", "megatron")
    assert code in (0, 1), err
    assert re.findall(r"--attention-backend (\w+)", out) == [backend]
