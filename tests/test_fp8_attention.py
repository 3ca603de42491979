"""FP8 attention (--fp8-attention; Megatron TransformerConfig.fp8_dot_product_attention, TransformerEngine fp8_dpa),
tested as its derivation: cuDNN's FP8 fused-attention rate from the published benchmark times typed here from
their sources (not read back from btacalc/data/attention_kernels.toml), one layer's attention core at that rate
plus the casts around the kernel at the cast bandwidth, and the inputs that cannot run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from btacalc.config.attention_kernels import attention_kernel
from btacalc.config.execution import ExecutionRequest, Layout, RunOptions
from btacalc.config.resolution import resolve_execution
from btacalc.config.hardware import resolve_hardware
from btacalc.config.megatron_codec import decode
from btacalc.config.bridge_codec import from_bridge
from btacalc.config.presets import load_preset, resolve_model
from btacalc.config.precision import recipe
from btacalc.errors import BtacalcError
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.problem import make_problem

ROOT = Path(__file__).resolve().parents[1]
GB200_BF16_PEAK = 2450e12  # dense BF16 FLOP/s (hardware_profiles/gb200.toml)
H100_BF16_PEAK = 989e12  # dense BF16 FLOP/s of H100 SXM and H200 (datasheets)
GB200_HBM = 8e12
H100_HBM = 3.35e12
# Hopper's casts at TransformerEngine's measured quantise share (hoppercast: TE's own GEMM benchmark on an H200 NVL,
# current scaling's 5 B per element of 1,495,269,376 + 987,758,592 elements cast in 20.285 - 16.785 ms, of 4.8 TB/s)
H100_CAST = H100_HBM * round(5 * (1_495_269_376 + 987_758_592) / (20.285e-3 - 16.785e-3) / 4.8e12, 3)
BWD_PER_FWD = 2.5  # backward FLOPs per forward FLOP in the benchmark's convention (5 BMMs against 2)

# cudnn-frontend @ 3929da2e benchmark/sdpa_benchmark_training/results/llama3.1/gb200/llama3.1_20260424_100750.csv:
# GB200, cuDNN 9.22, b = 2, 64/8 heads, d = 128, causal top-left; (forward ms, backward ms) per data type and s
GB200_MS = {
    ("fp8", 2048): (0.097, 0.414), ("fp8", 4096): (0.305, 1.167), ("fp8", 8192): (1.074, 3.781),
    ("fp8", 16384): (4.084, 13.476), ("fp8", 32768): (16.012, 52.155),
    ("mxfp8", 2048): (0.103, 0.461), ("mxfp8", 4096): (0.326, 1.305), ("mxfp8", 8192): (1.156, 4.272),
    ("mxfp8", 16384): (4.400, 15.315), ("mxfp8", 32768): (17.201, 61.716),
    ("bfloat16", 4096): (0.391, 1.198), ("bfloat16", 8192): (1.397, 4.127),
}
# cudnn-frontend @ df73764a .../results/h200_919_only_cudnn/llama3.1_20260227_034703.csv: H200, cuDNN 9.19, b = 1
H200_FP8_MS = {2048: (0.098, 0.437), 4096: (0.322, 1.459), 8192: (1.141, 6.392), 16384: (4.357, 29.422),
               32768: (16.884, 118.729)}
# ROCm/TransformerEngine PR 598, 'CAST_ONLY' B200: MXFP8 cast of a BF16 8192 x 8192 tensor, both copies, 52.34 us
TWO_COPY_SHARE = 2 ** 26 * (2 + 2 * (1 + 1 / 32)) / 52.34e-6 / GB200_HBM


def _share(ms: tuple[float, float], s: int, batch: int, peak: float) -> float:
    """(1 + 2.5) x the forward FLOPs on the causal blocks the kernel runs (nb(nb+1)/2 of nb^2, blocks of 128),
    64 heads of 128, over the measured forward + backward time, as a share of the 16-bit peak."""
    nb = s // 128
    forward = 4 * batch * 64 * s * s * 128 * (nb + 1) / (2 * nb)
    return (1 + BWD_PER_FWD) * forward / (sum(ms) * 1e-3) / peak


@pytest.mark.parametrize("dtype", ["fp8", "mxfp8"])
def test_the_blackwell_fp8_rates_are_cudnns_benchmark(dtype):
    """At s = 4k: 3.5 x 566.9 GFLOP / (0.305 + 1.167) ms = 1348.0 TFLOP/s = 0.550 of 2450 (per-tensor FP8);
    3.5 x 566.9 / (0.326 + 1.305) = 1216.6 = 0.497 (MXFP8); the other lengths the same way."""
    kernel = attention_kernel("default")
    for s in (2048, 4096, 8192, 16384, 32768):
        assert kernel.fraction_of_peak(10.0, s, dtype) == pytest.approx(
            _share(GB200_MS[(dtype, s)], s, 2, GB200_BF16_PEAK), abs=5e-4)
    assert _share(GB200_MS[("fp8", 4096)], 4096, 2, GB200_BF16_PEAK) == pytest.approx(0.5502, abs=1e-4)
    assert _share(GB200_MS[("mxfp8", 4096)], 4096, 2, GB200_BF16_PEAK) == pytest.approx(0.4966, abs=1e-4)


def test_mxfp8_attention_is_not_faster_than_bf16_in_the_same_cudnn_at_4k():
    """The benchmark's own BF16 rows: MXFP8's faster forward (0.326 against 0.391 ms) loses to its slower backward
    (1.305 against 1.198 ms) at 4k, 1.631 against 1.589 ms; per-tensor FP8 is faster (1.472 ms)."""
    bf16 = _share(GB200_MS[("bfloat16", 4096)], 4096, 2, GB200_BF16_PEAK)
    assert _share(GB200_MS[("mxfp8", 4096)], 4096, 2, GB200_BF16_PEAK) / bf16 == pytest.approx(1.589 / 1.631, rel=1e-9)
    assert _share(GB200_MS[("fp8", 4096)], 4096, 2, GB200_BF16_PEAK) / bf16 == pytest.approx(1.589 / 1.472, rel=1e-9)


def test_the_hopper_fp8_rate_is_cudnns_h200_benchmark_and_covers_h100():
    """H200 (989 TFLOP/s dense BF16, as H100 SXM): 3.5 x 283.5 GFLOP / (0.322 + 1.459) ms = 557.1 TFLOP/s = 0.563;
    the FP8 backward makes the longer sequences slower (8k 0.525, 16k 0.464)."""
    kernel = attention_kernel("default")
    for s, ms in H200_FP8_MS.items():
        assert kernel.fraction_of_peak(9.0, s, "fp8") == pytest.approx(_share(ms, s, 1, H100_BF16_PEAK), abs=5e-4)
    for hw in ("h100", "h200"):
        chip = resolve_hardware(hw).chip
        assert chip.peak_flops_per_s.value == H100_BF16_PEAK and chip.compute_capability.value == 9.0
    assert kernel.fraction_of_peak(9.0, 4096, "mxfp8") is None  # MXFP8 attention is Blackwell only
    assert kernel.fraction_of_peak(8.0, 4096, "fp8") is None


def _layer(model: str, hw: str, precision: str, fp8_attention: bool, seq: int = 4096, recompute: str = "none"):
    run = RunOptions(seq_len=seq, attention="flash", gradient_bytes=4, recompute=recompute, precision=precision,
                     fp8_attention=fp8_attention)
    problem = make_problem(load_preset(model), resolve_hardware(hw), run, Layout(devices=8, zero_stage=3, fsdp=True))
    return layer_parts(problem, problem.evaluate(1, 1))[0]


def test_one_llama_layer_core_at_the_mxfp8_rate_plus_its_casts_on_gb200():
    """Llama 3 8B (32 query / 8 KV heads of 128), one sequence of 4096, MXFP8 with FP8 attention, on a GB200:

        kernel = 14 s^2 (a d) x 33/64 / (share x 2450 TFLOP/s)    (forward 4, backward 8, recomputed Q K^T 2;
                                                                   the causal blocks run, nb = 32)
        casts  = (E_qkv + E_o) x (2 + 2 x (1 + 1/32)) / f2 / 8 TB/s

    with E_qkv = s (a + 2 a_kv) d the Q, K, V quantised forward, E_o = s a d the dO quantised backward, each
    into a rowwise and a columnwise MXFP8 copy from one read of the 16-bit tensor, f2 the measured two-copy cast
    share; MXFP8 attention writes O and dQ, dK, dV in 16 bits (nothing dequantized)."""
    s, a, a_kv, d = 4096, 32, 8, 128
    share = _share(GB200_MS[("mxfp8", 4096)], 4096, 2, GB200_BF16_PEAK)
    kernel = 14 * s * s * a * d * (33 / 64) / (share * GB200_BF16_PEAK)
    casts = (s * (a + 2 * a_kv) * d + s * a * d) * (2 + 2 * (1 + 1 / 32)) / TWO_COPY_SHARE / GB200_HBM
    part = _layer("llama-3-8b", "gb200", "mxfp8", True)
    assert part.core_s == pytest.approx(kernel + casts, rel=2e-3)
    assert part.phase_s["attn_scores"] + part.phase_s["attn_pv"] + part.phase_s.get("attn_softmax", 0.0) == \
        pytest.approx(part.core_s, rel=1e-12)
    assert part.cast_s["attn_scores"] == pytest.approx(casts, rel=1e-3)  # the profile rounds f2 to 0.651
    # without the option the same layer keeps the 16-bit kernel's rate and no casts (the goldens' numbers)
    bf16_share = attention_kernel("default").fraction_of_peak(10.0, 4096)
    plain = _layer("llama-3-8b", "gb200", "mxfp8", False)
    assert plain.core_s == pytest.approx(14 * s * s * a * d * (33 / 64) / (bf16_share * GB200_BF16_PEAK), rel=1e-9)
    assert "attn_scores" not in plain.cast_s


def test_delayed_scaling_on_h100_casts_one_copy_and_dequantizes_the_kernels_fp8_outputs():
    """Per-tensor FP8 (delayed scaling) on an H100 (TE's measured Hopper cast share, 0.739 x 3.35 TB/s): Q, K, V
    and dO cast into one rowwise copy, 2 B read + 1 B written; O and dQ, dK, dV come out of the kernel in FP8 and
    are dequantized, 1 B read + 2 B written: (E_qkv + E_o) x (3 + 3) / HBM. With --recompute selective (core_attn) the forward
    re-runs in the backward, casting Q, K, V and dequantizing O once more: + (E_qkv + E_o) x 3 / HBM."""
    s, a, a_kv, d = 4096, 32, 8, 128
    elements = s * (a + 2 * a_kv) * d + s * a * d
    share = _share(H200_FP8_MS[4096], 4096, 1, H100_BF16_PEAK)
    kernel = 14 * s * s * a * d * (33 / 64) / (share * H100_BF16_PEAK)
    part = _layer("llama-3-8b", "h100", "fp8", True)
    assert part.cast_s["attn_scores"] == pytest.approx(elements * 6 / H100_CAST, rel=1e-9)
    assert part.core_s == pytest.approx(kernel + elements * 6 / H100_CAST, rel=2e-3)
    rerun = _layer("llama-3-8b", "h100", "fp8", True, recompute="selective")
    assert rerun.cast_s["attn_scores"] == pytest.approx(elements * 9 / H100_CAST, rel=1e-9)


def test_the_recipes_that_run_fp8_attention_follow_transformer_engine():
    """TE @ d0067d0: delayed scaling runs cuDNN's per-tensor kernel on sm90+, current scaling on sm100+ only
    (utils.py L686-689), MXFP8 its block-scaled kernel (L703-720); FP8 block scaling and NVFP4 have none
    (L721-723)."""
    assert (recipe("fp8").fp8_attention_kernel, recipe("fp8").fp8_attention_min_compute_capability) == ("fp8", 9.0)
    assert (recipe("fp8-current").fp8_attention_kernel, recipe("fp8-current").fp8_attention_min_compute_capability) \
        == ("fp8", 10.0)
    assert (recipe("mxfp8").fp8_attention_kernel, recipe("mxfp8").fp8_attention_copies) == ("mxfp8", 2)
    assert recipe("fp8").fp8_attention_fp8_outputs and not recipe("mxfp8").fp8_attention_fp8_outputs
    for name in ("bf16", "fp16", "fp8-blockwise", "nvfp4"):
        assert recipe(name).fp8_attention_kernel == ""


@pytest.mark.parametrize("hw, precision, extra, message", [
    ("gb200", "bf16", [], "needs a --precision"),
    ("gb200", "nvfp4", [], "needs a --precision"),
    ("gb200", "fp8-blockwise", [], "needs a --precision"),
    ("h100", "fp8-current", [], "compute capability 10"),
    ("gb200", "mxfp8", ["--attention", "eager"], "--attention flash"),
    ("h100", "fp8", ["--attention-kernel", "triton-flash"], "no published rate"),
])
def test_fp8_attention_that_cannot_run_is_one_line_and_exit_2(hw, precision, extra, message):
    attention = [] if "--attention" in extra else ["--attention", "flash"]
    args = ["plan", "--model", "llama-3-8b", "--hw", hw, "--devices", "8", "--seq", "4096", "--precision", precision,
            "--fp8-attention", *attention, *extra]
    proc = subprocess.run([sys.executable, "-m", "btacalc", *args], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and message in proc.stderr and "--fp8-attention" in proc.stderr


def test_the_request_is_checked_when_resolved():
    spec, gb200 = resolve_model("llama-3-8b"), resolve_hardware("gb200")
    with pytest.raises(BtacalcError, match="fp8_attention"):
        resolve_execution(ExecutionRequest(devices=8, attention="flash", precision="bf16", fp8_attention=True), spec, gb200)
    ex = resolve_execution(ExecutionRequest(devices=8, attention="flash", precision="mxfp8", fp8_attention=True),
                           spec, gb200)
    assert ex.run.fp8_attention and ex.run.features()["fp8_attention"] is True


def test_the_plan_shows_the_fp8_core_and_emits_what_sets_it():
    base = [sys.executable, "-m", "btacalc", "plan", "--model", "llama-3-8b", "--hw", "gb200", "--devices", "8",
            "--seq", "4096", "--precision", "mxfp8", "--attention", "flash", "--fp8-attention"]
    env = {"PYTHONPATH": str(ROOT), "PATH": ""}
    report = json.loads(subprocess.run(base + ["--json"], capture_output=True, text=True, cwd=ROOT, env=env).stdout)
    assert report["inputs"]["fp8_attention"] is True
    rows = {row["name"]: row for row in report["phases"]}
    assert rows["attn_scores"]["precision"] == "mxfp8" and rows["attn_pv"]["precision"] == "mxfp8"
    assert rows["attn_scores"]["cast_time_s"] > 0
    launch = subprocess.run(base + ["--emit", "megatron"], capture_output=True, text=True, cwd=ROOT, env=env).stdout
    assert "--attention-backend fused" in launch and "fp8_dot_product_attention = True" in launch
    bridge = subprocess.run(base + ["--emit", "bridge"], capture_output=True, text=True, cwd=ROOT, env=env).stdout
    assert "mixed_precision.fp8_dot_product_attention=True" in bridge


def test_a_bridge_config_with_fp8_attention_decodes_to_the_option():
    args, unread = from_bridge({"mixed_precision": "bf16_with_mxfp8_mixed", "mixed_precision.fp8_dot_product_attention": True})
    assert "mixed_precision.fp8_dot_product_attention" not in unread
    fields, _ = decode({**args, "num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "seq_length": 128})
    assert fields["run.fp8_attention"] is True


def test_the_nemo_26_08_qwen3_row_is_expressed_with_fp8_attention():
    """qwen3-30b-a3b-gb200-8-mxfp8-7: Megatron-Bridge v0.6.0's perf recipe sets mixed_precision.
    fp8_dot_product_attention = True (perf_recipes/qwen/common.py L55 @ 51885cf1): planned with it, not refused."""
    from btacalc.planning.measured import express, load_runs

    run = next(r for r in load_runs() if r.id == "qwen3-30b-a3b-gb200-8-mxfp8-7")
    request, why = express(run)
    assert why == "" and request is not None and request.fp8_attention and request.precision == "mxfp8"


def test_compare_skips_the_precisions_without_fp8_attention():
    """compare --precision bf16,mxfp8 --fp8-attention on a GB200: the BF16 row cannot run FP8 attention and is
    listed under skipped with the reason; the MXFP8 row is planned."""
    out = subprocess.run([sys.executable, "-m", "btacalc", "compare", "-m", "llama-3-8b", "--hw", "gb200", "--devices",
                          "8", "--attention", "flash", "--precision", "bf16,mxfp8", "--fp8-attention", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    result = json.loads(out.stdout)
    assert [(r["hardware"], r["precision"]) for r in result["rows"]] == [("gb200", "mxfp8")]
    assert len(result["skipped"]) == 1 and result["skipped"][0].startswith("gb200 bf16:")


def test_every_low_precision_check_run_is_expressible():
    """Issue 22's acceptance, 'every low-precision check run expressible': FP8 attention was the last reason one
    was refused (qwen3-30b-a3b-gb200-8-mxfp8-7)."""
    from btacalc.planning.measured import express, load_runs

    runs = [r for r in load_runs() if r.role == "check" and r.precision not in ("bf16", "fp16")]
    assert len(runs) > 40
    refused = [(r.id, why) for r in runs for request, why in [express(r)] if request is None]
    assert refused == []


def test_an_emitted_launch_plans_back_with_fp8_attention_added(cli, monkeypatch):
    """No Megatron-LM flag sets fp8_dot_product_attention (arguments.py L2332-2334), so the emitted launch says it in a
    note and --from-megatron cannot read it: --fp8-attention may be added to the file's run, and the round trip then
    plans the same step as the original."""
    import io

    base = ["plan", "--model", "llama-3-8b", "--hw", "gb200", "--devices", "8", "--seq", "4096", "--precision",
            "mxfp8", "--attention", "flash", "--fp8-attention"]
    code, launch, err = cli(*base, "--emit", "megatron")
    assert code == 0, err
    code, out, err = cli(*base, "--json")
    original = json.loads(out)
    monkeypatch.setattr(sys, "stdin", io.StringIO(launch))
    code, out, err = cli("plan", "--hw", "gb200", "--from-megatron", "-", "--fp8-attention", "--json")
    assert code == 0, err
    back = json.loads(out)
    assert back["inputs"]["fp8_attention"] is True
    assert back["throughput"]["step_time_s"] == pytest.approx(original["throughput"]["step_time_s"], rel=1e-12)


def test_compare_skips_a_gpu_without_an_fp8_attention_rate(tmp_path):
    """compare --precision fp8 --fp8-attention over an H100 and a user's profile of a GPU of compute capability
    11.0 (the B300 file renamed): it runs the recipe, but attention_kernels.toml has no rate of cuDNN's FP8 kernel
    there (the Blackwell entries cover 10.0 and 10.3), so its row is listed under skipped with the reason, as a
    recipe the GPU cannot run is, and the H100's is planned, instead of the whole comparison ending in an error."""
    text = (ROOT / "hardware_profiles" / "b300.toml").read_text()
    assert 'name = "b300"' in text and "value = 10.3" in text
    future = tmp_path / "future.toml"
    future.write_text(text.replace('name = "b300"', 'name = "future"').replace("value = 10.3", "value = 11.0"))
    out = subprocess.run([sys.executable, "-m", "btacalc", "compare", "-m", "llama-3-8b", "--hw", f"h100,{future}",
                          "--devices", "8", "--attention", "flash", "--precision", "fp8", "--fp8-attention", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [(r["hardware"], r["precision"]) for r in result["rows"]] == [("h100", "fp8")]
    assert len(result["skipped"]) == 1 and result["skipped"][0].startswith("future fp8:")
    assert "no published rate" in result["skipped"][0]
