"""A wafer cluster's global batch, split the way Cerebras splits it.

`--global-batch N` on a wafer profile is the batch of one optimizer step over all systems (Model Zoo's
`batch_size`): each of the D systems takes N / D sequences (`num_csx`) and runs them as M micro-batches
of n = N / (D M) sequences (`micro_batch_size`), tiled as G attention tiles of b (n = G b). The weight
stream runs once per micro-batch, the gradient reduction and MemoryX's optimizer step once per step.

Divisibility, as Model Zoo checks it in releases 2.0.3 to 2.2.0 (modelzoo/common/pytorch/input_utils.py,
`validate_streaming_and_micro_batch_size`; https://github.com/Cerebras/modelzoo/tree/Release_2.1.1):
`batch_size % num_csx == 0` and `(batch_size // num_csx) % micro_batch_size == 0`. From 2.3.0 on the
checks are gone and the runtime rounds the per-system batch up to ceil(N / D) and the micro-batch to a
supported value (training-docs.cerebras.ai rel-2.5.0, microbatching tutorials), so the batch trained
is no longer exactly N; btacalc keeps the strict rule, which every release accepts.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ...errors import BtacalcError
from ..memory import MemoryModel
from ..problem import Problem
from ..solver import divisors

RULE = ("Cerebras Model Zoo R_2.0.3-2.2.0: batch_size % num_csx == 0 and (batch_size / num_csx) % "
        "micro_batch_size == 0 (later releases round up instead)")


def per_system_batch(global_batch: int, systems: int) -> int:
    if global_batch % systems:
        raise BtacalcError(f"{{global_batch}} {global_batch} does not divide over {{devices}} {systems} wafer "
                           f"systems ({RULE})")
    return global_batch // systems


def micro_batch_size(global_batch: int, systems: int, micro_batches: int) -> int:
    """n = N / (D M), checked against the strict rule."""
    per = per_system_batch(global_batch, systems)
    if per % micro_batches:
        raise BtacalcError(f"{{micro_batches}} {micro_batches} does not divide the {per} sequences per system "
                           f"({{global_batch}} {global_batch} / {{devices}} {systems}; {RULE})")
    return per // micro_batches


def fewest_micro_batches(mem: MemoryModel, per_system: int) -> Optional[int]:
    """The fewest micro-batches M (M dividing the per-system batch) whose micro-batch fits on the wafer
    as n tiles of one sequence (the least memory n sequences can take); None when not even M = N/D fits.

    LEAD / ISSUE 14: a stand-in for the solver's choice of M, G and b (solver.py). Fewest micro-batches
    is what maximises throughput here because the weight stream repeats per micro-batch."""
    for m in divisors(per_system):
        if mem.fits(per_system // m, 1):
            return m
    return None


def split_global_batch(problem: Problem) -> Problem:
    """On a wafer with `--global-batch N`: the problem with M micro-batches per step (given, or the
    fewest that fit) and the solver's batch set to the micro-batch n = N / (D M). Other problems are
    returned unchanged (a GPU's --global-batch still means G*b per device until issue 14)."""
    ex = problem.execution
    n_global = ex.limits.global_batch
    if problem.hardware.family != "wse" or n_global is None:
        return problem
    systems = problem.layout.devices
    given = ex.request.micro_batches if ex.request is not None else None
    if given is None:
        per = per_system_batch(n_global, systems)
        chosen = fewest_micro_batches(MemoryModel(problem), per)
        given = per if chosen is None else chosen  # nothing fits: report the smallest micro-batch, unfit
        reason = (f"the fewest micro-batches whose micro-batch fits: {per} sequences per system in {given} "
                  f"micro-batch(es) of {per // given} (placeholder for the issue-14 solver)")
        ex = replace(ex, defaults=ex.defaults + (("micro_batches", reason),))
    n = micro_batch_size(n_global, systems, given)
    ex = replace(ex, layout=replace(ex.layout, micro_batches=given), limits=replace(ex.limits, global_batch=n))
    return Problem(problem.model, problem.hardware, ex)


def check_cluster_memory_model(problem: Problem) -> None:
    """Several wafer systems train only with weights streamed from MemoryX through SwarmX."""
    if problem.hardware.family == "wse" and problem.layout.devices > 1 and problem.memory_model == "resident":
        raise BtacalcError("{memory_model} resident keeps the model on one wafer: several {devices} systems stream "
                           "weights from MemoryX through SwarmX (weight_streaming)")
