"""Rich tables for `hw list|show` and `models list|show`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec
from .tables import gb, si


def hw_list_table(profiles: dict[str, HardwareProfile]) -> Table:
    t = Table(title="Hardware profiles (GB = 1e9 bytes)", title_justify="left")
    for c in ("name", "device", "memory model", "capacity", "off-chip bandwidth", "peak 16-bit", "estimates"):
        t.add_column(c)
    for n, p in profiles.items():
        est = ", ".join(k.split(".", 1)[1] for k, v in p.numbers().items() if v.kind != "published")
        t.add_row(n, p.display_name, p.defaults.memory_model, gb(p.memory_capacity_bytes),
                  si(p.memory.offchip_bandwidth_bytes_per_s.value, "B/s"), si(p.chip.peak_flops_per_s.value, "FLOP/s"),
                  est)
    return t


def hw_show_table(p: HardwareProfile) -> Table:
    t = Table(title=f"{p.display_name} ({p.name}) — {p.defaults.memory_model}", title_justify="left", show_lines=True)
    for c in ("field", "value", "kind", "note / source"):
        t.add_column(c, overflow="fold")
    for k, v in p.numbers().items():
        fitted = f"\nfitted to: {', '.join(v.fitted_to)}" if v.fitted_to else ""
        t.add_row(k, f"{v.value:,.6g}", v.kind, (v.note + "\n" if v.note else "") + f"[dim]{v.source}[/dim]" + fitted)
    d = p.defaults
    t.caption = f"defaults: attention {d.attention}, recompute {d.recompute}. {d.note}"
    return t


def models_list_table(specs: list[ModelSpec]) -> Table:
    t = Table(title="Model presets", title_justify="left")
    for c in ("name", "h", "L", "a/a_kv", "d_h", "V", "f", "E/k", "source"):
        t.add_column(c)
    for s in specs:
        t.add_row(s.name, str(s.hidden_size), str(s.num_layers), f"{s.num_heads}/{s.num_kv_heads}", str(s.head_dim),
                  str(s.vocab_size), str(s.ffn_size), f"{s.num_experts}/{s.top_k}" if s.is_moe else "dense", s.source)
    return t


def models_show_table(spec: ModelSpec, counts: dict[str, Any]) -> Table:
    t = Table(title=f"{spec.name}", title_justify="left")
    t.add_column("field")
    t.add_column("value")
    for k, v in spec.model_dump(exclude={"published_params"}).items():
        t.add_row(k, str(v))
    pub = spec.published_params
    for k, v in counts.items():
        ref = getattr(pub, k.removeprefix("params_"), None) if pub else None
        note = f"  (published {ref / 1e9:g} B: {100 * (v - ref) / ref:+.2f}%)" if ref else ""
        t.add_row(k, f"{v:,}{note}")
    return t
