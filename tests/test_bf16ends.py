"""The first/last decoder layers a low-precision recipe keeps in BF16 (bf16ends; Megatron-LM --first-last-layers-bf16
--num-layers-at-start-in-bf16 N --num-layers-at-end-in-bf16 M), each test written as its derivation.

Megatron-LM @ d98e8a64 runs decoder layer i (0-based, global over the pipeline stages) outside the recipe's
fp8_autocast / FP4 context when i < N or i >= L - M (megatron/core/fp8_utils.py L711-727, L850-852;
fp4_utils.py L247-263), and builds its parameters outside fp8_model_init too (transformer_block.py L352-364): its
TransformerEngine linears run their GEMMs in BF16 from 16-bit operands, with no casts, no quantised weight cache and
16-bit saved inputs; every other layer is planned as before."""

from __future__ import annotations

import json

import pytest

from btacalc.config.execution import Layout
from btacalc.config.hardware import Number, resolve_hardware
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.memory import GpuMemory
from btacalc.model.gpu.stages import PipelineStages
from btacalc.model.gpu.timing import _stage, gpu_step_time
from btacalc.model.gpu.costs import outside_parts
from btacalc.planning.plan import make_plan
from support import resolved, with_calibration

# Llama 3 8B (its config.json): layers, h, FFN width f, query heads a, key/value heads a_kv, head dimension d_h
L, H, F, A, A_KV, D_H = 32, 4096, 14336, 32, 8, 128
S = 4096  # one sequence (G = 1, b = 1)
EFF = 0.5  # a round compute efficiency, so that the arithmetic is independent of the fitted one
# NVIDIA H100 SXM datasheet: dense BF16 989 TFLOP/s, dense FP8 1,979 TFLOP/s, HBM3 3.35 TB/s
H100_BF16, H100_FP8, H100_HBM = 9.89e14, 1.979e15, 3.35e12
LLAMA = load_preset("llama-3-8b")


def _h100_flat():
    """H100 with compute efficiency 0.5 and no GEMM-shape effect (no [kernels]: every matmul at its peak x 0.5; no
    streaming share either: every cast kernel at the full HBM bandwidth)."""
    number = Number(value=EFF, kind="estimate", source="https://example.org", note="test: a round number")
    hw = with_calibration(resolve_hardware("h100"), compute_efficiency=number)
    return hw.model_copy(update={"kernels": None,
                                 "memory": hw.memory.model_copy(update={"achievable_bandwidth_fraction": None})})


def _problem(hw, layout=Layout(), **run):
    return resolved(LLAMA, hw, layout, recompute="none", attention="flash", seq_len=S, **run)


def test_kinds_follow_megatrons_global_layer_numbers():
    # layer i is BF16 when i < N or i >= L - M, whatever the stage holding it: N = 2, M = 1 -> 0, 1 and 31
    assert sorted(LLAMA.bf16_layer_positions((2, 1))) == [0, 1, L - 1]
    kinds = LLAMA.layer_kinds(bf16_ends=(2, 1))
    assert [(k.name, k.count) for k in kinds] == [("decoder", L - 3), ("decoder-bf16", 3)]
    assert dict(kinds[1].features)["bf16_layer"] is True
    indices = LLAMA.layer_kind_indices((2, 1))
    assert [i for i, k in enumerate(indices) if k == 1] == [0, 1, L - 1]
    # without the option, one kind as before
    assert [(k.name, k.count) for k in LLAMA.layer_kinds()] == [("decoder", L)]


@pytest.mark.parametrize("pp", [1, 2])
def test_every_layer_in_bf16_is_the_bf16_plan(pp):
    """(a) N = L: no layer runs in the recipe, so the step time and every stage's memory are the plain BF16 plan's."""
    hw = resolve_hardware("h100")
    layout = Layout(devices=pp, pipeline_parallel=pp, micro_batches=4, devices_per_node=8)
    bf16 = _problem(hw, layout, precision="bf16")
    ends = _problem(hw, layout, precision="fp8-current", bf16_layers_at_start=L)
    lp = _problem(hw, layout, precision="fp8-current")
    t_bf16, t_ends, t_lp = (gpu_step_time(p, 1, 1).step_time_s for p in (bf16, ends, lp))
    assert t_ends == pytest.approx(t_bf16, rel=1e-12)
    assert t_lp < 0.9 * t_bf16  # the recipe itself is faster: the test can fail
    rows = [GpuMemory(p).stage_rows(1, 1) for p in (bf16, ends)]
    for a, b in zip(*rows):
        assert b.components == pytest.approx(a.components, rel=1e-12)
        assert b.components["low_precision_weights"] == 0


def test_one_bf16_layer_costs_the_gemm_rate_difference_less_its_casts():
    """(b) N = 1 on one H100 (PP 1, M = 1): the step's compute grows by one layer's linear GEMMs at the BF16 rate
    instead of the FP8 one, less that layer's activation casts, and its once-per-step weight casts go.

    Linear FLOPs of one layer per sequence (forward 2mnk, backward twice that): QKV h -> (a + 2 a_kv) d_h,
    output projection a d_h -> h, SwiGLU MLP 3 h x f. Current scaling on Hopper (compute capability 9.0) casts
    each element with an amax read (2 B), a read (2 B) and two FP8 copies (1 B each, the transpose for TN-only
    GEMMs): 6 B per element at HBM bandwidth. Elements cast per sequence: every linear's input forward and its
    output gradient backward, S (h + qkv) + S (2h) + S (2h + 3f); the weights once per step."""
    hw = _h100_flat()
    lp, ends = _problem(hw, precision="fp8-current"), _problem(hw, precision="fp8-current", bf16_layers_at_start=1)
    qkv = (A + 2 * A_KV) * D_H
    flops = 3 * 2 * S * (H * qkv + A * D_H * H + 3 * H * F)
    gemm_difference = flops / (H100_BF16 * EFF) - flops / (H100_FP8 * EFF)
    activation_casts = S * ((H + qkv) + 2 * H + (2 * H + 3 * F)) * 6 / H100_HBM
    weight_casts = (H * qkv + A * D_H * H + 3 * H * F) * 6 / H100_HBM
    st_lp, st_ends = gpu_step_time(lp, 1, 1), gpu_step_time(ends, 1, 1)
    compute = st_ends.details["terms"]["compute"] - st_lp.details["terms"]["compute"]
    assert compute == pytest.approx(gemm_difference - activation_casts, rel=1e-9)
    assert st_lp.phase_time_s["weight_casts"] - st_ends.phase_time_s["weight_casts"] == pytest.approx(weight_casts, rel=1e-9)
    # the BF16 layer's part: no casts, every linear phase at the 16-bit rate
    ev = ends.evaluate(1, 1)
    parts = {kind.name: part for (kind, _), part in zip(ev.layers, layer_parts(ends, ev))}
    assert parts["decoder-bf16"].cast_s == {} and parts["decoder-bf16"].weight_cast_s == 0
    assert parts["decoder"].weight_cast_s == pytest.approx(weight_casts, rel=1e-9)


def test_bf16_layer_saves_16_bit_inputs_and_caches_no_quantised_weights():
    """Memory of one layer kept in BF16 (PP 1): its linears save their inputs in 2 B, not the 1 B FP8 copy
    (qkv and fc1 read the norm's output h, fc2 f, per token; the output projection's input is the attention output
    O, which FlashAttention keeps in 16 bits for its own backward either way: formulas/attention.toml), and
    TransformerEngine caches no FP8 weights for it (2 copies x 1 B per parameter on Hopper)."""
    hw = resolve_hardware("h100")
    lp, ends = _problem(hw, precision="fp8-current"), _problem(hw, precision="fp8-current", bf16_layers_at_start=1)
    a, b = GpuMemory(lp).stage_rows(1, 1)[0].components, GpuMemory(ends).stage_rows(1, 1)[0].components
    saved_inputs = S * (H + H + F)  # elements saved per sequence, now 2 B instead of 1 B
    assert b["stored_activations"] - a["stored_activations"] == pytest.approx(saved_inputs * (2 - 1))
    linear_params = H * (A + 2 * A_KV) * D_H + A * D_H * H + 3 * H * F
    assert a["low_precision_weights"] - b["low_precision_weights"] == pytest.approx(2 * 1 * linear_params)


def test_pipeline_stage_zero_alone_changes():
    """(c) PP 4 with N = 2: layers 0 and 1 sit on stage 0 (8 layers a stage), so stage 0's time and memory change
    and stages 1-3 keep theirs to the bit."""
    hw = resolve_hardware("h100")
    layout = Layout(devices=4, pipeline_parallel=4, micro_batches=8, devices_per_node=8)
    lp, ends = _problem(hw, layout, precision="fp8-current"), _problem(hw, layout, precision="fp8-current",
                                                                       bf16_layers_at_start=2)

    def stages(p):
        ev = p.evaluate(1, 1)
        kinds = [(kind, part) for (kind, _), part in zip(ev.layers, layer_parts(p, ev))]
        pipe = PipelineStages.of(p, 8)
        return [_stage(p, pipe, j, kinds, outside_parts(p, ev), 1, 8) for j in range(4)], pipe

    (before, _), (after, pipe) = stages(lp), stages(ends)
    assert [pipe.kind_counts(j) for j in range(4)] == [[6, 2], [8, 0], [8, 0], [8, 0]]
    assert after[0].micro_batch_s > before[0].micro_batch_s * 1.05  # two of eight layers at the BF16 rate
    for j in (1, 2, 3):
        assert after[j].terms == before[j].terms
    mem_before, mem_after = GpuMemory(lp).stage_rows(1, 1), GpuMemory(ends).stage_rows(1, 1)
    assert mem_after[0].components != mem_before[0].components
    assert mem_after[0].components["low_precision_weights"] == pytest.approx(
        mem_before[0].components["low_precision_weights"] * 6 / 8)  # 6 of its 8 layers keep their FP8 copies
    for j in (1, 2, 3):
        assert mem_after[j].components == mem_before[j].components


LAUNCH = """torchrun --nproc_per_node 8 pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 \\
    --kv-channels 128 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm --position-embedding-type rope \\
    --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 --seq-length 4096 \\
    --max-position-embeddings 8192 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \\
    --micro-batch-size 1 --global-batch-size 64 --bf16 --fp8-format hybrid --fp8-recipe tensorwise \\
    --attention-dropout 0 --hidden-dropout 0 --use-distributed-optimizer {extra}
"""


def test_megatron_launch_with_first_last_layers_bf16_plans_with_it(cli, tmp_path):
    """(d) --first-last-layers-bf16 --num-layers-at-start-in-bf16 1: Megatron's parser leaves
    --num-layers-at-end-in-bf16 at its default 1 (megatron_flags.tsv), so layers 0 and 31 run in BF16; the import
    reads the flags (none listed as ignored) and plans what the same options on the command line plan."""
    imported = import_megatron(LAUNCH.format(extra="--first-last-layers-bf16 --num-layers-at-start-in-bf16 1"), "t")
    assert (imported.request.bf16_layers_at_start, imported.request.bf16_layers_at_end) == (1, 1)
    assert not [flag for flag, _ in imported.ignored if "bf16" in flag]
    plain = import_megatron(LAUNCH.format(extra=""), "t")
    assert (plain.request.bf16_layers_at_start, plain.request.bf16_layers_at_end) == (0, 0)
    # planned with them: the plain launch's request with the two counts set plans the same step, the plain one another
    hw = resolve_hardware("h100")
    step = [make_plan(imported.model, hw, request).throughput.step_time_s for request in (
        imported.request, plain.request.with_changes(bf16_layers_at_start=1, bf16_layers_at_end=1), plain.request)]
    assert step[0] == step[1] and step[0] > step[2]
    path = tmp_path / "launch.sh"
    path.write_text(LAUNCH.format(extra="--first-last-layers-bf16 --num-layers-at-start-in-bf16 1"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path), "--json")
    assert code in (0, 1), err
    read = json.loads(out)
    assert read["inputs"]["bf16_layers"] == [0, 31]
    assert read["throughput"]["step_time_s"] == pytest.approx(step[0], rel=1e-12)
    # the emitted launch carries Megatron's names back
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--model", "llama-3-8b", "--tp", "2", "--pp", "2",
                         "--global-batch", "64", "--micro-batch", "1", "--precision", "fp8-current",
                         "--bf16-layers-at-start", "1", "--bf16-layers-at-end", "2", "--emit", "megatron")
    assert "--first-last-layers-bf16" in out and "--num-layers-at-start-in-bf16 1" in out \
        and "--num-layers-at-end-in-bf16 2" in out
    # without a recipe the flag changes nothing in Megatron (no layer enters a low-precision context)
    bf16 = LAUNCH.format(extra="--first-last-layers-bf16").replace("--fp8-format hybrid --fp8-recipe tensorwise", "")
    assert import_megatron(bf16, "t").request.bf16_layers_at_start == 0


def test_fp8_attention_stays_out_of_the_bf16_layers():
    """--fp8-attention is TransformerEngine's fp8_dpa, a field of the recipe the layer's autocast carries: a layer
    outside the autocast runs its attention core in the 16-bit kernel with no casts around it, so with every layer
    in BF16 the plan is the BF16 plan without FP8 attention (B200, MXFP8, whose FP8 attention TE runs there)."""
    hw = resolve_hardware("b200")
    bf16 = _problem(hw, precision="bf16")
    ends = _problem(hw, precision="mxfp8", fp8_attention=True, bf16_layers_at_start=L - 4, bf16_layers_at_end=4)
    fp8 = _problem(hw, precision="mxfp8", fp8_attention=True)
    t = [gpu_step_time(p, 1, 1).step_time_s for p in (bf16, ends, fp8)]
    assert t[1] == pytest.approx(t[0], rel=1e-12) and t[2] < 0.9 * t[0]


def test_bridge_current_scaling_recipe_keeps_its_first_and_last_layer():
    """Megatron-Bridge's bf16_with_fp8_current_scaling_mixed sets first_last_layers_bf16 with 1 and 1 (Megatron-Bridge
    @ 067f987d mixed_precision.py L285-303): an override file naming that recipe trains layers 0 and L-1 in BF16
    unless it turns them off, and a plan of every layer in the recipe emits the override that does."""
    from btacalc.config.bridge_run import import_bridge

    text = "mixed_precision: bf16_with_fp8_current_scaling_mixed\ntrain:\n  micro_batch_size: 1\n  global_batch_size: 8\n"
    kept = import_bridge(text, "t", devices=8, base=LLAMA)
    assert (kept.request.bf16_layers_at_start, kept.request.bf16_layers_at_end) == (1, 1)
    off = import_bridge(text + "mixed_precision.first_last_layers_bf16: false\n", "t", devices=8, base=LLAMA)
    assert (off.request.bf16_layers_at_start, off.request.bf16_layers_at_end) == (0, 0)
    mx = import_bridge(text.replace("fp8_current_scaling", "mxfp8"), "t", devices=8, base=LLAMA)
    assert (mx.request.bf16_layers_at_start, mx.request.bf16_layers_at_end) == (0, 0)


@pytest.mark.parametrize("hw_name, precision, seq, run", [
    # cuDNN 9.13's kernel on B200 has a 16-bit rate in attention_kernels.toml and no FP8 one: at s = 64 (256
    # sequences, so that the GPU's work and not the host's issue time sets the step) the core's HBM traffic would
    # bind if the kernel's rate were not taken as a wall-clock rate, so a BF16 layer that took the FP8 kernel's
    # (absent) rate would add that bound
    ("b200", "mxfp8", 64, {"attention_kernel": "cudnn-9-13"}),
    # GB200's cuDNN deterministic backward ratio (1.152) is the 16-bit kernel's; the MXFP8 kernel has none, so a BF16
    # layer that read the FP8 kernel's entry would run its backward at the default rate
    ("gb200", "mxfp8", S, {"deterministic_attention": True}),
])
def test_a_bf16_layer_under_fp8_attention_runs_the_16_bit_kernel_whole(hw_name, precision, seq, run):
    """mut34's open survivors (`_sixteen_bit_rates` 21, 24, 30, 32, 34): a layer outside the recipe's autocast runs
    the 16-bit kernel with its wall-clock rate and its deterministic-backward ratio, not the FP8 kernel's. With every
    layer in BF16 the plan is then the BF16 plan at the same settings, here where those two readings matter."""
    from btacalc.model.gpu.rates import attention_bwd_ratio, attention_kernel_share

    hw = resolve_hardware(hw_name)
    base = dict(recompute="none", attention="flash", seq_len=seq, **run)
    bf16 = resolved(LLAMA, hw, Layout(), precision="bf16", **base)
    ends = resolved(LLAMA, hw, Layout(), precision=precision, fp8_attention=True, bf16_layers_at_start=L - 4,
                    bf16_layers_at_end=4, **base)
    fp8 = resolved(LLAMA, hw, Layout(), precision=precision, fp8_attention=True, **base)
    # the premise: the two kernels' entries differ where the case says they do
    if "deterministic_attention" in run:
        assert attention_bwd_ratio(fp8, "bf16") == pytest.approx(1.152) and attention_bwd_ratio(fp8) == 1.0
    else:
        assert attention_kernel_share(fp8, "bf16") is not None and attention_kernel_share(fp8) is None
    b = 256 if seq < S else 1
    t = [gpu_step_time(p, 1, b).step_time_s for p in (bf16, ends)]
    assert t[1] == pytest.approx(t[0], rel=1e-12)
