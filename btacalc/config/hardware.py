"""Hardware profiles: one TOML file per device in ``hardware_profiles/``, every number with its source.

A profile has five sections, kept apart on purpose (cf. Calculon's system/application split):

- ``chip``: datasheet numbers of one device (cores, peak FLOP/s, on-chip SRAM, power);
- ``memory``: the memory the device trains from, off the chip (HBM on a GPU; MemoryX and the
  system I/O link that streams weights on a wafer);
- ``system``: topology and system-level numbers (devices per node, scale-up and scale-out links,
  system power, weight-streaming buffers; on a wafer cluster the SwarmX broadcast-reduce tree);
- ``mesh`` (wafers only): the on-wafer fabric, a 2D mesh of processing elements (grid, clock, hop
  latency, link width), from which `btacalc.model.wafer.mesh` derives the per-tile overhead and the
  cost of routing tokens to experts spread over the mesh;
- ``reserves`` (GPUs only): what the framework keeps off the capacity the driver reports, by name
  (the CUDA context, the communicators' buffers, the libraries' workspaces, the caching allocator's
  fragmentation), each with its source or a stated estimate (`Reserves`);
- ``collectives`` (GPUs, optional): how NCCL runs on the links, a bus efficiency and a per-call latency
  for the scale-up and the scale-out link, each from published nccl-tests results;
- ``calibration``: named correction factors (compute efficiency, usable memory fraction of a wafer,
  per-tile overhead), each an estimate with its reasoning or a calibrated value with what it was fitted to;
- ``defaults``: run-policy defaults (memory model, attention kernel, recomputation) with their reason.
"""

from __future__ import annotations

import functools
import math
import typing
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from ..errors import BtacalcError, DataError, clean_text
from ..paths import data_dir, profile_names, read_input
from ..vocabulary import OP_POLICY, parse_recompute
from .text import Name, check_path_text, input_kind, name_not_file, nearest_name, parse_value_error

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class Number(BaseModel):
    """A hardware number with its provenance.

    kind: `published` (vendor datasheet or paper), `derived` (computed from published numbers;
    `note` gives the arithmetic), `estimate` (not published; `note` says how it was made),
    `calibrated` (fitted; `fitted_to` names the points or runs it was fitted on).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float = Field(strict=True, description="a TOML number (not a string or a boolean); its range depends "
                         "on the field (`Range`)")
    kind: Literal["published", "derived", "estimate", "calibrated"]
    source: str
    note: str = ""
    fitted_to: list[str] = Field(default_factory=list, description="calibrated numbers: what they were fitted on")

    @field_validator("source")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"source must be a URL, got {v!r}")
        return v

    @model_validator(mode="after")
    def _explained(self) -> "Number":
        if self.kind != "published" and len(self.note.strip()) < 10:
            # hostile40: "a estimate number needs a note" was said of a note given but short
            given = f" (got {self.note.strip()[:30]!r})" if self.note.strip() else ""
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise ValueError(f"{article} {self.kind} number needs a note of at least 10 characters saying how it was "
                             f"obtained{given}")
        if self.kind == "calibrated" and not self.fitted_to:
            raise ValueError("a calibrated number needs fitted_to: the points or runs it was fitted on")
        return self


@dataclass(frozen=True)
class Range:
    """The physical range of a hardware number, checked on load: finite, within [low, high] (or
    (low, high] when `open_low`), a whole number when `integer`. The bounds are far outside any real
    device; they exist so that nothing downstream divides by zero, overflows or prints inf/nan.
    `unit` is how `hw show` prints the number."""

    low: float
    high: float
    unit: str
    integer: bool = False
    open_low: bool = False
    # a quantity that scales (a rate, a size, a time); False for a label that only looks like a number (a CUDA
    # compute capability: whatif must not multiply it)
    scalable: bool = True

    def rule(self) -> str:
        kind = "a whole number" if self.integer else "a finite number"
        unit = f" {self.unit}" if self.unit not in ("", "count") else ""
        return f"must be {kind} in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}]{unit}"

    def admits(self, v: float) -> bool:
        if not math.isfinite(v) or (self.integer and not float(v).is_integer()):
            return False
        return (self.low < v if self.open_low else self.low <= v) and v <= self.high


def _past_float(v: Any) -> bool:
    """An integer beyond those a float holds exactly (2^53): 10**400 has no float at all."""
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2 ** 53


def shown(v: float) -> str:
    """A number as an error shows it: short (1e+09), unless that hides why it breaks a rule (a count of
    108.0000001 is not 108)."""
    if _past_float(v):
        # hostile36: an integer past float's exact ones was written with all its digits (a 4,300-digit line), or
        # overflowed float formatting; a whole number this size breaks only a range, which 6 digits show
        from decimal import Decimal

        return f"{Decimal(v).normalize():.6g}"
    short = f"{v:.6g}"
    return short if not math.isfinite(v) or float(short) == v else repr(v)


# Capacities up to 1e18 B (1 EB: beyond any device, and within the 64-bit integers of vectorised sweeps);
# rates at least 1 per second, so that no time is infinite.
BYTES = Range(1, 1e18, "B")
# On-chip memory of one core or SM: at least 1 KB (the smallest real one, a WSE core, has 48 KB; a
# fused attention kernel blocks into it, so less than a few hundred bytes leaves no block at all).
CORE_BYTES = Range(1024, 1e18, "B")
BANDWIDTH = Range(1, 1e18, "B/s")  # 1 EB/s; the largest real one, WSE-3 SRAM, is 2.1e16
FLOPS = Range(1, 1e21, "FLOP/s")  # 1 ZFLOP/s: 60,000 x the WSE-3 estimate
POWER = Range(1, 1e7, "W")  # 10 MW per device
CORES = Range(1, 1e9, "count", integer=True)
DEVICES = Range(1, 1e6, "count", integer=True)
BUFFERS = Range(1, 1e3, "count", integer=True)
# Efficiencies and usable fractions: at least 1e-6, so that every time (work / (rate x fraction)) and
# every product of a few fractions stays a finite, normal float64 (a 1e-300 efficiency made step times
# overflow to inf and printed nan); a millionth of a device's peak is below any measured efficiency
# (the lowest calibrated one is above 0.1).
FRACTION = Range(1e-6, 1, "")
SHARE = Range(0, 1, "")  # a share that may be zero
TILE_OVERHEAD = Range(0, 1, "s")  # seconds per tile per layer; 0 = no overhead
LATENCY = Range(0, 1, "s")  # a link or tree-level latency: at most a second
VECTOR_OVERHEAD = Range(0, 1e3, "elements")  # a PE's fixed cost per vector instruction, in SIMD-lane elements
GEMM_TILE = Range(16, 1024, "elements", integer=True)  # one side of a GEMM's output tile (CTA tile)
OVERLAP = Range(1, 100, "")  # exponent of a smooth roofline: 1 = compute and memory add, large = the larger one
FANOUT = Range(2, 1e3, "count", integer=True)  # a tree node serves at least two children
MESH_PES = Range(1, 1e5, "count", integer=True)  # PEs along one side of a wafer's mesh (WSE-3: 1,172)
CLOCK = Range(1e6, 1e11, "Hz")  # 1 MHz to 100 GHz
CAPABILITY = Range(1, 100, "", scalable=False)  # CUDA compute capability major.minor (8.0 A100 ... 10.3 B300)
CYCLES = Range(0, 1e6, "cycles")
LINK_BYTES = Range(1, 1e6, "B/cycle")

# Published sizes are rounded (WSE-2: "48 KB per core" and "40 GB", two significant figures each, so
# each may be off by up to about 1.2%): cores x per-core SRAM may differ from the total by this much.
SRAM_ROUNDING = 0.025


def number_range(section: type[BaseModel], field: str) -> Optional[Range]:
    """The `Range` a section's field carries (None for fields without one)."""
    info = section.model_fields.get(field)
    return next((m for m in info.metadata if isinstance(m, Range)), None) if info else None


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*")
    @classmethod
    def _in_range(cls, v: Any, info: ValidationInfo) -> Any:
        rng = number_range(cls, info.field_name or "")
        if isinstance(v, Number) and rng is not None and not rng.admits(v.value):
            raise ValueError(f"value = {shown(v.value)}: {rng.rule()}")
        return v


class Chip(_Section):
    cores: Annotated[Number, CORES] = Field(description="cores (wafer) or streaming multiprocessors (GPU)")
    peak_flops_per_s: Annotated[Number, FLOPS] = Field(description="dense 16-bit peak")
    peak_fp8_flops_per_s: Annotated[Optional[Number], FLOPS] = Field(
        None, description="dense FP8 peak: the linear layers' GEMMs under --precision fp8, fp8-current, "
        "fp8-blockwise and mxfp8 (btacalc/data/precision.toml)")
    peak_fp4_flops_per_s: Annotated[Optional[Number], FLOPS] = Field(
        None, description="dense FP4 peak: the linear layers' GEMMs under --precision nvfp4")
    compute_capability: Annotated[Optional[Number], CAPABILITY] = Field(
        None, description="GPU: CUDA compute capability (9.0 Hopper, 10.0 Blackwell): which low-precision recipes "
        "run and whether FP8 GEMMs need transposed operands (TransformerEngine, below 10.0)")
    sram_bytes: Annotated[Number, BYTES] = Field(description="all on-chip SRAM (a GPU's L2 and L1/shared)")
    sram_bytes_per_core: Annotated[Number, CORE_BYTES]
    shared_memory_bytes_per_core: Annotated[Optional[Number], CORE_BYTES] = Field(
        None, description="GPU: the most shared memory one thread block may use on an SM, the SRAM a fused "
        "attention kernel tiles into (Dao et al. 2022's M); defaults to sram_bytes_per_core")
    sram_bandwidth_bytes_per_s: Annotated[Optional[Number], BANDWIDTH] = None
    power_w: Annotated[Number, POWER]

    @property
    def capability(self) -> float:
        """The CUDA compute capability, 0.0 where the profile states none (a wafer): below every recipe's minimum and
        outside every FP8 GEMM layout range (review14: the one reading of `compute_capability` where 0.0 stood in)."""
        return self.compute_capability.value if self.compute_capability else 0.0


class Memory(_Section):
    offchip_memory_bytes: Annotated[Number, BYTES] = Field(description="HBM (GPU) or MemoryX capacity (wafer)")
    offchip_bandwidth_bytes_per_s: Annotated[Number, BANDWIDTH] = Field(
        description="HBM bandwidth (GPU) or the weight-streaming system I/O link (wafer)")
    memoryx_bandwidth_bytes_per_s: Annotated[Optional[Number], BANDWIDTH] = Field(
        None, description="wafer: rate at which MemoryX serves weights into the SwarmX tree and absorbs the reduced "
        "gradients (the stream runs at the smaller of this and the system I/O)")
    memoryx_update_bandwidth_bytes_per_s: Annotated[Optional[Number], BANDWIDTH] = Field(
        None, description="wafer: memory bandwidth MemoryX's optimizer step reads and writes the training state at")
    activation_offload_bandwidth_bytes_per_s: Annotated[Optional[Number], BANDWIDTH] = Field(
        None, description="wafer, weight streaming: rate at which stored activations that do not fit the SRAM leave "
        "for the cluster's activation servers and come back for backward (Cerebras R2.0+ dynamic memory offload; "
        "absent: no offload)")
    achievable_bandwidth_fraction: Annotated[Optional[Number], FRACTION] = Field(
        None, description="GPU: share of offchip_bandwidth_bytes_per_s a streaming (elementwise) kernel reaches on "
        "large tensors (STREAM-like copy/triad benchmarks); the memory-bound phases, optimizer step and gradient "
        "norm move their bytes at it (absent: 1, the datasheet rate)")

    @property
    def streaming_share(self) -> float:
        """f_stream = `achievable_bandwidth_fraction` (a published STREAM-like benchmark over the datasheet rate),
        1 where the profile has none: the one reading of it (here and model/gpu/precision.py, whose cast kernels
        fall back to it where the profile measures no cast share of their own)."""
        return self.achievable_bandwidth_fraction.value if self.achievable_bandwidth_fraction is not None else 1.0

    def streaming_bandwidth_bytes_per_s(self) -> float:
        """Bandwidth a memory-bound (elementwise) phase moves its bytes at: B_stream = B_HBM x f_stream
        (`streaming_share`). The one place the share is applied to phases (model/gpu/costs.py, fixed.py); the
        cast kernels keep their own measured shares of the datasheet rate (`kernels.cast_bandwidth_fraction`)."""
        return self.offchip_bandwidth_bytes_per_s.value * self.streaming_share


class System(_Section):
    devices_per_node: Annotated[Optional[Number], DEVICES] = Field(
        None, description="devices sharing one scale-up domain")
    devices_per_host: Annotated[Optional[Number], DEVICES] = Field(
        None, description="GPU: devices one host (one operating system) holds, where fewer than devices_per_node: "
        "the NVLink domain then spans hosts (NCCL's multi-node NVLink, MNNVL); absent: one host per domain")
    scaleup_bandwidth_bytes_per_s: Annotated[Optional[Number], BANDWIDTH] = Field(
        None, description="device-to-device bandwidth inside a node (NVLink), per device per direction")
    scaleout_bandwidth_bytes_per_s: Annotated[Optional[Number], BANDWIDTH] = Field(
        None, description="network bandwidth between nodes (InfiniBand NIC), per device per direction")
    system_power_w: Annotated[Optional[Number], POWER] = Field(
        None, description="power of the whole system per device (host CPUs, NICs, switches, fans), for tokens/s "
        "per kW; defaults to the chip's power_w")
    weight_buffer_units: Annotated[Optional[Number], BUFFERS] = Field(
        None, description="weight streaming: units of weights (and of gradients) buffered on-chip at once")
    swarmx_fanout: Annotated[Optional[Number], FANOUT] = Field(
        None, description="wafer cluster: systems (or subtrees) one SwarmX broadcast-reduce node serves")
    swarmx_level_latency_s: Annotated[Optional[Number], LATENCY] = Field(
        None, description="wafer cluster: latency one level of the SwarmX tree adds to the weight broadcast and to "
        "the gradient reduction")
    memoryx_latency_s: Annotated[Optional[Number], LATENCY] = Field(
        None, description="wafer: latency from MemoryX to the first SwarmX level (first weight byte out, last "
        "gradient byte in)")

    @property
    def domain_devices(self) -> int:
        """devices_per_node as a count: one NVLink domain's devices, 1 where the profile leaves it out (the plan's
        default --gpus-per-node; hostile25: also the domain `--emit` compares its read-back with)."""
        return int(self.devices_per_node.value) if self.devices_per_node else 1

    @property
    def host_devices(self) -> Optional[int]:
        """devices_per_host as a count (DEVICES: a whole number), or None where the profile leaves it out (one host
        per NVLink domain): the one reading of it (planning/plan.py, config/megatron_run.py, model/gpu/sm_share.py)."""
        return None if self.devices_per_host is None else int(self.devices_per_host.value)


class Mesh(_Section):
    """A wafer's fabric: a 2D mesh of processing elements (PEs), each with a router linked to its four
    neighbours. Luczynski et al. (HPDC '24, arXiv 2404.15888) model a collective on it by its contention,
    energy (wavelet-hops over active links), distance L (longest path, hops) and depth D (dependent
    steps, each costing 2 T_R + 1 cycles)."""

    width_pes: Annotated[Number, MESH_PES] = Field(description="PEs along the short side of the usable program rectangle")
    height_pes: Annotated[Number, MESH_PES] = Field(description="PEs along the long side")
    clock_hz: Annotated[Number, CLOCK]
    hop_latency_cycles: Annotated[Number, CYCLES] = Field(description="cycles a wavelet takes per router hop")
    ramp_latency_cycles: Annotated[Number, CYCLES] = Field(description="T_R: cycles between a PE's core and its router")
    link_bytes_per_cycle: Annotated[Number, LINK_BYTES] = Field(description="payload per link per direction per cycle "
                                                                "(one wavelet)")


class Reserves(_Section):
    """What a GPU training process keeps off the capacity the driver reports (`memory.offchip_memory_bytes`,
    nvidia-smi's total), by name. PyTorch's caching allocator counts two numbers
    (https://pytorch.org/docs/stable/notes/cuda.html#memory-management): *allocated* bytes held by live
    tensors (`torch.cuda.max_memory_allocated` at the peak) and *reserved* bytes it holds from the driver
    (`max_memory_reserved`), allocated plus the unused remainder of its cached blocks. Outside the
    allocator the driver also holds the CUDA context and the communicators' buffers. So a plan fits when

        reserved + cuda_context + communicator_buffers <= capacity,
        reserved = allocated x (1 + allocator_fragmentation),
        allocated = btacalc's tensors + library_workspaces,

    and the tensors btacalc counts may use (`usable`)
        floor((capacity - cuda_context - communicator_buffers) / (1 + allocator_fragmentation)) - library_workspaces.

    The library workspaces depend on the run (TransformerEngine's grouped GEMMs, userbuffers): config/workspaces.py
    derives them, `Problem.library_workspaces` resolves them once per run, and each method here takes their bytes.
    """

    cuda_context_bytes: Annotated[Number, BYTES] = Field(
        description="the CUDA context and the kernel images loaded into it (CUDA, cuBLAS, cuDNN, NCCL, "
        "TransformerEngine), outside PyTorch's allocator")
    communicator_buffers_bytes: Annotated[Number, BYTES] = Field(
        description="NCCL's (and other communicators') staging buffers for every process group, allocated by "
        "the library outside PyTorch's allocator")
    allocator_fragmentation_fraction: Annotated[Number, SHARE] = Field(
        description="reserved / allocated - 1 at the peak: the caching allocator's unused remainder of its blocks")

    def usable_bytes(self, capacity: int, workspaces: int) -> int:
        """The bytes btacalc's tensors may be allocated beside `workspaces` bytes of library workspaces (see the
        class docstring)."""
        outside = self.cuda_context_bytes.value + self.communicator_buffers_bytes.value
        return int((capacity - outside) // (1 + self.allocator_fragmentation_fraction.value) - workspaces)

    def allocated_bytes(self, tensors: int, workspaces: int) -> int:
        """torch's allocated bytes at the peak: btacalc's tensors plus the libraries' workspaces."""
        return int(tensors + workspaces)

    def reserved_bytes(self, tensors: int, workspaces: int) -> int:
        """torch's reserved bytes at the peak: allocated x (1 + fragmentation), rounded up."""
        return math.ceil(self.allocated_bytes(tensors, workspaces) * (1 + self.allocator_fragmentation_fraction.value))

    def device_bytes(self, tensors: int, workspaces: int) -> int:
        """What the device holds for the process (nvidia-smi's used): reserved + context + communicators."""
        return int(self.reserved_bytes(tensors, workspaces) + self.cuda_context_bytes.value
                   + self.communicator_buffers_bytes.value)


class Calibration(_Section):
    usable_memory_fraction: Annotated[Optional[Number], FRACTION] = Field(
        None, description="wafers: share of the capacity tensors may use (GPUs name their reserves instead: "
        "`reserves`)")
    compute_efficiency: Annotated[Optional[Number], FRACTION] = Field(
        None, description="achieved share of peak FLOP/s on matmul phases (estimate or calibrated)")
    tile_overhead_s: Annotated[Optional[Number], TILE_OVERHEAD] = Field(
        None, description="fixed cost per attention tile per layer per step (BTA tiling overhead); profiles with "
        "a [mesh] derive it from the mesh instead; on GPUs, beyond the tile's kernel launches and module calls, which "
        "the host model already issues once per tile (model/gpu/costs.py `_tiles`): the shipped GPU profiles have none")
    fabric_vector_overhead: Annotated[Optional[Number], VECTOR_OVERHEAD] = Field(
        None, description="wafer: a PE's fixed cost per vector instruction in elements of its SIMD lanes (c x w); a "
        "matmul of width n = h spread over the fabric's X columns reaches n / (n + this x X) of compute_efficiency "
        "(model/wafer/fabric.py); None: independent of width")
    micro_batch_fixed_s: Annotated[Optional[Number], LATENCY] = Field(
        None, description="wafer: seconds every micro-batch pays whatever its size (the t_0 of t_0 + B t_seq that one "
        "model at several batches shows; model/wafer/costs.py); None: no such cost")


class Kernels(_Section):
    """GPU kernels as the time model sees them (model/gpu/gemm.py, model/gpu/fixed.py)."""

    gemm_tile_long_elements: Annotated[Number, GEMM_TILE] = Field(
        description="long side of the largest GEMM output tile (CTA tile) the libraries use")
    gemm_tile_short_elements: Annotated[Number, GEMM_TILE] = Field(
        description="short side of it: the candidate tiles are long x short, short x long and short x short")
    launch_overhead_s: Annotated[Number, LATENCY] = Field(
        description="CPU-side cost of launching one kernel, paid per kernel where kernels are too short to hide it")
    expert_gemm_host_s: Annotated[Optional[Number], LATENCY] = Field(
        None, description="CPU-side cost of one expert's GEMM in a grouped expert GEMM that the library issues as "
        "a loop of per-expert cuBLASLt calls (TransformerEngine's multi-stream grouped GEMM; model/gpu/fixed.py); "
        "None: one kernel launch (launch_overhead_s) per expert")
    module_host_s: Annotated[Optional[Number], LATENCY] = Field(
        None, description="CPU-side cost of one call of a framework layer module (a Megatron/TransformerEngine "
        "linear, grouped linear or attention module) per pass, beyond the launches of its own kernels "
        "(model/gpu/fixed.py); None: not counted")
    eager_op_host_s: Annotated[Optional[Number], LATENCY] = Field(
        None, description="CPU-side cost of one eager PyTorch operator called from Python with autograd recording, "
        "the unit in which the catalogue writes a layer's eager glue outside its modules (Phase.host_glue; "
        "model/gpu/fixed.py); None: not counted")
    gemm_ceiling_fraction: Annotated[Number, FRACTION] = Field(
        description="share of the datasheet dense peak a large, perfectly quantised BF16 GEMM reaches in a "
        "microbenchmark of this generation (the measured ceiling; model/gpu/gemm.py)")
    fp8_gemm_ceiling_fraction: Annotated[Optional[Number], FRACTION] = Field(
        None, description="share of the datasheet dense FP8 peak a large, perfectly quantised FP8 GEMM (per-tensor "
        "scales, torch._scaled_mm / cuBLASLt) reaches in a microbenchmark of this generation; the FP8 recipes' "
        "linear-layer GEMMs run at it (model/gpu/costs.py); None: at gemm_ceiling_fraction, the BF16 one")
    mxfp8_gemm_ceiling_fraction: Annotated[Optional[Number], FRACTION] = Field(
        None, description="share of the datasheet dense FP8 peak a large MXFP8 GEMM (32-element E8M0 block scales, "
        "cuBLASLt/cuDNN) reaches in a microbenchmark of this generation; the MXFP8 recipe's linear-layer GEMMs run at "
        "it (model/gpu/costs.py); None: at fp8_gemm_ceiling_fraction (else the BF16 one)")
    fp8_block_gemm_ceiling_fraction: Annotated[Optional[Number], FRACTION] = Field(
        None, description="share of the datasheet dense FP8 peak a large FP8 GEMM with 1x128 / 128x128 FP32 block "
        "scales (cuBLASLt VEC128_32F / BLK128x128_32F, what TransformerEngine's Float8BlockScaling runs on Hopper) "
        "reaches in a benchmark of this generation; the fp8-blockwise recipe's linear-layer GEMMs run at it "
        "(model/gpu/costs.py); None: at fp8_gemm_ceiling_fraction (else the BF16 one)")
    fp4_gemm_ceiling_fraction: Annotated[Optional[Number], FRACTION] = Field(
        None, description="share of the datasheet dense FP4 peak a large NVFP4 GEMM (block scales, cuBLASLt) reaches "
        "in a microbenchmark of this generation; the NVFP4 recipe's linear-layer GEMMs run at it "
        "(model/gpu/costs.py); None: at gemm_ceiling_fraction, the BF16 one")
    cast_bandwidth_fraction: Annotated[Optional[Number], FRACTION] = Field(
        None, description="share of the HBM bandwidth TransformerEngine's quantise kernel reaches when it writes one "
        "quantised copy (rowwise) of a 16-bit tensor, measured with its bytes read and written; the "
        "low-precision recipes' single-copy casts and amax passes move their bytes at it (model/gpu/precision.py); "
        "None: at the full HBM bandwidth")
    cast_two_copy_bandwidth_fraction: Annotated[Optional[Number], FRACTION] = Field(
        None, description="the same for the kernel that writes both the rowwise and the columnwise copy in one pass "
        "(block-scaled recipes, and per-tensor FP8 where the GEMMs are TN-only); None: cast_bandwidth_fraction")
    gemm_wave_overhead_s: Annotated[Number, LATENCY] = Field(
        description="fixed time per wave of GEMM output tiles that does not shrink with k (pipeline fill, epilogue)")
    gemm_overlap_exponent: Annotated[Number, OVERLAP] = Field(
        description="p of the smooth roofline (compute^p + memory^p)^(1/p): how imperfectly a GEMM overlaps its "
        "HBM traffic with its math where both are near binding (few tokens per expert)")

    @property
    def gemm_tiles(self) -> tuple[tuple[int, int], ...]:
        """Candidate output tiles (tm, tn) a library chooses among (model/gpu/gemm.py)."""
        long, short = int(self.gemm_tile_long_elements.value), int(self.gemm_tile_short_elements.value)
        return ((long, short), (short, long), (short, short))


class CollectiveReference(BaseModel):
    """The configuration a link class's measured small-call latency was taken at (nccl-tests: `ranks` GPUs over
    `nodes` NVLink domains, one `collective` of `message_bytes`). NCCL's tuning model times every call of the
    link class, scaled by measured latency / the model's latency at this configuration (model/gpu/nccl.py).
    `kind` says whether the configuration is the published one of the measurement or an estimate (the
    latency carried from another system, or the configuration not stated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ranks: int = Field(strict=True, ge=2, le=1_000_000)
    nodes: int = Field(strict=True, ge=1, le=1_000_000)
    collective: Literal["all_reduce", "all_gather", "reduce_scatter"]
    message_bytes: float = Field(strict=True, ge=1, le=1e12, allow_inf_nan=False,
                                 description="the buffer of one call (nccl-tests size)")
    kind: Literal["published", "estimate"]
    source: str
    note: str = Field(min_length=10)

    @field_validator("source")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"source must be a URL, got {v!r}")
        return v

    @model_validator(mode="after")
    def _placed(self) -> "CollectiveReference":
        if self.ranks < self.nodes or self.ranks % self.nodes:
            raise ValueError(f"ranks = {self.ranks} do not fill nodes = {self.nodes} evenly")
        return self


class Collectives(_Section):
    """How NCCL runs collectives on the profile's links (GPU clusters): one call over a link class costs

        t = latency_s + bus bytes / (link bandwidth x bus_efficiency)

    (the alpha-beta model; bus bytes as NCCL-tests PERFORMANCE.md defines them). The achieved bus
    bandwidth at a message of x bus bytes is then bus_efficiency x x / (x + half_size) of the link, with
    half_size = latency_s x link bandwidth x bus_efficiency: the size at which half of the large-message
    rate is reached (`model/gpu/collectives.py`). Ring and tree collectives pay NCCL's tuning-model latency
    instead, scaled so that it gives latency_s at the link's `*_reference` configuration (`CollectiveReference`).
    Without this section collectives run at the link's line rate with no per-call latency."""

    scaleup_bus_efficiency: Annotated[Number, FRACTION] = Field(
        description="NCCL bus bandwidth of large ring collectives inside the NVLink domain over its line rate")
    scaleup_latency_s: Annotated[Number, LATENCY] = Field(
        description="time of one small collective inside the NVLink domain (nccl-tests, few bytes)")
    scaleout_bus_efficiency: Annotated[Number, FRACTION] = Field(
        description="NCCL bus bandwidth of large collectives across domains over the NIC's line rate")
    scaleout_latency_s: Annotated[Number, LATENCY] = Field(
        description="time of one small collective that crosses domains (nccl-tests, few bytes, two or more nodes)")
    scaleout_all_to_all_efficiency: Annotated[Optional[Number], FRACTION] = Field(
        None, description="NCCL all-to-all (grouped send/recv to every peer) bus bandwidth across domains over the "
        "NIC's line rate (nccl-tests alltoall_perf); without it the expert all-to-all's cross-domain bytes run at "
        "scaleout_bus_efficiency")
    hybridep_scaleout_efficiency_two_nodes: Annotated[Optional[Number], FRACTION] = Field(
        None, description="NVIDIA Hybrid-EP's (the flex dispatcher's hybridep backend) dispatch and combine across "
        "exactly two NVLink domains: the NIC bytes over the NIC's line rate, from Hybrid-EP's own benchmark; without it "
        "Hybrid-EP's cross-domain bytes run at scaleout_all_to_all_efficiency")
    hybridep_scaleout_efficiency: Annotated[Optional[Number], FRACTION] = Field(
        None, description="the same across three or more NVLink domains")
    scaleup_all_to_all_efficiency: Annotated[Optional[Number], FRACTION] = Field(
        None, description="NCCL all-to-all bus bandwidth inside the NVLink domain over its line rate (nccl-tests "
        "alltoall_perf in one node: the slope of time against bytes); without it the expert all-to-all's NVLink "
        "bytes run at scaleup_bus_efficiency (DeepEP and HybridEP, which are not NCCL, always do)")
    scaleup_reference: Optional[CollectiveReference] = Field(
        None, description="where scaleup_latency_s was measured (one node); without it NCCL's model is unscaled")
    scaleout_reference: Optional[CollectiveReference] = Field(
        None, description="where scaleout_latency_s was measured (two or more nodes)")

    @model_validator(mode="after")
    def _references(self) -> "Collectives":
        up, out = self.scaleup_reference, self.scaleout_reference
        if up is not None and up.nodes != 1:
            raise ValueError(f"scaleup_reference.nodes = {up.nodes}: a scale-up latency is measured in one node")
        if out is not None and out.nodes < 2:
            raise ValueError(f"scaleout_reference.nodes = {out.nodes}: a scale-out latency crosses two or more nodes")
        return self


class Defaults(_Section):
    memory_model: Literal["weight_streaming", "resident"] = Field(
        description="weight_streaming: weights and optimizer off-chip, activations in on-chip SRAM (Cerebras);"
        " resident: weights, gradients, optimizer and activations in device memory (GPU HBM)")
    attention: Literal["eager", "flash"]
    recompute: str = Field(description="none, selective, full or a list of Megatron recompute modules")
    note: str = Field(min_length=10, description="why these defaults")

    @field_validator("recompute")
    @classmethod
    def _policy(cls, v: str) -> str:
        policy = parse_recompute(v)
        if policy == OP_POLICY:  # review34: every default plan was refused, naming an --recompute op never given
            raise ValueError("op (torchtitan's per-op checkpoint) is a PyTorch-FSDP run's choice, not a device's "
                             "default: plans without --fsdp refuse it; give none, selective, full or Megatron modules")
        return policy


SECTIONS = ("chip", "memory", "system", "mesh", "kernels", "collectives", "reserves", "calibration")

# hostile40: the numbers one device family's time and memory model reads and the other's never does (model/wafer and
# model/timing.py for a wafer; model/gpu for a GPU; low precision runs on GPUs only, config/precision.py). In the other
# family's profile such a number was accepted and changed nothing; it is refused by name, as a [mesh] on a GPU is.
WAFER_ONLY_NUMBERS = ("chip.sram_bandwidth_bytes_per_s", "memory.memoryx_bandwidth_bytes_per_s",
                      "memory.memoryx_update_bandwidth_bytes_per_s", "memory.activation_offload_bandwidth_bytes_per_s",
                      "system.weight_buffer_units", "system.swarmx_fanout", "system.swarmx_level_latency_s",
                      "system.memoryx_latency_s", "calibration.fabric_vector_overhead",
                      "calibration.micro_batch_fixed_s")
GPU_ONLY_NUMBERS = ("chip.peak_fp8_flops_per_s", "chip.peak_fp4_flops_per_s", "chip.compute_capability",
                    "memory.achievable_bandwidth_fraction", "system.devices_per_node", "system.devices_per_host",
                    "system.scaleup_bandwidth_bytes_per_s", "system.scaleout_bandwidth_bytes_per_s")


class HardwareProfile(BaseModel):
    """A device. Field names carry units; every number is a `Number` with a source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    display_name: Name
    family: Literal["wse", "gpu"]
    defaults: Defaults
    chip: Chip
    memory: Memory
    system: System = System()
    mesh: Optional[Mesh] = None
    kernels: Optional[Kernels] = None
    reserves: Optional[Reserves] = None
    collectives: Optional[Collectives] = None
    calibration: Calibration = Calibration()  # every factor optional: a GPU profile may state none

    @model_validator(mode="after")
    def _consistent(self) -> "HardwareProfile":
        if self.defaults.memory_model == "weight_streaming" and self.system.weight_buffer_units is None:
            raise ValueError("weight_streaming profiles need system.weight_buffer_units")
        if self.mesh is not None and self.family != "wse":
            raise ValueError("a [mesh] section describes a wafer-scale fabric: family must be 'wse'")
        if self.collectives is not None and self.family != "gpu":
            raise ValueError("a [collectives] section describes NCCL on GPU links: family must be 'gpu'")
        if self.kernels is not None and self.family != "gpu":  # hostile40: read by model/gpu only
            raise ValueError("a [kernels] section describes GPU kernels (GEMM tiles, launches): family must be 'gpu'")
        self._family_numbers()
        if self.family == "wse" and self.defaults.memory_model != "weight_streaming":
            raise ValueError("wse profiles declare defaults.memory_model = 'weight_streaming' (resident is a run option)")
        chip, system = self.chip, self.system
        per_core = chip.cores.value * chip.sram_bytes_per_core.value
        if per_core > chip.sram_bytes.value * (1 + SRAM_ROUNDING):
            raise ValueError(f"chip.cores x chip.sram_bytes_per_core = {per_core:.6g} B exceeds chip.sram_bytes "
                             f"{chip.sram_bytes.value:.6g} B by more than {SRAM_ROUNDING:.1%} (the rounding of "
                             "published sizes): per-core SRAM is part of the total")
        if self.family == "wse" and per_core < chip.sram_bytes.value * (1 - SRAM_ROUNDING):
            raise ValueError(f"chip.cores x chip.sram_bytes_per_core = {per_core:.6g} B falls short of chip.sram_bytes "
                             f"{chip.sram_bytes.value:.6g} B by more than {SRAM_ROUNDING:.1%} (the rounding of "
                             "published sizes): a wafer's SRAM is all in its cores")
        shared = chip.shared_memory_bytes_per_core
        if shared is not None and shared.value > chip.sram_bytes_per_core.value:  # hostile31: was planned with it
            raise ValueError(f"chip.shared_memory_bytes_per_core = {shared.value:.6g} B exceeds chip.sram_bytes_per_core "
                             f"{chip.sram_bytes_per_core.value:.6g} B: a thread block's shared memory is part of its SM's")
        if system.system_power_w is not None and system.system_power_w.value < chip.power_w.value:
            raise ValueError(f"system.system_power_w.value = {system.system_power_w.value:g} W is below chip.power_w "
                             f"{chip.power_w.value:g} W: the system power per device includes the device")
        self._memory_reserves()
        self._reference_nodes()
        return self

    def _family_numbers(self) -> None:
        """A number only the other device family reads (WAFER_ONLY_NUMBERS, GPU_ONLY_NUMBERS) is refused by name; so
        are a wafer's per-tile overhead beside a [mesh], which derives it (model/wafer/costs.py `tiles_overhead_s`),
        and its fabric_vector_overhead without one (model/wafer/fabric.py needs the mesh's columns)."""
        other, theirs = (GPU_ONLY_NUMBERS, "gpu") if self.family == "wse" else (WAFER_ONLY_NUMBERS, "wse")
        stray = [key for key in self.numbers() if key in other]
        if stray:
            raise ValueError(f"{stray[0]}: a {theirs} number (only the {theirs} model reads it): a {self.family} "
                             "profile would be planned without it; leave it out")
        calibration = self.calibration
        if self.mesh is not None and calibration.tile_overhead_s is not None:
            raise ValueError("calibration.tile_overhead_s beside a [mesh]: the mesh gives the per-tile cost "
                             "(model/wafer/mesh.py) and this number would change nothing: give one of them")
        if self.family == "wse" and self.mesh is None and calibration.fabric_vector_overhead is not None:
            raise ValueError("calibration.fabric_vector_overhead needs a [mesh] (the fabric's columns it is counted "
                             "over, model/wafer/fabric.py): without one it would change nothing")

    def _reference_nodes(self) -> None:
        """A latency reference is measured on this system's nodes: its ranks per node fit in one
        (system.devices_per_node); NCCL's model would weigh NVLink steps between GPUs a node does not have."""
        per_node = self.system.devices_per_node
        for side in ("scaleup", "scaleout"):
            ref = getattr(self.collectives, f"{side}_reference", None)
            if ref is not None and per_node is not None and ref.ranks // ref.nodes > per_node.value:
                raise ValueError(f"collectives.{side}_reference: ranks = {ref.ranks} over nodes = {ref.nodes} is "
                                 f"{ref.ranks // ref.nodes} per node, more than system.devices_per_node "
                                 f"{per_node.value:g}")

    def _memory_reserves(self) -> None:
        """A GPU names its reserves; a wafer gives a usable fraction (in (0, 1]: usable <= capacity)."""
        fraction, reserves = self.calibration.usable_memory_fraction, self.reserves
        if self.family == "gpu":
            if reserves is None or fraction is not None:
                raise ValueError("a gpu profile names its memory reserves in [reserves] (cuda_context_bytes, "
                                 "communicator_buffers_bytes, allocator_fragmentation_fraction) "
                                 "instead of calibration.usable_memory_fraction")
            if reserves.usable_bytes(self.memory_capacity_bytes, 0) <= 0:
                raise ValueError(f"the reserves leave no memory of memory.offchip_memory_bytes "
                                 f"{self.memory_capacity_bytes:.6g} B for tensors")
        elif fraction is None or reserves is not None:
            raise ValueError("a wse profile gives calibration.usable_memory_fraction (and no [reserves])")

    @property
    def attention_sram_bytes_per_core(self) -> int:
        """The on-chip memory a fused attention kernel blocks into (Dao et al. 2022's M, in bytes)."""
        return int((self.chip.shared_memory_bytes_per_core or self.chip.sram_bytes_per_core).value)

    @property
    def power_per_device_w(self) -> float:
        return (self.system.system_power_w or self.chip.power_w).value

    @property
    def memory_capacity_bytes(self) -> int:
        """The memory the plan must fit in: on-chip SRAM on a wafer (its only device memory, whether
        weights stream or stay resident), HBM on a GPU."""
        if self.family == "wse":
            return int(self.chip.sram_bytes.value)
        return int(self.memory.offchip_memory_bytes.value)

    @property
    def multi_device(self) -> bool:
        """Whether several devices can be modelled: GPUs need their scale-up and scale-out links, wafer
        systems the SwarmX tree that joins them."""
        if self.family == "wse":
            return self.system.swarmx_fanout is not None
        return (self.system.scaleup_bandwidth_bytes_per_s is not None
                and self.system.scaleout_bandwidth_bytes_per_s is not None)

    def usable_capacity(self, workspaces: int) -> int:
        """The bytes the tensors btacalc counts may use: on a GPU the capacity less its named reserves and the run's
        `workspaces` bytes of library workspaces (`Reserves.usable_bytes`, `Problem.library_workspaces`), on a wafer
        the capacity x its usable fraction."""
        if self.reserves is not None:
            return self.reserves.usable_bytes(self.memory_capacity_bytes, workspaces)
        fraction = self.calibration.usable_memory_fraction
        assert fraction is not None  # _memory_reserves: a profile without reserves has a fraction
        return int(self.memory_capacity_bytes * fraction.value)

    @classmethod
    def range_of(cls, key: str) -> Optional[Range]:
        """The `Range` of a number keyed 'section.field'."""
        section, _, field = key.partition(".")
        info = cls.model_fields.get(section)
        if info is None:
            return None
        # a section class, or an optional one (Optional[Mesh])
        classes = [info.annotation, *typing.get_args(info.annotation)]
        model = next((c for c in classes if isinstance(c, type) and issubclass(c, BaseModel)), None)
        return number_range(model, field) if model is not None else None

    def numbers(self) -> dict[str, Number]:
        """Every number, keyed 'section.field'."""
        out: dict[str, Number] = {}
        for section in SECTIONS:
            for field, value in getattr(self, section) or ():
                if isinstance(value, Number):
                    out[f"{section}.{field}"] = value
        return out

    def number_key(self, name: str) -> str:
        """'section.field' for a field name given with or without its section (`sram_bytes`,
        `chip.sram_bytes`); a BtacalcError naming {solve_for} when the profile has no such number."""
        numbers = self.numbers()
        if name in numbers:
            return name
        hits = [k for k in numbers if k.split(".", 1)[1] == name]
        if len(hits) == 1:
            return hits[0]
        known = ", ".join(k.split(".", 1)[1] for k in numbers)
        raise BtacalcError(f"{{solve_for}}: {self.name} has no number {name!r} (its numbers: {known})")

    def with_number(self, key: str, value: float, note: str) -> "HardwareProfile":
        """The profile with the number at `key` ('section.field') replaced by `value` (kind estimate,
        `note` saying why: a what-if or a sensitivity trial). The datasheet file is untouched.

        A value outside the field's range (a count that is not whole, a fraction above 1, a zero
        bandwidth) is a BtacalcError naming the field, the value and the rule. The rules between
        numbers (cores x per-core SRAM against the total, ...) are not applied: a trial moves one
        number on purpose."""
        section, field = key.split(".", 1)
        old = self.numbers()[key]
        rng = self.number_range(key)
        if rng is not None and not rng.admits(value):
            raise BtacalcError(f"{self.name}: {key}.value = {shown(value)}: {rng.rule()}")
        new = Number(value=float(value), kind="estimate", source=old.source, note=note)
        part = getattr(self, section).model_copy(update={field: new})
        return self.model_copy(update={section: part})

    def number_range(self, key: str) -> Optional[Range]:
        """The `Range` of the number at `key` ('section.field')."""
        section, field = key.split(".", 1)
        return number_range(type(getattr(self, section)), field)


def _model_at(loc: tuple[Any, ...]) -> Optional[type[BaseModel]]:
    """The pydantic model whose fields live at `loc` inside a profile (None past a Number's value)."""
    model: Any = HardwareProfile
    for part in loc:
        info = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if info is None:
            return None
        ann = info.annotation
        args = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
        model = args[0] if args else ann
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def profile_error(exc: ValidationError) -> str:
    """One line naming the field, the value and the rule it breaks."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])  # a typo explains a missing field
    loc = tuple(err["loc"])
    where = ".".join(str(x) for x in loc)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1])
        known = f" (known: {', '.join(parent.model_fields)})" if parent else ""
        return f"unknown field {where}{known}"
    if err["type"] == "missing":
        return f"missing field {where}"
    if msg.startswith("value = "):  # a Range: 'value = inf: must be ...'
        return f"{where}.{msg}"
    if not where:
        return msg
    given = err.get("input")
    value = "" if isinstance(given, dict) else f" = {shown(given) if _past_float(given) else repr(given)}"
    return f"{where}{value}: {msg}"


def parse_profile(text: str, origin: str) -> HardwareProfile:
    """A profile from TOML text; any problem is one line naming `origin`, the field, the value and the rule."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        _refuse_other_kind(text, origin)
        raise BtacalcError(f"{origin}: not valid TOML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise BtacalcError(f"{origin}: not valid TOML: nested too deeply") from None
    except ValueError as exc:  # tomllib's own ValueError: an integer of more than 4,300 digits
        raise BtacalcError(f"{origin}: not valid TOML: {parse_value_error(exc)}") from None
    try:
        return HardwareProfile.model_validate(raw)
    except ValidationError as exc:
        _refuse_other_kind(text, origin)
        raise BtacalcError(f"{origin}: {profile_error(exc)}") from None


def _refuse_other_kind(text: str, origin: str) -> None:
    """Refuse a model file given as a profile, saying what it is (hostile20; input_kind)."""
    kind = input_kind(text)
    if kind and "profile" not in kind:
        raise BtacalcError(f"{origin}: {kind}, not a hardware profile (a profile name or a profile .toml; btacalc hw "
                           "list)" + ("" if "preset" in kind else ": give it to --model"))


@functools.lru_cache(maxsize=1)
def builtin_profiles() -> dict[str, HardwareProfile]:
    return {name: _builtin_profile(name) for name in profile_names()}


@functools.lru_cache(maxsize=None)
def _builtin_profile(name: str) -> HardwareProfile:
    path = data_dir("hardware_profiles") / f"{name}.toml"
    try:
        prof = parse_profile(path.read_text(encoding="utf-8"), origin=path.name)
    except BtacalcError as exc:
        raise DataError(f"shipped hardware profile broken: {exc}") from exc
    if prof.name != path.stem:
        raise DataError(f"{path.name}: name {prof.name!r} differs from the file name")
    return prof


def resolve_hardware(name_or_path: str) -> HardwareProfile:
    """A built-in profile name, or the path of a user's TOML profile file."""
    with name_not_file("hardware", "hardware", name_or_path):
        return _resolve_hardware(name_or_path)


def is_builtin_name(name: str) -> bool:
    """`name` names a built-in profile (which a file of that name in the working folder does not shadow)."""
    try:
        return "/" not in name and (data_dir("hardware_profiles") / f"{name}.toml").is_file()
    except (OSError, ValueError):  # a name too long for a file's (ENAMETOOLONG), a NUL: no built-in's
        return False


def named_by_its_file(profile: HardwareProfile, given: str) -> HardwareProfile:
    """A profile file whose `name` is a built-in profile's but whose numbers are not that profile's is named by the
    path it was given as (hostile41: `--hw ./h100.toml` with its own peak was shown as "NVIDIA H100 SXM 80GB (h100)",
    the built-in's name over other numbers, and `compare --hw h100,./h100.toml` refused the pair as h100 given twice).
    A verbatim copy keeps the name: its numbers are the built-in's."""
    if not is_builtin_name(profile.name) or profile == _builtin_profile(profile.name):
        return profile
    return profile.model_copy(update={"name": clean_text(given)})


def _resolve_hardware(name_or_path: str) -> HardwareProfile:
    if is_builtin_name(name_or_path):
        return _builtin_profile(name_or_path)  # one file read, not every profile
    profiles = builtin_profiles()
    if not name_or_path.strip():
        raise BtacalcError("{hardware}: give a profile name or the path of a profile .toml")
    check_path_text("{hardware}", name_or_path)  # hostile29: h100.toml/ read h100.toml
    path = Path(name_or_path)
    if path.exists() and not path.is_dir() and not path.is_file():
        raise BtacalcError(f"{{hardware}}: {name_or_path!r} is not a regular file (a profile is a .toml file)")
    if path.is_dir():
        raise BtacalcError(f"{{hardware}}: {name_or_path!r} is a folder, not a profile .toml")
    if path.is_file():
        try:  # type and size checked before the read (paths.read_input)
            text = read_input(path)
        except OSError as exc:
            raise BtacalcError(f"{path}: cannot read: {exc.strerror or exc}") from None
        return named_by_its_file(parse_profile(text, origin=str(path)), name_or_path)
    if path.suffix or "/" in name_or_path:
        raise BtacalcError(f"{{hardware}}: hardware profile file {name_or_path!r} not found")
    near = nearest_name(name_or_path, profiles)
    hint = f": did you mean {near}?" if near else ""
    raise BtacalcError(f"{{hardware}}: unknown hardware {name_or_path!r}{hint} (built-in: {', '.join(profiles)}; "
                       "or give a profile .toml path)")
