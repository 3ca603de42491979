"""Megatron-Core's global memory buffer ("mpu"): one persistent tensor a stage holds through the step.

`parallel_state.get_global_memory_buffer().get_tensor(shape, dtype, "mpu")` (Megatron-LM @ d98e8a64
megatron/core/utils.py L727-753, GlobalMemoryBuffer) allocates a tensor the first time a name asks for it, keeps it in
a dict, and reallocates it only when a larger request arrives: so the allocator holds, from the first step on, one
tensor as large as the largest of that name's requests, beside everything else. Its users at d98e8a64 with "mpu":

- Megatron-Core's own (unfused) attention, `DotProductAttention`, the core attention of `--transformer-impl local`
  (dot_product_attention.py L188-199): the scores' baddbmm input [b·np, s_q, s_k] in the query's dtype, np the heads
  of a TP rank; baddbmm with beta 0 returns a new tensor, so the buffer is held besides the scores themselves.
- Megatron-Core's own linear layers under sequence parallelism (tensor_parallel/layers.py L623-629 forward, L667-673
  backward, LinearWithGradAccumulationAndAsyncCommunication): the all-gathered input [s·b, h] of a
  ColumnParallelLinear. Every linear of the local implementation is one; under TransformerEngine only the output
  layer is (models/gpt/gpt_model.py: `tensor_parallel.ColumnParallelLinear`), on the last pipeline stage.
- The allgather MoE token dispatcher (`Layout.allgather_dispatcher`; moe/token_dispatcher.py L294-298,
  use_global_buffer=True): the hidden states of the n_g = ETP x EP ranks of the tp_ep group gathered,
  [(s/t)·b·n_g, h], on every stage with MoE layers (a stage of dense layers only has no dispatcher).

So a stage holds β·max(b·(a/t)·s², s·b·h, (s/t)·b·n_g·h) of the uses it has (docs/memory.md "mpubuf"), with s the
tokens of a sequence on the rank and b the sequences of one attention pass (a CP rank's share of them,
`Problem.rank_share`).
"""

from __future__ import annotations

from typing import Any

from ..arrays import maximum, where
from ..problem import Problem


def global_buffer_bytes(problem: Problem, tile_batch: Any, seq_len: Any, has_layers: Any, is_last: Any,
                        has_moe: Any = False) -> Any:
    """The persistent "mpu" buffer's bytes on one stage (0 where the plan runs no Megatron-Core op that asks for
    it). `has_layers`: the stage holds decoder layers; `is_last`: it holds the output layer; `has_moe`: it holds
    MoE layers, whose allgather dispatcher gathers into the buffer (bools or arrays)."""
    run, lay, model = problem.run, problem.layout, problem.model
    if problem.hardware.family != "gpu" or run.eager_kernels:  # not Megatron-Core's modules (llm-foundry's MPT)
        return 0
    s = run.seq_len if seq_len is None else seq_len
    b = problem.rank_share(tile_batch)
    beta = run.bytes_per_element
    local = not run.transformer_engine
    tp = lay.tensor_parallel
    scores = where(has_layers, b * (model.num_heads // tp) * s * s * beta, 0) if local else 0
    # Megatron-Core's ColumnParallelLinear: every linear of a local stage with layers, the output layer anywhere
    # (bools or arrays over layouts: & and | hold for both, as timing.py combines its conditions)
    column = (has_layers | is_last) if local else is_last
    # torchtitan's DTensor plan (PyTorch FSDP2 with TP) gathers into ordinary tensors: no Megatron-Core buffer
    gathering = (tp > 1) & lay.sequence_parallel & column & (not lay.torch_fsdp)
    n_g = lay.expert_model_parallel
    # review27: only a stage holding MoE layers dispatches (a stage of DeepSeek-V3's first dense layers held it)
    dispatch = where(has_moe & (n_g > 1), s * b / tp * n_g * model.hidden_size * beta, 0) \
        if lay.allgather_dispatcher and model.is_moe else 0
    return maximum(maximum(scores, where(gathering, s * b * model.hidden_size * beta, 0)), dispatch)
