"""review31: a wrong-numbers review of the collective and NCCL model (btacalc/model/gpu/collectives.py, nccl.py).

Each expected value is arithmetic from the cited source, not the tool's output. The H100 numbers are the profile's
sources, restated: NVLink 450 GB/s per direction at a bus efficiency of 360/450 (nccl-tests issue 326), 13.0 us per
call inside a DGX H100 (dgxc-benchmarking nccl/README.md); one ConnectX-7 400 Gb/s NIC per GPU, 50 GB/s per direction
(dgxc-benchmarking README, DGX H100 reference system) at 47/50 (nccl-tests issue 290), 46.5 us per call across nodes
(nccl issue 1244).
"""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.collectives import context_parallel_time, pipeline_p2p_time
from btacalc.model.problem import make_problem

NVLINK, NVLINK_EFF, NVLINK_ALPHA = 450e9, 360 / 450, 13.0e-6
NIC, NIC_EFF, NIC_ALPHA = 50e9, 47 / 50, 46.5e-6


def _problem(hw: str = "h100", model: str = "llama-3-8b", **layout):
    hardware = resolve_hardware(hw)
    fields = dict(devices_per_node=int(hardware.system.devices_per_node.value))
    fields.update(layout)
    return make_problem(resolve_model(model), hardware, RunOptions(attention="flash", recompute="none"),
                        Layout(**fields))


def test_context_parallel_ring_across_nodes_sends_through_one_nic_per_hop():
    # TP 2, CP 8 on 64 DGX H100 GPUs: Megatron's rank order tp-cp-ep-dp-pp puts a CP group at stride TP = 2, ranks
    # {0, 2, ..., 14}: four in node 0, four in node 1. The K/V ring (TransformerEngine's P2P: each rank sends its
    # chunk to the next rank and receives from the previous one, CP - 1 = 7 steps) crosses the nodes on the hops
    # 6 -> 8 and 14 -> 0; each is one GPU's send to one remote GPU, through that GPU's own NIC (one 400 Gb/s NIC per
    # GPU), and a step ends when its slowest hop does. So a step of V bytes takes V / (50 GB/s x 47/50), as a
    # pipeline send between nodes does, not V / (4 x 47 GB/s) (four NICs cannot share one point-to-point hop).
    p = _problem(devices=64, tensor_parallel=2, sequence_parallel=True, context_parallel=8)
    volume, exchanges = 8 * 2**20, 10  # 8 MiB of K and V per step, 10 exchanges of 7 steps
    expected = exchanges * 7 * NIC_ALPHA + volume * 7 / (NIC * NIC_EFF)
    assert context_parallel_time(p, volume, exchanges) == pytest.approx(expected)


def test_context_parallel_ring_inside_a_node_stays_on_nvlink():
    # TP 4, CP 2 on 64 GPUs: the CP group {r, r + 4} lies in one node: NVLink at 360 GB/s, 13.0 us per send
    p = _problem(devices=64, tensor_parallel=4, sequence_parallel=True, context_parallel=2)
    volume, exchanges = 4 * 2**20, 10
    expected = exchanges * 1 * NVLINK_ALPHA + volume / (NVLINK * NVLINK_EFF)
    assert context_parallel_time(p, volume, exchanges) == pytest.approx(expected)


def test_pipeline_send_across_nodes_is_one_nic():
    # PP 2 on 16 GPUs: the pipeline group {r, r + 8} spans the two nodes: each send through one NIC, 2 sends per
    # micro-batch (forward activation, backward gradient)
    p = _problem(devices=16, pipeline_parallel=2)
    volume = 16 * 2**20
    assert pipeline_p2p_time(p, volume) == pytest.approx(2 * NIC_ALPHA + 2 * volume / (NIC * NIC_EFF))
