"""The solver's edges that the mutation run of 2026-12-01 left without a test (docs/mutation-survivors.md,
"Real gaps left open"): the global-batch cap at exactly one sequence and with gradient accumulation fixed,
the chunks a search is split into, the micro-batch count reported for a point where nothing fits, and
the per-tile overhead of a profile that gives none. Each expected value is the arithmetic of the rule the
docstring states, not a number read off the code."""

from __future__ import annotations

import numpy as np
import pytest

from btacalc.config.execution import BatchLimits, Layout
from btacalc.config.presets import load_preset
from btacalc.model import solver
from btacalc.model.memory import MemoryModel
from btacalc.model.solver import PointLimits, search
from btacalc.model.timing import step_time
from support import resolved

MODEL = load_preset("qwen3-30b-a3b")
GPU_LAYOUT = Layout(devices=8, expert_parallel=8, zero_stage=1, devices_per_node=8)


def _solved(problem, **limits):
    return search(problem, PointLimits.of(BatchLimits(**limits)), "throughput").solution(0)


def test_a_global_batch_cap_of_one_sequence_on_one_rank_allows_one_sequence():
    """N = DP x M x G x b <= --max-global-batch. One wafer (DP 1), M = 1: a cap of 1 leaves G*b = 1 only,
    where without the cap the solver takes many sequences (so the cap is what decides)."""
    problem = resolved(MODEL, "wse3", seq_len=4096)
    assert problem.layout.data_parallel == 1
    free = _solved(problem)
    assert free.fits and free.tiles * free.tile_batch > 1
    capped = _solved(problem, max_global_batch=1)
    assert capped.fits and (capped.tiles, capped.tile_batch, capped.micro_batches) == (1, 1, 1)
    assert capped.binding_constraint == "max_global_batch"


def test_a_global_batch_cap_with_fixed_accumulation_divides_by_dp_times_m():
    """DP 8 ranks, M = 2 micro-batches fixed: --max-global-batch 32 leaves G*b <= 32 // (8 x 2) = 2 per
    micro-batch (dividing by DP / M instead would allow 32 // 4 = 8)."""
    problem = resolved(MODEL, "b200", layout=GPU_LAYOUT, seq_len=4096, recompute="full", attention="flash")
    dp, m, cap = problem.layout.data_parallel, 2, 32
    assert dp == 8
    free = _solved(problem, micro_batches=m)
    assert free.fits and free.tiles * free.tile_batch > cap // (dp * m)  # the cap binds
    capped = _solved(problem, micro_batches=m, max_global_batch=cap)
    assert capped.fits and capped.micro_batches == m
    assert capped.tiles * capped.tile_batch == cap // (dp * m) == 2
    assert dp * capped.micro_batches * capped.tiles * capped.tile_batch <= cap


@pytest.mark.parametrize("size", [0, 1, solver.CHUNK_SHAPES - 1, solver.CHUNK_SHAPES, solver.CHUNK_SHAPES + 1,
                                  3 * solver.CHUNK_SHAPES + 17])
def test_the_chunks_of_a_search_partition_its_shapes(size):
    """A pass evaluates at most CHUNK_SHAPES shapes; the passes cover 0..size-1 once each, in order:
    ceil(size / CHUNK_SHAPES) slices, each [i, min(i + CHUNK_SHAPES, size))."""
    chunks = solver._chunks(size)
    assert len(chunks) == -(-size // solver.CHUNK_SHAPES)
    covered = np.concatenate([np.arange(size)[c] for c in chunks]) if chunks else np.zeros(0, np.int64)
    assert covered.tolist() == list(range(size))
    assert all(c.start == i * solver.CHUNK_SHAPES for i, c in enumerate(chunks))
    assert all(len(range(size)[c]) <= solver.CHUNK_SHAPES for c in chunks)


def test_a_point_where_nothing_fits_reports_the_micro_batches_its_global_batch_implies():
    """Nothing fits (a sequence far beyond the wafer's memory): the plan reports the shape that does not
    fit as G and b fixed (else 1) and M = N / (DP x G x b) with N fixed: N = 1 on one wafer gives M = 1,
    N = 6 with G = 2 fixed gives M = 3."""
    problem = resolved(MODEL, "wse3", seq_len=1 << 22)
    assert not MemoryModel(problem).fits(1, 1)
    one = _solved(problem, global_batch=1)
    assert not one.fits and (one.tiles, one.tile_batch, one.micro_batches) == (1, 1, 1)
    six = _solved(problem, global_batch=6, tiles=2)
    assert not six.fits and (six.tiles, six.tile_batch, six.micro_batches) == (2, 1, 6 // (1 * 2 * 1))


def test_a_profile_without_a_tile_overhead_charges_none():
    """`calibration.tile_overhead_s` is a per-tile cost per layer and step that a profile may state; the shipped
    GPU profiles state none (their host issues each tile's launches, costs.py `_tiles`), and a profile without it
    charges nothing for tiling, not a default of its own. A GPU profile that states 20 us pays M x L x G x 20 us
    (one stage: L = 48 layers of Qwen3-30B-A3B)."""
    without = resolved(MODEL, "h100", layout=GPU_LAYOUT, seq_len=2048, recompute="full", attention="flash")
    hw = without.hardware
    assert hw.calibration.tile_overhead_s is None
    stated = hw.calibration.compute_efficiency.model_copy(update={"value": 20e-6, "kind": "estimate"})
    with_it = resolved(MODEL, hw.model_copy(update={"calibration": hw.calibration.model_copy(
        update={"tile_overhead_s": stated})}), layout=GPU_LAYOUT, seq_len=2048, recompute="full", attention="flash")
    tiles, m = 3, 2
    charged = step_time(with_it, tiles, 1, micro_batches=m).tiling_overhead_s
    assert charged == pytest.approx(m * MODEL.num_layers * tiles * 20e-6, rel=1e-12)
    assert step_time(without, tiles, 1, micro_batches=m).tiling_overhead_s == 0.0
