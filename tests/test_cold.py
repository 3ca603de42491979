"""The cold command's start-up (issue 25 item 6, docs/speed.md "cold5"): `plan --json` in a fresh process
imports none of the libraries a plan does not need."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


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
