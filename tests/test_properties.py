"""Property-based tests (hypothesis) over random models, hardware profiles and run options:

- no traceback ever: the library raises BtacalcError or answers; the command line exits 0, 1 or 2;
- a plan that fits never exceeds the usable capacity (and usable <= capacity);
- memory is monotone: non-decreasing in b, G and s; per device, non-increasing in devices;
- the plan JSON always validates against `plan --schema` (round trip through the pydantic model,
  and every key the schema requires present, recursively);
- the command line exits 2 exactly when the input is invalid (an oracle written from the rules,
  not from the code).

Example counts are bounded (CI budget); deadline=None because the first example of a new catalogue
selection compiles its formulas.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from btacalc.config.execution import ExecutionRequest, Layout
from btacalc.config.hardware import HardwareProfile, builtin_profiles
from btacalc.config.model import validate_model
from btacalc.errors import BtacalcError
from btacalc.model.memory import MemoryModel
from btacalc.planning.plan import make_plan
from btacalc.planning.report import PlanReport

from support import resolved

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@st.composite
def models(draw) -> Any:
    heads = draw(st.sampled_from([1, 2, 4, 8, 12, 16, 32]))
    kv = draw(st.sampled_from([d for d in (1, 2, 4, 8, 16, 32) if heads % d == 0]))
    head_dim = draw(st.sampled_from([16, 64, 128]))
    moe = draw(st.booleans())
    experts = draw(st.integers(2, 256)) if moe else 0
    data = {
        "name": "random", "source": "https://example.org/hypothesis",
        "hidden_size": draw(st.sampled_from([64, 256, 1024, 2048, 4096])),
        "num_layers": draw(st.integers(1, 64)), "num_heads": heads, "num_kv_heads": kv, "head_dim": head_dim,
        "vocab_size": draw(st.integers(128, 200_000)), "ffn_size": draw(st.integers(16, 16_384)),
        "num_experts": experts, "top_k": draw(st.integers(1, min(experts, 8))) if moe else 0,
        "norm": draw(st.sampled_from(["rmsnorm", "layernorm"])),
        "mlp": "swiglu" if moe else draw(st.sampled_from(["swiglu", "gelu"])),
        "qk_norm": draw(st.sampled_from(["none", "head"])),
        "tied_embeddings": draw(st.booleans()),
    }
    return validate_model(data, origin="hypothesis")


def _scaled(profile: HardwareProfile, factors: dict[str, float]) -> HardwareProfile | None:
    """`profile` with some numbers scaled, if the result is still a valid profile."""
    raw = profile.model_dump()
    for key, factor in factors.items():
        section, field = key.split(".")
        if raw[section].get(field):
            raw[section][field]["value"] = raw[section][field]["value"] * factor
            if profile.range_of(key).integer:  # type: ignore[union-attr]  # every number has a range
                raw[section][field]["value"] = float(max(1, round(raw[section][field]["value"])))
    try:
        return HardwareProfile.model_validate(raw)
    except ValueError:
        return None


SCALABLE = ["chip.peak_flops_per_s", "memory.offchip_memory_bytes", "memory.offchip_bandwidth_bytes_per_s",
            "system.scaleup_bandwidth_bytes_per_s", "system.scaleout_bandwidth_bytes_per_s",
            "calibration.tile_overhead_s", "system.system_power_w"]
FRACTIONS = ["calibration.usable_memory_fraction", "calibration.compute_efficiency",
             "reserves.allocator_fragmentation_fraction"]


@st.composite
def profiles(draw) -> HardwareProfile:
    base = draw(st.sampled_from(sorted(builtin_profiles().items())))[1]
    factors = draw(st.dictionaries(st.sampled_from(SCALABLE), st.floats(0.05, 20), max_size=3))
    own = [k for k in FRACTIONS if k in base.numbers()]  # a GPU names reserves, a wafer a usable fraction
    for key in draw(st.lists(st.sampled_from(own), max_size=2, unique=True)):
        factors[key] = draw(st.floats(0.05, 1.0)) / base.numbers()[key].value
    prof = _scaled(base, factors)
    assume(prof is not None)
    return prof  # type: ignore[return-value]  # assume() filtered None


@st.composite
def requests(draw, profile: HardwareProfile, num_experts: int) -> ExecutionRequest:
    devices = 1
    ep = zero = None
    if profile.family == "gpu" and draw(st.booleans()):
        devices = draw(st.sampled_from([2, 4, 8, 16, 64]))
        ep = draw(st.sampled_from([d for d in (1, 2, 4, 8) if devices % d == 0 and (num_experts % d == 0 or d == 1)]))
        zero = draw(st.integers(0, 3))
    return ExecutionRequest(
        seq_len=draw(st.sampled_from([128, 1024, 4096, 32768])),
        recompute=draw(st.sampled_from([None, "none", "selective", "full"])),
        attention=draw(st.sampled_from([None, "eager", "flash"])),
        causal=draw(st.booleans()), loss=draw(st.sampled_from([None, "fused", "stored"])),
        memory_model=draw(st.sampled_from([None, "auto", "resident"] + (["weight_streaming"] * (profile.family == "wse")))),
        devices=devices, expert_parallel=ep, zero_stage=zero, micro_batches=draw(st.sampled_from([1, 4])),
    )


@st.composite
def problems(draw) -> tuple:
    model, profile = draw(models()), draw(profiles())
    return model, profile, draw(requests(profile, model.num_experts))


def _required_keys_present(schema: dict, node: Any, value: Any, path: str = "") -> None:
    """Every key the JSON schema requires is in the value, recursively (objects, arrays, $ref, anyOf)."""
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].split("/")[-1]]
    if "anyOf" in node:
        if value is not None:
            for option in node["anyOf"]:
                if option.get("type") != "null":
                    _required_keys_present(schema, option, value, path)
        return
    if node.get("type") == "object" or "properties" in node:
        assert isinstance(value, dict), path
        missing = set(node.get("required", [])) - set(value)
        assert not missing, f"{path}: missing {missing}"
        for key, sub in node.get("properties", {}).items():
            if key in value:
                _required_keys_present(schema, sub, value[key], f"{path}.{key}")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                _required_keys_present(schema, extra, item, f"{path}.{key}")
    elif node.get("type") == "array":
        assert isinstance(value, list), path
        for i, item in enumerate(value):
            _required_keys_present(schema, node.get("items", {}), item, f"{path}[{i}]")


SCHEMA = PlanReport.model_json_schema()


@SETTINGS
@given(problems())
def test_plans_never_crash_fit_within_capacity_and_match_the_schema(problem):
    model, profile, request = problem
    try:
        report = make_plan(model, profile, request)
    except BtacalcError as exc:
        assert "\n" not in str(exc)
        event("invalid combination")
        return
    event("fits" if report.plan.fits else "does not fit")
    mem = report.memory_bytes
    assert mem["usable_capacity"] <= mem["capacity"]
    if report.plan.fits:
        assert mem["total"] <= mem["usable_capacity"]
        assert report.plan.global_batch == report.plan.tiles * report.plan.tile_batch
    text = report.model_dump_json()
    data = json.loads(text)
    assert PlanReport.model_validate_json(text) == report
    _required_keys_present(SCHEMA, SCHEMA, data)
    assert all(math.isfinite(v) for v in _numbers(data)), "no inf or nan in a plan"


def _numbers(value: Any):
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, float):
        yield value


def test_the_schema_check_can_fail():
    with pytest.raises(AssertionError, match="missing"):
        _required_keys_present(SCHEMA, SCHEMA, {"model": {}})


@SETTINGS
@given(models(), st.sampled_from(sorted(builtin_profiles())), st.integers(1, 64), st.integers(1, 64),
       st.sampled_from([256, 2048, 8192]), st.sampled_from(["none", "selective", "full"]),
       st.sampled_from(["eager", "flash"]))
def test_memory_is_monotone_in_b_g_and_s(model, hw, g, b, s, recompute, attention):
    problem = resolved(model, hw, seq_len=s, recompute=recompute, attention=attention,
                       memory_model="resident" if builtin_profiles()[hw].family == "gpu" else "weight_streaming")
    mem = MemoryModel(problem)
    base = mem.total(g, b, s)
    assert mem.total(g, b + 1, s) >= base
    assert mem.total(g + 1, b, s) >= base
    assert mem.total(g, b, 2 * s) >= base


@SETTINGS
@given(models(), st.sampled_from(["a100-80gb", "b200"]), st.sampled_from([1, 2, 4]), st.integers(0, 3),
       st.integers(1, 8), st.sampled_from([1024, 4096]))
def test_memory_per_device_does_not_grow_with_devices(model, hw, ep, zero, b, s):
    assume(model.num_experts % ep == 0 if model.num_experts else ep == 1)
    totals = []
    for devices in (ep, 2 * ep, 8 * ep):
        layout = Layout(devices=devices, expert_parallel=ep, zero_stage=zero, devices_per_node=8)
        problem = resolved(model, hw, layout, seq_len=s, memory_model="resident")
        totals.append(MemoryModel(problem).total(1, b, s))
    assert totals[0] >= totals[1] >= totals[2]


# --- the command line: exit 2 exactly when the input is invalid ---------------------------------
@st.composite
def command_lines(draw) -> tuple[list[str], bool]:
    """A plan command line and whether its input is invalid, by the documented rules. Mostly valid
    values, each with a few invalid ones among them."""
    hw = draw(st.sampled_from(["wse3", "a100-80gb", "b200"]))
    args, invalid = ["plan", "--hw", hw, "--json"], False
    experts, top_k = 128, 8  # qwen3-30b-a3b
    if draw(st.booleans()):
        experts = draw(st.sampled_from([8, 16, 32, 64, 96, 128, 256, 6, 0, -1]))
        args += ["--experts", str(experts)]
        invalid |= experts < 1
    if draw(st.booleans()):
        top_k = draw(st.sampled_from([1, 2, 4, 6, 8, 12, 0, -1]))
        args += ["--top-k", str(top_k)]
        invalid |= top_k < 1
    invalid |= top_k > experts
    if draw(st.booleans()):
        seq = draw(st.sampled_from([1, 128, 2048, 4096, 32768, 0, -2]))
        args += ["--seq", str(seq)]
        invalid |= seq < 1
    if hw == "wse3":  # one wafer system: expert parallelism is a GPU layout
        ep = draw(st.sampled_from([None, None, 1, 2]))
        args += ["--ep", str(ep)] if ep else []
        invalid |= (ep or 1) > 1
        return args, invalid
    n = g = None  # a GPU's global batch is N = DP x M x G x b; here DP = devices (no TP/PP/CP) and M = 1
    if draw(st.booleans()):
        n = draw(st.sampled_from([1, 4, 12, 16, 64, 0]))
        args += ["--global-batch", str(n)]
        invalid |= n < 1
    if draw(st.booleans()):
        g = draw(st.sampled_from([1, 2, 3, 4, 0]))
        args += ["--tiles", str(g)]
        invalid |= g < 1
    devices = draw(st.sampled_from([1, 2, 8, 6]))
    ep = draw(st.sampled_from([None, 1, 2, 4, 3]))
    args += ["--devices", str(devices)] + (["--ep", str(ep)] if ep else [])
    if ep:
        invalid |= devices % ep != 0 or (experts >= 1 and experts % ep != 0)
    if n is not None and n >= 1:
        invalid |= n % devices != 0  # the micro-batch G*b = N / DP must be whole
        if g is not None and g >= 1 and n % devices == 0:
            invalid |= (n // devices) % g != 0  # and split into G tiles
    return args, invalid


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(command_lines())
def test_exit_2_exactly_when_the_input_is_invalid(cli, case):
    args, invalid = case
    event("invalid" if invalid else "valid")
    code, out, err = cli(*args)
    assert "Traceback" not in err and "internal error" not in err
    if invalid:
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (args, code, err)
    else:
        assert code in (0, 1) and err == "", (args, code, err)
        assert json.loads(out)["plan"]["fits"] is (code == 0)


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["plan", "sweep", "compare", "crossover", "formulas", "hw", "models", "--json",
                                 "--hw", "wse3", "b200", "--seq", "0", "7", "--vary", "experts=1:4:x2", "--devices",
                                 "-3", "--hidden", "256", "--phase", "experts", "--model", "gpt3-175b", "show", "list",
                                 "--output", "-", "--csv", "--plot", "x.png", "", "=", ":", "\u00e9", "--ep", "2"]),
                min_size=1, max_size=6))
def test_random_words_never_crash(cli, words):
    code, _, err = cli(*words)
    assert code in (0, 1, 2), (words, code, err)
    assert "Traceback" not in err and "internal error" not in err, (words, err)
