"""review33: a second read of the thirty-fourth session's changes. Each test is a finding: it fails without its fix."""

from __future__ import annotations

import json

import pytest

# nccl_ub's NVLS path takes a registered all-gather and reduce-scatter only; an all-reduce keeps the ring (the module
# docstring of btacalc/model/gpu/sm_share.py; NVIDIA/nccl @ 5067397c src/enqueue.cc L2152-2173). Without the
# distributed optimizer (ZeRO 0) Megatron's DDP all-reduces the gradients, so nccl_ub changes nothing there.
LAYOUT = ("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2", "--recompute", "full",
          "--overlap-grad-reduce", "--json")


def _plan(cli, *args: str) -> dict:
    code, out, err = cli(*LAYOUT, *args)
    assert code == 0, err
    return json.loads(out)


def test_nccl_ub_at_zero_0_is_said_to_keep_the_ring(cli):
    """The parallelism line said 'NVLS path: all-gather and reduce-scatter on fewer SMs' at ZeRO 0, where the step
    time is the one without nccl_ub to the last digit (the DP traffic is an all-reduce). It now says the ring is kept
    and why; the claim 'as without it' is checked against the plan without --nccl-ub."""
    on = _plan(cli, "--zero", "0", "--nccl-ub", "--nvls")
    off = _plan(cli, "--zero", "0")
    path = on["parallelism"]["nccl_ub_path"]
    assert path.startswith("ring channels as without it: ZeRO 0"), path
    assert on["throughput"]["step_time_s"] == off["throughput"]["step_time_s"]


def test_nccl_ub_at_zero_1_still_takes_the_nvls_path(cli):
    """The control: with the distributed optimizer the gradients are reduce-scattered and the parameters
    all-gathered, which the NVLS path runs on fewer SMs than the ring, so the same plan is faster."""
    on = _plan(cli, "--zero", "1", "--nccl-ub", "--nvls")
    off = _plan(cli, "--zero", "1")
    assert on["parallelism"]["nccl_ub_path"].startswith("NVLS path")
    ctas = on["parallelism"]["dp_collective_ctas"]
    assert ctas["reduce_scatter"] < ctas["all_reduce"] and ctas["all_gather"] < ctas["all_reduce"]
    assert on["throughput"]["step_time_s"] < off["throughput"]["step_time_s"]


@pytest.mark.parametrize("given, fragment", [
    # llama-3-8b has 32 decoder layers: a first (or last) stage of all 32 leaves 32 - 32 = 0 layers for the other
    # PP - 1 = 3 stages, the last (or the first) among them
    (("--first-stage-layers", "32"), "leave 0 layer(s) for 3 other stage(s) (the last among them)"),
    (("--last-stage-layers", "32"), "leave 0 layer(s) for 3 other stage(s) (the first among them)")])
def test_empty_stage_error_names_the_stages_that_are_left(cli, given, fragment):
    """hostile41's rewording of the 'middle stage(s)' error reached one of its two messages: the one for stages left
    empty still called the last (or first) stage a middle one."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--pp", "4", *given)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert fragment in " ".join(err.split())
