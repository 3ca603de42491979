"""Plain PyTorch reference layers, written to be measured (needs `btacalc[measure]`).

`DecoderLayer` (alias `Qwen3MoeLayer`) follows the Hugging Face transformers Qwen3-MoE decoder layer op by op
(Qwen3RMSNorm with its fp32 upcast, q/k RMSNorm per head, rotary embeddings, GQA attention eager
with `repeat_kv` and fp32 softmax, or SDPA, router softmax/top-k/renormalisation, SwiGLU experts
in a per-expert loop, weighted combine with `index_add`). Two deliberate differences, neither of
which changes FLOPs or saved bytes: tokens are grouped by expert with one `argsort` + gather instead
of HF's `torch.where` per expert (fixed shapes, so the layer also runs under FakeTensorMode at full
size), and under fake tensors each expert gets an equal share of the k*T routed copies (the totals
of FLOPs and saved bytes depend only on the sum, k*T; a test checks real routing gives the same).

Its `LayerShape` switches on the other published blocks, each following its HF transformers module:
multi-head latent attention (DeepseekV3Attention: q_a/q_b with q_a_layernorm, kv_a_proj_with_mqa,
kv_a_layernorm, kv_b_proj, decoupled RoPE key shared by the heads, up-projections computed), the
DeepSeek-V3 sigmoid router in fp32 and its shared expert (DeepseekV3MoE), the Qwen2-MoE shared-expert
gate, GPT-OSS's q/k/v/o and expert biases, top-k-then-softmax router and attention sinks (GptOss eager
attention: sink column, max subtraction, softmax in the activation dtype), dense SwiGLU layers
(DeepseekV3MLP), and sliding-window layers computed over the band of w keys only (what a window-aware
kernel does: HF's eager attention would compute all s x s scores and mask them).

`GPTLayer` is the layer Korthikanti et al. 2022 count: LayerNorm, fused QKV with bias, MHA with
softmax and attention dropout, output projection, residual dropout, LayerNorm, 4h GeLU MLP, dropout (the shape's
attention_dropout and hidden_dropout probabilities: at 0, no dropout and no mask).

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
from typing import Iterator, Optional

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
    head_dim: int  # d_h (query/key)
    ffn: int  # f (expert width for MoE, MLP width for GPT and for a dense layer)
    experts: int = 0  # E
    top_k: int = 0  # k
    # variants of the decoder reference; the defaults are Qwen3-MoE
    qk_norm: bool = True  # per-head q/k RMSNorm
    attention_bias: bool = False  # q/k/v/o biases (GPT-OSS)
    mla: Optional[tuple[int, int, int, int]] = None  # (q_lora_rank or 0, kv_lora_rank, rope dim d_r, value dim d_v)
    window: int = 0  # sliding window w (0: full attention)
    sinks: bool = False  # GPT-OSS attention sinks (softmax in the activation dtype)
    dense: bool = False  # a dense SwiGLU MLP of width ffn instead of the MoE block
    router: str = "softmax"  # softmax | sigmoid | topk_softmax
    renormalize: bool = True
    router_bias: bool = False
    expert_bias: bool = False
    shared_ffn: int = 0  # f_s: always-on shared expert width (0: none)
    shared_gate: bool = False  # Qwen2-MoE sigmoid gate on the shared expert
    gelu: bool = False  # ungated experts, shared expert, dense MLP (fc1, GeLU, fc2): Megatron without --swiglu
    # the GPT reference's two dropout probabilities (dropout35): on the attention probabilities, and on the residual
    # branches (after the output projection and after the MLP)
    attention_dropout: float = 0.1
    hidden_dropout: float = 0.1


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


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """HF repeat_kv: (b, a_kv, s, d) -> (b, a_kv * n_rep, s, d), a materialised copy."""
    if n_rep == 1:
        return x
    b, kv, s, d = x.shape
    return x[:, :, None].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


def sink_softmax(scores: torch.Tensor, sinks: torch.Tensor, head_axis: int) -> torch.Tensor:
    """HF GptOss eager attention: a learned logit per head (heads on `head_axis` of the scores) joins every
    row, the row maximum is subtracted, softmax in the activation dtype, the sink column dropped."""
    shape = [1] * scores.dim()
    shape[head_axis] = -1
    sink = sinks.reshape(shape).expand(*scores.shape[:-1], 1)
    combined = torch.cat([scores, sink], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    return F.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1]


class Attention(nn.Module):
    """Attention of the decoder reference: GQA projections with optional q/k norm and biases (Qwen3,
    GPT-OSS), or MLA (DeepSeek-V3); eager attention over all s keys (HF eager_attention_forward), over the
    band of the last w keys (sliding window), with GPT-OSS sinks, or SDPA (flash)."""

    def __init__(self, shape: LayerShape, attention: str, dtype: torch.dtype):
        super().__init__()
        h, a, kv, d = shape.hidden, shape.heads, shape.kv_heads, shape.head_dim
        self.shape, self.attention = shape, attention
        if shape.mla is None:
            bias = shape.attention_bias
            self.q_proj = nn.Linear(h, a * d, bias=bias, dtype=dtype)
            self.k_proj = nn.Linear(h, kv * d, bias=bias, dtype=dtype)
            self.v_proj = nn.Linear(h, kv * d, bias=bias, dtype=dtype)
            if shape.qk_norm:
                self.q_norm = RMSNorm(d, dtype=dtype)
                self.k_norm = RMSNorm(d, dtype=dtype)
            value_dim = d
        else:
            r_q, r_kv, d_r, value_dim = shape.mla
            if r_q:
                self.q_a_proj = nn.Linear(h, r_q, bias=False, dtype=dtype)
                self.q_a_layernorm = RMSNorm(r_q, dtype=dtype)
                self.q_b_proj = nn.Linear(r_q, a * d, bias=False, dtype=dtype)
            else:
                self.q_proj = nn.Linear(h, a * d, bias=False, dtype=dtype)
            self.kv_a_proj_with_mqa = nn.Linear(h, r_kv + d_r, bias=False, dtype=dtype)
            self.kv_a_layernorm = RMSNorm(r_kv, dtype=dtype)
            self.kv_b_proj = nn.Linear(r_kv, a * (d - d_r + value_dim), bias=False, dtype=dtype)
        self.value_dim = value_dim
        self.o_proj = nn.Linear(a * value_dim, h, bias=shape.attention_bias, dtype=dtype)
        if shape.sinks:
            self.sinks = nn.Parameter(torch.zeros(a, dtype=dtype))

    def gqa(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, s, _ = x.shape
        a, kv, d = self.shape.heads, self.shape.kv_heads, self.shape.head_dim
        with phase("qkv_proj"):
            q = self.q_proj(x).view(b, s, a, d)
            k = self.k_proj(x).view(b, s, kv, d)
            v = self.v_proj(x).view(b, s, kv, d).transpose(1, 2)
        if self.shape.qk_norm:
            with phase("qk_norm"):
                q, k = self.q_norm(q), self.k_norm(k)
        with phase("rope"):
            cos, sin = rotary(s, d, b, x.dtype)
            q, k = rope(q.transpose(1, 2), cos, sin), rope(k.transpose(1, 2), cos, sin)
        return q, k, v

    def mla(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """HF DeepseekV3Attention up to the attention itself (rope_interleave's reordering, a copy that
        nothing keeps, left out)."""
        b, s, _ = x.shape
        a, d = self.shape.heads, self.shape.head_dim
        r_q, r_kv, d_r, d_v = self.shape.mla  # type: ignore[misc]  # set when this path runs
        with phase("mla_q_proj"):
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))) if r_q else self.q_proj(x)
            q_pass, q_rot = torch.split(q.view(b, s, a, d).transpose(1, 2), [d - d_r, d_r], dim=-1)
        with phase("mla_kv_proj"):
            k_pass, k_rot = torch.split(self.kv_a_proj_with_mqa(x), [r_kv, d_r], dim=-1)
            kv = self.kv_b_proj(self.kv_a_layernorm(k_pass)).view(b, s, a, d - d_r + d_v).transpose(1, 2)
            k_pass, v = torch.split(kv, [d - d_r, d_v], dim=-1)
        with phase("mla_rope"):
            cos, sin = rotary(s, d_r, b, x.dtype)
            q_rot, k_rot = rope(q_rot, cos, sin), rope(k_rot.view(b, 1, s, d_r), cos, sin)
            q = torch.cat((q_pass, q_rot), dim=-1)
            k = torch.cat((k_pass, k_rot.expand(b, a, s, d_r)), dim=-1)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.gqa(x) if self.shape.mla is None else self.mla(x)
        scale = 1 / math.sqrt(self.shape.head_dim)
        n_rep = self.shape.heads // self.shape.kv_heads
        if self.attention == "flash":
            with phase("attn_scores"):  # one fused kernel: scores, softmax and P.V
                o = F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
        elif self.shape.window:
            o = window_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), self.shape.window, scale,
                                 getattr(self, "sinks", None))
        else:
            with phase("attn_scores"):
                scores = torch.matmul(q, repeat_kv(k, n_rep).transpose(2, 3)) * scale
            with phase("attn_softmax"):
                if self.shape.sinks:
                    p = sink_softmax(scores, self.sinks, head_axis=1)
                else:
                    p = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            with phase("attn_pv"):
                o = torch.matmul(p, repeat_kv(v, n_rep))
        with phase("attn_out_proj"):
            o = o.transpose(1, 2).reshape(b, s, self.shape.heads * self.value_dim)
            return self.o_proj(o)


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, scale: float,
                     sinks: Optional[torch.Tensor]) -> torch.Tensor:
    """Sliding-window attention over the band only (what a window-aware kernel computes): query i attends
    to keys i-w+1 .. i, s*w scores per head. Keys and values are laid out sequence-major and padded with
    w - 1 zero rows in front, so the keys of offset j are one contiguous slice: one batched matmul per
    offset (torch counts its FLOPs; nothing of size s x s is ever built). The padded positions are masked."""
    b, a, s, d = q.shape
    n, w = s * b * a, min(window, s)  # a window longer than the sequence is the sequence
    with phase("attn_scores"):
        qs = q.permute(2, 0, 1, 3).contiguous().reshape(n, 1, d)
        kp = F.pad(k.permute(2, 0, 1, 3).contiguous(), (0, 0, 0, 0, 0, 0, w - 1, 0))
        cols = [torch.bmm(qs, kp[j:j + s].reshape(n, d, 1)) for j in range(w)]
        scores = torch.cat(cols, dim=-1).reshape(s, b, a, w) * scale
        # key of offset j for query i is i - (w - 1) + j: masked where it is before the sequence, with an
        # additive mask as HF's (an add keeps nothing for the backward pass)
        before = torch.arange(s)[:, None] - (w - 1) + torch.arange(w)[None, :] < 0
        mask = torch.zeros(s, w, dtype=scores.dtype).masked_fill(before, torch.finfo(scores.dtype).min)
        scores = scores + mask[:, None, None, :]
    with phase("attn_softmax"):
        p = sink_softmax(scores, sinks, head_axis=2) if sinks is not None else F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    with phase("attn_pv"):
        dv = v.shape[-1]
        vp = F.pad(v.permute(2, 0, 1, 3).contiguous(), (0, 0, 0, 0, 0, 0, w - 1, 0))
        o = torch.zeros(n, 1, dv, dtype=q.dtype, device=q.device)
        for j in range(w):
            o = o + torch.bmm(p[..., j].reshape(n, 1, 1), vp[j:j + s].reshape(n, 1, dv))
        return o.reshape(s, b, a, dv).permute(1, 2, 0, 3)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)): the dense MLP (DeepseekV3MLP), a shared expert, one routed expert."""

    def __init__(self, h: int, f: int, dtype: torch.dtype, bias: bool = False):
        super().__init__()
        self.gate = nn.Linear(h, f, bias=bias, dtype=dtype)
        self.up = nn.Linear(h, f, bias=bias, dtype=dtype)
        self.down = nn.Linear(f, h, bias=bias, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class GeLUMLP(nn.Module):
    """fc2(gelu(fc1(x))): an ungated MLP, as a Megatron-Core MLP or expert builds it without gated_linear_unit."""

    def __init__(self, h: int, f: int, dtype: torch.dtype, bias: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(h, f, bias=bias, dtype=dtype)
        self.fc2 = nn.Linear(f, h, bias=bias, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def feed_forward(shape: LayerShape, f: int, dtype: torch.dtype, bias: bool = False) -> nn.Module:
    """The shape's MLP of width f: SwiGLU, or GeLU (`shape.gelu`)."""
    return GeLUMLP(shape.hidden, f, dtype, bias) if shape.gelu else SwiGLU(shape.hidden, f, dtype, bias)


class Experts(nn.Module):
    """E experts (SwiGLU: gate, up h -> f, down f -> h; or GeLU: fc1 h -> f, fc2 f -> h), in a per-expert loop."""

    def __init__(self, shape: LayerShape, dtype: torch.dtype):
        super().__init__()
        self.experts = nn.ModuleList(feed_forward(shape, shape.ffn, dtype, shape.expert_bias)
                                     for _ in range(shape.experts))

    def forward(self, x_sorted: torch.Tensor, counts: list[int]) -> torch.Tensor:
        outs = []
        for e, chunk in enumerate(torch.split(x_sorted, counts)):
            if counts[e]:
                outs.append(self.experts[e](chunk))
        return torch.cat(outs)


class Router(nn.Module):
    """Routers as published: softmax over E in fp32, top-k, optional renormalisation (Qwen3-MoE,
    Mixtral, OLMoE); sigmoid scores from an fp32 linear with a bias-corrected (group-limited) choice,
    renormalised and scaled (HF DeepseekV3TopkRouter; the choice, which gets no gradient, under no_grad and
    the division out of place); top-k of the logits then softmax over them (HF GptOssTopKRouter)."""

    def __init__(self, shape: LayerShape, dtype: torch.dtype):
        super().__init__()
        self.shape = shape
        fp32 = shape.router == "sigmoid"  # DeepSeek-V3 keeps its router weight in fp32
        self.gate = nn.Linear(shape.hidden, shape.experts, bias=shape.router_bias,
                              dtype=torch.float32 if fp32 else dtype)
        if fp32:
            self.register_buffer("correction", torch.zeros(shape.experts))

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.shape.top_k
        if self.shape.router == "topk_softmax":
            weights, chosen = torch.topk(self.gate(tokens), k, dim=-1)
            return F.softmax(weights, dim=-1, dtype=weights.dtype), chosen
        if self.shape.router == "sigmoid":
            probs = self.gate(tokens.float()).sigmoid()
            with torch.no_grad():
                chosen = torch.topk(probs + self.correction, k, dim=-1).indices
            weights = probs.gather(1, chosen)
        else:
            probs = F.softmax(self.gate(tokens), dim=1, dtype=torch.float32)
            weights, chosen = torch.topk(probs, k, dim=-1)
        if self.shape.renormalize:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)  # norm_topk_prob
        return weights.to(tokens.dtype), chosen


class MoeBlock(nn.Module):
    def __init__(self, shape: LayerShape, dtype: torch.dtype):
        super().__init__()
        self.shape = shape
        self.router = Router(shape, dtype)
        self.experts = Experts(shape, dtype)
        if shape.shared_ffn:
            self.shared = feed_forward(shape, shape.shared_ffn, dtype)
            if shape.shared_gate:
                self.shared_gate = nn.Linear(shape.hidden, 1, bias=False, dtype=dtype)

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
            weights, chosen = self.router(tokens)
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
        if self.shape.shared_ffn:
            with phase("shared_experts"):
                shared = self.shared(tokens)
                if self.shape.shared_gate:
                    shared = torch.sigmoid(self.shared_gate(tokens)) * shared
                out = out + shared
        return out.reshape(n, s, h)


class DecoderLayer(nn.Module):
    """The decoder reference: RMSNorm, attention (see `Attention`), RMSNorm, an MoE block (router,
    dispatch, experts, combine, shared experts) or a dense SwiGLU MLP. With the default LayerShape it is
    Hugging Face's Qwen3-MoE layer; `LayerShape` switches on MLA (DeepSeek-V3), sliding windows and sinks
    (GPT-OSS), the other routers, biases, shared experts and dense layers."""

    def __init__(self, shape: LayerShape, attention: str = "eager", dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        if attention not in ("eager", "flash"):
            raise ValueError(f"attention must be eager or flash, got {attention!r}")
        if attention == "flash" and (shape.window or shape.sinks):
            raise ValueError("the reference runs sliding windows and sinks in eager attention only")
        self.shape = shape
        self.input_layernorm = RMSNorm(shape.hidden, dtype=dtype)
        self.self_attn = Attention(shape, attention, dtype)
        self.post_attention_layernorm = RMSNorm(shape.hidden, dtype=dtype)
        self.mlp: nn.Module = feed_forward(shape, shape.ffn, dtype) if shape.dense else MoeBlock(shape, dtype)

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
        if self.shape.dense:
            with phase("mlp"):
                return x + self.mlp(hidden)
        out = self.mlp(hidden)
        with phase("combine"):
            return x + out


Qwen3MoeLayer = DecoderLayer  # the default shape is the Qwen3-MoE layer


def dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout as CUDA runs it: `native_dropout` keeps a 1-byte bool mask. (On the CPU,
    F.dropout multiplies by a noise tensor in the input's dtype and keeps that: 2 bytes in bf16.) At p = 0 F.dropout
    returns its input and keeps nothing (ATen Dropout.cpp `_dropout_impl`), and so does this (dropout35)."""
    if p == 0:
        return x
    return torch.native_dropout(x, p, True)[0]


class GPTLayer(nn.Module):
    """Korthikanti et al. 2022's transformer layer (their Fig. 2), 16-bit, with dropout: the shape's attention_dropout
    on the probabilities, its hidden_dropout on the two residual branches."""

    def __init__(self, shape: LayerShape, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        h = shape.hidden
        self.shape, self.p_attention, self.p_hidden = shape, shape.attention_dropout, shape.hidden_dropout
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
            p = dropout(F.softmax(scores, dim=-1), self.p_attention)
        with phase("attn_pv"):
            o = torch.matmul(p, v)
        with phase("attn_out_proj"):
            o = self.proj(o.transpose(1, 2).reshape(b, s, h))
            return x + dropout(o, self.p_hidden)

    def forward(self, x: torch.Tensor, tiles: int = 1) -> torch.Tensor:
        x = tiled(self.attention_block, x, tiles)
        with phase("post_attn_norm"):
            y = self.ln2(x)
        with phase("mlp"):
            y = self.fc2(F.gelu(self.fc1(y)))
            return x + dropout(y, self.p_hidden)


def tiled(block, x: torch.Tensor, tiles: int) -> torch.Tensor:
    """Batch Tiling on Attention: run `block` on G slices of the batch and concatenate."""
    n = x.shape[0]
    if tiles < 1 or n % tiles:
        raise ValueError(f"tiles = {tiles} must divide the batch {n}")
    if tiles == 1:
        return block(x)
    return torch.cat([block(part) for part in torch.split(x, n // tiles)])
