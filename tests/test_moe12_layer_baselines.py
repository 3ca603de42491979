"""One Megatron-Core MoE layer on 8 H100s against NVIDIA's published per-layer baselines (issue 21, task moe12;
docs/clock.md "moe12").

Source: Megatron-LM's MoE-layer performance regression test, NVIDIA/Megatron-LM @ 32f2c9cf
tests/functional_tests/test_cases/common/moe_perf/: `test_cases.py` (the cases: 4,096 tokens x micro-batch 1 per
rank, TP 1, EP 8, `gpu_platform="H100"`, force-balanced routing, fused permute and router, TransformerEngine grouped
GEMM; FP8 cases use the blockwise recipe), `__main__.py` (CUDA events around `layer(input)` and
`output.backward(grad)` after an 8192 x 8192 dummy GEMM that hides the first launches; 5 warm-up and 20 timed
iterations; a baseline is only written when std / mean <= 2%) and `baseline.json` (forward_ms, backward_ms per case).

btacalc plans a one-layer model with the case's MoE shape (tests/data/moe_perf/; the DeepSeek proxy states
routed_scaling_factor 1.0, the case's moe_router_topk_scaling_factor None, since a DeepSeek-V3 config without it takes
transformers' 2.5: hostile35) on 8 H100s at EP 8 and the
force-balanced routing imbalance of 8 x 4,096 tokens; the MoE layer is the router, dispatch, experts, shared
experts and combine phases (forward + backward) plus the expert all-to-all. Measured figures are copied from
baseline.json; btacalc's numbers are never the expected values.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from btacalc.model.routing_balance import forced_balance_imbalance

# baseline.json @ 32f2c9cf: (forward_ms, backward_ms) per case
BASELINE_MS = {
    "mixtral_a2a_tp1ep8_bf16": (4.261713600158691, 7.825059199333191),
    "mixtral_deepep_tp1ep8_bf16": (4.609353613853455, 8.030219149589538),
    "mixtral_hybridep_tp1ep8_bf16": (4.41397442817688, 7.8396320104598995),
    "deepseek_a2a_tp1ep8_bf16": (6.942623972892761, 10.452603197097778),
    "deepseek_deepep_tp1ep8_bf16": (5.424827194213867, 9.059416055679321),
    "deepseek_hybridep_tp1ep8_bf16": (5.245569634437561, 8.845854425430298),
    "deepseek_a2a_tp1ep8_fp8": (7.413806390762329, 10.08771367073059),
    "deepseek_deepep_tp1ep8_fp8": (5.840974426269531, 8.589135932922364),
    "deepseek_hybridep_tp1ep8_fp8": (5.0010079622268675, 7.715760040283203),
    "mixtral_a2a_tp1ep8_fp8": (3.6756880044937135, 6.719020819664001),
    "mixtral_deepep_tp1ep8_fp8": (4.02881760597229, 6.941707181930542),
    "mixtral_hybridep_tp1ep8_fp8": (3.7378703594207763, 6.641488075256348),
}
PROXY = {"mixtral": ("mixtral-proxy.config.json", 8, 2), "deepseek": ("deepseek-proxy.config.json", 32, 8)}
EP, TOKENS = 8, 4096  # test_cases.py: expert_model_parallel_size=8, seq_length 4096 x micro_batch_size 1
MOE_PHASES = ("router", "dispatch", "experts", "shared_experts", "combine")


def _measured(case: str) -> float:
    forward, backward = BASELINE_MS[case]
    return forward + backward


def _ceiling_profile(tmp_path: Path) -> str:
    """The H100 profile with compute_efficiency 1: GEMMs at the profile's measured large-GEMM ceiling, the rate
    a kernel benchmark runs at (as tests/test_moe11_multistream.py compares TE's grouped GEMM)."""
    text = (Path(__file__).parents[1] / "hardware_profiles" / "h100.toml").read_text()
    ceiling, n = re.subn(r"(\[calibration\.compute_efficiency\]\nvalue = )[0-9.]+", r"\g<1>1.0", text)
    assert n == 1
    path = tmp_path / "h100-ceiling.toml"
    path.write_text(ceiling)
    return str(path)


def _moe_layer_ms(cli, data_dir: Path, proxy: str, hw: str, *flags: str) -> float:
    config, experts, top_k = PROXY[proxy]
    r = forced_balance_imbalance(EP * TOKENS, experts, top_k, EP)
    code, out, err = cli("plan", "-m", str(data_dir / "moe_perf" / config), "--hw", hw, "-n", str(EP),
                         "--ep", str(EP), "--seq", str(TOKENS), "--global-batch", str(EP), "--micro-batch", "1",
                         "--recompute", "none", "--routing-imbalance", f"{r:.6f}", "--json", *flags)
    assert code == 0, err
    plan = json.loads(out)
    phases = sum(p["time_s"] for p in plan["phases"] if p["name"] in MOE_PHASES)
    a2a = sum(c["time_s"] for c in plan["throughput"]["collectives"] if c["name"] == "expert_all_to_all")
    return (phases + a2a) * 1e3  # one layer, one micro-batch: the step's collective time is the layer's


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_the_dispatchers_difference_on_the_deepseek_proxy(cli, data_dir, precision):
    """With 4 local experts the alltoall dispatcher pays the chunk sort (moe11) and per-expert copies that
    DeepEP / HybridEP send once per rank (moe3). Megatron's baselines measure what that difference costs: the
    alltoall layer minus the DeepEP layer and minus the HybridEP layer. btacalc's difference (its flex
    dispatcher stands for both) lies within those two measured differences, widened by 10%."""
    flags = ["--precision", "fp8-blockwise"] if precision == "fp8" else []
    a2a = _measured(f"deepseek_a2a_tp1ep8_{precision}")
    measured = sorted(a2a - _measured(f"deepseek_{b}_tp1ep8_{precision}") for b in ("deepep", "hybridep"))
    # bf16: 17.395 - 14.484 = 2.911 ms, 17.395 - 14.091 = 3.304 ms; fp8: 17.502 - 14.430 = 3.071, - 12.717 = 4.785
    assert measured[0] > 2.5
    predicted = (_moe_layer_ms(cli, data_dir, "deepseek", "h100", *flags)
                 - _moe_layer_ms(cli, data_dir, "deepseek", "h100", "--deepep", *flags))
    assert 0.9 * measured[0] <= predicted <= 1.1 * measured[1]


@pytest.mark.parametrize("case", [c for c in BASELINE_MS if c.endswith("_bf16")])
def test_btacalc_does_not_under_count_a_bf16_moe_layer_with_one_or_four_local_experts(cli, data_dir, tmp_path, case):
    """At the GEMM microbenchmark ceiling btacalc's MoE layer takes 0.95-1.25x the measured layer (the GPU
    terms are not short of what Megatron's layer does at these shapes); with the fitted compute_efficiency
    (end-to-end training runs) it is slower than the layer measured alone."""
    proxy = case.split("_")[0]
    flags = [] if "_a2a_" in case else ["--deepep"]
    measured = _measured(case)
    at_ceiling = _moe_layer_ms(cli, data_dir, proxy, _ceiling_profile(tmp_path), *flags)
    fitted = _moe_layer_ms(cli, data_dir, proxy, "h100", *flags)
    assert 0.95 * measured <= at_ceiling <= 1.25 * measured
    assert fitted > measured


def _measured_speed_ups(proxy: str) -> list[float]:
    """BF16 layer / FP8-blockwise layer of the same proxy and dispatcher, per dispatcher (baseline.json)."""
    return [_measured(f"{proxy}_{d}_tp1ep8_bf16") / _measured(f"{proxy}_{d}_tp1ep8_fp8")
            for d in ("a2a", "deepep", "hybridep")]


@pytest.mark.parametrize("proxy", [
    pytest.param("mixtral", marks=pytest.mark.xfail(strict=True, reason=(
        "docs/precision.md fp8bw: at the blockwise GEMM ceiling btacalc's Mixtral layer speed-up is 1.40 against "
        "1.15-1.18 measured (+15%: 1.36); its FP8 layer, 8.71 ms, is 16-21% faster than the measured 10.38-10.97 ms "
        "while its BF16 layer is within -3% / +1% of the measured one: something beyond the GEMM rate and the casts "
        "(unmodelled, unsourced) slows Megatron's FP8 layer"))),
    "deepseek",
])
def test_the_bf16_over_fp8_blockwise_layer_speed_up_is_within_the_measured_range(cli, data_dir, tmp_path, proxy):
    """fp8bw: the blockwise recipe's GEMMs run at Hopper's block-scaled cuBLASLt rate (kernels.
    fp8_block_gemm_ceiling_fraction, from TransformerEngine's own benchmark; tests/test_fp8bw_blockwise.py) and its
    casts write a rowwise and a columnwise copy in one kernel. The BF16 / FP8-blockwise layer speed-up of NVIDIA's
    baselines (Mixtral proxy 12.087 / 10.395 = 1.163, 12.640 / 10.970 = 1.152, 12.254 / 10.379 = 1.181; DeepSeek
    proxy 17.395 / 17.502 = 0.994, 14.484 / 14.430 = 1.004, 14.091 / 12.717 = 1.108) is a kernel-benchmark ratio, so
    both layers are planned at the GEMM ceiling (compute_efficiency 1: moe12 found the BF16 layer runs there).
    btacalc's speed-up, alltoall and flex dispatchers, lies within the measured range widened by 15%. A check, not
    a fit: the ceiling comes from the kernel benchmark, not from these layers."""
    measured = _measured_speed_ups(proxy)
    assert min(measured) > 0.99 and max(measured) < 1.19
    hw = _ceiling_profile(tmp_path)
    for flags in ([], ["--deepep"]):
        bf16 = _moe_layer_ms(cli, data_dir, proxy, hw, *flags)
        fp8 = _moe_layer_ms(cli, data_dir, proxy, hw, *flags, "--precision", "fp8-blockwise")
        assert 0.85 * min(measured) <= bf16 / fp8 <= 1.15 * max(measured)
