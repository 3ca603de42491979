"""NCCL's tuning model of one collective call (btacalc/model/gpu/nccl.py), each expected value written as
arithmetic from NVIDIA/nccl@5067397c (v2.30.7) src/graph/tuning.cc:

- baseLatencies (L151): ring LL 6.6, LL128 14.0, Simple 8.4 us; tree LL 6.8, LL128 14.0, Simple 8.4 us;
- hwLatencies NVLINK (L159): ring 0.6 / 1.9 / 3.4 us per step, tree 0.6 / 1.25 / 4.0;
  NET (L171): ring 2.7 / 4.0 / 14.0, tree 5.0 / 8.5 / 14;
- the network post overhead (L228-233, L404-410): 1 us on x86 Intel, x3 for Simple, floors an intra-node
  ring step once the ring leaves the node;
- ring latency (L411-412): base + (steps - inter) x intra + inter x net, steps = n - 1 (all-gather,
  reduce-scatter) or 2(n - 1) (all-reduce), inter = nodes - 1 or 2(nodes - 1);
- tree all-reduce latency (L416): base + 2 x ((ranks per node - 1) x intra + log2(nodes) x net).
"""

from __future__ import annotations

import json

import pytest

from btacalc.model.gpu import nccl
from btacalc.model.gpu.collectives import ring_time
from tests.test_collectives import NVLINK_EFF, NVLINK_H100, NIC, NIC_EFF, _problem

US = 1e-6
AG, AR = 1, 2  # the collectives' factors (formulas/constants.toml [collectives])
LL, LL128, SIMPLE = 0, 1, 2
H100_UP = NVLINK_H100 * NVLINK_EFF
# The anchors (docs/comm.md 'nccl2'): the profile's measured small all-reduce over NCCL's model at the same place.
# DGX H100, 8 GPUs, 8 bytes (dgxc-benchmarking nccl/README.md): 13.0 us; model ring LL 6.6 + 14 x 0.6 = 15.0 us
H100_UP_SCALE = 13.0 / (6.6 + 14 * 0.6)
# 2 nodes x 8 Hopper, 8 bytes (nccl #1244): 46.5 us; model tree LL 6.8 + 2 x (7 x 0.6 + 1 x 5.0) = 25.2 us
HOPPER_OUT_SCALE = 46.5 / (6.8 + 2 * (7 * 0.6 + 5.0))


def _group(ranks: int, nodes: int, kind: int, rate: float = H100_UP) -> nccl.Group:
    return nccl.Group(ranks, nodes, kind, rate)


def test_ring_all_gather_latency_on_eight_ranks_in_a_node():
    # 7 steps, all on NVLink, no network overhead (one node)
    g = _group(8, 1, AG)
    assert nccl.ring_latency_s(g, LL) == pytest.approx((6.6 + 7 * 0.6) * US)  # 10.8 us
    assert nccl.ring_latency_s(g, LL128) == pytest.approx((14.0 + 7 * 1.9) * US)  # 27.3 us
    assert nccl.ring_latency_s(g, SIMPLE) == pytest.approx((8.4 + 7 * 3.4) * US)  # 32.2 us


def test_ring_all_gather_latency_on_64_nodes_of_8():
    # 512 ranks: 511 steps, 63 between nodes; intra step = max(NVLink, net overhead): Simple max(3.4, 3 x 1.0)
    g = _group(512, 64, AG)
    assert nccl.ring_latency_s(g, SIMPLE) == pytest.approx((8.4 + 448 * 3.4 + 63 * 14.0) * US)  # 2.41 ms
    assert nccl.ring_latency_s(g, LL128) == pytest.approx((14.0 + 448 * 1.9 + 63 * 4.0) * US)
    assert nccl.ring_latency_s(g, LL) == pytest.approx((6.6 + 448 * 1.0 + 63 * 2.7) * US)  # LL: overhead 1.0 > 0.6


def test_ring_all_reduce_counts_twice_the_steps_and_one_rank_per_node_takes_the_tree_network_latency():
    # 64 ranks on 64 nodes (a DP group at stride 8): AR 126 steps, all between nodes; ppn = 1 -> tree NET latency
    g = _group(64, 64, AR)
    assert nccl.ring_latency_s(g, LL) == pytest.approx((6.6 + 126 * 5.0) * US)
    assert nccl.ring_latency_s(g, SIMPLE) == pytest.approx((8.4 + 126 * 14.0) * US)
    # Simple multi-node ring all-reduce of >= 64 bytes per rank: latency x 1.4 (L647-650)
    assert nccl.ring_call_latency_s(g, 1e6, SIMPLE) == pytest.approx(1.4 * (8.4 + 126 * 14.0) * US)
    assert nccl.ring_call_latency_s(_group(64, 64, AG), 1e6, SIMPLE) == pytest.approx((8.4 + 63 * 14.0) * US)


def test_tree_all_reduce_latency():
    # 2 nodes x 8: 2 x (7 NVLink hops + log2(2) = 1 network hop)
    assert nccl.tree_latency_s(_group(16, 2, AR), LL) == pytest.approx((6.8 + 2 * (7 * 0.6 + 1 * 5.0)) * US)
    # 64 nodes x 8: log2(64) = 6 network hops
    assert nccl.tree_latency_s(_group(512, 64, AR), SIMPLE) == pytest.approx((8.4 + 2 * (7 * 4.0 + 6 * 14)) * US)


def test_nccl_picks_low_latency_protocols_for_small_calls_and_simple_for_large_ones():
    g = _group(8, 1, AG)
    small, large = nccl.choose(g, 8), nccl.choose(g, 256e6)
    assert (small.algorithm, small.protocol) == ("ring", "LL")
    assert (large.algorithm, large.protocol) == ("ring", "Simple")
    # the large call: 8.4 + 7 x 3.4 us, then 7/8 of the buffer at the Simple ring's bus bandwidth
    assert large.time_s == pytest.approx((8.4 + 7 * 3.4) * US + 7 / 8 * 256e6 / H100_UP)
    # a tiny all-reduce across 64 nodes goes by tree (6.8 + 2 x (7 x 0.6 + 6 x 5.0) = 75.2 us against a ring's
    # 6.6 + (1022 - 126) x 1.0 + 126 x 2.7 = 1242.8 us)
    tiny = nccl.choose(_group(512, 64, AR, 8 * NIC * NIC_EFF), 4)
    assert (tiny.algorithm, tiny.protocol) == ("tree", "LL")
    assert tiny.latency_s == pytest.approx((6.8 + 2 * (7 * 0.6 + 6 * 5.0)) * US)


def test_published_small_message_times_against_the_model():
    # The profiles' old per-call alpha came from nccl-tests all_reduce_perf at a few bytes; what NCCL's model
    # gives at the same rank counts (docs/comm.md 'nccllat'):
    # DGX H100, 8 GPUs (dgxc-benchmarking nccl/README.md): 13.03 us; model: ring LL 6.6 + 14 x 0.6 = 15.0 us (+15%)
    h100_node = nccl.choose(_group(8, 1, AR), 8)
    assert h100_node.time_s == pytest.approx(15.0 * US, rel=1e-3)
    assert h100_node.time_s / 13.03e-6 - 1 == pytest.approx(0.151, abs=0.005)
    # A100, 2 GPUs of a node (nccl #583): 10.14 us; model ring LL 6.6 + 2 x 0.6 = 7.8 us (-23%)
    assert nccl.choose(_group(2, 1, AR), 32).time_s == pytest.approx(7.8 * US, rel=1e-3)
    # 2 nodes x 8 Hopper (nccl #1244): 46.3 us; model: tree LL 6.8 + 2 x (7 x 0.6 + 5.0) = 25.2 us (-46%):
    # NCCL's tuning constants rank the choices; they do not reproduce the measured cross-node time
    two_nodes = nccl.choose(_group(16, 2, AR, 2 * NIC * NIC_EFF), 8)
    assert (two_nodes.algorithm, two_nodes.time_s) == ("tree", pytest.approx(25.2 * US, rel=1e-3))
    # A100 2 nodes x 8 (nccl #757): 29.8 us; the same 25.2 us (-15%)


def test_ring_time_charges_nccls_latency_per_call_and_keeps_alpha_for_point_to_point():
    p = _problem(devices=8)
    # one TP 8 group inside a DGX H100: 10 all-gathers of 8/7 x 1e8 bytes (1e8 bus bytes each): Simple, NCCL's
    # latency x the NVLink anchor 13.0 / 15.0 (H100_UP_SCALE)
    lat = (8.4 + 7 * 3.4) * US * H100_UP_SCALE
    assert ring_time(p, 1e9, 8, 1, 10, AG) == pytest.approx(10 * lat + 1e9 / H100_UP)
    # without a kind (the context-parallel K/V ring: sends) a call costs the profile's alpha, 13.0 us
    assert ring_time(p, 1e9, 8, 1, 10) == pytest.approx(10 * 13.0e-6 + 1e9 / H100_UP)
    assert ring_time(p, 1e9, 1, 1, 100, AG) == 0


def test_plan_json_reports_nccls_choice_for_the_data_parallel_group(cli):
    # Llama 3 70B on 64 H100, TP 4 CP 2 PP 4: the dense DP·CP group is 4 ranks at stride 4, two per node
    # (ranks 0, 4 | 8, 12): a reduce-scatter of 3 steps, 1 between nodes; Simple (GB-sized):
    # 8.4 + 2 x max(3.4, 3 x 1.0) + 1 x 14.0 = 29.2 us
    code, out, err = cli("plan", "--model", "llama-3-70b", "--hw", "h100", "--devices", "64", "--tp", "4", "--pp", "4",
                         "--vp", "5", "--cp", "2", "--seq", "8192", "--global-batch", "128", "--micro-batch", "1",
                         "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["throughput"]["collectives"]}
    reduce = rows["gradient_reduce_dense"]
    assert (reduce["algorithm"], reduce["protocol"], reduce["steps"], reduce["link"]) == ("ring", "Simple", 3, "network")
    assert reduce["latency_s"] == pytest.approx((8.4 + 2 * 3.4 + 14.0) * US * HOPPER_OUT_SCALE)
    # TP 4 inside the node: 3 NVLink steps, 8.4 + 3 x 3.4 = 18.6 us x 13.0 / 15.0; the context-parallel ring keeps alpha
    assert rows["tensor_parallel"]["latency_s"] == pytest.approx((8.4 + 3 * 3.4) * US * H100_UP_SCALE)
    assert rows["context_parallel"]["latency_s"] == pytest.approx(13.0e-6)


def test_torch_fsdp_runs_three_collectives_per_block_and_two_for_the_root(cli):
    # llm-foundry wraps each MPTBlock as an FSDP unit (llm-foundry @ 5e85bd62d modeling_mpt.py L675-676); MPT-7B has
    # n_layers 32 (scripts/train/yamls/pretrain/mpt-7b.yaml L15). FULL_SHARD: a block gathers before its forward and
    # again before its backward and reduce-scatters its gradient; the root (embedding, final norm) is not freed after
    # its forward (torch fsdp _runtime_utils.py _post_forward_reshard): one gather and one reduce-scatter.
    # 3 x 32 + 2 = 98 calls per micro-batch, GA 1.
    code, out, err = cli("plan", "--model", "mpt-7b", "--hw", "h100", "--devices", "512", "--fsdp", "--fsdp-impl", "torch",
                         "--seq", "2048", "--global-batch", "3072", "--micro-batch", "6", "--json")
    assert code == 0, err
    (row,) = [r for r in json.loads(out)["throughput"]["collectives"] if r["name"] == "zero_per_micro_batch_dense"]
    assert row["calls"] == 3 * 32 + 2
    # 512 ranks on 64 DGX nodes: 511 ring steps, 63 of them between nodes
    assert (row["ranks"], row["steps"], row["link"]) == (512, 511, "network")
    lat = {"LL128": 14.0 + 448 * 1.9 + 63 * 4.0, "Simple": 8.4 + 448 * 3.4 + 63 * 14.0}[row["protocol"]]
    assert row["latency_s"] == pytest.approx(lat * US * HOPPER_OUT_SCALE)


def test_domains_a_ring_crosses():
    from btacalc.model.gpu.collectives import domains_spanned

    # DGX (8 GPUs a node): a DP group of 64 at stride 8 spans 64 nodes; 4 ranks at stride 4 span 2; TP 8 one
    assert (domains_spanned(64, 8, 512, 8), domains_spanned(4, 4, 64, 8), domains_spanned(8, 1, 64, 8)) == (64, 2, 1)
    # GB200 NVL72: 16 ranks at stride 8 = blocks of 128 ranks on 512 GPUs; block 1 starts at 128 mod 72 = 56, so
    # it touches ceil((56 + 128) / 72) = 3 domains; block 0 ceil(128 / 72) = 2
    assert domains_spanned(16, 8, 512, 72) == 3
    assert domains_spanned(16, 8, 128, 72) == 2


@pytest.mark.parametrize("distinct", ["few", "many"])  # groups walked one by one / in one array walk
def test_group_walks_over_layouts_run_once_per_distinct_group(monkeypatch, distinct):
    """freshuser16: `plan --search` on 256 GB200s took 16 s where the README said about 2 s: domains_spanned walked
    its 72 steps (the NVL72 domain) over every layout's array, for every ring. Over arrays of layouts both walks now
    run once per distinct (size, stride, devices): no step sees an array longer than the distinct groups, and every
    element is what the walk gives it alone."""
    import numpy as np

    from btacalc.model.gpu import collectives

    rng = np.random.default_rng(7)
    sizes, strides = rng.choice([1, 2, 4, 8, 16, 32], 4000), rng.choice([1, 2, 4, 8, 16], 4000)
    devices = rng.choice([64, 128, 256, 512, 1024], 4000)
    if distinct == "few":
        sizes, strides, devices = sizes % 3 + 2, np.full(4000, 8), np.full(4000, 512)
    widest = []
    real_where = collectives.where
    collectives._walked.cache_clear()  # an earlier test's walk of the same groups would answer from the cache (mut31)

    def where(cond, a, b):
        widest.append(max(np.size(cond), np.size(a), np.size(b)))
        return real_where(cond, a, b)

    monkeypatch.setattr(collectives, "where", where)
    spanned = collectives.domains_spanned(sizes, strides, devices, 72)
    members = collectives.local_members(sizes, strides, devices, 72)
    groups = len({(int(a), int(b), int(c)) for a, b, c in zip(sizes, strides, devices)})
    assert (groups <= collectives._FEW_GROUPS) == (distinct == "few")
    assert widest and max(widest) <= groups
    monkeypatch.setattr(collectives, "where", real_where)
    alone = [(collectives.domains_spanned(*g, 72), collectives.local_members(*g, 72))
             for g in zip(sizes.tolist(), strides.tolist(), devices.tolist())]
    assert [(int(x), int(y)) for x, y in zip(spanned, members)] == alone


def test_nccl_algo_ring_weighs_rings_alone():
    """review6: Megatron's --deterministic-mode sets NCCL_ALGO=Ring (a recipe's deterministic_mode); NCCL then gives
    the tree bandwidth 0 and never picks it (tuning.cc L458-462, L538, L634-637). The tiny all-reduce across 64 nodes
    of 8 that goes by tree LL (75.2 us, above) goes by ring LL: 6.6 + (1022 - 126) x max(0.6, 1.0) + 126 x 2.7 =
    1242.8 us."""
    group = nccl.Group(512, 64, AR, 8 * NIC * NIC_EFF, ring_only=True)
    tiny = nccl.choose(group, 4)
    assert (tiny.algorithm, tiny.protocol, tiny.steps) == ("ring", "LL", 1022)
    assert tiny.latency_s == pytest.approx((6.6 + 896 * 1.0 + 126 * 2.7) * US)
    assert nccl.call_time_s(group, 4) == pytest.approx(tiny.time_s)


def test_a_deterministic_recipe_runs_rings_alone():
    """review6: a measured run's recipe deterministic_mode reaches the request as NCCL_ALGO=Ring (nccl_ring_only)
    beside the deterministic attention backward; a run without it weighs trees too."""
    from btacalc.planning.measured import express, load_runs

    runs = [r for r in load_runs() if r.recipe is not None]
    det = [r for r in runs if r.recipe.deterministic_mode]
    assert det, "the shipped runs hold deterministic-mode recipes (the Megatron CI rows)"
    for r in det:
        request, why = express(r.with_recipe(), "gpu")
        assert not why and request.nccl_ring_only and request.deterministic_attention
    other = next(r for r in runs if not r.recipe.deterministic_mode and r.hw in ("h100", "b200", "gb200"))
    assert not express(other.with_recipe(), "gpu")[0].nccl_ring_only


# (profile, link, measured us, NCCL's model at the reference in us): each profile's [collectives] reference
# configuration (hardware_profiles/*.toml) and its latency; the model written out from tuning.cc (module docstring)
ANCHORS = [
    ("h100", "scaleup", 13.0, 6.6 + 2 * 7 * 0.6),  # 8 GPUs, all-reduce 8 B: ring LL, 14 steps
    ("h100", "scaleout", 46.5, 6.8 + 2 * (7 * 0.6 + 5.0)),  # 2 x 8, all-reduce 8 B: tree LL
    ("a100-80gb", "scaleup", 10.1, 6.6 + 2 * 1 * 0.6),  # 2 GPUs, all-reduce 32 B: ring LL, 2 steps
    ("a100-80gb", "scaleout", 29.8, 6.8 + 2 * (7 * 0.6 + 5.0)),  # 2 x 8, all-reduce 8 B (nccl #757): tree LL
    ("b200", "scaleup", 22.0, 6.6 + 2 * 3 * 0.6),  # 4 GPUs, all-reduce 8 B (nccl-tests #333): ring LL, 6 steps
]


@pytest.mark.parametrize("hw, link, measured_us, model_us", ANCHORS)
def test_each_profile_reproduces_its_measured_latency_at_its_reference(hw, link, measured_us, model_us):
    from btacalc.config.hardware import resolve_hardware
    from btacalc.model.gpu.collectives import _links, constants

    profile = resolve_hardware(hw)
    up, out = _links(_problem(hw=hw, devices=8))
    anchored = up if link == "scaleup" else out
    assert anchored.latency_scale == pytest.approx(measured_us / model_us)
    ref = getattr(profile.collectives, f"{link}_reference")
    rate = min(up.bus_bytes_per_s, ref.ranks // ref.nodes * out.bus_bytes_per_s) if ref.nodes > 1 else up.bus_bytes_per_s
    group = nccl.Group(ref.ranks, ref.nodes, getattr(constants().collectives, ref.collective), rate, anchored.latency_scale)
    choice = nccl.choose(group, ref.message_bytes)
    assert choice.latency_s == pytest.approx(measured_us * US)
    assert choice.time_s == pytest.approx(measured_us * US, rel=1e-4)  # a few bytes: latency but < 0.1 ns


def test_scaled_latency_keeps_nccls_choice_at_the_reference():
    # scaling every latency of a link class by one factor keeps the algorithm and protocol NCCL picks for a small call
    unscaled, scaled = nccl.choose(_group(16, 2, AR), 8), nccl.choose(nccl.Group(16, 2, AR, H100_UP, HOPPER_OUT_SCALE), 8)
    assert (unscaled.algorithm, unscaled.protocol) == (scaled.algorithm, scaled.protocol) == ("tree", "LL")
    assert scaled.latency_s == pytest.approx(46.5 * US)


def test_a_64_node_ring_pays_the_model_times_the_network_anchor():
    # FSDP over 64 DGX H100 nodes (512 ranks at stride 1): one all-gather of 1e11 bus bytes, large enough for
    # Simple (LL128 would pay 1e11 / 0.92 more bandwidth time than it saves latency). 511 steps, 63 between nodes;
    # model(64 x 8) = 8.4 + 448 x max(3.4, 3 x 1.0) + 63 x 14.0 = 2415.2 us, x 46.5 / 25.2 = 4456.6 us.
    # Bus bandwidth: min(NVLink 360 GB/s, 8 x 47 GB/s) = 360 GB/s.
    p = _problem(devices=512)
    lat = (8.4 + 448 * 3.4 + 63 * 14.0) * US * (46.5 / 25.2)
    rate = min(H100_UP, 8 * NIC * NIC_EFF)
    assert ring_time(p, 1e11, 512, 1, 1, AG) == pytest.approx(lat + 1e11 / rate)
