"""Grouped expert GEMMs as TransformerEngine's GroupedLinear runs them: one cuBLASLt GEMM per local expert,
expert i on compute stream i mod 4 (issue 21, branch moe11; docs/clock.md "moe11").

Code (TE @ v2.9; the same path from v2.2 to v2.13): GroupedLinear calls `general_grouped_gemm`
(transformer_engine/pytorch/cpp_extensions/gemm.py L157-225) -> `te_general_grouped_gemm` ->
`nvte_multi_tensor_gemm` (pytorch/csrc/extensions/gemm.cpp L545-550) -> `multi_stream_cublas_gemm`
(common/gemm/cublaslt_gemm.cu L924-977: `nvte_cublas_gemm_v2` per GEMM on `get_compute_stream(i % num_streams)`),
with `num_compute_streams = 4` (common/util/multi_stream.cpp L53). The CUTLASS grouped kernel is taken only on
sm90 with NVTE_USE_CUTLASS_GROUPED_GEMM=1 in BF16 (cublaslt_gemm.cu L1006-1080).

So at most 4 experts' GEMMs share the SMs at a time: btacalc runs the G = E/EP local experts as G/4 rounds of
min(G, 4) GEMMs sharing the waves (model/gpu/costs.py `_gemm_operands`), the best the four streams can do.

Benchmark (TransformerEngine PR 2045, https://github.com/NVIDIA/TransformerEngine/pull/2045, H100, BF16,
`general_grouped_gemm` with TE 2.7 and CUDA 12.9, shape (g, m, n, k), TFLOP/s = 2 g m n k / t):

    (8, 4096, 768, 2048)    multi-stream cuBLAS 627.903    CUTLASS grouped (one launch) 650.574
    (16, 2048, 768, 2048)   multi-stream cuBLAS 553.945    CUTLASS grouped (one launch) 636.927

Compared through the shape model at the H100 profile's microbenchmark rate (datasheet x measured ceiling, no
compute_efficiency: a kernel benchmark, as tests/test_clock.py's MAMF rows).
"""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.model.gpu.gemm import GemmDevice, gemm_time
from btacalc.model.problem import make_problem

PR2045_TE27 = {  # (g, m, n, k) -> (multi-stream cuBLAS, CUTLASS one launch), TFLOP/s
    (8, 4096, 768, 2048): (627.903e12, 650.574e12),
    (16, 2048, 768, 2048): (553.945e12, 636.927e12),
}
STREAMS = 4  # TE common/util/multi_stream.cpp L53


def _h100_microbenchmark() -> GemmDevice:
    p = resolve_hardware("h100")
    assert p.kernels is not None
    return GemmDevice(p.chip.peak_flops_per_s.value * p.kernels.gemm_ceiling_fraction.value,
                      p.memory.offchip_bandwidth_bytes_per_s.value, int(p.chip.cores.value), p.kernels.gemm_tiles,
                      p.kernels.gemm_wave_overhead_s.value, p.kernels.gemm_overlap_exponent.value)


def _rate(g, m, n, k, time_s):
    return 2 * g * m * n * k / time_s


@pytest.mark.parametrize("shape", sorted(PR2045_TE27))
def test_the_published_multi_stream_rate_lies_between_four_streams_and_one(shape):
    """Four experts at a time sharing the waves is the best the four streams can do, the experts one after
    another the worst; TE 2.7's measured multi-stream rate lies between the two. The one-launch model (what
    btacalc assumed before) reproduces the CUTLASS one-launch kernel within 5% instead."""
    g, m, n, k = shape
    multi, cutlass = PR2045_TE27[shape]
    dev = _h100_microbenchmark()
    rounds = _rate(g, m, n, k, g / STREAMS * gemm_time(m, n, k, 2, dev, groups=STREAMS).time_s)
    serial = _rate(g, m, n, k, g * gemm_time(m, n, k, 2, dev).time_s)
    one_launch = _rate(g, m, n, k, gemm_time(m, n, k, 2, dev, groups=g).time_s)
    assert serial < multi < rounds
    assert rounds == pytest.approx(multi, rel=0.13)
    assert one_launch == pytest.approx(cutlass, rel=0.05)
    assert one_launch / multi >= rounds / multi  # four streams never beat one launch of every expert


def test_sixteen_experts_on_four_streams_by_hand():
    """(16, 2048, 768, 2048) on the H100 profile: one round is 4 experts of 2,048 x 768 outputs. With 128 x 128
    tiles that is 4 x 16 x 6 = 384 tiles on 132 SMs, 2.909 of 3 waves (the 128 x 256 tiles give 4 x 48 = 192,
    1.45 of 2 waves, worse); compute = 2·4·2048·768·2048 / (989e12 x 0.9) / (2.909/3) + 3 x 1.5 us; traffic
    4 x (2048·2048 + 2048·768 + 2048·768) x 2 B over 3.35 TB/s; the smooth roofline with p = 1.6; four rounds.
    The one-launch model puts all 16 x 96 = 1,536 tiles in 12 waves (11.64 of 12) and is 5% faster."""
    dev = _h100_microbenchmark()
    assert dev.sms == 132 and dev.wave_overhead_s == pytest.approx(1.5e-6)
    m, n, k = 2048, 768, 2048
    peak = 989e12 * resolve_hardware("h100").kernels.gemm_ceiling_fraction.value
    compute = 2 * 4 * m * n * k / peak / ((384 / 132) / 3) + 3 * 1.5e-6
    memory = 4 * (m * k + k * n + m * n) * 2 / 3.35e12
    p = dev.overlap_exponent
    one_round = (compute ** p + memory ** p) ** (1 / p)
    assert gemm_time(m, n, k, 2, dev, groups=4).time_s == pytest.approx(one_round, rel=1e-9)
    assert _rate(16, m, n, k, 4 * one_round) == pytest.approx(624.6e12, rel=1e-3)
    one_launch = gemm_time(m, n, k, 2, dev, groups=16).time_s
    assert one_launch < 4 * one_round


def _expert_rows(model, **layout):
    from btacalc.model.gpu.costs import layer_parts

    run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4)
    p = make_problem(load_preset(model), resolve_hardware("h100"), run, Layout(**layout))
    kinds = [part.gemms["experts"] for part in layer_parts(p, p.evaluate(1, 1)) if "experts" in part.gemms]
    return p, {g.name: g for g in kinds[0]}


@pytest.mark.parametrize("model,devices,ep,local", [
    ("qwen3-30b-a3b", 8, 8, 16),   # 128 experts / 8
    ("qwen3-30b-a3b", 16, 16, 8),  # 128 / 16
    ("qwen3-30b-a3b", 64, 64, 2),  # 128 / 64: fewer experts than streams
    ("mixtral-8x7b", 8, 8, 1),     # 8 / 8: one expert, one GEMM
])
def test_a_devices_experts_run_in_rounds_of_four(model, devices, ep, local):
    """groups = min(E/EP, 4) experts share the waves; launches = E/EP / groups rounds per pass."""
    _, rows = _expert_rows(model, devices=devices, expert_parallel=ep)
    for row in rows.values():
        assert row.groups == min(local, STREAMS)
        assert row.groups * row.launches == pytest.approx(local)


def test_the_expert_phase_runs_at_one_rounds_efficiency():
    """Qwen3-30B-A3B at EP 8 on an H100 (16 local experts of 2,048 rows): the W_gate_up row's forward efficiency
    is that of one round, gemm_time(2048, 1536, 2048, groups = 4) against the BF16 achieved peak, times the
    peak's share of the datasheet (four rounds take four times as long and do four times the work)."""
    from btacalc.model.gpu.rates import rates_of

    p, rows = _expert_rows("qwen3-30b-a3b", devices=8, expert_parallel=8)
    r = rates_of(p)
    up = rows["W_gate_up"]
    assert (up.m, up.n, up.k) == (pytest.approx(2048), pytest.approx(1536), pytest.approx(2048))
    one_round = gemm_time(2048, 1536, 2048, r.beta, r.device, groups=4, output_bytes=r.output_bytes[0])
    assert up.efficiency == pytest.approx(one_round.efficiency * r.peak_share, rel=1e-12)
    assert (up.groups, up.launches) == (4, 4)


# --- the alltoall dispatcher's second permutation (formulas/moe.toml dispatch / combine, symbol x_s) -------------

def _moe_bytes(model, hw="h100", **layout):
    run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4)
    p = make_problem(load_preset(model), resolve_hardware(hw), run, Layout(**layout))
    ev = p.evaluate(1, 1)
    _, pv = ev.layers[0]
    return p, {name: pv.value(name, "bytes_moved") for name in ("dispatch", "combine")}


def test_the_alltoall_dispatcher_sorts_the_received_copies_by_local_expert():
    """Megatron's alltoall dispatcher (token_dispatcher.py @ d98e8a64 L757-789, L803-823) sorts the copies it
    received by local expert after the dispatch all-to-all and puts them back before the combine one, each a read
    and a write of the k·T copies of h elements. Qwen3-30B-A3B at EP 8 (16 local experts), one sequence of 4,096
    tokens per rank, BF16: 2 x 2 B x 8 x 4,096 x 2,048 = 268,435,456 B more in each of dispatch and combine than
    with DeepEP / HybridEP (whose kernels write each token to its expert's rows: no sort)."""
    p, alltoall = _moe_bytes("qwen3-30b-a3b", devices=8, expert_parallel=8)
    q, flex = _moe_bytes("qwen3-30b-a3b", devices=8, expert_parallel=8, deepep=True)
    assert p.expert_chunk_sorts() == 1 and q.expert_chunk_sorts() == 0
    sort = 2 * 2 * 8 * 4096 * 2048
    assert sort == 268_435_456
    for phase in ("dispatch", "combine"):
        assert float(alltoall[phase] - flex[phase]) == pytest.approx(sort)


@pytest.mark.parametrize("model,devices,ep", [
    ("mixtral-8x7b", 8, 8),    # 8 experts on 8 ranks: one local expert, nothing to sort
    ("qwen3-30b-a3b", 1, 1),   # no expert parallelism: the permutation alone orders the copies
])
def test_no_sort_with_one_local_expert_or_without_expert_parallelism(model, devices, ep):
    p, _ = _moe_bytes(model, devices=devices, expert_parallel=ep)
    assert p.expert_chunk_sorts() == 0
