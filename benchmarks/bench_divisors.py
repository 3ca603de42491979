"""Benchmark (not a test): the batch-shape search for a fixed global batch far beyond trial division.

Run: python benchmarks/bench_divisors.py
Target (issue 15): `btacalc plan --global-batch 2**70` answers within a second, cold start included.
"""

from __future__ import annotations

import subprocess
import sys
import time


def main() -> None:
    from btacalc.divisors import divisors

    for label, n in (("2^70", 2**70), ("1e16", 10**16), ("70-bit semiprime", 34359738421 * 34359739423),
                     ("2^80 - 1", 2**80 - 1)):
        t0 = time.perf_counter()
        d = divisors(n)
        print(f"divisors({label}): {len(d):,} in {1e3 * (time.perf_counter() - t0):.1f} ms")
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--global-batch", str(2**70), "--json"],
                         capture_output=True)
    print(f"btacalc plan --global-batch 2**70 (cold, exit {res.returncode}): {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
