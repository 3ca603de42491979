"""Fused attention kernels (``--attention-kernel``): btacalc/data/attention_kernels.toml as validated data.

A kernel named here may run the attention core at another FLOP rate than the device's large GEMMs. The
fused core's time (btacalc/model/gpu/costs.py, `_fused_core`) is the roofline

    t_core = max(kernel FLOPs / R, HBM traffic / bandwidth)

with R = datasheet 16-bit peak x `fraction_of_peak` where the kernel has a rate for the device's compute
capability, else R = the large-GEMM rate (datasheet x GEMM ceiling x compute_efficiency), which is what
`default` always uses. Both apply to the FLOPs the kernel runs: the score blocks on and below the causal
diagonal (costs.causal_block_fraction). Example: llm-foundry's Triton FlashAttention on an H100 runs at
0.175 x 989 TFLOP/s = 173 TFLOP/s, where the default core runs at 0.900 x 0.6661 x 989 = 593 TFLOP/s. The
0.175 is derived in the data file: FlashAttention-2's published 35% of the H100 peak (Shah et al. 2024,
arXiv 2407.08608), halved for this FlashAttention-1-era kernel (Dao 2023, arXiv 2307.08691:
FlashAttention-2 is about 2x faster).
"""

from __future__ import annotations

import functools
import sys
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BtacalcError, DataError
from ..paths import package_data

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

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
    raw = tomllib.loads(package_data(KERNELS_FILE).read_text(encoding="utf-8"))
    try:
        return {name: AttentionKernel(name=name, **table) for name, table in raw["kernel"].items()}
    except Exception as exc:  # a broken shipped file is a bug, not the user's input
        raise DataError(f"btacalc/data/{KERNELS_FILE}: {exc}") from exc


def attention_kernel(name: str) -> AttentionKernel:
    """The kernel `name`; a one-line error naming the known kernels otherwise."""
    table = attention_kernels()
    if name not in table:
        raise BtacalcError(f"{{attention_kernel}} must be one of {', '.join(table)}, got {name!r}")
    return table[name]
