"""Task dpsm: Megatron-LM DDP's overlapped gradient reduce-scatter and distributed-optimizer all-gather hold
their NCCL ring channels' SMs while they hide behind compute (btacalc/model/gpu/sm_share.py, docs/clock.md
'dpsm').

With --overlap-grad-reduce / --overlap-param-gather each bucket's collective is issued async_op=True on the
process group's NCCL stream (Megatron-LM @ d98e8a64 megatron/core/distributed/param_and_grad_buffer.py L674-685,
L408, L510-526); a ring collective is one kernel with one CTA per collective channel (NVIDIA/nccl @ 5067397c
src/enqueue.cc L1756-1758), every channel at bucket sizes (L2090-2096). Without pipelining (VP = 1), the window
of the last micro-batch's backward hides min(R, backward) of the reduction R and the first forward min(G, forward)
of the gather G, so the step's synchronisation is

    sync = max(0, R - backward) + max(0, G - forward) + (min(R, backward) + min(G, forward)) x channels / SMs
"""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout, Overlaps, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.problem import make_problem

H100_SMS = 132  # Hopper architecture whitepaper: 132 SMs on the H100 SXM5
# collective channels: 24 in one 8-GPU NVSwitch node (6 ring-search channels, duplicated, doubled), 16 across
# nodes (8 NICs: 8 search channels, not duplicated, doubled); sm_share.py, tests/test_mpt2_fsdp_sm_share.py
IN_NODE, ACROSS_NODES = 6 * 2 * 2, 8 * 2


def _step(devices: int, overlap: bool):
    layout = Layout(devices=devices, devices_per_node=8, zero_stage=1, micro_batches=4,
                    overlap=Overlaps(grad_reduce=overlap, param_gather=overlap))
    problem = make_problem(resolve_model("llama-3-8b"), resolve_hardware("h100"),
                           RunOptions(attention="flash", recompute="none"), layout)
    return gpu_step_time(problem, 1, 2, micro_batches=4)


@pytest.mark.parametrize("devices, channels", [(16, ACROSS_NODES), (8, IN_NODE)])
def test_hidden_bucket_collectives_hold_the_ring_channels(devices, channels):
    step = _step(devices, overlap=True)
    reduce, gather = step.communication_s["gradient_reduce"], step.communication_s["param_gather"]
    compute = step.details["terms"]["compute"]  # one micro-batch's forward + backward
    # Llama 3 8B on H100: the reduction and the gather are each shorter than one micro-batch's backward /
    # forward (checked against the whole micro-batch's compute, with the backward about 2/3 of it)
    assert 0 < reduce < compute / 2 and 0 < gather < compute / 4
    assert step.details["sync_s"] == pytest.approx((reduce + gather) * channels / H100_SMS)


def test_exposed_collectives_hold_no_compute():
    # without the overlaps the whole traffic is exposed and no compute runs beside it
    step = _step(16, overlap=False)
    assert step.details["sync_s"] == pytest.approx(step.communication_s["gradient_reduce"]
                                                   + step.communication_s["param_gather"])
