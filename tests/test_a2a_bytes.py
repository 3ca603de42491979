"""freshuser25: the expert all-to-all's `plan --json` row names the bytes of one token call on each link it times
(model/gpu/collectives.py `describe_all_to_all`), so that a cross-node row explains its own time."""

import json
import subprocess
import sys

import pytest


def _a2a_row(*layout):
    cmd = [sys.executable, "-m", "btacalc", "plan", "-m", "qwen3-30b-a3b", "--hw", "h100", *layout, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr  # 1: the plan does not fit, its JSON still written
    plan = json.loads(done.stdout)
    return next(c for c in plan["throughput"]["collectives"] if c["name"] == "expert_all_to_all")


def test_two_nodes_split_by_destination():
    # EP 16 over two DGX H100 nodes of 8: of a rank's dispatched copies 1/16 stay on it, 7/16 go to the other seven
    # GPUs of its node over NVLink and 8/16 to the other node's eight over the network
    row = _a2a_row("-n", "16", "--ep", "16")
    assert row["link"] == "network"
    assert row["nvlink_bytes"] == pytest.approx(row["buffer_bytes"] * 7 / 16)
    assert row["network_bytes"] == pytest.approx(row["buffer_bytes"] * 8 / 16)
    assert row["nvlink_bytes"] + row["network_bytes"] == pytest.approx(row["message_bytes"])


def test_one_node_sends_nothing_across():
    # EP 8 inside one node: 7/8 of the copies over NVLink, none across
    row = _a2a_row("-n", "8", "--ep", "8", "--seq", "256", "--micro-batch", "1", "--global-batch", "64")
    assert row["network_bytes"] == 0
    assert row["nvlink_bytes"] == pytest.approx(row["buffer_bytes"] * 7 / 8)
