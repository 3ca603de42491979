"""Compute lost to the SMs of an overlapped DeepEP / HybridEP all-to-all (btacalc/model/gpu/sm_share.py),
checked as its derivation from the cited SM counts."""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout, Overlaps, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.collectives import all_to_all_time
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.sm_share import sm_share_loss
from btacalc.model.gpu.stages import PipelineStages
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.problem import make_problem
from btacalc.planning.measured import express, load_runs

# Megatron-LM @ d98e8a64 megatron/core/transformer/moe/token_dispatcher.py L1287-1291: DeepEP's
# Buffer.num_sms is 20 when moe_flex_dispatcher_num_sms is unset (HybridEP takes DeepEP's default,
# transformer_config.py L972-974)
DEEPEP_SMS = 20
H100_SMS = 132  # Hopper architecture whitepaper: 132 SMs on the H100 SXM5
B200_SMS = 148  # Chips and Cheese's B200 measurement (hardware_profiles/b200.toml)
QWEN = resolve_model("qwen3-30b-a3b")


def _problem(hw: str = "h100", **layout):
    hardware = resolve_hardware(hw)
    fields = dict(devices_per_node=int(hardware.system.devices_per_node.value), devices=16, expert_parallel=16)
    fields.update(layout)
    return make_problem(QWEN, hardware, RunOptions(attention="flash", recompute="none"), Layout(**fields))


def test_the_window_is_the_shorter_of_exchange_and_compute():
    p = _problem(deepep=True, overlap=Overlaps(all_to_all=True))
    # exchange shorter than the compute it hides behind: all of it runs beside compute at 112 of 132 SMs
    assert sm_share_loss(p, 0.3, 1.0) == pytest.approx(0.3 * 20 / 132)
    # exchange longer: the compute (1 s) runs wholly beside it, and loses 20/132 of its rate
    assert sm_share_loss(p, 3.0, 1.0) == pytest.approx(1.0 * DEEPEP_SMS / H100_SMS)
    b200 = _problem("b200", deepep=True, overlap=Overlaps(all_to_all=True))
    assert sm_share_loss(b200, 0.3, 1.0) == pytest.approx(0.3 * DEEPEP_SMS / B200_SMS)


def test_nccls_all_to_all_counts_no_loss():
    # the alltoall dispatcher's NCCL channel count is not modelled: no loss, rather than a guessed one
    p = _problem(overlap=Overlaps(all_to_all=True))
    assert sm_share_loss(p, 0.3, 1.0) == 0.0


def test_step_carries_the_loss_of_every_layer_and_micro_batch():
    # Qwen3-30B-A3B on 16 H100 (EP 16, DeepEP, overlapped all-to-all), one sequence of 4,096 per micro-batch:
    # 48 MoE layers, each loses min(a2a, compute) x 20/132 per micro-batch
    p = _problem(deepep=True, overlap=Overlaps(all_to_all=True))
    ev = p.evaluate(1, 1)
    parts = layer_parts(p, ev)
    expected = 0.0
    counts = PipelineStages.of(p, p.layout.micro_batches).kind_counts(0)  # one stage: every layer
    assert sum(counts) == 48
    for n, part in zip(counts, parts):
        a2a = all_to_all_time(p, part.a2a_bytes, part.a2a_calls)
        expected += n * min(a2a, part.compute_s) * DEEPEP_SMS / H100_SMS
    assert expected > 0
    step = gpu_step_time(p, 1, 1, ev)
    assert step.details["terms"]["a2a_sm_share"] == pytest.approx(expected)
    m = p.layout.micro_batches
    assert step.phase_time_s["a2a_sm_share"] == pytest.approx(expected * m)
    # without the overlap nothing runs beside compute; the exchange is exposed instead
    plain = gpu_step_time(_problem(deepep=True), 1, 1)
    assert plain.details["terms"]["a2a_sm_share"] == 0.0


def test_the_layouts_dispatcher_sms_replace_the_default():
    # Megatron-Bridge @ 067f987d recipes/qwen/h100/qwen3_moe.py L205-209: the 16-GPU H100 Qwen3-30B-A3B
    # recipe gives HybridEP 32 SMs: 32 of 132 run the exchange, the compute beside it keeps 100
    p = _problem(deepep=True, dispatcher_sms=32, overlap=Overlaps(all_to_all=True))
    assert sm_share_loss(p, 0.3, 1.0) == pytest.approx(0.3 * 32 / H100_SMS)
    runs = {r.id: r for r in load_runs()}
    request, _ = express(runs["qwen3-30b-a3b-h100-16-389"])
    assert request is not None and request.dispatcher_sms == 32 and request.deepep


def test_dispatcher_sms_without_deepep_or_beyond_the_chip_is_refused(cli):
    base = ("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16", "--seq", "4096",
            "--global-batch", "1024", "--micro-batch", "1", "--overlap-a2a")
    for extra in (("--dispatcher-sms", "32"), ("--deepep", "--dispatcher-sms", "132")):
        code, _, err = cli(*base, *extra)
        assert code == 2 and "--dispatcher-sms" in err and len(err.strip().splitlines()) == 1
