"""review32: `plan --search` against the layouts published for measured runs (btacalc/data/measured_runs.json).

The expectations are lower bounds taken from outside the search: a layout Megatron-LM accepts, planned as `validate`
plans it (`plan` with that layout given), predicts some tokens/s; the search over a space that holds that layout must
return one at least as fast. Megatron-LM's rules are quoted from NVIDIA/Megatron-LM @ d98e8a64ddf3 (2026-08-22).
"""

from __future__ import annotations

import pytest

from btacalc.config.execution import BatchLimits, ExecutionRequest
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.divisors import divisors
from btacalc.planning.measured import express
from btacalc.planning.plan import make_plan
from btacalc.planning.run_file import load_runs
from btacalc.planning.search import search_layouts


def _run(run_id: str):
    return next(r for r in load_runs() if r.id == run_id)


def _rate(model, hw, request) -> float:
    report = make_plan(model, hw, request, baselines=False)
    assert report.plan.fits and report.throughput is not None
    return report.throughput.tokens_per_s


def test_search_with_vp_free_is_no_slower_than_the_published_even_interleaving():
    # Mixtral 8x22B on 128 H100s (Megatron-MoE-ModelZoo): TP 2, PP 8, VP 7, EP 8, 56 layers, so 7 per stage and one
    # per model chunk. Megatron's default split builds num_layers_per_pipeline_rank // VP layers per chunk
    # (megatron/core/transformer/transformer_block.py L161-181), so every divisor of L / PP is an even interleaving;
    # the search tried VP from a fixed list (1, 2, 3, 4, 6, 8, 12) without 7 and returned a slower layout
    run = _run("mixtral-8x22b-h100-128-bf16-mzoo-tp2-pp8-vp7-ep8")
    model, hw = run.model_spec(), resolve_hardware(run.hw)
    request, _ = express(run)
    assert (request.pipeline_parallel, request.virtual_pipeline) == (8, 7)
    published = _rate(model, hw, request)
    found = search_layouts(model, hw, request.with_changes(virtual_pipeline=None))
    assert found.best is not None and found.best.throughput is not None
    assert found.best.throughput.tokens_per_s >= published * (1 - 1e-9)


@pytest.mark.parametrize("pp", [4, 8])
def test_search_ranks_every_even_interleaving_of_the_layers_per_stage(pp):
    # Llama 3 70B, 80 layers: at PP p every divisor d of 80 / p is an even interleaving Megatron builds
    # (transformer_block.py L161-181; transformer_config.py L2404-2416 checks the same divisibility after the
    # account-for flags). With everything but VP fixed, the search's winner is at least as fast as each of them
    # planned alone (VP 5, 10, 20 at PP 4 are Megatron-Bridge's and NVIDIA's published Llama 3 70B layouts)
    model, hw = load_preset("llama-3-70b"), resolve_hardware("h100")
    base = ExecutionRequest(seq_len=8192, devices=64, tensor_parallel=4, sequence_parallel=True, pipeline_parallel=pp,
                            context_parallel=2, recompute="none", limits=BatchLimits(global_batch=128, micro_batch=1))
    found = search_layouts(model, hw, base)
    assert found.best is not None and found.best.throughput is not None
    for vp in divisors(80 // pp):
        if vp > 1:
            assert found.best.throughput.tokens_per_s >= _rate(model, hw, base.with_changes(virtual_pipeline=vp)) * (
                1 - 1e-9), vp
