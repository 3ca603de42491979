"""`btacalc compare`: one model on several devices (and GPU counts), side by side.

Each row is a full plan (`plan.make_plan`) reduced to what a comparison needs. A wafer-scale row is
one system (weights streamed or resident, whichever `--memory-model` resolves to); a GPU row is N
devices with expert parallelism and ZeRO. With `devices=None` ("auto") a GPU row uses the smallest
power-of-two device count whose per-device shard fits (`cluster.min_devices`).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

from pydantic import BaseModel, Field

from .cluster import min_devices
from .errors import BtacalcError
from .hardware import HardwareProfile
from .models import ModelSpec
from .parallel import Parallelism, auto_expert_parallel
from .plan import PlanReport, make_plan
from .run import Problem, run_options_for

SCHEMA_VERSION = 1


class CompareRow(BaseModel):
    hardware: str
    display_name: str
    devices: int
    expert_parallel: int
    zero_stage: int
    micro_batches: int = 1
    memory_model: str
    recompute: str
    attention: str
    fits: bool
    tiles: Optional[int] = Field(None, description="G per device")
    tile_batch: Optional[int] = Field(None, description="b per device")
    tokens_per_expert: Optional[float] = Field(None, description="T_e per expert replica")
    step_time_s: Optional[float] = None
    tokens_per_s: Optional[float] = Field(None, description="all devices")
    tokens_per_s_per_device: Optional[float] = None
    mfu: Optional[float] = None
    relative_to_dense: Optional[float] = None
    bta_gain: Optional[float] = Field(None, description="tokens/s at the solver's G over tokens/s at G = 1")
    power_kw: float = Field(description="devices x system power per device (profile system_power_w, else power_w) / 1000")
    tokens_per_s_per_kw: Optional[float] = None
    binding_constraint: str
    dominant_phase: Optional[str] = None
    memory_total_bytes: int = Field(description="per device")
    usable_memory_bytes: int
    note: str = ""


class CompareResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    model: str
    params_total: int
    seq_len: int
    rows: list[CompareRow]


def _row(report: PlanReport, profile: HardwareProfile) -> CompareRow:
    par, th, plan = report.parallelism, report.throughput, report.plan
    fits = plan.fits and th is not None
    g1 = th.tokens_per_s_g1 if th else None
    return CompareRow(
        hardware=profile.name, display_name=profile.display_name, devices=par.devices,
        expert_parallel=par.expert_parallel, zero_stage=par.zero_stage, micro_batches=par.micro_batches,
        memory_model=report.inputs.memory_model,
        recompute=report.inputs.recompute, attention=report.inputs.attention, fits=fits,
        tiles=plan.tiles if fits else None, tile_batch=plan.tile_batch if fits else None,
        tokens_per_expert=plan.tokens_per_expert if fits else None,
        step_time_s=th.step_time_s if th else None, tokens_per_s=th.tokens_per_s if th else None,
        tokens_per_s_per_device=th.tokens_per_s / par.devices if th else None, mfu=th.mfu if th else None,
        relative_to_dense=th.relative_to_dense if th else None,
        bta_gain=th.tokens_per_s / g1 if th and g1 else None,
        power_kw=par.devices * profile.power_per_device_w / 1e3,
        tokens_per_s_per_kw=th.tokens_per_s_per_kw if th else None,
        binding_constraint=plan.binding_constraint if fits else "memory",
        dominant_phase=th.dominant_phase if th else None,
        memory_total_bytes=report.memory_bytes["total"], usable_memory_bytes=report.memory_bytes["usable_capacity"],
        note="" if fits else "; ".join(report.suggestions) or "does not fit",
    )


def compare(model: ModelSpec, profiles: Sequence[HardwareProfile], devices: Optional[Sequence[int]] = None,
            expert_parallel: Optional[int] = None, zero_stage: int = 1, devices_per_node: Optional[int] = None,
            overlap_all_to_all: bool = False, seq_len: Optional[int] = None, recompute: Optional[str] = None,
            attention: Optional[str] = None, memory_model: str = "auto", overlap: bool = True,
            micro_batches: int = 1) -> CompareResult:
    """One row per wafer profile, and per (GPU profile, device count). `devices=None`: the smallest
    power-of-two GPU count that fits. Recompute and attention default to each device's own defaults."""
    if not profiles:
        raise BtacalcError("--hw: give at least one hardware profile")
    rows: list[CompareRow] = []
    params_total = 0
    seq = seq_len
    for profile in profiles:
        run, defaults = run_options_for(profile, seq_len, recompute, attention, memory_model=memory_model)
        seq = run.seq_len
        counts: Sequence[Optional[int]]
        if profile.family == "wse":
            counts = [1]
        else:
            counts = list(devices) if devices else [None]
        for n in counts:
            base = Parallelism(1, 1, zero_stage if profile.family == "gpu" else 0, devices_per_node, overlap_all_to_all,
                               micro_batches)
            note = ""
            if n is None:
                fit = min_devices(Problem(model, profile, run, base), expert_parallel, escalate=True)
                if fit is None:
                    n, par, row_run = 1, base, run
                    note = "no power-of-two count up to 16,384 devices fits, even with ZeRO-3 and full recomputation"
                else:
                    par, row_run = fit.parallel, fit.run
                    if row_run.recompute != run.recompute:
                        defaults = {**defaults, "recompute": f"full: {run.recompute} does not fit at {par.devices} devices"}
            else:
                ep = expert_parallel if expert_parallel is not None and profile.family == "gpu" else \
                    auto_expert_parallel(n, model.num_experts)
                par = Parallelism(n, ep, base.zero_stage if n > 1 else 0, devices_per_node, overlap_all_to_all,
                                  micro_batches)
                row_run = run
            report = make_plan(model, profile, row_run, defaults=defaults, overlap=overlap, parallel=par)
            params_total = report.model.params_total
            row = _row(report, profile)
            if note:
                row.note = note
            rows.append(row)
    return CompareResult(model=model.name, params_total=params_total, seq_len=seq or 0, rows=rows)


CSV_FIELDS = list(CompareRow.model_fields)


def csv_text(fields: list[str], records: Iterable[dict[str, Any]]) -> str:
    """CSV with a header row; one line per record (missing keys empty)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    w.writerows(records)
    return buf.getvalue()


def to_csv(result: CompareResult) -> str:
    return csv_text(CSV_FIELDS, (r.model_dump() for r in result.rows))


def plot(result: CompareResult, path: str) -> None:
    """Two panels: tokens/s (all devices of the row) and tokens/s per kW, one bar per row."""
    from .plotting import pyplot, save

    plt = pyplot(path)
    rows = [r for r in result.rows if r.fits]
    if not rows:
        raise BtacalcError("--plot: no device fits, nothing to draw")
    labels = [f"{r.hardware} x{r.devices}" if r.devices > 1 else r.hardware for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 0.6 * len(rows) + 2.0), sharey=True)
    y = range(len(rows))
    ax1.barh(y, [r.tokens_per_s for r in rows], color="tab:blue")
    ax2.barh(y, [r.tokens_per_s_per_kw for r in rows], color="tab:green")
    for i, r in enumerate(rows):
        ax1.annotate(f" G={r.tiles} b={r.tile_batch}, {r.dominant_phase}", (r.tokens_per_s, i), va="center", fontsize=7)
    ax1.set_yticks(list(y), labels)
    ax1.invert_yaxis()
    ax1.set_xlim(0, 1.45 * max(r.tokens_per_s or 0.0 for r in rows))
    thousands = plt.FuncFormatter(lambda v, _: f"{v / 1e3:g}k")
    for ax in (ax1, ax2):
        ax.xaxis.set_major_formatter(thousands)
    ax1.set_xlabel("tokens/s (all devices of the row)")
    ax2.set_xlabel("tokens/s per kW (system power)")
    fig.suptitle(f"{result.model}, s = {result.seq_len}: solver's G and b per row")
    fig.tight_layout()
    save(fig, path)
