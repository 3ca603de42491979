"""Benchmarks (not tests, not in CI's pass/fail): where users wait, as ratios measured in one run.

Run from the repository root:

    PYTHONPATH=. python benchmarks/bench.py [--peer-python /path/to/venv/bin/python] [--quick]

--peer-python: a Python with llm-analysis installed (in a venv of its own, never btacalc's), for the
side-by-side rows. The commands run as a user runs them: bytecode caching on (PYTHONDONTWRITEBYTECODE
is dropped for the subprocesses) and the generated-formula cache warm (one run first). Prints a
Markdown table; the README's "Benchmarks" section is a copy of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPATH"] = str(ROOT)
BTACALC = [sys.executable, "-m", "btacalc"]
SEARCH = ["plan", "--hw", "h100", "--devices", "256", "--search", "--json"]
SWEEP_16K = ["sweep", "--hw", "wse3", "--vary", "seq=128:65536:128", "--vary", "experts=8:256:8"]
# Solved sweeps of 1e3 .. 1e6 points (CSV output): sequence lengths, then expert counts and top-k.
SWEEPS = {
    1_000: ["--vary", "seq=128:128000:128"],
    10_000: ["--vary", "seq=128:128000:128", "--vary", "experts=8:80:8"],
    100_000: ["--vary", "seq=128:64000:128", "--vary", "experts=4:800:4"],
    1_000_000: ["--vary", "seq=128:64000:128", "--vary", "experts=4:1000:4", "--vary", "top-k=1:8:1"],
}
# One dense Llama-style training step, memory and time: Llama-2-7B shape, 8 x A100 80 GB, ZeRO-3,
# full recomputation, FlashAttention, s = 4096, one sequence per GPU (llm-analysis' question too).
LLAMA2_7B = {"name": "llama-2-7b", "source": "https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json",
             "hidden_size": 4096, "num_layers": 32, "num_heads": 32, "num_kv_heads": 32, "head_dim": 128,
             "vocab_size": 32000, "ffn_size": 11008, "max_position_embeddings": 4096}
PEER_CONFIG = """
import time, statistics, logging
from llm_analysis.analysis import (ActivationRecomputation, DSZeRO, LLMAnalysis, ParallelismConfig,
                                   get_dtype_config_by_name, get_gpu_config_by_name, get_model_config_by_name)
logging.disable(logging.CRITICAL)
m = get_model_config_by_name("NousResearch_Llama-2-7b-hf")
g = get_gpu_config_by_name("a100-sxm-80gb")
d = get_dtype_config_by_name("w16a16e16")
def one():
    a = LLMAnalysis(m, g, d, ParallelismConfig(dp_size=8), flops_efficiency=0.5, hbm_memory_efficiency=1.0)
    return a.training(batch_size_per_gpu=1, seq_len=4096, gradient_accumulation_steps=1,
                      activation_recomputation=ActivationRecomputation.FULL, ds_zero=DSZeRO.STAGE_3,
                      flash_attn=True, mlp_gated_linear_units=True)
one()
ts = []
for _ in range(N):
    t = time.process_time(); one(); ts.append(time.process_time() - t)
print(statistics.median(ts), min(ts))
"""
PEER_CLI = ["-m", "llm_analysis.analysis", "train", "--model_name", "NousResearch_Llama-2-7b-hf", "--gpu_name",
            "a100-sxm-80gb", "--total_num_gpus", "8", "--batch_size_per_gpu", "1", "--seq_len", "4096",
            "--activation_recomputation", "2", "--ds_zero", "3", "--flops_efficiency", "0.5", "--log_level", "ERROR"]


CPU: dict[str, float] = {}  # command -> median CPU seconds (user + system) of its process, from `wall`


def wall(cmd: list[str], repeat: int) -> float:
    """Median wall time of `cmd` over `repeat` runs (after one untimed run); the median CPU time of the
    process goes to CPU[" ".join(cmd)] (on a shared machine wall time counts other jobs' turns)."""
    subprocess.run(cmd, env=ENV, capture_output=True, check=False, cwd=ROOT)
    times, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, env=ENV, capture_output=True, check=False, cwd=ROOT)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    CPU[" ".join(cmd)] = statistics.median(cpus)
    return statistics.median(times)


def _ms(seconds: float, cmd: list[str]) -> str:
    return f"{seconds * 1e3:.0f} ms (CPU {CPU[' '.join(cmd)] * 1e3:.0f} ms)"


def peak_rss_mb(cmd: list[str]) -> tuple[float, float]:
    """Wall time and peak RSS (MB) of one run of `cmd`, via /usr/bin/time when available."""
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as out:
        timed = ["/usr/bin/time", "-f", "%M", "-o", out.name, *cmd] if Path("/usr/bin/time").exists() else cmd
        start = time.perf_counter()
        subprocess.run(timed, env=ENV, capture_output=True, check=True, cwd=ROOT)
        seconds = time.perf_counter() - start
        text = out.read().strip()
    return seconds, (int(text.splitlines()[-1]) / 1024 if text else float("nan"))


def config_seconds(repeat: int) -> dict[str, float]:
    """Warm, in process: one configuration's memory and step time (fixed shape), one solved shape
    (the candidate search), and a full plan report; median CPU seconds per call (the process's own CPU
    time: on a machine shared with other jobs, wall time counts the turns other processes take)."""
    from btacalc.config.execution import BatchLimits, ExecutionRequest, resolve_execution
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.model import validate_model
    from btacalc.memo import clear_caches
    from btacalc.model.gpu.gemm import _one_gemm
    from btacalc.model.memory import MemoryModel, resolve_memory_model
    from btacalc.model.problem import Problem
    from btacalc.model.solver import PointLimits, search
    from btacalc.model.timing import step_time
    from btacalc.planning.plan import make_plan

    model, hw = validate_model(LLAMA2_7B, "benchmark"), resolve_hardware("a100-80gb")
    request = ExecutionRequest(seq_len=4096, recompute="full", attention="flash", devices=8, zero_stage=3)

    def evaluate() -> None:  # the same question as llm-analysis: memory and time of a given shape
        problem = resolve_memory_model(Problem(model, hw, resolve_execution(request, model, hw)))
        MemoryModel(problem).total(1, 1)
        step_time(problem, 1, 1)

    def solve() -> None:  # the batch shape chosen too (fastest fitting G, b)
        problem = resolve_memory_model(Problem(model, hw, resolve_execution(request, model, hw)))
        found = search(problem, PointLimits.of(BatchLimits()))
        best = found.solution(0)
        MemoryModel(problem).total(best.tiles, best.tile_batch)

    def plan() -> None:
        make_plan(model, hw, request)

    def evaluate_uncached() -> None:  # the same, every GEMM shape computed again (no shape seen before)
        _one_gemm.cache_clear()
        evaluate()

    def evaluate_new_layout() -> None:  # every per-layout cache emptied first (btacalc.memo): a layout seen first
        clear_caches()
        evaluate()

    out = {}
    # emptying every cache 1,000 times leaves the process slower for a while (solve: 8 -> 11 ms, no object
    # retained: the allocator's state), so the layout-seen-first row runs last
    for name, fn in (("evaluate", evaluate), ("evaluate_uncached", evaluate_uncached), ("solve", solve),
                     ("plan", plan), ("evaluate_new_layout", evaluate_new_layout)):
        fn()
        times = []
        for _ in range(repeat if name != "plan" else max(repeat // 10, 5)):
            start = time.process_time()
            fn()
            times.append(time.process_time() - start)
        out[name] = statistics.median(times)
        out[name + "_min"] = min(times)
    return out


def cli_rows(args: argparse.Namespace, rep: int) -> list[tuple[str, str, str]]:
    """The commands as a user runs them: wall time of each process (start-up included)."""
    rows: list[tuple[str, str, str]] = []
    python = wall([sys.executable, "-c", "pass"], rep)
    # the floor under any btacalc command: importing the libraries the design card requires
    stack = wall([sys.executable, "-c", "import typer, numpy, pydantic; from pydantic import BaseModel"], rep)
    help_s = wall([*BTACALC, "--help"], rep)
    plan_s = wall([*BTACALC, "plan", "--json"], rep)
    rows += [("`python -c pass`", _ms(python, [sys.executable, "-c", "pass"]), "1.0x"),
             ("`import typer, numpy, pydantic` (the required stack, before btacalc runs a line)",
              _ms(stack, [sys.executable, "-c", "import typer, numpy, pydantic; from pydantic import BaseModel"]),
              f"{stack / python:.1f}x python"),
             ("`btacalc --help`", _ms(help_s, [*BTACALC, "--help"]), f"{help_s / python:.1f}x python"),
             ("`btacalc plan --json` (cold, median of %d)" % rep, _ms(plan_s, [*BTACALC, "plan", "--json"]),
              f"{plan_s / python:.1f}x python, {plan_s / help_s:.2f}x --help")]
    if args.peer_python:
        peer_cli = wall([args.peer_python, *PEER_CLI], rep)
        rows.append(("llm-analysis CLI, one training step", _ms(peer_cli, [args.peer_python, *PEER_CLI]),
                     f"{peer_cli / plan_s:.1f}x btacalc plan wall, "
                     f"{CPU[' '.join([args.peer_python, *PEER_CLI])] / CPU[' '.join([*BTACALC, 'plan', '--json'])]:.1f}x CPU"))
    search_s = wall([*BTACALC, *SEARCH], 1 if args.quick else 3)
    # search33: the count from the search's own output (a constant here went stale with each change of the space)
    layouts = json.loads(subprocess.run([*BTACALC, *SEARCH], capture_output=True, text=True, check=True).stdout)
    rows.append((f"`plan --search` (h100 x 256, qwen3-30b-a3b: {layouts['candidates']:,} layouts)",
                 f"{search_s:.2f} s (CPU {CPU[' '.join([*BTACALC, *SEARCH])]:.2f} s)",
                 f"{layouts['candidates'] / search_s:,.0f} layouts/s"))
    validate_cmd = [*BTACALC, "validate", "-q"]
    validate_s = wall(validate_cmd, 1 if args.quick else 3)
    runs = len(json.loads((ROOT / "btacalc" / "data" / "measured_runs.json").read_text())["runs"])
    rows.append((f"`validate` (the published points and {runs} measured runs)",
                 f"{validate_s:.2f} s (CPU {CPU[' '.join(validate_cmd)]:.2f} s)",
                 f"{validate_s / runs * 1e3:.0f} ms per run"))
    sweep_s = wall([*BTACALC, *SWEEP_16K], rep)
    rows.append(("`sweep` 16,384 points (wse3, seq x experts, table)", f"{sweep_s:.2f} s",
                 f"{sweep_s / plan_s:.2f}x one plan"))
    with tempfile.TemporaryDirectory() as tmp:
        for points, vary in SWEEPS.items():
            if args.quick and points > 100_000:
                continue
            cmd = [*BTACALC, "sweep", "--hw", "wse3", *vary, "--csv", str(Path(tmp) / "s.csv"), "-q"]
            seconds, rss = peak_rss_mb(cmd)
            rows.append((f"`sweep` {points:,} points to CSV", f"{seconds:.2f} s",
                         f"{points / seconds:,.0f} points/s, peak RSS {rss:.0f} MB"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer-python", help="a Python with llm-analysis installed")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, no 1e6-point sweep")
    ap.add_argument("--api-only", action="store_true", help="only the in-process rows (and llm-analysis')")
    args = ap.parse_args()
    rep = 3 if args.quick else 5
    load_start = os.getloadavg()[0]
    rows: list[tuple[str, str, str]] = []

    if not args.api_only:
        rows += cli_rows(args, rep)
    per = config_seconds(300 if args.quick else 1000)
    # in-process rows: median (minimum) CPU time per call; on a shared machine the minimum moves least
    ms = lambda name, digits=3: f"{per[name] * 1e3:.{digits}f} ms (min {per[name + '_min'] * 1e3:.{digits}f})"  # noqa: E731
    rows += [("one configuration, memory + step time (API, warm, CPU time)", ms("evaluate"), ""),
             ("the same, GEMM shape cache cleared before each call", ms("evaluate_uncached"), ""),
             ("the same, every cache cleared before each call (a layout seen the first time)",
              ms("evaluate_new_layout"), ""),
             ("one configuration solved: fastest shape + memory (API, warm, CPU time)", ms("solve"), ""),
             ("one full plan report, G = 1 and dense included (API, warm, CPU time)", ms("plan", 2), "")]
    if args.peer_python:
        peer, peer_min = (float(x) for x in subprocess.run(
            [args.peer_python, "-c", PEER_CONFIG.replace("N)", "1000)")], capture_output=True, text=True,
            check=True).stdout.strip().splitlines()[-1].split())
        rows.append(("llm-analysis, one configuration (API, warm, CPU time)",
                     f"{peer * 1e3:.3f} ms (min {peer_min * 1e3:.3f})",
                     f"btacalc evaluate {per['evaluate'] / peer:.2f}x (min {per['evaluate_min'] / peer_min:.2f}x), "
                     f"solve {per['solve'] / peer:.2f}x (min {per['solve_min'] / peer_min:.2f}x)"))
    load = os.getloadavg()[0]
    print(f"| measured ({os.cpu_count()} cores, load {load_start:.1f} at start, {load:.1f} at end) | time | ratio |")
    print("| --- | ---: | --- |")
    for what, t, ratio in rows:
        print(f"| {what} | {t} | {ratio} |")


if __name__ == "__main__":
    main()
