"""Megatron-LM's pipeline schedule as a dependency simulation (btacalc.model.gpu.schedule) and the step time's
bubble from it (btacalc.model.gpu.timing): issue 21.

The schedule is read from Megatron-LM @ d98e8a64, megatron/core/pipeline_parallel/schedules.py:
get_pp_rank_microbatches L950-977 (warm-up counts), get_schedule_table L989-1016 (which chunk and micro-batch the
k-th forward runs), forward_backward_pipelining_with_interleaving L1573-1735 / _without_interleaving L2277-2334
(warm-up forwards, then forward/backward pairs, then the remaining backwards). The expected values below are
derived by hand from those rules.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.model.gpu.schedule import makespan, schedule_table, step_makespan, warmup_forwards
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.problem import make_problem


@pytest.mark.parametrize("pp, vp, m", [(2, 1, 4), (4, 1, 8), (4, 2, 8), (4, 4, 16), (3, 3, 9), (8, 2, 16), (4, 2, 12)])
@pytest.mark.parametrize("fwd, bwd", [(1, 2), (1, 1), (1, 6)])
def test_uniform_stages_give_narayanans_bubble(pp, vp, m, fwd, bwd):
    # every chunk takes f = fwd/VP forward and b = bwd/VP backward, t = fwd + bwd per stage and micro-batch:
    # Narayanan et al. 2021 §2.2, M·t + (PP - 1)·t/VP (exact in binary fractions: powers of two below)
    scale = Fraction(1, 8)
    f = [[float(scale * fwd / vp)] * vp for _ in range(pp)]
    b = [[float(scale * bwd / vp)] * vp for _ in range(pp)]
    t = scale * (fwd + bwd)
    assert makespan(f, b, pp, vp, m) == pytest.approx(float(m * t + (pp - 1) * t / vp), rel=1e-12)


def test_one_f_one_b_with_unequal_stages_by_hand():
    # PP 3, M 3, no interleaving; stage forward times 1, 2, 1 and backward 2, 4, 2 (the middle stage twice as slow).
    # Warm-up forwards PP - j - 1: rank 0 runs F0 F1 | F2 B0 | B1 B2, rank 1 F0 | F1 B0 F2 B1 | B2,
    # rank 2 | F0 B0 F1 B1 F2 B2 |. Each pass starts at max(its rank's previous end, what it waits on):
    #   rank 0: F0 0-1, F1 1-2, F2 2-3
    #   rank 1: F0 max(0, 1) = 1 - 3, F1 max(3, 2) = 3 - 5
    #   rank 2: F0 max(0, 3) = 3 - 4, B0 4 - 6, F1 max(6, 5) = 6 - 7, B1 7 - 9
    #   rank 1: B0 max(5, 6) = 6 - 10, F2 max(10, 3) = 10 - 12, B1 max(12, 9) = 12 - 16
    #   rank 2: F2 max(9, 12) = 12 - 13, B2 13 - 15
    #   rank 1: B2 max(16, 15) = 16 - 20
    #   rank 0: B0 max(3, 10) = 10 - 12, B1 max(12, 16) = 16 - 18, B2 max(18, 20) = 20 - 22
    end = 20 + 2
    assert makespan([[1], [2], [1]], [[2], [4], [2]], 3, 1, 3) == end
    # the equal-stage formula on the slowest stage (t = 6) would give M·t + (PP - 1)·t = 30
    assert end != 3 * 6 + 2 * 6


def test_interleaved_with_one_slow_chunk_by_hand():
    """PP 2, VP 2, M 4 (groups of PP = 2): every chunk f = 1, b = 2 but model chunk 3 (stage 1, chunk 1) f = 2, b = 4.
    Forwards in table order (mb, chunk): (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1); the k-th backward runs
    entry k with the chunk reversed. Warm-ups 2(PP - j - 1) + (VP - 1)·PP: rank 0 four, rank 1 two.

    Timetable (pass [start, end]; F/B micro-batch.chunk):
      rank 0: F0.0 [0,1]  F1.0 [1,2]  F0.1 [2,3]  F1.1 [3,4]  F2.0 [4,5]  B0.1 [9,11]  F3.0 [11,12]  B1.1 [15,17]
              F2.1 [17,18]  B0.0 [18,20]  F3.1 [20,21]  B1.0 [21,23]  B2.1 [27,29]  B3.1 [33,35]  B2.0 [35,37]
              B3.0 [37,39]
      rank 1: F0.0 [1,2]  F1.0 [2,3]  F0.1 [3,5]  B0.1 [5,9]  F1.1 [9,11]  B1.1 [11,15]  F2.0 [15,16]  B0.0 [16,18]
              F3.0 [18,19]  B1.0 [19,21]  F2.1 [21,23]  B2.1 [23,27]  F3.1 [27,29]  B3.1 [29,33]  B2.0 [33,35]
              B3.0 [35,37]
    (F0.1 on rank 0 waits for F0.0 on rank 1; B0.0 on rank 1 for B0.1 on rank 0; B0.1 on rank 1 for its own F0.1.)
    """
    f = [[1, 1], [1, 2]]
    b = [[2, 2], [2, 4]]
    assert makespan(f, b, 2, 2, 4) == 39
    # the equal-chunk formula on the slowest stage (t = 9): M·t + (PP - 1)·t/VP = 40.5
    assert 4 * 9 + 9 / 2 == 40.5


def test_group_size_warmup_with_m_not_a_multiple_of_pp():
    # model_parallel_config.py L436-447: PP 2, VP 2, N = 3, M = 5: rank 0 | 0 1 2 0 1 2 3 4 3 4; schedules.py
    # L1225-1229 gives the same table for "PP2 N3M5 with VP2" (chunks 0 0 0 1 1 1 0 0 1 1)
    table = schedule_table(5, 2, 3)
    assert [i for i, _ in table] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [v for _, v in table] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    # warm-up 2(PP - j - 1) + (VP - 1)·N: rank 0 2 + 3 = 5, rank 1 0 + 3 = 3 (with N = PP they would be 4 and 2)
    assert [warmup_forwards(2, 2, 5, 3, j) for j in range(2)] == [5, 3]
    # PP 4, VP 2, M 5, N 5 (Megatron-LM's tunable_overlap test): 2(3 - j) + 5, capped at M·VP = 10
    assert [warmup_forwards(4, 2, 5, 5, j) for j in range(4)] == [10, 9, 7, 5]
    # overlap_moe_expert_parallel_comm: one more (L966-970)
    assert warmup_forwards(4, 2, 8, 4, 3, extra=True) == 4 + 1
    # over arrays of layouts (the layout search's): each element as the ints give it; PP 1 none, VP 1 PP - j - 1
    pp, vp, m = np.array([1, 2, 4, 4]), np.array([1, 2, 2, 1]), np.array([8, 5, 5, 2])
    assert list(warmup_forwards(pp, vp, m, pp, 0)) == [warmup_forwards(*x, 0) for x in zip(pp.tolist(), vp.tolist(),
                                                                                          m.tolist(), pp.tolist())]
    assert list(warmup_forwards(pp, vp, m, pp, 0)) == [0, 2 + 2, 6 + 4, 2]
    # uniform chunks still give Narayanan's bubble with groups of N: nothing waits longer than with N = PP
    f = [[0.25] * 2 for _ in range(2)]
    assert makespan(f, [[0.5] * 2 for _ in range(2)], 2, 2, 5, 3) == pytest.approx(5 * 1.5 + 1.5 / 2)


def test_arrays_of_layouts_equal_one_by_one():
    # step_makespan groups elements by (PP, VP, M, N, extra) and vectorises over each group's pass times
    rng = np.random.default_rng(21)
    pp, vp, m = np.array([2, 4, 4, 2]), np.array([1, 2, 2, 2]), np.array([4, 8, 8, 6])
    f = [[rng.uniform(0.5, 2, 4) for _ in range(2)] for _ in range(4)]
    b = [[2 * x for x in row] for row in f]
    out = step_makespan(f, b, pp, vp, m, pp, np.zeros(4, dtype=bool))
    for k in range(4):
        p, v = int(pp[k]), int(vp[k])
        one = makespan([[f[j][c][k] for c in range(v)] for j in range(p)], [[b[j][c][k] for c in range(v)] for j in range(p)],
                       p, v, int(m[k]))
        assert out[k] == pytest.approx(one, rel=1e-12)


def _uneven_problem(vp=2, m=8):
    # GPT-3 175B's 96 layers over PP 4 x VP with the first stage's embedding and the last stage's head and loss in
    # chunks of their own stages: the stages and chunks differ
    hw = resolve_hardware("h100")
    layout = Layout(devices=32, tensor_parallel=8, pipeline_parallel=4, virtual_pipeline=vp, micro_batches=m,
                    devices_per_node=8)
    return make_problem(resolve_model("gpt3-175b"), hw, RunOptions(seq_len=2048, attention="flash", recompute="none"), layout)


def test_step_bubble_is_the_schedules_makespan_over_the_busiest_stage():
    problem = _uneven_problem()
    st = gpu_step_time(problem, 1, 1)
    f, b = st.details["passes"]
    t = [sum(f[j][v] + b[j][v] for v in range(2)) for j in range(4)]
    # every stage's per-micro-batch time is split into its chunks' passes once: the largest is the step's t
    assert max(t) == pytest.approx(st.details["micro_batch_s"], rel=1e-12)
    m = 8
    assert st.details["bubble_s"] == pytest.approx(makespan(f, b, 4, 2, m) - m * max(t), rel=1e-9)
    assert st.phase_time_s["pipeline_bubble"] == st.details["bubble_s"]
    # the head and loss sit on the last model chunk: stage 3's chunk 1 is slower than its chunk 0
    assert f[3][1] + b[3][1] > f[3][0] + b[3][0]
    # and the schedule's bubble is not Narayanan's (PP - 1)/VP x the slowest stage
    assert st.details["bubble_s"] != pytest.approx(3 / 2 * max(t), rel=1e-6)


def test_recompute_runs_in_the_backward_pass():
    # full recomputation re-runs each layer's forward inside its backward: the backward passes grow by it
    plain = gpu_step_time(_uneven_problem(), 1, 1).details["passes"]
    full = _uneven_problem()
    full = make_problem(full.model, full.hardware, RunOptions(seq_len=2048, attention="flash", recompute="full"), full.layout)
    again = gpu_step_time(full, 1, 1).details["passes"]
    share = [b / (f + b) for f, b in ((plain[0][1][0], plain[1][1][0]), (again[0][1][0], again[1][1][0]))]
    # without recomputation the backward is 2/3 of a layer's FLOPs; with it, (2 + 1)/(1 + 2 + 1) = 3/4
    assert share[0] == pytest.approx(2 / 3, abs=0.03)
    assert share[1] == pytest.approx(3 / 4, abs=0.03)


def test_periodic_extrapolation_equals_the_whole_schedule_on_random_uneven_stages():
    # makespan() simulates a shorter schedule and extrapolates once a group's passes all end c after the previous
    # group's (over more groups than a pass reaches back); full_makespan() simulates every micro-batch
    from btacalc.model.gpu.schedule import full_makespan
    rng = np.random.default_rng(2104)
    extrapolated = 0
    for _ in range(60):
        pp, vp = int(rng.integers(2, 7)), int(rng.integers(1, 4))
        group = pp if vp == 1 or rng.random() < 0.5 else int(rng.integers(pp, 2 * pp + 1))
        m = int(rng.integers(8, 30)) * group + (int(rng.integers(pp, group + 1)) if group > pp and rng.random() < 0.5 else 0)
        f = rng.uniform(0.2, 2, (pp, vp, 4))
        b = f * rng.uniform(1, 3, (pp, vp, 4))
        f[rng.integers(pp), rng.integers(vp)] *= 3  # one slow chunk
        got, want = makespan(f, b, pp, vp, m, group), full_makespan(f, b, pp, vp, m, group)
        assert np.allclose(got, want, rtol=1e-12, atol=0)
        extrapolated += m > 12 * group
    assert extrapolated > 20  # most of these schedules are long enough to be extrapolated


def test_a_long_transient_is_not_taken_for_the_steady_state():
    # 1F1B on 6 stages: the makespan grows by the same step for five groups, then by more (a slower chain of passes
    # overtakes); comparing two increments would extrapolate too early, the whole state's shift does not
    from btacalc.model.gpu.schedule import full_makespan
    rng = np.random.default_rng(182)
    f = rng.uniform(0.2, 2, (6, 1))
    b = f * rng.uniform(1, 3, (6, 1))
    steps = np.round(np.diff([full_makespan(f, b, 6, 1, m) for m in range(18, 80, 6)]), 9)
    assert steps[0] == steps[1] == steps[2] == steps[3] == steps[4] < steps[5] < steps[6] == steps[-1]
    early = full_makespan(f, b, 6, 1, 30) + (78 - 30) // 6 * steps[0]  # two equal increments, extrapolated
    assert makespan(f, b, 6, 1, 78) == pytest.approx(full_makespan(f, b, 6, 1, 78), rel=1e-12)
    assert makespan(f, b, 6, 1, 78) > early + 0.1


@pytest.mark.parametrize("pp, vp, group", [(2, 1, 2), (8, 1, 8), (4, 2, 4), (4, 3, 6), (8, 4, 8), (6, 2, 9)])
def test_a_pass_waits_on_passes_at_most_lag_groups_away(pp, vp, group):
    # the periodicity check compares _LAG + 1 group shifts: enough only if no rank predecessor lies further away
    from btacalc.model.gpu.schedule import _LAG, _lag, _structure
    m = 12 * group
    assert _lag(_structure(pp, vp, m, group, False), m, group) <= _LAG


@pytest.mark.slow
def test_search_simulates_the_schedule_of_every_layout_that_can_rank():
    # the search scores every layout by the step's lower bound (no bubble) and simulates the fastest bounds until
    # none left could enter the ranking: the ranking and the fastest non-fitting layout equal those of simulating
    # every layout
    from btacalc.config.execution import BatchLimits, ExecutionRequest
    from btacalc.config.resolution import resolve_execution
    from btacalc.config.pipeline import StageSplit
    from btacalc.planning import search as S
    from dataclasses import replace

    model, hw = resolve_model("qwen3-30b-a3b"), resolve_hardware("h100")
    req = ExecutionRequest(devices=32, seq_len=4096, limits=BatchLimits(global_batch=512))
    base = resolve_execution(req.with_changes(limits=replace(req.limits, global_batch=None, micro_batch=None),
                                              micro_batches=None, stage_split=StageSplit()), model, hw)
    candidates = list(S._candidates(model, hw, req, base, 512))
    assert any(c.layout.pipeline_parallel > 1 for c in candidates)
    usable = S._usable(model, hw, base, candidates)  # each candidate's own (tews: its library workspaces)
    pruned, every = S._scored(model, hw, base, candidates), S._evaluate(model, hw, base, candidates)

    def shown(scores):
        order = np.argsort(-scores.tokens, kind="stable")
        fits = scores.memory <= usable
        ranking = S._distinct(scores, [int(i) for i in order if fits[i]], usable)
        faster = [int(i) for i in order if not fits[i] and scores.tokens[i] > ranking[0].tokens_per_s]
        return ([(r.label(), r.tokens_per_s) for r in ranking],
                scores.row(faster[0], int(usable[faster[0]])).label() if faster else None)

    assert shown(pruned) == shown(every)
    # and the bound was a bound: no simulated step is below it
    bound = S._evaluate(model, hw, base, candidates, schedule=False)
    assert np.all(every.step >= bound.step * (1 - 1e-12))
    assert np.any(every.step > bound.step * 1.001)


def test_the_group_size_sets_the_in_flight_passes():
    # Megatron-LM's tunable_overlap test: 12 layers, PP 4, VP 3, M = 5, N = 5. The last stage (j = 3) warms up
    # 2(PP - j - 1) + (VP - 1)·N = 10 forwards and holds 11 chunk passes; the table runs chunk 0 for micro-batches
    # 0-4, then chunk 1, then chunk 2: 5, 5 and 1 of them (with N = PP = 4 it would warm up 8 and hold 9)
    from btacalc.model.gpu.stages import PipelineStages
    st = PipelineStages(12, 4, 3, 5, group=5)
    assert st.in_flight(3) == 11 and [st.chunk_passes(3, v) for v in range(3)] == [5, 5, 1]
    assert st.in_flight(0) == 2 * 3 + 2 * 5 + 1 - 2  # capped at M·VP = 15
    assert PipelineStages(12, 4, 3, 8).in_flight(3) == 2 * 4 + 1  # default N = PP


def test_the_interleaved_schedule_takes_m_that_megatron_takes(cli, tmp_path):
    # schedules.py L1160-1180: PP <= N <= M and M mod N is 0 or at least PP; btacalc refused any M not a multiple of
    # PP before it read N. PP 4, VP 3, M 5: N 5 runs (one group), N 4 (the default) leaves a last group of 1
    from btacalc.config.pipeline import group_rule
    assert group_rule(4, 5, 5) == "" and "mod" in group_rule(4, 5, 4) and group_rule(4, 10, 6) == "" \
        and "mod" in group_rule(4, 10, 7) and "must hold" in group_rule(4, 5, 3)
    base = ["plan", "--model", "gpt-toy-megatron-ci", "--hw", "h100", "--devices", "8", "--pp", "4", "--vp", "3",
            "--global-batch", "40", "--micro-batch", "4", "--seq", "1024"]
    code, _, err = cli(*base)
    assert code == 2 and "M 5 mod the micro-batch group 4 is 1" in err and "--microbatch-group-size not given" in err
    assert len(err.strip().splitlines()) == 1
    code, out, err = cli(*base, "--microbatch-group-size", "5", "--emit", "megatron")
    assert code == 0, err
    assert "--microbatch-group-size-per-virtual-pipeline-stage 5" in " ".join(out.split())
    code, _, err = cli(*base, "--microbatch-group-size", "3")
    assert code == 2 and "must hold PP 4 to M 5" in err, err
    launch = tmp_path / "launch.txt"
    launch.write_text("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
                      "--max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 40 --bf16 "
                      "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 "
                      "--microbatch-group-size-per-virtual-pipeline-stage 5")
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", str(launch), "--emit", "megatron")
    assert code == 0, err
    assert "--microbatch-group-size-per-virtual-pipeline-stage 5" in " ".join(out.split())
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", str(launch), "--emit", "bridge")
    assert code == 0, err
    assert "model.microbatch_group_size_per_vp_stage=5" in out.replace(" ", "")


@pytest.mark.parametrize("vectorised", [False, True])
def test_without_interleaving_the_group_size_does_not_cut_the_schedule(monkeypatch, vectorised):
    # review23: Megatron ignores --microbatch-group-size-per-virtual-pipeline-stage without interleaving, but the
    # plan's N reached the schedule as the extrapolation's period: at N = 1 < PP = 8 a pass's rank predecessor lies
    # PP - 1 = 7 groups away, past the _LAG groups the periodicity check compares
    from btacalc.model.gpu import schedule as S
    seen = []
    real = S._structure.__wrapped__

    def spy(pp, vp, m, group, extra):
        st = real(pp, vp, m, group, extra)
        seen.append(S._lag(st, m, group))
        return st
    monkeypatch.setattr(S, "_structure", spy)
    rng = np.random.default_rng(23)
    f = rng.uniform(0.2, 2, (8, 1))
    b = f * rng.uniform(1, 3, (8, 1))
    if vectorised:
        S.step_makespan(f[..., None], b[..., None], np.array([8]), np.array([1]), np.array([96]), np.array([1]),
                        np.array([0]))
    else:
        S.makespan(f, b, 8, 1, 96, 1)
    assert seen and max(seen) <= S._LAG


def test_a_layout_whose_bound_ties_the_slowest_row_is_simulated(monkeypatch):
    # review23: the pruning simulated a candidate only when its bound (the step without the bubble) beat the
    # ranking's slowest row strictly. Made-up tokens/s: five PP 1 layouts at 100, 90, 80, 70, 60 (exact = bound),
    # a pipelined Y, bound 55, simulated to 50 (the sixth and slowest row), and a pipelined X listed first, bound
    # 50 = the slowest row, exact 40. Left at its bound, X would tie Y at 50 and, listed first, take its place in the
    # ranking at a speed it does not reach; simulated, it drops to 40.
    from btacalc.config.execution import BatchLimits, ExecutionRequest
    from btacalc.config.resolution import resolve_execution
    from btacalc.config.pipeline import StageSplit
    from btacalc.planning import search as S
    from dataclasses import replace

    model, hw = resolve_model("qwen3-30b-a3b"), resolve_hardware("h100")
    req = ExecutionRequest(devices=32, seq_len=4096, limits=BatchLimits(global_batch=512))
    base = resolve_execution(req.with_changes(limits=replace(req.limits, global_batch=None, micro_batch=None),
                                              micro_batches=None, stage_split=StageSplit()), model, hw)
    every = list(S._candidates(model, hw, req, base, 512))
    plain, labels = [], set()  # five PP 1 layouts the ranking tells apart (its rows are one per label)
    for c in every:
        label = S._Scores([c], np.zeros(1), np.ones(1), np.ones(1), np.zeros(1), {}).row(0, 0).label().split(" rc ")[0]
        if c.layout.pipeline_parallel == 1 and label not in labels and len(plain) < S.RUNNERS_UP:
            labels.add(label)
            plain.append(c)
    x, y = [c for c in every if c.layout.pipeline_parallel > 1][:2]
    candidates = [x] + plain + [y]
    bound = {id(x): 50.0, id(y): 55.0, **{id(c): 100.0 - 10 * i for i, c in enumerate(plain)}}
    exact = {**bound, id(x): 40.0, id(y): 50.0}

    def evaluate(model, hardware, base, cands, schedule=True, memory=None):  # search33: memory, known, passed on
        tokens = np.array([(exact if schedule else bound)[id(c)] for c in cands])
        return S._Scores(list(cands), np.arange(len(cands)), 1 / tokens, tokens, np.zeros(len(cands)), {})

    monkeypatch.setattr(S, "_evaluate", evaluate)
    monkeypatch.setattr(S, "_usable", lambda *a: np.full(len(candidates), 1 << 60, dtype=np.int64))
    monkeypatch.setattr(S, "SIMULATED_AT_ONCE", S.RUNNERS_UP + 1)  # the first round: the six fastest bounds, Y's in
    scores = S._scored(model, hw, base, candidates)
    assert scores.tokens[-1] == 50.0 and scores.tokens[0] == 40.0
