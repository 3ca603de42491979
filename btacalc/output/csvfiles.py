"""CSV renderings of library results (one row per point, device set or family member).

Booleans are written as `true`/`false`, empty cells for missing values.
"""

from __future__ import annotations

import csv
import io
from typing import Any, Iterable

from ..planning.compare import CompareResult, CompareRow
from ..planning.crossover import CrossoverResult
from ..planning.sweep import SweepBlock, SweepResult


def _cell(v: Any) -> Any:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else v


COMPARE_FIELDS = list(CompareRow.model_fields)


def csv_text(fields: list[str], records: Iterable[dict[str, Any]]) -> str:
    """CSV with a header row; one line per record (missing keys empty)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    w.writerows({k: _cell(v) for k, v in r.items()} for r in records)
    return buf.getvalue()


def compare_csv(result: CompareResult) -> str:
    return csv_text(COMPARE_FIELDS, ({**r.model_dump(), "run_options": " ".join(r.run_options)} for r in result.rows))


def crossover_csv(result: CrossoverResult) -> str:
    fields = ["model", "hidden_size", "params_total", "hardware", "regime", "devices", "tiles", "tile_batch",
              "tokens_per_s", "tokens_per_s_per_kw", "mfu", "dominant_phase", "binding_constraint"]
    return csv_text(fields, ({**p.row.model_dump(), **p.model_dump(exclude={"row"})} for p in result.points))


SWEEP_COLUMNS = ["tiles", "tile_batch", "micro_batches", "global_batch", "tokens_per_expert", "fits",
                 "binding_constraint", "step_time_s", "tokens_per_s", "mfu", "relative_to_dense", "tile_batch_g1",
                 "tokens_per_s_g1", "relative_to_dense_g1"]


def sweep_csv_header(names: list[str]) -> str:
    return csv_text(names + SWEEP_COLUMNS + ["error"], [])


def sweep_csv_rows(block: SweepBlock) -> str:
    """The CSV lines (no header) of a block of sweep points."""
    names = list(block.params)
    cols = [block.params[n].tolist() for n in names] + [block.columns[c].tolist() for c in SWEEP_COLUMNS]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerows([_cell(v) for v in row] + [_cell(e)] for row, e in zip(zip(*cols), block.errors))
    return buf.getvalue()


def sweep_csv(result: SweepResult) -> str:
    names = list(result.points[0].params) if result.points else []
    records = []
    for p in result.points:
        merged = {**(p.throughput.model_dump() if p.throughput else {}), **p.plan.model_dump()}
        records.append({**p.params, **{c: merged.get(c) for c in SWEEP_COLUMNS}, "error": p.error})
    return csv_text(names + SWEEP_COLUMNS + ["error"], records)
