"""A stopping signal that a library turns into its own error is still a stop (nineteenth session; review19).

A signal raises `Stopped` at the next bytecode (btacalc.cli.signals). numpy's comparison of structured arrays, which
`np.unique(..., axis=0)` runs on rows, sets "TypeError: Cannot compare structured arrays unless they have a common
dtype" from C over whatever was raised inside it, and the TypeError carries neither __cause__ nor __context__: a
SIGTERM'd `sweep` (test_hostile's streaming sweep, under load) exited 3, "internal error", instead of 143, "stopped by
SIGTERM; nothing written". The handler now records the signal it raised, and main takes an error raised after it
for that stop; a failed clean-up (OSError, BtacalcError, DataError) is still reported as itself."""

from __future__ import annotations

import signal

import numpy as np
import pytest

from btacalc.cli import app, signals
from btacalc.cli.signals import Stopped, stopped_by
from btacalc.errors import BtacalcError


def _numpys_error_after_a_signal() -> TypeError:
    """What numpy does from C: the handler ran (and raised) inside the comparison, and the comparison's own error
    replaced the Stopped, chained to nothing."""
    try:
        signals._handler(signal.SIGTERM, None)
    except Stopped:
        pass
    return TypeError("Cannot compare structured arrays unless they have a common dtype.")


@pytest.fixture(autouse=True)
def _no_signal_yet():
    signals.received = None
    yield
    signals.received = None


def test_an_error_with_no_chain_after_the_signal_is_the_stop():
    exc = _numpys_error_after_a_signal()
    assert exc.__context__ is None and exc.__cause__ is None  # numpy's TypeError: nothing to follow
    found = stopped_by(exc)
    assert isinstance(found, Stopped) and found.signum == signal.SIGTERM and found.exit_code == 143


def test_a_stopped_found_in_the_chain():
    try:
        try:
            raise Stopped(signal.SIGHUP)
        except Stopped as inner:
            raise ValueError("raised while stopping") from inner
    except ValueError as exc:
        assert stopped_by(exc).signum == signal.SIGHUP


def test_an_error_of_its_own_is_no_stop():
    assert stopped_by(TypeError("a bug")) is None
    cyclic = ValueError("a")
    cyclic.__context__ = ValueError("b")
    cyclic.__context__.__context__ = cyclic  # a cycle ends the walk
    assert stopped_by(cyclic) is None


@pytest.mark.parametrize("failure", [OSError(5, "Input/output error", "out.json"), BtacalcError("a refusal")])
def test_a_failed_clean_up_after_a_stop_is_reported_as_itself(failure):
    _numpys_error_after_a_signal()  # the signal arrived
    assert stopped_by(failure) is None


def test_main_says_stopped_and_exits_128_plus_n(monkeypatch, capsys):
    def run(argv):
        raise _numpys_error_after_a_signal()

    monkeypatch.setattr(app, "_run", run)
    with pytest.raises(SystemExit) as exit_:
        app.main(["sweep"])
    assert exit_.value.code == 143
    assert capsys.readouterr().err.strip().splitlines() == ["btacalc: stopped by SIGTERM; nothing written"]


def test_main_reports_a_failed_restore_after_a_stop(monkeypatch, capsys):
    def run(argv):
        _numpys_error_after_a_signal()
        raise OSError(5, "Input/output error", "out.json")

    monkeypatch.setattr(app, "_run", run)
    with pytest.raises(SystemExit) as exit_:
        app.main(["sweep"])
    assert exit_.value.code == 2
    assert "cannot read or write out.json: Input/output error" in capsys.readouterr().err


def test_a_bug_stays_a_bug(monkeypatch, capsys):
    def run(argv):
        raise TypeError("a bug")

    monkeypatch.setattr(app, "_run", run)
    monkeypatch.delenv("BTACALC_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        app.main(["sweep"])
    assert exit_.value.code == 3
    assert "internal error" in capsys.readouterr().err


def test_each_command_starts_with_no_signal_received():
    _numpys_error_after_a_signal()
    with signals.handled():
        assert signals.received is None


def test_numpys_unique_on_rows_compares_structured_rows():
    """The path the fix is for exists: np.unique(..., axis=0) views each row as one structured (void) element."""
    rows = np.array([[1, 2], [1, 2], [3, 4]])
    unique, inverse = np.unique(rows, axis=0, return_inverse=True)
    assert unique.tolist() == [[1, 2], [3, 4]] and inverse.ravel().tolist() == [0, 0, 1]
