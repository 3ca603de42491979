"""Eager attention's core matmuls as the host launches them (mut33 `_issued` 60, decided in mut34, fixed in the
twenty-eighth session).

Megatron's unfused attention (Megatron-LM @ d98e8a64 megatron/core/transformer/dot_product_attention.py L194-200,
L239; TransformerEngine's UnfusedDotProductAttention the same, backends.py L621-627) runs Q K^T as
torch.baddbmm(buffer, q, k^T, beta=0.0, alpha=softmax_scale) and P V as torch.bmm. btacalc counted each as one
kernel forward and one backward; PyTorch's autograd runs each operand's gradient as its own bmm, and baddbmm's
multiplies each by alpha: Q K^T launches 1 + r forward and 4 backward, P V 1 + r and 2. The expected counts below
are read from PyTorch itself (a TorchDispatchMode over the two ops on CPU), not from btacalc.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

KERNEL_OPS = {"aten.baddbmm.default", "aten.bmm.default", "aten.mul.Scalar", "aten.mul.Tensor", "aten.mm.default"}


def _launches(fn) -> int:
    """Kernels (GEMMs and element-wise multiplies) that `fn` dispatches; views, detaches and allocations launch none."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Count() as c:
        fn()
    return sum(op in KERNEL_OPS for op in c.ops)


def _torch_counts() -> dict[str, tuple[int, int]]:
    """(forward, backward) launches of Megatron's two core matmuls, per micro-batch of one layer."""
    b_a, s, d = 4, 16, 8  # sequences x heads per device, sequence, head dim: any shape gives the same counts
    q = torch.randn(b_a, s, d, requires_grad=True)
    k_t = torch.randn(b_a, d, s, requires_grad=True)
    buffer = torch.empty(b_a, s, s)  # Megatron's global memory buffer: no gradient
    out = {}
    box = {}
    fwd = _launches(lambda: box.update(scores=torch.baddbmm(buffer, q, k_t, beta=0.0, alpha=d ** -0.5)))
    bwd = _launches(lambda: box["scores"].backward(torch.ones(b_a, s, s)))
    out["attn_scores"] = (fwd, bwd)
    p = torch.randn(b_a, s, s, requires_grad=True)
    v = torch.randn(b_a, s, d, requires_grad=True)
    fwd = _launches(lambda: box.update(context=torch.bmm(p, v)))
    bwd = _launches(lambda: box["context"].backward(torch.ones(b_a, s, d)))
    out["attn_pv"] = (fwd, bwd)
    return out


def test_pytorch_launches_q_kt_as_one_gemm_forward_and_two_gemms_two_scalings_backward():
    assert _torch_counts() == {"attn_scores": (1, 4), "attn_pv": (1, 2)}


def _core_gemms(name: str):
    from btacalc.catalogue.terms import load_catalogue

    phase = next(p for p in load_catalogue() if p.name == name)
    return tuple(g for g in phase.gemm if g.attention_core and not g.when.get("sliding_window", False))


@pytest.mark.parametrize("tiles", [1, 3])
@pytest.mark.parametrize("reruns", [0, 1])
def test_the_catalogue_core_matmuls_launch_what_pytorch_launches(tiles, reruns):
    """Per micro-batch: G tiles x (forward + re-runs + backward); the first forward's share G x forward."""
    from btacalc.model.gpu.costs import _eager_core_kernels

    rates = SimpleNamespace(symbols={"G": tiles}, python_symbols=True, python_layout=False)
    for name, (forward, backward) in _torch_counts().items():
        kernels, first, modules = _eager_core_kernels(_core_gemms(name), reruns, rates)
        assert (kernels, first) == (tiles * (forward * (1 + reruns) + backward), tiles * forward), name
        # the attention module's call, once per core (on Q K^T): forward, each re-run, backward
        assert modules == (tiles * (2 + reruns) if name == "attn_scores" else 0), name


def test_a_planned_eager_layer_issues_the_core_launches_and_a_flash_layer_none_of_its_own():
    """Through the real rates and phase plans of Llama 3 8B on one H100 (eager: the core's phases are not fused)."""
    from btacalc.catalogue.terms import load_catalogue
    from btacalc.config.execution import Layout
    from btacalc.model.gpu.costs import _issued, _kind_rates, _phase_plan
    from btacalc.model.gpu.rates import rates_of
    from btacalc.config.presets import load_preset
    from support import resolved

    model = load_preset("llama-3-8b")
    phases = {p.name: p for p in load_catalogue()}
    counts = _torch_counts()
    for attention, fused in (("eager", False), ("flash", True)):
        problem = resolved(model, "h100", Layout(), attention=attention)
        kind, values = problem.evaluate(1, 1).layers[0]
        r = _kind_rates(problem, rates_of(problem), kind, values)
        for name in ("attn_scores", "attn_pv"):
            plan = _phase_plan(phases[name], r)
            kernels, first, _, modules, _ = _issued({"reruns": 0, "bytes_moved": 1, "flops_fwd": 1}, r, plan)
            forward, backward = counts[name]
            assert (kernels, first) == ((0, 0) if fused else (forward + backward, forward)), (attention, name)
            assert modules == (2 if name == "attn_scores" and not fused else 0), (attention, name)


@pytest.mark.parametrize("attention", ["flash", "eager"])
def test_a_core_attn_recompute_runs_the_attention_module_and_its_forward_launches_again(attention):
    """Megatron's `_checkpointed_attention_forward` (selective core_attn) re-runs the core attention module's forward
    in the backward: one more module call and the forward's launches (fused: its one kernel; eager: each core
    phase's forward kernel), nothing more in the first forward. Counted on one layer part of Llama 3 8B on one H100."""
    from btacalc.config.execution import Layout
    from btacalc.config.presets import load_preset
    from btacalc.model.gpu.costs import layer_parts
    from support import resolved

    model = load_preset("llama-3-8b")

    def counts(recompute):
        problem = resolved(model, "h100", Layout(), attention=attention, recompute=recompute)
        part = layer_parts(problem, problem.evaluate(1, 1))[0]
        return part.kernels, part.kernels_fwd, part.module_calls, part.module_calls_fwd

    (k0, f0, m0, mf0), (k1, f1, m1, mf1) = counts("none"), counts("selective")  # selective: core_attn
    assert (m1 - m0, f1 - f0, mf1 - mf0) == (1, 0, 0)
    if attention == "flash":
        assert k1 - k0 == 1  # the fused kernel once more
    else:  # every core phase's forward kernel once more: at least Q K^T and P V, and their softmax between
        assert k1 - k0 >= 3
