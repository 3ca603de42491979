"""tools/mpt_micro_batch_excess.py (docs/runs.md 'mpt5') compares each micro-batch-2 llm-foundry row with twins of
the same model family and GPU at a larger micro-batch; a pair that is not that would make its table meaningless."""
from __future__ import annotations

import json

from btacalc.paths import package_data
from tests.loading import load_script


def _tool():
    return load_script("tools/mpt_micro_batch_excess.py")


def test_pairs_are_micro_batch_two_against_larger_twins_on_the_same_gpu():
    tool = _tool()
    runs = {r["id"]: r for r in json.loads(package_data("measured_runs.json").read_text())["runs"]}
    for row, twins in tool.PAIRS.items():
        run = runs[row + tool.SUFFIX]
        assert run["micro_batch"] == 2 and run["recipe"]["fsdp_impl"] == "torch"
        for twin in twins:
            other = runs[twin + tool.SUFFIX]
            assert other["hw"] == run["hw"] and other["micro_batch"] > run["micro_batch"]
            assert other["recompute"] == run["recompute"]  # the per-token offset of the same recompute mode
            assert other.get("recipe", {}).get("checkpoint_early_stop") == run["recipe"].get("checkpoint_early_stop")
