"""The `btacalc` command line: a thin layer over the library. Printing happens only here."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .atomic import write_atomic
from .features import FEATURES, RECOMPUTE_POLICIES
from .errors import BtacalcError

try:  # typer >= 0.20 vendors click; older typer uses the click package
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc  # type: ignore[no-redef]

app = typer.Typer(
    name="btacalc",
    help="Analytical memory, FLOP and throughput calculator for MoE training with Batch Tiling on Attention (BTA).\n\n"
    "Example: btacalc plan --model qwen3-30b-a3b --hw wse3",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
hw_app = typer.Typer(help="Hardware profiles.\n\nExample: btacalc hw show wse3", no_args_is_help=True)
models_app = typer.Typer(help="Model presets.\n\nExample: btacalc models show qwen3-30b-a3b", no_args_is_help=True)
app.add_typer(hw_app, name="hw")
app.add_typer(models_app, name="models")

# Wide enough for the phase tables when piped (rich would otherwise assume 80 columns).
out = Console(width=None if sys.stdout.isatty() else 132)
err = Console(stderr=True)


def _choices(name: str, values) -> type[Enum]:
    """A str Enum for typer from the library's own list of allowed values (one source of truth)."""
    return Enum(name, {str(v): str(v) for v in values}, type=str)  # type: ignore[return-value]


# Allowed values come from the formula catalogue's features and the run options.
Recompute = _choices("Recompute", RECOMPUTE_POLICIES)
Attention = _choices("Attention", FEATURES["attention"])
Loss = _choices("Loss", FEATURES["loss"])
Accounting = _choices("Accounting", FEATURES["accounting"])
MemoryModelChoice = _choices("MemoryModelChoice", ("auto", "weight_streaming", "resident"))


# --- shared option helpers ---------------------------------------------------------------------

def build_problem_inputs(model: str, hw: str, seq: Optional[int], recompute: Optional[Recompute],
                         attention: Optional[Attention], causal: bool, loss: Loss, accounting: Accounting,
                         experts: Optional[int], top_k: Optional[int], expert_ffn: Optional[int],
                         fixed_active: bool, memory_model: "MemoryModelChoice" = MemoryModelChoice.auto):
    """Resolve model, hardware and run options; returns (model, hardware, run, defaults used)."""
    from .hardware import resolve_hardware
    from .models import resolve_model
    from .run import run_options_for

    spec = resolve_model(model).with_overrides(experts, top_k, expert_ffn, fixed_active)
    profile = resolve_hardware(hw)
    run, defaults = run_options_for(profile, seq, _value(recompute), _value(attention), causal, loss.value,
                                    accounting.value, memory_model.value)
    return spec, profile, run, defaults


def _value(choice: Optional[Enum]) -> Optional[str]:
    return None if choice is None else choice.value


def build_parallel(spec, profile, devices: int, ep: Optional[int], zero: Optional[int],
                   gpus_per_node: Optional[int], overlap_a2a: bool, defaults: dict[str, str], grad_accum: int = 1,
                   max_devices: Optional[int] = None):
    """Parallelism from the CLI options; EP and ZeRO defaults are recorded in `defaults`. `max_devices`:
    the largest device count a sweep will use (the ZeRO default follows it)."""
    from .parallel import Parallelism, auto_expert_parallel

    if ep is None:
        ep = auto_expert_parallel(devices, spec.num_experts)
        if devices > 1:
            defaults["expert_parallel"] = f"gcd(devices, E) = {ep}: experts split as far as the device count allows"
    if zero is None:
        several = max(devices, max_devices or 1) > 1
        zero = 1 if several else 0
        if several:
            defaults["zero_stage"] = "1: optimizer state sharded over data-parallel ranks (Megatron-LM distributed optimizer)"
    par = Parallelism(devices, ep, zero, gpus_per_node, overlap_a2a, grad_accum)
    par.validate(spec.num_experts, profile)
    return par


def emit_json(payload: str, as_json: bool, output: Optional[Path]) -> None:
    if output is not None:
        write_atomic(output, payload + "\n")
    if as_json:
        sys.stdout.write(payload + "\n")


def emit_result(result, as_json: bool, output: Optional[Path], csv_path: Optional[Path], to_csv,
                plot_path: Optional[str], plot, renderable) -> None:
    """The outputs of a table command: plot, CSV and JSON files (each written atomically, the plot
    first since it is the one that can refuse), JSON on stdout, else the rich table."""
    if plot_path:
        plot(result, plot_path)
    if csv_path:
        write_atomic(csv_path, to_csv(result))
    emit_json(result.model_dump_json(indent=2), as_json, output)
    if not as_json:
        out.print(renderable(result))


# Options shared by plan and sweep.
ModelOpt = typer.Option("qwen3-30b-a3b", "--model", "-m", help="Preset name or path to a Hugging Face config.json.")
HwOpt = typer.Option("wse3", "--hw", help="Hardware profile name (btacalc hw list) or path to a profile .toml.")
SeqOpt = typer.Option(None, "--seq", min=1, help="Sequence length s [default: 4096, Qwen3 pre-training].")
RecomputeOpt = typer.Option(None, "--recompute", help="Activation recomputation [default: per device].")
AttentionOpt = typer.Option(None, "--attention", help="eager (materialised s² scores) or flash [default: per device].")
CausalOpt = typer.Option(False, "--causal/--full-scores", help="Count only the causal half of the s² matmuls.")
LossOpt = typer.Option(Loss.fused, "--loss", help="fused: logits one sequence at a time; stored: Korthikanti's 4sbv fp32 logits.")
AccountingOpt = typer.Option(Accounting.ideal, "--accounting", help="ideal (Korthikanti-style) or pytorch (what a PyTorch layer keeps, measured: README).")
ExpertsOpt = typer.Option(None, "--experts", min=1, help="Override the number of experts E.")
TopKOpt = typer.Option(None, "--top-k", min=1, help="Override experts per token k.")
ExpertFfnOpt = typer.Option(None, "--expert-ffn", min=1, help="Override the expert width f.")
FixedActiveOpt = typer.Option(False, "--fixed-active", help="Keep k·f constant when --top-k changes (BTA paper's top-k sweep).")
OverlapOpt = typer.Option(True, "--overlap/--no-overlap", help="Weight streaming overlaps compute (max) or not (sum).")
MemoryModelOpt = typer.Option(MemoryModelChoice.auto, "--memory-model",
                              help="auto: resident when the whole training state fits, else weight streaming (wafer).")
DevicesOpt = typer.Option(1, "--devices", "-n", min=1, help="GPUs (data-parallel ranks); wafer profiles model one system.")
EpOpt = typer.Option(None, "--ep", min=1, help="Expert-parallel degree: experts split over EP devices [default: gcd(devices, E)].")
ZeroOpt = typer.Option(None, "--zero", min=0, max=3, help="ZeRO stage 0-3 [default: 1 with several devices].")
GpusPerNodeOpt = typer.Option(None, "--gpus-per-node", min=1, help="Devices per NVLink domain [default: the profile's].")
OverlapA2aOpt = typer.Option(False, "--overlap-a2a/--no-overlap-a2a", help="Hide the all-to-all behind expert compute (chunked) or not.")
GradAccumOpt = typer.Option(1, "--grad-accum", min=1, help="Gradient accumulation: M micro-batches of G·b per optimizer step "
                            "(the gradient sync runs once per step).")


# --- plan ----------------------------------------------------------------------------------------

@app.command(epilog="Examples:\n\n"
             "  btacalc plan --model qwen3-30b-a3b --hw wse3\n\n"
             "  btacalc plan --hw wse2 --experts 64 --json\n\n"
             "  btacalc plan --model gpt3-175b --hw a100-80gb --seq 2048 --tiles 1 --tile-batch 1 --recompute none --attention eager\n\n"
             "  btacalc plan --model ./config.json --hw b200 --global-batch 64 --output plan.json\n\n"
             "  btacalc plan --hw a100-80gb --devices 64 --ep 8 --zero 1")
def plan(
    model: str = ModelOpt,
    hw: str = HwOpt,
    seq: Optional[int] = SeqOpt,
    global_batch: Optional[int] = typer.Option(None, "--global-batch", min=1, help="Fix G·b = N; G must divide N."),
    tiles: Optional[int] = typer.Option(None, "--tiles", min=1, help="Fix the number of attention tiles G."),
    tile_batch: Optional[int] = typer.Option(None, "--tile-batch", min=1, help="Fix the tile batch b."),
    max_global_batch: Optional[int] = typer.Option(None, "--max-global-batch", min=1, help="Cap G·b (convergence)."),
    max_tile_batch: Optional[int] = typer.Option(None, "--max-tile-batch", min=1, help="Cap the tile batch b (like the vendor's tile cap)."),
    experts: Optional[int] = ExpertsOpt,
    top_k: Optional[int] = TopKOpt,
    expert_ffn: Optional[int] = ExpertFfnOpt,
    fixed_active: bool = FixedActiveOpt,
    recompute: Optional[Recompute] = RecomputeOpt,
    attention: Optional[Attention] = AttentionOpt,
    causal: bool = CausalOpt,
    loss: Loss = LossOpt,
    accounting: Accounting = AccountingOpt,
    overlap: bool = OverlapOpt,
    memory_model: MemoryModelChoice = MemoryModelOpt,
    devices: int = DevicesOpt,
    ep: Optional[int] = EpOpt,
    zero: Optional[int] = ZeroOpt,
    gpus_per_node: Optional[int] = GpusPerNodeOpt,
    overlap_a2a: bool = OverlapA2aOpt,
    grad_accum: int = GradAccumOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON on stdout."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the plan JSON to this file (atomically)."),
    schema: bool = typer.Option(False, "--schema", help="Print the JSON schema of the plan and exit."),
) -> int:
    """Choose G and b for a model on a device; show parameters, memory, FLOPs and phases.

    Exit code 0 when the plan fits, 1 when it does not (the plan and what would fit are still shown),
    2 on bad input.
    """
    from .plan import PlanReport, make_plan
    from .solver import BatchLimits

    if schema:
        sys.stdout.write(json.dumps(PlanReport.model_json_schema(), indent=2) + "\n")
        return 0
    spec, profile, run, defaults = build_problem_inputs(model, hw, seq, recompute, attention, causal, loss,
                                                        accounting, experts, top_k, expert_ffn, fixed_active,
                                                        memory_model)
    par = build_parallel(spec, profile, devices, ep, zero, gpus_per_node, overlap_a2a, defaults, grad_accum)
    limits = BatchLimits(global_batch, tiles, tile_batch, max_global_batch, max_tile_batch)
    report = make_plan(spec, profile, run, limits, defaults, overlap=overlap, parallel=par)
    emit_json(report.model_dump_json(indent=2), as_json, output)
    if not as_json:
        from .render import plan_renderable

        out.print(plan_renderable(report))
    return 0 if report.plan.fits else 1


# --- sweep ---------------------------------------------------------------------------------------

@app.command(epilog="Examples:\n\n"
             "  btacalc sweep --model qwen3-30b-a3b --hw wse2 --vary experts=16,32,64,128\n\n"
             "  btacalc sweep --hw wse2 --vary top-k=1,2,4,8 --fixed-active --plot topk.png\n\n"
             "  btacalc sweep --hw wse3 --vary experts=16:128:x2 --vary seq=2048,4096 --csv sweep.csv\n\n"
             "  btacalc sweep --hw b200 --vary devices=8:128:x2 --ep 8")
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
    loss: Loss = LossOpt,
    accounting: Accounting = AccountingOpt,
    overlap: bool = OverlapOpt,
    devices: int = DevicesOpt,
    ep: Optional[int] = EpOpt,
    zero: Optional[int] = ZeroOpt,
    gpus_per_node: Optional[int] = GpusPerNodeOpt,
    overlap_a2a: bool = OverlapA2aOpt,
    grad_accum: int = GradAccumOpt,
    as_json: bool = typer.Option(False, "--json", help="Print {points: [...]} as JSON on stdout."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the JSON to this file (atomically)."),
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Write one CSV row per point to this file."),
    plot_path: Optional[str] = typer.Option(None, "--plot", help="Draw relative throughput to FILE.png or .svg (needs btacalc[plot])."),
) -> int:
    """Sweep model or run parameters; each point solved at G = 1 and at the solver's G."""
    from .solver import BatchLimits
    from .sweep import parse_vary, plot, run_sweep, to_csv

    grid = parse_vary(vary)
    spec, profile, run, _ = build_problem_inputs(model, hw, seq, recompute, attention, causal, loss, accounting,
                                                 None, None, None, False)
    if fixed_active and "top-k" not in grid:
        raise BtacalcError("--fixed-active needs --vary top-k=...")
    if "devices" in grid:  # the base plan (validated here) is the first point; make_plan validates every point
        devices = grid["devices"][0]
    par = build_parallel(spec, profile, devices, ep, zero, gpus_per_node, overlap_a2a, {}, grad_accum,
                         max_devices=max(grid.get("devices", [devices])))
    total = 1
    for values in grid.values():
        total *= len(values)
    if sys.stderr.isatty() and total > 1:
        from rich.progress import Progress

        with Progress(console=err, transient=True) as bar:
            task = bar.add_task("solving", total=total)
            result = run_sweep(spec, profile, run, BatchLimits(), grid, fixed_active, overlap,
                               progress=lambda n: bar.advance(task, n), parallel=par, expert_parallel_given=ep is not None)
    else:
        result = run_sweep(spec, profile, run, BatchLimits(), grid, fixed_active, overlap, parallel=par,
                           expert_parallel_given=ep is not None)
    from .render import sweep_renderable

    emit_result(result, as_json, output, csv_path, to_csv, plot_path, plot, sweep_renderable)
    return 0


# --- validate ------------------------------------------------------------------------------------

@app.command(epilog="Examples:\n\n  btacalc validate\n\n  btacalc validate --json\n\n  btacalc validate --calibrate")
def validate(
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    calibrate: bool = typer.Option(False, "--calibrate", help="Refit the WSE-2 compute efficiency on the calibration point and print it."),
) -> int:
    """Compute every published point (BTA curves, Korthikanti, parameter counts) against its tolerance.

    Exit 0 when every point passes or is a documented known gap; 1 otherwise.
    """
    from .validate import calibrate as fit
    from .validate import validate as run_validation

    if calibrate:
        sys.stdout.write(f"wse2 compute_efficiency = {fit():.4f}\n")
        return 0
    results = run_validation()
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump() | {"status": r.status} for r in results], indent=2) + "\n")
    else:
        from .render import validate_renderable

        out.print(validate_renderable(results))
    return 0 if all(r.ok_for_ci for r in results) else 1


# --- formulas ------------------------------------------------------------------------------------

@app.command(epilog="Examples:\n\n"
             "  btacalc formulas --phase attn_softmax\n\n"
             "  btacalc formulas --model qwen3-30b-a3b --quantity stored --recompute none\n\n"
             "  btacalc formulas --model gpt3-175b --phase experts --latex")
def formulas(
    phase: Optional[str] = typer.Option(None, "--phase", "-p", help="Only this phase (e.g. attn_softmax, experts)."),
    quantity: Optional[str] = typer.Option(None, "--quantity", "-q", help="Only this quantity (params, flops_fwd, stored, ...)."),
    latex: bool = typer.Option(False, "--latex", help="Print LaTeX instead of plain text."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Sum the terms that apply to this model (else list every term)."),
    recompute: Recompute = typer.Option(Recompute.none, "--recompute", help="Recomputation policy, with --model."),
    attention: Attention = typer.Option(Attention.eager, "--attention", help="Attention kernel, with --model."),
    causal: bool = CausalOpt,
    loss: Loss = LossOpt,
    accounting: Accounting = AccountingOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the formulas as JSON."),
) -> int:
    """Print the symbolic formulas, each term with the tensor it counts and its source."""
    from .formula_view import formula_listing

    listing = formula_listing(phase, quantity, model, recompute.value, attention.value, causal, loss.value,
                              accounting.value, latex)
    if as_json:
        sys.stdout.write(json.dumps(listing, indent=2) + "\n")
        return 0
    from .formula_view import formula_renderable

    out.print(formula_renderable(listing))
    return 0


# --- hw / models ---------------------------------------------------------------------------------

@hw_app.command("list", epilog="Example: btacalc hw list")
def hw_list(as_json: bool = typer.Option(False, "--json")) -> int:
    """List the built-in hardware profiles."""
    from .hardware import builtin_profiles
    from .render import gb, si

    profs = builtin_profiles()
    if as_json:
        sys.stdout.write(json.dumps({n: p.model_dump() for n, p in profs.items()}, indent=2) + "\n")
        return 0
    t = Table(title="Hardware profiles (GB = 1e9 bytes)", title_justify="left")
    for c in ("name", "device", "memory model", "capacity", "off-chip bandwidth", "peak 16-bit", "estimates"):
        t.add_column(c)
    for n, p in profs.items():
        est = ", ".join(k for k, v in p.numbers().items() if v.kind != "published")
        t.add_row(n, p.display_name, p.memory_model, gb(p.memory_capacity_bytes),
                  si(p.offchip_bandwidth_bytes_per_s.value, "B/s"), si(p.peak_flops_per_s.value, "FLOP/s"), est)
    out.print(t)
    return 0


@hw_app.command("show", epilog="Examples:\n\n  btacalc hw show wse3\n\n  btacalc hw show ./my-device.toml --json")
def hw_show(name: str = typer.Argument(..., help="Profile name or path to a profile .toml."),
            as_json: bool = typer.Option(False, "--json")) -> int:
    """Show one hardware profile: every number with its kind and source."""
    from .hardware import resolve_hardware

    p = resolve_hardware(name)
    if as_json:
        sys.stdout.write(p.model_dump_json(indent=2) + "\n")
        return 0
    t = Table(title=f"{p.display_name} ({p.name}) — {p.memory_model}", title_justify="left", show_lines=True)
    for c in ("field", "value", "kind", "note / source"):
        t.add_column(c, overflow="fold")
    for k, v in p.numbers().items():
        t.add_row(k, f"{v.value:,.6g}", v.kind, (v.note + "\n" if v.note else "") + f"[dim]{v.source}[/dim]")
    t.caption = f"defaults: attention {p.default_attention}, recompute {p.default_recompute}. {p.defaults_note}"
    out.print(t)
    return 0


@models_app.command("list", epilog="Example: btacalc models list")
def models_list(as_json: bool = typer.Option(False, "--json")) -> int:
    """List the built-in model presets."""
    from .models import load_preset, preset_names

    specs = [load_preset(n) for n in preset_names()]
    if as_json:
        sys.stdout.write(json.dumps([s.model_dump() for s in specs], indent=2) + "\n")
        return 0
    t = Table(title="Model presets", title_justify="left")
    for c in ("name", "h", "L", "a/a_kv", "d_h", "V", "f", "E/k", "source"):
        t.add_column(c)
    for s in specs:
        t.add_row(s.name, str(s.hidden_size), str(s.num_layers), f"{s.num_heads}/{s.num_kv_heads}", str(s.head_dim),
                  str(s.vocab_size), str(s.ffn_size), f"{s.num_experts}/{s.top_k}" if s.is_moe else "dense", s.source)
    out.print(t)
    return 0


@models_app.command("show", epilog="Examples:\n\n  btacalc models show qwen3-30b-a3b\n\n  btacalc models show ./config.json --json")
def models_show(name: str = typer.Argument(..., help="Preset name or path to a Hugging Face config.json."),
                as_json: bool = typer.Option(False, "--json")) -> int:
    """Show a model's architecture and its parameter counts (vs published, where known)."""
    from .hardware import resolve_hardware
    from .memory import param_counts
    from .models import resolve_model
    from .run import Problem, RunOptions

    spec = resolve_model(name)
    pc = param_counts(Problem(spec, resolve_hardware("wse3"), RunOptions()))
    counts = {"params_total": pc.total, "params_active": pc.active, "params_non_embedding": pc.non_embedding,
              "params_per_layer": pc.per_layer}
    if as_json:
        sys.stdout.write(json.dumps({"spec": spec.model_dump(), **counts}, indent=2) + "\n")
        return 0
    t = Table(title=f"{spec.name}", title_justify="left")
    t.add_column("field")
    t.add_column("value")
    for k, v in spec.model_dump(exclude={"published_params"}).items():
        t.add_row(k, str(v))
    pub = spec.published_params
    for k, v in counts.items():
        ref = getattr(pub, k.removeprefix("params_"), None) if pub else None
        note = f"  (published {ref / 1e9:g} B: {100 * (v - ref) / ref:+.2f}%)" if ref else ""
        t.add_row(k, f"{v:,}{note}")
    out.print(t)
    return 0


# --- entry point ---------------------------------------------------------------------------------

def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry: user errors become one line on stderr and exit code 2."""
    from .errors import DataError

    try:
        rv = typer.main.get_command(app).main(args=argv, prog_name="btacalc", standalone_mode=False)
    except click_exc.NoArgsIsHelpError as exc:  # `btacalc` alone: help, as usual
        out.print(exc.ctx.get_help() if exc.ctx else "")
        sys.exit(0)
    except click_exc.UsageError as exc:
        msg = exc.format_message().replace("\n", " ")
        err.print(f"btacalc: error: {msg}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
    except typer.Abort:
        sys.exit(130)
    except BtacalcError as exc:
        err.print(f"btacalc: error: {exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
    except DataError as exc:  # a broken shipped file: a bug, but still no traceback
        err.print(f"btacalc: internal data error (please report): {exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(3)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) else 0)


# compare / crossover / measure live in their own modules; importing them registers them on `app`.
from . import cli_cluster, cli_measure  # noqa: E402,F401
