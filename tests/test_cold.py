"""The cold command's start-up (issue 25 item 6, docs/speed.md "cold5"): what `plan --json` imports and
which pydantic validators it builds, and that deferring the validators (`defer_build`) leaves every model
buildable."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pydantic

import btacalc

ROOT = Path(__file__).resolve().parents[1]

# Libraries a plan never needs: rich renders tables and help (not JSON), sympy generates the formula cache,
# scipy fits calibration, matplotlib plots, torch measures; each costs 20-300 ms of a cold start.
NOT_ON_THE_COLD_PATH = ("rich", "sympy", "scipy", "matplotlib", "torch", "pandas")

PROBE = """
import json, sys
import pydantic
from btacalc.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
def subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)
built = sorted({f"{c.__module__}.{c.__qualname__}" for c in subclasses(pydantic.BaseModel)
                if c.__module__.startswith("btacalc") and c.__pydantic_complete__})
heavy = sorted({name.partition(".")[0] for name in sys.modules} & set(%r))
print(json.dumps({"code": code, "built": built, "heavy": heavy}), file=sys.stderr)
""" % (NOT_ON_THE_COLD_PATH,)


def _cold(*args: str) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(2):  # the first run may fill the formula cache (sympy); the second is the cold command
        done = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True,
                              timeout=300, cwd=ROOT)
    return json.loads(done.stderr.strip().splitlines()[-1]), done.stdout


def test_a_wafer_plan_json_imports_no_heavy_library_and_builds_only_the_report_parts_it_fills():
    probe, stdout = _cold("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--json")
    assert probe["code"] == 0 and json.loads(stdout)["plan"]["fits"]
    assert probe["heavy"] == []
    built = set(probe["built"])
    # what the plan validates: the report, the device profile, the model
    assert {"btacalc.planning.report.PlanReport", "btacalc.config.hardware.HardwareProfile",
            "btacalc.config.model.ModelSpec"} <= built
    # a wafer plan has no GPU stage rows and no imported-run section: their validators are never built,
    # nor those of the formula catalogue (read back from its cache without validation)
    for unused in ("btacalc.planning.report.StageRow", "btacalc.planning.report.ImportedInfo",
                   "btacalc.catalogue.terms.Phase", "btacalc.catalogue.terms.Term"):
        assert unused not in built, unused


def test_a_gpu_plan_json_imports_no_heavy_library():
    probe, stdout = _cold("plan", "--hw", "h100", "--devices", "8", "--json")
    assert probe["code"] in (0, 1)  # 1: the default model does not fit; the report is printed either way
    assert json.loads(stdout)["plan"]["fits"] is (probe["code"] == 0)
    assert probe["heavy"] == []


def _btacalc_models() -> list[type[pydantic.BaseModel]]:
    for info in pkgutil.walk_packages(btacalc.__path__, "btacalc."):
        # torch: tested separately (tests/test_torchref.py); __main__ runs the command line
        if not info.name.startswith("btacalc.torchref") and not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    seen: list[type[pydantic.BaseModel]] = []
    stack = [pydantic.BaseModel]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__module__.startswith("btacalc") and sub not in seen:
                seen.append(sub)
    return seen


def test_every_deferred_model_builds():
    """A deferred model resolves its annotations only when first used, so a name it cannot resolve would
    surface only in the one command that uses it: build every model here."""
    models = _btacalc_models()
    deferred = [m for m in models if m.model_config.get("defer_build")]
    assert len(deferred) >= 40  # the report (21), hardware (12), model, precision, kernels, catalogue
    for model in models:
        assert model.model_rebuild(force=True) is not False, model
        assert model.__pydantic_complete__, model


def test_a_deferred_model_validates_at_its_first_use():
    """In a fresh process: the hardware number is not built on import, and its first validation still
    refuses an unknown field and a source that is not a URL."""
    probe = """
import json, sys, pydantic
from btacalc.config.hardware import Number
before = Number.__pydantic_complete__
errors = []
for data in ({"value": 1.0, "kind": "published", "source": "https://example.com", "surprise": 1},
             {"value": 1.0, "kind": "published", "source": "example.com"}):
    try:
        Number.model_validate(data)
    except pydantic.ValidationError as exc:
        errors.append(exc.errors()[0]["type"])
good = Number.model_validate({"value": 2.0, "kind": "published", "source": "https://example.com"}).value
print(json.dumps([before, Number.__pydantic_complete__, errors, good]))
"""
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert json.loads(done.stdout) == [False, True, ["extra_forbidden", "value_error"], 2.0], done.stderr
