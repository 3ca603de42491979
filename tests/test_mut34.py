"""mut34: tests for mutants of btacalc/model/gpu/costs.py's communication volumes (`_volumes`, `_volume_factors`) that
the suite let survive. Each expected value is arithmetic from the cited source (a model's config.json shape, Megatron's
and TransformerEngine's code, the catalogue's per-direction bytes), not the tool's own output
(docs/mutation-survivors.md "mut34" lists the mutants each test kills)."""

from __future__ import annotations

import numpy as np
import pytest

from btacalc.config.execution import Layout
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from support import resolved

S, BETA = 4096, 2  # one sequence of 4,096 tokens in BF16
ARRAYS = [1, np.array([1, 2])]  # one shape; arrays of shapes (the solver's)


def _layer(model, layout, recompute, sequences):
    p = resolved(load_preset(model), "h100", layout, recompute=recompute, attention="flash", seq_len=S,
                 precision="bf16")
    ev = p.evaluate(1, sequences)
    return layer_parts(p, ev)[-1]


# ---- Megatron's allgather token dispatcher under a re-run


@pytest.mark.parametrize("sequences", ARRAYS)
def test_the_allgather_dispatchers_re_run_gathers_its_tokens_again(sequences):
    """Qwen3-30B-A3B (config.json: h 2,048, 128 experts) at EP 2 with Megatron's allgather dispatcher. Per sequence the
    dispatch all-gathers the tokens (s h BF16), their routing probabilities (s E BF16) and the bool routing map (s E
    bytes, forward only: the catalogue counts half of it per direction), and the backward reduce-scatters the
    gradients; the combine reduce-scatters the expert outputs (s h) and all-gathers their gradient (formulas/moe.toml).
    A full recompute re-runs the layer's forward (Megatron-LM @ d98e8a64 tensor_parallel/random.py CheckpointFunction),
    so each forward exchange once more: 3 units of the per-direction bytes instead of 2. Calls: the dispatch's 3
    gathers forward and 2 reduce-scatters backward, the combine's 1 and 1 (token_dispatcher.py L285-301, L364-367),
    the forwards again in the re-run. No all-to-all call of any kind."""
    n = np.asarray(sequences)
    h, e = 2048, 128
    per_direction = (BETA * S * h + BETA * S * e + S * e / 2 + BETA * S * h) * n
    for recompute, units, calls in (("none", 2, 3 + 2 + 1 + 1), ("full", 3, 2 * 3 + 2 + 2 * 1 + 1)):
        part = _layer("qwen3-30b-a3b", Layout(devices=2, expert_parallel=2, allgather_dispatcher=True), recompute,
                      sequences)
        assert np.all(part.gather_bytes == units * per_direction), recompute
        assert np.all(part.gather_calls == calls), recompute
        assert np.all(part.a2a_calls == 0) and np.all(part.a2a_token_calls == 0) and np.all(part.a2a_bytes == 0)


# ---- the context-parallel ring under a re-run of the attention core


@pytest.mark.parametrize("sequences", ARRAYS)
def test_a_re_run_of_the_attention_core_passes_k_and_v_around_the_ring_again(sequences):
    """Llama 3 8B (8 KV heads of 128) at CP 2: a rank holds s/2 tokens and sends its K and V chunk, 2 x s/2 x 8 x 128
    BF16 values, around the ring in the forward (one exchange), and K, V and their gradients in the backward
    (TransformerEngine context_parallel.py KV P2P: about twice the forward's bytes, formulas/constants.toml
    cp_backward_exchange_factor 2): 3 units, in 2 calls (forward, backward). Megatron's selective recompute re-runs
    the core attention (core_attn), whose forward passes K and V around again: 4 units in 3 calls."""
    unit = 2 * BETA * (S // 2) * 8 * 128 * np.asarray(sequences)
    for recompute, units, calls in (("none", 3, 2), ("selective", 4, 3)):
        part = _layer("llama-3-8b", Layout(devices=2, context_parallel=2), recompute, sequences)
        assert np.all(part.cp_bytes == units * unit), recompute
        assert np.all(part.cp_calls == calls), recompute
