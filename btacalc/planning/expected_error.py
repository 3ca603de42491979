"""What error to expect of a plan's tokens/s: the leave-one-model-family-out errors (predicted / measured - 1) of
the measured runs most like it.

`btacalc validate --cross-validate` predicts every shipped measured run with factors fitted without its model
family (planning/crossval.py): those errors are what a user should expect on a model btacalc has never seen. A
plan reports the ones of the runs that share its kind, as the first of these groups that holds at least
`MIN_RUNS` runs:

1. the same calibration family (one GPU architecture, or the wafers), dense or MoE alike, and 16-bit or low
   precision alike;
2. the same calibration family, dense or MoE alike;
3. the same kind of device (GPU or wafer), dense or MoE alike;
4. the same kind of device.

An MoE plan on GPUs is first matched on whether it hides the expert exchange behind another micro-batch (Megatron's
--overlap-moe-expert-parallel-comm) as well: groups 1 and 2 with the EP overlap alike come before them. The
overlap's hidden share is a located over-prediction (docs/clock.md 'ovlprof': on the one profiled pair the
exchange showed 6.65 s where btacalc shows 2.08 s), so an overlapped plan should expect what the overlapped runs
show, not what the MoE runs without it do.

A profile file, or a built-in profile changed (e.g. by `whatif`), is matched to a calibration family by what it is
(fu22: a copied b200.toml with one number edited got the broad "GPUs, MoE" group, by its name): the family of the
built-in profiles of its kind of device and compute capability (the architecture: sm_80, sm_90, sm_100, sm_103; the
wafers state none) whose calibration factors it carries unchanged, the factors the family's runs were predicted with;
its group then names it. A profile that matches no such family (another architecture, or factors of its own) starts
at 3. The errors ship as data (btacalc/data/expected_error.json, written with the README's accuracy tables by
`python tools/accuracy.py` and checked current by a test), so a plan reads a file instead of re-running the
cross-validation (crossval.held_out_errors builds it). The summary is the cross-validation's own
(`summarize_errors`: n, mean |error|, max |error|, signed mean, positive where btacalc is too fast) and the median
|error|, the typical miss, which one outlier cannot move.
"""

from __future__ import annotations

import json
import statistics
from functools import lru_cache
from typing import Callable, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config.calibration_families import FamilySpec, family_of, load_families
from ..config.hardware import HardwareProfile, builtin_profiles, resolve_hardware
from ..errors import DataError, first_validation_error
from ..model.problem import Problem
from ..paths import package_data, profile_names
from .report import ExpectedError, summarize_errors

EXPECTED_ERROR_FILE = "expected_error.json"
MIN_RUNS = 5  # fewer runs than this say too little about a group: the next, wider group is taken


class HeldOutRun(BaseModel):
    """One measured run's leave-one-model-family-out error, with what a plan is matched on."""

    model_config = ConfigDict(extra="forbid")
    id: str
    hw: str
    calibration_family: Optional[str] = Field(description="calibration.toml [[family]] of the run's profile")
    device: str = Field(description="gpu or wse")
    moe: bool
    low_precision: bool = Field(description="FP8, MXFP8 or NVFP4 (not bf16 / fp16)")
    error: float = Field(description="predicted / measured - 1, by factors fitted without the run's model family")
    ep_overlap: bool = Field(False, description="its plan hides the expert exchange behind another micro-batch "
                             "(--overlap-moe-expert-parallel-comm)")
    held_out: bool = Field(True, description="False: once the run's model family is out, its device family has fewer "
                           "fit runs than factors, so the run is predicted with the shipped factors, fitted on it or "
                           "its family (review27: five CS-2 runs)")


class ExpectedErrorData(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str
    runs: list[HeldOutRun]


class PlanKind(BaseModel):
    """What a plan is matched on."""

    calibration_family: Optional[str]
    family_profiles: list[str] = Field(default_factory=list, description="the calibration family's profiles")
    matched: str = Field("", description="how a profile that is not a built-in one as shipped was matched to the "
                         "family (empty: it is one)")
    device: str
    moe: bool
    low_precision: bool
    ep_overlap: bool = False
    profile: str = Field("", description="the built-in profile the plan runs on, as shipped (empty: a profile file or "
                         "a changed profile)")


def _groups(kind: PlanKind) -> list[tuple[str, Callable[[HeldOutRun], bool]]]:
    """The groups of runs, narrowest first: (words, which runs)."""
    device = "GPUs" if kind.device == "gpu" else "wafers"
    model = "MoE" if kind.moe else "dense"
    precision = "low precision" if kind.low_precision else "16-bit"
    out: list[tuple[str, Callable[[HeldOutRun], bool]]] = []
    fam = kind.calibration_family
    named = f"{fam} ({', '.join(kind.family_profiles)}{'; ' + kind.matched if kind.matched else ''})"
    if fam is not None and kind.moe and kind.device == "gpu":  # (a wafer runs no Megatron EP overlap)
        overlap = "with the EP overlap" if kind.ep_overlap else "without the EP overlap"
        out.append((f"{named}, MoE {overlap}, {precision}", lambda r: r.calibration_family == fam and r.moe
                    and r.ep_overlap == kind.ep_overlap and r.low_precision == kind.low_precision))
        out.append((f"{named}, MoE {overlap}", lambda r: r.calibration_family == fam and r.moe
                    and r.ep_overlap == kind.ep_overlap))
    if fam is not None:
        out.append((f"{named}, {model}, {precision}", lambda r: r.calibration_family == fam and r.moe == kind.moe
                    and r.low_precision == kind.low_precision))
        out.append((f"{named}, {model}", lambda r: r.calibration_family == fam and r.moe == kind.moe))
    out.append((f"{device}, {model}", lambda r: r.device == kind.device and r.moe == kind.moe))
    out.append((f"{device}, dense and MoE", lambda r: r.device == kind.device))
    return out


def expected_error(kind: PlanKind, data: Optional[ExpectedErrorData] = None) -> Optional[ExpectedError]:
    """The first group (narrowest first) with at least MIN_RUNS runs; None if even the widest has fewer."""
    runs = (data or shipped()).runs
    passed: list[str] = []
    for words, member in _groups(kind):
        members = [r for r in runs if member(r)]
        errors = [r.error for r in members]
        if len(errors) >= MIN_RUNS:
            s = summarize_errors(errors)
            assert s.mean_abs_error is not None and s.max_abs_error is not None and s.mean_error is not None
            return ExpectedError(basis=words + _none_on_profile(kind, words, members), runs=s.n,
                                 median_abs_error=statistics.median(abs(e) for e in errors),
                                 mean_abs_error=s.mean_abs_error, max_abs_error=s.max_abs_error,
                                 mean_error=s.mean_error, narrower="; ".join(passed), min_runs=MIN_RUNS,
                                 not_held_out=sum(not r.held_out for r in members))
        passed.append(f"{words}: {len(errors)} run{'s' if len(errors) != 1 else ''}")
    return None


def _none_on_profile(kind: PlanKind, words: str, members: list[HeldOutRun]) -> str:
    """What a calibration family's group leaves unsaid when none of its runs is on the plan's own profile (freshuser27:
    a GB300 plan listed "gpu-blackwell (b200, gb200, b300, gb300)" as if B300/GB300 runs were among them): that the
    profile has no run there and takes the family's factors, whose note names the runs they were fitted on."""
    fam = kind.calibration_family
    if not kind.profile or fam is None or not words.startswith(fam) or any(r.hw == kind.profile for r in members):
        return ""
    return f"; none on {kind.profile}, which takes {fam}'s factors (btacalc hw show {kind.profile})"


def plan_kind(hardware: HardwareProfile, moe: bool, low_precision: bool, ep_overlap: bool = False) -> PlanKind:
    """A plan's kind; a profile is in its calibration family only when it is the built-in profile unchanged
    (`ep_overlap`: the plan runs --overlap-moe-expert-parallel-comm)."""
    builtin = hardware.name in profile_names() and resolve_hardware(hardware.name) == hardware
    spec, matched = (family_of(hardware.name), "") if builtin else architecture_family(hardware)
    return PlanKind(calibration_family=spec.name if spec else None, family_profiles=spec.profiles if spec else [],
                    matched=matched, device=hardware.family, moe=moe, low_precision=low_precision,
                    ep_overlap=ep_overlap, profile=hardware.name if builtin else "")


def architecture_family(hardware: HardwareProfile) -> tuple[Optional[FamilySpec], str]:
    """The calibration family of a profile that is not a built-in one as shipped (a copied file, a `whatif` change),
    and the words that say how it was matched: the one family with a built-in profile of the same kind of device and
    compute capability whose factors (the family's `factors`: compute_efficiency on GPUs) the profile carries
    unchanged. None: no family, or more than one."""
    def factors(p: HardwareProfile, spec: FamilySpec) -> list[Optional[float]]:
        return [getattr(getattr(p.calibration, f), "value", None) for f in spec.factors]

    shipped_profiles = builtin_profiles()
    found = [(spec, name) for spec in load_families() for name in spec.profiles
             if name in shipped_profiles and shipped_profiles[name].family == hardware.family
             and shipped_profiles[name].chip.capability == hardware.chip.capability
             and factors(shipped_profiles[name], spec) == factors(hardware, spec)]
    families = {spec.name for spec, _ in found}
    if len(families) != 1:
        return None, ""
    spec, like = found[0]
    arch = f"compute capability {hardware.chip.capability:g}" if hardware.chip.capability else "a wafer"
    values = ", ".join(f"{f} {v:g}" for f, v in zip(spec.factors, factors(hardware, spec)) if v is not None)
    return spec, (f"{hardware.name} is no built-in profile as shipped: taken as {like}'s family by its {arch} and its "
                  f"{values or 'factors'}")


def kind_of(problem: Problem) -> PlanKind:
    """A problem's kind, as plan and sweep match it: its hardware, MoE or dense, its precision, and whether its layout
    runs the EP overlap."""
    return plan_kind(problem.hardware, problem.model.is_moe, problem.run.recipe.low,
                     bool(problem.layout.overlap.all_to_all))


@lru_cache(maxsize=1)
def shipped() -> ExpectedErrorData:
    """btacalc/data/expected_error.json (see the module docstring)."""
    try:
        return ExpectedErrorData.model_validate(json.loads(package_data(EXPECTED_ERROR_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:  # json's and pydantic's errors are ValueErrors: a broken shipped file
        why = first_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        raise DataError(f"btacalc/data/{EXPECTED_ERROR_FILE}: {why}") from exc
