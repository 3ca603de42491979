"""runs11: the Qwen2.5 7B and 32B presets and the BF16 B200 rows of Google's gpu-recipes pull request 13 (A4, NeMo
25.04's NeMo 1.0 path) that runs10 left for want of a preset.

The expected numbers are typed from the sources, not from btacalc: the ten logged step times (steps 10-19) of each
log, training/a4/custom/qwen2-5-{7b,32b}/logs/* @ 6cff69e4, and the layout of the NeMo configuration each log prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from btacalc.config.hf import load_hf_config
from btacalc.config.presets import load_preset
from btacalc.planning import measured, run_file
from btacalc.planning.measured import load_runs, predict
from support import planned_as_it_ran

PR13 = "6cff69e4352b45ec467ed26bf3633e6632e68932"
DATA = Path(__file__).parent / "data"

# gpus -> the DLL lines' 'train_step_timing in s' of steps 10-19
STEPS_7B = {
    8: (11.107728672027587, 11.114213752746583, 11.11722435951233, 11.119918012619019, 11.116055107116699,
        11.11785626411438, 11.113108015060424, 11.110964679718018, 11.110590934753418, 11.115845870971679),
    16: (5.619620895385742, 5.618711280822754, 5.6172497272491455, 5.618110847473145, 5.6142425537109375,
         5.615588998794555, 5.616363573074341, 5.618599605560303, 5.6137776374816895, 5.617054176330567),
}
STEPS_32B = {
    16: (24.33623847961426, 24.33283739089966, 24.34437313079834, 24.340828132629394, 24.336874961853027,
         24.34230875968933, 24.351064443588257, 24.34978265762329, 24.349881505966188, 24.35010085105896),
    32: (12.35259428024292, 12.355670309066772, 12.360544776916504, 12.3543860912323, 12.355384159088135,
         12.360750436782837, 12.359624290466309, 12.355875921249389, 12.360703182220458, 12.359142208099366),
    64: (6.428895378112793, 6.427949047088623, 6.434770345687866, 6.43574628829956, 6.43210883140564,
         6.431418991088867, 6.423512649536133, 6.420359182357788, 6.419741010665893, 6.425825500488282),
}
# model -> (steps, MBS, (TP, PP, VP, CP)) as the log's printed configuration has them; GBS 512 x seq 4096 for all
RUNS = {"qwen2.5-7b": (STEPS_7B, 4, (1, 1, None, 1)), "qwen2.5-32b": (STEPS_32B, 1, (1, 2, 32, 1))}
NEW = [f"{model}-b200-{gpus}-bf16-gpurecipes-a4-pr13" for model, (steps, *_r) in RUNS.items() for gpus in steps]


def _runs():
    return {r.id: r for r in load_runs()}


@pytest.mark.parametrize("name", ["qwen2.5-7b", "qwen2.5-32b"])
def test_the_preset_is_its_config_json(name):
    """The preset is what the HF reader makes of the stored config.json, field by field (its QKV bias included, as
    the reader gives every qwen2 model); only the name, source and published counts are the preset's own."""
    from_hf = load_hf_config(DATA / f"{name}.config.json").model_dump()
    preset = load_preset(name).model_dump()
    own = {"name", "source", "published_params"}
    differ = {k for k in from_hf if k not in own and from_hf[k] != preset[k]}
    assert differ == {"numerics"}  # the same values, the preset's source names the NeMo pin as well
    assert {k: v for k, v in from_hf["numerics"].items() if k != "source"} == \
        {k: v for k, v in preset["numerics"].items() if k != "source"}
    assert preset["qkv_bias"] and preset["numerics"]["rope_theta"] == 1e6


def test_the_new_rows_are_sourced_bf16_checks_with_a_software_date():
    runs = _runs()
    for run_id in NEW:
        run = runs[run_id]
        assert run.role == "check" and run.precision == "bf16" and run.hw == "b200"
        assert "AI-Hypercomputer/gpu-recipes" in run.source and PR13 in run.source and PR13 in run.recipe.source
        assert run.software_date == "2025-04" and run.software_date_source and run.release
        assert not run.known_gap  # each reads inside the +-25% band


@pytest.mark.parametrize("run_id", NEW)
def test_a_row_is_the_mean_of_its_logged_steps_at_the_printed_layout(run_id):
    model, gpus = run_id.split("-b200-")[0], int(run_id.split("-b200-")[1].split("-")[0])
    steps_by_gpus, mbs, (tp, pp, vp, cp) = RUNS[model]
    steps = steps_by_gpus[gpus]
    mean = sum(steps) / len(steps)
    run = _runs()[run_id]
    assert (run.model, run.devices, run.global_batch, run.seq, run.micro_batch) == (model, gpus, 512, 4096, mbs)
    assert (run.tp, run.pp, run.vp, run.cp, run.ep) == (tp, pp, vp, cp, None)
    dp = gpus // (tp * pp * cp)
    assert 512 % (dp * mbs) == 0  # whole micro-batches per replica
    assert run.measured.step_time_s == pytest.approx(mean, abs=5e-6)
    assert run.measured.tokens_per_s_per_device == pytest.approx(512 * 4096 / mean / gpus, abs=0.01)
    assert max(steps) / min(steps) < 1.003  # steady: the ten steps within 0.3%
    # Apex DistributedFusedAdam: 125 MB of bf16 gradients, each of the DP ranks' shards a multiple of 64 (apexdo)
    bucket = 2**20 * 125 // 2
    assert run.recipe.apex_distributed_adam and run.recipe.ddp_bucket_size == bucket and bucket // dp % 64 == 0
    assert run.model_spec().vocab_size == 152_064 and run.recipe.tokenizer_vocab_size is None  # override_vocab_size


def test_the_32b_layout_puts_one_layer_on_each_virtual_stage():
    spec = load_preset("qwen2.5-32b")
    for gpus in STEPS_32B:
        run = _runs()[f"qwen2.5-32b-b200-{gpus}-bf16-gpurecipes-a4-pr13"]
        assert run.pp * run.vp == spec.num_layers == 64


@pytest.mark.parametrize("run_id", NEW)
def test_the_new_rows_are_planned_as_they_ran(run_id):
    assert abs(planned_as_it_ran(_runs()[run_id]).error) <= 0.25


def test_the_qkv_bias_the_runs_lacked_changes_no_prediction(monkeypatch):
    """The runs trained without Qwen2's QKV bias (NeMo 1.0: bias false, no qkv_bias key); the presets have it. Under
    TransformerEngine's layers btacalc times the bias add as part of the GEMM, so each row's prediction moves by less
    than a millionth without it (the optimizer step over the bias): the rows' errors do not rest on the difference."""
    runs = _runs()
    with_bias = {i: predict(runs[i]).predicted.tokens_per_s_per_device for i in NEW}
    resolve = measured.resolve_model
    def without_bias(name):
        return resolve(name).model_copy(update={"qkv_bias": False})

    # the plan resolves the run's model in measured, the run's model_spec in run_file (since 006cedf)
    monkeypatch.setattr(measured, "resolve_model", without_bias)
    monkeypatch.setattr(run_file, "resolve_model", without_bias)
    for run_id in NEW:
        assert not runs[run_id].model_spec().qkv_bias
        without = predict(runs[run_id]).predicted.tokens_per_s_per_device
        assert without != with_bias[run_id] and without == pytest.approx(with_bias[run_id], rel=1e-6)


def test_the_qwen2_5_presets_are_one_model_family():
    """Leave-one-model-family-out (validate --cross-validate) holds Qwen2.5 out as one family, as qwen3's two presets
    are: the 7B and 32B rows share a publisher, harness and architecture."""
    from btacalc.planning.crossval import load_model_families, model_family

    families = load_model_families()
    assert model_family("qwen2.5-7b", families) == model_family("qwen2.5-32b", families) == "qwen2.5"
    assert model_family("qwen3-30b-a3b", families) != "qwen2.5"
