"""More MLPerf Training pretraining rows as unseen check runs (task mlperf2; issue 21 item 5 / 22 item 7).

Other submitters' runs of NVIDIA's GPT-3 175B code on H100 (Azure v3.1, Sustainable Metal Cloud v4.0, Oracle v4.1),
NVIDIA's two v3.1 Eos scales not added before, and the FP8 Llama 3.1 8B runs of v5.1 on B200 (University of Florida
at six scales, Oracle at 64 GPUs). The expected numbers are typed from the result logs
(github.com/mlcommons/training_results_v3.1 @ d06288b2, v4.0 @ 6fe95437, v4.1 @ b87b9e39, v5.1 @ 441d65f4:
<submitter>/results/<system>/<benchmark>/result_*.txt), not from btacalc: the MLLOG keys global_batch_size,
gradient_accumulation_steps and max_sequence_length, and per result file the number of block_start..block_stop
intervals after the first (warm-up) block with the sum of their durations (time_ms of block_stop minus that of
block_start) and, in v5.1, the optimizer steps they span (metadata step at block_stop minus at block_start). The layouts
and the gradient-bucket settings are the submissions' config_*.sh / conf files."""

from __future__ import annotations

import pytest

from btacalc.planning.measured import express, load_runs

# GPT-3 175B: id -> (MLPerf version, results folder, epoch_count tokens per block, GBS, GA, GPUs, (TP, PP, VP, MBS),
#   bucket_cap_mb (conf/optim/distributed_fused_adam.yaml L2 default 100 in v3.1; BUCKET_CAP_MB=200 in the v4.x
#   config_common.sh), per result file (blocks after the first, their summed ms))
GPT3 = {
    "gpt3-175b-h100-6144-fp8-mlperf-v31": ("3.1", "NVIDIA/results/eos-dfw_n768_ngc23.09_nemo", 50331648, 3072, 16,
        6144, (4, 8, 12, 1), 100, ((24, 314439), (24, 314846), (24, 314831))),
    "gpt3-175b-h100-10240-fp8-mlperf-v31": ("3.1", "NVIDIA/results/eos-dfw_n1280_ngc23.09_nemo", 52428800, 2560, 8,
        10240, (4, 8, 12, 1), 100, ((22, 209009), (22, 208708), (22, 208800))),
    "gpt3-175b-h100-10752-fp8-mlperf-v31-azure": ("3.1", "Azure+NVIDIA/results/ND_H100_v5_n1344_pytorch", 55050240,
        2688, 8, 10752, (4, 8, 12, 1), 100, ((21, 206022), (21, 205887), (21, 206982))),
    "gpt3-175b-h100-512-fp8-mlperf-v40-smc": ("4.0", "smc/results/64xSMC-H100-SXM-80GB", 50331648, 2048, 64,
        512, (4, 8, 12, 2), 200, ((23, 2971126), (23, 2970602), (23, 2969443))),
    "gpt3-175b-h100-1536-fp8-mlperf-v41-oracle": ("4.1", "Oracle/results/1536xBM.GPU.H100.8", 50331648, 3072, 32,
        1536, (4, 8, 4, 2), 200, ((25, 1044867), (25, 1047407), (24, 1005528))),
    "gpt3-175b-h100-3072-fp8-mlperf-v41-oracle": ("4.1", "Oracle/results/3072xBM.GPU.H100.8", 50331648, 3072, 16,
        3072, (4, 8, 4, 2), 200, ((24, 621027), (25, 646418), (25, 655395))),
}

# Llama 3.1 8B (v5.1): id -> (results folder, GBS, GPUs, (CP, MBS), gradient bucket in parameters as configured,
#   per result file (blocks after the first, optimizer steps they span, their summed ms))
UF = "University-of-Florida/results/hpg.dgxb200x8"
LLAMA8B = {
    "llama-3-8b-b200-8-fp8-current-mlperf-v51-uf": (f"{UF}.n1", 16, 8, (1, 2), 134217728,
        ((12, 9216, 5018541), (12, 9216, 5018771), (12, 9216, 5030938), (12, 9216, 5031980), (12, 9216, 5017608),
         (12, 9216, 5031352), (12, 9216, 5016425), (12, 9216, 5031582), (12, 9216, 5060669), (12, 9216, 5013456))),
    "llama-3-8b-b200-16-fp8-current-mlperf-v51-uf": (f"{UF}.n2", 32, 16, (1, 2), 134217728,
        ((7, 5376, 3076575), (7, 5376, 3085726), (7, 5376, 3098427), (7, 5376, 3102976), (7, 5376, 3105586),
         (7, 5376, 3077388), (7, 5376, 3085423), (7, 5376, 3099845), (7, 5376, 3102419), (7, 5376, 3105294))),
    "llama-3-8b-b200-32-fp8-current-mlperf-v51-uf": (f"{UF}.n4", 16, 32, (2, 1), 134217728,
        ((27, 10368, 1994792), (26, 9984, 1922540), (27, 10368, 2008260), (27, 10368, 1994849), (26, 9984, 1935646),
         (27, 10368, 1994984), (27, 10368, 2007994), (26, 9984, 1935485), (27, 10368, 2013502), (27, 10368, 2007241))),
    "llama-3-8b-b200-64-fp8-current-mlperf-v51-uf": (f"{UF}.n8", 32, 64, (2, 1), 134217728,
        ((13, 4992, 950483), (14, 5376, 1023571), (13, 4992, 950562), (14, 5376, 1024108), (14, 5376, 1024697),
         (14, 5376, 1024162), (13, 4992, 951230), (13, 4992, 954331), (13, 4992, 951187), (13, 4992, 951053))),
    "llama-3-8b-b200-128-fp8-current-mlperf-v51-uf": (f"{UF}.n16", 64, 128, (2, 1), 134217728,
        ((9, 3456, 670893), (8, 3072, 596662), (8, 3072, 596497), (8, 3072, 596251), (8, 3072, 596372),
         (8, 3072, 596306), (9, 3456, 670877), (8, 3072, 604011), (8, 3072, 596396), (8, 3072, 596345))),
    "llama-3-8b-b200-256-fp8-current-mlperf-v51-uf": (f"{UF}.n32", 128, 256, (2, 1), 134217728,
        ((6, 2304, 512923), (6, 2304, 512891), (6, 2304, 512824), (6, 2304, 514409), (6, 2304, 512939),
         (6, 2304, 512900), (6, 2304, 513003), (6, 2304, 547286), (6, 2304, 513013), (6, 2304, 512819))),
    "llama-3-8b-b200-64-fp8-current-mlperf-v51-oracle": ("Oracle/results/8xBM.GPU.B200.8", 32, 64, (2, 1), 768000000,
        ((14, 5376, 1033094), (14, 5376, 1028539), (13, 4992, 953320), (14, 5376, 1027516), (14, 5376, 1026424),
         (14, 5376, 1026903), (14, 5376, 1033156), (13, 4992, 953245), (13, 4992, 952027), (13, 4992, 953798))),
}


def _runs():
    return {r.id: r for r in load_runs()}


def _apex_bucket(bucket_cap_mb: int, dp: int) -> int:
    """Apex DistributedFusedAdam's bucket in parameters (NVIDIA/apex b7a4acc1 distributed_fused_adam.py L731-738):
    2^20 x bucket_cap_mb bytes of bf16 gradients (2 bytes), each rank's shard rounded down to 128 // 2 = 64."""
    bucket = 1024 * 1024 * bucket_cap_mb // 2
    shard = (bucket // dp) // 64 * 64
    return shard * dp


def test_the_apex_buckets_written_out():
    # 2^20 x 100 / 2 = 52,428,800; / 192 = 273,066.67 -> 273,024 (4,266 x 64) -> x 192
    assert _apex_bucket(100, 192) == 273024 * 192 == 52420608
    # / 320 = 163,840 = 2,560 x 64 exactly: the whole 52,428,800
    assert _apex_bucket(100, 320) == 52428800
    # 2^20 x 200 / 2 = 104,857,600; / 48 = 2,184,533.3 -> 2,184,512 (34,133 x 64); / 96 = 1,092,266.7 -> 1,092,224
    assert _apex_bucket(200, 48) == 2184512 * 48 == 104856576
    assert _apex_bucket(200, 96) == 1092224 * 96 == 104853504
    assert _apex_bucket(200, 16) == 104857600


def test_the_rows_are_checks_and_nothing_held_back():
    runs = _runs()
    assert set(GPT3) | set(LLAMA8B) <= set(runs)
    for run_id in [*GPT3, *LLAMA8B]:
        run = runs[run_id]
        assert run.role == "check" and "mlcommons/training_results_v" in run.source
        assert run.hw in ("h100", "b200")
    mlperf = [r for r in runs.values() if "mlcommons/training_results" in r.source]
    # Llama 3.1 405B: its held-back layouts are H100 TP8 PP8 VP8 CP2 and GB200 TP4 PP8 VP8 CP2; task runs37 ships
    # the v5.0 H200 rows (another device), no 405B row on H100 or GB200
    assert not [r.id for r in mlperf if r.hw in ("b300", "gb300")
                or (r.model == "llama-3.1-405b" and r.hw in ("h100", "gb200"))]


@pytest.mark.parametrize("run_id", sorted(GPT3))
def test_the_gpt3_throughput_is_the_logged_blocks(run_id):
    version, folder, tokens, gbs, ga, gpus, (tp, pp, vp, mbs), bucket_mb, files = GPT3[run_id]
    run = _runs()[run_id]
    steps_per_block = tokens // (gbs * 2048)
    assert steps_per_block * gbs * 2048 == tokens  # a block is a whole number of steps
    step = sum(ms for _, ms in files) / 1000 / (sum(n for n, _ in files) * steps_per_block)
    assert f"training_results_v{version}@" in run.source and folder in run.source
    assert (run.global_batch, run.seq, run.devices, run.precision) == (gbs, 2048, gpus, "fp8")
    assert run.measured.step_time_s == pytest.approx(step, abs=5e-5)
    assert run.measured.tokens_per_s_per_device == pytest.approx(gbs * 2048 / step / gpus, abs=0.05)


@pytest.mark.parametrize("run_id", sorted(GPT3))
def test_the_gpt3_layout_and_buckets_are_the_config(run_id):
    version, _, _, gbs, ga, gpus, (tp, pp, vp, mbs), bucket_mb, _ = GPT3[run_id]
    run = _runs()[run_id].with_recipe()
    assert (run.tp, run.pp, run.vp, run.cp, run.micro_batch) == (tp, pp, vp, 1, mbs)
    dp = gpus // (tp * pp)
    assert tp * pp * dp == gpus
    assert dp * mbs * ga == gbs  # the logged accumulation
    assert 96 % (pp * vp) == 0
    request, reason = express(_runs()[run_id])
    assert reason == "" and request is not None
    assert request.ddp_bucket_params == _apex_bucket(bucket_mb, dp)
    assert request.fp8_param_gather is (version != "3.1")  # FP8_PARAMS=True from v4.0 on
    assert request.cuda_graph_scope == ()  # no LAYER_CUDA_GRAPH in these configs


@pytest.mark.parametrize("run_id", sorted(LLAMA8B))
def test_the_llama_8b_throughput_is_the_logged_blocks(run_id):
    folder, gbs, gpus, (cp, mbs), _, files = LLAMA8B[run_id]
    run = _runs()[run_id]
    step = sum(ms for _, _, ms in files) / 1000 / sum(steps for _, steps, _ in files)
    assert folder in run.source and "training_results_v5.1@" in run.source
    assert (run.global_batch, run.seq, run.devices, run.precision, run.hw) == (gbs, 8192, gpus, "fp8-current", "b200")
    assert run.measured.step_time_s == pytest.approx(step, abs=5e-6)
    assert run.measured.tokens_per_s_per_device == pytest.approx(gbs * 8192 / step / gpus, abs=0.05)


@pytest.mark.parametrize("run_id", sorted(LLAMA8B))
def test_the_llama_8b_layout_and_recipe_are_the_config(run_id):
    _, gbs, gpus, (cp, mbs), bucket, _ = LLAMA8B[run_id]
    run = _runs()[run_id]
    assert (run.tp, run.pp, run.cp, run.micro_batch, run.sequence_parallel) == (1, 1, cp, mbs, False)
    assert 1 * cp * (gbs // mbs) == gpus  # TP 1 x CP x DP fills the GPUs, GA 1 (the log's 1.0)
    request, reason = express(run)
    assert reason == "" and request is not None
    assert request.ddp_bucket_params == bucket  # BUCKET_SIZE=768000000 (Oracle) or custom.yaml's 134217728 (UF)
    assert request.fp8_param_gather is True  # config_common.sh FP8_PARAM_GATHER=True
    assert request.cuda_graph_scope == ()  # the full-iteration graph is not expressible: stated in the notes
    assert request.loss == "te_fused"  # CE_FUSION_IMPL=te with cross_entropy_loss_fusion True
