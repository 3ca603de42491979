"""btacalc: analytical memory, FLOP and throughput model for MoE training with Batch Tiling on Attention.

Library entry points (the CLI is a thin layer over these):

- ``btacalc.config.presets.resolve_model(name_or_config_json)`` -> ModelSpec
- ``btacalc.config.hardware.resolve_hardware(name_or_toml)`` -> HardwareProfile
- ``btacalc.planning.plan.make_plan(model, hardware, ExecutionRequest(...))`` -> PlanReport
- ``btacalc.planning.sweep.run_sweep(...)``, ``btacalc.planning.compare.compare(...)``,
  ``btacalc.planning.validate.validate()``
- ``btacalc.catalogue``: the symbolic formula catalogue (sympy)

Layers (enforced by import-linter, see pyproject.toml): cli -> output -> planning | torchref ->
model -> catalogue | config -> vocabulary | errors | paths.
"""

from . import starting as _starting  # first: only os, signal and sys

if _starting.started_as_command():  # Ctrl-C from here on: one line, 128 + the signal (cli/__init__.py ends it)
    _starting.begin()

from . import profiling as _profiling  # noqa: E402,F401  # marks the start, for --profile

__version__ = "0.2.0"
