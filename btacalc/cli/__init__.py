"""The command line (typer). Entry point: `btacalc.cli.main`."""

from .blas import load_numpy_with_one_blas_thread

load_numpy_with_one_blas_thread()  # before anything imports numpy: see btacalc/cli/blas.py

from .app import main  # noqa: E402

__all__ = ["main"]
