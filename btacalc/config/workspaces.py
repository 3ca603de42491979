"""The libraries' GEMM workspaces a GPU training process allocates through PyTorch's caching allocator, so that they
count in `torch.cuda.max_memory_allocated` (issue 21, docs/memory.md "tews"): which ones, how many and how large, as
a function of the run, each from the code that allocates it.

TransformerEngine @ d0067d0 (`transformer_engine/pytorch/cpp_extensions/gemm.py`) keeps its cuBLAS workspaces in
`get_cublas_workspace(device, ub, grouped_gemm)`, an `lru_cache` (L48-49): one tensor per distinct (ub, grouped_gemm)
that some GEMM asked for, each `torch.empty(..., device=device)` (through the caching allocator):

- every GEMM of its linear layers, `general_gemm` (L227: `get_cublas_workspace(A.device.index, ub is not None,
  False)`), without userbuffers: ONE workspace of `get_cublas_workspace_size_bytes()` (L67);
- a grouped GEMM, `general_grouped_gemm` (L415: `get_cublas_workspace(..., False, True)`): one per compute stream,
  `tex.get_num_cublas_streams()` (L59-65) = 4 (`common/util/multi_stream.cpp` L52-55 `num_compute_streams = 4`);
- a GEMM overlapped with userbuffers (`ub` given, Megatron's --tp-comm-overlap): one workspace of
  `_NUM_MAX_UB_STREAMS` = 3 sizes (L37, L53-58). A weight-gradient GEMM passes `ub` only under the bulk wgrad
  overlap (`module/linear.py` L864 `ub_obj_wgrad = None`, L887-889, L1266), which a row-parallel layer does not
  take, so such a run holds the plain workspace too;
- the size, `get_cublas_workspace_size_bytes()` (L40-45): 32 MiB + 1 KiB when the device's major compute
  capability is >= 9 (Hopper, Blackwell), else 4 MiB.

PyTorch (pytorch/pytorch @ 26a39059, `aten/src/ATen/cuda/CublasHandlePool.cpp`) gives every (cuBLAS handle, stream)
pair its own workspace (`setWorkspaceForHandle` L249-251 keys the map on both; L269 allocates a new one), allocated
through the caching allocator (`getNewWorkspace` L241-242), of `CUBLAS_WORKSPACE_CONFIG`'s default (L146-150):
`4096 * 8 * 1024` = 32 MiB on sm90 (major 9, minor 0), else `:4096:2:16:8` = 4096 KiB x 2 + 16 KiB x 8. Handles come
from a thread-local pool window (`getCurrentCUDABlasHandle`), and the autograd engine runs the backward of CUDA
functions on its own thread per device (torch/csrc/autograd/engine.cpp, Note [Allocating GPUs to autograd threads]:
"a thread per CUDA device"). Megatron's output layer is Megatron-Core's ColumnParallelLinear (Megatron-LM @ d98e8a64
`core/tensor_parallel/layers.py` L459 `torch.matmul(input, weight.t())` forward, L683 `grad_output.matmul(weight)`
backward), a torch GEMM on the main thread and one on the autograd thread: two workspaces, on the default stream.
The cuBLASLt workspace (1 MiB, a separate map, L186) is taken only by torch's Lt paths (a matmul with a fused bias),
which no layer btacalc plans calls: not counted. Later PyTorch takes 32 MiB on majors 9-12 and, since
TORCH_CUBLAS_WORKSPACE_CACHE defaults off, leaves the workspace to cuBLAS itself: the pin is stated, not followed.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024

TE = "https://github.com/NVIDIA/TransformerEngine/blob/d0067d0da6cb01811b8072a7d304f0e00344ce2b/"
TE_GEMM = TE + "transformer_engine/pytorch/cpp_extensions/gemm.py"
TORCH_POOL = ("https://github.com/pytorch/pytorch/blob/26a39059ec580351411f180816c47e2ef5134ae1/"
              "aten/src/ATen/cuda/CublasHandlePool.cpp")


@dataclass(frozen=True)
class WorkspaceRule:
    """One kind of workspace: how many a run holds and the bytes of each, on a device of major compute capability
    >= `large_from` (and, for `large_only`, exactly that capability) `large_bytes`, else `small_bytes`."""

    name: str
    library: str
    count: int
    large_bytes: int
    small_bytes: int
    large_from: float
    large_only: bool  # the large size on `large_from` exactly (PyTorch's sm90 test), not on every later device
    when: str
    source: str

    def bytes_each(self, capability: float) -> int:
        large = capability == self.large_from if self.large_only else capability >= self.large_from
        return self.large_bytes if large else self.small_bytes


TE_BYTES = (32 * MIB + 1024, 4 * MIB)  # gemm.py L40-45 get_cublas_workspace_size_bytes
TORCH_BYTES = (4096 * 8 * 1024, 4096 * 1024 * 2 + 16 * 1024 * 8)  # CublasHandlePool.cpp L146-150

# The named constant table: every workspace btacalc counts, with its source.
WORKSPACES: dict[str, WorkspaceRule] = {
    "te_gemm": WorkspaceRule(
        "te_gemm", "TransformerEngine", 1, *TE_BYTES, 9.0, False,
        "the linear layers are TransformerEngine's (Megatron's default --transformer-impl transformer_engine)",
        f"{TE_GEMM}#L40-L67 (get_cublas_workspace, lru_cache per (ub, grouped_gemm); general_gemm L227)"),
    "te_grouped_gemm": WorkspaceRule(
        "te_grouped_gemm", "TransformerEngine", 4, *TE_BYTES, 9.0, False,
        "an MoE model whose experts run as TransformerEngine grouped GEMMs (--moe-grouped-gemm; without it "
        "Megatron-Core's SequentialMLP runs plain GEMMs: RunOptions.expert_grouped_gemm)",
        f"{TE_GEMM}#L59-L65 (one per compute stream; general_grouped_gemm L415), "
        f"{TE}transformer_engine/common/util/multi_stream.cpp#L52-L55 (num_compute_streams = 4)"),
    "te_userbuffers": WorkspaceRule(
        "te_userbuffers", "TransformerEngine", 1, 3 * TE_BYTES[0], 3 * TE_BYTES[1], 9.0, False,
        "TransformerEngine's userbuffers TP overlap (--tp-comm-overlap at TP > 1 with sequence parallelism)",
        f"{TE_GEMM}#L37 (_NUM_MAX_UB_STREAMS = 3), #L53-L58"),
    "torch_cublas": WorkspaceRule(
        "torch_cublas", "PyTorch", 2, *TORCH_BYTES, 9.0, True,
        "every run: torch GEMMs (Megatron's output layer) on the main thread and on the autograd engine's device "
        "thread, one (handle, stream) each",
        f"{TORCH_POOL}#L146-L150 (default size), #L241-L242 (caching allocator), #L249-L251 (per handle and stream)"),
}


@dataclass(frozen=True)
class Workspace:
    """A workspace kind a run holds: `count` of `bytes_each` bytes."""

    name: str
    library: str
    count: int
    bytes_each: int
    when: str
    source: str

    @property
    def bytes(self) -> int:
        return self.count * self.bytes_each


def library_workspaces(capability: float, transformer_engine: bool, grouped_gemm: bool,
                       userbuffers: bool) -> tuple[Workspace, ...]:
    """The workspaces a run on a device of `capability` holds: TransformerEngine's where its layers are TE's
    (`transformer_engine`), its grouped GEMMs' where an MoE model's experts run as grouped GEMMs (`grouped_gemm`),
    its userbuffers' under the TP overlap, and PyTorch's two (WORKSPACES; the module docstring derives each)."""
    held = {"te_gemm": transformer_engine, "te_grouped_gemm": transformer_engine and grouped_gemm,
            "te_userbuffers": transformer_engine and userbuffers, "torch_cublas": True}
    return tuple(Workspace(r.name, r.library, r.count, r.bytes_each(capability), r.when, r.source)
                 for name, r in WORKSPACES.items() if held[name])
