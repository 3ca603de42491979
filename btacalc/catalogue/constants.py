"""Named modelling constants (``formulas/constants.toml``): pass factors and collective volumes.

Read with the standard library and pydantic only (no sympy), so the numeric core can use them.
Every value carries a `<name>_source` next to it; a missing source or an unknown key is a data error.
"""

from __future__ import annotations

import functools
import sys

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import DataError
from ..paths import data_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class Passes(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    backward_matmul_factor: int = Field(ge=1)
    backward_matmul_factor_source: str = Field(min_length=10)
    backward_traffic_factor: int = Field(ge=1)
    backward_traffic_factor_source: str = Field(min_length=10)
    backward_exchange_factor: int = Field(ge=1)
    backward_exchange_factor_source: str = Field(min_length=10)
    weight_stream_passes: int = Field(ge=1)
    weight_stream_passes_source: str = Field(min_length=10)
    recompute_passes: int = Field(ge=1)
    recompute_passes_source: str = Field(min_length=10)
    sp_backward_regather: int = Field(ge=0)
    sp_backward_regather_source: str = Field(min_length=10)
    cp_backward_exchange_factor: int = Field(ge=1)
    cp_backward_exchange_factor_source: str = Field(min_length=10)


class Collectives(BaseModel):
    """Volume factors c of ring collectives: each rank sends c * (n - 1) / n of the buffer."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    all_reduce: int = Field(ge=1)
    all_reduce_source: str = Field(min_length=10)
    reduce_scatter: int = Field(ge=1)
    reduce_scatter_source: str = Field(min_length=10)
    all_gather: int = Field(ge=1)
    all_gather_source: str = Field(min_length=10)


class Megatron(BaseModel):
    """Megatron-LM conventions GPU plans follow."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    make_vocab_size_divisible_by: int = Field(ge=1)
    make_vocab_size_divisible_by_source: str = Field(min_length=10)
    # the merged 1F1B schedule's host work per node of a layer (model/gpu/merged_pair.py NodeHost)
    merged_node_build_ref_ops: float = Field(ge=0)
    merged_node_build_ref_ops_source: str = Field(min_length=10)
    merged_node_forward_ref_ops: float = Field(ge=0)
    merged_node_forward_ref_ops_source: str = Field(min_length=10)
    merged_node_backward_ref_ops: float = Field(ge=0)
    merged_node_backward_ref_ops_source: str = Field(min_length=10)
    merged_node_cuda_calls: int = Field(ge=0)
    merged_node_cuda_calls_source: str = Field(min_length=10)


class TransformerEngine(BaseModel):
    """TransformerEngine conventions GPU plans follow."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    grouped_gemm_streams: int = Field(ge=1)
    grouped_gemm_streams_source: str = Field(min_length=10)
    # GroupedLinear's Python per local expert, beyond the GEMM loop (expert_gemm_host_s) and the module call
    # (module_host_s): reference-op equivalents per grouped linear and pass (model/gpu/fixed.py)
    grouped_linear_expert_forward_ref_ops: float = Field(ge=0)
    grouped_linear_expert_forward_ref_ops_source: str = Field(min_length=10)
    grouped_linear_expert_backward_ref_ops: float = Field(ge=0)
    grouped_linear_expert_backward_ref_ops_source: str = Field(min_length=10)


class Nccl(BaseModel):
    """NCCL's tuning model of one collective call (model/gpu/nccl.py): per-protocol lists in the order LL,
    LL128, Simple; latencies in microseconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: str = Field(min_length=3)
    version_source: str = Field(min_length=10)
    ring_base_latency_us: tuple[float, float, float]
    ring_base_latency_us_source: str = Field(min_length=10)
    tree_base_latency_us: tuple[float, float, float]
    tree_base_latency_us_source: str = Field(min_length=10)
    nvlink_ring_latency_us: tuple[float, float, float]
    nvlink_ring_latency_us_source: str = Field(min_length=10)
    nvlink_tree_latency_us: tuple[float, float, float]
    nvlink_tree_latency_us_source: str = Field(min_length=10)
    net_ring_latency_us: tuple[float, float, float]
    net_ring_latency_us_source: str = Field(min_length=10)
    net_tree_latency_us: tuple[float, float, float]
    net_tree_latency_us_source: str = Field(min_length=10)
    net_overhead_us: tuple[float, float, float]
    net_overhead_us_source: str = Field(min_length=10)
    ring_bandwidth_share: tuple[float, float, float]
    ring_bandwidth_share_source: str = Field(min_length=10)
    ll_max_bandwidth_one_node_gb_per_s: tuple[tuple[float, float], ...]
    ll_max_bandwidth_one_node_gb_per_s_source: str = Field(min_length=10)
    ll_max_bandwidth_nodes_gb_per_s: tuple[float, float]
    ll_max_bandwidth_nodes_gb_per_s_source: str = Field(min_length=10)
    tree_all_reduce_share: float = Field(gt=0, le=1)
    tree_all_reduce_share_source: str = Field(min_length=10)
    tree_protocol_share_one_node: tuple[float, float, float]
    tree_protocol_share_one_node_source: str = Field(min_length=10)
    tree_protocol_share_nodes: tuple[float, float, float]
    tree_protocol_share_nodes_source: str = Field(min_length=10)
    ring_all_reduce_plateau: float = Field(ge=1)
    ring_all_reduce_plateau_source: str = Field(min_length=10)
    tree_correction: tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]
    tree_correction_source: str = Field(min_length=10)


class Constants(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    passes: Passes
    collectives: Collectives
    megatron: Megatron
    transformer_engine: TransformerEngine
    nccl: Nccl


@functools.lru_cache(maxsize=1)
def constants() -> Constants:
    path = data_dir("formulas") / "constants.toml"
    try:
        return Constants.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise DataError(f"{path.name}: {exc}") from exc
