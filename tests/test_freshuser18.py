"""freshuser18: a new user's pass over the README on a clean install (no extras) and the numbers checked by hand.

docs/story.md "freshuser18" says what each test pins and what happened before.
"""

from __future__ import annotations

import sys

import pytest


def _no_matplotlib(monkeypatch) -> None:
    """matplotlib not importable, as on a `pip install '.[test]'` without the plot extra (a sys.modules entry
    of None makes `import` raise ImportError)."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)


def _refuse_work(monkeypatch, target: str) -> None:
    def work(*args, **kwargs):
        raise AssertionError(f"{target} ran before --plot's missing extra was refused")

    monkeypatch.setattr(target, work)


# The README's own --plot commands (crossover: 4 s of work, validate --cross-validate: 21 s, then the refusal)
@pytest.mark.parametrize("args,work", [
    (("crossover", "--hidden", "2048", "--plot", "crossover.png"), "btacalc.planning.crossover.crossover"),
    (("validate", "--cross-validate", "--plot", "crossval.png"), "btacalc.planning.crossval.validate_cross"),
    (("validate", "--plot", "accuracy.png"), "btacalc.planning.measured.measured_report"),
    (("compare", "--hw", "wse3,b200", "--plot", "compare.png"), "btacalc.cli.cluster._compared"),
])
def test_a_missing_plot_extra_is_refused_before_any_work(cli, tmp_path, monkeypatch, args, work):
    monkeypatch.chdir(tmp_path)
    _no_matplotlib(monkeypatch)
    _refuse_work(monkeypatch, work)
    code, out, err = cli(*args)
    assert code == 2, err
    assert err == "btacalc: error: --plot needs matplotlib: pip install 'btacalc[plot]'\n"
    assert out == "" and list(tmp_path.iterdir()) == []



def test_a_plot_path_fault_is_named_before_the_missing_extra(cli, tmp_path, monkeypatch):
    """Without matplotlib, `compare --plot folder.png` (a folder of that name exists) names the folder, as it does
    with the extra (test_bad_input's case, which failed on a fresh '.[test]' install when the extra's check came
    first): the path's own fault, then the environment's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.png").mkdir()
    _no_matplotlib(monkeypatch)
    code, out, err = cli("compare", "--hw", "wse3", "--plot", "folder.png")
    assert code == 2 and "is a folder" in err and "matplotlib" not in err, err

# A newcomer's spellings: the Hugging Face repository's case, a device in capitals, a short or underscored
# name. Each is one line naming the preset or profile meant, before the full list.
@pytest.mark.parametrize("args,meant", [
    (("plan", "--model", "Qwen3-30B-A3B", "--hw", "h100"), "--model: unknown model 'Qwen3-30B-A3B': did you mean qwen3-30b-a3b?"),
    (("plan", "--model", "qwen3_30b_a3b"), "--model: unknown model 'qwen3_30b_a3b': did you mean qwen3-30b-a3b?"),
    (("plan", "--model", "qwen3-30b"), "--model: unknown model 'qwen3-30b': did you mean qwen3-30b-a3b?"),
    (("plan", "--model", "llama3-8b"), "--model: unknown model 'llama3-8b': did you mean llama-3-8b?"),
    (("plan", "--hw", "H100"), "--hw: unknown hardware 'H100': did you mean h100?"),
    (("plan", "--hw", "WSE3"), "--hw: unknown hardware 'WSE3': did you mean wse3?"),
    (("plan", "--hw", "wse-3"), "--hw: unknown hardware 'wse-3': did you mean wse3?"),
    (("compare", "--hw", "wse3,B200"), "--hw: unknown hardware 'B200': did you mean b200?"),
    (("hw", "show", "GB200"), "unknown hardware 'GB200': did you mean gb200?"),
    (("models", "show", "Llama-3-8B"), "unknown model 'Llama-3-8B': did you mean llama-3-8b?"),
])
def test_a_misspelt_name_says_which_one_was_meant(cli, args, meant):
    code, out, err = cli(*args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("btacalc: error: ") and meant in err, err
    assert "built-in: " in err  # the list stays, after the guess


def test_the_guess_is_a_known_name_for_every_case_of_every_name():
    """Every preset and profile, upper-cased or with `_` for `-`, is guessed back exactly."""
    from btacalc.config.text import nearest_name
    from btacalc.paths import preset_names, profile_names

    for names in (preset_names(), profile_names()):
        for name in names:
            assert nearest_name(name.upper(), names) == name
            assert nearest_name(name.replace("-", "_"), names) == name
    # a name like none is not guessed at (the list alone follows)
    assert nearest_name("cs3", profile_names()) is None and nearest_name("xyz", preset_names()) is None


# A layout or a batch that does not divide: the line says what would, from the numbers given.
@pytest.mark.parametrize("args,fix", [
    (("--devices", "16", "--tp", "3"), ": --tp must divide 16: 1, 2, 4, 8 or 16"),
    (("--devices", "16", "--pp", "5"), ": --pp must divide 16: 1, 2, 4, 8 or 16"),
    (("--devices", "16", "--ep", "6"), ": --ep must divide 16: 1, 2, 4, 8 or 16"),
    (("--devices", "16", "--tp", "2", "--pp", "3"), ": give sizes whose product divides 16"),
    # ETP took --tp's value unasked: the line names --etp 1
    (("--devices", "16", "--tp", "2", "--ep", "16"), ": --etp 1 would divide (ETP is TP unless given, Megatron-Core's "
                                                     "default; the MoE README recommends 1 for fine-grained experts)"),
    (("--devices", "16", "--global-batch", "100"), ": give a multiple of 16 (96 or 112)"),
    (("--devices", "16", "--tp", "16"), "(each rank holds whole heads): --tp must divide 4: 1, 2 or 4"),
    (("--devices", "64", "--experts", "96", "--ep", "64"), "the 96 experts: --ep must divide 96: 1, 2, 3, 4, 6, 8, 12, "
                                                           "16, 24, 32, 48 or 96"),
    (("--devices", "8", "--hw", "a100-80gb", "--precision", "fp8"), "(chip.peak_fp8_flops_per_s): train in bf16, or on "
                                                                    "a profile that has it (btacalc hw list)"),
    (("--devices", "16", "--global-batch", "8"), ": give a multiple of 16 (the smallest: 16)"),
    (("--devices", "16", "--global-batch", "256", "--micro-batch", "3"), "(DP·micro batch)): give 240 or 288"),
])
def test_a_size_that_does_not_divide_says_what_would(cli, args, fix):
    hw = () if "--hw" in args else ("--hw", "h100")
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", *hw, *args)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.rstrip("\n").endswith(fix), err


def test_what_would_divide_is_what_plans():
    """The sizes offered are exactly the divisors of the device count, and a device count with many divisors
    names the rule instead of a long list."""
    from btacalc.config.execution import MAX_LISTED_DIVISORS, _divisor_fix

    fix = _divisor_fix([("tensor_parallel", 3), ("pipeline_parallel", 1), ("context_parallel", 1)], 48)
    offered = [int(v) for v in fix.split(": ")[1].replace(" or ", ", ").split(", ")]
    assert offered == [d for d in range(1, 49) if 48 % d == 0]
    many = 720720  # 240 divisors
    assert _divisor_fix([("expert_parallel", 7 * 11 * 13 * 17), ("pipeline_parallel", 1)], many) == \
        "{expert_parallel} must divide 720720" and MAX_LISTED_DIVISORS < 240


def _plan(cli, *args):
    import json

    code, out, err = cli("plan", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_flops_table_says_what_it_counts(cli, monkeypatch):
    """A GPU plan of M = 32 micro-batches under TP 2: the phase and FLOPs tables hold one micro-batch of one data-
    parallel rank, one TP rank's share (the forward FLOPs are one sequence's, halved), and their titles said "per
    step"; 6N per token over the step's tokens is M x DP x TP x (model total) of the table."""
    monkeypatch.setenv("COLUMNS", "200")
    args = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--tp", "2", "--ep", "8",
            "--global-batch", "256", "--micro-batch", "1")
    r = _plan(cli, *args)
    m, dp, tp = r["plan"]["micro_batches"], r["parallelism"]["data_parallel"], r["parallelism"]["tensor_parallel"]
    assert (m, dp, tp) == (32, 8, 2)
    # the step's model FLOPs (MFU's numerator) are M x DP x TP of the table's model total, to the LM head's
    # vocabulary padding (151,936 -> 152,064 rows, 128 x TP: the table counts the padded GEMM, MFU the model)
    step_flops = r["throughput"]["mfu"] * r["throughput"]["step_time_s"] * 16 * r["hardware"]["peak_flops_per_s"]
    padding = 6 * 128 * 2048 * 4096 / tp
    assert step_flops == pytest.approx(m * dp * tp * (r["flops_per_step"]["total"] - padding), rel=1e-9)
    code, out, _ = cli("plan", *args)
    assert code == 0
    assert "One decoder layer, per micro-batch (G=1, b=1)" in out and "FLOPs per micro-batch (matmul, 2mnk)" in out
    assert "per step (G=" not in out and "FLOPs per step" not in out
    flat = " ".join(out.split())
    assert "G·b = 1 sequences of one data-parallel rank, M = 32 of them per step; one device's share under TP 2" in flat


def test_a_step_of_one_micro_batch_is_still_per_step(cli, monkeypatch):
    """The wafer's quick start (M = 1, no TP): the README's "One decoder layer, per step" stays true and no basis
    note is added; a low-precision plan's cast column says per micro-batch in its caption."""
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3")
    assert code == 0 and "One decoder layer, per step (G=14, b=13)" in out and "FLOPs per step" in out
    assert "of one data-parallel rank" not in out
    code, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--precision", "mxfp8")
    flat = " ".join(out.split())
    assert code == 0 and "cast: their quantise kernels (HBM-bound), per layer per micro-batch" in flat


@pytest.fixture(scope="module")
def measured():
    from btacalc.planning.measured import validate_measured

    return validate_measured()


def _rendered(renderable) -> str:
    from rich.console import Console

    console = Console(width=400, color_system=None)
    with console.capture() as captured:
        console.print(renderable)
    return captured.get()


def test_each_measured_run_says_its_verdict_and_band(measured):
    """`validate`'s measured table gave predicted, measured and error per run, and the bands only in the summary
    under it: a run at +188.5% read like any other. Each row now says its status, as the published points do,
    from the same rule the gate applies; the titles give the per-run bands (the twenty-eighth session split the
    table in two: time for every run with a time, peak memory for the runs that measured it, each its verdict)."""
    from btacalc.output.validation_tables import measured_table
    from btacalc.planning.measured import run_status

    bands = measured.bands
    text = _rendered(measured_table(measured))
    time_part, memory_part = text.split("Measured training runs vs btacalc: peak memory", 1)
    assert "Measured training runs vs btacalc: time (tokens/s per device; a check run's band ±25%)" in time_part
    assert memory_part.split("\n", 1)[0].rstrip().endswith("a check run's band ±5%)")

    def rows(part):
        return {line.split("│")[1].strip(): line.replace(" ", "") for line in part.splitlines()
                if line.startswith("│")}

    time_rows, memory_rows = rows(time_part), rows(memory_part)
    statuses = {r.id: run_status(r, bands).split("; ") for r in measured.runs}
    for run in measured.runs:
        time_verdicts = [v for v in statuses[run.id] if not v.startswith("mem ")]
        memory_verdicts = [v.removeprefix("mem ") for v in statuses[run.id] if v.startswith("mem ")]
        if run.measured.tokens_per_s_per_device or run.measured.step_time_s:
            assert time_rows[run.id].endswith("│" + ("".join(time_verdicts) or "-").replace(" ", "") + "│"), run.id
        else:
            assert run.id not in time_rows and run.id in memory_rows, run.id
        if memory_verdicts:
            assert memory_rows[run.id].endswith("│" + memory_verdicts[0].replace(" ", "") + "│"), run.id
        if run.role == "fit":
            assert statuses[run.id] == ["fit"]
        elif run.error is not None:
            inside = abs(run.error) <= bands.per_run_abs_error
            expected = {(True, False): "pass", (False, True): "KNOWN GAP"}[(inside, bool(run.known_gap))]
            assert time_verdicts[0] == expected
    assert measured.gate.ok and not any("FAIL" in v or "UNEXPECTED" in v for s in statuses.values() for v in s)
    assert statuses["qwen3-30b-a3b-h100-16-fp8-current-253"] == ["KNOWN GAP"]
    assert statuses["qwen3-30b-a3b-h100-16-389"] == ["pass", "mem KNOWN GAP"]
    assert time_rows["qwen3-30b-a3b-h100-16-389"].endswith("│pass│")
    assert memory_rows["qwen3-30b-a3b-h100-16-389"].endswith("│KNOWNGAP│")


def test_a_run_outside_its_band_reads_fail_as_the_gate_says(measured):
    from btacalc.planning.measured import gate, run_status

    bands, run = measured.bands, next(r for r in measured.runs if r.role == "check" and r.error is not None
                                      and not r.known_gap and r.memory_error is None)
    out = run.model_copy(update={"error": bands.per_run_abs_error * 1.5})
    back = run.model_copy(update={"known_gap": "was"})
    assert run_status(out, bands) == "FAIL" and run_status(back, bands) == "UNEXPECTED PASS"
    failures = gate([out, back], [], bands).failures
    assert [f.split(":")[0] for f in failures] == [run.id, run.id]


def test_the_schema_names_every_key_of_a_collective(cli):
    """Issue 21's collectives are untyped objects in the report: the schema's description is all a script has, and
    it named them in words ("bus bytes per call", "latency per call") but not by key."""
    import dataclasses
    import json

    from btacalc.model.gpu.collectives import CollectiveRow

    code, out, _ = cli("plan", "--schema")
    assert code == 0
    text = json.loads(out)["$defs"]["Throughput"]["properties"]["collectives"]["description"]
    for field in dataclasses.fields(CollectiveRow):
        assert field.name in text, field.name
    row = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--tp", "4", "--ep", "4",
                "--global-batch", "256", "--micro-batch", "1")["throughput"]["collectives"][0]
    assert set(row) == {f.name for f in dataclasses.fields(CollectiveRow)}
    # the TP ring's message: each rank sends 3/4 of the gathered s x h activation (4096 x 2048 x 2 bytes)
    assert (row["name"], row["message_bytes"]) == ("tensor_parallel", 4096 * 2048 * 2 * 3 / 4)


def test_a_wafer_plan_says_what_it_offloads(cli, monkeypatch):
    """The wafer's quick start: stored_activations read 6.99 GB, "kept for backward, all layers, G·b sequences",
    where the layers' checkpoints alone are 48 x 2sbh x G·b = 146.6 GB (full recomputation, 182 sequences): the
    rest, and the recomputed layer, go to the activation servers (model/wafer/offload.py), which neither the table
    nor the JSON said. Now both do, and the three parts add up to what the phases store and recompute."""
    monkeypatch.setenv("COLUMNS", "200")
    r = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "wse3")
    mem, off = r["memory_bytes"], r["wafer"]["offloaded_activation_bytes"]
    layers = r["model"]["num_layers"]
    stored = layers * sum(p["stored_activation_bytes"] for p in r["phases"]) + sum(
        p["stored_activation_bytes"] for p in r["outside_layers"])
    recomputed = sum(p["recompute_bytes"] for p in r["phases"])
    gb = r["plan"]["tiles"] * r["plan"]["tile_batch"]
    assert r["phases"][0]["stored_activation_bytes"] == 2 * 4096 * 2048 * gb  # the layer input, 2sbh at G·b
    assert mem["stored_activations"] + mem["recompute_buffer"] + off == stored + recomputed
    assert off > 30 * mem["stored_activations"]
    # review36: the recomputed layer's offloaded part, apart (it exists only during its layer's backward): here the
    # checkpoints are kept first, so all of the recomputed layer but what SRAM keeps of it is offloaded
    off_r = r["wafer"]["offloaded_recompute_bytes"]
    assert off_r == recomputed - mem["recompute_buffer"] and 0 < off_r < off
    assert off - off_r == stored - mem["stored_activations"]
    code, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3")
    flat = " ".join(out.split())
    assert code == 0 and f"activations offloaded to the activation servers: {off / 1e9:.2f} GB per micro-batch" in flat
    assert (f"checkpoints {(off - off_r) / 1e9:.2f} GB, out in forward and back in backward, and recomputed "
            f"activations {off_r / 1e9:.2f} GB, out and back within their layer's backward") in flat


@pytest.mark.parametrize("given,preset", [("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
                                          ("meta-llama/Meta-Llama-3-8B", "llama-3-8b"),
                                          ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
                                          ("someone/my-own-model", None)])
def test_a_hugging_face_repository_id_says_what_to_give(cli, tmp_path, monkeypatch, given, preset):
    """`--model Qwen/Qwen3-30B-A3B`, the name on the model card, read "model file ... not found"."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("plan", "--model", given, "--hw", "h100")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert (f"model file '{given}' not found: a Hugging Face repository id? btacalc does not download: give the path "
            "of its config.json") in err
    assert (f", or the built-in {preset}\n" in err) if preset else err.endswith("config.json\n")
    if preset is None:  # a path, not an id: the plain line
        for path in ("./x/config.json", "a/b/c", "../x", "x/config.json"):
            code, _, err = cli("plan", "--model", path)
            assert code == 2 and err == f"btacalc: error: --model: model file '{path}' not found\n"



@pytest.mark.parametrize("args,fix", [
    (("--emit", "megatron"), "; --emit cerebras (or modelzoo) prints a wafer plan's Cerebras configuration"),
    (("--search",), "; a wafer plan has no layout to search: the solver chooses its G and b"),
])
def test_a_gpu_only_option_on_a_wafer_says_what_the_wafer_has(cli, args, fix):
    code, out, err = cli("plan", "--hw", "wse3", *args)
    assert code == 2 and out == "" and err.endswith(f"is a wafer-scale profile{fix}\n"), err
