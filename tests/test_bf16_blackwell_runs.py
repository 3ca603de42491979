"""The BF16 runs on Blackwell added for issue 21 item 5 (task runs3, btacalc/data/measured_runs.json), each
measured number re-derived from the published values it was read from, and the comparisons docs/runs.md draws
from them: the same-layout BF16/low-precision pair on B200, and the same-configuration GB200/H100/A100 CI runs."""

from __future__ import annotations

import re
import statistics

import pytest

from btacalc.planning.measured import load_runs, predict

RUNS = {r.id: r for r in load_runs()}
B200_BF16 = RUNS["llama-3-8b-b200-8-bf16-nemo2509-vuiseng9"]

# Megatron-LM @ d98e8a64 tests/functional_tests/test_cases/gpt/gpt3_7b_{tp4_pp1,tp1_pp4}_memory_speed/
# golden_values_dev_dgx_{gb200,h100,a100}.json, "iteration-time" values (s) by iteration, the warm-up
# iterations 2 and 4 left out (A100 logs every fifth iteration).
ITERATION_TIME = {
    ("tp4", "gb200"): {6: 0.85346, 8: 0.85394, 10: 0.85229, 12: 0.85257, 14: 0.85257, 16: 0.85029, 18: 0.85109,
                       20: 1.07621, 22: 0.85078, 24: 0.86196},
    ("tp4", "h100"): {6: 1.11139, 8: 1.11368, 10: 1.11791, 12: 1.11551, 14: 1.11592, 16: 1.11576, 18: 1.11374,
                      20: 1.11451, 22: 1.1149, 24: 1.11493},
    ("tp4", "a100-80gb"): {10: 2.57769, 20: 2.596},
    ("pp4-vp8", "gb200"): {6: 0.7891, 8: 0.78729, 10: 0.78713, 12: 0.78559, 14: 0.78688, 16: 0.99679, 18: 0.78545,
                           20: 1.00358, 22: 0.78589, 24: 0.7843},
    ("pp4-vp8", "h100"): {6: 1.14861, 8: 1.14912, 10: 1.15017, 12: 1.14909, 14: 1.14967, 16: 1.15077, 18: 1.15255,
                          20: 1.1501, 22: 1.15138, 24: 1.15105},
    ("pp4-vp8", "a100-80gb"): {10: 2.9368, 20: 2.94791},
}


# the recipe fields only the time rows state (the memory rows leave them at their defaults)
CI_TIME_SETTINGS_OFF = {"deterministic_mode": False, "gradient_accumulation_fusion": None, "layernorm_sm_margin": None}


def ci_run(layout: str, hw: str):
    return RUNS[f"gpt-7b-megatron-ci-{hw}-8-{layout}-dev-time"]


@pytest.mark.parametrize("layout,hw", sorted(ITERATION_TIME))
def test_ci_step_is_the_median_logged_iteration(layout, hw):
    """step = median of the logged iteration times after warm-up; tokens/s/GPU = GBS x seq / (step x GPUs)
    with GBS 8, seq 8192 and 8 GPUs (the tests' model_config.yaml), i.e. 8192 / step."""
    run = ci_run(layout, hw)
    step = statistics.median(ITERATION_TIME[(layout, hw)].values())
    assert run.measured.step_time_s == pytest.approx(step, abs=1e-5)
    assert run.measured.tokens_per_s_per_device == pytest.approx(8 * 8192 / (step * 8), abs=0.01)
    assert (run.global_batch, run.seq, run.devices, run.precision, run.role) == (8, 8192, 8, "bf16", "check")
    # the same configuration as the memory row the time row sits next to
    memory_row = RUNS[run.id.removesuffix("-time")]
    for field in ("tp", "pp", "vp", "micro_batch", "zero", "recompute", "sequence_parallel"):
        assert getattr(run, field) == getattr(memory_row, field)
    # the time row declares the test's --deterministic-mode, --no-gradient-accumulation-fusion and LayerNorm SM
    # margin (tests/test_wgrad_accumulate.py); the memory row of the same test keeps its memory check
    assert run.recipe.deterministic_mode and not memory_row.recipe.deterministic_mode
    assert run.recipe.model_copy(update=CI_TIME_SETTINGS_OFF) == memory_row.recipe


def test_ci_generation_ratios_are_what_the_notes_state():
    """GB200 / H100 of the identical test: 1.115 / 0.853 = 1.31 (TP4) and 1.150 / 0.787 = 1.46 (PP4 VP8),
    against btacalc's 2.00 and 2.02 for the default (non-deterministic) run; H100 / A100 2.32 and 2.56 (btacalc
    2.41 and 2.65). Before nccl2 btacalc read 2.27 and 2.36: the B200 NVLink latency anchor (~22 us measured on 4
    GPUs over NCCL's 10.2 us, x 2.157, against x 13.0 / 15.0 on H100; docs/comm.md nccl2) slows GB200's TP calls. `validate` predicts the rows with the unfused gradient add timed and the rest of
    --deterministic-mode listed as not timed (tests/test_wgrad_accumulate.py)."""
    def rate(layout, hw):
        return ci_run(layout, hw).measured.tokens_per_s_per_device

    assert rate("tp4", "gb200") / rate("tp4", "h100") == pytest.approx(1.31, abs=0.005)
    assert rate("pp4-vp8", "gb200") / rate("pp4-vp8", "h100") == pytest.approx(1.46, abs=0.005)
    assert rate("tp4", "h100") / rate("tp4", "a100-80gb") == pytest.approx(2.32, abs=0.005)
    def default_run(lay, hw):
        run = ci_run(lay, hw)
        return run.model_copy(update={"recipe": run.recipe.model_copy(update=CI_TIME_SETTINGS_OFF)})

    assert predict(ci_run("tp4", "gb200")).expressible
    assert "deterministic_mode" in predict(ci_run("tp4", "gb200")).not_timed
    predicted = {(lay, hw): predict(default_run(lay, hw)).predicted.tokens_per_s_per_device
                 for lay in ("tp4", "pp4-vp8") for hw in ("gb200", "h100")}
    for lay in ("tp4", "pp4-vp8"):
        # btacalc scales by the datasheets (and the profiles' measured NCCL latencies): far above the CI's 1.31 / 1.46
        assert predicted[(lay, "gb200")] / predicted[(lay, "h100")] > 1.9
        gb = ci_run(lay, "gb200")
        assert "1.31x" in gb.notes and "1.46x" in gb.notes


def test_b200_bf16_rate_is_the_readme_arithmetic():
    """21,618 tokens/s/GPU at GBS 128 x seq 8192 on 8 GPUs is a step of 128 x 8192 / (21618 x 8) = 6.063 s;
    GA = 128 / (DP 8 x MBS 2) = 8, the README's config line."""
    r = B200_BF16
    assert r.measured.tokens_per_s_per_device == 21618.0
    assert 128 * 8192 / (21618 * 8) == pytest.approx(6.063, abs=5e-4)
    assert "6.063 s" in r.notes
    dp = r.devices // (r.tp * r.pp * r.cp)
    assert r.global_batch // (dp * r.micro_batch) == 8
    assert (r.hw, r.precision, r.role, r.seq) == ("b200", "bf16", "check", 8192)
    assert r.recipe is not None and r.recipe.loss() == "te_fused" and r.recipe.gradient_bytes() == 2


def test_b200_pair_shares_the_layout_of_the_shipped_low_precision_rows():
    for lp in ("llama-3-8b-b200-8-fp8-current-241", "llama-3-8b-b200-8-mxfp8-242"):
        other = RUNS[lp]
        for field in ("model", "hw", "devices", "seq", "global_batch", "micro_batch", "tp", "pp", "cp"):
            assert getattr(other, field) == getattr(B200_BF16, field), field


@pytest.mark.parametrize("run_id", [B200_BF16.id] + [f"gpt-7b-megatron-ci-{hw}-8-{lay}-dev-time"
                                                     for lay in ("tp4", "pp4-vp8")
                                                     for hw in ("gb200", "h100", "a100-80gb")])
def test_sources_are_pinned(run_id):
    """Every new row names its source at a full 40-hex commit (the README or golden values) and its recipe's."""
    run = RUNS[run_id]
    assert re.search(r"\b[0-9a-f]{40}\b", run.source)
    assert run.recipe is not None and re.search(r"\b[0-9a-f]{40}\b", run.recipe.source)
