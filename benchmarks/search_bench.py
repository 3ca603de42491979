"""Benchmark (not a test): the layout search of the acceptance criterion, and btacalc against the
measured GPU runs (raw comparison, no calibration).

Run: PYTHONPATH=. python benchmarks/search_bench.py
- `plan --search` for Qwen3-235B-A22B (tests/data config) on 256 x gb200, global batch 8192, seq 4096:
  wall time (target: under 10 s on the 2-core development machine), layouts evaluated, the winner;
- every run of tests/test_megatron.py MEASURED (the layouts of /work/shared/reference/measured-runs.json):
  btacalc's tokens/s per GPU against the measured one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURED_TOKENS_PER_GPU = {  # /work/shared/reference/measured-runs.json, measured.tokens_per_s_per_device
    "gpt-22b-a100-80gb-8-379": 721.1, "gpt-22b-a100-80gb-8-380": 930.9, "gpt3-175b-a100-80gb-64-381": 113.0,
    "gpt3-175b-a100-80gb-64-382": 148.9, "gpt3-175b-h100-128-304": 493.0, "gpt3-175b-h100-512-306": 486.5,
    "qwen3-30b-a3b-h100-16-388": 10607.2, "qwen3-30b-a3b-h100-16-389": 12487.8, "qwen3-30b-a3b-h100-8-300": 12040.0,
    "llama-3-70b-h100-64-303": 866.77,
}


def search() -> None:
    cmd = [sys.executable, "-m", "btacalc", "plan", "--model", str(ROOT / "tests/data/qwen3-235b-a22b.config.json"),
           "--hw", "gb200", "--devices", "256", "--global-batch", "8192", "--seq", "4096", "--search"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout
    wall = time.perf_counter() - t0
    lines = [ln for ln in out.splitlines() if "layouts evaluated" in ln or ln.strip().startswith("│ 1 ")]
    print(f"search, qwen3-235b-a22b on 256 x gb200 (process wall time, cold start included): {wall:.1f} s")
    print("\n".join(lines[:3]))


def measured() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from test_megatron import MEASURED, _model  # the layouts, in one place

    from btacalc.config.execution import BatchLimits, ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.planning.plan import make_plan

    print(f"{'run':30s} {'btacalc':>9s} {'measured':>9s} {'ratio':>6s}  largest shares")
    for run_id, model, hw, devices, seq, gbs, mbs, fields in MEASURED:
        req = ExecutionRequest(devices=devices, seq_len=seq, limits=BatchLimits(global_batch=gbs, micro_batch=mbs),
                               **fields)
        rep = make_plan(_model(model), resolve_hardware(hw), req)
        th = rep.throughput
        assert th is not None
        pred, meas = th.tokens_per_s / devices, MEASURED_TOKENS_PER_GPU[run_id]
        top = sorted(th.phase_share.items(), key=lambda kv: -kv[1])[:3]
        print(f"{run_id:30s} {pred:9,.0f} {meas:9,.0f} {pred / meas:6.2f}  " + ", ".join(f"{k} {v:.0%}" for k, v in top))


if __name__ == "__main__":
    search()
    measured()
