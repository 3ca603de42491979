"""A run's own TransformerEngine userbuffers table (recipe `tp_overlap_cfg`, Layout.tp_overlap_cfg; task mlpv31,
docs/clock.md "mlpv31"), checked against the MLPerf GPT-3 175B configs it was read from and the cost derivation of
model/gpu/tp_overlap.py (TE's comm_gemm_overlap code, docs/clock.md "tpov1").

The tables, typed from the yaml files (mlcommons/training_results_v3.1 @ d06288b2 NVIDIA/benchmarks/gpt3/
implementations/pytorch/conf/tp_overlap/h100tp4pp8mbs1.yaml; v4.0 @ 6fe95437 .../nemo/conf/tp_overlap/h100tp4mbs2.yaml
and h100tp4mbs1.yaml; v4.1 @ b87b9e39 .../eos_n64_ngc24.09_nemo/conf/tp_overlap/h100tp4mbs2.yaml), fields the yaml
leaves out as the TE of the container reads them (v3.1: TE @ 09ba8427 base.py L188-192, num_sm 16, set_sm_margin 0;
v4.0: TE v1.6rc1 base.py L197-200, a pipeline's num_splits 4), and the configs' environment (v4.0 at 1,344 / 1,452
nodes: FC2_FPROP_METHOD=pipeline, FC2_FPROP_SM=4)."""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout, Overlaps, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.config.tp_overlap import UbOverride, UbTable, ub_overlaps, ub_table
from btacalc.errors import BtacalcError
from btacalc.model.gpu.collectives import tensor_parallel_time
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.tp_overlap import layer_overlap_s, overlap_cost
from btacalc.model.problem import make_problem
from btacalc.planning.measured import device_family, express, load_runs

H100_SMS = 132  # hardware_profiles/h100.toml chip.cores (H100 SXM5: 132 SMs)
RING, PIPE, BULK = "ring_exchange", "pipeline", "bulk"
GPT3 = resolve_model("gpt3-175b")

# GEMM: (method, num_sm, num_splits, set_sm_margin), as each yaml (and the TE that read it) sets them
V31 = {"qkv_dgrad": (BULK, 4, 0, False), "qkv_wgrad": (BULK, 8, 0, False), "fc1_dgrad": (BULK, 2, 0, False),
       "fc1_wgrad": (BULK, 4, 0, False), "qkv_fprop": (RING, 16, 0, False), "proj_dgrad": (RING, 16, 0, False),
       "fc1_fprop": (RING, 16, 0, False), "fc2_dgrad": (RING, 16, 0, False), "proj_fprop": (PIPE, 24, 4, True),
       "fc2_fprop": (PIPE, 4, 4, True)}
V40 = {**{g: (BULK, 4, 0, False) for g in ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")},
       **{g: (RING, 1, 0, False) for g in ("qkv_fprop", "proj_dgrad", "fc1_fprop", "fc2_dgrad")},
       "proj_fprop": (PIPE, 24, 4, True), "fc2_fprop": (RING, 1, 0, True)}
V40_LARGE = {**V40, "fc2_fprop": (PIPE, 4, 4, True)}
V41 = {"qkv_dgrad": (BULK, 2, 0, False), "qkv_wgrad": (BULK, 4, 0, False), "fc1_dgrad": (BULK, 2, 0, False),
       "fc1_wgrad": (BULK, 2, 0, False), "qkv_fprop": (RING, 1, 0, False), "proj_dgrad": (RING, 1, 0, True),
       "fc1_fprop": (RING, 1, 0, True), "fc2_dgrad": (RING, 1, 0, False), "proj_fprop": (PIPE, 24, 4, True),
       "fc2_fprop": (RING, 1, 0, True)}
ROWS = {**{f"gpt3-175b-h100-{n}-fp8-mlperf-v31": V31 for n in (512, 768, 4096, 8192, 10752)},
        "gpt3-175b-h100-512-fp8-mlperf-v40": V40, "gpt3-175b-h100-10752-fp8-mlperf-v40": V40_LARGE,
        "gpt3-175b-h100-11616-fp8-mlperf-v40": V40_LARGE, "gpt3-175b-h100-256-fp8-mlperf-v41": V41,
        "gpt3-175b-h100-512-fp8-mlperf-v41": V41, "gpt3-175b-b200-64-fp8-mlperf-v41": V41,
        # task mlperf2's rows of the same implementations (their yaml files are NVIDIA's byte for byte: git blobs
        # 555c2b0f for v3.1's NVIDIA and Azure+NVIDIA copies, 131051ef for v4.0's NVIDIA and smc copies; Oracle ran
        # NVIDIA's v4.1 eos_n64 implementation)
        **{rid: V31 for rid in ("gpt3-175b-h100-6144-fp8-mlperf-v31", "gpt3-175b-h100-10240-fp8-mlperf-v31",
                                "gpt3-175b-h100-10752-fp8-mlperf-v31-azure")},
        "gpt3-175b-h100-512-fp8-mlperf-v40-smc": V40,
        **{f"gpt3-175b-h100-{n}-fp8-mlperf-v41-oracle": V41 for n in (1536, 3072)}}
# the v3.1 containers install flash-attn 2.0.8, which their TE (09ba8427; Azure's 4ee8e8ec, one commit later) takes
# before cuDNN; v4.0 and later pin TE v1.6rc1 or newer (cuDNN on Hopper)
FA2_ROWS = {rid for rid in ROWS if "-mlperf-v31" in rid}


def _as_tuple(o):
    return (o.method, o.num_sm, o.num_splits, o.set_sm_margin)


def _table(spec: dict) -> UbTable:
    gemms = {g: UbOverride(method=m, num_sm=s, num_splits=n, set_sm_margin=margin) for g, (m, s, n, margin) in spec.items()}
    return UbTable(source="typed from the MLPerf yaml (module docstring)", gemms=gemms)


def test_each_mlperf_row_carries_its_configs_table():
    runs = {r.id: r for r in load_runs()}
    for rid, spec in ROWS.items():
        run = runs[rid]
        table = {o.name: _as_tuple(o) for o in ub_table(run.recipe.tp_overlap_cfg)}
        assert table == spec, rid
        request, _ = express(run, device_family(resolve_hardware(run.hw)))
        assert {o.name: _as_tuple(o) for o in request.tp_overlap_cfg} == spec


def test_a_table_replaces_only_the_fields_it_sets():
    shipped = {o.name: o for o in ub_overlaps()}
    got = {o.name: o for o in ub_table(UbTable(source="a run's yaml, one entry", gemms={"fc2_fprop": UbOverride(num_sm=4)}))}
    # TE's default fc2_fprop is a pipeline on 16 SMs, 4 splits, with the margin: only num_sm changes
    assert _as_tuple(got["fc2_fprop"]) == (PIPE, 4, 4, True)
    assert got["fc2_fprop"].source == "a run's yaml, one entry"
    assert all(got[n] == shipped[n] for n in shipped if n != "fc2_fprop")


def test_v31_reduce_scatters_slow_their_gemm_by_the_sms_they_take():
    # set_sm_margin: the GEMM runs on 132 - num_sm SMs (TE @ 09ba8427 comm_gemm_overlap.h L121), and the last of the
    # 4 chunks' reduce-scatter runs after it
    table = {o.name: o for o in ub_table(_table(V31))}
    g, c = 1.0e-3, 0.4e-3
    assert overlap_cost(table["proj_fprop"], g, c, H100_SMS, 4) == pytest.approx(g * 24 / 108 + c / 4)  # 0.322 ms
    assert overlap_cost(table["fc2_fprop"], g, c, H100_SMS, 4) == pytest.approx(g * 4 / 128 + c / 4)  # 0.131 ms
    # bulk: the collective kernel shares the SMs while both run; v3.1's qkv_wgrad holds 8 of 132
    assert overlap_cost(table["qkv_wgrad"], g, c, H100_SMS, 4) == pytest.approx(c * 8 / 132)
    # ring exchange without the margin: copies on copy engines, 16 SMs asked for but unused
    assert overlap_cost(table["qkv_fprop"], g, c, H100_SMS, 4) == 0.0


def _gpt3_problem(table=None):
    hardware = resolve_hardware("h100")
    layout = Layout(devices=32, devices_per_node=8, tensor_parallel=4, sequence_parallel=True, pipeline_parallel=8,
                    overlap=Overlaps(tp_comm=True), tp_overlap_cfg=table)
    options = RunOptions(attention="flash", recompute="none", seq_len=2048, precision="fp8")
    return make_problem(GPT3, hardware, options, layout)


def _expected(part, c, spec):
    total = 0.0
    for name, (method, sms, splits, margin) in spec.items():
        g = part.tp_gemm_s[name]
        if method == RING:
            total += (g * sms / (H100_SMS - sms) if margin else 0.0) + max(0.0, c + g / 4 - g)
        elif method == PIPE:
            slowed = g * H100_SMS / (H100_SMS - sms)
            total += slowed - g + c / splits + max(0.0, c - slowed) * (splits - 1) / splits
        else:
            total += min(c, g) * sms / H100_SMS + max(0.0, c - g)
    return total


@pytest.mark.parametrize("spec", [V31, V41], ids=["v31", "v41"])
def test_the_layer_cost_sums_the_runs_table(spec):
    p = _gpt3_problem(ub_table(_table(spec)))
    part = layer_parts(p, p.evaluate(1, 1))[0]
    c = tensor_parallel_time(p, part.tp_bytes / part.tp_calls, 1)
    got = layer_overlap_s(p, part.tp_gemm_s, part.tp_bytes, part.tp_calls)
    assert got == pytest.approx(_expected(part, c, spec)) and got > 0
    # TE's defaults (16 SMs for each bulk and pipeline overlap) cost more on this layer than either MLPerf table
    default = _gpt3_problem()
    assert layer_overlap_s(default, part.tp_gemm_s, part.tp_bytes, part.tp_calls) > got


def test_a_table_without_the_overlap_or_taking_every_sm_is_refused():
    hardware = resolve_hardware("h100")
    table = ub_table(_table(V31))
    with pytest.raises(BtacalcError, match="needs the TP-comm overlap"):
        Layout(devices=4, devices_per_node=8, tensor_parallel=4, sequence_parallel=True,
               tp_overlap_cfg=table).validate(GPT3, hardware, 2048)
    greedy = ub_table(UbTable(source="a table asking for every SM", gemms={"proj_fprop": UbOverride(num_sm=H100_SMS)}))
    with pytest.raises(BtacalcError, match="proj_fprop: num_sm 132 must leave compute SMs"):
        Layout(devices=4, devices_per_node=8, tensor_parallel=4, sequence_parallel=True, overlap=Overlaps(tp_comm=True),
               tp_overlap_cfg=greedy).validate(GPT3, hardware, 2048)


def test_a_table_asking_for_more_sms_than_the_device_has_is_refused():
    """review9: the SM check covered only the GEMMs whose SMs are taken from the GEMM (set_sm_margin, bulk), so a ring
    exchange without margin asking for 500 SMs, or 10^30, was planned as if valid. An H100 SXM5 has 132 SMs: 133 is
    refused for any method, 132 is still a valid (if odd) ring-exchange entry, its copies on copy engines."""
    hardware = resolve_hardware("h100")
    for num_sm in (H100_SMS + 1, 500, 10**30):
        table = ub_table(UbTable(source="a table asking for too many SMs",
                                 gemms={"qkv_fprop": UbOverride(method=RING, num_sm=num_sm, set_sm_margin=False)}))
        with pytest.raises(BtacalcError, match=f"qkv_fprop: num_sm {num_sm} is more SMs than .* has \\(132\\)"):
            Layout(devices=4, devices_per_node=8, tensor_parallel=4, sequence_parallel=True,
                   overlap=Overlaps(tp_comm=True), tp_overlap_cfg=table).validate(GPT3, hardware, 2048)
    edge = ub_table(UbTable(source="a ring exchange naming every SM",
                            gemms={"qkv_fprop": UbOverride(method=RING, num_sm=H100_SMS, set_sm_margin=False)}))
    Layout(devices=4, devices_per_node=8, tensor_parallel=4, sequence_parallel=True, overlap=Overlaps(tp_comm=True),
           tp_overlap_cfg=edge).validate(GPT3, hardware, 2048)


def test_the_plan_names_the_userbuffers_table_it_timed():
    """review10: a plan's report did not say whether TE's defaults or the run's own table was timed (both print
    "overlapped: tp_comm"). ParallelInfo.tp_overlap_table names it (the table's source), and none without the overlap."""
    from dataclasses import replace

    from btacalc.planning.plan import TE_DEFAULT_TABLE, make_plan
    run = next(r for r in load_runs() if r.id == "gpt3-175b-h100-512-fp8-mlperf-v31")
    hardware = resolve_hardware(run.hw)
    request, _ = express(run, device_family(hardware))
    model = resolve_model(run.model)

    def timed(req):
        return make_plan(model, hardware, req, baselines=False).parallelism.tp_overlap_table

    assert timed(request) == f"the run's own ({run.recipe.tp_overlap_cfg.source})"
    assert timed(request.with_changes(tp_overlap_cfg=None)) == TE_DEFAULT_TABLE
    off = replace(request.overlaps, tp_comm=False)
    assert timed(request.with_changes(tp_overlap_cfg=None, overlaps=off)) is None


# review10: (GEMM, the method given, why TE does not run it) - TE @ bee4649c: base.py L224-228 gives each GEMM its role
# by its default method (qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad all-gather by ring exchange; proj_fprop, fc2_fprop
# reduce-scatter by pipeline; the dgrad/wgrad of qkv and fc1 bulk); L292-295 raises on a pipeline all-gather;
# comm_gemm_overlap.h L176-181 / L233-238: CommOverlapBase has no all-gather GEMM overlap, CommOverlapP2PBase no bulk
TE_REFUSES = [
    ("qkv_fprop", PIPE, "refuses a pipeline overlap on an all-gather"),
    ("fc2_dgrad", PIPE, "refuses a pipeline overlap on an all-gather"),
    ("fc1_fprop", BULK, "has no all-gather GEMM overlap"),
    ("qkv_wgrad", RING, "a ring exchange's object has no bulk overlap"),
    ("fc1_wgrad", PIPE, "as a bulk overlap .*give method bulk"),
    ("fc2_fprop", BULK, "as a pipeline .*give method pipeline"),
    ("qkv_dgrad", RING, "dgrad reduce-scatter overlap in place of qkv_wgrad's bulk one .*not modelled"),
]


@pytest.mark.parametrize("gemm, method, why", TE_REFUSES, ids=[f"{g}-{m}" for g, m, _ in TE_REFUSES])
def test_a_method_te_does_not_run_on_that_gemm_is_refused(gemm, method, why):
    with pytest.raises(BtacalcError, match=f"{gemm}: method {method}: .*{why}"):
        ub_table(UbTable(source="a table giving a GEMM another role's method", gemms={gemm: UbOverride(method=method)}))


def test_te_runs_a_reduce_scatter_gemm_by_ring_exchange_and_asserts_on_a_dgrad_beside_its_wgrad():
    """A ring exchange on proj_fprop is TE's CommOverlapP2P reduce-scatter (split_overlap_rs_p2p), taken; a
    ring-exchange fc1_dgrad in a table that also names fc1_wgrad trips TE's assert (base.py L355)."""
    table = ub_table(UbTable(source="a ring-exchange reduce-scatter", gemms={"proj_fprop": UbOverride(method=RING)}))
    assert {o.name: o.method for o in table}["proj_fprop"] == RING
    both = {"fc1_dgrad": UbOverride(method=RING), "fc1_wgrad": UbOverride(method=BULK)}
    with pytest.raises(BtacalcError, match="asserts the table then names no fc1_wgrad"):
        ub_table(UbTable(source="a dgrad overlap beside its wgrad", gemms=both))


def _proj_fprop_split(splits: int) -> Layout:
    """GPT-3 175B at TP 4 with SP and the TP-comm overlap, its proj_fprop a pipeline overlap of `splits` chunks."""
    table = ub_table(UbTable(source="a table splitting proj_fprop",
                             gemms={"proj_fprop": UbOverride(method=PIPE, num_splits=splits)}))
    return Layout(devices=4, devices_per_node=8, tensor_parallel=4, sequence_parallel=True,
                  overlap=Overlaps(tp_comm=True), tp_overlap_cfg=table)


def test_a_pipeline_split_into_more_chunks_than_its_gemms_rows_is_refused():
    """review10: num_splits was unbounded (10^30 planned). TE splits the reduce-scatter GEMM's m output rows into
    m / num_splits (comm_gemm_overlap.cpp L418); for proj_fprop m is the weight's hidden output rows, 12,288 for GPT-3
    175B (Brown et al. 2020, Table 2.1 d_model), and TE refuses an empty chunk (TE @ d0067d0d L256)."""
    hardware = resolve_hardware("h100")
    for splits in (12288 + 1, 10**30):
        with pytest.raises(BtacalcError, match=f"proj_fprop: num_splits {splits} is more chunks than the GEMM's 12288"):
            _proj_fprop_split(splits).validate(GPT3, hardware, 2048)
    _proj_fprop_split(12288).validate(GPT3, hardware, 2048)


def test_a_pipeline_split_that_does_not_divide_its_gemms_rows_is_refused():
    """TE @ d0067d0d comm_gemm_overlap.cpp L634: m_chunk = m / num_splits in size_t, and L670's loop runs num_splits
    chunks, so num_splits x m_chunk rows are computed. GPT-3 175B's proj_fprop has m = 12,288 rows: 5 splits give
    5 x 2,457 = 12,285 rows and leave 12,288 mod 5 = 3 uncomputed; 4 splits (the v3.1 table's) and 3 divide 12,288."""
    hardware = resolve_hardware("h100")
    assert 5 * (12288 // 5) == 12285
    with pytest.raises(BtacalcError, match="proj_fprop: num_splits 5 does not divide the GEMM's 12288 output rows "
                                           r"\(hidden_size\): TransformerEngine computes 5 chunks of 2457 rows and "
                                           "drops the last 3"):
        _proj_fprop_split(5).validate(GPT3, hardware, 2048)
    for splits in (3, 4, 4096):
        _proj_fprop_split(splits).validate(GPT3, hardware, 2048)


# FlashAttention-2 on an H100 SXM5, head dim 128, BF16 (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, Figure 5
# forward, Figure 6 backward: the FlashAttention-2 bars, TFLOP/s as labelled), at s = 2k / 4k / 8k
FA2_FWD_CAUSAL = {2048: 298.0, 4096: 319.0, 8192: 333.0}  # FLOPs counted on the half square
FA2_FWD_FULL = {2048: 362.0, 4096: 368.0, 8192: 370.0}
FA2_BWD_FULL = {2048: 291.0, 4096: 310.0, 8192: 318.0}
H100_BF16_PEAK = 989e12  # FLOP/s, NVIDIA H100 SXM datasheet (dense BF16)


def _fa2_share(s: int) -> float:
    """The cuDNN entry's derivation on the FlashAttention-2 bars: causal forward on the blocks run (nb(nb+1)/2 of
    nb^2, counted as nb^2/2), the mask's per-block cost carried to the backward, forward + 2.5 x forward combined."""
    nb = s // 128
    fwd = FA2_FWD_CAUSAL[s] * (nb * (nb + 1) / 2) / (nb * nb / 2)
    bwd = FA2_BWD_FULL[s] * fwd / FA2_FWD_FULL[s]
    return 3.5 / (1 / fwd + 2.5 / bwd) * 1e12 / H100_BF16_PEAK


def test_flash_attention_2_on_hopper_is_its_published_rate_at_4k():
    """319 x 33/32 = 329.0 TFLOP/s forward on the blocks run, mask 329.0/368 = 0.894, backward 310 x 0.894 = 277.1,
    3.5 / (1/329.0 + 2.5/277.1) = 290.2 TFLOP/s = 0.293 of 989; 0.273 at 2k, 0.306 at 8k."""
    from btacalc.config.attention_kernels import attention_kernel

    assert _fa2_share(4096) == pytest.approx(0.2934, abs=5e-4)
    assert (_fa2_share(2048), _fa2_share(8192)) == (pytest.approx(0.2726, abs=5e-4), pytest.approx(0.3062, abs=5e-4))
    for hw in ("h100", "h200"):
        cc = resolve_hardware(hw).chip.compute_capability.value
        assert attention_kernel("flash-attn-2").fraction_of_peak(cc) == pytest.approx(_fa2_share(4096), abs=5e-4)
    assert attention_kernel("flash-attn-2").fraction_of_peak(resolve_hardware("b200").chip.compute_capability.value) is None


def test_the_v31_rows_attention_core_runs_at_flash_attention_2s_rate():
    """GPT-3 175B at TP 4 (24 of 96 heads of 128 per rank), one sequence of 2048: the kernel's 14 s^2 (h/TP) FLOPs on
    the whole square x 136/256 blocks on or below the diagonal (nb = 16), at FlashAttention-2's 2k share, 0.273 x 989
    TFLOP/s; the v4.x rows' cuDNN kernel at its 2k share, 0.422 x 989 (test_attention_kernels.py derives it from the
    same figures: 484 x 17/16 forward, mask 514.3/617, backward 465 x 0.834)."""
    runs = {r.id: r for r in load_runs()}
    s, h_rank = 2048, 12288 // 4
    flops = 14 * s * s * h_rank * 136 / 256
    for rid, share in (("gpt3-175b-h100-512-fp8-mlperf-v31", _fa2_share(2048)),
                       ("gpt3-175b-h100-512-fp8-mlperf-v41", 0.4215)):
        run = runs[rid]
        request, _ = express(run, "gpu")
        assert request.attention_kernel == ("flash-attn-2" if rid.endswith("v31") else None)
        options = RunOptions(attention="flash", recompute="none", seq_len=s, precision="fp8",
                             attention_kernel=request.attention_kernel or "default")
        p = make_problem(GPT3, resolve_hardware("h100"), options, Layout(devices=4, devices_per_node=8, tensor_parallel=4,
                                                                          sequence_parallel=True))
        core = layer_parts(p, p.evaluate(1, 1))[0].core_s
        assert core == pytest.approx(flops / (share * H100_BF16_PEAK), rel=2e-3)


def test_every_mlperf_row_takes_the_attention_kernel_of_its_te():
    runs = {r.id: r for r in load_runs()}
    for rid in ROWS:
        request, _ = express(runs[rid], "gpu")
        assert request.attention_kernel == ("flash-attn-2" if rid in FA2_ROWS else None), rid
    assert len(FA2_ROWS) == 8


def test_a_measured_row_with_an_uneven_pipeline_split_is_listed_with_the_reason(tmp_path):
    """validate does not time a row whose table TE would run wrongly: the row is not expressible, and the reason
    names the split (the v3.1 row's proj_fprop pipeline with 5 splits of GPT-3 175B's 12,288 rows)."""
    import json

    from btacalc.paths import package_data
    from btacalc.planning.measured import validate_measured

    row = next(r for r in json.loads(package_data("measured_runs.json").read_text())["runs"]
               if r["id"] == "gpt3-175b-h100-512-fp8-mlperf-v31")
    recipe = json.loads(json.dumps(row["recipe"]))
    recipe["tp_overlap_cfg"]["gemms"]["proj_fprop"] = {"method": "pipeline", "num_sm": 24, "num_splits": 5}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [dict(row, recipe=recipe)]}))
    (result,) = validate_measured(path).runs
    assert not result.expressible
    assert "num_splits 5 does not divide the GEMM's 12288 output rows" in result.reason
