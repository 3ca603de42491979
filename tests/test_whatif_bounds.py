"""`whatif` scans a hardware number inside the range its profile field admits (hostile32, noted: `--solve-for
calibration.compute_efficiency` scanned to 1000x an efficiency that is at most 1, every point past 1 a trace row "not a
valid profile"). The numbers solved for move together by one factor, so the scan stops where the first of them meets
its bound: today x min over the numbers of (bound / value)."""

from __future__ import annotations

import json

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.planning.whatif import RANGE_FACTOR, _bounds, _grid

H100 = resolve_hardware("h100")
EFF = H100.numbers()["calibration.compute_efficiency"].value  # 0.7034: a fraction, at most 1 (hardware.FRACTION)
BW = H100.numbers()["memory.achievable_bandwidth_fraction"].value  # 0.87, a fraction too


def test_an_efficiency_is_scanned_up_to_one():
    lo, hi = _bounds(H100, "calibration.compute_efficiency", EFF)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(EFF * 1e-6 / EFF)  # FRACTION: 1e-6 .. 1
    grid = _grid(EFF, False, (lo, hi))
    assert max(grid) == pytest.approx(1.0) and min(grid) == pytest.approx(EFF / RANGE_FACTOR)
    assert EFF in grid


def test_numbers_moved_together_stop_at_the_first_bound():
    """0.87 reaches 1 at a factor 1/0.87 = 1.149, before 0.7034 does (1.422): the scan of the first number (0.7034)
    stops at 0.7034 / 0.87 = 0.8085."""
    lo, hi = _bounds(H100, "calibration.compute_efficiency, memory.achievable_bandwidth_fraction", EFF)
    assert hi == pytest.approx(EFF * min(1 / EFF, 1 / BW)) == pytest.approx(EFF / BW)


def test_a_rate_keeps_the_thousandfold_scan():
    """A peak rate's range reaches 1e21 FLOP/s: far past 1000x an H100's 989 TFLOP/s, so the scan is as before."""
    peak = H100.numbers()["chip.peak_flops_per_s"].value
    grid = _grid(peak, False, _bounds(H100, "chip.peak_flops_per_s", peak))
    assert max(grid) == pytest.approx(peak * RANGE_FACTOR) and min(grid) == pytest.approx(peak / RANGE_FACTOR)


def test_no_trace_row_is_an_invalid_profile(cli):
    code, out, err = cli("whatif", "-m", "llama-3-8b", "--hw", "h100", "-n", "8", "--recompute", "full",
                         "--solve-for", "calibration.compute_efficiency", "--target", "tokens_per_s=1000000", "--json")
    assert code == 1, err  # not reached: exit 1, as a plan that does not fit
    result = json.loads(out)
    values = [row["value"] for row in result["trace"]]
    assert max(values) == pytest.approx(1.0)
    assert not any(row["binding_constraint"].startswith("not a valid") for row in result["trace"])
    assert "to 1 " in result["note"]
