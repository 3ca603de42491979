"""An MoE launch without --moe-grouped-gemm (Megatron-LM's default: off) runs its experts as Megatron-Core's
SequentialMLP, one linear pair per local expert (Megatron-LM @ d98e8a64 core/models/backends.py L133-142,
models/gpt/moe_module_specs.py), so no TransformerEngine grouped GEMM asks for its four stream workspaces
(TransformerEngine @ d0067d0 pytorch/cpp_extensions/gemm.py L59-65: get_num_cublas_streams() = 4,
common/util/multi_stream.cpp L52-55; general_grouped_gemm L415). The expected bytes are that arithmetic:
4 x (32 MiB + 1 KiB) = 134,221,824 B on a device of major compute capability 9 (gemm.py L40-45)."""

from __future__ import annotations

import json

from btacalc.config.bridge_run import import_bridge

TE_HOPPER = 32 * 2**20 + 1024  # gemm.py L44
LAUNCH = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 512 --num-attention-heads 8 "
          "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 32 "
          "--vocab-size 50257 --bf16 --swiglu --disable-bias-linear --num-experts 4 --moe-router-topk 1 --moe-router-pre-softmax "
          "--expert-model-parallel-size 2 ")
BRIDGE = ("model.num_layers=4 model.hidden_size=512 model.num_attention_heads=8 model.seq_length=1024 "
          "train.micro_batch_size=4 train.global_batch_size=32 model.vocab_size=50257 mixed_precision=bf16_mixed "
          "model.gated_linear_unit=true model.add_bias_linear=false model.num_moe_experts=4 model.moe_router_topk=1 model.moe_router_pre_softmax=true "
          "model.expert_model_parallel_size=2 ")


def _plan(cli, tmp_path, extra: str, *args: str) -> tuple[int, str, str]:
    launch = tmp_path / "launch.sh"
    launch.write_text(LAUNCH + extra + "\n")
    return cli("plan", "--from-megatron", str(launch), "--hw", "h100", *args)


def _workspaces(cli, tmp_path, extra: str) -> dict:
    code, out, err = _plan(cli, tmp_path, extra, "--json")
    assert code == 0, err
    return json.loads(out)


def test_sequential_experts_hold_no_grouped_gemm_workspace(cli, tmp_path):
    grouped, sequential = _workspaces(cli, tmp_path, "--moe-grouped-gemm"), _workspaces(cli, tmp_path, "")
    names = [[w["name"] for w in p["device_memory"]["library_workspaces"]] for p in (grouped, sequential)]
    assert names == [["te_gemm", "te_grouped_gemm", "torch_cublas"], ["te_gemm", "torch_cublas"]]
    gap = grouped["device_memory"]["library_workspace_bytes"] - sequential["device_memory"]["library_workspace_bytes"]
    assert gap == 4 * TE_HOPPER == 134_221_824
    assert (grouped["inputs"]["expert_grouped_gemm"], sequential["inputs"]["expert_grouped_gemm"]) == (True, False)
    # the same tensors; the usable memory differs by the workspaces alone
    a, b = dict(grouped["memory_bytes"]), dict(sequential["memory_bytes"])
    assert b.pop("usable_capacity") - a.pop("usable_capacity") == 4 * TE_HOPPER
    assert a == b


def test_sequential_experts_are_noted_and_the_flag_is_read(cli, tmp_path):
    code, out, err = _plan(cli, tmp_path, "")
    assert code == 0, err
    assert "SequentialMLP" in out
    code, out, err = _plan(cli, tmp_path, "--moe-grouped-gemm")
    assert code == 0, err
    assert "SequentialMLP" not in out


def test_the_emitted_launch_keeps_what_was_read(cli, tmp_path):
    for extra, grouped in (("", False), ("--moe-grouped-gemm", True)):
        code, out, err = _plan(cli, tmp_path, extra, "--emit", "megatron")
        assert code == 0, err
        assert ("--moe-grouped-gemm" in out) is grouped
        again = tmp_path / "again.sh"
        again.write_text(out)
        code, back, err = cli("plan", "--from-megatron", str(again), "--hw", "h100", "--json")
        assert code == 0, err
        assert json.loads(back)["inputs"]["expert_grouped_gemm"] is grouped


def test_a_dense_launchs_flag_has_no_experts_to_change(cli, tmp_path):
    launch = tmp_path / "dense.sh"
    launch.write_text(LAUNCH.split("--num-experts")[0] + "--moe-grouped-gemm\n")
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--json")
    assert code == 0, err
    names = [w["name"] for w in json.loads(out)["device_memory"]["library_workspaces"]]
    assert names == ["te_gemm", "torch_cublas"]


def test_a_bridge_file_takes_the_moe_bridges_grouped_gemm_unless_it_says_otherwise():
    """Megatron-Bridge's MoE model bridges set moe_grouped_gemm (qwen3_moe_bridge.py L63, deepseek_v3_bridge.py L65
    @ 067f987df); a file that turns it off is read as SequentialMLP."""
    assert import_bridge(BRIDGE, "overrides", 8).request.expert_grouped_gemm is True
    off = import_bridge(BRIDGE + "model.moe_grouped_gemm=false", "overrides", 8)
    assert off.request.expert_grouped_gemm is False


def test_the_emitted_bridge_overrides_keep_what_was_read(cli, tmp_path):
    # review23: a SequentialMLP plan's --emit bridge left model.moe_grouped_gemm out, which a Bridge file reads as on
    # (the MoE bridges' value): read back, the plan had grouped GEMMs and their four workspaces
    for extra, grouped in (("", False), ("--moe-grouped-gemm", True)):
        code, out, err = _plan(cli, tmp_path, extra, "--emit", "bridge")
        assert code == 0, err
        again = tmp_path / "again.txt"
        again.write_text(out)
        code, back, err = cli("plan", "--from-bridge", str(again), "--hw", "h100", "--devices", "8", "--json")
        assert code == 0, err
        assert json.loads(back)["inputs"]["expert_grouped_gemm"] is grouped
