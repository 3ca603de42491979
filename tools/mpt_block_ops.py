"""List the aten operators one llm-foundry MPT block issues forward and backward, with the bytes each touches.

Task mpt4 (docs/runs.md 'mpt4'): do llm-foundry's eager PyTorch kernels move more bytes per layer than the
Megatron-fused ones btacalc counts? This rebuilds one `MPTBlock` as the benchmark sweep ran it
(mosaicml/llm-foundry @ 5e85bd62d) on CPU tensors and records every aten call under a `TorchDispatchMode`:

    x -> LPLayerNorm -> Wqkv (bias) -> split q,k,v -> rearrange (views) -> FlashAttnFunc -> view -> out_proj (bias)
      -> + x (resid_attn_dropout p = 0) -> LPLayerNorm -> up_proj (bias) -> GELU -> down_proj (bias) -> + x

Sources: layers/blocks.py L129-155 (the block), layers/attention.py L606-618 (Wqkv, split), L471-473 and L489-492
(rearrange, flash_attn_func, view), layers/ffn.py L117-118 (down_proj(act(up_proj(x)))), layers/norm.py L39-53
(LPLayerNorm: casts to the autocast dtype, layer_norm with autocast off), mpt/configuration_mpt.py L50/L57/L59
(resid_pdrop 0.0, no_bias False, low_precision_layernorm; submit_benchmarks.py L307 sets the norm again).

Everything is BF16 as on the GPU: FSDP's DEFAULT mixed precision hands the block 16-bit parameters, so autocast
casts nothing, and LPLayerNorm runs with autocast off. `FlashAttnFunc` (flash_attn_triton.py L800-838) is
reproduced as the wrapper it is, its Triton kernels stubbed out (not counted): the forward allocates `o`; the
backward allocates dq, dk, dv, an fp32 `dq_accum` that the autotuner's pre_hook zeroes (L485-491 init_to_zero('DQ')),
and copies dq_accum into dq (L661, L720). Bytes per call = the sizes of its tensor inputs and outputs (views and
allocations count nothing). On CUDA one aten call can be more than one kernel (the LayerNorm backward's weight and
bias gradients are a second pass over dy and x); the docs state that beside the count.

Usage: python tools/mpt_block_ops.py [--h 256 --tokens 64]
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# aten ops that make views or allocate without a kernel that moves data
_FREE = {
    "view", "_unsafe_view", "split", "split_with_sizes", "t", "transpose", "permute", "expand", "reshape",
    "empty_like", "empty", "detach", "alias", "as_strided", "unsqueeze", "squeeze", "slice", "select",
    "empty_strided", "new_empty", "new_empty_strided", "lift_fresh", "_reshape_alias",
}


def _bytes(tree: Any) -> int:
    leaves, _ = tree_flatten(tree)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


class ByteCount(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str, int]] = []
        self.stage = "forward"
        self.enabled = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if self.enabled and name not in _FREE:
            # an in-place op's output is its first argument: count that tensor once (zero_ only writes it)
            written = 0 if name.endswith("_") else _bytes(out)
            self.rows.append((self.stage, name, _bytes(args) + _bytes(kwargs or {}) + written))
        return out


MODE: ByteCount | None = None


class FlashAttnStandIn(torch.autograd.Function):
    """flash_attn_triton.FlashAttnFunc's wrapper; the Triton kernels are stubs (not counted)."""

    @staticmethod
    def forward(ctx, q, k, v):  # type: ignore[no-untyped-def]
        assert MODE is not None
        q, k, v = [x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v)]
        MODE.enabled = False
        o = torch.empty_like(q).copy_(q)  # stub of _fwd_kernel (writes o)
        MODE.enabled = True
        ctx.save_for_backward(q, k, v, o)
        return o

    @staticmethod
    def backward(ctx, do):  # type: ignore[no-untyped-def]
        assert MODE is not None
        q, k, v, o = ctx.saved_tensors
        if do.stride(-1) != 1:
            do = do.contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dq_accum = torch.empty_like(q, dtype=torch.float32)
        dq_accum.zero_()  # autotune pre_hook init_to_zero('DQ'): counted as its one write
        MODE.enabled = False  # stubs of _bwd_preprocess_do_o_dot and _bwd_kernel
        dq_accum.copy_(do)
        dk.copy_(do)
        dv.copy_(do)
        MODE.enabled = True
        dq.copy_(dq_accum)
        return dq, dk, dv


class Block(torch.nn.Module):
    def __init__(self, h: int, heads: int) -> None:
        super().__init__()
        dt = torch.bfloat16
        self.heads = heads
        self.norm_1 = torch.nn.LayerNorm(h, dtype=dt)
        self.Wqkv = torch.nn.Linear(h, 3 * h, bias=True, dtype=dt)
        self.out_proj = torch.nn.Linear(h, h, bias=True, dtype=dt)
        self.norm_2 = torch.nn.LayerNorm(h, dtype=dt)
        self.up_proj = torch.nn.Linear(h, 4 * h, bias=True, dtype=dt)
        self.down_proj = torch.nn.Linear(4 * h, h, bias=True, dtype=dt)
        self.drop = torch.nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        a = self.norm_1(x)
        q, k, v = self.Wqkv(a).split([h, h, h], dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads) for t in (q, k, v))
        o = FlashAttnStandIn.apply(q, k, v)
        x = x + self.drop(self.out_proj(o.view(b, s, h)))
        n = self.down_proj(F.gelu(self.up_proj(self.norm_2(x))))
        return x + self.drop(n)


def count(h: int, tokens: int, heads: int = 4) -> dict[tuple[str, str], list[int]]:
    global MODE
    torch.manual_seed(0)
    block = Block(h, heads).train()
    x = torch.randn(1, tokens, h, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(1, tokens, h, dtype=torch.bfloat16)
    MODE = ByteCount()
    with MODE:
        y = block(x)
        MODE.stage = "backward"
        y.backward(grad)
    table: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for stage, name, nbytes in MODE.rows:
        table[(stage, name)][0] += 1
        table[(stage, name)][1] += nbytes
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--h", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    table = count(a.h, a.tokens)
    per = a.h * a.tokens
    print(f"h={a.h} tokens={a.tokens}: bytes per call summed, and in units of (tokens x h) bytes")
    for (stage, name), (calls, nbytes) in sorted(table.items()):
        print(f"{stage:9s} {name:32s} calls {calls:3d}  bytes {nbytes:12d}  = {nbytes / per:8.2f} T*h")


if __name__ == "__main__":
    main()
