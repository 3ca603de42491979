"""Formulas against measurements: one reference layer measured, the catalogue evaluated for the same
shape under `ideal` and `pytorch` accounting, phase by phase (bytes kept for backward, forward FLOPs)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from pydantic import BaseModel, Field

from ..config.execution import RunOptions
from ..config.hardware import resolve_hardware
from ..config.model import LayerKind, ModelSpec
from ..errors import BtacalcError
from ..model.problem import make_problem
from .layers import LayerShape
from .measure import Measurement, build_and_measure


class PhaseComparison(BaseModel):
    phase: str
    ideal_bytes: int
    pytorch_bytes: int
    measured_bytes: int
    formula_flops_forward: int
    measured_flops_forward: int
    measured_largest_intermediate_bytes: int


class LayerComparison(BaseModel):
    model: str
    layer: str = Field(description="decoder or gpt reference layer")
    layer_kind: str = Field("decoder", description="the model's layer kind measured (dense/moe, sliding/full)")
    batch: int = Field(description="G*b sequences")
    seq_len: int
    tiles: int
    attention: str
    fake: bool = Field(description="measured under FakeTensorMode (full size, no memory) or on real CPU tensors")
    phases: list[PhaseComparison]
    ideal_bytes: int
    pytorch_bytes: int
    measured_bytes: int
    formula_flops_forward: int
    measured_flops_forward: int
    formula_flops_backward: int = Field(description="2 x forward + FlashAttention's recomputation of S (torch counts it in backward)")
    measured_flops_backward: int
    measured_largest_intermediate_bytes: int


def layer_kind(model: ModelSpec) -> str:
    """Which reference layer measures `model`: the decoder reference (Qwen3-MoE and its variants) or GPT."""
    gated_or_moe = model.mlp == "swiglu" or (model.is_moe and not model.mlp_bias)  # GeLU experts: fc1, GeLU, fc2
    llama4 = model.no_rope_interval or model.router_probs_on_input  # NoPE layers, weights on the expert's input
    if model.norm == "rmsnorm" and gated_or_moe and model.position_embedding == "rope" \
            and model.qk_norm in ("none", "head") and not (model.dropout or model.parallel_block or llama4):
        return "decoder"
    if not model.is_moe and model.norm == "layernorm" and model.mlp == "gelu" and model.num_kv_heads == model.num_heads \
            and model.position_embedding == "learned" and model.dropout and not model.parallel_block:
        return "gpt"
    raise BtacalcError(f"{model.name}: the reference layers are the decoder (RMSNorm, RoPE, SwiGLU experts or MLP, "
                       "GeLU experts, per-head or no q/k norm; MLA, windows, sinks, shared experts) and GPT "
                       "(LayerNorm, MHA, GeLU, dropout); this model is neither" + (
                           " (Llama 4's NoPE layers, L2 q/k norm and expert-input weights have no reference layer)"
                           if llama4 or model.qk_norm == "l2" else ""))


def _kind(model: ModelSpec, name: Optional[str]) -> LayerKind:
    kinds = model.layer_kinds()
    if name is None:
        return max(kinds, key=lambda k: k.count)  # the plan's representative kind
    for kind in kinds:
        if kind.name == name:
            return kind
    raise BtacalcError(f"{{layer_kind}}: {model.name} has no layer kind {name!r} "
                       f"(kinds: {', '.join(k.name for k in kinds)})")


def layer_shape(model: ModelSpec, kind_name: Optional[str] = None) -> LayerShape:
    """The reference layer's shape for one layer kind of `model` (default: the most common kind)."""
    kind = _kind(model, kind_name)
    features, symbols = dict(kind.features), dict(kind.symbols)
    mla = model.mla
    return LayerShape(
        hidden=model.hidden_size, heads=model.num_heads, kv_heads=model.num_kv_heads, head_dim=model.head_dim,
        ffn=symbols.get("f", model.ffn_size), experts=model.num_experts, top_k=model.top_k,
        qk_norm=model.qk_norm == "head", attention_bias=model.qkv_bias,
        mla=(mla.q_lora_rank, mla.kv_lora_rank, mla.qk_rope_head_dim, mla.v_head_dim) if mla else None,
        window=model.sliding_window if features["sliding_window"] else 0, sinks=model.attention_sinks,
        dense=not features["moe"], router=model.router, renormalize=model.router_renormalize,
        router_bias=model.router_bias, expert_bias=model.expert_bias, shared_ffn=model.shared_expert_size,
        shared_gate=model.shared_expert_gate, gelu=model.mlp == "gelu",
        attention_dropout=0.1 if model.attention_dropout else 0.0, hidden_dropout=0.1 if model.hidden_dropout else 0.0)


def formula_values(model: ModelSpec, accounting: str, seq: int, batch: int, tiles: int, attention: str,
                   kind_name: Optional[str] = None) -> Any:
    run = RunOptions(seq_len=seq, recompute="none", attention=attention, accounting=accounting)  # type: ignore[arg-type]  # str checked by the CLI choices
    # per-phase formulas do not depend on the device; a Problem needs one, any profile serves
    problem = make_problem(model, resolve_hardware("wse3"), run)
    name = _kind(model, kind_name).name
    return problem, next(pv for kind, pv in problem.evaluate(tiles, batch // tiles).layers if kind.name == name)


# FakeTensorMode allocates nothing, but torch still computes each tensor's size in bytes as a signed
# 64-bit integer: a phase whose working set nears 2^63 bytes overflows. Refuse well before.
FAKE_LIMIT_BYTES = 1 << 60
# --real allocates: refuse shapes whose estimated peak exceeds this (the CLI's --real-limit-gb).
REAL_LIMIT_BYTES = 8e9


def real_peak_bytes(model: ModelSpec, batch: int, seq: int, tiles: int, attention: str) -> tuple[int, int]:
    """(largest phase working set, estimated peak of a real run) in bytes, from the formulas under
    pytorch accounting: one layer's 16-bit weights and gradients, what it stores for backward, and
    its largest phase's transient tensors (Qwen3-30B-A3B at 64 x 512 tokens: 15.8 GB estimated, 17.1 GB
    resident measured, torch itself included)."""
    _, pv = formula_values(model, "pytorch", seq, batch, tiles, attention)
    names = pv.phase_names("layer")
    params = sum(int(pv.value(n, "params")) for n in names)
    transient = int(pv.max("transient", names))
    return transient, 4 * params + int(pv.total("stored", "layer")) + transient


def check_shape(model: ModelSpec, batch: int, seq: int, tiles: int = 1, attention: str = "eager",
                real_limit_bytes: Optional[float] = None) -> None:
    """Everything `compare_layer` would refuse, before any tensor is built. `real_limit_bytes`: a
    real run's bound (None: under FakeTensorMode)."""
    for name, v in (("--batch", batch), ("--seq", seq), ("--tiles", tiles)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BtacalcError(f"{name} must be a positive integer, got {v!r}")
    if batch % tiles:
        raise BtacalcError(f"--tiles {tiles} must divide --batch {batch}")
    layer_kind(model)
    transient, peak = real_peak_bytes(model, batch, seq, tiles, attention)
    if transient > FAKE_LIMIT_BYTES:
        raise BtacalcError(f"--seq {seq} x --batch {batch}: the largest phase needs {transient:.3g} bytes, beyond "
                           f"what torch can size (limit 2^60 = {FAKE_LIMIT_BYTES:.3g} bytes)")
    if real_limit_bytes is not None and peak > real_limit_bytes:
        raise BtacalcError(f"--real at --seq {seq} x --batch {batch} would allocate about {peak / 1e9:,.1f} GB "
                           f"(estimate), more than --real-limit-gb {real_limit_bytes / 1e9:g}; drop --real "
                           "(FakeTensorMode allocates nothing) or use a smaller shape")


def compare_layer(model: ModelSpec, batch: int, seq: int, tiles: int = 1, attention: str = "eager",
                  fake: bool = True, measurement: Optional[Measurement] = None,
                  kind_name: Optional[str] = None,
                  progress: Optional[Callable[[int], None]] = None) -> LayerComparison:
    """Measure the reference layer for one layer kind of `model` (default: the most common kind), or take
    `measurement`, and line it up with the formulas. `progress(1)`, if given, after each measuring step."""
    if batch % tiles:
        raise BtacalcError(f"--tiles {tiles} must divide --batch {batch}")
    kind = layer_kind(model)
    shape = layer_shape(model, kind_name)
    if attention == "flash" and (shape.window or shape.sinks or shape.mla):
        raise BtacalcError("{attention} flash: the reference runs sliding windows, attention sinks and MLA eager only "
                           "(CPU SDPA takes no window or sink, and falls back to its unfused math path when the value "
                           "head dimension differs from the query's, as MLA's does)")
    m = measurement or build_and_measure(kind, shape, batch, seq, tiles, attention, fake, progress=progress)
    problem, ideal = formula_values(model, "ideal", seq, batch, tiles, attention, kind_name)
    _, pytorch = formula_values(model, "pytorch", seq, batch, tiles, attention, kind_name)
    names = ideal.phase_names("layer")
    rows = []
    for name in names:
        rows.append(PhaseComparison(
            phase=name, ideal_bytes=int(ideal.value(name, "stored")), pytorch_bytes=int(pytorch.value(name, "stored")),
            measured_bytes=m.saved_bytes_by_phase.get(name, 0),
            formula_flops_forward=int(ideal.value(name, "flops_fwd")),
            measured_flops_forward=m.flops_forward_by_phase.get(name, 0),
            measured_largest_intermediate_bytes=m.largest_intermediate_by_phase.get(name, 0),
        ))
    unknown = set(m.saved_bytes_by_phase) - set(names)
    if unknown:
        raise BtacalcError(f"measured phases missing from the catalogue: {sorted(unknown)}")
    fwd = sum(r.formula_flops_forward for r in rows)
    recompute = sum(int(ideal.value(n, "flops_recompute")) for n in names)
    return LayerComparison(
        model=model.name, layer=kind, layer_kind=_kind(model, kind_name).name, batch=batch, seq_len=seq, tiles=tiles, attention=attention, fake=fake,
        phases=rows, ideal_bytes=sum(r.ideal_bytes for r in rows), pytorch_bytes=sum(r.pytorch_bytes for r in rows),
        measured_bytes=m.saved_bytes, formula_flops_forward=fwd, measured_flops_forward=m.flops_forward,
        formula_flops_backward=2 * fwd + recompute, measured_flops_backward=m.flops_backward,
        measured_largest_intermediate_bytes=m.largest_intermediate_bytes,
    )
