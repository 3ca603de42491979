"""The command line (typer). Entry point: `btacalc.cli.main`."""

from .app import main

__all__ = ["main"]
