"""hostile28: a campaign against the reliability rules (bad input is one line and exit 2; options parsed but ignored
are refused; machine-readable output is the same whatever the terminal), each defect it found as a test."""

from __future__ import annotations

import json

import pytest

MOE_PP2 = ["plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "16", "--pp", "2", "--ep", "8",
           "--global-batch", "64", "--micro-batch", "1"]
# Megatron-LM's tunable_overlap shape over PP 4 without virtual stages (tests/test_pipesched.py has it with VP 3)
GROUP_LAUNCH = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
                "--max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 40 --bf16 "
                "--pipeline-model-parallel-size 4 --microbatch-group-size-per-virtual-pipeline-stage 5")


@pytest.mark.parametrize("pp", ["2", "1"])
@pytest.mark.parametrize("group", ["4", "1000"])
def test_a_microbatch_group_without_virtual_stages_is_refused(cli, pp, group):
    """--microbatch-group-size without --vp was planned as without it, exit 0, whatever N (1000 > M too): the group
    is the interleaved schedule's, which a plan without virtual stages does not run."""
    args = [pp if prev == "--pp" else a for prev, a in zip([""] + MOE_PP2, MOE_PP2)]
    code, out, err = cli(*args, "--microbatch-group-size", group)
    assert code == 2 and err.count("\n") == 1 and "--microbatch-group-size" in err and "--vp > 1" in err, err


def test_a_microbatch_group_with_virtual_stages_is_still_planned(cli):
    code, out, err = cli(*MOE_PP2, "--vp", "2", "--microbatch-group-size", "4", "--json")
    assert code in (0, 1), err
    assert json.loads(out)["parallelism"]["microbatch_group"] == 4


def test_a_launchs_microbatch_group_without_virtual_stages_is_listed_ignored(cli, tmp_path):
    """Megatron runs such a launch and its schedule never reads the group: the launch is planned, the flag is listed
    among those btacalc ignored (it was carried into the plan unlisted, and written back by --emit)."""
    launch = tmp_path / "launch.txt"
    launch.write_text(GROUP_LAUNCH)
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", str(launch), "--json")
    assert code == 0, err
    flags = [i["flag"] for i in json.loads(out)["imported"]["ignored"]]
    assert "--microbatch-group-size-per-virtual-pipeline-stage" in flags
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", str(launch), "--emit", "megatron")
    assert code == 0 and "microbatch-group" not in out, err


def test_the_search_gives_the_group_to_its_interleaved_candidates(cli):
    """With a group given, --search refused nothing and applies the group to its VP > 1 candidates; with --vp 1 the
    group changes nothing and is refused."""
    search = ["plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "32", "--search",
              "--microbatch-group-size", "4"]
    code, out, err = cli(*search)
    assert code == 0, err
    code, out, err = cli(*search, "--vp", "1")
    assert code == 2 and err.count("\n") == 1 and "--microbatch-group-size" in err, err
