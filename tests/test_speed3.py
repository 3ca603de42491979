"""Fast paths of the speed3 round return exactly what the slow paths return (issue 25, item 6)."""

from __future__ import annotations

import re

import numpy as np

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.markup import escape

from btacalc.cli.options import help_text

_MARKUP = st.text(alphabet="[]\\/#@ab Z:=.-", max_size=40)


@settings(max_examples=500, deadline=None)
@given(_MARKUP)
def test_help_text_escapes_exactly_as_rich(text: str) -> None:
    assert help_text(text) == escape(text)


def test_help_text_escapes_the_shipped_help_as_rich() -> None:
    """Every help text of every command, escaped without rich, equals rich's escape of it."""
    import typer.main

    from btacalc.cli.app import app

    raw = []
    group = typer.main.get_command(app)
    for command in group.commands.values():  # type: ignore[attr-defined]
        for param in command.params:
            raw.append(getattr(param, "help", None) or "")
    assert any("\\[" in text for text in raw)  # the help does carry escaped "[default: ...]" tags
    for text in ["[default: 1]", "a \\[b]", "x\\", "x\\\\", "[/]", "[#fff]", "[@click]", "[ab[cd]", "[Z]", "[a"]:
        assert help_text(text) == escape(text), text


def test_one_command_app_builds_the_same_command_as_the_whole_app() -> None:
    """`btacalc plan ...` builds only `plan`; every command so built equals the whole app's (options, types,
    defaults, help), and anything but a command name first takes the whole app."""
    import typer.main

    from btacalc.cli import app as cli

    whole = typer.main.get_command(cli.app)
    names = list(whole.commands)  # type: ignore[attr-defined]
    singles = [n for n in names if not hasattr(whole.commands[n], "commands")]  # type: ignore[attr-defined]
    assert "plan" in singles and "hw" in names and "hw" not in singles
    for name in singles:
        narrowed = typer.main.get_command(cli._invoked([name, "--json"]))
        assert list(narrowed.commands) == [name]  # type: ignore[attr-defined]
        built, full = narrowed.commands[name], whole.commands[name]  # type: ignore[attr-defined]
        assert built.name == full.name and _params(built) == _params(full)
    for argv in ([], ["--help"], ["--version"], ["hw", "list"], ["plann"], ["--json", "plan"]):
        assert cli._invoked(argv) is cli.app


def _params(command: object) -> list[dict[str, object]]:
    """Every attribute of every option but the callbacks typer wraps anew on each build (compared by name)."""
    rows = []
    for param in command.params:  # type: ignore[attr-defined]
        row = {k: (getattr(v, "__name__", None) if callable(v) else re.sub(r" at 0x[0-9a-f]+", "", repr(v))) for k, v in vars(param).items()}
        rows.append(row)
    return rows


_LAYOUTS = [("qwen3-30b-a3b", "h100", dict(devices=16, expert_parallel=8)),
            ("deepseek-v3", "h100", dict(devices=512, expert_parallel=32, pipeline_parallel=16)),
            ("mixtral-8x7b", "h100", dict(devices=8, expert_parallel=8, precision="fp8")),
            ("llama-3-8b", "a100-80gb", dict(devices=8, zero_stage=3, recompute="full")),
            ("qwen3-30b-a3b", "h100", dict(devices=16, expert_parallel=8, context_parallel=2)),
            ("qwen3-30b-a3b", "wse3", dict())]


def _problem(name: str, hw: str, ask: dict) -> object:
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import load_preset
    from btacalc.planning.resolve import resolve_problem

    return resolve_problem(load_preset(name), resolve_hardware(hw), ExecutionRequest(seq_len=4096, **ask))


def test_rows_of_an_array_of_shapes_at_once_equal_each_row_by_affine() -> None:
    """Every formula row at a small array of shapes, computed for all rows in four operations, equals
    `affine` row by row (the per-row path): bit for bit, in type, and as Python ints where no shape term
    is; shapes that do not qualify (ints, zeros, 2-D) leave every row to `affine`."""
    from btacalc.catalogue.compiled import ROW_QUANTITIES, affine

    shapes = [(np.array([1.0, 2, 3, 7, 64, 1, 28]), np.array([1.0, 1, 2, 3, 1, 40, 1])),
              (np.array([5.0]), np.array([5.0])), (np.array([1e6, 3.0]), np.array([2.0**20, 1.0]))]
    stacked = 0
    for name, hw, ask in _LAYOUTS:
        problem = _problem(name, hw, ask)
        for coefs in problem.coefficients():  # type: ignore[attr-defined]
            rows = range(len(coefs.flat) // 4)
            for g, b in [*shapes, (np.array([1, 2]), np.array([3, 4])), (np.array([0.0, 2]), np.array([1.0, 1])),
                         (np.array([[1.0, 2]]), np.array([[3.0, 4]]))]:
                values = coefs.at(g, b)
                fast = [values._row(r) for r in rows]
                slow = [affine(*coefs.row(r), g, b, g * b) for r in rows]
                for r, (x, y) in enumerate(zip(fast, slow, strict=True)):
                    assert type(x) is type(y) and np.shape(x) == np.shape(y), (name, r)
                    assert np.array_equal(x, y) and np.array_equal(np.signbit(x), np.signbit(y)), (name, r)
                by_phase = coefs.at(g, b)  # read through `of` first (the step time's order)
                for phase in by_phase.phase_names():
                    for quantity in ROW_QUANTITIES:
                        x, y = by_phase.of(phase)[quantity], slow[coefs.compiled.row[(phase, quantity)]]
                        assert type(x) is type(y) and np.array_equal(x, y), (name, phase, quantity)
                stacked += values._columns_pending is False and coefs.varying_columns is not None \
                    and np.ndim(g) == 1 and g.dtype == float and (g > 0).all()
    assert stacked >= 3 * 4  # the four-operation path ran on most layouts' shapes


def test_gemm_passes_at_once_equal_each_pass_alone() -> None:
    """Forward, data- and weight-gradient GEMMs of arrays of shapes in one stacked pass equal `gemm_time`
    at (m, n, k), (m, k, n), (k, n, m) one by one, bit for bit (empty launches and scalars mixed in)."""
    from btacalc.model.gpu.gemm import GemmDevice, gemm_passes, gemm_time

    device = GemmDevice(0.73 * 1979e12, 3.35e12, 132, ((128, 128), (128, 256), (256, 128)), 1.5e-6, 1.6)
    roofline_max = GemmDevice(312e12, 2.0e12, 108, ((128, 128), (256, 128)), 2e-6, float("inf"))
    rng = np.random.default_rng(3)
    m = rng.integers(0, 30000, 64).astype(float)
    n, k = rng.integers(1, 9000, 64).astype(float), rng.integers(0, 9000, 64).astype(float)
    groups = rng.integers(0, 9, 64).astype(float)
    for dev in (device, roofline_max):
        for args in ((m, n, k, groups), (m, 4096, 7168, 1), (m[:1], 14336.0, 4096, groups[:1]), (m, n, 512, 2.0)):
            mm, nn, kk, g = args
            together = gemm_passes(mm, nn, kk, 2, dev, g)
            alone = (gemm_time(mm, nn, kk, 2, dev, g), gemm_time(mm, kk, nn, 2, dev, g), gemm_time(kk, nn, mm, 2, dev, g))
            for a, b in zip(together, alone, strict=True):
                for field in ("time_s", "efficiency", "quantisation", "memory_bound"):
                    x, y = getattr(a, field), getattr(b, field)
                    assert np.shape(x) == np.shape(y) and np.asarray(x).dtype == np.asarray(y).dtype, field
                    assert np.array_equal(x, y), field
                assert np.array_equal(a.binding(), b.binding())
    one = gemm_passes(4096, 14336, 4096, 2, device, 1)  # one shape: the cached scalars
    assert one[1] is gemm_time(4096, 4096, 14336, 2, device, 1)


def test_stage_state_kept_per_problem_equals_a_fresh_problem() -> None:
    """The per-stage training state, gather buffer and low-precision copies kept per layout (shape-free)
    give every stage's components exactly as a fresh problem computes them without keeping any, shapes alternated (ints,
    arrays, ints again), types included; and they are kept (the second shape reads them)."""
    from btacalc.model.gpu.memory import GpuMemory

    shapes = [(1, 1), (np.array([1.0, 2, 5]), np.array([3.0, 1, 2])), (3, 2), (1, 7), (np.array([4.0]), np.array([4.0]))]
    for name, hw, ask in [case for case in _LAYOUTS if case[1] != "wse3"] + [
            ("mixtral-8x7b", "h100", dict(devices=64, expert_parallel=8, pipeline_parallel=4, zero_stage=3,
                                          precision="fp8", fp8_param_gather=True))]:
        kept = _problem(name, hw, ask)
        for g, b in shapes:
            warm = GpuMemory(kept).stage_rows(g, b)  # type: ignore[arg-type]
            fresh_problem = _problem(name, hw, ask)
            object.__setattr__(fresh_problem, "_cache", _Forgetful())  # nothing kept: every stage computed
            object.__setattr__(fresh_problem, "layout_cache", _Forgetful())  # (nor shared with `kept`'s layout)
            fresh = GpuMemory(fresh_problem).stage_rows(g, b)  # type: ignore[arg-type]
            for a, f in zip(warm, fresh, strict=True):
                assert a.state_parts == f.state_parts and a.components.keys() == f.components.keys()
                for k in a.components:
                    assert type(a.components[k]) is type(f.components[k]), (name, k)
                    assert np.array_equal(a.components[k], f.components[k]), (name, k)
        assert any(isinstance(k, tuple) and k[:1] == ("gpu stage state",) for k in kept.layout_cache), name  # type: ignore[attr-defined]


class _Forgetful(dict):  # type: ignore[type-arg]
    """A problem's cache that keeps nothing."""

    def __setitem__(self, key: object, value: object) -> None:
        pass
