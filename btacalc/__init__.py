"""btacalc: analytical memory, FLOP and throughput model for MoE training with Batch Tiling on Attention.

Library entry points (the CLI is a thin layer over these):

- ``btacalc.models.resolve_model(name_or_config_json)`` -> ModelSpec
- ``btacalc.hardware.resolve_hardware(name_or_toml)`` -> HardwareProfile
- ``btacalc.plan.make_plan(model, hardware, RunOptions(...), BatchLimits(...))`` -> PlanReport
- ``btacalc.sweep.run_sweep(...)``, ``btacalc.validate.validate()``
- ``btacalc.catalogue``: the symbolic formula catalogue (sympy)
"""

__version__ = "0.1.0"
