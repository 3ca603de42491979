"""Fused attention kernels (``--attention-kernel``): btacalc/data/attention_kernels.toml as validated data.

A kernel named here may run the attention core at another FLOP rate than the device's large GEMMs. The
fused core's time (btacalc/model/gpu/costs.py, `_fused_core`) is

    t_core = kernel FLOPs / R                                    with a rate for the compute capability
    t_core = max(kernel FLOPs / R_gemm, HBM traffic / bandwidth)  without one

with R = datasheet 16-bit peak x `fraction_of_peak` (a kernel benchmark, FLOPs over wall time: neither the
fitted compute_efficiency nor FlashAttention's IO-count traffic bound applies on top of it), and R_gemm the
large-GEMM rate (datasheet x GEMM ceiling x compute_efficiency). Both apply to the FLOPs the kernel runs: the
score blocks on and below the causal diagonal (costs.causal_block_fraction). Example: `default` (cuDNN fused
attention) on an H100 runs at 0.467 x 989 = 461.5 TFLOP/s (FlashAttention-3 paper, Shah et al. 2024, arXiv
2407.08608, Figures 5 and 6, cuDNN at head dim 128, s = 4k, derived in the data file); llm-foundry's Triton
FlashAttention at 0.175 x 989 = 173 TFLOP/s (half of FlashAttention-2's published 35% of the H100 peak).
"""

from __future__ import annotations

import functools
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from .named_tables import load_named_tables, pick

KERNELS_FILE = "attention_kernels.toml"
DEFAULT_ATTENTION_KERNEL = "default"


class KernelRate(BaseModel):
    """The kernel's FLOP rate on a range of architectures, as a share of the dense 16-bit datasheet peak."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_compute_capability: float = Field(ge=0)
    max_compute_capability: float = Field(ge=0)
    fraction_of_peak: float = Field(gt=0, le=1)
    kind: Literal["published", "derived", "estimate", "calibrated"]
    source: str = Field(min_length=10)
    note: str = ""

    def covers(self, compute_capability: float) -> bool:
        return self.min_compute_capability <= compute_capability <= self.max_compute_capability


class AttentionKernel(BaseModel):
    """One attention kernel and its rates per architecture (none: the large-GEMM rate everywhere)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    summary: str
    source: str = Field(min_length=10)
    rate: tuple[KernelRate, ...] = ()

    def fraction_of_peak(self, compute_capability: Optional[float]) -> Optional[float]:
        """The kernel's share of the datasheet peak on this architecture, or None (the large-GEMM rate)."""
        if compute_capability is None:
            return None
        return next((r.fraction_of_peak for r in self.rate if r.covers(compute_capability)), None)


@functools.lru_cache(maxsize=1)
def attention_kernels() -> dict[str, AttentionKernel]:
    return load_named_tables(KERNELS_FILE, "kernel", AttentionKernel)


def attention_kernel(name: str) -> AttentionKernel:
    """The kernel `name`; a one-line error naming the known kernels otherwise."""
    return pick(attention_kernels(), name, "attention_kernel")
