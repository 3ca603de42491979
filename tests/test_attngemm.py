"""attngemm (issue 21 acceptance): the attention core's matmuls as report rows of `plan --json`.

Q K^T and P V are shown per device as FlashAttention-2 runs them (Dao 2023, arXiv 2307.08691, §3.1 Algorithm 1,
§3.2: one launch per tile batched over sequences x query heads): Q K^T m = s/CP queries, n = s keys (a window's w),
k = d_head; P V m = s/CP, n = d_v, k = s keys; batch = b·a/TP, and the share of the blocks a causal kernel runs,
nb(nb + 1)/2 of nb² blocks of 128 (§3.1.1). Each expectation below is written from those formulas, not read back from
btacalc's code; the rows time nothing (validate stays byte-identical), so the core's time is checked against them.
"""

from __future__ import annotations

import io
import json
import math

import pytest
from rich.console import Console

from btacalc.catalogue.terms import Phase, load_catalogue
from btacalc.config.attention_kernels import attention_kernel
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.output.tables import plan_renderable
from btacalc.planning.report import PlanReport


def _plan(cli, *args: str) -> dict:
    code, out, err = cli("plan", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def _blocks_run(s: int) -> float:
    """FlashAttention-2 §3.1.1 with B_r = B_c = 128: nb(nb + 1)/2 of nb² blocks (nb = ceil(s/128))."""
    nb = math.ceil(s / 128)
    return nb * (nb + 1) / 2 / nb ** 2


def _kinds(report: dict) -> list[tuple[str, list[dict]]]:
    return [(k["name"], k["phases"]) for k in report.get("layer_kinds") or [{"name": "", "phases": report["phases"]}]]


def _core(phases: list[dict]) -> dict[str, tuple[dict, dict]]:
    """phase name -> (phase row, its one attention-core matmul)."""
    out = {}
    for p in phases:
        core = [g for g in p["gemms"] if g["kernel"] != "gemm"]
        if core:
            assert len(core) == 1, p["name"]
            out[p["name"]] = (p, core[0])
    return out


def _check_shapes(report: dict, *, s: int, cp: int, tp: int, heads: int, d_qk: int, d_v: int, window: int = 0,
                  flash: bool = True) -> int:
    """Each kind's Q K^T and P V rows against the formulas; their FLOPs against the phase's counted forward FLOPs
    (the full s x keys count, btacalc's default). Eager attention (`flash` false) runs every block. Returns the rows
    checked."""
    b = report["plan"]["tile_batch"]
    g = report["plan"]["tiles"]
    checked = 0
    for kind, phases in _kinds(report):
        keys = window if kind.endswith("sliding") else s
        fraction = 1.0 if keys < s or not flash else _blocks_run(s)
        core = _core(phases)
        assert set(core) == {"attn_scores", "attn_pv"}, kind
        for name, (m, n, k) in (("attn_scores", (s / cp, keys, d_qk)), ("attn_pv", (s / cp, d_v, keys))):
            phase, row = core[name]
            assert (row["m"], row["n"], row["k"]) == (m, n, k), (kind, name)
            assert row["batch"] == b * heads / tp and row["launches"] == g and row["groups"] == 1
            assert row["causal_fraction"] == pytest.approx(fraction, rel=1e-12)
            full = 2 * row["m"] * row["n"] * row["k"] * row["batch"] * row["launches"]
            assert full == phase["flops_forward"], (kind, name)
            checked += 1
    return checked


def test_gqa_rows_are_flash_attention_shapes_and_carry_the_phase_flops(cli):
    """Qwen3-30B-A3B (32 query heads, 4 key/value heads, d_h 128) on 16 H100: the kernel is batched over the query
    heads (a key/value head serves 8 of them: neither the shape nor the FLOPs change), 528/1024 of its blocks run."""
    model = load_preset("qwen3-30b-a3b")
    report = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "8", "--zero", "3",
                   "--global-batch", "256", "--micro-batch", "1", "--seq", "4096")
    assert model.num_kv_heads < model.num_heads
    assert _check_shapes(report, s=4096, cp=1, tp=1, heads=model.num_heads, d_qk=model.head_dim,
                         d_v=model.head_dim) == 2
    assert _blocks_run(4096) == 528 / 1024


def test_mla_with_context_and_tensor_parallelism(cli):
    """DeepSeek-V3 (MLA: Q K^T contracts the 192-wide query/key head, P V the 128-wide value head) at TP 2, CP 2:
    each rank runs its s/2 queries against all s keys over the ring, on its 64 heads; the rate is cuDNN's on H100
    at the 2,048 tokens of one kernel call (attention_kernels.toml by_seq_len)."""
    model = load_preset("deepseek-v3")
    report = _plan(cli, "--model", "deepseek-v3", "--hw", "h100", "--devices", "1024", "--ep", "64", "--pp", "16",
                   "--tp", "2", "--etp", "1", "--sequence-parallel", "--cp", "2")
    assert model.mla is not None
    d_qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
    assert (d_qk, model.mla.v_head_dim) == (192, 128)
    assert _check_shapes(report, s=4096, cp=2, tp=2, heads=model.num_heads, d_qk=d_qk, d_v=model.mla.v_head_dim) == 4
    rate = attention_kernel("default").fraction_of_peak(9.0, 4096 // 2, "bf16")
    for _, phases in _kinds(report):
        for _, row in _core(phases).values():
            assert row["kernel"] == "fused_attention" and row["binding"] == "measured"
            assert row["efficiency"] == pytest.approx(rate, rel=1e-12)
            assert row["backward_efficiency"] == pytest.approx(rate, rel=1e-12)


def test_sliding_window_layers_run_their_band(cli):
    """GPT-OSS-120B: its sliding layers' kernel visits the 128 keys of the band (every block run: the catalogue
    counts s x w), its full layers all s keys with the causal block share; both at d_h 64, 64 heads."""
    model = load_preset("gpt-oss-120b")
    report = _plan(cli, "--model", "gpt-oss-120b", "--hw", "b200", "--devices", "64", "--ep", "64")
    kinds = [k for k, _ in _kinds(report)]
    assert any(k.endswith("sliding") for k in kinds) and any(k.endswith("full") for k in kinds)
    assert _check_shapes(report, s=4096, cp=1, tp=1, heads=model.num_heads, d_qk=model.head_dim, d_v=model.head_dim,
                         window=model.sliding_window) == 2 * len(kinds)


def test_the_core_time_is_the_rows_kernel_flops_at_their_rate(cli):
    """The rows time nothing, but they say what the core's time rests on: each core phase's time is its kernel FLOPs
    (forward, backward and the recomputed scores, x the causal block share) over efficiency x datasheet peak. On H100
    the rate is cuDNN's benchmarked share (0.467 at 4k); on an A100 FlashAttention-2's own A100 figure (Dao 2023,
    Figure 4(d): 173 TFLOP/s at 4k on the half square, x 33/32 on the blocks run, over 312: 0.572, a100attn); the
    Triton kernel, which has no Ampere rate, the large-GEMM rate (gemm_ceiling_fraction x compute_efficiency),
    compute-bound at this shape."""
    for hw, args in (("h100", ("--devices", "8", "--tp", "8", "--sequence-parallel")),
                     ("a100-80gb", ("--devices", "8", "--tp", "2")),
                     ("a100-80gb", ("--devices", "8", "--tp", "2", "--attention-kernel", "triton-flash"))):
        profile = resolve_hardware(hw)
        report = _plan(cli, "--model", "llama-3-8b", "--hw", hw, "--seq", "4096", *args)
        core = _core(report["phases"])
        for phase, row in core.values():
            kernel = (phase["flops_forward"] + phase["flops_backward"] + phase["flops_recompute"]) * row["causal_fraction"]
            peak = profile.chip.peak_flops_per_s.value
            assert phase["time_s"] == pytest.approx(kernel / (row["efficiency"] * peak), rel=1e-9)
            if hw == "h100":
                assert row["efficiency"] == pytest.approx(0.467, rel=1e-12) and row["binding"] == "measured"
            elif "triton-flash" not in args:
                fa2_4k = 173e12 * 33 / 32 / 312e12
                assert row["efficiency"] == pytest.approx(fa2_4k, abs=6e-4) and row["binding"] == "measured"
            else:
                ceiling = profile.kernels.gemm_ceiling_fraction.value * profile.calibration.compute_efficiency.value
                assert row["efficiency"] == pytest.approx(ceiling, rel=1e-12) and row["binding"] == "compute"


def test_causal_count_keeps_the_kernels_shape(cli):
    """--causal changes the FLOP convention (s(s+1)/2 counted entries), not the kernel: the rows keep the full
    s x s shape and the blocks it runs, and their kernel FLOPs over the counted ones are the time factor the core
    is timed with (blocks run / entries counted)."""
    args = ("--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "8", "--sequence-parallel",
            "--seq", "4096")
    full = _core(_plan(cli, *args)["phases"])
    causal = _core(_plan(cli, *args, "--causal")["phases"])
    s = 4096
    for name in ("attn_scores", "attn_pv"):
        (pf, rf), (pc, rc) = full[name], causal[name]
        assert {k: rf[k] for k in ("m", "n", "k", "batch", "causal_fraction")} == \
            {k: rc[k] for k in ("m", "n", "k", "batch", "causal_fraction")}
        assert pc["flops_forward"] == pf["flops_forward"] * (s + 1) / (2 * s)
        assert pc["time_s"] == pytest.approx(pf["time_s"], rel=1e-12)


def test_eager_attention_rows_run_the_whole_matrix(cli):
    """Eager attention computes every score and masks it: causal_fraction 1, timed as the phase's roofline."""
    report = _plan(cli, "--model", "llama-3-8b", "--hw", "a100-80gb", "--devices", "8", "--tp", "2", "--seq", "2048",
                   "--attention", "eager")
    model = load_preset("llama-3-8b")
    assert _check_shapes(report, s=2048, cp=1, tp=2, heads=model.num_heads, d_qk=model.head_dim,
                         d_v=model.head_dim, flash=False) == 2
    profile = resolve_hardware("a100-80gb")
    ceiling = profile.kernels.gemm_ceiling_fraction.value * profile.calibration.compute_efficiency.value
    for _, row in _core(report["phases"]).values():
        assert row["kernel"] == "eager_attention" and row["causal_fraction"] == 1.0
        assert row["binding"] == "compute" and row["efficiency"] == pytest.approx(ceiling, rel=1e-12)


def test_a_wafer_plan_shows_no_gemm_rows(cli):
    """The wafer model times no GPU kernels: no phase of a wafer plan carries GEMM rows, though the catalogue's
    attention core has its matmuls for a full-attention layer (the attention core's FLOPs are counted all the same)."""
    catalogue = {p.name: p for p in load_catalogue()}
    for name in ("attn_scores", "attn_pv"):
        assert [g.name for g in catalogue[name].gemm if g.attention_core and g.when == {"sliding_window": False}]
    report = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "wse3")
    rows = [p for _, phases in _kinds(report) for p in phases] + report["outside_layers"]
    assert all(p["gemms"] == [] for p in rows)
    assert next(p for p in report["phases"] if p["name"] == "attn_scores")["flops_forward"] > 0


def _phase(core: bool, attention_core: bool) -> dict:
    return {"name": "x", "order": 1, "group": "attention", "scope": "layer", "batch": "tile", "summary": "x",
            "core": core, "gemm": [{"name": "Q K^T", "m": "s", "n": "s", "k": "d_h", "source": "test source",
                                    "attention_core": attention_core}]}


@pytest.mark.parametrize("core, attention_core", [(False, True), (True, False)])
def test_an_attention_core_gemm_belongs_to_a_core_phase(core, attention_core):
    """An attention-core GEMM outside a core phase would never be shown (nor timed); a plain GEMM in a core phase
    would be timed twice (the fused kernel and the shape model): the catalogue refuses both."""
    with pytest.raises(ValueError, match="attention_core"):
        Phase.model_validate(_phase(core, attention_core))
    Phase.model_validate(_phase(core, core))


# ---- every collective of plan --json: the operation, its buffer and bus factor, latency x calls ----------------


def _collectives(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["throughput"]["collectives"]}


def test_tensor_parallel_all_reduce_and_the_data_parallel_all_reduce(cli):
    """Without sequence parallelism each tensor-parallel call all-reduces one tile's activation (s·b·h 16-bit
    values): bus bytes 2(n-1)/n of it (NCCL-tests PERFORMANCE.md). ZeRO-0 all-reduces the gradients (fp32) of the
    rank's parameters over DP, the same factor, in the stage's buckets: calls x buffer = parameters x 4 B."""
    h, s, tp, devices = load_preset("llama-3-8b").hidden_size, 4096, 2, 16
    report = _plan(cli, "--model", "llama-3-8b", "--hw", "h100", "--devices", str(devices), "--tp", str(tp),
                   "--no-sequence-parallel", "--zero", "0", "--seq", str(s), "--tiles", "1", "--recompute", "full")
    rows = _collectives(report)
    tp_row = rows["tensor_parallel"]
    b = report["plan"]["tile_batch"]
    assert tp_row["collective"] == "all_reduce" and tp_row["ranks"] == tp
    assert tp_row["bus_factor"] == pytest.approx(2 * (tp - 1) / tp, rel=1e-12)
    assert tp_row["buffer_bytes"] == pytest.approx(s * b * h * 2, rel=1e-12)
    assert tp_row["message_bytes"] == pytest.approx(tp_row["bus_factor"] * tp_row["buffer_bytes"], rel=1e-12)
    dp = devices // tp
    grads = rows["gradient_reduce_dense"]
    params = sum(r["params"] for r in report["state_sharding"] if r["component"] == "gradients")
    assert grads["collective"] == "all_reduce" and grads["ranks"] == dp
    assert grads["bus_factor"] == pytest.approx(2 * (dp - 1) / dp, rel=1e-12)
    assert grads["calls"] * grads["buffer_bytes"] == pytest.approx(params * 4, rel=1e-12)
    for row in rows.values():
        assert row["algorithm"] and row["message_bytes"] > 0 and 0 < row["efficiency"] <= 1 and row["latency_s"] > 0


def test_sequence_parallel_context_ring_all_to_all_pipeline_and_zero1(cli):
    """Qwen3-30B-A3B at TP 2 (sequence parallel), CP 2, EP 8, PP 2, ZeRO-1 on 32 H100: the TP row gathers and
    scatters the rank's s/CP x h activation ((n-1)/n); the CP ring and the pipeline send their bytes once (bus factor
    1) and each call costs the link's latency plus its bytes at the link's bus rate, so time = calls x (latency +
    bytes / (line rate x bus efficiency)) (the profile's [system] and [collectives]); the expert all-to-all sends
    (EP-1)/EP of what the rank exchanges; ZeRO-1 reduce-scatters the fp32 gradients and all-gathers the 16-bit
    weights over DP, (n-1)/n each."""
    h, s, tp, cp, pp = 2048, 8192, 2, 2, 2
    report = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "32", "--ep", "8", "--tp", str(tp),
                   "--sequence-parallel", "--cp", str(cp), "--pp", str(pp), "--zero", "1", "--global-batch", "256",
                   "--micro-batch", "1", "--seq", str(s))
    assert load_preset("qwen3-30b-a3b").hidden_size == h
    rows = _collectives(report)
    assert set(rows) >= {"tensor_parallel", "context_parallel", "expert_all_to_all", "pipeline_p2p",
                         "gradient_reduce_dense", "param_gather_dense"}
    b = report["plan"]["tile_batch"]
    row = rows["tensor_parallel"]
    assert row["collective"] == "all_gather+reduce_scatter" and row["bus_factor"] == pytest.approx((tp - 1) / tp)
    assert row["buffer_bytes"] == pytest.approx(s / cp * b * h * 2, rel=1e-12)
    profile = resolve_hardware("h100")
    links = {"nvlink": (profile.system.scaleup_bandwidth_bytes_per_s.value,
                        profile.collectives.scaleup_bus_efficiency.value, profile.collectives.scaleup_latency_s.value),
             "network": (profile.system.scaleout_bandwidth_bytes_per_s.value,
                         profile.collectives.scaleout_bus_efficiency.value, profile.collectives.scaleout_latency_s.value)}
    for name in ("context_parallel", "pipeline_p2p"):
        row = rows[name]
        line, e, alpha = links[row["link"]]
        assert row["collective"] == "send_recv" and row["bus_factor"] == 1.0
        assert row["buffer_bytes"] == row["message_bytes"] and row["latency_s"] == alpha
        assert row["time_s"] == pytest.approx(row["calls"] * (alpha + row["message_bytes"] / (line * e)), rel=1e-9)
        assert row["efficiency"] == pytest.approx(row["message_bytes"] / (line * row["time_s"] / row["calls"]),
                                                  rel=1e-9)
    pp_row = rows["pipeline_p2p"]
    assert pp_row["message_bytes"] == pytest.approx(s / cp * b * h * 2 / tp, rel=1e-12)  # sequence-parallel boundary
    assert pp_row["calls"] == 2 * report["plan"]["micro_batches"]
    a2a = rows["expert_all_to_all"]
    assert a2a["collective"] == "all_to_all" and a2a["bus_factor"] == pytest.approx(7 / 8, rel=1e-12)
    dp = 32 // (tp * pp)  # the dense part's DP·CP group
    held = []  # the critical stage's parameters each moves (fp32 gradients, 16-bit weights)
    for name, op, per_param in (("gradient_reduce_dense", "reduce_scatter", 4), ("param_gather_dense", "all_gather", 2)):
        row = rows[name]
        assert row["collective"] == op and row["ranks"] == dp
        assert row["bus_factor"] == pytest.approx((dp - 1) / dp, rel=1e-12)
        held.append(row["calls"] * row["buffer_bytes"] / per_param)
    assert held[0] == pytest.approx(held[1], rel=1e-12)


def test_zero3_gathers_and_scatters_per_micro_batch(cli):
    """ZeRO-3 all-gathers the weights twice (forward, backward) and reduce-scatters the gradients once per
    micro-batch: one row per part, named for both operations, factor (n-1)/n."""
    report = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "8", "--zero", "3",
                   "--global-batch", "256", "--micro-batch", "1", "--seq", "4096")
    rows = _collectives(report)
    for name in ("zero_per_micro_batch_dense", "zero_per_micro_batch_expert"):
        row = rows[name]
        n = row["ranks"]
        assert row["collective"] == "all_gather+reduce_scatter"
        assert row["bus_factor"] == pytest.approx((n - 1) / n, rel=1e-12)


def _printed(report: dict) -> str:
    """The rich plan of a JSON report at 120 columns (a console of its own: the CLI's is made once per process)."""
    console = Console(width=120, file=io.StringIO(), color_system=None)
    console.print(plan_renderable(PlanReport.model_validate(report)))
    return console.file.getvalue()


def test_plan_prints_one_line_per_matmul_on_a_gpu_and_none_on_a_wafer(cli):
    """The rich plan shows the matmul rows compactly: the attention core's with its batch (32 = b x a heads) and
    its share of blocks (528/1024 = 52%); a wafer plan prints no such table."""
    out = _printed(_plan(cli, "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "8", "--zero",
                         "3", "--global-batch", "256", "--micro-batch", "1", "--seq", "4096"))
    assert "Matmuls per device" in out
    lines = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
             for line in out.splitlines() if line.count("│") == 8}
    assert lines["attn_scores"][:4] == ["Q K^T", "4096 x 4096 x 128", "32", f"{100 * 528 / 1024:.0f}%"]
    assert lines["attn_pv"][:4] == ["P V", "4096 x 128 x 4096", "32", "52%"]
    assert lines["qkv_proj"][:4] == ["W_qkv", "4096 x 5120 x 2048", "", ""]
    out = _printed(_plan(cli, "--model", "qwen3-30b-a3b", "--hw", "wse3"))
    assert "Decoder" in out or "decoder" in out
    assert "Matmuls per device" not in out and "Q K^T" not in out


@pytest.mark.parametrize("etp", [1, 2])
def test_expert_tensor_parallel_gather_is_its_own_row(cli, etp):
    """Mixtral 8x7B at TP 2, EP 8 on 16 H100 (full recompute, so that ETP 1 fits too): the expert all-to-all exchanges `buffer` bytes per call; with ETP 2
    each rank then all-gathers (forward) and reduce-scatters (backward) what it received with its t_e - 1 peer, so
    that row moves buffer x (t_e - 1) bytes per call, its NCCL buffer is the t_e ranks' copies (t_e x buffer, bus
    factor (t_e - 1)/t_e), over t_e ranks, once per all-to-all. The two rows are the step's all-to-all time
    (communication_s.all_to_all) with the alltoall dispatcher's count all-gathers (`moe_token_counts`, tests/
    test_count_gather.py): the expert row alone carried both before (review: the ETP time hid in it)."""
    report = _plan(cli, "--model", "mixtral-8x7b", "--hw", "h100", "--devices", "16", "--tp", "2", "--ep", "8",
                   "--etp", str(etp), "--recompute", "full")
    rows = _collectives(report)
    a2a = rows["expert_all_to_all"]
    total = report["throughput"]["communication_s"]["all_to_all"] - rows["moe_token_counts"]["time_s"]
    if etp == 1:
        assert "expert_tensor_parallel" not in rows
        assert a2a["time_s"] == pytest.approx(total, rel=1e-12)
        return
    row = rows["expert_tensor_parallel"]
    assert row["ranks"] == etp and row["collective"] == "all_gather+reduce_scatter" and row["link"] == "nvlink"
    assert row["calls"] == a2a["calls"]
    assert row["message_bytes"] == pytest.approx(a2a["buffer_bytes"] * (etp - 1), rel=1e-12)
    assert row["buffer_bytes"] == pytest.approx(a2a["buffer_bytes"] * etp, rel=1e-12)
    assert row["bus_factor"] == pytest.approx((etp - 1) / etp, rel=1e-12)
    assert row["time_s"] > 0 and a2a["time_s"] + row["time_s"] == pytest.approx(total, rel=1e-12)


def test_expert_tensor_parallel_kind_has_one_source(cli, monkeypatch):
    """hostile24: the row's collective kind was written in timing.py beside the time's in collectives.py, so a change
    to one would time the step with one factor and report the row's NCCL buffer with another. With the one source set
    to another factor (3: no collective's, so NCCL's tuning model times it as a ring, as the all-gather) the row's
    buffer follows it (bus bytes per call / (kind x (t_e - 1)/t_e)) and so does the time: the two rows (with the count
    all-gathers') still add up to the step's all-to-all time."""
    from btacalc.catalogue.constants import constants
    from btacalc.model.gpu import collectives

    args = ("--model", "mixtral-8x7b", "--hw", "h100", "--devices", "16", "--tp", "2", "--ep", "8", "--etp", "2",
            "--recompute", "full")
    before = _collectives(_plan(cli, *args))["expert_tensor_parallel"]
    kind = 3 * constants().collectives.all_gather
    monkeypatch.setattr(collectives, "expert_tensor_parallel_kind", lambda: kind)
    report = _plan(cli, *args)
    rows = _collectives(report)
    row = rows["expert_tensor_parallel"]
    assert row["buffer_bytes"] == pytest.approx(row["message_bytes"] / (kind * (2 - 1) / 2), rel=1e-12)
    assert row["buffer_bytes"] == pytest.approx(before["buffer_bytes"] / kind, rel=1e-12)
    assert row["time_s"] > before["time_s"]  # the time takes the same kind: three times the bus bytes
    total = report["throughput"]["communication_s"]["all_to_all"] - rows["moe_token_counts"]["time_s"]
    assert rows["expert_all_to_all"]["time_s"] + row["time_s"] == pytest.approx(total, rel=1e-12)
