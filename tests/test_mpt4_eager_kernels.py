"""Task mpt4: the element-wise kernels eager PyTorch launches in llm-foundry's MPT block (--eager-kernels).

llm-foundry @ 5e85bd62d runs the block as plain torch modules (layers/blocks.py L129-155; attention.py L555-563 and
L586-590 nn.Linear with bias, configuration_mpt.py L57 no_bias False; L606-618 one fused Wqkv split into q, k, v;
norm.py L39-53 LPLayerNorm; ffn.py L98-117), with the Triton FlashAttention wrapper of flash_attn_triton.py
(L661 an fp32 dq_accum, L485-491 zeroed by the autotuner's pre_hook, L720 copied into dq). Against the
Megatron/TransformerEngine kernels btacalc counts, its backward moves, per token and layer (beta = 2 bytes):

    bias gradients of Wqkv, out_proj, down_proj     beta (3h + h + h)     (up_proj's is the bias-GeLU term already)
    cat of dq, dk, dv into dQKV                     2 beta 3h
    dq_accum zeroed (4 B) and copied (4 B + beta)   (8 + beta) h
    LayerNorm's weight/bias pass, 2 norms           2 beta h each, of which beta h more than the phase counts

The expected values below are that arithmetic on the model's shape (llm-foundry's mpt-13b.yaml: d_model 5120,
n_layers 40) over the H100's streaming bandwidth (3.35 TB/s datasheet x 0.870, RRZE-HPC gpu-stream), not btacalc's
catalogue; tools/mpt_block_ops.py's aten count is checked against the same per-token figures."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from btacalc.vocabulary import FEATURES
from tests.loading import load_script

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "btacalc" / "data" / "measured_runs.json"
ENV = {"PYTHONPATH": str(ROOT), "PATH": ""}
H100_STREAM = 3.35e12 * 0.870
BETA = 2
MPT = ("--fsdp", "--fsdp-impl", "torch", "--attention", "flash", "--recompute", "none")


def _plan(*extra: str) -> dict:
    # mpt-13b-h100-64: micro-batch 2 x 2048 tokens
    args = [sys.executable, "-m", "btacalc", "plan", "--model", "mpt-13b", "--hw", "h100", "--devices", "64",
            "--seq", "2048", "--global-batch", "128", "--micro-batch", "2", "--json", *MPT, *extra]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def _phase_s(plan: dict) -> dict[str, float]:
    return {p["name"]: p["time_s"] for p in plan["phases"]}


H, TOKENS = 5120, 2 * 2048


def test_one_mpt_13b_layer_by_hand():
    fused = _phase_s(_plan("--attention-kernel", "triton-flash"))
    eager = _phase_s(_plan("--attention-kernel", "triton-flash", "--eager-kernels"))
    per_token = {
        "qkv_proj": BETA * 3 * H + 2 * BETA * 3 * H,  # QKV bias gradient + the dQKV cat (dq_accum: below)
        "attn_out_proj": BETA * H,  # out_proj bias gradient
        "mlp": BETA * H,  # down_proj bias gradient
        "input_norm": BETA * H,  # LayerNorm: 5 beta h in eager PyTorch where 4 beta h were counted
        "post_attn_norm": BETA * H,
    }
    for name, nbytes in per_token.items():
        assert eager[name] - fused[name] == pytest.approx(nbytes * TOKENS / H100_STREAM, rel=1e-9), name
    for name in set(fused) - set(per_token):
        assert eager[name] == fused[name], name
    layer = sum(eager.values()) - sum(fused.values())
    assert layer == pytest.approx((36 - 10) * H * TOKENS / H100_STREAM, rel=1e-9)  # 36 h with dq_accum


def test_the_triton_wrappers_fp32_dq_buffer_goes_with_the_kernel():
    default = _phase_s(_plan())
    triton = _phase_s(_plan("--attention-kernel", "triton-flash"))
    dq_accum = (4 + 4 + BETA) * H  # zero_ writes 4 B; copy_ reads 4 B, writes beta
    assert triton["qkv_proj"] - default["qkv_proj"] == pytest.approx(dq_accum * TOKENS / H100_STREAM, rel=1e-9)


def test_the_feature_lists_every_attention_kernel():
    kernels = tomllib.loads((ROOT / "btacalc" / "data" / "attention_kernels.toml").read_text())["kernel"]
    assert set(FEATURES["attention_kernel"]) == set(kernels)


def test_the_block_count_gives_the_catalogues_bytes():
    pytest.importorskip("torch")  # the tool builds the block in torch (the `measure` extra)
    tool = load_script("tools/mpt_block_ops.py")
    h, tokens = 64, 32
    table = tool.count(h, tokens)
    th = h * tokens
    assert table[("backward", "cat")] == [1, 2 * BETA * 3 * th]
    assert table[("backward", "zero_")] == [1, 4 * th]
    assert table[("backward", "copy_")] == [1, (4 + BETA) * th]
    # four bias gradients: read (3h + h + 4h + h) per token, write the 9h biases
    assert table[("backward", "sum")] == [4, BETA * 9 * th + BETA * 9 * h]
    # no dropout kernel at resid_pdrop 0, and the forward has nothing Megatron's fused path lacks
    assert {name for stage, name in table if stage == "forward"} == {"native_layer_norm", "addmm", "gelu", "add"}


def test_the_llm_foundry_rows_and_only_they_run_eager_kernels():
    # and torchtitan's April 2024 rows, whose configs leave torch.compile off (train_configs/*.toml @ 157a12c5)
    runs = json.loads(RUNS.read_text())["runs"]
    eager = {r["id"] for r in runs if (r.get("recipe") or {}).get("eager_kernels")}
    assert eager == {r["id"] for r in runs if r["id"].endswith(("-llmfoundry", "-torchtitan", "-torchtitan-layer-ac",
                                                                      "-torchtitan-op-ac", "-torchtitan-op-ac-memory"))}
    assert all("compile = false" in r["recipe"]["source"] for r in runs if "-torchtitan" in r["id"]
               and r["id"] in eager)
    # task runs36: the Trainy H200 rows ran --training.compile (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md
    # L31 @ b5bcd76c), the only torchtitan rows with compiled kernels
    compiled = {r["id"] for r in runs if "-torchtitan" in r["id"] and r["id"] not in eager}
    assert compiled == {f"llama-3.1-8b-h200-{n}-fp8-current-torchtitan-trainy-op-ac" for n in (32, 64)}
    assert all("--training.compile" in r["recipe"]["source"] for r in runs if r["id"] in compiled)
    assert len(eager) == 26 + 5 + 3 + 2
