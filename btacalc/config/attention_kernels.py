"""Fused attention kernels (``--attention-kernel``): btacalc/data/attention_kernels.toml as validated data.

A kernel named here may run the attention core at another FLOP rate than the device's large GEMMs. The
fused core's time (btacalc/model/gpu/costs.py, `_fused_core`) is

    t_core = kernel FLOPs / R                                    with a rate for the compute capability
    t_core = max(kernel FLOPs / R_gemm, HBM traffic / bandwidth)  without one

with R = datasheet 16-bit peak x `fraction_of_peak` (of the rate for the kernel's operand dtype: the 16-bit kernel,
or under --fp8-attention cuDNN's FP8 kernel with per-tensor or MXFP8 scales, whose share is also of the 16-bit peak) (a kernel benchmark, FLOPs over wall time: neither the
fitted compute_efficiency nor FlashAttention's IO-count traffic bound applies on top of it), and R_gemm the
large-GEMM rate (datasheet x GEMM ceiling x compute_efficiency). Both apply to the FLOPs the kernel runs: the
score blocks on and below the causal diagonal (rates.causal_block_fraction). Example: `default` (cuDNN fused
attention) on an H100 runs at 0.467 x 989 = 461.5 TFLOP/s (FlashAttention-3 paper, Shah et al. 2024, arXiv
2407.08608, Figures 5 and 6, cuDNN at head dim 128, s = 4k, derived in the data file); llm-foundry's Triton
FlashAttention at 0.175 x 989 = 173 TFLOP/s (half of FlashAttention-2's published 35% of the H100 peak).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal, Optional

import numpy as np

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import DataError
from .named_tables import load_named_tables, pick

KERNELS_FILE = "attention_kernels.toml"
DEFAULT_ATTENTION_KERNEL = "default"


class SeqLenShare(BaseModel):
    """The kernel's share of the peak measured at one sequence length (tokens per kernel call)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq_len_tokens: int = Field(gt=0)
    fraction_of_peak: float = Field(gt=0, le=1)


class KernelRate(BaseModel):
    """The kernel's FLOP rate on a range of architectures, as a share of the dense 16-bit datasheet peak:
    `fraction_of_peak`, or, where `by_seq_len` lists the same benchmark at several sequence lengths (one of
    them `fraction_of_peak`'s), the share interpolated at the kernel's sequence length."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_compute_capability: float = Field(ge=0)
    max_compute_capability: float = Field(ge=0)
    # the operands' dtype: the 16-bit kernel (bf16, also fp16), or the FP8 kernel --fp8-attention runs with per-tensor
    # (fp8) or MXFP8 block (mxfp8) scales (precision.toml fp8_attention_kernel); its share is still of the 16-bit peak
    dtype: Literal["bf16", "fp8", "mxfp8"] = "bf16"
    fraction_of_peak: float = Field(gt=0, le=1)
    by_seq_len: tuple[SeqLenShare, ...] = ()
    kind: Literal["published", "derived", "estimate", "calibrated"]
    source: str = Field(min_length=10)
    note: str = ""

    @model_validator(mode="after")
    def _points_ordered_and_hold_the_reference(self) -> "KernelRate":
        lengths = [p.seq_len_tokens for p in self.by_seq_len]
        if lengths != sorted(set(lengths)):
            raise ValueError("by_seq_len must list increasing, distinct seq_len_tokens")
        if self.by_seq_len and self.fraction_of_peak not in [p.fraction_of_peak for p in self.by_seq_len]:
            raise ValueError("fraction_of_peak must be one of the by_seq_len points (the benchmark's reference)")
        return self

    def covers(self, compute_capability: float, dtype: str = "bf16") -> bool:
        return self.dtype == dtype and self.min_compute_capability <= compute_capability <= self.max_compute_capability

    def share_at(self, seq_len: Any = None) -> Any:
        """The share at a kernel call of `seq_len` tokens (a number or an array of them): linear in
        log2(seq_len) between the two nearest `by_seq_len` points, the end point's outside them (np.interp);
        `fraction_of_peak` without points or length."""
        points = self.by_seq_len
        if not points or seq_len is None:
            return self.fraction_of_peak
        return np.interp(np.log2(seq_len), [math.log2(p.seq_len_tokens) for p in points],
                         [p.fraction_of_peak for p in points])


class DeterministicBackward(BaseModel):
    """The kernel's deterministic backward (TransformerEngine under NVTE_ALLOW_NONDETERMINISTIC_ALGO=0) on a range of
    architectures: its measured time over the non-deterministic backward's, same benchmark, shape and library."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_compute_capability: float = Field(ge=0)
    max_compute_capability: float = Field(ge=0)
    dtype: Literal["bf16", "fp8", "mxfp8"] = "bf16"
    backward_time_ratio: float = Field(gt=0)
    kind: Literal["published", "derived", "estimate", "calibrated"]
    source: str = Field(min_length=10)
    note: str = ""

    def covers(self, compute_capability: float, dtype: str = "bf16") -> bool:
        return self.dtype == dtype and self.min_compute_capability <= compute_capability <= self.max_compute_capability


class AttentionKernel(BaseModel):
    """One attention kernel and its rates per architecture (none: the large-GEMM rate everywhere)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    summary: str
    source: str = Field(min_length=10)
    rate: tuple[KernelRate, ...] = ()
    deterministic_backward: tuple[DeterministicBackward, ...] = ()
    # the same CUDA kernel as another entry behind another wrapper (the wrapper's own work is the catalogue's terms
    # `when = { attention_kernel = NAME }`): its rates are that entry's (`attention_kernels` copies them)
    rates_of: Optional[str] = None
    # whether the kernel runs a learnable softmax (attention sinks: GPT-OSS); false: such a model is refused with it
    attention_sinks: bool = True
    sinks_source: str = ""
    # whether a Megatron-LM launch runs it (TransformerEngine's attention backends); false: --emit megatron / bridge
    # is refused with it (llm-foundry's own attention wrappers)
    megatron_launch: bool = True
    # whether torchtitan's per-op activation checkpoint (--recompute op) keeps the kernel's output: its save list
    # holds SDPA's flash and efficient kernels; false: --recompute op is refused with it (the policy would re-run it)
    op_policy_saved: bool = True
    op_policy_source: str = ""

    @model_validator(mode="after")
    def _sourced_sinks(self) -> "AttentionKernel":
        if not self.attention_sinks and len(self.sinks_source) < 10:
            raise ValueError(f"kernel {self.name}: attention_sinks false needs its sinks_source")
        if not self.op_policy_saved and len(self.op_policy_source) < 10:
            raise ValueError(f"kernel {self.name}: op_policy_saved false needs its op_policy_source")
        return self

    @model_validator(mode="after")
    def _rates_once(self) -> "AttentionKernel":
        if self.rates_of is not None and (self.rate or self.deterministic_backward):
            raise ValueError(f"kernel {self.name}: rates_of {self.rates_of} and rates of its own")
        return self

    def fraction_of_peak(self, compute_capability: Optional[float], seq_len: Any = None, dtype: str = "bf16") -> Any:
        """The kernel's share of the 16-bit datasheet peak on this architecture at a kernel call of `seq_len`
        tokens (`KernelRate.share_at`; None: the rate's reference value) with `dtype` operands (bf16, or the FP8
        kernels fp8 / mxfp8), or None (16-bit: the large-GEMM rate; FP8: no published rate, refused when the
        run is resolved)."""
        if compute_capability is None:
            return None
        return next((r.share_at(seq_len) for r in self.rate if r.covers(compute_capability, dtype)), None)


    def deterministic_backward_ratio(self, compute_capability: Optional[float], dtype: str = "bf16") -> Optional[float]:
        """The deterministic backward's time over the non-deterministic one's on this architecture for `dtype`
        operands, or None where none is published (the deterministic backward is then not timed)."""
        if compute_capability is None:
            return None
        return next((d.backward_time_ratio for d in self.deterministic_backward
                     if d.covers(compute_capability, dtype)), None)


@functools.lru_cache(maxsize=1)
def attention_kernels() -> dict[str, AttentionKernel]:
    table = load_named_tables(KERNELS_FILE, "kernel", AttentionKernel)
    for name, kernel in table.items():
        if kernel.rates_of is None:
            continue
        base = table.get(kernel.rates_of)
        if base is None or base.rates_of is not None or not base.rate:
            raise DataError(f"btacalc/data/{KERNELS_FILE}: kernel {name}: rates_of {kernel.rates_of!r} is no kernel "
                            "with rates of its own")
        table[name] = kernel.model_copy(update={"rate": base.rate,
                                                "deterministic_backward": base.deterministic_backward})
    return table


def attention_kernel(name: str) -> AttentionKernel:
    """The kernel `name`; a one-line error naming the known kernels otherwise."""
    return pick(attention_kernels(), name, "attention_kernel")
