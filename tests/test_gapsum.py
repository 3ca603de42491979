"""gapsum (twenty-eighth session): `validate`'s table shows each known gap as its one-line summary, and
`validate --explain RUN` shows one run whole.

Before, the table's note column carried every known gap's whole account (up to 5,178 characters, most of it the
history of what moved the run), so `validate` printed 3,839 lines at 132 columns. The accounts stay in the data
(`known_gap`), in `--json` and in `--explain`; the table shows `known_gap_summary`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from btacalc.paths import package_data
from btacalc.planning.precision_pairs import GAP_SUMMARY_MAX

ROOT = Path(__file__).resolve().parents[1]


def _shipped() -> list[dict]:
    return json.loads(package_data("measured_runs.json").read_text())["runs"]


def _gapped(field: str) -> list[dict]:
    return [r for r in _shipped() if r.get(field)]


@pytest.mark.parametrize("field", ["known_gap", "memory_known_gap"])
def test_every_shipped_gap_has_a_one_line_summary_shorter_than_its_account(field):
    runs = _gapped(field)
    assert runs
    for r in runs:
        summary = r.get(field + "_summary", "")
        assert summary.strip() and "\n" not in summary, r["id"]
        assert len(summary) <= GAP_SUMMARY_MAX < len(r[field]), r["id"]


def test_every_document_a_summary_names_exists_with_the_section_it_quotes():
    """A summary sends the reader to a document ("docs/clock.md 'moe7'"): the file exists and holds the quoted
    section name, so the pointer cannot go stale unseen."""
    named = 0
    for r in _shipped():
        for field in ("known_gap_summary", "memory_known_gap_summary"):
            for doc, section in re.findall(r"(docs/[\w.-]+\.md)(?: '([\w-]+)')?", r.get(field, "")):
                text = (ROOT / doc).read_text()
                assert not section or section in text, (r["id"], doc, section)
                named += 1
    assert named >= 15  # 18 when written: most summaries name their document


def _one_run(tmp_path: Path, **changes) -> Path:
    run = dict(next(r for r in _shipped() if r["id"] == "qwen3-30b-a3b-gb200-8-mxfp8-239"))
    run.update(changes)
    run = {k: v for k, v in run.items() if v is not None}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [run]}))
    return path


@pytest.mark.parametrize("changes, fragment", [
    ({"known_gap": None}, "known_gap_summary is given without known_gap"),
    ({"known_gap_summary": "two\nlines"}, "known_gap_summary is not one line"),
    ({"known_gap_summary": "   "}, "known_gap_summary is not one line"),
    ({"known_gap_summary": "x" * (GAP_SUMMARY_MAX + 1)}, f"at most {GAP_SUMMARY_MAX} characters"),
])
def test_a_summary_that_stands_for_nothing_or_is_not_a_line_is_refused(cli, tmp_path, changes, fragment):
    code, out, err = cli("validate", "--measured", str(_one_run(tmp_path, **changes)))
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.fixture(scope="module")
def report():
    from btacalc.planning.measured import validate_measured

    return validate_measured()  # once for the module: a whole validation takes ~10 s


def _rendered(measured, width: int = 132) -> str:
    """The measured runs' tables as `validate` prints them at `width` columns (132 unless given)."""
    from rich.console import Console

    from btacalc.output.validation_tables import measured_table

    console = Console(width=width, color_system=None)
    with console.capture() as captured:
        console.print(measured_table(measured))
    return captured.get()


def test_the_table_shows_each_summary_and_no_account_and_says_where_the_account_is(report):
    flat = " ".join(_rendered(report).split())
    for r in _gapped("known_gap") + _gapped("memory_known_gap"):
        for field in ("known_gap", "memory_known_gap"):
            if r.get(field):
                assert " ".join(r[field + "_summary"].split()) in flat, r["id"]
                assert " ".join(r[field].split())[:300] not in flat, r["id"]
    assert "btacalc validate --explain RUN" in flat


def test_validate_prints_the_measured_runs_on_fewer_lines_than_runs_and_gaps_take(report):
    """At 132 columns each run takes a line or two (an id longer than its column folds), each note one or two:
    the 3,839 lines of before came from the gaps' whole accounts in a table cell."""
    lines = _rendered(report).splitlines()
    notes = sum(1 for r in report.runs if r.known_gap or r.memory_known_gap or not r.expressible
                or r.release_gain is not None)
    memory = sum(1 for r in report.runs if r.measured.peak_alloc_gib is not None or r.measured.peak_reserved_gib)
    assert len(lines) < 2 * (len(report.runs) + memory + notes) + 200  # + the summary, years and pair tables


def test_at_80_columns_a_run_whose_id_fits_its_column_takes_one_line(report):
    """The time table's columns are run, predicted, measured, error, status: a fit run's status reads "fit", so a
    role column repeated it, and the family is the summary's. At 80 columns the run column is then 80 - 4 x 12 - 2
    = 30 characters wide (four columns of at most 9 characters, each with 2 of padding and a rule; the two outer
    rules), so every id of at most 30 characters stays on its row's one line; with role and family it was 13 and
    every shipped id folded."""
    text = _rendered(report, width=80)
    header = next(line for line in text.splitlines() if "predicted" in line and "measured" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == ["run", "predicted", "measured", "error", "status"]
    lines = text.splitlines()
    short = [r for r in report.runs if len(r.id) <= 30 and r.measured.tokens_per_s_per_device is not None]
    assert len(short) > 20
    timed = [r for r in report.runs if r.measured.tokens_per_s_per_device is not None or r.measured.step_time_s]
    following = {a.id: b.id for a, b in zip(timed, timed[1:])}
    for r in short:
        row = next(i for i, line in enumerate(lines) if line.startswith(f"│ {r.id} "))
        after = lines[row + 1]  # the next run's row (its id's start) or the table's foot, not the rest of this id
        assert "%" in lines[row], r.id
        assert after.startswith("└") or following[r.id].startswith(after.split("│")[1].strip()), r.id


def test_a_gap_without_a_summary_is_shown_whole_not_cut(tmp_path):
    """A user's run file may give a known gap alone: the table shows all of it (no silent truncation)."""
    from btacalc.planning.measured import measured_report
    from btacalc.planning.run_file import load_runs

    run = next(r for r in _shipped() if r["id"] == "qwen3-30b-a3b-gb200-8-mxfp8-239")
    flat = " ".join(_rendered(measured_report(load_runs(_one_run(tmp_path, known_gap_summary=None)))).split())
    assert " ".join(run["known_gap"].split()) in flat


def test_explain_shows_the_whole_account_the_defaults_and_the_same_error_as_validate(cli, report):
    run_id = "qwen3-30b-a3b-gb200-8-mxfp8-239"
    run = next(r for r in _shipped() if r["id"] == run_id)
    code, out, err = cli("validate", "--explain", run_id, "--json")
    assert code == 0, err
    result = json.loads(out)
    listed = next(r for r in report.runs if r.id == run_id).model_dump()
    assert result["error"] == listed["error"] and result["known_gap"] == run["known_gap"]
    assert result["known_gap_summary"] == run["known_gap_summary"]
    measured, predicted = run["measured"]["tokens_per_s_per_device"], result["predicted"]["tokens_per_s_per_device"]
    assert result["error"] == pytest.approx(predicted / measured - 1)
    code, text, err = cli("validate", "--explain", run_id)
    assert code == 0, err
    squeezed = "".join(text.replace("│", "").split())  # a folded value's lines, joined
    assert "".join(run["known_gap"].split()) in squeezed and "".join(run["source"].split()) in squeezed
    for key in listed["defaulted"]:
        assert f"default:{key}" in squeezed
    assert f"{100 * listed['error']:+.1f}%" in squeezed


def test_explain_of_a_memory_only_run_gives_its_memory_and_no_time(cli):
    run = next(r for r in _shipped() if r.get("memory_known_gap") and "tokens_per_s_per_device" not in r["measured"]
               and "step_time_s" not in r["measured"])
    code, out, err = cli("validate", "--explain", run["id"], "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["error"] is None and result["memory_error"] is not None
    measured = run["measured"].get("peak_alloc_gib") or run["measured"]["peak_reserved_gib"]
    predicted = result["predicted"]["peak_alloc_gib"] if "peak_alloc_gib" in run["measured"] else \
        result["predicted"]["peak_reserved_gib"]
    assert result["memory_error"] == pytest.approx(predicted / measured - 1)


@pytest.mark.parametrize("args, fragment", [
    (["--explain", "qwen3-30b-a3b-gb200-8-mxfp8-293"], "no run 'qwen3-30b-a3b-gb200-8-mxfp8-293'"),
    (["--explain", "qwen3-30b-a3b-gb200-8-mxfp8-239", "--plot", "x.png"],
     "--explain shows one run; it takes no --plot"),
    (["--explain", "qwen3-30b-a3b-gb200-8-mxfp8-239", "--cross-validate"], "it takes no --cross-validate"),
])
def test_explain_refuses_what_it_cannot_show_in_one_line(cli, tmp_path, monkeypatch, args, fragment):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("validate", *args)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_pair_gaps_print_their_summaries_not_their_reasons(report):
    import tomllib

    bands = tomllib.loads(package_data("validation_bands.toml").read_text())["precision_pairs"]["known_gap"]
    flat = " ".join(_rendered(report).split())
    for gap in bands:
        assert gap["summary"] and len(gap["summary"]) <= GAP_SUMMARY_MAX < len(gap["reason"])
        assert " ".join(gap["reason"].split())[:300] not in flat
    shown = [g for g in bands if f"precision-pair known gap: {' '.join(g['summary'].split())}" in flat]
    assert len(shown) == len(bands)  # every shipped pair gap has a pair that misses today


def test_explain_gives_the_runs_notes_confidence_and_an_older_wafer_releases_gain(cli):
    """What the table's notes said per run (an older Cerebras release's gain) and what the run file says of the
    measurement (confidence, notes: how a derived number was derived) are in `--explain`."""
    run = next(r for r in _shipped() if r["id"] == "gpt-j-6b-wse2-1-408")
    code, text, err = cli("validate", "--explain", run["id"])
    assert code == 0, err
    squeezed = "".join(text.replace("│", "").split())
    assert "".join(run["notes"].split()) in squeezed and "".join(run["confidence"].split()) in squeezed
    code, out, err = cli("validate", "--explain", run["id"], "--json")
    gain = json.loads(out)["release_gain"]
    assert gain == 1.3 and f"olderreleasepredictedrate/{gain:g}," in squeezed  # Release_2.0.2's ~30% (notes)


@pytest.mark.parametrize("summary", ["two\nlines", "   ", "x" * (GAP_SUMMARY_MAX + 1)])
def test_a_pair_gaps_summary_that_is_not_one_line_is_refused(summary):
    """validation_bands.toml's pair gaps take the runs' rule: one line of at most GAP_SUMMARY_MAX characters."""
    from pydantic import ValidationError

    from btacalc.planning.precision_pairs import PairGap

    fields = dict(hw=["b200"], precisions=["fp8"], with_precisions=["bf16"], reason="a reason long enough to read")
    assert PairGap(**fields, summary="one line").summary == "one line"
    with pytest.raises(ValidationError):
        PairGap(**fields, summary=summary)
