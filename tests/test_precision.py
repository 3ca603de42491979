"""Low-precision training (--precision): each mechanism as its derivation, written as arithmetic from
the recipe's definition (TransformerEngine recipe docstrings, OCP MX spec) and the datasheet numbers."""

from __future__ import annotations

import json

import pytest

from btacalc.config.execution import Layout
from btacalc.config.hardware import Number, resolve_hardware
from btacalc.config.precision import recipe
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.memory import GpuMemory
from btacalc.model.gpu.precision import cast_bytes_per_element, cast_rates, param_gather_factor
from support import resolved, with_calibration

# Llama 3 8B (its config.json): h, FFN width f, query heads a, key/value heads a_kv, head dimension d_h
H, F, A, A_KV, D_H = 4096, 14336, 32, 8, 128
S = 4096  # one sequence of 4,096 tokens (G = 1, b = 1)
EFF = 0.5  # a round efficiency, so that the arithmetic below is independent of the fitted one
H100_FP8, H100_HBM = 1.979e15, 3.35e12  # dense FP8 peak and HBM3 bandwidth (the profile's sources)
# a cast kernel on Hopper streams at the STREAM-measured share (no published TE cast benchmark there): RRZE-HPC
# gpu-benches GH200 cuda-stream, mean of scale 3174 and triad 3783 GB/s over 4000 GB/s = 0.8696, kept as 0.870
H100_CAST = H100_HBM * round((3174 + 3783) / 2 / 4000, 3)


def _number(v: float) -> Number:
    return Number(value=v, kind="estimate", source="https://example.org", note="test: a round number for the arithmetic")


def _h100_flat():
    """H100 with compute efficiency 0.5 and no GEMM-shape effect (no [kernels]: every matmul at the peak x 0.5)."""
    return with_calibration(resolve_hardware("h100"), compute_efficiency=_number(EFF)).model_copy(update={"kernels": None})


def test_block_scale_bytes():
    # MXFP8: 1 B FP8 element + one 1 B E8M0 scale per 32 elements (OCP MX v1.0; TE MXFP8BlockScaling)
    assert recipe("mxfp8").bytes_per_element == 1 + 1 / 32
    # NVFP4: 0.5 B E2M1 element + one 1 B E4M3 scale per 16 elements (TE NVFP4BlockScaling)
    assert recipe("nvfp4").bytes_per_element == 0.5 + 1 / 16
    # per-tensor scaling: one FP32 scale for the whole tensor, nothing per element
    assert recipe("fp8").bytes_per_element == 1 and recipe("fp8-current").bytes_per_element == 1
    # FP8 blockwise: an FP32 scale per 128 elements (1x128 activations)
    assert recipe("fp8-blockwise").bytes_per_element == 1 + 4 / 128


@pytest.mark.parametrize("name, cc, expected", [
    ("fp8", 9.0, 2 + 2 * 1),  # Hopper: TN-only FP8 GEMMs, so a transposed copy is written too
    ("fp8", 10.0, 2 + 1 * 1),  # Blackwell reads one per-tensor copy in any layout
    ("fp8-current", 10.0, 2 * 2 + 1),  # the amax kernel reads the 16-bit tensor once more
    ("mxfp8", 10.0, 2 + 2 * (1 + 1 / 32)),  # rowwise and columnwise blocks: two quantisations
    ("nvfp4", 10.0, 2 * 2 + 2 * (0.5 + 1 / 16)),  # amax pass (after the Hadamard transform), two copies
])
def test_cast_bytes_per_element(name, cc, expected):
    r = recipe(name)
    assert cast_bytes_per_element(r, r.copies(cc)) == pytest.approx(expected)


def test_one_layer_fp8_step_by_hand():
    """Llama 3 8B, one layer, one 4,096-token sequence, FP8 delayed scaling on one H100.

    MLP (SwiGLU, three h x f matmuls): forward 6 s h f FLOPs, backward twice that, all at the FP8 peak x 0.5.
    Its cast kernels: fc1 input (h), fc1 output gradient (2f), fc2 input (f), fc2 output gradient (h) per
    token, and the 3 h f weights once per step (M = 1), each element 2 B read + 2 x 1 B written (FP8 and
    its transpose on Hopper), at the streaming share of HBM bandwidth (H100_CAST). The SwiGLU activation, a separate 16-bit kernel, adds its
    8 f elements x 2 B per token at the streaming bandwidth (docs/precision.md "lp6")."""
    p = resolved(load_preset("llama-3-8b"), _h100_flat(), recompute="none", attention="flash", seq_len=S,
                 precision="fp8")
    part = layer_parts(p, p.evaluate(1, 1))[0]
    gemm = 3 * 6 * S * H * F / (H100_FP8 * EFF)
    activations = S * (2 * H + 3 * F) * (2 + 2 * 1) / H100_CAST
    weights = 3 * H * F * (2 + 2 * 1) / H100_CAST
    assert part.cast_s["mlp"] == pytest.approx(activations + weights)  # the report's row: weights / M, M = 1
    # compute-bound: the GEMMs' roofline side, plus the activation casts of the micro-batch; the weights are
    # cast once per step, a fixed cost of the step (timing.py), whatever M; plus the 16-bit SwiGLU kernel
    # between the linears (lp6: reads 2f, writes f forward; reads 3f, writes 2f backward) at HBM x 0.870
    swiglu = (3 + 5) * 2 * S * F / (H100_HBM * 0.870)
    assert part.phase_s["mlp"] == pytest.approx(gemm + activations + swiglu)
    # QKV: h -> (a + 2 a_kv) d_h; input h and output gradient (a + 2 a_kv) d_h per token, weights once
    qkv_out = (A + 2 * A_KV) * D_H
    qkv = 3 * 2 * S * H * qkv_out / (H100_FP8 * EFF) + S * (H + qkv_out) * 4 / H100_CAST
    assert part.phase_s["qkv_proj"] == pytest.approx(qkv)
    attn_out = A * D_H * H  # the output projection's weights
    assert part.weight_cast_s == pytest.approx((3 * H * F + H * qkv_out + attn_out) * 4 / H100_CAST)
    # the attention core and the norms stay 16-bit: no cast, same time as under bf16
    bf16 = layer_parts(resolved(load_preset("llama-3-8b"), _h100_flat(), recompute="none", attention="flash",
                                seq_len=S), resolved(load_preset("llama-3-8b"), _h100_flat(), recompute="none",
                                                     attention="flash", seq_len=S).evaluate(1, 1))[0]
    for name in ("attn_scores", "input_norm", "post_attn_norm"):
        assert part.phase_s[name] == pytest.approx(bf16.phase_s[name]) and name not in part.cast_s


def test_weight_casts_amortised_over_micro_batches():
    # Megatron passes TE is_first_microbatch: the weights are quantised once per optimizer step, so with
    # M = 4 micro-batches each carries a quarter of the weight cast
    p = resolved(load_preset("llama-3-8b"), _h100_flat(), Layout(micro_batches=4), recompute="none",
                 attention="flash", seq_len=S, precision="fp8")
    part = layer_parts(p, p.evaluate(1, 1))[0]
    assert part.cast_s["mlp"] == pytest.approx((S * (2 * H + 3 * F) + 3 * H * F / 4) * 4 / H100_CAST)


def test_mxfp8_weight_cache_and_param_gather():
    gb200 = resolve_hardware("gb200")
    kw = dict(recompute="none", attention="flash", seq_len=S)
    plain = resolved(load_preset("llama-3-8b"), gb200, **kw, precision="mxfp8")
    gathered = resolved(load_preset("llama-3-8b"), gb200, **kw, precision="mxfp8", low_precision_param_gather=True)
    # the linear layers' weights of 32 layers: QKV, output projection, three MLP matmuls
    linear = 32 * (H * (A + 2 * A_KV) * D_H + A * D_H * H + 3 * H * F)
    cache = GpuMemory(plain).stage_rows(1, 1)[0].components["low_precision_weights"]
    assert cache == pytest.approx(linear * 2 * (1 + 1 / 32), rel=1e-9)  # rowwise + columnwise MXFP8 copies
    # --fp8-param-gather: the rowwise copy is the parameter, the 16-bit weight goes (2 B per parameter less)
    less = GpuMemory(gathered).stage_rows(1, 1)[0].components["low_precision_weights"]
    assert less == pytest.approx(linear * (2 * (1 + 1 / 32) - 2), rel=1e-9)
    assert param_gather_factor(gathered) == pytest.approx((1 + 1 / 32) / 2) and param_gather_factor(plain) == 1.0


def test_saved_linear_inputs_in_low_precision():
    # TE saves each linear's quantised input for wgrad: the QKV input (the norm output) and the two MLP
    # linears' inputs (h and f per token) drop from 2 B to the FP8 byte; the SwiGLU inputs (2f) stay 16-bit
    kw = dict(recompute="none", attention="flash", seq_len=S)
    h100 = resolve_hardware("h100")
    bf16 = layer_parts(resolved(load_preset("llama-3-8b"), h100, **kw), resolved(load_preset("llama-3-8b"), h100,
                                                                                  **kw).evaluate(1, 1))[0]
    p = resolved(load_preset("llama-3-8b"), h100, **kw, precision="fp8")
    fp8 = layer_parts(p, p.evaluate(1, 1))[0]
    # delayed scaling also keeps the output projection's FP8 copy of its input O (a d_v = H elements per token: 1 B)
    # beside FlashAttention's 16-bit O (Megatron-Core sets save_original_input only for the other recipes:
    # attention.py L428-444; docs/memory.md projcopy)
    assert bf16.stored - fp8.stored == pytest.approx(S * (H + H + F) * (2 - 1) - S * H * 1)
    p = resolved(load_preset("llama-3-8b"), h100, **kw, precision="fp8-current")
    current = layer_parts(p, p.evaluate(1, 1))[0]
    assert bf16.stored - current.stored == pytest.approx(S * (H + H + F) * (2 - 1))


def test_rates_come_from_the_profile_peaks():
    kw = dict(recompute="none", attention="flash", seq_len=S)
    for hw, name, peak in (("gb200", "nvfp4", 1e16), ("gb200", "mxfp8", 4.9e15), ("b300", "nvfp4", 1.35e16),
                           ("gb300", "nvfp4", 1.5e16)):
        flat = with_calibration(resolve_hardware(hw), compute_efficiency=_number(EFF)).model_copy(update={"kernels": None})
        rates = cast_rates(resolved(load_preset("llama-3-8b"), flat, **kw, precision=name))
        assert rates is not None and rates.peak == pytest.approx(peak * EFF)
    assert cast_rates(resolved(load_preset("llama-3-8b"), "h100", **kw)) is None  # bf16: nothing cast


def test_blackwell_ultra_profiles_from_datasheets():
    # GB300 NVL72: 1,080 PF dense FP4, 720 PF sparse FP8, 360 PF sparse BF16 over 72 GPUs; HGX B300: 108 PF
    # dense FP4, 72 PF sparse FP8 and 36 PF sparse BF16 over 8 GPUs
    gb300, b300 = resolve_hardware("gb300").chip, resolve_hardware("b300").chip
    assert gb300.peak_fp4_flops_per_s.value == pytest.approx(1080e15 / 72)
    assert gb300.peak_fp8_flops_per_s.value == pytest.approx(720e15 / 72 / 2)
    assert gb300.peak_flops_per_s.value == pytest.approx(360e15 / 72 / 2)
    assert b300.peak_fp4_flops_per_s.value == pytest.approx(108e15 / 8)
    assert b300.peak_fp8_flops_per_s.value == pytest.approx(72e15 / 8 / 2)
    assert b300.peak_flops_per_s.value == pytest.approx(36e15 / 8 / 2)
    for chip in (gb300, b300):
        assert chip.compute_capability.value == 10.3


@pytest.mark.parametrize("args, fragment", [
    (["--hw", "h100", "--precision", "fp9"], "--precision"),
    (["--hw", "h100", "--precision", "nvfp4"], "FP4 peak"),
    (["--hw", "a100-80gb", "--precision", "fp8"], "FP8 peak"),
    (["--hw", "h100", "--precision", "mxfp8"], "compute capability"),
    (["--hw", "h100", "--fp8-param-gather"], "--fp8-param-gather"),
    (["--hw", "wse3", "--precision", "fp8"], "wafer-scale"),
])
def test_bad_precision_input(cli, args, fragment):
    code, out, err = cli("plan", "-m", "llama-3-8b", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("btacalc: error:") and fragment in err


def test_plan_mxfp8_shows_phase_precision_casts_and_caches(cli):
    code, out, _ = cli("plan", "-m", "llama-3-8b", "--hw", "gb200", "--devices", "8", "--precision", "mxfp8", "--json")
    report = json.loads(out)
    assert report["inputs"]["precision"] == "mxfp8" and report["inputs"]["te_recipe"] == "MXFP8BlockScaling"
    rows = {r["name"]: r for r in report["phases"]}
    for name in ("qkv_proj", "attn_out_proj", "mlp"):
        assert rows[name]["precision"] == "mxfp8" and 0 < rows[name]["cast_time_s"] < rows[name]["time_s"]
    for name in ("input_norm", "attn_scores", "attn_pv"):
        assert rows[name]["precision"] == "bf16" and rows[name]["cast_time_s"] == 0
    assert {r["name"]: r["precision"] for r in report["outside_layers"]}["lm_head"] == "bf16"
    assert report["memory_bytes"]["low_precision_weights"] > 0
    code, out, _ = cli("plan", "-m", "llama-3-8b", "--hw", "gb200", "--devices", "8", "--precision", "mxfp8")
    assert "precision" in out and "low_precision_weights" in out and "MXFP8BlockScaling" in out


@pytest.mark.parametrize("precision, flags", [
    # Megatron-LM @ d98e8a64 transformer_config.py:587-679 (--fp8-format, --fp8-recipe, --fp4-format, --fp4-recipe)
    ("mxfp8", ["--bf16", "--fp8-format e4m3", "--fp8-recipe mxfp8", "--fp8-param-gather"]),
    ("nvfp4", ["--bf16", "--fp4-format e2m1", "--fp4-recipe nvfp4", "--fp4-param-gather"]),
])
def test_emit_megatron_precision_flags(cli, precision, flags):
    code, out, _ = cli("plan", "-m", "llama-3-8b", "--hw", "gb200", "--devices", "8", "--precision", precision,
                       "--fp8-param-gather", "--emit", "megatron")
    lines = [line.strip(" \\") for line in out.splitlines()]
    assert all(flag in lines for flag in flags), (flags, lines)


def test_sweep_varies_precision(cli, tmp_path):
    csv = tmp_path / "p.csv"
    code, _, err = cli("sweep", "-m", "llama-3-8b", "--hw", "gb200", "--devices", "8", "--vary",
                       "precision=bf16,mxfp8,nvfp4", "--csv", str(csv), "--quiet")
    assert code == 0, err
    rows = [line.split(",") for line in csv.read_text().splitlines()]
    head = rows[0]
    tps = {r[head.index("precision")]: float(r[head.index("tokens_per_s")]) for r in rows[1:]}
    assert list(tps) == ["bf16", "mxfp8", "nvfp4"] and tps["bf16"] < tps["mxfp8"] < tps["nvfp4"]
    # each point is the plan of that precision
    code, out, _ = cli("plan", "-m", "llama-3-8b", "--hw", "gb200", "--devices", "8", "--precision", "nvfp4", "--json")
    assert json.loads(out)["throughput"]["tokens_per_s"] == pytest.approx(tps["nvfp4"])
    code, _, err = cli("sweep", "-m", "llama-3-8b", "--hw", "gb200", "--vary", "precision=bf16,fp7")
    assert code == 2 and "fp7" in err and err.count("\n") == 1


def test_compare_varies_precision(cli):
    code, out, err = cli("compare", "-m", "llama-3-8b", "--hw", "h100,gb200", "--devices", "8", "--precision",
                         "bf16,nvfp4", "--json", "--quiet")
    assert code == 0, err
    result = json.loads(out)
    rows = {(r["hardware"], r["precision"]): r["tokens_per_s"] for r in result["rows"]}
    assert set(rows) == {("h100", "bf16"), ("gb200", "bf16"), ("gb200", "nvfp4")}
    assert rows[("gb200", "nvfp4")] > rows[("gb200", "bf16")]
    assert len(result["skipped"]) == 1 and result["skipped"][0].startswith("h100 nvfp4: ")
    code, _, err = cli("compare", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--precision", "nvfp4")
    assert code == 2 and err.count("\n") == 1


def test_sensitivity_moves_the_dtype_peak_not_the_architecture(cli):
    code, out, _ = cli("plan", "-m", "llama-3-8b", "--hw", "gb200", "--devices", "8", "--precision", "mxfp8",
                       "--sensitivity", "10", "--json")
    rows = {r["parameter"]: r for r in json.loads(out)["sensitivity"]}
    assert "chip.compute_capability" not in rows
    # the linear layers run at the FP8 peak: it moves tokens/s; the unused FP4 peak does not
    assert rows["chip.peak_fp8_flops_per_s"]["elasticity_plus"] > 0.1
    assert rows["chip.peak_fp4_flops_per_s"]["elasticity_plus"] == 0


def test_weight_cache_sharded_like_the_weights_under_fsdp():
    # ZeRO-3 / FSDP over 8 ranks: each keeps 1/8 of the quantised copies (the gathered unit's are transient)
    kw = dict(recompute="none", attention="flash", seq_len=S, precision="mxfp8")
    p = resolved(load_preset("llama-3-8b"), "gb200", Layout(devices=8, zero_stage=3, fsdp=True), **kw)
    linear = 32 * (H * (A + 2 * A_KV) * D_H + A * D_H * H + 3 * H * F)
    cache = GpuMemory(p).stage_rows(1, 1)[0].components["low_precision_weights"]
    assert cache == pytest.approx(linear / 8 * 2 * (1 + 1 / 32), rel=1e-6)
