"""memci: Megatron-LM's CI memory golden values as memory check runs (docs/memory.md "memci").

The expected numbers are typed from the sources, not from btacalc: each test case's largest
`mem-max-allocated-bytes` in tests/functional_tests/test_cases/gpt/<test>/golden_values_dev_dgx_h100.json and the
iteration that first logged it (Megatron-LM @ d98e8a64), and each test's layout from its model_config.yaml."""

from __future__ import annotations

import pytest

from btacalc.config.megatron_run import import_megatron
from btacalc.planning.measured import predict
from btacalc.planning.run_file import load_runs

PIN = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
GIB = 2**30

# id -> (test case, gpt/ unless a folder is named; largest mem-max-allocated-bytes in golden_values_dev_dgx_h100.json;
# the first iteration logging it)
GOLDEN = {
    "gpt-toy-megatron-ci-h100-8-te-tp1-pp1-dist-optimizer-fim-dataset-dev":
        ("gpt3_mcore_te_tp1_pp1_dist_optimizer_fim_dataset", 4_702_430_720, 2),
    "gpt-toy-megatron-ci-h100-8-te-tp1-pp1-dist-optimizer-no-mmap-bin-files-dev":
        ("gpt3_mcore_te_tp1_pp1_dist_optimizer_no_mmap_bin_files", 4_702_430_720, 2),
    "gpt-toy-megatron-ci-h100-8-te-tp1-pp4-vp1-dev": ("gpt3_mcore_te_tp1_pp4_vp1", 4_161_191_424, 2),
    # M = 5 at PP 4 interleaved with --microbatch-group-size-per-virtual-pipeline-stage 5 (pipesched)
    "gpt-toy-megatron-ci-h100-8-te-tp1-pp4-vp1-tunable-overlap-dev": ("gpt3_mcore_te_tp1_pp4_vp1_tunable_overlap", 4_622_615_552, 2),
    "gpt-toy-megatron-ci-h100-8-te-tp1-pp4-vp1-dist-optimizer-overlap-grad-reduce-param-gather-overlap-optimizer-dev":
        ("gpt3_mcore_te_tp1_pp4_vp1_dist_optimizer_overlap_grad_reduce_param_gather_overlap_optimizer", 3_942_493_696, 2),
    "gpt-toy-megatron-ci-h100-8-te-tp1-pp4-vp1-resume-torch-decoupled-lr-dev":
        ("gpt3_mcore_te_tp1_pp4_vp1_resume_torch_decoupled_lr", 2_639_761_408, 2),
    "gpt-toy-untied-megatron-ci-h100-8-te-tp1-pp4-vp1-uneven-pipeline-dev":
        ("gpt3_mcore_te_tp1_pp4_vp1_uneven_pipeline", 2_415_566_336, 2),
    "gpt-toy-6l-untied-megatron-ci-h100-8-te-tp1-pp4-vp2-account-for-embedding-loss-in-pipeline-split-dev":
        ("gpt3_mcore_te_tp1_pp4_vp2_account_for_embedding_loss_in_pipeline_split", 2_841_169_408, 32),
    "gpt-toy-nodropout-megatron-ci-h100-8-te-tp2-pp2-cp2-dev": ("gpt3_mcore_te_tp2_pp2_cp2", 935_253_504, 2),
    "gpt-toy-nodropout-megatron-ci-h100-8-te-tp2-pp2-cp2-calculate-per-token-loss-dev":
        ("gpt3_mcore_te_tp2_pp2_cp2_calculate_per_token_loss", 935_253_504, 4),
    "gpt-toy-nodropout-megatron-ci-h100-8-te-tp2-pp2-cp2-calculate-per-token-loss-nondeterministic-dev":
        ("gpt3_mcore_te_tp2_pp2_cp2_calculate_per_token_loss_nondeterministic", 935_777_792, 9),
    "gpt-toy-nodropout-megatron-ci-h100-8-te-tp2-pp2-cp2-nondeterministic-dev":
        ("gpt3_mcore_te_tp2_pp2_cp2_nondeterministic", 935_777_792, 3),
    "gpt-toy-megatron-ci-h100-8-te-tp2-pp2-cross-entropy-loss-fusion-dev":
        ("gpt3_mcore_te_tp2_pp2_cross_entropy_loss_fusion", 1_837_640_192, 2),
    "gpt-toy-megatron-ci-h100-8-te-tp2-zp-z3-resume-fsdp-dtensor-dev":
        ("gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor", 1_469_652_992, 1),
    "gpt-toy-megatron-ci-h100-8-te-tp4-pp1-dist-optimizer-overlap-grad-reduce-param-gather-dev":
        ("gpt3_mcore_te_tp4_pp1_dist_optimizer_overlap_grad_reduce_param_gather", 1_543_416_320, 2),
    "gpt-toy-megatron-ci-h100-8-tp1-pp2-dev": ("gpt3_mcore_tp1_pp2", 3_633_177_600, 2),
    "gpt-toy-megatron-ci-h100-8-tp1-pp4-dev": ("gpt3_mcore_tp1_pp4", 2_746_575_872, 2),
    "gpt-toy-rmsnorm-megatron-ci-h100-8-weekly-mcore-tp4-cp2-current-scaling-native-fp8-tp-sp-cp-tp-overlap-dev":
        ("gpt3_weekly_mcore_tp4_cp2_current_scaling_native_fp8_tp_sp_cp_tp_overlap", 425_122_816, 2),
    "moe-toy-megatron-ci-h100-8-te-tp1-pp1-te-4experts-groupedGEMM-op-fuser-dev":
        ("moe/gpt3_mcore_te_tp1_pp1_te_4experts_groupedGEMM_op_fuser", 2_956_330_496, 2),
}
# id -> (TP, PP, CP, micro-batch, global batch) from each model_config.yaml (every test: seq 1024, 8 GPUs)
LAYOUT = {
    "fim-dataset": (1, 1, 1, 4, 32), "no-mmap-bin-files": (1, 1, 1, 4, 32), "te-tp1-pp4": (1, 4, 1, 4, 32),
    "tp2-pp2-cp2": (2, 2, 2, 4, 32), "cross-entropy-loss-fusion": (2, 2, 1, 4, 32), "tp2-zp-z3": (2, 1, 1, 4, 32),
    "te-tp4-pp1": (4, 1, 1, 4, 32), "h100-8-tp1-pp2": (1, 2, 1, 4, 32), "h100-8-tp1-pp4": (1, 4, 1, 4, 32),
    "tp4-cp2-current-scaling": (4, 1, 2, 2, 128), "4experts-groupedGEMM": (1, 1, 1, 4, 32),
    "tunable-overlap": (1, 4, 1, 4, 40),
}


def _runs():
    return {r.id: r for r in load_runs()}


@pytest.mark.parametrize("run_id", sorted(GOLDEN))
def test_a_row_is_its_golden_files_largest_logged_peak(run_id):
    test, peak, iteration = GOLDEN[run_id]
    run = _runs()[run_id]
    assert_row_is_golden(run, test if "/" in test else f"gpt/{test}", peak, iteration)  # gpt/ unless named


def assert_row_is_golden(run, folder: str, peak: int, iteration: int) -> None:
    """memci's rule for a row: test_cases/FOLDER's H100 dev golden, its largest peak and the iteration first logging
    it, the last rank, 1 node x 8 H100 (recipes/h100/gpt.yaml and moe.yaml), memory only."""
    golden = f"{PIN}/tests/functional_tests/test_cases/{folder}/golden_values_dev_dgx_h100.json"
    assert golden in run.source and "mem-max-allocated-bytes" in run.source
    assert run.measured.peak_alloc_gib == round(peak / GIB, 4)
    assert f"{peak:,} B" in run.notes and f"iteration {iteration}," in run.notes
    assert run.measured.peak_rank == "last"  # TensorBoard is rank world_size - 1's (global_vars.py L241)
    assert run.role == "check" and run.hw == "h100" and run.devices == 8
    assert run.software_date and run.software_date_source and run.megatron_args
    assert run.measured.tokens_per_s_per_device is None and run.measured.step_time_s is None  # memory only


@pytest.mark.parametrize("run_id", sorted(GOLDEN))
def test_a_rows_layout_is_its_model_config(run_id):
    run = _runs()[run_id]
    (tp, pp, cp, mb, gbs), = [v for k, v in LAYOUT.items() if k in run_id][-1:]  # the last (most specific) match
    assert (run.tp, run.pp, run.cp or 1, run.micro_batch, run.global_batch, run.seq) == (tp, pp, cp, mb, gbs, 1024)
    assert f"--tensor-model-parallel-size {tp}" in run.megatron_args
    assert f"--micro-batch-size {mb} --global-batch-size {gbs} --seq-length 1024" in run.megatron_args


@pytest.mark.parametrize("run_id", sorted(GOLDEN))
def test_a_row_is_predicted_inside_the_memory_band_or_says_what_was_checked(run_id):
    run = _runs()[run_id]
    result = predict(run)
    assert result.expressible and result.error is None  # planned; memory only: no time to compare, as the 7B rows
    assert result.memory_error is not None
    assert abs(result.memory_error) <= 0.05 or run.memory_known_gap


def test_no_row_is_held_back_or_a_second_copy_of_a_shipped_test():
    runs = _runs()
    for run_id, (test, _, _) in GOLDEN.items():
        assert runs[run_id].hw not in ("b300", "gb300")
        assert test not in ("gpt3_7b_tp4_pp1_memory_speed", "gpt3_7b_tp1_pp4_memory_speed")


ARGS = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
        "--micro-batch-size 4 --global-batch-size 32 --vocab-size 50257 --bf16 --pipeline-model-parallel-size 2 ")


def test_transformer_impl_local_is_unfused_attention():
    """--transformer-impl local builds Megatron-Core's own layers, whose core attention is DotProductAttention
    (gpt_builders.py L35, L109-149; core/models/backends.py L129-131): materialised scores, not a fused kernel."""
    local = import_megatron(ARGS + "--transformer-impl local", "local", 8)
    te = import_megatron(ARGS + "--transformer-impl transformer_engine", "te", 8)
    assert local.request.attention == "eager" and te.request.attention == "flash"
    assert not any(flag == "--transformer-impl" for flag, _ in local.ignored)  # read, not waved off


def test_the_local_rows_hold_the_unfused_scores_of_their_last_stage():
    """gpt3_mcore_tp1_pp2: the last of 2 stages holds 6 layers of 1 micro-batch in flight. DotProductAttention keeps
    the softmax output (2 B), the dropout mask (1 B) and the dropped-out probabilities (2 B) per score, b x a x s^2
    = 4 x 8 x 1,024^2, where the fused kernel keeps its fp32 softmax statistics (4 B x b x a x s); and the global
    buffer one more 2 B per score (mpubuf)."""
    run = _runs()["gpt-toy-megatron-ci-h100-8-tp1-pp2-dev"]
    te = run.model_copy(update={"megatron_args": run.megatron_args.replace("--transformer-impl local",
                                                                           "--transformer-impl transformer_engine")})
    b, a, s, layers = 4, 8, 1024, 6
    # tews: the local run holds no TransformerEngine cuBLAS workspace (32 MiB + 1 KiB; tests/test_tews.py)
    # mpubuf: and Megatron-Core's global buffer, the local attention's scores input [b * a, s, s] in bf16
    # (dot_product_attention.py L188-191 @ d98e8a64), held once per stage
    extra = layers * (5 * b * a * s * s - 4 * b * a * s) - 33_555_456 + 2 * b * a * s * s
    assert (predict(run).predicted.peak_alloc_gib - predict(te).predicted.peak_alloc_gib) * GIB == pytest.approx(extra)
