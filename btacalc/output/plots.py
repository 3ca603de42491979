"""Plots of library results. Matplotlib is an optional extra (`btacalc[plot]`). Each function returns
the figure's bytes (PNG or SVG, from the file name); the command line writes them with the other
outputs (`btacalc.output.files`)."""

from __future__ import annotations

import io
import os
from typing import Any, Optional, Union

from ..errors import BtacalcError
from ..planning.compare import CompareResult
from ..planning.crossover import CrossoverResult
from ..planning.crossval import CrossValidation
from ..planning.measured import MeasuredReport
from ..planning.sweep import SweepPoint, SweepResult


def check_plot_path(path: str) -> None:
    """The plot's file name says its format: .png or .svg."""
    if not str(path).lower().endswith((".png", ".svg")):
        raise BtacalcError(f"--plot {path!r}: use a .png or .svg file name")


def pyplot(path: str) -> Any:
    """matplotlib.pyplot with the Agg backend, after checking the output file name."""
    check_plot_path(path)
    # matplotlib's own log lines (e.g. "created a temporary cache directory" when HOME is not writable)
    # are not btacalc's: the plot is drawn either way, and stderr keeps one line per problem
    import logging

    logging.getLogger("matplotlib").setLevel(logging.CRITICAL)
    # btacalc draws into a file with Agg whatever the environment asks: matplotlib validates MPLBACKEND at import
    # and a bad one (MPLBACKEND=nope) stopped --plot as an internal error (hostile26)
    os.environ.pop("MPLBACKEND", None)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BtacalcError("--plot needs matplotlib: pip install 'btacalc[plot]'") from None
    return plt


def save(fig: Any, path: str) -> bytes:
    """The figure's bytes in the format `path` names."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=str(path).lower().rsplit(".", 1)[-1], dpi=120)
    finally:
        plt.close(fig)
    return buf.getvalue()


def compare_plot(result: CompareResult, path: str) -> bytes:
    """Two panels: tokens/s (all devices of the row) and tokens/s per kW, one bar per row."""
    plt = pyplot(path)
    rows = [r for r in result.rows if r.fits]
    if not rows:
        raise BtacalcError("--plot: no device fits, nothing to draw")
    labels = [f"{r.hardware} x{r.devices}" if r.devices > 1 else r.hardware for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 0.6 * len(rows) + 2.0), sharey=True)
    y = range(len(rows))
    ax1.barh(y, [r.tokens_per_s for r in rows], color="tab:blue")
    ax2.barh(y, [r.tokens_per_s_per_kw for r in rows], color="tab:green")
    for i, r in enumerate(rows):
        shape = r.layout.replace(" ETP1", "") if r.layout else f"G={r.tiles} b={r.tile_batch}"
        ax1.annotate(f" {shape}, {r.dominant_phase}", (r.tokens_per_s, i), va="center", fontsize=7)
    ax1.set_yticks(list(y), labels)
    ax1.invert_yaxis()
    ax1.set_xlim(0, 1.7 * max(r.tokens_per_s or 0.0 for r in rows))
    thousands = plt.FuncFormatter(lambda v, _: f"{v / 1e3:g}k")
    for ax in (ax1, ax2):
        ax.xaxis.set_major_formatter(thousands)
    ax1.set_xlabel("tokens/s (all devices of the row)")
    ax2.set_xlabel("tokens/s per kW (system power)")
    fig.suptitle(f"{result.model}, s = {result.seq_len}: G and b (wafer) or the searched layout (GPU) per row")
    fig.tight_layout()
    return save(fig, path)


def crossover_plot(result: CrossoverResult, path: str) -> bytes:
    """tokens/s per kW against total parameters, one line per device; marker shape = regime."""
    plt = pyplot(path)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    markers = {"resident": "s", "weight_streaming": "o"}
    for hw in dict.fromkeys(p.hardware for p in result.points):
        pts = [p for p in result.points if p.hardware == hw and p.row.tokens_per_s_per_kw]
        if not pts:
            continue
        line, = ax.plot([p.params_total for p in pts], [p.row.tokens_per_s_per_kw for p in pts], "-", label=hw)
        prev = None
        for p in pts:
            ax.plot(p.params_total, p.row.tokens_per_s_per_kw, markers.get(p.regime, "^"), color=line.get_color(), ms=4)
            if p.regime not in markers and p.row.devices != prev:  # label where the GPU count changes
                ax.annotate(str(p.row.devices), (p.params_total, p.row.tokens_per_s_per_kw), fontsize=6,
                            xytext=(2, 3), textcoords="offset points", color=line.get_color())
            prev = p.row.devices
    for b in result.boundaries:
        if b.from_regime == "resident":  # the wafer's resident -> streaming boundary
            ax.axvline((b.below_params * b.above_params) ** 0.5, color="grey", lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("total parameters (qwen3-moe family)")
    ax.set_ylabel("training tokens/s per kW")
    ax.set_title(f"{result.family}, s = {result.seq_len}: square resident, circle streamed, triangle GPUs (count)\n"
                 "dotted: wafer resident -> streaming boundary", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def sweep_plot(result: SweepResult, path: str) -> bytes:
    """Relative throughput vs the first varied parameter, at G = 1 and at the solver's G."""
    points = [(p.params, p.throughput.relative_to_dense, p.throughput.relative_to_dense_g1)
              for p in result.points if p.throughput is not None]
    return sweep_plot_points(points, result.model, result.hardware, result.fixed_active, path)


PlotPoint = tuple[dict[str, Union[int, str]], Optional[float], Optional[float]]  # params, vs dense, G = 1 vs dense


def sweep_plot_points(points: list[PlotPoint], model: str, hardware: str, fixed_active: bool, path: str) -> bytes:
    """`sweep_plot` from the three numbers it draws per fitting point (what a streamed sweep keeps)."""
    plt = pyplot(path)
    if not points:
        raise BtacalcError("--plot: no point of the sweep fits, nothing to draw")
    names = list(points[0][0])
    numeric = [n for n in names if isinstance(points[0][0][n], int)]  # a named choice (precision) labels lines
    x_name = numeric[0] if numeric else names[0]
    others = [n for n in names if n != x_name]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    groups: dict[tuple, list[PlotPoint]] = {}
    for p in points:
        groups.setdefault(tuple(p[0][n] for n in others), []).append(p)
    for key, ps in groups.items():
        label = ", ".join(f"{n}={v}" for n, v in zip(others, key))
        xs = [p[0][x_name] for p in ps]
        ax.plot(xs, [p[1] for p in ps], "o-", label=f"BTA (solver G) {label}".strip())
        ax.plot(xs, [p[2] for p in ps], "s--", label=f"G = 1 {label}".strip())
    ax.axhline(1.0, color="grey", lw=0.8)
    if numeric:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(x_name + (" (k*f fixed)" if fixed_active else ""))
    ax.set_ylabel("throughput relative to dense (same active params)")
    ax.set_ylim(0, 1.1)
    ax.set_title(f"{model} on {hardware}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def measured_plot(report: MeasuredReport, path: str) -> bytes:
    """Predicted against measured tokens/s per device, log-log, one marker per device family, with the
    ±10% and ±25% bands; the number of runs btacalc cannot express is in the title."""
    plt = pyplot(path)
    pairs = [(r, r.predicted.tokens_per_s_per_device, r.measured.tokens_per_s_per_device) for r in report.runs]
    pts = [(r, p, m) for r, p, m in pairs if p is not None and m is not None]
    fig, ax = plt.subplots(figsize=(6.4, 5.4))
    markers = {"gpu": "o", "wse": "s"}
    _parity_frame(ax, [v for _, p, m in pts for v in (p, m)], 0.25)
    for family in sorted({r.family for r, _, _ in pts}):
        for role, fill in (("fit", "none"), ("check", None)):
            mine = [(p, m) for r, p, m in pts if r.family == family and r.role == role]
            if not mine:
                continue
            ax.scatter([m for _, m in mine], [p for p, _ in mine], marker=markers.get(family, "^"),
                       facecolors=fill, edgecolors="tab:blue" if family == "gpu" else "tab:red",
                       label=f"{family} ({role})")
    ax.set_ylabel("btacalc predicted tokens/s per device")
    missing = [r.id for r in report.runs if not r.expressible]
    ax.set_title("btacalc vs measured training runs" + (f"\n({len(missing)} runs not expressible)" if missing else ""),
                 fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def _parity_frame(ax: Any, values: list[float], outer_band: float) -> None:
    """A predicted-against-measured tokens/s per device frame, log-log from half the smallest to twice the largest
    of `values`: the y = x line and the ±10% and ±`outer_band` bands (labelled for the legend)."""
    lo, hi = (min(values) / 2, max(values) * 2) if values else (1e2, 1e5)
    xs = [lo, hi]
    ax.plot(xs, xs, color="black", lw=0.8)
    for band, style in ((0.10, ":"), (outer_band, "--")):
        ax.plot(xs, [x * (1 + band) for x in xs], style, color="grey", lw=0.7, label=f"±{band:.0%}")
        ax.plot(xs, [x * (1 - band) for x in xs], style, color="grey", lw=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured tokens/s per device")


def crossval_plot(cv: CrossValidation, path: str) -> bytes:
    """Leave-one-model-family-out: predicted against measured tokens/s per device, log-log, one colour per
    fold (the held-out family), with the ±10% and ±30% bands; the overall mean and max |error| in the title."""
    plt = pyplot(path)
    fig, ax = plt.subplots(figsize=(6.6, 5.6))
    pts = [(f.held_out, r) for f in cv.folds for r in f.runs
           if r.predicted_tokens_per_s_per_device and r.measured_tokens_per_s_per_device]
    _parity_frame(ax, [float(v or 0.0) for _, r in pts for v in (r.predicted_tokens_per_s_per_device,
                                                                 r.measured_tokens_per_s_per_device)], 0.30)
    for i, family in enumerate(sorted({f for f, _ in pts})):
        mine = [r for f, r in pts if f == family]
        ax.scatter([r.measured_tokens_per_s_per_device for r in mine], [r.predicted_tokens_per_s_per_device for r in mine],
                   marker="os^Dv<>p*h"[i % 10], label=f"{family} held out ({len(mine)})")
    ax.set_ylabel("predicted, factors fitted without the run's family")
    o = cv.overall
    title = "btacalc leave-one-model-family-out"
    if o.mean_abs_error is not None and o.max_abs_error is not None:
        title += f"\n{o.n} runs: mean |error| {o.mean_abs_error:.1%}, max {o.max_abs_error:.1%}"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, path)
