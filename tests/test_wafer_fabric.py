"""The wafer's model-dependent efficiency (btacalc/model/wafer/fabric.py), each test its derivation:
the fabric width utilisation u(n) = n / (n + k X) by hand, the attention core's width a d_h, the matmul
time it scales, the kernel runs of one micro-batch counted phase by phase, and leave-one-out over model
sizes (btacalc/planning/wafer_loo.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from btacalc.config.execution import RunOptions
from btacalc.config.hardware import Number, resolve_hardware
from btacalc.config.hf import load_hf_config
from btacalc.config.presets import load_preset
from btacalc.model.problem import make_problem
from btacalc.model.timing import step_time
from btacalc.model.wafer.fabric import kernel_fixed_s, kernel_runs, phase_utilisation, width_utilisation
from btacalc.model.wafer.mesh import MeshGeometry

LLAMA = load_hf_config(Path(__file__).parent / "data" / "llama-7b.config.json")
SRC = "https://github.com/argonne-lcf/user-guides"


def wafer(name: str, k: float | None):
    """The profile with the fabric overhead k set (None: the mechanism off)."""
    hw = resolve_hardware(name)
    value = None if k is None else Number(value=k, kind="estimate", source=SRC, note="test value")
    return hw.model_copy(update={"calibration": hw.calibration.model_copy(update={"fabric_vector_overhead": value})})


def problem(model, hw, seq=2048):
    return make_problem(model, hw, RunOptions(memory_model="weight_streaming", seq_len=seq))


def test_width_utilisation_by_hand_on_both_wafers():
    # WSE-2: usable rectangle 750 x 994 (X = 750); k = 1 element per instruction: n_half = 750
    gpt2 = load_preset("gpt2-small")  # h = 768
    assert width_utilisation(problem(gpt2, wafer("wse2", 1.0)), 768) == pytest.approx(768 / (768 + 750))  # 0.506
    assert width_utilisation(problem(LLAMA, wafer("wse2", 1.0)), 4096) == pytest.approx(4096 / (4096 + 750))  # 0.845
    # WSE-3: 755 columns (762 - 7 the SDK reserves); k = 2: n_half = 1,510
    assert width_utilisation(problem(gpt2, wafer("wse3", 2.0)), 768) == pytest.approx(768 / (768 + 2 * 755))
    # the mechanism off: no change
    assert width_utilisation(problem(gpt2, wafer("wse2", None)), 768) == 1.0


def test_small_hidden_sizes_lose_more_of_the_wafer():
    hw = wafer("wse2", 1.764)
    us = [width_utilisation(problem(LLAMA, hw), h) for h in (480, 768, 1024, 2048, 4096, 8192)]
    assert us == sorted(us) and us[0] < 0.3 < 0.7 < us[-1] < 1  # 480: 0.27; 8192: 0.86
    assert us[0] == pytest.approx(480 / (480 + 1.764 * 750))


def test_the_attention_core_has_the_width_of_its_heads_side_by_side():
    # Qwen3-30B-A3B: h = 2,048 but 32 query heads of d_h = 128: the core is a d_h = 4,096 wide
    qwen = load_preset("qwen3-30b-a3b")
    p = problem(qwen, wafer("wse2", 1.0), seq=4096)
    assert phase_utilisation(p, 10) == pytest.approx(2048 / (2048 + 750))  # a phase with weights: h
    assert phase_utilisation(p, 0) == pytest.approx(32 * 128 / (32 * 128 + 750))  # QK^T, P V: a d_h


def test_a_compute_bound_matmul_phase_takes_1_over_u_longer():
    on, off = problem(LLAMA, wafer("wse2", 1.0)), problem(LLAMA, wafer("wse2", None))
    t_on, t_off = step_time(on, 1, 32), step_time(off, 1, 32)
    # the MLP of LLaMA-7B at b = 32 is compute-bound (26 ms of matmuls against 3.6 ms of weight stream): time / u(4096)
    assert t_on.phase_time_s["mlp"] / t_off.phase_time_s["mlp"] == pytest.approx((4096 + 750) / 4096, rel=1e-9)


def test_kernel_runs_of_one_micro_batch_by_hand():
    p = problem(LLAMA, resolve_hardware("wse2"))
    ev = p.evaluate(1, 2)
    # phases batched over the whole micro-batch: post_attn_norm and mlp in each of 32 layers, recomputed
    # under full recomputation (forward, dX, dW, forward again = 4 runs); outside the layers embedding,
    # final_norm, lm_head and loss, not recomputed (3 runs). The 7 tile-batched layer phases are charged
    # per tile by the mesh (test_wafer.py), not here.
    runs = 32 * 2 * (1 + 2 + 1) + 4 * (1 + 2)
    assert kernel_runs(ev) == runs == 268
    g = MeshGeometry.of(p.hardware.mesh)
    assert kernel_fixed_s(p.hardware.mesh, ev) == pytest.approx(268 * (750 + 994 + 2 * 2 + 1) / 1.1e9)  # 0.43 ms
    assert g.step_s == pytest.approx(1749 / 1.1e9)


def test_every_micro_batch_pays_its_kernel_runs():
    p = problem(LLAMA, resolve_hardware("wse2"))
    one, four = step_time(p, 1, 2, micro_batches=1), step_time(p, 1, 2, micro_batches=4)
    ev = p.evaluate(1, 2)
    assert one.phase_time_s["kernel_fixed"] == pytest.approx(kernel_fixed_s(p.hardware.mesh, ev))
    assert four.phase_time_s["kernel_fixed"] == pytest.approx(4 * one.phase_time_s["kernel_fixed"])


def test_leave_one_out_never_fits_on_the_model_it_predicts():
    from btacalc.planning.calibration import FamilySpec
    from btacalc.planning.measured import load_runs
    from btacalc.planning.wafer_loo import leave_one_out

    runs = [r for r in load_runs() if r.model in ("llama-7b", "gpt-j-6b", "bert-large")]
    spec = FamilySpec(name="wse", profiles=["wse2", "wse3"], factors=["compute_efficiency"], source=SRC)
    report = leave_one_out(runs=runs, spec=spec)
    assert [f.held_out for f in report.folds] == ["bert-large", "gpt-j-6b", "llama-7b"]
    for fold in report.folds:
        assert fold.fit_runs and not any(fold.held_out in r for r in fold.fit_runs)
        assert fold.predictions and {p.model for p in fold.predictions} == {fold.held_out}
        assert len(fold.predictions) == len([r for r in runs if r.model == fold.held_out])  # every run of it
    errs = [abs(p.error) for f in report.folds for p in f.predictions]
    assert report.mean_abs_error == pytest.approx(sum(errs) / len(errs))
    # one factor fitted on the others' runs without a known gap: the fold without llama-7b fits GPT-J on
    # two systems under R_2.0.3, R_1.8.0 and one system under R_1.9 (the older two predicted with the gain
    # Release_2.0.2 states, wafer25, so no longer known gaps) and BERT-large at 512, 1,024 (2023 and 2024) and 2,048
    (no_llama,) = [f for f in report.folds if f.held_out == "llama-7b"]
    assert not {r.id for r in runs if r.known_gap}
    assert sorted(no_llama.fit_runs) == ["bert-large-wse2-1-401", "bert-large-wse2-1-406", "bert-large-wse2-1-407",
                                         "bert-large-wse2-1-409", "gpt-j-6b-wse2-1-408", "gpt-j-6b-wse2-2-399",
                                         "gpt-j-6b-wse2-2-410"]


def test_wafer_loo_takes_no_other_run_file_or_output(cli):
    code, out, err = cli("validate", "--wafer-loo", "--plot", "x.png")
    assert code == 2 and "--wafer-loo" in err and "--plot" in err and not out
    assert len(err.strip().splitlines()) == 1
