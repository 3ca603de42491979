"""Issue 25 (Build 2): numbers the README's prose quotes (outside console blocks and generated
fragments) that are btacalc's own output, each checked against the command or library call that
produces it, at the precision the README prints it with. The audit of every quoted number (generated,
checked here or in test_readme.py, a cited published constant, a limit in the code, or a measurement)
is in docs/story.md."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.loading import load_script
from tests.support import readme_prose as _prose, readme_quote as _quote, readme_table_errors as _table_errors

README = Path(__file__).resolve().parents[1] / "README.md"


def _plan(cli, *args: str) -> dict:
    code, out, err = cli("plan", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_wafer_scaling_sentence_is_the_plans(cli):
    """"(Qwen3-30B-A3B at N = 256 on wse2: linear to L systems, P% at D)": `plan --global-batch 256
    --devices D` reports scaling linear (>= 95%) up to L systems and efficiency P% at D."""
    m = _quote(r"Qwen3-30B-A3B at N = (\d+) on (\w+): linear to (\d+) systems, (\d+)% at (\d+)\)")
    n, hw, linear, percent, devices = m.groups()
    wafer = _plan(cli, "--hw", hw, "--global-batch", n, "--devices", devices)["wafer"]
    assert wafer["linear_until"] == int(linear)
    at = {row["systems"]: row["efficiency"] for row in wafer["scaling"]}
    assert f"{100 * at[int(devices)]:.0f}" == percent


def test_mesh_step_is_the_profiles_geometry():
    """"one mesh step (X + Y)·t_hop + 2 T_R + 1 cycles = 1.59 µs on the 750 × 994 WSE-2 rectangle at
    1.1 GHz": the arithmetic over wse2's [mesh] numbers."""
    from btacalc.config.hardware import builtin_profiles

    m = _quote(r"2 T_R \+ 1 cycles = ([\d.]+) µs on the (\d+) × (\d+) WSE-2 rectangle at ([\d.]+) GHz")
    step_us, x, y, ghz = m.groups()
    mesh = builtin_profiles()["wse2"].mesh
    assert (int(x), int(y)) == (mesh.width_pes.value, mesh.height_pes.value)
    assert f"{mesh.clock_hz.value / 1e9:.1f}" == ghz
    cycles = (mesh.width_pes.value + mesh.height_pes.value) * mesh.hop_latency_cycles.value \
        + 2 * mesh.ramp_latency_cycles.value + 1
    assert f"{cycles / mesh.clock_hz.value * 1e6:.2f}" == step_us


def test_mesh_costs_per_layer_and_per_step_are_the_plans(cli):
    """"(51 µs per Qwen3 layer)": wse2's tile overhead per step, per tile and per layer; "59 ms per step
    for Qwen3-30B-A3B at G·b = 20": the mesh dispatch + combine of a plan with G·b = 20 (G = 5, b = 4:
    G·b = 20 as one tile does not fit)."""
    per_layer_us = _quote(r"\((\d+) µs per Qwen3 layer\)").group(1)
    dispatch_ms, gb = _quote(r"(\d+) ms per step for Qwen3-30B-A3B at G·b = (\d+)").groups()
    assert int(gb) == 5 * 4
    report = _plan(cli, "--hw", "wse2", "--tiles", "5", "--tile-batch", "4")
    per_tile = report["wafer"]["tile_overhead_s"]  # per tile per step ("2.442 ms per tile per step")
    assert report["throughput"]["tiling_overhead_s"] == pytest.approx(per_tile * report["plan"]["tiles"])
    assert f"{per_tile / report['model']['num_layers'] * 1e6:.0f}" == per_layer_us
    assert f"{report['wafer']['mesh_dispatch_s'] * 1e3:.0f}" == dispatch_ms


@pytest.fixture(scope="module")
def gb200_search() -> str:
    """`plan --search` for the search benchmark's case (benchmarks/search_bench.py), as text."""
    import subprocess
    import sys

    devices, batch, seq = _quote(r"Qwen3-235B-A22B on (\d+) GB200s, global batch (\d+), s = (\d+): ").groups()
    done = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--model", "qwen3-235b-a22b", "--hw", "gb200",
                           "--devices", devices, "--global-batch", batch, "--seq", seq, "--search"],
                          capture_output=True, text=True, cwd=README.parent, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_search_layout_count_is_what_search_prints(gb200_search):
    """"Qwen3-235B-A22B on 256 GB200s, global batch 8192, s = 4096: N layouts" and the benchmark list's
    "N layouts evaluated": the count `plan --search` prints for that case."""
    count = _quote(r"Qwen3-235B-A22B on \d+ GB200s, global batch \d+, s = \d+: ([\d,]+) layouts").group(1)
    again = _quote(r"global batch 8192, s = 4096\): ([\d,]+) layouts evaluated").group(1)
    assert count == again and f"{count} layouts evaluated" in gb200_search


@pytest.mark.slow
def test_search_winner_is_what_search_prints(gb200_search):
    """"the winner: TP1 PP8 VP12 EP8, 5,509 tokens/s per GPU": the first row of the search's ranking."""
    layout, tps = _quote(r"the winner: ((?:[A-Z]+\d+ ?)+), ([\d,]+) tokens/s per GPU\)").groups()
    first = next(line for line in gb200_search.splitlines() if re.match(r"\W*1\s", line))
    cells = [c.strip() for c in re.split(r"[│|]", first) if c.strip()]
    assert cells[1].startswith(layout.strip() + " DP") and cells[2] == tps, cells


def test_measured_run_count_is_the_files():
    """"`btacalc/data/measured_runs.json`, N runs (... M with measured peak memory": the shipped file."""
    from btacalc.planning.measured import load_runs

    runs = load_runs()
    count = _quote(r"`btacalc/data/measured_runs\.json`, ([\d,]+) runs").group(1)
    memory = _quote(r"(\d+) with measured peak memory").group(1)
    assert int(count.replace(",", "")) == len(runs)
    assert int(memory) == sum(r.measured.peak_alloc_gib is not None or r.measured.peak_reserved_gib is not None
                              for r in runs)


def _groups() -> dict[str, list[str]]:
    """The README's generated table of GPU check runs by kind: group name -> its cells."""
    text = README.read_text(encoding="utf-8")
    body = text.split("<!-- groups:begin (tools/accuracy.py) -->\n", 1)[1].split("\n<!-- groups:end -->", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in body.splitlines()[2:]]
    return {row[0]: [c.rstrip("%") for c in row[1:]] for row in rows}


# Each sentence under the accuracy tables that quotes the groups table: its pattern, the group, and which
# cells (runs, mean, median, max, runs without a known gap, their mean, their max) its numbers are.
PROSE_GROUPS = [
    (r"(\d+) dense GPU check runs \([^)]*\): mean \|error\| ([\d.]+)%, median ([\d.]+)%;", "dense", (0, 1, 2)),
    (r"the (\d+) 16-bit ones \(BF16, FP16\) ([\d.]+)% \(median ([\d.]+)%\)", "dense, 16-bit", (0, 1, 2)),
    (r"(\d+) low-precision dense runs, mean ([\d.]+)%", "dense, low precision", (0, 1)),
    (r"Low-precision check runs: (\d+), mean ([\d.]+)% \((\d+) without a known gap: ([\d.]+)%, max ([\d.]+)%\)",
     "low precision (dense and MoE)", (0, 1, 4, 5, 6)),
    (r"(\d+) MoE check runs, mean \|error\| ([\d.]+)% \((\d+) without a known gap: ([\d.]+)%, max ([\d.]+)%\)",
     "MoE", (0, 1, 4, 5, 6)),
]


@pytest.mark.parametrize("pattern, group, cells", PROSE_GROUPS, ids=[g for _, g, _ in PROSE_GROUPS])
def test_accuracy_prose_quotes_the_generated_groups(pattern, group, cells):
    """The prose under the accuracy tables quotes the generated table of check runs by kind (which
    `test_groups_fragment_is_current` checks against `validate`): each number is its cell."""
    quoted = _quote(pattern).groups()
    row = _groups()[group]
    assert list(quoted) == [row[i] for i in cells], (group, quoted, row)



def _accuracy_tool():
    """tools/accuracy.py loaded as a module (it is a script, not part of the package)."""
    return load_script("tools/accuracy.py", "accuracy_tool")

@pytest.mark.slow
def test_groups_fragment_is_current():
    """The README's table of GPU check runs by kind is what tools/accuracy.py writes from `validate`
    today (regenerate with `python tools/accuracy.py` when a number moves; then the prose tests above
    name each sentence to update)."""
    tool = _accuracy_tool()
    assert f"{tool.GROUPS_BEGIN}\n{tool.groups_markdown()}\n{tool.GROUPS_END}" in README.read_text(encoding="utf-8")


def test_groups_are_what_their_names_say():
    """The groups' counts add up as their names say: dense = dense BF16 + dense low precision, and low
    precision (dense and MoE) holds the dense low-precision runs."""
    g = _groups()
    assert int(g["dense"][0]) == int(g["dense, 16-bit"][0]) + int(g["dense, low precision"][0])
    assert int(g["low precision (dense and MoE)"][0]) >= int(g["dense, low precision"][0])


def test_peak_memory_prose_is_the_accuracy_summary():
    """"Peak memory predicts within M% on the N runs ... mean A%": the generated accuracy summary's GPU
    check row (memory runs, mean and max |memory error|), which test_measured checks against validate."""
    top, n, alloc, mean = _quote(r"Peak memory predicts within ([\d.]+)%\*\* on the (\d+) runs with a measured peak, "
                                 r"(\d+) of them `max_memory_allocated` \([^)]*\), mean ([\d.]+)%").groups()
    text = README.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| check | gpu |"))
    cells = [c.strip().rstrip("%") for c in row.strip("|").split("|")]
    assert (cells[6], cells[7], cells[8]) == (n, mean, top), cells
    # review27: two of the runs publish torch's peak reserved memory (torchtitan), not max_memory_allocated
    from btacalc.planning.measured import load_runs
    assert int(alloc) == sum(r.role == "check" and r.measured.peak_alloc_gib is not None for r in load_runs())




def _as_printed(value: float, decimals: int) -> str:
    """A table value at the prose's precision, half away from zero (+80.7 -> "+81", -6.8 -> "-6.8")."""
    from decimal import ROUND_HALF_UP, Decimal

    q = Decimal(str(value)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    return f"{'+' if q > 0 else ''}{q}"


# Sentences of the prose that quote one run's error (or a range over runs): the pattern, and per group the runs
# whose table error it is (a tuple: the group is "min..max" of their errors, as the prose writes a range).
PROSE_RUNS = [
    (r"deterministic CI test read ([+-]\d+)% and ([+-]\d+)%",
     ["gpt-7b-megatron-ci-gb200-8-tp4-dev-time", "gpt-7b-megatron-ci-gb200-8-pp4-vp8-dev-time"]),
    (r"Qwen3-235B on B200 \(([+-]\d+)%, ([+-]\d+)%\) and on H100 \(([+-]\d+)% with the all-to-all dispatcher and "
     r"PP 32, ([+-]\d+)% with DeepEP at TP 4\); GPT-OSS 120B on B200 \(([+-]\d+)%\) and Mixtral on B200 in FP8 "
     r"\(([+-]\d+)%\)",
     ["qwen3-235b-a22b-b200-256-mxfp8-94", "qwen3-235b-a22b-b200-64-mxfp8-248",
      "qwen3-235b-a22b-h100-256-bf16-mzoo-a2a-tp2-pp32-vp3-ep8", "qwen3-235b-a22b-h100-256-bf16-mzoo-deepep-tp4-pp8-vp4-ep8",
      "gpt-oss-120b-b200-64-bf16-211", "mixtral-8x7b-b200-64-fp8-287"]),
    (r"MPT-30B on 8 A100s, the last one refused, now fits at [\d.]+ of [\d.]+ GB usable \([^)]*\) and reads "
     r"([+-]\d+\.\d)%", ["mpt-30b-a100-80gb-8-bf16-llmfoundry"]),
    (r"the B200 runs went from \+224% / \+238% to ([+-]\d+)% / ([+-]\d+)%",
     ["qwen3-30b-a3b-b200-8-mxfp8-216", "qwen3-30b-a3b-b200-8-mxfp8-247"]),
    (r"DiT-2B \(([+-]\d+)% / ([+-]\d+)%\)", ["dit-2b-wse2-1-403", "dit-2b-wse3-1-405"]),
    (r"ESM-2 on CS-3 \(([+-]\d+)%", ["esm2-35m-wse3-1-404"]),
    (r"CS-2, reads ([+-]\d+)%: its per-micro-batch cost", ["esm2-35m-wse3-1-404"]),
    (r"ESM-2 35M on CS-2 went from \+282% to ([+-]\d+\.\d)%", ["esm2-35m-wse2-1-402"]),
    (r"GPT-3 175B on A100 \(([−-]\d+)%, ([−-]\d+)%\)", ["gpt3-175b-a100-80gb-64-381", "gpt3-175b-a100-80gb-64-382"]),
    (r"on 512 GB200 went from -60% to ([+-]\d+)%", ["llama-3-8b-gb200-512-fp8-current-mlperf-v51"]),
    (r"the B200 node reads ([+−-]\d+)% in BF16", ["llama-3-8b-b200-8-bf16-nemo2509-vuiseng9"]),
    (r"in NeMo 26\.08\) is now predicted \(\+10\.3% then, ([+-]\d+\.\d)% today\)", ["qwen3-30b-a3b-gb200-8-mxfp8-7"]),
    (r"Qwen3-235B on 64 B200 from \+63% to ([+-]\d+)% and the profiled H100 row from \+14\.2% to ([+-]\d+\.\d)%",
     ["qwen3-235b-a22b-b200-64-mxfp8-248", "qwen3-30b-a3b-h100-16-389"]),
    (r"4,096 to 11,616 H100 from \+25\.\.\+34% to ([+-]\d+)\.\.([+-]\d+)%",
     [tuple(f"gpt3-175b-h100-{n}-fp8-mlperf-{r}" for n, r in (
         ("4096", "v31"), ("6144", "v31"), ("8192", "v31"), ("10240", "v31"), ("10752", "v31"), ("10752", "v31-azure"),
         ("10752", "v40"), ("11616", "v40")))]),
]


@pytest.mark.parametrize("pattern, runs", PROSE_RUNS, ids=[str(i) for i in range(len(PROSE_RUNS))])
def test_prose_quotes_each_runs_error_as_the_table_prints_it(pattern, runs):
    """A run's error quoted in the prose is its row of the generated table at the prose's precision; a range
    "a..b" over a set of runs is their smallest and largest error. Stale prose (the complaint that the README
    quoted numbers the tool no longer prints) fails here."""
    table = _table_errors()
    quoted = _quote(pattern).groups()
    expected = []
    for group in runs:
        if isinstance(group, tuple):
            values = [table[r] for r in group]
            expected += [min(values), max(values)]
        else:
            expected.append(table[group])
    assert len(quoted) == len(expected)
    for text, value in zip(quoted, expected):
        decimals = len(text.split(".")[1]) if "." in text else 0
        assert text.replace("−", "-") == _as_printed(value, decimals), (pattern, text, value)


def _summary_block() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("<!-- summary:begin (tools/accuracy.py) -->\n", 1)[1].split("\n<!-- summary:end -->", 1)[0]


def _table_rows() -> dict[str, list[str]]:
    """The generated measured-runs table's rows by run id (its cells as printed)."""
    text = README.read_text(encoding="utf-8")
    body = text.split("<!-- accuracy:begin (tools/accuracy.py) -->\n", 1)[1].split("\n<!-- accuracy:end -->", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines()]
    return {cells[0]: cells for cells in rows if len(cells) == 11 and cells[1] in ("fit", "check")}


def test_summary_regroups_the_per_run_table():
    """freshuser15: the "At a glance" table is the per-run table below it regrouped, derived here without the
    tool: every timed check run of the per-run table (role `check`, an error printed) falls in exactly one row,
    chosen by its `--hw` (the devices cell), its model's MoE-ness (the preset) and its precision in the runs file
    (bf16/fp16 = 16-bit); each row's count, worst error and known-gap count are the table's, its median, mean and
    signed mean those of the table's one-decimal errors (within 0.1 point: each printed error is rounded once,
    the mean once more). The known misses listed under it are the table's "(known gap)" runs, worst first."""
    import statistics

    from btacalc.planning.measured import load_runs, resolve_model

    runs = {r.id: r for r in load_runs()}
    table = _table_rows()
    errors = _table_errors()
    timed = {i: cells for i, cells in table.items() if cells[1] == "check" and i in errors}
    summary_lines = _summary_block().splitlines()
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in summary_lines[2:]
            if line.startswith("| ")]
    seen: set[str] = set()
    for hw, kind, precision, n, median, mean, signed, worst, gaps in rows:
        mine = [i for i, cells in timed.items() if cells[3].split(" x ")[1] == hw
                and resolve_model(cells[2]).is_moe == (kind == "MoE")
                and (runs[i].precision in ("bf16", "fp16")) == (precision == "16-bit")]
        assert mine and not seen & set(mine), (hw, kind, precision)
        seen |= set(mine)
        values = [errors[i] for i in mine]
        assert int(n) == len(mine), (hw, kind, precision)
        assert abs(float(median.rstrip("%")) - statistics.median(abs(v) for v in values)) <= 0.1 + 1e-9
        assert abs(float(mean.rstrip("%")) - statistics.fmean(abs(v) for v in values)) <= 0.1 + 1e-9
        assert abs(float(signed.rstrip("%")) - statistics.fmean(values)) <= 0.1 + 1e-9
        assert float(worst.rstrip("%")) == max(values, key=abs), (hw, kind, precision)
        assert int(gaps) == sum("(known gap)" in timed[i][7] for i in mine), (hw, kind, precision)
    assert seen == set(timed), set(timed) - seen
    listed = re.findall(r"`([^`]+)` ([+-]\d+\.\d)%", next(x for x in summary_lines if x.startswith("Known misses")))
    expected = sorted((i for i in timed if "(known gap)" in timed[i][7]), key=lambda i: -abs(errors[i]))
    assert [i for i, _ in listed] == expected
    assert all(float(e) == errors[i] for i, e in listed)


@pytest.mark.slow
def test_summary_fragment_is_current():
    """The "At a glance" table is what tools/accuracy.py writes from `validate` today (regenerate with
    `python tools/accuracy.py` when a number moves)."""
    tool = _accuracy_tool()
    assert f"{tool.SUMMARY_BEGIN}\n{tool.summary_markdown()}\n{tool.SUMMARY_END}" in README.read_text(encoding="utf-8")


def test_architecture_factors_prose_is_the_profiles():
    """freshuser15: the README said "agree within 1.2%" in one place and "3.3%" in another about the same two
    fitted factors. Both sentences now quote one number: |Ampere / Hopper - 1| of the profiles'
    `compute_efficiency` (a100-80gb, h100), and Blackwell's (b200) over their mean, at the prose's precision."""
    from btacalc.config.hardware import builtin_profiles

    profiles = builtin_profiles()
    ampere, hopper, blackwell = (profiles[n].calibration.compute_efficiency.value for n in ("a100-80gb", "h100", "b200"))
    prose = _prose()
    quoted = re.findall(r"Ampere and Hopper,? fitted apart,? agree within ([\d.]+)%", prose)
    assert len(quoted) == 2, quoted
    assert set(quoted) == {f"{100 * abs(ampere / hopper - 1):.1f}"}, quoted
    assert _quote(r"Blackwell's is ([\d.]+) of theirs").group(1) == f"{blackwell / ((ampere + hopper) / 2):.2f}"


def test_points_known_gap_sentence_counts_the_points_table():
    """freshuser15: the sentence under the published-points table said "The three known gaps" when the table held
    one. It names the table's KNOWN GAP rows: how many (as a word) and which."""
    text = README.read_text(encoding="utf-8")
    body = text.split("<!-- points:begin (tools/accuracy.py) -->\n", 1)[1].split("\n<!-- points:end -->", 1)[0]
    gaps = [line.split("|")[1].strip() for line in body.splitlines() if line.rstrip().endswith("| KNOWN GAP |")]
    words = {1: "one", 2: "two", 3: "three", 4: "four"}
    count, named = _quote(r"The (\w+) known gaps? among these points, ((?:`[\w-]+`(?:, | and )?)+), (?:is|are) named").groups()
    assert count == words[len(gaps)]
    assert re.findall(r"`([\w-]+)`", named) == gaps


def test_preset_list_is_every_shipped_preset():
    """freshuser15: "Built-in presets" named 21 of the 44 files in btacalc/data/presets. The sentence names each
    shipped preset once, and the ones it calls MoE are the MoE presets."""
    from btacalc.config.presets import resolve_model

    shipped = {p.stem for p in (README.parent / "btacalc" / "data" / "presets").glob("*.toml")}
    sentence = _quote(r"Built-in presets \(.*?\): (MoE .*?`dit-2b`\.)").group(1)
    named = re.findall(r"`([\w.-]+)`", sentence)
    assert sorted(named) == sorted(shipped)
    moe = re.findall(r"`([\w.-]+)`", sentence.split("; dense ", 1)[0])
    moe += ["deepseek-proxy-megatron-ci"] if "`deepseek-proxy-megatron-ci` (MoE)" in sentence else []
    assert sorted(moe) == sorted(n for n in shipped if resolve_model(n).is_moe)


def test_compare_picture_sentence_is_compares_and_the_runs_files(cli):
    """freshuser15: the compare picture's sentence said "16 H100s ... measured 10.6-13.0k tokens/s per GPU"; the
    picture's H100 row is `compare --search`'s (the smallest cluster that fits), and the measured range is the
    BF16 Qwen3-30B-A3B rows on 16 H100s of the shipped runs file, in thousands at one decimal."""
    from btacalc.planning.measured import load_runs

    devices, low, high, n = _quote(r"the smallest H100 cluster that fits Qwen3-30B-A3B, (\d+) GPUs \(Megatron-Bridge "
                                   r"measured ([\d.]+)-([\d.]+)k tokens/s per GPU on (\d+) H100s in BF16").groups()
    code, out, err = cli("compare", "--model", "qwen3-30b-a3b", "--hw", "h100", "--search", "--json")
    assert code == 0, err
    assert json.loads(out)["rows"][0]["devices"] == int(devices)
    measured = [r.measured.tokens_per_s_per_device for r in load_runs() if r.model == "qwen3-30b-a3b"
                and r.hw == "h100" and r.devices == int(n) and r.precision == "bf16"]
    assert (low, high) == (f"{min(measured) / 1000:.1f}", f"{max(measured) / 1000:.1f}")


def test_sweep_names_are_the_sweeps_variables():
    """freshuser15: the README's `sweep --vary` names left out `precision`, which the README's own low-precision
    example varies. The sentence lists exactly the names `sweep` takes (btacalc.planning.sweep.VARIABLES)."""
    from btacalc.planning.sweep import VARIABLES

    listed = _quote(r"`start:stop:xF`; names: ((?:`[\w-]+`,? (?:and )?)+)").group(1)
    assert sorted(re.findall(r"`([\w-]+)`", listed)) == sorted(VARIABLES)


def test_plan_options_paragraph_names_every_plan_option():
    """freshuser15: the README's "`plan` options:" paragraph left out 14 of plan's options (--sensitivity, --schema,
    --deepep, --te-version, ...). It names each option `plan` takes (a --x/--no-x switch by either name)."""
    import typer

    from btacalc.cli.app import app

    text = README.read_text(encoding="utf-8")
    paragraph = text[text.index("`plan` options:"):text.index("Defaults and why:")]
    named = set(re.findall(r"--[\w-]+", paragraph))
    plan = typer.main.get_command(app).commands["plan"]
    missing = [p.opts for p in plan.params if p.name != "help"
               and not named & {o for o in (*p.opts, *getattr(p, "secondary_opts", ())) if o.startswith("--")}]
    assert not missing


def test_alcf_llama_sentence_is_the_plans_shape(cli):
    """freshuser15: the README said the solver runs the ALCF LLaMA-7B run (batch 99, s = 2048, one CS-2) "as 9
    micro-batches of 11 untiled sequences"; `plan` answers one micro-batch of 99 in 3 tiles of 33 today."""
    m, n, g, b = _quote(r"the solver runs it as (\d+) micro-batch(?:es)? of (\d+) sequences in (\d+) tiles of (\d+)").groups()
    plan = _plan(cli, "--model", "llama-7b", "--hw", "wse2", "--global-batch", "99", "--seq", "2048")["plan"]
    assert (plan["micro_batches"], plan["global_batch"], plan["tiles"], plan["tile_batch"]) == tuple(map(int, (m, n, g, b)))


def test_crossover_sentence_is_crossovers(cli):
    """freshuser15: "one CS-3 system is worth about X GB200s (Y H100s) for Qwen3-30B-A3B" is the command the sentence
    names (it said 2.3 and 5.6; crossover's gpu_equivalents read 6.4 and 15.4 on 2026-12-04)."""
    gb200, h100 = _quote(r"one CS-3 system is worth about ([\d.]+) GB200s \(([\d.]+) H100s\)").groups()
    code, out, err = cli("crossover", "--hw", "wse3,h100,gb200", "--hidden", "2048", "--search", "--json", "--quiet")
    assert code == 0, err
    worth = json.loads(out)["gpu_equivalents"]["qwen3-moe-h2048"]
    assert (f"{worth['wse3/gb200']:.1f}", f"{worth['wse3/h100']:.1f}") == (gb200, h100)


def test_expected_error_example_is_the_plans(cli):
    """"`btacalc plan --model qwen3-30b-a3b --hw h100 --devices 16` expects, from N measured runs like it (BASIS), a
    mean |error| of A%, at most B%, and on average predicts C% more tokens/s than the runs measured; ... on `--hw wse3`
    falls back to all W wafer runs": the plans' throughput.expected_error (C is its signed mean: "more", positive)."""
    m = _quote(r"--hw h100 --devices 16` expects, from (\d+) measured runs like it \((.+?)\), a typical \|error\| of "
               r"(\d+)%, a mean \|error\| of (\d+)%, at most (\d+)%, and on average predicts (\d+)% more tokens/s "
               r"than the runs measured; the same model on `--hw wse3` falls back to all (\d+) wafer runs")
    runs, basis, median, mean, worst, fast, wafer = m.groups()
    got = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16")["throughput"]["expected_error"]
    assert (got["runs"], got["basis"]) == (int(runs), basis)
    assert [f"{100 * got[k]:.0f}" for k in ("median_abs_error", "mean_abs_error", "max_abs_error", "mean_error")] \
        == [median, mean, worst, fast]
    on_wafer = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "wse3")["throughput"]["expected_error"]
    assert on_wafer["basis"] == "wafers, dense and MoE" and on_wafer["runs"] == int(wafer)
    m = _quote(r"With `--overlap-a2a` the H100 plan expects, from the (\d+) Hopper MoE runs with the EP overlap "
               r"\(either precision: only (\d+) are 16-bit\), a typical \|error\| of (\d+)% and on average (\d+)% "
               r"more tokens/s than measured")
    runs, sixteen, median, fast = m.groups()
    got = _plan(cli, "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16",
                "--overlap-a2a")["throughput"]["expected_error"]
    assert got["basis"] == "gpu-hopper (h100, h200, h100-96gb), MoE with the EP overlap" and got["runs"] == int(runs)
    assert got["narrower"] == f"gpu-hopper (h100, h200, h100-96gb), MoE with the EP overlap, 16-bit: {sixteen} runs"
    assert [f"{100 * got[k]:.0f}" for k in ("median_abs_error", "mean_error")] == [median, fast]


def _held_out_by(key) -> dict[str, list[float]]:
    """The shipped leave-one-model-family-out errors (btacalc/data/expected_error.json, which `validate
    --cross-validate` prints and tests/test_expected_error.py checks current), grouped by key(run, its model family)."""
    from btacalc.planning.crossval import load_model_families, model_family
    from btacalc.planning.expected_error import shipped
    from btacalc.planning.measured import load_runs

    model = {r.id: r.model for r in load_runs()}
    families = load_model_families()
    out: dict[str, list[float]] = {}
    for r in shipped().runs:
        for k in key(r, model_family(model[r.id], families)):
            out.setdefault(k, []).append(r.error)
    return out


def _mean_abs(errors: list[float]) -> str:
    return f"{100 * sum(abs(e) for e in errors) / len(errors):.1f}"


def test_cross_validation_prose_is_the_held_out_errors():
    """freshuser16: the prose's leave-one-model-family-out numbers ("the 181 runs read 12.0% ...; by hardware A100
    80GB 5.7%, ...", "dense GPU runs 8.1% mean over 144 runs", the families, "Qwen3 30.8% over 19 runs") were
    pinned by no test; each is now the shipped held-out errors regrouped (runs, mean |error|, max, signs)."""
    hw_names = {"A100 80GB": "a100-80gb", "A100 40GB": "a100-40gb", "H100": "h100", "H200": "h200", "B200": "b200",
                "GB200": "gb200", "CS-2": "wse2", "CS-3": "wse3"}
    g = _held_out_by(lambda r, fam: ["all", r.device, r.hw, f"family {fam}"]
                     + (["dense gpu"] if r.device == "gpu" and not r.moe else [])
                     + (["dense gpu, not ci"] if r.device == "gpu" and not r.moe and "megatron-ci" not in fam else [])
                     + (["gpt3 mlperf"] if fam == "gpt3" and "mlperf" in r.id else []))
    m = _quote(r"Held out family by family, the (\d+) runs read ([\d.]+)% mean \|error\| \(max ([\d.]+)%, [^)]*\); "
               r"the (\d+) GPU runs ([\d.]+)%; by hardware ([^(]+)\(")
    n, mean, top, gpus, gpu_mean, by_hw = m.groups()
    assert (int(n), mean, top) == (len(g["all"]), _mean_abs(g["all"]), f"{100 * max(map(abs, g['all'])):.1f}")
    assert (int(gpus), gpu_mean) == (len(g["gpu"]), _mean_abs(g["gpu"]))
    quoted = dict(re.findall(r"([A-Z][\w -]*?) ([\d.]+)%", by_hw))
    assert set(quoted) == set(hw_names) and all(quoted[k] == _mean_abs(g[hw_names[k]]) for k in quoted), quoted
    dense, n_dense, not_ci, n_not_ci = _quote(r"dense GPU runs ([\d.]+)% mean over (\d+) runs \(([\d.]+)% over the "
                                              r"(\d+) outside the deterministic CI test\)").groups()
    assert (dense, int(n_dense)) == (_mean_abs(g["dense gpu"]), len(g["dense gpu"]))
    assert (not_ci, int(n_not_ci)) == (_mean_abs(g["dense gpu, not ci"]), len(g["dense gpu, not ci"]))

    def signs(errors):
        return str(sum(e > 0 for e in errors)), str(sum(e < 0 for e in errors))

    n3, m3, fast3, slow3, n_mlperf, m_mlperf = _quote(
        r"GPT-3 family (\d+) runs ([\d.]+)% \((\d+) too fast, (\d+) too slow; its (\d+) MLPerf rows read ([\d.]+)% in "
        r"their fold").groups()
    gpt3 = g["family gpt3"]
    assert (int(n3), m3, (fast3, slow3)) == (len(gpt3), _mean_abs(gpt3), signs(gpt3))
    assert (int(n_mlperf), m_mlperf) == (len(g["gpt3 mlperf"]), _mean_abs(g["gpt3 mlperf"]))
    (n_l3, m_l3, n_nem, m_nem, fast_nem, slow_nem, n_mpt, m_mpt, m_bloom, n_ci, m_ci) = _quote(
        r"Llama 3 family (\d+) runs ([\d.]+)%, Nemotron-4 (\d+) runs ([\d.]+)% \((\d+) too fast, (\d+) too slow\), MPT "
        r"(\d+) runs ([\d.]+)%, BLOOM ([\d.]+)%, the CI test's 7B GPT (\d+) runs ([\d.]+)%").groups()
    for (count, mean_, fam) in ((n_l3, m_l3, "llama-3"), (n_nem, m_nem, "nemotron4"), (n_mpt, m_mpt, "mpt"),
                                (n_ci, m_ci, "gpt-7b-megatron-ci")):
        assert (int(count), mean_) == (len(g[f"family {fam}"]), _mean_abs(g[f"family {fam}"])), fam
    assert (fast_nem, slow_nem) == signs(g["family nemotron4"])
    assert m_bloom == _mean_abs(g["family bloom"])
    m_q, n_q = _quote(r"leave-one-family-out Qwen3 ([\d.]+)% over (\d+) runs").groups()
    assert (m_q, int(n_q)) == (_mean_abs(g["family qwen3"]), len(g["family qwen3"]))


def test_the_launch_rule_counts_are_the_rule_table():
    """"checked against N of Megatron's own argument rules ... and M of TransformerEngine's" (README) and docs/megatron.md's
    "holds the N checks": the rules in btacalc/config/megatron_rules.py, by the project each cites."""
    from btacalc.config.megatron_rules import RULES

    te = sum(r.source.startswith("transformer_engine/") for r in RULES)
    megatron = len(RULES) - te
    said = _quote(r"checked against (\d+) of Megatron's own argument rules \(each\s+cited to its line at Megatron-LM "
                  r"@ d98e8a64\) and (\d+) of TransformerEngine's")
    assert (int(said.group(1)), int(said.group(2))) == (megatron, te)
    doc = (README.parent / "docs" / "megatron.md").read_text(encoding="utf-8")
    assert f"megatron_rules.py holds the {megatron} checks" in doc


def test_the_layout_rules_state_the_interleaved_schedules_rule_btacalc_applies():
    # review23: the list of layout rules still said "the interleaved schedule needs M a multiple of PP" after
    # pipesched replaced that refusal with Megatron's own (schedules.py L1160-1180, config/pipeline.group_rule)
    from btacalc.config.pipeline import group_rule
    said = _quote(r"the interleaved schedule needs ([^,]+), ([^,]+), default PP,")
    assert said.group(1) == "PP ≤ N ≤ M and M mod N 0 or at least PP"
    # what that says, the code does: M 10 at PP 4 runs with N 6 (not a multiple of PP); M 6, N 4 leaves 2 < PP
    assert group_rule(4, 10, 6) == "" and group_rule(4, 6, 4) and group_rule(4, 6, 3) and group_rule(4, 5, 6)
