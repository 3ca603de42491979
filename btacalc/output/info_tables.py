"""Rich tables for `hw list|show` and `models list|show`."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.markup import escape

from ..config.hardware import HardwareProfile, Range
from ..config.model import ModelSpec
from .fit import Fit, fit
from .tables import gb, si


def quantity(value: float, rng: Range | None) -> str:
    """A hardware number in its unit, decimal SI prefixes (44 GB, 2.039 TB/s, 15.8 PFLOP/s, 23 kW)."""
    unit = rng.unit if rng else ""
    if unit == "count":
        return f"{value:,.0f}"
    if unit == "s":
        return f"{value * 1e6:,.6g} us" if 0 < value < 1e-3 else f"{value:.6g} s"
    if unit:
        return si(value, unit, digits=6)
    return f"{value:.6g}"


def hw_list_table(profiles: dict[str, HardwareProfile]) -> Fit:
    t = Table(title="Hardware profiles (GB = 1e9 bytes)", title_justify="left")
    for c in ("name", "device", "memory model", "capacity", "off-chip bandwidth", "peak 16-bit", "estimates"):
        t.add_column(c, overflow="fold" if c in ("device", "estimates") else "ellipsis")
    for n, p in profiles.items():
        est = ", ".join(k.split(".", 1)[1] for k, v in p.numbers().items() if v.kind != "published")
        t.add_row(n, p.display_name, p.defaults.memory_model, gb(p.memory_capacity_bytes),
                  si(p.memory.offchip_bandwidth_bytes_per_s.value, "B/s"), si(p.chip.peak_flops_per_s.value, "FLOP/s"),
                  est)
    return fit(t)


def hw_show_table(p: HardwareProfile) -> Fit:
    t = Table(title=f"{p.display_name} ({p.name}) — {p.defaults.memory_model} (GB = 1e9 bytes)", title_justify="left",
              show_lines=True)
    for c in ("field", "value", "kind", "note / source"):
        t.add_column(c, overflow="fold" if c == "note / source" else "ellipsis", justify="right" if c == "value" else "left")
    for k, v in p.numbers().items():
        fitted = f"\nfitted to: {', '.join(v.fitted_to)}" if v.fitted_to else ""
        t.add_row(k, quantity(v.value, p.range_of(k)), v.kind,
                  escape(v.note + "\n" if v.note else "") + f"[dim]{escape(v.source)}[/dim]" + escape(fitted))
    d = p.defaults
    t.caption = f"defaults: attention {d.attention}, recompute {d.recompute}. {d.note}"
    return fit(t)


def models_list_table(specs: list[ModelSpec]) -> Fit:
    t = Table(title="Model presets", title_justify="left")
    for c in ("name", "h", "L", "a/a_kv", "d_h", "V", "f", "E/k", "source"):
        t.add_column(c, overflow="fold" if c == "source" else "ellipsis")
    for s in specs:
        t.add_row(s.name, str(s.hidden_size), str(s.num_layers), f"{s.num_heads}/{s.num_kv_heads}", str(s.head_dim),
                  str(s.vocab_size), str(s.ffn_size), f"{s.num_experts}/{s.top_k}" if s.is_moe else "dense",
                  escape(s.source))
    return fit(t)


def models_show_table(spec: ModelSpec, counts: dict[str, Any]) -> Fit:
    t = Table(title=escape(spec.name), title_justify="left")
    t.add_column("field")
    t.add_column("value", overflow="fold")
    for k, v in spec.model_dump(exclude={"published_params"}).items():
        t.add_row(k, escape(str(v)))
    pub = spec.published_params
    for k, v in counts.items():
        ref = getattr(pub, k.removeprefix("params_"), None) if pub else None
        note = f"  (published {ref / 1e9:g} B: {100 * (v - ref) / ref:+.2f}%)" if ref else ""
        t.add_row(k, f"{v:,}{note}")
    return fit(t)
