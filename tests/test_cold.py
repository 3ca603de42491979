"""The cold command's start-up (issue 25 item 6, docs/speed.md "cold5"): `plan --json` in a fresh process
imports none of the libraries a plan does not need."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]

# Libraries a plan never needs: rich renders tables and help (not JSON), sympy generates the formula cache,
# scipy fits calibration, matplotlib plots, torch measures; each costs 20-300 ms of a cold start.
NOT_ON_THE_COLD_PATH = ("rich", "sympy", "scipy", "matplotlib", "torch", "pandas")

PROBE = """
import json, sys
from btacalc.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted({name.partition(".")[0] for name in sys.modules} & set(%r))
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
""" % (NOT_ON_THE_COLD_PATH,)


def _cold(*args: str) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(2):  # the first run may fill the formula cache (sympy); the second is the cold command
        done = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True,
                              timeout=300, cwd=ROOT)
    return json.loads(done.stderr.strip().splitlines()[-1]), done.stdout


def test_a_wafer_plan_json_imports_no_heavy_library():
    probe, stdout = _cold("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--json")
    assert probe["code"] == 0 and json.loads(stdout)["plan"]["fits"]
    assert probe["heavy"] == []


def test_a_gpu_plan_json_imports_no_heavy_library():
    probe, stdout = _cold("plan", "--hw", "h100", "--devices", "8", "--json")
    assert probe["code"] in (0, 1)  # 1: the default model does not fit; the report is printed either way
    assert json.loads(stdout)["plan"]["fits"] is (probe["code"] == 0)
    assert probe["heavy"] == []


# --- numpy's BLAS pool (round "cold6", btacalc/cli/blas.py) ---------------------------------------------------
# OpenBLAS starts `threads - 1` workers when numpy loads (blas_server.c L579), so a process's thread count
# after `import numpy` alone is the BLAS thread count; the CLI must load numpy with one and leave the
# environment as it found it.
THREADS = """
import json, os, sys
import %s
print(json.dumps({"threads": len(os.listdir("/proc/self/task")),
                  "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")}}))
"""


def _threads(module: str, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", THREADS % module], env={**base, "PYTHONPATH": str(ROOT), **env},
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=True)
    return json.loads(done.stdout)


def _blas_pool_or_skip() -> None:
    if not Path("/proc/self/task").is_dir():
        pytest.skip("no /proc to count threads")
    if _threads("numpy", OPENBLAS_NUM_THREADS="2")["threads"] != 2:
        pytest.skip("this numpy's BLAS starts no thread pool at import (not OpenBLAS with pthreads)")


def test_the_cli_loads_numpy_with_one_blas_thread_and_leaves_the_environment_alone():
    _blas_pool_or_skip()
    probe = _threads("btacalc.cli")
    assert probe == {"threads": 1, "env": {"OPENBLAS_NUM_THREADS": None, "GOTO_NUM_THREADS": None, "OMP_NUM_THREADS": None}}


@pytest.mark.parametrize("name", ["OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"])
def test_a_users_blas_thread_count_is_kept(name):
    _blas_pool_or_skip()
    probe = _threads("btacalc.cli", **{name: "2"})
    assert probe["threads"] == 2 and probe["env"][name] == "2"


def test_numpy_loaded_first_keeps_its_pool():
    _blas_pool_or_skip()
    alone = _threads("numpy")["threads"]  # OpenBLAS's default: one thread per core
    assert _threads("numpy; import btacalc.cli")["threads"] == alone
