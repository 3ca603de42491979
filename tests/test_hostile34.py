"""hostile34: a campaign on whatif's counts, the command line over run files, the Megatron codec, wafer plans and
odd configs and profiles (twenty-seventh session). Each test is a finding: the one-line refusal, or the number the
plan must equal."""

from __future__ import annotations

import json

MOE16 = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16")


def _tokens(cli, *args: str) -> float:
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    return json.loads(out)["throughput"]["tokens_per_s"]


def test_whatif_moves_a_count_of_the_profile_in_whole_numbers(cli):
    # D1: README "What-if trials": "a count moves to whole numbers". The grid of devices_per_node ran 8 x 1.35^i,
    # fractions each refused as "not a valid profile", so the answer was 8,000 (1,000x) where 16 (2x: all 16 GPUs
    # in one NVLink domain) reaches the target. Expected: the smallest whole domain size the plan itself says reaches
    # it, here found by planning each size from today's 8 up with --gpus-per-node (the same number, as plan takes it)
    target = 1.01 * _tokens(cli, *MOE16)
    sizes = range(9, 33)
    first = next(n for n in sizes if _tokens(cli, *MOE16, "--gpus-per-node", str(n)) >= target)
    code, out, err = cli("whatif", *MOE16, "--solve-for", "devices_per_node", "--target", f"tokens_per_s={target}",
                         "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["reached"] and doc["value"] == first == 16
    assert doc["answer"]["metric"] == _tokens(cli, *MOE16, "--gpus-per-node", "16")
    assert all(step["value"] == int(step["value"]) for step in doc["trace"])
    assert not any(step["binding_constraint"].startswith("not a valid") for step in doc["trace"])


def test_whatif_of_the_cores_never_tries_a_fraction_of_a_core(cli):
    code, out, err = cli("whatif", *MOE16, "--solve-for", "chip.cores", "--target", "tokens_per_s=1e9", "--json")
    assert code == 1, err
    doc = json.loads(out)
    assert doc["trace"] and all(step["value"] == int(step["value"]) for step in doc["trace"])
    assert not any(step["binding_constraint"].startswith("not a valid") for step in doc["trace"])
