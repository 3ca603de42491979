"""mut36: tests for mutants of this session's merged-pair modelling (model/gpu/merged_pair.py `_one_pair`,
`host_pair_time`, `_gpu_times`, `LayerNodes.stretched`; model/gpu/timing.py `_merged`, `_node_host`, `_launch`'s merged
branch, `gpu_step_time`'s `a2a_unpaired`/`launch` rows, `unpaired_exchange_s`; model/gpu/costs.py's node bookkeeping;
model/problem.py `padded_vocab`; planning/plan.py `_rows`) that the suite let survive. Each expected value is
arithmetic from the cited source (the H100 profile's host costs, formulas/constants.toml [megatron] merged_node_*,
Megatron-LM @ d98e8a64's schedule), not the tool's own output (docs/mutation-survivors.md "mut36" lists the mutants
each test kills)."""

from __future__ import annotations

import dataclasses

import pytest

from btacalc.catalogue.constants import constants
from btacalc.config.execution import Layout, Overlaps
from btacalc.config.presets import load_preset
from btacalc.model.gpu.merged_pair import LayerNodes, NodeHost
from btacalc.model.gpu.part import new_part
from btacalc.model.gpu.timing import _node_host
from support import resolved

# the H100 profile's host costs (hardware_profiles/h100.toml [kernels]): a kernel launch, a per-expert GEMM, a layer
# module call, a reference eager op
L, E, MOD, OP = 4e-6, 3.34e-5, 1.11e-4, 3.8e-6


def test_stretched_slows_every_compute_node_and_leaves_the_calls():
    """`stretched(f)`: the compute nodes' times x f (P_f, P_b, M_f, M_b and the two weight-gradient shares), the
    all-to-all call as it was (the exchange is what slows the compute, not itself), the queue setting kept."""
    n = LayerNodes(0.4, 0.8, 0.6, 1.2, 0.5, True, 0.3, 0.7, True).stretched(1.5)
    assert dataclasses.astuple(n) == pytest.approx((0.6, 1.2, 0.9, 1.8, 0.5, True, 0.45, 1.05, True))


# one MoE layer's host-issued counts (kernels, per-expert GEMMs, module calls, glue ops) over all passes, then over its
# first forward, by node of the merged schedule (`Part.node_issued`); the MLP node's are the layer's less the three
NODES = {"pre": (30, 0, 6, 40, 10, 0, 2, 12), "dispatch": (9, 0, 0, 15, 3, 0, 0, 5),
         "combine": (6, 0, 0, 9, 2, 0, 0, 3)}
WHOLE, FIRST = (100, 96, 14, 80), (30, 24, 5, 26)


def _host(k: float, e: float = 0, m: float = 0, g: float = 0) -> float:
    return k * L + e * E + m * MOD + g * OP


def _part():
    part = new_part(kernels=WHOLE[0], expert_gemms=WHOLE[1], module_calls=WHOLE[2], glue_ops=WHOLE[3],
                    kernels_fwd=FIRST[0], expert_gemms_fwd=FIRST[1], module_calls_fwd=FIRST[2],
                    glue_ops_fwd=FIRST[3])
    part.node_issued.update(NODES)
    return part


def _problem(deepep: bool, delay: bool = False, scope: tuple[str, ...] = (), **run):
    layout = Layout(devices=16, expert_parallel=16, deepep=deepep, hybridep=deepep, micro_batches=4,
                    overlap=Overlaps(all_to_all=True, delay_wgrad=delay))
    problem = resolved(load_preset("qwen3-30b-a3b"), "h100", layout, seq_len=4096, recompute="none",
                       attention="flash", **run)
    return problem.with_layout(cuda_graph_scope=scope) if scope else problem


@pytest.mark.parametrize("deepep, delay, scope, run, sync, comm", [
    (True, True, (), {}, True, True),  # HybridEP: its sync waits on the comm stream; experts' dw delayed
    (False, False, (), {}, True, False),  # the alltoall dispatcher's sync waits for the pre-dispatch node alone
    (False, False, ("moe_preprocess",), {}, True, True),  # ... unless its copies run in the graphed preprocess
    (False, False, (), {"capacity_factor": 1.0, "pad_to_capacity": True}, False, False),  # drop-and-pad: no sync
])
def test_each_node_issues_its_own_counts_and_the_schedules_work(deepep, delay, scope, run, sync, comm):
    """Per node: its first-forward counts in the forward node, the rest (backward, re-runs) in the backward node
    (the MLP node's being the layer's less the other three's), each with the schedule's own work: 2 CUDA calls
    (an event wait and record) and 2.4 reference ops forward, 2 and 5.0 backward; building the four nodes 4 x 1.2
    ops; with --delay-wgrad-compute the experts' weight-gradient GEMM loop (one pass of the 24 per-expert GEMMs:
    the first forward's count) leaves the MLP backward for its dw node (formulas/constants.toml [megatron]
    merged_node_*; Megatron-LM @ d98e8a64 models/common/model_chunk_schedule_plan.py L261-301)."""
    c = constants().megatron
    assert (c.merged_node_cuda_calls, c.merged_node_forward_ref_ops, c.merged_node_backward_ref_ops,
            c.merged_node_build_ref_ops) == (2, 2.4, 5.0, 1.2)
    fwd, bwd = _host(2, g=2.4), _host(2, g=5.0)
    mlp_all = [w - p - d - k for w, p, d, k in zip(WHOLE, NODES["pre"][:4], NODES["dispatch"][:4],
                                                   NODES["combine"][:4])]  # (55, 96, 8, 16)
    mlp_first = [w - p - d - k for w, p, d, k in zip(FIRST, NODES["pre"][4:], NODES["dispatch"][4:],
                                                     NODES["combine"][4:])]  # (15, 24, 3, 6)
    assert (mlp_all, mlp_first) == ([55, 96, 8, 16], [15, 24, 3, 6])
    dw = _host(0, 24) if delay else 0.0
    expected = NodeHost(
        build=_host(0, g=4.8),
        combine_backward=_host(6 - 2, g=9 - 3) + bwd, pre_forward=_host(10, 0, 2, 12) + fwd,
        mlp_backward=_host(55 - 15, 96 - 24, 8 - 3, 16 - 6) - dw + bwd, dispatch_forward=_host(3, g=5) + fwd,
        mlp_dw=dw, dispatch_backward=_host(9 - 3, g=15 - 5) + bwd, mlp_forward=_host(15, 24, 3, 6) + fwd,
        combine_forward=_host(2, g=3) + fwd, pre_backward=_host(30 - 10, 0, 6 - 2, 40 - 12) + bwd, pre_dw=0.0,
        sync=sync, comm_sync=comm)
    host, issue = _node_host(_problem(deepep, delay, scope, **run), _part())
    for field in dataclasses.fields(NodeHost):
        got, want = getattr(host, field.name), getattr(expected, field.name)
        assert bool(got) == want if isinstance(want, bool) else got == pytest.approx(want, rel=1e-12), field.name
    # the schedule's own host work per layer and micro-batch: the build and four nodes' forward and backward
    assert issue == pytest.approx(4.8 * OP + 4 * (4 * L + 7.4 * OP), rel=1e-12)


def test_a_layer_without_a_dispatch_has_no_merged_nodes():
    part = new_part(kernels=10)
    part.node_issued.update({"pre": (10, 0, 0, 0, 4, 0, 0, 0)})
    assert _node_host(_problem(True), part) is None


def test_the_count_all_gathers_run_in_the_pre_dispatch_nodes_forward():
    """The alltoall dispatcher's count all-gathers (`counts` seconds) run in its preprocess, on the compute stream in
    the pre-dispatch node's forward (Megatron-LM @ d98e8a64 fine_grained_callables.py L125-129). tests/
    test_mergedhost.py's example nodes (P_f 0.4, P_b 0.8, M_f 0.6, M_b 1.2, a call of 0.5, the pair 3.1) with 0.05 of
    counts: P_f = 0.45. combine_bwd (0.5) and pre_dispatch_fwd (0.45) both done at 0.5; mlp_bwd 0.5-1.7;
    dispatch_fwd 0.5-1.0; dispatch_bwd 1.7-2.2; mlp_fwd 1.7-2.3; combine_fwd 2.3-2.8, pre_dispatch_bwd 2.3-3.1: the
    pair is 3.1 over 3.05 of compute, 0.05 exposed (counts taken from the node instead, P_f 0.35 and M_f 0.7: 0.15)."""
    from btacalc.model.gpu.timing import _merged
    part = new_part(compute_s=3.0, backward_s=2.0, pre_dispatch_s=1.2, pre_dispatch_backward_s=0.8)
    problem = _problem(False)
    exposed, _, waits, issue = _merged(problem, part, 2.0, 0.05)
    assert exposed == pytest.approx(0.05, abs=1e-12)
    assert (waits, issue) == (0.0, 0.0)  # a part without the merged nodes' counts: no host model


# qwen3-30b-a3b at EP 16 on H100 with HybridEP, one sequence per micro-batch: at 256 tokens the host's issue binds
def _step(seq_len: int, m: int, overlap: bool):
    from btacalc.model.gpu.timing import gpu_step_time
    layout = Layout(devices=16, expert_parallel=16, deepep=True, hybridep=True, micro_batches=m,
                    overlap=Overlaps(all_to_all=overlap))
    problem = resolved(load_preset("qwen3-30b-a3b"), "h100", layout, seq_len=seq_len, recompute="none",
                       attention="flash")
    return problem, gpu_step_time(problem, 1, 1)


@pytest.mark.parametrize("seq_len", [256, 4096])
def test_the_report_rows_add_up_to_the_step_with_a_lone_pass_quicker_than_its_pair(seq_len):
    """With one micro-batch and no pipeline Megatron runs the forward and the backward alone (combined_1f1b.py
    L76-93, L119-135): the step is the step without the overlap. At 256 tokens the merged pairs wait on the host more
    than they hide (`unpaired_exchange_s` < 0), at 4,096 they hide more (> 0). Either way the rows and the tiling add
    up to the step: a negative difference comes off the `launch` row, a positive one is the `a2a_unpaired` row."""
    _, plain = _step(seq_len, 1, False)
    _, merged = _step(seq_len, 1, True)
    assert merged.step_time_s == pytest.approx(plain.step_time_s, rel=1e-12)
    for st in (plain, merged):
        assert sum(st.phase_time_s.values()) + st.tiling_overhead_s == pytest.approx(st.step_time_s, rel=1e-12)
    assert merged.phase_time_s["a2a_unpaired"] >= 0.0
    assert (merged.phase_time_s["a2a_unpaired"] > 0) == (seq_len == 4096)


def test_the_merged_schedules_own_host_work_is_in_the_stages_host_time():
    """A merged plan's host issue time is the plain plan's (the same kernels, modules and glue) plus the schedule's
    own work on each MoE layer's nodes per micro-batch: building four nodes (4 x 1.2 reference ops) and, per node
    forward and backward, 2 CUDA calls and 2.4 or 5.0 reference ops (formulas/constants.toml [megatron]), for
    qwen3-30b-a3b's 48 MoE layers on the one stage."""
    per_layer = 4.8 * OP + 4 * (4 * L + 7.4 * OP)
    for seq_len in (256, 4096):
        _, plain = _step(seq_len, 1, False)
        problem, merged = _step(seq_len, 1, True)
        assert problem.model.num_layers == 48
        assert merged.details["host_s"] - plain.details["host_s"] == pytest.approx(48 * per_layer, rel=1e-9)


@pytest.mark.parametrize("overlap", [True, False])
def test_a_host_bound_merged_stage_takes_its_hosts_issue_time(overlap):
    """`_launch` of one stage: 500 kernel launches and 30 per-expert GEMMs to issue (500 x 4 us + 30 x 33.4 us =
    3.002 ms of host), 1 ms of GPU work, its merged pairs waiting 0.5 ms on the host and the schedule's own node work
    0.2 ms. The host binds beyond the pairs' wait: the term is the wait plus what the host's 3.202 ms still exceeds
    the GPU's 1 ms and the wait, 0.5 + 1.702 = 2.202 ms, so the micro-batch (1 + 2.202) is the host's 3.202 ms.
    Without the overlap no pair runs: the merged wait and work are not read and the host is its own 3.002 ms."""
    from btacalc.model.gpu.timing import _launch
    problem = _problem(True)
    problem = problem.with_layout(overlap=Overlaps(all_to_all=overlap))
    stage = new_part(kernels=500, expert_gemms=30)
    terms = {"compute": 1e-3, "all_to_all": 0.0, "a2a_sm_share": 0.0}
    launch, host = _launch(problem, stage, [], terms, (1e-3, 0.5e-3, 0.0), (0.5e-3, 0.2e-3))
    if overlap:
        assert (launch, host) == (pytest.approx(2.202e-3, rel=1e-12), pytest.approx(3.202e-3, rel=1e-12))
        assert 1e-3 + launch == pytest.approx(host, rel=1e-12)
    else:
        assert host == pytest.approx(3.002e-3, rel=1e-12)
        assert launch == _launch(problem, stage, [], terms, (1e-3, 0.5e-3, 0.0))[0]


def test_each_node_of_a_flash_layer_holds_its_own_modules_and_expert_gemms():
    """qwen3-30b-a3b (128 experts, config.json) at EP 16 under flash attention, no recompute, by node of the merged
    schedule (Megatron-LM @ d98e8a64 models/gpt/fine_grained_callables.py): the pre-dispatch node runs the attention
    block's three modules (linear_qkv, core_attention: the fused kernel, linear_proj), each called forward and
    backward: 6 calls, 3 in the first forward; the combine node one kernel forward and one backward and no module;
    the MLP node the experts' two grouped linears (linear_fc1, linear_fc2), 4 calls (2 forward), and their per-expert
    GEMMs: 128 / 16 = 8 local experts x 2 linears = 16 forward, and a data and a weight gradient each backward, 48."""
    from btacalc.model.gpu.costs import ISSUED_COUNTS, layer_parts
    problem = _problem(True)
    assert (problem.model.num_experts, problem.layout.expert_parallel) == (128, 16)
    part = layer_parts(problem, problem.evaluate(1, 1))[0]
    nodes = part.node_issued
    assert set(nodes) == {"pre", "dispatch", "combine"}
    whole = [getattr(part, n) for n in ISSUED_COUNTS] + [getattr(part, n + "_fwd") for n in ISSUED_COUNTS]
    mlp = [w - sum(v[i] for v in nodes.values()) for i, w in enumerate(whole)]
    kernels, experts, modules = 0, 1, 2  # positions in ISSUED_COUNTS; + 4: the first forward's
    assert ISSUED_COUNTS[:3] == ("kernels", "expert_gemms", "module_calls")
    assert (nodes["pre"][modules], nodes["pre"][4 + modules], nodes["pre"][experts]) == (6, 3, 0)
    assert (nodes["combine"][kernels], nodes["combine"][4 + kernels]) == (2, 1)
    assert (nodes["combine"][experts], nodes["combine"][modules]) == (0, 0)
    assert (mlp[modules], mlp[4 + modules], mlp[experts], mlp[4 + experts]) == (4, 2, 48, 16)


def test_a_wafers_experts_row_holds_every_expert(cli):
    """planning/plan.py `_rows`: a GPU device holds 1/(EP x ETP) of the routed experts (tests/test_phase_rows_ep.py),
    a wafer all of them: qwen3-30b-a3b's 128 experts of 3 h f_e weights (h 2,048, f_e 768; config.json), and the
    bf16 weights the forward reads undivided."""
    import json
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--json")
    assert code in (0, 1), err
    row = next(p for p in json.loads(out)["phases"] if p["name"] == "experts")
    assert row["params"] == 128 * 3 * 2048 * 768


def test_only_the_routed_rows_are_divided_and_by_every_ep_size(cli):
    """tests/test_phase_rows_ep.py at EP 1, 2 and 8 (TP 1, so ETP 1) with the shapes fixed (one sequence per tile):
    the experts' row holds P/EP of qwen3-30b-a3b's P = 128 x 3 h f_e weights (at EP 2 too), the same FLOPs, and reads
    2 P (1 - 1/EP) bytes of bf16 weights fewer than at EP 1; the rows of the phases every rank holds whole (the
    router, h x E = 2,048 x 128; the QKV projection, h x (32 + 2 x 4) heads x 128) are the same at every EP size. A row
    that moves no bytes of its own (under flash attention the core's traffic is the fused kernel's) reports an
    intensity of 0, not a ratio."""
    import json
    p = 128 * 3 * 2048 * 768
    rows = {}
    for ep in (1, 2, 8):
        code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--global-batch",
                             "64", "--tiles", "1", "--tile-batch", "1", "--ep", str(ep), "--json")
        assert code in (0, 1), err
        rows[ep] = {r["name"]: r for r in json.loads(out)["phases"]}
    for ep in (1, 2, 8):
        experts = rows[ep]["experts"]
        assert experts["params"] == p // ep
        assert experts["flops_forward"] == rows[1]["experts"]["flops_forward"]
        assert rows[1]["experts"]["bytes_moved"] - experts["bytes_moved"] == 2 * p * (1 - 1 / ep)
        assert (rows[ep]["router"]["params"], rows[ep]["qkv_proj"]["params"]) == (2048 * 128, 2048 * 40 * 128)
        assert rows[ep]["router"]["bytes_moved"] == rows[1]["router"]["bytes_moved"]
        assert rows[ep]["attn_pv"]["bytes_moved"] == 0 and rows[ep]["attn_pv"]["flops_forward"] > 0
        assert rows[ep]["attn_pv"]["arithmetic_intensity"] == 0.0
