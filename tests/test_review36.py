"""review36: a new user's pass over the README (seventeenth session). docs/story.md "review36" says what each test
pins and what happened before."""

from __future__ import annotations

import json

import pytest


def _plan(cli, *args):
    code, out, err = cli("plan", *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("args", [
    ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16"),
    ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "64", "--pp", "4", "--vp", "4", "--ep", "8"),
])
def test_the_dense_reference_runs_the_plans_global_batch(cli, args):
    """"vs dense" compared the dense model at 2x the plan's sequences per optimizer step on 16 H100 (G·b 2 at the
    plan's M = 64: 16 x 64 x 2 = 2,048 against 1,024) and 12x on the README's Kimi-K2 layout: BatchLimits.free kept
    M and freed the micro-batch. With the global batch fixed (the GPU default, 4,194,304 tokens of 4,096 = 1,024
    sequences) the dense reference now runs the same N: DP x M x G·b = N, its M the solver's."""
    r = _plan(cli, *args)
    th, plan, par = r["throughput"], r["plan"], r["parallelism"]
    n = plan["step_batch"]
    assert n * r["inputs"]["seq_len"] == 4096 * 1024
    dp = par["data_parallel"]
    assert dp * th["dense_micro_batches"] * th["dense_global_batch"] == n


def test_the_dense_row_names_its_micro_batches(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    r = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16")
    th = r["throughput"]
    code, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16")
    assert code == 0
    assert f"dense equivalent, G·b={th['dense_global_batch']}, M={th['dense_micro_batches']}" in out


def test_a_wafer_plan_without_a_global_batch_keeps_the_dense_reference_free(cli):
    """On a wafer no global batch is fixed: the dense reference's shape stays the solver's, at the plan's M (1)."""
    th = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "wse3")["throughput"]
    assert th["dense_micro_batches"] == 1 and th["dense_global_batch"] > 1


def test_grad_bytes_help_says_two_or_four_and_what_it_means_on_a_wafer(cli, monkeypatch):
    """The help read [2<=x<=4], where 3 is refused; on a wafer --grad-bytes is the gradients MemoryX holds (they
    leave the wafer in 16 bits, model/wafer/cluster.py step_boundary), which the help did not say."""
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli("plan", "--help")
    flat = " ".join(out.replace("│", " ").split())  # the help's option table wraps each description in its box
    assert code == 0 and "2<=x<=4" not in flat and "Bytes per gradient, 2 or 4" in flat
    assert "on a wafer, the gradients MemoryX holds" in flat
    code, _, err = cli("plan", "--grad-bytes", "3")
    assert code == 2 and err.count("\n") == 1 and "must be 2" in err


def test_the_emitted_notes_end_in_a_whole_sentence(cli):
    """`give your model's` ended the router-loss note (and the numerics one) as if cut off. (freshuser22: the
    qwen3-30b-a3b preset now states its router_aux_loss_coef, which the launch carries; the note is for a model whose
    source gives none, as the Megatron CI's toy MoE.)"""
    code, out, _ = cli("plan", "--model", "moe-toy-megatron-ci", "--hw", "h100", "--devices", "8", "--ep", "4",
                       "--emit", "megatron")
    assert code == 0
    notes = [line for line in out.splitlines() if line.startswith("#")]
    assert not any(line.rstrip().endswith("model's") for line in notes)
    assert any("give your model's coefficient with that flag" in line for line in notes)


def test_a_pytorch_fsdp_plan_holds_no_transformer_engine_workspace(cli):
    """review36 #8: a torchtitan / llm-foundry run's linears are torch's nn.Linear, so its workspaces are PyTorch's
    two cuBLAS ones only (CublasHandlePool.cpp L146-150: 4096 x 8 KiB on Hopper), not TransformerEngine's 32 MiB + 1 KiB
    (gemm.py L40-45); a Megatron plan of the same model keeps TE's."""
    def rows(*extra: str) -> dict:
        code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100-96gb", "--devices", "8", *extra, "--json")
        assert code in (0, 1), err
        return {w["name"]: w["count"] * w["bytes_each"] for w in json.loads(out)["device_memory"]["library_workspaces"]}
    assert rows("--fsdp", "--fsdp-impl", "fsdp2", "--loss", "torch_fp32") == {"torch_cublas": 2 * 4096 * 8 * 1024}
    assert rows() == {"te_gemm": 32 * 2**20 + 1024, "torch_cublas": 2 * 4096 * 8 * 1024}
    # its low-precision linears are TransformerEngine's (llm-foundry's fc_type te), whose FP8 weight copies it holds
    assert rows("--fsdp", "--fsdp-impl", "fsdp2", "--loss", "torch_fp32", "--precision", "fp8") == {
        "te_gemm": 32 * 2**20 + 1024, "torch_cublas": 2 * 4096 * 8 * 1024}


def test_overlap_streaming_is_null_where_no_weights_stream(cli):
    """review36 #8: `throughput.overlap_streaming: true` appeared on GPU plans, which stream no weights; it is null
    there and on a resident wafer plan, and the option's value on a weight-streaming wafer plan."""
    def overlap(*args: str):
        code, out, err = cli("plan", *args, "--json")
        assert code in (0, 1), err
        return json.loads(out)["throughput"]["overlap_streaming"]
    assert overlap("--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2") is None
    assert overlap("--model", "qwen3-30b-a3b", "--hw", "wse3") is True
    assert overlap("--model", "qwen3-30b-a3b", "--hw", "wse3", "--no-overlap") is False
    assert overlap("--model", "gpt2-small", "--hw", "wse3", "--memory-model", "resident") is None
