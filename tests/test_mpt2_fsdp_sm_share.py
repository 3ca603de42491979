"""Task mpt2: the SMs PyTorch FSDP1's NCCL ring collectives hold while they hide behind the blocks' compute
(btacalc/model/gpu/sm_share.py, docs/runs.md 'mpt2'), derived from NCCL's ring search and the SM counts.

A ring all-gather / reduce-scatter is one kernel with one CTA per collective channel (NVIDIA/nccl
src/enqueue.cc: grid = the plan's channel mask). FSDP1 issues a unit's all-gathers and its reduce-scatter on side
streams while the blocks compute, so the compute they hide behind runs on SMs - channels of the device:

    loss per micro-batch = min(FSDP traffic, compute) x channels / SMs
"""

from __future__ import annotations

import pytest

from btacalc.config.execution import BatchLimits, ExecutionRequest, Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.sm_share import dp_sm_share_loss, ring_channels
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.problem import make_problem
from btacalc.planning.plan import make_plan

H100_SMS = 132  # Hopper architecture whitepaper: 132 SMs on the H100 SXM5
A100_SMS = 108  # Ampere architecture whitepaper: 108 SMs on the A100


def _ring_channels(links: int, link_gb_s: float, top_speed_gb_s: float, duplicate_from_gb_s: float) -> int:
    """NCCL's collective channels in one NVSwitch node, its default path written out (v2.18.1-1): the ring
    search's channels at its top speed (src/graph/search.cc L776-781) over the GPU's NVLink bandwidth
    (src/graph/topo.h L16-17), duplicated when the speed reaches the threshold (L954-961), then doubled
    (src/graph/connect.cc L389)."""
    search = int(links * link_gb_s // top_speed_gb_s)
    dup = 2 * search if top_speed_gb_s >= duplicate_from_gb_s else search
    return 2 * dup


def test_collective_channels_in_a_node_from_nccls_search():
    # NCCL 2.18.1 (torch 2.1.0): A100 12 NVLinks x 20 GB/s at 40 GB/s; H100 18 x 20 GB/s at 60 GB/s (sm90 list)
    a100 = _ring_channels(12, 20.0, 40.0, 25.0)
    h100 = _ring_channels(18, 20.0, 60.0, 50.0)
    # NCCL 2.14.3 (torch 1.13.1, the A100 PURE rows): 12 x 22 GB/s at 44 GB/s, duplicated from 25 GB/s
    a100_old = _ring_channels(12, 22.0, 44.0, 25.0)
    assert a100 == h100 == a100_old == 6 * 2 * 2 == 24
    # the p5.48xlarge NCCL_DEBUG log prints "24 coll channels" in one node
    assert ring_channels(8.0).in_domain.value == ring_channels(9.0).in_domain.value == 24


def test_collective_channels_across_nodes():
    # 8 NICs per node: a 400 Gb/s NIC (50 GB/s) is searched at the inter list's top speed 48 GB/s, a 200 Gb/s one
    # (25 GB/s) at 24 (v2.18.1-1 src/graph/search.cc L777, L782): one search channel per NIC, not duplicated
    # (sm90 below 50 GB/s, sm80 below 25, L954-961), doubled: 16, as the two-node p5 log prints ("16 coll channels")
    assert ring_channels(9.0).across_domains.value == 8 * 1 * 2 == 16


def _problem(hw: str = "h100", devices: int = 64, impl: str = "torch", fsdp: bool = True):
    layout = Layout(devices=devices, devices_per_node=8, fsdp=fsdp, fsdp_impl=impl, zero_stage=3 if fsdp else 0)
    return make_problem(resolve_model("mpt-13b"), resolve_hardware(hw), RunOptions(attention="flash", recompute="none"),
                        layout)


def test_the_loss_is_the_hidden_traffic_times_channels_over_sms():
    # 64 H100 over 8 nodes: the ring leaves the node, 16 channels
    assert dp_sm_share_loss(_problem(), 0.3, "reduce_scatter") == pytest.approx(0.3 * 16 / H100_SMS)
    # 8 H100 in one node: 24 channels; 8 A100: 24 of 108 SMs
    assert dp_sm_share_loss(_problem(devices=8), 0.3, "reduce_scatter") == pytest.approx(0.3 * 24 / H100_SMS)
    assert dp_sm_share_loss(_problem("a100-80gb", devices=8), 0.3, "reduce_scatter") == pytest.approx(0.3 * 24 / A100_SMS)
    # one data-parallel rank: no collective, nothing held
    assert dp_sm_share_loss(_problem(devices=1), 0.3, "reduce_scatter") == 0.0


def _hidden_fsdp_term(impl: str) -> tuple[float, float]:
    """(FSDP traffic per micro-batch, the per-micro-batch dp_sm_share term) of MPT-13B on 64 H100, micro-batch 2,
    three micro-batches; checks that the traffic is wholly hidden (shorter than the compute)."""
    step = gpu_step_time(_problem(impl=impl), 1, 2, micro_batches=3)
    terms = step.details["terms"]
    traffic = step.communication_s["zero_per_micro_batch"] / 3
    assert 0 < traffic < terms["compute"]  # hidden: the whole traffic runs beside compute
    assert step.phase_time_s["dp_sm_share"] == pytest.approx(3 * terms["dp_sm_share"])
    return traffic, terms["dp_sm_share"]


def test_step_carries_the_loss_per_micro_batch():
    # MPT-13B on 64 H100, micro-batch 2 (llm-foundry's row): the term is the stage's FSDP traffic per micro-batch
    # (hidden: shorter than its compute) times 16/132, and the step's phase time is that times M
    traffic, term = _hidden_fsdp_term("torch")
    assert term == pytest.approx(traffic * 16 / H100_SMS)


def test_megatron_fsdp_pays_the_same_rule():
    # task dpsm: Megatron-FSDP's hidden per-micro-batch collectives are NCCL rings too (one rule with FSDP1)
    traffic, term = _hidden_fsdp_term("megatron")
    assert term == pytest.approx(traffic * 16 / H100_SMS)


def _mpt_13b_plan(grad_bytes: int | None = None):
    return make_plan(resolve_model("mpt-13b"), resolve_hardware("h100"), ExecutionRequest(
        seq_len=2048, devices=64, fsdp=True, fsdp_impl="torch", recompute="none", attention="flash",
        attention_kernel="triton-flash", gradient_bytes=grad_bytes, limits=BatchLimits(global_batch=128, micro_batch=2)))


def test_fsdp1_default_reduces_the_gradient_in_fp32():
    # Composer 0.17.2 composer/trainer/mosaic_fsdp_utils.py L94-101: DEFAULT = bf16 parameters, fp32 reduce_dtype;
    # PURE = bf16 both. llm-foundry's submit_benchmarks.py @ 5e85bd62d passes no mixed precision to
    # mod_parameters (L451-468), whose default is DEFAULT (L268): the table's MP Mode column.
    # MPT-13B (mpt-13b.yaml L13-18: d_model 5120, 40 layers, vocab 50368 padded to 128 -> 50432, positions 2048)
    h, layers, v_pad, s_max = 5120, 40, 50432, 2048
    n = layers * (12 * h * h + 13 * h) + v_pad * h + s_max * h + 2 * h
    ranks = 64
    # per micro-batch and rank, ring bus bytes: two bf16 all-gathers (before the forward and again before the
    # backward, FULL_SHARD) and one reduce-scatter in reduce_dtype, each moving (n - 1)/n of the parameters
    for grad_bytes, reduce_bytes in ((None, 4), (2, 2)):
        rows = [c for c in _mpt_13b_plan(grad_bytes).throughput.collectives if c["name"].startswith("zero_per_micro_batch")]
        assert len(rows) == 1 and rows[0]["calls"] == 3 * layers + 2
        total = rows[0]["calls"] * rows[0]["message_bytes"]
        assert total == pytest.approx((2 + 2 + reduce_bytes) * n * (ranks - 1) / ranks, rel=1e-9)
