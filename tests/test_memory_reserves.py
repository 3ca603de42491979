"""Issue 20, memory as the driver, PyTorch and Megatron count it. Each test is its derivation: the
expected value is arithmetic from the cited source, written out here, not read back from btacalc.

- capacity: nvidia-smi's total in MiB x 2^20 (thundergolfer.com/blog/nvidia-gpu-memory-capacity);
- reserves (hardware_profiles/*.toml [reserves]): CUDA context 1 GiB and communicator buffers 1 GiB
  (estimates), allocator fragmentation 5% (estimate); the library workspaces are the run's (tests/test_tews.py
  derives them): a dense TransformerEngine run on sm90 holds TE's one cuBLAS workspace, 32 MiB + 1 KiB (TE @ d0067d0
  pytorch/cpp_extensions/gemm.py L40-L67), and PyTorch's two of 32 MiB (CublasHandlePool.cpp @ 26a39059 L146-150);
- the logits Megatron's vocab-parallel cross-entropy keeps: fp32, 4 bytes x (s/CP) x b x V_pad / TP
  (Megatron-LM @ d98e8a64 core/tensor_parallel/cross_entropy.py L25, L181), plus the 16-bit logits
  beside them (2 x (s/CP) x b x V_pad / TP);
- the vocabulary Megatron pads to a multiple of 128 x TP (training/vocab_utils.py L58-L59).
"""

from __future__ import annotations

import json
import math

import pytest

from btacalc.config.execution import BatchLimits, ExecutionRequest
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.problem import padded_vocab
from btacalc.planning.measured import load_runs, validate_measured
from btacalc.planning.plan import make_plan

MIB, GIB = 2**20, 2**30


@pytest.mark.parametrize("name, mib", [("h100", 81_559), ("a100-80gb", 81_920), ("a100-40gb", 40_960),
                                       ("h200", 143_771), ("b200", 183_359), ("gb200", 189_471),
                                       ("h100-96gb", 97_871)])  # (an estimate: the profile's note)
def test_capacity_is_what_the_driver_reports(name, mib):
    assert resolve_hardware(name).memory_capacity_bytes == mib * MIB


def test_h100_usable_bytes_are_the_capacity_less_each_named_reserve():
    hw = resolve_hardware("h100")
    capacity = 81_559 * MIB  # 85,520,809,984 B
    context, communicators = 1 * GIB, 1 * GIB
    workspaces = (32 * MIB + 1024) + 2 * 32 * MIB  # 100,664,320 B: TE's GEMM workspace + PyTorch's two (dense run)
    # reserved = allocated x 1.05 must fit beside the context and the communicators
    allocatable = (85_520_809_984 - 1_073_741_824 - 1_073_741_824) / 1.05  # 79,403,167,939.05 B
    assert capacity - context - communicators == 83_373_326_336
    usable = hw.usable_capacity(workspaces)
    assert usable == math.floor(allocatable) - workspaces == 79_302_503_619
    res = hw.reserves
    assert res is not None
    tensors = 50 * 10**9
    assert res.allocated_bytes(tensors, workspaces) == 50_100_664_320
    assert res.reserved_bytes(tensors, workspaces) == math.ceil(50_100_664_320 * 1.05) == 52_605_697_536
    assert res.device_bytes(tensors, workspaces) == 52_605_697_536 + 2 * GIB
    # the largest tensors that fit leave the device's total within the capacity, one byte more does not
    assert res.device_bytes(usable, workspaces) <= capacity < res.device_bytes(usable + 2, workspaces)


def test_plan_reports_allocated_and_reserved_beside_the_total():
    hw = resolve_hardware("h100")
    report = make_plan(resolve_model("llama-3-8b"), hw, ExecutionRequest(
        seq_len=4096, devices=8, limits=BatchLimits(global_batch=8, micro_batch=1)))
    d, total = report.device_memory, report.memory_bytes["total"]
    assert d is not None
    assert d.allocated_bytes == total + 100_664_320
    assert d.reserved_bytes == math.ceil((total + 100_664_320) * 1.05)
    assert d.capacity_bytes == 85_520_809_984 and d.device_bytes == d.reserved_bytes + 2 * GIB


@pytest.mark.parametrize("cp", [1, 2, 4, 8])
def test_logits_per_context_parallel_rank(cp):
    """Llama-3-8B at s = 131,072: V = 128,256 is already a multiple of 128 (TP 1), so each CP rank's
    fp32 softmax of one sequence is 4 x (131,072 / CP) x 128,256 bytes: 62.6 GiB without CP (the
    whole sequence, issue 20's over-prediction), 7.8 GiB at CP 8."""
    report = make_plan(resolve_model("llama-3-8b"), resolve_hardware("h100"), ExecutionRequest(
        seq_len=131_072, devices=8, context_parallel=cp, recompute="full",
        limits=BatchLimits(global_batch=8 // cp, micro_batch=1)))
    loss = next(row for row in report.outside_layers if row.name == "loss")
    lm_head = next(row for row in report.outside_layers if row.name == "lm_head")
    fp32 = 4 * (131_072 // cp) * 128_256
    assert loss.stored_activation_bytes == fp32
    assert loss.transient_bytes == lm_head.transient_bytes == 2 * (131_072 // cp) * 128_256  # 16-bit logits
    if cp == 1:
        assert fp32 / GIB == pytest.approx(62.625, abs=1e-3)


def test_vocabulary_padded_to_a_multiple_of_128_tp():
    # 131,073 = 1024 x 128 + 1: TP 1 pads to 1025 x 128; TP 4 to a multiple of 512: 257 x 512
    assert padded_vocab(131_073, 1) == 131_200
    assert padded_vocab(131_073, 4) == 131_584
    assert padded_vocab(128_256, 8) == 128_256 + 768  # 128,256 = 125.25 x 1,024 -> 126 x 1,024
    report = make_plan(resolve_model("gpt-7b-megatron-ci"), resolve_hardware("h100"), ExecutionRequest(
        seq_len=8192, devices=8, tensor_parallel=4, limits=BatchLimits(global_batch=8, micro_batch=2)))
    lm_head = next(row for row in report.outside_layers if row.name == "lm_head")
    assert lm_head.params == 131_584 * 4096 // 4  # the output layer's shard of the padded vocabulary
    assert report.model.vocab_size == 131_073  # the model as published


def test_measured_memory_error_by_hand(tmp_path):
    """A run measuring 50 GiB on its last rank: predicted allocated = the last stage's tensors + the dense run's
    library workspaces (TE's one, 32 MiB + 1 KiB, and PyTorch's two of 32 MiB on sm90), error = predicted / 50 GiB
    - 1."""
    run = {"id": "by-hand", "source": "test", "model": "gpt-7b-megatron-ci", "hw": "h100", "devices": 8,
           "precision": "bf16", "seq": 8192, "global_batch": 8, "micro_batch": 1, "tp": 1, "pp": 4, "vp": 8,
           "zero": 1, "sequence_parallel": False, "recompute": "none", "role": "check",
           "measured": {"peak_alloc_gib": 50.0, "peak_rank": "last"},
           "recipe": {"source": "a test recipe", "attention": "flash", "grad_reduce_in_bf16": False}}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [run]}))
    (result,) = validate_measured(path).runs
    report = make_plan(resolve_model("gpt-7b-megatron-ci"), resolve_hardware("h100"), ExecutionRequest(
        seq_len=8192, devices=8, pipeline_parallel=4, virtual_pipeline=8, zero_stage=1, sequence_parallel=False,
        recompute="none", attention="flash", gradient_bytes=4, limits=BatchLimits(global_batch=8, micro_batch=1)))
    last = report.memory_stages[-1].total
    predicted_gib = (last + 33_555_456 + 2 * 33_554_432) / GIB
    assert result.predicted.peak_alloc_gib == pytest.approx(predicted_gib)
    assert result.memory_error == pytest.approx(predicted_gib / 50.0 - 1)
    assert "loss" in result.defaulted  # the plan took Megatron's cross-entropy by default and says so


def test_every_shipped_memory_run_fits_and_meets_the_gate():
    """Issue 20's gate on the shipped memory check runs: each within ±5%, the family mean within ±2%
    (what this branch reaches: mean 1.2%, max 2.6%), except the runs that state a memory known gap (task logs9:
    one public log, outside by a persistent allocation btacalc does not count; docs/runs.md 'logs9'; and, since
    3db218f, Qwen3-30B-A3B's HybridEP rank 0, -5.8%: review19 found this test failing on main, as it allowed one)."""
    from test_lpfit import EXCLUDED  # the runs stated not expressible, each with its reason (runs36: two H200 rows)

    report = validate_measured()
    memory = [r for r in report.runs if (r.measured.peak_alloc_gib or r.measured.peak_reserved_gib)
              and r.id not in EXCLUDED]
    assert len(memory) >= 8 and all(r.expressible for r in memory), [r.reason for r in memory]
    gaps = [r for r in memory if r.memory_known_gap]
    # memci: seven of Megatron-LM's CI memory goldens on toy models (docs/memory.md "memci"), each saying what was checked
    # (tews: with the library workspaces derived per run, the four CP 2 rows and the FP8 current-scaling row came
    # inside ±5% and lost their gaps; the fused cross-entropy and the MoE op-fuser rows keep theirs)
    # (the lead: three --transformer-impl local GeLU-expert rows sit 76-112 MiB under, as every local row does; on
    # sub-GiB peaks that is beyond 5%)
    # (cenative: the fused cross-entropy row reads -0.9% with its compiled backward's fp32 copy and lost its gap)
    # (mpubuf: with Megatron-Core's global buffer the non-ETP local GeLU row reads -4.0% and lost its gap)
    # (hostile34 D4: the op-fuser row's SwiGLU experts were 4h wide where Megatron-LM gives them int(8h/3/64)x64; at
    # 1,344 it reads -1.3% and lost its gap)
    memci = {"moe-toy-gelu-megatron-ci-h100-8-tp2-pp2-ep2-etp2-te-4experts2parallel-dev",
             "moe-toy-gelu-megatron-ci-h100-8-tp2-pp2-ep2-etp2-te-4experts2parallel-dp-last-dev"}
    assert {r.id for r in gaps} == {"llama-3.2-1b-h100-8-bf16-mbridge-verdimrc", "qwen3-30b-a3b-h100-16-389"} | memci
    assert all(abs(r.memory_error) > 0.05 for r in gaps)  # type: ignore[arg-type]
    errors = [abs(r.memory_error) for r in memory if r.role == "check" and not r.memory_known_gap]  # type: ignore[arg-type]
    assert len(errors) == len(memory) - len(gaps) >= 7 and max(errors) <= 0.05 and sum(errors) / len(errors) <= 0.02
    assert report.gate.ok, report.gate.failures
    assert {r.id for r in load_runs() if r.measured.peak_alloc_gib or r.measured.peak_reserved_gib} - set(EXCLUDED) \
        == {r.id for r in memory}


def test_a_gpu_run_that_does_not_say_takes_megatrons_defaults_and_lists_them(tmp_path):
    """No recompute field and no recipe: Megatron recomputes nothing (no --recompute-granularity); its
    loss is the vocab-parallel cross-entropy (btacalc's GPU default); validate names both."""
    from btacalc.planning.measured import MeasuredRun, express

    run = {"id": "silent", "source": "test", "model": "gpt-7b-megatron-ci", "hw": "h100", "devices": 8,
           "precision": "bf16", "seq": 8192, "global_batch": 8, "micro_batch": 2, "tp": 4, "role": "check",
           "measured": {"peak_alloc_gib": 60.0}}
    request, _ = express(MeasuredRun.model_validate(run))
    assert request is not None and request.recompute == "none"
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [run]}))
    (result,) = validate_measured(path).runs
    assert result.defaulted["recompute"].startswith("none: Megatron-LM's default")
    assert result.defaulted["loss"].startswith("vocab_parallel: Megatron-Core's cross-entropy")
    stated = {**run, "recompute": "full"}
    request, _ = express(MeasuredRun.model_validate(stated))
    assert request is not None and request.recompute == "full"


@pytest.mark.parametrize("measured, fragment", [
    ({"peak_alloc_gib": -3}, "measured.peak_alloc_gib"),
    ({"peak_reserved_gib": "80 GiB"}, "measured.peak_reserved_gib"),
    ({"peak_alloc_gib": 50.0, "peak_rank": "first"}, "measured.peak_rank"),
])
def test_bad_memory_measurements_are_one_line_errors(tmp_path, measured, fragment):
    from btacalc.errors import BtacalcError

    run = {"id": "bad", "source": "x", "model": "llama-3-8b", "hw": "h100", "devices": 8, "precision": "bf16",
           "seq": 4096, "global_batch": 8, "role": "check", "measured": measured}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [run]}))
    with pytest.raises(BtacalcError, match=fragment) as info:
        load_runs(path)
    assert "\n" not in str(info.value)


def test_an_moe_run_that_does_not_name_its_dispatcher_says_what_btacalc_assumed():
    runs = {r.id: r for r in validate_measured().runs}
    assert runs["qwen3-30b-a3b-h100-16-388"].defaulted["moe_token_dispatcher_type"].startswith("alltoall: ")
    assert "moe_token_dispatcher_type" not in runs["deepseek-proxy-megatron-ci-h100-8-tp2-pp2-vp4-ep4-dev"].defaulted
    assert "moe_token_dispatcher_type" not in runs["gpt-7b-megatron-ci-h100-8-tp4-dev"].defaulted  # dense


@pytest.mark.parametrize("cp", [1, 4])
def test_a_fused_loss_chunk_is_one_sequence_of_this_ranks_tokens(cp):
    """--loss fused materialises one sequence's logits at a time; a CP rank holds s/CP of its tokens:
    4 x (131,072 / CP) x 128,256 bytes of fp32 logits (62.6 GiB at CP 1, 15.7 GiB at CP 4)."""
    report = make_plan(resolve_model("llama-3-8b"), resolve_hardware("h100"), ExecutionRequest(
        seq_len=131_072, devices=8, context_parallel=cp, recompute="full", loss="fused",
        limits=BatchLimits(global_batch=8 // cp, micro_batch=1)))
    lm_head = next(row for row in report.outside_layers if row.name == "lm_head")
    assert lm_head.transient_bytes == 4 * (131_072 // cp) * 128_256
