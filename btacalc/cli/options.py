"""Options shared by several commands, the choices they allow, and the step from options to the
library's `ExecutionRequest`. Library errors name parameters; `FLAGS` maps them back to flags."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from ..vocabulary import FEATURES, RECOMPUTE_MODULES
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
    "tensor_parallel": "--tp",
    "pipeline_parallel": "--pp",
    "virtual_pipeline": "--vp",
    "context_parallel": "--cp",
    "expert_tensor_parallel": "--etp",
    "gradient_bytes": "--grad-bytes",
}


def flag(param: str) -> str:
    return FLAGS.get(param, "--" + param.replace("_", "-"))


def _choices(name: str, values: Any) -> Any:
    """A str Enum for typer from the library's own list of allowed values (one source of truth)."""
    return Enum(name, {str(v): str(v) for v in values}, type=str)


# Allowed values come from the formula catalogue's features and the run options.
Attention = _choices("Attention", FEATURES["attention"])
Loss = _choices("Loss", FEATURES["loss"])
Accounting = _choices("Accounting", FEATURES["accounting"])
MemoryModelChoice = _choices("MemoryModelChoice", ("auto", "weight_streaming", "resident"))


def value(choice: Optional[Enum]) -> Optional[str]:
    return None if choice is None else choice.value


ModelOpt = typer.Option("qwen3-30b-a3b", "--model", "-m", help="Preset name or path to a Hugging Face config.json.")
HwOpt = typer.Option("wse3", "--hw", help="Hardware profile name (btacalc hw list) or path to a profile .toml.")
SeqOpt = typer.Option(None, "--seq", min=1, help="Sequence length s [default: 4096, Qwen3 pre-training].")
RECOMPUTE_HELP = ("Activation recomputation: none, selective, full, or Megatron recompute modules, comma-separated ("
                  + ", ".join(RECOMPUTE_MODULES) + ")")
RecomputeOpt = typer.Option(None, "--recompute", help=RECOMPUTE_HELP + " [default: per device].")
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
                            "optimizer step (the gradient sync runs once per step) [default: 1, or global batch / "
                            "(DP x micro batch)].")
GlobalBatchOpt = typer.Option(None, "--global-batch", min=1, help="Sequences per optimizer step over all data-parallel "
                              "ranks (Megatron's --global-batch-size): with --micro-batch it sets M = N/(DP·micro "
                              "batch), alone it fixes G·b = N/(DP·M).")
MicroBatchOpt = typer.Option(None, "--micro-batch", min=1, help="Sequences per micro-batch per data-parallel rank "
                             "(Megatron's --micro-batch-size): fixes G·b.")
TpOpt = typer.Option(None, "--tp", min=1, help="Tensor-parallel size (Megatron --tensor-model-parallel-size).")
SpOpt = typer.Option(None, "--sequence-parallel/--no-sequence-parallel", help="Sequence parallelism with TP "
                     "[default: on when --tp > 1].")
PpOpt = typer.Option(None, "--pp", min=1, help="Pipeline-parallel size (--pipeline-model-parallel-size).")
VpOpt = typer.Option(None, "--vp", min=1, help="Interleaved model chunks per pipeline stage (virtual pipeline).")
CpOpt = typer.Option(None, "--cp", min=1, help="Context-parallel size (ring attention over sequence chunks).")
EtpOpt = typer.Option(None, "--etp", min=1, help="Expert tensor-parallel size [default: --tp, as Megatron-Core].")
FsdpOpt = typer.Option(False, "--fsdp", help="Fully sharded data parallel (ZeRO-3 state; weights gathered every "
                       "micro-batch).")
GradBytesOpt = typer.Option(None, "--grad-bytes", min=2, max=4, help="Bytes per gradient: 4 (fp32 main gradients, "
                            "Megatron's default with bf16) or 2 [default: 4 on GPUs].")
RoutingOpt = typer.Option(1.0, "--routing-imbalance", min=1.0, help="Busiest expert's routed tokens over the mean "
                          "(1.0: balanced, as forced-balance benchmarks).")
OverlapGradOpt = typer.Option(None, "--overlap-grad-reduce/--no-overlap-grad-reduce", help="Hide the data-parallel "
                              "gradient reduction behind the backward pass [default: off, Megatron-Core].")
OverlapParamOpt = typer.Option(None, "--overlap-param-gather/--no-overlap-param-gather", help="Hide the distributed "
                               "optimizer's weight all-gather behind the forward pass [default: off, Megatron-Core].")
TpOverlapOpt = typer.Option(None, "--tp-comm-overlap/--no-tp-comm-overlap", help="Hide tensor-parallel collectives "
                            "behind the GEMMs [default: off, Megatron-Core].")
OverlapP2pOpt = typer.Option(None, "--overlap-p2p/--no-overlap-p2p", help="Hide pipeline sends behind compute "
                             "[default: on with --vp > 1, as Megatron-LM].")
JsonOpt = typer.Option(False, "--json", help="Print the result as JSON on stdout.")
OutputOpt = typer.Option(None, "--output", "-o", help="Write the JSON to this file (atomically).")


def layout_fields(tp: Optional[int], sp: Optional[bool], pp: Optional[int], vp: Optional[int], cp: Optional[int],
                  etp: Optional[int], fsdp: bool,
                  grad_bytes: Optional[int], routing: float, overlaps: tuple[Optional[bool], ...]) -> dict[str, Any]:
    """ExecutionRequest fields of the Megatron layout options (overlaps: grad reduce, param gather, TP, p2p)."""
    from ..config.execution import OverlapRequest

    grad, param, tp_comm, p2p = overlaps
    return {"tensor_parallel": tp, "sequence_parallel": sp, "pipeline_parallel": pp, "virtual_pipeline": vp,
            "context_parallel": cp, "expert_tensor_parallel": etp, "fsdp": fsdp, "gradient_bytes": grad_bytes,
            "routing_imbalance": routing,
            "overlaps": OverlapRequest(grad_reduce=grad, param_gather=param, tp_comm=tp_comm, p2p=p2p)}


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
