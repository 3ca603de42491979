"""`btacalc compare` and `btacalc crossover`: the same question asked of wafers and GPU clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import BtacalcError
from .options import (Attention, AttentionOpt, GpusPerNodeOpt, GradAccumOpt, MemoryModelChoice, MemoryModelOpt,
                      ModelOpt, OutputOpt, OverlapA2aOpt, OverlapOpt, Recompute, RecomputeOpt, SeqOpt, emit_result,
                      value)

HW_LIST_DEFAULT = "wse2,wse3,a100-80gb,b200"
COMPARE_EXAMPLES = ("Examples:\n\n"
                    "  btacalc compare --model qwen3-30b-a3b --hw wse2,wse3,a100-80gb,b200\n\n"
                    "  btacalc compare --hw wse3,b200 --devices 8,64 --ep 8 --json\n\n"
                    "  btacalc compare --hw wse3,a100-80gb,b200 --csv compare.csv --plot compare.png")
CROSSOVER_EXAMPLES = ("Examples:\n\n"
                      "  btacalc crossover --hw wse2,wse3,a100-80gb,b200\n\n"
                      "  btacalc crossover --hidden 512:4096:256 --plot crossover.png\n\n"
                      "  btacalc crossover --hw wse3,b200 --json")


def _profiles(hw: str) -> list[Any]:
    from ..config.hardware import resolve_hardware

    names = [h.strip() for h in hw.split(",") if h.strip()]
    if not names:
        raise BtacalcError("{hardware}: give a comma-separated list of profiles, e.g. wse3,b200")
    return [resolve_hardware(n) for n in names]


def compare(
    model: str = ModelOpt,
    hw: str = typer.Option(HW_LIST_DEFAULT, "--hw", help="Comma-separated hardware profiles."),
    devices: str = typer.Option("auto", "--devices", "-n", help="GPU counts, e.g. 8,64; auto: the smallest power of "
                                "two that fits (trying ZeRO-3 and full recomputation). Wafer rows are one system."),
    ep: Optional[int] = typer.Option(None, "--ep", min=1, help="Expert-parallel degree [default: gcd(devices, E)]."),
    zero: Optional[int] = typer.Option(None, "--zero", min=0, max=3, help="ZeRO stage on multi-GPU rows "
                                       "[default: 1 with several devices]."),
    gpus_per_node: Optional[int] = GpusPerNodeOpt,
    overlap_a2a: bool = OverlapA2aOpt,
    grad_accum: Optional[int] = GradAccumOpt,
    seq: Optional[int] = SeqOpt,
    recompute: Optional[Recompute] = RecomputeOpt,
    attention: Optional[Attention] = AttentionOpt,
    memory_model: Optional[MemoryModelChoice] = MemoryModelOpt,
    overlap: bool = OverlapOpt,
    as_json: bool = typer.Option(False, "--json", help="Print {rows: [...]} as JSON on stdout."),
    output: Optional[Path] = OutputOpt,
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Write one CSV row per device set."),
    plot_path: Optional[str] = typer.Option(None, "--plot", help="Bar chart of tokens/s and tokens/s per kW (.png/.svg)."),
) -> int:
    """One model on several devices side by side: fits, G, b, tokens per expert, step time, tokens/s,
    MFU, vs dense, binding constraint, dominant phase, tokens/s per kW."""
    from ..config.execution import BatchLimits, ExecutionRequest
    from ..config.presets import resolve_model
    from ..output.cluster_tables import compare_renderable
    from ..output.csvfiles import compare_csv
    from ..output.plots import compare_plot
    from ..planning.compare import compare as run_compare
    from .parsing import parse_values

    spec = resolve_model(model)
    profiles = _profiles(hw)
    counts = None if devices.strip() == "auto" else parse_values(devices, "--devices")
    if memory_model == MemoryModelChoice.weight_streaming and any(p.family == "gpu" for p in profiles):
        raise BtacalcError("{memory_model} weight_streaming is modelled for wafer-scale profiles only")
    request = ExecutionRequest(seq_len=seq, recompute=value(recompute), attention=value(attention),
                               memory_model=value(memory_model), overlap_streaming=overlap, expert_parallel=ep,
                               zero_stage=zero, devices_per_node=gpus_per_node, overlap_all_to_all=overlap_a2a,
                               limits=BatchLimits(micro_batches=grad_accum))
    result = run_compare(spec, profiles, counts, request)
    emit_result(result, as_json, output, csv_path, compare_csv, plot_path, compare_plot, compare_renderable)
    return 0


def crossover(
    hw: str = typer.Option(HW_LIST_DEFAULT, "--hw", help="Comma-separated hardware profiles."),
    family: str = typer.Option("qwen3-moe", "--family", help="Model family to scale (qwen3-moe)."),
    hidden: str = typer.Option("256:7168:256", "--hidden", help="Hidden sizes: a,b,c or start:stop:step (multiples of 256)."),
    seq: Optional[int] = SeqOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    output: Optional[Path] = OutputOpt,
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Write one CSV row per (model, device)."),
    plot_path: Optional[str] = typer.Option(None, "--plot", help="tokens/s per kW vs parameters (.png/.svg)."),
) -> int:
    """Scale a model family from about 0.1B to 1.3T parameters: per device, the memory regime
    (resident / weight streaming on a wafer; GPUs needed), tokens/s per kW, and where regimes change."""
    from ..output.cluster_tables import crossover_renderable
    from ..output.csvfiles import crossover_csv
    from ..output.plots import crossover_plot
    from ..planning.crossover import crossover as run_crossover
    from .parsing import parse_values

    profiles = _profiles(hw)
    result = run_crossover(profiles, family, parse_values(hidden, "--hidden"), seq)
    emit_result(result, as_json, output, csv_path, crossover_csv, plot_path, crossover_plot, crossover_renderable)
    return 0


def register(app: typer.Typer) -> None:
    app.command(epilog=COMPARE_EXAMPLES)(compare)
    app.command(epilog=CROSSOVER_EXAMPLES)(crossover)
