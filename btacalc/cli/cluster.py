"""`btacalc compare` and `btacalc crossover`: the same question asked of wafers and GPU clusters."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import typer

from ..errors import BtacalcError
from .groups import LayoutOptions, RecipeOptions, takes_option_groups
from .options import (refuse_fsdp_only, Accounting, AccountingOpt, Attention, AttentionOpt, CausalOpt, ExpertFfnOpt,
                      ExpertsOpt, FixedActiveOpt, TopKOpt, GpusPerNodeOpt, GradAccumOpt, Loss, LossOpt, Match,
                      MemoryModelChoice, MemoryModelOpt, ModelOpt, NameOpt, OutputOpt, OverlapA2aOpt, OverlapOpt,
                      QuietOpt, RecomputeOpt, SeqOpt, check_bounds, emit_result, help_text, outputs, value, with_flags)
from .progress import progress
from .completion import complete_hardware_list

# `compare --devices`: at most this many GPU counts per run (each is a full plan per GPU profile).
MAX_DEVICE_COUNTS = 64

HW_LIST_DEFAULT = "wse2,wse3,a100-80gb,b200"
COMPARE_EXAMPLES = ("Examples:\n\n"
                    "  btacalc compare --model qwen3-30b-a3b --hw wse2,wse3,a100-80gb,b200\n\n"
                    "  btacalc compare --hw wse3,b200 --devices 8,64 --ep 8 --json\n\n"
                    "  btacalc compare --hw wse3,a100-80gb,b200 --csv compare.csv --plot compare.png\n\n"
                    "  btacalc compare --hw wse2,b200 --systems 4 --match power --global-batch 96\n\n"
                    "  btacalc compare --hw wse3,h100,gb200 --search --plot compare.png\n\n"
                    "  btacalc compare --hw wse3,h100 --devices 16 --tp 2 --ep 8 --global-batch 256")
CROSSOVER_EXAMPLES = ("Examples:\n\n"
                      "  btacalc crossover --hw wse2,wse3,a100-80gb,b200\n\n"
                      "  btacalc crossover --hidden 512:4096:256 --plot crossover.png\n\n"
                      "  btacalc crossover --hw wse3,b200 --json")


def _profiles(hw: str) -> list[Any]:
    from ..config.hardware import resolve_hardware
    from .parsing import comma_entries

    names = comma_entries(hw, "{hardware}", unique=False, paths=True)  # a profile's path may hold commas
    if not names:
        raise BtacalcError("{hardware}: give a comma-separated list of profiles, e.g. wse3,b200")
    profiles = [resolve_hardware(n) for n in names]
    seen = [p.name for p in profiles]
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if twice:  # two rows with one name could not be told apart
        raise BtacalcError(f"{{hardware}}: profile {', '.join(twice)} given twice (a profile's name must be unique "
                           "in one comparison)")
    return profiles


def _precisions(text: Optional[str]) -> list[str]:
    """`--precision bf16,mxfp8`: the names, each checked (unknown: one-line error)."""
    from ..config.precision import recipe
    from .parsing import comma_entries

    names = comma_entries(text or "", "{precision}")
    if text is not None and not names:
        raise BtacalcError("{precision}: give one or more precisions, e.g. bf16,mxfp8")
    for name in names:
        recipe(name)
    return names


def compare(
    model: str = ModelOpt,
    name: Optional[str] = NameOpt,
    experts: Optional[int] = ExpertsOpt,
    top_k: Optional[int] = TopKOpt,
    expert_ffn: Optional[int] = ExpertFfnOpt,
    fixed_active: bool = FixedActiveOpt,
    hw: str = typer.Option(HW_LIST_DEFAULT, "--hw", help="Comma-separated hardware profiles.",
                            autocompletion=complete_hardware_list),
    devices: str = typer.Option("auto", "--devices", "-n", help="GPU counts (also called --gpus or --num-gpus), "
                                "e.g. 8,64; auto: the smallest power of two that fits (trying ZeRO-3 and full "
                                "recomputation where --zero and --recompute are not given), or the --match count."),
    systems: int = typer.Option(1, "--systems", min=1, help="Wafer systems per wafer row (CS-2/CS-3 in data parallel)."),
    match: Optional[Match] = typer.Option(None, "--match", help="GPU count beside the wafer systems: power (whole "
                                          "nodes of similar system power) or devices (as many GPUs as systems)."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", min=1, help="Sequences per optimizer step "
                                               "over all data-parallel ranks of a row (GPUs: Megatron's global batch; "
                                               "wafer rows: over all systems, split into micro-batches that fit)."),
    ep: Optional[int] = typer.Option(None, "--ep", min=1, help=help_text("Expert-parallel degree [default: gcd(devices, "
                                                                         "E)].")),
    zero: Optional[int] = typer.Option(None, "--zero", min=0, max=3, help=help_text("ZeRO stage on multi-GPU rows "
                                       "[default: 1 with several devices].")),
    gpus_per_node: Optional[int] = GpusPerNodeOpt,
    overlap_a2a: bool = OverlapA2aOpt,
    grad_accum: Optional[int] = GradAccumOpt,
    layout: LayoutOptions = LayoutOptions(),  # the shared GPU layout options, for the GPU rows (takes_option_groups)
    search: bool = typer.Option(False, "--search", help="GPU rows: the fastest Megatron layout that fits on their "
                                "devices (TP, PP, VP, CP, EP, ETP, micro-batch, recompute)."),
    seq: Optional[int] = SeqOpt,
    recompute: Optional[str] = RecomputeOpt,
    attention: Optional[Attention] = AttentionOpt,
    causal: Optional[bool] = CausalOpt,
    loss: Optional[Loss] = LossOpt,
    accounting: Optional[Accounting] = AccountingOpt,
    memory_model: Optional[MemoryModelChoice] = MemoryModelOpt,
    overlap: bool = OverlapOpt,
    precision: Optional[str] = typer.Option(None, "--precision", help=help_text(
        "Training precision(s), comma-separated: a row per precision for each GPU profile (bf16, fp16, fp8, "
        "fp8-current, fp8-blockwise, mxfp8, nvfp4; e.g. bf16,mxfp8,nvfp4) [default: bf16]; a wafer row trains in "
        "16-bit (the first 16-bit one given, else bf16).")),
    recipe: RecipeOptions = RecipeOptions(),  # the shared recipe options (takes_option_groups)
    as_json: bool = typer.Option(False, "--json", help="Print {rows: [...]} as JSON on stdout."),
    output: Optional[str] = OutputOpt,
    csv_path: Optional[str] = typer.Option(None, "--csv", help="Write one CSV row per device set."),
    plot_path: Optional[str] = typer.Option(None, "--plot", help="Bar chart of tokens/s and tokens/s per kW (.png/.svg)."),
    quiet: bool = QuietOpt,
) -> int:
    """One model on several devices side by side: fits, G, b, tokens per expert, step time, tokens/s,
    MFU, vs dense, binding constraint, dominant phase, tokens/s per kW."""
    from ..config.execution import BatchLimits, ExecutionRequest
    from ..config.presets import resolve_model
    from ..planning.compare import CompareRequest

    check_bounds({"--systems": systems})
    refuse_fsdp_only("compare", recompute, value(loss))
    outs = outputs(output, as_json, csv_path, plot_path, inputs={"--model": model, "--hw": hw})
    spec, profiles = resolve_model(model, name).with_overrides(experts, top_k, expert_ffn, fixed_active), _profiles(hw)
    counts = _device_counts(devices, match, memory_model, profiles)
    run = ExecutionRequest(seq_len=seq, recompute=recompute, attention=value(attention), causal=causal,
                           loss=value(loss), accounting=value(accounting),
                           memory_model=value(memory_model), overlap_streaming=overlap, expert_parallel=ep,
                           zero_stage=zero, devices_per_node=gpus_per_node, overlap_all_to_all=overlap_a2a,
                           micro_batches=grad_accum, limits=BatchLimits(global_batch=global_batch),
                           **recipe.request_fields(), **layout.request_fields())
    request = CompareRequest(run=run, devices=tuple(counts) if counts else None, systems=systems, match=value(match),
                             wafer_global_batch=global_batch, search=search,
                             precisions=tuple(_precisions(precision)))  # --precision's list makes rows
    result = _compared(spec, profiles, request, quiet)
    _emit_compared(result, as_json, output, csv_path, plot_path, outs)
    return 0


def _emit_compared(result: Any, as_json: bool, output: Optional[str], csv_path: Optional[str],
                   plot_path: Optional[str], outs: Any) -> None:
    """The rows as a table, JSON, CSV and a bar chart, written together."""
    from ..output.cluster_tables import compare_renderable
    from ..output.csvfiles import compare_csv
    from ..output.plots import compare_plot

    emit_result(result, as_json, output, csv_path, compare_csv, plot_path, compare_plot, compare_renderable, outs)


def _device_counts(devices: str, match: Optional[Match], memory_model: Optional[MemoryModelChoice],
                   profiles: list[Any]) -> Optional[Sequence[int]]:
    """--devices as GPU counts (None: auto), checked against --match and --memory-model."""
    from .parsing import parse_values

    counts = None if devices.strip() == "auto" else parse_values(devices, "--devices", limit=MAX_DEVICE_COUNTS)
    if memory_model == MemoryModelChoice.weight_streaming and any(p.family == "gpu" for p in profiles):
        raise BtacalcError("{memory_model} weight_streaming is modelled for wafer-scale profiles only")
    if match is not None and counts is not None:
        raise BtacalcError("{match} sets the GPU counts: leave --devices at auto")
    return counts


def _compared(spec: Any, profiles: list[Any], request: Any, quiet: bool) -> Any:
    """Every row planned (`request`: a CompareRequest), with a progress report."""
    from ..planning.compare import compare as run_compare

    with progress(request.row_count(profiles), "comparing", quiet) as advance:
        return run_compare(spec, profiles, request, progress=advance, say=with_flags)


def crossover(
    hw: str = typer.Option(HW_LIST_DEFAULT, "--hw", help="Comma-separated hardware profiles.",
                            autocompletion=complete_hardware_list),
    family: str = typer.Option("qwen3-moe", "--family", help="Model family to scale (qwen3-moe)."),
    hidden: str = typer.Option("256:7168:256", "--hidden", help="Hidden sizes: a,b,c or start:stop:step (multiples of 256)."),
    seq: Optional[int] = SeqOpt,
    search: bool = typer.Option(False, "--search", help="GPU points: the fastest Megatron layout that fits on the "
                                "smallest fitting power-of-two device count."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    output: Optional[str] = OutputOpt,
    csv_path: Optional[str] = typer.Option(None, "--csv", help="Write one CSV row per (model, device)."),
    plot_path: Optional[str] = typer.Option(None, "--plot", help="tokens/s per kW vs parameters (.png/.svg)."),
    quiet: bool = QuietOpt,
) -> int:
    """Scale a model family from about 0.1B to 1.3T parameters: per device, the memory regime
    (resident / weight streaming on a wafer; GPUs needed), tokens/s per kW, and where regimes change."""
    from ..output.cluster_tables import crossover_renderable
    from ..output.csvfiles import crossover_csv
    from ..output.plots import crossover_plot
    from ..planning.crossover import MAX_HIDDEN_SIZES, check_family
    from ..planning.crossover import crossover as run_crossover
    from .parsing import parse_values

    outs = outputs(output, as_json, csv_path, plot_path, inputs={"--hw": hw})
    profiles = _profiles(hw)
    sizes = parse_values(hidden, "--hidden", limit=MAX_HIDDEN_SIZES)
    check_family(family, sizes)
    with progress(len(set(sizes)) * len(profiles), "scaling the family", quiet) as advance:
        result = run_crossover(profiles, family, sizes, seq, progress=advance, search=search)
    emit_result(result, as_json, output, csv_path, crossover_csv, plot_path, crossover_plot, crossover_renderable, outs)
    return 0


def register(app: typer.Typer) -> None:
    app.command(epilog=COMPARE_EXAMPLES)(takes_option_groups(compare))
    app.command(epilog=CROSSOVER_EXAMPLES)(crossover)
