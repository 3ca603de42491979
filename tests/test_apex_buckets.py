"""The MLPerf GPT-3 175B rows' optimizer as it ran: Apex DistributedFusedAdam's buckets (task apexdo, issue 21).

Apex apex/contrib/optimizers/distributed_fused_adam.py (NVIDIA/apex@b7a4acc1 L731-738; the same lines at 5b04afcf
L621-626 and b496d85f L698-703): dtype_size = bytes of grad_sync_dtype; alignment = 128 // dtype_size;
bucket_size = 1024 x 1024 x bucket_cap_mb / dtype_size; shard_size = int(bucket_size / distributed_size) rounded
down to the alignment (at least one alignment); each bucket holds shard_size x distributed_size parameters, filled
in order, parameters split across bucket ends. The configs: grad_sync_dtype bf16 (conf/optim/
distributed_fused_adam.yaml), bucket_cap_mb from BUCKET_CAP_MB (yaml default 100; v4.0 config_common.sh L69 and
v4.1 config_common.sh L61 export 200; v4.1 config_DGXH100_32x8x256x4x8_mbs2.sh L43 exports 125). NeMo passes the
data-parallel group as process_group and sets no distributed / redundant sub-group, so distributed_size = DP."""

from __future__ import annotations

import math

import pytest

from btacalc.config.execution import Layout, Overlaps, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.model.gpu.collectives import gradient_buckets
from btacalc.model.problem import make_problem
from btacalc.planning.measured import device_family, express, load_runs
from btacalc.planning.plan import make_plan

BF16_BYTES = 2
H, VOCAB = 12288, 51200  # GPT-3 175B (Brown et al. 2020, Table 2.1: d_model 12288, 96 layers) and the preset's vocabulary

# row: (bucket_cap_mb from its config, DP = devices / (TP x PP), layers per pipeline stage = 96 / PP)
ROWS = {
    "gpt3-175b-h100-256-fp8-mlperf-v41": (125, 256 // 32, 12),
    "gpt3-175b-h100-512-fp8-mlperf-v31": (100, 512 // 32, 12),
    "gpt3-175b-h100-512-fp8-mlperf-v40": (200, 512 // 32, 12),
    "gpt3-175b-h100-512-fp8-mlperf-v41": (200, 512 // 32, 12),
    "gpt3-175b-h100-768-fp8-mlperf-v31": (100, 768 // 32, 12),
    "gpt3-175b-h100-4096-fp8-mlperf-v31": (100, 4096 // 32, 12),
    "gpt3-175b-h100-8192-fp8-mlperf-v31": (100, 8192 // 32, 12),
    "gpt3-175b-h100-10752-fp8-mlperf-v31": (100, 10752 // 32, 12),
    "gpt3-175b-h100-10752-fp8-mlperf-v40": (200, 10752 // 24, 16),
    "gpt3-175b-h100-11616-fp8-mlperf-v40": (200, 11616 // 24, 16),
    "gpt3-175b-b200-64-fp8-mlperf-v41": (200, 64 // 32, 12),
}

# each row's parameters per bucket, written out: 2^20 x cap / 2 bytes, then the per-rank shard rounded down to 64
BUCKETS = {
    "gpt3-175b-h100-256-fp8-mlperf-v41": 65_536_000,  # 125 x 2^19 = 65,536,000 = 8 x 8,192,000 (a multiple of 64)
    "gpt3-175b-h100-512-fp8-mlperf-v31": 52_428_800,  # 100 x 2^19 / 16 = 3,276,800 = 64 x 51,200
    "gpt3-175b-h100-512-fp8-mlperf-v40": 104_857_600,  # 200 x 2^19 = 104,857,600 / 16 = 6,553,600 = 64 x 102,400
    "gpt3-175b-h100-512-fp8-mlperf-v41": 104_857_600,
    "gpt3-175b-h100-768-fp8-mlperf-v31": 52_428_288,  # 52,428,800 / 24 = 2,184,533.3 -> 2,184,533 -> 64 x 34,133 = 2,184,512
    "gpt3-175b-h100-4096-fp8-mlperf-v31": 52_428_800,  # / 128 = 409,600 = 64 x 6,400
    "gpt3-175b-h100-8192-fp8-mlperf-v31": 52_428_800,  # / 256 = 204,800 = 64 x 3,200
    "gpt3-175b-h100-10752-fp8-mlperf-v31": 52_426_752,  # / 336 = 156,038.1 -> 64 x 2,438 = 156,032; x 336
    "gpt3-175b-h100-10752-fp8-mlperf-v40": 104_853_504,  # 104,857,600 / 448 = 234,057.1 -> 64 x 3,657 = 234,048; x 448
    "gpt3-175b-h100-11616-fp8-mlperf-v40": 104_853_760,  # / 484 = 216,648.8 -> 64 x 3,385 = 216,640; x 484
    "gpt3-175b-b200-64-fp8-mlperf-v41": 104_857_600,  # / 2 = 52,428,800 = 64 x 819,200
}


def apex_bucket(cap_mb: int, distributed_size: int, grad_bytes: int = BF16_BYTES) -> int:
    alignment = 128 // grad_bytes
    shard = int(1024 * 1024 * cap_mb / grad_bytes / distributed_size)
    return max(shard // alignment * alignment, alignment) * distributed_size


@pytest.mark.parametrize("rid", sorted(ROWS))
def test_each_row_carries_apex_bucket_of_its_config(rid):
    cap, dp, _ = ROWS[rid]
    assert apex_bucket(cap, dp) == BUCKETS[rid]
    run = {r.id: r for r in load_runs()}[rid]
    assert run.devices // (run.tp * run.pp) == dp
    request, _ = express(run, "gpu")
    assert request is not None and request.ddp_bucket_params == BUCKETS[rid]
    assert request.overlaps.grad_reduce and request.overlaps.param_gather  # overlap_grad_sync / overlap_param_sync True


@pytest.mark.parametrize("rid, calls", [
    # a first stage: layers x 12 h^2 / TP (QKV 3h^2, projection h^2, MLP 8h^2) + the word embedding V h / TP,
    # 12 layers: 5,435,817,984 + 157,286,400 = 5,593,104,384; 16 layers: 7,247,757,312 + 157,286,400 = 7,405,043,712
    ("gpt3-175b-h100-10752-fp8-mlperf-v31", 107),  # 5,593,104,384 / 52,426,752 = 106.7
    ("gpt3-175b-h100-8192-fp8-mlperf-v31", 107),  # / 52,428,800 = 106.7
    ("gpt3-175b-h100-256-fp8-mlperf-v41", 86),  # / 65,536,000 = 85.3
    ("gpt3-175b-h100-512-fp8-mlperf-v41", 54),  # / 104,857,600 = 53.3
    ("gpt3-175b-h100-10752-fp8-mlperf-v40", 71),  # 7,405,043,712 / 104,853,504 = 70.6
])
def test_bucket_count_per_step_from_cap_and_stage_params(rid, calls):
    cap, dp, layers = ROWS[rid]
    stage = layers * 12 * H * H // 4 + VOCAB * H // 4
    assert math.ceil(stage / apex_bucket(cap, dp)) == calls
    run = {r.id: r for r in load_runs()}[rid]
    request, _ = express(run, "gpu")
    assert request is not None
    layout = Layout(devices=run.devices, tensor_parallel=run.tp, pipeline_parallel=run.pp, zero_stage=1,
                    ddp_bucket_params=request.ddp_bucket_params, overlap=Overlaps(grad_reduce=True, param_gather=True))
    problem = make_problem(run.model_spec(), resolve_hardware(run.hw), RunOptions(attention="flash"), layout)
    assert gradient_buckets(problem, stage) == calls


def test_the_widest_rows_pay_apex_buckets_not_megatron_default():
    # Megatron's default at DP 336 is max(40M, 1M x 336) = 336M parameters: ceil(5,593,104,384 / 336M) = 17 calls each
    # way; Apex's 52,426,752-parameter buckets give 107: 90 more reduce-scatters and 90 more all-gathers per step
    run = {r.id: r for r in load_runs()}["gpt3-175b-h100-10752-fp8-mlperf-v31"]
    profile = resolve_hardware(run.hw)
    request, _ = express(run, device_family(profile))
    report = make_plan(run.model_spec(), profile, request)
    calls = {c["name"]: c["calls"] for c in report.throughput.collectives}
    assert calls["gradient_reduce_dense"] == calls["param_gather_dense"] == 107
    assert math.ceil(5_593_104_384 / 336_000_000) == 17
