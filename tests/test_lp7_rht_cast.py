"""Issue 22 item 3, lp7: NVFP4's random Hadamard transform (RHT) as TransformerEngine launches it
(docs/precision.md, "lp7").

Sources (TransformerEngine, mirror of NVIDIA/TransformerEngine):
- recipe @ d0067d0 transformer_engine/common/recipe/__init__.py L595-609: the forward input and the backward gradient
  quantizers apply the RHT (only to their columnwise, wgrad, copy: L593-594), the gradient one also stochastic
  rounding; the weight quantizer no RHT and 16x16 2D scales.
- v2.8 (40c69e75) pytorch/csrc/quantizer.cpp L1489-1491 (the RHT amax kernel reads the tensor), L1561-1562 (the
  rowwise copy: nvte_quantize_v2 reads it again), L1631-1633 (the columnwise copy:
  nvte_hadamard_transform_cast_fusion_columnwise reads it a third time); v2.9-v2.13 the same.
- d0067d0 (and v2.14) quantizer.cpp L2699-2711: nvte_quantize_with_hadamard_transform writes both copies from one read.
Shares of HBM bandwidth: lp3's B200 MXFP8 cast times (ROCm/TransformerEngine PR 598), rowwise 34.84 us and both
copies 52.34 us for a BF16 8192 x 8192 tensor. Each expected value below is that arithmetic written out.
"""

from __future__ import annotations

import json

import pytest

from btacalc.config.precision import recipe
from btacalc.config.te_release import te_release_key
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.precision import cast_rates
from btacalc.planning.measured import express, load_runs
from support import resolved

ELEMENTS = 8192 * 8192
B200_HBM = 8e12
F1 = ELEMENTS * (2 + 1 + 1 / 32) / 34.84e-6 / B200_HBM  # 0.730: a cast kernel writing one copy
F2 = ELEMENTS * (2 + 2 * (1 + 1 / 32)) / 52.34e-6 / B200_HBM  # 0.651: one kernel writing both copies
Q = 0.5 + 1 / 16  # an E2M1 element and its share of the E4M3 scale per 16, bytes
H, F, S = 4096, 14336, 4096  # Llama 3 8B; one 4,096-token sequence


def _plan(fused: bool, precision: str = "nvfp4"):
    return resolved(load_preset("llama-3-8b"), "b200", recompute="none", attention="flash", seq_len=S,
                    precision=precision, rht_cast_fusion=fused)


def test_an_activation_cast_is_three_reads_before_te_2_14_and_two_after():
    """Per element of an activation or gradient, in HBM bytes at the full bandwidth:
    TE 2.8-2.13: amax 2 B / f1 + rowwise (2 + q) / f1 + columnwise RHT cast (2 + q) / f1 = 9.76;
    TE 2.14+: amax 2 B / f1 + one kernel (2 + 2q) / f2 = 7.54 (what btacalc timed for every NVFP4 run before lp7).
    Weights take no RHT: one kernel for both copies in either version."""
    separate, fused = cast_rates(_plan(False)), cast_rates(_plan(True))
    assert separate.activation_bytes_per_cast == pytest.approx((2 + 2 * (2 + Q)) / F1, rel=2e-3)
    assert fused.activation_bytes_per_cast == pytest.approx(2 / F1 + (2 + 2 * Q) / F2, rel=2e-3)
    assert separate.activation_bytes_per_cast / fused.activation_bytes_per_cast == pytest.approx(1.294, abs=2e-3)
    assert separate.full_bandwidth_bytes_per_cast == fused.full_bandwidth_bytes_per_cast == \
        fused.activation_bytes_per_cast


def test_one_llama_mlp_pays_the_extra_read_on_its_activations_only():
    """Llama 3 8B MLP, one 4,096-token sequence on a B200: activations and gradients cast per token are
    h + 2f + f + h elements; the extra time of TE 2.8's separate kernels is those elements x (9.76 - 7.54) B
    / 8 TB/s = 58.3 us here (4,096 x 51,200 elements x 2.22 B); the weights' once-per-step cast (3hf) does not move."""
    extra_bytes = (2 + 2 * (2 + Q)) / F1 - (2 / F1 + (2 + 2 * Q) / F2)
    expected = S * (2 * H + 3 * F) * extra_bytes / B200_HBM
    before = layer_parts(_plan(True), _plan(True).evaluate(1, 1))[0].cast_s["mlp"]
    after = layer_parts(_plan(False), _plan(False).evaluate(1, 1))[0].cast_s["mlp"]
    assert after - before == pytest.approx(expected, rel=1e-3)
    assert expected == pytest.approx(58.3e-6, rel=5e-3)


@pytest.mark.parametrize("precision", ["mxfp8", "fp8-current", "fp8", "bf16"])
def test_recipes_without_the_transform_refuse_the_option(precision):
    """Only NVFP4 applies the RHT (precision.toml rht_cast_fusion_since_te): under any other recipe the unfused casts
    would change nothing, so they are refused (one-line error naming the option and the precision), as
    --fp8-param-gather is without a low precision; a run's TE release still reads as fused for such a recipe."""
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.resolution import resolve_run
    from btacalc.config.hardware import resolve_hardware

    request = ExecutionRequest(precision=precision, rht_cast_fusion=False)
    with pytest.raises(BtacalcError) as exc:
        resolve_run(request, load_preset("llama-3-8b"), resolve_hardware("b200"))
    resolve_run(request.with_changes(precision="nvfp4"), load_preset("llama-3-8b"), resolve_hardware("b200"))
    assert {"rht_cast_fusion", "precision"} <= set(exc.value.params) and precision in str(exc.value)
    assert recipe(precision).rht_cast_fused_in("2.8.0")


@pytest.mark.parametrize("version, fused", [("2.8.0+7cde9a33", False), ("2.9", False), ("2.12", False),
                                            ("2.13.1", False), ("2.14+71bbefb", True), ("2.16", True)])
def test_the_te_release_decides_the_kernel(version, fused):
    """PR 2555 (523801df7, 2026-03-16) brought the fused row-cast + column-RHT-cast kernel; the v2.14 tag is the
    first whose quantizer.cpp calls it (v2.12 and v2.13 carry the grouped file only). NeMo 26.02 ships TE 2.12,
    26.04 TE 2.14+71bbefb (Megatron-Bridge @ 067f987d docs/releases/software-versions.md)."""
    assert recipe("nvfp4").rht_cast_fused_in(version) is fused


def test_a_malformed_te_version_is_one_line_error():
    with pytest.raises(BtacalcError):
        te_release_key("latest")
    assert te_release_key("2.8.0+7cde9a33") == te_release_key("2.8.0") == te_release_key("2.8")


@pytest.mark.parametrize("version, fused", [("2.14.0", True), ("2.14.0.dev0+abc", False), ("2.13.0.dev0", False)])
def test_the_nvfp4_release_order_is_tes(version, fused):
    """review13: the NVFP4 check read versions with a parser of its own, which refused a .devN build (TE numbers its
    pre-release builds 2.14.0.dev0, build_tools/VERSION.txt) that --te-version and te_releases.toml take, and ordered
    "2.14" before "2.14.0"; one order now (te_release.te_release_key): a .devN build precedes its release."""
    assert recipe("nvfp4").rht_cast_fused_in(version) is fused


def test_the_runs_take_their_te_release():
    """vuiseng9's NVFP4 run used the TE 2.8.0+7cde9a33 wheel (its Dockerfile L6) and row 162 NeMo 26.02.01 (TE
    2.12): separate kernels. Rows 68 (26.04.01) and 37 (26.06) state no TE and take the pinned, fused kernel."""
    runs = {r.id: r for r in load_runs()}
    for run_id, fused in [("llama-3-8b-b200-8-nvfp4-nemo2509-vuiseng9", False),
                          ("llama-3.1-405b-gb200-256-nvfp4-162", False),
                          ("llama-3-70b-gb200-64-nvfp4-68", True), ("llama-3.1-405b-gb200-256-nvfp4-37", True)]:
        request, why = express(runs[run_id])
        assert request is not None, why
        assert request.rht_cast_fusion is fused, run_id


def test_the_transform_itself_is_memory_bound():
    """A 16x16 Hadamard transform is 16 multiply-adds per element, 32 FLOP per 2 B read: 16 FLOP/B, far below a
    B200's BF16 tensor-core ridge (2.25e15 FLOP/s / 8e12 B/s = 281 FLOP/B), so inside a cast kernel it adds no time
    of its own and btacalc counts only the bytes."""
    p = _plan(False)
    chip = p.hardware.chip
    ridge = chip.peak_flops_per_s.value / p.hardware.memory.offchip_bandwidth_bytes_per_s.value
    assert 2 * 16 / 2 < ridge / 10


def test_the_plan_report_states_which_nvfp4_cast_path_it_timed(cli):
    """`--no-rht-cast-fusion` changes the plan, so the report's inputs say so (true by default, false when asked),
    and the unfused path is the slower one: one more read of every activation and gradient cast."""
    args = ("plan", "--model", "llama-3-8b", "--hw", "b200", "--devices", "8", "--precision", "nvfp4",
            "--global-batch", "8", "--micro-batch", "1", "--json")
    reports = {}
    for flag in ((), ("--no-rht-cast-fusion",)):
        code, out, err = cli(*args, *flag)
        assert code == 0, err
        reports[bool(flag)] = json.loads(out)
    assert reports[False]["inputs"]["rht_cast_fusion"] is True
    assert reports[True]["inputs"]["rht_cast_fusion"] is False
    assert reports[True]["throughput"]["tokens_per_s"] < reports[False]["throughput"]["tokens_per_s"]
