"""`btacalc formulas`, `btacalc hw list|show`, `btacalc models list|show`."""

from __future__ import annotations

import json
from typing import Any, Optional

import typer

from ..errors import BtacalcError
from .console import JsonText, guarded_stdout, out, print_stdout, write_stdout
from .completion import complete_hardware, complete_model
from .runfile import given_on_command_line
from .options import RECOMPUTE_HELP, Accounting, AccountingOpt, Attention, CausalOpt, Loss, LossOpt, help_text, value

FORMULAS_EXAMPLES = ("Examples:\n\n"
                     "  btacalc formulas --phase attn_softmax\n\n"
                     "  btacalc formulas --model qwen3-30b-a3b --quantity stored --recompute none\n\n"
                     "  btacalc formulas --model qwen3-30b-a3b --phase experts --latex")


# formulas' options that select the terms of one model's sum (ignored by the listing of every term)
MODEL_ONLY = ("recompute", "attention", "sequence_parallel", "dtensor_tp", "causal", "loss", "accounting")


def formulas(
    ctx: typer.Context,
    phase: Optional[str] = typer.Option(None, "--phase", "-p", help="Only this phase (e.g. attn_softmax, experts)."),
    quantity: Optional[str] = typer.Option(None, "--quantity", "-q", help="Only this quantity (params, flops_fwd, "
                                           "stored, ...)."),
    latex: bool = typer.Option(False, "--latex", help="Print LaTeX instead of plain text."),
    model: Optional[str] = typer.Option(None, "--model", "-m", autocompletion=complete_model,
                                        help="Sum the terms that apply to this model (else list "
                                        "every term)."),
    recompute: str = typer.Option("none", "--recompute", help=help_text(RECOMPUTE_HELP + ", with --model.")),
    attention: Attention = typer.Option(Attention.eager, "--attention", help="Attention kernel, with --model."),
    sequence_parallel: bool = typer.Option(False, "--sequence-parallel", help="Per-device formulas with sequence "
                                           "parallelism (t: the tensor-parallel size), with --model."),
    dtensor_tp: bool = typer.Option(False, "--dtensor-tp", help="With --sequence-parallel: TP as DTensor's plan "
                                    "(PyTorch FSDP2 beside TP, torchtitan), whose column-parallel linears save "
                                    "the gathered input, with --model."),
    causal: Optional[bool] = CausalOpt,
    loss: Optional[Loss] = LossOpt,
    accounting: Optional[Accounting] = AccountingOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the formulas as JSON."),
) -> int:
    """Print the symbolic formulas, each term with the tensor it counts and its source."""
    from ..config.execution import RunOptions
    from ..planning.formulas import TpPlan, formula_listing
    from ..vocabulary import parse_recompute

    given = given_on_command_line(ctx, MODEL_ONLY)
    if given and model is None:
        raise BtacalcError(f"--{given[0].replace('_', '-')} sets how the formulas of a model are summed: give --model "
                           "(without it every term is listed, whatever the run)")
    try:
        policy = parse_recompute(recompute)
    except ValueError as exc:
        raise BtacalcError("{recompute}: " + str(exc)) from None
    run = RunOptions(recompute=policy, attention=attention.value, causal=bool(causal),
                     loss=value(loss) or "fused", accounting=value(accounting) or "ideal")  # type: ignore[arg-type]  # enum values
    tp_plan = TpPlan(sequence_parallel=sequence_parallel, dtensor=dtensor_tp)
    listing = formula_listing(phase, quantity, model, run, latex, tp_plan)
    if as_json:
        write_stdout(json.dumps(listing, indent=2) + "\n")
        return 0
    from ..output.formulas import formula_renderable

    print_stdout(formula_renderable(listing))
    return 0


def hw_list(as_json: bool = typer.Option(False, "--json", help="Print the profiles as JSON.")) -> int:
    """List the built-in hardware profiles."""
    from ..config.hardware import builtin_profiles
    from ..output.info_tables import hw_list_table

    profs = builtin_profiles()
    if as_json:
        write_stdout(json.dumps({n: p.model_dump() for n, p in profs.items()}, indent=2) + "\n")
        return 0
    print_stdout(hw_list_table(profs))
    return 0


def _builtin(name: str) -> bool:
    """Whether `hw show|check` was given a built-in profile's name (as resolve_hardware tells them), not a file."""
    from ..paths import data_dir

    return "/" not in name and (data_dir("hardware_profiles") / f"{name}.toml").is_file()


def _calibration(name: str, profile: Any) -> str:
    """Which calibration family applies to the profile `hw show|check` was given (by name or as a file)."""
    from ..planning.calibration import family_statement

    return family_statement(profile, _builtin(name))


def _profile_json(name: str, profile: Any) -> str:
    """`hw show --json`: the profile, and the calibration family its table names (`calibration_family`: the family's
    name, profiles, refitted factors and source from calibration.toml; null for a profile in none)."""
    from pydantic_core import to_json

    from ..planning.calibration import applying_family

    spec = applying_family(profile, _builtin(name))
    shown = {**profile.model_dump(), "calibration_family": spec.model_dump() if spec else None}
    return JsonText(to_json(shown, indent=2).decode() + "\n")  # written as model_dump_json writes the profile


def _profile(name: str) -> Any:
    """A profile for `hw show|check`: errors name the argument, not --hw."""
    from ..config.hardware import resolve_hardware

    try:
        return resolve_hardware(name)
    except BtacalcError as exc:
        raise BtacalcError(exc.render({"hardware": "profile"})) from None


def hw_show(name: str = typer.Argument(..., help="Profile name or path to a profile .toml.",
                                       autocompletion=complete_hardware),
            as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON.")) -> int:
    """Show one hardware profile: every number with its kind and source."""
    from ..output.info_tables import hw_show_table

    p = _profile(name)
    if as_json:
        write_stdout(_profile_json(name, p))
        return 0
    print_stdout(hw_show_table(p, _calibration(name, p)))
    return 0


def _model_summary(spec) -> dict:
    """A model's counts, its published ones (with each figure's convention and source) and its layer kinds."""
    from dataclasses import asdict

    from ..config.hardware import resolve_hardware
    from ..model.params import model_param_counts, published_checks
    from ..model.problem import make_problem

    pc = model_param_counts(make_problem(spec, resolve_hardware("wse3")))  # counts do not depend on the device
    checks = [{**asdict(c), "relative": c.relative} for c in published_checks(spec, pc)]
    return {"name": spec.name, "params_total": pc.total, "params_active": pc.active,
            "params_non_embedding": pc.non_embedding, "params_per_layer": pc.per_layer,
            "params_gathered": pc.gathered, "published": checks,
            "layer_kinds": [{"name": k.name, "count": k.count} for k in spec.layer_kinds()]}
def hw_check(path: str = typer.Argument(..., help="Path to a profile .toml (or a built-in profile name).")) -> int:
    """Check a hardware profile: every number finite and in its physical range, with a kind and a
    source URL, no unknown field, the sections consistent. Prints the profile in units; exit 2 with
    one line naming the file, field, value and rule when it is not valid."""
    from ..output.info_tables import hw_show_table

    p = _profile(path)
    kinds: dict[str, int] = {}
    for num in p.numbers().values():
        kinds[num.kind] = kinds.get(num.kind, 0) + 1
    counts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    guarded_stdout(lambda: out.print(f"{path}: valid profile {p.name} ({p.display_name}); {sum(kinds.values())} "
                                     f"numbers: {counts}", highlight=False, markup=False, soft_wrap=True))
    print_stdout(hw_show_table(p, _calibration(path, p)))
    return 0


def models_list(as_json: bool = typer.Option(False, "--json", help="Print the presets as JSON.")) -> int:
    """List the built-in model presets with total and active parameters (computed and published)."""
    from ..config.presets import load_preset, preset_names
    from ..output.info_tables import models_list_table

    specs = [load_preset(n) for n in preset_names()]
    summaries = [_model_summary(s) for s in specs]
    if as_json:
        rows = [{**s.model_dump(), **{k: v for k, v in m.items() if k != "published"},
                 "published": s.published_params.model_dump() if s.published_params else None,
                 "published_checks": m["published"]} for s, m in zip(specs, summaries)]
        write_stdout(json.dumps(rows, indent=2) + "\n")
        return 0
    print_stdout(models_list_table(specs, summaries))
    return 0


def models_show(name: str = typer.Argument(..., help="Preset name or path to a Hugging Face config.json.",
                                           autocompletion=complete_model),
                model_name: Optional[str] = typer.Option(None, "--name", help="Name the model (default: the preset "
                                                         "name, the file's stem, or the folder of a config.json)."),
                as_json: bool = typer.Option(False, "--json", help="Print the model as JSON.")) -> int:
    """Show a model's architecture, its layer kinds and its parameter counts against the published ones,
    each with its source."""
    from ..config.presets import resolve_model
    from ..output.info_tables import models_show_table

    try:
        spec = resolve_model(name, model_name)
    except BtacalcError as exc:  # the model is this command's argument, not --model (as _profile for hw show)
        raise BtacalcError(exc.render({"model": "model"})) from None
    summary = _model_summary(spec)
    if as_json:
        write_stdout(json.dumps({"spec": spec.model_dump(), **summary}, indent=2) + "\n")
        return 0
    print_stdout(models_show_table(spec, summary))
    return 0


def register(app: typer.Typer) -> None:
    app.command(epilog=FORMULAS_EXAMPLES)(formulas)
    hw_app = typer.Typer(help="Hardware profiles.\n\nExample: btacalc hw show wse3", no_args_is_help=True)
    hw_app.command("list", epilog="Example: btacalc hw list")(hw_list)
    hw_app.command("show", epilog="Examples:\n\n  btacalc hw show wse3\n\n  btacalc hw show ./my-device.toml --json")(hw_show)
    hw_app.command("check", epilog="Example: btacalc hw check ./my-device.toml")(hw_check)
    models_app = typer.Typer(help="Model presets.\n\nExample: btacalc models show qwen3-30b-a3b", no_args_is_help=True)
    models_app.command("list", epilog="Example: btacalc models list")(models_list)
    models_app.command("show", epilog="Examples:\n\n  btacalc models show qwen3-30b-a3b\n\n"
                       "  btacalc models show ./config.json --json")(models_show)
    app.add_typer(hw_app, name="hw")
    app.add_typer(models_app, name="models")
