"""Draw docs/wafer-size-trend.png: the wafer runs' error (predicted / measured - 1) against the model's
parameter count, the shipped factors and the leave-one-out ones side by side, so a trend of error with
model size shows (issue 24). Everything comes from the library (`validate_measured`, `leave_one_out`,
`param_counts`); the plot needs matplotlib.

    python tools/wafer_trend.py          # about a minute (the leave-one-out refits)
"""

from __future__ import annotations

from pathlib import Path

from btacalc.config.execution import RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.params import param_counts
from btacalc.model.problem import make_problem
from btacalc.planning.measured import validate_measured
from btacalc.planning.wafer_loo import leave_one_out

PLOT = Path(__file__).resolve().parents[1] / "docs" / "wafer-size-trend.png"


def _params(model: str, hw: str) -> float:
    return float(param_counts(make_problem(resolve_model(model), resolve_hardware(hw), RunOptions())).total)


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in validate_measured().runs if r.family == "wse" and r.error is not None]
    loo = {p.id: p.error for f in leave_one_out("wse").folds for p in f.predictions if p.error is not None}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in runs:
        x = _params(r.model, r.hw)
        marker = "o" if r.hw == "wse2" else "s"
        face = "none" if r.known_gap else ("C0" if r.role == "fit" else "C1")
        ax.scatter([x], [100 * r.error], marker=marker, edgecolors="C0" if r.role == "fit" else "C1", facecolors=face,
                   s=60, zorder=3)
        if r.id in loo:
            ax.scatter([x], [100 * loo[r.id]], marker="x", color="C2", s=50, zorder=3)
        ax.annotate(f"{r.model} ({r.hw})", (x, 100 * r.error), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.axhspan(-25, 25, color="0.9", zorder=0)
    ax.axhline(0, color="0.4", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("parameters")
    ax.set_ylabel("error of predicted tokens/s (%)")
    ax.set_title("Wafer runs: error vs model size (circles CS-2, squares CS-3; blue fit, orange check, "
                 "hollow known gap; green x leave-one-out)", fontsize=8)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=130)
    print(f"wrote {PLOT}")


if __name__ == "__main__":
    main()
