"""Deterministic bisect metrics for any checkout of btacalc (issue 25 item 6).

    python benchmarks/regression_metric.py calls [TREE]          # function calls in one warm solve and evaluation
    python benchmarks/regression_metric.py cpu [TREE] [REPEAT]    # min CPU ms (noisy; for context)
    python benchmarks/regression_metric.py rss [TREE] [POINTS]   # peak RSS of a sweep to CSV (MB)

TREE defaults to this checkout; it may be an old commit checked out elsewhere (`git worktree add
--detach /tmp/bis-X <commit>`). `calls` loads TREE's own benchmarks/bench.py and runs its
`config_seconds(1)`, counting with a profile hook every Python function call ('call') and every
built-in call ('c_call') made while the benchmark's `solve()` runs (Llama-2-7B, 8 x A100, ZeRO-3, full
recomputation, s = 4096: the "one configuration solved" row), and the same for its `evaluate()` (the
"one configuration, memory + step time" row). Counts are printed for each run: a solve's last is warm;
an evaluation's second is warm (the next ones follow a GEMM cache or every cache emptied). Time varies with the machine's load; these counts do not. `rss` runs TREE's CLI on
the sweep that TREE's bench.py lists for POINTS (default 10,000) in a child process and prints its peak
RSS (ru_maxrss of the child). Both run TREE in a fresh interpreter with PYTHONPATH=TREE.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CALLS_CHILD = r"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("bench_at_tree", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
counts, state = [], {"frame": None, "py": 0, "c": 0}
def hook(frame, event, arg):
    if state["frame"] is None:
        if event == "call" and frame.f_code.co_name == sys.argv[2] and frame.f_code.co_filename == sys.argv[1]:
            state.update(frame=frame, py=0, c=0)
        return
    if event == "call":
        state["py"] += 1
    elif event == "c_call":
        state["c"] += 1
    elif event == "return" and frame is state["frame"]:
        counts.append((state["py"], state["c"]))
        state["frame"] = None
sys.setprofile(hook)
bench.config_seconds(1)
sys.setprofile(None)
for py, c in counts:
    print(py, c)
"""


CPU_CHILD = r"""
import importlib.util, sys, time, types
spec = importlib.util.spec_from_file_location("bench_at_tree", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
# every tree's benchmark, timed in CPU seconds and summarised by the minimum (old trees: wall, median)
bench.time = types.SimpleNamespace(perf_counter=time.process_time, process_time=time.process_time)
bench.statistics = types.SimpleNamespace(median=min)
out = bench.config_seconds(int(sys.argv[2]))
print(out["evaluate"] * 1e3, out["solve"] * 1e3)
"""


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    return env


def solve_calls(tree: Path, closure: str = "solve") -> list[tuple[int, int]]:
    """(Python calls, built-in calls) of each solve() (or `closure`()) the tree's own benchmark runs."""
    bench = str(tree / "benchmarks" / "bench.py")
    out = subprocess.run([sys.executable, "-c", CALLS_CHILD, bench, closure], env=_env(tree), cwd=tree,
                         capture_output=True, text=True, check=True).stdout
    return [(int(a), int(b)) for a, b in (line.split() for line in out.splitlines() if line.strip())]


def cpu_min_ms(tree: Path, repeat: int) -> tuple[float, float]:
    """Minimum CPU ms of one evaluation and one solve over `repeat` calls of the tree's benchmark (noisy)."""
    bench = str(tree / "benchmarks" / "bench.py")
    out = subprocess.run([sys.executable, "-c", CPU_CHILD, bench, str(repeat)], env=_env(tree), cwd=tree,
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def sweep_peak_mb(tree: Path, points: int) -> float:
    """Peak RSS (MB) of `sweep --hw wse3 <TREE's SWEEPS[points]> --csv F` run by TREE's CLI."""
    text = (tree / "benchmarks" / "bench.py").read_text()
    scope: dict[str, object] = {}
    start = text.index("SWEEPS = {")
    exec(text[start:text.index("}", start) + 1], scope)  # the dict literal only
    vary = scope["SWEEPS"][points]  # type: ignore[index]
    with tempfile.TemporaryDirectory() as folder:
        cmd = [sys.executable, "-m", "btacalc", "sweep", "--hw", "wse3", *vary, "--csv", f"{folder}/s.csv"]
        quiet = subprocess.run([*cmd, "-q"], env=_env(tree), cwd=tree, capture_output=True)
        if quiet.returncode == 2:  # a tree from before -q
            subprocess.run(cmd, env=_env(tree), cwd=tree, capture_output=True, check=True)
        elif quiet.returncode != 0:
            raise SystemExit(quiet.stderr.decode()[-2000:])
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main(argv: list[str]) -> None:
    what = argv[0] if argv else "calls"
    tree = Path(argv[1]).resolve() if len(argv) > 1 else HERE
    if what == "calls":
        for closure in ("solve", "evaluate"):
            for py, c in solve_calls(tree, closure):
                print(f"{closure}: {py} Python calls, {c} built-in calls, {py + c} total")
    elif what == "cpu":
        evaluate, solve = cpu_min_ms(tree, int(argv[2]) if len(argv) > 2 else 200)
        print(f"min CPU: evaluate {evaluate:.3f} ms, solve {solve:.3f} ms")
    elif what == "rss":
        points = int(argv[2]) if len(argv) > 2 else 10_000
        print(f"sweep {points} points: peak RSS {sweep_peak_mb(tree, points):.0f} MB")
    else:
        raise SystemExit("usage: regression_metric.py calls|cpu|rss [TREE] [POINTS]")


if __name__ == "__main__":
    main(sys.argv[1:])
