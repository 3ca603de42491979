"""Task mpt3: PyTorch's non-reentrant activation checkpoint stops a layer's re-run early (--checkpoint-early-stop).

torch.utils.checkpoint's re-run packs the tensors it rebuilds in order and raises _StopRecomputationError once it has
packed as many as the forward saved (torch/utils/checkpoint.py `_recomputation_hook.pack_hook`; on by default since
pytorch PR 96866, March 2023: torch 2.1 is the first release with it). Autograd saves a matmul's inputs before it runs
the matmul, so in a GeLU/SwiGLU block without dropout the last saved tensors are the MLP's second linear's input and
weight: the re-run ends before that GEMM and the residual add after it. llm-foundry's MPTBlock
(llmfoundry/models/layers/blocks.py @ 5e85bd62d L129-155: norm_1, attn, add, norm_2, ffn, add; ffn.py L117-118
down_proj(act(up_proj(x))); resid_pdrop 0.0) checkpointed with CheckpointImpl.NO_REENTRANT (Composer 0.17.2
dist_strategy.py L609-610; the pretrain yamls L91 activation_checkpointing_reentrant false) is such a block.

The expected FLOPs below are arithmetic from the model's shape (llm-foundry's mpt-70b.yaml: d_model 8192, n_layers 80,
expansion_ratio 4), not btacalc's catalogue."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from btacalc.config.execution import ExecutionRequest
from btacalc.config.resolution import resolve_execution
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.errors import BtacalcError

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "btacalc" / "data" / "measured_runs.json"
ENV = {"PYTHONPATH": str(ROOT), "PATH": ""}


def _plan(model: str, hw: str, devices: int, global_batch: int, micro_batch: int, *extra: str) -> dict:
    args = [sys.executable, "-m", "btacalc", "plan", "--model", model, "--hw", hw, "--devices", str(devices),
            "--seq", "2048", "--global-batch", str(global_batch), "--micro-batch", str(micro_batch),
            "--attention", "flash", "--json", *extra]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


MPT = ("--fsdp", "--fsdp-impl", "torch", "--attention-kernel", "triton-flash", "--recompute", "full")


def test_the_mpt_70b_rerun_skips_each_layers_down_projection():
    # mpt-70b-h100-128: 8 sequences of 2048 tokens per GPU and micro-batch
    full = _plan("mpt-70b", "h100", 128, 1024, 8, *MPT)
    early = _plan("mpt-70b", "h100", 128, 1024, 8, *MPT, "--checkpoint-early-stop")
    h, layers, tokens = 8192, 80, 8 * 2048
    f = 4 * h  # expansion_ratio 4
    down_proj = 2 * tokens * f * h  # one f -> h matmul over the micro-batch's tokens (2mnk)
    assert full["flops_per_step"]["recompute"] - early["flops_per_step"]["recompute"] == layers * down_proj
    assert full["flops_per_step"]["forward"] == early["flops_per_step"]["forward"]
    assert full["flops_per_step"]["backward"] == early["flops_per_step"]["backward"]
    assert early["inputs"]["checkpoint_early_stop"] is True and full["inputs"]["checkpoint_early_stop"] is False
    # the skipped GEMMs are time saved
    assert early["throughput"]["step_time_s"] < full["throughput"]["step_time_s"]


def test_a_swiglu_block_skips_its_down_projection_too():
    spec = resolve_model("llama-3-8b")
    full = _plan("llama-3-8b", "h100", 8, 8, 1, "--recompute", "full")
    early = _plan("llama-3-8b", "h100", 8, 8, 1, "--recompute", "full", "--checkpoint-early-stop")
    down_proj = 2 * 2048 * spec.ffn_size * spec.hidden_size
    assert full["flops_per_step"]["recompute"] - early["flops_per_step"]["recompute"] == spec.num_layers * down_proj


def test_with_dropout_the_mask_is_saved_last_and_nothing_is_skipped():
    assert resolve_model("gpt-1.7b").dropout
    full = _plan("gpt-1.7b", "h100", 8, 8, 1, "--recompute", "full")
    early = _plan("gpt-1.7b", "h100", 8, 8, 1, "--recompute", "full", "--checkpoint-early-stop")
    assert full["flops_per_step"]["recompute"] == early["flops_per_step"]["recompute"]


def test_the_request_is_checked_when_resolved():
    with pytest.raises(BtacalcError, match="checkpoint_early_stop"):
        resolve_execution(ExecutionRequest(devices=8, recompute="none", checkpoint_early_stop=True),
                          resolve_model("mpt-7b"), resolve_hardware("h100"))


def test_the_torch_2_1_checkpointed_mpt_rows_and_only_they_stop_early():
    # the rows' recipes name the torch each ran: 2.1.0 (llm-foundry @ 5e85bd62d setup.py L54) or 1.13.1 (the
    # A100 PURE rows first published at 300cc5c58); torch 1.13 re-runs the whole checkpointed function. torchtitan
    # (2024-04, torch nightlies after 2.1) wraps blocks in PyTorch's non-reentrant checkpoint (parallelize_llama.py
    # L65-80 @ 157a12c5: use_reentrant=False): its full-recompute rows stop early too
    runs = json.loads(RUNS.read_text())["runs"]
    for run in runs:
        recipe = run.get("recipe") or {}
        if run["id"].endswith(("-torchtitan", "-torchtitan-layer-ac")):
            assert bool(recipe.get("checkpoint_early_stop")) == (recipe["recompute"] == "full"), run["id"]
            assert "use_reentrant=False" in recipe["source"], run["id"]
            continue
        if not run["id"].startswith("mpt-"):
            assert not recipe.get("checkpoint_early_stop"), run["id"]
            continue
        torch_2_1 = "torch 2.1" in recipe["source"]
        assert bool(recipe.get("checkpoint_early_stop")) == (torch_2_1 and recipe["recompute"] == "full"), run["id"]
    assert sum(bool((r.get("recipe") or {}).get("checkpoint_early_stop")) for r in runs) == 8 + 4
