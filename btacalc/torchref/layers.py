"""Plain PyTorch reference layers, written to be measured (needs `btacalc[measure]`).

`Qwen3MoeLayer` follows the Hugging Face transformers Qwen3-MoE decoder layer op by op
(Qwen3RMSNorm with its fp32 upcast, q/k RMSNorm per head, rotary embeddings, GQA attention eager
with `repeat_kv` and fp32 softmax, or SDPA, router softmax/top-k/renormalisation, SwiGLU experts
in a per-expert loop, weighted combine with `index_add`). Two deliberate differences, neither of
which changes FLOPs or saved bytes: tokens are grouped by expert with one `argsort` + gather instead
of HF's `torch.where` per expert (fixed shapes, so the layer also runs under FakeTensorMode at full
size), and under fake tensors each expert gets an equal share of the k*T routed copies (the totals
of FLOPs and saved bytes depend only on the sum, k*T; a test checks real routing gives the same).

`GPTLayer` is the layer Korthikanti et al. 2022 count: LayerNorm, fused QKV with bias, MHA with
softmax and attention dropout, output projection, residual dropout, LayerNorm, 4h GeLU MLP, dropout.

Both layers accept `tiles=G`: attention (from the input norm to the output projection and the
residual add) runs on G slices of b = N/G sequences, the outputs are concatenated and the rest of
the layer runs once on all N sequences (Batch Tiling on Attention). Every block of the forward pass
is tagged with the btacalc phase it belongs to (`current_phase`), so measurements line up with the
formula catalogue phase by phase.
"""

from __future__ import annotations

import contextlib
import math
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

_PHASE: ContextVar[str] = ContextVar("btacalc_phase", default="(outside)")


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    token = _PHASE.set(name)
    try:
        yield
    finally:
        _PHASE.reset(token)


def current_phase() -> str:
    return _PHASE.get()


def is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


@dataclass(frozen=True)
class LayerShape:
    hidden: int  # h
    heads: int  # a
    kv_heads: int  # a_kv
    head_dim: int  # d_h
    ffn: int  # f (expert width for MoE, MLP width for GPT)
    experts: int = 0  # E
    top_k: int = 0  # k


class RMSNorm(nn.Module):
    """Qwen3RMSNorm: upcast to fp32, x * rsqrt(mean(x^2) + eps), downcast, times the weight."""

    def __init__(self, dim: int, eps: float = 1e-6, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary(seq: int, dim: int, batch: int, dtype: torch.dtype, theta: float = 1e6) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (b, 1, s, d_h): HF's rotary embedding computes them per sequence from the
    position ids (b, s), in fp32, then casts; we do the same, so each tile keeps its own copies."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    pos = torch.arange(seq, dtype=torch.float32)[None].expand(batch, seq)
    freqs = pos[..., None] * inv_freq  # (b, s, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """HF repeat_kv: (b, a_kv, s, d) -> (b, a_kv * n_rep, s, d), a materialised copy."""
    if n_rep == 1:
        return x
    b, kv, s, d = x.shape
    return x[:, :, None].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


class QwenAttention(nn.Module):
    def __init__(self, shape: LayerShape, attention: str, dtype: torch.dtype):
        super().__init__()
        h, a, kv, d = shape.hidden, shape.heads, shape.kv_heads, shape.head_dim
        self.shape, self.attention = shape, attention
        self.q_proj = nn.Linear(h, a * d, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(h, kv * d, bias=False, dtype=dtype)
        self.v_proj = nn.Linear(h, kv * d, bias=False, dtype=dtype)
        self.o_proj = nn.Linear(a * d, h, bias=False, dtype=dtype)
        self.q_norm = RMSNorm(d, dtype=dtype)
        self.k_norm = RMSNorm(d, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        a, kv, d = self.shape.heads, self.shape.kv_heads, self.shape.head_dim
        with phase("qkv_proj"):
            q = self.q_proj(x).view(b, s, a, d)
            k = self.k_proj(x).view(b, s, kv, d)
            v = self.v_proj(x).view(b, s, kv, d).transpose(1, 2)
        with phase("qk_norm"):
            q = self.q_norm(q).transpose(1, 2)
            k = self.k_norm(k).transpose(1, 2)
        with phase("rope"):
            cos, sin = rotary(s, d, b, x.dtype)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        if self.attention == "flash":
            with phase("attn_scores"):  # one fused kernel: scores, softmax and P.V
                o = F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(d), enable_gqa=True)
        else:
            with phase("attn_scores"):
                k = repeat_kv(k, a // kv)
                scores = torch.matmul(q, k.transpose(2, 3)) * (1 / math.sqrt(d))
            with phase("attn_softmax"):
                p = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            with phase("attn_pv"):
                o = torch.matmul(p, repeat_kv(v, a // kv))
        with phase("attn_out_proj"):
            o = o.transpose(1, 2).reshape(b, s, a * d)
            return self.o_proj(o)


class Experts(nn.Module):
    """E SwiGLU experts (gate, up: h -> f; down: f -> h), applied in a per-expert loop."""

    def __init__(self, shape: LayerShape, dtype: torch.dtype):
        super().__init__()
        h, f, e = shape.hidden, shape.ffn, shape.experts
        self.gate = nn.ModuleList(nn.Linear(h, f, bias=False, dtype=dtype) for _ in range(e))
        self.up = nn.ModuleList(nn.Linear(h, f, bias=False, dtype=dtype) for _ in range(e))
        self.down = nn.ModuleList(nn.Linear(f, h, bias=False, dtype=dtype) for _ in range(e))

    def forward(self, x_sorted: torch.Tensor, counts: list[int]) -> torch.Tensor:
        outs = []
        for e, chunk in enumerate(torch.split(x_sorted, counts)):
            if counts[e]:
                outs.append(self.down[e](F.silu(self.gate[e](chunk)) * self.up[e](chunk)))
        return torch.cat(outs)


class MoeBlock(nn.Module):
    def __init__(self, shape: LayerShape, dtype: torch.dtype):
        super().__init__()
        self.shape = shape
        self.gate = nn.Linear(shape.hidden, shape.experts, bias=False, dtype=dtype)
        self.experts = Experts(shape, dtype)

    def split_sizes(self, flat_expert: torch.Tensor) -> list[int]:
        e, n = self.shape.experts, flat_expert.numel()
        if is_fake(flat_expert):  # no data: equal shares (totals depend only on n = k*T)
            return [n // e + (1 if i < n % e else 0) for i in range(e)]
        return torch.bincount(flat_expert, minlength=e).tolist()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, s, h = x.shape
        tokens = x.reshape(n * s, h)
        k = self.shape.top_k
        with phase("router"):
            logits = self.gate(tokens)
            probs = F.softmax(logits, dim=1, dtype=torch.float32)
            weights, chosen = torch.topk(probs, k, dim=-1)
            weights = weights / weights.sum(dim=-1, keepdim=True)  # norm_topk_prob
            weights = weights.to(x.dtype)
        with phase("dispatch"):
            flat = chosen.reshape(-1)
            order = torch.argsort(flat, stable=True)
            token_of = order // k
            x_sorted = tokens[token_of]
        with phase("experts"):
            y_sorted = self.experts(x_sorted, self.split_sizes(flat))
        with phase("combine"):
            y_sorted = y_sorted * weights.reshape(-1)[order].unsqueeze(-1)
            out = torch.zeros_like(tokens).index_add(0, token_of, y_sorted)
        return out.reshape(n, s, h)


class Qwen3MoeLayer(nn.Module):
    def __init__(self, shape: LayerShape, attention: str = "eager", dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        if attention not in ("eager", "flash"):
            raise ValueError(f"attention must be eager or flash, got {attention!r}")
        self.shape = shape
        self.input_layernorm = RMSNorm(shape.hidden, dtype=dtype)
        self.self_attn = QwenAttention(shape, attention, dtype)
        self.post_attention_layernorm = RMSNorm(shape.hidden, dtype=dtype)
        self.mlp = MoeBlock(shape, dtype)

    def attention_block(self, x: torch.Tensor) -> torch.Tensor:
        with phase("input_norm"):
            hidden = self.input_layernorm(x)
        out = self.self_attn(hidden)
        with phase("attn_out_proj"):
            return x + out

    def forward(self, x: torch.Tensor, tiles: int = 1) -> torch.Tensor:
        x = tiled(self.attention_block, x, tiles)
        with phase("post_attn_norm"):
            hidden = self.post_attention_layernorm(x)
        out = self.mlp(hidden)
        with phase("combine"):
            return x + out


def dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout as CUDA runs it: `native_dropout` keeps a 1-byte bool mask. (On the CPU,
    F.dropout multiplies by a noise tensor in the input's dtype and keeps that: 2 bytes in bf16.)"""
    return torch.native_dropout(x, p, True)[0]


class GPTLayer(nn.Module):
    """Korthikanti et al. 2022's transformer layer (their Fig. 2), 16-bit, with dropout."""

    def __init__(self, shape: LayerShape, dropout: float = 0.1, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        h = shape.hidden
        self.shape, self.p = shape, dropout
        self.ln1 = nn.LayerNorm(h, dtype=dtype)
        self.qkv = nn.Linear(h, 3 * h, dtype=dtype)
        self.proj = nn.Linear(h, h, dtype=dtype)
        self.ln2 = nn.LayerNorm(h, dtype=dtype)
        self.fc1 = nn.Linear(h, shape.ffn, dtype=dtype)
        self.fc2 = nn.Linear(shape.ffn, h, dtype=dtype)

    def attention_block(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        a = self.shape.heads
        d = h // a
        with phase("input_norm"):
            y = self.ln1(x)
        with phase("qkv_proj"):
            q, k, v = self.qkv(y).view(b, s, 3, a, d).permute(2, 0, 3, 1, 4)
        with phase("attn_scores"):
            scores = torch.matmul(q, k.transpose(2, 3)) * (1 / math.sqrt(d))
        with phase("attn_softmax"):
            p = dropout(F.softmax(scores, dim=-1), self.p)
        with phase("attn_pv"):
            o = torch.matmul(p, v)
        with phase("attn_out_proj"):
            o = self.proj(o.transpose(1, 2).reshape(b, s, h))
            return x + dropout(o, self.p)

    def forward(self, x: torch.Tensor, tiles: int = 1) -> torch.Tensor:
        x = tiled(self.attention_block, x, tiles)
        with phase("post_attn_norm"):
            y = self.ln2(x)
        with phase("mlp"):
            y = self.fc2(F.gelu(self.fc1(y)))
            return x + dropout(y, self.p)


def tiled(block, x: torch.Tensor, tiles: int) -> torch.Tensor:
    """Batch Tiling on Attention: run `block` on G slices of the batch and concatenate."""
    n = x.shape[0]
    if tiles < 1 or n % tiles:
        raise ValueError(f"tiles = {tiles} must divide the batch {n}")
    if tiles == 1:
        return block(x)
    return torch.cat([block(part) for part in torch.split(x, n // tiles)])
