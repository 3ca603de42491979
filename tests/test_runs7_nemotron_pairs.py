"""The Nemotron-4 rows task runs7 added (btacalc/data/measured_runs.json): the two GB200 BF16 rows at 256 GPUs and
the eight FP8 rows of the same README (dgxc-benchmarking @ 85d92846 nemotron/README.md), each re-derived from the
published step time and tokens/s; their layouts from the benchmark's launch.sh; the FP8 rows as same-source
precision pairs of the BF16 rows; and the split of each GB200 layout's two batch sizes into a fixed part and a
per-micro-batch part that docs/runs.md ('runs7') draws its conclusion from."""

from __future__ import annotations

import pytest

from btacalc.config.precision import recipe as precision_recipe
from btacalc.planning.measured import load_runs, validate_measured

RUNS = {r.id: r for r in load_runs()}
SEQ = 4096
RELEASE = "dgxc-benchmarking v25.05.01 (NeMo 25.04.00 container)"

# nemotron/README.md @ 85d92846: (GPUs, GBS) -> (training step time s, throughput tokens/s) as printed
PUBLISHED = {
    "nemotron4-340b-gb200-256-gbs64-bf16-dgxc": (256, 64, 2.19, 119700),          # L132-135
    "nemotron4-340b-gb200-256-gbs512-bf16-dgxc": (256, 512, 16.58, 126486),       # L147-150
    "nemotron4-15b-h100-16-gbs64-fp8-dgxc": (16, 64, 1.988, 131863),              # L106-109
    "nemotron4-340b-h100-256-gbs64-fp8-dgxc": (256, 64, 3.107, 84372),            # L120-123
    "nemotron4-340b-gb200-128-gbs32-fp8-dgxc": (128, 32, 1.483, 88383),           # L139-142
    "nemotron4-340b-gb200-256-gbs64-fp8-dgxc": (256, 64, 1.517, 172804),
    "nemotron4-340b-gb200-512-gbs128-fp8-dgxc": (512, 128, 1.549, 338468),
    "nemotron4-340b-gb200-128-gbs512-fp8-dgxc": (128, 512, 21.83, 96067),         # L155-158
    "nemotron4-340b-gb200-256-gbs512-fp8-dgxc": (256, 512, 11.21, 187078),
    "nemotron4-340b-gb200-512-gbs512-fp8-dgxc": (512, 512, 5.668, 369998),
}


@pytest.mark.parametrize("run_id", sorted(PUBLISHED))
def test_row_is_the_published_numbers(run_id):
    """tokens/s/GPU = the README's tokens/s / GPUs; the README's tokens/s is GBS x 4096 / step (its formula,
    L64-66), so the step and the throughput agree to the rounding of the printed step."""
    gpus, gbs, step, reported = PUBLISHED[run_id]
    run = RUNS[run_id]
    assert (run.devices, run.global_batch, run.seq, run.role) == (gpus, gbs, SEQ, "check")
    assert run.measured.step_time_s == step
    assert run.measured.tokens_per_s_per_device == pytest.approx(reported / gpus, abs=0.005)
    assert gbs * SEQ / step == pytest.approx(reported, rel=3e-3)
    assert run.release == RELEASE


def _launch_layout(model: str, hw: str, gpus: int, strong: bool) -> dict:
    """nemotron/launch.sh @ 85d92846 L98-147: GB200 340b TP 8 PP 4 VP 12 MBS 1, GBS GPUs/4 (512 strong scaling);
    H100 15b TP 2 PP 1 MBS 2 GBS GPUs x 4; H100 340b TP 8 PP 8 VP 12 MBS 1 GBS GPUs/4."""
    if hw == "gb200":
        return dict(tp=8, pp=4, vp=12, micro_batch=1, global_batch=512 if strong else gpus // 4)
    if model == "nemotron4-15b":
        return dict(tp=2, pp=1, vp=None, micro_batch=2, global_batch=gpus * 4)
    return dict(tp=8, pp=8, vp=12, micro_batch=1, global_batch=gpus // 4)


@pytest.mark.parametrize("run_id", sorted(PUBLISHED))
def test_layout_is_the_launch_script(run_id):
    run = RUNS[run_id]
    expected = _launch_layout(run.model, run.hw, run.devices, strong="gbs512" in run_id and run.hw == "gb200")
    assert {k: getattr(run, k) for k in expected} == expected


def test_fp8_rows_are_delayed_scaling_with_fp8_parameter_gather():
    """NeMo @ b4148d21 (the benchmark's NeMo): --fp8_recipe defaults to ds (argument_parser.py L121-132), which is
    bf16_with_fp8_mixed: fp8_recipe delayed, fp8_param_gather True (mixed_precision.py L56-71). btacalc's fp8 is
    delayed scaling and its Bridge-style recipe gathers the FP8 parameters (precision.toml)."""
    fp8 = [RUNS[i] for i in PUBLISHED if "-fp8-" in i]
    assert len(fp8) == 8
    assert all(r.precision == "fp8" for r in fp8)
    assert precision_recipe("fp8").bridge_param_gather


def test_every_fp8_row_pairs_with_its_bf16_twin_as_one_source():
    """Each FP8 row has a BF16 row of the same model, GPUs, layout and recipe (apart from the recipe's source),
    so `validate` finds eight same-source precision pairs and gates them."""
    pairs = {(p.narrow, p.wide): p for p in validate_measured().pairs.pairs}
    for run_id in (i for i in PUBLISHED if "-fp8-" in i):
        twin_id = run_id.replace("-fp8-", "-bf16-")
        fp8, bf16 = RUNS[run_id], RUNS[twin_id]
        assert fp8.recipe.model_copy(update={"source": ""}) == bf16.recipe.model_copy(update={"source": ""})
        pair = pairs[(run_id, twin_id)]
        assert not pair.cross_source
        assert pair.measured_ratio == pytest.approx(
            fp8.measured.tokens_per_s_per_device / bf16.measured.tokens_per_s_per_device)


def _split(precision: str, gpus: int) -> tuple[float, float]:
    """The two GB200 340B rows of one GPU count and precision, GA 8 (weak) and GA 512 / DP (strong), as
    step = fixed + GA x t: returns (t per micro-batch, fixed) in seconds from the measured steps."""
    weak = RUNS[f"nemotron4-340b-gb200-{gpus}-gbs{gpus // 4}-{precision}-dgxc"]
    strong = RUNS[f"nemotron4-340b-gb200-{gpus}-gbs512-{precision}-dgxc"]
    dp = gpus // (8 * 4)
    ga_weak, ga_strong = weak.global_batch // dp, strong.global_batch // dp
    assert ga_weak == 8
    t = (strong.measured.step_time_s - weak.measured.step_time_s) / (ga_strong - ga_weak)
    return t, weak.measured.step_time_s - ga_weak * t


@pytest.mark.parametrize("gpus", [128, 256, 512])
def test_measured_split_into_fixed_and_per_micro_batch_time(gpus):
    """128 GPUs BF16: t = (32.66 - 2.189) / 120 = 0.2539 s, fixed = 2.189 - 8 t = 0.158 s; FP8: (21.83 - 1.483) /
    120 = 0.1696 s, fixed 0.127 s. The per-micro-batch time is the same at every GPU count within 2.5% (one
    micro-batch's work per rank does not change with DP), and FP8 runs a micro-batch 1.49-1.52x faster."""
    t_bf16, f_bf16 = _split("bf16", gpus)
    t_fp8, f_fp8 = _split("fp8", gpus)
    if gpus == 128:
        assert (t_bf16, f_bf16) == pytest.approx(((32.66 - 2.189) / 120, 2.189 - 8 * (32.66 - 2.189) / 120))
        assert (t_fp8, f_fp8) == pytest.approx(((21.83 - 1.483) / 120, 1.483 - 8 * (21.83 - 1.483) / 120))
    assert t_bf16 == pytest.approx(_split("bf16", 128)[0], rel=0.025)
    assert t_fp8 == pytest.approx(_split("fp8", 128)[0], rel=0.025)
    assert 1.48 < t_bf16 / t_fp8 < 1.52
    # the fixed part is a small share of the GA 8 step in both precisions
    assert 0.10 < f_bf16 < 0.20 and 0.10 < f_fp8 < 0.20
