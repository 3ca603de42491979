"""How a model's layers use the wafer: the width of its matmuls against the fabric, and the fixed cost
of every kernel run. Both make the wafer's efficiency depend on the model, which one compute efficiency
shared by every model cannot (issue 24: small models ran at a far lower share of peak than 7B ones).

Width. In weight streaming the activations of a layer live spread over the PE grid and the weights
stream through it (Cerebras, weight streaming: https://www.cerebras.net/glossary/memoryx/; Lie, "Cerebras
Architecture Deep Dive", Hot Chips 34, 2022: weights are broadcast over the fabric to the PEs holding the
activations, partial sums reduced along the other axis). btacalc assumes (an estimate: the compiler's
layout is not published) that a matmul's feature dimension n = h is laid along the X columns of the
usable rectangle, so each PE runs vector instructions over n / X feature elements. A PE retires w
elements per cycle (its SIMD lanes) and pays c fixed cycles per instruction (operand descriptor setup,
loop control), so an instruction over v = n / X elements keeps the lanes busy for (v / w) / (v / w + c)
of its cycles:

    u(n) = n / (n + c w X)

and the matmul phases run at compute_efficiency x u(n). A projection or MLP matmul multiplies by the
layer's weights with n = h features; the attention core (QK^T and P V) multiplies activations by
activations, its a heads side by side, with n = a d_h (= h with as many KV as query heads; what the code
uses). Heads one after another (n = d_h: ESM-2 35M 24, LLaMA-7B 128) was tried with the two factors
refitted: ESM-2 35M goes from +282% to +62% but DiT-2B from +50% to +105% and GPT-J 6B from +6.5% to +25%
(docs/wafer-rounds.md), so the data do not choose it. `fabric_vector_overhead` is k = c w (elements),
so the half-efficiency width is n_half = k X. What the data fix is k (fitted with compute_efficiency
and the micro-batch's fixed cost on the `fit` runs; since that cost separates BERT-large's batch effect,
the fit puts k at its lower bound, 1e-3: docs/wafer-rounds.md); the fabric's X comes from the profile's `[mesh]`, so a wafer with more columns
needs a wider model to fill it. By hand, WSE-2 (X = 750) with k = 1: n_half = 750 and a GPT-2-small
width h = 768 reaches 768 / 1518 = 50.6% of the efficiency a very wide matmul reaches, h = 4096 84.5%.

Kernel runs. Every phase of every layer runs as its own kernel once per pass that runs it (forward,
the two backward matmuls dX and dW, and its recomputation), and a kernel cannot finish before its
first operands have crossed the fabric and its results have been gathered: one dependent mesh step,
t_step = ((X + Y) t_hop + 2 T_R + 1) / f (mesh.py, after Luczynski et al.), whatever the kernel's size.
mesh.py already charges it to every tile-batched phase once per tile; the phases batched over the
whole micro-batch (the MLP, the experts, the router, the LM head) pay it once per micro-batch:

    t_kernels = t_step x sum over G*b-batched phases of (repetitions x (1 + backward_matmul_factor + recompute_passes x reruns))

WSE-2: 1.59 us per run; a LLaMA-7B micro-batch runs 32 layers x 3 such phases (post-attention norm,
MLP, ...) x 4 passes = a few hundred runs, well under a millisecond. It is derived, not fitted: a
larger fixed cost per kernel (fitted to the small-model runs, it came out near 213 us) would make
every small micro-batch slow, and the published BTA curve then fails (16 experts at G = 1 would run
at 0.48 of dense where Cerebras publishes 0.95), so the data do not support it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...catalogue.constants import constants
from ...config.hardware import Mesh
from ..communication import recomputed
from ..problem import Evaluation, Problem
from .mesh import MeshGeometry


def width_utilisation(problem: Problem, width: Any) -> Any:
    """u(n) = n / (n + k X): the share of compute_efficiency a matmul of width n reaches on the fabric
    (module docstring); 1 when the profile has no mesh or no `fabric_vector_overhead`."""
    hw = problem.hardware
    k = hw.calibration.fabric_vector_overhead
    if hw.mesh is None or k is None or not k.value:
        return 1.0
    n = np.asarray(width, dtype=float)
    u = n / (n + k.value * MeshGeometry.of(hw.mesh).x)
    return float(u) if np.ndim(u) == 0 else u


def phase_utilisation(problem: Problem, params: Any) -> Any:
    """u for one phase: a phase that multiplies by weights (params > 0: the projections, the MLP, the
    LM head) has width h; one that multiplies activations by activations (the attention core, QK^T and
    P V, its heads side by side) has width a d_h (module docstring). A float, or an array over `params`."""
    if problem.hardware.calibration.fabric_vector_overhead is None:
        return 1.0
    model = problem.model
    u = np.where(np.asarray(params) > 0, width_utilisation(problem, model.hidden_size),
                 width_utilisation(problem, model.num_heads * model.head_dim))
    return float(u) if np.ndim(u) == 0 else u


def kernel_runs(ev: Evaluation) -> Any:
    """Kernel runs of one micro-batch of the phases batched over the whole micro-batch (G*b), each once
    per pass that runs it (module docstring; tile-batched phases are charged per tile by mesh.py)."""
    passes = constants().passes
    runs: Any = 0
    for n, pv, phase in ev.items():
        if not (phase.scope == "layer" and phase.batch == "tile"):
            runs = runs + n * (1 + passes.backward_matmul_factor + passes.recompute_passes * recomputed(pv, phase.name))
    return runs


def kernel_fixed_s(mesh: Mesh, ev: Evaluation) -> Any:
    """Seconds of fixed kernel cost per micro-batch: kernel runs x one dependent mesh step."""
    return kernel_runs(ev) * MeshGeometry.of(mesh).step_s
