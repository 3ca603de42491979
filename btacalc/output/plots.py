"""Matplotlib is an optional extra (`btacalc[plot]`); figures are written atomically."""

from __future__ import annotations

from typing import Any

from .atomic import atomic_path
from .errors import BtacalcError


def pyplot(path: str) -> Any:
    """matplotlib.pyplot with the Agg backend, after checking the output file name."""
    if not path.endswith((".png", ".svg")):
        raise BtacalcError(f"--plot {path!r}: use a .png or .svg file name")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BtacalcError("--plot needs matplotlib: pip install 'btacalc[plot]'") from None
    return plt


def save(fig: Any, path: str) -> None:
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
