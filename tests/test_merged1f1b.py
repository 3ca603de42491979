"""Memory under Megatron's merged 1F1B schedule (--overlap-moe-expert-parallel-comm), tested as its derivation.

Written from Megatron-LM @ d98e8a64, not from btacalc/model/gpu/memory.py:
- megatron/core/pipeline_parallel/schedules.py L966-L970: one extra warm-up forward with the overlap (interleaved).
- megatron/core/pipeline_parallel/combined_1f1b.py L35-L130 (no pipelining): the forward of micro-batch i + 1 runs
  beside the backward of micro-batch i; megatron/core/models/common/model_chunk_schedule_plan.py L500-L560: layer by
  layer, forward layer j beside backward layer L - 1 - j; L236-L300: within a layer pair, the backward layer's MLP
  and dispatch are freed before the forward layer's MLP runs, its pre-dispatch node (attention, norms, shared
  experts, router: models/gpt/fine_grained_callables.py L26-L29, L67-L131) only after the forward layer's combine.
So the peak holds the plain schedule's in-flight passes (the extra warm-up forward is the one the merged step runs
beside a backward) plus one layer's pre-dispatch activations.
"""

from __future__ import annotations

import dataclasses

from btacalc.config.execution import BatchLimits
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.planning.measured import express, load_runs
from btacalc.planning.plan import make_plan

# the phases of Megatron's pre-dispatch node (fine_grained_callables.py L67-L131): the attention pass with its input
# norm, the pre-MLP layernorm, the shared experts, the router (and the dispatcher's preprocess, no saved bytes)
PRE_DISPATCH = {"input_norm", "qkv_proj", "qk_norm", "rope", "attn_scores", "attn_softmax", "attn_pv", "attn_out_proj",
                "mla_q_proj", "mla_kv_proj", "mla_rope", "post_attn_norm", "shared_experts", "router"}


def _plans(run_id: str, **changes):
    run = next(r for r in load_runs() if r.id == run_id)
    request, reason = express(run)
    assert reason == "" and request is not None
    model, hw = resolve_model(run.model), resolve_hardware(run.hw)
    return (make_plan(model, hw, request.with_changes(**changes)),
            make_plan(model, hw, request.with_changes(
                overlap_all_to_all=False, overlaps=dataclasses.replace(request.overlaps, delay_wgrad=False), **changes)))


def test_one_layer_of_pre_dispatch_activations_more():
    # Qwen3-30B-A3B on 8 GB200 (EP 8, micro-batch 4, PP 1, the overlap on, as its Bridge recipe runs it)
    merged, plain = _plans("qwen3-30b-a3b-gb200-8-mxfp8-7")
    one_layer = sum(p.stored_activation_bytes for p in plain.phases if p.name in PRE_DISPATCH)
    assert one_layer > 0
    a, b = merged.memory_stages[0], plain.memory_stages[0]
    assert a.in_flight == b.in_flight == 1  # the plain schedule's passes
    assert a.components["stored_activations"] - b.components["stored_activations"] == one_layer
    assert {k: v for k, v in a.components.items() if k != "stored_activations"} \
        == {k: v for k, v in b.components.items() if k != "stored_activations"}


def test_nothing_runs_merged_with_one_micro_batch():
    # one micro-batch without interleaving: its forward alone, then its backward alone (combined_1f1b.py L77-L92,
    # L117-L129). Global batch 32 = micro-batch 4 x data-parallel 8: M = 1
    merged, plain = _plans("qwen3-30b-a3b-gb200-8-mxfp8-7", limits=BatchLimits(global_batch=32, micro_batch=4))
    assert merged.parallelism.micro_batches == 1 and merged.parallelism.overlaps["all_to_all"]
    assert merged.memory_stages[0].components == plain.memory_stages[0].components


def test_the_ci_overlap_row_moves_toward_its_measurement():
    # Megatron-LM's a2a-overlap toy MoE test (unfused attention: its scores and probabilities are pre-dispatch
    # activations): 3.7866 GiB measured on the last rank
    merged, plain = _plans("moe-toy-gelu-8e-top2-megatron-ci-h100-8-te-tp2-pp1-te-a2a-ovlp-8experts-etp1-ep4-dev")
    measured = 3.7866 * 2 ** 30
    assert abs(merged.memory_stages[-1].total - measured) < abs(plain.memory_stages[-1].total - measured)
