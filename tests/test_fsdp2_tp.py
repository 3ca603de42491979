"""PyTorch FSDP2 with tensor parallelism, as torchtitan runs "2-D" training (`--fsdp --fsdp-impl fsdp2 --tp T`), written
as its derivation from the code (pytorch/torchtitan @ 820504e2, the commit of the asyncTP benchmark's versions table,
torchtitan/models/llama3/parallelize_llama.py):

- L67-73, L123-203 apply_tp: the block's norms SequenceParallel, wq/wk/wv/w1/w3 ColwiseParallel, wo/w2 RowwiseParallel
  with Shard(1) outputs (sequence parallel), the embedding RowwiseParallel, the output ColwiseParallel (loss parallel);
- L90-98, L344-367 apply_fsdp: fully_shard per block and the root over the data-parallel mesh ("dp_shard_cp"), after
  apply_tp: FSDP2 shards each DTensor's local (TP) shard over the DP = devices / TP ranks, the blocks but the last
  resharded after the forward: 3 L + 1 collectives per micro-batch, as with TP 1 (tests/test_fsdp2_copies.py);
- L181-184, L190-193: PrepareModuleInput gathers the block's Shard(1) input to Replicate before the column-parallel
  linears, and autograd keeps that gathered tensor for the weight gradient: no second gather in the backward
  (Megatron-Core and TransformerEngine save the sequence shard and gather it again, formulas/constants.toml
  sp_backward_regather);
- L218-227: the per-op policy saves the functional reduce-scatter's output, so its re-run repeats no reduce-scatter.

Llama 3 8B on 64 H100 96GB, FSDP 8 x TP 8 (the asyncTP benchmark's layout): per layer q 4096 x 4096, k and v 4096 x 1024
each, o 4096 x 4096, gate, up and down 3 x 4096 x 14,336 split 8 ways, two RMSNorm weights of 4096 whole on every TP
rank (SequenceParallel replicates them); the embedding and the output layer split 8 ways over the vocabulary, padded
as btacalc pads it under TP (128,256 -> 129,024 = a multiple of 128 x 8).
"""

from __future__ import annotations

import json
import math

import pytest

from btacalc.config.hardware import resolve_hardware

H, KV, F, L, V_PAD, TP, DEVICES = 4096, 1024, 14336, 32, 129_024, 8, 64
DP = DEVICES // TP
SPLIT_PER_LAYER = H * H + 2 * H * KV + H * H + 3 * H * F  # the linears, split over TP
BLOCK = SPLIT_PER_LAYER // TP + 2 * H  # one block's parameters on a device
ROOT = 2 * V_PAD * H // TP + H  # embedding and output shards, the final norm whole
P_DEV = L * BLOCK + ROOT
SEQ, MICRO = 8192, 12


def _plan(cli, *extra: str) -> dict:
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100-96gb", "--devices", str(DEVICES), "--tp", str(TP),
                         "--seq", str(SEQ), "--global-batch", str(DP * MICRO), "--micro-batch", str(MICRO),
                         "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def _fsdp2(cli, *extra: str) -> dict:
    return _plan(cli, "--fsdp", "--fsdp-impl", "fsdp2", *extra)


def _rows(plan: dict) -> dict:
    return {c["name"]: c for c in plan["throughput"]["collectives"]}


def _ring(n: int) -> float:
    return (n - 1) / n


def test_the_device_holds_its_tp_shard_and_fsdp_shards_it_over_dp(cli):
    plan = _fsdp2(cli, "--recompute", "full")
    assert plan["parallelism"]["data_parallel"] == DP and plan["parallelism"]["fsdp_impl"] == "fsdp2"
    assert P_DEV == 1_004_802_048
    mem = plan["memory_bytes"]
    # TorchFsdp: no 16-bit weight shard, the fp32 flat shard's gradient (4 B) and Adam's 12 B, over DP ranks
    assert mem["weights"] == 0
    assert mem["gradients"] == 4 * math.ceil(P_DEV / DP)
    assert mem["optimizer_state"] == 12 * math.ceil(P_DEV / DP)
    # two gathered 16-bit blocks, one block's 16-bit gradient and its fp32 copy; the root's 16-bit weights and gradient
    assert mem["gathered_weights"] == (2 * 2 + 2 + 4) * BLOCK + (2 + 2) * ROOT
    assert mem["global_buffer"] == 0  # no Megatron-Core buffer: DTensor gathers into ordinary tensors


def test_the_fsdp_collectives_are_the_ring_share_of_the_tp_shard_over_dp_one_rank_per_node(cli):
    plan = _fsdp2(cli, "--recompute", "full")
    row = _rows(plan)["zero_per_micro_batch_dense"]
    m = plan["parallelism"]["micro_batches"]
    assert row["ranks"] == DP and row["calls"] == m * (3 * L + 1)
    # TP fills the 8-GPU node, so the DP group (stride TP) has one rank per node: the network ring
    assert row["link"] == "network"
    # per micro-batch two bf16 all-gathers and one fp32 reduce-scatter of the device's shard, each moving (DP-1)/DP
    assert row["message_bytes"] * row["calls"] == pytest.approx(m * _ring(DP) * P_DEV * (2 * 2 + 4), rel=1e-12)
    # Megatron-FSDP at the same layout moves the same bytes over the same group and link (its buckets, not 3L + 1)
    megatron = _rows(_plan(cli, "--fsdp", "--recompute", "full"))["zero_per_micro_batch_dense"]
    assert (megatron["ranks"], megatron["link"]) == (DP, "network")
    assert megatron["message_bytes"] * megatron["calls"] == pytest.approx(row["message_bytes"] * row["calls"],
                                                                          rel=1e-12)


def test_the_fsdp2_copies_are_of_the_device_shard(cli):
    plan = _fsdp2(cli, "--recompute", "full")
    gathered = (L - 1) * 2 * BLOCK + BLOCK + ROOT  # blocks 0..L-2 twice, the last block and the root once
    copy_bytes = gathered * (2 + 2) + P_DEV * (2 + 4)  # copy-out read + write; copy-in bf16 read, fp32 written
    hbm = resolve_hardware("h100-96gb").memory.streaming_bandwidth_bytes_per_s()
    th = plan["throughput"]
    m = plan["parallelism"]["micro_batches"]
    assert th["phase_share"]["fsdp2_copies"] * th["step_time_s"] == pytest.approx(m * copy_bytes / hbm, rel=1e-9)


def test_tp_collectives_are_megatrons_sequence_parallel_ones_less_the_backward_regather(cli):
    # per layer and micro-batch, in units of one s·b·h bf16 activation (x (TP-1)/TP per rank), full recompute:
    # Megatron: the two column-parallel inputs gather forward, again in the re-run and again for dW, and reduce-scatter
    # their gradient (4 each); the two row-parallel outputs reduce-scatter forward and in the re-run and gather their
    # gradient (3 each): 14. torchtitan: no gather for dW: 12.
    fsdp2 = _rows(_fsdp2(cli, "--recompute", "full"))["tensor_parallel"]
    megatron = _rows(_plan(cli, "--fsdp", "--recompute", "full"))["tensor_parallel"]
    unit = MICRO * SEQ * H * 2 * _ring(TP)
    assert fsdp2["message_bytes"] == megatron["message_bytes"] == pytest.approx(unit, rel=1e-12)
    assert (megatron["calls"], fsdp2["calls"]) == (L * 14, L * 12)
    assert (fsdp2["ranks"], fsdp2["link"]) == (TP, "nvlink")


def test_the_per_op_policy_reruns_the_gathers_and_takes_the_reduce_scatters_from_its_cache(cli):
    # re-run: both column-parallel gathers (not on the save list), neither row-parallel reduce-scatter (on it):
    # in 2 x (1 + 1 + 1), out 2 x (1 + 1) = 10 per layer
    op = _rows(_fsdp2(cli, "--recompute", "op"))["tensor_parallel"]
    assert op["calls"] == L * 10


def test_async_tp_hides_the_fused_collectives_and_exposes_the_unfused_gradient_reduce_scatters(cli):
    vanilla = _fsdp2(cli, "--recompute", "full", "--no-tp-comm-overlap")
    asynchronous = _fsdp2(cli, "--recompute", "full", "--tp-comm-overlap")
    assert asynchronous["parallelism"]["overlaps"]["tp_comm"] and asynchronous["parallelism"]["tp_overlap_table"] is None
    row = _rows(asynchronous)["tensor_parallel"]
    c = row["time_s"] / row["calls"]  # one collective (they are all the same size)

    def exposed(plan: dict) -> float:
        th = plan["throughput"]
        return th["phase_share"]["tp_comm"] * th["step_time_s"]

    # the raw traffic is the same; each layer still shows its two data-gradient reduce-scatters (a sum of mms feeds
    # them: not fused), and at most what vanilla TP shows
    assert asynchronous["throughput"]["communication_s"]["tp_comm"] == vanilla["throughput"]["communication_s"]["tp_comm"]
    assert exposed(vanilla) == pytest.approx(vanilla["throughput"]["communication_s"]["tp_comm"], rel=1e-12)
    assert 2 * L * c < exposed(asynchronous) < exposed(vanilla)
    # no TransformerEngine userbuffers workspace in the memory
    assert asynchronous["memory_bytes"]["total"] == vanilla["memory_bytes"]["total"]


def test_the_async_tp_table_is_ring_exchange_without_sm_margins():
    from btacalc.model.gpu.tp_overlap import ASYNC_TP_OVERLAPS, ASYNC_TP_UNFUSED

    assert {o.name for o in ASYNC_TP_OVERLAPS} == {"qkv_fprop", "fc1_fprop", "proj_fprop", "fc2_fprop", "proj_dgrad",
                                                   "fc2_dgrad"}
    assert all(o.method == "ring_exchange" and o.num_sm == 0 and not o.set_sm_margin for o in ASYNC_TP_OVERLAPS)
    assert ASYNC_TP_UNFUSED == ("qkv_dgrad", "fc1_dgrad")


@pytest.mark.parametrize("extra, says", [
    (("--fsdp-impl", "fsdp2", "--pp", "2"), "no --pp, --cp or --ep"),
    (("--fsdp-impl", "fsdp2", "--cp", "2"), "no --pp, --cp or --ep"),
    (("--fsdp-impl", "torch"), "FSDP1 (--fsdp-impl torch) no --tp"),
    (("--fsdp-impl", "fsdp2", "--no-sequence-parallel"), "it needs --sequence-parallel"),
    (("--fsdp-impl", "fsdp2", "--loss", "torch_fp32"), "loss-parallel cross-entropy"),
])
def test_what_stays_refused(cli, extra, says):
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--fsdp", "--tp", "2", *extra)
    assert code == 2 and says in err, err
    assert len(err.strip().splitlines()) == 1


def test_tp_comm_overlap_without_tp_stays_refused_under_pytorch_fsdp(cli):
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--fsdp", "--fsdp-impl",
                         "fsdp2", "--tp-comm-overlap")
    assert code == 2 and "TransformerEngine's userbuffers overlap" in err


def test_a_layout_search_times_an_fsdp2_tp_layout_as_its_plan_does(cli):
    # the search evaluates its layouts as arrays (TP among them): the per-device copies take TP > 1 layout by layout
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--seq", "4096", "--global-batch",
                         "64", "--attention", "flash", "--fsdp", "--fsdp-impl", "fsdp2", "--recompute", "op", "--search",
                         "--json")
    assert code == 0, err
    rows = [r for r in json.loads(out)["ranking"] if r["tensor_parallel"] > 1]
    assert rows
    row = rows[0]
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--seq", "4096", "--global-batch",
                         "64", "--micro-batch", str(row["micro_batch"]), "--tp", str(row["tensor_parallel"]),
                         "--attention", "flash", "--fsdp", "--fsdp-impl", "fsdp2", "--recompute", "op", "--json")
    assert code == 0, err
    plan = json.loads(out)
    th = plan["throughput"]
    assert th["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)
    assert th["phase_share"]["fsdp2_copies"] * th["step_time_s"] == pytest.approx(row["time_s"]["fsdp2_copies"],
                                                                                  rel=1e-9)
    assert plan["memory_bytes"]["total"] == row["memory_bytes"]
