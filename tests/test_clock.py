"""The GPU clock's mechanisms, each tested as its derivation: GEMM tile and wave quantisation and the
memory floor (model/gpu/gemm.py), grouped expert GEMM shapes, the causal FlashAttention block share
(model/gpu/costs.py), the optimizer update, gradient norm and launch overhead (model/gpu/fixed.py)."""

from __future__ import annotations

import numpy as np
import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.gemm import GemmDevice, gemm_time, quantisation
from btacalc.model.problem import make_problem

PEAK = 1e15  # FLOP/s, a round achieved peak for the hand arithmetic
HBM = 3e12  # B/s
FAST = 1e15  # B/s: a bandwidth at which the quantisation tests' GEMMs stay compute-bound (ridge 1 FLOP/B)
NO_RERUN = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute="none")  # each pass once


def test_a_gemm_needing_1_02_waves_runs_at_half_speed():
    """100 SMs, 128 x 128 tiles: m = 102 x 128, n = 128 gives 102 tiles = 1.02 waves; the second wave holds
    2 tiles, so the GEMM takes 2 waves for 1.02 waves of work: efficiency 1.02 / 2 = 0.51 (NVIDIA Matrix
    Multiplication Background guide §3.2). At FAST bandwidth the GEMM stays compute-bound."""
    dev = GemmDevice(PEAK, FAST, 100, ((128, 128),))
    m, n, k = 102 * 128, 128, 65536
    t = gemm_time(m, n, k, 2, dev)
    ideal = 2 * m * n * k / PEAK
    assert t.efficiency == pytest.approx(0.51)
    assert t.time_s == pytest.approx(ideal / 0.51)
    assert t.binding() == "waves"
    # one tile fewer: exactly one wave, no loss
    assert gemm_time(101 * 128 - 128, n, k, 2, dev).efficiency == pytest.approx(1.0)


def test_partial_tiles_compute_padding():
    """m = 129 with 128-row tiles: two tile rows, of which the second computes 1 useful row in 128:
    tile share 129 / 256 (guide §3.1); one tile column of n = 128 and 2 tiles on 100 SMs: the wave share
    is 0.02 / 1."""
    assert quantisation(129, 128, 100, (128, 128)) == pytest.approx(129 / 256 * 0.02)


def test_the_library_picks_the_best_candidate_tile():
    """An output of 128 x 256 on 1 SM: the 128 x 256 tile covers it exactly (share 1), 256 x 128 pads half
    of it (0.5), 128 x 128 needs two full tiles on one SM (share 1): the best is 1."""
    dev = GemmDevice(PEAK, FAST, 1, ((256, 128), (128, 256), (128, 128)))
    assert gemm_time(128, 256, 65536, 2, dev).quantisation == pytest.approx(1.0)
    only_wide = GemmDevice(PEAK, FAST, 1, ((256, 128),))
    assert gemm_time(128, 256, 65536, 2, only_wide).quantisation == pytest.approx(0.5)


def test_small_m_is_bound_by_the_memory_floor():
    """m = 16 tokens, n = k = 8192, 2-byte elements: the operands and result cross HBM once,
    (16·8192 + 8192·8192 + 16·8192)·2 bytes / 3 TB/s, against 2·16·8192² FLOPs at 1 PFLOP/s."""
    dev = GemmDevice(PEAK, HBM, 132, ((128, 128),))
    m, n, k = 16, 8192, 8192
    floor = (m * k + k * n + m * n) * 2 / HBM
    t = gemm_time(m, n, k, 2, dev)
    assert t.time_s == pytest.approx(floor)
    assert t.efficiency == pytest.approx(2 * m * n * k / PEAK / floor)
    assert t.binding() == "memory"


def test_a_grouped_gemm_shares_its_waves_over_the_groups():
    """4 experts of 25 tiles each on 100 SMs in one launch: 100 tiles, exactly one wave (each alone would
    be 0.25 of a wave)."""
    dev = GemmDevice(PEAK, FAST, 100, ((128, 128),))
    m, n, k = 5 * 128, 5 * 128, 65536
    assert gemm_time(m, n, k, 2, dev, groups=4).efficiency == pytest.approx(1.0)
    assert gemm_time(m, n, k, 2, dev).efficiency == pytest.approx(0.25)


def test_gemm_time_takes_arrays_of_shapes():
    dev = GemmDevice(PEAK, FAST, 100, ((128, 128),))
    t = gemm_time(np.array([102 * 128, 100 * 128]), 128, 65536, 2, dev)
    assert t.efficiency == pytest.approx([0.51, 1.0])


def test_causal_block_share_on_a_small_grid():
    """nb = ceil(s/128) blocks per side; the causal kernel runs the nb(nb+1)/2 on or below the diagonal:
    s = 512 gives nb = 4 and 10 of 16 blocks; s = 130 gives nb = 2 and 3 of 4; s = 4096: 528 of 1024."""
    from btacalc.model.gpu.rates import causal_block_fraction

    assert causal_block_fraction(512) == pytest.approx(10 / 16)
    assert causal_block_fraction(130) == pytest.approx(3 / 4)
    assert causal_block_fraction(4096) == pytest.approx(528 / 1024)


def _problem(model="llama-3-8b", hw="h100", run=None, **layout):
    run = run or RunOptions(seq_len=4096, attention="flash", gradient_bytes=4)
    return make_problem(load_preset(model), resolve_hardware(hw), run, Layout(**layout))


def test_the_attention_core_runs_the_causal_blocks_in_time_not_in_the_flop_count():
    """Under FlashAttention the core's time FLOPs are the counted ones x 528/1024 at s = 4096 (full s²
    counted); counting causally (--causal, s(s+1)/2 entries) the factor restores the blocks:
    (528/1024) / ((s + 1)/(2s)). Eager attention computes every score: factor 1."""
    from btacalc.model.gpu.rates import attention_core_time_factor

    s = 4096
    sym = {"s": s, "w": s}
    assert attention_core_time_factor(_problem(devices=8), sym, False) == pytest.approx(528 / 1024)
    causal = _problem(run=RunOptions(seq_len=s, attention="flash", causal=True), devices=8)
    assert attention_core_time_factor(causal, sym, False) == pytest.approx((528 / 1024) / ((s + 1) / (2 * s)))
    eager = _problem(run=RunOptions(seq_len=s, attention="eager"), devices=8)
    assert attention_core_time_factor(eager, sym, False) == 1.0
    # a sliding-window layer of 1,024 keys runs its band, the counted s x w: factor 1
    assert attention_core_time_factor(_problem(devices=8), {"s": s, "w": 1024}, True) == 1.0


def test_eager_attention_computes_the_whole_square_whatever_the_count():
    """Eager attention materialises every score and masks it (Megatron-LM's unfused attention: baddbmm over the
    whole s x s matrix, then scale-mask-softmax), so its time follows s x s: factor 1 under the s² count; under
    --causal's count of s(s+1)/2 entries, 2s/(s + 1) (attngemm found it timed at the halved count, about half its
    work); a sliding-window layer counted s x w, s/w (with --causal, s/w over (2sw - w² + w)/(2sw))."""
    from btacalc.model.gpu.rates import attention_core_time_factor

    s, w = 4096, 1024
    eager = _problem(run=RunOptions(seq_len=s, attention="eager"), devices=8)
    causal = _problem(run=RunOptions(seq_len=s, attention="eager", causal=True), devices=8)
    assert attention_core_time_factor(eager, {"s": s, "w": s}, False) == 1.0
    assert attention_core_time_factor(causal, {"s": s, "w": s}, False) == pytest.approx(2 * s / (s + 1))
    assert attention_core_time_factor(eager, {"s": s, "w": w}, True) == pytest.approx(s / w)
    counted = (2 * s * w - w * w + w) / (2 * s * w)
    assert attention_core_time_factor(causal, {"s": s, "w": w}, True) == pytest.approx(s / w / counted)
    # the counted FLOPs x the factor are the whole square's: the same kernel time under either convention
    assert (s + 1) / (2 * s) * attention_core_time_factor(causal, {"s": s, "w": s}, False) == pytest.approx(1.0)


def test_a_full_attention_layer_without_a_window_runs_the_causal_blocks():
    """Regression: a model without a sliding window carries the window symbol w = 1 (ModelSpec.symbol_values),
    which the catalogue replaces by s in full-attention layers; the clock must read w = s there too, so
    Llama-3-8B's layer at s = 4096 runs 528 of 1,024 score blocks (its core time factor), not all of them."""
    from btacalc.model.gpu.costs import _kind_rates
    from btacalc.model.gpu.rates import rates_of

    p = _problem(devices=8)
    ev = p.evaluate(1, 1)
    kind, pv = ev.layers[0]
    assert _kind_rates(p, rates_of(p), kind, pv).core_time_factor == pytest.approx(528 / 1024)


def test_expert_gemms_run_per_expert_over_its_tokens():
    """Qwen3-30B-A3B (E = 128, k = 8, f = 768, h = 2048) on EP 8, one sequence of 4096 per rank: each
    expert receives k·T·EP/E = 8·4096·8/128 = 2,048 tokens; a rank holds E/EP = 16 experts, which
    TransformerEngine runs four at a time on its four streams (4 rounds of 4: tests/test_moe11_multistream.py);
    gate and up are one 2f = 1,536-wide GEMM, down contracts f = 768."""
    from btacalc.model.gpu.costs import layer_parts

    p = _problem("qwen3-30b-a3b", devices=8, expert_parallel=8)
    rows = {g.name: g for g in layer_parts(p, p.evaluate(1, 1))[0].gemms["experts"]}
    up, down = rows["W_gate_up"], rows["W_down"]
    assert (up.m, up.n, up.k, up.groups, up.launches) == (pytest.approx(2048), pytest.approx(1536), pytest.approx(2048),
                                                          4, 4)
    assert (down.m, down.n, down.k) == (pytest.approx(2048), pytest.approx(2048), pytest.approx(768))


def test_tensor_parallelism_narrows_the_column_parallel_gemms():
    """Llama-3-8B (a = 32, a_kv = 8, d_h = 128, h = 4096) under TP 4: W_qkv is s·b x (32 + 16)·128/4 x h."""
    from btacalc.model.gpu.costs import layer_parts

    p = _problem(devices=8, tensor_parallel=4, sequence_parallel=True)
    (qkv,) = layer_parts(p, p.evaluate(1, 1))[0].gemms["qkv_proj"]
    assert (qkv.m, qkv.n, qkv.k) == (pytest.approx(4096), pytest.approx(48 * 128 / 4), pytest.approx(4096))


def test_adam_moves_30_bytes_per_local_parameter():
    """Megatron's distributed optimizer with fp32 main gradients: read the gradient (4 B) and the fp32
    master weight and two moments (12 B), write the three back (12 B) and the 16-bit weight (2 B): 30 B per
    parameter of the local shard. 8e9 parameters over DP = 8 (ZeRO-1) on an H100 (3.35 TB/s x 0.870 streamed): 1e9 x 30 B."""
    from btacalc.model.gpu.fixed import fixed_costs, optimizer_bytes_per_param
    from btacalc.model.state import bytes_per_param

    p = _problem(devices=8, zero_stage=1)
    rates = bytes_per_param(p)
    assert rates == {"weights": 2, "gradients": 4, "optimizer": 12}
    assert optimizer_bytes_per_param(rates) == 4 + 2 * 12 + 2 == 30
    hbm = 3.35e12 * 0.870  # the datasheet x the streaming kernels' share (tests/test_streaming_bandwidth.py)
    fixed = fixed_costs(p, 8e9, 0, rates)
    assert fixed.optimizer_s == pytest.approx(1e9 * 30 / hbm)
    # the norm reads the 4-byte gradients once, then all-reduces one fp32 over the 8 ranks of one node: one
    # call as NCCL's tuning model picks it (docs/comm.md nccllat): ring LL, 6.6 + 14 x 0.6 us (tuning.cc L151,
    # L159, L412) x the NVLink anchor 13.0 us / (6.6 + 14 x 0.6) us (docs/comm.md nccl2: this is the profile's
    # reference call itself, the DGX H100's measured 13.0 us), plus 2 x 7/8 x 4 B at half the bus rate (LL, L327;
    # 450 GB/s x 0.8 bus efficiency)
    on_node = _problem(devices=8, zero_stage=1, devices_per_node=8)
    nvlink, efficiency, latency = 4.5e11, 0.8, (6.6 + 14 * 0.6) * 1e-6 * 13.0 / (6.6 + 14 * 0.6)
    assert fixed_costs(on_node, 8e9, 0, rates).grad_norm_s == pytest.approx(
        1e9 * 4 / hbm + latency + 2 * 7 / 8 * 4 / (0.5 * nvlink * efficiency))
    # without the distributed optimizer every rank updates all of its parameters
    whole = fixed_costs(_problem(devices=8, zero_stage=0), 8e9, 0, rates)
    assert whole.optimizer_s == pytest.approx(8e9 * 30 / hbm)


def test_launches_show_only_beyond_the_gpu_time():
    """1,000 kernels at 4 us take 4 ms of CPU time: a 1 ms micro-batch waits 3 ms, a 5 ms one none."""
    from btacalc.model.gpu.fixed import host_time, launch_time

    p = _problem(devices=8)
    assert p.hardware.kernels.launch_overhead_s.value == 4e-6
    assert host_time(p, 1000) == pytest.approx(1000 * 4e-6)
    assert launch_time(host_time(p, 1000), 1e-3) == pytest.approx(3e-3)
    assert launch_time(host_time(p, 1000), 5e-3) == 0.0


def test_an_expert_gemm_costs_the_host_what_te_pr_3134_measured():
    """TransformerEngine PR 3134's SM100 table: 8 experts x 128 tokens (N = K = 2048) through the
    multi-stream cuBLASLt loop take 0.267 ms, the same math in one CUTLASS launch 0.069 ms: the loop sets
    the time, 0.267 ms / 8 per expert GEMM; Hopper takes the same host cost over."""
    per_expert = 0.267e-3 / 8
    assert per_expert > 0.069e-3 / 8  # not the math: a single launch does all of it in a quarter of the time
    for hw in ("b200", "gb200", "h100"):
        k = resolve_hardware(hw).kernels
        assert k.expert_gemm_host_s.value == pytest.approx(per_expert, rel=2e-3)
        assert k.expert_gemm_host_s.value > 8 * k.launch_overhead_s.value  # far above a bare launch


def test_a_grouped_gemm_is_issued_once_per_local_expert_and_pass():
    """Qwen3-30B-A3B at EP 8: a rank holds E/EP = 128/8 = 16 experts; its two grouped GEMMs (gate/up and
    down) each run 16 cuBLASLt GEMMs forward, 16 for the data gradient and 16 for the weight gradient: 2 x 16
    x 3 = 96 per layer and micro-batch. At 33.4 us each that is 3.2 ms of host time (plus the other kernels
    at 4 us), and the stage's micro-batch shows what exceeds its GPU time. At EP 16 the count halves."""
    from btacalc.model.gpu.costs import layer_parts
    from btacalc.model.gpu.fixed import host_time, launch_time

    p = _problem("qwen3-30b-a3b", hw="b200", run=NO_RERUN, devices=8, expert_parallel=8)
    (part,) = layer_parts(p, p.evaluate(1, 1))
    assert part.expert_gemms == pytest.approx(2 * (128 / 8) * 3) == 96
    # the dense GEMMs (q/k/v, output projection, router) stay plain launches, 3 passes each
    assert part.kernels >= 3 * 3
    assert host_time(p, part.kernels, part.expert_gemms) == pytest.approx(part.kernels * 4e-6 + 96 * 3.34e-5)
    assert launch_time(host_time(p, 0, 96), 2e-3) == pytest.approx(96 * 3.34e-5 - 2e-3)
    assert launch_time(host_time(p, 0, 96), 4e-3) == 0.0
    p16 = _problem("qwen3-30b-a3b", hw="b200", run=NO_RERUN, devices=16, expert_parallel=16)
    assert layer_parts(p16, p16.evaluate(1, 1))[0].expert_gemms == pytest.approx(48)


def test_a_module_call_costs_the_host_what_te_pr_1191_measured():
    """TransformerEngine PR 1191: Megatron-core's TEColumnParallelLinear takes 115 us of CPU time per forward
    pass (BF16, TP 1; 140 us before the PR, 140 / 1.22 = 115); its forward launches one GEMM, already counted
    at the 4 us launch overhead, so a module call adds 115 - 4 = 111 us on every GPU profile."""
    assert 140e-6 / 1.22 == pytest.approx(115e-6, rel=5e-3)
    for hw in ("a100-80gb", "h100", "h200", "b200", "gb200"):
        k = resolve_hardware(hw).kernels
        assert k.module_host_s.value == pytest.approx(115e-6 - k.launch_overhead_s.value)
        assert k.module_host_s.value == pytest.approx(111e-6)


def test_a_moe_layer_calls_its_modules_once_per_pass():
    """Qwen3-30B-A3B under Megatron's TE layer spec (Megatron-LM @ d98e8a64 megatron/core/models/gpt/
    gpt_layer_specs.py L139-159; experts.py L183-240): linear_qkv, linear_proj and the experts' grouped
    linear_fc1 and linear_fc2 are linear modules, each called forward and once backward (2 passes without a
    re-run), and the DotProductAttention module forward and backward: 4 x 2 + 2 = 10 calls per layer and
    micro-batch. The router's h x E gating GEMM is a functional call inside the router, not a module. At
    111 us each: 1.11 ms of host time per layer on top of the kernels (4 us) and the 96 expert GEMMs (33.4 us).
    A full re-run repeats each module's forward, the attention's too (docs/host-time.md 'attnhost'): 4 x 3 + 3 = 15."""
    from btacalc.model.gpu.costs import layer_parts
    from btacalc.model.gpu.fixed import host_time

    p = _problem("qwen3-30b-a3b", hw="b200", run=NO_RERUN, devices=8, expert_parallel=8)
    (part,) = layer_parts(p, p.evaluate(1, 1))
    assert part.module_calls == pytest.approx(4 * 2 + 2) == 10
    expected = part.kernels * 4e-6 + 96 * 3.34e-5 + 10 * 111e-6
    assert host_time(p, part.kernels, part.expert_gemms, part.module_calls) == pytest.approx(expected)
    full = _problem("qwen3-30b-a3b", hw="b200", devices=8, expert_parallel=8,
                    run=RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute="full"))
    assert layer_parts(full, full.evaluate(1, 1))[0].module_calls == pytest.approx(4 * 3 + 3)
    dense = _problem("llama-3-8b", hw="h100", run=NO_RERUN, devices=8)  # q/k/v, o, gate/up, down + attention
    assert layer_parts(dense, dense.evaluate(1, 1))[0].module_calls == pytest.approx(4 * 2 + 2)


def test_an_eager_op_costs_the_host_what_pytorch_issue_122029_measured():
    """PyTorch issue 122029 (2024-03-29, a 1x H100 machine): benchmarks/dynamo/microbenchmarks/overheads.py runs
    `x + 1` eagerly at 3.8 us with requires_grad (2.9 us without): the unit of the layers' eager glue on every
    GPU profile; it is not a launch (a CPU tensor), which stays launch_overhead_s."""
    for hw in ("a100-80gb", "h100", "h200", "b200", "gb200"):
        k = resolve_hardware(hw).kernels
        assert k.eager_op_host_s.value == pytest.approx(3.8e-6)
        assert k.eager_op_host_s.value < k.launch_overhead_s.value


def test_a_layer_pays_its_eager_glue_in_reference_ops():
    """The glue measured by tools/moe_host_ops.py --wall in reference-op equivalents: a dense GQA/SwiGLU layer
    161 forward + 155 backward (catalogue qkv_proj), an MoE layer 195 + 140 more (dispatch, router graphed).
    Qwen3-30B-A3B without a re-run: 161 + 155 + 195 + 140 = 651 reference ops, x 3.8 us = 2.47 ms per layer and
    micro-batch, added to the kernels (4 us), 96 expert GEMMs (33.4 us) and 10 module calls (111 us). A full
    re-run repeats the forward glue: 651 + 161 + 195 = 1,007. A dense Llama layer: 316, 1.2 ms. The grouped
    linears' per-expert Python (next test) comes on top, in the same unit."""
    from btacalc.model.gpu.costs import layer_parts
    from btacalc.model.gpu.fixed import host_time

    p = _problem("qwen3-30b-a3b", hw="b200", run=NO_RERUN, devices=8, expert_parallel=8)
    (part,) = layer_parts(p, p.evaluate(1, 1))
    grouped = 16 * 2 * (1.0 + 2.7)  # GroupedLinear's per-expert Python (tegrouped, the next test)
    assert part.glue_ops == pytest.approx(161 + 155 + 195 + 140 + grouped)
    expected = part.kernels * 4e-6 + 96 * 3.34e-5 + 10 * 111e-6 + (651 + grouped) * 3.8e-6
    assert host_time(p, part.kernels, part.expert_gemms, part.module_calls, part.glue_ops) == pytest.approx(expected)
    assert 651 * 3.8e-6 == pytest.approx(2.47e-3, rel=2e-3)
    full = _problem("qwen3-30b-a3b", hw="b200", devices=8, expert_parallel=8,
                    run=RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute="full"))
    assert layer_parts(full, full.evaluate(1, 1))[0].glue_ops == pytest.approx(651 + 161 + 195 + grouped + 16 * 2 * 1.0)
    dense = _problem("llama-3-8b", hw="h100", run=NO_RERUN, devices=8)
    assert layer_parts(dense, dense.evaluate(1, 1))[0].glue_ops == pytest.approx(161 + 155)


def test_a_grouped_linear_pays_its_per_expert_python_per_pass():
    """TransformerEngine v2.12 GroupedLinear's Python per local expert, timed by tools/te_grouped_ops.py on CPU
    (docs/host-time.md, tegrouped): the slope over 1-32 experts of its forward, 0.99, 1.04, 1.20 and 1.03 reference
    ops in four runs, the median 1.035 taken as 1.0, and of forward + backward, 3.81, 3.76, 3.71 and 3.80, the median
    less the forward's: 3.78 - 1.035 = 2.74, taken as 2.7. One Qwen3-30B-A3B layer at
    EP 8 (128 / 8 = 16 local experts, fc1 and fc2 grouped) without a re-run: 16 x 2 x (1.0 + 2.7) = 118.4
    reference ops, x 3.8 us = 0.450 ms of host time per layer and micro-batch; the first forward 16 x 2 x 1.0 = 32
    (issued after the dispatcher's sync); a full re-run repeats the forward: 16 x 2 x (2 x 1.0 + 2.7). At EP 16 half
    of it. A dense layer has no grouped linear; a CUDA graph that replays the experts' module would take it."""
    from btacalc.catalogue.constants import constants
    from btacalc.model.gpu.costs import layer_parts

    te = constants().transformer_engine
    assert te.grouped_linear_expert_forward_ref_ops == pytest.approx((1.03 + 1.04) / 2, abs=0.05)  # the median
    assert te.grouped_linear_expert_backward_ref_ops == pytest.approx((3.76 + 3.80) / 2 - 1.035, abs=0.05)
    dense_glue, moe_glue = 161 + 155, 195 + 140  # the layer's glue without the grouped linears (test above)

    def glue(ep, recompute="none"):
        run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute=recompute)
        p = _problem("qwen3-30b-a3b", hw="b200", run=run, devices=16, expert_parallel=ep)
        (part,) = layer_parts(p, p.evaluate(1, 1))
        return part

    ep8 = glue(8)
    assert ep8.glue_ops - dense_glue - moe_glue == pytest.approx(16 * 2 * (1.0 + 2.7))
    assert 16 * 2 * (1.0 + 2.7) == pytest.approx(118.4)
    assert (ep8.glue_ops - dense_glue - moe_glue) * 3.8e-6 == pytest.approx(0.450e-3, rel=1e-3)
    assert ep8.glue_ops_post == pytest.approx(16 * 2 * 1.0)
    assert ep8.glue_ops_fwd == pytest.approx(161 + 195 + 16 * 2 * 1.0)
    assert glue(16).glue_ops - dense_glue - moe_glue == pytest.approx(8 * 2 * (1.0 + 2.7))
    full = glue(8, "full")
    assert full.glue_ops - 2 * 161 - 155 - 2 * 195 - 140 == pytest.approx(16 * 2 * (2 * 1.0 + 2.7))


# tools/te_grouped_ops.py --time, runs 2-7 of docs/host-time.md tegrouped2 (7 rounds each): the slope per local
# expert of the forward and of forward + backward, in reference ops, per recipe (bf16: the 16-bit path)
_TEGROUPED2_SLOPES = {
    "bf16": ([1.02, 1.07, 1.04, 1.03, 1.09, 0.96], [3.76, 3.80, 3.86, 3.77, 3.73, 3.70]),
    "fp8": ([1.82, 1.95, 1.63, 1.92, 1.95, 1.83], [5.27, 5.11, 4.93, 5.21, 5.27, 5.25]),
    "fp8-current": ([1.77, 1.81, 1.81, 1.79, 1.88, 1.86], [5.00, 5.13, 5.12, 4.90, 5.19, 5.32]),
    "fp8-blockwise": ([1.85, 1.67, 2.02, 1.81, 1.78, 1.71], [5.33, 4.85, 5.70, 5.45, 5.26, 5.23]),
    "mxfp8": ([1.80, 1.82, 1.58, 1.69, 1.74, 1.76], [5.20, 5.15, 4.66, 5.41, 5.28, 5.74]),
    "nvfp4": ([2.54, 2.04, 1.85, 1.77, 1.91, 1.77], [6.52, 5.67, 5.70, 5.30, 5.73, 5.54]),
}


@pytest.mark.parametrize("precision, hw", [("fp8", "h100"), ("fp8-current", "h100"), ("fp8-blockwise", "h100"),
                                           ("mxfp8", "b200"), ("nvfp4", "b200")])
def test_each_recipe_pays_its_quantizers_python_per_local_expert(precision, hw):
    """Under a low-precision recipe TE's GroupedLinear runs its quantizers' Python per local expert on top of the
    16-bit path's (set_usage, the cached weight workspace, two storages and their quantizer copies, update_usage,
    the input storage's save, restore and clear), timed by tools/te_grouped_ops.py --recipe (docs/host-time.md,
    tegrouped2). The recipe's figures are the medians of its six runs less the 16-bit medians of the same runs,
    forward and backward (= forward + backward - forward), to 0.1; the host time per local expert and grouped
    linear is then (16-bit + recipe) reference ops x the reference op (3.8 us): Qwen3-30B-A3B at EP 8 (16 local
    experts) against EP 16 (8) on 16 GPUs differs by 8 experts x 2 grouped linears (fc1, fc2), nothing else; the
    first forward (after the dispatcher's sync) takes the forward figures alone."""
    from statistics import median

    from btacalc.catalogue.constants import constants
    from btacalc.config.precision import recipe
    from btacalc.model.gpu.costs import layer_parts
    from btacalc.model.gpu.fixed import host_time

    f16, fb16 = (median(v) for v in _TEGROUPED2_SLOPES["bf16"])
    f, fb = (median(v) for v in _TEGROUPED2_SLOPES[precision])
    r = recipe(precision)
    assert r.grouped_linear_expert_quantizer_forward_ref_ops == pytest.approx(round(f - f16, 1))
    assert r.grouped_linear_expert_quantizer_backward_ref_ops == pytest.approx(round((fb - f) - (fb16 - f16), 1))
    te = constants().transformer_engine
    assert (te.grouped_linear_expert_forward_ref_ops, te.grouped_linear_expert_backward_ref_ops) == (
        pytest.approx(round(f16, 1)), pytest.approx(round(fb16 - f16, 1)))  # the same runs' 16-bit path
    forward = te.grouped_linear_expert_forward_ref_ops + r.grouped_linear_expert_quantizer_forward_ref_ops
    backward = te.grouped_linear_expert_backward_ref_ops + r.grouped_linear_expert_quantizer_backward_ref_ops

    def part(ep):
        run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute="none", precision=precision)
        p = _problem("qwen3-30b-a3b", hw=hw, run=run, devices=16, expert_parallel=ep)
        return p, layer_parts(p, p.evaluate(1, 1))[0]

    (p8, ep8), (_p16, ep16) = part(8), part(16)
    per_expert = host_time(p8, 0, glue_ops=ep8.glue_ops - ep16.glue_ops) / (8 * 2)
    assert per_expert == pytest.approx((forward + backward) * 3.8e-6)
    assert (ep8.glue_ops_fwd - ep16.glue_ops_fwd) / (8 * 2) == pytest.approx(forward)


def test_the_recipes_quantizer_python_moves_the_qwen3_30b_layer():
    """Qwen3-30B-A3B at EP 8 (16 local experts x fc1, fc2) per layer and micro-batch, over BF16: FP8 delayed
    16 x 2 x (0.8 + 0.6) = 44.8 reference ops, 25.6 of them in the first forward; MXFP8 16 x 2 x (0.7 + 0.8) = 48.0,
    22.4 forward (was 38.4, all forward, with the first round's stand-in defect S6); a 16-bit recipe adds none."""
    from btacalc.model.gpu.costs import layer_parts

    def part(precision, hw):
        run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute="none", precision=precision)
        p = _problem("qwen3-30b-a3b", hw=hw, run=run, devices=8, expert_parallel=8)
        return layer_parts(p, p.evaluate(1, 1))[0]

    for precision, hw, total, first in [("fp8", "h100", 44.8, 25.6), ("mxfp8", "b200", 48.0, 22.4)]:
        low, bf16 = part(precision, hw), part("bf16", hw)
        assert low.glue_ops - bf16.glue_ops == pytest.approx(total)
        assert low.glue_ops_fwd - bf16.glue_ops_fwd == pytest.approx(first)
    assert part("fp16", "h100").glue_ops == pytest.approx(part("bf16", "h100").glue_ops)


def test_a_re_run_repeats_the_recipes_quantizer_python_forward():
    """A re-run of the forward (here the full recompute) runs GroupedLinear's forward again, quantizers included
    (set_usage, split_quantize of the input, the cached weight workspace): the recipe's forward figure repeats per
    local expert and grouped linear, its backward figure does not. Qwen3-30B-A3B at EP 8 (16 local experts x fc1,
    fc2), what the re-run adds under the recipe beyond what it adds under BF16: FP8 delayed 16 x 2 x 0.8 = 25.6
    reference ops, MXFP8 16 x 2 x 0.7 = 22.4 (docs/host-time.md tegrouped2, 'taken'); the first forward's share
    does not grow with the re-run."""
    from btacalc.model.gpu.costs import layer_parts

    def part(precision, hw, recompute):
        run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute=recompute, precision=precision)
        p = _problem("qwen3-30b-a3b", hw=hw, run=run, devices=8, expert_parallel=8)
        return layer_parts(p, p.evaluate(1, 1))[0]

    for precision, hw, added in [("fp8", "h100", 16 * 2 * 0.8), ("mxfp8", "b200", 16 * 2 * 0.7)]:
        rerun = {q: part(q, hw, "full").glue_ops - part(q, hw, "none").glue_ops for q in (precision, "bf16")}
        assert rerun[precision] - rerun["bf16"] == pytest.approx(added)
        assert part(precision, hw, "full").glue_ops_fwd == pytest.approx(part(precision, hw, "none").glue_ops_fwd)


def test_the_dispatchers_sync_splits_a_micro_batch_into_forward_and_backward():
    """A dropless MoE layer waits for its token counts on the host once per forward (token_dispatcher.py
    `d2h_event.synchronize()`), so forward and backward each take the larger of their host and GPU times:
    host 3 + 2 ms, GPU 2 + 4 ms takes max(3, 2) + max(2, 4) = 7 ms, 1 ms beyond the GPU's 6, where without the
    sync max(5, 6) = 6 hides the host entirely."""
    from btacalc.model.gpu.fixed import SyncSplit, gpu_forward_share, launch_time, launch_time_synced

    assert launch_time_synced(SyncSplit(5e-3, 6e-3, 3e-3, 2e-3)) == pytest.approx(
        (max(3, 2) + max(2, 4) - 6) * 1e-3) == pytest.approx(1e-3)
    assert launch_time(5e-3, 6e-3) == 0.0
    # the GPU's forward: compute less the backward compute, plus half of the rest (each collective's twin)
    assert gpu_forward_share(9e-3, 6e-3, 11e-3) == pytest.approx(3e-3 + 1e-3)


def test_a_moe_layer_issues_a_third_of_its_gemms_and_half_its_modules_forward():
    """Qwen3-30B-A3B at EP 8, no re-run: forward alone issues 2 x 16 = 32 expert GEMMs (of 96), 5 module calls
    (linear_qkv, linear_proj, fc1, fc2, attention; of 10) and 161 + 195 = 356 reference ops of glue (of 651) plus
    the grouped linears' per-expert forward Python, 16 x 2 x 1.0 (tegrouped); the
    stage's launch row is then max(0, H_f - G_f) + max(0, H_b - G_b); a dense stage keeps max(0, H - G)."""
    from btacalc.model.gpu.costs import layer_parts
    from btacalc.model.gpu.fixed import SyncSplit, gpu_forward_share, host_time, launch_time_synced
    from btacalc.model.gpu.timing import gpu_step_time

    p = _problem("qwen3-30b-a3b", hw="b200", run=NO_RERUN, devices=8, expert_parallel=8, micro_batches=4,
                 devices_per_node=8)
    (part,) = layer_parts(p, p.evaluate(1, 1))
    assert (part.expert_gemms_fwd, part.module_calls_fwd, part.glue_ops_fwd) == pytest.approx((32, 5, 356 + 32 * 1.0))
    assert part.kernels / 3 < part.kernels_fwd < part.kernels / 2  # GEMM phases 1 of 3 passes, the others 1 of 2
    st = gpu_step_time(p, 1, 1, p.evaluate(1, 1))
    terms = st.details["terms"]
    gpu = sum(v for k, v in terms.items() if k != "launch")
    assert terms["launch"] >= max(0.0, st.details["host_s"] - gpu) - 1e-12  # never less than without the sync
    dense = _problem("llama-3-8b", hw="h100", run=NO_RERUN, devices=8)
    dt = gpu_step_time(dense, 1, 1, dense.evaluate(1, 1)).details
    gpu_d = sum(v for k, v in dt["terms"].items() if k != "launch")
    assert dt["terms"]["launch"] == pytest.approx(max(0.0, dt["host_s"] - gpu_d))
    assert launch_time_synced(SyncSplit(host_time(p, part.kernels, 96, 10, 651), 1.0, host_time(
        p, part.kernels_fwd, 32, 5, 356), gpu_forward_share(1.0, 0.5, 1.0))) == 0.0  # a GPU-bound layer hides both


def test_a_layer_split_at_the_dispatchers_sync_runs_as_a_two_block_flow_shop():
    """Between two syncs the host issues the post-sync part of one layer (exchange, experts, combine), then the
    pre-sync part of the next (attention, router, preprocess); the GPU, idle at the sync, cannot run a kernel
    before it is issued. A layer's forward with host 2 ms / GPU 3 ms, split post (host 1.5, GPU 0.5) and pre
    (host 0.5, GPU 2.5): the host issues the post block by 1.5 ms (the GPU done with it by then), the pre block's
    2.5 ms of GPU work start at 1.5 ms: 4 ms, where max(2, 3) = 3 ms would hide the host. Swap the blocks' GPU
    work (post 2.5, pre 0.5) and the GPU is busy from the start: max(2, 3) = 3 ms holds."""
    from btacalc.model.gpu.fixed import SyncSplit, launch_time_synced

    h_post, g_post, h_pre, g_pre = 1.5e-3, 0.5e-3, 0.5e-3, 2.5e-3
    segment = max(h_post + h_pre, g_post + g_pre, h_post + g_pre)  # the two-block flow-shop makespan
    assert segment == pytest.approx(4e-3)
    t = SyncSplit(host_s=2e-3, gpu_s=3e-3, host_forward_s=2e-3, gpu_forward_s=3e-3, host_post_s=h_post,
                  gpu_post_s=g_post)
    assert launch_time_synced(t) == pytest.approx(segment - 3e-3) == pytest.approx(1e-3)
    swapped = SyncSplit(2e-3, 3e-3, 2e-3, 3e-3, host_post_s=1.5e-3, gpu_post_s=2.5e-3)
    assert launch_time_synced(swapped) == 0.0
    # a backward with its own host excess adds it (no sync there): host 2 + 2 ms, GPU 3 + 1 ms
    both = SyncSplit(4e-3, 4e-3, 2e-3, 3e-3, host_post_s=h_post, gpu_post_s=g_post)
    assert launch_time_synced(both) == pytest.approx(1e-3 + (2 - 1) * 1e-3)


def test_the_experts_and_combine_are_issued_after_the_sync():
    """Qwen3-30B-A3B at EP 8, no re-run: the post-sync part of a layer's forward is the experts' 2 x 16 = 32
    expert GEMMs and their 2 grouped-linear modules (fc1, fc2) with their per-expert forward Python (16 x 2 x 1.0
    reference ops, tegrouped), not the attention's modules or the dispatch's glue (counted before the sync: a lower
    bound of the post-sync host time); its forward compute is the experts' and the combine's forward share, under
    the layer's forward compute."""
    from btacalc.model.gpu.costs import layer_parts

    p = _problem("qwen3-30b-a3b", hw="b200", run=NO_RERUN, devices=8, expert_parallel=8, micro_batches=4,
                 devices_per_node=8)
    (part,) = layer_parts(p, p.evaluate(1, 1))
    assert (part.expert_gemms_post, part.module_calls_post, part.glue_ops_post) == pytest.approx((32, 2, 16 * 2 * 1.0))
    assert 0 < part.kernels_post < part.kernels_fwd
    post = sum(part.phase_s[n] for n in ("experts", "combine"))  # forward + backward of the post phases
    assert post / 3 * 0.99 < part.compute_post_s < post / 2  # their forward: a third (GEMMs) to a half of it


def test_a_host_bound_moe_micro_batch_takes_its_host_time():
    """Qwen3-30B-A3B on 8 B200 at EP 8, one sequence of 4,096 per micro-batch: the micro-batch's terms add
    up to the larger of its GPU time and its host time (48 layers of 96 expert GEMMs and their kernels, plus
    the parts outside the layers)."""
    from btacalc.model.gpu.costs import layer_parts, outside_parts
    from btacalc.model.gpu.fixed import host_time
    from btacalc.model.gpu.timing import gpu_step_time

    p = _problem("qwen3-30b-a3b", hw="b200", run=NO_RERUN, devices=8, expert_parallel=8, micro_batches=4,
                 devices_per_node=8)  # one NVLink node: the all-to-all is short and the host binds
    ev = p.evaluate(1, 1)
    (part,), (first, last) = layer_parts(p, ev), outside_parts(p, ev)
    layers = p.model.num_layers
    host = host_time(p, layers * part.kernels + first.kernels + last.kernels, layers * part.expert_gemms,
                     layers * part.module_calls + first.module_calls + last.module_calls,
                     layers * part.glue_ops + first.glue_ops + last.glue_ops)
    st = gpu_step_time(p, 1, 1, ev)
    terms = st.details["terms"]
    gpu = sum(v for k, v in terms.items() if k != "launch")
    assert st.details["host_s"] == pytest.approx(host)
    assert host > gpu  # host-bound: 48 x 96 expert GEMMs x 33.4 us = 154 ms of host time alone
    assert host > layers * 96 * 3.34e-5
    assert terms["launch"] == pytest.approx(max(0.0, host - gpu))
    assert st.details["micro_batch_s"] == pytest.approx(max(host, gpu))


def test_the_step_carries_the_fixed_costs_as_rows():
    """The optimizer update and the gradient norm are rows of the step's breakdown and part of the step
    (with the per-tile overhead, reported apart)."""
    from btacalc.model.gpu.timing import gpu_step_time

    p = _problem(devices=8, zero_stage=1, micro_batches=4)
    st = gpu_step_time(p, 1, 1)
    assert st.phase_time_s["optimizer_step"] > 0 and st.phase_time_s["grad_norm"] > 0
    assert "launch" in st.phase_time_s
    rows = sum(v for k, v in st.phase_time_s.items())
    assert rows + st.tiling_overhead_s == pytest.approx(st.step_time_s, rel=1e-9)


# --- measured ceilings per generation and the per-wave time (model/gpu/gemm.py) ---------------------------

MAMF = {  # stas00/ml-engineering@744d01e1 compute/accelerator/README.md lines 351-358: BF16 matmul TFLOP/s, best shape
    "a100-40gb": (271.2e12, (1024, 10240, 5120)),
    "a100-80gb": (271.2e12, (1024, 10240, 5120)),
    "h100": (794.5e12, (2048, 2048, 13312)),
    "h200": (794.5e12, (2048, 2048, 13312)),  # the table: "H200 is the same"
    "b200": (1745.0e12, (1792, 16128, 3072)),
    "gb200": (1822.0e12, (4096, 9728, 2048)),
}


def _profile_device(hw: str) -> GemmDevice:
    """A profile's GEMM device at datasheet x measured ceiling (compute_efficiency left out: microbenchmark)."""
    p = resolve_hardware(hw)
    assert p.kernels is not None
    return GemmDevice(p.chip.peak_flops_per_s.value * p.kernels.gemm_ceiling_fraction.value,
                      p.memory.offchip_bandwidth_bytes_per_s.value, int(p.chip.cores.value), p.kernels.gemm_tiles,
                      p.kernels.gemm_wave_overhead_s.value, p.kernels.gemm_overlap_exponent.value)


@pytest.mark.parametrize("hw", sorted(MAMF))
def test_each_generations_ceiling_reproduces_its_published_large_gemm_rate(hw):
    """The profile's ceiling is derived so that its best-shape GEMM, through the shape model, runs at the
    published Maximum Achievable Matmul FLOPS. By hand for the A100 80GB: 1024x10240x5120 on 108 SMs is
    320 tiles of 128x256, 3 waves for 2.963 of work: compute 2mnk / (312e12 x 0.914) x 3/2.963; the
    operands (1024·5120 + 5120·10240 + 1024·10240)·2 B through 2.039 TB/s; the smooth roofline
    (c^1.6 + m^1.6)^(1/1.6) of the two is 2mnk / 271.2 TFLOP/s."""
    measured, (m, n, k) = MAMF[hw]
    achieved = 2 * m * n * k / gemm_time(m, n, k, 2, _profile_device(hw)).time_s
    assert achieved == pytest.approx(measured, rel=0.005)
    if hw == "a100-80gb":
        c = 2 * m * n * k / (312e12 * 0.914) * 3 / (320 / 108)
        mem = (m * k + k * n + m * n) * 2 / 2.039e12
        assert 2 * m * n * k / (c ** 1.6 + mem ** 1.6) ** (1 / 1.6) == pytest.approx(measured, rel=0.002)


def test_generations_differ_by_measurement_not_only_by_sms():
    """The ceilings follow the measured order: A100 (86.9%) > H100 (80.3%) > B200 (77.6%) > GB200 (1822/2450
    = 74.4%) of the datasheet peak in stas00's table, before quantisation and the memory term."""
    ceil = {hw: resolve_hardware(hw).kernels.gemm_ceiling_fraction.value for hw in ("a100-80gb", "h100", "h200",
                                                                                      "b200", "gb200")}
    assert ceil["a100-80gb"] > ceil["h100"] > ceil["b200"] > ceil["gb200"]
    assert ceil["h200"] < ceil["h100"]  # the same measured rate with a faster HBM leaves less to the math


def test_each_wave_pays_the_fixed_time():
    """1 SM, 128 x 128 tiles, m = 256, n = 128: two tiles, two waves; time = 2mnk / peak + 2 x o."""
    o = 2.5e-6
    dev = GemmDevice(PEAK, FAST, 1, ((128, 128),), o)
    m, n, k = 256, 128, 4096
    assert gemm_time(m, n, k, 2, dev).time_s == pytest.approx(2 * m * n * k / PEAK + 2 * o)


H800_FP8 = 1979e12  # FLOP/s, dense FP8 (the H100 SXM datasheet; H800 has the same SMs and clocks)


@pytest.mark.parametrize("groups,m,n,k,tflops", [
    # DeepGEMM README @55ab91f7, "Normal GEMMs for dense models", m = 4096 rows
    (1, 4096, 2112, 7168, 1009), (1, 4096, 24576, 1536, 1125), (1, 4096, 32768, 512, 751),
    (1, 4096, 7168, 16384, 1426), (1, 4096, 4096, 7168, 1265), (1, 4096, 7168, 2048, 1168),
    # "Grouped GEMMs for MoE models (contiguous layout)": experts x rows per expert
    (4, 8192, 4096, 7168, 1346), (4, 8192, 7168, 2048, 1214), (8, 4096, 4096, 7168, 1346), (8, 4096, 7168, 2048, 1214),
    # "(masked layout)": 1, 2, 4 experts of 1024, 512, 256 rows
    (1, 1024, 4096, 7168, 1233), (1, 1024, 7168, 2048, 925), (2, 512, 4096, 7168, 1040), (2, 512, 7168, 2048, 916),
    (4, 256, 4096, 7168, 932), (4, 256, 7168, 2048, 815),
])
def test_deepgemm_dense_and_grouped_rates(groups, m, n, k, tflops):
    """Three numbers, 0.73 of the FP8 peak, the H100 profile's 1.5 µs per wave and roofline exponent 1.6,
    give every row of DeepGEMM's H800 tables within 9%: the k = 512 dense row at half the k = 16384 row's
    rate (a wave of 128x256 tiles at k = 512 computes for 2·128·256·512 / (1979e12·0.73/132) = 2.3 µs and
    waits 1.5 µs), grouped experts with thousands of rows at the dense rate, and 256 rows per expert
    down to 0.47 of the peak as the weights' traffic nears the math. FP8 operands (1 byte) and BF16
    results (2 bytes): the traffic (mk + kn + 2mn) bytes, passed as its mean bytes per element."""
    h100 = resolve_hardware("h100")
    assert h100.kernels is not None
    dev = GemmDevice(H800_FP8 * 0.73, 3.35e12, 132, h100.kernels.gemm_tiles, h100.kernels.gemm_wave_overhead_s.value,
                     h100.kernels.gemm_overlap_exponent.value)
    bytes_per_element = (m * k + k * n + 2 * m * n) / (m * k + k * n + m * n)
    t = gemm_time(m, n, k, bytes_per_element, dev, groups=groups)
    assert 2 * m * n * k * groups / t.time_s / 1e12 == pytest.approx(tflops, rel=0.09)


def test_the_smooth_roofline_by_hand():
    """p = 2, compute 3 µs and memory 4 µs give 5 µs (the 3-4-5 triangle); p = inf gives max = 4 µs.
    1 SM, one 128 x 128 tile, k chosen for 3 µs of compute at PEAK; HBM set for 4 µs of traffic."""
    m = n = 128
    k = int(3e-6 * PEAK / (2 * m * n))
    traffic = (m * k + k * n + m * n) * 2
    dev = GemmDevice(PEAK, traffic / 4e-6, 1, ((128, 128),), 0.0, 2.0)
    compute = 2 * m * n * k / PEAK
    assert gemm_time(m, n, k, 2, dev).time_s == pytest.approx((compute ** 2 + 4e-6 ** 2) ** 0.5)
    assert gemm_time(m, n, k, 2, GemmDevice(PEAK, traffic / 4e-6, 1, ((128, 128),))).time_s == pytest.approx(4e-6)


def test_matmul_phases_run_at_datasheet_x_ceiling_x_compute_efficiency():
    from btacalc.model.gpu.rates import rates_of

    p = _problem(tensor_parallel=8, devices=8)
    hw = p.hardware
    assert hw.kernels is not None and hw.calibration.compute_efficiency is not None
    r = rates_of(p)
    assert r.peak_share == pytest.approx(hw.kernels.gemm_ceiling_fraction.value * hw.calibration.compute_efficiency.value)
    assert r.peak == pytest.approx(989e12 * r.peak_share)


def test_the_scalar_and_array_paths_of_the_core_time_factor_agree():
    """`attention_core_time_factor` answers one sequence length in Python floats (`_one_core_time_factor`, the hot path)
    and arrays of them with numpy: the same IEEE operations, so the same bits, for full and windowed layers,
    counted full or causal, and a length that is not a multiple of the 128-key block."""
    import numpy as np

    from btacalc.model.gpu.rates import attention_core_time_factor

    seqs, windows = [130, 512, 4096, 8191], [1, 100, 4096, 8191]
    for causal in (False, True):
        p = _problem(run=RunOptions(seq_len=4096, attention="flash", causal=causal), devices=8)
        for windowed in (False, True):
            arrays = attention_core_time_factor(p, {"s": np.array(seqs), "w": np.array(windows)}, windowed)
            scalars = [attention_core_time_factor(p, {"s": s, "w": w}, windowed) for s, w in zip(seqs, windows)]
            assert list(arrays) == scalars


def test_a_low_precision_grouped_linear_launches_its_quantisation_per_expert():
    """TransformerEngine v2.6-v2.13's GroupedLinear quantises its input forward and its output gradient backward
    with one tex.split_quantize each, which calls every local expert's quantizer in a C++ loop
    (TE @ v2.9 transformer_engine/pytorch/csrc/extensions/cast.cpp L103-150: a fused kernel only for delayed
    scaling; quantizer.cpp: MXFP8 one nvte_quantize_v2 per expert L1091-1101, current scaling amax + scale + cast
    L497-535). Qwen3-30B-A3B at EP 8 (16 local experts, linear_fc1 and linear_fc2) without a re-run:
    MXFP8 16 x 2 grouped linears x 2 passes x 1 = 64 launches more than BF16, 0.256 ms at 4 us; FP8 current
    scaling 3 kernels each, 192; delayed scaling 0 (one fused kernel per call); a full re-run quantises the
    input once more (3 passes). The first forward issues G x 2 x k of them."""
    from btacalc.model.gpu.costs import layer_parts

    def part(precision, recompute="none", hw="b200"):
        run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute=recompute, precision=precision)
        p = _problem("qwen3-30b-a3b", hw=hw, run=run, devices=8, expert_parallel=8)
        return layer_parts(p, p.evaluate(1, 1))[0]

    bf16 = part("bf16")
    local_experts, grouped_linears = 128 // 8, 2
    mx = part("mxfp8")
    assert mx.kernels - bf16.kernels == pytest.approx(local_experts * grouped_linears * 2 * 1) == 64
    assert mx.kernels_fwd - bf16.kernels_fwd == pytest.approx(local_experts * grouped_linears * 1)
    assert (mx.kernels - bf16.kernels) * resolve_hardware("b200").kernels.launch_overhead_s.value == \
        pytest.approx(64 * 4e-6)
    assert part("fp8-current", hw="h100").kernels - part("bf16", hw="h100").kernels == pytest.approx(16 * 2 * 2 * 3)
    assert part("fp8", hw="h100").kernels == pytest.approx(part("bf16", hw="h100").kernels)
    full = part("mxfp8", "full").kernels - part("bf16", "full").kernels
    assert full == pytest.approx(local_experts * grouped_linears * 3)
    dense = _problem("llama-3-8b", hw="b200", devices=8,
                     run=RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, precision="mxfp8"))
    dense16 = _problem("llama-3-8b", hw="b200", devices=8, run=RunOptions(seq_len=4096, attention="flash",
                                                                         gradient_bytes=4))
    assert layer_parts(dense, dense.evaluate(1, 1))[0].kernels == layer_parts(dense16, dense16.evaluate(1, 1))[0].kernels


def test_a_dispatcher_without_a_forward_sync_would_let_the_host_run_ahead(monkeypatch):
    """The all-to-all dispatcher, DeepEP and HybridEP (no token budget) each sync once per layer forward
    (fixed.py DISPATCHER_SYNCS, with their sources); the launch row follows the sync split only where the
    layout's dispatcher syncs: with no sync the micro-batch takes max(H, G) again."""
    from btacalc.model.gpu import fixed
    from btacalc.model.gpu.timing import gpu_step_time

    run = RunOptions(seq_len=2048, attention="flash", gradient_bytes=4, recompute="none")
    p = _problem("qwen3-30b-a3b", hw="h100", run=run, devices=16, expert_parallel=16, micro_batches=4,
                 devices_per_node=8)  # near balance: its forward host-bound, its backward GPU-bound
    syncs = fixed.dispatcher_syncs(p)
    assert syncs.forward_per_layer == 1 and "token_dispatcher.py" in syncs.source
    synced = gpu_step_time(p, 1, 1, p.evaluate(1, 1)).details
    monkeypatch.setitem(fixed.DISPATCHER_SYNCS, "alltoall", fixed.DispatcherSyncs(0, "test: no sync"))
    free = gpu_step_time(p, 1, 1, p.evaluate(1, 1)).details
    gpu = sum(v for k, v in free["terms"].items() if k != "launch")
    assert free["terms"]["launch"] == pytest.approx(max(0.0, free["host_s"] - gpu))
    assert synced["terms"]["launch"] > free["terms"]["launch"]  # the sync exposes the forward's host excess


def test_an_eager_sliding_window_layer_is_timed_on_the_whole_square():
    """The time factor of `test_eager_attention_computes_the_whole_square_whatever_the_count` reaches the clock:
    GPT-OSS-20B (window 128) under eager attention at s = 4,096 counts its sliding layer's Q K^T as s x w (1/32 of the
    full layer's: the catalogue's FLOPs below), but computes all s x s scores, so the phase takes at least the full
    layer's FLOPs at the large-GEMM rate. Before the fix the factor was computed and never applied (32x too fast)."""
    from btacalc.model.gpu.costs import _kind_rates, layer_parts
    from btacalc.model.gpu.rates import rates_of

    s, w = 4096, 128
    p = _problem("gpt-oss-20b", run=RunOptions(seq_len=s, attention="eager", gradient_bytes=4, recompute="none"),
                 devices=8, expert_parallel=8)
    ev = p.evaluate(1, 1)
    kinds = {kind.name: (kind, pv) for kind, pv in ev.layers}
    sliding, full = kinds["moe-sliding"][1].of("attn_scores"), kinds["moe-full"][1].of("attn_scores")
    counted = sliding["flops_fwd"] + sliding["flops_bwd"] + sliding["flops_recompute"]
    whole = full["flops_fwd"] + full["flops_bwd"] + full["flops_recompute"]
    assert counted * s / w == whole
    kind, pv = kinds["moe-sliding"]
    peak = _kind_rates(p, rates_of(p), kind, pv).peak
    parts = dict(zip([k.name for k, _ in ev.layers], layer_parts(p, ev)))
    assert parts["moe-sliding"].phase_s["attn_scores"] >= whole / peak * (1 - 1e-12)
