"""`btacalc plan` and `btacalc sweep`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from ..errors import BtacalcError
from .console import err, out
from .progress import progress
from .options import (Accounting, AccountingOpt, Attention, AttentionOpt, CausalOpt, DevicesOpt, EpOpt, ExpertFfnOpt,
                      ExpertsOpt, FixedActiveOpt, GpusPerNodeOpt, GradAccumOpt, HwOpt, Loss, LossOpt, MemoryModelChoice,
                      MemoryModelOpt, ModelOpt, Objective, ObjectiveOpt, OutputOpt, OverlapA2aOpt, OverlapOpt, Recompute,
                      RecomputeOpt, SeqOpt, TopKOpt, ZeroOpt, emit_json, emit_result, value)

PLAN_EXAMPLES = ("Examples:\n\n"
                 "  btacalc plan --model qwen3-30b-a3b --hw wse3\n\n"
                 "  btacalc plan --hw wse2 --experts 64 --json\n\n"
                 "  btacalc plan --model gpt3-175b --hw a100-80gb --seq 2048 --tiles 1 --tile-batch 1 --recompute none "
                 "--attention eager\n\n"
                 "  btacalc plan --model ./config.json --hw b200 --global-batch 64 --output plan.json\n\n"
                 "  btacalc plan --hw a100-80gb --devices 64 --ep 8 --zero 1")
SWEEP_EXAMPLES = ("Examples:\n\n"
                  "  btacalc sweep --model qwen3-30b-a3b --hw wse2 --vary experts=16,32,64,128\n\n"
                  "  btacalc sweep --hw wse2 --vary top-k=1,2,4,8 --fixed-active --plot topk.png\n\n"
                  "  btacalc sweep --hw wse3 --vary experts=16:128:x2 --vary seq=2048,4096 --csv sweep.csv\n\n"
                  "  btacalc sweep --hw b200 --vary devices=8:128:x2 --ep 8")


def plan(
    model: str = ModelOpt,
    hw: str = HwOpt,
    seq: Optional[int] = SeqOpt,
    global_batch: Optional[int] = typer.Option(None, "--global-batch", min=1, help="Fix N, the sequences per optimizer "
                                               "step over all data-parallel ranks: N = DP·M·G·b."),
    tiles: Optional[int] = typer.Option(None, "--tiles", min=1, help="Fix the number of attention tiles G."),
    tile_batch: Optional[int] = typer.Option(None, "--tile-batch", min=1, help="Fix the tile batch b."),
    max_global_batch: Optional[int] = typer.Option(None, "--max-global-batch", min=1,
                                                   help="Cap N = DP·M·G·b (convergence)."),
    max_tile_batch: Optional[int] = typer.Option(None, "--max-tile-batch", min=1,
                                                 help="Cap the tile batch b (like the vendor's tile cap)."),
    experts: Optional[int] = ExpertsOpt,
    top_k: Optional[int] = TopKOpt,
    expert_ffn: Optional[int] = ExpertFfnOpt,
    fixed_active: bool = FixedActiveOpt,
    recompute: Optional[Recompute] = RecomputeOpt,
    attention: Optional[Attention] = AttentionOpt,
    causal: bool = CausalOpt,
    loss: Optional[Loss] = LossOpt,
    accounting: Accounting = AccountingOpt,
    overlap: bool = OverlapOpt,
    memory_model: Optional[MemoryModelChoice] = MemoryModelOpt,
    devices: int = DevicesOpt,
    ep: Optional[int] = EpOpt,
    zero: Optional[int] = ZeroOpt,
    gpus_per_node: Optional[int] = GpusPerNodeOpt,
    overlap_a2a: bool = OverlapA2aOpt,
    grad_accum: Optional[int] = GradAccumOpt,
    objective: Optional[Objective] = ObjectiveOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON on stdout."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the plan JSON to this file (atomically)."),
    schema: bool = typer.Option(False, "--schema", help="Print the JSON schema of the plan and exit."),
    profile: bool = typer.Option(False, "--profile", help="Print on stderr how many times the model was evaluated "
                                 "and where the time went."),
) -> int:
    """Choose G and b for a model on a device; show parameters, memory, FLOPs and phases.

    Exit code 0 when the plan fits, 1 when it does not (the plan and what would fit are still shown),
    2 on bad input.
    """
    from .. import profiling

    profiling.reset()  # count this command only (tests run many in one process)
    profiling.seconds["start-up (btacalc and the command line)"] = time.perf_counter() - profiling.STARTED
    with profiling.stage("imports (numpy, pydantic models, the model)"):
        from ..config.execution import BatchLimits, ExecutionRequest
        from ..config.hardware import resolve_hardware
        from ..config.presets import resolve_model
        from ..planning.plan import make_plan
        from ..planning.report import PlanReport

    if schema:
        sys.stdout.write(json.dumps(PlanReport.model_json_schema(), indent=2) + "\n")
        return 0
    with profiling.stage("resolve"):
        spec = resolve_model(model).with_overrides(experts, top_k, expert_ffn, fixed_active)
        profile_hw = resolve_hardware(hw)
    request = ExecutionRequest(
        seq_len=seq, recompute=value(recompute), attention=value(attention), causal=causal, loss=value(loss),
        accounting=accounting.value, memory_model=value(memory_model), overlap_streaming=overlap,
        devices=devices, expert_parallel=ep, zero_stage=zero, devices_per_node=gpus_per_node,
        overlap_all_to_all=overlap_a2a, objective=value(objective),
        limits=BatchLimits(global_batch, tiles, tile_batch, max_global_batch, max_tile_batch, grad_accum))
    report = make_plan(spec, profile_hw, request)
    with profiling.stage("output"):
        emit_json(report.model_dump_json(indent=2), as_json, output)
        if not as_json:
            from ..output.tables import plan_renderable

            out.print(plan_renderable(report))
    if profile:
        _print_profile()
    return 0 if report.plan.fits else 1


def _print_profile() -> None:
    from .. import profiling

    total = time.perf_counter() - profiling.STARTED
    c = profiling.counts
    lines = [f"model evaluations {c['model evaluations']} (calls of the generated formulas: one per problem and "
             f"sequence length, i.e. the plan and its dense reference, each with its parameter counts), batch shapes evaluated "
             f"{c['shapes evaluated']:,}, candidate searches {c['candidate searches']}, density searches "
             f"{c['density searches']}, step-time passes {c['step-time passes']}",
             ", ".join(f"{name} {1e3 * s:.1f} ms" for name, s in profiling.seconds.items()) + f"; total {1e3 * total:.1f} ms"]
    for line in lines:
        err.print(f"btacalc profile: {line}", highlight=False, markup=False, soft_wrap=True)


def sweep(
    model: str = ModelOpt,
    hw: str = HwOpt,
    vary: list[str] = typer.Option(..., "--vary", help="NAME=VALUES: a,b,c or start:stop:step or start:stop:xF. "
                                   "Names: experts, top-k, expert-ffn, seq, global-batch, tiles, tile-batch, "
                                   "max-global-batch, max-tile-batch, devices, grad-accum."),
    fixed_active: bool = FixedActiveOpt,
    seq: Optional[int] = SeqOpt,
    recompute: Optional[Recompute] = RecomputeOpt,
    attention: Optional[Attention] = AttentionOpt,
    causal: bool = CausalOpt,
    loss: Optional[Loss] = LossOpt,
    accounting: Accounting = AccountingOpt,
    overlap: bool = OverlapOpt,
    devices: int = DevicesOpt,
    ep: Optional[int] = EpOpt,
    zero: Optional[int] = ZeroOpt,
    gpus_per_node: Optional[int] = GpusPerNodeOpt,
    overlap_a2a: bool = OverlapA2aOpt,
    grad_accum: Optional[int] = GradAccumOpt,
    objective: Optional[Objective] = ObjectiveOpt,
    max_points: Optional[int] = typer.Option(None, "--max-points", min=1, help="Allow a grid of up to this many "
                                             "points (grids above 1,000,000 are refused without it, before any work)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress line on stderr."),
    as_json: bool = typer.Option(False, "--json", help="Print {points: [...]} as JSON on stdout (streamed)."),
    output: Optional[Path] = OutputOpt,
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Write one CSV row per point to this file."),
    plot_path: Optional[str] = typer.Option(None, "--plot", help="Draw relative throughput to FILE.png or .svg "
                                            "(needs btacalc[plot])."),
) -> int:
    """Sweep model or run parameters; every point solved as plan solves it (its G, b and M, and G = 1).

    Points are solved and written in blocks, so output starts early and memory stays bounded. Invalid
    points (e.g. --top-k above --experts) are listed on stderr; exit code 2 when no point is valid.
    """
    from ..config.execution import BatchLimits, ExecutionRequest
    from ..config.hardware import resolve_hardware
    from ..config.presets import resolve_model
    from ..planning.sweep import Grid, iter_sweep
    from .parsing import parse_vary

    grid = Grid.of(parse_vary(vary))
    grid.check(max_points)
    spec, profile = resolve_model(model), resolve_hardware(hw)
    if fixed_active and "top-k" not in grid.names:
        raise BtacalcError("{fixed_active} needs --vary top-k=...")
    request = ExecutionRequest(
        seq_len=seq, recompute=value(recompute), attention=value(attention), causal=causal, loss=value(loss),
        accounting=accounting.value, overlap_streaming=overlap, devices=devices, expert_parallel=ep,
        zero_stage=zero, devices_per_node=gpus_per_node, overlap_all_to_all=overlap_a2a, objective=value(objective),
        limits=BatchLimits(micro_batches=grad_accum))
    from .sweeping import SweepOutputs

    with SweepOutputs(grid, spec.name, profile.name, fixed_active, as_json, output, csv_path, plot_path) as outputs:
        with progress(grid.size, "solving", quiet) as advance:
            for block in iter_sweep(spec, profile, request, grid, fixed_active, max_points):
                outputs.block(block)
                advance(len(block))
        outputs.finish()
    return 0


def register(app: typer.Typer) -> None:
    app.command(epilog=PLAN_EXAMPLES)(plan)
    app.command(epilog=SWEEP_EXAMPLES)(sweep)
