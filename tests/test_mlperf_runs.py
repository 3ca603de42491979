"""MLPerf Training's NVIDIA GPT-3 175B submissions as measured check runs (task mlperf; issue 21 item 5 / 22 item 7).

The expected numbers are typed from the result logs (github.com/mlcommons/training_results_v3.1 @ d06288b2,
v4.0 @ 6fe95437, v4.1 @ b87b9e39: NVIDIA/results/<system>/gpt3/result_{0,1,2}.txt), not from btacalc: the MLLOG
keys global_batch_size, gradient_accumulation_steps and max_sequence_length, and per result file the number of
block_start..block_stop intervals after the first (warm-up) block with the sum of their durations in ms
(time_ms of block_stop minus time_ms of block_start). Each block trains epoch_count tokens; evaluation lies
outside the blocks. The layouts are the submissions' config_*.sh (TP, PP, INTERLEAVED_PIPELINE, MICRO_BATCH_SIZE)."""

from __future__ import annotations

import pytest

from btacalc.planning.measured import express, load_runs

# id -> (MLPerf version, system, epoch_count tokens per block, GBS, GA, seq, GPUs, (TP, PP, VP, MBS),
#        per result file (blocks after the first, their summed ms))
LOGGED = {
    "gpt3-175b-h100-256-fp8-mlperf-v41": ("4.1", "eos_n32_ngc24.09_nemo", 50331648, 2048, 128, 2048, 256, (4, 8, 6, 2),
        ((24, 5301302), (23, 5080461), (23, 5094916))),
    "gpt3-175b-h100-512-fp8-mlperf-v31": ("3.1", "eos_n64_ngc23.09_nemo", 50331648, 2048, 128, 2048, 512, (4, 8, 12, 1),
        ((23, 3054211), (23, 3060380), (23, 3056895))),
    "gpt3-175b-h100-512-fp8-mlperf-v40": ("4.0", "eos_n64_ngc24.04_nemo", 51904512, 2304, 72, 2048, 512, (4, 8, 4, 2),
        ((23, 2758285), (22, 2657871), (22, 2657617))),
    "gpt3-175b-h100-512-fp8-mlperf-v41": ("4.1", "eos_n64_ngc24.09_nemo", 50331648, 2048, 64, 2048, 512, (4, 8, 6, 2),
        ((23, 2631925), (24, 2793908), (23, 2633208))),
    "gpt3-175b-h100-768-fp8-mlperf-v31": ("3.1", "eos_n96_ngc23.09_nemo", 50331648, 3072, 128, 2048, 768, (4, 8, 12, 1),
        ((24, 2132795), (24, 2132113), (24, 2130580))),
    "gpt3-175b-h100-4096-fp8-mlperf-v31": ("3.1", "eos-dfw_n512_ngc23.09_nemo", 50331648, 2048, 16, 2048, 4096, (4, 8, 12, 1),
        ((23, 449735), (23, 449688), (23, 450650))),
    "gpt3-175b-h100-8192-fp8-mlperf-v31": ("3.1", "eos-dfw_n1024_ngc23.09_nemo", 50331648, 4096, 16, 2048, 8192, (4, 8, 12, 1),
        ((25, 246618), (26, 256226), (25, 246463))),
    "gpt3-175b-h100-10752-fp8-mlperf-v31": ("3.1", "eos-dfw_n1344_ngc23.09_nemo", 55050240, 2688, 8, 2048, 10752, (4, 8, 12, 1),
        ((21, 200610), (21, 200431), (21, 200480))),
    "gpt3-175b-h100-10752-fp8-mlperf-v40": ("4.0", "eos-dfw_n1344_ngc24.04_nemo", 55050240, 2688, 6, 2048, 10752, (4, 6, 8, 1),
        ((21, 193344), (21, 193281), (21, 193361))),
    "gpt3-175b-h100-11616-fp8-mlperf-v40": ("4.0", "eos-dfw_n1452_ngc24.04_nemo", 53526528, 2904, 6, 2048, 11616, (4, 6, 8, 1),
        ((22, 182590), (22, 182440), (22, 182428))),
    "gpt3-175b-b200-64-fp8-mlperf-v41": ("4.1", "b200_n8_preview_nemo", 50331648, 2048, 512, 2048, 64, (4, 8, 6, 2),
        ((23, 9953950), (23, 10006760), (23, 10015425))),
}


def _runs():
    return {r.id: r for r in load_runs()}


def _step_s(run_id: str) -> float:
    """Seconds per optimizer step: the blocks' summed time over the steps they trained."""
    _, _, tokens, gbs, _, seq, _, _, files = LOGGED[run_id]
    steps_per_block = tokens // (gbs * seq)
    assert steps_per_block * gbs * seq == tokens  # a block is a whole number of steps
    blocks = sum(n for n, _ in files)
    return sum(ms for _, ms in files) / 1000 / (blocks * steps_per_block)


def test_the_mlperf_rows_are_checks_from_the_results_repositories():
    runs = _runs()
    assert set(LOGGED) <= set(runs)
    for run_id, (version, system, *_rest) in LOGGED.items():
        run = runs[run_id]
        assert run.role == "check"  # never fitted
        assert f"mlcommons/training_results_v{version}@" in run.source and system in run.source
        assert run.recipe is not None and f"training_results_v{version}@" in run.recipe.source
    # held back (reference/HELD-BACK.md): no B300 / GB300 run, no Llama 3.1 405B from these repositories
    mlperf = [r for r in runs.values() if "mlcommons/training_results" in r.source]
    # Llama 3.1 405B: its held-back layouts are H100 TP8 PP8 VP8 CP2 and GB200 TP4 PP8 VP8 CP2; task runs37 ships
    # the v5.0 H200 rows (another device), no 405B row on H100 or GB200
    assert not [r.id for r in mlperf if r.hw in ("b300", "gb300")
                or (r.model == "llama-3.1-405b" and r.hw in ("h100", "gb200"))]


@pytest.mark.parametrize("run_id", sorted(LOGGED))
def test_the_throughput_is_the_logged_blocks(run_id):
    _, _, _, gbs, _, seq, gpus, _, _ = LOGGED[run_id]
    run = _runs()[run_id]
    step = _step_s(run_id)
    assert (run.global_batch, run.seq, run.devices, run.precision) == (gbs, seq, gpus, "fp8")
    assert run.measured.step_time_s == pytest.approx(step, abs=5e-5)
    assert run.measured.tokens_per_s_per_device == pytest.approx(gbs * seq / step / gpus, abs=0.05)


@pytest.mark.parametrize("run_id", sorted(LOGGED))
def test_the_layout_product_is_the_gpu_count(run_id):
    _, _, _, gbs, ga, _, gpus, (tp, pp, vp, mbs), _ = LOGGED[run_id]
    run = _runs()[run_id].with_recipe()
    assert (run.tp, run.pp, run.vp, run.cp, run.micro_batch) == (tp, pp, vp, 1, mbs)
    dp = gpus // (tp * pp)
    assert tp * pp * dp == gpus  # TP x PP x DP fills the GPUs (CP 1, no EP)
    assert dp * mbs * ga == gbs  # the logged accumulation: DP x MBS x GA = GBS
    assert 96 % (pp * vp) == 0  # GPT-3 175B's 96 layers split into PP x VP chunks


@pytest.mark.parametrize("run_id", sorted(LOGGED))
def test_the_recipe_is_planned_as_the_config_ran_it(run_id):
    version, system = LOGGED[run_id][:2]
    request, reason = express(_runs()[run_id])
    assert reason == "" and request is not None
    # FP8_PARAMS=True from v4.0 on (config_common.sh); v3.1's custom.yaml has no fp8_params: FP8 parameters off
    assert request.fp8_param_gather is (version != "3.1")
    # LAYER_CUDA_GRAPH=1 only in the _cg configs (the 1,344 / 1,452-node H100 and the B200 submissions)
    graphed = system.startswith(("eos-dfw_n1344_ngc24", "eos-dfw_n1452", "b200"))
    assert request.cuda_graph_scope == (("attn", "mlp") if graphed else ())


# Llama 3.1 8B on GB200 (training_results_v5.1 @ 441d65f4, NVIDIA/results/<system>/llama31_8b/result_0..9.txt): the v5.1
# logs carry the optimizer step at each block_start / block_stop (metadata step) instead of epoch_count.
# id -> (system, GBS, seq, GPUs, (TP, CP, sequence parallel), per result file (blocks after the first, their steps, ms))
LOGGED_8B = {
    "llama-3-8b-gb200-72-fp8-current-mlperf-v51": ("tyche_ngpu72_ngc25.09_nemo", 36, 8192, 72, (1, 2, False),
        ((13, 4446, 753289), (14, 4788, 821449), (13, 4446, 765449), (14, 4788, 830311),
         (13, 4446, 762765), (14, 4788, 828843), (14, 4788, 820220), (14, 4788, 811385),
         (14, 4788, 819906), (14, 4788, 833582))),
    "llama-3-8b-gb200-512-fp8-current-mlperf-v51": ("tyche_ngpu512_ngc25.09_nemo", 64, 8192, 512, (2, 4, True),
        ((17, 3264, 294508), (19, 3648, 329301), (17, 3264, 294487), (17, 3264, 293700),
         (18, 3456, 311848), (15, 2880, 259216), (17, 3264, 294278), (18, 3456, 311162),
         (16, 3072, 276741), (18, 3456, 311744))),
}


@pytest.mark.parametrize("run_id", sorted(LOGGED_8B))
def test_the_llama_8b_throughput_is_the_logged_blocks(run_id):
    system, gbs, seq, gpus, (tp, cp, sp), files = LOGGED_8B[run_id]
    run = _runs()[run_id]
    step = sum(ms for _, _, ms in files) / 1000 / sum(steps for _, steps, _ in files)
    assert system in run.source and run.role == "check" and run.hw == "gb200"
    assert (run.global_batch, run.seq, run.devices, run.precision) == (gbs, seq, gpus, "fp8-current")
    assert run.measured.step_time_s == pytest.approx(step, abs=5e-6)
    assert run.measured.tokens_per_s_per_device == pytest.approx(gbs * seq / step / gpus, abs=0.05)
    # TP x CP x DP fills the GPUs; GA 1 and MBS 1 (the log's gradient_accumulation_steps 1.0): DP = GBS
    assert (run.tp, run.pp, run.cp, run.micro_batch, run.sequence_parallel) == (tp, 1, cp, 1, sp)
    assert tp * cp * gbs == gpus


@pytest.mark.parametrize("run_id", sorted(LOGGED_8B))
def test_the_llama_8b_recipe_is_planned_as_the_config_ran_it(run_id):
    request, reason = express(_runs()[run_id])
    assert reason == "" and request is not None
    assert request.fp8_param_gather is True  # config_common.sh FP8_PARAM_GATHER=True
    assert request.cuda_graph_scope == ()  # the run's full-iteration graph is not expressible: stated in its notes
    assert request.loss == "te_fused"  # CE_FUSION_IMPL=te with cross_entropy_loss_fusion True
