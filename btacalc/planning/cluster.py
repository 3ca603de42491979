"""How many GPUs a model needs: the smallest power-of-two device count whose per-device shard fits."""

from __future__ import annotations

from typing import Optional

from ..config.execution import BatchLimits, ExecutionRequest
from ..config.resolution import resolve_execution
from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec
from ..errors import BtacalcError
from ..model.memory import MemoryModel, resolve_memory_model
from ..model.problem import Problem

# Search bound: 16,384 GPUs, beyond any plan this tool is meant for (the largest published training
# runs use about that many: Llama 3 405B on 16,384 H100s, arXiv 2407.21783 §3.3).
MAX_DEVICES = 1 << 14


def device_counts(limit: int = MAX_DEVICES) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]


def min_devices(model: ModelSpec, hardware: HardwareProfile, request: ExecutionRequest, limit: int = MAX_DEVICES,
                escalate: bool = False, keep: tuple[str, ...] = ()) -> Optional[Problem]:
    """The smallest power-of-two device count at which one sequence per device fits, or None within
    `limit`. Every other choice of `request` is kept (EP defaults to gcd(N, E) unless given); with
    `escalate`, each count also tries ZeRO-3 and full recomputation (in that order: the memory levers
    a practitioner pulls before buying more GPUs), except the request fields named in `keep` (the user's
    own --zero or --recompute). Memory per device never grows with the device count (shards only
    shrink), so the first fit is the answer."""
    # the question is one sequence per device, so the run's global batch (which need not divide over
    # another device count) and its micro-batching are left out
    request = request.with_changes(limits=BatchLimits(), micro_batches=None)
    variants = [request]
    if escalate:
        for change in ({"zero_stage": 3}, {"recompute": "full"}, {"zero_stage": 3, "recompute": "full"}):
            if set(change) & set(keep):
                continue
            cand = request.with_changes(**change)
            if cand not in variants:
                variants.append(cand)
    ep = request.expert_parallel
    for d in device_counts(limit):
        if ep is not None and d % ep:
            continue
        for variant in variants:
            # one device: the default (ZeRO 0, or 1 under the precision-aware optimizer, which Megatron runs only so)
            zero = variant.zero_stage if d > 1 else None
            try:  # a layout (TP x PP x CP, ETP x EP x PP) that does not divide this count: not a candidate
                execution = resolve_execution(variant.with_changes(devices=d, zero_stage=zero), model, hardware)
            except BtacalcError:
                continue
            problem = resolve_memory_model(Problem(model, hardware, execution))
            if MemoryModel(problem).fits(1, 1):
                return problem
    return None
