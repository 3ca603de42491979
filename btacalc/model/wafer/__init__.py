"""Wafer-scale systems as Cerebras runs them: the on-wafer mesh (mesh.py), several systems joined by
SwarmX and MemoryX (cluster.py), the step terms timing.py adds for them (costs.py) and the batch split
into micro-batches (batching.py)."""
