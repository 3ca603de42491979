"""--emit megatron's --attention-backend names the kernel the plan's attention core is timed at. Megatron-LM @
d98e8a64 language_module.py L133-144: `flash` sets NVTE_FLASH_ATTN=1, NVTE_FUSED_ATTN=0 (the flash-attn package
through TransformerEngine), `fused` the reverse (cuDNN's FusedAttention, the kernel of btacalc's default rates in
btacalc/data/attention_kernels.toml), `unfused` TE's eager softmax. TransformerEngine @ d0067d0
attention/dot_product_attention/utils.py L1114-1124 runs a learnable softmax (GPT-OSS's sinks) on FusedAttention or
unfused only, so `flash` left GPT-OSS with no backend."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("hw, refused", [("h100", True), ("b200", False)])
def test_fp8_attention_with_sinks_and_windows_is_refused_below_sm100(cli, hw, refused):
    # review19: TransformerEngine @ d0067d0 attention/dot_product_attention/utils.py L1125-1135 and L1344-1354 turn
    # FusedAttention off in FP8 for GPT-OSS's learnable softmax and sliding window below sm100; `fused` (the only
    # FP8 backend) then has nothing to run, and the plan timed cuDNN's FP8 kernel
    code, _, err = cli("plan", "--model", "gpt-oss-120b", "--hw", hw, "--devices", "64", "--precision", "fp8",
                       "--fp8-attention")
    assert (code == 2) is refused, err
    if refused:
        assert "compute capability 10.0" in err and len(err.strip().splitlines()) == 1


def test_attention_sinks_under_context_parallelism_are_refused(cli):
    # review19: TE @ d0067d0 dot_product_attention/utils.py L1148-1155 runs a learnable softmax under CP only with
    # cp_comm_type a2a; the launch (Megatron's default p2p, the ring btacalc times) had no attention backend, and the
    # search offered such layouts
    code, _, err = cli("plan", "--model", "gpt-oss-120b", "--hw", "b200", "--devices", "64", "--cp", "2", "--seq", "8192")
    assert code == 2 and "cp_comm_type a2a" in err and len(err.strip().splitlines()) == 1
    assert cli("plan", "--model", "gpt-oss-120b", "--hw", "b200", "--devices", "64", "--cp", "1")[0] in (0, 1)


def _searched(cli, *given):
    code, out, err = cli("plan", "--model", "gpt-oss-120b", "--hw", "b200", "--devices", "64", "--tp", "1", "--pp", "4",
                         "--search", "--json", *given)
    assert code in (0, 1), err
    return json.loads(out)["candidates"]


def test_the_layout_search_offers_attention_sinks_no_context_parallelism(cli):
    assert _searched(cli) == _searched(cli, "--cp", "1")  # it searched CP 2, 4 and 8 as well
