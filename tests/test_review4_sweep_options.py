"""review4: `sweep` takes --precision and the recipe's other options, so it takes the two options of this round that
shape a low-precision or recomputed run as well (--bf16-layers-at-start/--bf16-layers-at-end, --checkpoint-early-stop),
and a sweep point is the plan of the same options: before, sweep refused them as unknown options, so a sweep could
not plan Megatron-Bridge's current-scaling default (1 + 1 layers in BF16) or llm-foundry's torch >= 2.1 recompute."""

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
