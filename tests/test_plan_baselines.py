"""make_plan(..., baselines=False): the plan's own step without the G = 1 and dense comparisons (what
`validate --measured` reads), equal to the full plan in everything it keeps."""

from __future__ import annotations

import pytest

from btacalc.config.execution import BatchLimits, ExecutionRequest
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.planning.plan import make_plan

CASES = [
    ("qwen3-30b-a3b", "wse3", ExecutionRequest()),
    ("qwen3-30b-a3b", "h100", ExecutionRequest(devices=16, seq_len=4096, limits=BatchLimits(global_batch=256))),
    ("llama-3-8b", "b200", ExecutionRequest(devices=8, seq_len=8192, limits=BatchLimits(global_batch=64))),
]


@pytest.mark.parametrize("model, hw, request_", CASES, ids=[f"{m}-{h}" for m, h, _ in CASES])
def test_lean_plan_is_the_full_plan_without_its_baselines(model, hw, request_):
    spec, profile = resolve_model(model), resolve_hardware(hw)
    full = make_plan(spec, profile, request_)
    lean = make_plan(spec, profile, request_, baselines=False)
    assert full.throughput is not None and lean.throughput is not None
    assert lean.throughput.step_time_s == full.throughput.step_time_s
    assert lean.throughput.tokens_per_s == full.throughput.tokens_per_s
    assert lean.throughput.phase_share == full.throughput.phase_share
    assert lean.memory_bytes == full.memory_bytes and lean.plan == full.plan
    assert lean.phases == full.phases
    # the comparisons are left out, not guessed
    assert lean.throughput.tokens_per_s_g1 is None and lean.throughput.dense_tokens_per_s is None
    assert lean.throughput.relative_to_dense is None
    assert full.throughput.dense_tokens_per_s is not None
