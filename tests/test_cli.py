"""The command line: outputs, JSON keys, acceptance commands and every error case."""

from __future__ import annotations

import json

import pytest




def test_plan_default_table(cli):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3")
    assert code == 0, err
    for text in ("qwen3-30b-a3b", "tiles G", "tokens per expert", "stored_activations", "experts", "fits"):
        assert text in out


@pytest.mark.parametrize("hw", [["--hw", "wse3"], ["--hw", "h100", "--devices", "8"]], ids=["wafer", "gpu"])
def test_a_dense_plan_leaves_out_what_only_experts_have(cli, monkeypatch, hw):
    """Issue 25: sections that do not apply are left out. A dense model has no experts, so no tokens per
    expert T_e (in the plan or the other objective's line) and no expert sharding in the state caption;
    the same command on an MoE model shows them."""
    monkeypatch.setenv("COLUMNS", "200")
    _, dense, _ = cli("plan", "--model", "llama-3-8b", *hw)
    _, moe, _ = cli("plan", "--model", "qwen3-30b-a3b", *hw)
    for text in ("tokens per expert", "T_e", "experts over EP", "(expert) ranks"):
        assert text not in dense, text
    assert "tokens per expert" in moe and "T_e" in moe
    assert ("experts over EP" in moe) == ("--devices" in hw)  # the state table is a GPU plan's


def test_plan_json_keys(cli):
    code, out, _ = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--json")
    assert code == 0
    r = json.loads(out)
    assert {"name", "params_total", "params_active", "params_non_embedding"} <= set(r["model"])
    assert {"name", "memory_capacity_bytes"} <= set(r["hardware"])
    assert {"seq_len", "recompute", "attention"} <= set(r["inputs"])
    assert {"tiles", "tile_batch", "global_batch", "tokens_per_expert", "fits", "binding_constraint"} <= set(r["plan"])
    assert {"total", "capacity"} <= set(r["memory_bytes"])
    assert {"forward", "backward", "total"} <= set(r["flops_per_step"])
    names = [p["name"] for p in r["phases"]]
    assert names == ["input_norm", "qkv_proj", "qk_norm", "rope", "attn_scores", "attn_softmax", "attn_pv",
                     "attn_out_proj", "post_attn_norm", "router", "dispatch", "experts", "combine"]
    assert [p["name"] for p in r["outside_layers"]] == ["embedding", "final_norm", "lm_head", "loss"]
    for p in r["phases"]:
        assert {"name", "flops_forward", "flops_backward", "stored_activation_bytes", "transient_bytes",
                "arithmetic_intensity"} <= set(p)
    plan, mem = r["plan"], r["memory_bytes"]
    assert plan["fits"] and mem["total"] <= mem["usable_capacity"] <= mem["capacity"]
    assert plan["global_batch"] == plan["tiles"] * plan["tile_batch"]
    # T_e = G*b*s*k/E
    assert plan["tokens_per_expert"] == plan["global_batch"] * r["inputs"]["seq_len"] * 8 / 128
    # components add up to the total
    comps = {k: v for k, v in mem.items() if k not in ("total", "capacity", "usable_capacity")}
    assert sum(comps.values()) == mem["total"]
    assert r["flops_per_step"]["total"] == r["flops_per_step"]["forward"] + r["flops_per_step"]["backward"]


def test_gpt3_acceptance_matches_korthikanti(cli):
    code, out, _ = cli("plan", "--model", "gpt3-175b", "--hw", "a100-80gb", "--seq", "2048", "--tiles", "1",
                       "--tile-batch", "1", "--recompute", "none", "--attention", "eager", "--json")
    r = json.loads(out)
    assert code == 1 and r["plan"]["fits"] is False  # 175B with Adam does not fit one GPU
    s, b, h, a, L, v = 2048, 1, 12288, 96, 96, 51200
    assert sum(p["stored_activation_bytes"] for p in r["phases"]) == s * b * h * (34 + 5 * a * s // h)
    # 72BLsh^2(1 + s/(6h) + v/(12hL)) = 72BLsh^2 + 12BLs^2h + 6Bshv, in exact integers
    assert r["flops_per_step"]["total"] == 72 * b * L * s * h**2 + 12 * b * L * s**2 * h + 6 * b * s * h * v
    assert r["suggestions"]


def test_output_file_is_written(cli, tmp_path):
    path = tmp_path / "plan.json"
    code, out, _ = cli("plan", "--hw", "wse2", "--output", str(path))
    assert code == 0 and json.loads(path.read_text())["hardware"]["name"] == "wse2"
    assert "Plan" in out
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary file left


def test_overrides_change_the_model(cli):
    code, out, _ = cli("plan", "--hw", "wse2", "--experts", "32", "--top-k", "2", "--fixed-active", "--json")
    r = json.loads(out)
    assert code == 0 and (r["model"]["num_experts"], r["model"]["top_k"], r["model"]["ffn_size"]) == (32, 2, 3072)


def test_plan_with_hf_config(cli, data_dir):
    code, out, _ = cli("plan", "--model", str(data_dir / "mixtral-8x7b.config.json"), "--hw", "wse3", "--json")
    assert code == 0 and json.loads(out)["model"]["num_experts"] == 8


def test_schema(cli):
    code, out, _ = cli("plan", "--schema")
    assert code == 0 and "PlanInfo" in json.loads(out)["$defs"]


@pytest.mark.parametrize("args", [
    ["formulas", "--phase", "attn_softmax"],
    ["formulas", "--model", "qwen3-30b-a3b", "--quantity", "stored"],
    ["formulas", "--model", "gpt3-175b", "--phase", "mlp", "--latex"],
    ["hw", "list"], ["hw", "show", "wse3"], ["models", "list"], ["models", "show", "qwen3-30b-a3b"],
])
def test_other_commands(cli, args):
    code, out, err = cli(*args)
    assert code == 0 and out and not err


def test_formulas_json_has_sources(cli):
    code, out, _ = cli("formulas", "--model", "qwen3-30b-a3b", "--phase", "experts", "--quantity", "flops_fwd", "--json")
    f = json.loads(out)["phases"][0]["formulas"][0]
    assert f["formula"] == "6*G*b*f*h*k*s" and "Korthikanti" in f["terms"][0]["source"]


@pytest.mark.parametrize("command", [["plan"], ["formulas"], ["hw", "show"], ["models", "show"], ["hw", "list"]])
def test_help_has_an_example(cli, command):
    code, out, _ = cli(*command, "--help")
    assert code == 0 and "Example" in out and "btacalc" in out


def _write(path, text):
    path.write_text(text)
    return str(path)


BAD_INPUTS = [
    (["plan", "--model", "no-such-model"], "unknown model"),
    (["plan", "--hw", "tpu-v9"], "unknown hardware"),
    (["plan", "--seq", "0"], "--seq"),
    (["plan", "--seq", "-5"], "--seq"),
    (["plan", "--seq", "2048.5"], "--seq"),
    (["plan", "--tiles", "two"], "--tiles"),
    (["plan", "--global-batch", "0"], "--global-batch"),
    (["plan", "--top-k", "200"], "larger than the number of experts"),
    (["plan", "--experts", "4"], "larger than the number of experts"),
    (["plan", "--global-batch", "10", "--tiles", "3"], "not divisible"),
    (["plan", "--top-k", "5", "--fixed-active"], "not divisible by --top-k"),
    (["plan", "--model", "gpt3-175b", "--experts", "8"], "dense"),
    (["plan", "--recompute", "sometimes"], "--recompute"),
    (["plan", "--model", "missing/config.json"], "not found"),
    (["formulas", "--phase", "nope"], "unknown phase"),
    (["formulas", "--quantity", "nope"], "unknown quantity"),
    (["hw", "show", "nope"], "unknown hardware"),
    (["models", "show", "nope"], "unknown model"),
    (["plan", "--bogus-flag"], "bogus"),
]


@pytest.mark.parametrize("args, fragment", BAD_INPUTS)
def test_bad_input_is_one_line_exit_2(cli, tmp_path, args, fragment):
    out_file = tmp_path / "x.json"
    code, out, err = cli(*args, *(["--output", str(out_file)] if args[0] == "plan" else []))
    assert code == 2
    assert fragment in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not out_file.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("config, fragment", [
    ("{not json", "not valid JSON"),
    ('{"model_type": "gpt_neox", "hidden_size": 8}', "unsupported architecture"),
    ('{"model_type": "llama", "hidden_size": 4096}', "'num_attention_heads' is missing"),
    ('{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 30, '
     '"vocab_size": 10, "intermediate_size": 10}', "not divisible by num_attention_heads"),
    ('{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32, '
     '"num_key_value_heads": 5, "vocab_size": 10, "intermediate_size": 10}', "must divide num_attention_heads"),
    ('{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": -2, "num_attention_heads": 32, '
     '"vocab_size": 10, "intermediate_size": 10}', "num_hidden_layers"),
    ('{"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, '
     '"num_key_value_heads": 4, "vocab_size": 10, "intermediate_size": 10, "num_local_experts": 4, '
     '"num_experts_per_tok": 8}', "top_k"),
    ('[1, 2]', "expected a JSON object"),
])
def test_malformed_config_json(cli, tmp_path, config, fragment):
    path = _write(tmp_path / "config.json", config)
    code, _, err = cli("plan", "--model", path, "--output", str(tmp_path / "out.json"))
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out.json").exists()


def test_malformed_profile(cli, tmp_path):
    path = _write(tmp_path / "dev.toml", 'name = "dev"\ndisplay_name = "x"\nfamily = "gpu"\n')
    code, _, err = cli("plan", "--hw", path)
    assert code == 2 and "field" in err and len(err.strip().splitlines()) == 1


def test_output_into_missing_folder(cli, tmp_path):
    code, _, err = cli("plan", "--output", str(tmp_path / "no" / "plan.json"))
    assert code == 2 and "does not exist" in err


def test_not_fitting_is_exit_1_with_what_would_fit(cli):
    # Qwen3-30B-A3B's training state, 16 B per parameter, kept whole on one wafer (activations offload,
    # wafer/offload.py, but the state cannot): 488.5 GB against 37.4 GB usable
    code, out, _ = cli("plan", "--hw", "wse3", "--memory-model", "resident", "--json")
    r = json.loads(out)
    assert code == 1 and r["plan"]["fits"] is False
    assert any("--memory-model weight_streaming" in s for s in r["suggestions"])


def test_measure_without_torch_is_a_clear_error(cli, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    code, out, err = cli("measure", "--model", "qwen3-30b-a3b")
    assert code == 2
    assert "pip install 'btacalc[measure]'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [(), ("--model", "qwen3-30b-a3b", "--accounting", "pytorch"),
                                  ("--model", "gpt3-175b", "--accounting", "pytorch", "--recompute", "full"),
                                  ("--model", "qwen3-30b-a3b", "--attention", "flash", "--accounting", "ideal")])
def test_formulas_render_every_phase(cli, args):
    code, out, err = cli("formulas", *args)
    assert code == 0, err
    if "pytorch" in args and "qwen3-30b-a3b" in args:
        assert "w[order]" in out  # rich markup characters in term text are shown literally, not eaten


def test_plan_profile_counts_the_evaluations(cli):
    """--profile: the model is evaluated once per problem (the plan and its dense reference) and once
    for each one's parameter counts; the stages are timed."""
    from btacalc.config.presets import _preset_file
    from btacalc.model.params import _param_counts

    _param_counts.cache_clear()  # a fresh process counts them; earlier tests here may have
    _preset_file.cache_clear()  # and reads its preset afresh (the same ModelSpec object shares cached evaluations)
    code, out, err = cli("plan", "--json", "--profile")
    assert code == 0 and json.loads(out)["plan"]["fits"]
    counts, times = err.strip().splitlines()
    assert counts.startswith("btacalc profile: model evaluations 4 ")
    assert "candidate searches 2" in counts  # the plan (both objectives and G = 1) and the dense model
    # one step-time pass per candidate search, then the plan's, G = 1's and the dense model's own
    assert "density searches 0" in counts and "step-time passes 5" in counts
    for stage in ("start-up", "imports", "resolve", "solve", "report", "output", "total"):
        assert stage in times


@pytest.mark.parametrize("seq,devices,micro,expected", [
    # 2^22 tokens / 4096 = 1024 sequences, a multiple of DP 8 already
    (4096, 8, None, 1024),
    # 2^22 / 3000 = 1398.1 sequences: rounded up to whole sequences per rank, DP 8: 8 x ceil(174.76) = 1400
    (3000, 8, None, 1400),
    # with --micro-batch 2: a multiple of DP x 2 = 16: 16 x ceil(4194304 / (3000 x 16)) = 16 x 88 = 1408
    (3000, 8, 2, 1408),
])
def test_gpu_default_global_batch_is_4m_tokens(cli, seq, devices, micro, expected):
    args = ["plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", str(devices), "--seq", str(seq), "--json"]
    code, out, _ = cli(*args, *(["--micro-batch", str(micro)] if micro else []))
    r = json.loads(out)
    p = r["plan"]
    assert code == 0 and p["step_batch"] == expected
    assert "4,194,304 tokens" in r["inputs"]["defaults"]["global_batch"]
    assert r["parallelism"]["data_parallel"] * p["micro_batches"] * p["global_batch"] == expected


def test_one_default_global_batch_for_plan_sweep_compare_and_search(cli):
    """Issue 25: `plan` without --global-batch ran one micro-batch per rank while --search assumed 4M tokens,
    so a devices sweep scaled by gradient sync. Every command now takes DEFAULT_TOKENS_PER_STEP in whole
    sequences: 2^22 / 4,096 = 1,024 sequences per step, on 8 and on 16 B200s alike."""
    from btacalc.config.execution import DEFAULT_TOKENS_PER_STEP

    expected = DEFAULT_TOKENS_PER_STEP // 4096
    base = ["--model", "qwen3-30b-a3b", "--hw", "b200", "--seq", "4096", "--ep", "8", "--json"]
    _, out, _ = cli("plan", *base, "--devices", "8")
    plan = json.loads(out)
    assert plan["plan"]["step_batch"] == expected
    _, out, _ = cli("sweep", *base, "--vary", "devices=8,16")
    points = json.loads(out)["points"]
    assert [p["plan"]["step_batch"] for p in points] == [expected, expected]
    _, out, _ = cli("compare", *base, "--devices", "8")
    row = json.loads(out)["rows"][0]
    assert (row["micro_batches"], row["tiles"] * row["tile_batch"]) == (plan["plan"]["micro_batches"],
                                                                        plan["plan"]["global_batch"])
    assert 8 * row["micro_batches"] * row["tiles"] * row["tile_batch"] == expected
    _, out, _ = cli("plan", *base, "--devices", "8", "--search")
    assert json.loads(out)["global_batch"] == expected


def test_tokens_per_step_changes_the_default_and_a_wafer_refuses_it(cli):
    code, out, _ = cli("plan", "--hw", "b200", "--devices", "8", "--tokens-per-step", "65536", "--json")
    assert json.loads(out)["plan"]["step_batch"] == 16  # 65,536 / 4,096
    # a micro-batch fixes no global batch: the 16 sequences are rounded up to a multiple of DP 8 x 3 = 24
    code, out, _ = cli("plan", "--hw", "b200", "--devices", "8", "--micro-batch", "3", "--tokens-per-step", "65536",
                       "--json")
    assert code == 0 and json.loads(out)["plan"]["step_batch"] == 24
    code, _, err = cli("plan", "--hw", "wse3", "--tokens-per-step", "65536")
    assert code == 2 and "wafer" in err


def test_gradient_label_follows_grad_bytes(cli):
    """The memory table's gradients label is read from the run's bytes per gradient (--grad-bytes), checked on
    the label the table prints (at any terminal width)."""
    from btacalc.output.tables import _gradient_note
    from btacalc.planning.report import PlanReport

    _, out4, _ = cli("plan", "--hw", "b200", "--devices", "8", "--json")
    _, out2, _ = cli("plan", "--hw", "b200", "--devices", "8", "--grad-bytes", "2", "--json")
    assert _gradient_note(PlanReport.model_validate_json(out4)) == "fp32 main gradients: 4 B/param"
    assert _gradient_note(PlanReport.model_validate_json(out2)) == "16-bit gradients: 2 B/param"


@pytest.mark.parametrize("value,text", [
    (4e10, "40,000,000,000"),  # never 4e+10
    (999_999, "1,000,000"),  # four significant digits, carried over a power of ten
    (1234.5, "1,234"),
    (12.3456, "12.35"),
    (1e-5, "0.00001"),
    (0.5, "0.5"),
])
def test_whatif_numbers_are_never_in_e_notation(value, text):
    from btacalc.output.whatif_tables import _fmt

    assert _fmt(value) == text


@pytest.mark.parametrize("value,text", [(1000.0, "1,000"), (999.6, "1,000"), (0.631, "0.631"), (0.001, "0.001")])
def test_whatif_ratios_are_never_in_e_notation(value, text):
    """The trace's `x today` column at three digits: the grid's end, 1000x today's value, was `1e+03`."""
    from btacalc.planning.whatif import readable

    assert readable(value, 3) == text


def test_an_unreached_whatif_prints_no_e_notation(cli, monkeypatch):
    """The whole screen of a target that is not reached (grid 1/1000x..1000x today, its note and trace): issue 25
    found `4e+10` in whatif's output."""
    import re

    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli("whatif", "--target", "tokens_per_s=200000", "--solve-for", "offchip_bandwidth_bytes_per_s")
    assert code == 1 and "not reached" in out
    assert not re.search(r"\d[eE][+-]?\d", out), [ln for ln in out.splitlines() if re.search(r"\d[eE][+-]?\d", ln)]
    assert "1,000 " in out  # the grid's last ratio, written out


@pytest.mark.parametrize("recipe", [("--precision", "mxfp8"), ("--precision", "mxfp8", "--fp8-param-gather"),
                                    ("--recompute", "full", "--checkpoint-early-stop"), ("--no-gradient-accumulation-fusion",)])
def test_whatif_starts_from_the_plan_of_the_same_recipe(cli, recipe):
    """whatif takes the recipe options plan, sweep and compare share (tidy6): today's value of its metric is the
    plan's own number for the same options (every trial is a plan), not the BF16 default's."""
    run = ("-m", "llama-3-8b", "--hw", "b200", "--devices", "8", *recipe)
    code, out, err = cli("plan", *run, "--json")
    assert code == 0, err
    planned = json.loads(out)["throughput"]["tokens_per_s"]
    code, out, err = cli("whatif", *run, "--target", "tokens_per_s=1e9", "--solve-for", "chip.peak_flops_per_s", "--json")
    assert code == 1, err  # 1e9 tokens/s is out of reach within 1000x today's compute
    assert json.loads(out)["today_metric"] == pytest.approx(planned, rel=1e-12)
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "b200", "--devices", "8", "--json")
    assert json.loads(out)["throughput"]["tokens_per_s"] != pytest.approx(planned, rel=1e-6)  # the recipe tells


@pytest.mark.parametrize("group", ["recipe", "layout"])
def test_plan_sweep_compare_and_whatif_take_one_option_set_of_each_group(group):
    """The recipe and GPU layout options are declared once (cli/groups.py RecipeOptions, LayoutOptions,
    takes_option_groups): each command that plans takes every one of them, under the same flags (session 30: whatif,
    sweep and compare took no layout option, so none could ask its question of a Megatron layout)."""
    import dataclasses

    import typer.main

    from btacalc.cli.app import app
    from btacalc.cli.groups import GROUPS

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    shared = {f.name for f in dataclasses.fields(GROUPS[group][0])}
    flags = {}
    for name in ("plan", "sweep", "compare", "whatif"):
        params = {p.name: tuple(p.opts + p.secondary_opts) for p in commands[name].params}
        assert shared <= set(params), (name, shared - set(params))
        flags[name] = {n: params[n] for n in shared}
    assert all(f == flags["plan"] for f in flags.values())
    assert "--checkpoint-early-stop" in flags["whatif"]["checkpoint_early_stop"] if group == "recipe" else \
        "--tp" in flags["whatif"]["tp"]


@pytest.mark.parametrize("extra", [["--search"], ["--emit", "megatron"]])
def test_a_search_or_an_emit_reports_its_profile_too(cli, extra):
    """review5: --profile printed nothing with --search or --emit (the report was written only after a plain plan's
    tables). Its two lines go to stderr whatever the plan prints."""
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "-m", "llama-3-8b", *extra, "--profile")
    lines = [line for line in err.splitlines() if line.startswith("btacalc profile: ")]
    assert len(lines) == 2 and "model evaluations" in lines[0] and out, err


def test_an_eager_switch_given_twice_does_what_it_does_once(cli):
    """review6: the option-given-twice refusal (cli/repeats.py) also refused `--help --help` and `--version
    --version`: click acts on an eager switch as it reads it, so nothing is lost by a repeat. Each now answers as
    given once; a value option (`--config`, eager too) is still refused."""
    for args in (["plan", "--help"], ["--version"]):
        once, twice = cli(*args), cli(*args, args[-1])
        assert twice == once and once[0] == 0
    code, out, err = cli("plan", "--config", "a.yaml", "--config", "b.yaml")
    assert code == 2 and "--config is given 2 times" in err


@pytest.mark.parametrize("group", ["recipe", "layout"])
def test_the_option_groups_defaults_are_the_requests(group):
    """review6: a shared option's default is written in three places: its command-line option (cli/options.py), the
    group's field a library caller of plan/sweep/compare/whatif gets (cli/groups.py), and the ExecutionRequest field
    the plan reads. They must be one value, the request's (config/execution.py), or a flag left out means another
    thing on the command line than in code."""
    import dataclasses

    from btacalc.cli.groups import GROUPS
    from btacalc.config.execution import ExecutionRequest

    cls, options = GROUPS[group]
    request = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
               for f in dataclasses.fields(ExecutionRequest)}
    fields = cls().request_fields()
    assert fields == {name: request[name] for name in fields}
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    assert set(options) == set(defaults)
    for name, (_, option) in options.items():
        assert option.default == defaults[name], name


def test_a_search_that_fits_nothing_points_to_the_plans_suggestions(cli):
    """freshuser15: `plan --search` with no fitting layout said only "none of the N layouts fits". It now points to
    the same command without --search, and that command does list a change to try (here more devices)."""
    args = ("plan", "--model", "deepseek-v3", "--hw", "gb200", "--devices", "64", "--tp", "4", "--pp", "4")
    code, out, err = cli(*args, "--search", "--json")
    found = json.loads(out)
    assert (code, found["fitting"]) == (1, 0), err
    code, out, err = cli(*args, "--json")
    assert code == 1 and any(s.startswith("--devices 128 ") for s in json.loads(out)["suggestions"]), err
    # the usable bytes of this run (tews: the profile's less the run's library workspaces, the same for every layout
    # here: no TP overlap)
    usable = json.loads(out)["memory_bytes"]["usable_capacity"]
    assert found["why"][0] == f"none of the {found['candidates']:,} layouts fits in {usable / 1e9:.1f} GB per device"
    assert "without --search lists what would fit" in found["why"][1]


def test_flops_table_says_what_recompute_holds_under_flash_attention(cli):
    """freshuser15: `plan` printed "recompute none (default)" above a FLOPs table whose recompute column read
    6.6 TFLOP. Under flash attention that column is the kernel's own backward recomputation of S = QK^T (FlashAttention
    Algorithm 4 recomputes S from Q and K): one forward of attn_scores per layer, L = 48 layers of Qwen3-30B-A3B.
    The table's caption now says so; without flash (the wafer's eager default, full recomputation) it does not."""
    args = ("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16")
    code, out, err = cli(*args, "--json")
    report = json.loads(out)
    scores = next(p for p in report["phases"] if p["name"] == "attn_scores")
    assert report["inputs"]["recompute"] == "none"
    assert report["flops_per_step"]["recompute"] == 48 * scores["flops_forward"]
    code, out, err = cli(*args)
    assert "with flash attention also the kernel's S = QK^T" in " ".join(out.split())
    code, out, err = cli("plan", "--hw", "wse3")
    assert "recompute: forward work the backward pass runs again" in " ".join(out.split())
    assert "with flash attention" not in " ".join(out.split())


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_mfu_is_model_flops_over_the_16_bit_peak(cli, precision):
    """freshuser15: the README now defines MFU; here from the JSON of a data-parallel-only plan (16 H100s, EP 16):
    model FLOPs per micro-batch per rank x M x DP over step time x devices x chip.peak_flops_per_s (the BF16 peak,
    989 TFLOP/s, under FP8 as well; recomputation not counted)."""
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16",
                         "--precision", precision, "--json")
    r = json.loads(out)
    assert code == 0, err
    par, th = r["parallelism"], r["throughput"]
    assert par["data_parallel"] == par["devices"] == 16
    flops = r["flops_per_step"]["total"] * r["plan"]["micro_batches"] * par["data_parallel"]
    peak = r["hardware"]["peak_flops_per_s"]
    assert peak == 989e12
    assert th["mfu"] == pytest.approx(flops / (th["step_time_s"] * par["devices"] * peak), rel=1e-9)
