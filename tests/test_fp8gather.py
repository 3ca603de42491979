"""fp8gather: the columnwise copy of an operand TransformerEngine all-gathers along the sequence (docs/precision.md,
"fp8gather").

Source: TransformerEngine @ d0067d0 transformer_engine/pytorch/distributed.py L1011-1080 (_all_gather_fp8: per-tensor
FP8 is cast rowwise only before the gather, "We cannot directly all-gather the transposed FP8 tensor", and the gathered
tensor is transposed where FP8 GEMMs are TN-only), utils.py L658-663 (is_non_tn_fp8_gemm_supported: compute
capability 10.x-11.x and 13+), L1527-1665 (_all_gather_mxfp8: both copies gathered as they are). The gathered
operands: the column-parallel QKV and fc1 inputs and the row-parallel projection and fc2 output gradients
(layernorm_linear.py L226-233, L724-793; linear.py L385-412; module/base.py L1719-1751).

The expected values are arithmetic from that code and from the H100 profile's streaming share (RRZE-HPC gpu-benches'
GH200 cuda-stream: the mean of scale 3174 and triad 3783 GB/s over 4000 GB/s = 0.87; Hopper has no published TE cast
benchmark, so its cast kernels stream at that share: docs/precision.md "castfall") and its 3.35 TB/s HBM3.
"""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout
from btacalc.config.hardware import resolve_hardware
from btacalc.config.precision import recipe
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.precision import cast_rates
from support import resolved

H, A_KV, D_H, A = 6144, 8, 128, 48  # Nemotron-4 15B: hidden, KV groups, head dim, heads (NeMo Nemotron4Config15B)
S, B, TP = 4096, 2, 2  # the dgxc H100 layout: seq 4096, micro-batch 2, TP 2 with sequence parallelism
STREAM = (3174 + 3783) / 2 / 4000  # H100 streaming share
# hoppercast: Hopper's casts at TransformerEngine's measured quantise share (test_fp8bw_blockwise.py derives it)
CAST = round(5 * (1_495_269_376 + 987_758_592) / (20.285e-3 - 16.785e-3) / 4.8e12, 3)


def _nemotron(hw="h100", precision="fp8", tp=TP, sp=True):
    return resolved(load_preset("nemotron4-15b"), hw, Layout(devices=tp, tensor_parallel=tp, sequence_parallel=sp,
                                                              devices_per_node=8),
                    recompute="none", attention="flash", seq_len=S, precision=precision)


def test_the_profile_streams_at_the_gh200_share():
    assert resolve_hardware("h100").memory.achievable_bandwidth_fraction.value == pytest.approx(STREAM, abs=5e-4)


def test_one_nemotron_layer_pays_the_gathered_transposes():
    """Per layer and micro-batch four operands are gathered: the QKV and fc1 inputs and the projection and fc2
    output gradients, each s·b·h/t = 4096·2·6144/2 local elements. Without the gather each would be cast into both
    1-byte copies (read 2 B, write 2 B); TE casts it rowwise only (read 2, write 1) and transposes the gathered
    t·local elements (read 1, write 1). The extra bytes, 4·(4096·2·6144)·2 B − 4·(4096·6144)·1 B = 302 MB (fp8ds's
    figure), at TransformerEngine's measured Hopper cast share (0.739) of 3.35 TB/s."""
    local = S * B * H / TP
    extra_bytes = 4 * (local * (3 - 4) + TP * local * 2)
    assert extra_bytes == 4 * 4096 * 2 * 6144 * 2 - 4 * 4096 * 6144 * 1 == pytest.approx(302e6, rel=2e-3)
    hbm = resolve_hardware("h100").memory.offchip_bandwidth_bytes_per_s.value
    assert hbm == 3.35e12
    extra_s = extra_bytes / (CAST * hbm)
    assert CAST == 0.739
    assert extra_s == pytest.approx(1.220e-4, rel=1e-3)  # 0.122 ms at 0.739 x 3.35 TB/s = 2.48 TB/s
    p = _nemotron()
    part = layer_parts(p, p.evaluate(1, B))[0]
    # the QKV phase: X (gathered) and dQKV (not gathered: column-parallel output, split t ways) at 4 B per element
    qkv_plain = (local + S * B * (A + 2 * A_KV) * D_H / TP) * 4 / (CAST * hbm)
    qkv_gathered = local * (3 - 4 + TP * 2) / (CAST * hbm)
    weights = H * (A + 2 * A_KV) * D_H / TP * 4 / (CAST * hbm)  # once per step; M = 1
    assert part.cast_s["qkv_proj"] == pytest.approx(qkv_plain + qkv_gathered + weights, rel=1e-3)
    v = p.evaluate(1, B)
    gathered = sum(v.layers[0][1].value(name, "sp_gather_cast_elements") for name in ("qkv_proj", "mlp", "attn_out_proj"))
    assert gathered == pytest.approx(4 * local, rel=1e-9)


@pytest.mark.parametrize("case", ["no_sp", "blackwell", "mxfp8", "bf16"])
def test_where_te_does_not_transpose_a_gathered_tensor(case):
    """No gathered transpose: without sequence parallelism (TP all-reduces, nothing is gathered, the local cast
    writes both copies), on Blackwell (non-TN FP8 GEMMs: one rowwise copy, nothing to transpose), under MXFP8
    (both copies cast locally and gathered as they are) and in BF16 (nothing cast). The QKV phase's activation
    casts are then the plain per-element cast of its operands."""
    hw, precision, sp = {"no_sp": ("h100", "fp8", False), "blackwell": ("b200", "fp8", True),
                         "mxfp8": ("b200", "mxfp8", True), "bf16": ("h100", "bf16", True)}[case]
    p = _nemotron(hw, precision, sp=sp)
    v = p.evaluate(1, B)
    x = v.layers[0][1].value("qkv_proj", "sp_gather_cast_elements")
    # the operand TE would gather under SP: the local shard with SP, the whole (replicated) tensor without
    assert x == pytest.approx(S * B * H / (TP if sp else 1), rel=1e-9)
    rates = cast_rates(p)
    if rates is None:
        assert precision == "bf16"
        return
    # nothing gathered (no SP), or nothing more to do per gathered element (Blackwell FP8, MXFP8)
    assert rates.sp_gather_extra_bytes == 0.0


def test_the_recipes_say_what_te_does_after_the_gather():
    """Per-tensor FP8 (delayed, current) below cc 10: one local copy, a transpose reading and writing 1 B per gathered
    element; from 10.0: its single copy and no pass. Block scales (1x128): both copies, the gathered columnwise data
    re-ordered (1 B read + 1 B written). NVFP4: both copies, data and E4M3 scales re-ordered, 2·(0.5 + 1/16) B.
    MXFP8: both copies gathered in place."""
    assert recipe("fp8").sp_gather_pass(9.0) == (1, 2.0)
    assert recipe("fp8-current").sp_gather_pass(9.0) == (1, 2.0)
    assert recipe("fp8").sp_gather_pass(10.0) == (1, 0.0)
    assert recipe("fp8-blockwise").sp_gather_pass(9.0) == (2, 2.0)
    assert recipe("nvfp4").sp_gather_pass(10.0) == (2, pytest.approx(2 * (0.5 + 1 / 16)))
    assert recipe("mxfp8").sp_gather_pass(10.0) == (2, 0.0)
    assert recipe("bf16").sp_gather_pass(9.0) == (0, 0.0)
