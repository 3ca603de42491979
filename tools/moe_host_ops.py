"""Count the PyTorch (aten) operators Megatron-LM's MoE router and all-to-all token dispatcher issue per layer.

The host cost of eager PyTorch is paid per operator (Python binding, dispatcher, autograd bookkeeping, then the
kernel launch), so the number of operators a module issues is what sets its host time (docs/host-time.md). That
number does not depend on the GPU: it is fixed by the code path. This tool runs Megatron-LM's own `TopKRouter` and
`MoEAlltoAllTokenDispatcher` (from a Megatron-LM checkout given on the command line, e.g. `git archive 554ce493
megatron/core`) on CPU tensors in one process and counts every aten call under a `TorchDispatchMode`, forward and
backward, per stage of the MoE layer:

    router       TopKRouter.forward: gating linear, softmax top-k, aux-loss scores and the aux-loss autograd hook
    preprocess   token counts per expert (dispatcher.preprocess, inside dispatch_preprocess)
    permute      dispatch_preprocess's permute, dispatch_postprocess's sort by local expert
    combine      combine_preprocess's unsort, combine_postprocess's unpermute

CPU-only substitutions (they do not change what operators are called): torch.cuda.current_device returns "cpu";
CUDA streams and events are inert (the device-to-host copy of the split sizes is a no-op copy on CPU); Megatron's
router_gating_linear reads a module-level `te_general_gemm` that is undefined without TransformerEngine and is set
to None (the torch path). The layout is one process: EP 1, so the all-to-alls are identities (Megatron's
all_to_all returns its input on a group of one) and the EP > 1 preprocess branch (split sizes, an all-gather of the
counts) is not taken; permute and unpermute run unfused (`moe_permute_fusion = False`, TransformerEngine's fused
permute is not available on CPU). Both are stated with the counts.

With `--layer` it builds a whole Megatron MoE transformer layer from Megatron's local (non-TransformerEngine) spec
(`get_gpt_layer_local_spec`: torch RMSNorm, unfused rotary embedding, SequentialMLP looping over the local experts
in Python, the core attention replaced by one torch SDPA call standing in for TransformerEngine's fused kernel) and
counts its aten calls forward per module and backward in total: the count an all-eager, all-unfused layer issues,
an upper bound of what the TransformerEngine path (fused norms, rope and permute; one grouped linear module) issues
outside its modules.

With `--wall` it times, on this CPU, the host time of that layer's forward and backward with tiny tensors (compute
negligible) once as built and once with the parts btacalc counts elsewhere replaced by one-op stand-ins: the linear
modules and the core attention (TransformerEngine modules, `kernels.module_host_s`), the experts (TransformerEngine's
grouped linear, `kernels.expert_gemm_host_s`), the norms (TENorm: one fused kernel) and, with `--graphed-router`,
the router (a CUDA-graphed scope `moe_router` in the measured recipes). What is left is the layer's eager glue:
Megatron's TransformerLayer, attention and MoE layer Python, the rotary embedding, the dispatcher's permutation,
the residual adds. Each time is divided by the time of the reference eager op of PyTorch's
benchmarks/dynamo/microbenchmarks/overheads.py (`x + 1` on a one-element tensor with requires_grad, timed in the
same process): the glue in reference-op equivalents, which the host-time model multiplies by that op's published
time on an H100 host (docs/host-time.md). `--dense` times a dense (SwiGLU MLP) layer instead.

With `--hooks` it times Megatron DDP's per-parameter backward post-hook (one call per parameter tensor and
micro-batch) in the same reference-op equivalents (`time_grad_hooks`).

Usage: python tools/moe_host_ops.py /path/to/megatron-checkout [--experts 128 --topk 8 --tokens 64]
       [--layer | --wall [--dense] [--graphed-router] | --hooks]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import types
from collections import Counter
from typing import Any, Callable, Optional


# aten operators that only make a new view or alias of a tensor (no kernel on the GPU): they pay the
# dispatcher but launch nothing.
VIEW_OPS = frozenset({"view", "_unsafe_view", "reshape", "slice", "select", "expand", "t", "transpose", "permute",
                      "squeeze", "unsqueeze", "detach", "alias", "as_strided", "split", "split_with_sizes",
                      "unbind", "lift_fresh", "narrow", "flatten", "unflatten", "view_as", "_reshape_alias"})


def split_views(ops: Counter[str]) -> tuple[int, int]:
    """(kernel-launching calls, view calls) of a count by operator name."""
    views = sum(n for name, n in ops.items() if name in VIEW_OPS)
    return sum(ops.values()) - views, views


class _Count:
    """Counts aten calls by name inside a TorchDispatchMode."""

    def __init__(self) -> None:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types_: Any, args: Any = (), kwargs: Any = None) -> Any:
                counter.ops[str(func.overloadpacket.__name__)] += 1
                return func(*args, **(kwargs or {}))

        self.ops: Counter[str] = Counter()
        self.mode = Mode()
        self.torch = torch

    def __enter__(self) -> "_Count":
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)


def _cpu_stand_ins(torch: Any) -> None:
    """Make Megatron's CUDA-only calls inert on a CPU build (see the module docstring)."""

    class _Stream:
        def wait_stream(self, _s: Any) -> None:
            return None

        def record_event(self) -> Any:
            return types.SimpleNamespace(synchronize=lambda: None)

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.current_stream = lambda *a, **k: _Stream()
    torch.cuda.Stream = lambda *a, **k: _Stream()
    torch.cuda.stream = lambda _s: contextlib.nullcontext()


def _build(megatron: str, experts: int, topk: int, hidden: int) -> tuple[Any, Any]:
    sys.path.insert(0, megatron)
    import torch
    import torch.distributed as dist

    _cpu_stand_ins(torch)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29533"),
                      RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel()
    import megatron.core.transformer.moe.moe_utils as moe_utils
    from megatron.core.transformer.moe.moe_layer import get_default_pg_collection
    from megatron.core.transformer.moe.router import TopKRouter
    from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher
    from megatron.core.transformer.transformer_config import TransformerConfig

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    cfg = TransformerConfig(num_layers=1, hidden_size=hidden, num_attention_heads=4, num_moe_experts=experts,
                            moe_router_topk=topk, moe_aux_loss_coeff=1e-3, moe_router_load_balancing_type="aux_loss",
                            moe_token_dispatcher_type="alltoall", moe_ffn_hidden_size=hidden,
                            use_cpu_initialization=True, add_bias_linear=False, moe_permute_fusion=False)
    pg = get_default_pg_collection()
    router = TopKRouter(cfg, pg_collection=pg)
    dispatcher = MoEAlltoAllTokenDispatcher(num_local_experts=experts, local_expert_indices=list(range(experts)),
                                            config=cfg, pg_collection=pg)
    return router, dispatcher


def _forward(router: Any, dispatcher: Any, x: Any, stage: Callable[[str], Any]) -> Any:
    """One MoE layer's router and dispatcher forward, each stage counted separately (the experts are a
    stand-in: the probabilities applied to the tokens, not counted)."""
    with stage("router"):
        probs, routing_map = router(x)
    d = dispatcher
    with stage("preprocess"):
        d.hidden_shape = x.shape
        d.probs, d.routing_map = probs, routing_map
        d.tokens_per_expert = d.preprocess(routing_map)
    with stage("permute"):
        tokens, pprobs = _permute_only(d, x, routing_map, probs)
        tokens, pprobs = d.token_dispatch(tokens, pprobs)
        tokens, _, pprobs = d.dispatch_postprocess(tokens, pprobs)
    out = tokens * pprobs.unsqueeze(-1).to(tokens.dtype)  # stand-in for the experts (not counted)
    with stage("combine"):
        out = d.combine_preprocess(out)
        out = d.token_combine(out)
        out = d.combine_postprocess(out)
    return out


def _permute_only(d: Any, x: Any, routing_map: Any, probs: Any) -> tuple[Any, Any]:
    """dispatch_preprocess without its preprocess call (counted on its own)."""
    from megatron.core.transformer.moe.moe_utils import permute

    hidden = x.view(-1, d.hidden_shape[-1])
    d.hidden_shape_before_permute = hidden.shape
    d.tokens_per_expert = d._maybe_dtoh_and_synchronize("before_permutation_1", d.tokens_per_expert)
    tokens, pprobs, d.reversed_local_input_permutation_mapping, _, _ = permute(
        hidden, routing_map, probs=probs, num_out_tokens=d.num_out_tokens, fused=False, drop_and_pad=False)
    return tokens, pprobs


def count(megatron: str, experts: int = 128, topk: int = 8, tokens: int = 64, hidden: int = 64) -> dict[str, Any]:
    """Forward aten calls per stage, and the backward's aten calls of the whole chain and of the router alone."""
    router, dispatcher = _build(megatron, experts, topk, hidden)
    import torch

    forward: dict[str, tuple[int, int]] = {}

    @contextlib.contextmanager
    def stage(name: str) -> Any:
        with _Count() as c:
            yield
        forward[name] = split_views(c.ops)

    def backward_ops(loss_of: Callable[[Any, Any], Any]) -> Counter[str]:
        x = torch.randn(tokens, 1, hidden, requires_grad=True)
        loss = loss_of(x, stage)
        with _Count() as c:
            loss.backward()
        return c.ops

    whole = backward_ops(lambda x, st: _forward(router, dispatcher, x, st).sum())
    router_only = backward_ops(lambda x, st: router(x)[0].sum())
    return {"forward": forward, "backward_total": split_views(whole),
            "backward_router": split_views(router_only), "backward_ops": dict(whole)}


_LAYER_MODULES = ("input_layernorm", "self_attention", "self_attention.linear_qkv", "self_attention.q_layernorm",
                  "self_attention.k_layernorm", "self_attention.core_attention", "self_attention.linear_proj",
                  "pre_mlp_layernorm", "mlp", "mlp.router", "mlp.experts")


def _local_layer(experts: Optional[int], topk: int, hidden: int) -> Any:
    """A Qwen3-like MoE layer (GQA, QK RMSNorm, SwiGLU experts, aux loss) from Megatron's local spec; a dense
    SwiGLU layer when experts is None."""
    import torch
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(num_layers=1, hidden_size=hidden, num_attention_heads=4, num_query_groups=2,
                            kv_channels=hidden // 4, num_moe_experts=experts, moe_router_topk=topk if experts else 2,
                            moe_aux_loss_coeff=1e-3, moe_router_load_balancing_type="aux_loss",
                            moe_token_dispatcher_type="alltoall", moe_ffn_hidden_size=hidden // 2 if experts else None,
                            ffn_hidden_size=hidden // 2, use_cpu_initialization=True, add_bias_linear=False,
                            moe_permute_fusion=False, gated_linear_unit=True,
                            activation_func=torch.nn.functional.silu, normalization="RMSNorm", qk_layernorm=True,
                            hidden_dropout=0.0, attention_dropout=0.0, moe_grouped_gemm=False)
    spec = get_gpt_layer_local_spec(num_experts=experts, moe_grouped_gemm=False, qk_layernorm=True,
                                    normalization="RMSNorm")
    layer = build_module(spec, config=cfg, layer_number=1)

    class FusedCore(torch.nn.Module):
        """Stand-in for TransformerEngine's fused attention: one SDPA call on [s, b, heads, dim] tensors."""

        def forward(self, q: Any, k: Any, v: Any, _mask: Any, **_kw: Any) -> Any:
            rep = q.shape[2] // k.shape[2]
            q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)))
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return o.permute(2, 0, 1, 3).reshape(o.shape[2], o.shape[0], -1)

    layer.self_attention.core_attention = FusedCore()
    return layer


def count_layer(megatron: str, experts: int = 16, topk: int = 8, tokens: int = 256,
                hidden: int = 64) -> dict[str, Any]:
    """Forward aten calls per module of a whole local-spec MoE layer (a module's own calls, its children's
    apart; 'layer' is the transformer layer's own: residual adds and the like) and the backward's total."""
    _build(megatron, experts, topk, hidden)  # process group, parallel state and CPU stand-ins
    import torch
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    layer = _local_layer(experts, topk, hidden)
    where = ["layer"]
    for name in _LAYER_MODULES:
        module = layer.get_submodule(name)
        module.register_forward_pre_hook(lambda _m, _i, n=name: where.append(n))
        module.register_forward_hook(lambda _m, _i, _o: where.pop() and None)  # a hook's result replaces the output
    rope = RotaryEmbedding(kv_channels=hidden // 4, rotary_percent=1.0)(tokens)
    mask = torch.triu(torch.ones(tokens, tokens), 1).bool()[None, None]
    forward: dict[str, Counter[str]] = {}
    for _ in range(2):  # the second pass is counted: lazily built buffers exist by then
        forward = {}
        x = torch.randn(tokens, 1, hidden, requires_grad=True)
        import torch.utils._python_dispatch as pd

        class Mode(pd.TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types_: Any, args: Any = (), kwargs: Any = None) -> Any:
                forward.setdefault(where[-1], Counter())[str(func.overloadpacket.__name__)] += 1
                return func(*args, **(kwargs or {}))

        with Mode():
            out = layer(x, attention_mask=mask, rotary_pos_emb=rope)
        out = out[0] if isinstance(out, tuple) else out
        with _Count() as back:
            out.sum().backward()
    total: Counter[str] = sum(forward.values(), Counter())
    return {"forward": {k: split_views(v) for k, v in forward.items()}, "forward_total": split_views(total),
            "backward_total": split_views(back.ops)}


def _stand_ins(layer: Any, hidden: int, graphed_router: bool) -> None:
    """Replace what btacalc counts elsewhere by one-op modules (see the module docstring)."""
    import torch

    class OneMatmul(torch.nn.Module):
        def __init__(self, n_in: int, n_out: int) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(n_out, n_in))

        def forward(self, x: Any) -> Any:
            return torch.nn.functional.linear(x, self.w), None

    class GroupedExperts(OneMatmul):
        def forward(self, h: Any, _tokens_per_expert: Any, probs: Any) -> Any:  # type: ignore[override]
            return torch.nn.functional.linear(h, self.w) * probs.unsqueeze(-1), None

    class FusedNorm(torch.nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(n))

        def forward(self, x: Any) -> Any:
            return x * self.w

    class GraphedRouter(torch.nn.Module):
        """The router's outputs replayed: its forward and backward are one graph launch each."""

        def __init__(self, router: Any, x: Any) -> None:
            super().__init__()
            with torch.no_grad():
                self.probs, self.map = router(x)

        def forward(self, x: Any, *_a: Any, **_k: Any) -> Any:
            return self.probs + 0 * x.view(-1, x.shape[-1])[:, :1], self.map

    sa = layer.self_attention
    sa.linear_qkv = OneMatmul(hidden, sa.linear_qkv.weight.shape[0])
    sa.linear_proj = OneMatmul(sa.linear_proj.weight.shape[1], hidden)
    for name in ("input_layernorm", "pre_mlp_layernorm"):
        setattr(layer, name, FusedNorm(hidden))
    for name in ("q_layernorm", "k_layernorm"):
        if getattr(sa, name, None) is not None:
            setattr(sa, name, FusedNorm(getattr(sa, name).weight.shape[0]))
    if hasattr(layer.mlp, "experts"):
        layer.mlp.experts = GroupedExperts(hidden, hidden)
        if graphed_router:
            layer.mlp.router = GraphedRouter(layer.mlp.router, torch.randn(_WALL_TOKENS, hidden))
    else:
        layer.mlp.linear_fc1 = OneMatmul(hidden, layer.mlp.linear_fc1.weight.shape[0])
        layer.mlp.linear_fc2 = OneMatmul(layer.mlp.linear_fc2.weight.shape[1], hidden)


_WALL_TOKENS = 16  # tiny tensors: the CPU's arithmetic is negligible next to the host overhead


def time_layer(megatron: str, experts: Optional[int], topk: int = 8, hidden: int = 64, glue_only: bool = True,
               graphed_router: bool = False, repeat: int = 9) -> dict[str, float]:
    """Host time of one layer's forward and forward + backward, and in reference-op equivalents (each the
    minimum over `repeat` interleaved timings: the least disturbed by other work on the machine)."""
    import timeit

    _build(megatron, experts or 2, topk, hidden)
    import torch
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    torch.set_num_threads(1)
    layer = _local_layer(experts, topk, hidden)
    if glue_only:
        _stand_ins(layer, hidden, graphed_router)
    s = _WALL_TOKENS
    rope = RotaryEmbedding(kv_channels=hidden // 4, rotary_percent=1.0)(s)
    mask = torch.triu(torch.ones(s, s), 1).bool()[None, None]
    x = torch.randn(s, 1, hidden, requires_grad=True)
    one = torch.randn(1, requires_grad=True)

    def forward() -> Any:
        out = layer(x, attention_mask=mask, rotary_pos_emb=rope)
        return out[0] if isinstance(out, tuple) else out

    def step() -> None:
        forward().sum().backward()

    for _ in range(5):
        step()
    times: dict[str, list[float]] = {"reference_op": [], "forward": [], "forward_backward": []}
    def cpu(fn: Callable[[], Any], number: int) -> float:
        """CPU time of this thread per call (time.thread_time: other processes on the machine do not count)."""
        return min(timeit.Timer(fn, timer=time.thread_time).repeat(number=number, repeat=3)) / number

    for _ in range(repeat):  # interleaved, so that a change of the machine's state shows in all three
        times["reference_op"].append(cpu(lambda: one + 1, 2000))
        times["forward"].append(cpu(forward, 20))
        times["forward_backward"].append(cpu(step, 20))
    best = {k: min(v) for k, v in times.items()}
    return {**{f"{k}_us": v * 1e6 for k, v in best.items()},
            "forward": best["forward"] / best["reference_op"],
            "forward_backward": best["forward_backward"] / best["reference_op"]}


def time_grad_hooks(megatron: str, params: int = 64, repeat: int = 7) -> dict[str, float]:
    """Host time of Megatron DDP's per-parameter backward post-hook (distributed_data_parallel.py
    `_make_backward_post_hook`, registered on every parameter's grad accumulator), in reference-op equivalents.

    `params` one-element parameters each enter a tiny graph; its backward is timed with and without Megatron's own
    hook on each parameter's AccumulateGrad node, as DDP registers it. The hook runs as in a micro-batch that is not
    the last of the step (the common case: `register_grad_ready` returns without starting a reduce) with the
    gradient already accumulated into main_grad by TransformerEngine's fused wgrad GEMM
    (`grad_added_to_main_grad`: no add kernel), so what is timed is the hook's Python. The difference over
    `params` is the cost of one hook call; each timing is the minimum over `repeat` interleaved rounds."""
    import timeit

    sys.path.insert(0, megatron)
    import torch
    from megatron.core.distributed.distributed_data_parallel import DistributedDataParallel
    from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucketGroup

    torch.set_num_threads(1)
    ddp_config = types.SimpleNamespace(overlap_grad_reduce=True)

    def build(hooked: bool) -> tuple[list[Any], list[Any]]:
        ps = [torch.nn.Parameter(torch.ones(1)) for _ in range(params)]
        accumulators = []
        if hooked:
            group = types.SimpleNamespace(is_last_microbatch=False, ddp_config=ddp_config)
            group.register_grad_ready = types.MethodType(_ParamAndGradBucketGroup.register_grad_ready, group)
            ddp = types.SimpleNamespace(param_to_bucket_group={q: group for q in ps}, ddp_config=ddp_config)
            for q in ps:
                setattr(q, "grad_added_to_main_grad", True)
                grad_fn: Any = q.expand_as(q).grad_fn
                acc: Any = grad_fn.next_functions[0][0]
                acc.register_hook(DistributedDataParallel._make_backward_post_hook(ddp, q))
                accumulators.append(acc)  # DDP keeps them (self.grad_accs), or the hooks would be dropped
        return ps, accumulators

    x, one = torch.ones(1), torch.ones(1, requires_grad=True)

    def backward(ps: list[Any]) -> None:
        torch.stack([x * q for q in ps]).sum().backward()
        for q in ps:
            q.grad = None

    def cpu(fn: Callable[[], Any], number: int) -> float:
        return min(timeit.Timer(fn, timer=time.thread_time).repeat(number=number, repeat=3)) / number

    plain, _ = build(False)
    hooked, _keep = build(True)
    times: dict[str, list[float]] = {"reference_op": [], "plain": [], "hooked": []}
    for _ in range(repeat):
        times["reference_op"].append(cpu(lambda: one + 1, 2000))
        times["plain"].append(cpu(lambda: backward(plain), 100))
        times["hooked"].append(cpu(lambda: backward(hooked), 100))
    best = {k: min(v) for k, v in times.items()}
    per_hook = (best["hooked"] - best["plain"]) / params
    return {"reference_op_us": best["reference_op"] * 1e6, "per_hook_us": per_hook * 1e6,
            "per_hook_reference_ops": per_hook / best["reference_op"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("megatron", help="path holding megatron/core (a Megatron-LM checkout)")
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--layer", action="store_true", help="count a whole local-spec MoE layer")
    p.add_argument("--wall", action="store_true", help="time the layer's eager glue in reference-op equivalents")
    p.add_argument("--dense", action="store_true", help="with --wall: a dense layer")
    p.add_argument("--graphed-router", action="store_true", help="with --wall: the router replayed (CUDA graph)")
    p.add_argument("--whole", action="store_true", help="with --wall: time the whole layer, no stand-ins")
    p.add_argument("--hooks", action="store_true", help="time DDP's per-parameter backward hook")
    a = p.parse_args()
    if a.hooks:
        h = time_grad_hooks(a.megatron)
        print("DDP backward hook per parameter, host time (us) and in reference-op equivalents:",
              {k: round(v, 2) for k, v in h.items()})
        return
    if a.wall:
        w = time_layer(a.megatron, None if a.dense else a.experts, a.topk, glue_only=not a.whole,
                       graphed_router=a.graphed_router)
        print("host time (us) and in reference-op equivalents (x + 1, requires_grad):",
              {k: round(v, 1) for k, v in w.items()})
        return
    if a.layer:
        lr = count_layer(a.megatron, a.experts, a.topk, a.tokens)
        print("aten calls as (kernel-launching, view-only)")
        print("forward per module:", lr["forward"])
        print("forward total", lr["forward_total"], "backward total", lr["backward_total"])
        return
    r = count(a.megatron, a.experts, a.topk, a.tokens)
    print("aten calls as (kernel-launching, view-only)")
    print("forward per stage:", r["forward"])
    print("backward: whole chain", r["backward_total"], "router alone", r["backward_router"])
    print("backward by op:", dict(sorted(r["backward_ops"].items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
