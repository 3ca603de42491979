"""Task swdate: each measured run's software date (`software_date`, YYYY-MM, with `software_date_source`) and the
errors grouped by the year of that software (validate's by_software_year, --cross-validate's by_software_year).

The dates are derived from what each row cites (docs/runs.md, section swdate); the spot checks below redo that
arithmetic from the tag, round or paper the row names, never from btacalc's own output."""

from __future__ import annotations

import json
import math
import re

import pytest
from pydantic import ValidationError

from btacalc.paths import package_data
from btacalc.planning.crossval import CrossRun, Setting, cross_validate, scale_group
from btacalc.planning.measured import (Measured, MeasuredRun, RunResult, by_software_year, load_runs, predict,
                                       software_year)
from tests.loading import load_script
from tests.support import readme_prose as _prose

SHIPPED = json.loads(package_data("measured_runs.json").read_text())["runs"]
BY_ID = {r["id"]: r for r in SHIPPED}


def _run(**change):
    base = dict(id="r", source="synthetic test run", model="llama-3-8b", hw="h100", devices=8, precision="bf16",
                seq=8192, global_batch=128, role="check", measured={"tokens_per_s_per_device": 1000.0})
    return MeasuredRun.model_validate(base | change)


# -- the field ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("good", ["2025-04", "2021-01", "2026-12"])
def test_a_month_written_yyyy_mm_is_read(good):
    assert _run(software_date=good).software_date == good


@pytest.mark.parametrize("bad", ["2025-13", "2025-00", "2025-4", "25.04", "2025-04-01", "2025/04", " 2025-04"])
def test_anything_else_is_refused(bad):
    with pytest.raises(ValidationError, match="not a month written YYYY-MM"):
        _run(software_date=bad)


def test_a_users_run_may_leave_it_out_and_is_grouped_unknown():
    run = _run()
    assert run.software_date is None and software_year(run.software_date) == "unknown"
    assert software_year("2023-10") == "2023"


def test_a_bad_date_in_a_run_file_is_one_line_and_exit_2(cli, tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [dict(SHIPPED[0], software_date="2025-13")]}))
    code, out, err = cli("validate", "--measured", str(path))
    assert code == 2 and out == ""
    assert err.startswith("btacalc: error:") and "software_date '2025-13' is not a month written YYYY-MM" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_every_shipped_run_has_a_date_and_says_where_it_comes_from():
    for r in SHIPPED:
        assert re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", r.get("software_date") or ""), r["id"]
        assert len(r.get("software_date_source", "").strip()) > 20, r["id"]
    assert {r.software_date for r in load_runs()} == {r["software_date"] for r in SHIPPED}  # read by the model


# -- spot checks of the derived dates (the arithmetic from the tag, round or paper) -------------------------------

def test_a_container_tag_yy_mm_is_20yy_mm():
    # NeMo 25.04 -> 2025-04 (docs.nvidia.com NeMo 25.04 performance summary, DGX-GB200 table)
    assert BY_ID["gpt3-175b-gb200-128-fp8-current-283"]["software_date"] == f"20{25}-{4:02d}"
    # the rule on every row whose release names a NeMo or NGC PyTorch YY.MM container outside an MLPerf round
    tagged = [r for r in SHIPPED if not (r.get("release") or "").startswith("MLPerf")
              and re.search(r"(?:NeMo|NGC PyTorch) \d\d\.\d\d", r.get("release") or "")]
    assert len(tagged) >= 60  # 66 rows when swdate wrote this
    for r in tagged:
        yy, mm = re.search(r"(?:NeMo|NGC PyTorch) (\d\d)\.(\d\d)", r["release"]).groups()
        assert r["software_date"] == f"20{yy}-{mm}", r["id"]
    # dgxc-benchmarking v25.02 benchmarked Llama 3.1 on NeMo 24.12 (its README.md @ 8f5cbb3 L57): 2024-12
    assert BY_ID["llama-3-8b-h100-8-bf16-dgxc"]["software_date"] == "2024-12"


# MLPerf Training rounds: the month of the submission's logs (each round's results repository, the MLLOG time_ms
# of the result files: v3.1 2023-10-01..06, v4.0 2024-05-02..17, v4.1 2024-09-29..10-09, v5.0 2025-04-30 (Nebius's
# H200 405B logs, task runs37), v5.1 2025-10-05..10), the results published after (first commits 2023-11-07,
# 2024-06-11, 2024-11-13, 2025-05-30, 2025-11-05)
ROUNDS = {"3.1": "2023-10", "4.0": "2024-05", "4.1": "2024-10", "5.0": "2025-04", "5.1": "2025-10"}


def test_an_mlperf_row_takes_its_rounds_submission_month():
    rows = [r for r in SHIPPED if (r.get("release") or "").startswith("MLPerf Training v")]
    assert len(rows) >= 20  # 26 rows when swdate wrote this
    for r in rows:
        assert r["software_date"] == ROUNDS[re.match(r"MLPerf Training v(\d\.\d)", r["release"]).group(1)], r["id"]


def test_a_paper_row_takes_its_arxiv_month_and_a_wafer_row_its_model_zoo_release():
    # arXiv YYMM.NNNNN: 2104.04473 (Narayanan et al.) -> 2021-04; 2406.11704 (Nemotron-4 340B) -> 2024-06
    assert BY_ID["gpt-1.7b-a100-80gb-32-megatron2021"]["software_date"] == "20" + "21" + "-" + "04"
    assert BY_ID["nemotron4-340b-h100-1536-gbs768-bf16-nemotron4paper"]["software_date"] == "2024-06"
    # ~/R_1.8.0: Cerebras Model Zoo Release_1.8.0, tagged 2023-04-18 -> 2023-04
    assert BY_ID["gpt-j-6b-wse2-2-410"]["software_date"] == "2023-04"


# -- the grouping -------------------------------------------------------------------------------------------------

def _result(run_id, error, date, role="check", family="gpu", gap=""):
    return RunResult(id=run_id, role=role, family=family, model="m", hw="h100", devices=8, expressible=True,
                     measured=Measured(tokens_per_s_per_device=1.0), error=error, known_gap=gap, software_date=date)


def test_validate_groups_check_runs_by_family_and_software_year_by_hand():
    results = [_result("a", 0.10, "2023-10"), _result("b", 0.20, "2023-05"), _result("c", -0.30, "2023-01", gap="x"),
               _result("d", 0.50, "2023-10", role="fit"), _result("e", -0.05, "2025-04"), _result("f", 0.02, None),
               _result("g", 0.04, "2023-10", family="wse"), _result("h", None, "2025-04")]
    got = {(g.family, g.software_year): g for g in by_software_year(results)}
    assert list(got) == [("gpu", "2023"), ("gpu", "2025"), ("gpu", "unknown"), ("wse", "2023")]
    g23 = got["gpu", "2023"]  # a and b; c a known gap (left out, counted); d a fit run
    assert (g23.n, g23.known_gaps) == (2, 1)
    assert g23.mean_error == pytest.approx((0.10 + 0.20) / 2) and g23.mean_abs_error == pytest.approx(0.15)
    assert g23.max_abs_error == pytest.approx(0.20)
    g25 = got["gpu", "2025"]  # e only: h has no error
    assert (g25.n, g25.mean_error, g25.mean_abs_error) == (1, pytest.approx(-0.05), pytest.approx(0.05))
    assert got["gpu", "unknown"].n == 1 and got["wse", "2023"].mean_error == pytest.approx(0.04)


def test_cross_validation_groups_by_software_year_by_hand():
    # one factor f fitted per fold as the geometric mean of measured / speed over the other family's fit runs:
    # holding a out, f = 4 (b1): a1 predicted 4 against 2 (+100%); holding b out, f = 2 (a1, a2): b1 2 against 4
    # (-50%), a2 (2023) +100%
    def run(i, family, role, measured, date):
        return _run(id=i, model=family, role=role, software_date=date, measured={"tokens_per_s_per_device": measured})
    runs = [run("a1", "a", "fit", 2.0, "2023-10"), run("a2", "a", "fit", 2.0, None), run("b1", "b", "fit", 4.0, "2023-01")]

    def fit(device, chosen):
        return {"f": math.exp(sum(math.log(r.measured.tokens_per_s_per_device) for r in chosen) / len(chosen))}

    def predict_run(r, factors):
        pred, meas = factors["d"]["f"], r.measured.tokens_per_s_per_device
        return CrossRun(id=r.id, model_family=r.model, hw=r.hw, moe=False, devices=r.devices,
                        scale=scale_group(r.devices), software_year=software_year(r.software_date),
                        predicted_tokens_per_s_per_device=pred, measured_tokens_per_s_per_device=meas,
                        error=pred / meas - 1)

    cv = cross_validate(runs, Setting(family_of=lambda r: r.model, device_family_of=lambda r: "d",
                                      usable=lambda r: True), fit, predict_run)
    assert set(cv.by_software_year) == {"2023", "unknown"}
    assert cv.by_software_year["2023"].n == 2  # a1 +100%, b1 -50%
    assert cv.by_software_year["2023"].mean_error == pytest.approx((1.0 - 0.5) / 2)
    assert cv.by_software_year["2023"].mean_abs_error == pytest.approx((1.0 + 0.5) / 2)
    assert cv.by_software_year["unknown"].mean_error == pytest.approx(1.0)
    # the text output's grouped table carries the rows: "software year | 2023 | 2 | 75.0% | 100.0% | +25.0%"
    from rich.console import Console

    from btacalc.output.validation_tables import crossval_tables

    console = Console(width=200, record=True)
    console.print(crossval_tables(cv))
    text = console.export_text()
    assert re.search(r"software year\s*│\s*2023\s*│\s*2\s*│\s*75\.0%\s*│\s*100\.0%\s*│\s*\+25\.0%", text), text


def test_predict_carries_the_date_into_the_result():
    run = load_runs()[0]
    assert predict(run).software_date == run.software_date


# -- the README's table and the prose that quotes it ----------------------------------------------------------------

README = __import__("pathlib").Path(__file__).resolve().parents[1] / "README.md"


def _tool():
    return load_script("tools/accuracy.py", "accuracy_tool")


def _swyear_rows() -> dict[str, list[str]]:
    body = README.read_text(encoding="utf-8").split("<!-- swyear:begin (tools/accuracy.py) -->\n", 1)[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in body.split("\n<!-- swyear:end -->")[0].splitlines()[2:]]
    return {row[0]: row[1:] for row in rows}


def test_readme_prose_quotes_the_software_year_table():
    # cells: check runs, signed, |error|, 16-bit runs, signed, low-precision runs, signed, known gaps
    rows = _swyear_rows()
    m = re.search(r"on a 2023 FP8 stack expect to run about (\d+)% slower than predicted, on a 2024 one about (\d+)%",
                  _prose())
    assert m, "the README no longer says how much slower a 2023 / 2024 FP8 stack runs"
    assert m.groups() == (f"{float(rows['2023'][6].rstrip('%')):.0f}", f"{float(rows['2024'][6].rstrip('%')):.0f}")
    m = re.search(r"The 16-bit 2026 rows \(([+-][\d.]+%), (\d+) runs\)", _prose())
    assert m and m.groups() == (rows["2026"][4], rows["2026"][3])


@pytest.mark.slow
def test_swyear_fragment_and_the_gpt3_rounds_are_current():
    """The README's software-year table is what tools/accuracy.py writes from `validate` today, and the GPT-3 175B
    FP8 H100 means per round it quotes are validate's (regenerate the table with `python tools/accuracy.py`)."""
    import statistics

    from btacalc.planning.measured import validate_measured

    tool = _tool()
    report = validate_measured()
    assert f"{tool.SWYEAR_BEGIN}\n{tool.swyear_markdown(report)}\n{tool.SWYEAR_END}" in README.read_text(encoding="utf-8")
    runs = {r.id: r for r in load_runs()}
    quoted = re.search(r"reads ([+-][\d.]+)% on MLPerf v3\.1 \(2023-10, (\d+) runs\), ([+-][\d.]+)% on v4\.0 "
                       r"\(2024-05, (\d+)\), ([+-][\d.]+)% on v4\.1 \(2024-10, (\d+)\) and ([+-][\d.]+)% on NeMo 25\.02",
                       _prose()).groups()
    got = []
    for date in ("2023-10", "2024-05", "2024-10", "2025-02"):
        errs = [r.error for r in report.runs if r.role == "check" and r.error is not None and not r.known_gap
                and runs[r.id].model == "gpt3-175b" and r.hw == "h100" and runs[r.id].precision == "fp8"
                and r.software_date == date]
        got += [f"{100 * statistics.fmean(errs):+.1f}", str(len(errs))]
    assert list(quoted) == got[:7]


def test_validates_text_table_prints_each_group():
    from types import SimpleNamespace

    from rich.console import Console

    from btacalc.output.validation_tables import software_year_table

    groups = by_software_year([_result("a", 0.10, "2023-10"), _result("b", 0.20, "2023-05"),
                               _result("c", -0.30, "2023-01", gap="x")])
    console = Console(width=200, record=True)
    console.print(software_year_table(SimpleNamespace(by_software_year=groups)))
    # gpu | 2023 | n 2 | signed +15.0% | |error| 15.0% | max 20.0% | 1 known gap
    assert re.search(r"gpu\s*│\s*2023\s*│\s*2\s*│\s*\+15\.0%\s*│\s*15\.0%\s*│\s*20\.0%\s*│\s*1", console.export_text())
