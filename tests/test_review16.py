"""review16: the refactors' new library objects, tested where they live (each test fails with its change reverted:
the object it calls did not exist, or the decision it reads was made in the output layer)."""

from __future__ import annotations

import pytest

from btacalc.config.megatron_codec import PRECISIONS
from btacalc.config.bridge_codec import BRIDGE_MIXED_DEFAULTS, BRIDGE_RECIPE_FIELDS, BridgeMixed
from btacalc.errors import BtacalcError


# 1. Bridge's mixed precision is one object: written fields and resolved fields, its checks as methods

def test_bridge_mixed_none_without_mixed_precision() -> None:
    assert BridgeMixed.read({"model.bf16": True}, None) is None


def test_bridge_mixed_resolves_recipe_then_overrides() -> None:
    overrides = {"mixed_precision": "bf16_with_fp8_delayed_scaling_mixed", "mixed_precision.fp8_param": False}
    mixed = BridgeMixed.read(overrides, "fp8")
    assert mixed is not None
    assert mixed.recipe == overrides["mixed_precision"]
    assert mixed.fields == {**BRIDGE_RECIPE_FIELDS["fp8"], "fp8_param_gather": False}
    assert {k: mixed.low[k] for k in PRECISIONS["fp8"]} == PRECISIONS["fp8"]
    assert mixed.low["fp4"] is None


def test_bridge_mixed_fields_without_recipe_are_config_defaults() -> None:
    mixed = BridgeMixed.read({"mixed_precision.bf16": True}, None)
    assert mixed is not None and mixed.fields == {**BRIDGE_MIXED_DEFAULTS, "bf16": True}


@pytest.mark.parametrize("kind, recipe, name", [("fp8", "bf16_with_fp8_delayed_scaling_mixed", "fp8"),
                                                ("fp4", "bf16_with_nvfp4_mixed", "nvfp4")])
def test_bridge_mixed_gather_without_low_recipe(kind: str, recipe: str, name: str) -> None:
    mixed = BridgeMixed(recipe, {}, {kind: None}, BRIDGE_RECIPE_FIELDS[name], {"fp8": None, "fp4": None})
    with pytest.raises(BtacalcError, match=f"mixed_precision.{kind}=null with mixed_precision={recipe}, whose recipe "
                                           f"sets {kind}_param_gather = True"):
        mixed.check_gather_has_low()
    with pytest.raises(BtacalcError, match=f"a parameter gather in {kind.upper()} needs"):
        BridgeMixed.read({"mixed_precision": recipe, f"mixed_precision.{kind}": None}, name)


# 2. compare's rows are one request (CompareRequest) beside the run each row plans (ExecutionRequest)

def test_compare_request_counts_rows_per_gpu_count_and_precision() -> None:
    from btacalc.config.hardware import resolve_hardware
    from btacalc.planning.compare import CompareRequest

    wse3, b200, h100 = (resolve_hardware(h) for h in ("wse3", "b200", "h100"))
    request = CompareRequest(devices=(8, 16, 32), precisions=("bf16", "mxfp8"))
    assert request.row_count([wse3, b200, h100]) == 1 + 2 * len(request.devices or ()) * len(request.precisions)
    assert CompareRequest().row_count([wse3, b200]) == 2


@pytest.mark.parametrize("changes, hardware, fragment", [
    ({}, (), "give at least one hardware profile"),
    ({"systems": 2}, ("b200",), "systems 2 sets the wafer rows' systems"),
    ({"search": True}, ("wse3",), "search chooses the GPU rows' layouts"),
    ({"precisions": ("mxfp8",)}, ("wse3",), "precision makes a row per precision"),
    ({"devices": (8,)}, ("wse3",), "devices sets the GPU rows' layout"),
    ({"match": "power"}, ("b200",), "match 'power': give power or devices"),
    ({"match": "power", "devices": (8,)}, ("wse3", "b200"), "match 'power'"),
])
def test_compare_request_refuses_before_planning(changes: dict, hardware: tuple, fragment: str) -> None:
    from btacalc.config.hardware import resolve_hardware
    from btacalc.planning.compare import CompareRequest

    with pytest.raises(BtacalcError) as caught:
        CompareRequest(**changes).check([resolve_hardware(h) for h in hardware])
    assert fragment in str(caught.value)  # str(): the library's parameter names, without braces


# 3. whatif: whether today's plan fits is the library's answer (the table found it by comparing floats)

def _whatif(model: str, devices: int, target: str, solve_for: str):
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import resolve_model
    from btacalc.planning.whatif import whatif

    return whatif(resolve_model(model), resolve_hardware("h100"), ExecutionRequest(devices=devices), target, solve_for)


def test_whatif_says_whether_today_fits() -> None:
    """gpt3-175b on one h100 does not fit today and fits with enough memory; gpt-1.7b fits today. Each answer
    agrees with the trace's step at today's value (today_fits is that step's plan, made once)."""
    short = _whatif("gpt3-175b", 1, "tokens_per_s=1", "memory.offchip_memory_bytes")
    fits = _whatif("gpt-1.7b", 1, "tokens_per_s=1e12", "memory.offchip_memory_bytes")
    assert short.today_fits is False and short.today_metric is None and short.reached and not short.fits_nowhere
    assert fits.today_fits is True and fits.today_metric is not None
    for r in (short, fits):
        assert [s.fits for s in r.trace if s.ratio == 1] == [r.today_fits]
        assert r.model_dump()["today_fits"] is r.today_fits  # in the JSON (whatif --json, validate --json) too


def test_whatif_table_prints_the_libraries_today() -> None:
    """The table prints today_fits as the result says it, with no trace to look it up in."""
    from rich.console import Console

    from btacalc.output.whatif_tables import whatif_renderable

    r = _whatif("gpt3-175b", 1, "tokens_per_s=1", "memory.offchip_memory_bytes")
    for today_fits, said in ((False, True), (True, False)):
        shown = r.model_copy(update={"today_fits": today_fits, "trace": []})
        console = Console(width=200, record=True)
        console.print(whatif_renderable(shown))
        assert ("(the plan does not fit)" in console.export_text()) is said


# 4. plan: what the command line adds to an imported run is one object (cli/plan.py ImportAdditions), how the plan is
# printed another (Printing); the command reads parse -> build request -> plan -> print

def _additions(**given):
    from btacalc.cli.plan import ImportAdditions

    fields = {"gpus_per_node": None, "objective": None, "accounting": None, "causal": False, "loss": None,
              "routing_imbalance": None, "max_global_batch": None, "max_tile_batch": None, "cuda_graph_scope": None,
              "fp8_attention": False, "fsdp_impl": None, "nccl_ub": False, "nvls": False}
    return ImportAdditions(**{**fields, **given})


def test_import_additions_keep_the_files_run_where_not_given() -> None:
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware

    base = ExecutionRequest(accounting="measured", routing_imbalance=1.25, devices_per_node=4, nccl_ub=True,
                            cuda_graph_scope=("attn",), loss="fused")
    h100 = resolve_hardware("h100")
    kept = _additions().over(base, h100)
    assert (kept.accounting, kept.routing_imbalance, kept.devices_per_node, kept.nccl_ub, kept.cuda_graph_scope,
            kept.loss) == (base.accounting, base.routing_imbalance, base.devices_per_node, True, base.cuda_graph_scope,
                           base.loss)
    given = _additions(accounting="ideal", routing_imbalance=1.0, gpus_per_node=8, nvls=True,
                       cuda_graph_scope="moe_router").over(base, h100)
    assert (given.accounting, given.routing_imbalance, given.devices_per_node, given.nccl_ub, given.nvls,
            given.cuda_graph_scope) == ("ideal", 1.0, 8, True, True, ("moe_router",))


def test_import_additions_take_the_launchs_domain_without_gpus_per_node() -> None:
    """A launch of one GB200 tray's GPUs per node runs in the rack's NVLink domain (launch_domain); a given
    --gpus-per-node stands."""
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware

    gb200 = resolve_hardware("gb200")
    host = gb200.system.host_devices
    assert host is not None
    base = ExecutionRequest(devices_per_node=host)
    assert _additions().over(base, gb200).devices_per_node is None
    assert _additions(gpus_per_node=host).over(base, gb200).devices_per_node == host


# 5. duplicates: output/megatron.py run_fields copied nine plan inputs one line each (now one named list)

def test_run_fields_carry_every_named_plan_input() -> None:
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import resolve_model
    from btacalc.output.megatron import RUN_INPUTS, run_fields
    from btacalc.planning.plan import make_plan

    spec = resolve_model("llama-3-8b")
    report = make_plan(spec, resolve_hardware("h100"), ExecutionRequest(devices=8, precision="fp8-current",
                                                                        bf16_layers_at_start=1, cpu_offload_layers=2))
    fields = run_fields(report, spec)
    assert {f"run.{k}": fields[f"run.{k}"] for k in RUN_INPUTS} == {f"run.{k}": getattr(report.inputs, k)
                                                                     for k in RUN_INPUTS}
    assert fields["run.precision"] == "fp8-current" and fields["run.bf16_layers_at_start"] == 1
