"""`btacalc plan` and `btacalc sweep`."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import typer

from .. import profiling
from ..errors import BtacalcError
from ..vocabulary import TORCH_LOSSES
from .console import err, model_json
from .groups import LayoutOptions, RecipeOptions, cuda_graph_scopes, takes_option_groups
from .options import (refuse_fsdp_only, with_flags, Accounting, AccountingOpt, Attention, AttentionOpt, CausalOpt,
                      DevicesOpt, Emit, EpOpt, ExpertFfnOpt, ExpertsOpt, FixedActiveOpt, GlobalBatchOpt,
                      GpusPerNodeOpt, Precision, PrecisionOpt, GradAccumOpt, HwOpt, Loss, LossOpt, MaxGlobalBatchOpt,
                      MaxTileBatchOpt, MemoryModelChoice, MemoryModelOpt, MicroBatchOpt, ModelOpt, NameOpt, Objective,
                      ObjectiveOpt, OutputOpt, TokensPerStepOpt, OverlapA2aOpt, OverlapOpt, QuietOpt, RecomputeOpt,
                      SeqOpt, TileBatchOpt, TilesOpt, TopKOpt, ZeroOpt, check_bounds, help_text, outputs, value,
                      write_outputs)
from .progress import progress
from .runfile import config_callback, given_on_command_line, read_text

PLAN_EXAMPLES = ("Examples:\n\n"
                 "  btacalc plan --model qwen3-30b-a3b --hw wse3\n\n"
                 "  btacalc plan --hw wse2 --experts 64 --json\n\n"
                 "  btacalc plan --model gpt3-175b --hw a100-80gb --seq 2048 --tiles 1 --tile-batch 1 --recompute none "
                 "--attention eager\n\n"
                 "  btacalc plan --model ./config.json --hw b200 --global-batch 64 --output plan.json\n\n"
                 "  btacalc plan --hw a100-80gb --devices 64 --ep 8 --zero 1\n\n"
                 "  btacalc plan --model ./llama-7b.json --hw wse2 --seq 2048 --global-batch 99 --emit cerebras\n\n"
                 "  btacalc plan --hw wse2 --devices 4 --global-batch 96 --sensitivity 10\n\n"
                 "  btacalc plan --model gpt3-175b --hw h100 --devices 128 --tp 4 --pp 8 --vp 6 --global-batch 256 "
                 "--micro-batch 1 --seq 2048\n\n"
                 "  btacalc plan --hw h100 --devices 256 --search\n\n"
                 "  btacalc plan --hw h100 --devices 64 --tp 2 --pp 4 --emit megatron\n\n"
                 "  btacalc plan --hw h100 --from-megatron train_llama3_8b.sh\n\n"
                 "  btacalc plan --hw h100 --devices 64 --tp 2 --pp 4 --emit megatron | btacalc plan --hw h100 "
                 "--from-megatron -\n\n"
                 "  btacalc plan --config run.toml\n\n"
                 "  btacalc plan --hw wse3 --objective density --profile")
SWEEP_EXAMPLES = ("Examples:\n\n"
                  "  btacalc sweep --model qwen3-30b-a3b --hw wse2 --vary experts=16,32,64,128\n\n"
                  "  btacalc sweep --hw wse2 --vary top-k=1,2,4,8 --fixed-active --plot topk.png\n\n"
                  "  btacalc sweep --hw wse3 --vary experts=16:128:x2 --vary seq=2048,4096 --csv sweep.csv\n\n"
                  "  btacalc sweep --hw b200 --vary devices=8:128:x2 --ep 8\n\n"
                  "  btacalc sweep --hw wse3 --vary experts=8:256:x2 --vary top-k=1,2,4,8 --vary seq=1024:8192:x2 "
                  "--csv grid.csv --quiet\n\n"
                  "  btacalc sweep --hw h100 --tp 2 --ep 8 --global-batch 256 --vary devices=16,32,64")


# What --from-megatron / --from-bridge leave to the command line: the hardware, the device count (when the
# launch has no torchrun prefix), how the plan is solved and printed. Every other plan option is in the file.
IMPORT_KEEPS = ("hw", "devices", "gpus_per_node", "objective", "as_json", "output", "schema",
                "sensitivity", "emit", "profile_run", "name", "config", "from_megatron", "from_bridge",
                "accounting", "causal", "loss", "routing_imbalance", "max_global_batch", "max_tile_batch",
                "fp8_attention")  # (no Megatron-LM flag sets FP8 attention: a launch cannot say it)
# of IMPORT_KEEPS, how to solve and print (and the files themselves): the rest are run options a refusal names
IMPORT_PRINTS = ("objective", "as_json", "output", "schema", "sensitivity", "emit", "profile_run", "name", "config",
                 "from_megatron", "from_bridge")


SearchOpt = typer.Option(False, "--search/--no-search", show_default=False, help=(
    "Search the fastest layout that fits (TP, PP, VP, CP, EP, ETP, micro-batch, recompute) on --devices GPUs; the "
    "given values fix that dimension."))
PlanJsonOpt = typer.Option(False, "--json/--no-json", show_default=False, help="Print the plan as JSON on stdout.")
PlanOutputOpt = typer.Option(None, "--output", "-o", help="Write the plan JSON to this file (atomically; - for "
                             "standard output).")
PlanSchemaOpt = typer.Option(False, "--schema", help="Print the JSON schema of the plan (with --search: of the "
                             "search's report) and exit.")
SensitivityOpt = typer.Option(None, "--sensitivity", min=0.0, max=100.0, help="Also move every hardware number by "
                              "-PCT% and +PCT% alone and show tokens/s (e.g. 10).")
EmitOpt = typer.Option(None, "--emit", help="Print a ready configuration instead of the plan: cerebras or modelzoo = "
                       "the Model Zoo YAML (wafer profiles); megatron = the Megatron-LM launch; bridge = "
                       "Megatron-Bridge overrides (GPU profiles).")
ProfileRunOpt = typer.Option(False, "--profile/--no-profile", show_default=False, help="Print on stderr how many "
                             "times the model was evaluated and where the time went.")
FromMegatronOpt = typer.Option(None, "--from-megatron", help="Plan the run of a Megatron-LM launch script or file of "
                               "arguments (- for standard input); flags btacalc does not model are listed as ignored.")
FromBridgeOpt = typer.Option(None, "--from-bridge", help="Plan the run of a Megatron-Bridge recipe's overrides: a YAML "
                             "mapping (model:, train:, ddp:, comm_overlap:) or Hydra's key=value words, as Bridge's "
                             "scripts take them and --emit bridge prints them.")
PlanConfigOpt = typer.Option(None, "--config", is_eager=True, callback=config_callback, help=(
    "Read plan options from a TOML run file (keys: the option names, e.g. global-batch = 256); the command line wins "
    "(a switch the file sets: its --no- form)."))

def plan(
    ctx: typer.Context,
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
    objective: Optional[Objective] = ObjectiveOpt,
    tokens_per_step: Optional[int] = TokensPerStepOpt,
    precision: Optional[Precision] = PrecisionOpt,
    recipe: RecipeOptions = RecipeOptions(),  # the shared recipe options (takes_option_groups)
    search: bool = SearchOpt,
    as_json: bool = PlanJsonOpt,
    output: Optional[str] = PlanOutputOpt,
    schema: bool = PlanSchemaOpt,
    sensitivity: Optional[float] = SensitivityOpt,
    emit: Optional[Emit] = EmitOpt,
    profile_run: bool = ProfileRunOpt,
    from_megatron: Optional[Path] = FromMegatronOpt,
    from_bridge: Optional[Path] = FromBridgeOpt,
    config: Optional[Path] = PlanConfigOpt,
) -> int:
    """Choose G (attention tiles) and b (sequences per tile) for a model on one or more devices;
    show parameters, memory, FLOPs, phases, throughput and what binds.

    Exit code 0 when the plan fits, 1 when it does not (the plan and what would fit are still shown),
    2 on bad input.
    """
    _start_profile()
    from ..config.execution import BatchLimits, ExecutionRequest

    check_bounds({"--micro-batch": micro_batch, "--grad-accum": grad_accum})
    # --emit and --schema print on stdout (and write --output); the plan JSON only with --json
    outs = outputs(output, as_json or emit is not None or (schema and output is None), inputs={"--model": model, "--hw": hw},
                   stdout_flag="--json" if as_json else "--emit" if emit is not None else "--schema")
    if schema:
        return _print_schema(ctx, outs)
    printing = Printing(outs, value(emit), search, sensitivity, as_json, profile_run)
    imported = _imported_run(ctx, from_megatron, from_bridge, devices if _given(ctx, "devices") else None, model)
    spec, profile = _resolved(imported, model, name, hw, (experts, top_k, expert_ffn, fixed_active))
    if imported:
        request = ImportAdditions(
            gpus_per_node=gpus_per_node, objective=value(objective), accounting=value(accounting), causal=causal,
            loss=value(loss), routing_imbalance=layout.routing_imbalance if _given(ctx, "routing_imbalance") else None,
            max_global_batch=max_global_batch, max_tile_batch=max_tile_batch, cuda_graph_scope=layout.cuda_graph_scope,
            fp8_attention=recipe.fp8_attention, fsdp_impl=layout.fsdp_impl, nccl_ub=layout.nccl_ub, nvls=layout.nvls,
        ).over(imported.request, profile, imported.stated_domain)
        return _planned(spec, profile, request, imported, printing)
    request = ExecutionRequest(
        seq_len=seq, recompute=recompute, attention=value(attention), causal=causal, loss=value(loss),
        accounting=value(accounting), memory_model=value(memory_model), overlap_streaming=overlap, devices=devices,
        expert_parallel=ep, zero_stage=zero, devices_per_node=gpus_per_node, overlap_all_to_all=overlap_a2a,
        micro_batches=grad_accum, objective=value(objective), tokens_per_step=tokens_per_step,
        precision=value(precision), limits=BatchLimits(global_batch, tiles, tile_batch, max_global_batch,
                                                       max_tile_batch, micro_batch=micro_batch),
        **recipe.request_fields(), **layout.request_fields())
    return _planned(spec, profile, request, imported, printing)


@dataclass(frozen=True)
class Printing:
    """How a plan is printed (and so what it may be asked with): the outputs, --emit, --search, --sensitivity,
    --json, --profile."""

    outs: Any
    emit: Optional[str]
    search: bool
    sensitivity: Optional[float]
    as_json: bool
    profile_run: bool


def _planned(spec: Any, profile: Any, request: Any, imported: Any, printing: Printing) -> int:
    """Check what is printed against the plan, plan (or search) it, print it; the exit code (1: no fit)."""
    from ..planning.plan import make_plan
    from ..planning.report import imported_info

    _check_emit(printing.emit, printing.search, profile, request, printing.sensitivity, printing.as_json)
    with _from_file(imported):
        if printing.search:
            return _profiled(_search(spec, profile, request, printing.outs, printing.emit), printing.profile_run)
        launch = printing.emit in ("megatron", "bridge") and request.limits.tiles is None
        if launch and request.limits.global_batch is not None:  # fu23: the untiled plan at once, as below
            report = make_plan(spec, profile, _untiled(request, request.limits.global_batch))
        else:
            report = make_plan(spec, profile, request)
        if launch and report.plan.tiles > 1:
            report = make_plan(spec, profile, _untiled(request, report.plan.step_batch))
    if imported is not None:
        from ..config.megatron_run import suggestions_in_file

        report.imported = imported_info(imported)
        report.suggestions = suggestions_in_file(report.suggestions, imported.bridge)
    return _reported(report, (spec, profile, request), printing)


def _untiled(request: Any, step_batch: int) -> Any:
    """freshuser21: Megatron runs its micro-batch untiled, so a launch is the plan at G = 1, at the same step batch.
    The fastest plan of qwen3-30b-a3b on 16 H100s under full recomputation tiled attention (G = 2 tiles of b = 4) and
    the launch wrote --micro-batch-size 8, which Megatron runs as 8 sequences at once: 83.2 GB of 79.2 GB usable by
    btacalc's own count (the launch said so only in a comment). fu23: a request that fixes the global batch is planned
    so at once (it planned twice where G > 1); where the solver would have chosen G = 1 itself, fixing G = 1 changes
    no emitted byte (the best shape of all is the best of those at G = 1; test_fu23)."""
    batch = request.limits.global_batch or step_batch
    return request.with_changes(limits=replace(request.limits, tiles=1, global_batch=batch))


@contextlib.contextmanager
def _from_file(imported: Any) -> Iterator[None]:
    """review of review35: a plan-level refusal of an imported run named btacalc's options (`--tp 4`, `--cp 2`) and
    no file, though the user gave neither; it names the file, and each setting as the file does where that setting
    is one Megatron-LM flag or Bridge key (megatron_codec.PARAM_DESTS); the rest keep btacalc's option names, and
    the message says which those are."""
    try:
        yield
    except BtacalcError as exc:
        if imported is None or exc.template.startswith(f"{imported.source}:"):
            raise
        raise BtacalcError(_in_file_names(exc, imported)) from None


def _in_file_names(exc: BtacalcError, imported: Any) -> str:
    """`exc`'s template with the parameters an imported file sets by one flag (key) written as that flag (key);
    the others stay parameters, which the command line renders as btacalc's options (cli.options.with_flags)."""
    from ..config.megatron_run import imported_names, scheduled_names

    names = imported_names(imported.bridge)
    if imported.torchrun_devices:
        names["devices"] = "torchrun's processes (--nproc_per_node x --nnodes)"
    if imported.scheduled:  # freshuser21: the count of a default the scheduler's variable replaces
        names["devices"] = (f"torchrun's processes (--nproc_per_node x --nnodes; the file leaves "
                            f"{scheduled_names(imported.scheduled)} unset, and --devices N gives the run's count)")
    where = "standard input" if imported.source == "-" else imported.source
    own = sorted({p for p in exc.params if p not in names})
    text = exc.render({**{p: "{" + p + "}" for p in own}, **names})  # btacalc's own stay for the command line
    if not own:
        return f"{where}: {text}"
    return f"{where} ({', '.join('{' + p + '}' for p in own)}: btacalc's option names): {text}"


def _start_profile() -> None:
    """--profile's clock and counts, for this command only (tests run many in one process): start-up, then the
    imports the plan needs."""
    profiling.reset()
    profiling.seconds["start-up (btacalc and the command line)"] = time.perf_counter() - profiling.STARTED
    with profiling.stage("imports (numpy, pydantic models, the model)"):
        from ..config import execution, hardware, presets  # noqa: F401
        from ..planning import plan, report  # noqa: F401


def _print_schema(ctx: typer.Context, outs: Any) -> int:
    """--schema: the plan's JSON schema, or with --search the search's (what `plan --search --json` prints:
    hostile27), written where --output and --json say (no other plan option)."""
    from ..planning.report import PlanReport
    from ..planning.search import SearchResult

    _schema_alone(ctx)
    # the search's report leaves its wall time out of the JSON (SearchResult.elapsed_s): its schema is the serialised
    # form's
    schema = (SearchResult.model_json_schema(mode="serialization") if ctx.params.get("search")
              else PlanReport.model_json_schema())
    text = json.dumps(schema, indent=2) + "\n"
    write_outputs(outs, {"--output": text, "--json": text}, None)
    return 0


def _resolved(imported: Any, model: str, name: Optional[str], hw: str,
              overrides: tuple[Optional[int], Optional[int], Optional[int], bool]) -> tuple[Any, Any]:
    """The model (an imported run's, else --model with --experts, --top-k, --expert-ffn, --fixed-active) and the
    hardware profile."""
    from ..config.hardware import resolve_hardware
    from ..config.presets import resolve_model

    with profiling.stage("resolve"):
        spec = imported.model if imported else resolve_model(model, name).with_overrides(*overrides)
        return spec, resolve_hardware(hw)


@dataclass(frozen=True)
class ImportAdditions:
    """What the command line may add to the run of --from-megatron / --from-bridge (IMPORT_KEEPS), as given; None:
    not given (the file's, else the default, stands)."""

    gpus_per_node: Optional[int]
    objective: Optional[str]
    accounting: Optional[str]
    causal: Optional[bool]
    loss: Optional[str]
    routing_imbalance: Optional[float]
    max_global_batch: Optional[int]
    max_tile_batch: Optional[int]
    cuda_graph_scope: Optional[str]
    fp8_attention: bool
    fsdp_impl: Optional[str]
    nccl_ub: bool
    nvls: bool

    def over(self, base: Any, profile: Any, stated_domain: bool = False) -> Any:
        """The imported run's request `base` with these additions; without --gpus-per-node, the NVLink domain the
        launch implies on `profile` (launch_domain; `stated_domain`: the file's own `# btacalc option:` line)."""
        from ..config.megatron_run import launch_domain

        request = base.with_changes(
            devices_per_node=self.gpus_per_node or base.devices_per_node, objective=self.objective,
            # --accounting and --routing-imbalance: the command line's, else the file's (a `# btacalc option:` line;
            # hostile16, hostile18) or the default
            # --causal / --full-scores and --loss likewise (hostile19: the command line's default replaced the file's)
            accounting=base.accounting if self.accounting is None else self.accounting,
            causal=base.causal if self.causal is None else self.causal, loss=self.loss or base.loss,
            routing_imbalance=base.routing_imbalance if self.routing_imbalance is None else self.routing_imbalance,
            limits=replace(base.limits, max_global_batch=self.max_global_batch, max_tile_batch=self.max_tile_batch),
            cuda_graph_scope=cuda_graph_scopes(self.cuda_graph_scope, base.cuda_graph_scope),
            fp8_attention=self.fp8_attention or base.fp8_attention,  # no Megatron flag sets it: a launch cannot
            fsdp_impl=self.fsdp_impl or base.fsdp_impl,
        )
        if self.gpus_per_node is None:
            request = launch_domain(request, profile, stated_domain)
        if self.nccl_ub or self.nvls:  # the command line adds nccl_ub / NVLS to an imported run's own
            request = request.with_changes(nccl_ub=self.nccl_ub or request.nccl_ub, nvls=self.nvls or request.nvls)
        return request


def _reported(report: Any, problem: tuple[Any, Any, Any], printing: Printing) -> int:
    """The plan (with --sensitivity's moves) as JSON or tables, written together, or the configuration --emit
    prints; --profile's report on stderr. `problem`: the model, the profile and the request it was planned with."""
    outs, code = printing.outs, 0 if report.plan.fits else 1
    if printing.emit is not None:
        text = _emitted(report, printing.emit, problem[0], problem[1])
        write_outputs(outs, {"--output": text, "--json": text}, None)
        return _profiled(code, printing.profile_run)
    if printing.sensitivity is not None:
        from ..planning.sensitivity import sensitivity as run_sensitivity

        report.sensitivity = run_sensitivity(*problem, printing.sensitivity)
    text = model_json(report)

    def table() -> Any:
        from ..output.tables import plan_renderable

        return plan_renderable(report)

    with profiling.stage("output"):
        write_outputs(outs, {"--output": text, "--json": text}, table)
    return _profiled(code, printing.profile_run)


def _print_profile() -> None:
    total = time.perf_counter() - profiling.STARTED
    c = profiling.counts
    lines = [f"model evaluations {c['model evaluations']} (calls of the generated formulas: one per problem and "
             f"sequence length, i.e. the plan and its dense reference, each with its parameter counts), batch shapes "
             f"evaluated {c['shapes evaluated']:,}, candidate searches {c['candidate searches']}, density searches "
             f"{c['density searches']}, step-time passes {c['step-time passes']}",
             ", ".join(f"{name} {1e3 * s:.1f} ms" for name, s in profiling.seconds.items()) + f"; total {1e3 * total:.1f} ms"]
    for line in lines:
        err.print(f"btacalc profile: {line}", highlight=False, markup=False, soft_wrap=True)


def _schema_alone(ctx: typer.Context) -> None:
    """--schema prints the plan's JSON schema, the same for every plan: another plan option (on the command line or
    from --config) would be ignored, so it is refused; --output and --json say where the schema goes, and --search
    asks for the search's schema instead."""
    others = {p.name: p for p in ctx.command.params
              if p.name and p.name not in ("schema", "output", "as_json", "search")}
    given = given_on_command_line(ctx, tuple(others))
    if given:
        opts = getattr(others[given[0]], "opts", None) or ["--" + given[0].replace("_", "-")]
        raise BtacalcError(f"--schema prints the plan's JSON schema, the same for every plan: {opts[0]} would change "
                           "nothing (--schema takes only --output, --json and --search)")


def _given(ctx: typer.Context, name: str) -> bool:
    return bool(given_on_command_line(ctx, (name,)))


def _imported_run(ctx: typer.Context, megatron: Optional[Path], bridge: Optional[Path], devices: Optional[int],
                  model_name: str) -> Any:
    """The model and run of --from-megatron / --from-bridge (None without them); other plan options are refused:
    the file is the run."""
    if megatron is None and bridge is None:
        return None
    if megatron is not None and bridge is not None:
        raise BtacalcError("{from_megatron} and {from_bridge}: give one run")
    if not _given(ctx, "hw"):  # hostile30: the default wse3 blamed the launch's GPU options
        raise BtacalcError(f"{{{'from_megatron' if megatron is not None else 'from_bridge'}}} plans a GPU run: give "
                           "{hw} (a GPU profile: btacalc hw list)")
    keeps = IMPORT_KEEPS + (("model",) if bridge is not None else ())  # Bridge recipes take the model from HF
    others = [p.name for p in ctx.command.params if p.name and p.name not in keeps]
    given = given_on_command_line(ctx, tuple(others))
    if given:
        # freshuser21: the list named three of the run options the file leaves to the command line, so a user read
        # --routing-imbalance or --gpus-per-node as refused beside a launch
        added = ", ".join("{" + p + "}" for p in keeps if p not in IMPORT_PRINTS)
        raise BtacalcError(f"{{{given[0]}}} with {{{'from_megatron' if megatron else 'from_bridge'}}}: the file "
                           f"gives the run (only {added} and how to solve and print may be added)")
    from ..config.bridge_run import import_bridge
    from ..config.megatron_run import import_megatron
    from ..config.presets import resolve_model

    if megatron is not None:
        return import_megatron(read_text(megatron, "{from_megatron}"), str(megatron), devices)
    assert bridge is not None  # one of the two, checked above
    base = resolve_model(model_name) if _given(ctx, "model") else None
    return import_bridge(read_text(bridge, "{from_bridge}"), str(bridge), devices, base)


def _check_emit(emit: Optional[str], search: bool, profile: Any, request: Any, sensitivity: Optional[float] = None,
                as_json: bool = False) -> None:
    """--emit megatron/bridge and --search choose and print GPU layouts; --emit cerebras/modelzoo a wafer
    configuration. Neither prints one plan, so --sensitivity (moves printed with the plan) has nowhere to go,
    and --json beside --emit would print the configuration, not JSON (review5: both were dropped, exit 0). Then
    the request's own refusals of each --emit (_check_megatron_emit, _check_wafer_emit)."""
    gpu = profile.family == "gpu"
    if (emit in ("megatron", "bridge") or search) and not gpu:
        what = f"{{emit}} {emit}" if emit in ("megatron", "bridge") else "{search}"
        hint = ("--emit cerebras (or modelzoo) prints a wafer plan's Cerebras configuration" if emit else
                "a wafer plan has no layout to search: the solver chooses its G and b")
        raise BtacalcError(f"{what} chooses and prints GPU layouts: {profile.name} is a wafer-scale profile; {hint}")
    if emit in ("cerebras", "modelzoo") and gpu:
        raise BtacalcError(f"{{emit}} {emit} prints a Cerebras Model Zoo configuration and needs a wafer-scale profile: "
                            f"{profile.name} is a GPU")
    if sensitivity is not None and (emit is not None or search):
        what = f"{{emit}} {emit} prints a configuration" if emit is not None else "{search} prints a ranking of layouts"
        raise BtacalcError(f"{{sensitivity}} moves the hardware numbers of one plan and prints them with it: {what} "
                           "instead (plan the chosen layout with --sensitivity)")
    if as_json and emit is not None:
        raise BtacalcError(f"--json prints the plan as JSON; {{emit}} {emit} prints a configuration instead, on "
                           "standard output or to --output: give one")
    _check_megatron_emit(emit, request)
    _check_wafer_emit(emit, request)


def _megatron_runs_kernel(name: str) -> bool:
    from ..config.attention_kernels import attention_kernel

    return attention_kernel(name).megatron_launch


# Plans a Megatron launch cannot run: (the request's option, does the request use it, why Megatron does not run it)
_NOT_MEGATRON: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("{fsdp_impl} torch", lambda r: r.fsdp_impl == "torch", "plans PyTorch FSDP1, which Megatron does not run"),
    ("{fsdp_impl} fsdp2", lambda r: r.fsdp_impl == "fsdp2", "plans PyTorch FSDP2, which Megatron does not run"),
    ("{loss} " + " / ".join(TORCH_LOSSES), lambda r: r.loss in TORCH_LOSSES,
     "is PyTorch's cross-entropy as torchtitan runs it; Megatron runs its own vocab-parallel one"),
    ("{recompute} op", lambda r: r.recompute == "op",
     "is torchtitan's per-op activation checkpoint; Megatron recomputes whole layers or named modules"),
    ("{checkpoint_early_stop}", lambda r: bool(r.checkpoint_early_stop),
     "is PyTorch's non-reentrant checkpoint, and Megatron's recomputation re-runs the whole layer"),
    ("{eager_kernels}", lambda r: bool(r.eager_kernels),
     "plans eager PyTorch's kernels (llm-foundry's MPT block), which a Megatron launch does not run"),
    # review19: flash-attn-2-varlen was written as --attention-backend fused, a cuDNN launch for a plan timed at
    # FlashAttention-2 plus llm-foundry's gathers (attention_kernels.toml `megatron_launch`)
    ("{attention_kernel}",
     lambda r: r.attention_kernel is not None and not _megatron_runs_kernel(r.attention_kernel),
     "plans llm-foundry's own attention (triton-flash, flash-attn-2-varlen), which a Megatron launch does not run "
     "(TransformerEngine's are flash-attn-2, the flash backend, and default, the fused one)"),
    # freshuser17: written as Megatron-FSDP, which --from-megatron / --from-bridge read back as --fsdp (more memory)
    ("{zero_stage} 3 without {fsdp}", lambda r: r.zero_stage == 3 and not r.fsdp,
     "plans ZeRO-3 gathering one layer's weights at a time; Megatron's ZeRO-3 is Megatron-FSDP "
     "(--data-parallel-sharding-strategy optim_grads_params), which btacalc plans as {fsdp}: give --fsdp"),
)


def _check_megatron_emit(emit: Optional[str], request: Any) -> None:
    """--emit megatron / bridge prints a Megatron launch: refuse a request whose plan Megatron does not run."""
    if emit not in ("megatron", "bridge"):
        return
    for option, used, why in _NOT_MEGATRON:
        if used(request):
            raise BtacalcError(f"{{emit}} {emit} prints a Megatron launch: {option} {why}")


def _check_wafer_emit(emit: Optional[str], request: Any) -> None:
    """--emit cerebras / modelzoo writes the batch, the systems and BTA's flags, no precision section (Model Zoo's
    trainer.init.precision stays the config's own): --precision fp16 would not reach the run (hostile16: it was
    emitted exactly as bf16, in silence)."""
    if emit in ("cerebras", "modelzoo") and request.precision == "fp16":
        raise BtacalcError(f"{{emit}} {emit} writes no precision setting (the Model Zoo config keeps its own "
                           "trainer.init.precision), so {precision} fp16 would not reach the run: plan bf16 and set "
                           "the precision in the config")


def _profiled(code: int, profile_run: bool) -> int:
    """`code`, after --profile's report on stderr (a search and an --emit report it too)."""
    if profile_run:
        _print_profile()
    return code


def _emitted(report: Any, emit: Optional[str], spec: Any, profile: Any) -> str:
    if emit in ("megatron", "bridge"):
        from ..output.megatron import bridge_overrides, megatron_arguments

        # the profile's NVLink domain, in which the file is read back where it states none (hostile25)
        domain = profile.system.domain_devices
        return (megatron_arguments if emit == "megatron" else bridge_overrides)(report, spec, domain)
    from ..output.cerebras import cerebras_yaml

    return cerebras_yaml(report, spec)


def _search(spec: Any, profile: Any, request: Any, outs: Any, emit: Optional[str]) -> int:
    from ..planning.search import search_layouts

    def note(template: str) -> None:  # hostile42: a long search says so before it starts
        err.print(f"btacalc: {with_flags(BtacalcError(template))}", highlight=False, markup=False, soft_wrap=True)

    result = search_layouts(spec, profile, request, note)
    ok = result.best is not None and result.best.plan.fits
    if emit is not None and result.best is not None:
        text = _emitted(result.best, emit, spec, profile)
        write_outputs(outs, {"--output": text, "--json": text}, None)
        return 0 if ok else 1
    if emit is not None:
        return _nothing_to_emit(result, emit, outs)
    text = model_json(result)

    def table() -> Any:
        from ..output.search_tables import search_renderable

        return search_renderable(result)

    write_outputs(outs, {"--output": text, "--json": text}, table)
    return 0 if ok else 1


def _nothing_to_emit(result: Any, emit: str, outs: Any) -> int:
    """hostile41: `plan --search --emit megatron -o run.sh` where no layout fits wrote the search's JSON report into
    run.sh (and onto standard output), exit 1, with no word that the launch asked for was not there. No layout is
    chosen, so nothing is written (standard output, where the launch would go, too) and one line on stderr says so
    and where the search's report is; exit 1, a plan that does not fit."""
    files = [str(t.path) for t in outs.targets.values() if t.kind == "file"]
    written = f"; {', '.join(files)} not written" if files else ""
    err.print(f"btacalc: --emit {emit}: none of the {result.candidates:,} layouts of the search fits on "
              f"{result.devices:,} x {result.hardware}, so there is no launch to write{written} (the same command "
              "without --emit shows what binds)", highlight=False, markup=False, soft_wrap=True)
    return 1


# A sweep option --vary sets at every point when it varies the same quantity (the option would change nothing)
SWEPT_OPTIONS = {"seq": "seq", "grad-accum": "grad_accum", "precision": "precision", "devices": "devices",
                 "global-batch": "global_batch", "tiles": "tiles", "tile-batch": "tile_batch",
                 "max-global-batch": "max_global_batch", "max-tile-batch": "max_tile_batch"}


def _check_swept_options(ctx: typer.Context, names: Sequence[str], fixed_active: bool,
                         tokens_per_step: Optional[int]) -> None:
    """The sweep's options that need, or are ignored by, what --vary sets (one-line errors)."""
    from ..planning.sweep import LIMIT_PARAMS

    for name in (n for n in names if n in SWEPT_OPTIONS and _given(ctx, SWEPT_OPTIONS[n])):
        option = next(p for p in ctx.command.params if p.name == SWEPT_OPTIONS[name])
        raise BtacalcError(f"{'/'.join(option.opts)} would change nothing: --vary {name} sets it at every point "
                           "(give one)")
    if fixed_active and "top-k" not in names:
        raise BtacalcError("{fixed_active} needs --vary top-k=...")
    # a batch size at every point: no default global batch
    fixing = [f"--vary {n}" for n in names if n in LIMIT_PARAMS]
    fixing += [f"--{n}" for n in ("global-batch", "tiles", "tile-batch", "max-global-batch", "max-tile-batch")
               if _given(ctx, n.replace("-", "_"))]
    if tokens_per_step is not None and fixing:
        raise BtacalcError(f"{{tokens_per_step}} sets the global batch of a point that fixes no batch size: "
                           f"{fixing[0]} fixes it at every point")


def sweep(
    ctx: typer.Context,
    model: str = ModelOpt,
    name: Optional[str] = NameOpt,
    hw: str = HwOpt,
    vary: list[str] = typer.Option(..., "--vary", help="NAME=VALUES: a,b,c or start:stop:step or start:stop:xF. "
                                   "Names: experts, top-k, expert-ffn, seq, global-batch, tiles, tile-batch, "
                                   "max-global-batch, max-tile-batch, devices, grad-accum, precision (names: bf16,mxfp8,nvfp4)."),
    fixed_active: bool = FixedActiveOpt,
    seq: Optional[int] = SeqOpt,
    global_batch: Optional[int] = GlobalBatchOpt,
    tiles: Optional[int] = TilesOpt,
    tile_batch: Optional[int] = TileBatchOpt,
    max_global_batch: Optional[int] = MaxGlobalBatchOpt,
    max_tile_batch: Optional[int] = MaxTileBatchOpt,
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
    objective: Optional[Objective] = ObjectiveOpt,
    tokens_per_step: Optional[int] = TokensPerStepOpt,
    precision: Optional[Precision] = PrecisionOpt,
    recipe: RecipeOptions = RecipeOptions(),  # the shared recipe options (takes_option_groups)
    max_points: Optional[int] = typer.Option(None, "--max-points", min=1, help="Allow a grid of up to this many "
                                             "points (grids above 1,000,000 are refused without it, before any work)."),
    quiet: bool = QuietOpt,
    as_json: bool = typer.Option(False, "--json", help="Print {points: [...]} as JSON on stdout (streamed)."),
    output: Optional[str] = OutputOpt,
    csv_path: Optional[str] = typer.Option(None, "--csv", help="Write one CSV row per point to this file."),
    plot_path: Optional[str] = typer.Option(None, "--plot", help=help_text("Draw relative throughput to FILE.png or "
                                                                           ".svg (needs btacalc[plot]).")),
) -> int:
    """Sweep model or run parameters; every point solved as plan solves it (its G, b and M, and G = 1).

    Points are solved and written in blocks, so output starts early and memory stays bounded. Invalid
    points (e.g. --top-k above --experts) are listed on stderr; exit code 2 when no point is valid.
    """
    from ..config.execution import BatchLimits, ExecutionRequest
    from ..config.hardware import resolve_hardware
    from ..config.presets import resolve_model

    grid = _grid(vary, max_points)
    refuse_fsdp_only("sweep", recompute, value(loss))
    outs = outputs(output, as_json, csv_path, plot_path, inputs={"--model": model, "--hw": hw})
    spec, profile = resolve_model(model, name), resolve_hardware(hw)
    _check_swept_options(ctx, grid.names, fixed_active, tokens_per_step)
    request = ExecutionRequest(
        seq_len=seq, recompute=recompute, attention=value(attention), causal=causal, loss=value(loss),
        limits=BatchLimits(global_batch, tiles, tile_batch, max_global_batch, max_tile_batch),
        memory_model=value(memory_model),
        accounting=value(accounting), overlap_streaming=overlap, devices=devices, expert_parallel=ep,
        zero_stage=zero, devices_per_node=gpus_per_node, overlap_all_to_all=overlap_a2a, micro_batches=grad_accum,
        objective=value(objective), tokens_per_step=tokens_per_step, precision=value(precision),
        **recipe.request_fields(), **layout.request_fields())
    _stream(outs, grid, spec, profile, request, fixed_active, max_points, plot_path, quiet)
    return 0


def _grid(vary: list[str], max_points: Optional[int]) -> Any:
    """The sweep's grid, refused before any work when it holds more than --max-points (default 1,000,000)."""
    from ..planning.sweep import Grid
    from .parsing import parse_vary

    grid = Grid.of(parse_vary(vary))
    grid.check(max_points)
    return grid


def _stream(outs: Any, grid: Any, spec: Any, profile: Any, request: Any, fixed_active: bool, max_points: Optional[int],
            plot_path: Optional[str], quiet: bool) -> None:
    """Solve the grid block by block, each block written as it is solved (staged files committed at the end)."""
    from ..planning.sweep import iter_sweep
    from .sweeping import SweepOutputs, no_fit_line

    no_fit = no_fit_line(profile.family != "wse", request)
    with SweepOutputs(outs, grid, spec.name, profile.name, fixed_active, plot_path, no_fit) as sink:
        with progress(grid.size, "solving", quiet) as advance:
            for block in iter_sweep(spec, profile, request, grid, fixed_active, max_points, with_flags):
                sink.block(block)
                advance(len(block))
        sink.finish()


def register(app: typer.Typer) -> None:
    app.command(epilog=PLAN_EXAMPLES)(takes_option_groups(plan))
    app.command(epilog=SWEEP_EXAMPLES)(takes_option_groups(sweep))

