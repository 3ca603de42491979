"""Precision pairs: two measured runs of one layout in two precisions, and the speed-up btacalc predicts.

Issue 22's acceptance asks for "the predicted speed-up of MXFP8 and NVFP4 over BF16 within 10% of the
measured ratio, for each model/system pair where both are published". A per-run error cannot show that: a
systematic error common to both precisions (a GEMM efficiency, the host) cancels in the ratio, and one
particular to the low-precision path (casts, scaling, the low-precision GEMM rate) is all that is left.

A pair is found from the data, never listed by hand: two measured runs whose layout key is equal and whose
precisions differ, at least one of them below 16 bits (btacalc/data/precision.toml `gemm_peak`). The layout
key (run_file.py `MeasuredRun.pair_input`) is the run after its recipe's corrections:

    (model, hw, devices, TP, PP, VP, CP, EP, ETP, micro batch, global batch, seq)

with an unstated TP/PP/VP/CP/EP read as 1 (the run format's "null = not stated / 1") and an unstated ETP as
TP (Megatron-LM's --expert-tensor-parallel-size default, megatron/training/arguments.py at d98e8a64). The
pair's ratio is the narrower precision's tokens/s per device over the wider one's, narrower meaning later in
precision.toml's order (bf16, fp16, fp8, fp8-current, fp8-blockwise, mxfp8, nvfp4), for the measurement and
for btacalc's prediction of each run alike:

    measured ratio  r_m = tok/s(narrow) / tok/s(wide)            (measured)
    predicted ratio r_p = tok/s(narrow) / tok/s(wide)            (btacalc's plans of the two runs)
    error           e   = r_p / r_m - 1, within the band when |e| <= ratio_abs_error (validation_bands.toml)

Kinds: "bf16" pairs set a low-precision run against a 16-bit one (BF16, the acceptance's speed-up over BF16;
FP16 alike); "lp" pairs two low-precision runs (e.g. MXFP8 / FP8 on one layout), reported separately.

Two runs are one source when the first word of their `source` (the publication: a URL or repository) and
their `release` (the container or harness version that measured them) are equal. A cross-source pair mixes
two harnesses or releases (NVIDIA's published FP8 against an individual's BF16 run, or one layout published in
two releases at different speeds), so its ratio carries their difference too: it is shown, with its status,
but it does not gate `validate`. A same-source pair outside the band fails `validate` unless a stated
precision-pair known gap covers it (validation_bands.toml `[[precision_pairs.known_gap]]`, by hardware and
precision), as a per-run known gap does for a run; a known gap none of whose pairs misses any more fails too,
so its statement must go.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

from ..config.precision import recipe as precision_recipe
from ..config.precision import recipes as precision_recipes

LayoutKey = tuple[object, ...]


class PairInput(BaseModel):
    """What pairing needs of one measured run and its prediction (built by run_file.py `MeasuredRun.pair_input`)."""

    model_config = ConfigDict(frozen=True)
    id: str
    model: str
    hw: str
    devices: int
    precision: str
    layout: LayoutKey = Field(description="the layout key of the module docstring")
    source: tuple[str, Optional[str]] = Field(description="(publication, release)")
    measured_tokens_per_s: Optional[float] = Field(description="per device, measured")
    predicted_tokens_per_s: Optional[float] = Field(description="per device, btacalc's plan of the run")


# characters of a known gap's one-line summary, the text validate's tables show: a pair gap's `summary` here, a run's
# `known_gap_summary` / `memory_known_gap_summary` (run_file.MeasuredRun)
GAP_SUMMARY_MAX = 200


def is_one_line(text: str) -> bool:
    """A summary's shape: some text, and no line break."""
    return bool(text.strip()) and "\n" not in text


class PairGap(BaseModel):
    """A stated reason why same-source pairs of these hardware and precisions miss their band."""

    model_config = ConfigDict(extra="forbid")
    hw: list[str] = Field(min_length=1)
    precisions: list[str] = Field(min_length=1, description="the narrower precision of the pairs it covers")
    with_precisions: list[str] = Field(min_length=1, description="the wider precision of the pairs it covers")
    reason: str = Field(min_length=20, description="what btacalc is suspected to lack, and where it is documented")
    summary: str = Field("", max_length=GAP_SUMMARY_MAX, description="the reason in one line, for validate's table "
                         "(empty: the table shows the reason whole)")

    @field_validator("summary")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if v and not is_one_line(v):
            raise ValueError("a pair gap's summary is not one line of text: it is what validate's table shows")
        return v


class PairBands(BaseModel):
    """The band on a precision pair's ratio error (validation_bands.toml [precision_pairs])."""

    model_config = ConfigDict(extra="forbid")
    ratio_abs_error: float = Field(gt=0)
    source: str = Field(min_length=10, description="where the tolerance comes from")
    known_gap: list[PairGap] = Field(default_factory=list)


class PrecisionPair(BaseModel):
    """Two measured runs of one layout in two precisions: measured and predicted speed-up of the narrower."""

    kind: Literal["bf16", "lp"] = Field(description="bf16: a low-precision run against a 16-bit one; lp: two "
                                        "low-precision runs")
    narrow: str = Field(description="run id of the narrower precision (the ratio's numerator)")
    wide: str = Field(description="run id of the wider precision (the denominator)")
    narrow_precision: str
    wide_precision: str
    model: str
    hw: str
    devices: int
    cross_source: bool = Field(description="the two runs come from different publications or releases")
    measured_ratio: float
    predicted_ratio: Optional[float] = Field(None, description="None when btacalc cannot predict one of the runs")
    error: Optional[float] = Field(None, description="predicted_ratio / measured_ratio - 1")
    tolerance: float
    known_gap: str = ""
    known_gap_summary: str = Field("", description="the known gap's one-line summary (empty: none given)")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def name(self) -> str:
        return f"{self.model} {self.hw} x{self.devices}: {self.narrow_precision} / {self.wide_precision}"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> Optional[bool]:
        return None if self.error is None else abs(self.error) <= self.tolerance

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gated(self) -> bool:
        """Same-source pairs gate `validate`; cross-source ones are only shown."""
        return not self.cross_source and self.error is not None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> str:
        if self.passed is None:
            return "not predicted"
        if self.passed:
            return "pass"
        if self.cross_source:
            return "miss (cross-source)"
        return "KNOWN GAP" if self.known_gap else "MISS"


class PairReport(BaseModel):
    pairs: list[PrecisionPair]
    tolerance: float
    tolerance_source: str
    failures: list[str]


def _order() -> dict[str, int]:
    """Precisions from widest to narrowest, in precision.toml's order."""
    return {name: i for i, name in enumerate(precision_recipes())}


def _gap_for(hw: str, narrow: str, wide: str, gaps: list[PairGap]) -> Optional[PairGap]:
    return next((g for g in gaps if hw in g.hw and narrow in g.precisions and wide in g.with_precisions), None)


def find_pairs(runs: list[PairInput]) -> list[tuple[PairInput, PairInput]]:
    """(narrow, wide) run pairs of equal layout key and different precision, at least one below 16 bits, with a
    measured tokens/s each; in the runs' order."""
    order = _order()
    groups: dict[LayoutKey, list[PairInput]] = defaultdict(list)
    for run in runs:
        if run.measured_tokens_per_s:
            groups[run.layout].append(run)
    out = []
    for members in groups.values():
        for a, b in combinations(members, 2):
            if a.precision == b.precision:
                continue
            if not (precision_recipe(a.precision).low or precision_recipe(b.precision).low):
                continue
            narrow, wide = (a, b) if order[a.precision] > order[b.precision] else (b, a)
            out.append((narrow, wide))
    return out


def _pair(narrow: PairInput, wide: PairInput, bands: PairBands) -> PrecisionPair:
    measured = narrow.measured_tokens_per_s / wide.measured_tokens_per_s  # type: ignore[operator]  # find_pairs: both
    pn, pw = narrow.predicted_tokens_per_s, wide.predicted_tokens_per_s
    predicted = pn / pw if pn and pw else None
    gap = _gap_for(narrow.hw, narrow.precision, wide.precision, bands.known_gap)
    return PrecisionPair(
        kind="lp" if precision_recipe(wide.precision).low else "bf16", narrow=narrow.id, wide=wide.id,
        narrow_precision=narrow.precision, wide_precision=wide.precision, model=narrow.model, hw=narrow.hw,
        devices=narrow.devices, cross_source=narrow.source != wide.source, measured_ratio=measured,
        predicted_ratio=predicted, error=None if predicted is None else predicted / measured - 1,
        tolerance=bands.ratio_abs_error, known_gap=gap.reason if gap else "",
        known_gap_summary=gap.summary if gap else "")


def pair_gate(pairs: list[PrecisionPair], bands: PairBands) -> list[str]:
    """A same-source pair outside the band without a known gap fails; a known gap whose pairs are all within the
    band fails (a gap with no pair in the runs, e.g. under `validate --measured other.json`, is not judged)."""
    failures = [f"precision pair {p.narrow} / {p.wide}: ratio error {p.error:+.1%} outside "
                f"±{p.tolerance:.0%}" for p in pairs if p.gated and p.passed is False and not p.known_gap]
    for g in bands.known_gap:
        covered = [p for p in pairs if p.gated and _gap_for(p.hw, p.narrow_precision, p.wide_precision, [g])]
        if covered and not any(p.passed is False for p in covered):
            failures.append(f"precision-pair known gap ({', '.join(g.hw)}: {', '.join(g.precisions)} over "
                            f"{', '.join(g.with_precisions)}) but its same-source pairs are now within the band")
    return failures


def precision_pairs(runs: list[PairInput], bands: PairBands) -> PairReport:
    """Every precision pair of `runs` (each with its prediction), its ratio error and the pair gate's failures."""
    pairs = [_pair(n, w, bands) for n, w in find_pairs(runs)]
    pairs.sort(key=lambda p: (p.kind, p.cross_source, p.model, p.hw, p.devices, p.narrow_precision, p.wide_precision))
    return PairReport(pairs=pairs, tolerance=bands.ratio_abs_error, tolerance_source=bands.source,
                      failures=pair_gate(pairs, bands))
