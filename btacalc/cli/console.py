"""The two output streams of the command line. Only the CLI prints."""

from __future__ import annotations

import sys

from rich.console import Console

# Wide enough for the phase tables when piped (rich would otherwise assume 80 columns).
out = Console(width=None if sys.stdout.isatty() else 132)
err = Console(stderr=True)
