"""A plan's expected error (planning/expected_error.py): the leave-one-model-family-out errors of the measured
runs most like it, the narrowest group of at least MIN_RUNS runs. The group rule is checked on a synthetic set
whose answer is arithmetic; the shipped data against the cross-validation that makes it (slow) and against the
measured runs file, counted independently."""

from __future__ import annotations

import json

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.config.precision import recipe
from btacalc.config.presets import resolve_model
from btacalc.paths import package_data
from btacalc.planning.expected_error import (MIN_RUNS, ExpectedErrorData, HeldOutRun, PlanKind, expected_error,
                                             plan_kind, shipped)
from support import with_calibration


def _row(i: int, family, device: str, moe: bool, low: bool, error: float) -> HeldOutRun:
    return HeldOutRun(id=f"r{i}", hw="x", calibration_family=family, device=device, moe=moe, low_precision=low,
                      error=error)


HOPPER = PlanKind(calibration_family="gpu-hopper", family_profiles=["h100", "h200", "h100-96gb"], device="gpu", moe=True,
                  low_precision=False)


def test_the_narrowest_group_with_enough_runs_is_reported_with_its_arithmetic():
    """Five Hopper MoE 16-bit runs at +10, -20, +30, +40, +0% (and others that must not count): mean |error|
    (10 + 20 + 30 + 40 + 0) / 5 = 20%, median 20%, max 40%, signed mean (10 - 20 + 30 + 40 + 0) / 5 = +12%."""
    errors = [0.10, -0.20, 0.30, 0.40, 0.0]
    rows = [_row(i, "gpu-hopper", "gpu", True, False, e) for i, e in enumerate(errors)]
    rows += [_row(10, "gpu-hopper", "gpu", True, True, 5.0), _row(11, "gpu-hopper", "gpu", False, False, 5.0),
             _row(12, "gpu-blackwell", "gpu", True, False, 5.0), _row(13, "wse", "wse", True, False, 5.0)]
    got = expected_error(HOPPER, ExpectedErrorData(source="s", runs=rows))
    assert got is not None and MIN_RUNS == 5
    assert got.basis == "gpu-hopper (h100, h200, h100-96gb), MoE without the EP overlap, 16-bit" and got.runs == 5
    assert got.narrower == ""
    assert got.mean_abs_error == pytest.approx(0.20) and got.max_abs_error == pytest.approx(0.40)
    assert got.median_abs_error == pytest.approx(0.20)  # |errors| sorted: 0, 0.1, 0.2, 0.3, 0.4
    assert got.mean_error == pytest.approx(0.12)


def test_a_group_under_min_runs_gives_way_to_the_next_and_says_so():
    """Four Hopper MoE 16-bit runs (one short) and one Hopper MoE FP8 run: the family's MoE group holds five,
    |errors| 0.1 x 4 and 0.6, mean (0.4 + 0.6) / 5 = 20%, median 10%; the narrower group is named with its count."""
    rows = [_row(i, "gpu-hopper", "gpu", True, False, 0.1) for i in range(4)]
    rows += [_row(9, "gpu-hopper", "gpu", True, True, -0.6)]
    got = expected_error(HOPPER, ExpectedErrorData(source="s", runs=rows))
    assert got is not None and got.basis == "gpu-hopper (h100, h200, h100-96gb), MoE without the EP overlap"
    assert got.runs == 5
    assert got.mean_abs_error == pytest.approx(0.2) and got.mean_error == pytest.approx((0.4 - 0.6) / 5)
    assert got.median_abs_error == pytest.approx(0.1)  # 0.1, 0.1, 0.1, 0.1, 0.6
    assert got.narrower == "gpu-hopper (h100, h200, h100-96gb), MoE without the EP overlap, 16-bit: 4 runs"


def test_an_moe_plan_is_matched_on_the_ep_overlap_first():
    """Five Hopper MoE 16-bit runs with the EP overlap at +20% each and five without at -10% each: a plan with the
    overlap reports the first five (mean +20%), one without the other five (mean -10%); with four overlapped runs
    the overlapped group of either precision is taken (the four and one FP8 overlapped run at +70%: mean
    (4 x 0.2 + 0.7) / 5 = 30%), never the runs without the overlap."""
    def run(i: int, low: bool, overlap: bool, error: float) -> HeldOutRun:
        return _row(i, "gpu-hopper", "gpu", True, low, error).model_copy(update={"ep_overlap": overlap})
    rows = [run(i, False, True, 0.2) for i in range(5)] + [run(10 + i, False, False, -0.1) for i in range(5)]
    with_it = expected_error(HOPPER.model_copy(update={"ep_overlap": True}), ExpectedErrorData(source="s", runs=rows))
    without = expected_error(HOPPER, ExpectedErrorData(source="s", runs=rows))
    assert with_it is not None and with_it.runs == 5 and with_it.mean_error == pytest.approx(0.2)
    assert with_it.basis == "gpu-hopper (h100, h200, h100-96gb), MoE with the EP overlap, 16-bit"
    assert without is not None and without.runs == 5 and without.mean_error == pytest.approx(-0.1)
    fewer = rows[1:] + [run(20, True, True, 0.7)]
    got = expected_error(HOPPER.model_copy(update={"ep_overlap": True}), ExpectedErrorData(source="s", runs=fewer))
    assert got is not None and got.basis == "gpu-hopper (h100, h200, h100-96gb), MoE with the EP overlap"
    assert got.runs == 5 and got.mean_error == pytest.approx((4 * 0.2 + 0.7) / 5)
    assert got.narrower == "gpu-hopper (h100, h200, h100-96gb), MoE with the EP overlap, 16-bit: 4 runs"


def test_a_profile_outside_every_family_starts_at_its_kind_of_device():
    """No calibration family (a profile file): the device's MoE runs of every family (one run each of three
    families and two of a fourth = 5), then all its runs; too few anywhere: no expected error at all."""
    rows = [_row(i, f, "gpu", True, i % 2 == 0, 0.1 * (i + 1)) for i, f in
            enumerate(["gpu-ampere", "gpu-hopper", "gpu-blackwell", "x", "x"])]
    kind = PlanKind(calibration_family=None, device="gpu", moe=True, low_precision=False)
    got = expected_error(kind, ExpectedErrorData(source="s", runs=rows))
    assert got is not None and got.basis == "GPUs, MoE" and got.runs == 5 and got.narrower == ""
    assert got.mean_abs_error == pytest.approx((0.1 + 0.2 + 0.3 + 0.4 + 0.5) / 5)
    wafer = PlanKind(calibration_family=None, device="wse", moe=False, low_precision=False)
    assert expected_error(wafer, ExpectedErrorData(source="s", runs=rows)) is None


def test_a_built_in_profile_is_in_its_family_only_unchanged():
    h100 = resolve_hardware("h100")
    kind = plan_kind(h100, moe=True, low_precision=False)
    assert kind.calibration_family == "gpu-hopper" and kind.family_profiles == ["h100", "h200", "h100-96gb"]
    changed = with_calibration(h100, compute_efficiency=h100.calibration.compute_efficiency.model_copy(
        update={"value": 0.5}))
    assert plan_kind(changed, moe=True, low_precision=False).calibration_family is None
    assert plan_kind(resolve_hardware("wse3"), moe=True, low_precision=False).device == "wse"


def _states_ep_overlap(run: dict) -> bool:
    """Whether a measured run says it ran Megatron's EP overlap: its recipe's overlaps, or its launch's flag."""
    if run.get("megatron_args"):
        return "--overlap-moe-expert-parallel-comm" in run["megatron_args"].split()
    return bool(((run.get("recipe") or {}).get("overlaps") or {}).get("all_to_all"))


def _expressible_ids(hw_names: set[str], moe: bool, low: bool, overlap: bool | None = None) -> set[str]:
    """The measured runs file's runs on `hw_names`, by model kind and precision (and, given, the EP overlap), read
    from the file itself."""
    runs = json.loads(package_data("measured_runs.json").read_text(encoding="utf-8"))["runs"]
    return {r["id"] for r in runs if r["hw"] in hw_names and resolve_model(r["model"]).is_moe == moe
            and recipe(r.get("precision", "bf16")).low == low
            and (overlap is None or _states_ep_overlap(r) == overlap)}


def test_each_held_out_runs_ep_overlap_is_what_the_run_states():
    """expected_error.json's flag is the plan's; every shipped run's plan runs the overlap exactly when the run's
    recipe or launch asks for it (none is refused by Megatron's conditions)."""
    runs = {r["id"]: r for r in json.loads(package_data("measured_runs.json").read_text(encoding="utf-8"))["runs"]}
    flags = {r.id: r.ep_overlap for r in shipped().runs}
    assert flags == {i: _states_ep_overlap(runs[i]) for i in flags}
    assert sum(flags.values()) >= MIN_RUNS


def test_plan_json_reports_the_hopper_moe_runs_it_was_measured_on(cli):
    """`plan --json` on 16 H100s for Qwen3-30B-A3B in BF16: the group is the Hopper (h100, h200, h100-96gb) MoE
    16-bit runs, as many as the measured runs file holds of them (less any the cross-validation cannot express)."""
    code, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--json")
    assert code == 0
    got = json.loads(out)["throughput"]["expected_error"]
    want = _expressible_ids({"h100", "h200"}, moe=True, low=False, overlap=False)
    held = {r.id: r.error for r in shipped().runs}
    assert got["basis"] == "gpu-hopper (h100, h200, h100-96gb), MoE without the EP overlap, 16-bit"
    assert len(want) >= got["runs"] == len(want & set(held)) >= MIN_RUNS
    assert got["mean_abs_error"] == pytest.approx(sum(abs(held[i]) for i in want & set(held)) / got["runs"])


def test_an_overlapped_plan_reports_the_overlapped_hopper_moe_runs(cli):
    """The same plan with --overlap-a2a (EP 16): the Hopper MoE runs that state the overlap, 16-bit if at least
    MIN_RUNS of them, else of either precision; their held-out errors' mean."""
    code, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16",
                       "--overlap-a2a", "--json")
    assert code == 0
    got = json.loads(out)["throughput"]["expected_error"]
    held = {r.id: r.error for r in shipped().runs}
    sixteen = _expressible_ids({"h100", "h200"}, moe=True, low=False, overlap=True) & set(held)
    either = sixteen | (_expressible_ids({"h100", "h200"}, moe=True, low=True, overlap=True) & set(held))
    want = sixteen if len(sixteen) >= MIN_RUNS else either
    assert got["basis"].startswith("gpu-hopper (h100, h200, h100-96gb), MoE with the EP overlap")
    assert got["runs"] == len(want) >= MIN_RUNS
    assert got["mean_error"] == pytest.approx(sum(held[i] for i in want) / len(want))


def test_the_console_says_the_expected_error_and_its_basis(cli):
    code, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3")
    assert code == 0
    text = " ".join(out.split())
    wafers = [r for r in shipped().runs if r.device == "wse"]
    assert f"on the {len(wafers)} measured runs most like it (wafers, dense and MoE; narrower groups hold fewer than " \
           f"{MIN_RUNS} runs)" in text  # no MoE run on a wafer is in the measured set


def test_the_console_line_says_it_is_the_tokens_per_s_error_and_what_held_out_means(cli):
    """freshuser16: the line said "Expected error of this step time ... each predicted with its model family held out
    ... on average 15% too fast": a new user could not tell that the error is the tokens/s' (predicted / measured - 1,
    not the step time's), what was held out, or what "too fast" meant. It now says each, with the sign as more or
    fewer tokens/s than measured, from the same numbers as plan --json."""
    code, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16")
    assert code == 0
    text = " ".join(out.split())
    code, raw, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--json")
    x = json.loads(raw)["throughput"]["expected_error"]
    more = "more" if x["mean_error"] > 0 else "fewer"
    assert f"Expected error of this plan's tokens/s (predicted / measured - 1) on the {x['runs']} measured runs most " \
           f"like it ({x['basis']}), each predicted with factors fitted without its model family: typical (median) " \
           f"|error| {100 * x['median_abs_error']:.0f}%, mean {100 * x['mean_abs_error']:.0f}%, max " \
           f"{100 * x['max_abs_error']:.0f}%; on average btacalc predicted {100 * abs(x['mean_error']):.0f}% {more} " \
           f"tokens/s than measured" in text
    assert "step time:" not in text and "too fast" not in text


def test_the_sign_reads_fewer_tokens_per_s_when_btacalc_is_slow():
    """A group whose signed mean is negative: btacalc predicted fewer tokens/s than measured."""
    from btacalc.output.tables import expected_error_text

    rows = [_row(i, "gpu-hopper", "gpu", True, False, -0.1) for i in range(5)]
    got = expected_error(HOPPER, ExpectedErrorData(source="s", runs=rows))
    assert got is not None
    assert "on average btacalc predicted 10% fewer tokens/s than measured" in expected_error_text(got)


def test_the_shipped_expected_errors_are_the_cross_validations_of_today():
    """btacalc/data/expected_error.json is what `python tools/accuracy.py` writes from `validate --cross-validate`
    now (regenerate it when a prediction moves)."""
    from btacalc.planning.crossval import held_out_errors

    fresh, ship = held_out_errors(), shipped()
    assert [r.id for r in fresh.runs] == [r.id for r in ship.runs]
    for a, b in zip(fresh.runs, ship.runs):
        assert a.model_dump(exclude={"error"}) == b.model_dump(exclude={"error"})
        assert a.error == pytest.approx(b.error, rel=1e-9, abs=1e-12)


def test_compare_rows_carry_each_devices_expected_error(cli):
    """`compare --json`: each row's expected_abs_error and basis are those of its device's group for a 16-bit MoE
    plan (the wafer row: all wafer runs; the GPU row: Hopper's MoE 16-bit runs), and the console prints them."""
    code, out, _ = cli("compare", "--hw", "wse3,h100", "--json")
    assert code == 0
    rows = {r["hardware"]: r for r in json.loads(out)["rows"]}
    for hw in ("wse3", "h100"):
        row = rows[hw]
        want = expected_error(plan_kind(resolve_hardware(hw), moe=True, low_precision=False))
        assert row["expected_median_abs_error"] == pytest.approx(want.median_abs_error, rel=1e-12)
        assert row["expected_error_basis"] == want.basis
    code, text, _ = cli("compare", "--hw", "wse3,h100")
    assert code == 0 and f"±{100 * rows['wse3']['expected_median_abs_error']:.0f}%" in text


@pytest.mark.parametrize("text", ["{not json", '{"source": "s", "runs": [{"id": "x"}]}'])
def test_a_broken_shipped_file_is_an_internal_data_error_in_one_line(cli, tmp_path, monkeypatch, text):
    """A damaged btacalc/data/expected_error.json is btacalc's bug, not the user's input: one line, exit 3."""
    import btacalc.planning.expected_error as module

    (tmp_path / module.EXPECTED_ERROR_FILE).write_text(text)
    monkeypatch.setattr(module, "package_data", lambda name: tmp_path / name)
    module.shipped.cache_clear()
    try:
        code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3")
    finally:
        module.shipped.cache_clear()
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("btacalc: internal data error (please report): btacalc/data/expected_error.json: ")


def test_compare_json_descriptions_name_its_keys():
    """freshuser16: compare's schema described expected_error_basis as "the group of measured runs expected_abs_error
    is over", a key compare --json does not have (it is expected_median_abs_error)."""
    import re

    from btacalc.planning.compare import CompareRow

    described = " ".join(f.description or "" for f in CompareRow.model_fields.values())
    named = set(re.findall(r"(?<![.\w])expected_\w+", described))  # not plan's throughput.expected_error
    assert named and named <= set(CompareRow.model_fields)


def test_compare_caption_says_what_the_plus_minus_is(cli):
    """freshuser16: the ± under compare's tokens/s is the tokens/s' typical |predicted / measured - 1|, its runs
    predicted without their model family in the fit."""
    code, out, _ = cli("compare", "--hw", "wse3,h100")
    assert code == 0
    text = " ".join(out.split())
    assert "± under it: the typical (median) |predicted / measured - 1| of tokens/s on the measured runs most like " \
           "the row, each predicted with factors fitted without its model family" in text


def test_a_sweep_table_says_the_expected_error_once_or_that_its_points_differ(cli):
    """A sweep's small table: one line when every point is of one kind (its group's numbers, as plan says them), and
    when --vary precision makes two kinds, that they differ and where each point's is."""
    code, out, _ = cli("sweep", "--hw", "h100", "--devices", "8", "--vary", "experts=8,16")
    assert code == 0
    text = " ".join(out.split())
    want = expected_error(plan_kind(resolve_hardware("h100"), moe=True, low_precision=False))
    assert (f"Expected error of each point's tokens/s (predicted / measured - 1) on the {want.runs} measured runs most "
            f"like it ({want.basis})") in text
    assert f"typical (median) |error| {100 * want.median_abs_error:.0f}%" in text
    code, out, _ = cli("sweep", "--hw", "h100", "--devices", "8", "--vary", "precision=bf16,fp8", "--vary", "experts=8")
    text = " ".join(out.split())
    assert code == 0 and "Expected error of tokens/s: the points are of 2 kinds" in text
    assert "MoE without the EP overlap, 16-bit;" in text
    assert "MoE without the EP overlap, low precision)" in text or "MoE without the EP overlap)" in text
