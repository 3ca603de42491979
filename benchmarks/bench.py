"""Benchmarks (not tests): evaluation speed of the compiled formulas and cold start of `btacalc plan`.

Run: python benchmarks/bench.py [--points 100000]
Reports: vectorised evaluation of every per-phase formula plus the step-time model over a grid,
the same formulas evaluated point by point with sympy `subs`, a solved sweep, and CLI cold start.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np
import sympy as sp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--subs-points", type=int, default=100)
    args = ap.parse_args()

    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import load_preset
    from btacalc.config.execution import RunOptions
    from btacalc.model.problem import make_problem
    from btacalc.catalogue.symbols import SYMBOLS
    from btacalc.vocabulary import ARG_ORDER
    from btacalc.model.timing import step_time

    problem = make_problem(load_preset("qwen3-30b-a3b"), resolve_hardware("wse2"), RunOptions(memory_model="weight_streaming"))
    t0 = time.perf_counter()
    compiled = problem.compiled
    compile_s = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    n = args.points
    grid = {
        "E": rng.choice([16, 32, 64, 128, 256], n).astype(float),
        "k": rng.choice([1, 2, 4, 8], n).astype(float),
        "s": rng.choice([1024, 2048, 4096, 8192], n).astype(float),
        "G": rng.integers(1, 64, n).astype(float),
        "b": rng.integers(1, 16, n).astype(float),
    }
    values = problem.symbol_values(grid["G"], grid["b"], grid["s"])
    values.update(E=grid["E"], k=grid["k"])
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        pv = compiled.evaluate(values)
        st = step_time(problem, grid["G"], grid["b"], pv=pv)
        np.asarray(st.tokens_per_s).sum()
        runs.append(time.perf_counter() - t0)
    vec_s = min(runs)
    n_formulas = len(compiled.expressions)

    # point by point with sympy subs: the same expressions, a few points, extrapolated
    args_syms = [SYMBOLS[x] for x in ARG_ORDER]
    m = args.subs_points
    t0 = time.perf_counter()
    for i in range(m):
        point = {SYMBOLS[x]: (values[x][i] if isinstance(values[x], np.ndarray) else values[x]) for x in ARG_ORDER}
        for e in compiled.expressions:
            sp.sympify(e).subs(point)
    subs_per_point = (time.perf_counter() - t0) / m
    del args_syms

    # a solved sweep (each point: G = 1, best G and the dense reference solved)
    from btacalc.config.execution import ExecutionRequest
    from btacalc.planning.sweep import run_sweep

    grid_sweep = {"experts": [16, 32, 64, 128], "top-k": [1, 2, 4, 8], "seq": [2048, 4096]}
    t0 = time.perf_counter()
    res = run_sweep(problem.model, problem.hardware, ExecutionRequest(), grid_sweep)
    sweep_s = time.perf_counter() - t0

    # compare (auto GPU counts: a device-count search per GPU profile) and the crossover family scan
    from btacalc.planning.compare import compare
    from btacalc.planning.crossover import DEFAULT_HIDDEN, crossover
    from btacalc.config.hardware import resolve_hardware

    hws = [resolve_hardware(h) for h in ("wse2", "wse3", "a100-80gb", "b200")]
    t0 = time.perf_counter()
    compare(problem.model, hws)
    compare_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    cross = crossover(hws)
    cross_s = time.perf_counter() - t0

    # one full-size Qwen3-30B-A3B layer measured under FakeTensorMode (needs btacalc[measure])
    try:
        from btacalc.torchref.accuracy import compare_layer

        t0 = time.perf_counter()
        compare_layer(problem.model, 1, 4096, 1, "eager", fake=True)
        measure_s: float | None = time.perf_counter() - t0
    except ImportError:
        measure_s = None

    cold = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "btacalc", "plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--json"],
                       check=True, capture_output=True)
        cold.append(time.perf_counter() - t0)

    print(f"formulas per point: {n_formulas} (every phase x quantity), compile (lambdify) {compile_s * 1e3:.0f} ms")
    print(f"vectorised: {n:,} points in {vec_s * 1e3:.1f} ms = {n / vec_s:,.0f} points/s (formulas + step time)")
    print(f"sympy subs: {subs_per_point * 1e3:.1f} ms per point -> {n:,} points ~ {subs_per_point * n:,.0f} s; "
          f"vectorised is {subs_per_point * n / vec_s:,.0f}x faster")
    print(f"solved sweep: {len(res.points)} points in {sweep_s:.2f} s = {len(res.points) / sweep_s:.1f} points/s "
          f"(each point solves best G, G = 1 and the dense reference)")
    print(f"compare, 4 devices with GPU-count search: {compare_s:.2f} s; crossover, {len(DEFAULT_HIDDEN)} sizes x 4 "
          f"devices ({len(cross.points)} plans): {cross_s:.2f} s")
    print("one full-size layer measured under FakeTensorMode (s = 4096): "
          + (f"{measure_s:.2f} s" if measure_s is not None else "skipped (no torch)"))
    print(f"cold start `btacalc plan --json`: median {statistics.median(cold):.2f} s over {len(cold)} runs")


if __name__ == "__main__":
    main()
