"""`validate --measured`: reading run files, expressing runs, errors, summaries and the CI gate."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.errors import BtacalcError
from btacalc.planning.measured import (Bands, Measured, MeasuredRun, RunPrediction, RunResult, express, gate,
                                       load_runs, predict, summarize, validate_measured)
from btacalc.planning.plan import make_plan
from btacalc.planning.precision_pairs import PairBands
from tests.loading import load_script

RUN = {
    "id": "qwen-b200-16", "source": "https://example.org/run", "model": "qwen3-30b-a3b", "hw": "b200", "devices": 16,
    "precision": "bf16", "seq": 4096, "global_batch": 256, "micro_batch": 1, "tp": 1, "pp": 1, "vp": None, "cp": 1,
    "ep": 8, "etp": None, "fsdp": False, "sequence_parallel": None, "recompute": "full",
    "measured": {"tokens_per_s_per_device": 10000.0}, "role": "check", "confidence": "test", "notes": "carried",
}


def _write(tmp_path, runs):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": runs}))
    return path


def test_shipped_runs_load_and_every_run_is_reported():
    runs = load_runs()
    assert len([r for r in runs if r.hw.startswith("wse")]) == 12 and len(runs) >= 80
    assert {r.role for r in runs} == {"fit", "check"}
    report = validate_measured()
    assert [r.id for r in report.runs] == [r.id for r in runs]  # none silently skipped
    for r in report.runs:
        assert r.expressible or r.reason  # a run not predicted says why
    # a known gap that quotes a run's error leads with today's (its history follows): the texts had gone on
    # quoting the error of two refits ago ("since ncclsm: +78.5%" where validate printed +80.7%)
    for r in report.runs:
        first = re.search(r"([+\-−]\d+\.\d)%", r.known_gap)
        if first and r.error is not None:
            assert first.group(1).replace("−", "-") == f"{100 * r.error:+.1f}", (r.id, r.known_gap[:90])


def test_an_expressible_run_is_predicted_as_plan_would(tmp_path):
    (result,) = validate_measured(_write(tmp_path, [RUN])).runs
    assert result.expressible, result.reason
    # the same layout typed as a plan: N = 256 sequences, micro-batch G*b = 1, DP 16, so M = 256 / (16 x 1) = 16
    from btacalc.config.execution import BatchLimits, ExecutionRequest

    report = make_plan(resolve_model("qwen3-30b-a3b"), resolve_hardware("b200"), ExecutionRequest(
        seq_len=4096, recompute="full", devices=16, expert_parallel=8,
        limits=BatchLimits(global_batch=256, micro_batch=1)))
    assert report.parallelism.micro_batches == 16 and report.plan.tiles * report.plan.tile_batch == 1
    per_device = report.throughput.tokens_per_s / 16
    assert result.predicted.tokens_per_s_per_device == pytest.approx(per_device)
    assert result.error == pytest.approx(per_device / 10000.0 - 1)
    assert result.carried == {"confidence": "test", "notes": "carried"}


@pytest.mark.parametrize("change, field, value", [
    ({"tp": 8, "ep": 2}, "tensor_parallel", 8),
    ({"pp": 4, "vp": 2}, "virtual_pipeline", 2),
    ({"cp": 2}, "context_parallel", 2),
    ({"fsdp": True}, "fsdp", True),
    ({"recompute": ["core_attn", "mlp"]}, "recompute", "core_attn,mlp"),
    ({"sequence_parallel": True, "tp": 2}, "sequence_parallel", True),
])
def test_every_layout_field_reaches_the_request(change, field, value):
    request, why = express(MeasuredRun.model_validate({**RUN, **change}))
    assert why == "" and getattr(request, field) == value


@pytest.mark.parametrize("precision, param_gather", [
    # Megatron-Bridge's mixed-precision recipes (training/mixed_precision.py): fp8_param_gather on for delayed,
    # current scaling and MXFP8, off for blockwise (subchannel) and not set for NVFP4
    ("fp8", True), ("fp8-current", True), ("fp8-blockwise", False), ("mxfp8", True), ("nvfp4", False), ("bf16", False),
])
def test_low_precision_runs_are_expressed_with_their_recipe(precision, param_gather):
    request, why = express(MeasuredRun.model_validate({**RUN, "precision": precision}))
    assert why == "" and request.precision == precision and request.fp8_param_gather is param_gather


def test_a_batch_that_does_not_divide_is_a_listed_reason(tmp_path):
    (result,) = validate_measured(_write(tmp_path, [{**RUN, "global_batch": 250}])).runs
    assert not result.expressible and "not a multiple" in result.reason


def test_unknown_model_or_device_is_bad_input(tmp_path):
    # hostile26: such runs were listed as not expressible (and a file of them alone failed the gate, exit 1, with
    # nothing on standard error); an unknown name is bad input, as an unknown precision or role is: one line naming
    # the run and its field
    for field, value in (("model", "no-such-model"), ("hw", "no-such-hw")):
        runs = [{**RUN, "id": "a", field: value}, {**RUN, "id": "c", "role": "fit"}]
        with pytest.raises(BtacalcError, match=f"run a: field {field}: unknown"):
            validate_measured(_write(tmp_path, runs))


@pytest.mark.parametrize("text, fragment", [
    ("not json", "not valid JSON"),
    ('{"runs": 3}', "list under 'runs'"),
    ('{"runs": [{"id": "x"}]}', "run x: field"),
    (json.dumps({"runs": [RUN, RUN]}), "given twice"),
    (json.dumps({"runs": [{**RUN, "role": "train"}]}), "role"),
    (json.dumps({"runs": [{**RUN, "devices": 0}]}), "devices"),
])
def test_bad_run_files_are_one_line_errors(tmp_path, text, fragment):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(BtacalcError) as exc:
        load_runs(path)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def _result(id_, role, family, error, known_gap=""):
    return RunResult(id=id_, role=role, family=family, model="m", hw="h", devices=1, expressible=True,
                     predicted=RunPrediction(tokens_per_s_per_device=1.0), measured=Measured(tokens_per_s_per_device=1.0),
                     error=error, known_gap=known_gap)


def test_summary_statistics_per_role_and_family():
    rs = [_result("a", "check", "gpu", 0.10), _result("b", "check", "gpu", -0.30), _result("c", "check", "gpu", 0.05),
          _result("d", "fit", "gpu", 0.02), _result("e", "check", "wse", -0.2)]
    by = {(s.role, s.family): s for s in summarize(rs)}
    g = by[("check", "gpu")]
    assert g.n == 3 and g.mean_abs_error == pytest.approx((0.10 + 0.30 + 0.05) / 3)
    assert g.median_abs_error == pytest.approx(0.10) and g.max_abs_error == pytest.approx(0.30)
    assert by[("fit", "gpu")].n == 1 and by[("check", "wse")].max_abs_error == pytest.approx(0.2)


BANDS = Bands(per_run_abs_error=0.25, family_mean_abs_error=0.15, memory_per_run_abs_error=0.05,
              memory_family_mean_abs_error=0.02,
              precision_pairs=PairBands(ratio_abs_error=0.10, source="issue 22 acceptance (test)"))


def test_gate_per_run_band_known_gaps_and_family_mean():
    ok = [_result("a", "check", "gpu", 0.10), _result("b", "check", "gpu", -0.12), _result("f", "fit", "gpu", 0.9)]
    assert gate(ok, summarize(ok), BANDS).ok  # fit runs are not gated
    out = ok + [_result("c", "check", "gpu", 0.30)]
    v = gate(out, summarize(out), BANDS)
    assert not v.ok and any(f.startswith("c:") for f in v.failures)
    gap = ok + [_result("c", "check", "gpu", 0.30, known_gap="no pipeline bubble")]
    assert gate(gap, summarize(gap), BANDS).ok  # a documented known gap is allowed outside the band
    healed = ok + [_result("c", "check", "gpu", 0.05, known_gap="no pipeline bubble")]
    assert any("known gap but now within" in f for f in gate(healed, summarize(healed), BANDS).failures)
    mean = [_result("a", "check", "gpu", 0.20), _result("b", "check", "gpu", -0.20)]
    assert any("mean |error|" in f for f in gate(mean, summarize(mean), BANDS).failures)


def _memory_result(id_, memory_error, memory_known_gap=""):
    return RunResult(id=id_, role="check", family="gpu", model="m", hw="h", devices=1, expressible=True,
                     predicted=RunPrediction(peak_alloc_gib=1.0), measured=Measured(peak_alloc_gib=1.0),
                     memory_error=memory_error, memory_known_gap=memory_known_gap)


def test_memory_gate_known_gaps_like_the_time_gate():
    """A memory check run outside ±5% fails unless it states a memory known gap; a stated gap inside the band
    fails (its note must go); the family's ±2% mean is over the other check runs (task logs9)."""
    ok = [_memory_result("a", 0.01), _memory_result("b", -0.02)]
    assert gate(ok, summarize(ok), BANDS).ok  # mean 1.5%
    out = ok + [_memory_result("c", -0.088)]
    failures = gate(out, summarize(out), BANDS).failures
    assert any(f.startswith("c: memory error -8.8%") for f in failures)
    assert any("mean |memory error|" in f for f in failures)  # (1 + 2 + 8.8) / 3 = 3.9% > 2%
    gap = ok + [_memory_result("c", -0.088, memory_known_gap="persistent 0.7 GiB not counted")]
    assert gate(gap, summarize(gap), BANDS).ok  # outside its band by a stated gap, and out of the mean
    healed = ok + [_memory_result("c", 0.04, memory_known_gap="persistent 0.7 GiB not counted")]
    assert any("memory known gap but now within" in f for f in gate(healed, summarize(healed), BANDS).failures)
    time_gap = ok + [RunResult(**{**_memory_result("c", -0.088).model_dump(), "known_gap": "a time gap"})]
    assert not gate(time_gap, summarize(time_gap), BANDS).ok  # a time known gap does not excuse memory


def test_validate_measured_cli_json_and_file(cli, tmp_path):
    path = _write(tmp_path, [RUN])
    code, out, err = cli("validate", "--measured", str(path), "--json")
    r = json.loads(out)
    assert r["measured"]["runs"][0]["id"] == "qwen-b200-16" and r["measured"]["runs"][0]["error"] is not None
    assert code in (0, 1)  # 1 when this synthetic run falls outside the band
    code, out, err = cli("validate", "--measured", str(tmp_path / "missing.json"))
    assert code == 2 and "--measured" in err and len(err.strip().splitlines()) == 1


def test_predict_uses_the_run_batch():
    run = MeasuredRun.model_validate({**RUN, "micro_batch": None, "global_batch": 32})
    request, _ = express(run)
    assert request.limits.global_batch == 32 and request.limits.micro_batch is None  # the solver picks M, G, b
    result = predict(run)
    assert result.expressible, result.reason
    report = make_plan(resolve_model("qwen3-30b-a3b"), resolve_hardware("b200"), request)
    p = report.parallelism
    assert p.data_parallel * p.micro_batches * report.plan.tiles * report.plan.tile_batch == 32  # N = DP x M x G x b


def test_readme_accuracy_block_is_current():
    """The README's measured-runs tables are what tools/accuracy.py writes from the library today
    (regenerate with `python tools/accuracy.py` when a number moves)."""
    tool = load_script("tools/accuracy.py", "accuracy_tool")
    readme = tool.README.read_text(encoding="utf-8")
    assert f"{tool.BEGIN}\n{tool.markdown()}\n{tool.END}" in readme
    assert f"{tool.POINTS_BEGIN}\n{tool.points_markdown()}\n{tool.POINTS_END}" in readme
    assert f"{tool.WHATIF_BEGIN}\n{tool.whatif_markdown()}\n{tool.WHATIF_END}" in readme


def test_a_memory_known_gap_does_not_excuse_time_and_both_gaps_excuse_each_their_own():
    """review6: the two gaps are independent: a memory known gap leaves the time band in force; a run carrying both
    is exempt from both bands, and each stated gap that now passes fails on its own."""
    ok = [_memory_result("a", 0.01), _memory_result("b", -0.02)]

    def run(error, memory_error, known_gap="", memory_known_gap=""):
        base = _memory_result("c", memory_error, memory_known_gap).model_dump()
        return ok + [RunResult(**{**base, "error": error, "known_gap": known_gap})]

    slow = run(0.40, -0.088, memory_known_gap="persistent 0.7 GiB")
    assert any(f.startswith("c: error +40.0%") for f in gate(slow, summarize(slow), BANDS).failures)
    both = run(0.40, -0.088, known_gap="a time gap", memory_known_gap="persistent 0.7 GiB")
    assert gate(both, summarize(both), BANDS).ok
    healed = run(0.10, -0.088, known_gap="a time gap", memory_known_gap="persistent 0.7 GiB")
    assert [f for f in gate(healed, summarize(healed), BANDS).failures] == ["c: marked a known gap but now within ±25%"]


@pytest.mark.parametrize("field, role, measured, fragment", [
    ("memory_known_gap", "check", {"tokens_per_s_per_device": 100.0}, "a run that measures no peak memory"),
    ("known_gap", "check", {"peak_alloc_gib": 10.0}, "a run that measures no time"),
    ("memory_known_gap", "fit", {"peak_alloc_gib": 10.0}, "a fit run"),
    ("known_gap", "fit", {"step_time_s": 1.0}, "a fit run"),
])
def test_a_known_gap_that_excuses_nothing_is_refused(field, role, measured, fragment):
    """review6: the gate reads a gap only on a check run with the measured number it excuses (gate, memory_gate);
    elsewhere it excused nothing and was accepted silently."""
    data = {**RUN, "role": role, "measured": measured, field: "a stated mechanism"}
    with pytest.raises(ValidationError, match=fragment):
        MeasuredRun.model_validate(data)
    step = 256 * 4096 / (100.0 * 16)  # hostile40: the step of RUN's 100 tokens/s per device (the two agree)
    MeasuredRun.model_validate({**data, "role": "check", "measured": {**measured, "step_time_s": step,
                                                                         "peak_alloc_gib": 10.0}})
