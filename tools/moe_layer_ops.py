"""Count and time the host work of Megatron-Core's own MoELayer (router, all-to-all dispatcher, TEGroupedMLP) on CPU.

A check outside the test suite (it needs a Megatron-LM source tree, e.g. `git archive b0cc2706 megatron | tar -x`,
the core_r0.16.0 commit NeMo 26.02's Megatron-Bridge v0.3.0 pins). Unlike tools/moe_host_ops.py, which drives the
router and dispatcher from its own forward, this builds `megatron.core.transformer.moe.moe_layer.MoELayer` as the
Qwen3 MoE recipes configure it (TopKRouter with aux loss, top-k, force-balanced routing; the alltoall dispatcher,
dropless; TEGroupedMLP with the weighted SwiGLU, bias_activation_fusion) on a gloo world of `--world` processes
= the expert-parallel group, and runs its forward and backward as the code is written. Per forward + backward on
rank 0 it reports:

  (a) every dispatched operator (TorchDispatchMode), forward by stage of MoELayer (the method of moe_layer.py /
      token_dispatcher.py / experts.py running), backward by autograd node; as kernel-launching + view-only calls;
  (b) with --time: the thread's CPU time of the forward and forward + backward, of the router alone, and of the
      same aten calls replayed without the Python around them (recorded with their arguments, c10d collectives
      left out), so that layer - replay is the time spent outside the operators; all also in units of the
      reference eager op of docs/host-time.md (`x + 1` with requires_grad, timed in the same process);
  (c) the host-device syncs and device-to-host copies the layer makes (counted in the CUDA stand-ins below).

What differs from the GPU path (each is said with the numbers in docs/host-time.md, section moehost):
  - TransformerEngine does not run on CPU: the experts' linear_fc1 / linear_fc2 (TE GroupedLinear) are one-matmul
    stand-ins taking Megatron's host list of split sizes (btacalc prices TE's per-expert GEMM loop and module
    calls apart); moe_router_fusion and moe_permute_fusion (TE's fused top-k/aux-loss and permute kernels) are
    off, so the router, permute, chunk sort and unpermute run their unfused torch paths; the weighted SwiGLU runs
    Megatron's torch code unfused (on a GPU a jit-fused kernel);
  - the collectives are gloo's (`c10d::` calls in the counts), NCCL's on a GPU; fp32 tensors, tiny sizes.

Patches, all of them (nothing else of Megatron is changed):
  P1 torch.cuda.current_device returns "cpu";
  P2-P4 torch.cuda.current_stream / Stream / stream are inert; a stream's record_event returns an event whose
     synchronize() is counted (the dispatcher's `d2h_event.synchronize()`);
  P5 torch.cuda.synchronize is counted;
  P6 moe_utils.get_cuda_rng_tracker().fork is a null context (the force-balanced random logits' RNG state);
  P7 token_dispatcher.maybe_move_tensor_to_cpu treats its tensors as device tensors: counts one non-blocking D2H
     copy each and returns numpy when asked, as on a GPU (on CPU Megatron's helper returns the tensor itself);
  P8 (measurement only) Megatron's all-gather and torch.distributed.all_to_all_single are wrapped to time the
     thread's CPU time inside gloo's collectives, which --time reports apart: on a GPU the host only enqueues an
     NCCL kernel, gloo moves the data on the CPU;
  and moe_utils.te_general_gemm = None where TE is absent (the router's torch GEMM path).

Usage: python tools/moe_layer_ops.py /path/to/megatron-tree [--world 8 --experts 128 --topk 8 --tokens 64]
       [--time] [--out result.json]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import timeit
import types
from collections import Counter, defaultdict
from typing import Any, Callable

VIEW_OPS = frozenset({"view", "_unsafe_view", "reshape", "slice", "select", "expand", "t", "transpose", "permute",
                      "squeeze", "unsqueeze", "detach", "alias", "as_strided", "split", "split_with_sizes",
                      "unbind", "lift_fresh", "narrow", "flatten", "unflatten", "view_as", "_reshape_alias"})
SYNCS: Counter[str] = Counter()  # host waits on the device and D2H copies, by kind (P2-P5, P7)
COLLECTIVE_S: defaultdict[str, float] = defaultdict(float)  # thread CPU time inside gloo's collectives (P8)


def split_views(ops: dict[str, int]) -> tuple[int, int]:
    """(kernel-launching calls, view-only calls) of a count by operator name."""
    views = sum(n for name, n in ops.items() if name in VIEW_OPS)
    return sum(ops.values()) - views, views


def patch_cuda(torch: Any) -> None:
    """P1-P5 (module docstring)."""

    class Event:
        def synchronize(self) -> None:
            SYNCS["d2h_event.synchronize"] += 1

    class Stream:
        def wait_stream(self, _s: Any) -> None:
            return None

        def record_event(self, *_a: Any) -> Event:
            return Event()

    current = Stream()
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.current_stream = lambda *a, **k: current
    torch.cuda.Stream = lambda *a, **k: Stream()
    torch.cuda.stream = lambda _s: contextlib.nullcontext()
    torch.cuda.synchronize = lambda *a, **k: SYNCS.update(["torch.cuda.synchronize"])


def patch_megatron(torch: Any) -> None:
    """P6, P7 and the router's GEMM path without TE (module docstring)."""
    import megatron.core.transformer.moe.moe_utils as moe_utils
    import megatron.core.transformer.moe.token_dispatcher as dispatcher

    def to_host(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
        if not torch.is_tensor(tensor):
            return tensor
        SYNCS["d2h_copy (non_blocking)"] += 1
        return tensor.detach().numpy() if as_numpy else tensor

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    moe_utils.get_cuda_rng_tracker = lambda: types.SimpleNamespace(fork=lambda *a, **k: contextlib.nullcontext())
    dispatcher.maybe_move_tensor_to_cpu = to_host
    import megatron.core.tensor_parallel.mappings as mappings

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                COLLECTIVE_S[name] += time.thread_time() - t0
        return run

    mappings.dist_all_gather_func = timed("all_gather", mappings.dist_all_gather_func)
    torch.distributed.all_to_all_single = timed("all_to_all", torch.distributed.all_to_all_single)


def grouped_linear_stand_in(torch: Any) -> type:
    class GroupedLinearStandIn(torch.nn.Module):
        """TE's GroupedLinear (TEColumn/RowParallelGroupedLinear) as one matmul; takes Megatron's host split list."""

        def __init__(self, num_gemms: int, n_in: int, n_out: int, **_kw: Any) -> None:
            super().__init__()
            self.num_gemms = num_gemms
            self.weight = torch.nn.Parameter(torch.randn(n_out, n_in) * 0.02)

        def forward(self, x: Any, m_splits: list[int]) -> tuple[Any, None]:
            assert isinstance(m_splits, list) and len(m_splits) == self.num_gemms
            return torch.nn.functional.linear(x, self.weight), None

    return GroupedLinearStandIn


def build(root: str, world: int, rank: int, experts: int, topk: int, hidden: int) -> tuple[Any, Any]:
    """The gloo world, Megatron's parallel state (EP = world) and a Qwen3-recipe MoELayer."""
    sys.path.insert(0, root)
    import torch
    import torch.distributed as dist

    patch_cuda(torch)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from megatron.core import parallel_state
    from megatron.core.transformer.mlp import MLPSubmodules
    from megatron.core.transformer.moe.experts import TEGroupedMLP
    from megatron.core.transformer.moe.moe_layer import MoELayer, MoESubmodules
    from megatron.core.transformer.moe.router import TopKRouter
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(expert_model_parallel_size=world)
    patch_megatron(torch)
    cfg = TransformerConfig(
        num_layers=1, hidden_size=hidden, num_attention_heads=4, num_moe_experts=experts, moe_router_topk=topk,
        moe_aux_loss_coeff=1e-3, moe_router_load_balancing_type="aux_loss", moe_router_pre_softmax=False,
        moe_token_dispatcher_type="alltoall", moe_ffn_hidden_size=hidden // 2, moe_grouped_gemm=True,
        moe_permute_fusion=False, moe_router_fusion=False, moe_router_force_load_balancing=True,
        gated_linear_unit=True, activation_func=torch.nn.functional.silu, bias_activation_fusion=True,
        add_bias_linear=False, use_cpu_initialization=True, expert_model_parallel_size=world,
        hidden_dropout=0.0, attention_dropout=0.0, params_dtype=torch.float32)
    linear = grouped_linear_stand_in(torch)
    experts_spec = ModuleSpec(module=TEGroupedMLP, submodules=MLPSubmodules(linear_fc1=linear, linear_fc2=linear))
    layer = MoELayer(cfg, submodules=MoESubmodules(router=TopKRouter, experts=experts_spec), layer_number=1)
    layer.train()
    return torch, layer


class Stages:
    """The MoELayer stage running (a stack of labels) and, when `clock` is set, each stage's exclusive time."""

    def __init__(self) -> None:
        self.stack = ["moe_layer"]
        self.clock = False
        self.spent: defaultdict[str, float] = defaultdict(float)
        self._mark = 0.0

    def _switch(self) -> None:
        now = time.thread_time()
        self.spent[self.stack[-1]] += now - self._mark
        self._mark = now

    @contextlib.contextmanager
    def at(self, label: str) -> Any:
        if self.clock:
            self._switch()
        self.stack.append(label)
        try:
            yield
        finally:
            if self.clock:
                self._switch()
            self.stack.pop()

    def start(self) -> None:
        self.clock, self.spent, self._mark = True, defaultdict(float), time.thread_time()

    def stop(self) -> dict[str, float]:
        self._switch()
        self.clock = False
        return dict(self.spent)


STAGES = (("router", "forward", "router"),
          ("token_dispatcher", "dispatch_preprocess", "dispatch_preprocess: counts, split sizes, permute 1"),
          ("token_dispatcher", "token_dispatch", "token_dispatch: all-to-all"),
          ("token_dispatcher", "dispatch_postprocess", "dispatch_postprocess: sort by local expert"),
          ("experts", "forward", "experts: TEGroupedMLP's own"),
          ("experts.linear_fc1", "forward", "experts: grouped linear stand-ins"),
          ("experts.linear_fc2", "forward", "experts: grouped linear stand-ins"),
          ("token_dispatcher", "combine_preprocess", "combine_preprocess: unsort"),
          ("token_dispatcher", "token_combine", "token_combine: all-to-all"),
          ("token_dispatcher", "combine_postprocess", "combine_postprocess: unpermute"))


def instrument(layer: Any, stages: Stages) -> None:
    """Label each method MoELayer.forward calls (STAGES) on the instance."""
    for path, method, label in STAGES:
        obj = layer
        for part in path.split("."):
            obj = getattr(obj, part)
        inner = getattr(obj, method)

        def labelled(*a: Any, _f: Callable[..., Any] = inner, _l: str = label, **k: Any) -> Any:
            with stages.at(_l):
                return _f(*a, **k)

        setattr(obj, method, labelled)


def counting_mode(torch: Any, stages: Stages, table: dict[str, Counter[str]], backward: bool,
                  record: list[Any]) -> Any:
    """A dispatch mode counting each aten/c10d call under its stage (forward) or autograd node (backward), and
    recording it with its arguments for the replay."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types_: Any, args: Any = (), kwargs: Any = None) -> Any:
            record.append((func, args, kwargs or {}))
            if backward:
                node = torch._C._current_autograd_node()
                label = node.name() if node is not None else "(engine)"
            else:
                label = stages.stack[-1]
            table[label][str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    return Mode()


def count(torch: Any, layer: Any, stages: Stages, tokens: int, hidden: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per-stage forward and per-node backward calls of the third pass (lazy state built by then), its syncs,
    and the recorded calls."""
    for _ in range(3):
        fwd: dict[str, Counter[str]] = defaultdict(Counter)
        bwd: dict[str, Counter[str]] = defaultdict(Counter)
        calls: dict[str, list[Any]] = {"forward": [], "backward": []}
        x = torch.randn(tokens, 1, hidden, requires_grad=True)
        SYNCS.clear()
        with counting_mode(torch, stages, fwd, False, calls["forward"]):
            out, _ = layer(x)
        forward_syncs = dict(SYNCS)
        SYNCS.clear()
        with counting_mode(torch, stages, bwd, True, calls["backward"]):
            out.sum().backward()
        result = {"forward": {k: dict(v) for k, v in fwd.items()}, "backward": {k: dict(v) for k, v in bwd.items()},
                  "forward_syncs": forward_syncs, "backward_syncs": dict(SYNCS)}
    return result, calls


def _cpu(fn: Callable[[], Any], number: int) -> float:
    """This thread's CPU time per call (other processes on the machine do not count), best of 3."""
    return min(timeit.Timer(fn, timer=time.thread_time).repeat(number=number, repeat=3)) / number


def timing(torch: Any, layer: Any, stages: Stages, calls: dict[str, list[Any]], tokens: int, hidden: int,
           repeat: int = 7, number: int = 20) -> dict[str, Any]:
    """(b): thread CPU time (us) of the layer, the router, the replayed aten calls and the reference op; each the
    minimum over `repeat` interleaved rounds; and each forward stage's exclusive time (one more pass)."""
    torch.set_num_threads(1)
    x = torch.randn(tokens, 1, hidden, requires_grad=True)
    one = torch.randn(1, requires_grad=True)
    local = {p: [c for c in cs if c[0].namespace != "c10d"] for p, cs in calls.items()}

    def replay(recorded: list[Any]) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                for f, a, k in recorded:
                    f(*a, **k)
        return run

    def router_step() -> None:
        layer.router(x)[0].sum().backward()

    runs = {"reference_op": (lambda: one + 1, 2000), "forward": (lambda: layer(x)[0], number),
            "forward_backward": (lambda: layer(x)[0].sum().backward(), number),
            "router_forward_backward": (router_step, number),
            "replay_forward_ops": (replay(local["forward"]), number),
            "replay_backward_ops": (replay(local["backward"]), number)}
    for fn, _n in runs.values():
        fn(), fn()
    t: dict[str, list[float]] = defaultdict(list)
    for _ in range(repeat):
        for name, (fn, n) in runs.items():
            t[name].append(_cpu(fn, n))
    best: dict[str, Any] = {k + "_us": min(v) * 1e6 for k, v in t.items()}
    best["replayed_calls"] = {p: len(v) for p, v in local.items()}
    for name, fn in (("forward", runs["forward"][0]), ("forward_backward", runs["forward_backward"][0])):
        inside = []
        for _ in range(number):
            COLLECTIVE_S.clear()
            fn()
            inside.append(dict(COLLECTIVE_S))
        best[f"collectives_in_{name}_us"] = min(inside, key=lambda d: sum(d.values()))
        best[f"collectives_in_{name}_us"] = {k: v * 1e6 for k, v in best[f"collectives_in_{name}_us"].items()}
    per_stage: list[dict[str, float]] = []
    for _ in range(number):
        stages.start()
        layer(x)
        per_stage.append(stages.stop())
    best["forward_stage_us"] = {k: min(s.get(k, 0.0) for s in per_stage) * 1e6 for k in per_stage[0]}
    per_node = [node_times(layer(x)[0].sum()) for _ in range(number)]
    best["backward_node_us"] = {k: min(s.get(k, 0.0) for s in per_node) * 1e6 for k in per_node[0]}
    return best


def node_times(loss: Any) -> dict[str, float]:
    """Run loss.backward() with a pre-hook and a hook on every autograd node of its graph: each node's time from
    its pre-hook to its hook (its backward function, Python ones included), summed by node name; the engine's
    time between nodes is left out."""
    spent: defaultdict[str, float] = defaultdict(float)
    started: dict[Any, float] = {}

    def begin(node: Any) -> Callable[..., None]:
        def hook(*_g: Any) -> None:
            started[node] = time.thread_time()
        return hook

    def end(node: Any) -> Callable[..., None]:
        def hook(*_g: Any) -> None:
            spent[node.name()] += time.thread_time() - started[node]
        return hook

    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        node.register_prehook(begin(node))
        node.register_hook(end(node))
        todo.extend(nxt for nxt, _ in node.next_functions)
    loss.backward()
    return dict(spent)


def worker(rank: int, a: argparse.Namespace) -> None:
    import torch.distributed as dist

    torch, layer = build(a.megatron, a.world, rank, a.experts, a.topk, a.hidden)
    torch.manual_seed(rank)
    stages = Stages()
    instrument(layer, stages)
    result, calls = count(torch, layer, stages, a.tokens, a.hidden)
    if a.time:
        result["time"] = timing(torch, layer, stages, calls, a.tokens, a.hidden)
    result["settings"] = {**vars(a), "torch": torch.__version__, "local_experts": a.experts // a.world}
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
        report(result)
    dist.barrier()


def report(r: dict[str, Any]) -> None:
    for phase in ("forward", "backward"):
        total = [0, 0]
        for label, ops in r[phase].items():
            k, v = split_views(ops)
            total[0], total[1] = total[0] + k, total[1] + v
            print(f"{phase:8s} {label:52s} {k:4d} + {v:4d}  {dict(sorted(ops.items(), key=lambda kv: -kv[1]))}")
        print(f"{phase:8s} {'TOTAL (kernel-launching + view-only)':52s} {total[0]:4d} + {total[1]:4d}")
    print("forward syncs and D2H copies:", r["forward_syncs"], " backward:", r["backward_syncs"])
    if "time" in r:
        print(json.dumps(r["time"], indent=1))


def main() -> None:
    import torch.multiprocessing as mp

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("megatron", help="path holding megatron/core (a Megatron-LM tree)")
    p.add_argument("--world", type=int, default=8, help="gloo processes = the expert-parallel group")
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64, help="tokens per rank (tiny: compute negligible)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--time", action="store_true", help="(b): time the layer, the router and the replayed calls")
    p.add_argument("--out", default="moe_layer_ops.json")
    a = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29631")
    mp.spawn(worker, args=(a,), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
