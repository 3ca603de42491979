"""`btacalc sweep`: a cartesian grid over model and run parameters, every point solved as `plan`
would solve it, at array speed.

The grid is never built in memory: point i is found from its mixed-radix digits (`Grid`), and a
grid larger than MAX_POINTS needs an explicit `max_points`. Points are solved in blocks of
BLOCK_POINTS in grid order (`iter_sweep` yields one `SweepBlock` at a time, so output streams and
memory stays bounded). Within a block, the points that share a model and a device count form a group
whose sequence lengths and batch limits are arrays: one vectorised candidate search
(`model.solver.search`) solves them all, the best untiled shape comes from the same search, and the
dense reference from a search of the dense model (memoised across groups: varying the experts leaves
it unchanged). Invalid points (an override the model rejects, a layout or batch limits that do not
agree) are kept with their error.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np
from pydantic import BaseModel

from ..config.execution import (DEFAULT_SEQ_LEN, DEFAULT_TOKENS_PER_STEP, BatchLimits, Execution, ExecutionRequest,
                                Layout)
from ..config.resolution import resolve_execution, whole_sequences
from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec
from ..config.precision import recipes
from ..errors import BtacalcError
from ..model.memory import auto_resident
from ..model.params import ParamCounts, param_counts
from ..model.problem import Problem
from ..model.solver import PointLimits, PointMemory, Search, search
from ..model.timing import StepTime, compute_efficiency, step_time
from .expected_error import expected_error, kind_of
from .plan import dense_problem, routing_sensitivity, streaming_overlap
from .suggest import no_fit
from .report import PlanInfo, Throughput

MODEL_PARAMS = {"experts": "experts", "top-k": "top_k", "expert-ffn": "expert_ffn"}
RUN_PARAMS = {"seq": "seq_len"}
LIMIT_PARAMS = {"global-batch": "global_batch", "tiles": "tiles", "tile-batch": "tile_batch",
                "max-global-batch": "max_global_batch", "max-tile-batch": "max_tile_batch", "grad-accum": "micro_batches"}
LAYOUT_PARAMS = {"devices": "devices"}
# Named choices: the grid holds the index into the choices (`--vary precision=bf16,mxfp8,nvfp4`); the points
# report the names. Each choice is an ExecutionRequest field: its points are solved as separate groups.
CHOICE_PARAMS: dict[str, tuple[str, tuple[str, ...]]] = {"precision": ("precision", tuple(recipes()))}
VARIABLES = {**MODEL_PARAMS, **RUN_PARAMS, **LIMIT_PARAMS, **LAYOUT_PARAMS,
             **{n: field for n, (field, _) in CHOICE_PARAMS.items()}}

# A grid above this many points is refused unless the caller raises the limit (--max-points): a
# million points take about a minute and their CSV about 300 MB.
MAX_POINTS = 1_000_000
# Points with a sequence length or a model size (h, d_h, E, V, ...) above this are solved one at a
# time with Python integers, as `plan` solves them: the vectorised search holds products such as
# s*s*b*heads*bytes in int64 (2^63), which sizes up to 2^24 (16.8M tokens, beyond any published training
# context; 2^24 > the largest vocabulary, 256k) keep exact with b, heads and bytes up to 2^14.
EXACT_SIZE = 1 << 24
# Memo entries kept across blocks (see `_Solver.forget`): a block's worth, so the memos stay about as
# large as one block's arrays.
MEMO_ENTRIES = 1 << 14
# Points solved (and written) at a time.
BLOCK_POINTS = 1 << 14
# Points searched together (the search evaluates their shapes in chunks of solver.CHUNK_SHAPES). Its
# per-point arrays scale with this: a 100,000-point wse3 sweep peaked at 1,046 MB with 2^13 points,
# 489 MB with 2^10, the CSV identical and no more CPU (docs/speed.md, "speed4").
SEARCH_POINTS = 1 << 10


class SweepPoint(BaseModel):
    params: dict[str, Union[int, str]]
    plan: PlanInfo
    throughput: Optional[Throughput]
    error: Optional[str] = None


class SweepResult(BaseModel):
    model: str
    hardware: str
    fixed_active: bool
    points: list[SweepPoint]


@dataclass(frozen=True)
class Grid:
    """The cartesian product of `values` (one sequence per name; ranges stay ranges), in order: the
    first name varies slowest."""

    names: tuple[str, ...]
    values: tuple[Sequence[int], ...]

    @classmethod
    def of(cls, grid: Mapping[str, Sequence[int]]) -> "Grid":
        return cls(tuple(grid), tuple(grid.values()))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.values)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def check(self, max_points: Optional[int] = None) -> None:
        """Refuse a grid larger than `max_points` (default MAX_POINTS) before any work."""
        limit = MAX_POINTS if max_points is None else max_points
        if self.size > limit:
            dims = " x ".join(f"{len(v):,} {n}" for n, v in zip(self.names, self.values))
            raise BtacalcError(f"{{vary}}: the grid has {self.size:,} points ({dims}), more than the limit of {limit:,}; "
                               "raise {max_points} to run it")

    def digits(self, start: int, stop: int) -> list[np.ndarray]:
        """Per name, the index into its values of points start..stop-1."""
        return [np.asarray(d, dtype=np.int64) for d in np.unravel_index(np.arange(start, stop), self.shape)]

    def columns(self, digits: list[np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for name, values, d in zip(self.names, self.values, digits):
            if isinstance(values, range):
                out[name] = values.start + values.step * d
            else:
                out[name] = np.asarray(values, dtype=np.int64)[d]
        return out


# Flat per-point columns of a block: PlanInfo fields, then Throughput fields.
PLAN_FIELDS = tuple(PlanInfo.model_fields)
THROUGHPUT_FIELDS = tuple(f for f in Throughput.model_fields if f not in ("phase_share", "communication_s", "collectives"))


@dataclass
class SweepBlock:
    """Solved points start..start+len-1 of the grid, as columns (None where a value does not apply)."""

    start: int
    params: dict[str, np.ndarray]
    columns: dict[str, np.ndarray]  # object arrays of plain Python values, one per PlanInfo/Throughput field
    times: list[Optional[tuple[dict[str, np.ndarray], dict[str, np.ndarray], int]]]  # per point: its group's
    # phase and communication times and its position in them
    errors: list[Optional[str]]

    def __len__(self) -> int:
        return len(self.errors)

    def param_rows(self) -> list[dict[str, Any]]:
        names = list(self.params)
        return [dict(zip(names, row)) for row in zip(*(self.params[n].tolist() for n in names))]

    def points(self) -> Iterator[dict[str, Any]]:
        """The points as `SweepPoint`-shaped dicts (the JSON of `btacalc sweep`)."""
        cols = self.columns
        for i, params in enumerate(self.param_rows()):
            plan = {f: cols[f][i] for f in PLAN_FIELDS}
            th = None
            times = self.times[i]
            if times is not None:
                phases, comm, at = times
                th = {f: cols[f][i] for f in THROUGHPUT_FIELDS}
                step = th["step_time_s"]
                th["phase_share"] = {k: float(v[at]) / step for k, v in phases.items()}
                th["communication_s"] = {k: float(v[at]) for k, v in comm.items()}
                th["dominant_phase"] = max(th["phase_share"], key=th["phase_share"].__getitem__)
            yield {"params": params, "plan": plan, "throughput": th, "error": self.errors[i]}


def iter_sweep(model: ModelSpec, hw: HardwareProfile, request: ExecutionRequest, grid: Grid,
               fixed_active: bool = False, max_points: Optional[int] = None,
               say: Callable[[BtacalcError], str] = str) -> Iterator[SweepBlock]:
    """Solve every point of `grid` (`request` with the point's values), block by block in grid order.
    What `request` leaves unset defaults per point (e.g. EP = gcd(devices, E) when devices vary). `say` writes
    an invalid point's error (default: with the library's parameter names; the command line passes its flags)."""
    grid.check(max_points)
    unknown = [n for n in grid.names if n not in VARIABLES]
    if unknown:
        raise BtacalcError(f"{{vary}}: unknown parameter {unknown[0]!r} (known: {', '.join(VARIABLES)})")
    solver = _Solver(model, hw, request, fixed_active, say, seq_varied="seq" in grid.names)
    for start in range(0, grid.size, BLOCK_POINTS):
        stop = min(start + BLOCK_POINTS, grid.size)
        yield _named(solver.block(start, grid.columns(grid.digits(start, stop))))


def _named(block: SweepBlock) -> SweepBlock:
    """The block with each choice parameter's indices replaced by the choices' names."""
    for name, (_, choices) in CHOICE_PARAMS.items():
        if name in block.params:
            block.params[name] = np.array([choices[i] for i in block.params[name].tolist()], dtype=object)
    return block


def run_sweep(model: ModelSpec, hw: HardwareProfile, request: ExecutionRequest, grid: Mapping[str, Sequence[int]],
              fixed_active: bool = False, progress: Optional[Callable[[int], None]] = None,
              max_points: Optional[int] = None) -> SweepResult:
    """The whole sweep in memory (library convenience; the command line streams `iter_sweep`)."""
    points = []
    for block in iter_sweep(model, hw, request, Grid.of(grid), fixed_active, max_points):
        points += [SweepPoint.model_validate(p) for p in block.points()]
        if progress:
            progress(len(block))
    return SweepResult(model=model.name, hardware=hw.name, fixed_active=fixed_active, points=points)


@dataclass
class _Columns:
    """Per-point results of a block, filled group by group."""

    size: int
    say: Callable[[BtacalcError], str] = str  # an invalid point's error as its message (iter_sweep)
    cols: dict[str, np.ndarray] = field(default_factory=dict)
    times: list[Optional[tuple[dict[str, np.ndarray], dict[str, np.ndarray], int]]] = field(default_factory=list)
    errors: list[Optional[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cols = {f: np.full(self.size, None, dtype=object) for f in PLAN_FIELDS + THROUGHPUT_FIELDS}
        self.times = [None] * self.size
        self.errors = [None] * self.size

    def put(self, rows: np.ndarray, name: str, values: Any) -> None:
        """Set column `name` at `rows` (values: an array or a list, stored as plain Python values)."""
        self.cols[name][rows] = values.tolist() if isinstance(values, np.ndarray) else values

    def fail(self, rows: np.ndarray, message: str) -> None:
        for r in rows.tolist():
            self.errors[r] = message
        for f, v in _INVALID.items():
            self.cols[f][rows] = [v] * rows.size


_INVALID = {"tiles": 0, "tile_batch": 0, "global_batch": 0, "micro_batches": 0, "step_batch": 0, "tokens_per_step": 0,
            "devices": 0, "cluster_tokens_per_step": 0, "tokens_per_expert": 0.0, "fits": False,
            "binding_constraint": "invalid", "tile_constraint": "invalid", "explanation": "invalid point",
            "memory_evaluations": 0, "objective": "", "alternative": None}


class _Solver:
    """Solves blocks of points; keeps what does not depend on the block (models, executions, parameter
    counts, dense references)."""

    def __init__(self, model: ModelSpec, hw: HardwareProfile, request: ExecutionRequest, fixed_active: bool,
                 say: Callable[[BtacalcError], str] = str, seq_varied: bool = False):
        self.model, self.hw, self.request, self.fixed_active, self.say = model, hw, request, fixed_active, say
        self.seq_varied = seq_varied  # the grid varies seq: layouts resolved at _neutral_seq, each point's checked
        # hostile35: the request's M (--grad-accum, ExecutionRequest.micro_batches, which `plan` folds into its limits:
        # config/resolution.py) among the points' limits; `sweep --grad-accum 4` planned every point at the default
        # global batch (M 64 for 16 H100s at seq 2048) where `plan --grad-accum 4` runs 4 micro-batches
        self.limits = replace(request.limits, micro_batches=request.limits.micro_batches or request.micro_batches)
        self.setups: dict[tuple[Any, ...], Union[tuple[ModelSpec, Execution, int], str]] = {}
        self.structures: dict[tuple[Any, ...], int] = {}
        self.counts: dict[tuple[Any, ...], ParamCounts] = {}
        self.dense: dict[tuple[Any, ...], tuple[float, int]] = {}
        self.dense_ids: dict[tuple[Any, ...], int] = {}
        self.dense_models: dict[int, tuple[ModelSpec, ModelSpec, tuple[Any, ...]]] = {}

    def setup(self, overrides: tuple[tuple[str, int], ...]) -> tuple[ModelSpec, Execution, int]:
        """The model, the resolved execution and a structure id of one combination of model and layout
        parameters: combinations with the same structure differ only in the numbers E, k, f."""
        if overrides not in self.setups:
            try:
                model = {MODEL_PARAMS[n]: v for n, v in overrides if n in MODEL_PARAMS}
                layout: dict[str, Any] = {LAYOUT_PARAMS[n]: v for n, v in overrides if n in LAYOUT_PARAMS}
                layout.update({CHOICE_PARAMS[n][0]: CHOICE_PARAMS[n][1][v] for n, v in overrides if n in CHOICE_PARAMS})
                spec = self.model.with_overrides(**model, fixed_active=self.fixed_active) \
                    if (model or self.fixed_active) else self.model
                request = self.request.with_changes(**layout, limits=BatchLimits())
                if self.seq_varied:
                    request = request.with_changes(seq_len=_neutral_seq(request, spec))
                execution = resolve_execution(request, spec, self.hw)
                # freshuser23: resolved without the points' limits, a GPU layout took the default global batch and,
                # under --pp > 1, its M = N / DP, which the solver then ran at every point that fixes no global batch
                # (`plan --tiles 1 --pp 2` runs M 1); each point's M is its limits' (_point_limits), else 1, and the
                # layout's M, which the memory model reads (a pipeline stage's micro-batches in flight), is set to it
                # point by point (`group`)
                execution = replace(execution, layout=replace(execution.layout, micro_batches=1))
                # semantics22: as JSON, a key for the nested fields too (MLA, YaRN, numerics: a dict in model_dump
                # made `sweep --model deepseek-v3` an internal error, "unhashable type: 'dict'")
                shape = spec.model_dump_json(exclude={"name", "source", "published_params", "num_experts", "top_k",
                                                      "ffn_size"})
                key = (shape, spec.is_moe, execution)
                self.setups[overrides] = (spec, execution, self.structures.setdefault(key, len(self.structures)))
            except BtacalcError as exc:
                self.setups[overrides] = exc.template  # the message: a kept exception would keep its frames
        found = self.setups[overrides]
        if isinstance(found, str):
            raise BtacalcError(found)
        return found

    def forget(self) -> None:
        """Drop the memos (setups, parameter counts, dense references) once they hold more than
        MEMO_ENTRIES: a sweep over 10^6 distinct expert counts would otherwise keep a model, an
        execution and its counts for each (gigabytes). They are rebuilt as needed; ids are only
        compared within one block, so clearing all of them together between blocks is safe."""
        if max(len(self.setups), len(self.counts), len(self.dense), len(self.dense_models)) > MEMO_ENTRIES:
            for memo in (self.setups, self.structures, self.counts, self.dense, self.dense_ids, self.dense_models):
                memo.clear()

    def block(self, start: int, params: dict[str, np.ndarray]) -> SweepBlock:
        """Group the block's points by structure (model shape and layout): one vectorised search each."""
        self.forget()
        out = _Columns(next(iter(params.values())).size, self.say)
        names = [n for n in params if n in MODEL_PARAMS or n in LAYOUT_PARAMS or n in CHOICE_PARAMS]
        combos = np.stack([params[n] for n in names], axis=1) if names else np.zeros((out.size, 0), np.int64)
        unique, inverse = np.unique(combos, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        setups: list[Optional[tuple[ModelSpec, Execution, int]]] = []
        for i, combo in enumerate(unique):
            try:
                setups.append(self.setup(tuple(zip(names, (int(v) for v in combo)))))
            except BtacalcError as exc:
                setups.append(None)
                out.fail(np.flatnonzero(inverse == i), out.say(exc))
        structure = np.array([-1 if st is None else st[2] for st in setups], dtype=np.int64)
        for sid in np.unique(structure[structure >= 0]):
            members = np.flatnonzero(structure == sid)  # the combinations of this structure
            rows = np.flatnonzero(np.isin(inverse, members))
            specs = [setups[i][0] for i in members.tolist()]  # only valid setups have a structure
            execution = setups[members[0]][1]
            models = _Models(specs, np.searchsorted(members, inverse[rows]))
            self.group(models, execution, {n: v[rows] for n, v in params.items()}, rows, out)
        return SweepBlock(start, params, out.cols, out.times, out.errors)

    def group(self, models: "_Models", execution: Execution, params: dict[str, np.ndarray], rows: np.ndarray,
              out: _Columns) -> None:
        """Points of one structure: sequence lengths, limits and the numbers E, k, f are arrays."""
        seq = np.asarray(params.get("seq", np.full(rows.size, self.request.seq_len or execution.run.seq_len)),
                         dtype=np.int64)
        default_n = self.default_global_batch(seq, execution.layout.data_parallel)
        limits, valid = _point_limits(self.limits, params, execution.layout.data_parallel, rows, out, default_n,
                                      pipeline=execution.layout.pipeline_parallel > 1)
        _refuse_chunked(models.specs[0], seq, valid, rows, out)
        _refuse_sequences(execution.layout, models.specs[0], seq, valid, rows, out)
        # review30: the layout's M is each point's, as `plan` resolves it (limits' M, else 1): the memory model reads
        # it (under --pp > 1 a stage holds min(PP, M) micro-batches; the merged 1F1B pair's second layer with M > 1),
        # and with M 1 for every point `--pp 2 --vary grad-accum=2,4` chose tiles plan finds do not fit
        m_of = _layout_micro_batches(execution, np.maximum(limits.micro_batches, 1), self.hw.family == "gpu")
        for m in np.unique(m_of[valid]).tolist():
            at_m = replace(execution, layout=replace(execution.layout, micro_batches=int(m)))
            self.solve_points(models, at_m, seq, limits, valid & (m_of == m), rows, out)

    def solve_points(self, models: "_Models", execution: Execution, seq: np.ndarray, limits: PointLimits,
                     chosen: np.ndarray, rows: np.ndarray, out: _Columns) -> None:
        """The `chosen` points of a group (one layout, one M), in parts of one problem each."""
        base = self.points_problem(models, execution).with_run(seq_len=seq)
        table = base.model.max_position_embeddings
        if table is None or (base.model.position_embedding == "learned" and int(seq.max()) > table):
            # parameters depend on s (a learned table grows to it: params.position_rows): one sequence length at a time
            parts = [np.flatnonzero(chosen & (seq == s)) for s in np.unique(seq[chosen])]
        else:
            parts = [np.flatnonzero(chosen)]
        # int64 products of such sizes can wrap: those points are solved one at a time in Python integers
        big_model = np.array([max(spec.symbol_values().values()) > EXACT_SIZE for spec in models.specs])
        big = (seq > EXACT_SIZE) | big_model[models.index]
        for part in parts:
            exact, part = part[big[part]], part[~big[part]]
            for chunk in np.array_split(part, -(-part.size // SEARCH_POINTS)) if part.size else []:
                self.solve(base.at_points(chunk), models.take(chunk), _take(limits, chunk), rows[chunk], out)
            for i in exact.tolist():
                self.solve_exact(models.take(np.array([i])), execution, int(seq[i]), _take(limits, np.array([i])),
                                 rows[[i]], out)

    def solve_exact(self, models: "_Models", execution: Execution, seq: int, limits: PointLimits, rows: np.ndarray,
                    out: _Columns) -> None:
        """One point whose sizes exceed EXACT_SIZE: its sizes as Python integers (a 1-point object array),
        so no product wraps; a size beyond even that is one error for the point."""
        spec = models.specs[int(models.index[0])]
        problem = Problem(spec, self.hw, execution).with_run(seq_len=np.array([seq], dtype=object))
        try:
            with np.errstate(all="raise"):
                self.solve(problem, _Models([spec], np.zeros(1, dtype=np.int64)), limits, rows, out)
        except (OverflowError, ArithmeticError) as exc:
            out.fail(rows, f"sizes beyond exact arithmetic ({exc})")

    def default_global_batch(self, seq: np.ndarray, data_parallel: int) -> Optional[np.ndarray]:
        """Per point, the GPU default global batch `plan` takes (config.resolution.default_global_batch):
        None on a wafer; applied by `_point_limits` to the points that fix no batch size."""
        if self.hw.family != "gpu":
            return None
        tokens = self.request.tokens_per_step or DEFAULT_TOKENS_PER_STEP
        return whole_sequences(np.int64(tokens), seq, np.int64(data_parallel))

    def points_problem(self, models: "_Models", execution: Execution) -> Problem:
        """One problem for points whose models differ only in the numbers of some symbols."""
        first = models.specs[0]
        if len(models.specs) == 1:
            return Problem(first, self.hw, execution)
        values = [spec.symbol_values() for spec in models.specs]
        # sizes beyond EXACT_SIZE (solved one point at a time) must not wrap here either: Python integers
        dtype = object if any(max(v.values()) > EXACT_SIZE for v in values) else np.int64
        symbols = {name: np.array([v[name] for v in values], dtype=dtype)[models.index] for name in values[0]
                   if any(v[name] != values[0][name] for v in values)}
        counts = [self.param_counts(spec, execution) for spec in models.specs]
        stacked = ParamCounts(*(np.array([getattr(c, f) for c in counts], dtype=dtype)[models.index]
                                for f in ParamCounts.__dataclass_fields__))  # counts per point: arrays
        return Problem(first, self.hw, execution, symbols=symbols, counts=stacked)

    def param_counts(self, spec: ModelSpec, execution: Execution) -> ParamCounts:
        key = (id(spec), execution.run.recompute, tuple(sorted(execution.run.features().items())))
        if key not in self.counts:
            self.counts[key] = param_counts(Problem(spec, self.hw, execution))
        return self.counts[key]

    def solve(self, problem: Problem, models: "_Models", limits: PointLimits, rows: np.ndarray,
              out: _Columns) -> None:
        """Resolve the memory model per point, then search each part."""
        if problem.run.memory_model != "auto":
            return self.solve_resolved(problem, models, limits, rows, out)
        resident = np.broadcast_to(np.asarray(auto_resident(problem)), rows.shape)
        for chosen, memory_model in ((resident, "resident"), (~resident, "weight_streaming")):
            part = np.flatnonzero(chosen)
            if part.size:
                self.solve_resolved(problem.at_points(part).with_run(memory_model=memory_model), models.take(part),
                                    _take(limits, part), rows[part], out)

    def solve_resolved(self, problem: Problem, models: "_Models", limits: PointLimits, rows: np.ndarray,
                       out: _Columns) -> None:
        objective = problem.execution.objective
        found = search(problem, limits, objective)
        ones, zeros = np.ones_like(limits.tiles), np.zeros_like(limits.tiles)
        m = found.shapes_of()[3]  # the plan's micro-batches: the references run as many (as in `plan`)
        if objective == "density":  # as `plan.summarize`: G = 1 free of the user's shape
            untiled: Optional[PointLimits] = PointLimits(zeros, ones, zeros, limits.max_global_batch, zeros, m)
        elif limits.given("tiles") or limits.given("tile_batch"):  # G = 1 under the user's other limits
            untiled = replace(limits, tiles=ones, tile_batch=zeros)
        else:  # G = 1 is among the candidates
            untiled = None
        g1 = found if untiled is None else search(problem, untiled, objective)
        g1_index = found.chosen["g1"] if untiled is None else g1.best
        free = replace(limits, micro_batches=np.where(limits.micro_batches > 0, limits.micro_batches, m))
        record(problem, found, g1, g1_index, self.dense_references(problem, models, free), rows, out)
        no_fit_verdicts(problem, found, limits, rows, out)

    def dense_references(self, problem: Problem, models: "_Models",
                         limits: PointLimits) -> tuple[np.ndarray, np.ndarray]:
        """Per point: tokens/s and G*b of its dense model's best plan (free shape, same caps and M)."""
        points = models.index.size
        tps, n = np.full(points, np.nan), np.zeros(points, dtype=np.int64)
        # the models these points have, in the group's order: a group holds every model of a block (up to
        # BLOCK_POINTS), a search SEARCH_POINTS points, so deriving every model's dense equivalent per
        # search cost O(models x searches) per block (docs/speed.md, "cold6")
        used, of_used = np.unique(models.index, return_inverse=True)
        dense_of, keys = zip(*[self.dense_model(models.specs[s]) for s in used.tolist()])
        key_id = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        of_point = np.array([key_id[k] for k in keys], dtype=np.int64)[of_used.reshape(-1)]
        for key, i in key_id.items():
            idx = np.flatnonzero(of_point == i)
            dense = dense_problem(problem.at_points(idx).with_model(dense_of[keys.index(key)]))
            tps[idx], n[idx] = self.dense_reference(dense, key, _take(limits, idx))
        return tps, n

    def dense_model(self, spec: ModelSpec) -> tuple[ModelSpec, tuple[Any, ...]]:
        """`spec`'s dense equivalent and its numbers (the key of `dense_reference`), derived once per model
        (a model's points are searched in several chunks: one per sequence length of a block)."""
        found = self.dense_models.get(id(spec))
        if found is None or found[0] is not spec:  # the spec is kept in the entry: its id is not reused
            dense = spec.dense_equivalent()
            found = (spec, dense, (dense.model_dump_json(exclude={"name", "source", "published_params"}),))
            self.dense_models[id(spec)] = found
        return found[1], found[2]

    def dense_reference(self, dense: Problem, numbers: tuple[Any, ...],
                        limits: PointLimits) -> tuple[np.ndarray, np.ndarray]:
        """Tokens/s and G*b of the dense model's best plan at each point (memoised across groups: the
        dense models of different expert counts are the same model)."""
        seq = np.asarray(dense.run.seq_len)
        about = (numbers, dense.layout, dense.run.memory_model, dense.run.recompute, dense.run.attention,
                 tuple(sorted(dense.run.features().items())), dense.run.overlap_streaming, dense.execution.objective,
                 dense.run.precision, dense.run.low_precision_param_gather)
        base_key = (self.dense_ids.setdefault(about, len(self.dense_ids)),)  # hashed once, not per point
        # as BatchLimits.free: a fixed global batch stays fixed (M the solver's), else the point's M stays
        fixed_m = np.where(limits.global_batch > 0, 0, limits.micro_batches)
        keys = [base_key + k for k in zip(seq.tolist(), limits.global_batch.tolist(), limits.max_global_batch.tolist(),
                                          fixed_m.tolist())]
        missing = [i for i, k in enumerate(keys) if k not in self.dense]
        if missing:
            todo = np.array(sorted({keys[i][-4:] for i in missing}), dtype=np.int64).reshape(-1, 4)
            free = PointLimits.of(BatchLimits(), len(todo))
            free = replace(free, global_batch=todo[:, 1], max_global_batch=todo[:, 2], micro_batches=todo[:, 3])
            found = search(dense.with_run(seq_len=todo[:, 0]), free, dense.execution.objective)
            best = found.best
            for j, k in enumerate(todo.tolist()):
                i = int(best[j])
                self.dense[base_key + tuple(k)] = ((float(found.tokens_per_s[i]), int(found.cand.tiles[i] *
                                                   found.cand.tile_batch[i])) if i >= 0 else (np.nan, 0))
        got = [self.dense[k] for k in keys]
        return np.array([g[0] for g in got]), np.array([g[1] for g in got])


@dataclass(frozen=True)
class _Models:
    """The distinct models of a group of points, and which one each point has."""

    specs: list[ModelSpec]
    index: np.ndarray

    def take(self, part: np.ndarray) -> "_Models":
        return _Models(self.specs, self.index[part])


def _layout_micro_batches(execution: Execution, m: np.ndarray, gpu: bool) -> np.ndarray:
    """The M each point's layout takes: the point's own, as `plan` resolves it, folded where no number reads the
    difference, so that a sweep over global batches under --pp > 1 (M = N / DP, one value per point) is not one search
    per point. A GPU layout reads M in a stage's in-flight micro-batches, min(PP - j, M) without interleaving
    (model/gpu/stages.py), and in the merged 1F1B pair's second layer, held with M > 1 (memory.py): every M >= max(PP,
    2) reads alike. Under interleaving (the in-flight count and Megatron's table of a last partial group read M itself)
    or a low-precision recipe (the weights cast once per step: 1/M per micro-batch, precision.py) and on a wafer, M is
    the point's."""
    lay = execution.layout
    if not gpu or lay.virtual_pipeline > 1 or execution.run.recipe.low:
        return m
    return np.minimum(m, max(int(lay.pipeline_parallel), 2))


def _point_limits(base: BatchLimits, params: dict[str, np.ndarray], data_parallel: int, rows: np.ndarray,
                  out: _Columns, default_n: Optional[np.ndarray] = None,
                  pipeline: bool = False) -> tuple[PointLimits, np.ndarray]:
    """The batch limits of each point (the request's, with the grid's values), validated per distinct
    combination; invalid points are recorded and left out. `default_n` (GPU): the global batch of the
    points that fix no batch size, as `plan` resolves it. `pipeline` (PP > 1): a global batch without M runs
    one sequence per micro-batch (G x b of the given tile sizes), as `plan` resolves it
    (config.resolution.pipeline_micro_batch)."""
    names = list(PointLimits.__dataclass_fields__)
    cols = {n: np.full(rows.size, getattr(base, n) or 0, dtype=np.int64) for n in names}
    for flag, name in LIMIT_PARAMS.items():
        if flag in params:
            cols[name] = params[flag].astype(np.int64)
    if default_n is not None:
        free = ~np.any(np.stack([cols[n] for n in names]) > 0, axis=0)
        cols["global_batch"] = np.where(free, default_n, cols["global_batch"])
    if pipeline:  # one sequence per micro-batch, or G x b of the given tile sizes
        micro = data_parallel * np.maximum(cols["tiles"], 1) * np.maximum(cols["tile_batch"], 1)
        # review30: where they do not divide the global batch, M stays free and the point is refused below naming the
        # tile or the ranks, as plan refuses it (M = N // micro named a --grad-accum nobody gave)
        alone = (cols["global_batch"] > 0) & (cols["micro_batches"] == 0) & (cols["global_batch"] % micro == 0)
        cols["micro_batches"] = np.where(alone, cols["global_batch"] // micro, cols["micro_batches"])
    table = np.stack([cols[n] for n in names], axis=1)
    combos, inverse = np.unique(table, axis=0, return_inverse=True)
    valid = np.ones(rows.size, dtype=bool)
    for i, combo in enumerate(combos):
        try:
            BatchLimits(**{n: int(v) or None for n, v in zip(names, combo)}).validate(data_parallel)
        except BtacalcError as exc:
            bad = np.flatnonzero(inverse.reshape(-1) == i)
            valid[bad] = False
            out.fail(rows[bad], out.say(exc))
    return PointLimits(**cols), valid


def _refuse_chunked(model: ModelSpec, seq: np.ndarray, valid: np.ndarray, rows: np.ndarray, out: _Columns) -> None:
    """llama4: the points whose sequence is longer than the model's attention chunk, recorded as refused and left out
    (ModelSpec.chunk_refusal; a group's models share their attention)."""
    for s in np.unique(seq[valid]).tolist():
        refusal = model.chunk_refusal(int(s))
        if refusal is not None:
            bad = valid & (seq == s)
            valid[bad] = False
            out.fail(rows[bad], out.say(BtacalcError(refusal)))


def _neutral_seq(request: ExecutionRequest, model: ModelSpec) -> int:
    """hostile39: the sequence length a grid over seq resolves its layouts at, one that every sequence rule takes (2·CP
    chunks, TP dividing each CP rank's tokens, Llama 4's attention chunk): the default 4,096 rounded up to the layout's
    unit, else the longest multiple of it within the chunk. Resolved at the default length, `--cp 3 --vary seq=6,12`
    refused every point for a 4,096 nobody gave, and `--tp 2 --vary seq=3` planned a point `plan` refuses; each point's
    own length is checked in `_refuse_chunked` and `_refuse_sequences`, with `plan`'s messages."""
    tp, cp = request.tensor_parallel or 1, request.context_parallel or 1
    unit = math.lcm(2 * cp if cp > 1 else 1, cp * tp)
    seq = -(-DEFAULT_SEQ_LEN // unit) * unit
    if model.attention_chunk and seq > model.attention_chunk:
        seq = max(unit, model.attention_chunk // unit * unit)
    return seq


def _refuse_sequences(layout: Layout, model: ModelSpec, seq: np.ndarray, valid: np.ndarray, rows: np.ndarray,
                      out: _Columns) -> None:
    """hostile39: the points whose sequence length the layout does not take (Layout.check_sequence), recorded as
    refused with `plan`'s message and left out."""
    bad = valid & (seq % layout.sequence_multiple() != 0)
    for s in np.unique(seq[bad]).tolist():
        try:
            layout.check_sequence(model, int(s))
        except BtacalcError as exc:
            at = valid & (seq == s)
            valid[at] = False
            out.fail(rows[at], out.say(exc))


def _take(limits: PointLimits, part: np.ndarray) -> PointLimits:
    return PointLimits(**{n: getattr(limits, n)[part] for n in PointLimits.__dataclass_fields__})


def record(problem: Problem, found: Search, g1: Search, g1_index: np.ndarray,
           dense: tuple[np.ndarray, np.ndarray], rows: np.ndarray, out: _Columns) -> None:
    """Write the plan and throughput columns of the points of one search (`plan`'s fields, on arrays)."""
    points = rows.size
    lay = problem.layout
    seq = np.broadcast_to(np.asarray(problem.run.seq_len, dtype=np.int64), (points,))
    fits, g, b, m, _ = found.shapes_of()
    n = g * b
    put = lambda name, values: out.put(rows, name, values)  # noqa: E731
    for name, values in (("tiles", g), ("tile_batch", b), ("global_batch", n), ("micro_batches", m),
                         ("step_batch", lay.data_parallel * m * n), ("tokens_per_step", n * seq),
                         ("cluster_tokens_per_step", lay.data_parallel * m * n * seq),
                         ("tokens_per_expert", _tokens_per_expert(problem, seq, n)),
                         ("fits", fits), ("memory_evaluations", found.shapes)):
        put(name, values)
    put("devices", [lay.devices] * points)
    put("objective", [found.objective] * points)
    put("binding_constraint", list(found.binding))
    put("tile_constraint", list(found.tile))
    put("explanation", [found.explain(i) for i in range(points)])
    put("alternative", _alternatives(problem, found, seq))
    _throughput(problem, found, g1, g1_index, dense, rows, out)


def no_fit_verdicts(problem: Problem, found: Search, limits: PointLimits, rows: np.ndarray, out: _Columns) -> None:
    """Points without a fitting shape get `plan`'s verdict (`suggest.no_fit`: memory, a fixed size or a
    cap) and, when a fixed micro-batch binds, `plan`'s shape (that G*b as tiles of one sequence)."""
    idx = np.flatnonzero(~found.shapes_of()[0])
    if not idx.size:
        return
    ones = np.ones(idx.size, dtype=np.int64)
    one_fits = PointMemory(problem, rows.size).fits(idx, ones, ones)
    names = list(PointLimits.__dataclass_fields__)
    seq = np.broadcast_to(np.asarray(problem.run.seq_len), (rows.size,))
    lay = problem.layout
    for j, i in enumerate(idx.tolist()):
        point = SimpleNamespace(**{n: int(getattr(limits, n)[i]) for n in names})
        why = no_fit(bool(one_fits[j]), point, lay.data_parallel)
        row = rows[[i]]
        for name in ("binding_constraint", "tile_constraint"):
            out.put(row, name, [why.constraint])
        out.put(row, "explanation", [why.explanation])
        if why.shown_batch is not None:
            n, m = why.shown_batch, int(found.fallback[2][i])
            step = lay.data_parallel * m * n  # N = DP*M*G*b sequences: the step's tokens are N*s, not devices*M*G*b*s
            for name, value in (("tiles", n), ("tile_batch", 1), ("global_batch", n), ("step_batch", step),
                                ("tokens_per_step", n * int(seq[i])), ("cluster_tokens_per_step", step * int(seq[i]))):
                out.put(row, name, np.array([value]))
            out.put(row, "tokens_per_expert", _tokens_per_expert(problem.at_points(np.array([i])), np.array([int(seq[i])]),
                                                                 np.array([n])))


def _tokens_per_expert(problem: Problem, seq: np.ndarray, n: np.ndarray) -> np.ndarray:
    """`plan.tokens_per_expert` on arrays (k and E per point when the points' models differ)."""
    model, tokens = problem.model, n * seq
    if not model.is_moe:
        return tokens.astype(float)
    k, experts = problem.symbols.get("k", model.top_k), problem.symbols.get("E", model.num_experts)
    return problem.layout.expert_parallel * tokens * k / experts


def _alternatives(problem: Problem, found: Search, seq: np.ndarray) -> list[Optional[dict[str, Any]]]:
    """Per point, the other objective's plan when it differs (as `plan.alternative`)."""
    other = next(o for o in ("throughput", "density") if o != found.objective)
    fits, g, b, m, _ = found.shapes_of()
    ofits, og, ob, om, otps = found.shapes_of(other)
    differs = np.flatnonzero(fits & ofits & ((g != og) | (b != ob) | (m != om)))
    out: list[Optional[dict[str, Any]]] = [None] * g.size
    if not differs.size:
        return out
    n = og * ob
    te = _tokens_per_expert(problem, seq, n)
    dp = problem.layout.data_parallel
    for i in differs.tolist():
        out[i] = {"objective": other, "tiles": int(og[i]), "tile_batch": int(ob[i]), "micro_batches": int(om[i]),
                  "global_batch": int(n[i]), "step_batch": dp * int(om[i]) * int(n[i]),
                  "tokens_per_expert": float(te[i]), "tokens_per_s": float(otps[i])}
    return out


def _throughput(problem: Problem, found: Search, g1: Search, g1_index: np.ndarray,
                dense: tuple[np.ndarray, np.ndarray], rows: np.ndarray, out: _Columns) -> None:
    """The throughput columns of the points that fit: the step time at the chosen shapes (one pass),
    the best untiled shape's and the dense model's tokens/s."""
    fit = np.flatnonzero(found.best >= 0)
    if not fit.size:
        return
    k = fit.size
    _, g, b, m, _ = (a[fit] for a in found.shapes_of())
    at = problem.at_points(fit) if np.ndim(problem.run.seq_len) else problem
    st: StepTime = step_time(at, g.astype(float), b.astype(float), micro_batches=m.astype(float))
    vec = lambda v: np.broadcast_to(np.asarray(v, dtype=float), (k,))  # noqa: E731
    tps = vec(st.tokens_per_s)
    j = g1_index[fit]
    has_g1 = j >= 0
    tps_g1 = np.where(has_g1, g1.tokens_per_s[np.maximum(j, 0)] if g1.tokens_per_s.size else np.nan, np.nan)
    step_g1 = np.where(has_g1, g1.step_time_s[np.maximum(j, 0)] if g1.step_time_s.size else np.nan, np.nan)
    dense_tps, dense_n = dense[0][fit], dense[1][fit]
    power_kw = problem.layout.devices * problem.hardware.power_per_device_w / 1e3
    r = rows[fit]
    for name, values in (("step_time_s", vec(st.step_time_s)), ("tokens_per_s", tps),
                         ("tokens_per_s_per_kw", tps / power_kw), ("mfu", vec(st.mfu)),
                         ("relative_to_dense", tps / dense_tps), ("tokens_per_s_g1", tps_g1),
                         ("relative_to_dense_g1", tps_g1 / dense_tps), ("step_time_s_g1", step_g1),
                         ("dense_tokens_per_s", dense_tps), ("tiling_overhead_s", vec(st.tiling_overhead_s)),
                         ("stream_bound_share", vec(st.stream_bound_share))):
        out.put(r, name, [None if v != v else v for v in values.tolist()])  # nan: no such plan
    out.put(r, "tile_batch_g1", [int(g1.cand.tile_batch[x]) if x >= 0 else None for x in j.tolist()])
    out.put(r, "dense_global_batch", [int(x) if x else None for x in dense_n.tolist()])
    out.put(r, "overlap_streaming", [streaming_overlap(problem)] * k)
    out.put(r, "compute_efficiency", [compute_efficiency(problem)] * k)
    out.put(r, "dominant_phase", [""] * k)
    out.put(r, "critical_stage", [0] * k)  # a sweep's layouts have one pipeline stage
    expected = expected_error(kind_of(problem))
    out.put(r, "expected_error", [expected.model_dump() if expected is not None else None] * k)  # streamed as JSON
    sensitivity = routing_sensitivity(at, g.astype(float), b.astype(float), m.astype(float))
    out.put(r, "routing_sensitivity", [None] * k if sensitivity is None else vec(sensitivity).tolist())
    phases = {name: vec(v) for name, v in st.phase_time_s.items()}
    comm = {name: vec(v) for name, v in st.communication_s.items()}
    for x, row in enumerate(r.tolist()):
        out.times[row] = (phases, comm, x)
