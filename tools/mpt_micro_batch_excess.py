"""Separate the llm-foundry MPT rows' residual into a per-token offset and a per-micro-batch excess (task mpt5).

docs/runs.md 'mpt5'. For each micro-batch-2 row, its twin (same model and GPU, larger micro-batch) gives the
per-token offset e_twin (its signed error, predicted/measured - 1, read as a share of the predicted compute). The
row's excess per micro-batch beyond that offset is

    extra = measured/GA - (predicted/GA) x (1 + e_twin)

and is stated per parameter (ps/param), as a multiple of btacalc's own per-micro-batch FSDP ring time (plan
JSON `throughput.communication_s.zero_per_micro_batch` / GA: two 16-bit all-gathers and one fp32 reduce-scatter,
hidden behind compute), and as the bytes per parameter the profile's streaming bandwidth would move in that time.
Nothing here is fitted or written back: it prints a table.

Usage: PYTHONPATH=$PWD python tools/mpt_micro_batch_excess.py
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

from btacalc.config.hardware import builtin_profiles
from btacalc.paths import package_data

SUFFIX = "-bf16-llmfoundry"
# row at micro-batch 2 -> its twins (same model and GPU type, larger micro-batch)
PAIRS = {
    "mpt-70b-h100-32": ["mpt-70b-h100-64"],
    "mpt-13b-h100-64": ["mpt-1b-h100-64", "mpt-3b-h100-64", "mpt-7b-h100-8"],
    "mpt-70b-a100-80gb-32": ["mpt-70b-a100-80gb-64"],
    "mpt-13b-a100-80gb-8": ["mpt-1b-a100-80gb-8", "mpt-3b-a100-80gb-8", "mpt-7b-a100-80gb-8"],
}


def _btacalc(*args: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "btacalc", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _plan(run: dict[str, Any]) -> Any:
    recipe = run["recipe"]
    args = ["plan", "--model", run["model"], "--hw", run["hw"], "--devices", str(run["devices"]), "--fsdp",
            "--fsdp-impl", "torch", "--seq", str(run["seq"]), "--global-batch", str(run["global_batch"]),
            "--micro-batch", str(run["micro_batch"]), "--recompute", run["recompute"], "--attention", "flash", "--json"]
    if recipe.get("attention_kernel"):
        args += ["--attention-kernel", recipe["attention_kernel"]]
    if recipe.get("eager_kernels"):
        args.append("--eager-kernels")
    if recipe.get("checkpoint_early_stop"):
        args.append("--checkpoint-early-stop")
    return _btacalc(*args)


def main() -> None:
    report = {r["id"]: r for r in _btacalc("validate", "--json")["measured"]["runs"]}
    runs = {r["id"]: r for r in json.loads(package_data("measured_runs.json").read_text())["runs"]}
    print("row | GA | measured/mb s | predicted/mb s | twin offset | extra ms/mb | share | ps/param | x FSDP ring | B/param")
    for row, twins in PAIRS.items():
        run, res = runs[row + SUFFIX], report[row + SUFFIX]
        ga = run["global_batch"] // (run["micro_batch"] * run["devices"])
        offset = statistics.fmean(report[t + SUFFIX]["error"] for t in twins)
        meas, pred = res["measured"]["step_time_s"] / ga, res["predicted"]["step_time_s"] / ga
        extra = meas - pred * (1 + offset)
        plan = _plan(run)
        params = plan["model"]["params_total"]
        ring = plan["throughput"]["communication_s"]["zero_per_micro_batch"] / ga
        stream = builtin_profiles()[run["hw"]].memory.streaming_bandwidth_bytes_per_s()
        print(f"{row} | {ga} | {meas:.4f} | {pred:.4f} | {offset:+.1%} | {extra * 1e3:.0f} | {extra / pred:.1%} | "
              f"{extra / params * 1e12:.2f} | {extra / ring:.2f} | {extra * stream / params:.1f}")


if __name__ == "__main__":
    main()
