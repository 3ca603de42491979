"""A `Problem`: a model on a device under a resolved execution, everything but the batch shape.

It owns the catalogue selections for the model's layer kinds and the run, and evaluates every
per-phase formula at a batch shape (G tiles of b sequences) as an `Evaluation`. The model is
evaluated once per problem (and sequence length): the generated code gives every formula's
coefficients in G and b (`catalogue.compiled`), and a batch shape, or an array of candidate shapes,
is then a few multiplications. Scalar evaluations are memoised: the solver, the memory breakdown and
the time model ask for the same shapes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property
from typing import Any, Iterator, Optional

import numpy as np

from .. import profiling
from .arrays import where
from ..errors import BtacalcError
from ..memo import Memo, plain_key, remembered
from ..catalogue.compiled import Coefficients, CompiledSelection, PhaseValues, compile_selection
from ..catalogue.constants import constants
from ..catalogue.selection import Selection
from ..catalogue.terms import Phase
from ..config.execution import Execution, Layout, RunOptions
from ..config.hardware import HardwareProfile
from ..config.model import LayerKind, ModelSpec
from ..config.precision import recipe
from ..config.workspaces import Workspace, library_workspaces


# Formula coefficients per model and per symbol values at G = b = 1: a layout's invariant, the same for
# every batch shape and for every Problem of that model, run and layout (`Problem.coefficients`).
_COEFFICIENTS: Memo[tuple[Coefficients, ...]] = Memo()

# Per-layout invariants (device rates, links, state rates, a stage's training state...) of every Problem of
# the same model, profile and execution objects: `Problem.layout_cache`. The value is None for an execution
# that is not plain data (arrays of layouts or points): those problems keep their own.
_LAYOUTS: Memo[Optional[dict[Any, Any]]] = Memo()


@remembered
@functools.lru_cache(maxsize=256)
def kind_selections(model: ModelSpec, run_features: tuple[tuple[str, Any], ...], recompute: str,
                    multi_token_prediction: bool = False, bf16_ends: tuple[int, int] = (0, 0),
                    stored: Optional[frozenset[int]] = None) -> tuple[tuple[LayerKind, CompiledSelection], ...]:
    """Each layer kind of `model` with its compiled selection (model features, the kind's own, the run's); a kind
    outside a block recompute's layers (feature `recompute_off`) is compiled without recomputation."""
    base = {**model.features(), **dict(run_features)}
    out = []
    for kind in model.layer_kinds(multi_token_prediction, bf16_ends, stored):
        features = dict(kind.features)
        policy = "none" if features.pop("recompute_off", False) else recompute
        out.append((kind, compile_selection(Selection.make({**base, **features}, policy))))
    return tuple(out)


def _positions_key(stored: Optional[frozenset[int]]) -> Optional[tuple[int, ...]]:
    """A memo key's form of Problem.stored_layers."""
    return None if stored is None else tuple(sorted(stored))


def padded_vocab(vocab_size: int, tensor_parallel: Any, vocab_multiple: Optional[int] = None) -> Any:
    """The vocabulary Megatron-LM trains with: V rounded up to a multiple of m·TP, m its
    --make-vocab-size-divisible-by (`vocab_multiple`; None: the default 128, `formulas/constants.toml` [megatron]);
    the embedding table, the output layer and the logits are that wide. An int, or an array over layouts' TP sizes."""
    multiple = (vocab_multiple or constants().megatron.make_vocab_size_divisible_by) * tensor_parallel
    return -(-vocab_size // multiple) * multiple


def kind_values(model: ModelSpec, kind: LayerKind, shape: dict[str, Any]) -> dict[str, Any]:
    """Symbol values for one layer kind: the model's, the kind's overrides, then the batch shape. A window
    longer than the sequence is the sequence (w = min(window, s): the formulas then read s^2)."""
    values = {**model.symbol_values(), **dict(kind.symbols), **shape}
    if dict(kind.features).get("bf16_layer"):
        # a layer kept out of the low-precision recipe saves its linears' 16-bit inputs, not quantised copies
        # (RunOptions.saved_input_bytes is the recipe's; MLM @ d98e8a64 fp8_utils.py L850-852: no autocast)
        values["beta_s"] = values["beta"]
    s, w = values["s"], values["w"]
    values["w"] = np.minimum(w, s) if isinstance(s, np.ndarray) else min(w, s)
    return values


class Evaluation:
    """Every per-phase quantity at one batch shape: per layer kind (`layers`) and outside the layers
    (`outside`, from the first kind's selection: the parts outside the layers are the same for all)."""

    def __init__(self, layers: list[tuple[LayerKind, PhaseValues]]):
        self.layers = layers
        self.outside = layers[0][1]

    def items(self) -> Iterator[tuple[int, PhaseValues, Phase]]:
        """(repetitions per step, values, phase) for every phase in catalogue order: layer phases
        repeat their kind's count, the parts outside the layers once."""
        for _, n, pv, p in self.kind_items():
            yield n, pv, p

    def kind_items(self) -> Iterator[tuple[str, int, PhaseValues, Phase]]:
        """As `items`, each with its layer kind's name ("" outside the layers)."""
        rows = [(p.order, 0, "", 1, self.outside, p) for p in self.outside.phases if p.scope == "model"]
        for i, (kind, pv) in enumerate(self.layers):
            rows += [(p.order, i, kind.name, kind.count, pv, p) for p in pv.phases if p.scope == "layer"]
        for _, _, name, n, pv, p in sorted(rows, key=lambda r: (r[0], r[1])):
            yield name, n, pv, p

    def layers_total(self, quantity: str) -> Any:
        """`quantity` summed over every layer of the stack."""
        return sum((kind.count * pv.total(quantity, "layer") for kind, pv in self.layers), start=0)

    def outside_total(self, quantity: str) -> Any:
        return self.outside.total(quantity, "model")

    def largest_layer(self, quantity: str) -> Any:
        """The largest one-layer total of `quantity` over the layer kinds."""
        values = [pv.total(quantity, "layer") for _, pv in self.layers]
        return _maximum(values)

    def max(self, quantity: str) -> Any:
        """The largest single-phase value of `quantity`, inside or outside the layers."""
        return _maximum([pv.max(quantity) for _, pv in self.layers] + [self.outside.max(quantity)])


def _maximum(values: list[Any]) -> Any:
    if any(isinstance(v, np.ndarray) for v in values):
        return np.maximum.reduce(np.broadcast_arrays(*values))
    return max(values)


@dataclass(frozen=True)
class Problem:
    """A model on a device with run options and a layout: everything but the batch shape (G, b)."""

    model: ModelSpec
    hardware: HardwareProfile
    execution: Execution
    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False, hash=False)
    # [model evaluations (generated-code calls), batch shapes evaluated (an array counts its size)]
    evaluations: list[int] = field(default_factory=lambda: [0, 0], compare=False, repr=False, hash=False)
    # Many points at once (vectorised sweeps): models that differ from `model` only in the values of some
    # symbols (E, k, f), one value per point, and their parameter counts (a ParamCounts of arrays).
    symbols: dict[str, Any] = field(default_factory=dict, compare=False, repr=False, hash=False)
    counts: Any = field(default=None, compare=False, repr=False, hash=False)

    @cached_property
    def layout_cache(self) -> dict[Any, Any]:
        """Where the invariants of this problem's layout are kept: functions of the model, the profile and the
        execution only, never of a batch shape (`evaluate`'s shapes stay in the problem's own `_cache`). Shared
        by every problem of the same three objects (the execution frozen and plain data, `btacalc.memo`;
        a profile is keyed on its identity and kept referenced, as `resolve_execution` does), so a new
        `Problem` of a layout seen before does not derive its rates, links and state again; otherwise (points
        of a sweep, arrays of layouts) the problem's own `_cache`."""
        if self.symbols or self.counts is not None:
            return self._cache
        shared = _LAYOUTS.get((), (self.model, self.hardware, self.execution),
                              lambda: {} if plain_key(self.execution) is not None else None)
        return self._cache if shared is None else shared

    # cached (the problem is frozen): read dozens of times per evaluation
    @cached_property
    def run(self) -> RunOptions:
        return self.execution.run

    @cached_property
    def layout(self) -> Layout:
        return self.execution.layout

    @cached_property
    def library_workspaces(self) -> tuple[Workspace, ...]:
        """GPU: the library workspaces this run holds in PyTorch's allocator (config/workspaces.py), resolved once
        per problem: TransformerEngine's unless the layers are eager PyTorch's, Megatron-Core's own (local) or a
        16-bit PyTorch FSDP run's (torchtitan's and llm-foundry's nn.Linear: review36 listed a TE workspace there), its
        grouped GEMMs' where an MoE model's experts run as grouped GEMMs (not SequentialMLP), its userbuffers' under
        the TP overlap, and PyTorch's own; a wafer's none."""
        if self.hardware.family != "gpu":
            return ()
        # a PyTorch FSDP run's low-precision linears are TransformerEngine's (llm-foundry's fc_type te under amp_fp8),
        # as the plan's TE weight caches say; its 16-bit ones torch's nn.Linear
        te = (self.run.transformer_engine and not self.run.eager_kernels
              and (not self.layout.torch_fsdp or recipe(self.run.precision).low))
        grouped = self.model.is_moe and self.run.expert_grouped_gemm
        return library_workspaces(self.hardware.chip.capability, te, grouped, self.layout.userbuffers)

    @property
    def workspace_bytes(self) -> int:
        """The bytes of `library_workspaces`: what Reserves takes off the usable memory."""
        return sum(w.bytes for w in self.library_workspaces)

    @property
    def memory_model(self) -> str:
        """weight_streaming or resident ("auto" must be resolved first: model.memory.resolve_memory_model)."""
        return self.run.memory_model

    def features(self) -> dict[str, Any]:
        """The run's features (`RunOptions.features`) with the layout's: sequence parallelism, what a column-parallel
        linear keeps of its input under it, and where the
        optimizer keeps its master weights (RunOptions.param_remainders on a GPU, not under Megatron-FSDP, whose own
        main weights Megatron-Core keeps apart from FusedAdam: optimizer/__init__.py L578-581 @ d98e8a64; and only
        with the distributed optimizer, ZeRO >= 1 (review28): Megatron-Core refuses the precision-aware optimizer
        without it, optimizer/__init__.py L1054-1060, which `plan` refuses too (hostile29:
        resolution.check_precision_aware_sharded); a ZeRO 0 layout built in the library keeps fp32 master weights)."""
        lay = self.layout
        gpu = self.hardware.family == "gpu"
        distributed = lay.zero_stage >= 1 and not lay.fsdp
        master = "remainders" if self.run.param_remainders and distributed and gpu else "fp32"
        # PyTorch FSDP2's TP is DTensor's (vocabulary dtensor_tp; a search evaluates TP 1 and TP > 1 apart under
        # PyTorch's FSDP, planning/search.py `_evaluate`, so this is one value for a stacked layout)
        return {**self.run.features(), "sequence_parallel": lay.sequence_parallel, "master": master,
                "dtensor_tp": lay.dtensor_tp}

    @cached_property
    def kinds(self) -> tuple[tuple[LayerKind, CompiledSelection], ...]:
        """Each layer kind with its compiled selection: a function of the model and the execution, so kept in
        the shared layout cache (not in a problem's own cache, which `with_run` shares across executions)."""
        shared = not (self.symbols or self.counts is not None)
        if shared:
            hit = self.layout_cache.get("kinds")
            if hit is not None:
                return hit
        features = self.features()
        kinds = kind_selections(self.model, tuple(sorted(features.items())), self.run.recompute,
                                self.run.multi_token_prediction, self.run.bf16_ends, self.stored_layers)
        if shared and self.layout_cache is not self._cache:
            self.layout_cache["kinds"] = kinds
        return kinds

    @property
    def stored_layers(self) -> Optional[frozenset[int]]:
        """The decoder layers a block recompute (RunOptions.recompute_layers = N) leaves storing their activations:
        in each pipeline stage's model chunk all but its first N (Megatron-Core's block method runs layer_idx < N of
        the chunk under the checkpoint: recompute.py L167-180 @ d98e8a64), placed as Megatron places the layers
        (Layout.placement); None without the block method. Kept per layout; a layout of arrays (the layout search)
        must hold one PP x VP x split (planning/search.py groups its candidates so)."""
        n = self.run.recompute_layers
        if n == 0:
            return None
        hit = self.layout_cache.get("stored layers")
        if hit is not None:
            return hit
        lay = self.layout
        sizes = [np.unique(np.asarray(v)) for v in (lay.pipeline_parallel, lay.virtual_pipeline)]
        if any(s.size != 1 for s in sizes):
            raise BtacalcError("{recompute_layers}: a block recompute's layers are placed for one pipeline layout at a "
                               "time, and this evaluation holds several")
        mtp = self.model.mtp_layers if self.run.multi_token_prediction else 0
        pp, vp = (int(s[0]) for s in sizes)
        chunks = replace(lay, pipeline_parallel=pp, virtual_pipeline=vp).placement(self.model.num_layers, mtp).chunks
        stored = frozenset(i for c in chunks for i in list(c.layers)[n:])
        self.layout_cache["stored layers"] = stored
        return stored

    @property
    def compiled(self) -> CompiledSelection:
        """The first layer kind's compiled selection (it also holds the parts outside the layers)."""
        return self.kinds[0][1]

    @property
    def selection(self) -> Selection:
        return self.compiled.selection

    def shape_values(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> dict[str, Any]:
        """Symbol values of one device's share of a batch shape (b as `rank_share`; on a GPU the
        vocabulary as Megatron pads it, `padded_vocab`)."""
        lay = self.layout
        gpu = self.hardware.family == "gpu"
        vocab = {"V": padded_vocab(self.model.vocab_size, lay.tensor_parallel, lay.vocab_multiple)} if gpu else {}
        return {**self.symbols, "s": self.run.seq_len if seq_len is None else seq_len, "b": self.rank_share(tile_batch),
                "G": tiles, "beta": self.run.bytes_per_element, "beta_s": self.run.saved_input_bytes, "P": 0,
                "t": lay.tensor_parallel, "t_e": lay.expert_tensor_parallel, "c": lay.context_parallel,
                "M_sram": self.hardware.attention_sram_bytes_per_core // self.run.bytes_per_element,
                "x_s": self.expert_chunk_sorts(), **self.allgather_dispatch(), **vocab}

    def allgather_dispatch(self) -> dict[str, Any]:
        """x_g and n_g: 1 and the tp_ep group's ETP x EP ranks under Megatron's allgather dispatcher
        (`Layout.allgather_dispatcher`: token_dispatcher.py L281-368 @ d98e8a64 gathers over
        pg_collection.tp_ep), else 0 and 0 (formulas/moe.toml's dispatch and combine terms)."""
        lay = self.layout
        if not lay.allgather_dispatcher:
            return {"x_g": 0, "n_g": 0}
        return {"x_g": 1, "n_g": lay.expert_model_parallel}

    def expert_chunk_sorts(self) -> Any:
        """1 where Megatron's alltoall dispatcher sorts the copies it received by local expert after the dispatch
        all-to-all and restores their order before the combine one when num_local_experts > 1
        (`sort_chunks_by_idxs`, or with drop-and-pad a transposed contiguous copy: one read and one write of
        the copies either way, formulas/moe.toml; Megatron-LM @ d98e8a64
        megatron/core/transformer/moe/token_dispatcher.py L757-789 dispatch_postprocess, L803-823
        combine_preprocess), else 0: one local expert needs no sort, DeepEP / HybridEP (the flex dispatcher)
        write each token to its expert's rows inside their own kernels (`deepep`), and the allgather dispatcher
        permutes the gathered tokens straight into local-expert order (token_dispatcher.py L305-335)."""
        lay = self.layout
        experts = self.symbols.get("E", self.model.num_experts)
        ep = lay.expert_parallel
        return where((ep > 1) & (experts > ep) & (not lay.deepep) & (not lay.allgather_dispatcher), 1, 0)

    def rank_share(self, tile_batch: Any) -> Any:
        """The sequences of a tile one device holds. Context parallelism gives each of its CP ranks 1/CP of
        every sequence's tokens; every activation term is linear in b, and the s^2 terms count (s/CP)·s per
        rank (ring attention), so a rank's share is the formula at b/CP (weights, which do not depend on b,
        are whole)."""
        cp = self.layout.context_parallel
        if isinstance(cp, int) and isinstance(tile_batch, int):
            return tile_batch if cp == 1 else Fraction(tile_batch, cp)
        return tile_batch / cp

    def coefficients(self, seq_len: Any = None) -> tuple[Coefficients, ...]:
        """Each layer kind's formula coefficients at `seq_len` (default the run's, which may be an
        array of points); memoised for the run's sequence length and for scalar ones."""
        key = ("coefficients", "run" if seq_len is None else seq_len if isinstance(seq_len, int) else None)
        if key[1] is not None:
            if key in self._cache:  # (`at_points` puts its gathered coefficients here)
                return self._cache[key]
            if key in self.layout_cache:
                return self.layout_cache[key]
        shape = self.shape_values(1, 1, seq_len)
        coefs = _COEFFICIENTS.get(self._coefficients_key(shape), (self.model,), lambda: self._coefficients(shape))
        if key[1] is not None:
            self.layout_cache[key] = coefs
        return coefs

    def _coefficients(self, shape: dict[str, Any]) -> tuple[Coefficients, ...]:
        self.evaluations[0] += 1
        return tuple(compiled.coefficients(kind_values(self.model, kind, shape)) for kind, compiled in self.kinds)

    def _coefficients_key(self, shape: dict[str, Any]) -> Any:
        """What the coefficients are a function of besides the model: the layer kinds' selections (run
        features, recompute, MTP) and the symbol values at G = b = 1, each with its type (`btacalc.memo`);
        None (not remembered) for points of arrays."""
        if self.symbols or self.counts is not None:
            return None
        features = self.features()
        return plain_key((tuple(sorted(features.items())), self.run.recompute, self.run.multi_token_prediction,
                          self.run.bf16_ends, _positions_key(self.stored_layers), tuple(shape.items())))

    def evaluate(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> Evaluation:
        """Every per-phase quantity at G = `tiles`, b = `tile_batch` (ints: exact, memoised; or arrays)."""
        scalar = all(isinstance(x, int) for x in (tiles, tile_batch)) and (seq_len is None or isinstance(seq_len, int))
        key = (tiles, tile_batch, seq_len)
        if scalar and key in self._cache:
            return self._cache[key]
        same = type(tiles) is np.ndarray and type(tile_batch) is np.ndarray and tiles.shape == tile_batch.shape
        shapes = tiles.size if same else int(np.size(tiles * tile_batch))
        self.evaluations[1] += shapes
        profiling.count("shapes evaluated", shapes)
        share = self.rank_share(tile_batch)
        ev = Evaluation([(kind, coefs.at(tiles, share))
                         for (kind, _), coefs in zip(self.kinds, self.coefficients(seq_len))])
        if scalar:
            self._cache[key] = ev
        return ev

    def at_points(self, index: np.ndarray) -> "Problem":
        """The problem of points `index` of this one (whose sequence length, symbols and counts may be
        arrays of points): the formulas' coefficients are gathered from this problem's, not computed
        again."""
        take = lambda v: v[index] if isinstance(v, np.ndarray) and v.ndim else v  # noqa: E731
        counts = None if self.counts is None else replace(self.counts, **{
            f: take(getattr(self.counts, f)) for f in self.counts.__dataclass_fields__})
        sub = Problem(self.model, self.hardware, replace(self.execution, run=replace(self.run, seq_len=take(
            np.asarray(self.run.seq_len)))), symbols={k: take(v) for k, v in self.symbols.items()}, counts=counts)
        sub._cache[("coefficients", "run")] = tuple(c.take(index) for c in self.coefficients())
        return sub

    def with_run(self, **changes: Any) -> "Problem":
        """The problem under other run options. Options the formulas do not read (the memory model,
        streaming overlap) keep this problem's evaluations: the values are the same."""
        key = ("with run", plain_key(tuple(sorted(changes.items()))))
        execution = self.layout_cache.get(key) if key[1] is not None else None
        if execution is None:  # the same execution object each time: the new problem shares its layout cache
            execution = replace(self.execution, run=replace(self.run, **changes))
            if key[1] is not None:
                self.layout_cache[key] = execution
        if set(changes) <= {"memory_model", "overlap_streaming"}:
            return Problem(self.model, self.hardware, execution, self._cache, self.evaluations, self.symbols, self.counts)
        return Problem(self.model, self.hardware, execution, symbols=self.symbols, counts=self.counts)

    def with_layout(self, **changes: Any) -> "Problem":
        """The problem under another layout; itself (evaluations shared) when nothing changes."""
        if all(type(getattr(self.layout, k)) is type(v) is int and getattr(self.layout, k) == v
               for k, v in changes.items()):
            return self
        return Problem(self.model, self.hardware, replace(self.execution, layout=replace(self.layout, **changes)),
                       symbols=self.symbols, counts=self.counts)

    def with_model(self, model: ModelSpec) -> "Problem":
        return Problem(model, self.hardware, self.execution)


def make_problem(model: ModelSpec, hardware: HardwareProfile, run: RunOptions = RunOptions(),
                 layout: Layout = Layout()) -> Problem:
    """A problem from already-resolved run options and layout (library and test convenience)."""
    return Problem(model, hardware, Execution(run, layout))
