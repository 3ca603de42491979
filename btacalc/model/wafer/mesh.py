"""The wafer's fabric as a cost model: the per-tile overhead of BTA and the on-wafer dispatch and
combine of tokens to experts, derived from the mesh numbers of the profile (`[mesh]`).

Luczynski et al. (HPDC '24, arXiv 2404.15888) model a communication pattern on the WSE's 2D mesh,
in cycles, from its contention C (wavelets the busiest link carries), energy E (wavelet-hops), active
links N, distance L (longest path, hops) and depth D (dependent steps, each 2 T_R + 1 cycles, T_R the
core-to-router latency):

    T = max(C, E/N + L) + (2 T_R + 1) D

(as transcribed by a third-party review; another transcription reads max(C, E/N) + L. With the
contention term dominant below, the two differ by L cycles, about 1.6 us on WSE-2.)
Cycles become seconds at the mesh clock f; a hop takes t_hop cycles; a link carries w bytes per cycle
each way; the usable rectangle is X x Y PEs, X <= Y.

Per-tile overhead. One attention tile runs the layer's tile-batched phases (catalogue `batch = "tile"`)
as a chain of dependent steps: a phase's matmul or reduction spreads its inputs across the mesh and
gathers its result (a row broadcast, then a column reduction: L = X + Y hops) before the next phase may
start. The data terms (C, E/N) grow with b and are part of the phase's roofline time already; what a
tile costs whatever its size is the latency of each step,

    t_step = ((X + Y) t_hop + 2 T_R + 1) / f,

paid by every tile-batched phase in every pass that runs it (forward, backward = 2 matmuls, and the
recomputation when the phase is recomputed). WSE-2: (1744 + 5) / 1.1 GHz = 1.59 us per step; a Qwen3
layer's 8 tile phases x 4 passes (full recomputation) = 50.9 us per tile per layer.

Dispatch and combine. Routing each token's k copies to where its expert's weights are laid out is a
permutation of V bytes over the mesh. Under uniform routing a copy's source and destination are
independent and uniform over the rectangle, so half of the bytes cross the bisection (the cut across
the long side: X links each way) and a wavelet travels (X + Y)/3 hops on average:

    C = V / (4 w X)        E/N = (V / w)(X + Y)/3 / (2 (X (Y - 1) + Y (X - 1)))

per exchange plus L = (X + Y) t_hop cycles and one dependent step. V is the catalogue's `a2a_bytes` (the same volume
a GPU sends in its all-to-all), forward, backward and recomputed (`communication.exchanges`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...catalogue.constants import constants
from ...config.hardware import Mesh
from ..communication import exchanges, recomputed
from ..problem import Evaluation


@dataclass(frozen=True)
class MeshGeometry:
    """The numbers of a profile's `[mesh]`, as floats (X <= Y)."""

    x: float
    y: float
    clock_hz: float
    hop_cycles: float
    ramp_cycles: float
    link_bytes_per_cycle: float

    @classmethod
    def of(cls, mesh: Mesh) -> "MeshGeometry":
        a, b = mesh.width_pes.value, mesh.height_pes.value
        return cls(min(a, b), max(a, b), mesh.clock_hz.value, mesh.hop_latency_cycles.value,
                   mesh.ramp_latency_cycles.value, mesh.link_bytes_per_cycle.value)

    @property
    def distance_hops(self) -> float:
        """L: a row broadcast followed by a column reduction crosses X + Y hops."""
        return self.x + self.y

    @property
    def step_s(self) -> float:
        """One dependent step: the distance plus the core-router round trip, 2 T_R + 1 cycles."""
        return (self.distance_hops * self.hop_cycles + 2 * self.ramp_cycles + 1) / self.clock_hz

    @property
    def bisection_bytes_per_s(self) -> float:
        """Bytes per second across the cut of the long side, both directions (2 X links)."""
        return 2 * self.x * self.link_bytes_per_cycle * self.clock_hz

    def permutation_s(self, volume: Any, count: Any) -> Any:
        """Time of `count` uniform random permutations moving `volume` bytes in all (see module docstring)."""
        w = self.link_bytes_per_cycle
        contention = volume / (4 * w * self.x)
        links = 2 * (self.x * (self.y - 1) + self.y * (self.x - 1))
        energy = (volume / w) * (self.x + self.y) / 3 / links
        cycles = np.maximum(contention, energy + count * self.distance_hops * self.hop_cycles) + count * (2 * self.ramp_cycles + 1)
        return cycles / self.clock_hz


def tile_steps(ev: Evaluation) -> Any:
    """Dependent mesh steps one attention tile adds per training step, all layers: each tile-batched
    layer phase once per pass that runs it (forward, backward matmuls, recomputation)."""
    passes = constants().passes
    steps: Any = 0
    for n, pv, phase in ev.items():
        if phase.scope == "layer" and phase.batch == "tile":
            steps = steps + n * (1 + passes.backward_matmul_factor + passes.recompute_passes * recomputed(pv, phase.name))
    return steps


def tile_overhead_s(mesh: Mesh, ev: Evaluation) -> Any:
    """Seconds one attention tile adds to a training step (all layers, all passes)."""
    return tile_steps(ev) * MeshGeometry.of(mesh).step_s


def dispatch_s(mesh: Mesh, ev: Evaluation) -> Any:
    """Seconds per micro-batch for the on-wafer token dispatch and combine of every MoE layer."""
    volume, count = exchanges(ev)
    return MeshGeometry.of(mesh).permutation_s(volume, count)
