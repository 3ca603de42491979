"""merged2: the expert all-to-all under Megatron's merged 1F1B schedule, node by node, tested as its derivation.

Written from Megatron-LM @ d98e8a64, not from btacalc/model/gpu/merged_pair.py: models/common/model_chunk_schedule_plan.py
L261-L298 issues, for a forward layer f beside a backward layer b,
    b.combine_bwd (comm), f.pre_dispatch_fwd, b.mlp_bwd, f.dispatch_fwd (comm), b.mlp_bwd_dw, b.dispatch_bwd (comm),
    [early release: b.pre_dispatch_bwd], f.mlp_fwd, f.combine_fwd (comm), [else: b.pre_dispatch_bwd],
    b.pre_dispatch_bwd_dw;
each node waits for its input (fine_grained_callables.py), the two streams run side by side, and the next pair needs
f's combine and b's pre-dispatch gradient. backward_dw does work only under --delay-wgrad-compute
(models/common/utils.py L323-326): otherwise the MLP's and attention's weight gradients run inside their backward.
The timelines below are worked by hand.
"""

from __future__ import annotations

import dataclasses

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import resolve_model
from btacalc.errors import BtacalcError
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.sm_share import reserved_sms
from btacalc.model.gpu.timing import _kind_terms
from btacalc.model.gpu.merged_pair import LayerNodes, merged_exposed, pair_time
from btacalc.planning.measured import express, load_runs
from btacalc.planning.plan import make_plan
from btacalc.planning.resolve import resolve_problem

from support import EP_OVERLAP_PLAN, MOE_TOY_LAUNCH, overlap_round_trip

# P_f 0.4, P_b 0.8, M_f 0.6, M_b 1.2 (data + weight gradients), one call A = 0.5: compute 3.0, all-to-all 2.0
NODES = LayerNodes(pre_forward=0.4, pre_backward=0.8, mlp_forward=0.6, mlp_backward=1.2, call=0.5)


def test_a_part_splits_into_the_four_nodes():
    # compute 3.0 = forward 1.0 + backward 1.6 + recompute 0.4; the pre-dispatch phases 1.2 of it (0.6 backward,
    # 0.2 recompute); the exchange 2.0 over four calls
    n = LayerNodes.of(3.0, 1.6, 0.4, (1.2, 0.6, 0.2), 2.0)
    assert (n.pre_forward, n.pre_backward, n.mlp_forward, n.mlp_backward, n.call) == pytest.approx((0.4, 0.8, 0.6, 1.2, 0.5))
    assert n.compute == pytest.approx(3.0)


def test_without_communication_a_pair_is_its_compute():
    quiet = dataclasses.replace(NODES, call=0.0)
    for early in (False, True):
        assert pair_time(quiet, early) == pytest.approx(3.0)
        assert merged_exposed(quiet, early) == 0.0


def test_the_default_order_exposes_what_the_attention_cannot_hide():
    # combine_bwd [0, .5]; pre_fwd [0, .4]; mlp_bwd (both gradients) [.5, 1.7]; dispatch_fwd [.5, 1.0];
    # dispatch_bwd [1.7, 2.2]; mlp_fwd [1.7, 2.3]; combine_fwd [2.3, 2.8] beside pre_bwd [2.3, 3.1]: 3.1 - 3.0
    assert pair_time(NODES, False) == pytest.approx(3.1)
    assert merged_exposed(NODES, False) == pytest.approx(0.1)  # the lumped max(0, 2.0 - 3.0) hid all of it


def test_the_early_release_leaves_the_backward_dispatch_and_forward_combine_bare():
    # ... dispatch_bwd [1.7, 2.2]; pre_bwd waits for it: [2.2, 3.0]; mlp_fwd [3.0, 3.6]; combine_fwd [3.6, 4.1]
    assert pair_time(NODES, True) == pytest.approx(4.1)
    assert merged_exposed(NODES, True) == pytest.approx(1.1)


def test_delayed_weight_gradients_give_the_dispatch_backward_compute_beside_it():
    # backward_dw runs the TE linears' weight gradients (fine_grained_callables.py L272: the attention module's, the
    # MoE layer's): of M_b 1.2 the experts' wgrad GEMMs 0.5, of P_b 0.8 the QKV and output projections' 0.2 (the
    # attention core's backward, 0.6 with the norms, has no weight)
    delayed = dataclasses.replace(NODES, delayed_wgrad=True, mlp_wgrad=0.5, pre_wgrad=0.2)
    # mlp data gradient [.5, 1.2], its weight gradient [1.2, 1.7] beside dispatch_bwd [1.2, 1.7]; mlp_fwd [1.7, 2.3];
    # combine_fwd [2.3, 2.8] beside pre_bwd [2.3, 2.9] and its weight gradient [2.9, 3.1]
    assert pair_time(delayed, False) == pytest.approx(3.1)
    # early: pre_bwd's data gradient [1.7, 2.3], mlp_fwd [2.3, 2.9], combine_fwd [2.9, 3.4] beside pre_bwd_dw
    # [2.9, 3.1] (half of each backward delayed, as merged2 first had it, gave 3.2)
    assert pair_time(delayed, True) == pytest.approx(3.4)
    # the flag without the wgrad seconds delays nothing: the undelayed timelines
    assert pair_time(dataclasses.replace(NODES, delayed_wgrad=True), True) == pytest.approx(4.1)


def test_the_delayed_share_is_the_weight_gradient_gemms_not_the_rerun():
    # compute 3.0 = forward 1.0 + backward 1.6 + recompute 0.4 (0.2 of it the pre-dispatch node's); wgrad GEMMs 0.7,
    # 0.2 of them pre-dispatch: the re-run is no weight gradient, and a node's wgrad is at most its backward
    n = LayerNodes.of(3.0, 1.6, 0.4, (1.2, 0.6, 0.2), 2.0, True, (0.7, 0.2))
    assert (n.pre_wgrad, n.mlp_wgrad) == pytest.approx((0.2, 0.5))
    assert LayerNodes.of(3.0, 1.6, 0.4, (1.2, 0.6, 0.2), 2.0, True, (5.0, 4.0)).pre_wgrad == pytest.approx(0.6)


def test_a_layer_part_times_its_weight_gradients_apart():
    # qwen3-30b-a3b with the EP overlap: the pre-dispatch node's wgrad is the attention projections' (and the
    # router's), under half its backward, which holds the flash attention core's backward (no weight)
    run = next(r for r in load_runs() if r.id == "qwen3-30b-a3b-h100-16-fp8-180")
    request, reason = express(run)
    assert reason == "" and request.overlap_all_to_all and request.overlaps.delay_wgrad
    problem = resolve_problem(resolve_model(run.model), resolve_hardware(run.hw), request)
    part = next(p for p in layer_parts(problem, problem.evaluate(1, 1)) if p.a2a_bytes)
    assert 0 < part.pre_dispatch_wgrad_s < part.pre_dispatch_backward_s / 2
    assert 0 < part.wgrad_s - part.pre_dispatch_wgrad_s <= part.backward_s - part.pre_dispatch_backward_s


def _deepseek(delay: bool):
    run = next(r for r in load_runs() if r.id == "deepseek-v3-b200-256-mxfp8-80")
    request, reason = express(run)
    assert reason == "" and request.overlaps.delay_wgrad  # the 26.04.01 harness turns it on with the overlap
    request = request.with_changes(overlaps=dataclasses.replace(request.overlaps, delay_wgrad=delay))
    return make_plan(resolve_model(run.model), resolve_hardware(run.hw), request)


def test_the_deepseek_row_shows_part_of_its_exchange_and_the_delay_hides_some_back():
    delayed, plain = _deepseek(True), _deepseek(False)
    # the row read +8.3% with every call hidden behind any compute; node by node its EP 32 calls over the NICs show
    # beside its short attention node, and delaying the weight gradients puts compute beside the backward dispatch:
    # strictly faster than the same row without the delay (0.7% here)
    assert plain.throughput.step_time_s > delayed.throughput.step_time_s
    assert plain.throughput.step_time_s / delayed.throughput.step_time_s < 1.05


LAUNCH = MOE_TOY_LAUNCH + " --delay-wgrad-compute"


def test_the_delay_needs_the_overlap_as_megatron_asserts():
    with pytest.raises(BtacalcError, match=r"--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm"):
        import_megatron(LAUNCH, "launch.sh")
    run = import_megatron(LAUNCH + " --overlap-moe-expert-parallel-comm", "launch.sh")
    assert run.request.overlaps.delay_wgrad


@pytest.mark.parametrize("emit, said", [("megatron", "--delay-wgrad-compute"),
                                        ("bridge", "comm_overlap.delay_wgrad_compute=True")])
def test_the_delay_round_trips_through_the_emitted_launch(cli, tmp_path, emit, said):
    out, back = overlap_round_trip(cli, tmp_path, "--delay-wgrad-compute", emit)
    assert said in out
    assert '"delay_wgrad": true' in back
    code, _, err = cli("plan", *EP_OVERLAP_PLAN, "--no-overlap-a2a", "--delay-wgrad-compute")  # the last switch wins
    assert code == 2 and "--overlap-a2a" in err and len(err.strip().splitlines()) == 1


def test_the_exchange_takes_sms_from_compute_only_while_hidden():
    # sm_share.py: the DeepEP kernels' SMs cost compute while the exchange runs beside it. Under the merged schedule
    # the exposed part of a layer's exchange (merged_exposed) runs with no compute beside it, so the loss is
    # min(a2a - exposed, compute) x reserved / SMs, not min(a2a, compute) x reserved / SMs
    run = next(r for r in load_runs() if r.id == "deepseek-v3-b200-256-mxfp8-80")
    request, reason = express(run)
    assert reason == ""
    problem = resolve_problem(resolve_model(run.model), resolve_hardware(run.hw), request)
    parts = layer_parts(problem, problem.evaluate(1, 1))
    terms = _kind_terms(problem, [(None, p) for p in parts])
    share = reserved_sms(problem) / problem.hardware.chip.cores.value
    shown = [t for t in terms if t["all_to_all"] > 0]
    assert shown  # the row shows part of its exchange node by node
    for t in terms:
        hidden = t["a2a_raw"] - t["all_to_all"]
        assert t["a2a_sm_share"] == pytest.approx(min(hidden, t["compute"]) * share)
    assert all(t["a2a_sm_share"] < min(t["a2a_raw"], t["compute"]) * share for t in shown)
