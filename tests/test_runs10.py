"""runs10: more public measured runs where the shipped set is thin (H200, B200), from Google Cloud's gpu-recipes
(github.com/AI-Hypercomputer/gpu-recipes): A3 Ultra (H200) and A4 (B200) NeMo recipes whose READMEs print a logged
DLLogger step, and the full training logs of an unmerged pull request (refs/pull/13) on A4.

The expected numbers are typed from the sources, not from btacalc: each README's `train_step_timing in s`, `step`
and `consumed_samples`, the ten logged step times of each pull-request log (steps 10-19), and the layout of the
NeMo config each run launched."""

from __future__ import annotations

import pytest

from btacalc.planning.measured import load_runs
from support import planned_as_it_ran

# id -> (commit, logged step s, logged step index, consumed_samples, GBS, seq, GPUs, (TP, PP, VP, CP, EP), layers)
README_STEPS = {
    # training/a3ultra/llama-3.1-405b/nemo-pretraining-gke/README.md L215-232 @ 1a3020bb
    "llama-3.1-405b-h200-576-fp8-gpurecipes-a3u": ("1a3020bb30db472ce7b0169c34f42150402e58af", 92.28738164901733, 16,
                                                   34272, 2016, 8192, 576, (8, 9, 14, 1, None), 126),
    # training/a4/llama3-1-70b/nemo-pretraining-gke/README.md L235-252 @ 0211dc17
    "llama-3-70b-b200-256-fp8-gpurecipes-a4": ("0211dc1735cd274b72d2e73ac49f12338ef5312a", 19.954481744766234, 11,
                                               24576, 2048, 8192, 256, (2, 4, 20, 1, None), 80),
    # training/a4/llama3-1-405b/nemo-pretraining-gke/README.md L233-249 @ 2850f84b
    "llama-3.1-405b-b200-224-fp8-gpurecipes-a4": ("2850f84bb13bd15105d433cf8727607a7955422e", 118.18969259262084, 12,
                                                  26208, 2016, 8192, 224, (4, 14, 9, 2, None), 126),
}

PR13 = "6cff69e4352b45ec467ed26bf3633e6632e68932"
# the DLL lines of steps 10-19 ('train_step_timing in s'), training/a4/custom/qwen3-30b/logs/*.log @ PR13
PR13_STEPS = {
    16: (3.9267263889312742, 3.930397367477417, 3.932631587982178, 3.931751012802124, 3.9308070659637453,
         3.932813358306885, 3.9324089527130126, 3.9313673973083496, 3.929069089889526, 3.929321765899658),
    32: (2.0198747634887697, 2.0227028846740724, 2.021345043182373, 2.025026273727417, 2.0294228553771974,
         2.0265353202819822, 2.028033447265625, 2.029566526412964, 2.0266551971435547, 2.022152042388916),
}
# training/a4/custom/llama3-70b/logs/llama3-70b-64gpu-sq1-tp2-pp4-cp2-vp5-gbs128-mbs1-fp8-full-logs L1072-1081 @ PR13
PR13_70B_STEPS = (4.710281705856323, 4.708861398696899, 4.703598260879517, 4.707475328445435, 4.705449724197388,
                  4.697444152832031, 4.695724296569824, 4.691018390655517, 4.6837263107299805, 4.678887367248535)
PR13_70B = "llama-3-70b-b200-64-fp8-gpurecipes-a4-pr13"
NEW = sorted(README_STEPS) + [f"qwen3-30b-a3b-b200-{n}-fp8-gpurecipes-a4-pr13" for n in PR13_STEPS] + [PR13_70B]


def _runs():
    return {r.id: r for r in load_runs()}


def test_the_new_rows_are_sourced_checks_with_a_software_date():
    runs = _runs()
    for run_id in NEW:
        run = runs[run_id]
        assert run.role == "check"  # nothing fitted
        assert "AI-Hypercomputer/gpu-recipes" in run.source and run.recipe is not None
        assert run.software_date and run.software_date_source and run.release
    for run_id, (commit, *_rest) in README_STEPS.items():
        assert commit in runs[run_id].source and commit in runs[run_id].recipe.source


@pytest.mark.parametrize("run_id", sorted(README_STEPS))
def test_a_readme_row_is_its_logged_step(run_id):
    _, step, index, consumed, gbs, seq, gpus, (tp, pp, vp, cp, ep), layers = README_STEPS[run_id]
    run = _runs()[run_id]
    # NeMo counts consumed_samples after the step: step index i has consumed (i + 1) x GBS sequences
    assert consumed == (index + 1) * gbs
    assert (run.global_batch, run.seq, run.devices, run.precision) == (gbs, seq, gpus, "fp8")
    assert (run.tp, run.pp, run.vp, run.cp, run.ep) == (tp, pp, vp, cp, ep)
    assert gpus % (tp * pp * cp) == 0 and gbs % (gpus // (tp * pp * cp)) == 0  # whole data-parallel replicas
    assert layers == pp * vp  # one layer per virtual pipeline stage in all three configs
    assert run.measured.step_time_s == pytest.approx(step, abs=5e-5)
    assert run.measured.tokens_per_s_per_device == pytest.approx(gbs * seq / step / gpus, abs=0.01)


@pytest.mark.parametrize("gpus", sorted(PR13_STEPS))
def test_a_pull_request_row_is_the_mean_of_its_logged_steps(gpus):
    run = _runs()[f"qwen3-30b-a3b-b200-{gpus}-fp8-gpurecipes-a4-pr13"]
    steps = PR13_STEPS[gpus]
    mean = sum(steps) / len(steps)
    assert (run.global_batch, run.seq, run.devices, run.micro_batch) == (256, 4096, gpus, 4)
    assert (run.tp, run.pp, run.cp, run.ep) == (1, 1, 1, 8)
    assert run.measured.step_time_s == pytest.approx(mean, abs=5e-6)
    assert run.measured.tokens_per_s_per_device == pytest.approx(256 * 4096 / mean / gpus, abs=0.01)
    assert PR13 in run.source and PR13 in run.recipe.source
    assert run.known_gap  # outside the +-25% band: the mechanism checked is stated


def test_the_pull_request_llama_70b_row_is_the_mean_of_its_logged_steps_at_the_printed_layout():
    """The job name says cp2; the configuration the log prints (and the recipe file) says CP 1: 2 x 4 x 1 x DP 8."""
    run = _runs()[PR13_70B]
    mean = sum(PR13_70B_STEPS) / len(PR13_70B_STEPS)
    assert (run.tp, run.pp, run.vp, run.cp, run.devices) == (2, 4, 5, 1, 64)
    assert 80 == run.pp * run.vp * 4  # four layers per virtual stage
    assert run.measured.step_time_s == pytest.approx(mean, abs=5e-6)
    assert run.measured.tokens_per_s_per_device == pytest.approx(128 * 8192 / mean / 64, abs=0.01)
    bucket = 2**20 * 125 // 2  # Apex: 125 MB of bf16 gradients, each of the DP 8 shards a multiple of 64
    assert bucket // 8 % 64 == 0 and run.recipe.ddp_bucket_size == bucket and run.recipe.apex_distributed_adam


def test_the_tokenizer_is_the_configs_gpt2_vocabulary_padded_by_tp():
    """The three NeMo 1.0 README configs train with GPT2BPETokenizer (50,257 tokens); Megatron pads it to a multiple
    of 128 x TP: ceil(50,257 / 1,024) x 1,024 = 51,200 at TP 8, ceil(50,257 / 256) x 256 = 50,432 at TP 2,
    ceil(50,257 / 512) x 512 = 50,688 at TP 4. The pull-request runs set override_vocab_size 151,936, Qwen3's own."""
    from btacalc.model.problem import padded_vocab

    runs = _runs()
    assert padded_vocab(50_257, 8) == 50 * 1024 == 51_200
    assert padded_vocab(50_257, 2) == 197 * 256 == 50_432
    assert padded_vocab(50_257, 4) == 99 * 512 == 50_688
    for run_id in [*README_STEPS, PR13_70B]:
        assert runs[run_id].model_spec().vocab_size == 50_257
    for gpus in PR13_STEPS:
        run = runs[f"qwen3-30b-a3b-b200-{gpus}-fp8-gpurecipes-a4-pr13"]
        assert run.recipe.tokenizer_vocab_size is None and run.model_spec().vocab_size == 151_936


def test_the_apex_buckets_of_the_b200_405b_row():
    """Apex DistributedFusedAdam: 2^20 x bucket_cap_mb / sizeof(grad_sync_dtype) parameters, each rank's shard over
    the data-parallel-with-CP group rounded down to 64 (task apexdo): 125 MB of bf16 over DP 2 x CP 2 = 4 ranks."""
    run = _runs()["llama-3.1-405b-b200-224-fp8-gpurecipes-a4"]
    bucket = 2**20 * 125 // 2
    ranks = run.devices // (run.tp * run.pp * run.cp) * run.cp
    shard = bucket // ranks // 64 * 64
    assert ranks == 4 and shard * ranks == bucket == run.recipe.ddp_bucket_size
    assert run.recipe.apex_distributed_adam


@pytest.mark.parametrize("run_id", NEW)
def test_the_new_rows_are_planned_as_they_ran(run_id):
    run = _runs()[run_id]
    result = planned_as_it_ran(run)
    # a row outside the +-25% check band carries its known gap (no tuning)
    assert abs(result.error) <= 0.25 or run.known_gap


def test_no_new_row_is_a_held_back_layout():
    """HELD-BACK.md: Llama 3.1 405B on H100 at TP8 PP8 VP8 CP2 and on GB200 at TP4 PP8 VP8 CP2 (any scale or
    release), and every B300/GB300 run."""
    runs = _runs()
    for run_id in NEW:
        run = runs[run_id]
        assert run.hw not in ("b300", "gb300")
        if run.model == "llama-3.1-405b":
            assert (run.tp, run.pp, run.vp, run.cp) not in ((8, 8, 8, 2), (4, 8, 8, 2))
