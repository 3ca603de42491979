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
