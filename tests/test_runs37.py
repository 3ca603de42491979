"""The runs37 check rows (docs/runs.md 'runs37'): each measured figure derived from what its source publishes.

Sources: github.com/mlcommons/training_results_v5.0 @ 0fdc28f0 (Nebius's closed-division Llama 3.1 405B results on
64 and 128 nodes of 8 H200) and github.com/NVIDIA-NeMo/Megatron-Bridge @ 067f987d docs/performance-summary-archive.md
(other releases of three MoE layouts the set holds). The MLPerf rows' step time is the summed
block_start..block_stop time of every block but the first of each result file over the steps those blocks trained
(46,080 samples = 40 steps per block at GBS 1,152); the per-file figures below were read from the logs by hand.
"""

from __future__ import annotations

import json

import pytest

from btacalc.paths import package_data
from btacalc.planning.measured import load_runs, predict

SEQ, GBS = 8192, 1152
MLPERF = {  # run id: (nodes, MINIBS = GA, [(blocks used, steps, ms) for result_1..3])
    "llama-3.1-405b-h200-1024-fp8-mlperf-v50-nebius": (128, 72, [(5, 200, 5087399), (5, 200, 5076657),
                                                                  (5, 200, 5078062)]),
    "llama-3.1-405b-h200-512-fp8-mlperf-v50-nebius": (64, 144, [(5, 200, 10020906), (5, 200, 10017820),
                                                                 (5, 200, 10009136)]),
}
BRIDGE = {  # run id: (table line in docs/performance-summary-archive.md @ 067f987d, release, tokens/s/GPU)
    "qwen3-235b-a22b-h100-256-fp8-current-mb2604-tp2-pp8-vp4-ep32": (357, "26.04", 1686),
    "qwen3-235b-a22b-h100-256-fp8-current-mb260201-tp2-pp8-vp4-ep32": (454, "26.02.01", 1611),
    "qwen3-235b-a22b-h100-256-fp8-current-mb2602-tp2-pp8-vp4-ep32": (540, "26.02", 1633),
    "qwen3-30b-a3b-h100-16-fp8-current-mb2604-ep16": (348, "26.04", 8901),
    "qwen3-30b-a3b-h100-16-fp8-current-mb260401-ep16": (248, "26.04.01", 8960),
    "deepseek-v3-b200-256-mxfp8-mb2602-pp16-ep8": (510, "26.02", 2689),
    "deepseek-v3-b200-256-mxfp8-mb260201-pp16-ep8": (425, "26.02.01", 2790),
}
GAPPED = {"qwen3-235b-a22b-h100-256-fp8-current-mb260201-tp2-pp8-vp4-ep32",
          "qwen3-30b-a3b-h100-16-fp8-current-mb2604-ep16", "qwen3-30b-a3b-h100-16-fp8-current-mb260401-ep16"}
ALL = sorted([*MLPERF, *BRIDGE])


def _rows():
    runs = json.loads(package_data("measured_runs.json").read_text())["runs"]
    return {r["id"]: r for r in runs if r["id"] in ALL}


def test_every_runs37_row_is_shipped_once_as_a_check():
    rows = _rows()
    assert sorted(rows) == ALL
    runs = json.loads(package_data("measured_runs.json").read_text())["runs"]
    assert len([r for r in runs if r["id"] in ALL]) == len(ALL)
    assert all(r["role"] == "check" and r["software_date"] and r["software_date_source"] for r in rows.values())


@pytest.mark.parametrize("rid", sorted(MLPERF))
def test_mlperf_step_time_and_rate_from_the_blocks(rid):
    nodes, ga, files = MLPERF[rid]
    r = _rows()[rid]
    steps = sum(s for _, s, _ in files)
    ms = sum(m for _, _, m in files)
    assert all(s == b * 46080 // GBS for b, s, _ in files)  # 40 steps per block
    step = ms / steps / 1000
    gpus = nodes * 8
    assert r["devices"] == gpus and r["global_batch"] == GBS and r["seq"] == SEQ
    assert r["measured"]["step_time_s"] == pytest.approx(step, abs=5e-5)
    assert r["measured"]["tokens_per_s_per_device"] == pytest.approx(GBS * SEQ / step / gpus, abs=5e-3)
    dp = gpus // (r["tp"] * r["pp"] * r["cp"])
    assert (r["tp"], r["pp"], r["vp"], r["cp"]) == (4, 8, 8, 2) and dp * r["micro_batch"] * ga == GBS
    # 126 layers + the embedding + the loss = 128 = PP x VP x 2 layers per virtual stage
    assert (126 + 2) % (r["pp"] * r["vp"]) == 0 and r["recipe"]["account_for_embedding"]


def test_the_h200_405b_rows_are_not_a_held_back_layout():
    for rid in MLPERF:
        r = _rows()[rid]
        # held back: Llama 3.1 405B on H100 TP8 PP8 VP8 CP2 and on GB200 TP4 PP8 VP8 CP2
        assert r["hw"] == "h200"


@pytest.mark.parametrize("rid", sorted(BRIDGE))
def test_bridge_rows_carry_the_published_rate_and_a_step_time_in_notes(rid):
    line, release, tok = BRIDGE[rid]
    r = _rows()[rid]
    assert r["measured"]["tokens_per_s_per_device"] == tok
    assert r["release"] == f"NeMo {release}" and f"L{line} " in r["source"]
    step = r["global_batch"] * r["seq"] / (tok * r["devices"])
    assert f"= {step:.3f} s" in r["notes"]


def test_each_runs37_row_is_predicted_and_the_gapped_ones_say_why():
    runs = {r.id: r for r in load_runs() if r.id in ALL}
    for rid, run in runs.items():
        result = predict(run)
        assert result.predicted is not None, rid
        error = result.predicted.tokens_per_s_per_device / run.measured.tokens_per_s_per_device - 1
        gapped = rid in GAPPED
        assert (abs(error) > 0.25) <= gapped, (rid, error)
        assert bool(_rows()[rid].get("known_gap")) == gapped
