"""A plan that does not fit: the one constraint that binds, and what would fit.

The verdict names one cause, checked in this order (the first that holds binds):

- **memory**: not even one sequence per device fits (or the state exceeds the off-wafer store);
- **a fixed size**: one sequence fits, but the shape the user fixed (``--micro-batch``, ``--tiles``,
  ``--tile-batch``, or ``--global-batch`` with ``--grad-accum``) does not;
- **a cap**: ``--max-global-batch`` is below one sequence per data-parallel rank (N = DP·M·G·b with
  G·b ≥ 1), so no shape is allowed at all;
- otherwise memory at the smallest allowed shape.

Every suggestion is a change of the request that is *run* (resolved and solved exactly as `plan`
does) and shown only when that plan fits; a suggestion that repeats what was given, or whose
resolution is refused (a layout that does not divide another device count), is left out. Suggestions
never raise. They are written as the command-line flags a user would type.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from ..config.execution import ExecutionRequest
from ..errors import BtacalcError
from ..model.memory import MemoryModel
from ..model.problem import Problem
from ..model.solver import Solution, largest_true


@dataclass(frozen=True)
class Trial:
    """One suggestion: the flags a user would type, and the request change they make."""

    flags: str
    change: Callable[[ExecutionRequest], ExecutionRequest]


def _request(problem: Problem) -> ExecutionRequest:
    return problem.execution.request or ExecutionRequest()


Solver = Callable[[Problem], tuple[Problem, Solution, Any]]  # `plan.solve_problem` (passed in: plan imports this)


def run_trial(problem: Problem, change: Callable[[ExecutionRequest], ExecutionRequest], solve: Solver) -> Optional[Solution]:
    """The solved shape of `problem` with its request changed, when that plan fits; None when it does
    not fit or the changed request is refused (never raises a user error)."""
    from .resolve import resolve_problem

    try:
        alt = resolve_problem(problem.model, problem.hardware, change(_request(problem)))
        _, sol, _ = solve(alt)
    except (BtacalcError, ArithmeticError):
        return None
    return sol if sol.fits and MemoryModel(alt).fits(sol.tiles, sol.tile_batch) else None


def _shape(sol: Solution) -> str:
    m = f", M = {sol.micro_batches}" if sol.micro_batches > 1 else ""
    return f"G = {sol.tiles}, b = {sol.tile_batch}{m}"


@dataclass(frozen=True)
class NoFit:
    """Why a point has no fitting shape: the binding constraint, the sentence, and the G*b to show
    (the fixed micro-batch, when that is what binds; else None: the search's fallback shape)."""

    constraint: str
    explanation: str
    shown_batch: Optional[int] = None


def no_fit(one_fits: bool, limits: Any, data_parallel: int) -> NoFit:
    """The one constraint that binds for a point without a fitting shape. `limits` has the fields of
    BatchLimits (None or 0: not given), so `plan` (a BatchLimits) and `sweep` (one point's values)
    share this rule and its words."""
    given = lambda name: int(getattr(limits, name) or 0)  # noqa: E731
    if not one_fits:
        return NoFit("memory", "not even one sequence fits")
    m = given("micro_batches")
    if given("global_batch") and m:
        per = given("global_batch") // (data_parallel * m)
        return NoFit("micro_batch", f"the fixed micro-batch G*b = {per} per data-parallel rank does not fit; "
                                    "one sequence does", per if not (given("tiles") or given("tile_batch")) else None)
    if given("tiles"):
        return NoFit("tiles", f"the fixed --tiles {given('tiles')} does not fit; one sequence does")
    if given("tile_batch"):
        return NoFit("tile_batch", f"the fixed --tile-batch {given('tile_batch')} does not fit; one sequence does")
    least = data_parallel * (m or 1)
    if given("max_global_batch") and given("max_global_batch") < least:
        return NoFit("max_global_batch", f"--max-global-batch {given('max_global_batch')} is below the smallest "
                                         f"step batch, one sequence per data-parallel rank: DP {data_parallel} x M "
                                         f"{m or 1} = {least} sequences")
    return NoFit("memory", "no shape the limits allow fits")


def verdict(problem: Problem, mem: MemoryModel, sol: Solution) -> Solution:
    """`sol` (a shape that does not fit) with the one constraint that binds and why (`no_fit`)."""
    why = no_fit(bool(mem.offchip_fits and mem.fits(1, 1)), problem.execution.limits, problem.layout.data_parallel)
    if why.shown_batch is not None:  # the fixed G*b shown as tiles of one sequence (the least memory for it)
        sol = replace(sol, tiles=why.shown_batch, tile_batch=1)
    return replace(sol, binding_constraint=why.constraint, tile_constraint=why.constraint, explanation=why.explanation)


def suggestions(problem: Problem, mem: MemoryModel, solve: Solver) -> list[str]:
    """What would fit, each verified by solving it with `solve` (as `plan` does); never raises."""
    try:
        return _suggestions(problem, mem, solve)
    except (BtacalcError, ArithmeticError):  # a suggestion is advice: it never replaces the answer
        return []


def _suggestions(problem: Problem, mem: MemoryModel, solve: Solver) -> list[str]:
    if not mem.offchip_fits:
        state = sum(v for k, v in mem.offchip.items() if k != "capacity")
        return [f"weights, gradients and optimizer state ({state / 1e12:.2f} TB) exceed the off-wafer store "
                f"({mem.offchip['capacity'] / 1e12:.2f} TB in the profile): a larger MemoryX configuration is needed"]
    fixed = sum(mem.fixed.values())
    if fixed > mem.usable:
        return _state_too_large(problem, mem, fixed, solve)
    out = [text for text in (_verified(problem, trial, solve) for trial in _trials(problem, mem)) if text]
    if problem.hardware.family == "gpu" and problem.layout.devices > 1 and not problem.layout.torch_fsdp:
        out.append(f"--search finds the fastest Megatron layout that fits on --devices {problem.layout.devices}, if any "
                   "(tensor, pipeline, context parallelism, recomputation)")
    return out


def _verified(problem: Problem, trial: Trial, solve: Solver) -> Optional[str]:
    sol = run_trial(problem, trial.change, solve)
    return None if sol is None else f"{trial.flags} fits {_shape(sol)} (G*b = {sol.tiles * sol.tile_batch})"


def _with_limits(**changes: Any) -> Callable[[ExecutionRequest], ExecutionRequest]:
    return lambda r: r.with_changes(limits=replace(r.limits, **changes))


def _trials(problem: Problem, mem: MemoryModel) -> list[Trial]:
    """Candidate changes, each different from what was given (a trial repeating the request is no advice)."""
    run, limits, request = problem.run, problem.execution.limits, _request(problem)
    trials: list[Trial] = []
    if request.limits.max_global_batch is not None:
        trials.append(Trial(f"dropping --max-global-batch {request.limits.max_global_batch}",
                            _with_limits(max_global_batch=None)))
    fixed = [(flag, name) for flag, name in (("--micro-batch", "micro_batch"), ("--tiles", "tiles"),
                                             ("--tile-batch", "tile_batch"))
             if getattr(request.limits, name) is not None]
    for flag, name in fixed:
        trials.append(Trial(f"{flag} 1" if getattr(request.limits, name) != 1 else f"dropping {flag}",
                            _with_limits(**{name: 1 if getattr(request.limits, name) != 1 else None})))
    if run.recompute != "full":
        trials.append(Trial("--recompute full", lambda r: r.with_changes(recompute="full")))
    if run.recompute_layers:  # review30: a block recompute of some layers: every layer recomputed saves more
        trials.append(Trial(f"dropping --recompute-layers {run.recompute_layers} (every layer recomputed)",
                            lambda r: r.with_changes(recompute_layers=0)))
    if run.attention != "flash":
        trials.append(Trial("--attention flash", lambda r: r.with_changes(attention="flash")))
    longest = _longest_sequence(mem, run.seq_len)
    if longest is not None:  # the longest the layout splits (review35: sequence parallelism needs s / CP % TP == 0)
        longest -= longest % problem.layout.sequence_multiple()
    if longest and longest < run.seq_len:
        trials.append(Trial(f"--seq {longest} (the longest sequence of which one fits)",
                            lambda r: r.with_changes(seq_len=longest)))
    if limits.global_batch is not None and (request.limits.tiles is not None or request.limits.tile_batch is not None):
        trials.append(Trial("dropping --tiles/--tile-batch", _with_limits(tiles=None, tile_batch=None)))
    return trials


def _state_too_large(problem: Problem, mem: MemoryModel, fixed: int, solve: Solver) -> list[str]:
    if mem.streaming:
        return [f"streamed weight and gradient buffers alone take {fixed / 1e9:.1f} GB of {mem.usable / 1e9:.1f} GB usable"]
    out = [f"weights, gradients and optimizer state take {fixed / 1e9:.1f} GB per device of "
           f"{mem.usable / 1e9:.1f} GB usable"]
    if problem.hardware.family == "wse":
        text = _verified(problem, Trial("--memory-model weight_streaming",
                                        lambda r: r.with_changes(memory_model="weight_streaming")), solve)
        if text:
            out.append(text + ": weights and optimizer state off-wafer in MemoryX")
    if problem.hardware.multi_device and problem.hardware.family == "gpu":  # wafer systems never shard the state
        from .cluster import min_devices

        lay = problem.layout
        if lay.devices > 1 and lay.zero_stage < 3 and not lay.torch_fsdp:
            # hostile41: the state sharded on the devices given (qwen3-30b-a3b on 13 H100, DP 13: 69.8 GB of 79.2 at
            # --zero 3) was never offered; only a smaller power-of-two count with full recomputation was
            text = _verified(problem, Trial("--zero 3", lambda r: r.with_changes(zero_stage=3)), solve)
            if text:
                out.append(f"{text} on these {lay.devices} devices (every rank's weights, gradients and optimizer "
                           "state sharded over data parallel)")
        zero = max(problem.layout.zero_stage, 1)
        fit = min_devices(problem.model, problem.hardware,
                          _request(problem).with_changes(zero_stage=zero, recompute=problem.run.recompute), escalate=True)
        if fit is not None and fit.layout.devices != problem.layout.devices:
            lay = fit.layout
            extra = " --recompute full" if fit.run.recompute != problem.run.recompute else ""
            # freshuser20: a dense model has no experts to split: no --ep, no EP rule. freshuser24: the rule is the
            # default's own (gcd(devices / (ETP·PP), E) under --pp or --etp), and none when --ep was given (it said
            # "EP = gcd(N, E)" beside the user's --ep 4 at 32 devices)
            ep, rule = (f" --ep {lay.expert_parallel}", _ep_rule(fit)) if problem.model.is_moe else ("", "")
            out.append(f"--devices {lay.devices}{ep} --zero {lay.zero_stage}{extra} fits one "
                       f"sequence per device (smallest power-of-two device count{rule})")
        if problem.layout.devices > 1 and not problem.layout.torch_fsdp:  # review34: the search is Megatron's
            out.append(f"--search finds the fastest Megatron layout that fits on --devices {problem.layout.devices}, if any "
                       "(pipeline and tensor parallelism split the state further)")
    return out


def _ep_rule(fit: Problem) -> str:
    """How the suggested device count's EP came about: the default's rule (gcd(N, E), or gcd(N / (ETP·PP), E) under
    --pp or --etp), or the user's --ep kept."""
    why = fit.execution.default_reasons.get("expert_parallel")
    if why is None:
        return "; the given --ep kept"
    rule = why.split(" = ")[0] if why.startswith("gcd(") else why.split(":")[0]
    return "; EP = " + rule.replace("devices", "N")


def _longest_sequence(mem: MemoryModel, seq_len: int) -> int | None:
    """The longest sequence for which one sequence (G = b = 1) fits, by bisection; None if none does."""
    if mem.total(1, 1, seq_len=1) > mem.usable:
        return None
    return largest_true(lambda s: bool(mem.total(1, 1, seq_len=s) <= mem.usable), 1, seq_len)
