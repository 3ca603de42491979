"""review31: a wrong-numbers review of the collective and NCCL model (btacalc/model/gpu/collectives.py, nccl.py).

Each expected value is arithmetic from the cited source, not the tool's output. The H100 numbers are the profile's
sources, restated: NVLink 450 GB/s per direction at a bus efficiency of 360/450 (nccl-tests issue 326), 13.0 us per
call inside a DGX H100 (dgxc-benchmarking nccl/README.md); one ConnectX-7 400 Gb/s NIC per GPU, 50 GB/s per direction
(dgxc-benchmarking README, DGX H100 reference system) at 47/50 (nccl-tests issue 290), 46.5 us per call across nodes
(nccl issue 1244).
"""

from __future__ import annotations

import pytest

from btacalc.model.gpu.collectives import context_parallel_time, describe, pipeline_p2p_time, ring_time
from support import flash_problem

NVLINK, NVLINK_EFF, NVLINK_ALPHA = 450e9, 360 / 450, 13.0e-6
NIC, NIC_EFF, NIC_ALPHA = 50e9, 47 / 50, 46.5e-6


def _problem(hw: str = "h100", model: str = "llama-3-8b", **layout):
    return flash_problem(model, hw, **layout)


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


# NCCL's LL protocol: a ring's bus bandwidth is min(llMaxBw, busBw x 0.5), a tree's min(busBw x 0.92 / 3.8, llMaxBw)
# (NVIDIA/nccl @ 5067397c src/graph/tuning.cc L327, L330-332), llMaxBw (GB/s) from the table at L177-183: inside
# one node by GPU generation (Hopper 141.0), across nodes by CPU (the Intel / default row: 39.0 on 2 nodes, 20.4 on
# more; index2 and index1 at L267-272).
H100_SCALEUP_SCALE = 13.0 / (6.6 + 14 * 0.6)  # measured / NCCL's ring LL on 8 ranks (docs/comm.md "nccl2")
H100_SCALEOUT_SCALE = 46.5 / (6.8 + 2 * (7 * 0.6 + 5.0))  # measured / NCCL's tree LL on 2 x 8 ranks


def test_ll_ring_in_a_node_capped_at_hoppers_ll_max_bandwidth():
    # an all-gather of 4 MB of bus bytes on the 8 GPUs of a DGX H100 (4e6 x 8/7 buffer). Latencies (tuning.cc L151,
    # L159): LL 6.6 + 7 x 0.6 = 10.8 us, LL128 14.0 + 7 x 1.9 = 27.3 us, Simple 8.4 + 7 x 3.4 = 32.2 us, each x 13/15.
    # Bandwidths: Simple 360 GB/s, LL128 0.92 x 360, LL min(141, 0.5 x 360) = 141 GB/s.
    # LL 9.36 + 28.37 = 37.73 us, LL128 23.66 + 12.08 = 35.74 us, Simple 27.91 + 11.11 = 39.02 us: LL128
    # (uncapped, LL's 9.36 + 22.22 = 31.58 us would have won)
    p = _problem(devices=8)
    bus = 4e6
    ll128 = 27.3e-6 * H100_SCALEUP_SCALE + bus / (0.92 * NVLINK * NVLINK_EFF)
    assert ring_time(p, bus, 8, 1, 1, 1) == pytest.approx(ll128)
    ll = 10.8e-6 * H100_SCALEUP_SCALE + bus / 141e9
    assert ll > ll128


@pytest.mark.parametrize("devices, ll_max, lat_ll", [
    # 2 nodes: 15 steps, 1 between nodes; intra step max(0.6, 1.0 net overhead) (L404-410), net ring LL 2.7
    (16, 39.0e9, 6.6 + 14 * 1.0 + 1 * 2.7),
    # 4 nodes: 31 steps, 3 between nodes
    (32, 20.4e9, 6.6 + 28 * 1.0 + 3 * 2.7),
])
def test_ll_ring_across_nodes_capped_at_the_network_ll_max_bandwidth(devices, ll_max, lat_ll):
    # a reduce-scatter of 1 MB of bus bytes over all ranks of 2 or 4 DGX H100 (stride 1: 8 ranks per node, the ring at
    # min(360, 8 x 47) = 360 GB/s). LL stays NCCL's choice (LL128 and Simple pay 14.0 / 8.4 us base and larger steps:
    # 82.3 / 129 us on 2 nodes), now at llMaxBw: 23.3 x 1.845 + 1e6 / 39e9 = 68.6 us on 2 nodes (was 48.6 us at
    # 180 GB/s), 42.7 x 1.845 + 1e6 / 20.4e9 = 127.8 us on 4 nodes
    p = _problem(devices=devices)
    bus = 1e6
    assert ring_time(p, bus, devices, 1, 1, 1) == pytest.approx(lat_ll * 1e-6 * H100_SCALEOUT_SCALE + bus / ll_max)


def test_ring_row_efficiency_over_the_line_rate_of_the_link_that_sets_the_pace():
    # plan --json's `efficiency`: the achieved bus bandwidth over the line rate (CollectiveRow). A reduce-scatter over
    # the 16 GPUs of two DGX H100 (stride 1: 8 per node) runs its ring at min(NVLink 360, 8 NICs x 47) = 360 GB/s:
    # NVLink sets the pace, so the line rate is NVLink's 450 GB/s. 6 GB of bus bytes in one Simple call: latency
    # (8.4 + 14 x 3.4 + 1 x 14.0) us x 46.5 / 25.2 (tuning.cc L151, L159, L171; docs/comm.md "nccl2"), then
    # 6e9 / 360e9 s: about 16.80 ms, 357 GB/s achieved, 0.794 of 450 GB/s (it read 0.933: the NIC's 0.94 times the
    # achieved share of the NVLink-bound ring)
    p = _problem(devices=16)
    bus = 6e9
    seconds = (8.4 + 14 * 3.4 + 14.0) * 1e-6 * H100_SCALEOUT_SCALE + bus / (NVLINK * NVLINK_EFF)
    row = describe(p, "gradient_reduce_dense", (16, 1), (bus, 1), seconds, kind=1, collective="reduce_scatter")
    assert row.link == "network" and row.protocol == "Simple"
    assert row.efficiency == pytest.approx(bus / seconds / NVLINK)
    # where the NICs set the pace (TP 8, DP 4 on 32 GPUs: one member per node, one NIC at 47 GB/s), their line rate
    p = _problem(devices=32, tensor_parallel=8, sequence_parallel=True)
    seconds = (8.4 + 3 * 14.0) * 1e-6 * H100_SCALEOUT_SCALE + bus / (NIC * NIC_EFF)
    row = describe(p, "gradient_reduce_dense", (4, 8), (bus, 1), seconds, kind=1, collective="reduce_scatter")
    assert row.efficiency == pytest.approx(bus / seconds / NIC)
