"""A *selection*: which terms apply for a model's features, the run options and the recomputation
policy; their sums per phase and quantity are the formulas btacalc evaluates.

Per device: each term is divided by what tensor parallelism splits it by (its `tp` class, vocabulary
TP_CLASSES): a `split` term by t, a `sequence` term by t under sequence parallelism, a `gathered` term
(routed copies after the expert-tensor-parallel all-gather) by t/t_e, a `column_input` term (a column-parallel
linear's saved input) as a `sequence` one where the linear keeps its shard and whole where it keeps the gathered input
(feature dtensor_tp). With t = t_e = 1 every formula is
the whole layer's (Korthikanti et al. 2022 eq. 1); with t > 1 the stored bytes reduce to his eq. 2
(no sequence parallelism) and eq. 4 (with it) (tests/test_symbolic.py).

Recomputation (Korthikanti 2022 §5; Megatron-Core `recompute_granularity` / `recompute_modules`):
`full` keeps only what the per-layer checkpoint keeps; `selective` (Megatron's default module list,
core_attn) and explicit module lists drop the stored terms tagged with those modules; `op` (torchtitan's per-op
checkpoint, vocabulary OP_POLICY) keeps the checkpoint and the outputs its cache holds (terms tagged `op_cache` or,
where the backward reads the same tensor and so the re-run does not rebuild it, `op_cache_saved`; stored under that
policy only) and re-runs every phase but the attention core, less the GEMMs it cached (each
GEMM's `op_recompute` share).

Choosing terms needs no sympy; building the summed expressions (`expression`, `state_expression`)
does, and only the code generator (`compiled`), the formula listing and the tests call them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ..vocabulary import FEATURES, OP_CACHE, OP_POLICY, RECOMPUTE_MODULES, parse_recompute, recompute_modules
from .constants import constants
from .terms import Gemm, Phase, Term, load_catalogue

if TYPE_CHECKING:
    import sympy as sp


@dataclass(frozen=True)
class Selection:
    """Which terms apply: model features, run options and the recomputation policy."""

    features: tuple[tuple[str, Any], ...]
    recompute: str

    @classmethod
    def make(cls, features: dict[str, Any], recompute: str) -> "Selection":
        missing = set(FEATURES) - set(features)
        if missing:
            raise ValueError(f"selection lacks features {sorted(missing)}")
        if parse_recompute(recompute) != recompute:
            raise ValueError(f"recompute policy {recompute!r} is not in canonical form ({parse_recompute(recompute)!r})")
        return cls(tuple(sorted(features.items())), recompute)

    @property
    def feature_dict(self) -> dict[str, Any]:
        return dict(self.features)

    @property
    def modules(self) -> Optional[frozenset[str]]:
        """The recompute modules of the policy (None: full recomputation)."""
        return recompute_modules(self.recompute)

    def phases(self, scope: str | None = None) -> list[Phase]:
        f = self.feature_dict
        return [p for p in load_catalogue() if p.applies(f) and (scope is None or p.scope == scope)]

    @property
    def op_level(self) -> bool:
        """Whether the policy is torchtitan's per-op checkpoint (vocabulary OP_POLICY)."""
        return self.recompute == OP_POLICY

    def dropped(self, term: Term) -> bool:
        """Whether the recomputation policy discards this stored tensor (rebuilt in the backward pass). An op
        cache's tensor is kept under the op-level policy and is not a tensor under any other (`terms`)."""
        if self.op_level:
            return term.recompute not in ("never", "checkpoint", *OP_CACHE)
        modules = self.modules
        if modules is None:
            return term.recompute not in ("never", "checkpoint")
        return term.recompute in modules

    def terms(self, phase: Phase, quantity: str) -> list[Term]:
        """The terms of `phase` that count toward `quantity` under this selection."""
        f = self.feature_dict
        chosen = [t for t in phase.terms if t.q == quantity and t.applies(f)]
        if quantity == "stored":
            checkpointed = self.modules is None or self.op_level
            chosen = [t for t in chosen if not self.dropped(t) and (checkpointed or t.recompute != "checkpoint")
                      and (self.op_level or t.recompute not in OP_CACHE)]
        return chosen

    def term_expression(self, term: Term) -> "sp.Expr":
        """A term's expression for this selection: outside a sliding window every query attends to all
        s keys, so the window symbol w is s (the catalogue writes scores as s*w; full layers read s^2)."""
        from .symbols import SYMBOLS

        if self.feature_dict["sliding_window"]:
            return term.sym
        return term.sym.subs(SYMBOLS["w"], SYMBOLS["s"])

    def per_device(self, phase: Phase, term: Term) -> "sp.Expr":
        """A term's expression per tensor-parallel rank (see the module docstring)."""
        from .symbols import SYMBOLS

        expr = self.term_expression(term)
        cls = phase.tp_class(term)
        t, t_e = SYMBOLS["t"], SYMBOLS["t_e"]
        sharded = self.feature_dict["sequence_parallel"]
        if cls == "column_input":  # the linear's saved input: the shard, or the whole gathered tensor (DTensor TP)
            sharded = sharded and not self.feature_dict["dtensor_tp"]
        if cls == "split" or (cls in ("sequence", "column_input") and sharded):
            return expr / t
        if cls == "gathered":
            return expr * t_e / t
        return expr

    def expression(self, phase: Phase, quantity: str) -> "sp.Expr":
        """The formula for `quantity` of `phase`, per training step of G*b sequences, per device."""
        import sympy as sp

        if quantity == "flops_bwd":
            # Backward of a matmul is two matmuls of the same size (dX and dW): 2x forward.
            return constants().passes.backward_matmul_factor * self.expression(phase, "flops_fwd")
        if quantity == "recompute_bytes":
            return self._recompute_bytes(phase)
        if quantity == "arithmetic_intensity":
            num, den = self.expression(phase, "flops_fwd"), self.expression(phase, "bytes_moved")
            return sp.Integer(0) if den == 0 else num / den
        if quantity == "reruns":
            return sp.Integer(constants().passes.recompute_passes if self.reruns(phase) else 0)
        total = sp.Add(*[self.per_device(phase, t) for t in self.terms(phase, quantity)])
        if quantity == "bytes_moved_bwd" and not self.terms(phase, quantity):
            # dX and dW each read what the forward pass read and write a result of its size, unless the
            # catalogue gives the backward traffic (FlashAttention's backward kernel)
            return constants().passes.backward_traffic_factor * self.expression(phase, "bytes_moved")
        if quantity == "flops_recompute" and self.reruns(phase):
            skipped = self.cached_by_op_policy(phase) if self.op_level else self.skipped_by_early_stop(phase)
            rerun = self.expression(phase, "flops_fwd") - skipped
            total += constants().passes.recompute_passes * rerun
        return total

    def skipped_by_early_stop(self, phase: Phase) -> "sp.Expr":
        """Forward FLOPs of the phase that a re-run stopping early never reaches: under full recomputation with
        PyTorch's non-reentrant checkpoint (torch >= 2.1: early stop on by default, pytorch PR 96866; the re-run's
        pack hook raises _StopRecomputationError once it has rebuilt as many saved tensors as the forward saved,
        torch/utils/checkpoint.py `_recomputation_hook`), the GEMMs the layer runs after its last saved tensor
        (`Gemm.after_last_save`: the MLP's second linear, whose input and weight autograd saves before the matmul
        runs), 2mnk x count each. None without hidden dropout only: the dropout after the MLP (hidden_dropout) saves
        its mask last."""
        import sympy as sp
        from sympy.parsing.sympy_parser import parse_expr

        from .symbols import SYMBOLS

        f = self.feature_dict
        if not f["checkpoint_early_stop"] or self.modules is not None or f["hidden_dropout"]:
            return sp.Integer(0)
        return sp.Add(*[_gemm_flops(g) for g in phase.gemm if g.after_last_save and g.applies(f)])

    def cached_by_op_policy(self, phase: Phase) -> "sp.Expr":
        """Forward FLOPs of the phase that the op-level policy's re-run takes from its cache: each GEMM's 2mnk x
        count x (1 - op_recompute), per device. torchtitan's policy caches every mm's output but each block's
        second, fourth, ... (parallelize_llama.py L49-L57 @ 157a12c5, a counter per block and pass); which GEMMs
        those are is the catalogue's data (each GEMM's `op_recompute`, with its derivation)."""
        import sympy as sp
        from sympy.parsing.sympy_parser import parse_expr

        from .symbols import SYMBOLS

        f = self.feature_dict
        return sp.Add(*[_gemm_flops(g) * (1 - parse_expr(g.op_recompute, local_dict=SYMBOLS))
                        for g in phase.gemm if g.applies(f) and g.op_recompute is not None])

    def _recompute_bytes(self, phase: Phase) -> "sp.Expr":
        """Activations the policy dropped are rebuilt during this layer's backward pass and live
        together while it runs: attention phases one tile at a time (b), the rest on G*b."""
        import sympy as sp

        from .symbols import SYMBOLS

        if phase.scope != "layer":
            return sp.Integer(0)
        f = self.feature_dict
        dropped = sp.Add(*[self.per_device(phase, t) for t in phase.terms if t.q == "stored" and t.applies(f)
                           and self.dropped(t) and t.recompute not in ("checkpoint", *OP_CACHE)])
        if self.op_level:  # review32: what the cache hands back is not rebuilt (each beside its dropped tensor)
            dropped -= sp.Add(*[self.per_device(phase, t) for t in phase.terms if t.q == "stored"
                                and t.applies(f) and t.recompute == "op_cache_saved"])
        return dropped.subs(SYMBOLS["G"], 1) if phase.batch == "tile" else dropped

    def reruns(self, phase: Phase) -> bool:
        """Whether the policy re-runs this phase's forward pass in the backward pass.

        Full: every layer phase (Korthikanti 2022 §5, Chen et al. 2016). A module list: the phases whose
        `recompute_module` it recomputes, when it drops a tensor of that module (selective with eager
        attention re-runs the attention core, Korthikanti §5; with FlashAttention Megatron-Core still
        checkpoints the fused core under core_attn (Megatron-LM @ d98e8a64 attention.py:392-395,
        `_checkpointed_attention_forward`), dropping its logsumexp and re-running its forward: the cost
        the emitted `--recompute-granularity selective` makes Megatron pay).
        """
        if phase.scope != "layer":
            return False
        if self.op_level:  # the attention core is one SDPA op, whose outputs the policy caches
            return not phase.core
        modules = self.modules
        if modules is None:
            return True
        return phase.recompute_module in modules and _drops_a_tensor(self, phase.recompute_module)


def _gemm_flops(g: Gemm) -> "sp.Expr":
    """A catalogue GEMM's forward FLOPs per device: 2mnk x count (Korthikanti 2022 App. A)."""
    from sympy.parsing.sympy_parser import parse_expr

    from .symbols import SYMBOLS

    m, n, k, count = (parse_expr(x, local_dict=SYMBOLS) for x in (g.m, g.n, g.k, g.count))
    return 2 * m * n * k * count


@functools.lru_cache(maxsize=1024)
def _drops_a_tensor(selection: Selection, module: str) -> bool:
    """Whether some stored tensor of the layer belongs to `module` (or a module inside it)."""
    f = selection.feature_dict
    family = {module} | {m for m, info in RECOMPUTE_MODULES.items() if info["within"] == module}
    return any(t.q == "stored" and t.applies(f) and t.recompute in family
               for p in selection.phases("layer") for t in p.terms)


def state_terms(features: dict[str, Any]) -> list[Term]:
    """The per-parameter training-state terms (weights, gradients, optimizer) that apply."""
    return [t for p in load_catalogue() if p.scope == "state" for t in p.terms if t.q == "state" and t.applies(features)]


def state_expression(features: dict[str, Any], component: str | None = None) -> "sp.Expr":
    """Training-state bytes for P parameters, optionally of one component."""
    import sympy as sp

    return sp.Add(*[t.sym for t in state_terms(features) if component in (None, t.component)])
