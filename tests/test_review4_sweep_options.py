"""review4: `sweep` and `compare` take --precision and the recipe's other options, so they take the two options of
this round that shape a low-precision or recomputed run as well (--bf16-layers-at-start/--bf16-layers-at-end,
--checkpoint-early-stop), and a sweep point or compare row is the plan of the same options: before, both refused them
as unknown options, so neither could plan Megatron-Bridge's current-scaling default (1 + 1 layers in BF16) or
llm-foundry's torch >= 2.1 recompute."""

from __future__ import annotations

import json

import pytest

COMMON = ("--model", "llama-3-8b", "--hw", "b200", "--devices", "8", "--precision", "fp8-current")


def _sweep_point(cli, *extra: str) -> dict:
    code, out, err = cli("sweep", *COMMON, *extra, "--vary", "global-batch=64", "--json")
    assert code == 0, err
    (point,) = json.loads(out)["points"]
    return point


def _plan(cli, *extra: str) -> dict:
    code, out, err = cli("plan", *COMMON, *extra, "--global-batch", "64", "--json")
    assert code in (0, 1), err
    return json.loads(out)


@pytest.mark.parametrize("extra", [("--bf16-layers-at-start", "1", "--bf16-layers-at-end", "1"),
                                   ("--recompute", "full", "--checkpoint-early-stop")], ids=["bf16ends", "early-stop"])
def test_a_sweep_point_is_the_plan_with_the_same_option(cli, extra):
    point, plan = _sweep_point(cli, *extra), _plan(cli, *extra)
    base = _sweep_point(cli, *(a for a in extra if a in ("--recompute", "full")))
    assert point["plan"]["fits"] and plan["plan"]["fits"]
    assert point["throughput"]["tokens_per_s"] == pytest.approx(plan["throughput"]["tokens_per_s"], rel=1e-12)
    assert point["throughput"]["tokens_per_s"] != pytest.approx(base["throughput"]["tokens_per_s"], rel=1e-6)


def test_a_swept_bf16_point_with_bf16_layers_is_an_invalid_point(cli):
    code, out, err = cli("sweep", "--model", "llama-3-8b", "--hw", "b200", "--devices", "8", "--bf16-layers-at-start",
                         "1", "--vary", "precision=bf16,fp8-current", "--vary", "global-batch=64", "--json")
    assert code == 0, err
    assert "invalid point precision=bf16" in err and "need a low --precision" in err
    bf16, fp8 = json.loads(out)["points"]
    assert bf16["params"]["precision"] == "bf16" and "need a low --precision" in bf16["error"]
    assert fp8["error"] is None and fp8["throughput"]["tokens_per_s"] > 0


# compare: the low-precision GPU rows take --bf16-layers-*, a 16-bit row is planned without them (as
# --no-rht-cast-fusion goes to the rows whose recipe has the cast), every GPU row takes --checkpoint-early-stop, a
# wafer row neither; with no row that can take an option, compare refuses it (it was not an option of compare)
def _compare_rows(cli, *extra: str) -> dict:
    code, out, err = cli("compare", "--model", "llama-3-8b", "--hw", "b200", "--devices", "8", "--global-batch", "64",
                         *extra, "--json")
    assert code == 0, err
    return {r["precision"]: r for r in json.loads(out)["rows"]}


def test_compare_rows_are_the_plans_with_the_options_each_row_takes(cli):
    ends = ("--bf16-layers-at-start", "1", "--bf16-layers-at-end", "1")
    rows = _compare_rows(cli, "--precision", "bf16,fp8-current", *ends)
    want = {"fp8-current": _plan(cli, *ends), "bf16": _plan_bf16(cli)}
    for precision, plan in want.items():
        assert rows[precision]["tokens_per_s"] == pytest.approx(plan["throughput"]["tokens_per_s"], rel=1e-12)
    without = _compare_rows(cli, "--precision", "bf16,fp8-current")
    assert rows["bf16"]["tokens_per_s"] == pytest.approx(without["bf16"]["tokens_per_s"], rel=1e-12)
    assert rows["fp8-current"]["tokens_per_s"] != pytest.approx(without["fp8-current"]["tokens_per_s"], rel=1e-6)


def _plan_bf16(cli) -> dict:
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "b200", "--devices", "8", "--global-batch", "64",
                         "--json")
    assert code in (0, 1), err
    return json.loads(out)


def test_compare_with_early_stop_beside_a_wafer_row(cli):
    code, out, err = cli("compare", "--model", "llama-3-8b", "--hw", "wse3,b200", "--devices", "8", "--global-batch",
                         "64", "--recompute", "full", "--checkpoint-early-stop", "--json")
    assert code == 0, err
    rows = {r["hardware"]: r for r in json.loads(out)["rows"]}
    gpu = json.loads(cli("plan", "--model", "llama-3-8b", "--hw", "b200", "--devices", "8", "--global-batch", "64",
                         "--recompute", "full", "--checkpoint-early-stop", "--json")[1])
    assert gpu["inputs"]["checkpoint_early_stop"]
    assert rows["b200"]["tokens_per_s"] == pytest.approx(gpu["throughput"]["tokens_per_s"], rel=1e-12)
    wafer = json.loads(cli("plan", "--model", "llama-3-8b", "--hw", "wse3", "--global-batch", "64", "--recompute",
                           "full", "--json")[1])
    assert rows["wse3"]["tokens_per_s"] == pytest.approx(wafer["throughput"]["tokens_per_s"], rel=1e-12)
