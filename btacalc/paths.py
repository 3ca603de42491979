"""Where the shipped data folders live.

In an installed wheel the catalogue and the profiles are inside the package (``btacalc/_data/...``,
see pyproject.toml); in a source checkout they are the top-level ``formulas/`` and
``hardware_profiles/`` folders. Presets, published points and measured runs live in ``btacalc/data``.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the folder of shipped data `name` ('formulas' or 'hardware_profiles')."""
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"btacalc data folder {name!r} not found (looked in {_PKG / '_data'} and {_PKG.parent})")


def presets_dir() -> Path:
    return _PKG / "data" / "presets"


def package_data(name: str) -> Path:
    """A data file that ships inside the package (btacalc/data/NAME)."""
    return _PKG / "data" / name
