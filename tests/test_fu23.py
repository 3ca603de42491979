"""fu23: follow-ups from the thirty-first session's reviews. Each test fails before its fix; the expected values are
derived (from the files' own settings, the profiles' numbers or the plan without the change), not copied from the
tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
BRIDGE = DATA / "megatron" / "qwen3-30b-a3b-8gpu-h100-bridge.yaml"
# the same recipe as Hydra overrides (the words Bridge's scripts take)
HYDRA = ("model.tensor_model_parallel_size=4\nmodel.pipeline_model_parallel_size=2\n"
         "model.expert_model_parallel_size=4\nmodel.expert_tensor_parallel_size=1\n"
         "model.sequence_parallel=true\nmodel.seq_length=4096\ntrain.global_batch_size=32\ntrain.micro_batch_size=2\n"
         "model.recompute_granularity=full\nmodel.recompute_method=uniform\nmodel.recompute_num_layers=1\n"
         "mixed_precision=bf16_mixed\n")
PLAN = ("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--json", "--from-bridge")


def _ignored(out: str) -> list[str]:
    return [item["flag"] for item in json.loads(out)["imported"]["ignored"]]


# 1. An interpolation in a key that maps to a Megatron destination btacalc does not read (model.moe_router_dtype:
# megatron_run.IGNORED's router dtype) was refused ("an interpolation ... give the value"), while one in a key ignored
# at the Bridge level (checkpoint.save) was listed as ignored. The key with a value is listed as ignored, so its
# interpolation is too, and the plan is the plan of the file without the key.
@pytest.mark.parametrize("form", ["yaml", "hydra"])
@pytest.mark.parametrize("key, value", [("model.moe_router_dtype", "fp32"), ("model.moe_z_loss_coeff", 0.001),
                                        ("model.apply_rope_fusion", True)])
def test_an_interpolation_in_a_key_whose_destination_btacalc_does_not_read_is_listed(cli, tmp_path, form, key, value):
    section, field = key.split(".")
    if form == "yaml":
        text = BRIDGE.read_text()
        given = text.replace("model:\n", f"model:\n  {field}: {json.dumps(value)}\n", 1)
        interpolated = text.replace("model:\n", f"model:\n  {field}: ${{oc.env:X}}\n", 1)
        plain = text
    else:
        given = HYDRA + f"{key}={json.dumps(value)}\n"
        interpolated = HYDRA + f"{key}=${{oc.env:X}}\n"
        plain = HYDRA
    results = {}
    for name, text in (("given", given), ("interpolated", interpolated), ("plain", plain)):
        path = tmp_path / f"{name}.{'yaml' if form == 'yaml' else 'txt'}"
        path.write_text(text)
        code, out, err = cli(*PLAN, str(path))
        assert code in (0, 1), err
        results[name] = json.loads(out)
    assert key in [i["flag"] for i in results["given"]["imported"]["ignored"]]  # the premise: a value is ignored
    assert key in [i["flag"] for i in results["interpolated"]["imported"]["ignored"]]
    assert results["interpolated"]["throughput"]["tokens_per_s"] == results["plain"]["throughput"]["tokens_per_s"]


# ... and a key btacalc reads is refused still, including where it reads it only under other settings than the
# file's (model.recompute_num_layers without a granularity: listed, but read under one; model.activation_func, read
# for quick_gelu or squared_relu only): the check errs towards refusing, as _read_by_btacalc's docstring says
# (model.encoder_num_layers was here: the lead's later fix lists it as ignored, T5's key, tests/test_bridge_t5_keys.py)
@pytest.mark.parametrize("key", ["model.expert_model_parallel_size", "model.recompute_num_layers",
                                 "model.activation_func", "model.rotary_base"])
def test_an_interpolation_in_a_key_btacalc_reads_somewhere_is_refused(cli, tmp_path, key):
    path = tmp_path / "r.txt"
    lines = [line for line in HYDRA.splitlines() if not line.startswith(("model.recompute", key + "="))]
    path.write_text("\n".join(lines) + f"\n{key}=${{oc.env:X}}\n")  # no granularity: recompute_num_layers is listed
    code, out, err = cli(*PLAN, str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{key}=${{oc.env:X}}: an interpolation, which Bridge resolves against the recipe's config" in err


def test_the_destinations_read_anywhere_hold_the_conditional_reads():
    """The probes reach the reads behind settings (megatron_run.IGNORED names them: read under --bf16, under a
    granularity, under virtual stages, under MLA's YaRN) and leave out what no row reads."""
    from btacalc.config.megatron_reads import read_anywhere

    read = read_anywhere()
    for dest in ("grad_reduce_in_bf16", "recompute_num_layers", "recompute_method",
                 "microbatch_group_size_per_vp_stage", "quick_geglu", "beta_fast", "original_max_position_embeddings",
                 "expert_model_parallel_size"):
        assert dest in read, dest
    for dest in ("moe_router_dtype", "moe_z_loss_coeff", "apply_rope_fusion", "save", "lr"):
        assert dest not in read, dest


# 2. The wafer plan's header showed its precision without "(default)" where a GPU plan's marked it (the default was
# taken unrecorded), and the parallelism line did not mark ETP where it defaulted to TP (REASONS
# "expert_tensor_parallel", recorded in inputs.defaults). Given explicitly, the same values are no defaults.
def _header(cli, *args: str) -> str:
    code, out, err = cli(*args)
    assert code in (0, 1), err
    return " ".join(out.split())


def test_a_wafer_plan_marks_its_default_precision(cli):
    wafer = ("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3")
    assert "precision bf16 (default)," in _header(cli, *wafer)
    assert "precision bf16, 2-byte" in _header(cli, *wafer, "--precision", "bf16")
    code, out, err = cli(*wafer, "--json")
    assert "16-bit" in json.loads(out)["inputs"]["defaults"]["precision"]
    code, out, err = cli(*wafer, "--precision", "bf16", "--json")
    assert "precision" not in json.loads(out)["inputs"]["defaults"]


def test_a_default_etp_is_marked_in_the_parallelism_line(cli):
    gpu = ("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--tp", "2", "--ep", "8")
    tp = 2  # Megatron-Core's ETP default is the TP size
    assert f"ETP {tp} (default), EDP" in _header(cli, *gpu)
    assert f"ETP {tp}, EDP" in _header(cli, *gpu, "--etp", str(tp))


# 3. `compare --precision mxfp8` beside a wafer skipped the wafer row ("not run: wse3 mxfp8: ... 16-bit training
# only"), and so did a list whose first precision was a low one (`mxfp8,bf16`: the wafer row took the first); "bf16
# wafer vs mxfp8 GPU" gets the wafer row at its only precision, as `plan --hw wse3` plans it, with a one-line note
# when the list has no 16-bit precision.
@pytest.mark.parametrize("precisions, noted", [("mxfp8", True), ("mxfp8,bf16", False)])
def test_compare_keeps_the_wafer_row_at_16_bit(cli, precisions, noted):
    code, out, err = cli("compare", "--model", "qwen3-30b-a3b", "--hw", "wse3,b200", "--devices", "8", "--ep", "8",
                         "--precision", precisions, "--json")
    assert code == 0, err
    result = json.loads(out)
    wafer = [row for row in result["rows"] if row["hardware"] == "wse3"]
    gpu = [row for row in result["rows"] if row["hardware"] == "b200"]
    assert len(wafer) == 1 and wafer[0]["precision"] == "bf16"
    assert sorted(row["precision"] for row in gpu) == sorted(precisions.split(","))
    assert not any(s.startswith("wse3") for s in result["skipped"])
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--json")
    assert wafer[0]["tokens_per_s"] == json.loads(out)["throughput"]["tokens_per_s"]
    assert ("a wafer trains in 16-bit" in wafer[0]["note"]) is noted


# 4. `whatif --solve-for cores` on a GPU answered "best at 1 SM": a GPU's cores are its SMs, which the plan reads for
# the GEMMs' waves and the SMs communication kernels hold, at the profile's per-device peak; moved alone they spread
# the same peak over more or fewer SMs. Refused in one line naming the numbers that scale the device; moved with the
# peaks the plan's GEMMs run at, the SM count answers. A wafer's count was refused already (the plan does not use it).
GPU16 = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16")


@pytest.mark.parametrize("extra, wanted", [((), "chip.cores,chip.peak_flops_per_s"),
                                           (("--precision", "fp8"),
                                            "chip.cores,chip.peak_flops_per_s,chip.peak_fp8_flops_per_s")])
def test_whatif_refuses_a_gpus_cores_alone(cli, extra, wanted):
    for solve_for in ("cores", "chip.cores", "cores,sram_bytes"):
        code, out, err = cli("whatif", *GPU16, *extra, "--solve-for", solve_for, "--target", "tokens_per_s=130000")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "SM count" in err and err.rstrip().endswith(wanted)


def test_whatif_scales_a_gpu_with_its_peak(cli):
    """Today's 132 SMs at 989 TFLOP/s: at the answer both moved by its ratio, and the plan there (a profile with the
    two numbers scaled, as plan would read it) reaches the target."""
    code, out, err = cli("plan", *GPU16, "--json")
    today = json.loads(out)["throughput"]["tokens_per_s"]
    code, out, err = cli("whatif", *GPU16, "--solve-for", "chip.cores,chip.peak_flops_per_s", "--target",
                         f"tokens_per_s={1.1 * today}", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["today_value"] == 132 and doc["value"] == int(doc["value"]) > 132
    assert doc["answer"]["metric"] >= 1.1 * today


def test_whatif_of_a_wafers_cores_still_says_it_changes_nothing(cli):
    code, out, err = cli("whatif", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--solve-for", "cores", "--target",
                         "tokens_per_s=200000")
    assert code == 2 and "would change nothing" in err


# 5. `plan --emit megatron|bridge` of a tiled plan (G > 1) planned twice: the solver's plan, then the untiled one at its
# step batch (freshuser21: Megatron runs its micro-batch untiled). Where the request fixes the global batch, the untiled
# plan is planned at once. The emitted text is byte for byte what the two passes wrote: derived here by the two passes
# themselves (the library's make_plan and the launch writers, as cli/plan.py called them before), for a tiled case
# (G = 2 under full recomputation) and an untiled one (the solver's own G = 1).
TILED = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--recompute", "full", "--global-batch", "256")
UNTILED = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16", "--global-batch", "1024")


def _two_passes(request, spec, profile, emit: str) -> str:
    from dataclasses import replace

    from btacalc.output.megatron import bridge_overrides, megatron_arguments
    from btacalc.planning.plan import make_plan

    free = request.with_changes(limits=replace(request.limits, tiles=None))
    report = make_plan(spec, profile, free)
    if report.plan.tiles > 1:
        report = make_plan(spec, profile, request.with_changes(limits=replace(request.limits, tiles=1)))
    write = megatron_arguments if emit == "megatron" else bridge_overrides
    return write(report, spec, profile.system.domain_devices)


@pytest.mark.parametrize("emit", ["megatron", "bridge"])
@pytest.mark.parametrize("args, tiles", [(TILED, 2), (UNTILED, 1)])
def test_an_emitted_launch_with_a_fixed_global_batch_is_planned_once(cli, monkeypatch, emit, args, tiles):
    import btacalc.planning.plan as plan_module

    real, calls = plan_module.make_plan, []

    def counted(spec, profile, request, *rest, **kw):
        calls.append((spec, profile, request))
        return real(spec, profile, request, *rest, **kw)

    code, out, err = cli("plan", *args, "--json")
    assert json.loads(out)["plan"]["tiles"] == tiles  # the premise: the solver's own G
    monkeypatch.setattr(plan_module, "make_plan", counted)
    code, out, err = cli("plan", *args, "--emit", emit)
    assert code == 0, err
    assert len(calls) == 1 and calls[0][2].limits.tiles == 1
    monkeypatch.setattr(plan_module, "make_plan", real)
    spec, profile, request = calls[0]
    before = _two_passes(request, spec, profile, emit)
    assert out == before + ("" if before.endswith("\n") else "\n")
