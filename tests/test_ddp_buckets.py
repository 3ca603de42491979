"""Megatron's gradient buckets (`--ddp-bucket-size`) and the job's NVLink domains (`gpus_per_node`), task buckets.

Megatron-LM @ d98e8a64 megatron/training/training.py L2179-2194 `resolve_ddp_bucket_size`: an explicit
--ddp-bucket-size as given, else max(40,000,000, 1,000,000 x |DP x CP group|) (called with pg_collection.dp_cp,
L2497-2502), and no buckets (one call) without --overlap-grad-reduce. Each bucket is one reduce-scatter (and with
the distributed optimizer one all-gather), each paying NCCL's per-call latency (model/gpu/nccl.py)."""

from __future__ import annotations

import json
import math

import pytest

from btacalc.config.execution import Layout, Overlaps, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.bridge_codec import from_bridge, to_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import resolve_model
from btacalc.model.gpu import nccl
from btacalc.model.gpu.collectives import _ring_link, gradient_buckets, ring_time
from btacalc.model.problem import make_problem
from btacalc.planning.measured import express, load_runs

P = 4_015_000_000  # a parameter count to bucket (about Llama 3 8B over TP 2)


def _problem(dp: int, cp: int = 1, bucket: int | None = None, overlap: bool = True, per_node: int = 8):
    layout = Layout(devices=dp * cp, devices_per_node=per_node, context_parallel=cp, zero_stage=1,
                    ddp_bucket_params=bucket, overlap=Overlaps(grad_reduce=overlap, param_gather=overlap))
    return make_problem(resolve_model("llama-3-8b"), resolve_hardware("h100"), RunOptions(attention="flash"), layout)


@pytest.mark.parametrize("dp, cp, bucket", [(8, 1, 40_000_000), (64, 1, 64_000_000), (64, 4, 256_000_000),
                                            (16, 2, 40_000_000)])
def test_the_default_bucket_grows_with_the_dp_x_cp_group(dp, cp, bucket):
    assert gradient_buckets(_problem(dp, cp), P) == math.ceil(P / bucket)


def test_a_given_bucket_size_sets_the_calls_and_no_overlap_is_one_call():
    assert gradient_buckets(_problem(64, 4, bucket=768_000_000), P) == math.ceil(P / 768_000_000) == 6
    assert gradient_buckets(_problem(64, 4, bucket=768_000_000, overlap=False), P) == 1
    assert gradient_buckets(_problem(8, bucket=10**12), P) == 1


def test_fewer_buckets_pay_fewer_call_latencies():
    # the same 80 GB over 64 ranks across 8 nodes in 63 calls and in 6: NCCL picks the same ring protocol for both
    # sizes, each call costs latency + bytes / (bandwidth x the protocol's share), so the bandwidth terms are equal
    # and the difference is 57 of that protocol's call latencies (nccl.py: base + (steps - inter) x intra + inter x
    # net, scaled to the profile's measured latency)
    p = _problem(64, per_node=8)
    many, few = (ring_time(p, 80e9, 64, 1, calls=c, kind=1) for c in (63, 6))
    rate, _, nodes, scale = _ring_link(p, 64, 1)
    group = nccl.Group(64, nodes, 1, rate, scale)
    assert nodes == 8
    small, large = nccl.choose(group, 80e9 / 63), nccl.choose(group, 80e9 / 6)
    assert (small.algorithm, small.protocol) == (large.algorithm, large.protocol) and small.algorithm == "ring"
    p_index = nccl.PROTOCOLS.index(small.protocol)
    assert many - few == pytest.approx(57 * nccl.ring_call_latency_s(group, 80e9 / 63, p_index), rel=1e-9)
    assert many > few > ring_time(p, 80e9, 64, 1, calls=1, kind=1)


def test_emit_and_read_back(cli):
    base = ("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "64", "--tp", "2", "--seq", "8192",
            "--global-batch", "64", "--overlap-grad-reduce")  # hostile31: buckets need the overlapped reduce
    code, out, _ = cli(*base, "--ddp-bucket-size", "500000000", "--emit", "megatron")
    assert code == 0 and "--ddp-bucket-size 500000000" in out
    assert import_megatron(out, "emitted.sh").request.ddp_bucket_params == 500_000_000
    code, out, _ = cli(*base, "--ddp-bucket-size", "500000000", "--json")
    assert json.loads(out)["parallelism"]["ddp_bucket_params"] == 500_000_000
    assert to_bridge({"ddp_bucket_size": 7}) == {"ddp.bucket_size": 7}
    assert from_bridge({"ddp.bucket_size": 7})[0] == {"ddp_bucket_size": 7}


def test_mlperf_8b_rows_carry_their_configs_buckets_and_segments():
    runs = {r.id: r for r in load_runs()}
    big = runs["llama-3-8b-gb200-512-fp8-current-mlperf-v51"]
    small = runs["llama-3-8b-gb200-72-fp8-current-mlperf-v51"]
    # config_common_8b.sh L19 BUCKET_SIZE=768000000; config_GB200_128x4x1xtp2pp1cp4_8b.sh SEGMENT=16 x DGXNGPU=4
    request, _ = express(big, "gpu")
    assert request is not None and (request.ddp_bucket_params, request.devices_per_node) == (768_000_000, 16 * 4)
    request, _ = express(small, "gpu")  # SEGMENT=18 x 4 = 72: the profile's whole rack
    assert request is not None and request.ddp_bucket_params == 768_000_000 and request.devices_per_node is None


def test_a_measured_gb200_launch_of_one_tray_per_node_runs_in_the_rack(cli):
    # torchrun starts a GB200 host's 4 GPUs per node (gb200.toml system.devices_per_host); the NVLink domain is the
    # NVL72 rack, as plan --from-megatron --hw gb200 reads it, also for a measured run given as megatron_args
    from btacalc.planning.measured import MeasuredRun

    code, launch, _ = cli("plan", "--model", "llama-3-8b", "--hw", "gb200", "--devices", "128", "--tp", "2",
                          "--seq", "4096", "--global-batch", "256", "--emit", "megatron")
    assert code in (0, 1) and "--nproc_per_node 4 --nnodes 32" in launch
    assert import_megatron(launch, "emitted.sh").request.devices_per_node == 4  # the launch alone: its hosts
    run = MeasuredRun.model_validate({"id": "r", "source": "test", "model": "llama-3-8b", "hw": "gb200",
                                      "devices": 128, "precision": "bf16", "seq": 4096, "global_batch": 256,
                                      "measured": {"tokens_per_s_per_device": 1000.0}, "role": "check",
                                      "megatron_args": launch})
    request, reason = express(run, "gpu")
    assert request is not None and request.devices_per_node is None, reason  # None: the profile's 72
