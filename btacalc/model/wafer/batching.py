"""A wafer cluster's global batch, split the way Cerebras splits it.

`--global-batch N` on a wafer profile is the batch of one optimizer step over all systems (Model Zoo's
`batch_size`): each of the D systems takes N / D sequences (`num_csx`) and runs them as M micro-batches
of n = N / (D M) sequences (`micro_batch_size`), tiled as G attention tiles of b (n = G b); the solver chooses M, G and b
(the fastest fitting split, model/solver.py) unless `--grad-accum` fixes M. The weight
stream runs once per micro-batch, the gradient reduction and MemoryX's optimizer step once per step.

Divisibility, as Model Zoo checks it in releases 2.0.3 to 2.2.0 (modelzoo/common/pytorch/input_utils.py,
`validate_streaming_and_micro_batch_size`; https://github.com/Cerebras/modelzoo/tree/Release_2.1.1):
`batch_size % num_csx == 0` and `(batch_size // num_csx) % micro_batch_size == 0`. From 2.3.0 on the
checks are gone and the runtime rounds the per-system batch up to ceil(N / D) and the micro-batch to a
supported value (training-docs.cerebras.ai rel-2.5.0, microbatching tutorials), so the batch trained
is no longer exactly N; btacalc keeps the strict rule, which every release accepts. The rule is checked
once, with the other batch rules, when the execution is resolved (`config/execution.py`, `BatchLimits.validate`).
"""

from __future__ import annotations

from ...errors import BtacalcError
from ..problem import Problem


def check_cluster_memory_model(problem: Problem) -> None:
    """Several wafer systems train only with weights streamed from MemoryX through SwarmX."""
    if problem.hardware.family == "wse" and problem.layout.devices > 1 and problem.memory_model == "resident":
        raise BtacalcError("{memory_model} resident keeps the model on one wafer: several {devices} systems stream "
                           "weights from MemoryX through SwarmX (weight_streaming)")
