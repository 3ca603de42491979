"""A run's recipe can state where its MoE layers apply their routing weights (`routing_weights`), for software older
than Megatron-Core 0.12.1, written as its derivation from the two releases' code:

- core_v0.12.0 (2025-05-06) megatron/core/transformer/moe/token_dispatcher.py L641-649: the combine's unpermute
  takes `probs=self.probs` and multiplies each expert output by its weight on the token's own rank, so autograd keeps
  the k expert outputs per token (beta k s b h bytes per MoE layer and micro-batch) for the weights' gradient, and
  the all-to-all carries the tokens alone (L531): 1 + 1 calls forward, 1 + 1 backward per layer and micro-batch;
- core_v0.12.1 (2025-05-20) on: the weights travel with the tokens in an all-to-all of their own and scale the
  copies inside the experts (tests/test_a2a_probs.py): 2 + 1 forward, 2 + 1 backward, no expert output kept, but
  the weighted SwiGLU keeps each copy's fp32 weight (4 k s b bytes per layer).

The layout: Qwen3-30B-A3B (48 MoE layers, h 2,048, top-8) on 8 B200, EP 8, TP 1, PP 1, micro-batch 1 of 4,096
tokens, no recompute: the peak holds one micro-batch's activations of every layer, so "combine" adds
48 x (2 x 8 x 4,096 x 2,048 - 4 x 8 x 4,096) bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.planning.measured import express, make_plan
from btacalc.planning.run_file import load_runs

LAYERS, HIDDEN, TOP_K, SEQ, MICRO_BATCH, MICRO_BATCHES = 48, 2048, 8, 4096, 1, 8
RUN = {"id": "qwen3-rw", "source": "synthetic: tests/test_routing_weights_recipe.py", "model": "qwen3-30b-a3b",
       "hw": "b200", "devices": 8, "precision": "bf16", "seq": SEQ, "global_batch": 64, "micro_batch": MICRO_BATCH,
       "tp": 1, "pp": 1, "cp": 1, "ep": 8, "etp": 1, "recompute": "none", "measured": {"tokens_per_s_per_device": 1000},
       "role": "check"}


def _plan(tmp_path: Path, routing_weights: str | None) -> dict:
    run = dict(RUN)
    if routing_weights is not None:
        run["recipe"] = {"source": "synthetic recipe of the test", "routing_weights": routing_weights}
    path = tmp_path / f"runs-{routing_weights}.json"
    path.write_text(json.dumps({"runs": [run]}))
    (loaded,) = load_runs(path)
    request, why = express(loaded, "gpu")
    assert request is not None, why
    report = make_plan(loaded.model_spec(), resolve_hardware(loaded.hw), request, baselines=False)
    d = json.loads(report.model_dump_json())
    assert d["plan"]["micro_batches"] == MICRO_BATCHES
    return d


def _a2a_calls(d: dict) -> float:
    return next(c for c in d["throughput"]["collectives"] if c["name"] == "expert_all_to_all")["calls"]


def test_combine_keeps_the_expert_outputs_and_sends_the_tokens_alone(tmp_path):
    experts = _plan(tmp_path, "experts")
    combine = _plan(tmp_path, "combine")
    assert _a2a_calls(experts) == LAYERS * MICRO_BATCHES * (2 + 2 + 1 + 1)
    assert _a2a_calls(combine) == LAYERS * MICRO_BATCHES * (1 + 1 + 1 + 1)
    # combine keeps beta k s b h per layer (the bf16 expert outputs); experts keeps each copy's fp32 weight in the
    # weighted SwiGLU instead (fused_bias_swiglu.py L268-270 @ d98e8a64: 4 k s b per layer)
    kept = LAYERS * (2 * TOP_K * SEQ * MICRO_BATCH * HIDDEN - 4 * TOP_K * SEQ * MICRO_BATCH)
    grew = combine["memory_bytes"]["stored_activations"] - experts["memory_bytes"]["stored_activations"]
    assert grew == pytest.approx(kept, rel=1e-12)


def test_left_out_it_is_the_gpu_default(tmp_path):
    default = _plan(tmp_path, None)
    assert _a2a_calls(default) == _a2a_calls(_plan(tmp_path, "experts"))


def test_a_value_that_names_nothing_is_bad_input(tmp_path, cli):
    run = dict(RUN, recipe={"source": "synthetic recipe of the test", "routing_weights": "router"})
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [run]}))
    code, out, err = cli("validate", "--measured", str(path))
    assert code == 2 and err.count("\n") == 1 and "routing_weights" in err, err
