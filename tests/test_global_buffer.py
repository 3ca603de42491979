"""mpubuf: Megatron-Core's global memory buffer, tested as its derivation.

Written from Megatron-LM @ d98e8a64, not from btacalc/model/gpu/global_buffer.py. GlobalMemoryBuffer.get_tensor
(megatron/core/utils.py L727-753) keeps one tensor per (name, dtype), grown to the largest request and never freed.
Under the name "mpu":
- DotProductAttention (the local implementation's core attention) asks for [b * np, sq, sk] in the query's dtype
  (transformer/dot_product_attention.py L188-191), np = heads / TP;
- LinearWithGradAccumulationAndAsyncCommunication under sequence parallelism asks for the all-gathered input
  [s * b, h] (tensor_parallel/layers.py L623-629, L667-673): every ColumnParallelLinear of the local implementation,
  and the output layer (a Megatron-Core ColumnParallelLinear) under TransformerEngine too.
So each stage holds 2 B x max(b (a/t) s^2, s b h) of the uses it has, beside everything else.
"""

from __future__ import annotations

import pytest

from btacalc.config.execution import BatchLimits, ExecutionRequest
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.planning.measured import express, load_runs
from btacalc.planning.plan import make_plan


def _buffers(plan) -> list[int]:
    return [s.components["global_buffer"] for s in plan.memory_stages]


def _plan(model: str, hw: str = "h100", **request):
    limits = BatchLimits(global_batch=32, micro_batch=4)
    return make_plan(resolve_model(model), resolve_hardware(hw), ExecutionRequest(devices=8, limits=limits,
                                                                                  seq_len=1024, **request))


def test_the_local_attention_holds_its_scores_input_on_every_stage():
    # Megatron-LM's gpt3_mcore_tp1_pp2 CI test: --transformer-impl local, 8 heads, micro-batch 4, s = 1,024, TP 1
    run = next(r for r in load_runs() if r.id == "gpt-toy-megatron-ci-h100-8-tp1-pp2-dev")
    request, reason = express(run)
    assert reason == ""
    plan = make_plan(resolve_model(run.model), resolve_hardware(run.hw), request)
    assert _buffers(plan) == [4 * 8 * 1024 * 1024 * 2] * 2  # [b * np, sq, sk] bf16 = 64 MiB
    # the row's measured peak (3.3837 GiB on the last rank) was 79 MiB above btacalc's; 15 MiB now
    last = plan.memory_stages[-1].total + plan.device_memory.library_workspace_bytes
    assert abs(last - 3.3837 * 2 ** 30) < 20 * 2 ** 20


def test_under_transformer_engine_only_the_output_layer_gathers_into_it():
    # llama-3-8b (h = 4,096), TP 2 with sequence parallelism, PP 2: the last stage's output layer gathers
    # [s * b, h] = 1,024 x 4 x 4,096 x 2 B; TE's own linears and attention hold their own buffers
    plan = _plan("llama-3-8b", tensor_parallel=2, pipeline_parallel=2, recompute="full")
    assert _buffers(plan) == [0, 1024 * 4 * 4096 * 2]


def test_the_local_implementation_holds_the_larger_of_its_uses():
    # local, TP 2 + SP: every ColumnParallelLinear gathers [s * b, h] = 32 MiB, the attention asks for
    # [b * 32/2, s, s] = 128 MiB: the buffer grows to the larger and stays
    plan = _plan("llama-3-8b", tensor_parallel=2, pipeline_parallel=2, recompute="full", transformer_engine=False)
    assert _buffers(plan) == [4 * 16 * 1024 * 1024 * 2] * 2


@pytest.mark.parametrize("request_", [dict(tensor_parallel=2, sequence_parallel=False, pipeline_parallel=2),
                                      dict(pipeline_parallel=2)])
def test_no_sequence_parallel_gather_no_buffer_under_transformer_engine(request_):
    assert _buffers(_plan("llama-3-8b", recompute="full", **request_)) == [0, 0]


def test_llm_foundry_and_the_wafer_hold_none():
    run = next(r for r in load_runs() if r.id == "mpt-7b-h100-512-bf16-llmfoundry")
    request, reason = express(run)
    assert reason == ""
    plan = make_plan(resolve_model(run.model), resolve_hardware(run.hw), request)
    assert set(_buffers(plan)) == {0}
    wafer = make_plan(resolve_model("llama-3-8b"), resolve_hardware("wse3"), ExecutionRequest())
    assert "global_buffer" not in wafer.memory_bytes
