"""mut31: tests for mutants of btacalc/model/gpu/fixed.py and btacalc/model/gpu/nccl.py that the suite let survive.
Each expected value is arithmetic from the cited source or from the module's documented contract, not the tool's
own output (docs: briefs/mut31.md lists the mutants each test kills)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.model.gpu import fixed


def _host_problem(**kernel_fields):
    """A stand-in problem whose only hardware section host_time reads is [kernels] (the h100 profile's, with
    `kernel_fields` replaced; kernels=None: a profile without the section)."""
    k = resolve_hardware("h100").kernels
    if "kernels" in kernel_fields:
        k = kernel_fields.pop("kernels")
    elif kernel_fields:
        k = k.model_copy(update=kernel_fields)
    return SimpleNamespace(hardware=SimpleNamespace(kernels=k))


def test_host_time_is_zero_without_a_kernels_section():
    """fixed.host_time's contract (its docstring, Kernels' description in config/hardware.py): a profile without
    [kernels] has no host issue time at all, so however many kernels, expert GEMMs, module calls and glue ops a
    micro-batch issues, the host time is 0 s (and launch_time = max(0, 0 - GPU time) = 0)."""
    p = _host_problem(kernels=None)
    assert fixed.host_time(p, 1000, 50, 20, 300) == 0.0
    assert fixed.launch_time(fixed.host_time(p, 1000), 1e-3) == 0.0


def test_host_time_without_module_or_glue_costs_counts_launches_only():
    """Kernels.module_host_s / eager_op_host_s: "None: not counted". With both absent (and no
    expert_gemm_host_s: each expert GEMM one plain launch), 10 kernels + 4 expert GEMMs + 5 module calls + 7 glue
    ops cost (10 + 4) launches x the h100 profile's launch_overhead_s (4 us): 56 us, nothing for modules or glue."""
    p = _host_problem(module_host_s=None, eager_op_host_s=None, expert_gemm_host_s=None)
    launch = resolve_hardware("h100").kernels.launch_overhead_s.value
    assert launch == pytest.approx(4e-6)
    assert fixed.host_time(p, 10, 4, 5, 7) == pytest.approx(14 * 4e-6)
    # each absence on its own: the other's cost still counts (module 111 us, eager op 3.8 us: the h100 profile)
    only_glue = _host_problem(module_host_s=None)
    assert fixed.host_time(only_glue, 0, 0, 5, 7) == pytest.approx(7 * 3.8e-6)
    only_modules = _host_problem(eager_op_host_s=None)
    assert fixed.host_time(only_modules, 0, 0, 5, 7) == pytest.approx(5 * 111e-6)


# Llama 3 8B (Meta's config: hidden 4096, 8 KV heads of 128 = 1024, FFN 14,336, 32 layers, vocabulary 128,256)
H, KV, F, L, V = 4096, 1024, 14336, 32, 128_256


def test_fsdp2_copies_at_tp_2_are_of_the_device_shard(cli):
    """FSDP2 x TP 2 (torchtitan 2-D; tests/test_fsdp2_tp.py has the derivation at TP 8): each device copies out its
    TP shard of every gathered unit, not the whole model's. TP 2: the linears split 2 ways, the two RMSNorm weights
    of a block and the final norm whole, the embedding and output split 2 ways over the vocabulary (128,256 is
    already a multiple of 128 x 2 = 256: no padding). Per micro-batch: blocks 0..L-2 gathered twice, the last block
    and the root once, each copied out at 2 + 2 B (bf16 read and write); every device parameter chunk-cat into the
    reduce-scatter input at 2 + 4 B (bf16 read, fp32 written); at the profile's streaming HBM bandwidth."""
    tp = 2
    block = (H * H + 2 * H * KV + H * H + 3 * H * F) // tp + 2 * H
    root = 2 * V * H // tp + H
    p_dev = L * block + root
    gathered = (L - 1) * 2 * block + block + root
    copy_bytes = gathered * (2 + 2) + p_dev * (2 + 4)
    hbm = resolve_hardware("h100-96gb").memory.streaming_bandwidth_bytes_per_s()
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100-96gb", "--devices", "16", "--tp", str(tp),
                         "--seq", "8192", "--global-batch", "8", "--micro-batch", "1", "--fsdp", "--fsdp-impl",
                         "fsdp2", "--recompute", "full", "--json")
    assert code == 0, err
    plan = json.loads(out)
    th = plan["throughput"]
    m = plan["parallelism"]["micro_batches"]
    assert th["phase_share"]["fsdp2_copies"] * th["step_time_s"] == pytest.approx(m * copy_bytes / hbm, rel=1e-9)

