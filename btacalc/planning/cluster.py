"""How many GPUs a model needs: the smallest power-of-two device count whose per-device shard fits."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from .memory import MemoryModel, resolve_memory_model
from .parallel import Parallelism, auto_expert_parallel
from .run import Problem

MAX_DEVICES = 1 << 14  # 16,384 GPUs: beyond any plan this tool is meant for


def device_counts(limit: int = MAX_DEVICES) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]


def with_devices(problem: Problem, devices: int, expert_parallel: Optional[int] = None) -> Problem:
    """`problem` on `devices` GPUs; expert parallelism defaults to gcd(devices, E)."""
    ep = expert_parallel if expert_parallel is not None else auto_expert_parallel(devices, problem.model.num_experts)
    return Problem(problem.model, problem.hardware, problem.run,
                   replace(problem.parallel, devices=devices, expert_parallel=ep))


def _variants(problem: Problem, escalate: bool) -> list[Problem]:
    """The problem as given, then (escalate) with ZeRO-3, with full recomputation, with both:
    the memory levers a practitioner pulls before buying more GPUs."""
    out = [problem]
    if escalate:
        zero3 = problem.with_parallel(zero_stage=3)
        full = problem.with_run(recompute="full")
        both = zero3.with_run(recompute="full")
        out += [cand for cand in (zero3, full, both) if cand not in out]  # already ZeRO-3 / full: no repeat
    return out


def min_devices(problem: Problem, expert_parallel: Optional[int] = None, limit: int = MAX_DEVICES,
                escalate: bool = False) -> Optional[Problem]:
    """The smallest power-of-two device count at which one sequence per device fits, or None within
    `limit`. The parallelism and run options of `problem` are kept; with `escalate`, each count also
    tries ZeRO-3 and full recomputation (in that order) before moving to the next count. Memory per
    device never grows with the device count (shards only shrink), so the first fit is the answer."""
    if expert_parallel is not None:  # a given EP degree must divide the experts at every count
        Parallelism(expert_parallel, expert_parallel).validate(problem.model.num_experts, problem.hardware)
    for d in device_counts(limit):
        if expert_parallel is not None and d % expert_parallel:
            continue
        for variant in _variants(problem, escalate):
            cand = with_devices(variant, d, expert_parallel)  # EP = gcd(d, E) divides E by construction
            if d == 1:
                cand = cand.with_parallel(zero_stage=0)
            cand = resolve_memory_model(cand)
            if MemoryModel(cand).fits(1, 1):
                return cand
    return None
