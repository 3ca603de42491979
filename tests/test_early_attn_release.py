"""earlyrel: Megatron's --ep-overlap-early-attn-memory-release, tested as its derivation.

Written from Megatron-LM @ d98e8a64, not from btacalc/model/gpu/memory.py. In the merged 1F1B schedule of the EP
overlap a forward layer runs beside a backward layer node by node (models/common/model_chunk_schedule_plan.py
L261-L300): backward combine, forward pre-dispatch, backward MLP, forward dispatch, backward dispatch, then
- without the flag: forward MLP, forward combine, and only then the backward pre-dispatch node (L291-292);
- with it: the backward pre-dispatch node first (L280-281), then the forward MLP and combine.
With P, D and S the bytes one micro-batch's layer stores in its pre-dispatch node (fine_grained_callables.py
L67-L131), its dispatch node (L152-L176) and in all, the plain schedule's moment holds the forward layer whole (S)
with the backward layer's freed. Without the flag the stage also holds the backward layer's P when the forward
layer is whole: P more (merged1f1b). With it, the most it holds beyond the plain moment is before the backward
pre-dispatch node runs: the forward layer's P + D and the backward layer's P, i.e. max(0, 2P + D - S) more.
Megatron-Core asserts the overlap under the flag (transformer_config.py L3097-3101).
"""

from __future__ import annotations

import dataclasses

import pytest

from btacalc.config.execution import ExecutionRequest
from btacalc.config.hardware import resolve_hardware
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import resolve_model
from btacalc.errors import BtacalcError
from btacalc.planning.measured import express, load_runs
from btacalc.planning.plan import make_plan

from support import MOE_TOY_LAUNCH, overlap_round_trip
from test_merged1f1b import PRE_DISPATCH

TOY = "moe-toy-gelu-8e-top2-megatron-ci-h100-8-te-tp2-pp1-te-a2a-ovlp-8experts-etp1-ep4-dev"
QWEN = "qwen3-30b-a3b-gb200-8-mxfp8-7"
ROUTED = ("dispatch", "experts")


def _three(run_id: str):
    """The run's plan without the overlap, with it, and with it and the early release."""
    run = next(r for r in load_runs() if r.id == run_id)
    request, reason = express(run)
    assert reason == "" and request is not None
    model, hw = resolve_model(run.model), resolve_hardware(run.hw)
    early = request.with_changes(overlaps=dataclasses.replace(request.overlaps, early_attn_release=True))
    # without the overlap, without the delayed weight gradients it needs (the Bridge harness sets both: merged2)
    plain = request.with_changes(overlap_all_to_all=False,
                                 overlaps=dataclasses.replace(request.overlaps, delay_wgrad=False))
    return (make_plan(model, hw, plain), make_plan(model, hw, request),
            make_plan(model, hw, early))


def _stored(plan) -> int:
    return plan.memory_stages[-1].components["stored_activations"]


def test_an_attention_heavier_than_its_experts_keeps_2p_plus_d_minus_s():
    # Megatron's a2a-overlap toy MoE CI test: unfused attention, whose scores and probabilities are pre-dispatch
    # activations, beside 8 small experts (top 2): P > S - P - D
    plain, merged, early = _three(TOY)
    p = sum(ph.stored_activation_bytes for ph in plain.phases if ph.name in PRE_DISPATCH)
    d = sum(ph.stored_activation_bytes for ph in plain.phases if ph.name == "dispatch")
    s = sum(ph.stored_activation_bytes for ph in plain.phases)  # the toy has one layer kind: every phase is its
    assert 2 * p + d - s > 0
    assert _stored(merged) - _stored(plain) == p
    assert _stored(early) - _stored(plain) == 2 * p + d - s
    assert early.parallelism.overlaps["early_attn_release"] and early.parallelism.overlaps["all_to_all"]
    others = {k: v for k, v in early.memory_stages[-1].components.items() if k != "stored_activations"}
    assert others == {k: v for k, v in merged.memory_stages[-1].components.items() if k != "stored_activations"}


def test_low_precision_experts_keep_part_of_the_extra_layer():
    # Qwen3-30B-A3B under MXFP8 (128 experts, top 8, EP 8, micro-batch 4, as its Bridge recipe runs it): the experts
    # save their inputs in FP8, so they store less than the attention does and the release frees only part of P.
    # The routed phases (formulas/moe.toml routed_load: dispatch, experts) are held at the busiest rank's load, the
    # plan's routing imbalance rho, in memory; the phase rows give the mean rank's
    plain, merged, early = _three(QWEN)
    rows = {ph.name: ph.stored_activation_bytes for ph in plain.phases}
    p = sum(v for k, v in rows.items() if k in PRE_DISPATCH)
    rho = plain.inputs.routing_imbalance
    d, s = rho * rows["dispatch"], sum(v for k, v in rows.items() if k not in ROUTED) + rho * sum(rows[k] for k in ROUTED)
    assert _stored(merged) - _stored(plain) == p > 0
    assert 0 < _stored(early) - _stored(plain) < p
    assert _stored(early) - _stored(plain) == pytest.approx(2 * p + d - s, abs=4)  # each term rounded to whole bytes
    # not memory only (67a93af2): the release issues the backward layer's pre-dispatch node before the forward MLP
    # (model_chunk_schedule_plan.py L280-281 against L291-292), so the backward dispatch and the forward combine
    # lose their compute partner; with the delayed weight gradients timed as their GEMMs the row shows it
    assert early.throughput.step_time_s > merged.throughput.step_time_s


def test_the_release_needs_the_overlap():
    spec, hw = resolve_model("qwen3-30b-a3b"), resolve_hardware("h100")
    request = ExecutionRequest(devices=8, expert_parallel=8)
    with pytest.raises(BtacalcError, match="it needs overlap_all_to_all"):
        make_plan(spec, hw, request.with_changes(
            overlaps=dataclasses.replace(request.overlaps, early_attn_release=True)))


LAUNCH = MOE_TOY_LAUNCH + " --ep-overlap-early-attn-memory-release"


def test_a_launch_with_the_release_and_without_the_overlap_is_refused_as_megatron_refuses_it():
    with pytest.raises(BtacalcError, match=r"needs --overlap-moe-expert-parallel-comm .*transformer_config.py:3097"):
        import_megatron(LAUNCH, "launch.sh")
    run = import_megatron(LAUNCH + " --overlap-moe-expert-parallel-comm", "launch.sh")
    assert run.request.overlaps.early_attn_release and run.request.overlap_all_to_all
    assert not any("early-attn" in flag for flag, _ in run.ignored)  # read, no longer "not modelled"


@pytest.mark.parametrize("emit, said", [("megatron", "--ep-overlap-early-attn-memory-release"),
                                        ("bridge", "model.ep_overlap_early_attn_memory_release=True")])
def test_the_release_round_trips_through_the_emitted_launch(cli, tmp_path, emit, said):
    out, back = overlap_round_trip(cli, tmp_path, "--early-attn-release", emit)
    assert said in out
    assert '"early_attn_release": true' in back


def test_the_command_line_refuses_it_alone_and_on_a_wafer(cli):
    code, out, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--ep", "8",
                         "--early-attn-release")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--overlap-a2a" in err
    code, out, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "wse3", "--early-attn-release")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--early-attn-release" in err
