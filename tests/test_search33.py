"""search33: `plan --search` takes PP, the micro-batch and ETP by Megatron's own rules, not from fixed lists.

Each expectation is derived from the rule as Megatron states it, at NVIDIA/Megatron-LM @ d98e8a64ddf3:
- PP: TP x PP x CP divides the world (megatron/core/parallel_state.py L815-823); Megatron's default split builds
  L / PP layers per stage (megatron/core/transformer/transformer_block.py L161-181).
- micro-batch: the global batch is a multiple of micro-batch x DP (megatron/core/num_microbatches_calculator.py
  L381-386).
- ETP: ETP x EP x PP divides the world (parallel_state.py L872-884); it splits the expert width
  (tensor_parallel/layers.py L1038, L1408 with utils.py `divide`).
With every other dimension fixed (and one recomputation policy), the search's candidates are exactly the values the
rule allows, and each fitting one is a row of its ranking (at most six rows).
"""

from __future__ import annotations

import pytest

from btacalc.config.execution import BatchLimits, ExecutionRequest
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.planning.search import search_layouts


def _search(model: str, hw: str, **fixed):
    limits = BatchLimits(global_batch=fixed.pop("global_batch"), micro_batch=fixed.pop("micro_batch", None))
    request = ExecutionRequest(seq_len=fixed.pop("seq_len", 4096), limits=limits, recompute="full", **fixed)
    return search_layouts(load_preset(model), resolve_hardware(hw), request)


def _values(result, field: str) -> set[int]:
    return {getattr(row, field) for row in result.ranking}


def test_pp_3_and_6_are_searched_where_they_divide_the_layers_and_the_devices():
    # GPT-3 175B, 96 layers = 3 x 32 = 6 x 16, on 48 B200s at TP 8: 48 / 8 = 6, so TP x PP x CP divides the world at
    # PP 1, 2, 3 and 6 (CP 1), each an even split of 96 layers. The fixed list (1, 2, 4, 8, 16, 32) held 1 and 2 only
    result = _search("gpt3-175b", "b200", devices=48, tensor_parallel=8, sequence_parallel=True, context_parallel=1,
                     virtual_pipeline=1, global_batch=96, micro_batch=1)
    allowed = {pp for pp in range(1, 49) if 48 % (8 * pp) == 0}
    assert allowed == {1, 2, 3, 6}
    assert result.candidates == len(allowed)
    assert {3, 6} <= _values(result, "pipeline_parallel")


def test_pp_that_does_not_divide_the_devices_stays_outside():
    # 32 H100s at TP 2 leave 16 ranks: PP 3, 5, 6, 7, 12 do not divide them (Megatron-Core raises "world_size is not
    # divisible", parallel_state.py L822-823); the search holds the divisors of 16 alone
    result = _search("llama-3-8b", "h100", devices=32, tensor_parallel=2, sequence_parallel=True, context_parallel=1,
                     virtual_pipeline=1, global_batch=64, micro_batch=1)
    assert result.candidates == len([pp for pp in range(1, 33) if 16 % pp == 0]) == 5
    assert _values(result, "pipeline_parallel") <= {1, 2, 4, 8, 16}


def test_a_micro_batch_of_3_is_searched_where_it_divides_the_batch_per_replica():
    # 48 sequences on 16 data-parallel ranks: 3 per replica, so the micro-batch is 1 or 3 (48 a multiple of mb x 16);
    # 2, 4 and 8, the fixed list's others, leave 48 / (mb x 16) fractional, and the fixed list lacked 3
    result = _search("llama-3-8b", "h100", devices=16, tensor_parallel=1, pipeline_parallel=1, context_parallel=1,
                     global_batch=48)
    allowed = [mb for mb in range(1, 49) if 48 % (mb * 16) == 0]
    assert allowed == [1, 3]
    assert result.candidates == len(allowed)
    assert _values(result, "micro_batch") == {1, 3}
    assert all(row.micro_batches == 48 // (16 * row.micro_batch) for row in result.ranking)


def test_etp_2_is_searched_beside_tp_4():
    # Qwen3-30B-A3B (expert width 768 = 2^8 x 3) on 16 H100s at TP 4, EP 2, PP 1: ETP x EP x PP divides 16 at ETP 1, 2,
    # 4 and 8, and 768 at each; of them the divisors of TP 4 (the search's rule) are 1, 2 and 4. {1, TP} lacked 2
    result = _search("qwen3-30b-a3b", "h100", devices=16, tensor_parallel=4, sequence_parallel=True,
                     pipeline_parallel=1, context_parallel=1, expert_parallel=2, global_batch=64, micro_batch=1)
    allowed = [etp for etp in (1, 2, 4) if 16 % (etp * 2 * 1) == 0 and 768 % etp == 0]
    assert allowed == [1, 2, 4]
    assert result.candidates == len(allowed)
    assert 2 in _values(result, "expert_tensor_parallel")


def test_etp_whose_expert_grid_does_not_divide_the_devices_stays_outside():
    # TP 4, EP 8 on 16 H100s: ETP 4 makes ETP x EP x PP = 32, which does not divide 16 (Megatron-Core raises
    # "world_size is not divisible by expert_tensor_model_pipeline_parallel size", parallel_state.py L881-884): only
    # ETP 1 and 2 are searched
    result = _search("qwen3-30b-a3b", "h100", devices=16, tensor_parallel=4, sequence_parallel=True,
                     pipeline_parallel=1, context_parallel=1, expert_parallel=8, global_batch=64, micro_batch=1)
    assert result.candidates == len([etp for etp in (1, 2, 4) if 16 % (etp * 8) == 0]) == 2
    assert 4 not in _values(result, "expert_tensor_parallel")


def test_layouts_not_timed_do_not_fit_and_the_winner_is_the_fastest_of_all():
    # The search evaluates every layout's memory and times those that fit, and of those that do not, the smallest
    # micro-batch of each layout and policy. Timing all of them (the search's own scorer over every candidate) must
    # give the same winner, and every layout left untimed must not fit
    from btacalc.planning import search

    model, hw = load_preset("qwen3-30b-a3b"), resolve_hardware("h100")
    request = ExecutionRequest(seq_len=4096, devices=16, limits=BatchLimits(global_batch=256))
    result = search.search_layouts(model, hw, request)
    assert result.not_timed > 0 and any("were not timed" in w for w in result.why)
    base = search.resolve_execution(request.with_changes(expert_tensor_parallel=1, recompute="none"), model, hw)
    every = list(search._candidates(model, hw, request, base, result.global_batch))
    assert len(every) == result.candidates
    scores = search._scored(model, hw, base, every)
    fits = scores.memory <= search._usable(model, hw, base, scores.candidates)
    assert int(fits.sum()) == result.fitting
    best = max((i for i in range(len(every)) if fits[i]), key=lambda i: scores.tokens[i])
    assert scores.tokens[best] == result.ranking[0].tokens_per_s
    timed, _, untimed = search._untimed_dropped(model, hw, base, every)
    assert untimed == result.not_timed
    kept = {id(c) for c in timed}
    usable = search._usable(model, hw, base, every)
    memory = search._memory(model, hw, base, every)
    assert all(memory[i] > usable[i] for i, c in enumerate(every) if id(c) not in kept)


@pytest.mark.parametrize("run_id, dimension, value", [
    # Llama 3.1 405B on 224 B200s (Google's GPU recipes): PP 14 divides 224 / (TP 4 x CP 2) = 28; 126 layers = 14 x 9
    ("llama-3.1-405b-b200-224-fp8-gpurecipes-a4", "pipeline_parallel", 14),
    # BLOOM 176B on 384 A100s (BigScience): PP 12 divides 384 / TP 4 = 96; its 70 layers with the embedding and the
    # loss counted as layers are 72 = 12 x 6 (Megatron's account-for split, the plan's own where 12 does not divide 70);
    # no power-of-two PP leaves a DP dividing the global batch 2,048 (384 = 3 x 128): the fixed list found no layout
    ("bloom-176b-a100-80gb-384-bf16-bigscience", "pipeline_parallel", 12),
    # Qwen3-235B-A22B on 128 B200s (Megatron-LM's recipes): micro-batch 3 divides 3,072 / DP 16 = 192 sequences
    ("qwen3-235b-a22b-b200-128-mxfp8-mlmrecipes", "micro_batch", 3),
])
def test_published_layouts_outside_the_fixed_lists_are_no_faster_than_the_searchs_winner(run_id, dimension, value):
    # review32's check: the published layout, planned as Megatron runs it (whole micro-batches, no attention tiles),
    # predicts some tokens/s; the search over a space that holds it must return one at least as fast
    from dataclasses import replace

    from btacalc.planning.measured import express
    from btacalc.planning.plan import make_plan
    from btacalc.planning.run_file import load_runs

    run = next(r for r in load_runs() if r.id == run_id)
    model, hw = run.model_spec(), resolve_hardware(run.hw)
    request, _ = express(run)
    given = request.limits.micro_batch if dimension == "micro_batch" else getattr(request, dimension)
    assert given == value
    report = make_plan(model, hw, request.with_changes(limits=replace(request.limits, tiles=1)), baselines=False)
    assert report.plan.fits and report.throughput is not None
    free = request.with_changes(tensor_parallel=None, pipeline_parallel=None, virtual_pipeline=None,
                                context_parallel=None, expert_parallel=None, expert_tensor_parallel=None,
                                sequence_parallel=None, recompute=None,
                                limits=BatchLimits(global_batch=request.limits.global_batch))
    found = search_layouts(model, hw, free)
    assert found.best is not None and found.best.throughput is not None
    assert found.best.throughput.tokens_per_s >= report.throughput.tokens_per_s * (1 - 1e-9)
