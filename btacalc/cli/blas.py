"""numpy loaded for the command line with one BLAS thread (docs/speed.md, round "cold6").

numpy's wheels link OpenBLAS, which starts its worker threads when the library loads, at `import numpy`:
`blas_thread_init` creates `blas_num_threads - 1` workers (OpenMathLib/OpenBLAS @ 72461f1c
driver/others/blas_server.c L549-599), and each worker spins on the time-stamp counter, yielding, until
`thread_timeout` cycles have passed without work (L415-425; 2^THREAD_TIMEOUT cycles) before it sleeps.
The spinning is CPU time the command pays for nothing: btacalc calls no BLAS routine (its arrays are
elementwise; no dot, einsum or linalg) but one small matmul in the solver's memory probes (model/gpu/memory_rows.py
`_row_product`: a few rows x 3 times 3 x the probed shapes), whose every partial sum is an exact integer below
2^53, so the thread count cannot change a number. On this
2-core machine it was 0.09-0.11 s of a 0.44 s cold `plan --json` (numpy/numpy#29193 and
OpenMathLib/OpenBLAS#5171 report the same cost).

OpenBLAS reads its thread count once, at load, from OPENBLAS_NUM_THREADS, else GOTO_NUM_THREADS, else
OMP_NUM_THREADS (driver/others/init.c L820-824; README.md L289-294). So numpy is imported here with
OPENBLAS_NUM_THREADS=1, and the variable is removed again right after: the process's environment (what
a library loaded later, or a child process, would read) is left as the user had it. A user who set any
of the three variables keeps their choice; numpy imported before this module keeps its threads. Every
command imports numpy anyway (the model layer computes on arrays), so importing it first costs nothing.
"""

from __future__ import annotations

import os
import sys

# The variables OpenBLAS reads for its thread count, in its order of precedence (see the module docstring).
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
BLAS_THREADS_FOR_THE_CLI = "1"


def load_numpy_with_one_blas_thread() -> None:
    """Import numpy with one OpenBLAS thread unless numpy is loaded already or the user chose a count."""
    if "numpy" in sys.modules or any(name in os.environ for name in BLAS_THREAD_VARIABLES):
        return
    os.environ[BLAS_THREAD_VARIABLES[0]] = BLAS_THREADS_FOR_THE_CLI
    try:
        import numpy  # noqa: F401  # OpenBLAS reads the variable now, once
    finally:
        del os.environ[BLAS_THREAD_VARIABLES[0]]
