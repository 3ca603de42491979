"""tidy1: run options that a profile cannot use are refused in one line, every command that plans takes the run
options plan takes, and the plan header and compare rows show the non-default run options that change the numbers
(from the report's `inputs`, the one place they are recorded)."""

from __future__ import annotations

import json

import pytest


def _json_of(cli, *args: str) -> dict:
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def _one_line_error(cli, *args: str) -> str:
    code, out, err = cli(*args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("option", ["--deepep", "--no-rht-cast-fusion"])
def test_a_wafer_plan_refuses_a_gpu_kernel_option(cli, option):
    """DeepEP (a GPU expert-parallel dispatcher) and NVFP4's unfused casts (TransformerEngine kernels) have no
    wafer counterpart: a wafer plan that was given one used to be planned as without it."""
    err = _one_line_error(cli, "plan", "-m", "mixtral-8x7b", "--hw", "wse3", option)
    assert option in err and "wafer" in err


def test_a_wafer_sweep_refuses_the_unfused_casts_with_the_flag(cli):
    err = _one_line_error(cli, "sweep", "-m", "llama-3-8b", "--hw", "wse3", "--vary", "seq=2048,4096", "--quiet",
                          "--no-rht-cast-fusion")
    assert "--no-rht-cast-fusion" in err and "wafer-scale run has none" in err


NVFP4 = ["-m", "llama-3-8b", "--devices", "8", "--precision", "nvfp4", "--seq", "4096", "--recompute", "full"]


def test_sweep_and_compare_take_no_rht_cast_fusion_as_plan_does(cli):
    """--no-rht-cast-fusion reached plan only: a swept point and compare's GPU row now give the step time plan
    gives with it (one more read of every cast activation: longer than the fused path), and compare's wafer row,
    which has no TransformerEngine casts, is planned without it."""
    plan = {f: _json_of(cli, "plan", "--hw", "b200", *NVFP4, "--global-batch", "64", *f)["throughput"]["step_time_s"]
            for f in ((), ("--no-rht-cast-fusion",))}
    assert plan[("--no-rht-cast-fusion",)] > plan[()]
    point = _json_of(cli, "sweep", "--hw", "b200", *NVFP4, "--vary", "global-batch=64", "--quiet",
                     "--no-rht-cast-fusion")["points"][0]
    assert point["throughput"]["step_time_s"] == pytest.approx(plan[("--no-rht-cast-fusion",)], rel=1e-12)
    rows = _json_of(cli, "compare", "--hw", "b200,wse3", *NVFP4[:4], "--precision", "bf16,nvfp4", *NVFP4[6:],
                    "--global-batch", "64", "--quiet", "--no-rht-cast-fusion")["rows"]
    by_row = {(r["hardware"], r["precision"]): r for r in rows}
    assert by_row[("b200", "nvfp4")]["step_time_s"] == pytest.approx(plan[("--no-rht-cast-fusion",)], rel=1e-12)
    assert ("wse3", "bf16") in by_row


def test_a_swept_points_error_names_the_flags_the_user_typed(cli):
    """A point the grid makes invalid (FP8 attention under BF16) is reported with the command line's flags, on
    stderr and in the point's JSON error, not with the library's parameter names (fp8_attention, precision)."""
    code, out, err = cli("sweep", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--fp8-attention",
                         "--vary", "precision=bf16,fp8", "--quiet", "--json")
    assert code == 0, err
    bad = [p for p in json.loads(out)["points"] if p["error"]]
    assert [p["params"]["precision"] for p in bad] == ["bf16"]
    for text in (bad[0]["error"], err):
        assert "--fp8-attention" in text and "--precision" in text
        assert "fp8_attention" not in text


OFF_DEFAULT = ("--no-rht-cast-fusion", "--no-gradient-accumulation-fusion", "--fp8-param-gather")


def test_the_plan_header_shows_every_run_option_that_changes_the_numbers(cli):
    """The header showed FP8 attention but not the unfused weight-gradient add nor NVFP4's unfused casts: each
    option the report's inputs record away from its default is on the "run options" row, with its flag."""
    args = ["plan", "--hw", "b200", *NVFP4, "--global-batch", "64", *OFF_DEFAULT]
    code, out, err = cli(*args)
    assert code == 0, err
    text = " ".join(out.split())
    for option in OFF_DEFAULT:
        assert f"({option})" in text
    code, out, err = cli("plan", "--hw", "b200", *NVFP4, "--global-batch", "64")
    assert code == 0 and "run options" not in out


def test_the_unfused_rht_casts_are_refused_under_a_recipe_without_the_transform(cli):
    """--no-rht-cast-fusion changes only a recipe that casts through the Hadamard transform (NVFP4): under BF16 it
    was accepted and changed nothing (tidy2: an option parsed but ignored), now it is one line and exit 2, as
    --fp8-param-gather is under BF16 (the same check, config/precision.check_precision, from precision.toml)."""
    base = ("--hw", "b200", "-m", "llama-3-8b", "--devices", "8", "--global-batch", "64")
    for command in (("plan", *base), ("sweep", *base[:6], "--vary", "global-batch=64", "--quiet"),
                    ("compare", *base, "--quiet")):
        err = _one_line_error(cli, *command, "--no-rht-cast-fusion")
        assert "--no-rht-cast-fusion" in err and "nvfp4" in err and "bf16" in err
    err_gather = _one_line_error(cli, "plan", *base, "--fp8-param-gather")
    assert "--fp8-param-gather" in err_gather and "bf16" in err_gather


def test_compare_rows_carry_their_run_options(cli):
    """Each compare row lists, as flags, the run options its plan took away from their defaults (JSON, CSV and the
    table's notes); the wafer row, planned without the GPU kernel options, lists none."""
    args = ["compare", "--hw", "b200,wse3", *NVFP4[:4], "--precision", "bf16,nvfp4", *NVFP4[6:], "--global-batch",
            "64", "--quiet", "--no-rht-cast-fusion", "--no-gradient-accumulation-fusion"]
    rows = {(r["hardware"], r["precision"]): r["run_options"] for r in _json_of(cli, *args)["rows"]}
    assert rows == {("b200", "bf16"): ["--no-gradient-accumulation-fusion"],
                    ("b200", "nvfp4"): ["--no-rht-cast-fusion", "--no-gradient-accumulation-fusion"],
                    ("wse3", "bf16"): []}
    code, out, err = cli(*args)
    assert code == 0, err
    assert "b200 x8 nvfp4: run options --no-rht-cast-fusion --no-gradient-accumulation-fusion" in " ".join(out.split())
    code, out, err = cli(*args, "--csv", "-")
    assert code == 0 and ",--no-rht-cast-fusion --no-gradient-accumulation-fusion," in out


@pytest.mark.parametrize("hw", ["h100", "b200", "wse3"])
def test_compare_checks_the_run_options_the_resolver_resolves(hw):
    """compare worked out the default attention itself (request.attention or the profile's) to check FP8 attention
    before planning a row; it now asks the resolver (resolve_run), whose run options are those of the row's plan."""
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.resolution import resolve_execution, resolve_run
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import load_preset

    model, profile, request = load_preset("llama-3-8b"), resolve_hardware(hw), ExecutionRequest(devices=8)
    assert resolve_run(request, model, profile) == resolve_execution(request, model, profile).run


def test_compare_skips_a_precision_with_the_plans_reason(cli):
    """A (device, precision) pair the device cannot run is skipped with the reason plan refuses it with, in the
    flags the user typed."""
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--fp8-attention")
    assert code == 2 and "--fp8-attention" in err
    plan_reason = err.strip().removeprefix("btacalc: error: ")
    result = _json_of(cli, "compare", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--precision", "bf16,fp8",
                      "--fp8-attention", "--quiet")
    assert [r["precision"] for r in result["rows"]] == ["fp8"]
    assert result["skipped"] == [f"h100 bf16: {plan_reason}"]
