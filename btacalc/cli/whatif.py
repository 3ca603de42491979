"""`btacalc whatif`: the hardware or model value at which a plan reaches a target."""

from __future__ import annotations

from typing import Any, Optional

import typer

from .console import model_json
from .groups import LayoutOptions, RecipeOptions, takes_option_groups
from .options import (refuse_fsdp_only, Accounting, AccountingOpt, Attention, AttentionOpt, CausalOpt, DevicesOpt,
                      EpOpt, ExpertFfnOpt, ExpertsOpt, FixedActiveOpt, GlobalBatchOpt, GpusPerNodeOpt, GradAccumOpt,
                      HwOpt, Loss, LossOpt, MaxGlobalBatchOpt, MaxTileBatchOpt, MemoryModelChoice, MemoryModelOpt,
                      MicroBatchOpt, ModelOpt, NameOpt, OutputOpt, OverlapA2aOpt, OverlapOpt, Precision, PrecisionOpt,
                      RecomputeOpt, SeqOpt, TileBatchOpt, TilesOpt, TopKOpt, ZeroOpt, check_bounds, outputs, value,
                      write_outputs)

EXAMPLES = ("Examples:\n\n"
            "  btacalc whatif --model qwen3-30b-a3b --hw wse2 --top-k 1 --fixed-active --target relative_to_dense=0.85 "
            "--solve-for sram_bytes\n\n"
            "  btacalc whatif --hw wse2 --top-k 1 --fixed-active --grad-accum 16 --target relative_to_dense=0.85 "
            "--solve-for offchip_bandwidth_bytes_per_s,memoryx_bandwidth_bytes_per_s\n\n"
            "  btacalc whatif --hw wse3 --target tokens_per_s=50000 --solve-for sram_bytes --json\n\n"
            "  btacalc whatif --hw wse2 --top-k 1 --fixed-active --target relative_to_dense=0.85 --solve-for layers\n\n"
            "  btacalc whatif --hw h100 --devices 16 --tp 2 --ep 8 --global-batch 256 --micro-batch 1 "
            "--target tokens_per_s=92000 --solve-for chip.peak_flops_per_s")


def whatif(
    target: str = typer.Option(..., "--target", help="METRIC=VALUE to reach: tokens_per_s, relative_to_dense, mfu or "
                               "tokens_per_s_per_kw."),
    solve_for: str = typer.Option(..., "--solve-for", help="A hardware number (e.g. offchip_bandwidth_bytes_per_s, "
                                  "sram_bytes, chip.peak_flops_per_s; several, comma-separated, move together) or "
                                  "a model value (layers)."),
    model: str = ModelOpt,
    name: Optional[str] = NameOpt,
    hw: str = HwOpt,
    seq: Optional[int] = SeqOpt,
    global_batch: Optional[int] = GlobalBatchOpt,
    micro_batch: Optional[int] = MicroBatchOpt,
    tiles: Optional[int] = TilesOpt,
    tile_batch: Optional[int] = TileBatchOpt,
    max_global_batch: Optional[int] = MaxGlobalBatchOpt,
    max_tile_batch: Optional[int] = MaxTileBatchOpt,
    experts: Optional[int] = ExpertsOpt,
    top_k: Optional[int] = TopKOpt,
    expert_ffn: Optional[int] = ExpertFfnOpt,
    fixed_active: bool = FixedActiveOpt,
    recompute: Optional[str] = RecomputeOpt,
    attention: Optional[Attention] = AttentionOpt,
    causal: Optional[bool] = CausalOpt,
    loss: Optional[Loss] = LossOpt,
    accounting: Optional[Accounting] = AccountingOpt,
    overlap: bool = OverlapOpt,
    memory_model: Optional[MemoryModelChoice] = MemoryModelOpt,
    devices: int = DevicesOpt,
    ep: Optional[int] = EpOpt,
    zero: Optional[int] = ZeroOpt,
    gpus_per_node: Optional[int] = GpusPerNodeOpt,
    overlap_a2a: bool = OverlapA2aOpt,
    grad_accum: Optional[int] = GradAccumOpt,
    layout: LayoutOptions = LayoutOptions(),  # the shared GPU layout options (takes_option_groups)
    precision: Optional[Precision] = PrecisionOpt,
    recipe: RecipeOptions = RecipeOptions(),  # the shared recipe options (takes_option_groups)
    as_json: bool = typer.Option(False, "--json", help="Print the answer as JSON on stdout."),
    output: Optional[str] = OutputOpt,
) -> int:
    """What would it take: the value of one hardware number (or of the model's depth)
    at which the plan reaches a target, its ratio to today's value, and what binds along the way.
    Every trial is a plan, solved as `plan` solves it: the options it shares with `plan` mean the same.

    Exit 0 when the target is reached within 1/1000x..1000x of today's value, 1 when it is not, 2 on bad input.
    """
    from ..config.execution import BatchLimits, ExecutionRequest
    from ..config.hardware import resolve_hardware
    from ..config.presets import resolve_model
    from ..planning.whatif import whatif as run_whatif

    check_bounds({"--micro-batch": micro_batch, "--grad-accum": grad_accum})
    refuse_fsdp_only("whatif", recompute, value(loss))
    spec = resolve_model(model, name).with_overrides(experts, top_k, expert_ffn, fixed_active)
    request = ExecutionRequest(
        seq_len=seq, recompute=recompute, attention=value(attention), causal=causal, loss=value(loss),
        accounting=value(accounting), memory_model=value(memory_model), overlap_streaming=overlap,
        devices=devices, expert_parallel=ep, zero_stage=zero, devices_per_node=gpus_per_node,
        overlap_all_to_all=overlap_a2a, micro_batches=grad_accum, precision=value(precision),
        limits=BatchLimits(global_batch, tiles, tile_batch, max_global_batch, max_tile_batch, micro_batch=micro_batch),
        **recipe.request_fields(), **layout.request_fields())
    outs = outputs(output, as_json, inputs={"--model": model, "--hw": hw})
    return _written(run_whatif(spec, resolve_hardware(hw), request, target, solve_for), outs)


def _written(result: Any, outs: Any) -> int:
    """The answer as JSON (--output, --json) or as a table; exit 0 when the target is reached, else 1."""
    text = model_json(result)

    def table() -> Any:
        from ..output.whatif_tables import whatif_renderable

        return whatif_renderable(result)

    write_outputs(outs, {"--output": text, "--json": text}, table)
    return 0 if result.reached else 1


def register(app: typer.Typer) -> None:
    app.command(epilog=EXAMPLES)(takes_option_groups(whatif))
