"""tews (issue 21, memory accuracy): the libraries' workspaces a run allocates through PyTorch's caching allocator, as a
function of the run. Each expected value is arithmetic from the cited lines, written out here, not read back:

- TransformerEngine @ d0067d0 `pytorch/cpp_extensions/gemm.py`: the workspace size L40-45, 32 MiB + 1 KiB when the
  major compute capability is >= 9, else 4 MiB (4,194,304 B); `get_cublas_workspace` L48-67, an lru_cache per
  (ub, grouped_gemm): ONE for the plain GEMMs (L67, general_gemm L227), `get_num_cublas_streams()` = 4
  (common/util/multi_stream.cpp L52-55) for grouped GEMMs (L59-65, general_grouped_gemm L415), one of
  `_NUM_MAX_UB_STREAMS` = 3 sizes for userbuffers GEMMs (L37, L53-58);
- PyTorch @ 26a39059 `aten/src/ATen/cuda/CublasHandlePool.cpp`: one workspace per (handle, stream) (L249-251, L269)
  through the caching allocator (L241-242), `4096 * 8 * 1024` on sm90 exactly, else `4096 * 1024 * 2 + 16 * 1024 * 8`
  (L146-150); a handle per thread, the forward's on the main thread and the backward's on the autograd engine's
  device thread: two.
"""

from __future__ import annotations

import json
import math

import pytest

from btacalc.config.execution import BatchLimits, ExecutionRequest, OverlapRequest
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.planning.plan import make_plan

MIB, GIB = 2**20, 2**30
TE_HOPPER = 32 * MIB + 1024  # 33,555,456 B, gemm.py L44
TE_AMPERE = 4_194_304  # gemm.py L45
TORCH_SM90 = 4096 * 8 * 1024  # 33,554,432 B, CublasHandlePool.cpp L150
TORCH_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8  # 8,519,680 B, the same line's ":4096:2:16:8"


def _plan(model: str, hw: str, **request):
    limits = BatchLimits(global_batch=request.pop("global_batch", 8), micro_batch=1)
    return make_plan(resolve_model(model), resolve_hardware(hw),
                     ExecutionRequest(seq_len=request.pop("seq_len", 2048), limits=limits, **request))


def _held(report) -> dict[str, tuple[int, int]]:
    d = report.device_memory
    assert d is not None
    return {w.name: (w.count, w.bytes_each) for w in d.library_workspaces}


@pytest.mark.parametrize("hw, te, torch", [("h100", TE_HOPPER, TORCH_SM90), ("a100-80gb", TE_AMPERE, TORCH_OTHER),
                                           ("b200", TE_HOPPER, TORCH_OTHER), ("gb200", TE_HOPPER, TORCH_OTHER)])
def test_a_dense_run_holds_one_te_workspace_and_torchs_two(hw, te, torch):
    report = _plan("llama-3-8b", hw, devices=8)
    assert _held(report) == {"te_gemm": (1, te), "torch_cublas": (2, torch)}
    d = report.device_memory
    assert d.library_workspace_bytes == te + 2 * torch
    assert d.allocated_bytes == report.memory_bytes["total"] + te + 2 * torch


def test_h100_dense_workspaces_by_hand():
    # 33,555,456 + 2 x 33,554,432 = 100,664,320 B (96 MiB + 1 KiB), where the profiles counted 5 x 33,555,456
    d = _plan("llama-3-8b", "h100", devices=8).device_memory
    assert d.library_workspace_bytes == 100_664_320


def test_an_moe_run_adds_te_s_four_grouped_gemm_stream_workspaces():
    report = _plan("qwen3-30b-a3b", "h100", devices=8)
    assert _held(report) == {"te_gemm": (1, TE_HOPPER), "te_grouped_gemm": (4, TE_HOPPER),
                             "torch_cublas": (2, TORCH_SM90)}
    assert report.device_memory.library_workspace_bytes == 5 * 33_555_456 + 2 * 33_554_432 == 234_886_144


def test_userbuffers_add_one_workspace_of_three_sizes():
    base = dict(devices=8, tensor_parallel=2, sequence_parallel=True)
    off = _plan("llama-3-8b", "h100", **base)
    on = _plan("llama-3-8b", "h100", overlaps=OverlapRequest(tp_comm=True), **base)
    assert _held(on) == {**_held(off), "te_userbuffers": (1, 3 * TE_HOPPER)}
    assert on.device_memory.library_workspace_bytes - off.device_memory.library_workspace_bytes == 100_666_368
    # the usable memory shrinks by the same bytes (Reserves: usable = ... - library workspaces)
    assert off.memory_bytes["usable_capacity"] - on.memory_bytes["usable_capacity"] == 100_666_368
    # TP 1: Megatron has no TP communication to overlap, btacalc drops the overlap and TE takes no userbuffers
    tp1 = _plan("llama-3-8b", "h100", devices=8, tensor_parallel=1, overlaps=OverlapRequest(tp_comm=True))
    assert "te_userbuffers" not in _held(tp1)


def test_eager_pytorch_layers_hold_no_transformer_engine_workspace():
    """llm-foundry's MPT runs eager PyTorch modules (RunOptions.eager_kernels): no TE GEMM, so only torch's two."""
    report = _plan("llama-3-8b", "a100-80gb", devices=8, eager_kernels=True)
    assert _held(report) == {"torch_cublas": (2, TORCH_OTHER)}


def test_h100_usable_bytes_less_the_runs_workspaces():
    """The usable bytes of docs/memory.md, now with the dense run's workspaces: floor((85,520,809,984 - 2 GiB) / 1.05)
    = 79,403,167,939 B, less 100,664,320 B."""
    report = _plan("llama-3-8b", "h100", devices=8)
    assert report.memory_bytes["usable_capacity"] == math.floor((85_520_809_984 - 2 * GIB) / 1.05) - 100_664_320 \
        == 79_302_503_619
    assert report.hardware.usable_memory_bytes == 79_302_503_619


def test_plan_json_and_text_name_each_workspace_and_its_source(cli):
    code, out, err = cli("plan", "-m", "olmoe-1b-7b", "--hw", "h100", "--devices", "8", "--seq", "2048",
                         "--global-batch", "8", "--micro-batch", "1", "--json")
    assert code == 0, err
    rows = json.loads(out)["device_memory"]["library_workspaces"]
    assert [(r["name"], r["count"], r["bytes_each"], r["bytes"]) for r in rows] == [
        ("te_gemm", 1, TE_HOPPER, TE_HOPPER), ("te_grouped_gemm", 4, TE_HOPPER, 4 * TE_HOPPER),
        ("torch_cublas", 2, TORCH_SM90, 2 * TORCH_SM90)]
    assert all("d0067d0da6cb01811b8072a7d304f0e00344ce2b" in r["source"] for r in rows[:2])
    assert "26a39059ec580351411f180816c47e2ef5134ae1" in rows[2]["source"]
    code, out, err = cli("plan", "-m", "olmoe-1b-7b", "--hw", "h100", "--devices", "8", "--seq", "2048",
                         "--global-batch", "8", "--micro-batch", "1")
    assert code == 0, err
    text = " ".join(out.split())
    assert "1 te gemm x 32.001 MiB + 4 te grouped gemm x 32.001 MiB + 2 torch cublas x 32.000 MiB" in text


def test_search_counts_userbuffers_only_on_layouts_that_take_them():
    """plan --search: each candidate's usable bytes are the profile's less its own run's workspaces, so under the TP
    overlap a TP 1 layout (no userbuffers) may use 3 x (32 MiB + 1 KiB) more than a TP 2 one."""
    from dataclasses import replace

    from btacalc.config.resolution import resolve_execution
    from btacalc.planning import search as s

    model, hw = resolve_model("llama-3-8b"), resolve_hardware("h100")
    request = ExecutionRequest(seq_len=2048, devices=8, tensor_parallel=2, sequence_parallel=True,
                               limits=BatchLimits(global_batch=8), overlaps=OverlapRequest(tp_comm=True))
    base = resolve_execution(request, model, hw)
    assert base.layout.userbuffers
    cands = [s._Candidate(replace(base.layout, tensor_parallel=tp, sequence_parallel=tp > 1), 1, "none")
             for tp in (1, 2, 4)]
    usable = s._usable(model, hw, base, cands)
    assert usable[0] - usable[1] == 3 * TE_HOPPER == 100_666_368 and usable[1] == usable[2]
    assert usable[0] == math.floor((85_520_809_984 - 2 * GIB) / 1.05) - 100_664_320


LAUNCH = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
          "--micro-batch-size 4 --global-batch-size 32 --vocab-size 50257 --bf16 --pipeline-model-parallel-size 2 ")
BRIDGE = ("model.num_layers=12 model.hidden_size=512 model.num_attention_heads=8 model.seq_length=1024 "
          "train.micro_batch_size=4 train.global_batch_size=32 model.vocab_size=50257 mixed_precision=bf16_mixed ")


def _launch_plan(cli, tmp_path, impl: str) -> dict:
    launch = tmp_path / f"{impl}.sh"
    launch.write_text(f"torchrun --nproc_per_node 8 pretrain_gpt.py {LAUNCH}--transformer-impl {impl}\n")
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--json")
    assert code == 0, err
    return json.loads(out)


def test_a_local_launch_holds_no_transformer_engine_workspace(cli, tmp_path):
    """--transformer-impl local builds Megatron-Core's own linear layers (torch.matmul, apex's weight-gradient
    kernels: Megatron-LM @ d98e8a64 core/tensor_parallel/layers.py L459, L683, L721-726): no TE GEMM asks for
    get_cublas_workspace, so the run holds PyTorch's two workspaces only, 33,555,456 B fewer than under TE."""
    local, te = _launch_plan(cli, tmp_path, "local"), _launch_plan(cli, tmp_path, "transformer_engine")
    names = [[w["name"] for w in p["device_memory"]["library_workspaces"]] for p in (local, te)]
    assert names == [["torch_cublas"], ["te_gemm", "torch_cublas"]]
    assert te["device_memory"]["library_workspace_bytes"] - local["device_memory"]["library_workspace_bytes"] \
        == 33_555_456
    assert local["inputs"]["transformer_engine"] is False and te["inputs"]["transformer_engine"] is True


def test_a_local_plan_emits_transformer_impl_local_and_reads_back_the_same(cli, tmp_path):
    launch = tmp_path / "local.sh"
    launch.write_text(f"torchrun --nproc_per_node 8 pretrain_gpt.py {LAUNCH}--transformer-impl local\n")
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--emit", "megatron")
    assert code == 0, err
    assert "--transformer-impl local" in out
    again = tmp_path / "again.sh"
    again.write_text(out)
    code, first, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--json")
    code2, second, err2 = cli("plan", "--from-megatron", str(again), "--hw", "h100", "--json")
    assert (code, code2) == (0, 0), err + err2
    a, b = json.loads(first), json.loads(second)
    assert a["device_memory"] == b["device_memory"] and a["inputs"]["transformer_engine"] is False
    te = tmp_path / "te.sh"
    te.write_text(f"torchrun --nproc_per_node 8 pretrain_gpt.py {LAUNCH}\n")
    code, out, err = cli("plan", "--from-megatron", str(te), "--hw", "h100", "--emit", "megatron")
    assert code == 0 and "--transformer-impl" not in out, err


def test_a_bridge_transformer_impl_keeps_transformer_engines_workspace():
    """Megatron-Bridge builds TransformerEngine's layer spec whatever model.transformer_impl says (review22), so its
    run keeps TE's workspace."""
    from btacalc.config.bridge_run import import_bridge

    run = import_bridge(BRIDGE + "model.transformer_impl=local", "overrides", 8)
    assert run.request.transformer_engine is True
