"""Measure a reference layer: FLOPs (torch.utils.flop_counter), bytes saved for backward
(torch.autograd.graph.saved_tensors_hooks) and the largest intermediate, per btacalc phase.

- FLOPs: `FlopCounterMode` totals, forward and backward. Torch counts CPU SDPA
  (`_scaled_dot_product_flash_attention_for_cpu` and its backward) as zero; we register torch's own
  SDPA formulas (`sdpa_flop_count`, `sdpa_backward_flop_count`) for those two ops. Per phase, the same
  registry is applied op by op in a dispatch mode that knows the current phase; a test checks the
  per-phase sum equals the FlopCounterMode total.
- Saved bytes: every tensor autograd packs, de-duplicated by storage: a storage counts the bytes of
  the distinct views saved from it, capped at the storage's size (an expanded view costs only its
  storage), attributed to the phase that saved the bytes first. Parameters are excluded (they are
  weights, not activations); the layer input is included (Korthikanti counts it).
- Largest intermediate: the largest tensor any forward op returns, per phase.

Runs on real CPU tensors (small shapes) or under FakeTensorMode (full shapes, no memory).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import (FlopCounterMode, flop_registry, sdpa_backward_flop_count, sdpa_flop_count,
                                      shape_wrapper)

from .layers import DecoderLayer, GPTLayer, LayerShape, current_phase, is_fake

aten = torch.ops.aten


def _cpu_sdpa_fwd(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def _cpu_sdpa_bwd(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


CUSTOM_FLOPS: dict[Any, Callable[..., int]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_fwd,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_bwd,
}


def flop_counter() -> FlopCounterMode:
    return FlopCounterMode(display=False, custom_mapping=CUSTOM_FLOPS)


@dataclass
class Measurement:
    flops_forward: int
    flops_backward: int
    flops_forward_by_phase: dict[str, int]
    saved_bytes: int
    saved_bytes_by_phase: dict[str, int]
    largest_intermediate_bytes: int
    largest_intermediate_by_phase: dict[str, int]
    output: Optional[torch.Tensor] = field(default=None, repr=False)


class _PhaseOps(TorchDispatchMode):
    """Per-phase FLOPs (torch's registry + CUSTOM_FLOPS) and largest op output, forward only."""

    def __init__(self) -> None:
        super().__init__()
        self.flops: dict[str, int] = {}
        self.largest: dict[str, int] = {}
        # the same functions FlopCounterMode calls: torch's registry plus ours, shape-wrapped as it does
        self._registry = {**flop_registry, **{op: shape_wrapper(f) for op, f in CUSTOM_FLOPS.items()}}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ph = current_phase()
        packet = func._overloadpacket
        if packet in self._registry:
            self.flops[ph] = self.flops.get(ph, 0) + int(self._registry[packet](*args, **kwargs, out_val=out))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest[ph] = max(self.largest.get(ph, 0), t.numel() * t.element_size())
        return out


class _SavedBytes:
    """saved_tensors_hooks pack hook: distinct saved bytes per storage, attributed to phases."""

    def __init__(self, params: list[torch.Tensor]):
        self.param_storages = {self._key(p) for p in params}
        self.seen_views: dict[Any, set] = {}
        self.counted: dict[Any, int] = {}
        self.by_phase: dict[str, int] = {}
        self._keep: list[Any] = []  # keep storages alive so their ids stay unique

    @staticmethod
    def _key(t: torch.Tensor) -> Any:
        st = t.untyped_storage()
        return id(st) if is_fake(t) else st.data_ptr()  # fake storages have no data pointer

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = self._key(t)
        if key in self.param_storages:
            return t
        st = t.untyped_storage()
        self._keep.append(st)
        view = (t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        views = self.seen_views.setdefault(key, set())
        if view in views:
            return t
        views.add(view)
        before = self.counted.get(key, 0)
        after = min(st.nbytes(), before + t.numel() * t.element_size())
        self.counted[key] = after
        ph = current_phase()
        self.by_phase[ph] = self.by_phase.get(ph, 0) + after - before
        return t


def measure(layer: torch.nn.Module, x: torch.Tensor, tiles: int = 1,
            progress: Optional[Callable[[int], None]] = None) -> Measurement:
    """Forward + backward of `layer` on `x` (requires_grad), measured. `progress(1)` after each pass."""
    saved = _SavedBytes(list(layer.parameters()))
    ops = _PhaseOps()
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
        with flop_counter() as fwd_counter, ops:
            out = layer(x, tiles=tiles)
    if progress:
        progress(1)
    loss = out.float().square().mean()
    with flop_counter() as bwd_counter:
        loss.backward()
    if progress:
        progress(1)
    # the loss itself (square, mean) is not part of the layer: drop what it saved or ran
    by_phase = {k: v for k, v in saved.by_phase.items() if k != "(outside)"}
    flops_by_phase = {k: v for k, v in ops.flops.items() if k != "(outside)"}
    largest = {k: v for k, v in ops.largest.items() if k != "(outside)"}
    return Measurement(
        flops_forward=int(fwd_counter.get_total_flops()),
        flops_backward=int(bwd_counter.get_total_flops()),
        flops_forward_by_phase=flops_by_phase,
        saved_bytes=sum(by_phase.values()),
        saved_bytes_by_phase=by_phase,
        largest_intermediate_bytes=max(largest.values(), default=0),
        largest_intermediate_by_phase=largest,
        output=out,
    )


MEASURE_STEPS = 3  # build the layer, forward, backward: the `progress` calls of build_and_measure


def build_and_measure(kind: str, shape: LayerShape, batch: int, seq: int, tiles: int = 1,
                      attention: str = "eager", fake: bool = True, dtype: torch.dtype = torch.bfloat16,
                      seed: int = 0, progress: Optional[Callable[[int], None]] = None) -> Measurement:
    """Build a `decoder` (alias `qwen3-moe`) or `gpt` reference layer and measure it on `batch` sequences of `seq`
    tokens (G = tiles). `fake`: under FakeTensorMode (full size, nothing allocated). `progress(1)`, if given,
    after each of the MEASURE_STEPS steps."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    ctx = FakeTensorMode() if fake else contextlib.nullcontext()
    with ctx:
        torch.manual_seed(seed)
        if kind in ("decoder", "qwen3-moe"):
            layer: torch.nn.Module = DecoderLayer(shape, attention=attention, dtype=dtype)
        elif kind == "gpt":
            layer = GPTLayer(shape, dtype=dtype)
        else:
            raise ValueError(f"unknown layer kind {kind!r}")
        x = torch.randn(batch, seq, shape.hidden, dtype=dtype, requires_grad=True)
        if progress:
            progress(1)
        return measure(layer, x, tiles, progress)
