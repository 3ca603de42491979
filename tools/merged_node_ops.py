"""Time, on CPU, the host work Megatron's merged 1F1B schedule (--overlap-moe-expert-parallel-comm) adds per node.

A check outside the test suite: it needs a Megatron-LM tree at the rows' release (`git archive d98e8a64 megatron |
tar -x`). docs/clock.md, section "mergedhost".

Under the merged schedule every layer of every micro-batch is split into nodes (pre-dispatch, dispatch, MLP, combine:
megatron/core/models/common/utils.py `TransformerLayerNode`, on megatron/core/pipeline_parallel/utils.py
`ScheduleNode`), built anew per micro-batch (models/common/model_chunk_schedule_plan.py L160-176), each forward
detaching its inputs and each backward entering the autograd engine once for itself (`ScheduleNode._backward`,
`default_backward_func`: one `Variable._execution_engine.run_backward` per node). The plain schedule runs one
autograd call per micro-batch. What this tool times is the Python and autograd work of the node machinery itself:

  build     constructing one TransformerLayerNode (its free-input policy, its fields);
  forward   node.forward(x) less its submodule's own op (a one-op stand-in, `x + 1`, with one `node.detach` as the
            pre-dispatch and dispatch submodules make: fine_grained_callables.py L145, L175);
  backward  node.backward(g) less the stand-in op's marginal backward inside one larger autograd call (the slope of
            a chain of n such ops under one torch.autograd.backward: what the plain schedule pays per op);

each in units of the reference eager op of docs/host-time.md (`x + 1` on a one-element tensor with requires_grad,
timed in the same process), thread CPU time, the minimum over repeats.

What differs from the GPU path: the CUDA stream and event are inert Python objects (`event.wait(stream)`,
`event.record(stream)`: two CUDA runtime calls per node on a GPU, which btacalc prices at the profile's
launch_overhead_s instead), `torch.cuda.stream(...)` a null context, `Tensor.record_stream` a no-op; NVTX is off (as
in a run without --nvtx-ranges: megatron/core/utils.py nvtx_range_push returns at once); on a GPU the autograd engine
hands a CUDA graph task to its device thread and waits for it, a thread switch CPU tensors do not make, so the
backward figure is a lower bound. The Megatron modules that TransformerLayerNode's module imports but these calls
never use (TransformerLayer, GraphableMegatronModule) are stand-in names.

Usage: python tools/merged_node_ops.py MEGATRON_TREE [--repeat 7]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import timeit
import types
from typing import Any, Callable


def load_megatron(tree: str) -> types.ModuleType:
    """megatron.core.models.common.utils from `tree`, its package __init__ files skipped (they import the whole of
    Megatron-Core, triton and TransformerEngine among it)."""
    for name in ("megatron", "megatron.core", "megatron.core.pipeline_parallel", "megatron.core.models",
                 "megatron.core.models.common", "megatron.core.transformer"):
        package = types.ModuleType(name)
        package.__path__ = [f"{tree}/{name.replace('.', '/')}"]
        sys.modules[name] = package
    import importlib
    importlib.import_module("megatron.core.parallel_state")  # (megatron.core.utils imports it back: the cycle)
    utils = importlib.import_module("megatron.core.utils")
    stand_in = types.ModuleType("megatron.core.transformer.module")
    stand_in.GraphableMegatronModule = object  # type: ignore[attr-defined]
    stand_in.float16_to_fp32 = lambda x: x  # type: ignore[attr-defined]
    sys.modules[stand_in.__name__] = stand_in
    layer = types.ModuleType("megatron.core.transformer.transformer_layer")
    layer.TransformerLayer = object  # type: ignore[attr-defined]
    layer.make_viewless_tensor = utils.make_viewless_tensor  # type: ignore[attr-defined]
    sys.modules[layer.__name__] = layer
    return importlib.import_module("megatron.core.models.common.utils")


class InertEvent:
    """A CUDA event whose wait and record do nothing (two CUDA runtime calls on a GPU: priced apart)."""

    def wait(self, stream: Any = None) -> None:
        return None

    def record(self, stream: Any = None) -> None:
        return None


def cpu(fn: Callable[[], Any], number: int) -> float:
    """Thread CPU time per call, the best of 3 rounds of `number` calls."""
    return min(timeit.Timer(fn, timer=time.thread_time).repeat(number=number, repeat=3)) / number


def inert_streams() -> None:
    """torch's CUDA stream context and record_stream as no-ops (the CPU run: module docstring)."""
    import torch
    torch.cuda.stream = lambda stream=None: contextlib.nullcontext()  # type: ignore[assignment]
    torch.Tensor.record_stream = lambda self, stream: None  # type: ignore[method-assign,assignment]


def measure(common: types.ModuleType, repeat: int) -> dict[str, Any]:
    import torch
    inert_streams()
    config = types.SimpleNamespace(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep",
                                   fp8=None, fp4=None, cuda_graph_modules=[], moe_ncclep_zero_copy=False)
    extra = {"config": config, "is_moe": True, "num_local_experts": 4, "delay_wgrad_compute": False}
    event, stream = InertEvent(), object()
    one = torch.ones(1, requires_grad=True)
    grad = torch.ones(1)

    def submodule(node: Any, x: Any) -> Any:
        y = x + 1
        node.detach(y)
        return y

    def build() -> Any:
        return common.TransformerLayerNode(stream, event, common.LayerState(), None, submodule, name="mlp_stand_in",
                                           extra_args=extra)

    def node_forward() -> None:
        build().forward(one)

    def node_step() -> None:
        node = build()
        node.forward(one)
        node.detached[0].grad = grad  # what the later node that reads the detached tensor fills in its backward
        node.backward(grad)

    def op_forward() -> None:
        y = one + 1
        y.detach()

    def chain(n: int) -> Callable[[], None]:
        def run() -> None:
            y = one
            for _ in range(n):
                y = y + 1
            torch.autograd.backward(y, grad)
        return run

    for _ in range(50):
        node_step()
    rows: dict[str, list[float]] = {k: [] for k in ("reference_op", "build", "node_forward", "node_step",
                                                    "op_forward", "chain_1", "chain_33")}
    for _ in range(repeat):  # interleaved, so that a change of the machine's load shows in every row
        rows["reference_op"].append(cpu(lambda: one + 1, 4000))
        rows["build"].append(cpu(build, 2000))
        rows["node_forward"].append(cpu(node_forward, 1000))
        rows["node_step"].append(cpu(node_step, 500))
        rows["op_forward"].append(cpu(op_forward, 4000))
        rows["chain_1"].append(cpu(chain(1), 1000))
        rows["chain_33"].append(cpu(chain(33), 200))
    best = {k: min(v) for k, v in rows.items()}
    per_op_backward = (best["chain_33"] - best["chain_1"]) / 32 - best["reference_op"]  # marginal backward of one op
    ref = best["reference_op"]
    forward = best["node_forward"] - best["build"] - best["op_forward"]
    backward = best["node_step"] - best["node_forward"] - per_op_backward
    return {"us": {k: v * 1e6 for k, v in best.items()}, "per_op_backward_us": per_op_backward * 1e6,
            "ref_ops": {"build": best["build"] / ref, "forward": forward / ref, "backward": backward / ref,
                        "autograd_call": (best["chain_1"] - 2 * ref - per_op_backward) / ref}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", help="a Megatron-LM tree (git archive d98e8a64 megatron | tar -x)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    common = load_megatron(args.tree.rstrip("/"))
    print(json.dumps(measure(common, args.repeat), indent=1))


if __name__ == "__main__":
    main()
