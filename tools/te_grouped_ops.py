"""Count and time TransformerEngine GroupedLinear's per-expert host work (Python) on CPU, per local expert.

A check outside the test suite: it needs a TransformerEngine source tree at the rows' release (e.g.
`git archive v2.12 transformer_engine/__init__.py transformer_engine/common transformer_engine/pytorch
transformer_engine/debug | tar -x`, TE v2.12 = 5671fd36, NeMo 26.02) and a Megatron-LM tree (`git archive b0cc2706
megatron | tar -x`, core_r0.16.0) for DDP's per-parameter backward hook. docs/host-time.md, section "tegrouped".

What runs, unmodified: `transformer_engine.pytorch.module.grouped_linear.GroupedLinear` (its module forward,
`_GroupedLinear.forward` / `.backward`, `general_grouped_gemm`'s Python, `prepare_for_saving` /
`restore_from_saved`, `clear_tensor_data`, the Megatron-DDP dummy-gradient handler), BF16 path (no quantizers) or,
with --recipe, a low-precision recipe's path (S5-S8), with
`fuse_wgrad_accumulation=True` as Megatron's TEGroupedLinear sets it (`gradient_accumulation_fusion`), every weight
carrying `main_grad` and `grad_added_to_main_grad` as Megatron's DDP sets them, and Megatron's own backward post-hook
(`DistributedDataParallel._make_backward_post_hook`) on every weight's AccumulateGrad node, in a micro-batch that is
not the last (no reduce starts). Per forward + backward, at G local experts (1, 4, 8, 16 by default):

  (a) Python function calls and builtin (C) calls, by sys.setprofile; the aten calls, by a TorchDispatchMode;
  (b) with --time: the thread CPU time of forward + backward, less the stand-ins' own time (the recorded
      `te_general_grouped_gemm` calls, with a recipe also `split_quantize` / `quantize`, replayed alone), in units of the reference eager op of docs/host-time.md
      (`x + 1` with requires_grad, timed in the same process);
  (c) the least-squares line over G of each: the slope is the per-expert cost, the intercept the per-call one
      (btacalc's `module_host_s` already prices the call).

What differs from the GPU path (each also said in docs/host-time.md):
  S1 the compiled extension `transformer_engine_torch` is a stand-in module: every attribute is an inert object,
     except `te_general_grouped_gemm`, which is `standin_grouped_gemm` here (one torch.mm / addmm per expert on
     views of the output; on a GPU one C++ call that builds TE tensors per expert and runs TE's multi-stream
     cuBLASLt loop, which btacalc prices as `expert_gemm_host_s`); its time is measured apart and subtracted;
     the tool records every stand-in attribute that is called, so an unexpected call shows;
  S2 TE's common library is not loaded (NVTE_PROJECT_BUILDING=1, `load_framework_extension` a no-op); the
     optional imports onnxscript, onnx, einops and TE's triton kernel modules are inert modules (export,
     attention and permutation code, not run here);
  S3 torch.cuda.is_available() is True while the module is constructed (base.py's CUDA assert), and
     prepare_forward's `assert inp.is_cuda` is dropped from base.py's source as it is loaded (one assert);
  S4 `_empty_tensor()` (gemm.py, utils.py) returns `torch.Tensor()` without `.cuda()`; `get_sm_count()` is 148,
     `get_cublas_workspace()` one empty tensor (lru-cached in TE too); the dummy-gradient cache of base.py
     (`_dummy_wgrads`, filled on the first call on a GPU) is pre-filled with CPU tensors;
  S5 with --recipe NAME (a low-precision recipe, RECIPES: each under the TE recipe class Megatron-LM builds for it):
     the extension's `split_quantize` / `quantize` build TE's own Python objects for that recipe's quantizer
     (`standin_storage`: Float8TensorStorage / Float8Tensor for delayed and current scaling,
     Float8BlockwiseQTensorStorage / Float8BlockwiseQTensor, MXFP8TensorStorage / MXFP8Tensor, NVFP4TensorStorage /
     NVFP4Tensor) over the unquantised slices (no cast, empty scales), the GEMM stand-in skips them; their time
     (with the objects' constructors, which TE's C++ also calls through Python) is subtracted with the GEMM's, so the
     recipe's figure is a lower bound;
  S6 (the fix of a defect in S5 as first written, MXFP8 only): the stand-in built the storage class for every
     quantizer, where TE's C++ builds the storage only for an `internal` quantizer and the torch.Tensor subclass
     otherwise (csrc/quantizer.cpp L909-925 at v2.12). get_weight_workspace clears `internal` for a cached weight
     (module/base.py L1444-1452, so that prepare_for_saving leaves the cached data alone), so TE caches an MXFP8Tensor, saved for backward as a tensor; the stand-in cached an MXFP8TensorStorage, which
     prepare_for_saving emptied in every forward (tensor/storage/mxfp8_tensor_storage.py L126-138). In a step the
     backward's restore_from_saved refilled it (one more prepare / restore per expert than TE runs); in the forward
     timed alone nothing did, so each forward found the cache invalid (base.py L1410-1421), dropped it and
     re-quantised every weight (L1437-1456: the quantizer's quantize, its autograd function, the cache update),
     work TE does not run there, and the recorded stand-in calls (taken after a step) did not subtract it. The
     forward read high by that and the backward (step - forward) low: MXFP8 1.2 / 0.0;
  S7 the recipe's compute capability for TE's checks and `is_non_tn_fp8_gemm_supported` ((9, 0) for the FP8
     recipes, whose rows run on Hopper; (10, 0) for MXFP8 and NVFP4), CUDA 12.9 for the block-scaling check;
  S8 `torch.cuda.current_device()` returns "cpu" through the same three Python frames as on an initialised GPU
     (NVFP4's quantizer copy asks it twice), `torch.cuda.is_current_stream_capturing()` False in one frame (delayed
     scaling asks it per call), and while the module is built and warmed up (not timed) a factory asking for
     device "cuda" (TE's recipe state, the current-scaling quantizers' scale and amax) gets the CPU;
  fp32 CPU tensors of tiny sizes, so that the arithmetic is negligible.

Usage: python tools/te_grouped_ops.py TE_TREE MEGATRON_TREE [--experts 1 4 8 16] [--time] [--repeat 5]
       [--recipe {bf16,fp8,fp8-current,fp8-blockwise,mxfp8,nvfp4}] [--out result.json]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import timeit
import types
from collections import Counter
from typing import Any, Callable, Iterator, Sequence

STANDIN_CALLS: Counter[str] = Counter()  # stand-in attributes of the extension that were called (S1)
BASE_PY_PATCH = ('assert inp.is_cuda, "TransformerEngine needs CUDA."', "pass  # tegrouped S3")


def line_fit(points: dict[int, float]) -> tuple[float, float]:
    """Least-squares (slope, intercept) of value over G."""
    n = len(points)
    if n < 2:
        raise ValueError("a line needs two expert counts")
    mx = sum(points) / n
    my = sum(points.values()) / n
    sxx = sum((x - mx) ** 2 for x in points)
    slope = sum((x - mx) * (y - my) for x, y in points.items()) / sxx
    return slope, my - slope * mx


class PythonCalls:
    """Counts the Python function calls ('call') and builtin calls ('c_call') made while active (sys.setprofile),
    by kind; `by_function` keeps the Python ones by file:function."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.by_function: Counter[str] = Counter()

    def _profile(self, frame: Any, event: str, _arg: Any) -> None:
        if event == "call":
            self.kinds["python"] += 1
            code = frame.f_code
            self.by_function[f"{os.path.basename(code.co_filename)}:{code.co_name}"] += 1
        elif event == "c_call":
            self.kinds["builtin"] += 1

    @contextlib.contextmanager
    def active(self) -> Iterator["PythonCalls"]:
        old = sys.getprofile()
        sys.setprofile(self._profile)
        try:
            yield self
        finally:
            sys.setprofile(old)


def standin_grouped_gemm(torch: Any) -> Callable[..., Any]:
    """S1: TE's `te_general_grouped_gemm(A, transa, B, transb, out, out_dtype, m_splits, bias, bias_dtype,
    single_output, pre_gelu_out, grad, workspaces, workspace_size, accumulate, use_split_accumulator, sm_margin)`
    as one mm per expert in row-major terms: out_i = op(B_i) @ op(A_i), op(X) = X.T when its flag is set
    (TN: input @ weight.T, fprop; NN: grad @ weight, dgrad; NT: grad.T @ input, wgrad into main_grad when
    accumulate). With single_output the outputs are row slices of out[0] split by m_splits."""

    def gemm(A: Sequence[Any], transa: bool, B: Sequence[Any], transb: bool, out: Sequence[Any], _out_dtype: Any,
             m_splits: Sequence[int], bias: Any, _bias_dtype: Any, single_output: bool, *_rest: Any) -> Any:
        accumulate = bool(_rest[4]) if len(_rest) > 4 else False  # after pre_gelu_out, grad, workspaces, size
        outs = torch.split(out[0], list(m_splits)) if single_output else out
        for a, b, o in zip(A, B, outs):
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or hasattr(a, "_quantizer") \
                    or hasattr(b, "_quantizer"):
                continue  # S5: a quantised operand (a recipe's storage or tensor): no arithmetic, the loop only
            x = b.t() if transb else b
            y = a.t() if transa else a
            if accumulate:
                o.addmm_(x, y)
            else:
                torch.mm(x, y, out=o)
        return bias

    return gemm


class _Inert:
    """An attribute of a stand-in module: any attribute or call gives another; calls are recorded."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, key: str) -> "_Inert":
        if key.startswith("__"):
            raise AttributeError(key)
        value = _Inert(f"{self._name}.{key}")
        setattr(self, key, value)
        return value

    def __call__(self, *_a: Any, **_k: Any) -> "_Inert":
        STANDIN_CALLS[self._name] += 1
        return _Inert(f"{self._name}()")


def _inert_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)

    def getattr_(key: str) -> Any:
        if key.startswith("__"):
            raise AttributeError(key)
        value = _Inert(f"{name}.{key}")
        setattr(module, key, value)
        return value

    module.__getattr__ = getattr_  # type: ignore[method-assign]
    sys.modules[name] = module
    return module


def _package(name: str, path: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module
    return module


class _PatchBase(importlib.abc.MetaPathFinder):
    """S3: TE's module/base.py compiled from its source with prepare_forward's `assert inp.is_cuda` dropped."""

    NAME = "transformer_engine.pytorch.module.base"

    def __init__(self, path: str) -> None:
        self.path = path

    def find_spec(self, fullname: str, _path: Any = None, _target: Any = None) -> Any:
        if fullname != self.NAME:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=_PatchedSource(fullname, self.path))


class _PatchedSource(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname: str) -> Any:  # always from the source (no .pyc of the patched code)
        source = self.get_data(self.path).decode("utf-8")
        if source.count(BASE_PY_PATCH[0]) != 1:
            raise SystemExit(f"{self.path}: the prepare_forward CUDA assert was not found once (S3)")
        return compile(source.replace(*BASE_PY_PATCH), self.path, "exec", dont_inherit=True)


def load_te(tree: str, torch: Any) -> Any:
    """Import TE's GroupedLinear from `tree` with the stand-ins S1-S4; returns the grouped_linear module."""
    os.environ["NVTE_PROJECT_BUILDING"] = "1"  # S2
    sys.path.insert(0, tree)
    top = _package("transformer_engine", os.path.join(tree, "transformer_engine"))
    import transformer_engine.common as common  # noqa: E402 (the real module, without its .so: S2)
    common.load_framework_extension = lambda _framework: None
    tex = _inert_module("transformer_engine_torch")
    tex.te_general_grouped_gemm = standin_grouped_gemm(torch)  # type: ignore[attr-defined]
    for name in ["onnxscript", "onnxscript.onnx_opset", "onnx", "einops"] + [
            f"transformer_engine.{side}.triton.{kernel}" for side in ("common", "pytorch")
            for kernel in ("pad", "permutation", "cross_entropy")]:
        _inert_module(name)
    top.pytorch = _package("transformer_engine.pytorch", os.path.join(tree, "transformer_engine", "pytorch"))
    sys.meta_path.insert(0, _PatchBase(os.path.join(tree, "transformer_engine", "pytorch", "module", "base.py")))
    import transformer_engine.pytorch.module.grouped_linear as grouped_linear  # noqa: E402
    import transformer_engine.pytorch.cpp_extensions.gemm as gemm  # noqa: E402
    import transformer_engine.pytorch.utils as utils  # noqa: E402
    empty = lambda: torch.Tensor()  # noqa: E731  (S4)
    gemm._empty_tensor = utils._empty_tensor = empty
    import transformer_engine.pytorch.tensor.storage.mxfp8_tensor_storage  # noqa: E402,F401 (its clear())
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("transformer_engine") and hasattr(module, "_empty_tensor"):
            module._empty_tensor = empty
    gemm.get_sm_count = lambda: 148
    workspace = [torch.empty(0, dtype=torch.uint8)]
    gemm.get_cublas_workspace = lambda *_a: workspace
    return grouped_linear


# The low-precision recipes btacalc has (btacalc/data/precision.toml), each as the TE recipe class Megatron-LM builds
# for it (megatron/core/fp8_utils.py L555-573, fp4_utils.py L94-99 at b0cc2706), and the compute capability of the
# GPUs whose rows run it (S7): Hopper for the three FP8 recipes, Blackwell for MXFP8 and NVFP4.
RECIPES: dict[str, tuple[str, tuple[int, int]]] = {
    "fp8": ("DelayedScaling", (9, 0)),
    "fp8-current": ("Float8CurrentScaling", (9, 0)),
    "fp8-blockwise": ("Float8BlockScaling", (9, 0)),
    "mxfp8": ("MXFP8BlockScaling", (10, 0)),
    "nvfp4": ("NVFP4BlockScaling", (10, 0)),
}


def standin_storage(torch: Any, tex: Any, t: Any, quantizer: Any, non_tn: bool) -> Any:
    """S5/S7: the Python object TE's C++ `create_tensor` builds for `quantizer` (csrc/quantizer.cpp L154-168 FP8,
    L619-636 block, L909-925 MXFP8, L1200-1215 NVFP4 at v2.12), over the unquantised slice `t`, with empty scales: the
    storage class when `quantizer.internal`, else the torch.Tensor subclass (shape and dtype as the C++ passes them);
    row-wise and / or column-wise data as the quantizer's usage asks (FP8 per tensor: data when row-wise or non-TN
    GEMMs are supported, a transpose when column-wise and they are not, L128-139)."""
    from transformer_engine.pytorch.tensor.float8_blockwise_tensor import Float8BlockQuantizer, Float8BlockwiseQTensor
    from transformer_engine.pytorch.tensor.float8_tensor import Float8Tensor
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer, MXFP8Tensor
    from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer, NVFP4Tensor
    from transformer_engine.pytorch.tensor.storage.float8_blockwise_tensor_storage import (
        Float8BlockwiseQTensorStorage)
    from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage
    from transformer_engine.pytorch.tensor.storage.mxfp8_tensor_storage import MXFP8TensorStorage
    from transformer_engine.pytorch.tensor.storage.nvfp4_tensor_storage import NVFP4TensorStorage

    row, col = quantizer.rowwise_usage, quantizer.columnwise_usage
    scale = torch.empty(0)
    wrapper = {} if quantizer.internal else {"shape": list(t.shape), "dtype": t.dtype}  # no device, as the C++
    if isinstance(quantizer, MXFP8Quantizer):
        cls = MXFP8TensorStorage if quantizer.internal else MXFP8Tensor
        return cls(rowwise_data=t if row else None, rowwise_scale_inv=scale if row else None,
                   columnwise_data=t if col else None, columnwise_scale_inv=scale if col else None,
                   fp8_dtype=tex.DType.kFloat8E4M3, quantizer=quantizer, with_gemm_swizzled_scales=False, **wrapper)
    if isinstance(quantizer, NVFP4Quantizer):
        cls = NVFP4TensorStorage if quantizer.internal else NVFP4Tensor
        return cls(rowwise_data=t if row else None, rowwise_scale_inv=scale if row else None,
                   columnwise_data=t if col else None, columnwise_scale_inv=scale if col else None,
                   amax_rowwise=scale if row else None, amax_columnwise=scale if col else None,
                   fp4_dtype=tex.DType.kFloat4E2M1, quantizer=quantizer, with_gemm_swizzled_scales=False, **wrapper)
    if isinstance(quantizer, Float8BlockQuantizer):
        cls = Float8BlockwiseQTensorStorage if quantizer.internal else Float8BlockwiseQTensor
        return cls(rowwise_data=t if row else None, rowwise_scale_inv=scale if row else None,
                   columnwise_data=t if col else None, columnwise_scale_inv=scale if col else None,
                   fp8_dtype=tex.DType.kFloat8E4M3, quantizer=quantizer,
                   is_2D_scaled=quantizer.block_scaling_dim == 2, **wrapper)
    cls = Float8TensorStorage if quantizer.internal else Float8Tensor  # delayed and current scaling
    return cls(data=t if (row or non_tn) else None, fp8_scale_inv=scale, fp8_dtype=tex.DType.kFloat8E4M3,
               data_transpose=t if (col and not non_tn) else None, quantizer=quantizer, **wrapper)


def install_current_device(torch: Any) -> None:
    """S8: `torch.cuda.current_device()` as on an initialised GPU, the same Python frames (torch/cuda/__init__.py
    in torch 2.13: current_device -> _lazy_init -> is_initialized, then the C++ device query), returning "cpu".
    TE asks it per quantizer copy under NVFP4 (tensor/nvfp4_tensor.py L155-158 at v2.12) and for a QuantizedTensor
    built with no device (quantized_tensor.py L371)."""
    def is_initialized() -> bool:
        return True

    def lazy_init() -> None:
        if is_initialized():
            return

    def current_device() -> Any:
        lazy_init()
        return "cpu"

    torch.cuda.current_device = current_device

    def is_current_stream_capturing() -> bool:  # torch/cuda/graphs.py: one Python frame over a C++ query
        return False

    torch.cuda.is_current_stream_capturing = is_current_stream_capturing  # delayed scaling: base.py L1066


@contextlib.contextmanager
def cpu_factories(torch: Any) -> Iterator[None]:
    """S8: while the module is built and warmed up (not while timed), a factory call asking for device "cuda" (TE's
    recipe state: quantization.py L292, L1079-1081, the current-scaling quantizers' scale and amax) gets the CPU."""
    from torch.overrides import TorchFunctionMode

    class Cpu(TorchFunctionMode):
        def __torch_function__(self, func: Any, types_: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            device = kwargs.get("device")
            if device is not None and str(device).startswith("cuda"):
                kwargs["device"] = "cpu"
            return func(*args, **kwargs)

    with Cpu():
        yield


def install_recipe(torch: Any, name: str) -> Any:
    """S5/S7 (--recipe NAME): the recipe's compute capability for TE's recipe checks (and CUDA 12.9 for the
    block-scaling check, quantization.py L80-87); the extension's `split_quantize` and `quantize` build TE's own
    Python objects (`standin_storage`: each constructor copies the quantizer, as when TE's C++ builds it) over the
    unquantised slices; the grouped GEMM stand-in skips the arithmetic on them. Returns the recipe."""
    import transformer_engine.common.recipe as recipes
    import transformer_engine.pytorch.quantization as quantization
    import transformer_engine.pytorch.utils as utils

    cls, capability = RECIPES[name]
    quantization.get_device_compute_capability = utils.get_device_compute_capability = lambda: capability
    torch.cuda.get_device_capability = lambda *_a: capability  # utils.is_non_tn_fp8_gemm_supported
    if torch.version.cuda is None:
        torch.version.cuda = "12.9"
    install_current_device(torch)
    non_tn = (10, 0) <= capability < (12, 0) or capability >= (13, 0)  # utils.py L491-496
    tex = sys.modules["transformer_engine_torch"]

    def split_quantize(inp: Any, splits: Sequence[int], quantizers: Sequence[Any], **_k: Any) -> list[Any]:
        return [standin_storage(torch, tex, t, q, non_tn) for t, q in zip(torch.split(inp, list(splits)), quantizers)]

    tex.split_quantize = split_quantize
    def standin_quantize(t: Any, quantizer: Any, *_a: Any) -> Any:  # named, so that the counts show each call
        return standin_storage(torch, tex, t, quantizer, non_tn)

    tex.quantize = standin_quantize
    if name == "fp8":  # Megatron's TEDelayedScaling (extensions/transformer_engine.py L2191-2224): its config's defaults
        return recipes.DelayedScaling(margin=0, amax_history_len=1, amax_compute_algo="most_recent")
    return getattr(recipes, cls)()  # TE's defaults (Megatron passes only the format)


def build(grouped_linear: Any, megatron_ddp: Any, bucket_group: Any, torch: Any, experts: int, hidden: int,
          tokens: int, hooks: bool = True, recipe: Any = None) -> tuple[Callable[[], None], Callable[[], None], list[Any]]:
    """GroupedLinear(G, hidden, hidden) as Megatron's TEGroupedLinear holds it: a forward closure, a forward +
    backward closure, and the grad accumulators that hold the hooks."""
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: True  # S3, construction only
    try:
        with cpu_factories(torch):
            module = grouped_linear.GroupedLinear(experts, hidden, hidden, bias=False, device="cpu",
                                                  params_dtype=torch.float32, fuse_wgrad_accumulation=True)
    finally:
        torch.cuda.is_available = real
    base = sys.modules["transformer_engine.pytorch.module.base"]
    base._dummy_wgrads[(hidden, hidden, torch.float32)] = torch.empty(hidden, hidden)  # S4
    ddp_config = types.SimpleNamespace(overlap_grad_reduce=True)
    params = [getattr(module, f"weight{i}") for i in range(experts)]
    ddp = types.SimpleNamespace(param_to_bucket_group={p: bucket_group(ddp_config) for p in params},
                                ddp_config=ddp_config, force_all_reduce=False)
    keep = []
    for p in params:
        p.main_grad = torch.zeros(p.shape, dtype=torch.float32)
        p.grad_added_to_main_grad = False
        if hooks:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(megatron_ddp._make_backward_post_hook(ddp, p))
            keep.append(acc)  # DDP keeps them (self.grad_accs)
    x = torch.randn(experts * tokens, hidden, requires_grad=True)
    grad = torch.ones(experts * tokens, hidden)
    splits = [tokens] * experts

    quantized = contextlib.nullcontext if recipe is None else (
        lambda: sys.modules["transformer_engine.pytorch.quantization"].autocast(enabled=True, recipe=recipe))

    def step(first: bool = False) -> None:
        with quantized():
            y = module(x, splits, is_first_microbatch=first)
        y.backward(grad)
        x.grad = None

    def forward() -> None:  # the forward alone (its graph is freed unused)
        with quantized():
            module(x, splits, is_first_microbatch=False)

    with cpu_factories(torch):  # S8
        step(True)  # warm-up: TE's first-call set-up (fp8 meta; the quantised weights' cache, kept for the next calls)
    return forward, step, keep


def thread_cpu(fn: Callable[[], Any], number: int) -> float:
    """Seconds of this thread's CPU time per call, best of 3 (other processes on the machine do not count)."""
    return min(timeit.Timer(fn, timer=time.thread_time).repeat(number=number, repeat=3)) / number


def measure(te_tree: str, megatron_tree: str, experts: Sequence[int], do_time: bool, repeat: int,
            hidden: int = 8, tokens: int = 2, hooks: bool = True, recipe_name: str = "bf16") -> dict[str, Any]:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.set_num_threads(1)
    sys.path.insert(0, megatron_tree)  # before TE: Megatron's DDP imports with HAVE_TE False (only its hook is used)
    from megatron.core.distributed.distributed_data_parallel import DistributedDataParallel
    from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucketGroup
    grouped_linear = load_te(te_tree, torch)
    recipe = install_recipe(torch, recipe_name) if recipe_name != "bf16" else None

    def bucket_group(ddp_config: Any) -> Any:
        group = types.SimpleNamespace(is_last_microbatch=False, ddp_config=ddp_config)
        group.register_grad_ready = types.MethodType(_ParamAndGradBucketGroup.register_grad_ready, group)
        return group

    class Aten(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: Counter[str] = Counter()

        def __torch_dispatch__(self, func: Any, types_: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.calls[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    out: dict[str, Any] = {"experts": list(experts), "counts": {}, "times_us": {}}
    steps = {}
    for g in experts:
        forward, step, keep = build(grouped_linear, DistributedDataParallel, bucket_group, torch, g, hidden, tokens,
                                     hooks, recipe)
        steps[g] = (forward, step, keep)
        STANDIN_CALLS.clear()
        calls = PythonCalls()
        with calls.active():
            step()
        aten = Aten()
        with aten:
            step()
        forward()  # the forward alone after a forward alone, as --time runs it (S6: the weights' cache must hold)
        alone = PythonCalls()
        with alone.active():
            forward()
        step()
        out["counts"][g] = {"python": calls.kinds["python"], "builtin": calls.kinds["builtin"],
                            "aten": sum(aten.calls.values()), "standin_calls": dict(STANDIN_CALLS),
                            "python_by_function": dict(calls.by_function), "aten_ops": dict(aten.calls),
                            "forward_alone_python_by_function": dict(alone.by_function)}
    for key in ("python", "builtin", "aten"):
        out[f"{key}_line"] = line_fit({g: out["counts"][g][key] for g in experts})
    if not do_time:
        return out

    tex = sys.modules["transformer_engine_torch"]
    names = ["te_general_grouped_gemm"] + (["split_quantize", "quantize"] if recipe else [])
    real = {n: getattr(tex, n) for n in names}
    one = torch.randn(1, requires_grad=True)

    def copy(v: Any) -> Any:  # TE clears the saved inputs after the wgrad (clear_tensor_data)
        if isinstance(v, torch.Tensor):
            return v.detach().clone()
        return [copy(t) for t in v] if isinstance(v, (list, tuple)) else v

    def record(fn: Callable[[], None]) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
        """The stand-in calls `fn` makes, with copies of their arguments."""
        calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

        def wrap(name: str) -> Callable[..., Any]:
            def recording(*a: Any, **k: Any) -> Any:
                calls.append((name, tuple(copy(v) for v in a), k))
                return real[name](*a, **k)
            return recording

        for n in names:
            setattr(tex, n, wrap(n))
        try:
            fn()
        finally:
            for n in names:
                setattr(tex, n, real[n])
        return calls

    def replay(calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> None:  # no grad, as in the step
        with torch.no_grad():
            for n, a, k in calls:
                real[n](*a, **k)

    rounds: dict[int, list[dict[str, float]]] = {g: [] for g in experts}
    for _ in range(repeat):
        for g in experts:
            forward, step, _keep = steps[g]
            in_step, in_forward = record(step), record(forward)
            ref = thread_cpu(lambda: one + 1, 2000)
            layer = thread_cpu(step, 50)
            standin = thread_cpu(lambda: replay(in_step), 50)
            fwd = thread_cpu(forward, 50)
            standin_fwd = thread_cpu(lambda: replay(in_forward), 50)
            rounds[g].append({"reference_op": ref * 1e6, "step": layer * 1e6, "standin": standin * 1e6,
                              "forward": fwd * 1e6, "standin_forward": standin_fwd * 1e6,
                              "net_ref_ops": (layer - standin) / ref,
                              "net_forward_ref_ops": (fwd - standin_fwd) / ref})
    out["times_us"] = {g: rounds[g] for g in experts}
    for key in ("net_ref_ops", "net_forward_ref_ops"):
        median = {g: sorted(r[key] for r in rounds[g])[len(rounds[g]) // 2] for g in experts}
        out[f"{key}_median"] = median
        out[f"{key}_line"] = line_fit(median)
        slopes = sorted(line_fit({g: rounds[g][i][key] for g in experts})[0] for i in range(repeat))
        out[f"{key}_round_slopes"] = slopes
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("te_tree")
    parser.add_argument("megatron_tree")
    parser.add_argument("--experts", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-hooks", action="store_true",
                        help="without Megatron DDP's per-parameter backward hook (to see its share)")
    parser.add_argument("--recipe", choices=["bf16", *RECIPES], default="bf16",
                        help="a low-precision recipe: TE's path for it with the stand-ins S5-S7 (module docstring)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    result = measure(args.te_tree, args.megatron_tree, args.experts, args.time, args.repeat, hooks=not args.no_hooks,
                     recipe_name=args.recipe)
    for g in args.experts:
        c = result["counts"][g]
        print(f"G={g:3d}: python calls {c['python']:5d}  builtin {c['builtin']:5d}  aten {c['aten']:4d}  "
              f"stand-in calls {c['standin_calls']}")
    for key in ("python", "builtin", "aten"):
        slope, intercept = result[f"{key}_line"]
        print(f"{key}: {slope:.2f} per expert + {intercept:.1f} per call")
    if args.time:
        for g in args.experts:
            print(f"G={g:3d}:", "  ".join(f"ref {r['reference_op']:.2f} us step {r['step']:.0f} us stand-in "
                                          f"{r['standin']:.0f} us net {r['net_ref_ops']:.1f}"
                                          for r in result["times_us"][g]))
        for key, what in (("net_ref_ops", "forward + backward"), ("net_forward_ref_ops", "forward")):
            slope, intercept = result[f"{key}_line"]
            median = {g: round(v, 1) for g, v in result[f"{key}_median"].items()}
            print(f"{what}, net of the stand-in, in reference ops: median of rounds {median}: {slope:.2f} per "
                  f"expert + {intercept:.1f} per call; each round's slope "
                  f"{[round(v, 2) for v in result[f'{key}_round_slopes']]}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
