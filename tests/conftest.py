from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# CI and a plain `pytest` draw the same examples every run (a property test that fails, fails every time);
# `pytest --hypothesis-profile explore` draws new ones to look for counterexamples
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("repeatable")

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def cli(capsys):
    """Run the btacalc console entry point in-process: returns (exit code, stdout, stderr)."""
    from btacalc.cli import main
    from btacalc.cli.console import err, out

    def run(*args: str) -> tuple[int, str, str]:
        out.reset()  # each command reads the width from its environment, as a new process would
        err.reset()
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        cap = capsys.readouterr()
        return exc.value.code, cap.out, cap.err

    return run


@pytest.fixture(autouse=True)
def _no_progress_lines(monkeypatch):
    """A command that runs past the progress delay (2 s) prints a progress line on stderr; on a loaded
    2-core machine ordinary commands can, and a test that expects a clean stderr would fail by timing.
    Tests run with the delay at infinity; a test of the progress line sets its own (test_sweep)."""
    import btacalc.cli.progress as progress_module

    monkeypatch.setattr(progress_module, "DELAY_S", float("inf"))


def pytest_addoption(parser):
    parser.addoption("--regen-goldens", action="store_true", default=False,
                     help="rewrite tests/goldens/*.json from the current code (say why in the commit)")


# Slow tests (issue 25: the suite within 4 minutes with `pytest -n auto` on 2 cores): the property tests
# that plan hundreds of problems and the tests that run a whole validation (every published point and
# measured run), each 10-125 s serially on the shared 2-core machine (`--durations=60`, 2026-12-01).
# They carry the `slow` marker (pyproject: deselected by default) and CI runs them too (`.ci/run`:
# `pytest -m slow`). Node-id patterns, matched with re.search.
SLOW = (
    r"test_search\.py::test_fastest_shape_equals_brute_force",  # property: brute force over every shape
    r"test_properties\.py::test_plans_never_crash",  # property: random plans against the schema
    r"test_properties\.py::test_exit_2_exactly_when",  # property: random command lines, in process
    r"test_goldens\.py::test_golden\[validate",  # whole validation
    r"test_measured\.py::(test_readme_accuracy_block_is_current|test_shipped_runs_load_and_every_run_is_reported"
    r"|test_validate_measured_cli_json_and_file)",  # whole validation of the measured runs
    r"test_sweep_validate\.py::test_validate_(cli|passes_or_documents_gaps)",  # whole validation
    r"test_terminal\.py::test_an_ascii_stream_gets_ascii\[\['validate'\]",  # whole validation, ASCII
    r"test_terminal\.py::test_every_table_fits_the_terminal_without_cutting\[command5-",  # validate's tables
    r"test_readme\.py::test_inline_command_runs\[btacalc (validate|crossover|measure)",  # whole runs
    r"test_readme\.py::test_inline_command_runs\[btacalc plan .*--search",  # layout searches
    r"test_collectives\.py::test_cross_validation_of_shipped_runs",  # leave-one-out over the shipped runs
    r"test_expected_error\.py::test_the_shipped_expected_errors_are",  # leave-one-out over the shipped runs
    r"test_memory_reserves\.py::(test_every_shipped_memory_run_fits_and_meets_the_gate"
    r"|test_an_moe_run_that_does_not_name_its_dispatcher)",  # every shipped memory run
    r"test_catalogue_pinned\.py::test_doubling_a_term_moves_a_golden",  # every golden, once per mutated term
    r"test_wafer\.py::test_validate_says_what_the_flat_top_k_1_curve_would_take",  # whole validation
    r"test_sweep\.py::test_a_sweep_of_100000_points_to_csv_prints_at_most_30_lines",  # 100,000 points
    # the sweep's dense reference at s = 2^60 and 2^62 searches every corner of a memory limit that never
    # binds (47-72 s each serially, 2026-12-02); the other EXACT sizes stay in the default pass
    r"test_hostile\.py::test_huge_sizes_in_a_sweep_give_the_plan_verdict"
    r"\[seq-(1152921504606846976|4611686018427387904)\]",
    r"test_calibration\.py::test_check_runs_do_not_move_the_fit",  # three whole refits of the wse family (24 s)
    # round "cold5" (`-n 2 --durations=80` at fd8bf96, 2026-12-02, load 6-10; wall seconds per test):
    r"test_terminal\.py::test_every_long_table_of_a_listing_is_cut_on_a_terminal\[validate\]",  # whole validation (207 s)
    r"test_terminal\.py::test_every_table_fits_the_terminal_without_cutting\[command6-40\]",  # a layout search (35 s);
    # the same search's table at 80 columns stays in the default pass
    r"test_sweep\.py::test_shapes_in_small_chunks_give_the_same_points",  # property: 1,598 passes equal one (61 s)
    # the full-size PyTorch grids (FakeTensorMode, 16-57 s a point): their first point stays in the default pass
    r"test_torchref\.py::test_full_size_formulas_match_measurement\[changes[1-9]",
    r"test_torchref\.py::test_new_blocks_full_size_match_phase_by_phase\[(?!deepseek-v3-moe-)",
    r"test_torchref\.py::test_bta_keeps_stored_bytes_and_divides_attention_intermediate\[flash\]",
    # mypy over the whole package with a cold cache, as on a fresh clone (71-82 s wall, cold5): a whole-program
    # check like the whole validation; CI's `-m slow` step still runs it
    r"test_architecture\.py::test_type_check",
)


def pytest_collection_modifyitems(config, items):
    import re

    slow = re.compile("|".join(f"(?:{p})" for p in SLOW))
    for item in items:
        if slow.search(item.nodeid):
            item.add_marker(pytest.mark.slow)
