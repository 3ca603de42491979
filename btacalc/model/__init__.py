"""The modelling core: problems, parameter counts, training state, memory, communication, timing, solver."""
