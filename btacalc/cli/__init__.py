"""The command line (typer). Entry point: `btacalc.cli.main`."""

from ..starting import while_starting  # first: only os, signal and sys

with while_starting():  # Ctrl-C during the imports: one line and 128 + the signal, no traceback (starting.py)
    from .blas import load_numpy_with_one_blas_thread

    load_numpy_with_one_blas_thread()  # before anything imports numpy: see btacalc/cli/blas.py

    from .app import main

__all__ = ["main"]
