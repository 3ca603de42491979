"""Wafer systems in a Cerebras Wafer-Scale Cluster: the weight stream, SwarmX and MemoryX.

N systems train in strict data parallel, each on its share of the batch (Cerebras glossary,
https://www.cerebras.net/glossary/wafer-scale-cluster/). MemoryX holds the weights and optimizer state
and runs the optimizer (https://www.cerebras.net/glossary/memoryx/); SwarmX, a tree of broadcast-reduce
nodes of fan-out F, broadcasts each layer's weights to every system and sums the gradients on their way
back at line rate (https://www.cerebras.net/glossary/swarmx/). Hence, per system:

- the weight stream runs at r = min(system I/O, MemoryX bandwidth): the tree replicates the stream, so
  neither the per-system rate nor MemoryX's load changes with N;
- latency grows with the depth of the tree: lambda(N) = lambda_MemoryX + ceil(log_F N) lambda_level.
  MemoryX pushes the next layer's weights while the current one computes (glossary/memoryx), so only
  the start of a micro-batch's stream and the step boundary expose it;
- per micro-batch: the stream of every weight, forward and backward (timing.py), plus lambda(N);
- per optimizer step, once: the gradients leave over the outbound half of the full-duplex link while
  the last backward pass runs, t_g = beta P / r, and what exceeds that backward pass shows. MemoryX
  updates the state layer by layer as the reduced gradients arrive, reading weights, gradients and
  optimizer state and writing weights and optimizer state (catalogue `training_state` rates) at its
  update bandwidth, t_u. The backward pass runs layers L..1 and the next forward 1..L, so layer l's
  update has until the next forward reaches it: the updates pipeline behind one micro-batch (last
  backward + next forward, t_mb), except layer 1's, updated last and needed first:
      exposed = max(max(0, t_g - t_bwd), max(0, t_u - t_mb) + t_u / L) + 2 lambda(N)
  (the last gradients up, the first updated weights down).

Where scaling stops being linear therefore shows in the plan: with a fixed global batch, the batch per
system shrinks with N until the stream is no longer hidden behind compute; the step-boundary terms are
fixed per step, so they grow as a share when the step shrinks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...config.hardware import HardwareProfile
from ..problem import Problem
from ..state import bytes_per_param


def tree_levels(systems: int, fanout: int) -> int:
    """Levels of a broadcast-reduce tree of fan-out F over N systems: ceil(log_F N), 0 for one system."""
    levels, reach = 0, 1
    while reach < systems:
        reach *= fanout
        levels += 1
    return levels


def stream_bandwidth(hw: HardwareProfile) -> float:
    """Bytes/s the weight stream reaches one device at: the link, or MemoryX when it is slower."""
    link = hw.memory.offchip_bandwidth_bytes_per_s.value
    memx = hw.memory.memoryx_bandwidth_bytes_per_s
    return min(link, memx.value) if memx is not None else link


def stream_limit(hw: HardwareProfile) -> str:
    memx = hw.memory.memoryx_bandwidth_bytes_per_s
    return "memoryx" if memx is not None and memx.value < hw.memory.offchip_bandwidth_bytes_per_s.value else "system_io"


def tree_latency_s(hw: HardwareProfile, systems: int) -> float:
    """lambda(N): MemoryX to a system through ceil(log_F N) SwarmX levels (0 when the profile has none)."""
    sysp = hw.system
    base = sysp.memoryx_latency_s.value if sysp.memoryx_latency_s else 0.0
    if sysp.swarmx_fanout is None or sysp.swarmx_level_latency_s is None:
        return base
    return base + tree_levels(systems, int(sysp.swarmx_fanout.value)) * sysp.swarmx_level_latency_s.value


@dataclass(frozen=True)
class StepBoundary:
    """The once-per-step costs of a weight-streaming step on a wafer cluster (seconds, before overlap)."""

    gradient_out_s: Any
    optimizer_update_s: Any
    latency_s: float
    exposed_s: Any = field(default=0.0)


def update_bytes(problem: Problem, params: int) -> int:
    """Bytes MemoryX's optimizer step reads (weights, gradients, optimizer state) and writes (weights,
    optimizer state) for `params` parameters."""
    rates = bytes_per_param(problem)
    return (2 * rates["weights"] + rates["gradients"] + 2 * rates["optimizer"]) * params


def step_boundary(problem: Problem, params: int, backward_s: Any, micro_batch_s: Any) -> StepBoundary:
    """Gradient outflow behind the last backward pass `backward_s` and MemoryX's optimizer step
    pipelined behind one micro-batch `micro_batch_s` (module docstring)."""
    hw = problem.hardware
    grads = problem.run.bytes_per_element * params / stream_bandwidth(hw)
    upd_bw = hw.memory.memoryx_update_bandwidth_bytes_per_s
    update = update_bytes(problem, params) / upd_bw.value if upd_bw else 0.0
    lam = tree_latency_s(hw, problem.layout.devices)
    exposed_update = np.maximum(0.0, update - micro_batch_s) + update / problem.model.num_layers
    exposed = np.maximum(np.maximum(0.0, grads - backward_s), exposed_update) + 2 * lam
    return StepBoundary(grads, update, lam, exposed)


def micro_batch_latency_s(problem: Problem) -> float:
    """The start of each micro-batch's weight stream waits lambda(N)."""
    return tree_latency_s(problem.hardware, problem.layout.devices)


def levels(problem: Problem) -> int:
    fan = problem.hardware.system.swarmx_fanout
    return tree_levels(problem.layout.devices, int(fan.value)) if fan else 0
