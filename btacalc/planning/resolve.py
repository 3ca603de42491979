"""From a request to a problem: every default resolved once (with the batch rules, Model Zoo's split
rule on a wafer cluster among them: config/execution.py), the memory model chosen and a wafer
cluster's memory model checked (model/wafer/batching.py); the solver chooses M, G and b
(model/solver.py)."""

from __future__ import annotations

from ..config.execution import ExecutionRequest
from ..config.resolution import resolve_execution
from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec
from ..model.memory import resolve_memory_model
from ..model.problem import Problem
from ..model.wafer.batching import check_cluster_memory_model


def resolve_problem(model: ModelSpec, hardware: HardwareProfile, request: ExecutionRequest) -> Problem:
    problem = resolve_memory_model(Problem(model, hardware, resolve_execution(request, model, hardware)))
    check_cluster_memory_model(problem)
    return problem
