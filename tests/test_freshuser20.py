"""freshuser20: btacalc used as a new user would, from its README (docs/story.md "freshuser20").

Each test pins one defect a serious user tripped on; the expected values are arithmetic from the input given
(column widths, the words of a caption), not btacalc's own output.
"""

from __future__ import annotations

import io
import json

import pytest

from rich.console import Console
from rich.table import Table

from btacalc.output.fit import fit

WORD = "word"
WORDS = 30  # the caption: 30 words of 4 letters, 30 x 5 - 1 = 149 columns on one line


def _split_table() -> Table:
    """A key column of 10 characters and three of 30: rich pads each cell by 1 on either side and draws a border
    of 1 at each edge and between columns, so the whole table takes 1 + 12 + 3 x (1 + 32) + 1 - 1 = 113 columns
    (the last column's border is the right edge), more than 80."""
    t = Table(caption=" ".join([WORD] * WORDS))
    t.add_column("key")
    for n in range(3):
        t.add_column(f"c{n}")
    t.add_row("k" * 10, *["x" * 30] * 3)
    return t


def _render(table: Table, width: int) -> list[str]:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, legacy_windows=False).print(fit(table))
    return buf.getvalue().rstrip("\n").split("\n")


def test_a_split_tables_caption_wraps_to_its_widest_piece_not_its_last():
    """At 80 columns the table splits into [key, c0, c1] (1 + 12 + 1 + 32 + 1 + 32 + 1 = 80 columns) and [key, c2]
    (1 + 12 + 1 + 32 + 1 = 47). Its caption wraps as the whole table's would, to the widest piece: 16 words a line
    (16 x 5 - 1 = 79 <= 80, 17 x 5 - 1 = 84 > 80), so 30 words take ceil(30 / 16) = 2 lines. Before, it wrapped to
    the last piece's 47 columns: 9 words a line (9 x 5 - 1 = 44, 10 x 5 - 1 = 49 > 47), ceil(30 / 9) = 4 lines (the
    DeepSeek-V3 plan's per-stage memory table on 256 GPUs: a two-line caption took twelve lines of 18 columns)."""
    lines = _render(_split_table(), 80)
    caption = [line for line in lines if WORD in line]
    assert len(caption) == 2 and sum(line.split().count(WORD) for line in caption) == WORDS
    assert max(len(line) for line in lines) <= 80
    widths = sorted({len(line.rstrip()) for line in lines if line.startswith(("┏", "+"))})
    assert widths == [47, 80]  # the two pieces, as the docstring adds them up


def test_a_table_that_fits_keeps_its_caption_under_it():
    """At 113 columns (the whole table) nothing splits: the caption wraps at 113, 22 words a line
    (22 x 5 - 1 = 109 <= 113, 23 x 5 - 1 = 114 > 113), so ceil(30 / 22) = 2 lines, as rich draws any table."""
    lines = _render(_split_table(), 113)
    assert sum(1 for line in lines if line.startswith("┏")) == 1
    caption = [line for line in lines if WORD in line]
    assert len(caption) == 2 and caption[0].split().count(WORD) == 22


# Llama 3 70B on 32 GB200, the sweep the README shows for a precision question (`--vary precision=bf16,...`): every
# row said "does not fit" and nothing said why or what to run instead. The sweep takes no --tp, --pp or --cp, so each
# GPU holds the whole model: 70.55 B parameters (config.json of Meta-Llama-3-70B: L 80, h 8192, f 28672, V 128256,
# a_kv 8) x (2 B of 16-bit weights + 4 B of fp32 main gradients) = 423 GB before ZeRO-1's optimizer shard, over the
# GB200's 186 GB of HBM3e (NVIDIA GB200 NVL72 datasheet) in any precision.
LLAMA3_70B_PARAMS = 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192) + 2 * 128256 * 8192 + 8192


def test_the_sweeps_model_holds_more_than_a_gb200_in_data_parallel():
    assert abs(LLAMA3_70B_PARAMS / 1e9 - 70.55) < 0.01 and LLAMA3_70B_PARAMS * (2 + 4) / 1e9 > 186


def test_a_sweep_with_no_fitting_point_says_why_and_what_to_run(cli):
    code, out, err = cli("sweep", "--model", "llama-3-70b", "--hw", "gb200", "--devices", "32",
                         "--vary", "precision=bf16,nvfp4")
    assert code == 0 and out.count("does not fit") == 2, out
    assert err.count("no point of the sweep fits") == 1 and "btacalc plan --search" in err, err
    assert "no --tp, --pp or --cp" in err, err


def test_a_sweep_with_a_fitting_point_says_nothing_more(cli):
    """The same sweep with ZeRO-3 (the 423 GB sharded 32 ways, 13 GB a GPU) fits: no note."""
    code, out, err = cli("sweep", "--model", "llama-3-70b", "--hw", "gb200", "--devices", "32", "--zero", "3",
                         "--vary", "precision=bf16,nvfp4")
    assert code == 0 and "does not fit" not in out and "no point" not in err, (out, err)


def test_a_wafer_sweep_with_no_fitting_point_points_at_plan_not_at_gpu_layouts(cli):
    """A 2^20-token sequence on a CS-3: one head's eager s² scores alone, 2^40 x 2 B = 2.2 TB, exceed its 44 GB of
    SRAM (Cerebras WSE-3 datasheet); a wafer has no tensor or pipeline layout to search."""
    assert (1 << 40) * 2 > 44e9
    code, out, err = cli("sweep", "--hw", "wse3", "--vary", "seq=1048576")
    assert code == 0 and "does not fit" in out
    assert "no point of the sweep fits" in err and "--search" not in err, err


# `plan --emit bridge` and back, as docs/megatron.md shows it: read back without --devices, the error named "torchrun
# --nproc_per_node/--nnodes", which a Megatron-Bridge override file never holds (the launcher is Bridge's own script).
def test_bridge_overrides_without_a_device_count_are_refused_naming_bridge_not_torchrun(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # (the layout line read below unwrapped, whatever the runner's width)
    code, bridge, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16",
                            "--emit", "bridge")
    assert code == 0 and bridge.startswith("# btacalc plan: qwen3-30b-a3b on 16 x h100"), err
    path = tmp_path / "overrides.yaml"
    # (the emitter now writes the count as an option line, read back below: a hand-written file holds none)
    path.write_text("\n".join(x for x in bridge.splitlines() if not x.startswith("# btacalc option: --devices")))
    code, out, err = cli("plan", "--hw", "h100", "--from-bridge", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "torchrun" not in err and "Megatron-Bridge overrides hold no device count" in err and "--devices" in err
    code, out, err = cli("plan", "--hw", "h100", "--devices", "16", "--from-bridge", str(path))
    # the README's 16-GPU plan: TP 1, PP 1, CP 1, so DP = 16 / (1 x 1 x 1) = 16; EP 16, EDP = 16 / (16 x 1) = 1
    assert code == 0 and "DP 16, EP 16, ETP 1, EDP 1" in out, err


# `btacalc hw list`: its last column, headed "estimates", listed the name of every number not of kind "published"
# (derived and calibrated ones too), wrapped and cut mid-word ("achievable_bandwidth_fr" / "action"): 365 lines for 11
# profiles. It now counts the estimates, one line a profile; the count is read here from the profile files themselves.
def _file_estimates(path) -> tuple[int, int]:
    """(numbers of kind "estimate", numbers) of a profile file: every table with a `kind` and a numeric `value`."""
    import tomllib

    def entries(d):
        for v in d.values():
            if isinstance(v, dict):
                yield from ([v] if "kind" in v else entries(v))
    numbers = [e for e in entries(tomllib.loads(path.read_text())) if type(e.get("value")) in (int, float)]
    return sum(e["kind"] == "estimate" for e in numbers), len(numbers)


def test_hw_list_counts_each_profiles_estimates_on_one_line(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "132")  # btacalc's own width when piped (cli/console.py), whatever the runner's
    from btacalc.paths import data_dir

    folder = data_dir("hardware_profiles")
    files = sorted(folder.glob("*.toml"))
    code, out, err = cli("hw", "list")
    assert code == 0 and err == "" and "sram_bytes" not in out, out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.startswith("│ ") and
            line.split("│")[1].strip()}
    assert sorted(rows) == sorted(f.stem for f in files)
    for f in files:
        estimates, numbers = _file_estimates(f)
        assert rows[f.stem].rstrip().rstrip("│").strip().endswith(f"{estimates} of {numbers}"), rows[f.stem]
    # sram_bytes is derived, not one; the per-tile estimate left the GPU profiles in the thirty-second session
    assert _file_estimates(folder / "h100.toml") == (7, 38)
    assert len(out.splitlines()) < 4 * len(files)


# Left by freshuser20 and fixed after it (twenty-seventh session):
# `whatif`'s trace was titled "grid points between today's value and the answer"; it runs to the first grid point that
# reaches the target (planning/whatif.py: the grid from today's index to the nearest hit), past the answer
def test_the_whatif_trace_says_it_ends_at_the_first_point_that_reaches_the_target(cli):
    args = ("whatif", "-m", "qwen3-30b-a3b", "--hw", "h100", "-n", "16", "--solve-for", "devices_per_node",
            "--target", "tokens_per_s=120000")
    code, out, _ = cli(*args, "--json")
    assert code == 0
    r = json.loads(out)
    metrics = [s["metric"] for s in r["trace"]]
    assert r["reached"] and metrics[-1] >= 120_000 > max(metrics[:-1])
    assert r["trace"][-2]["value"] < r["value"] <= r["trace"][-1]["value"]  # the answer between the last two
    code, out, _ = cli(*args)
    assert "first that reaches the target; the answer lies between the last two" in " ".join(out.split())


# `crossover` of one size printed the "Regime boundaries" table's headers alone
def test_a_crossover_without_a_regime_change_says_so(cli):
    code, out, _ = cli("crossover", "--hw", "wse3", "--hidden", "2048")
    assert code == 0 and "Regime boundaries: none" in out and "between the family members" not in out


# "What would fit" told a dense model's user an --ep and "EP = gcd(N, E)": a dense model has no experts to split
def test_what_would_fit_names_no_expert_parallelism_for_a_dense_model(cli):
    _, dense, _ = cli("plan", "-m", "llama-3-70b", "--hw", "h100", "-n", "2")
    _, moe, _ = cli("plan", "-m", "qwen3-235b-a22b", "--hw", "h100", "-n", "2")
    dense, moe = (" ".join(text.replace("│", " ").split()) for text in (dense, moe))  # (the panel's borders out)
    assert "fits one sequence per device (smallest power-of-two device count)" in dense and "--ep" not in dense
    assert "--ep 64" in moe and "EP = gcd(N, E)" in moe


# `--emit bridge` wrote no device count, so its overrides read back only with --devices: the file now says it in a
# `# btacalc option: --devices N` line, which --from-bridge reads; a --devices beside it must agree
def test_emitted_bridge_overrides_read_back_on_their_own_device_count(cli, tmp_path):
    plan = ("plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "-n", "16", "--ep", "16")
    code, emitted, _ = cli(*plan, "--emit", "bridge")
    assert code == 0 and "# btacalc option: --devices 16 " in emitted
    path = tmp_path / "overrides.txt"
    path.write_text(emitted)
    code, out, _ = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "--from-bridge", str(path), "--json")
    back = json.loads(out)
    code0, out0, _ = cli(*plan, "--json")
    first = json.loads(out0)
    assert code == code0 == 0 and back["parallelism"]["devices"] == 16
    assert back["throughput"]["tokens_per_s"] == pytest.approx(first["throughput"]["tokens_per_s"], rel=1e-9)
    code, out, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "--from-bridge", str(path), "-n", "8")
    assert code == 2 and out == "" and "--devices 8 contradicts the file's `# btacalc option: --devices 16`" in err
