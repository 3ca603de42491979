"""whatif, sweep and compare take plan's GPU layout options (cli/groups.py LayoutOptions; session 30).

Before, only `plan` took `--tp`, `--pp`, `--cp`, the pipeline split, the dispatcher and the rest: a user could not ask
`whatif` what a Megatron layout would need, sweep one, or compare one beside a wafer, and README's whatif section
said the commands shared "the layout options". The reference value of each test is `plan`'s answer for the same
layout, an independent command: a trial, a point or a row is a plan (README "whatif")."""

from __future__ import annotations

import json

import pytest

LAYOUT = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--tp", "2", "--ep", "8")
BATCH = ("--global-batch", "256", "--micro-batch", "1")


def _plan_rate(cli, *args: str) -> float:
    code, out, err = cli("plan", *args, "--json")
    assert code == 0, err
    return float(json.loads(out)["throughput"]["tokens_per_s"])


def test_whatif_asks_its_question_of_the_given_layout(cli):
    """Today's metric is the plan of the layout given: TP 2 with EP 8 on 16 H100 fits where TP 1 does not, so a
    whatif that dropped --tp would start from a plan that does not fit."""
    planned = _plan_rate(cli, *LAYOUT, *BATCH, "--devices", "16")
    code, out, err = cli("whatif", *LAYOUT, *BATCH, "--devices", "16", "--target", "tokens_per_s=1e9",
                         "--solve-for", "chip.peak_flops_per_s", "--json")
    answer = json.loads(out)
    assert code == 1, err  # 1e9 tokens/s is beyond 1000x today's compute
    assert answer["today_fits"] and answer["today_metric"] == pytest.approx(planned, rel=1e-12)
    code, out, err = cli("whatif", "--model", "qwen3-30b-a3b", "--hw", "h100", "--ep", "8", *BATCH, "--devices", "16",
                         "--target", "tokens_per_s=1e9", "--solve-for", "chip.peak_flops_per_s", "--json")
    assert code == 1 and not json.loads(out)["today_fits"], err


def test_whatif_takes_the_micro_batch(cli):
    """--micro-batch sets M = N / (DP · micro-batch) as in plan: 2 sequences per micro-batch halve M."""
    args = (*LAYOUT, "--devices", "16", "--global-batch", "256", "--micro-batch", "2")
    planned = _plan_rate(cli, *args)
    code, out, err = cli("whatif", *args, "--target", "tokens_per_s=1e9", "--solve-for", "chip.peak_flops_per_s",
                         "--json")
    assert json.loads(out)["today_metric"] == pytest.approx(planned, rel=1e-12), err
    assert planned != pytest.approx(_plan_rate(cli, *LAYOUT, *BATCH, "--devices", "16"), rel=1e-6)


def test_a_sweep_point_is_the_plan_of_the_given_layout(cli):
    code, out, err = cli("sweep", *LAYOUT, "--vary", "devices=16,32", "--vary", "global-batch=256", "--quiet", "--json")
    assert code == 0, err
    points = {p["params"]["devices"]: p for p in json.loads(out)["points"]}
    for devices in (16, 32):
        planned = _plan_rate(cli, *LAYOUT, "--devices", str(devices), "--global-batch", "256")
        assert points[devices]["throughput"]["tokens_per_s"] == pytest.approx(planned, rel=1e-12)


def test_compare_lays_out_its_gpu_rows_and_leaves_the_wafer_rows_alone(cli):
    """The GPU row is plan's TP 2 layout; the wafer row beside it is the wafer row of the comparison without the
    layout options (a wafer is strict data parallel: planning/compare.py _GPU_ROW_NEUTRAL)."""
    base = ("compare", "--model", "qwen3-30b-a3b", "--hw", "wse3,h100", "--devices", "16", "--ep", "8",
            "--global-batch", "256", "--quiet", "--json")
    code, out, err = cli(*base, "--tp", "2", "--pipeline-layout", "", "--deepep")
    assert code == 2 and "--pipeline-layout" in err, err  # each option is checked as plan checks it
    code, out, err = cli(*base, "--tp", "2", "--deepep")
    assert code == 0, err
    rows = {r["hardware"]: r for r in json.loads(out)["rows"]}
    assert rows["h100"]["layout"].startswith("TP2 ")
    planned = _plan_rate(cli, *LAYOUT, "--devices", "16", "--global-batch", "256", "--deepep")
    assert rows["h100"]["tokens_per_s"] == pytest.approx(planned, rel=1e-12)
    code, out, err = cli(*base)
    assert rows["wse3"]["tokens_per_s"] == json.loads(out)["rows"][0]["tokens_per_s"], err


@pytest.mark.parametrize("option", [("--tp", "2"), ("--deepep",), ("--cuda-graph-scope", "attn"),
                                    ("--first-stage-layers", "2")])
def test_a_layout_option_with_no_gpu_row_is_refused_naming_it(cli, option):
    code, out, err = cli("compare", "--hw", "wse2,wse3", *option)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert option[0] in err and "no GPU profile" in err


def _help_examples() -> list[tuple[str, ...]]:
    """Every `btacalc ...` line of a command's --help examples (its epilog) that needs no file of the user's, no
    pipe, no torch and no long run (validate, measure and the searches run in their own tests)."""
    import shlex

    import typer.main

    from btacalc.cli.app import app

    def walk(command, path=()):
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, path + (name,))
        if command.epilog:
            yield from (line.strip() for line in command.epilog.splitlines() if line.strip().startswith("btacalc "))

    skip = ("./", ".sh", "run.toml", "|", "btacalc validate", "btacalc measure", "--search")
    return [tuple(shlex.split(line)[1:]) for line in walk(typer.main.get_command(app))
            if not any(s in line for s in skip)]


@pytest.mark.slow
@pytest.mark.parametrize("example", _help_examples(), ids=" ".join)
def test_every_help_example_runs(cli, example, tmp_path, monkeypatch):
    """An example in --help is what a user pastes first: it must not be refused (exit 2); a plan that does not fit
    (exit 1) is an answer. Files it writes go to a fresh folder."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*example)
    assert code in (0, 1) and "error" not in err, err


def test_sweep_takes_plans_batch_options_at_every_point(cli):
    """sweep took the batch sizes only through --vary (`sweep --global-batch 256` was "No such option"): each is now
    a fixed option, a point is plan's answer with it, and one given beside its own --vary is refused."""
    code, out, err = cli("sweep", *LAYOUT, "--global-batch", "256", "--vary", "devices=16,32", "--quiet", "--json")
    assert code == 0, err
    for point in json.loads(out)["points"]:
        devices = point["params"]["devices"]
        planned = _plan_rate(cli, *LAYOUT, "--devices", str(devices), "--global-batch", "256")
        assert point["throughput"]["tokens_per_s"] == pytest.approx(planned, rel=1e-12)
    code, out, err = cli("sweep", "--hw", "wse3", "--tiles", "2", "--tile-batch", "4", "--vary", "experts=16,64",
                         "--quiet", "--json")
    for point in json.loads(out)["points"]:
        code, plan_out, err = cli("plan", "--hw", "wse3", "--tiles", "2", "--tile-batch", "4", "--experts",
                                  str(point["params"]["experts"]), "--json")
        planned = json.loads(plan_out)
        assert (point["plan"]["tiles"], point["plan"]["tile_batch"]) == (2, 4)
        assert point["throughput"]["tokens_per_s"] == pytest.approx(planned["throughput"]["tokens_per_s"], rel=1e-9)
    code, out, err = cli("sweep", "--hw", "wse3", "--tiles", "2", "--vary", "tiles=1,2")
    assert code == 2 and "--tiles would change nothing: --vary tiles sets it at every point" in err, err
    code, out, err = cli("sweep", *LAYOUT, "--global-batch", "256", "--tokens-per-step", "1000000",
                         "--vary", "devices=16")
    assert code == 2 and "--global-batch fixes it at every point" in err, err


@pytest.mark.parametrize("change", [("--experts", "64"), ("--top-k", "4", "--fixed-active"), ("--causal",),
                                    ("--accounting", "pytorch"), ("--loss", "stored")])
def test_compare_asks_its_rows_of_the_changed_model_and_counting(cli, change):
    """compare took neither plan's model overrides (--experts, --top-k, --expert-ffn, --fixed-active) nor --causal
    or --accounting, so it could not put the BTA paper's sparser variants side by side; nor --loss (session 31), so a
    row kept the default cross-entropy's logits whatever the launch used: each row is now plan's answer for the same
    change, the wafer row and the GPU row alike."""
    code, out, err = cli("compare", "--hw", "wse3,b200", "--devices", "8", *change, "--quiet", "--json")
    assert code == 0, err
    rows = {r["hardware"]: r for r in json.loads(out)["rows"]}
    for hw, extra in (("wse3", ()), ("b200", ("--devices", "8"))):
        planned = _plan_rate(cli, "--hw", hw, *extra, *change)
        assert rows[hw]["tokens_per_s"] == pytest.approx(planned, rel=1e-12), hw
    code, out, err = cli("compare", "--hw", "wse3,b200", "--devices", "8", "--quiet", "--json")
    assert json.loads(out)["rows"][0]["tokens_per_s"] != pytest.approx(rows["wse3"]["tokens_per_s"], rel=1e-9) \
        or change[0] in ("--causal", "--accounting")
