"""The H200 measured runs (issue 21 item 5, task runs5): Google Cloud A3 Ultra recipes (AI-Hypercomputer/gpu-recipes
@ 2e1fd5ef), each a step logged by NeMo 24.07's DLLogger and shown in the recipe's README.

The expected numbers are typed from the source, not from btacalc: the README's `train_step_timing in s` and
`consumed_samples`, and the layout of the NeMo config the README launches."""

from __future__ import annotations

import pytest

from btacalc.planning.measured import express, load_runs, predict

GPU_RECIPES = "2e1fd5efbf1af9c08f8ac50b9d7fef2cfa675b68"

# id -> (logged step s, logged step index, consumed_samples, GBS, seq, GPUs, precision, (TP, PP, VP, EP))
LOGGED = {
    # training/a3ultra/mixtral_8x7b/nemo-gke/nemo2407/recipe/README.md L207-217; config mixtral-8x7b-256gpus-a3u-bf16
    "mixtral-8x7b-h200-256-bf16-gpurecipes-a3u": (2.7396187782287598, 26, 27648, 1024, 4096, 256, "bf16",
                                                  (1, 1, None, 8)),
    # training/a3ultra/llama3_70b/nemo-gke/nemo2407/recipe/README.md L193-204; config llama3-1-70b-256gpus-a3ultra-fp8
    "llama-3-70b-h200-256-fp8-gpurecipes-a3u": (20.021318435668945, 15, 16384, 1024, 8192, 256, "fp8",
                                                (2, 4, 20, None)),
}


def _runs():
    return {r.id: r for r in load_runs() if r.hw == "h200"}


def test_the_shipped_set_has_h200_runs_and_they_are_checks():
    runs = _runs()
    assert set(LOGGED) <= set(runs)
    for run in runs.values():
        assert run.role == "check"  # never fitted
    for run_id in LOGGED:  # runs10 added an H200 row from another commit of the same repository
        run = runs[run_id]
        assert GPU_RECIPES in run.source and run.recipe is not None and GPU_RECIPES in run.recipe.source


@pytest.mark.parametrize("run_id", sorted(LOGGED))
def test_the_throughput_is_the_logged_step(run_id):
    step, index, consumed, gbs, seq, gpus, precision, (tp, pp, vp, ep) = LOGGED[run_id]
    run = _runs()[run_id]
    # NeMo counts consumed_samples after the step: step index i has consumed (i + 1) x GBS sequences
    assert consumed == (index + 1) * gbs
    assert (run.global_batch, run.seq, run.devices, run.precision) == (gbs, seq, gpus, precision)
    assert (run.tp, run.pp, run.vp, run.ep) == (tp, pp, vp, ep)
    assert run.measured.step_time_s == pytest.approx(step, abs=5e-5)
    assert run.measured.tokens_per_s_per_device == pytest.approx(gbs * seq / step / gpus, abs=0.05)


@pytest.mark.parametrize("run_id", sorted(LOGGED))
def test_the_runs_are_planned_on_the_h200_with_their_layout(run_id):
    run = _runs()[run_id]
    request, reason = express(run)
    assert reason == "" and request is not None
    result = predict(run)
    assert result.expressible and result.error is not None
    assert result.predicted.tokens_per_s_per_device > 0


def test_the_recipe_tokenizer_vocabulary_is_the_model_the_run_trained():
    """Both NeMo 1.0 configs train with Megatron's GPT2BPETokenizer (50,257 tokens: Hugging Face
    openai-community/gpt2 config.json vocab_size), not the model's own vocabulary; Megatron pads it to a multiple
    of make_vocab_size_divisible_by 128 x TP: ceil(50,257 / 128) x 128 = 393 x 128 = 50,304 at TP 1 (Mixtral) and
    ceil(50,257 / 256) x 256 = 197 x 256 = 50,432 at TP 2 (Llama)."""
    from btacalc.model.problem import padded_vocab

    runs = _runs()
    assert padded_vocab(50_257, 1) == 393 * 128 == 50_304
    assert padded_vocab(50_257, 2) == 197 * 256 == 50_432
    for run_id, preset_vocab in (("mixtral-8x7b-h200-256-bf16-gpurecipes-a3u", 32_000),
                                 ("llama-3-70b-h200-256-fp8-gpurecipes-a3u", 128_256)):
        run = runs[run_id]
        assert run.model_spec().vocab_size == 50_257
        as_preset = run.model_copy(update={"recipe": run.recipe.model_copy(update={"tokenizer_vocab_size": None})})
        assert as_preset.model_spec().vocab_size == preset_vocab
        faster = predict(run).predicted.tokens_per_s_per_device > predict(as_preset).predicted.tokens_per_s_per_device
        assert faster == (50_257 < preset_vocab)  # a smaller output layer is a faster step, a larger one slower
