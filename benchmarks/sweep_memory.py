"""Peak memory of a streamed sweep whatever it varies (issue 26): a sweep of POINTS distinct expert
counts (every point a different model, the worst case for the sweep's memos) and one of POINTS
sequence lengths, each written to a CSV file, each in its own process; prints the peak RSS.

    PYTHONPATH=$PWD python benchmarks/sweep_memory.py [POINTS]    # default 1,000,000

The bound to meet: under 1 GB for 10^6 points.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

CHILD = """
import resource, sys, time
from btacalc.cli import main
t = time.perf_counter()
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{code} {peak:.0f} {time.perf_counter() - t:.1f}", file=sys.stderr)
"""


def run(vary: str, points: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "out.csv")
        args = [sys.executable, "-c", CHILD, "sweep", "--hw", "wse2", "--vary", vary, "--csv", out, "-q",
                "--max-points", str(points)]
        start = time.perf_counter()
        proc = subprocess.run(args, capture_output=True, text=True)
        code, peak, _ = proc.stderr.strip().splitlines()[-1].split()
        rows = sum(1 for _ in open(out)) - 1 if os.path.exists(out) else 0
        print(f"{vary:40s} exit {code}  rows {rows:>9,}  peak RSS {float(peak):7.0f} MB  "
              f"{time.perf_counter() - start:6.1f} s")


def main() -> None:
    points = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    run(f"experts=2:{points + 1}:1", points)  # every point a distinct model
    run(f"seq=1024:{1024 + points - 1}:1", points)  # every point a distinct length


if __name__ == "__main__":
    main()
