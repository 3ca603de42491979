"""What `--profile` reports: counters (model evaluations, shapes, searches) and the time per stage.

Always on (an increment per event costs nothing next to the event); only the command line prints
them. `STARTED` is when btacalc was first imported, so the time before a command starts is its
start-up (imports), give or take the interpreter's own start.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import Iterator

STARTED = time.perf_counter()

counts: Counter[str] = Counter()
seconds: dict[str, float] = {}


def count(name: str, n: int = 1) -> None:
    counts[name] += n


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Add the time spent in the block to stage `name`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start


def reset() -> None:
    counts.clear()
    seconds.clear()
