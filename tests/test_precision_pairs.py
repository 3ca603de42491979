"""Precision pairs (planning/precision_pairs.py): same layout, different precision, ratio of tokens/s."""

from __future__ import annotations

import pytest

from btacalc.planning.measured import Measured, MeasuredRun, load_bands, load_runs, predict
from btacalc.planning.precision_pairs import PairBands, PairGap, PairInput, find_pairs, pair_gate, precision_pairs

BASE = {
    "id": "a", "source": "https://example.org/table ; repo x", "model": "llama-3-8b", "hw": "b200", "devices": 8,
    "precision": "bf16", "seq": 8192, "global_batch": 128, "micro_batch": 2, "tp": 1, "pp": 1, "vp": None, "cp": 1,
    "ep": 1, "etp": None, "measured": {"tokens_per_s_per_device": 1000.0}, "role": "check", "release": "r1",
}
BANDS = PairBands(ratio_abs_error=0.10, source="issue 22 acceptance (test)")


def _run(predicted: float | None = None, **changes: object) -> PairInput:
    """A run of BASE with `changes`, as pairing sees it, predicted at `predicted` tokens/s per device."""
    return MeasuredRun.model_validate({**BASE, **changes}).pair_input(predicted)


def _ids(pairs: list[tuple[PairInput, PairInput]]) -> list[tuple[str, str]]:
    return [(n.id, w.id) for n, w in pairs]


def test_vuiseng9_nvfp4_over_bf16_is_the_readme_ratio_and_the_two_predictions_ratio():
    """vuiseng9/nemo-perf-nvfp4 README @ 1f2c169: BF16 21,618, FP8 29,567, MXFP8 28,432, NVFP4 35,578 TPS/GPU on one
    node, one layout; its own 'Speedup over BF16' column reads 1.37x / 1.32x / 1.65x."""
    ids = {f"llama-3-8b-b200-8-{p}-nemo2509-vuiseng9" for p in ("bf16", "fp8", "mxfp8", "nvfp4")}
    runs = [r for r in load_runs() if r.id in ids]
    results = [predict(r) for r in runs]
    inputs = [r.pair_input(x.predicted.tokens_per_s_per_device) for r, x in zip(runs, results)]
    report = precision_pairs(inputs, load_bands().precision_pairs)
    assert len(report.pairs) == 6  # 4 precisions of one layout: C(4, 2) pairs, 3 over BF16 and 3 LP/LP
    by = {(p.narrow_precision, p.wide_precision): p for p in report.pairs}
    assert sorted(by) == sorted([("fp8", "bf16"), ("mxfp8", "bf16"), ("nvfp4", "bf16"), ("mxfp8", "fp8"),
                                 ("nvfp4", "fp8"), ("nvfp4", "mxfp8")])
    nv = by[("nvfp4", "bf16")]
    assert nv.measured_ratio == pytest.approx(35578 / 21618) and round(nv.measured_ratio, 2) == 1.65
    assert round(by[("fp8", "bf16")].measured_ratio, 2) == 1.37 and round(by[("mxfp8", "bf16")].measured_ratio, 2) == 1.32
    assert by[("nvfp4", "mxfp8")].measured_ratio == pytest.approx(35578 / 28432)  # README: "1.25x higher than MXFP8"
    pred = {r.id: r.predicted.tokens_per_s_per_device for r in results}
    ratio = pred["llama-3-8b-b200-8-nvfp4-nemo2509-vuiseng9"] / pred["llama-3-8b-b200-8-bf16-nemo2509-vuiseng9"]
    assert nv.predicted_ratio == pytest.approx(ratio) and nv.error == pytest.approx(ratio / (35578 / 21618) - 1)
    assert {p.kind for p in report.pairs if p.wide_precision == "bf16"} == {"bf16"}
    assert {p.kind for p in report.pairs if p.wide_precision != "bf16"} == {"lp"}
    assert not any(p.cross_source for p in report.pairs)  # one README, one release
    assert nv.tolerance == 0.10  # validation_bands.toml, issue 22's acceptance


def test_pairs_form_on_equal_layout_and_differing_precision():
    bf16, fp8 = _run(id="bf16"), _run(id="fp8", precision="fp8", measured={"tokens_per_s_per_device": 1500.0})
    assert _ids(find_pairs([bf16, fp8])) == [("fp8", "bf16")]
    # unstated = 1 (vp, tp, cp) and unstated ETP = TP: the same layout
    same = _run(id="fp8b", precision="fp8", vp=1, cp=None, etp=1, tp=None)
    assert _ids(find_pairs([bf16, same])) == [("fp8b", "bf16")]


@pytest.mark.parametrize("field, value", [
    ("model", "llama-3-70b"), ("hw", "gb200"), ("devices", 16), ("tp", 2), ("pp", 2), ("vp", 2), ("cp", 2),
    ("ep", 2), ("etp", 2), ("micro_batch", 1), ("global_batch", 256), ("seq", 4096),
])
def test_a_run_differing_in_any_layout_field_is_not_paired(field, value):
    other = _run(id="fp8", precision="fp8", **{field: value})
    assert find_pairs([_run(id="bf16"), other]) == []


def test_recipe_corrections_count_as_the_layout():
    """A recipe's micro_batch correction is the layout the run ran (MeasuredRun.with_recipe)."""
    corrected = _run(id="fp8", precision="fp8", micro_batch=4,
                     recipe={"source": "https://example.org/recipe", "micro_batch": 2})
    assert len(find_pairs([_run(id="bf16"), corrected])) == 1


def test_same_precision_and_16_bit_pairs_are_not_pairs_and_the_narrower_is_the_numerator():
    assert find_pairs([_run(id="a"), _run(id="b")]) == []  # same precision, two releases: not a precision pair
    assert find_pairs([_run(id="a"), _run(id="b", precision="fp16")]) == []  # neither below 16 bits
    (n, w), = find_pairs([_run(id="nv", precision="nvfp4"), _run(id="mx", precision="mxfp8")])
    assert (n.id, w.id) == ("nv", "mx")
    (n, w), = find_pairs([_run(id="mx", precision="mxfp8"), _run(id="f8", precision="fp8-current")])
    assert (n.id, w.id) == ("mx", "f8")


def test_ratio_error_status_and_cross_source():
    """bf16 1000 and fp8 1500 tok/s measured (1.5x); predicted 1000 and 1800 (1.8x): error 1.8 / 1.5 - 1 = +20%."""
    bf16, fp8 = _run(1000.0, id="bf16"), _run(1800.0, id="fp8", precision="fp8", measured={"tokens_per_s_per_device": 1500.0})
    (p,) = precision_pairs([bf16, fp8], BANDS).pairs
    assert p.measured_ratio == pytest.approx(1.5) and p.predicted_ratio == pytest.approx(1.8)
    assert p.error == pytest.approx(0.2) and p.status == "MISS" and not p.cross_source and p.kind == "bf16"
    other = _run(1800.0, id="fp8", precision="fp8", measured={"tokens_per_s_per_device": 1500.0}, release="r2")
    report = precision_pairs([bf16, other], BANDS)
    assert report.pairs[0].cross_source and report.pairs[0].status == "miss (cross-source)" and report.failures == []
    elsewhere = _run(1.0, id="fp8", precision="fp8", source="github.com/someone/bench README.md @ abc", release="r1")
    assert precision_pairs([bf16, elsewhere], BANDS).pairs[0].cross_source
    assert not precision_pairs([bf16, _run(1.0, id="x", precision="fp8", source="http://example.org/table")],
                               BANDS).pairs[0].cross_source  # the publication, whatever its scheme and detail
    fp8_close = _run(1560.0, id="fp8", precision="fp8", measured={"tokens_per_s_per_device": 1500.0})
    (q,) = precision_pairs([bf16, fp8_close], BANDS).pairs
    assert q.error == pytest.approx(1.56 / 1.5 - 1) and q.status == "pass"  # +4%


def test_gate_a_miss_needs_a_stated_gap_and_a_gap_must_still_miss():
    bf16 = _run(1000.0, id="bf16")
    fp8, fp8_healed = (_run(p, id="fp8", precision="fp8", measured={"tokens_per_s_per_device": 1500.0})
                       for p in (1800.0, 1500.0))
    assert len(precision_pairs([bf16, fp8], BANDS).failures) == 1
    gap = PairGap(hw=["b200"], precisions=["fp8"], with_precisions=["bf16"], reason="the low-precision path, suspected")
    gapped = BANDS.model_copy(update={"known_gap": [gap]})
    report = precision_pairs([bf16, fp8], gapped)
    assert report.failures == [] and report.pairs[0].status == "KNOWN GAP"
    healed = precision_pairs([bf16, fp8_healed], gapped)
    assert healed.pairs[0].status == "pass" and len(healed.failures) == 1  # the gap's statement must go
    other_hw = gapped.model_copy(update={"known_gap": [gap.model_copy(update={"hw": ["gb200"]})]})
    assert len(precision_pairs([bf16, fp8], other_hw).failures) == 1  # a gap covers only its hardware
    assert pair_gate([], gapped) == []  # no pair in the runs: the gap is not judged


def test_runs_without_a_measured_throughput_are_not_paired():
    memory_only = _run(id="fp8", precision="fp8", measured={"peak_alloc_gib": 50.0})
    assert find_pairs([_run(id="bf16"), memory_only]) == []
    assert Measured(peak_alloc_gib=50.0).tokens_per_s_per_device is None


def test_a_run_btacalc_cannot_predict_gives_a_pair_without_a_predicted_ratio():
    (p,) = precision_pairs([_run(1000.0, id="bf16"), _run(None, id="fp8", precision="fp8")], BANDS).pairs
    assert p.predicted_ratio is None and p.status == "not predicted" and not p.gated


@pytest.mark.slow
def test_each_gaps_now_clause_quotes_todays_pair_errors():
    """A stated pair gap opens with what the pairs read now ("Now (...): ... +11.1% ..."); each percentage there is
    the error of one of today's pairs the gap holds, or of one of those pairs' runs (to the printed 0.1), and a range
    "a to b%" is their smallest and largest. Stale numbers (the gap texts quoted +11.7 / +13.1 / +25.2% after the
    refit moved them) fail; so does a number that is only some other run's error (review11: it was accepted)."""
    import re

    from btacalc.planning.measured import validate_measured

    report = validate_measured()
    error = {r.id: r.error for r in report.runs}
    for gap in load_bands().precision_pairs.known_gap:
        now = re.search(r"Now \([^)]*\): (.*?)\.(?: [A-Z]|$)", gap.reason)
        assert now, gap.reason[:80]
        held = [p for p in report.pairs.pairs if p.known_gap == gap.reason]
        # a run's own error may be quoted too ("the BF16 row reads -8.4%"): only a run of the pairs the gap holds
        runs = {f"{100 * error[i]:+.1f}" for p in held for i in (p.narrow, p.wide) if error.get(i) is not None}
        quoted = re.findall(r"([+-]\d+\.\d)%?", now.group(1))
        span = re.search(r"([+-]\d+\.\d) to ([+-]\d+\.\d)%", now.group(1))
        if span:
            rows = [p for p in held if not p.cross_source]
            assert span.groups() == (f"{100 * min(p.error for p in rows):+.1f}",
                                     f"{100 * max(p.error for p in rows):+.1f}")
            quoted = [q for q in quoted if q not in span.groups()]
        errors = {f"{100 * p.error:+.1f}" for p in held}
        assert set(quoted) <= errors | runs, (quoted, sorted(errors))


@pytest.mark.slow
def test_the_readmes_pair_sentence_is_todays_pairs():
    """"over-predicted (+a% FP8, +b% MXFP8, +c% NVFP4), as on the GB200 and H100 Nemotron-4 pairs (+d to +e%, +f and +g%)":
    the same-source B200 pairs over BF16 (0.1), the GB200 Nemotron-4 pairs' smallest and largest and each H100
    Nemotron-4 pair (whole percent)."""
    import re
    from pathlib import Path

    from btacalc.planning.measured import validate_measured

    prose = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"over-predicted \(([+-][\d.]+)% FP8, ([+-][\d.]+)% MXFP8, ([+-][\d.]+)% NVFP4\), as on the GB200 "
                  r"and H100 Nemotron-4 pairs \(([+-]\d+) to ([+-]\d+)%, ([+-]\d+) and ([+-]\d+)%\)", prose)
    assert m, "the README no longer has the pairs sentence: update this test with the prose"
    pairs = [p for p in validate_measured().pairs.pairs if not p.cross_source]
    b200 = {p.narrow_precision: p.error for p in pairs if p.hw == "b200" and p.wide_precision == "bf16"}
    assert m.groups()[:3] == tuple(f"{100 * b200[k]:+.1f}" for k in ("fp8", "mxfp8", "nvfp4"))
    gb200 = [p.error for p in pairs if p.hw == "gb200" and p.model.startswith("nemotron4")]
    h100 = sorted(f"{100 * p.error:+.0f}" for p in pairs if p.hw == "h100" and p.model.startswith("nemotron4"))
    assert m.groups()[3:5] == (f"{100 * min(gb200):+.0f}", f"{100 * max(gb200):+.0f}")
    assert h100 == sorted(m.groups()[5:])
