"""The two output streams of the command line. Only the CLI prints.

Each is a rich Console made on first use: importing rich costs about 20 ms that a command writing
only JSON never needs.
"""

from __future__ import annotations

import sys
from typing import Any


class _Console:
    """A rich Console created when first used, with the given options."""

    def __init__(self, stderr: bool):
        self._stderr = stderr
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)

    def get(self) -> Any:
        """The rich Console itself (for rich objects that take one)."""
        if self._console is None:
            from rich.console import Console

            if self._stderr:
                self._console = Console(stderr=True)
            else:  # wide enough for the phase tables when piped (rich would otherwise assume 80 columns)
                self._console = Console(width=None if sys.stdout.isatty() else 132)
        return self._console


out = _Console(stderr=False)
err = _Console(stderr=True)
