"""Rich tables for `hw list|show` and `models list|show`."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from rich.markup import escape

from ..config.hardware import HardwareProfile, Range
from ..config.model import ModelSpec, PublishedParams
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
    """One line per profile. freshuser20: the last column listed the name of every number not of kind `published`
    (derived and calibrated ones too) under "estimates", 20 to 30 wrapped lines a profile (365 lines for 11
    profiles, names cut mid-word); it now counts the estimates, and `hw show` names them with their sources."""
    t = Table(title="Hardware profiles (GB = 1e9 bytes)", title_justify="left")
    for c in ("name", "device", "memory model", "capacity", "off-chip bandwidth", "peak 16-bit", "estimated"):
        t.add_column(c, overflow="fold" if c == "device" else "ellipsis",
                     justify="right" if c == "estimated" else "left")
    for n, p in profiles.items():
        kinds = [v.kind for v in p.numbers().values()]
        t.add_row(escape(n), escape(p.display_name), p.defaults.memory_model, gb(p.memory_capacity_bytes),
                  si(p.memory.offchip_bandwidth_bytes_per_s.value, "B/s"), si(p.chip.peak_flops_per_s.value, "FLOP/s"),
                  f"{kinds.count('estimate')} of {len(kinds)}")
    t.caption = ("estimated: how many of the profile's numbers are estimates (neither published, nor derived from "
                 "published or measured figures, nor calibrated on measured runs); btacalc hw show NAME gives each "
                 "number with its kind and source")
    return fit(t)


def hw_show_table(p: HardwareProfile, calibration: str = "") -> Fit:
    """Every number of `p` with its unit, kind and source; `calibration`: which calibration family applies."""
    t = Table(title=f"{escape(p.display_name)} ({escape(p.name)}) — {p.defaults.memory_model} (GB = 1e9 bytes)", title_justify="left",
              show_lines=True)
    for c in ("field", "value", "kind", "note / source"):
        t.add_column(c, overflow="fold" if c == "note / source" else "ellipsis", justify="right" if c == "value" else "left")
    for k, v in p.numbers().items():
        fitted = f"\nfitted to: {', '.join(v.fitted_to)}" if v.fitted_to else ""
        t.add_row(k, quantity(v.value, p.range_of(k)), v.kind,
                  escape(v.note + "\n" if v.note else "") + f"[dim]{escape(v.source)}[/dim]" + escape(fitted))
    for side in ("scaleup", "scaleout"):  # where each link class's measured latency was taken (nccl2)
        ref = getattr(p.collectives, f"{side}_reference", None)
        if ref is not None:
            t.add_row(f"collectives.{side}_reference", f"{ref.collective} {ref.message_bytes:,.0f} B, {ref.ranks} GPUs "
                      f"/ {ref.nodes} node{'s' if ref.nodes > 1 else ''}", ref.kind,
                      escape(ref.note + "\n") + f"[dim]{escape(ref.source)}[/dim]")
    d = p.defaults
    t.caption = f"defaults: attention {d.attention}, recompute {d.recompute}. {d.note}" + (
        f"\nCalibration: {escape(calibration)}." if calibration else "")
    return fit(t)


def _published_cell(summary: dict[str, Any], quantity: str) -> str:
    for c in summary["published"]:
        if c["quantity"] == quantity:
            mark = "" if c["convention"] == "within_0.5%" else f" ({c['convention']})"
            return f"{c['published'] / 1e9:,.4g} B{mark}"
    return "-"


def models_list_table(specs: list[ModelSpec], summaries: list[dict[str, Any]]) -> Fit:
    t = Table(title="Model presets (parameters in B = 1e9; published figures with the publisher's rounding)",
              title_justify="left")
    for c in ("name", "total", "published", "active", "published ", "layers", "h", "a/a_kv", "E/k", "attention"):
        t.add_column(c, justify="right" if c not in ("name", "layers", "attention") else "left", no_wrap=c == "name")
    for s, m in zip(specs, summaries):
        kinds = ", ".join(f"{k['count']} {k['name']}" for k in m["layer_kinds"])
        attention = "MLA" if s.mla else "GQA" if s.num_kv_heads < s.num_heads else "MHA"
        if s.sliding_window:
            attention += f", window {s.sliding_window}"
        pub_total = _published_cell(m, "total") if s.published_params and s.published_params.total else \
            _published_cell(m, "non_embedding") + " non-emb."
        head_only = s.published_params is not None and s.published_params.active_counts == "head_only"
        active = m["params_active"] - (m["params_gathered"] if head_only else 0)
        t.add_row(escape(s.name), f"{m['params_total'] / 1e9:,.3f}", pub_total, f"{active / 1e9:,.3f}" + (" †" if head_only else ""),
                  _published_cell(m, "active"), kinds, str(s.hidden_size), f"{s.num_heads}/{s.num_kv_heads}",
                  f"{s.num_experts}/{s.top_k}" + (" +shared" if s.shared_expert_size else "") if s.is_moe else "dense",
                  attention)
    t.caption = ("active counts the embedding and the head; † as the publisher counts it, without the embedding lookup "
                 "(GPT-OSS, DeepSeek, Kimi); sources and conventions: btacalc models show NAME")
    return fit(t)


def models_show_table(spec: ModelSpec, summary: dict[str, Any]) -> Group:
    t = Table(title=escape(spec.name), title_justify="left")
    t.add_column("field")
    t.add_column("value", overflow="fold")
    for k, v in spec.model_dump(exclude={"published_params"}).items():
        t.add_row(k, escape(str(v)))
    t.add_row("layer kinds", ", ".join(f"{k['count']} x {k['name']}" for k in summary["layer_kinds"]))
    for k in ("params_total", "params_active", "params_non_embedding", "params_per_layer"):
        t.add_row(k, f"{summary[k]:,}")
    parts: list[Any] = [fit(t)]
    if summary["published"]:
        p = Table(title="Published parameter counts", title_justify="left")
        for c in ("count", "btacalc", "published", "convention", "difference", "matches"):
            p.add_column(c, justify="left" if c in ("count", "convention") else "right")
        for c in summary["published"]:
            p.add_row(c["quantity"], f"{c['computed']:,}", f"{c['published']:,.0f}",
                      c["convention"] + ("" if c["convention"] == "within_0.5%" else f" to {c['precision']:g}"),
                      f"{100 * c['relative']:+.2f}%", "yes" if c["matches"] else "NO")
        pub = spec.published_params or PublishedParams()
        source = (f"source: {pub.source}" + (f"; active counts {pub.active_counts.replace('_', ' ')}"
                                                  if pub.active is not None else "") + (f". {pub.note}" if pub.note else ""))
        parts += [fit(p), Text(source)]
    return Group(*parts)
