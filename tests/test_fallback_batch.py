"""A plan that does not fit reports the batch the user fixed (freshuser17 left it: `--global-batch 128 --micro-batch 2`
on 8 GPUs that cannot hold one sequence was reported, and emitted, as micro-batch 1 and global batch 64).

--micro-batch mb with --global-batch N on DP ranks becomes M = N / (DP x mb) micro-batches (config/execution.py);
where nothing fits the solver reports its fallback shape, whose G*b must then be N / (DP x M) = mb."""

from __future__ import annotations

import json


def _plan(cli, *extra):
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--precision",
                         "fp8-blockwise", *extra, "--json")
    assert code == 1, err  # does not fit
    return json.loads(out)


def test_the_users_micro_and_global_batch_stay_when_nothing_fits(cli):
    plan = _plan(cli, "--global-batch", "128", "--micro-batch", "2")
    inputs = plan["inputs"]
    assert (inputs["global_batch"], inputs["micro_batch"]) == (128, 2)  # DP 8 x M 8 x 2
    one = _plan(cli, "--global-batch", "128", "--micro-batch", "1")
    assert (one["inputs"]["global_batch"], one["inputs"]["micro_batch"]) == (128, 1)  # DP 8 x M 16 x 1
    # twice the micro-batch holds twice the activations of one micro-batch in flight (no pipeline: one at a time)
    two_acts = plan["memory_bytes"]["stored_activations"]
    one_acts = one["memory_bytes"]["stored_activations"]
    assert two_acts == 2 * one_acts


def test_the_emitted_launch_says_the_users_batch(cli):
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--precision",
                         "fp8-blockwise", "--global-batch", "128", "--micro-batch", "2", "--emit", "megatron")
    assert "--micro-batch-size 2 " in out and "--global-batch-size 128 " in out


def _wafer(cli, *extra):
    code, out, err = cli("plan", "--model", "llama-3.1-405b", "--hw", "wse3", "--seq", "131072", "--global-batch", "64",
                         "--grad-accum", "2", *extra, "--json")
    assert code == 1, err  # not even one sequence fits
    plan = json.loads(out)["plan"]
    return plan["tiles"], plan["tile_batch"], plan["micro_batches"], plan["step_batch"]


def test_a_wafer_that_does_not_fit_keeps_n_with_m_and_tile_batch_fixed(cli):
    # review18: N, M and b fixed fix G = N / (M x b) too (config/execution.py); it was reported as G 1, step batch 8
    assert _wafer(cli, "--tile-batch", "4") == (64 // (2 * 4), 4, 2, 64)
    assert _wafer(cli, "--tiles", "4") == (4, 64 // (2 * 4), 2, 64)  # the lead's case: b = N / (M x G)
