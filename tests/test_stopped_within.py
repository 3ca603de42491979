"""A stopping signal that a library turns into its own error is still a stop (nineteenth session).

A signal raises `Stopped` at the next bytecode (btacalc.cli.signals). numpy's comparison of structured arrays, which
`np.unique(..., axis=0)` runs on rows, replaces any exception raised inside it with "TypeError: Cannot compare
structured arrays unless they have a common dtype": a SIGTERM'd `sweep` (test_hostile's streaming sweep, under load)
exited 3, "internal error", instead of 143, "stopped by SIGTERM; nothing written". main now looks for the Stopped in
the error's chain."""

from __future__ import annotations

import signal

import pytest

from btacalc.cli import app
from btacalc.cli.signals import Stopped, stopped_within


def _raised_while_stopping(outer: type[Exception]) -> Exception:
    try:
        try:
            raise Stopped(signal.SIGTERM)
        except Stopped:
            raise outer("Cannot compare structured arrays unless they have a common dtype")
    except Exception as exc:  # noqa: BLE001 - the error a library raised over the Stopped
        return exc


def test_the_stopped_is_found_behind_a_librarys_error():
    exc = _raised_while_stopping(TypeError)
    found = stopped_within(exc)
    assert isinstance(found, Stopped) and found.signum == signal.SIGTERM and found.exit_code == 143


def test_an_error_of_its_own_is_no_stop():
    assert stopped_within(TypeError("a bug")) is None
    cyclic = ValueError("a")
    cyclic.__context__ = ValueError("b")
    cyclic.__context__.__context__ = cyclic  # a cycle ends the walk
    assert stopped_within(cyclic) is None


def test_main_says_stopped_and_exits_128_plus_n(monkeypatch, capsys):
    def run(argv):
        raise _raised_while_stopping(TypeError)

    monkeypatch.setattr(app, "_run", run)
    with pytest.raises(SystemExit) as exit_:
        app.main(["sweep"])
    assert exit_.value.code == 143
    assert capsys.readouterr().err.strip().splitlines() == ["btacalc: stopped by SIGTERM; nothing written"]


def test_a_bug_stays_a_bug(monkeypatch, capsys):
    def run(argv):
        raise TypeError("a bug")

    monkeypatch.setattr(app, "_run", run)
    monkeypatch.delenv("BTACALC_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        app.main(["sweep"])
    assert exit_.value.code == 3
    assert "internal error" in capsys.readouterr().err
