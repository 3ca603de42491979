"""The MoE token permutations of a training step, and the recomputation count they depend on.

Dispatch and combine: the catalogue's `a2a_bytes` terms give each phase's forward volume; it is sent
once forward, once backward (the inverse permutation of the gradients) and again when the phase is
recomputed. With Qwen3-style dispatch + combine this is 4·T·k·h·β per MoE layer, 6·T·k·h·β with full
recomputation. On a wafer these bytes cross the mesh (model/wafer/mesh.py); a GPU's all-to-all, its
gradient synchronisation and every other collective are in model/gpu/collectives.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..catalogue.compiled import PhaseValues
from ..catalogue.constants import constants
from .problem import Evaluation


def recomputed(pv: PhaseValues, phase: str) -> Any:
    """Extra forward passes of the phase the recomputation policy runs in the backward pass (0 or 1;
    catalogue quantity `reruns`)."""
    return pv.value(phase, "reruns")


def exchanges(ev: Evaluation) -> tuple[Any, Any]:
    """(bytes, number of exchanges) of the token permutations (MoE dispatch and combine) per step, all
    layers: each phase's forward volume (catalogue `a2a_bytes`), again backward (the inverse
    permutation) and when the phase is recomputed."""
    passes = constants().passes
    sent: Any = 0
    count: Any = 0
    for n, pv, phase in ev.items():
        volume = pv.value(phase.name, "a2a_bytes")
        repeats = 1 + passes.backward_exchange_factor + passes.recompute_passes * recomputed(pv, phase.name)
        sent = sent + n * volume * repeats
        count = count + n * repeats * (np.asarray(volume) > 0)
    return sent, count
