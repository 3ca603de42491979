"""Pipeline stages: which layers each stage holds and how many micro-batches' activations it keeps.

Layers (Megatron-Core): the L layers split into PP·VP model chunks; stage j holds chunks j, j + PP, ...
(interleaving, Narayanan et al. 2021 §2.2). When PP·VP does not divide L but divides L + 2, the
embedding and the loss count as one layer each (Megatron-LM --account-for-embedding-in-pipeline-split
--account-for-loss-in-pipeline-split): the first and the last chunk hold one layer fewer
(`btacalc.config.execution.pipeline_split` checks that one of the two holds).

In flight (activations kept for backward at a stage's peak), Megatron-Core schedules.py:
- 1F1B (VP = 1): stage j runs PP - j - 1 warm-up forward passes before its first backward, so it holds
  min(PP - j, M) micro-batches (the first stage PP: Korthikanti et al. 2022 §4.2.3);
- interleaved (VP > 1, micro-batch groups of PP): stage j runs 2(PP - j - 1) + (VP - 1)·PP warm-up
  forwards of one model chunk each, so it holds min(2(PP - j - 1) + (VP - 1)·PP + 1, M·VP) chunk
  passes of L/(PP·VP) layers; for the first stage that is PP·(1 + (PP - 1)/(PP·VP)) micro-batches of
  its L/PP layers, Korthikanti's interleaving factor.
The embedding counts the first stage's in-flight micro-batches (as Megatron's
theoretical_memory_usage.py does); the head and loss of the last stage one (its last chunk's backward
follows its forward directly).

Bubble (Narayanan et al. 2021 §2.2): (PP - 1)/VP times one micro-batch's time on a stage, on top of
the M micro-batches: (PP - 1)/(M·VP) of the ideal time.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..arrays import is_array, minimum, where


def ratio(a: Any, b: Any) -> Any:
    """a / b: an exact Fraction (or int) on ints, a float on arrays."""
    if is_array(a, b):
        return a / b
    return Fraction(a, b) if a % b else a // b


@dataclass(frozen=True)
class PipelineStages:
    """The stages of one pipeline: `pp`, `vp`, `micro_batches` may be ints or arrays (one per layout)."""

    num_layers: int
    pp: Any
    vp: Any
    micro_batches: Any

    @property
    def extra(self) -> Any:
        """1 when the embedding and the loss count as one layer each in the split, else 0."""
        return where(self.num_layers % (self.pp * self.vp) == 0, 0, 1)

    @property
    def layers_per_chunk(self) -> Any:
        return (self.num_layers + 2 * self.extra) // (self.pp * self.vp)

    def exists(self, j: int) -> Any:
        return j < self.pp

    def layers(self, j: int) -> Any:
        """Decoder layers on stage j."""
        lost = where(j == 0, self.extra, 0) + where(j == self.pp - 1, self.extra, 0)
        return self.layers_per_chunk * self.vp - lost

    def in_flight(self, j: int) -> Any:
        """Model-chunk passes whose activations stage j holds at its peak (see the module docstring)."""
        plain = minimum(self.pp - j, self.micro_batches)
        interleaved = minimum(2 * (self.pp - j - 1) + (self.vp - 1) * self.pp + 1, self.micro_batches * self.vp)
        return where(self.vp == 1, plain, interleaved)

    def held_layers(self, j: int) -> Any:
        """Layer activations stage j holds, in layer-micro-batches: in_flight x its layers / VP."""
        return ratio(self.in_flight(j) * self.layers(j), self.vp)

    def embedding_in_flight(self) -> Any:
        """Micro-batches of embedding activations the first stage holds (in_flight / VP)."""
        return ratio(self.in_flight(0), self.vp)

    @property
    def bubble_micro_batches(self) -> Any:
        """The pipeline bubble in units of one micro-batch's time on a stage: (PP - 1) / VP."""
        return ratio(self.pp - 1, self.vp)
