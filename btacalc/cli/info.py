"""`btacalc formulas`, `btacalc hw list|show`, `btacalc models list|show`."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from .console import out
from ..errors import BtacalcError
from .options import RECOMPUTE_HELP, Accounting, AccountingOpt, Attention, CausalOpt, Loss, LossOpt, value

FORMULAS_EXAMPLES = ("Examples:\n\n"
                     "  btacalc formulas --phase attn_softmax\n\n"
                     "  btacalc formulas --model qwen3-30b-a3b --quantity stored --recompute none\n\n"
                     "  btacalc formulas --model qwen3-30b-a3b --phase experts --latex")


def formulas(
    phase: Optional[str] = typer.Option(None, "--phase", "-p", help="Only this phase (e.g. attn_softmax, experts)."),
    quantity: Optional[str] = typer.Option(None, "--quantity", "-q", help="Only this quantity (params, flops_fwd, "
                                           "stored, ...)."),
    latex: bool = typer.Option(False, "--latex", help="Print LaTeX instead of plain text."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Sum the terms that apply to this model (else list "
                                        "every term)."),
    recompute: str = typer.Option("none", "--recompute", help=RECOMPUTE_HELP + ", with --model."),
    attention: Attention = typer.Option(Attention.eager, "--attention", help="Attention kernel, with --model."),
    sequence_parallel: bool = typer.Option(False, "--sequence-parallel", help="Per-device formulas with sequence "
                                           "parallelism (t: the tensor-parallel size), with --model."),
    causal: bool = CausalOpt,
    loss: Optional[Loss] = LossOpt,
    accounting: Accounting = AccountingOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the formulas as JSON."),
) -> int:
    """Print the symbolic formulas, each term with the tensor it counts and its source."""
    from ..config.execution import RunOptions
    from ..planning.formulas import formula_listing
    from ..vocabulary import parse_recompute

    try:
        policy = parse_recompute(recompute)
    except ValueError as exc:
        raise BtacalcError("{recompute}: " + str(exc)) from None
    run = RunOptions(recompute=policy, attention=attention.value, causal=causal,
                     loss=value(loss) or "fused", accounting=accounting.value)  # type: ignore[arg-type]  # enum values
    listing = formula_listing(phase, quantity, model, run, latex, sequence_parallel)
    if as_json:
        sys.stdout.write(json.dumps(listing, indent=2) + "\n")
        return 0
    from ..output.formulas import formula_renderable

    out.print(formula_renderable(listing))
    return 0


def hw_list(as_json: bool = typer.Option(False, "--json", help="Print the profiles as JSON.")) -> int:
    """List the built-in hardware profiles."""
    from ..config.hardware import builtin_profiles
    from ..output.info_tables import hw_list_table

    profs = builtin_profiles()
    if as_json:
        sys.stdout.write(json.dumps({n: p.model_dump() for n, p in profs.items()}, indent=2) + "\n")
        return 0
    out.print(hw_list_table(profs))
    return 0


def hw_show(name: str = typer.Argument(..., help="Profile name or path to a profile .toml."),
            as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON.")) -> int:
    """Show one hardware profile: every number with its kind and source."""
    from ..config.hardware import resolve_hardware
    from ..output.info_tables import hw_show_table

    p = resolve_hardware(name)
    if as_json:
        sys.stdout.write(p.model_dump_json(indent=2) + "\n")
        return 0
    out.print(hw_show_table(p))
    return 0


def models_list(as_json: bool = typer.Option(False, "--json", help="Print the presets as JSON.")) -> int:
    """List the built-in model presets."""
    from ..config.presets import load_preset, preset_names
    from ..output.info_tables import models_list_table

    specs = [load_preset(n) for n in preset_names()]
    if as_json:
        sys.stdout.write(json.dumps([s.model_dump() for s in specs], indent=2) + "\n")
        return 0
    out.print(models_list_table(specs))
    return 0


def models_show(name: str = typer.Argument(..., help="Preset name or path to a Hugging Face config.json."),
                as_json: bool = typer.Option(False, "--json", help="Print the model as JSON.")) -> int:
    """Show a model's architecture and its parameter counts (vs published, where known)."""
    from ..config.hardware import resolve_hardware
    from ..config.presets import resolve_model
    from ..model.params import param_counts
    from ..model.problem import make_problem
    from ..output.info_tables import models_show_table

    spec = resolve_model(name)
    pc = param_counts(make_problem(spec, resolve_hardware("wse3")))
    counts = {"params_total": pc.total, "params_active": pc.active, "params_non_embedding": pc.non_embedding,
              "params_per_layer": pc.per_layer}
    if as_json:
        sys.stdout.write(json.dumps({"spec": spec.model_dump(), **counts}, indent=2) + "\n")
        return 0
    out.print(models_show_table(spec, counts))
    return 0


def register(app: typer.Typer) -> None:
    app.command(epilog=FORMULAS_EXAMPLES)(formulas)
    hw_app = typer.Typer(help="Hardware profiles.\n\nExample: btacalc hw show wse3", no_args_is_help=True)
    hw_app.command("list", epilog="Example: btacalc hw list")(hw_list)
    hw_app.command("show", epilog="Examples:\n\n  btacalc hw show wse3\n\n  btacalc hw show ./my-device.toml --json")(hw_show)
    models_app = typer.Typer(help="Model presets.\n\nExample: btacalc models show qwen3-30b-a3b", no_args_is_help=True)
    models_app.command("list", epilog="Example: btacalc models list")(models_list)
    models_app.command("show", epilog="Examples:\n\n  btacalc models show qwen3-30b-a3b\n\n"
                       "  btacalc models show ./config.json --json")(models_show)
    app.add_typer(hw_app, name="hw")
    app.add_typer(models_app, name="models")
