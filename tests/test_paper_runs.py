"""The published H100 BF16 pre-training runs of three technical reports (issue 21 item 5, task papers):
Llama 3 (arXiv 2407.21783 Table 4), Nemotron-4 340B (arXiv 2406.11704 Table 2) and Nemotron-4 15B
(arXiv 2402.16819 Table 2).

The expected numbers are typed from the papers' tables, not from btacalc: GPUs, the parallel sizes, the
sequence length, the batch, and the iteration time or TFLOPs/GPU. Llama 3's tokens/s/GPU is its TFLOPs/GPU over
PaLM's model FLOPs per token (Chowdhery et al. 2022 App. B: 6N + 12 L H Q T), the paper citing PaLM for its MFU."""

from __future__ import annotations

import pytest

from btacalc.config.pipeline import StageSplit, place
from btacalc.planning.measured import load_runs, predict

# Llama 3 Table 4: id -> (GPUs, TP, CP, PP, DP, seq, batch size per DP, TFLOPs/GPU, BF16 MFU %)
LLAMA3 = {
    "llama-3.1-405b-h100-8192-tp8-cp1-pp16-seq8192-bf16-llama3paper": (8192, 8, 1, 16, 64, 8192, 32, 430, 43),
    "llama-3.1-405b-h100-16384-tp8-cp1-pp16-seq8192-bf16-llama3paper": (16384, 8, 1, 16, 128, 8192, 16, 400, 41),
    "llama-3.1-405b-h100-16384-tp8-cp16-pp16-seq131072-bf16-llama3paper": (16384, 8, 16, 16, 8, 131072, 16, 380,
                                                                           38),
}
# Llama 3.1 405B (Hugging Face config.json, and the paper's Table 3): layers, heads, head dim, hidden, vocabulary
LAYERS, HEADS, HEAD_DIM, HIDDEN, VOCAB = 126, 128, 128, 16384, 128256
# the preset's parameter count less the input embedding table (which does no matmul): btacalc plan's
# "total 405.853 B" is checked against the Hugging Face count in tests/test_params.py
MATMUL_PARAMS = 405_853_388_800 - VOCAB * HIDDEN

# Nemotron-4 Table 2 rows: id -> (GPUs, TP, PP, data-parallel size, iteration s, batch size)
NEMOTRON = {
    "nemotron4-340b-h100-1536-gbs768-bf16-nemotron4paper": (1536, 8, 12, 16, 10.3, 768),
    "nemotron4-340b-h100-3072-gbs1536-bf16-nemotron4paper": (3072, 8, 12, 32, 10.3, 1536),
    "nemotron4-340b-h100-6144-gbs2304-bf16-nemotron4paper": (6144, 8, 12, 64, 8.0, 2304),
    "nemotron4-15b-h100-768-gbs384-bf16-nemotron4paper": (768, 8, 1, 96, 0.57, 384),
    "nemotron4-15b-h100-1536-gbs768-bf16-nemotron4paper": (1536, 8, 1, 192, 0.58, 768),
    "nemotron4-15b-h100-2304-gbs1152-bf16-nemotron4paper": (2304, 8, 1, 288, 0.64, 1152),
}
NEMOTRON_SEQ = 4096  # Nemotron-4 15B Table 1; the 340B report's text
H100_BF16_PEAK = 989e12  # both Nemotron reports: 989 teraFLOP/s of dense bf16 per H100


def _runs():
    return {r.id: r for r in load_runs()}


def test_the_rows_are_in_the_shipped_set_as_checks_of_secondary_confidence():
    runs = _runs()
    for run_id in (*LLAMA3, *NEMOTRON):
        run = runs[run_id]
        assert run.role == "check" and run.hw == "h100" and run.precision == "bf16"
        assert run.model_extra["confidence"] == "secondary"  # read through transcriptions, FLOP count assumed
        assert "arXiv" in run.source and run.recipe is not None


@pytest.mark.parametrize("run_id", sorted(LLAMA3))
def test_llama3_layout_multiplies_to_the_gpus_and_the_tokens_per_batch(run_id):
    gpus, tp, cp, pp, dp, seq, per_dp, _, _ = LLAMA3[run_id]
    run = _runs()[run_id]
    assert tp * cp * pp * dp == gpus == run.devices
    assert (run.tp, run.cp, run.pp, run.seq, run.global_batch) == (tp, cp, pp, seq, per_dp * dp)
    assert abs(per_dp * dp * seq / 2**20 - 16) < 0.1  # the table's "16M" tokens per batch, every stage


@pytest.mark.parametrize("run_id", sorted(LLAMA3))
def test_llama3_tokens_per_second_is_the_tflops_over_palm_flops_per_token(run_id):
    gpus, _, _, _, _, seq, _, tflops, mfu = LLAMA3[run_id]
    flops_per_token = 6 * MATMUL_PARAMS + 12 * LAYERS * HEADS * HEAD_DIM * seq
    assert _runs()[run_id].measured.tokens_per_s_per_device == pytest.approx(tflops * 1e12 / flops_per_token,
                                                                              abs=0.01)
    assert abs(tflops / 989 * 100 - mfu) < 1  # the TFLOPs/GPU are the MFU's numerator at 989 TFLOP/s


def test_llama3_row1_is_the_hand_derived_number():
    # 6 x 403.752 B = 2.4225e12; 12 x 126 x 16,384 x 8,192 = 2.0294e11; 430e12 / 2.6254e12 = 163.8
    run = _runs()["llama-3.1-405b-h100-8192-tp8-cp1-pp16-seq8192-bf16-llama3paper"]
    assert run.measured.tokens_per_s_per_device == pytest.approx(430e12 / (2.4225e12 + 2.0294e11), rel=2e-4)


@pytest.mark.parametrize("run_id", sorted(LLAMA3))
def test_llama3_stages_are_one_layer_shorter_at_both_ends_and_sum_to_the_model(run_id):
    """§3.3.2: one layer fewer on the first and the last stage, the first chunk holding only the embedding and the
    last only the loss: 7 + 14 x 8 + 7 = 126, every chunk one unit."""
    run = _runs()[run_id]
    assert run.recipe.account_for_embedding and run.recipe.account_for_loss and run.vp == 8
    assert 7 + 14 * 8 + 7 == LAYERS and (LAYERS + 2) == run.pp * run.vp
    placement = place(LAYERS, run.pp, run.vp, StageSplit(account_for_embedding=True, account_for_loss=True))
    per_stage = [len(placement.stage_layers(s)) for s in range(run.pp)]
    assert per_stage == [7] + [8] * 14 + [7] and sum(per_stage) == LAYERS
    first, last = placement.chunk(0, 0), placement.chunk(run.pp - 1, run.vp - 1)
    assert (first.count, first.embedding, last.count, last.loss) == (0, True, 0, True)


@pytest.mark.parametrize("run_id", sorted(NEMOTRON))
def test_nemotron_tokens_per_second_is_batch_times_seq_over_time_and_gpus(run_id):
    gpus, tp, pp, dp, step, gbs = NEMOTRON[run_id]
    run = _runs()[run_id]
    assert tp * pp * dp == gpus == run.devices
    assert (run.tp, run.pp or 1, run.seq, run.global_batch) == (tp, pp, NEMOTRON_SEQ, gbs)
    assert run.measured.step_time_s == step
    assert run.measured.tokens_per_s_per_device == pytest.approx(gbs * NEMOTRON_SEQ / step / gpus, abs=0.01)


@pytest.mark.parametrize("run_id,mfu,params", [
    ("nemotron4-340b-h100-6144-gbs2304-bf16-nemotron4paper", 41.0, 341e9),
    ("nemotron4-15b-h100-768-gbs384-bf16-nemotron4paper", 34.3, 15.7e9)])
def test_nemotron_measured_rate_agrees_with_the_tables_mfu(run_id, mfu, params):
    """6N per token at the row's tokens/s/GPU falls a few points under the table's MFU (which adds attention):
    the iteration time, batch and GPUs read from the table are one consistent row."""
    run = _runs()[run_id]
    six_n = 6 * params * run.measured.tokens_per_s_per_device / H100_BF16_PEAK * 100
    assert mfu - 5 < six_n < mfu


def test_no_row_is_a_held_back_layout():
    """HELD-BACK.md: llama-3.1-405b on H100 at TP 8 PP 8 VP 8 CP 2 (any scale) is held back."""
    for run_id in LLAMA3:
        run = _runs()[run_id]
        assert (run.tp, run.pp, run.vp, run.cp) != (8, 8, 8, 2)


def test_the_8k_row_on_8192_gpus_is_not_planned_because_btacalc_says_it_does_not_fit():
    result = predict(_runs()["llama-3.1-405b-h100-8192-tp8-cp1-pp16-seq8192-bf16-llama3paper"])
    assert not result.expressible and "does not fit" in result.reason
