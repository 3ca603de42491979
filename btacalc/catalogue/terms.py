"""The formula catalogue as data: phases and terms read from ``formulas/*.toml``.

Each term is one expression for one tensor or matmul, with the tensor it counts and its source.
Each phase also says, as data, how the rest of btacalc treats it: which parameter bucket its weights
belong to (`param_bucket`), whether they are embedding weights (`embedding`) and in what units they
stream (`stream_unit`). No module branches on a phase's name.

Loading does not import sympy: an expression is checked when it is read (Python arithmetic over the
notation's symbols only) and parsed into sympy on first use of `Term.sym` (the formula listing, the
code generator in `compiled`, the tests). The numeric core runs on generated code.
"""

from __future__ import annotations

import ast
import functools
import sys
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ..errors import DataError
from ..paths import data_dir
from ..vocabulary import BASE_QUANTITIES, FEATURES, NOTATION, OP_CACHE, RECOMPUTE_MODULES, TP_CLASSES

if TYPE_CHECKING:
    import sympy as sp

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FeatureValue = Union[bool, str]
Condition = dict[str, Union[FeatureValue, list[FeatureValue]]]
When = Union[Condition, list[Condition]]  # a list means: any of these conditions


def _check_when(when: When) -> When:
    for cond in when if isinstance(when, list) else [when]:
        for key, value in cond.items():
            if key not in FEATURES:
                raise ValueError(f"unknown feature {key!r} in 'when' (known: {', '.join(FEATURES)})")
            for v in value if isinstance(value, list) else [value]:
                if v not in FEATURES[key]:
                    raise ValueError(f"feature {key!r} has no value {v!r} (allowed: {FEATURES[key]})")
    return when


_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub,
               ast.UAdd, ast.Constant, ast.Name, ast.Load)
# Functions a formula may call (sympy's names): the integer ceiling of FlashAttention's block counts.
FUNCTIONS = frozenset({"ceiling"})


def _allowed(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and not node.keywords
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    return isinstance(node, _ARITHMETIC)


def check_expression(expr: str) -> str:
    """`expr` if it is arithmetic (+ - * / **, integer constants, `FUNCTIONS`) over the notation's symbols,
    else ValueError.

    Cheap and sympy-free, so that loading the catalogue stays fast; sympy parses the same text later."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"cannot parse expression {expr!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if not _allowed(node):
            raise ValueError(f"cannot parse expression {expr!r}: only + - * / ** over symbols and integers "
                             f"and the functions {', '.join(sorted(FUNCTIONS))}")
    called = {n.func for n in ast.walk(tree) if isinstance(n, ast.Call)}
    unknown = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n not in called} - set(NOTATION)
    if unknown:
        raise ValueError(f"expression {expr!r} uses unknown symbols {sorted(unknown)}")
    return expr


def matches(when: When, features: dict[str, Any]) -> bool:
    if isinstance(when, list):
        return any(matches(cond, features) for cond in when)
    for key, value in when.items():
        allowed = value if isinstance(value, list) else [value]
        if features[key] not in allowed:
            return False
    return True


class Term(BaseModel):
    """One tensor or matmul: an expression, what it counts and where it comes from."""

    # defer_build: the catalogue is normally read back from the cache, unvalidated; the validator is
    # built only when the TOML files are read
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    q: Literal[BASE_QUANTITIES]  # type: ignore[valid-type]  # a Literal built from the vocabulary tuple
    expr: str
    tensor: str = Field(min_length=3)
    source: str = Field(min_length=3)
    when: When = {}
    # layer: dropped by full recomputation only; never: always kept; checkpoint: kept only under full
    # recomputation (what the checkpoint itself saves); a Megatron recompute module (vocabulary
    # RECOMPUTE_MODULES, e.g. core_attn): also dropped when that module (or one containing it) is recomputed;
    # op_cache: an op output the op-level policy's cache keeps, stored under that policy only (vocabulary OP_POLICY);
    # op_cache_saved: one that is also a tensor the layer's backward reads (a dropped stored term of the same phase),
    # which the re-run takes from the cache instead of rebuilding it (catalogue/selection.py _recompute_bytes)
    recompute: str = "layer"
    # how tensor parallelism splits this tensor or matmul (vocabulary TP_CLASSES); None: the phase's `tp`
    tp: Optional[Literal[TP_CLASSES]] = None  # type: ignore[valid-type]  # a Literal built from the vocabulary tuple
    component: str = ""  # state terms only: weights / gradients / optimizer

    _sym: Optional["sp.Expr"] = PrivateAttr(None)

    @field_validator("when")
    @classmethod
    def _check(cls, v: When) -> When:
        return _check_when(v)

    @field_validator("recompute")
    @classmethod
    def _recompute_class(cls, v: str) -> str:
        if v not in ("layer", "never", "checkpoint", *OP_CACHE) and v not in RECOMPUTE_MODULES:
            raise ValueError(f"recompute {v!r} is neither layer, never, checkpoint, {' nor '.join(OP_CACHE)} nor a "
                             f"Megatron recompute module ({', '.join(RECOMPUTE_MODULES)})")
        return v

    @field_validator("expr")
    @classmethod
    def _check_expr(cls, v: str) -> str:
        return check_expression(v)

    @property
    def sym(self) -> "sp.Expr":
        """The expression in sympy (parsed on first use)."""
        if self._sym is None:
            from sympy.parsing.sympy_parser import parse_expr

            from .symbols import SYMBOLS

            self._sym = parse_expr(self.expr, local_dict=dict(SYMBOLS), evaluate=True)
        return self._sym

    def applies(self, features: dict[str, Any]) -> bool:
        return matches(self.when, features)


class Gemm(BaseModel):
    """One matmul of a phase as the GPU runs it, per device: C (m x n) = A (m x k) @ B (k x n), `count`
    times per forward pass (after the tensor-, sequence- and context-parallel split of the phase's terms).
    `grouped`: one GEMM per routed expert, all of a device's experts in one grouped launch; m and count are
    then written for one expert-parallel rank (EP = 1) and the time model takes m x EP tokens (each expert
    receives from the EP ranks) and count / EP experts (model/gpu/costs.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str = Field(min_length=1)
    m: str
    n: str
    k: str
    count: str = "1"
    batch: str = Field("1", description="matrices of this shape each launch multiplies (a batched GEMM: the attention "
                       "core's sequences x query heads per device), 1 for a linear")
    grouped: bool = False
    attention_core: bool = Field(False, description="one of the attention core's matmuls (Q K^T, P V): run inside the "
                                 "fused attention kernel (or eager attention's batched matmul) and timed with the core "
                                 "(model/gpu/costs.py `_fused_core`), not by the GEMM shape model; shown in the "
                                 "report with the share of its blocks the causal kernel runs. Only in a `core` phase")
    backward_scale_kernels: int = Field(0, ge=0, le=8, description="element-wise kernels an eager attention core's "
                                        "backward launches beside this matmul's two gradient GEMMs: Megatron's "
                                        "unfused attention runs Q K^T as torch.baddbmm(..., alpha=softmax_scale), "
                                        "whose backward scales each operand's gradient by alpha (2); 0 for a plain "
                                        "torch.bmm. Host launches only (model/gpu/costs.py `_issued`)")
    module: bool = Field(True, description="issued by a layer module (a Megatron/TransformerEngine linear or "
                         "grouped linear), whose call costs the host its Python time once per pass (model/gpu/"
                         "fixed.py); false: a bare functional matmul inside another module")
    source: str = Field(min_length=3)
    when: When = {}
    after_last_save: bool = Field(False, description="the layer's forward runs this GEMM after it has saved every "
                                  "tensor its backward reads: a re-run that stops once those are rebuilt (PyTorch's "
                                  "non-reentrant checkpoint early stop, --checkpoint-early-stop) skips it")
    op_recompute: Optional[str] = Field(None, description="under the op-level policy (--recompute op, torchtitan's "
                                        "per-op checkpoint): the share of this GEMM's FLOPs its backward re-runs (the "
                                        "mms it does not cache); None: not derived for this GEMM, and the policy is "
                                        "refused for a model that runs it")

    @field_validator("m", "n", "k", "count", "batch")
    @classmethod
    def _check_expr(cls, v: str) -> str:
        return check_expression(v)

    @field_validator("op_recompute")
    @classmethod
    def _check_share(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else check_expression(v)

    @field_validator("when")
    @classmethod
    def _check(cls, v: When) -> When:
        return _check_when(v)

    def applies(self, features: dict[str, Any]) -> bool:
        return matches(self.when, features)


class HostGlue(BaseModel):
    """The host time of a layer's eager glue that a phase stands for: the framework's Python and PyTorch operators
    outside the layer's modules (model/gpu/fixed.py), in reference-op equivalents: multiples of one eager
    operator's host time (the profile's `kernels.eager_op_host_s`), per micro-batch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    forward_ops: float = Field(ge=0, description="forward pass (repeated by a re-run)")
    backward_ops: float = Field(ge=0, description="backward pass")
    source: str = Field(min_length=3)


class GatherCalls(BaseModel):
    """The NCCL calls that move a phase's `gather_bytes` in one micro-batch: one per tensor a pass all-gathers or
    reduce-scatters (model/gpu/costs.py `_volumes`; without it, one call each way)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    forward: int = Field(ge=1, description="forward pass (repeated by a re-run)")
    backward: int = Field(ge=0, description="backward pass")
    source: str = Field(min_length=3)


class _DispatcherCalls(BaseModel):
    """NCCL calls a phase makes under one MoE token dispatcher (Megatron's --moe-token-dispatcher-type) and the
    features in `when`, `forward` of them per forward pass (repeated by a re-run); `applies` says whether a run makes
    them. ExchangeCalls and CountGathers add what each needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dispatcher: Literal["alltoall", "flex", "allgather"] = Field(
        description="Megatron's --moe-token-dispatcher-type that makes the calls")
    when: When = Field(default_factory=dict, description="the features the calls need besides the dispatcher")
    forward: int = Field(ge=1, description="calls per forward pass (repeated by a re-run)")
    source: str = Field(min_length=3)

    @field_validator("when")
    @classmethod
    def _check(cls, v: When) -> When:
        return _check_when(v)

    def applies(self, dispatcher: str, features: dict[str, Any]) -> bool:
        return dispatcher == self.dispatcher and matches(self.when, features)


class ExchangeCalls(_DispatcherCalls):
    """The all-to-alls that move a phase's `a2a_bytes` in one micro-batch under one MoE token dispatcher: one per
    tensor a pass exchanges (model/gpu/costs.py `_volumes`; under another dispatcher, or without it, one each way)."""

    backward: int = Field(ge=0, description="calls per backward pass")


class CountGathers(_DispatcherCalls):
    """The all-gathers of the per-expert token counts a MoE token dispatcher makes before it exchanges the tokens:
    each rank's count of its routed copies per expert (`bytes_per_expert` each), gathered over the tp_ep group so
    that every rank knows its all-to-all splits. No gradient flows through them (integer counts), so the backward
    makes none; a re-run of the forward repeats them."""

    bytes_per_expert: int = Field(ge=1, description="bytes of one expert's count (torch.long: 8)")


class Phase(BaseModel):
    """A phase of a decoder layer (scope 'layer'), a part outside the layers (scope 'model') or the
    per-parameter training state (scope 'state')."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str
    order: int
    group: Literal["norm", "attention", "moe", "mlp", "head", "state"]
    scope: Literal["layer", "model", "state"]
    batch: Literal["tile", "global"]
    summary: str
    core: bool = False
    when: When = {}
    param_bucket: Literal["dense", "routed"] = Field(
        "dense", description="routed: the weights of the E routed experts (split over expert parallelism, "
        "k of E active per token); dense: every other weight (replicated over expert parallelism)")
    embedding: bool = Field(False, description="embedding-table weights (token/position embedding, LM head): "
                            "excluded from the non-embedding parameter count")
    stream_unit: Literal["phase", "expert", "none"] = Field(
        "phase", description="weight streaming: the phase's weights stream as one unit (phase), one expert at a "
        "time (expert), or not at all (none: rows gathered by token id)")
    tp: Literal[TP_CLASSES] = Field(  # type: ignore[valid-type]  # a Literal built from the vocabulary tuple
        "replicated", description="how tensor parallelism splits the phase's terms unless a term says otherwise "
        "(vocabulary TP_CLASSES)")
    recompute_module: Optional[str] = Field(
        None, description="the Megatron recompute module whose recomputation re-runs this phase's forward pass "
        "(when the policy drops a tensor of that module)")
    routed_load: bool = Field(False, description="the phase works on the routed token copies a device receives: "
                              "the busiest expert-parallel rank holds --routing-imbalance times the mean")
    low_precision: bool = Field(False, description="the phase's matmuls are TransformerEngine linear layers (te.Linear, "
                                "GroupedLinear): under a low-precision recipe their forward, dgrad and wgrad GEMMs run "
                                "in it and its cast_elements are quantised; other phases (attention core, router, norms, "
                                "embedding, LM head) stay in 16 bits (btacalc.config.precision)")
    pipeline_stage: Literal["first", "last"] = Field(
        "first", description="parts outside the layers (scope model): the pipeline stage holding them (the "
        "embedding on the first, the final norm, LM head and loss on the last)")
    host_glue: Optional[HostGlue] = Field(None, description="the layer's eager glue on the host this phase stands "
                                          "for (GPU host time, model/gpu/fixed.py)")
    gather_calls: Optional[GatherCalls] = Field(None, description="the NCCL calls that move the phase's "
                                                "`gather_bytes` (Megatron's allgather dispatcher); none: one each way")
    a2a_calls: Optional[ExchangeCalls] = Field(None, description="the all-to-alls that move the phase's `a2a_bytes` "
                                               "under one dispatcher; none, or another dispatcher: one each way")
    count_gathers: Optional[CountGathers] = Field(None, description="the all-gathers of the per-expert token counts "
                                                  "the phase's dispatcher makes before its all-to-all")
    after_dispatch_sync: bool = Field(False, description="the phase runs after the MoE dispatcher's device-to-host "
                                      "sync in the layer's forward (the exchange and what follows it): the host issues "
                                      "it only once the GPU has drained the queue (GPU host time, model/gpu/fixed.py)")
    pre_dispatch: bool = Field(False, description="the phase belongs to the first node of a layer in Megatron's merged "
                               "1F1B schedule (--overlap-moe-expert-parallel-comm): attention, norms, shared experts, "
                               "router (Megatron-LM @ d98e8a64 megatron/core/models/gpt/fine_grained_callables.py L26-L29, "
                               "L67-L131); a backward layer frees these activations last (memory.py)")
    dispatch_node: bool = Field(False, description="the phase is the dispatch node of a layer in Megatron's merged "
                                "1F1B schedule (fine_grained_callables.py L152-L176 @ d98e8a64): its output, the "
                                "experts' input, exists before the node that follows it runs (memory.py, "
                                "--ep-overlap-early-attn-memory-release)")
    combine_node: bool = Field(False, description="the phase is the combine node of a layer in Megatron's merged 1F1B "
                               "schedule (fine_grained_callables.py L205-252 @ d98e8a64): the host issues it after the "
                               "experts in the forward and first of the backward layer's nodes (merged_pair.py)")
    term: list[Term] = []
    gemm: list[Gemm] = Field(default_factory=list, description="the phase's matmuls as (m, n, k) per device: "
                             "what the GPU time model quantises into tiles and waves")

    @field_validator("when")
    @classmethod
    def _check(cls, v: When) -> When:
        return _check_when(v)

    @field_validator("recompute_module")
    @classmethod
    def _module(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and v not in RECOMPUTE_MODULES:
            raise ValueError(f"recompute_module {v!r} is not a Megatron recompute module ({', '.join(RECOMPUTE_MODULES)})")
        return v

    @model_validator(mode="after")
    def _core_gemms(self) -> "Phase":
        """An attention-core GEMM belongs to a core phase, whose GEMMs are all the core's: the time model times a
        core phase's matmuls with the fused kernel (or eager attention's roofline), never by the shape model."""
        for g in self.gemm:
            if g.attention_core != self.core:
                where = "a phase that is not core" if g.attention_core else "a core phase"
                raise ValueError(f"gemm {g.name!r} of phase {self.name!r}: attention_core = {g.attention_core} in "
                                 f"{where}")
        return self

    @property
    def terms(self) -> list[Term]:
        return self.term

    def tp_class(self, term: Term) -> str:
        """How tensor parallelism splits `term` (its own class, else the phase's)."""
        return term.tp or self.tp

    def applies(self, features: dict[str, Any]) -> bool:
        return matches(self.when, features)


@functools.lru_cache(maxsize=1)
def load_catalogue() -> tuple[Phase, ...]:
    """Every phase of ``formulas/``, sorted by `order`: validated once, then read from the cache
    (`catalogue.cache`, keyed by a fingerprint of the files)."""
    from . import cache

    cached = cache.load_pickle("catalogue")
    if isinstance(cached, tuple) and cached and all(isinstance(p, Phase) for p in cached):
        return cached
    phases = _read_catalogue()
    cache.store_pickle("catalogue", phases)
    return phases


def _read_catalogue() -> tuple[Phase, ...]:
    """Read and validate every phase file in ``formulas/``; phases sorted by their `order`."""
    folder = data_dir("formulas")
    phases: list[Phase] = []
    for path in sorted(folder.glob("*.toml")):
        if path.name == "constants.toml":
            continue
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
            phases.extend(Phase.model_validate(p) for p in raw.get("phase", []))
        except Exception as exc:
            raise DataError(f"formula file {path.name}: {exc}") from exc
    names = [p.name for p in phases]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise DataError(f"phase names defined twice in the catalogue: {sorted(dupes)}")
    return tuple(sorted(phases, key=lambda p: p.order))


def phase_by_name(name: str) -> Phase:
    for p in load_catalogue():
        if p.name == name:
            return p
    raise KeyError(name)
