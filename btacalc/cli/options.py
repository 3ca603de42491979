"""Options shared by several commands, the choices they allow, and the step from options to the
library's `ExecutionRequest`. Library errors name parameters; `FLAGS` maps them back to flags."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from ..config.execution import OBJECTIVES
from ..vocabulary import FEATURES, RECOMPUTE_POLICIES
from .console import out

# Library parameter name -> the flag a user types (names not listed map to --name-with-dashes).
FLAGS = {
    "seq_len": "--seq",
    "expert_parallel": "--ep",
    "zero_stage": "--zero",
    "micro_batches": "--grad-accum",
    "devices_per_node": "--gpus-per-node",
    "overlap_all_to_all": "--overlap-a2a",
    "hardware": "--hw",
}


def flag(param: str) -> str:
    return FLAGS.get(param, "--" + param.replace("_", "-"))


def _choices(name: str, values: Any) -> Any:
    """A str Enum for typer from the library's own list of allowed values (one source of truth)."""
    return Enum(name, {str(v): str(v) for v in values}, type=str)


# Allowed values come from the formula catalogue's features and the run options.
Recompute = _choices("Recompute", RECOMPUTE_POLICIES)
Attention = _choices("Attention", FEATURES["attention"])
Loss = _choices("Loss", FEATURES["loss"])
Accounting = _choices("Accounting", FEATURES["accounting"])
MemoryModelChoice = _choices("MemoryModelChoice", ("auto", "weight_streaming", "resident"))
Objective = _choices("Objective", OBJECTIVES)


def value(choice: Optional[Enum]) -> Optional[str]:
    return None if choice is None else choice.value


ModelOpt = typer.Option("qwen3-30b-a3b", "--model", "-m", help="Preset name or path to a Hugging Face config.json.")
HwOpt = typer.Option("wse3", "--hw", help="Hardware profile name (btacalc hw list) or path to a profile .toml.")
SeqOpt = typer.Option(None, "--seq", min=1, help="Sequence length s [default: 4096, Qwen3 pre-training].")
RecomputeOpt = typer.Option(None, "--recompute", help="Activation recomputation [default: per device].")
AttentionOpt = typer.Option(None, "--attention", help="eager (materialised s² scores) or flash [default: per device].")
CausalOpt = typer.Option(False, "--causal/--full-scores", help="Count only the causal half of the s² matmuls.")
LossOpt = typer.Option(None, "--loss", help="fused: logits one sequence at a time; stored: Korthikanti's 4sbv fp32 "
                       "logits [default: fused].")
AccountingOpt = typer.Option(Accounting.ideal, "--accounting", help="ideal (Korthikanti-style) or pytorch (what a "
                             "PyTorch layer keeps, measured: README).")
ExpertsOpt = typer.Option(None, "--experts", min=1, help="Override the number of experts E.")
TopKOpt = typer.Option(None, "--top-k", min=1, help="Override experts per token k.")
ExpertFfnOpt = typer.Option(None, "--expert-ffn", min=1, help="Override the expert width f.")
FixedActiveOpt = typer.Option(False, "--fixed-active", help="Keep k·f constant when --top-k changes (BTA paper's top-k sweep).")
OverlapOpt = typer.Option(True, "--overlap/--no-overlap", help="Weight streaming overlaps compute (max) or not (sum).")
MemoryModelOpt = typer.Option(None, "--memory-model", help="auto: resident when the whole training state fits, else "
                              "weight streaming (wafer) [default: auto].")
DevicesOpt = typer.Option(1, "--devices", "-n", min=1, help="GPUs (data-parallel ranks); wafer profiles model one system.")
EpOpt = typer.Option(None, "--ep", min=1, help="Expert-parallel degree: experts split over EP devices [default: gcd(devices, E)].")
ZeroOpt = typer.Option(None, "--zero", min=0, max=3, help="ZeRO stage 0-3 [default: 1 with several devices].")
GpusPerNodeOpt = typer.Option(None, "--gpus-per-node", min=1, help="Devices per NVLink domain [default: the profile's].")
OverlapA2aOpt = typer.Option(False, "--overlap-a2a/--no-overlap-a2a", help="Hide the all-to-all behind expert compute "
                             "(chunked) or not.")
GradAccumOpt = typer.Option(None, "--grad-accum", min=1, help="Gradient accumulation: M micro-batches of G·b per "
                            "optimizer step (the gradient sync runs once per step) [default: chosen with --global-batch, "
                            "else 1].")
ObjectiveOpt = typer.Option(None, "--objective", help="What the solver maximises: throughput (predicted tokens/s) or "
                            "density (the largest G·b that fits, then the largest tile) [default: throughput].")
JsonOpt = typer.Option(False, "--json", help="Print the result as JSON on stdout.")
OutputOpt = typer.Option(None, "--output", "-o", help="Write the JSON to this file (atomically).")


def emit_json(payload: str, as_json: bool, output: Optional[Path]) -> None:
    from ..output.files import write_atomic

    if output is not None:
        write_atomic(output, payload + "\n")
    if as_json:
        sys.stdout.write(payload + "\n")


def emit_result(result: Any, as_json: bool, output: Optional[Path], csv_path: Optional[Path],
                to_csv: Callable[[Any], str], plot_path: Optional[str], plot: Callable[[Any, str], None],
                renderable: Callable[[Any], Any]) -> None:
    """The outputs of a table command: plot, CSV and JSON files (each written atomically, the plot
    first since it is the one that can refuse), JSON on stdout, else the rich table."""
    from ..output.files import write_atomic

    if plot_path:
        plot(result, plot_path)
    if csv_path:
        write_atomic(csv_path, to_csv(result))
    emit_json(result.model_dump_json(indent=2), as_json, output)
    if not as_json:
        out.print(renderable(result))
