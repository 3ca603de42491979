"""GPU training as Megatron-Core runs it: per-device memory by pipeline stage and step time with
tensor, sequence, pipeline, context, expert and expert-tensor parallelism, ZeRO / distributed optimizer /
FSDP, and the collectives each of them adds (stages, costs, memory, collectives, timing).

Everything here works on Python ints (exact, for a plan) and on numpy arrays (one value per layout,
for the layout search): no branch on a layout value, only `arrays.where` / `arrays.maximum`.
"""
