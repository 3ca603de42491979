"""gelu: the Megatron-LM CI memory tests whose MoE experts are GeLU, as memory check runs under memci's rule
(docs/memory.md "memci" and "gelu").

The expected numbers are typed from the sources, not from btacalc: each test case's largest `mem-max-allocated-bytes`
in tests/functional_tests/test_cases/moe/<test>/golden_values_dev_dgx_h100.json and the iteration that first logged
it (Megatron-LM @ d98e8a64), and each test's layout from its model_config.yaml."""

from __future__ import annotations

import pytest

from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import resolve_model
from btacalc.planning.measured import predict
from test_memci import _runs, assert_row_is_golden  # memci's rows by id and its check of a row


# --- the CI rows (memci's rule, docs/memory.md "memci") --------------------------------------------------------------

# id -> (moe/ test case; largest mem-max-allocated-bytes in its golden_values_dev_dgx_h100.json; the first iteration
# logging it)
GOLDEN = {
    "moe-toy-gelu-nodropout-megatron-ci-h100-8-cp2-pp2-ep2-te-4experts2parallel-nondeterministic-dev":
        ("gpt3_mcore_cp2_pp2_ep2_te_4experts2parallel_nondeterministic", 2_061_327_360, 19),
    "moe-toy-gelu-nodropout-megatron-ci-h100-8-cp2-pp2-ep2-te-4experts2parallel-nondeterministic-dp-last-dev":
        ("gpt3_mcore_cp2_pp2_ep2_te_4experts2parallel_nondeterministic_dp_last", 2_051_724_288, 49),
    "moe-toy-gelu-8e-megatron-ci-h100-8-te-tp2-pp1-te-8experts2parallel-ddp-average-in-collective-dev":
        ("gpt3_mcore_te_tp2_pp1_te_8experts2parallel_ddp_average_in_collective", 3_300_554_752, 34),
    "moe-toy-gelu-8e-megatron-ci-h100-8-te-tp2-pp1-te-8experts2parallel-overlap-grad-reduce-param-gather-groupedGEMM-dev":
        ("gpt3_mcore_te_tp2_pp1_te_8experts2parallel_overlap_grad_reduce_param_gather_groupedGEMM", 3_300_554_752, 34),
    "moe-toy-gelu-8e-top2-megatron-ci-h100-8-te-tp2-pp1-te-a2a-ovlp-8experts-etp1-ep4-dev":
        ("gpt3_mcore_te_tp2_pp1_te_a2a_ovlp_8experts_etp1_ep4", 4_065_854_464, 10),
    "moe-toy-gelu-megatron-ci-h100-8-tp2-cp2-pp2-ep2-te-4experts2parallel-dev":
        ("gpt3_mcore_tp2_cp2_pp2_ep2_te_4experts2parallel", 1_114_966_528, 20),
    "moe-toy-gelu-megatron-ci-h100-8-tp2-cp2-pp2-ep2-te-4experts2parallel-dp-last-dev":
        ("gpt3_mcore_tp2_cp2_pp2_ep2_te_4experts2parallel_dp_last", 1_114_442_240, 20),
    "moe-toy-gelu-megatron-ci-h100-8-tp2-pp2-ep2-etp2-te-4experts2parallel-dev":
        ("gpt3_mcore_tp2_pp2_ep2_etp2_te_4experts2parallel", 1_226_082_304, 2),
    "moe-toy-gelu-megatron-ci-h100-8-tp2-pp2-ep2-etp2-te-4experts2parallel-dp-last-dev":
        ("gpt3_mcore_tp2_pp2_ep2_etp2_te_4experts2parallel_dp_last", 1_226_082_304, 2),
    "moe-toy-gelu-megatron-ci-h100-8-tp2-pp2-ep2-te-4experts2parallel-dev":
        ("gpt3_mcore_tp2_pp2_ep2_te_4experts2parallel", 2_110_856_192, 35),
}
# test case -> (TP, PP, CP, EP, ETP as given or None, distributed optimizer, E, k) from each model_config.yaml (every
# test: 12 x 512, 8 heads, seq 1024, micro-batch 4, global batch 32, --disable-bias-linear, no --swiglu, 8 GPUs)
LAYOUT = {
    "gpt3_mcore_cp2_pp2_ep2_te_4experts2parallel_nondeterministic": (1, 2, 2, 2, None, False, 4, 1),
    "gpt3_mcore_cp2_pp2_ep2_te_4experts2parallel_nondeterministic_dp_last": (1, 2, 2, 2, None, False, 4, 1),
    "gpt3_mcore_te_tp2_pp1_te_8experts2parallel_ddp_average_in_collective": (2, 1, 1, 2, None, True, 8, 1),
    "gpt3_mcore_te_tp2_pp1_te_8experts2parallel_overlap_grad_reduce_param_gather_groupedGEMM":
        (2, 1, 1, 2, None, True, 8, 1),
    "gpt3_mcore_te_tp2_pp1_te_a2a_ovlp_8experts_etp1_ep4": (2, 1, 1, 4, 1, False, 8, 2),
    "gpt3_mcore_tp2_cp2_pp2_ep2_te_4experts2parallel": (2, 2, 2, 2, None, False, 4, 1),
    "gpt3_mcore_tp2_cp2_pp2_ep2_te_4experts2parallel_dp_last": (2, 2, 2, 2, None, False, 4, 1),
    "gpt3_mcore_tp2_pp2_ep2_etp2_te_4experts2parallel": (4, 2, 1, 2, 2, False, 4, 1),
    "gpt3_mcore_tp2_pp2_ep2_etp2_te_4experts2parallel_dp_last": (4, 2, 1, 2, 2, False, 4, 1),
    "gpt3_mcore_tp2_pp2_ep2_te_4experts2parallel": (2, 2, 1, 2, None, False, 4, 1),
}


def test_the_ten_gelu_expert_tests_are_rows():
    """memci's table counted 11 GeLU-expert tests; its rule gives 10 (the other ten not-added cases and its 18 rows
    make its 38): every regular moe test case a dev recipe runs, with an H100 dev golden, and no --swiglu."""
    assert len(GOLDEN) == len(LAYOUT) == 10 and {t for t, _, _ in GOLDEN.values()} == set(LAYOUT)
    runs = _runs()
    assert all(run_id in runs for run_id in GOLDEN)


@pytest.mark.parametrize("run_id", sorted(GOLDEN))
def test_a_gelu_row_is_its_golden_files_largest_logged_peak(run_id):
    test, peak, iteration = GOLDEN[run_id]
    assert_row_is_golden(_runs()[run_id], f"moe/{test}", peak, iteration)


@pytest.mark.parametrize("run_id", sorted(GOLDEN))
def test_a_gelu_rows_layout_and_preset_are_its_model_config(run_id):
    """The row's layout is its test's; its preset matches the launch in every architectural field: the launch read
    by --from-megatron gives the preset's model, all fields but the name and where they come from."""
    test = GOLDEN[run_id][0]
    tp, pp, cp, ep, etp, dist_opt, E, k = LAYOUT[test]
    run = _runs()[run_id]
    assert (run.tp, run.pp, run.cp, run.ep, run.etp, run.zero, run.micro_batch, run.global_batch, run.seq) == \
        (tp, pp, cp, ep, etp, 1 if dist_opt else 0, 4, 32, 1024)
    assert run.megatron_args is not None and "--swiglu" not in run.megatron_args
    assert f"--num-experts {E} " in run.megatron_args and f"--moe-router-topk {k} " in run.megatron_args
    launch = import_megatron(run.megatron_args, run_id, 8).model.model_dump()
    preset = resolve_model(run.model).model_dump()
    # review29: the launch's --moe-aux-loss-coeff is read back as the model's router loss, a training setting the
    # preset (an architecture) does not state
    skip = {"name", "source", "published_params", "aux_loss_coeff", "aux_loss_per_sequence"}
    assert {key: launch[key] for key in launch.keys() - skip} | {"numerics": None} == \
        {key: preset[key] for key in preset.keys() - skip} | {"numerics": None}
    assert launch["numerics"] | {"source": ""} == preset["numerics"] | {"source": ""}
    assert preset["mlp"] == "gelu" and (preset["num_experts"], preset["top_k"]) == (E, k)


@pytest.mark.parametrize("run_id", sorted(GOLDEN))
def test_a_gelu_row_is_predicted_inside_the_memory_band_or_says_what_was_checked(run_id):
    run = _runs()[run_id]
    result = predict(run)
    assert result.expressible and result.error is None  # planned; memory only
    assert result.memory_error is not None
    assert abs(result.memory_error) <= 0.05 or run.memory_known_gap


# --- the DeepSeek-like shapes memci left for time ---------------------------------------------------------------------

PROXY = "deepseek-proxy-2l-megatron-ci-h100-8-deepseek-proxy-fsdp-ep2-fsdp2-ep-overlap-dev"


def test_the_two_layer_deepseek_proxy_row_is_its_golden_and_its_launch():
    """deepseek_proxy_fsdp_ep2_fsdp2_ep_overlap: largest mem-max-allocated-bytes 2,219,356,672 B at iteration 2;
    TP 1, EP 2, ETP 1, Megatron-FSDP optim_grads_params (ZeRO-3), seq 1024, micro-batch 4, global batch 32; the
    preset deepseek-proxy-2l-megatron-ci equal to the launch in every field."""
    run = _runs()[PROXY]
    assert_row_is_golden(run, "moe/deepseek_proxy_fsdp_ep2_fsdp2_ep_overlap", 2_219_356_672, 2)
    assert (run.tp, run.pp, run.ep, run.etp, run.zero, run.fsdp, run.seq, run.micro_batch, run.global_batch) == \
        (1, 1, 2, 1, 3, True, 1024, 4, 32)
    assert run.megatron_args is not None and "--use-megatron-fsdp" in run.megatron_args
    launch = import_megatron(run.megatron_args, PROXY, 8).model.model_dump()
    preset = resolve_model(run.model).model_dump()
    # review29: the launch's aux-loss coefficient is read back as a training setting the preset does not state
    skip = {"name", "source", "published_params", "numerics", "aux_loss_coeff", "aux_loss_per_sequence"}
    assert {k: v for k, v in launch.items() if k not in skip} == {k: v for k, v in preset.items() if k not in skip}
    assert launch["numerics"] | {"source": ""} == preset["numerics"] | {"source": ""}
    result = predict(run)
    assert result.expressible and result.memory_error is not None
    assert abs(result.memory_error) <= 0.05 or run.memory_known_gap
