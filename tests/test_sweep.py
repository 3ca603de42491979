"""The vectorised sweep: each point equals what `plan` answers for it, output streams in grid order,
grids above the limit are refused before any work, invalid points are reported."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import btacalc.cli.progress as progress_module
from btacalc.config.execution import BatchLimits, ExecutionRequest
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.planning import sweep as sweep_module
from btacalc.planning.plan import make_plan
from btacalc.planning.sweep import Grid, SweepPoint, run_sweep


def _close(a, b, path=""):
    """Values equal, floats to 1e-12 (the golden tolerance)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-12), path
    else:
        assert a == b, (path, a, b)


grids = st.fixed_dictionaries({
    "seq": st.lists(st.sampled_from([512, 1024, 2048, 4096, 8192, 32768]), min_size=1, max_size=3, unique=True),
    "experts": st.lists(st.sampled_from([4, 8, 16, 64]), min_size=1, max_size=2, unique=True),
}, optional={"top-k": st.lists(st.sampled_from([1, 2, 8]), min_size=1, max_size=2, unique=True),
             "max-tile-batch": st.lists(st.sampled_from([1, 3]), min_size=1, max_size=2, unique=True),
             "global-batch": st.lists(st.sampled_from([8, 24]), min_size=1, max_size=2, unique=True)})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grid=grids, hw=st.sampled_from(["wse2", "wse3", "b200"]), objective=st.sampled_from(["throughput", "density"]))
def test_every_point_is_what_plan_answers(grid, hw, objective):
    """The vectorised sweep (points grouped, sequence lengths and limits as arrays) against one
    `make_plan` per point: same plan and throughput fields (the density objective's explanation and
    constraint texts come from the search, so only its numbers are compared)."""
    model, profile = load_preset("qwen3-30b-a3b"), resolve_hardware(hw)
    devices = 8 if hw == "b200" else 1
    request = ExecutionRequest(devices=devices, objective=objective)
    result = run_sweep(model, profile, request, grid)
    assert len(result.points) == math.prod(len(v) for v in grid.values())
    for point in result.points:
        p = point.params
        limits = BatchLimits(global_batch=p.get("global-batch"), max_tile_batch=p.get("max-tile-batch"))
        try:
            spec = model.with_overrides(experts=p["experts"], top_k=p.get("top-k"))
            want = make_plan(spec, profile, request.with_changes(seq_len=p["seq"], limits=limits))
        except Exception as exc:  # the sweep must have kept the point with this error
            assert point.error == str(exc)
            continue
        assert point.error is None
        got_plan, want_plan = point.plan.model_dump(), want.plan.model_dump()
        if objective == "density":
            for field in ("binding_constraint", "tile_constraint", "explanation", "memory_evaluations"):
                got_plan.pop(field), want_plan.pop(field)
        _close(got_plan, want_plan)
        assert (point.throughput is None) == (want.throughput is None)
        if point.throughput is not None:
            # a sweep point lists no per-collective rows (plan --json does); their times are in communication_s
            got_th, want_th = point.throughput.model_dump(), want.throughput.model_dump()
            assert got_th.pop("collectives") == []
            want_th.pop("collectives")
            # nor the dense reference's M (review36: plan's field; a sweep point leaves it null, its description says)
            assert got_th.pop("dense_micro_batches") is None
            want_th.pop("dense_micro_batches")
            _close(got_th, want_th)


def test_grid_is_indexed_without_being_built():
    grid = Grid.of({"seq": range(1, 10**9 + 1), "experts": [8, 16]})
    assert grid.size == 2 * 10**9
    cols = grid.columns(grid.digits(10**9 - 1, 10**9 + 1))
    assert cols["seq"].tolist() == [500_000_000, 500_000_001] and cols["experts"].tolist() == [16, 8]
    with pytest.raises(Exception, match="more than the limit of 1,000,000"):
        grid.check()


def test_blocks_stream_in_grid_order(monkeypatch):
    monkeypatch.setattr(sweep_module, "BLOCK_POINTS", 3)
    model, hw = load_preset("qwen3-30b-a3b"), resolve_hardware("wse3")
    grid = Grid.of({"experts": [16, 64], "seq": [1024, 2048, 4096, 8192]})
    blocks = list(sweep_module.iter_sweep(model, hw, ExecutionRequest(), grid))
    assert [len(b) for b in blocks] == [3, 3, 2]
    rows = [r for b in blocks for r in b.param_rows()]
    assert rows == [{"experts": e, "seq": s} for e in (16, 64) for s in (1024, 2048, 4096, 8192)]
    whole = run_sweep(model, hw, ExecutionRequest(), {"experts": [16, 64], "seq": [1024, 2048, 4096, 8192]})
    streamed = [SweepPoint.model_validate(p) for b in blocks for p in b.points()]
    assert [p.model_dump() for p in streamed] == [p.model_dump() for p in whole.points]


def test_cli_json_and_csv_stream_the_same_points(cli, tmp_path):
    csv_path, json_path = tmp_path / "s.csv", tmp_path / "s.json"
    code, out, err = cli("sweep", "--hw", "wse3", "--vary", "experts=16:64:x2", "--vary", "seq=1024,4096", "--json",
                         "--csv", str(csv_path), "--output", str(json_path))
    assert code == 0 and not err
    doc = json.loads(out)
    assert doc == json.loads(json_path.read_text())
    assert {"model", "hardware", "fixed_active", "points"} == set(doc) and len(doc["points"]) == 6
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert [(int(r["experts"]), int(r["seq"])) for r in rows] == [(p["params"]["experts"], p["params"]["seq"])
                                                                  for p in doc["points"]]
    assert [int(r["tiles"]) for r in rows] == [p["plan"]["tiles"] for p in doc["points"]]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_large_grid_streams_a_text_table(cli):
    code, out, err = cli("sweep", "--hw", "wse3", "--vary", "seq=128:65536:128", "--vary", "experts=8,128")
    lines = out.splitlines()
    # title, header, the first TextTable.ROWS = 1,000 points, then one line counting the other 24
    assert code == 0 and len(lines) == 2 + 1000 + 1
    assert lines[1].split()[:4] == ["seq", "experts", "G", "b"]
    assert lines[-1] == "... 24 more points not shown: --csv, --json or --output write every point"


def test_a_sweep_to_files_prints_a_summary(cli, tmp_path):
    """Files get the data, the terminal a summary: the count, the fitting count, the 5 fastest, the file."""
    import csv as csvmod

    path = tmp_path / "s.csv"
    code, out, _ = cli("sweep", "--hw", "wse3", "--vary", "seq=128:65536:128", "--vary", "experts=8,128", "--csv",
                       str(path), "--quiet")
    rows = list(csvmod.DictReader(path.open()))
    lines = out.splitlines()
    fitting = [r for r in rows if r["tokens_per_s"] not in ("", "nan")]
    assert code == 0 and len(rows) == 1024 and len(lines) == 1 + 5
    assert lines[0].endswith(f"1,024 points, {len(fitting):,} fit; written to {path} (--csv)")
    best = sorted(fitting, key=lambda r: -float(r["tokens_per_s"]))[:5]
    assert [f"{float(r['tokens_per_s']):,.0f}" for r in best] == [ln.split()[0] for ln in lines[1:]]


def test_huge_grid_is_refused_before_any_work(cli, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("the sweep started")

    monkeypatch.setattr(sweep_module, "_Solver", no_work)
    code, out, err = cli("sweep", "--hw", "wse3", "--vary", "seq=1:1000000000:1")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "1,000,000,000 points" in err and "--max-points" in err
    code, _, err = cli("sweep", "--hw", "wse3", "--vary", "seq=1:2000:1", "--max-points", "1000")
    assert code == 2 and "2,000 points" in err


def test_invalid_points_are_reported(cli, tmp_path):
    code, out, err = cli("sweep", "--hw", "wse3", "--vary", "experts=4,16", "--vary", "top-k=8", "--json")
    assert code == 0
    assert err.strip().splitlines() == [
        "btacalc: invalid point experts=4, top-k=8: overrides: top_k (8) is larger than the number of experts (4)"]
    points = json.loads(out)["points"]
    assert points[0]["error"] and points[0]["plan"]["binding_constraint"] == "invalid" and not points[1]["error"]


def test_many_invalid_points_get_one_summary_line(cli):
    code, _, err = cli("sweep", "--hw", "wse3", "--vary", "experts=1:40:1", "--vary", "top-k=32", "--json")
    assert code == 0
    assert err.strip().splitlines() == [
        "btacalc: 31 of 40 points are invalid; the first: experts=1, top-k=32: overrides: top_k (32) is larger "
        "than the number of experts (1)"]


def test_no_valid_point_exits_2_and_writes_nothing(cli, tmp_path):
    csv_path = tmp_path / "s.csv"
    code, _, err = cli("sweep", "--hw", "wse3", "--vary", "experts=2,4", "--vary", "top-k=8", "--csv", str(csv_path))
    assert code == 2 and err.strip().splitlines() == [
        "btacalc: error: none of the 2 points of the sweep is valid; the first: experts=2, top-k=8: overrides: top_k (8) "
        "is larger than the number of experts (2)"]
    assert not list(tmp_path.iterdir())


def test_slow_sweep_shows_progress_unless_quiet(cli, monkeypatch):
    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)
    monkeypatch.setattr(progress_module, "PIPED_INTERVAL_S", 0.0)
    code, _, err = cli("sweep", "--hw", "wse3", "--vary", "experts=16,32", "--json")
    assert code == 0 and "btacalc: solving: 2 of 2 (100%)" in err
    code, _, err = cli("sweep", "--hw", "wse3", "--vary", "experts=16,32", "--json", "--quiet")
    assert code == 0 and not err


def test_blocks_are_not_kept(monkeypatch):
    """Memory stays bounded: a block solved and written is freed, also when points are invalid (an
    error kept with its traceback would keep the frames that solved the block)."""
    import gc
    import weakref

    monkeypatch.setattr(sweep_module, "BLOCK_POINTS", 4)
    grid = Grid.of({"seq": [1024, 2048, 4096, 8192], "experts": [4, 16], "top-k": [8]})
    blocks = sweep_module.iter_sweep(load_preset("qwen3-30b-a3b"), resolve_hardware("wse3"), ExecutionRequest(), grid)
    first = next(blocks)
    assert first.errors[0] and not first.errors[1]
    column = weakref.ref(first.columns["tiles"])
    del first
    for _ in blocks:
        pass
    gc.collect()
    assert column() is None


def test_a_sweep_with_no_valid_point_writes_nothing_on_stdout(cli):
    """Every point invalid: one line names the first and its reason, exit 2, and the streamed JSON or
    CSV never reaches standard output (it is held until a point is valid)."""
    for fmt in (["--json"], ["--csv", "-"]):
        code, out, err = cli("sweep", "-q", "--vary", "top-k=200,300", *fmt)
        lines = err.strip().splitlines()
        assert code == 2 and out == "" and len(lines) == 1
        assert lines[0].startswith("btacalc: error: none of the 2 points of the sweep is valid; the first: top-k=200: ")
    code, out, err = cli("sweep", "-q", "--vary", "top-k=200,8", "--json")  # one valid point: both are written
    assert code == 0 and len(json.loads(out)["points"]) == 2 and "invalid point top-k=200" in err


def test_a_sweep_of_100000_points_to_csv_prints_at_most_30_lines(cli, tmp_path):
    """Issue 25's acceptance: `sweep --csv F` of 100,000 points prints at most 30 lines (it printed the whole
    table: 98,338 lines for 98,336 points). 1,000 tile counts x 100 tile batches = 100,000 points; the file
    gets every one (and the header), the terminal a summary. slow (conftest.SLOW): about 10 s."""
    path = tmp_path / "grid.csv"
    code, out, err = cli("sweep", "--hw", "wse3", "--vary", "tiles=1:1000:1", "--vary", "tile-batch=1:100:1",
                         "--csv", str(path))
    assert code == 0
    assert len(out.splitlines()) + len(err.splitlines()) <= 30, (out, err)
    with path.open() as f:
        assert sum(1 for _ in f) == 1 + 1000 * 100
    assert "100,000 points" in out.splitlines()[0] and str(path) in out.splitlines()[0]


def test_a_streamed_table_on_a_terminal_is_cut_to_its_height(cli, monkeypatch):
    """Issue 25 (Build 4): a table longer than the terminal is cut with a count. On a 30-line terminal a
    1,024-point sweep shows 30 - 4 (title, header, count, prompt) = 26 rows and counts the other 998; a
    pipe still gets TextTable.ROWS rows (test_large_grid_streams_a_text_table)."""
    import os
    import sys

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdout, "fileno", lambda: 1, raising=False)
    monkeypatch.setattr(os, "get_terminal_size", lambda fd=1: os.terminal_size((120, 30)))
    from btacalc.cli import sweeping

    assert sweeping.terminal_rows() == 30 - sweeping.TERMINAL_FRAME_LINES
    monkeypatch.setattr(sweeping, "terminal_rows", lambda: 26)
    code, out, _ = cli("sweep", "--hw", "wse3", "--vary", "seq=128:65536:128", "--vary", "experts=8,128")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 + 26 + 1
    assert lines[-1] == f"... {1024 - 26:,} more points not shown: --csv, --json or --output write every point"


def test_shapes_in_small_chunks_give_the_same_points(monkeypatch):
    """solver.CHUNK_SHAPES only bounds the memory of a pass (issue 25 item 6: the sweep's peak RSS): the
    same grid searched with a handful of shapes a pass answers point for point what one pass answers."""
    import btacalc.model.solver as solver

    model, hw = load_preset("qwen3-30b-a3b"), resolve_hardware("wse3")
    grid = {"experts": [8, 16, 64], "seq": [1024, 4096, 16384, 65536]}
    monkeypatch.setattr(solver, "CHUNK_SHAPES", 1 << 20)
    whole = run_sweep(model, hw, ExecutionRequest(), grid)
    monkeypatch.setattr(solver, "CHUNK_SHAPES", 5)
    chunked = run_sweep(model, hw, ExecutionRequest(), grid)
    assert [p.model_dump() for p in chunked.points] == [p.model_dump() for p in whole.points]


def test_points_searched_a_few_at_a_time_give_the_same_points(monkeypatch):
    """sweep.SEARCH_POINTS only bounds the arrays of one search (issue 25 item 6): a grid of several
    models searched 2 points at a time answers point for point what one search of all of them answers."""
    model, hw = load_preset("qwen3-30b-a3b"), resolve_hardware("wse3")
    grid = {"experts": [8, 16, 64], "seq": [1024, 4096, 16384]}
    monkeypatch.setattr(sweep_module, "SEARCH_POINTS", 1 << 20)
    whole = run_sweep(model, hw, ExecutionRequest(), grid)
    monkeypatch.setattr(sweep_module, "SEARCH_POINTS", 2)
    split = run_sweep(model, hw, ExecutionRequest(), grid)
    assert [p.model_dump() for p in split.points] == [p.model_dump() for p in whole.points]


def test_a_models_dense_equivalent_is_derived_once_per_sweep(monkeypatch):
    """Each point's dense reference (the model with the same active parameters) is keyed on the dense
    model's numbers; a block's group holds every model of the block while a search takes SEARCH_POINTS of
    its points, so deriving the key of every model of the group per search cost models x searches per
    block (docs/speed.md, "cold6"). Derived once per model now: 4 models (E x k), 12 points searched 2 at
    a time make 4 derivations, and the points equal one search of all of them."""
    from btacalc.config.model import ModelSpec

    model, hw = load_preset("qwen3-30b-a3b"), resolve_hardware("wse3")
    grid = {"seq": [1024, 4096, 16384], "experts": [8, 16], "top-k": [1, 2]}
    monkeypatch.setattr(sweep_module, "SEARCH_POINTS", 1 << 20)
    whole = run_sweep(model, hw, ExecutionRequest(), grid)
    derived: list[tuple[int, int]] = []
    original = ModelSpec.dense_equivalent

    def counted(self: ModelSpec) -> ModelSpec:
        if self.is_moe:  # a dense model's (the reference's own problem) is itself
            derived.append((self.num_experts, self.top_k))
        return original(self)

    monkeypatch.setattr(ModelSpec, "dense_equivalent", counted)
    monkeypatch.setattr(sweep_module, "SEARCH_POINTS", 2)
    split = run_sweep(model, hw, ExecutionRequest(), grid)
    assert sorted(derived) == [(8, 1), (8, 2), (16, 1), (16, 2)]
    assert [p.model_dump() for p in split.points] == [p.model_dump() for p in whole.points]
