"""GPU training as Megatron runs it: layouts, per-stage memory, collectives, FlashAttention IO, routing
imbalance, the layout search and the Megatron arguments.

Expected values are written as the derivation (Korthikanti et al. 2022 §4; Narayanan et al. 2021;
Megatron-Core's schedules and sharding), with published numbers where a source gives them.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from support import with_calibration

from btacalc.config.execution import BatchLimits, ExecutionRequest, Layout, OverlapRequest, RunOptions
from btacalc.config.hardware import Number, resolve_hardware
from btacalc.config.model import validate_model
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.memory import GpuMemory
from btacalc.model.gpu.stages import PipelineStages
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.memory import MemoryModel
from btacalc.model.problem import Problem, make_problem
from btacalc.planning.plan import make_plan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).parent / "data"
GPT3 = resolve_model("gpt3-175b")
QWEN = resolve_model("qwen3-30b-a3b")


def gpt(name: str, a: int, h: int, layers: int):
    """Korthikanti's GPT shapes (Table 3: s = 2048, v = 51200), as the gpt3-175b preset otherwise."""
    data = GPT3.model_dump()
    data.update(name=name, num_heads=a, num_kv_heads=a, hidden_size=h, head_dim=h // a, ffn_size=4 * h,
                num_layers=layers, published_params=None)
    return validate_model(data, origin=name)


# Korthikanti et al. 2022 Table 3 (a, h, L, t, p, interleaving, global batch, micro-batch); interleaving as in
# Calculon's transcription of the runs (github.com/calculon-ai/calculon validation/seqsel/*), Figure 1's values
TABLE3 = {
    "22B": (gpt("gpt-22b", 64, 6144, 48), 8, 1, 1, 4, 4),
    "175B": (GPT3, 8, 8, 3, 64, 1),
    "530B": (gpt("mt-nlg-530b", 128, 20480, 105), 8, 35, 3, 280, 1),
    "1T": (gpt("gpt-1t", 160, 25600, 128), 8, 64, 1, 512, 1),
}
# Korthikanti Figure 1 (activations per GPU, GiB; as transcribed in calculon/llm/validation.py seqsel_fig1):
# baseline = tensor parallelism without recomputation; present work = sequence parallel + selective
FIGURE1_GIB = {"22B": (59.25, 9.5625), "175B": (66.84375, 12.3515625), "530B": (114.0234375, 23.076171875),
               "1T": (131.25, 26.5625)}


def a100_problem(model, t, p, vp, n, micro, recompute, sp, loss="stored"):
    devices = t * p
    hw = resolve_hardware("a100-80gb")
    run = RunOptions(seq_len=2048, recompute=recompute, attention="eager", loss=loss)
    layout = Layout(devices=devices, tensor_parallel=t, sequence_parallel=sp, pipeline_parallel=p, virtual_pipeline=vp,
                    micro_batches=n // micro, devices_per_node=8)
    return make_problem(model, hw, run, layout), micro


@pytest.mark.parametrize("name", TABLE3)
@pytest.mark.parametrize("mode", ["baseline", "present"])
def test_korthikanti_table3_first_stage_activations(name, mode):
    """The first stage holds p micro-batches of L/p layers, times 1 + (p - 1)/(p·vp) with interleaving
    (Korthikanti §4.2.3): L layers' worth, eq. 2 (baseline) or 34sbh/t (present work) per layer; plus
    the embedding dropout mask of the same micro-batches, and, with p = 1, the output layer (§4.3)."""
    model, t, p, vp, n, b = TABLE3[name]
    sp = mode == "present"
    prob, micro = a100_problem(model, t, p, vp, n, b, "selective" if sp else "none", sp)
    s, h, a, L, v = 2048, model.hidden_size, model.num_heads, model.num_layers, model.vocab_size
    per_layer = Fraction(34 * s * b * h, t) if sp else s * b * h * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t))
    factor = 1 + Fraction(p - 1, p * vp) if vp > 1 else 1
    layers = per_layer * L * factor
    embedding = Fraction(s * b * h, t if sp else 1) * p * factor
    head = 0
    if p == 1:  # final norm input, output-layer input, fp32 logits (vocab-parallel)
        head = Fraction(4 * s * b * h, t) * (1 + Fraction(v, h)) if sp else 4 * s * b * h + Fraction(4 * s * b * v, t)
    row = GpuMemory(prob).stage_rows(1, micro)[0]
    assert row.components["stored_activations"] == math.ceil(layers + embedding + head)  # whole bytes
    assert float(layers) / 2**30 == FIGURE1_GIB[name][1 if sp else 0]


def test_pipeline_in_flight_micro_batches():
    # 1F1B: stage j holds PP - j micro-batches; interleaved: 2(PP - j - 1) + (VP - 1)PP + 1 chunk passes
    one = PipelineStages(96, 8, 1, 64)
    assert [one.in_flight(j) for j in range(8)] == [8, 7, 6, 5, 4, 3, 2, 1]
    inter = PipelineStages(96, 8, 3, 64)
    assert [inter.in_flight(j) for j in range(8)] == [2 * (8 - j - 1) + 2 * 8 + 1 for j in range(8)]
    assert inter.held_layers(0) == Fraction(31 * 12, 3)  # = 12 layers x 8 x (1 + 7/24)
    assert inter.bubble_micro_batches == Fraction(7, 3)
    few = PipelineStages(96, 8, 1, 3)
    assert few.in_flight(0) == 3  # fewer micro-batches than stages


def test_embedding_and_loss_count_as_layers_when_pp_vp_does_not_divide():
    # Qwen3-235B-A22B: 94 layers over PP 8 x VP 3 = 24 chunks of (94 + 2)/24 = 4 (Megatron-Bridge's recipe
    # accounts for the embedding and the loss in the split): the first and last stage hold 11 layers
    st = PipelineStages(94, 8, 3, 256)
    assert [st.layers(j) for j in range(8)] == [11, 12, 12, 12, 12, 12, 12, 11]


def test_stage_state_gpt3_tp8_pp8_distributed_optimizer():
    # first stage: 12 layers of TP-split weights (+ the replicated norm weights and row-parallel biases),
    # the word embeddings V h / t and the learned positions s h (not split); Megatron's bf16 training with
    # the distributed optimizer: 2 + 4 + 12/DP bytes per parameter, DP = 512 / 64 = 8
    hw = resolve_hardware("h100")
    req = ExecutionRequest(devices=512, tensor_parallel=8, pipeline_parallel=8, seq_len=2048, recompute="selective",
                           attention="eager", zero_stage=1, limits=BatchLimits(global_batch=512, micro_batch=1))
    rep = make_plan(GPT3, hw, req)
    h, t, s, v = 12288, 8, 2048, 51200
    layer = (3 * h * h + 3 * h + h * h + 8 * h * h + 4 * h) // t + (h + h + 2 * 2 * h)
    first = 12 * layer + v * h // t + s * h
    stage0 = next(st for st in rep.memory_stages if st.stage == 0)
    assert stage0.components["weights"] == 2 * first
    assert stage0.components["gradients"] == 4 * first
    assert stage0.components["optimizer_state"] == 12 * -(-first // 8)
    # the last stage holds its own copy of the tied word embeddings (Megatron's shared embedding)
    last = next(st for st in rep.memory_stages if st.stage == 7)
    assert last.components["weights"] == 2 * (12 * layer + v * h // t + 2 * h)


def test_expert_state_is_split_over_ep_and_etp_and_sharded_over_edp():
    hw = resolve_hardware("h100")
    req = ExecutionRequest(devices=64, tensor_parallel=2, expert_parallel=8, expert_tensor_parallel=2,
                           pipeline_parallel=2, zero_stage=1, limits=BatchLimits(global_batch=64, micro_batch=1))
    rep = make_plan(QWEN, hw, req)
    rows = {(r.component, r.part): r for r in rep.state_sharding}
    experts_per_stage = 24 * 128 * 3 * 2048 * 768  # 24 MoE layers per stage
    assert rows[("weights", "expert")].params == experts_per_stage // (8 * 2)
    assert rows[("optimizer", "expert")].divisor == 64 // (2 * 8 * 2)  # EDP = devices / (ETP·EP·PP)
    assert rows[("optimizer", "non_expert")].divisor == 64 // (2 * 2)  # DP·CP = devices / (TP·PP)


# --- layouts as flags -------------------------------------------------------------------------------

def test_a_bridge_table_row_is_typeable(cli):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "64", "--tp", "1", "--pp", "4",
                         "--vp", "4", "--ep", "8", "--global-batch", "1280", "--micro-batch", "1", "--seq", "4096",
                         "--json")
    assert code in (0, 1), err
    r = json.loads(out)
    par = r["parallelism"]
    assert (par["tensor_parallel"], par["pipeline_parallel"], par["virtual_pipeline"], par["expert_parallel"]) == (1, 4, 4, 8)
    assert par["data_parallel"] == 16 and par["micro_batches"] == 1280 // 16
    assert r["plan"]["global_batch"] == 1 and r["inputs"]["micro_batch"] == 1


@pytest.mark.parametrize("args, text", [
    (("--devices", "64", "--tp", "3"), "does not divide --devices"),
    (("--devices", "48", "--tp", "3"), "does not divide the 32 query and 4 key/value heads"),
    (("--devices", "64", "--pp", "5"), "does not divide --devices"),
    (("--devices", "56", "--pp", "7", "--first-stage-layers", "49"), "exceed the model's 48 layers"),
    (("--devices", "64", "--vp", "2"), "--vp > 1 needs --pp > 1"),
    (("--devices", "64", "--pp", "2", "--vp", "2", "--grad-accum", "3"), "M 3 mod the micro-batch group 2 is 1"),
    (("--devices", "64", "--cp", "3", "--seq", "4096"), "does not divide --devices"),
    (("--devices", "48", "--cp", "3", "--seq", "4096"), "multiple of 2·CP"),
    (("--devices", "64", "--tp", "2", "--no-sequence-parallel"), "needs --sequence-parallel"),
    (("--devices", "64", "--global-batch", "100", "--micro-batch", "3"), "not a multiple of DP"),
    (("--devices", "64", "--ep", "8", "--etp", "3"), "does not divide"),
    (("--devices", "64", "--fsdp", "--zero", "1"), "it is ZeRO-3"),
    (("--devices", "64", "--grad-bytes", "3"), "must be 2"),
    (("--devices", "64", "--recompute", "core_attn,attention"), "recompute"),
    (("--devices", "64", "--emit", "deepspeed"), "'deepspeed' is not one of 'cerebras', 'modelzoo', 'megatron', 'bridge'"),
])
def test_layout_rules_are_one_line_errors(cli, args, text):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", *args)
    assert code == 2 and out == "" and "Traceback" not in err
    assert text in err and len(err.strip().splitlines()) == 1, err


# The measured runs of /work/shared/reference/measured-runs.json, their layouts as btacalc flags (the GPT-3
# H100 rows with VP 6: the configuration the benchmark loads; recompute, gradient precision and overlaps as the
# recipes set them: dgxc-benchmarking gpt3_175b_hydra.yaml overlaps grad sync, param sync and TP communication
# and reduces in bf16; Megatron-Bridge perf recipes overlap grad reduce and param gather in bf16; NeMo
# AutoModel checkpoints every layer).
DGXC = OverlapRequest(grad_reduce=True, param_gather=True, tp_comm=True)
BRIDGE = OverlapRequest(grad_reduce=True, param_gather=True)
MEASURED = [
    ("gpt-22b-a100-80gb-8-379", "data:gpt-22b.toml", "a100-80gb", 8, 2048, 4, 4,
     dict(tensor_parallel=8, sequence_parallel=False, recompute="full", zero_stage=0, attention="eager")),
    ("gpt-22b-a100-80gb-8-380", "data:gpt-22b.toml", "a100-80gb", 8, 2048, 4, 4,
     dict(tensor_parallel=8, recompute="selective", zero_stage=0, attention="eager")),
    ("gpt3-175b-a100-80gb-64-381", "gpt3-175b", "a100-80gb", 64, 2048, 64, 1,
     dict(tensor_parallel=8, pipeline_parallel=8, virtual_pipeline=3, sequence_parallel=False, recompute="full",
          zero_stage=0, attention="eager")),
    ("gpt3-175b-a100-80gb-64-382", "gpt3-175b", "a100-80gb", 64, 2048, 64, 1,
     dict(tensor_parallel=8, pipeline_parallel=8, virtual_pipeline=3, recompute="selective", zero_stage=0,
          attention="eager")),
    ("gpt3-175b-h100-128-304", "gpt3-175b", "h100", 128, 2048, 256, 1,
     dict(tensor_parallel=4, pipeline_parallel=8, virtual_pipeline=6, recompute="none", gradient_bytes=2,
          overlaps=DGXC)),
    ("gpt3-175b-h100-512-306", "gpt3-175b", "h100", 512, 2048, 1024, 1,
     dict(tensor_parallel=4, pipeline_parallel=8, virtual_pipeline=6, recompute="none", gradient_bytes=2,
          overlaps=DGXC)),
    ("qwen3-30b-a3b-h100-16-388", "qwen3-30b-a3b", "h100", 16, 4096, 1024, 1,
     dict(expert_parallel=16, recompute="none", gradient_bytes=2, overlaps=BRIDGE)),
    ("qwen3-30b-a3b-h100-16-389", "qwen3-30b-a3b", "h100", 16, 4096, 1024, 1,
     dict(expert_parallel=16, recompute="none", gradient_bytes=2, overlaps=BRIDGE, overlap_all_to_all=True)),
    ("qwen3-30b-a3b-h100-8-300", "qwen3-30b-a3b", "h100", 8, 4096, 512, 4,
     dict(expert_parallel=8, fsdp=True, recompute="full", gradient_bytes=2)),
    ("llama-3-70b-h100-64-303", "data:llama-3-70b.config.json", "h100", 64, 8192, 128, 1,
     dict(context_parallel=2, fsdp=True, recompute="full", gradient_bytes=2)),
]


def _model(name: str):
    if name.endswith(".toml"):
        return validate_model(tomllib.loads((DATA / name[5:]).read_text()), origin=name)
    return resolve_model(str(DATA / name[5:]) if name.startswith("data:") else name)


@pytest.mark.parametrize("run", MEASURED, ids=[m[0] for m in MEASURED])
def test_measured_runs_are_expressible_and_fit(run):
    _, model, hw, devices, seq, gbs, mbs, fields = run
    req = ExecutionRequest(devices=devices, seq_len=seq, limits=BatchLimits(global_batch=gbs, micro_batch=mbs), **fields)
    rep = make_plan(_model(model), resolve_hardware(hw), req)
    assert rep.plan.fits, rep.memory_bytes
    par = rep.parallelism
    assert par.data_parallel * par.micro_batches * rep.plan.global_batch == gbs
    assert rep.throughput is not None and rep.throughput.tokens_per_s > 0


# --- collectives, routing, context parallelism ----------------------------------------------------

def _line_rate(hardware):
    """The profile without its [collectives] section: links at their line rate, no per-call latency (the
    volume and placement arithmetic alone; NCCL's efficiency and latency: tests/test_collectives.py)."""
    return hardware.model_copy(update={"collectives": None})


def _gpu(model=QWEN, hw="h100", run=None, **layout) -> Problem:
    hardware = _line_rate(resolve_hardware(hw))
    fields = dict(devices_per_node=int(hardware.system.devices_per_node.value))
    fields.update(layout)
    return make_problem(model, hardware, run or RunOptions(attention="flash", recompute="none"), Layout(**fields))


def test_tensor_parallel_exchanges_per_layer():
    # GPT layer without SP: two all-reduces forward (attention and MLP outputs), two backward (their inputs),
    # each 2(t-1)/t of s b h beta per rank, on NVLink (TP 8 inside a DGX): 8 (t-1)/t s b h beta / 450 GB/s
    p = _gpu(GPT3, run=RunOptions(seq_len=2048, attention="eager", recompute="none"), devices=8, tensor_parallel=8,
             micro_batches=1)
    st = gpu_step_time(p, 1, 1)
    s, h = 2048, 12288
    expected = (96 * 8 + 4) * 7 / 8 * s * h * 2 / 450e9  # 96 layers; the embedding's output and the head's input
    assert st.communication_s["tp_comm"] == pytest.approx(expected)
    # full recomputation re-runs the forward: the two forward all-reduces (g) again, 96 x (8 + 4) + 4
    rerun = gpu_step_time(_gpu(GPT3, run=RunOptions(seq_len=2048, attention="eager", recompute="full"), devices=8,
                               tensor_parallel=8, micro_batches=1), 1, 1)
    assert rerun.communication_s["tp_comm"] == pytest.approx((96 * 12 + 4) * 7 / 8 * s * h * 2 / 450e9)
    # with SP the reduce-scatter/all-gather pairs move the same volume, plus the input gathered again for dW
    sp = gpu_step_time(_gpu(GPT3, run=RunOptions(seq_len=2048, attention="eager", recompute="none"), devices=8,
                            tensor_parallel=8, sequence_parallel=True, micro_batches=1), 1, 1)
    assert sp.communication_s["tp_comm"] == pytest.approx(expected * 10 / 8, rel=0.02)


def test_tp_comm_overlap_hides_each_layers_exchange_behind_its_own_compute():
    # --tp-comm-overlap: per layer max(0, t_TP - t_compute) stays exposed; the embedding's and the head's
    # exchanges (4 of the 96 x 8 + 4 above) are not overlapped. Without it the whole exchange is exposed.
    from btacalc.config.execution import Overlaps
    from btacalc.model.gpu.collectives import tensor_parallel_time
    from btacalc.model.gpu.costs import layer_parts

    run = RunOptions(seq_len=2048, attention="eager", recompute="none")
    plain = _gpu(GPT3, run=run, devices=8, tensor_parallel=8, micro_batches=1)
    hidden = _gpu(GPT3, run=run, devices=8, tensor_parallel=8, micro_batches=1, overlap=Overlaps(tp_comm=True))
    part = layer_parts(hidden, hidden.evaluate(1, 1))[0]
    tp_layer = tensor_parallel_time(hidden, part.tp_bytes)
    s, h = 2048, 12288
    assert tp_layer == pytest.approx(8 * 7 / 8 * s * h * 2 / 450e9)
    outside = 4 * 7 / 8 * s * h * 2 / 450e9
    st = gpu_step_time(hidden, 1, 1)
    assert st.communication_s["tp_comm"] == pytest.approx(96 * tp_layer + outside)  # the raw volume is unchanged
    assert st.details["terms"]["tp_comm"] == pytest.approx(96 * max(0.0, tp_layer - part.compute_s) + outside)
    assert gpu_step_time(plain, 1, 1).details["terms"]["tp_comm"] == pytest.approx(96 * tp_layer + outside)


def test_overlapped_gradient_reduce_hides_behind_the_whole_backward_pass():
    # --overlap-grad-reduce: the step's sync is the reduction minus the backward pass it hides behind, all of
    # it, plus the SMs its channels take from that backward: 32 layers and the embedding's and LM head's backward (Llama-3-8B, DP 16 over two
    # nodes, s = 512, where the reduction outlasts the backward)
    from btacalc.config.execution import Overlaps
    from btacalc.model.gpu.costs import layer_parts, outside_parts

    p = _gpu(resolve_model("llama-3-8b"), run=RunOptions(seq_len=512, attention="flash", recompute="none"),
             devices=16, micro_batches=1, overlap=Overlaps(grad_reduce=True))
    ev = p.evaluate(1, 1)
    first, last = outside_parts(p, ev)
    backward = 32 * layer_parts(p, ev)[0].backward_s + first.backward_s + last.backward_s
    st = gpu_step_time(p, 1, 1)
    reduce = st.communication_s["gradient_reduce"]
    assert reduce > backward and last.backward_s > 0
    # the hidden part (the whole backward) holds the ring's 16 collective channels across nodes of the H100's
    # 132 SMs (task dpsm, sm_share.py)
    assert st.details["sync_s"] == pytest.approx(reduce - backward + backward * 16 / 132, rel=1e-12)


def test_context_parallel_exchange_hides_behind_the_attention_core():
    # ring attention: each layer's K/V exchange runs behind its attention core (the fused FlashAttention
    # phases); only what outlasts the core shows, per layer
    from btacalc.model.gpu.collectives import context_parallel_time
    from btacalc.model.gpu.costs import layer_parts

    p = _gpu(GPT3, run=RunOptions(seq_len=8192, attention="flash", recompute="none"), devices=16, tensor_parallel=8,
             context_parallel=2, micro_batches=1)
    ev = p.evaluate(1, 1)
    part, pv = layer_parts(p, ev)[0], ev.layers[0][1]
    core_phases = {ph.name for ph in pv.phases if ph.core}
    core = sum(t for name, t in part.phase_s.items() if name in core_phases)
    assert part.core_s == pytest.approx(core, rel=1e-12) and 0 < core < part.compute_s
    cp = context_parallel_time(p, part.cp_bytes)
    assert cp > 0
    st = gpu_step_time(p, 1, 1)
    assert st.details["terms"]["cp_comm"] == pytest.approx(96 * max(0.0, cp - core), rel=1e-12)
    assert st.communication_s["cp_comm"] == pytest.approx(96 * cp, rel=1e-12)


def test_rings_across_domains_use_one_nic_per_member():
    from btacalc.model.gpu.collectives import ring_time

    p = _gpu(devices=64)
    assert ring_time(p, 1e9, 8, 1) == pytest.approx(1e9 / 450e9)  # inside a DGX: NVLink
    assert ring_time(p, 1e9, 8, 8) == pytest.approx(1e9 / 50e9)  # one member per node: one NIC
    assert ring_time(p, 1e9, 64, 1) == pytest.approx(1e9 / 400e9)  # 8 members per node drive 8 NICs
    gb = _gpu(hw="gb200", devices=144)
    assert ring_time(gb, 1e9, 72, 1) == pytest.approx(1e9 / 900e9)  # a whole NVL72 rack: NVLink


def test_context_parallel_splits_activations():
    one = GpuMemory(_gpu(devices=2)).stage_rows(1, 1)[0].components["stored_activations"]
    two = GpuMemory(_gpu(devices=2, context_parallel=2)).stage_rows(1, 1)[0].components["stored_activations"]
    assert two == pytest.approx(one / 2, rel=1e-12)


def test_routing_imbalance_stretches_the_experts_and_the_all_to_all():
    base = gpu_step_time(_gpu(devices=16, expert_parallel=16), 1, 1)
    skew = gpu_step_time(_gpu(devices=16, expert_parallel=16,
                              run=RunOptions(attention="flash", recompute="none", routing_imbalance=1.5)), 1, 1)
    assert skew.phase_time_s["experts"] == pytest.approx(1.5 * base.phase_time_s["experts"], rel=0.05)
    # the tokens' exchange stretches with the busiest rank's copies; the count all-gathers (a latency each, tests/
    # test_count_gather.py) do not
    counts = [next(r.time_s for r in st.details["collectives"] if r.name == "moe_token_counts") for st in (base, skew)]
    assert counts[0] == counts[1] > 0
    assert (skew.communication_s["all_to_all"] - counts[1]
            == pytest.approx(1.5 * (base.communication_s["all_to_all"] - counts[0])))
    # one device holds every expert: the total is the same however the tokens spread
    local = gpu_step_time(_gpu(devices=1, run=RunOptions(attention="flash", recompute="none", routing_imbalance=1.5)), 1, 1)
    assert local.step_time_s == pytest.approx(gpu_step_time(_gpu(devices=1), 1, 1).step_time_s)


def test_plan_says_when_it_is_sensitive_to_routing(cli):
    code, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16",
                       "--global-batch", "256", "--micro-batch", "1", "--recompute", "full")
    assert code == 0 and "routing imbalance" in out.replace("\n", " ")


# --- FlashAttention IO (Dao et al. 2022) ---------------------------------------------------------

def _flash_core(hw: str, s: int, head_dim: int = 128) -> tuple[float, float]:
    """(compute time, HBM time) of the fused attention core of one Llama-3-8B layer (d = 128 unless
    given), b = 1, over the forward and backward passes: the counted (full-square) FLOPs x the share of
    128-blocks the causal kernel runs, nb(nb+1)/(2 nb²)."""
    model = resolve_model(str(DATA / "llama-3-8b.config.json"))
    if head_dim != 128:
        model = validate_model({**model.model_dump(), "head_dim": head_dim, "num_heads": 4096 // head_dim,
                                "num_kv_heads": 4096 // head_dim // 4}, origin="wide heads")
    profile = with_calibration(resolve_hardware(hw), compute_efficiency=Number(
        value=0.5, kind="estimate", source="https://example.org", note="test: the efficiency the derivation uses"))
    p = make_problem(model, profile, RunOptions(seq_len=s, attention="flash", recompute="none"))
    pv = p.evaluate(1, 1).layers[0][1]
    core = [ph.name for ph in pv.phases if ph.core]
    blocks = -(-s // 128)  # the kernel runs the nb(nb + 1)/2 of nb² score blocks on or below the diagonal
    flops = sum(pv.value(n, q) for n in core for q in ("flops_fwd", "flops_bwd", "flops_recompute")) \
        * (blocks + 1) / (2 * blocks)
    traffic = sum(pv.value(n, "bytes_moved") + pv.value(n, "bytes_moved_bwd") for n in core)
    hardware = p.hardware
    return (flops / (hardware.chip.peak_flops_per_s.value * hardware.calibration.compute_efficiency.value),
            traffic / hardware.memory.offchip_bandwidth_bytes_per_s.value)


def dao_traffic(s: int, d: int, a: int, m_bytes: int, beta: int = 2) -> float:
    """Algorithm 1 + Algorithm 4 HBM bytes, per sequence: B_c = ceil(M / 4d) keys per block, and a causal
    kernel skipping the fully masked blocks: query block j of T visits j + 1 key blocks, (T + 1)/2 on average."""
    b_c = -(-(m_bytes // beta) // (4 * d))
    t_c = -(-s // b_c)
    passes = sum(j + 1 for j in range(t_c)) / t_c
    fwd = beta * (2 * s * d + 3 * s * d * passes) + 16 * s * passes
    bwd = beta * (4 * s * d + 5 * s * d * passes) + 8 * s * passes
    return a * (fwd + bwd)


def test_flash_attention_traffic_follows_dao_algorithms():
    model = resolve_model(str(DATA / "llama-3-8b.config.json"))
    for hw in ("h100", "a100-80gb"):
        p = make_problem(model, resolve_hardware(hw), RunOptions(seq_len=4096, attention="flash"))
        pv = p.evaluate(1, 1).layers[0][1]
        moved = sum(pv.value(ph.name, q) for ph in pv.phases if ph.core for q in ("bytes_moved", "bytes_moved_bwd"))
        assert moved == pytest.approx(dao_traffic(4096, 128, 32, resolve_hardware(hw).attention_sram_bytes_per_core),
                                      rel=1e-12)


def test_flash_attention_crossover_from_memory_to_compute_bound():
    # The kernel runs 14 a s^2 d FLOP (forward 4, backward 8, the recomputed S 2) x nb(nb + 1)/(2 nb^2) of
    # its 128 x 128 blocks, and moves Theta(s^2 d^2 / M) bytes with (T_c + 1)/2 key-block passes per query
    # block (`dao_traffic`). Both halve with the causal mask, so the intensity still grows with s. H100
    # (B_c = ceil(116,224 / 512) = 227 at d = 128, ridge 0.5 x 989 / 3.35 = 148 FLOP/B): memory-bound up to s = 1,024,
    # compute-bound from 2,048, where the arithmetic below puts it too
    seqs = (256, 512, 1024, 2048, 4096, 8192, 16384)

    def bound_by_memory(hw: str, s: int, d: int = 128) -> bool:
        prof = resolve_hardware(hw)
        nb = -(-s // 128)
        flops = 14 * (4096 // d) * s * s * d * (nb + 1) / (2 * nb)
        return dao_traffic(s, d, 4096 // d, prof.attention_sram_bytes_per_core) / \
            prof.memory.offchip_bandwidth_bytes_per_s.value > flops / (prof.chip.peak_flops_per_s.value * 0.5)

    h100 = {s: _flash_core("h100", s) for s in seqs}
    assert [s for s, (c, m) in h100.items() if m > c] == [256, 512, 1024]
    assert [s for s in seqs if bound_by_memory("h100", s)] == [256, 512, 1024]
    # A100: its ridge (0.5 x 312 / 2.039 = 77 FLOP/B) is lower: compute-bound from s = 512
    assert [s for s in seqs if (lambda c, m: m > c)(*_flash_core("a100-80gb", s))] == [256]
    assert [s for s in seqs if bound_by_memory("a100-80gb", s)] == [256]
    # a large head dimension halves B_c = ceil(M/(4d)): at d = 256 the kernel is memory-bound at every length
    assert all(m > c for c, m in (_flash_core("h100", s, head_dim=256) for s in seqs))
    assert all(bound_by_memory("h100", s, 256) for s in seqs)


# --- vectorised = exact -------------------------------------------------------------------------------

def test_vectorised_layouts_match_the_scalar_model():
    layouts = [dict(tensor_parallel=1, pipeline_parallel=1, virtual_pipeline=1, context_parallel=1, expert_parallel=8),
               dict(tensor_parallel=2, pipeline_parallel=4, virtual_pipeline=2, context_parallel=1, expert_parallel=4),
               dict(tensor_parallel=1, pipeline_parallel=2, virtual_pipeline=1, context_parallel=2, expert_parallel=16)]
    hw = resolve_hardware("h100")
    run = RunOptions(attention="flash", recompute="none", gradient_bytes=4)
    scalar = []
    for lay in layouts:
        layout = Layout(devices=64, devices_per_node=8, zero_stage=1, sequence_parallel=lay["tensor_parallel"] > 1,
                        micro_batches=8, expert_tensor_parallel=1, **lay)
        p = make_problem(QWEN, hw, run, layout)
        scalar.append((GpuMemory(p).total(1, 2), gpu_step_time(p, 1, 2).step_time_s))
    arrays = {k: np.array([lay[k] for lay in layouts]) for k in layouts[0]}
    layout = Layout(devices=64, devices_per_node=8, zero_stage=1, sequence_parallel=True, micro_batches=np.array([8, 8, 8]),
                    expert_tensor_parallel=np.array([1, 1, 1]), **arrays)
    p = make_problem(QWEN, hw, run, layout)
    two = np.array([2, 2, 2])
    memory, step = GpuMemory(p).total(np.ones(3, dtype=int), two), gpu_step_time(p, np.ones(3, dtype=int), two).step_time_s
    for i, (m, t) in enumerate(scalar):
        assert float(memory[i]) == pytest.approx(float(m), rel=1e-12)
        assert float(step[i]) == pytest.approx(float(t), rel=1e-9)


# --- search and arguments out ---------------------------------------------------------------------

def test_search_finds_the_fastest_fitting_layout_and_plans_it_exactly():
    from btacalc.planning.search import search_layouts

    req = ExecutionRequest(devices=16, seq_len=4096, limits=BatchLimits(global_batch=256))
    result = search_layouts(QWEN, resolve_hardware("h100"), req)
    assert result.best is not None and result.best.plan.fits and result.fitting > 1
    best = result.ranking[0]
    assert all(r.fits for r in result.ranking)
    assert [r.tokens_per_s for r in result.ranking] == sorted((r.tokens_per_s for r in result.ranking), reverse=True)
    # the vectorised score of the winner is the exact plan's
    assert result.best.throughput.tokens_per_s == pytest.approx(best.tokens_per_s, rel=1e-9)
    assert result.best.memory_bytes["total"] == pytest.approx(best.memory_bytes, abs=8)
    par = result.best.parallelism
    assert (par.tensor_parallel, par.pipeline_parallel, par.expert_parallel) == (best.tensor_parallel,
                                                                                 best.pipeline_parallel, best.expert_parallel)
    assert result.why
    # the ranking times each micro-batch untiled and Megatron has no attention tiles: the exact plan is asked for at
    # G = 1 (it was free to tile the winner's micro-batch, and an --emit of a tiled one writes a launch Megatron runs
    # untiled), so it is G = 1, b = the winner's micro-batch
    assert result.best.inputs.tiles == 1
    assert (result.best.plan.tiles, result.best.plan.tile_batch) == (1, best.micro_batch)


def test_search_respects_a_fixed_dimension():
    from btacalc.planning.search import search_layouts

    req = ExecutionRequest(devices=16, seq_len=4096, tensor_parallel=2, recompute="full",
                           limits=BatchLimits(global_batch=256))
    result = search_layouts(QWEN, resolve_hardware("h100"), req)
    assert {r.tensor_parallel for r in result.ranking} == {2} and {r.recompute for r in result.ranking} == {"full"}


def test_emit_megatron_round_trips_the_layout(cli):
    args = ("plan", "--model", "gpt3-175b", "--hw", "h100", "--devices", "128", "--tp", "4", "--pp", "8", "--vp", "6",
            "--global-batch", "256", "--micro-batch", "1", "--seq", "2048", "--recompute", "none", "--grad-bytes", "2",
            "--overlap-grad-reduce", "--overlap-param-gather")
    code, out, err = cli(*args, "--emit", "megatron")
    assert code == 0, err
    flags = " ".join(out.split())
    for text in ("--tensor-model-parallel-size 4", "--pipeline-model-parallel-size 8",
                 "--num-virtual-stages-per-pipeline-rank 6", "--sequence-parallel", "--micro-batch-size 1",
                 "--global-batch-size 256", "--use-distributed-optimizer", "--grad-reduce-in-bf16",
                 "--overlap-grad-reduce", "--overlap-param-gather"):
        assert text in flags, text
    assert "--recompute-granularity" not in flags
    code, out, err = cli(*args, "--emit", "bridge")
    assert code == 0, err
    for text in ("train.global_batch_size=256", "model.virtual_pipeline_model_parallel_size=6",
                 # hostile16: Bridge takes the mixed precision's; bridgemp: the section is written whole
                 "++mixed_precision.grad_reduce_in_fp32=False"):
        assert text in out.split(), text


def test_compare_with_searched_gpu_layouts(cli):
    code, out, err = cli("compare", "--model", "qwen3-30b-a3b", "--hw", "wse3,h100", "--devices", "16", "--search",
                         "--global-batch", "256", "--json")
    assert code == 0, err
    rows = {r["hardware"]: r for r in json.loads(out)["rows"]}
    assert rows["wse3"]["layout"] == "" and rows["h100"]["layout"].startswith("TP")
    assert rows["h100"]["fits"] and rows["h100"]["devices"] == 16


def test_the_slowest_pipeline_stage_sets_the_step_even_when_it_is_not_the_last():
    # GPT-3 175B over PP 7: 96 + 2 = 98 = 7 x 14, so the embedding and the loss count as one layer each
    # (Megatron's account-for-embedding/loss split): stages hold 13, 14, 14, 14, 14, 14, 13 layers. One
    # layer outweighs the LM head (12h^2 > 2hV per token: 1.8e9 > 1.26e9 FLOP), so a middle stage (14
    # layers) is the critical path, and its compute is 14 layers' compute.
    from btacalc.model.gpu.costs import layer_parts

    p = _gpu(GPT3, run=RunOptions(seq_len=2048, attention="flash", recompute="none"), devices=7, pipeline_parallel=7,
             micro_batches=7)
    assert [PipelineStages(96, 7, 1, 7).layers(j) for j in range(7)] == [13, 14, 14, 14, 14, 14, 13]
    st = gpu_step_time(p, 1, 1)
    assert 0 < st.details["critical_stage"] < 6
    one_layer = layer_parts(p, p.evaluate(1, 1))[0].compute_s
    assert st.details["terms"]["compute"] == pytest.approx(14 * one_layer, rel=1e-12)
    assert st.details["micro_batch_s"] == pytest.approx(sum(st.details["terms"].values()), rel=1e-12)
    # per step, the critical stage runs each of its 14 layers' phases once per micro-batch (7), and
    # neither the embedding (first stage) nor the LM head and loss (last stage)
    assert st.phase_repeats["mlp"] == 14 * 7
    assert all(st.phase_repeats[name] == 0 for name in ("embedding", "final_norm", "lm_head", "loss"))


def test_shapes_as_arrays_give_each_shapes_answer_on_a_middle_critical_stage():
    # the same PP 7 split with TP 2: the critical stage (14 layers) sends more TP traffic than the first
    # (13), so its raw communication, not the first stage's, must come out for every shape of the array
    p = _gpu(GPT3, run=RunOptions(seq_len=2048, attention="flash", recompute="none"), devices=14, tensor_parallel=2,
             pipeline_parallel=7, micro_batches=7)
    arrays = gpu_step_time(p, np.array([1, 1]), np.array([1, 2]))
    for i, b in enumerate((1, 2)):
        one = gpu_step_time(p, 1, b)
        assert 0 < one.details["critical_stage"] < 6
        assert arrays.step_time_s[i] == pytest.approx(one.step_time_s, rel=1e-12)
        for k, v in arrays.communication_s.items():
            assert v[i] == pytest.approx(one.communication_s[k], rel=1e-12), k


def test_zero3_and_fsdp_hold_one_or_two_gathered_layers():
    """ZeRO-3 gathers one layer's 16-bit weights at a time; FSDP double-buffers the unsharded weights and
    their (fp32) gradients: 2 x (2 + 4) bytes per parameter. One Qwen3-30B-A3B layer on a rank of TP 1,
    EP 4, ETP 2: attention q (2048 x 4096), k and v (2048 x 512), o (4096 x 2048), the two q/k norms (128)
    and the two layer norms (2048), the router (2048 x 128); its share of the 128 experts' three
    2048 x 768 matrices is 1/(EP x ETP)."""
    dense = 2048 * 4096 * 2 + 2048 * 512 * 2 + 2 * 128 + 2 * 2048 + 2048 * 128
    routed = 128 * 3 * 2048 * 768

    def gathered(devices, **layout):
        run = RunOptions(seq_len=4096, attention="flash", recompute="full", memory_model="resident", gradient_bytes=4)
        return MemoryModel(_gpu(QWEN, run=run, devices=devices, **layout)).breakdown(1, 1).components.get("gathered_weights")

    assert gathered(16, expert_parallel=4, expert_tensor_parallel=2, zero_stage=3) == 2 * (dense + routed // 8)
    assert gathered(16, expert_parallel=4, expert_tensor_parallel=2, zero_stage=3, fsdp=True) == \
        2 * (2 + 4) * (dense + routed // 8)
    assert gathered(2, expert_parallel=2, zero_stage=3) == 2 * (dense + routed // 2)
    assert gathered(16, expert_parallel=4, expert_tensor_parallel=2, zero_stage=1) is None  # nothing gathered
    assert gathered(1, zero_stage=3) is None  # one device holds every weight already


def test_layouts_as_arrays_give_each_layouts_step_and_memory():
    """The layout search scores many layouts in one pass: PP 1, 2 and 4 side by side (stages beyond a
    layout's own PP do not exist for it) give each layout's own step time and memory."""
    from btacalc.planning.search import _stack

    model, hw = resolve_model("llama-3-8b"), resolve_hardware("h100")
    run = RunOptions(seq_len=4096, attention="flash", recompute="full", memory_model="resident")
    layouts = [Layout(devices=8, pipeline_parallel=pp, micro_batches=8, devices_per_node=8, sequence_parallel=True)
               for pp in (1, 2, 4)]
    stacked = make_problem(model, hw, run, _stack(layouts))
    steps, memory = gpu_step_time(stacked, 1, 1).step_time_s, MemoryModel(stacked).total(1, 1)
    for i, layout in enumerate(layouts):
        one = make_problem(model, hw, run, layout)
        assert steps[i] == pytest.approx(gpu_step_time(one, 1, 1).step_time_s, rel=1e-12)
        assert memory[i] == pytest.approx(MemoryModel(one).total(1, 1), rel=1e-12)
    assert steps[0] > steps[1] > steps[2]  # the smaller stages are faster per micro-batch; no phantom stage


def test_a_tied_embedding_is_held_again_by_the_last_stage():
    # GPT-2 small over PP 2: 6 layers each (12 h^2 + 13 h parameters); the first stage adds the token and
    # position embeddings, the last the final norm and, because the LM head is tied to the token
    # embedding on another stage, its own copy of it (Megatron keeps both in sync by an all-reduce); both
    # tables are the vocabulary Megatron pads to a multiple of 128 x TP: 50,257 -> 393 x 128 = 50,304
    h, vocab, positions = 768, 50304, 1024
    layer = 12 * h * h + 13 * h
    run = RunOptions(seq_len=1024, attention="flash", recompute="none", memory_model="resident")
    stages = MemoryModel(_gpu(resolve_model("gpt2-small"), run=run, devices=2, pipeline_parallel=2,
                              micro_batches=2)).breakdown(1, 1).stages
    weights = [int(row.components["weights"]) for row in stages]
    assert weights == [2 * (6 * layer + vocab * h + positions * h), 2 * (6 * layer + 2 * h + vocab * h)]


# --- collectives, written as the arithmetic of the module docstring ---------------------------------

def _h100_links():
    hw = resolve_hardware("h100")
    return hw.system.scaleup_bandwidth_bytes_per_s.value, hw.system.scaleout_bandwidth_bytes_per_s.value


def test_all_to_all_on_two_gpus_is_one_nvlink_peer():
    # EP 2 inside one node: each rank sends half of its routed copies to its one peer, over NVLink
    from btacalc.model.gpu.collectives import all_to_all_time

    up, _ = _h100_links()
    p = _gpu(devices=2, expert_parallel=2)
    assert all_to_all_time(p, 1e9) == pytest.approx(1e9 * (1 - 1 / 2) / up)


def test_all_to_all_with_etp_filling_the_node_crosses_the_nic():
    # ETP 8 fills a DGX: the EP 2 peer is in the other node, so the whole exchange goes through the NIC,
    # then the 8-way ETP all-gather of the received copies runs inside the node (7 sends over NVLink)
    from btacalc.model.gpu.collectives import all_to_all_time

    up, out = _h100_links()
    p = _gpu(devices=16, expert_parallel=2, expert_tensor_parallel=8, tensor_parallel=8, sequence_parallel=True)
    assert all_to_all_time(p, 1e9) == pytest.approx(1e9 * (1 / 2) / out + 1e9 * 7 / up)


def test_all_to_all_inside_the_node_when_the_nic_is_faster():
    # EP 16 over two nodes: 7 of 15 peers inside the domain, 8 outside, sent at once; with a NIC faster
    # than NVLink (a what-if) the in-domain share is the longer one
    from btacalc.model.gpu.collectives import all_to_all_time

    hw = resolve_hardware("h100")
    fast = hw.with_number("system.scaleout_bandwidth_bytes_per_s", 1e13, note="test: a NIC faster than NVLink")
    up = hw.system.scaleup_bandwidth_bytes_per_s.value
    p = make_problem(QWEN, _line_rate(fast), RunOptions(attention="flash", recompute="none"),
                     Layout(devices=16, expert_parallel=16, devices_per_node=8))
    sent = 1e9 * 15 / 16
    assert all_to_all_time(p, 1e9) == pytest.approx(max(sent * 7 / 15 / up, sent * 8 / 15 / 1e13))


def test_pipeline_sends_inside_one_node_use_nvlink_else_one_nic():
    from btacalc.model.gpu.collectives import pipeline_p2p_time

    up, out = _h100_links()
    one_node = _gpu(GPT3, devices=8, pipeline_parallel=8, micro_batches=8)  # exactly one node: NVLink
    assert pipeline_p2p_time(one_node, 1e6) == pytest.approx(2 * 1e6 / up)  # activation forward, gradient back
    two_nodes = _gpu(GPT3, devices=16, pipeline_parallel=16, micro_batches=16, virtual_pipeline=2)
    assert pipeline_p2p_time(two_nodes, 1e6) == pytest.approx(2 * 2 * 1e6 / out)  # one NIC, twice per chunk


def test_zero0_all_reduces_the_gradients_once_per_step():
    # plain data parallelism over 8 GPUs of one node: an all-reduce moves 2 (n - 1)/n of the gradient
    # bytes per rank over NVLink; nothing is gathered, nothing per micro-batch
    from btacalc.model.gpu.collectives import data_parallel_times

    up, _ = _h100_links()
    p = _gpu(GPT3, devices=8, zero_stage=0)
    dp = data_parallel_times(p, 1_000_000, 0, {"gradients": 4, "weights": 2})
    assert dp.reduce_per_step == pytest.approx(2 * 7 / 8 * 4e6 / up)
    assert dp.gather_per_step == 0 and dp.per_micro_batch == 0
    three = data_parallel_times(_gpu(GPT3, devices=8, zero_stage=3), 1_000_000, 0, {"gradients": 4, "weights": 2})
    # ZeRO-3: the weights gathered twice (forward and backward) and the gradients reduce-scattered, per micro-batch
    assert three.per_micro_batch == pytest.approx(7 / 8 * (2 * 2e6 + 4e6) / up) and three.reduce_per_step == 0


def test_recomputation_repeats_the_tensor_and_context_parallel_exchanges():
    # full recomputation re-runs each layer's forward: with SP, one more all-gather per input and one
    # more reduce-scatter per output; the CP ring runs once more too
    run = lambda rc: RunOptions(seq_len=2048, attention="flash", recompute=rc)  # noqa: E731
    tp = dict(devices=8, tensor_parallel=8, sequence_parallel=True, micro_batches=1)
    none = gpu_step_time(_gpu(GPT3, run=run("none"), **tp), 1, 1).communication_s["tp_comm"]
    full = gpu_step_time(_gpu(GPT3, run=run("full"), **tp), 1, 1).communication_s["tp_comm"]
    # per layer and exchange point: SP moves in 3 units (gather, reduce-scatter, regather for dW) and out 2;
    # recomputation adds 1 to each: (3 + 1) + (2 + 1) = 7 of 5
    assert full / none == pytest.approx(7 / 5, rel=0.02)
    cp = dict(devices=2, context_parallel=2, micro_batches=1)
    none = gpu_step_time(_gpu(GPT3, run=run("none"), **cp), 1, 1).communication_s["cp_comm"]
    full = gpu_step_time(_gpu(GPT3, run=run("full"), **cp), 1, 1).communication_s["cp_comm"]
    from btacalc.catalogue.constants import constants

    k = constants().passes.cp_backward_exchange_factor
    assert full / none == pytest.approx((1 + k + 1) / (1 + k))


def test_backward_time_is_each_phases_share_of_its_flops():
    """A part's backward time: each phase's roofline time times its backward share of FLOPs (2/3 for a
    phase without matmul FLOPs: forward once, backward twice); under FlashAttention the fused core's time
    split by the core's backward FLOPs."""
    from btacalc.model.gpu.costs import layer_parts

    for attention, recompute in itertools.product(("eager", "flash"), ("none", "full")):  # full: share 2/(1+2+1)
        p = _gpu(GPT3, run=RunOptions(seq_len=2048, attention=attention, recompute=recompute), devices=8,
                 tensor_parallel=8, sequence_parallel=True, micro_batches=1)
        ev = p.evaluate(1, 1)
        part = layer_parts(p, ev)[0]
        pv = ev.layers[0][1]
        expected, core = 0.0, [0, 0]
        for phase in (ph for ph in pv.phases if ph.scope == "layer"):
            q = pv.of(phase.name)
            total = q["flops_fwd"] + q["flops_bwd"] + q["flops_recompute"]
            if phase.core and attention == "flash":
                core = [core[0] + total, core[1] + q["flops_bwd"]]
                continue
            expected += part.phase_s[phase.name] * (q["flops_bwd"] / total if total else 2 / 3)
        core_s = sum(t for name, t in part.phase_s.items() if pv.compiled.phases[[x.name for x in pv.phases].index(name)].core)
        if attention == "flash":
            expected += core_s * core[1] / core[0]
        assert part.backward_s == pytest.approx(expected, rel=1e-12)
        assert part.compute_s == pytest.approx(sum(part.phase_s.values()), rel=1e-12)


def test_experts_shard_over_ep_times_etp_and_imbalance_needs_expert_parallelism():
    # a rank holds 1/(EP x ETP) of the experts; the busiest rank's extra load R exists only when the
    # experts are spread (EP > 1): without EP every rank holds every expert and takes its own tokens
    from btacalc.model.gpu.rates import rates_of

    run = RunOptions(seq_len=4096, attention="flash", recompute="none", routing_imbalance=1.5)
    spread = rates_of(_gpu(QWEN, run=run, devices=16, expert_parallel=4, expert_tensor_parallel=2))
    assert (spread.expert_shards, spread.imbalance) == (8, 1.5)
    assert rates_of(_gpu(QWEN, run=run, devices=2, expert_parallel=2)).imbalance == 1.5
    assert rates_of(_gpu(QWEN, run=run, devices=2, expert_parallel=1)).imbalance == 1.0


def test_routed_phases_read_only_the_devices_share_of_the_experts():
    """HBM traffic of a routed phase over forward, re-run and backward: the activations scale with the
    busiest rank's load R, the experts' weights (beta x params per pass, backward_traffic_factor passes
    backward) are read once per pass but only the device's 1/(EP x ETP) of them."""
    from types import SimpleNamespace

    from btacalc.catalogue.constants import constants
    from btacalc.model.gpu.rates import Rates
    from btacalc.model.gpu.costs import _traffic

    k = constants().passes.backward_traffic_factor
    values = {"bytes_moved": 1000.0, "bytes_moved_bwd": 2500.0, "params": 100.0, "reruns": 1}
    rates = Rates(peak=1.0, hbm=1.0, imbalance=1.5, expert_shards=8, flash=True, sequence_parallel=False, beta=2)
    routed = _traffic(SimpleNamespace(routed_load=True), values, rates, 1.5)  # a phase's quantities, read by subscript
    w = 2 * 100.0
    fwd = (1000 - w) * 1.5 + w / 8
    bwd = (2500 - k * w) * 1.5 + k * w / 8
    assert routed == pytest.approx(fwd * (1 + 1) + bwd)
    dense = _traffic(SimpleNamespace(routed_load=False), values, rates, 1.0)
    assert dense == pytest.approx(1000 * 2 + 2500)
