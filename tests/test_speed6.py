"""Round "speed6" (issue 25 item 6): what this round keeps per layout or computes once, each checked against
the path it stands in for (no number moves: equal in value, type and repr)."""

from __future__ import annotations

import numpy as np

from test_speed3 import _Forgetful
from test_speed5 import _problem

# every mechanism this round touches: expert parallelism with and without DeepEP, pipeline stages (first,
# middle, last), context parallelism (a Fraction share of a sequence), low precision, ZeRO-3, one device
_LAYOUTS = [("qwen3-30b-a3b", "h100", dict(devices=16, expert_parallel=8)),
            ("deepseek-v3", "h100", dict(devices=256, expert_parallel=64, pipeline_parallel=4, deepep=True)),
            ("qwen3-30b-a3b", "h100", dict(devices=32, expert_parallel=16, deepep=True, context_parallel=2)),
            ("mixtral-8x7b", "h100", dict(devices=8, expert_parallel=8, precision="fp8")),
            ("llama-3-8b", "a100-80gb", dict(devices=8, zero_stage=3, recompute="full", attention="flash")),
            ("llama-3-8b", "h100", dict(devices=16, tensor_parallel=2, pipeline_parallel=2, virtual_pipeline=2)),
            ("mixtral-8x7b", "h100", dict(devices=1)),
            ("llama-3-8b", "h100", dict(devices=8, pipeline_parallel=4))]  # a middle and the last stage: 8 layers each
_SHAPES = [(1, 1), (np.array([1.0, 3, 5, 2]), np.array([2.0, 1, 1, 4])), (3, 2), (1, 7), (np.array([4.0]), np.array([4.0]))]


def _forgetful(name: str, hw: str, ask: dict) -> object:
    """A problem of the layout that keeps nothing, neither per problem nor per layout: every value computed."""
    problem = _problem(name, hw, ask)
    object.__setattr__(problem, "_cache", _Forgetful())
    object.__setattr__(problem, "layout_cache", _Forgetful())
    return problem


def test_this_rounds_layout_caches_answer_as_a_problem_that_keeps_nothing() -> None:
    """The per-layout values of this round (a phase's plan and shape-free GEMM expressions in the kind's rates,
    the all-to-all's and the pipeline sends' layout factors, a stage's parameters, data-parallel and
    optimizer times) give, layouts and shapes alternated, exactly what a problem keeping nothing computes:
    the whole `StepTime` and the memory total by repr, and the solver's candidates, times and counts."""
    from btacalc.config.execution import BatchLimits
    from btacalc.model.memory import MemoryModel
    from btacalc.model.solver import PointLimits, search
    from btacalc.model.timing import step_time

    kept = {case[0] + str(case[2]): _problem(*case) for case in _LAYOUTS}
    for g, b in _SHAPES:
        for name, hw, ask in _LAYOUTS:
            warm, cold = kept[name + str(ask)], _forgetful(name, hw, ask)
            assert repr(step_time(warm, g, b)) == repr(step_time(cold, g, b)), (name, ask, g, b)  # type: ignore[arg-type]
            assert repr(MemoryModel(warm).total(g, b)) == repr(MemoryModel(cold).total(g, b))  # type: ignore[arg-type]
    for name, hw, ask in _LAYOUTS[:5]:
        a, c = (search(p, PointLimits.of(BatchLimits())) for p in (kept[name + str(ask)], _forgetful(name, hw, ask)))  # type: ignore[arg-type]
        assert repr((a.cand, a.step_time_s, a.shapes, a.binding, a.tile)) == repr((c.cand, c.step_time_s, c.shapes,
                                                                                   c.binding, c.tile)), name
    caches = [p.layout_cache for p in kept.values()]  # type: ignore[attr-defined]
    for key in ("all-to-all layout", "pipeline link"):
        assert any(key in c for c in caches), key
    assert any(isinstance(k, tuple) and k[0] == "gpu stage times" for c in caches for k in c)


def test_gemm_passes_of_many_equal_each_gemm_alone() -> None:
    """Several GEMMs' three passes timed in one stacked call equal `gemm_passes` of each GEMM alone, in value,
    shape and dtype (arrays of one shape batched; scalars, another shape and empty launches mixed in)."""
    from btacalc.model.gpu.gemm import GemmDevice, gemm_passes, gemm_passes_of_many

    device = GemmDevice(0.73 * 1979e12, 3.35e12, 132, ((128, 128), (128, 256), (256, 128)), 1.5e-6, 1.6)
    roofline_max = GemmDevice(312e12, 2.0e12, 108, ((128, 128), (256, 128)), 2e-6, float("inf"))
    rng = np.random.default_rng(6)
    m = rng.integers(0, 30000, 10).astype(float)
    shapes = [(m, 4096, 4096, 1), (m * 3, 14336.0, 4096, 1), (m, 4096, 11008, rng.integers(0, 9, 10).astype(float)),
              (4096, 4096, 4096, 1), (m[:3], 512, 7168, 2.0), (m, 2 * 11008, 4096, 1)]
    for dev in (device, roofline_max):
        for many in (shapes, shapes[:1], shapes[3:4], shapes[:2] + shapes[4:5]):
            together = gemm_passes_of_many(many, 2, dev)
            for (mm, nn, kk, g), passes in zip(many, together, strict=True):
                for a, b in zip(passes, gemm_passes(mm, nn, kk, 2, dev, g), strict=True):
                    for field in ("time_s", "efficiency", "quantisation", "memory_bound"):
                        x, y = getattr(a, field), getattr(b, field)
                        assert type(x) is type(y) and np.shape(x) == np.shape(y), field
                        assert np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(x, y), field


def test_step_time_without_report_rows_has_the_same_times() -> None:
    """The solver's candidates are timed without the report's rows (`step_time(report=False)`): the same step
    time, tokens/s and MFU as with them, and no per-GEMM or per-phase rows."""
    from btacalc.model.timing import step_time

    tiles, batch = np.array([1.0, 2, 7, 3]), np.array([5.0, 3, 1, 3])
    for name, hw, ask in _LAYOUTS:
        problem = _problem(name, hw, ask)
        for g, b in ((tiles, batch), (2, 3)):
            full, bare = step_time(problem, g, b), step_time(problem, g, b, report=False)  # type: ignore[arg-type]
            for field in ("step_time_s", "tokens_per_s", "mfu", "tiling_overhead_s"):
                assert repr(getattr(full, field)) == repr(getattr(bare, field)), (name, field)
            assert bare.details["gemms"] == {} and "collectives" not in bare.details and bare.phase_repeats == {}
            assert full.phase_repeats or np.ndim(g)  # (arrays of a pipelined layout report no phase rows either)


def test_one_shape_computes_its_rows_on_the_first_read() -> None:
    """One shape of ints computes its formula rows when first read, the values `Coefficients.rows_at` gives
    (value and type); sums alone (`total`, the model FLOPs) compute none. Since round "speed7" a phase's rows
    read through `of` are that phase's alone (`Coefficients.phase_template`); the first row read by number
    computes every row."""
    from btacalc.catalogue.compiled import ROW_QUANTITIES

    problem = _problem("qwen3-30b-a3b", "h100", dict(devices=16, expert_parallel=8))
    for g, b in ((1, 1), (3, 2)):
        (_, values), = problem.evaluate(g, b).layers  # type: ignore[attr-defined]
        values.total("flops_fwd", "layer")
        assert values._rows_pending
        rows = values.coefficients.rows_at(g, b, g * b)
        for phase in values.phase_names():
            got = values.of(phase)
            for q in ROW_QUANTITIES:
                want = rows[values.compiled.row[(phase, q)]]
                assert type(got[q]) is type(want) and got[q] == want, (phase, q)
        assert values._rows_pending and not values._values  # every phase read, no row by number yet
        phase = values.phase_names()[0]
        assert values.value(phase, "stored") == rows[values.compiled.row[(phase, "stored")]]
        assert not values._rows_pending and values._values == rows


def test_select_is_numpys_first_true_choice() -> None:
    from btacalc.model.solver import _SELECT_IN_PYTHON, _select

    rng = np.random.default_rng(25)
    choices = ["global_batch", "tiles", "max_global_batch", "max_tile_batch", "throughput"]
    for size in (0, 1, 2, _SELECT_IN_PYTHON, _SELECT_IN_PYTHON + 1, 300):
        for _ in range(20):
            conditions = [rng.random(size) < 0.3 for _ in choices]
            assert _select(conditions, choices, "memory") == np.select(conditions, choices, "memory").tolist()


def test_new_part_is_the_dataclass() -> None:
    """`new_part` builds what `Part(**values)` builds: every field, in order, with fresh dicts."""
    from btacalc.model.gpu.part import Part, new_part

    for values in ({}, {"stored": 3.0, "transient": np.float64(2), "dense_params": 7}):
        a, b = new_part(**values), Part(**values)
        assert a == b and repr(a) == repr(b) and list(a.__dict__) == list(b.__dict__)
    assert new_part().phase_s is not new_part().phase_s


def test_all_to_all_and_pipeline_sends_from_their_layout_factors_equal_the_formulas() -> None:
    """The all-to-all and pipeline-send times read their layout's factors once per layout; they equal the
    formulas spelled out (collectives.py's module docstring: the (EP - 1)/EP share leaves a rank, the share
    of it inside the NVLink domain, DeepEP's per-rank and per-domain deduplication, the NIC share at the
    profile's all-to-all efficiency; PP sends of 2 x VP per micro-batch at the slowest hop's link), bit for
    bit, scalars and arrays of volumes."""
    from btacalc.model.gpu.collectives import (all_to_all_time, deepep_dedup, links, local_members,
                                               pipeline_p2p_time, ring_share, ring_time)

    volumes = (3.0e8, np.array([1.0e6, 2.5e8, 0.0]))
    for name, hw, ask in _LAYOUTS[:3] + _LAYOUTS[5:6]:
        problem = _problem(name, hw, ask)
        lay = problem.layout  # type: ignore[attr-defined]
        up, out = links(problem)  # type: ignore[arg-type]
        ep, etp = lay.expert_parallel, lay.expert_tensor_parallel
        k = local_members(ep, etp, lay.devices, lay.devices_per_node)
        for volume in volumes:
            sent = volume * ring_share(ep)
            intra = (k - 1) / (ep - 1) if ep > 1 else 1.0
            cross = sent * (1 - intra)
            if lay.deepep:
                inside, across, forwarded = (sent * intra * deepep_dedup(problem, ep), cross * deepep_dedup(problem, ep / k),  # type: ignore[arg-type]
                                             cross * deepep_dedup(problem, ep))  # type: ignore[arg-type]
            else:
                inside, across, forwarded = sent * intra, cross, 0.0
            alpha = up.latency_s if k >= ep else out.latency_s
            nic = out.bandwidth_bytes_per_s * problem.hardware.collectives.scaleout_all_to_all_efficiency.value  # type: ignore[attr-defined]
            nvlink = problem.hardware.collectives.scaleup_all_to_all_efficiency  # type: ignore[attr-defined]
            nvl = up.bus_bytes_per_s if lay.deepep or nvlink is None else up.bandwidth_bytes_per_s * nvlink.value
            a2a = np.maximum((inside + forwarded) / nvl, across / nic)
            want = (7 * alpha + a2a if ep > 1 else 0.0) + ring_time(problem, volume * (etp - 1), etp, 1, 7)  # type: ignore[arg-type]
            got = all_to_all_time(problem, volume, 7)  # type: ignore[arg-type]
            assert np.array_equal(got, want) and np.shape(got) == np.shape(want), (name, ask)
            pp = lay.pipeline_parallel
            inside_pp = local_members(pp, max(lay.devices // pp, 1), lay.devices, lay.devices_per_node) >= pp
            sends = 2 * lay.virtual_pipeline if pp > 1 else 0
            hop = (up.latency_s, up.bus_bytes_per_s) if inside_pp else (out.latency_s, out.bus_bytes_per_s)
            want_pp = np.where(pp > 1, sends * hop[0] + volume * sends / hop[1], 0.0)  # (one stage: no sends)
            got_pp = pipeline_p2p_time(problem, volume)  # type: ignore[arg-type]
            assert np.array_equal(got_pp, want_pp) and np.shape(got_pp) == np.shape(want_pp), (name, ask)
