"""hostile36: a hostile campaign on btacalc's command line (twenty-ninth session): validate's inputs and outputs,
compare's hardware list, the emitted launches read back, whatif's numbers, profiles and models at their edges. Each
test is a finding: the one-line refusal, the file left as it was, or the value the output must show."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from support import one_line_error

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "hardware_profiles" / "h100.toml"


# D1: `compare --hw` and `crossover --hw` split their list at every comma, so a profile whose path holds a comma
# ('a,b/h100.toml') was read as the profiles 'a' and 'b/h100.toml' ("unknown hardware 'a'"). A piece that is
# neither a built-in name nor an existing path is now joined with the next pieces into the path they make.
def test_compare_takes_a_profile_whose_path_holds_a_comma(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a,b").mkdir()
    shutil.copy(H100, tmp_path / "a,b" / "h100.toml")
    code, out, err = cli("compare", "--hw", "a,b/h100.toml,b200", "--json", "-q")
    assert code == 0, err
    assert [row["hardware"] for row in json.loads(out)["rows"]] == ["h100", "b200"]  # the file's name is h100
    code, out, err = cli("compare", "--hw", f"{tmp_path}/a,b/h100.toml", "--json", "-q")  # absolute, alone
    assert code == 0, err
    assert [row["hardware"] for row in json.loads(out)["rows"]] == ["h100"]
    code, out, err = cli("crossover", "--hw", "a,b/h100.toml", "--hidden", "512", "--json", "-q")
    assert code == 0, err
    assert {p["hardware"] for p in json.loads(out)["points"]} == {"h100"}


def test_a_comma_path_is_an_input_and_a_name_list_stays_a_list(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a,b").mkdir()
    profile = tmp_path / "a,b" / "h100.toml"
    shutil.copy(H100, profile)
    before = profile.read_bytes()
    code, out, err = cli("compare", "--hw", "a,b/h100.toml", "--output", "a,b/h100.toml", "-q")
    one_line_error(code, out, err, "is an input of this command (--hw a,b/h100.toml)")
    assert profile.read_bytes() == before
    # a file named like a list of built-in names does not turn the list into one path
    (tmp_path / "wse2,wse3").write_text("not a profile")
    code, out, err = cli("compare", "--hw", "wse2,wse3", "--json", "-q")
    assert code == 0, err
    assert [row["hardware"] for row in json.loads(out)["rows"]] == ["wse2", "wse3"]
    # a comma path that does not exist is still refused in one line
    code, out, err = cli("compare", "--hw", "x,y.toml", "-q")
    one_line_error(code, out, err, "unknown hardware 'x'")


# D2: whatif wrote numbers of 1e15 and more with `,.0f`, which prints the float's binary expansion: a target of
# 1e300 read "1,000,000,000,000,000,052,504,760,..." (digits nobody gave), and the head table cut it with "…".
def test_whatif_writes_a_huge_target_as_given_and_never_cuts_it(cli):
    code, out, err = cli("whatif", "--hw", "wse2", "--target", "tokens_per_s=1e300", "--solve-for", "sram_bytes")
    assert code == 1, err
    text = "".join(line.strip() for line in out.splitlines())
    expected = "1" + ",000" * 100  # 10^300 with its thousands grouped: the target as given
    assert f">={expected}for" in text.replace(" ", "") and "…" not in out
    assert "052,504" not in text


@pytest.mark.parametrize("value, text", [(4e10, "40,000,000,000"), (1e15, "1,000,000,000,000,000"),
                                         (9.87654321e20, "987,700,000,000,000,000,000"),
                                         (-3e17, "-300,000,000,000,000,000"), (1234.5, "1,234"),
                                         (1e23, "100,000,000,000,000,000,000,000")])  # float: 99,999,...,991,611,392
def test_readable_keeps_four_significant_digits_and_zeros(value, text):
    from btacalc.planning.whatif import readable

    assert readable(value) == text


def test_a_name_too_long_for_a_file_is_still_one_line_in_a_hw_list(cli):
    # a guard on D1's fix: the split asks whether each piece names a built-in profile, and a 300-character name
    # made that question fail with ENAMETOOLONG ("cannot read or write .../hhh...h.toml") before the reader's line
    code, out, err = cli("compare", "--hw", "h" * 300 + ",b200", "-q")
    one_line_error(code, out, err, "too long to be a file's")


# D3: the batch rule N = DP x M x micro-batch ran before the layout's grid check, with DP = devices // (TP·PP·CP):
# `--tp 3` on 8 GPUs read "--global-batch 4 is not a multiple of DP 2 x --micro-batch 4 ... give the smallest: 8",
# a DP that does not exist and a fix that fails (given 8, the grid error followed). 8 / 3 is no whole number.
def test_a_grid_that_does_not_divide_the_devices_is_named_before_the_batch(cli, tmp_path):
    assert 8 % 3
    args = ("plan", "--model", "gpt-22b", "--hw", "a100-80gb", "--devices", "8", "--tp", "3", "--micro-batch", "4")
    for batch in ("4", "8"):  # the same one line whatever the batch
        code, out, err = cli(*args, "--global-batch", batch)
        one_line_error(code, out, err, "--tp 3 x --pp 1 x --cp 1 = 3 does not divide --devices 8")
        assert "DP 2" not in err
    # a measured run with that layout says the same in validate --explain
    runs = json.loads((ROOT / "btacalc" / "data" / "measured_runs.json").read_text())["runs"]
    run = next(r for r in runs if r["id"] == "gpt-22b-a100-80gb-8-379")
    assert (run["devices"], run["global_batch"], run["micro_batch"]) == (8, 4, 4)
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [{**run, "tp": 3}]}))
    code, out, err = cli("validate", "--measured", str(path), "--explain", run["id"], "--json", "-q")
    assert code == 0, err
    assert "= 3 does not divide devices 8" in json.loads(out)["reason"]


def _on_terminal(args: list[str], rows: int, columns: int) -> str:
    """btacalc's standard output on a pseudo-terminal of `rows` x `columns` (COLUMNS and LINES unset)."""
    from support import on_terminal

    return on_terminal(args, rows, columns)[1]


# D4: a terminal that reports no size (0 rows x 0 columns: a pseudo-terminal nobody sized, as `docker exec -t` or a
# CI runner can give) was read as 0 lines tall, so every table was cut to the fewest lines a cut keeps ("... 79 more
# lines not shown" under 11 lines of `models list`), and as 0 columns wide, laid out at the 40-column floor. Such a
# terminal is now never cut, and laid out 80 wide (a terminal's usual default) unless COLUMNS says otherwise.
@pytest.mark.skipif(not hasattr(__import__("os"), "openpty"), reason="no pseudo-terminal")
def test_a_terminal_that_reports_no_size_gets_every_line(cli):
    code, out, err = cli("models", "list", "--json")
    assert code == 0, err
    names = [m["name"] for m in json.loads(out)]
    shown = _on_terminal(["models", "list"], 0, 0)
    assert "not shown" not in shown
    assert all(name in shown for name in names)
    widths = {len(line) for line in __import__("re").sub(r"\x1b\[[0-9;]*m", "", shown).splitlines()}
    assert 40 < max(widths) <= 80  # laid out within the default width, no longer at the 40-column floor
    # a sized terminal is still cut to its height (README "Terminals"), as before
    assert "not shown" in _on_terminal(["models", "list"], 20, 100)


# D5: a standard output closed before btacalc started (`>&-`) was found when the first line was written, after the
# work: `validate` ran its 10 s of predictions (and printed its progress lines, so stderr held three lines, not one),
# `validate --cross-validate` 35 s. Every command prints on standard output, so it is now refused before any work.
def test_a_closed_standard_output_is_refused_before_the_work(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "btacalc", "validate", "--json", "--output", str(tmp_path / "v.json")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, close_fds=True, env=env,
                          cwd=tmp_path, preexec_fn=lambda: os.close(1), timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr  # no progress line: no work began
    assert done.stderr == "btacalc: error: cannot write to standard output: standard output is closed (Bad file " \
                          "descriptor)\n"
    assert list(tmp_path.iterdir()) == []


# D6: `compare --systems S --match power` with a GPU profile of small system power matched S wafer systems to more
# GPUs than the device bound, refused as "--devices 24117248000 is beyond 2^20" (a flag never given) after the wafer
# row was planned. Now named by what set it, before any row: 1,048,576 CS-2s of about 23 kW each against 1 W GPUs.
def test_a_matched_gpu_count_beyond_the_bound_names_systems_and_match(cli, tmp_path):
    import re

    text = H100.read_text()
    for key in ("chip.power_w", "system.system_power_w"):
        text = re.sub(rf"(\[{re.escape(key)}\]\nvalue = )[^\n]+", r"\g<1>1", text)
    profile = tmp_path / "one-watt.toml"
    profile.write_text(text.replace('name = "h100"', 'name = "one-watt"', 1))
    code, out, err = cli("compare", "--hw", f"wse2,{profile}", "--systems", "1048576", "--match", "power", "-q")
    one_line_error(code, out, err, "--systems 1048576 x wse2 matched by power on one-watt take")
    assert "beyond 2^20 = 1,048,576 devices" in err and "--devices" not in err
    # one system matches 23 kW / 1 W per GPU: inside the bound, planned as before
    code, out, err = cli("compare", "--hw", f"wse2,{profile}", "--match", "power", "--json", "-q")
    assert code == 0, err
    rows = {row["hardware"]: row["devices"] for row in json.loads(out)["rows"]}
    assert rows["one-watt"] < 1 << 20


# D7: tomllib reads an integer literal with Python's int(), which refuses more than 4,300 digits with a plain
# ValueError (not a TOMLDecodeError): a profile or a `plan --config` file holding one ended as an internal error
# (exit 3). One of 401 digits was echoed whole in the profile's error (a 480-character line). Now one line, exit 2,
# and a huge whole number is shown in 6 significant digits.
@pytest.mark.parametrize("digits", [5000, 100_000])
def test_an_integer_of_thousands_of_digits_is_one_line(cli, tmp_path, digits):
    import re

    huge = "1" + "0" * digits
    profile = tmp_path / "p.toml"
    profile.write_text(re.sub(r"(\[chip\.cores\]\nvalue = )[^\n]+", lambda m: m.group(1) + huge, H100.read_text()))
    for args in (("hw", "check", str(profile)), ("plan", "--hw", str(profile))):
        code, out, err = cli(*args)
        one_line_error(code, out, err, "not valid TOML: an integer of more than 4,300 digits")
    run = tmp_path / "run.toml"
    run.write_text(f'hw = "h100"\ndevices = {huge}\n')
    code, out, err = cli("plan", "--config", str(run))
    one_line_error(code, out, err, "not TOML: an integer of more than 4,300 digits")


def test_a_huge_whole_number_in_a_profile_is_shown_short(cli, tmp_path):
    import re

    profile = tmp_path / "p.toml"
    profile.write_text(re.sub(r"(\[chip\.cores\]\nvalue = )[^\n]+", lambda m: m.group(1) + "1" + "0" * 400,
                              H100.read_text()))
    code, out, err = cli("hw", "check", str(profile))
    one_line_error(code, out, err, "chip.cores.value = 1e+400:")
    assert len(err) < 200

    from btacalc.config.hardware import shown

    assert (shown(10 ** 30), shown(-(10 ** 400)), shown(123456789012345678901)) == ("1e+30", "-1e+400", "1.23457e+20")
    assert shown(108.0000001) == "108.0000001"  # a float keeps the digits that break a whole-number rule


def test_an_integer_of_thousands_of_digits_in_bridge_overrides_is_one_line(cli, tmp_path):
    # D7's sibling: Hydra's parser turns `model.num_layers=1000...0` into an int with int(), and its ValueError
    # escaped as an internal error (exit 3); the YAML form said it in Python's words (set_int_max_str_digits)
    huge = "1" + "0" * 5000
    overrides = tmp_path / "o.txt"
    overrides.write_text(f"model.num_layers={huge}\n")
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-bridge", str(overrides))
    one_line_error(code, out, err, "an integer of more than 4,300 digits")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model:\n  num_layers: {huge}\n")
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-bridge", str(recipe))
    one_line_error(code, out, err, "an integer of more than 4,300 digits")
    assert "set_int_max_str_digits" not in err
