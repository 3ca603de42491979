"""The Cerebras Model Zoo configuration of a wafer plan: what to put in the training YAML to run the
plan's batch split and attention tiling.

Keys and where they live (Trainer layout, Model Zoo 2.3 and later):
- `trainer.init.backend.cluster_config.num_csx`: the number of systems D (ALCF example-programs,
  argonne-lcf/user-guides docs/ai-testbed/cerebras/example-programs.md; `--num_csx`);
- `trainer.fit.train_dataloader.batch_size`: the global batch N over all systems (Model Zoo configs, e.g.
  params_llama2_7b.yaml at Release_2.5.0);
- `csx.performance.micro_batch_size` under a `ScopedTrainFlags` callback: n = G*b sequences per
  micro-batch (https://training-docs.cerebras.ai/rel-2.5.0/model-zoo/tutorials/microbatching-beginner);
- `ws_opt_enable_bta` and `ws_opt_bta_max_tile`, BTA's compiler flags, under a `GlobalFlags` callback
  (https://training-docs.cerebras.ai/rel-2.9.0/model-zoo/components/trainer-components/batch-tiling-attention).
  The tile cap "must be a factor of the batch size": btacalc's tile b divides n, so it divides N too.
  That these flags sit under `csx.debug.ini` is derived (Model Zoo maps `runconfig.ini.*` there,
  src/cerebras/modelzoo/trainer/utils.py at Release_2.10.0), not confirmed by a published example.
Releases before 2.3 use `train_input.batch_size`, `train_input.micro_batch_size` and
`runconfig.num_csx` instead (the YAML's comments say so).
"""

from __future__ import annotations

from typing import Any

from ..errors import BtacalcError
from .report import PlanReport

# Keys only Cerebras' documentation names (not defined in Model Zoo's source at Release_2.10.0): the YAML says so.
DOCS_ONLY = {
    "ws_opt_enable_bta": "in Cerebras' docs only, not in Model Zoo's source: https://training-docs.cerebras.ai/"
                         "rel-2.9.0/model-zoo/components/trainer-components/batch-tiling-attention",
    "ws_opt_bta_max_tile": "in Cerebras' docs only, not in Model Zoo's source: https://training-docs.cerebras.ai/"
                           "rel-2.9.0/model-zoo/components/trainer-components/batch-tiling-attention",
}

SOURCES = (
    "https://training-docs.cerebras.ai/rel-2.9.0/model-zoo/components/trainer-components/batch-tiling-attention",
    "https://training-docs.cerebras.ai/rel-2.5.0/model-zoo/tutorials/microbatching-beginner",
)


def cerebras_config(report: PlanReport) -> dict[str, Any]:
    """The YAML fragment as data (see module docstring); a plan that fits on a wafer profile only."""
    w = report.wafer
    if w is None:
        raise BtacalcError("{emit} cerebras needs a wafer-scale profile (--hw wse2 or wse3)")
    if not report.plan.fits or not w.memoryx_fits:
        raise BtacalcError("{emit} cerebras: the plan does not fit (run without --emit to see why)")
    g, b = report.plan.tiles, report.plan.tile_batch
    bta: dict[str, Any] = {"ws_opt_enable_bta": g > 1}
    if g > 1:
        bta["ws_opt_bta_max_tile"] = b
    return {
        "trainer": {
            "init": {
                "backend": {"backend_type": "CSX", "cluster_config": {"num_csx": w.systems}},
                "callbacks": [
                    {"GlobalFlags": {"csx.debug.ini": bta}},
                    {"ScopedTrainFlags": {"csx.performance.micro_batch_size": w.micro_batch_size}},
                ],
            },
            "fit": {"train_dataloader": {"batch_size": w.global_batch}},
        }
    }


def header(report: PlanReport) -> list[str]:
    """Comment lines for the top of the YAML: what the plan is and where each key comes from."""
    w = report.wafer
    assert w is not None  # cerebras_config checked it
    return [
        f"btacalc plan: {report.model.name} on {w.systems} x {report.hardware.display_name}, s = {report.inputs.seq_len}",
        f"batch_size N = {w.global_batch} = {w.systems} systems x {w.micro_batches} micro-batch(es) x "
        f"{w.micro_batch_size} sequences (micro_batch_size); attention tiles G = {report.plan.tiles} of b = "
        f"{report.plan.tile_batch}",
        "releases before 2.3: train_input.batch_size, train_input.micro_batch_size, runconfig.num_csx",
        "ws_opt_* under csx.debug.ini is derived from Model Zoo's runconfig.ini mapping, not a published example",
        *(f"source: {s}" for s in SOURCES),
    ]
