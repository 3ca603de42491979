"""A GPU issues a micro-batch's tile-batched phases once per attention tile (thirty-second session, `tilehost`).

Under BTA a micro-batch of G·b sequences runs its attention block as G tiles of b sequences (the catalogue's
`batch = "tile"` phases) and its MoE/MLP block once over all G·b. On a GPU each tile is its own pass through the
attention modules, so the host issues their kernels, module calls and the fused attention kernel G times. Before
this round only the GEMMs' launches followed G (their catalogue `count = "G"`), and every GPU profile charged an
unsourced 20 us per tile per layer (`calibration.tile_overhead_s`), at G = 1 too, on top of the launches the host
model already counts. The shipped GPU profiles now state no per-tile cost.

Expected counts come from Megatron-Core's module structure (Megatron-LM @ d98e8a64
megatron/core/transformer/attention.py: linear_qkv, core_attention, linear_proj; moe/experts.py TEGroupedMLP:
linear_fc1, linear_fc2), not from btacalc: each module is called once forward and once backward per pass.
"""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import ISSUED_COUNTS, layer_parts
from support import resolved

KERNELS, EXPERTS, MODULES, GLUE = (ISSUED_COUNTS.index(n) for n in ("kernels", "expert_gemms", "module_calls",
                                                                     "glue_ops"))


def _layer(tiles: int):
    """One Qwen3-30B-A3B layer on 16 H100 at EP 16 under flash attention without recompute: its counts, the whole
    layer's and the first forward's, and its merged-schedule node counts (the pre-dispatch node is the attention)."""
    layout = Layout(devices=16, expert_parallel=16, micro_batches=4)
    problem = resolved(load_preset("qwen3-30b-a3b"), "h100", layout, seq_len=4096, recompute="none",
                       attention="flash")
    part = layer_parts(problem, problem.evaluate(tiles, 1))[0]
    return ([getattr(part, n) for n in ISSUED_COUNTS], [getattr(part, n + "_fwd") for n in ISSUED_COUNTS],
            part.node_issued)


@pytest.mark.parametrize("tiles", [1, 2, 5])
def test_the_attention_modules_are_called_once_per_tile_and_the_experts_once_per_micro_batch(tiles):
    """The attention block's three modules (linear_qkv, core_attention as the fused kernel, linear_proj) forward and
    backward in each of G tiles: 6 G calls, 3 G in the first forward. The experts' two grouped linears run once over
    the G·b sequences: 4 calls (2 forward), and 128 / 16 = 8 local experts x 2 linears x 3 GEMMs each (forward,
    data and weight gradient) = 48 per-expert GEMMs, 16 forward, whatever G."""
    whole, first, nodes = _layer(tiles)
    pre = nodes["pre"]
    n = len(ISSUED_COUNTS)
    assert (pre[MODULES], pre[n + MODULES]) == (6 * tiles, 3 * tiles)
    assert (whole[MODULES] - pre[MODULES], first[MODULES] - pre[n + MODULES]) == (4, 2)
    assert (whole[EXPERTS], first[EXPERTS]) == (48, 16)


@pytest.mark.parametrize("tiles", [1, 2, 3, 7])
def test_a_layers_launches_are_the_attention_tiles_g_times_and_the_rest_once(tiles):
    """Kernel launches per micro-batch, counted by hand from the catalogue phases a Qwen3 layer runs under flash
    attention without recompute (formulas/attention.toml, moe.toml): a phase without GEMMs one kernel forward and
    one backward, a GEMM three (forward, data and weight gradient), the fused attention kernel (attn_scores,
    attn_softmax, attn_pv) one forward and one backward. Per attention tile: input_norm 2 + qkv_proj 3 + qk_norm 2
    + rope 2 + the fused core 2 + attn_out_proj 3 = 14. Once over G·b: post_attn_norm 2 + the router GEMM 3 +
    dispatch 2 + combine 2 = 9 (the experts' GEMMs are per-expert GEMMs, counted apart). So 14 G + 9, all of the
    14 G in the pre-dispatch node with the router's 3 and the post-attention norm's 2. The eager glue, written on
    one phase for the whole layer and measured at G = 1, does not grow with G: its attention share is not measured
    apart (an under-count under G > 1, docs/clock.md 'tilehost')."""
    whole, first, nodes = _layer(tiles)
    assert whole[KERNELS] == 14 * tiles + 9
    assert nodes["pre"][KERNELS] == 14 * tiles + 3 + 2
    assert whole[GLUE] == _layer(1)[0][GLUE]


def test_the_shipped_gpu_profiles_state_no_per_tile_cost_and_a_gpu_plan_pays_none():
    """Each tile's cost on a GPU is its launches (above); a GPU profile states no per-tile constant."""
    for name in ("a100-40gb", "a100-80gb", "h100", "h100-96gb", "h200", "b200", "gb200", "b300", "gb300"):
        assert resolve_hardware(name).calibration.tile_overhead_s is None, name
