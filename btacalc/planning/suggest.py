"""What would fit when a plan does not: off-wafer capacity, weight streaming, more devices,
recomputation, FlashAttention, a shorter sequence, a different batch shape. Suggestions are written
as the command-line flags a user would type."""

from __future__ import annotations

from ..config.execution import ExecutionRequest
from ..model.memory import MemoryModel
from ..model.problem import Problem
from ..model.solver import solve


def suggestions(problem: Problem, mem: MemoryModel) -> list[str]:
    limits = problem.execution.limits
    fixed = sum(mem.fixed.values())
    if not mem.offchip_fits:
        state = sum(v for k, v in mem.offchip.items() if k != "capacity")
        return [f"weights, gradients and optimizer state ({state / 1e12:.2f} TB) exceed the off-wafer store "
                f"({mem.offchip['capacity'] / 1e12:.2f} TB in the profile): a larger MemoryX configuration is needed"]
    if fixed > mem.usable:
        return _state_too_large(problem, mem, fixed)
    out: list[str] = []
    run = problem.run
    trials = []
    if run.recompute != "full":
        trials.append(("--recompute full", {"recompute": "full"}))
    if run.attention != "flash":
        trials.append(("--attention flash", {"attention": "flash"}))
    for flag, change in trials:
        alt = MemoryModel(problem.with_run(**change))
        if alt.fits(1, 1):
            sol = solve(alt, limits.free())
            out.append(f"{flag} fits G = {sol.tiles}, b = {sol.tile_batch} (G*b = {sol.tiles * sol.tile_batch})")
    if problem.hardware.family == "gpu" and problem.layout.devices > 1:
        out.append(f"--search finds the fastest Megatron layout that fits on --devices {problem.layout.devices}, if any "
                   "(tensor, pipeline, context parallelism, recomputation)")
    longest = _longest_sequence(mem, run.seq_len)
    if longest is not None:
        out.append(f"--seq {longest} is the longest sequence that fits one sequence (G = b = 1)")
    if limits.global_batch is not None and mem.fits(limits.global_batch, 1):
        out.append(f"--global-batch {limits.global_batch} fits as {limits.global_batch} tiles of 1 sequence "
                   "(drop --tiles/--tile-batch)")
    return out


def _state_too_large(problem: Problem, mem: MemoryModel, fixed: int) -> list[str]:
    if mem.streaming:
        return [f"streamed weight and gradient buffers alone take {fixed / 1e9:.1f} GB of {mem.usable / 1e9:.1f} GB usable"]
    out = [f"weights, gradients and optimizer state take {fixed / 1e9:.1f} GB per device of "
           f"{mem.usable / 1e9:.1f} GB usable"]
    if problem.hardware.family == "wse":
        streamed = MemoryModel(problem.with_run(memory_model="weight_streaming"))
        if streamed.fits(1, 1):
            sol = solve(streamed, problem.execution.limits.free())
            out.append(f"--memory-model weight_streaming (or auto) fits G = {sol.tiles}, b = {sol.tile_batch}: "
                       "weights and optimizer state off-wafer in MemoryX")
    if problem.hardware.multi_device and problem.hardware.family == "gpu":  # wafer systems never shard the state
        from .cluster import min_devices

        request = problem.execution.request or ExecutionRequest()
        zero = max(problem.layout.zero_stage, 1)
        fit = min_devices(problem.model, problem.hardware,
                          request.with_changes(zero_stage=zero, recompute=problem.run.recompute), escalate=True)
        if fit is not None:
            lay = fit.layout
            extra = " --recompute full" if fit.run.recompute != problem.run.recompute else ""
            out.append(f"--devices {lay.devices} --ep {lay.expert_parallel} --zero {lay.zero_stage}{extra} fits one "
                       f"sequence per device (smallest power-of-two device count; EP = gcd(N, E))")
        if problem.hardware.family == "gpu" and problem.layout.devices > 1:
            out.append(f"--search finds the fastest Megatron layout that fits on --devices {problem.layout.devices}, if any "
                       "(pipeline and tensor parallelism split the state further)")
    return out


def _longest_sequence(mem: MemoryModel, seq_len: int) -> int | None:
    """The longest sequence for which one sequence (G = b = 1) fits, by bisection; None if none does."""
    if mem.total(1, 1, seq_len=1) > mem.usable:
        return None
    lo, hi = 1, seq_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mem.total(1, 1, seq_len=mid) <= mem.usable:
            lo = mid
        else:
            hi = mid - 1
    return lo


