"""Issue 26: nothing btacalc reads can hurt what it writes. One test class per cause; each case is a
hostile input that broke a promise of README's "Exit codes, errors and files" before the fix.

Classes (CLASSES counts the cases of each; the report quotes them):
  registry  - an output onto an input (directly, through a symbolic or hard link), a folder-like name
  signals   - SIGTERM, SIGHUP, SIGINT, SIGPIPE during long work: no debris, old content kept, 128+n
  caps      - input files whose type or size is checked before any byte is read
  sanitise  - control characters and undecodable bytes in names, folders, ids
  exact     - sizes whose int64 products would wrap; searches over divisors; run-list checks
  finite    - ranges that imply finite results; floating-point errors as one line
  agree     - sweep and plan give one verdict, shape and tokens/s for the same point
  cache     - the compiled-formula cache: forged, FIFO, foreign, unusable
  naming    - errors that name the flag the user typed; a deleted working folder
  verdict   - issue 25: one binding constraint per plan that does not fit; suggestions verified

Most cases run in-process (the `cli` fixture); only the signal cases start a process.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from btacalc.catalogue import cache, compiled
from btacalc.errors import clean_text
from btacalc.paths import data_dir, package_data
from support import default_dispositions, one_line_error, started, wait_for_temp

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
WSE3 = (data_dir("hardware_profiles") / "wse3.toml").read_text()
H100 = (data_dir("hardware_profiles") / "h100.toml").read_text()
CONFIG = (DATA / "llama-3-8b.config.json").read_text()
RUNS = package_data("measured_runs.json").read_text()
CLASSES: Counter[str] = Counter()


def cases(cls: str, items: list[Any]) -> list[Any]:
    CLASSES[cls] += len(items)
    return items


def counted(cls: str, n: int = 1) -> Callable[[Any], Any]:
    """Count a single test's cases in its class (at import, so the counts do not depend on which ran)."""
    CLASSES[cls] += n
    return lambda fn: fn


def _tree(folder: Path) -> dict[str, Any]:
    out = {}
    for p in sorted(folder.rglob("*")):
        out[str(p.relative_to(folder))] = ("link", os.readlink(p)) if p.is_symlink() else \
            p.read_bytes() if p.is_file() else "other"
    return out


# ------------------------------------------------------------------------------------------------
# registry: no output replaces an input; folder-like names are refused before any work

def _inputs(tmp: Path) -> None:
    (tmp / "cfg").mkdir()
    (tmp / "cfg" / "config.json").write_text(CONFIG)
    (tmp / "prof.toml").write_text(WSE3)
    (tmp / "gpu.toml").write_text(H100)
    (tmp / "runs.json").write_text(RUNS)
    for name, target in (("cfg-link.json", "cfg/config.json"), ("prof-link.toml", "prof.toml"),
                         ("runs-link.json", "runs.json")):
        (tmp / name).symlink_to(tmp / target)
    for name, target in (("cfg-hard.json", "cfg/config.json"), ("prof-hard.toml", "prof.toml"),
                         ("runs-hard.json", "runs.json")):
        os.link(tmp / target, tmp / name)


# (command and its input flags, the input the output hits through each spelling)
COMMANDS = {
    "plan": (["plan", "--model", "{t}/cfg", "--hw", "{t}/prof.toml"], ["--output"]),
    "sweep": (["sweep", "--model", "{t}/cfg", "--hw", "{t}/prof.toml", "--vary", "seq=1024,2048"], ["--output", "--csv"]),
    "compare": (["compare", "--model", "{t}/cfg", "--hw", "{t}/prof.toml,wse2"], ["--output", "--csv"]),
    "whatif": (["whatif", "--model", "{t}/cfg", "--hw", "{t}/prof.toml", "--target", "relative_to_dense=0.9",
                "--solve-for", "sram_bytes"], ["--output"]),
    "crossover": (["crossover", "--hw", "{t}/prof.toml", "--hidden", "256"], ["--output", "--csv"]),
}
TARGETS = {"model": ["cfg/config.json", "cfg-link.json", "cfg-hard.json"],
           "profile": ["prof.toml", "prof-link.toml", "prof-hard.toml"]}
REGISTRY = cases("registry", [
    (cmd, flag, spelling)
    for cmd, (args, flags) in COMMANDS.items() for flag in flags
    for kind, spellings in TARGETS.items() if not (cmd == "crossover" and kind == "model")
    for spelling in spellings
] + [("validate", "--output", s) for s in ("runs.json", "runs-link.json", "runs-hard.json")]
  + [("validate", "--plot", s) for s in ("runs.json",)])


@pytest.mark.parametrize("cmd, flag, spelling", REGISTRY, ids=[" ".join(c) for c in REGISTRY])
def test_no_output_replaces_an_input(cli, tmp_path, cmd, flag, spelling):
    _inputs(tmp_path)
    if cmd == "validate":
        args = ["validate", "--measured", "{t}/runs.json"]
    else:
        args = COMMANDS[cmd][0]
    args = [a.replace("{t}", str(tmp_path)) for a in args]
    before = _tree(tmp_path)
    code, out, err = cli(*args, flag, str(tmp_path / spelling))
    if flag == "--plot":  # a .json plot is refused by its extension first: still one line, nothing written
        one_line_error(code, out, err)
    else:
        one_line_error(code, out, err, "is an input of this command")
    assert _tree(tmp_path) == before


FOLDERISH = cases("registry", [(cmd, flag, name) for cmd, flag in (("plan", "--output"), ("sweep", "--csv"),
                                                                  ("compare", "--csv"), ("whatif", "--output"))
                              for name in ("x.json/", "new/", "./", "x/.", "..")])


@pytest.mark.parametrize("cmd, flag, name", FOLDERISH)
def test_folder_like_output_names_are_refused(cli, tmp_path, monkeypatch, cmd, flag, name):
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    extra = {"plan": ["--hw", "wse2"], "sweep": ["--hw", "wse2", "--vary", "seq=1024"], "compare": ["--hw", "wse2"],
             "whatif": ["--hw", "wse2", "--target", "relative_to_dense=0.9", "--solve-for", "sram_bytes"]}[cmd]
    code, out, err = cli(cmd, *extra, flag, name)
    one_line_error(code, out, err, flag)
    assert not list(tmp_path.rglob("x.json")) and sorted(p.name for p in tmp_path.rglob("*")) == ["sub"]


@counted("registry", 1)
def test_two_outputs_onto_one_file_through_a_link_are_refused(cli, tmp_path):
    (tmp_path / "a.csv").write_text("old")
    (tmp_path / "b.csv").symlink_to(tmp_path / "a.csv")
    code, out, err = cli("sweep", "--hw", "wse2", "--vary", "seq=1024", "--csv", str(tmp_path / "a.csv"),
                         "--output", str(tmp_path / "b.csv"))
    one_line_error(code, out, err, "both write to")
    assert (tmp_path / "a.csv").read_text() == "old"


@counted("registry", 1)
def test_another_users_file_in_a_sticky_folder_is_refused_before_any_work(cli, tmp_path, monkeypatch):
    """As another user, a file in a shared sticky folder (/tmp) owned by someone else cannot be replaced
    (rename is refused there): one line before any work, nothing printed, no .bak or temporary file.
    This user plays "another user" by its effective uid (the file and the folder stay this user's)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    (shared / "out.json").write_text("someone else's")
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 4242 if me != 0 else 4242)
    code, out, err = cli("plan", "--hw", "wse2", "--output", str(shared / "out.json"))
    one_line_error(code, out, err, "belongs to another user")
    assert sorted(p.name for p in shared.iterdir()) == ["out.json"]
    assert (shared / "out.json").read_text() == "someone else's"


# ------------------------------------------------------------------------------------------------
# signals: a command stopped from outside leaves nothing behind and exits 128 + n

SIGNALS = cases("signals", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_stopped_streaming_sweep_leaves_no_debris_and_keeps_old_files(tmp_path, signum):
    (tmp_path / "out.csv").write_text("old csv")
    proc = started(["sweep", "--hw", "wse2", "--vary", "seq=1024:400000:1", "--csv", "out.csv", "--output", "out.json",
                   "-q"], tmp_path)
    wait_for_temp(tmp_path, proc)
    sent = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 15  # stops promptly (the SIGHUP'd sweep used to run on for a minute)
    assert proc.returncode == 128 + signum, err
    assert err.strip().splitlines() == [f"btacalc: stopped by {signal.Signals(signum).name}; nothing written"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"] and (tmp_path / "out.csv").read_text() == "old csv"


@counted("signals", 1)
def test_sigterm_during_validate_output_keeps_the_old_file(tmp_path):
    (tmp_path / "v.json").write_text("old")
    proc = started(["validate", "--output", "v.json"], tmp_path)
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 1 or proc.returncode == 0:  # finished before the signal on a fast machine
        pytest.skip("validate finished within 3 s")
    assert proc.returncode == 143, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.json"] and (tmp_path / "v.json").read_text() == "old"


@counted("signals", 2)
def test_a_sigpipe_sent_from_outside_is_handled_but_a_closed_pipe_is_quiet(tmp_path):
    proc = started(["sweep", "--hw", "wse2", "--vary", "seq=1024:400000:1", "--csv", "out.csv", "-q"], tmp_path)
    wait_for_temp(tmp_path, proc)
    proc.send_signal(signal.SIGPIPE)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGPIPE, err
    assert list(tmp_path.iterdir()) == []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    piped = subprocess.run(f"{sys.executable} -m btacalc plan --hw wse2 | head -1", shell=True, env=env,
                           capture_output=True, text=True, timeout=120, executable="/bin/bash")
    assert piped.stderr == "" and len(piped.stdout.splitlines()) == 1


# ------------------------------------------------------------------------------------------------
# caps: type and size checked before the read

def _big(path: Path, size: int = (16 << 20) + 1) -> None:
    with open(path, "wb") as fh:
        fh.truncate(size)  # sparse: no 16 MiB written


CAPS = cases("caps", [
    (["plan", "--hw", "{t}/big.toml"], "big.toml", "big", "larger than 16 MiB"),
    (["hw", "check", "{t}/big.toml"], "big.toml", "big", "larger than 16 MiB"),
    (["hw", "show", "{t}/big.toml"], "big.toml", "big", "larger than 16 MiB"),
    (["compare", "--hw", "{t}/big.toml"], "big.toml", "big", "larger than 16 MiB"),
    (["plan", "--model", "{t}/big.json"], "big.json", "big", "larger than 16 MiB"),
    (["plan", "--model", "{t}/m"], "m/config.json", "big", "larger than 16 MiB"),
    (["sweep", "--model", "{t}/big.json", "--vary", "seq=1024"], "big.json", "big", "larger than 16 MiB"),
    (["models", "show", "{t}/big.json"], "big.json", "big", ""),
    (["validate", "--measured", "{t}/big.json"], "big.json", "big", "larger than 16 MiB"),
    (["plan", "--hw", "{t}/fifo.toml"], "fifo.toml", "fifo", "not a regular file"),
    (["plan", "--model", "{t}/fifo.json"], "fifo.json", "fifo", "not a regular file"),
    (["plan", "--model", "{t}/m"], "m/config.json", "fifo", "not a regular file"),
    (["plan", "--model", "{t}/zero.json"], "zero.json", "/dev/zero", "not a regular file"),
    (["plan", "--hw", "{t}/zero.toml"], "zero.toml", "/dev/zero", "not a regular file"),
    (["plan", "--model", "{t}/latin1.json"], "latin1.json", b'{"model_type": "llama", "x": "\xe9"}', "not UTF-8"),
    (["plan", "--hw", "{t}/latin1.toml"], "latin1.toml", b'name = "\xe9"', "not UTF-8"),
])


@pytest.mark.parametrize("args, name, kind, fragment", CAPS, ids=[" ".join(c[0])[:60] for c in CAPS])
def test_input_files_are_checked_before_they_are_read(cli, tmp_path, args, name, kind, fragment):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "big":
        _big(path)
    elif kind == "fifo":
        os.mkfifo(path)  # a read would block forever
    elif isinstance(kind, bytes):
        path.write_bytes(kind)
    else:
        path.symlink_to(kind)  # a character device: a read would never end
    start = time.monotonic()
    code, out, err = cli(*[a.replace("{t}", str(tmp_path)) for a in args])
    assert time.monotonic() - start < 30
    if args[:2] == ["models", "show"]:  # a preset name, not a path: refused by name, still one line
        assert code == 2 and len(err.strip().splitlines()) == 1
        return
    one_line_error(code, out, err, fragment)


# ------------------------------------------------------------------------------------------------
# sanitise: one cleaner for every user string

HOSTILE = ["\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "a\x9b31mb", "x\u202eevil", "\x00nul", "del\x7f", "line\nbreak",
           "tab\tbed", "bad\udcff\udcfebytes", "\ud800lone"]
SANITISE = cases("sanitise", [(cmd, text) for cmd in ("plan", "plan-json", "sweep-json") for text in HOSTILE])


def _clean_output(text: str) -> None:
    assert "\x1b" not in text and "\x9b" not in text and "\u202e" not in text and "\x00" not in text
    assert all(not (0xD800 <= ord(c) <= 0xDFFF) for c in text)


@pytest.mark.parametrize("cmd, name", SANITISE, ids=[f"{c}-{i}" for i, (c, _) in enumerate(SANITISE)])
def test_hostile_names_never_reach_a_stream_raw(cli, cmd, name):
    args = {"plan": ["plan", "--hw", "wse2"], "plan-json": ["plan", "--hw", "wse2", "--json"],
            "sweep-json": ["sweep", "--hw", "wse2", "--vary", "seq=1024", "--json"]}[cmd]
    code, out, err = cli(*args, "--name", name)
    assert code in (0, 1), err
    _clean_output(out + err)
    if cmd != "plan":
        doc = json.loads(out)
        shown = doc["model"]["name"] if cmd == "plan-json" else doc["model"]
        assert shown == clean_text(name)


@counted("sanitise", 2)
def test_a_hostile_model_folder_and_profile_display_name_are_cleaned(cli, tmp_path):
    folder = tmp_path / os.fsdecode(b"evil\xff\x1b]0;t\x07dir")
    folder.mkdir()
    (folder / "config.json").write_text(CONFIG)
    code, out, err = cli("plan", "--model", str(folder), "--hw", "wse2", "--json")
    assert code in (0, 1), err
    _clean_output(out + err)
    assert json.loads(out)["model"]["name"] == "evil\\xff]0;tdir"
    (tmp_path / "p.toml").write_text(WSE3.replace('display_name = "', 'display_name = "\\u001b[31m', 1))
    code, out, err = cli("hw", "show", str(tmp_path / "p.toml"))
    assert code == 0, err
    _clean_output(out + err)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.binary(max_size=64))
def test_clean_text_of_any_bytes_is_printable_and_serialisable(raw):
    """Property: whatever bytes a file name or a config holds, the cleaned text has no control
    character, no bidirectional override and no lone surrogate, encodes as UTF-8 and survives JSON."""
    text = clean_text(raw.decode("utf-8", "surrogateescape"))
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) <= 0x9F for c in text)
    assert not any(0xD800 <= ord(c) <= 0xDFFF or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
                   for c in text)
    text.encode("utf-8")
    assert json.loads(json.dumps(text, ensure_ascii=False)) == text
    assert clean_text(text) == text  # idempotent


# ------------------------------------------------------------------------------------------------
# exact: sizes that would wrap int64 agree with plan; searches are bounded; run checks linear

def _sweep_point(cli, *args: str) -> dict[str, Any]:
    """The sweep's one point; a point the sweep refuses comes back as {"error": ...}."""
    code, out, err = cli("sweep", *args, "--json", "-q")
    if code == 2 and "points of the sweep is valid" in err:
        return {"error": err}
    assert code == 0, err
    (point,) = json.loads(out)["points"]
    return point


def _plan(cli, *args: str) -> dict[str, Any]:
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    return json.loads(out)


EXACT = cases("exact", [("seq", str(2**60)), ("seq", str(2**62)), ("seq", str(2**24 + 1)), ("experts", str(2**62)),
                        ("experts", str(2**40)), ("top-k", str(2**30))])


@pytest.mark.parametrize("name, value", EXACT)
def test_huge_sizes_in_a_sweep_give_the_plan_verdict(cli, name, value):
    point = _sweep_point(cli, "--hw", "wse2", "--vary", f"{name}={value}")
    if point["error"] is not None:  # an override the model refuses (top-k above E): one error, as plan's
        code, _, err = cli("plan", "--hw", "wse2", f"--{name}", value, "--json")
        assert code == 2
        return
    plan = _plan(cli, "--hw", "wse2", f"--{name}", value)["plan"]
    assert point["plan"]["fits"] == plan["fits"]
    if plan["fits"]:
        assert (point["plan"]["tiles"], point["plan"]["tile_batch"]) == (plan["tiles"], plan["tile_batch"])
    else:
        assert point["throughput"] is None


@counted("exact", 1)
def test_a_config_with_a_2_to_40_head_dim_agrees_with_plan(cli, tmp_path):
    cfg = json.loads(CONFIG)
    cfg["head_dim"] = 2**40
    (tmp_path / "hd.json").write_text(json.dumps(cfg))
    point = _sweep_point(cli, "--model", str(tmp_path / "hd.json"), "--hw", "wse2", "--vary", "seq=4096")
    assert point["plan"]["fits"] is False and _plan(cli, "--model", str(tmp_path / "hd.json"), "--hw",
                                                     "wse2")["plan"]["fits"] is False


@counted("exact", 1)
def test_the_layout_search_over_2_to_62_experts_is_bounded(cli):
    start = time.monotonic()
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--search", "--experts", str(2**62), "--json")
    assert code in (0, 1) and time.monotonic() - start < 60, err


@counted("exact", 1)
def test_the_duplicate_run_id_check_is_linear(cli, tmp_path):
    """8,000 runs with one duplicate: the check answers at once (the quadratic check took minutes)."""
    run = json.loads(RUNS)["runs"][0]
    runs = [dict(run, id=f"r{i}") for i in range(8_000)] + [dict(run, id="r7")]  # 10 MB, under the cap
    (tmp_path / "runs.json").write_text(json.dumps({"runs": runs}))
    start = time.monotonic()
    code, out, err = cli("validate", "--measured", str(tmp_path / "runs.json"))
    one_line_error(code, out, err, "run ids given twice: r7")
    assert time.monotonic() - start < 30


# ------------------------------------------------------------------------------------------------
# finite: declared ranges imply finite results

def _efficiency(text: str, value: str) -> str:
    import re

    return re.sub(r"(\[calibration\.compute_efficiency\]\nvalue = )[^\n]*", lambda m: m.group(1) + value, text, count=1)


FINITE_BAD = cases("finite", ["1e-300", "1e-7", "0", "5e-324", "-1e-6"])


@pytest.mark.parametrize("value", FINITE_BAD)
def test_efficiencies_below_a_millionth_are_refused(cli, tmp_path, value):
    (tmp_path / "p.toml").write_text(_efficiency(H100, value))
    code, out, err = cli("plan", "--hw", str(tmp_path / "p.toml"))
    one_line_error(code, out, err, "in [1e-06, 1]")


def _numbers(doc: Any) -> list[float]:
    if isinstance(doc, dict):
        return [x for v in doc.values() for x in _numbers(v)]
    if isinstance(doc, list):
        return [x for v in doc for x in _numbers(v)]
    return [float(doc)] if isinstance(doc, (int, float)) and not isinstance(doc, bool) else []


@counted("finite", 1)
def test_the_smallest_efficiency_gives_finite_numbers(cli, tmp_path):
    (tmp_path / "p.toml").write_text(_efficiency(H100, "1e-6"))
    doc = _plan(cli, "--hw", str(tmp_path / "p.toml"), "--devices", "16")
    assert all(math.isfinite(x) for x in _numbers(doc))


TARGETS_BAD = cases("finite", ["inf", "1e400", "nan", "-inf", "0", "-1"])


@pytest.mark.parametrize("value", TARGETS_BAD)
def test_whatif_targets_must_be_finite_and_positive(cli, value):
    code, out, err = cli("whatif", "--hw", "wse2", "--target", f"relative_to_dense={value}", "--solve-for", "sram_bytes")
    one_line_error(code, out, err, "--target")


@counted("finite", 1)
def test_numpy_warnings_as_errors_are_one_line_or_none(tmp_path):
    (tmp_path / "p.toml").write_text(_efficiency(H100, "1e-6"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "error"}
    proc = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--hw", str(tmp_path / "p.toml"), "--json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) <= 1


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(eff=st.floats(1e-6, 1.0), bw=st.floats(1.0, 1e18), seq=st.sampled_from([1, 2, 1024, 4096, 2**20]),
       devices=st.sampled_from([1, 8, 1 << 12]))
def test_every_printed_number_is_finite(cli, tmp_path, eff, bw, seq, devices):
    """Property: any profile inside its declared ranges gives a plan whose every number is finite."""
    import re

    text = _efficiency(H100, repr(eff))
    text = re.sub(r"(\[memory\.offchip_bandwidth_bytes_per_s\]\nvalue = )[^\n]*", lambda m: m.group(1) + repr(bw), text)
    (tmp_path / "p.toml").write_text(text)
    code, out, err = cli("plan", "--hw", str(tmp_path / "p.toml"), "--seq", str(seq), "--devices", str(devices), "--json")
    assert code in (0, 1, 2), err
    if code != 2:
        assert all(math.isfinite(x) for x in _numbers(json.loads(out)))


# ------------------------------------------------------------------------------------------------
# agree: sweep and plan share one evaluation for every size

AGREE = cases("agree", [("wse2", "seq", 1), ("wse2", "seq", 2**24), ("wse2", "seq", 2**24 + 7), ("wse3", "experts", 1),
                        ("wse3", "experts", 2**20), ("h100", "devices", 1 << 20), ("b200", "seq", 65536)])


def _same(cli, hw: str, name: str, value: int) -> None:
    point = _sweep_point(cli, "--hw", hw, "--vary", f"{name}={value}")
    if point["error"] is not None:
        code, _, _ = cli("plan", "--hw", hw, f"--{name}", str(value), "--json")
        assert code == 2
        return
    doc = _plan(cli, "--hw", hw, f"--{name}", str(value))
    plan = doc["plan"]
    assert point["plan"]["fits"] == plan["fits"], (point["plan"]["explanation"], plan["explanation"])
    if plan["fits"]:
        assert (point["plan"]["tiles"], point["plan"]["tile_batch"], point["plan"]["micro_batches"]) == \
            (plan["tiles"], plan["tile_batch"], plan["micro_batches"])
        assert point["throughput"]["tokens_per_s"] == pytest.approx(doc["throughput"]["tokens_per_s"], rel=1e-9)


@pytest.mark.parametrize("hw, name, value", AGREE)
def test_sweep_and_plan_agree_at_the_edges(cli, hw, name, value):
    _same(cli, hw, name, value)


@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(hw=st.sampled_from(["wse2", "wse3", "h100"]),
       point=st.one_of(st.tuples(st.just("seq"), st.integers(1, 2**62)),
                       st.tuples(st.just("experts"), st.integers(8, 2**62)),
                       st.tuples(st.just("seq"), st.sampled_from([2**24 - 1, 2**24, 2**24 + 1, 2**62]))))
def test_sweep_and_plan_agree_for_random_points(cli, hw, point):
    """Property: for random points, edges near the bounds included, one verdict, shape and tokens/s."""
    _same(cli, hw, *point)


# ------------------------------------------------------------------------------------------------
# cache: verified before use, regular files only, memory when unusable

def _sel():
    from btacalc.catalogue.selection import Selection
    from btacalc.vocabulary import FEATURES

    return Selection.make({name: values[0] for name, values in FEATURES.items()}, "full")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache._key.cache_clear()
    yield tmp_path
    cache._key.cache_clear()


def _entry(root: Path) -> Path:
    compiled.load_module(_sel())
    return next((root / "btacalc" / "compiled").rglob("*.code"))


def _loads_without_running(root: Path, path: Path) -> None:
    marker = root / "ran"
    sel = _sel()
    module = compiled.load_module(sel)
    assert module.SELECTION == compiled._selection_key(sel) and not marker.exists()


CACHE = cases("cache", ["fifo", "symlink", "forged", "truncated", "foreign-folder", "loose-key", "key-fifo",
                        "not-a-folder"])


@pytest.mark.parametrize("attack", CACHE)
def test_the_cache_cannot_be_poisoned_or_hang(fresh_cache, attack):
    root = fresh_cache
    path = _entry(root)
    good = path.read_bytes()
    evil = root / "evil.code"
    import marshal

    evil_code = marshal.dumps(compile(f"open({str(root / 'ran')!r}, 'w').close()", "x", "exec"))
    if attack == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif attack == "symlink":
        evil.write_bytes(good[:len(cache._MAGIC) + 32] + evil_code)
        path.unlink()
        path.symlink_to(evil)
    elif attack == "forged":
        path.write_bytes(cache._MAGIC + b"\0" * 32 + evil_code)
    elif attack == "truncated":
        path.write_bytes(good[:40])
    elif attack == "foreign-folder":  # a folder others may write: not used (nothing read from it)
        os.chmod(path.parent, 0o777)
        path.write_bytes(cache._MAGIC + b"\0" * 32 + evil_code)
    elif attack == "loose-key":  # a key others can read is no secret: the cache is not used
        os.chmod(root / "btacalc" / "key", 0o644)
        cache._key.cache_clear()
    elif attack == "key-fifo":
        (root / "btacalc" / "key").unlink()
        os.mkfifo(root / "btacalc" / "key")
        cache._key.cache_clear()
    elif attack == "not-a-folder":
        shutil.rmtree(root / "btacalc")
        (root / "btacalc").write_text("a file where the folder goes")
        cache._key.cache_clear()
    start = time.monotonic()
    _loads_without_running(root, path)
    assert time.monotonic() - start < 60
    if attack in ("forged", "truncated"):
        assert path.read_bytes() == good  # rewritten


@counted("cache", 1)
def test_an_unreadable_cache_folder_means_memory(cli, fresh_cache):
    (fresh_cache / "btacalc").mkdir(mode=0o000)
    try:
        code, out, err = cli("plan", "--hw", "wse2", "--json")
        assert code == 0 and err == ""
    finally:
        os.chmod(fresh_cache / "btacalc", 0o700)


# ------------------------------------------------------------------------------------------------
# naming: each error names what the user typed

NAMING = cases("naming", [
    (["compare", "--systems", str(2**63)], "--systems"),
    (["plan", "--micro-batch", str(2**63)], "--micro-batch"),
    (["plan", "--micro-batch", str(2**62 + 1)], "--micro-batch"),
    (["plan", "--grad-accum", str(2**63)], "--grad-accum"),
    (["whatif", "--hw", "wse2", "--target", "relative_to_dense=inf", "--solve-for", "sram_bytes"], "--target"),
])


@pytest.mark.parametrize("args, flag", NAMING, ids=[" ".join(a)[:50] for a, _ in NAMING])
def test_errors_name_the_flag_given(cli, args, flag):
    code, out, err = cli(*args)
    one_line_error(code, out, err, f"error: {flag}")


@counted("naming", 1)
def test_a_deleted_working_folder_is_named(cli, tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    try:
        code, out, err = cli("plan", "--hw", "wse2", "--output", "x.json")
        one_line_error(code, out, err, "the working folder no longer exists")
    finally:
        os.chdir(tmp_path)


@pytest.mark.parametrize("raised, exists", [(FileNotFoundError(2, "No such file or directory"), False),
                                            (PermissionError(13, "Permission denied"), True)])
def test_the_one_working_folder_check(monkeypatch, raised, exists):
    """output/files.py working_folder_exists is the check both an output path and the CLI's unnamed OSError use
    (tidy6: cli/app.py had a twin catching every OSError): getcwd's ENOENT is a deleted folder; EACCES (an unreadable
    parent, getcwd(3)) is a folder that exists."""
    from btacalc.output import files

    def getcwd() -> str:
        raise raised

    monkeypatch.setattr(files.os, "getcwd", getcwd)
    assert files.working_folder_exists() is exists


# ------------------------------------------------------------------------------------------------
# verdict (issue 25): one binding constraint; suggestions verified, never repeated, never raising

def _verdict(cli, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    return code, json.loads(out)


@counted("verdict", 1)
def test_a_cap_below_one_sequence_per_rank_is_the_verdict_not_memory(cli):
    """b200 x 8 with --max-global-batch 4: one sequence per rank (8) already exceeds the cap."""
    code, doc = _verdict(cli, "--hw", "b200", "--devices", "8", "--max-global-batch", "4")
    plan = doc["plan"]
    assert code == 1 and plan["binding_constraint"] == "max_global_batch"
    assert "not even one sequence" not in plan["explanation"]
    assert doc["memory_bytes"]["total"] <= doc["memory_bytes"]["usable_capacity"]
    assert not any("--seq 4096" in s for s in doc["suggestions"])  # the length already given is no advice
    assert any("--max-global-batch" in s for s in doc["suggestions"])


@counted("verdict", 1)
def test_max_global_batch_caps_what_its_help_says(cli, monkeypatch):
    """Issue 25: `--help` said the cap is on G·b while the plan caps N = DP·M·G·b. With 8 data-parallel
    ranks a cap of 16 sequences leaves M·G·b <= 16 / 8 = 2 per rank; the help names N."""
    monkeypatch.setenv("COLUMNS", "200")
    _, out, _ = cli("plan", "--help")
    line = " ".join(out[out.index("--max-global-batch"):].split("\n  --")[0].split())
    assert "N = DP·M·G·b" in line and "Cap G·b" not in line, line
    code, doc = _verdict(cli, "--hw", "b200", "--devices", "8", "--max-global-batch", "16")
    plan = doc["plan"]
    assert code == 0 and plan["step_batch"] <= 16
    assert plan["step_batch"] == doc["parallelism"]["data_parallel"] * plan["micro_batches"] * plan["global_batch"]
    assert plan["micro_batches"] * plan["global_batch"] <= 16 // 8


@counted("verdict", 1)
def test_a_fixed_micro_batch_that_does_not_fit_is_named_as_fixed(cli):
    code, doc = _verdict(cli, "--hw", "b200", "--devices", "8", "--micro-batch", "64", "--global-batch", "512")
    plan = doc["plan"]
    assert code == 1 and plan["binding_constraint"] == "micro_batch"
    assert "not even one sequence" not in plan["explanation"] and "one sequence does" in plan["explanation"]
    assert plan["tiles"] * plan["tile_batch"] == 64  # the shape shown is the one fixed
    assert any(s.startswith("--micro-batch 1 fits") for s in doc["suggestions"])


@pytest.mark.parametrize("args", cases("verdict", [
    ["--model", "qwen3-235b-a22b", "--hw", "h100", "--devices", "64", "--pp", "2", "--ep", "32", "--seq", "4096",
     "--global-batch", "64", "--micro-batch", "1"],
    ["--hw", "h100", "--devices", "8", "--pp", "2"],
    ["--hw", "h100", "--devices", "8", "--tp", "2"],
    ["--hw", "h100", "--devices", "8", "--cp", "2"],
]), ids=lambda a: " ".join(a)[:50])
def test_suggestions_never_raise_a_layout_error(cli, args):
    code, doc = _verdict(cli, *args)
    assert code == 1 and doc["plan"]["binding_constraint"] == "memory"


@counted("verdict", 1)
def test_every_suggested_change_fits_when_run(cli):
    """Each suggestion of the form '<flags> fits ...' is run as written and fits."""
    base = ["--hw", "b200", "--devices", "8", "--micro-batch", "64", "--global-batch", "512"]
    _, doc = _verdict(cli, *base)
    import re

    runnable = [m.group(1) for s in doc["suggestions"] if (m := re.match(r"((?:--[a-z-]+ \S+ ?)+) fits ", s))]
    assert runnable
    for flags in runnable:
        parts = flags.split()
        args = list(base)
        for flag, value in zip(parts[::2], parts[1::2]):
            if flag in args:
                args[args.index(flag) + 1] = value
            else:
                args += [flag, value]
        code, again = _verdict(cli, *args)
        assert code == 0 and again["plan"]["fits"], flags


_SUGGESTION = r"((?:dropping )?(?:--[a-z-]+ \S+ ?)+) (?:\([^)]*\) )?fits G = (\d+), b = (\d+)(?:, M = (\d+))?"


def _apply(base: list[str], change: str) -> list[str]:
    """The command line a suggestion describes: `--flag v` set (replaced or added), `dropping --flag v` removed."""
    args, parts = list(base), change.split()
    if parts[0] == "dropping":
        i = args.index(parts[1])
        return args[:i] + args[i + 2:]
    for flag, value in zip(parts[::2], parts[1::2]):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


@pytest.mark.parametrize("base", cases("verdict", [
    ["--hw", "wse3", "--seq", "65536"],
    ["--hw", "h100", "--devices", "8"],
    ["--hw", "b200", "--devices", "8", "--tiles", "64"],
    ["--hw", "b200", "--devices", "8", "--max-global-batch", "4"],
]), ids=lambda a: " ".join(a))
def test_each_suggestion_run_as_written_gives_the_shape_it_names(cli, base):
    """Issue 25 (Build 1): suggestions are verified by running them. Each '<flags> fits G = g, b = b[, M = m]'
    of a plan that does not fit, run as written, fits with that G, b (and M); none repeats a value the
    command already gave."""
    import re

    code, doc = _verdict(cli, *base)
    assert code == 1
    found = [m for s in doc["suggestions"] if (m := re.match(_SUGGESTION, s))]
    assert found, doc["suggestions"]
    given = {(f, v) for f, v in zip(base, base[1:]) if f.startswith("--")}
    for m in found:
        change = m.group(1).strip()
        if not change.startswith("dropping"):
            parts = change.split()
            assert not set(zip(parts[::2], parts[1::2])) & given, change
        code, again = _verdict(cli, *_apply(base, change))
        plan = again["plan"]
        assert code == 0 and plan["fits"], change
        assert (plan["tiles"], plan["tile_batch"]) == (int(m.group(2)), int(m.group(3))), change
        if m.group(4):
            assert plan["micro_batches"] == int(m.group(4)), change


@counted("verdict", 1)
def test_a_wafer_plan_under_a_cap_that_one_sequence_meets_fits(cli):
    """Issue 25's wse2 case of the contradiction: `plan --hw wse2 --max-global-batch 4` said it does not fit
    and offered the given length. One wafer is DP 1, M 1, so the cap is G·b <= 4, which fits: exit 0, the
    cap binds, no 'not even one sequence', no suggestions."""
    code, doc = _verdict(cli, "--hw", "wse2", "--max-global-batch", "4")
    plan = doc["plan"]
    assert code == 0 and plan["fits"] and plan["binding_constraint"] == "max_global_batch"
    assert plan["tiles"] * plan["tile_batch"] <= 4 and plan["step_batch"] <= 4
    assert "not even one sequence" not in plan["explanation"] and not doc["suggestions"]


@counted("verdict", 1)
def test_a_wafer_plan_at_its_cap_does_not_suggest_the_given_length(cli):
    # hostile26: --tiles 8 over --max-global-batch 4 is bad input (one line, exit 2), as --global-batch 8 over it
    # is; it was a verdict whose suggestions must not offer the given --seq
    code, out, err = cli("plan", "--hw", "wse2", "--max-global-batch", "4", "--tiles", "8", "--json")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "--seq" not in err, err
    assert "--tiles 8 makes a global batch of at least 8, above --max-global-batch 4" in err


# ------------------------------------------------------------------------------------------------
# tidy2: the run files plan reads are inputs too; a stop during the imports; a runs file's unknown key

RUN_FILES = cases("registry", [
    ("--config", "run.toml", 'model = "llama-3-8b"\nhw = "h100"\ndevices = 8\nglobal-batch = 64\n', []),
    ("--from-megatron", "launch.sh", "torchrun pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
     "--num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 "
     "--ffn-hidden-size 14336 --swiglu --vocab-size 128256 --max-position-embeddings 4096\n", ["--hw", "h100", "--devices", "8"]),
    ("--from-bridge", "recipe.yaml", "mixed_precision: bf16_mixed\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n",
     ["-m", "llama-3-8b", "--hw", "h100", "--devices", "8"]),
])


@pytest.mark.parametrize("flag, name, text, extra", RUN_FILES, ids=[r[0] for r in RUN_FILES])
def test_plan_never_writes_over_its_run_file(cli, tmp_path, flag, name, text, extra):
    """plan's --config, --from-megatron and --from-bridge files are inputs: an --output onto one (or onto a link
    to it) is refused before any work and the file is unchanged."""
    (tmp_path / name).write_text(text)
    (tmp_path / "link").symlink_to(tmp_path / name)
    before = _tree(tmp_path)
    for target in (name, "link"):
        code, out, err = cli("plan", flag, str(tmp_path / name), *extra, "--output", str(tmp_path / target))
        one_line_error(code, out, err, "is an input of this command")
    assert _tree(tmp_path) == before


EMIT_ONTO = cases("registry", [(flag, emit, spelling) for flag, emit in (("--from-megatron", "megatron"),
                                                                          ("--from-bridge", "bridge"))
                                for spelling in ("name", "dotted", "symlink", "hardlink")])


@pytest.mark.parametrize("flag, emit, spelling", EMIT_ONTO, ids=[f"{f}-{s}" for f, _, s in EMIT_ONTO])
def test_an_emitted_launch_never_replaces_the_launch_it_read(cli, tmp_path, monkeypatch, flag, emit, spelling):
    """review10: `plan --from-megatron x --emit megatron -o x` (or Bridge's) writes the same kind of file it reads;
    onto the run file by its name, as ./name, through a symbolic or a hard link: one line, exit 2, nothing changed."""
    _, name, text, extra = next(r for r in RUN_FILES if r[0] == flag)
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(text)
    (tmp_path / "symlink").symlink_to(tmp_path / name)
    os.link(tmp_path / name, tmp_path / "hardlink")
    target = {"name": name, "dotted": f"./{name}", "symlink": "symlink", "hardlink": "hardlink"}[spelling]
    before = _tree(tmp_path)
    code, out, err = cli("plan", flag, name, *extra, "--emit", emit, "--output", target)
    one_line_error(code, out, err, "is an input of this command")
    assert _tree(tmp_path) == before


# review3: btacalc's own files are inputs too. `plan --hw wse3 --output hardware_profiles/wse3.toml` replaced the
# shipped profile the command had just read by name (and every later command then stopped with "internal data
# error"); the registry knew only files read through a path the user gave.
PKG = ROOT / "btacalc"
OWN = {"profile": data_dir("hardware_profiles") / "wse3.toml", "runs": package_data("measured_runs.json"),
       "preset": PKG / "data" / "presets" / "qwen3-30b-a3b.toml", "formula": data_dir("formulas") / "attention.toml",
       "code": PKG / "cli" / "app.py", "readme": ROOT / "README.md"}
OWN_COMMANDS = {"profile": ["plan", "--hw", "wse3", "--output"], "runs": ["validate", "--output"],
                "preset": ["sweep", "--vary", "seq=1024", "--csv"], "formula": ["compare", "--hw", "wse3", "--csv"],
                "code": ["plan", "--json", "--output"], "readme": ["crossover", "--hw", "wse3", "--hidden", "256", "--csv"]}
OWN_FILES = cases("registry", [(kind, spelling) for kind in OWN for spelling in ("path", "dotted", "symlink", "hardlink")])


@pytest.mark.parametrize("kind, spelling", OWN_FILES, ids=[f"{k}-{s}" for k, s in OWN_FILES])
def test_no_output_replaces_one_of_btacalcs_own_files(cli, tmp_path, kind, spelling):
    own = OWN[kind]
    if not own.is_file():  # an installed wheel has no README beside the package
        pytest.skip(f"{own} is not shipped here")
    given = {"path": own, "dotted": own.parent / ".." / own.parent.name / own.name,
             "symlink": tmp_path / "link", "hardlink": tmp_path / "hard"}[spelling]
    if spelling == "symlink":
        given.symlink_to(own)
    elif spelling == "hardlink":
        os.link(own, given)
    before, inode = own.read_bytes(), os.stat(own).st_ino
    try:
        code, out, err = cli(*OWN_COMMANDS[kind], str(given))
        one_line_error(code, out, err, "is one of btacalc's own files")
        assert own.read_bytes() == before and os.stat(own).st_ino == inode  # not replaced (a rename gives a new inode)
    finally:  # were the guard ever lost, put the shipped file back for the rest of the suite
        if own.read_bytes() != before:
            own.write_bytes(before)


@counted("registry", 1)
def test_a_new_file_beside_the_shipped_data_is_still_written(cli, tmp_path):
    """The guard is on btacalc's own files only: an output to a new name, or to a copy of a shipped file,
    is written as any other."""
    (tmp_path / "copy.toml").write_bytes(OWN["profile"].read_bytes())
    code, out, err = cli("plan", "--hw", "wse3", "--output", str(tmp_path / "copy.toml"))
    assert code == 0 and err == "" and json.loads((tmp_path / "copy.toml").read_text())["hardware"]["name"] == "wse3"


@counted("signals", 1)
def test_a_stop_delivered_as_the_sweep_notes_its_staged_files_leaves_none(cli, tmp_path, monkeypatch):
    """A stop held while a streaming sweep creates its staged files is delivered as `held` unblocks it; the sweep's
    __enter__ began its clean-up `try` only after that `with`, so a stop delivered there orphaned the staged .tmp
    files (seen once in a loaded full run of the SIGTERM case above: '.out.csv....tmp' left beside out.csv). Here
    the outermost `held` raises the stop as it exits, deterministically."""
    import contextlib

    from btacalc.cli.signals import Stopped
    from btacalc.output import files

    real, depth, fired = files.held, [0], []

    @contextlib.contextmanager
    def held_then_stopped():  # type: ignore[no-untyped-def]
        depth[0] += 1
        try:
            with real():
                yield
        finally:
            depth[0] -= 1
        if depth[0] == 0 and not fired:
            fired.append(True)
            raise Stopped(signal.SIGTERM)

    monkeypatch.setattr(files, "held", held_then_stopped)
    (tmp_path / "out.csv").write_text("old csv")
    code, out, err = cli("sweep", "--hw", "wse2", "--vary", "seq=1024,2048", "--csv", str(tmp_path / "out.csv"),
                         "--output", str(tmp_path / "out.json"), "-q")
    assert fired and code == 143, err
    assert err.strip().splitlines() == ["btacalc: stopped by SIGTERM; nothing written"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"] and (tmp_path / "out.csv").read_text() == "old csv"


@counted("signals", 3)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_during_the_imports_is_one_line_not_a_traceback(tmp_path, signum):
    """Ctrl-C in the first half second of `btacalc ...` (numpy, typer and pydantic importing, before main handles
    signals) printed a KeyboardInterrupt traceback from the import machinery. btacalc.cli's imports now run
    inside `while_starting`: the signal, sent here from inside that block, ends the process with main's line and
    128 + n, having written nothing."""
    code = ("import os, signal, time\nfrom btacalc.starting import while_starting\nwith while_starting():\n"
            f"    os.kill(os.getpid(), {int(signum)})\n    time.sleep(30)\nprint('not stopped')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, preexec_fn=default_dispositions)
    assert done.returncode == 128 + signum, done.stderr
    assert done.stderr.splitlines() == [f"btacalc: stopped by {signum.name}; nothing written"] and done.stdout == ""
    assert list(tmp_path.iterdir()) == []


@counted("caps", 1)
def test_a_runs_file_key_btacalc_does_not_read_is_refused(cli, tmp_path):
    """A runs file's top level holds 'about' and 'runs'; another key (a misspelt or misplaced one, here beside an
    empty run list) was read as nothing and validate passed: now one line, exit 2, nothing written."""
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [], "run": [json.loads(RUNS)["runs"][0]]}))
    before = _tree(tmp_path)
    code, out, err = cli("validate", "--measured", str(tmp_path / "runs.json"), "--output", str(tmp_path / "v.json"))
    one_line_error(code, out, err, "unknown key 'run'")
    assert _tree(tmp_path) == before


def test_case_counts_per_class():
    """The report's counts: every class has cases; together at least 150."""
    assert set(CLASSES) >= {"registry", "signals", "caps", "sanitise", "exact", "finite", "agree", "cache", "naming",
                            "verdict"}, CLASSES
    assert sum(CLASSES.values()) >= 150, CLASSES


# ------------------------------------------------------------------------------------------------
# given (review5): what the user typed is what is planned, never replaced by a default lever

@pytest.mark.parametrize("flag, value, key", cases("given", [("--recompute", "none", "recompute"),
                                                             ("--recompute", "selective", "recompute"),
                                                             ("--zero", "0", "zero_stage")]))
def test_compare_keeps_a_given_memory_lever_when_it_picks_the_device_count(cli, flag, value, key):
    """`compare` without --devices takes the smallest power-of-two GPU count that fits, pulling ZeRO-3 and full
    recomputation on the way; it pulled them over the user's own --recompute and --zero too (qwen3-30b-a3b on H100:
    `--recompute none` planned 8 GPUs with full recomputation). A lever the user gave stays as given."""
    code, out, err = cli("compare", "--hw", "h100", flag, value, "--json")
    assert code == 0, err
    (row,) = json.loads(out)["rows"]
    assert str(row[key]) == value and row["fits"], row


@counted("given", 1)
def test_an_option_given_twice_writes_neither_output(cli, tmp_path):
    """`--output a --output b` wrote b alone and exit 0 (click keeps an option's last value): refused, nothing written."""
    code, out, err = cli("plan", "--output", str(tmp_path / "a.json"), "--output", str(tmp_path / "b.json"))
    one_line_error(code, out, err, "--output/-o is given 2 times")
    assert list(tmp_path.iterdir()) == []


@counted("given", 1)
def test_a_list_option_may_repeat_and_a_sweep_still_runs(cli):
    """`--vary` takes one parameter each time it is given: repeating it is its use, not a repeat."""
    code, out, err = cli("sweep", "--hw", "wse3", "--vary", "experts=16,32", "--vary", "seq=1024", "--json")
    assert code == 0, err
    assert len(json.loads(out)["points"]) == 2


@counted("given", 1)
def test_a_wafer_run_with_megatrons_deterministic_mode_is_not_expressible(cli, tmp_path):
    """review7: a recipe's deterministic_mode (det3: cuDNN's deterministic attention backward; review6: NCCL_ALGO=Ring)
    on a wafer-scale run was predicted as without it, its note saying only 'not timed'; the other GPU-library switches
    (eager_kernels, checkpoint_early_stop) make such a run not expressible, and so does this one now."""
    run = next(r for r in json.loads(RUNS)["runs"] if r["hw"].startswith("wse"))
    run.setdefault("recipe", {"source": "a recipe stating deterministic_mode"})["deterministic_mode"] = True
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [run]}))
    code, out, err = cli("validate", "--measured", str(tmp_path / "runs.json"), "--json")
    (row,) = json.loads(out)["measured"]["runs"]
    assert not row["expressible"] and "a wafer-scale run has neither" in row["reason"], row
    assert row["predicted"]["step_time_s"] is None


@counted("given", 1)
def test_a_launchs_deterministic_mode_is_planned_and_emitted(cli, tmp_path):
    """review7: `plan --from-megatron` listed --deterministic-mode as 'not modelled by btacalc' and planned without it,
    while a run file's recipe deterministic_mode has been timed since det3 (cuDNN's deterministic attention backward,
    1.152x on sm100) and review6 (NCCL_ALGO=Ring). The launch now sets both; --emit megatron says the flag again."""
    launch = (DATA / "megatron" / "mixtral-8x7b.args").read_text()
    assert launch.count("--num-layers 32 ") == 1
    (tmp_path / "det.args").write_text(launch.replace("--num-layers 32 ", "--num-layers 32 --deterministic-mode ", 1))
    (tmp_path / "plain.args").write_text(launch)

    def plan(name: str, *extra: str) -> tuple[int, str]:
        code, out, err = cli("plan", "--hw", "gb200", "--from-megatron", str(tmp_path / name), *extra)
        assert code == 0, err
        return code, out

    det, plain = (json.loads(plan(n, "--json")[1]) for n in ("det.args", "plain.args"))
    assert det["inputs"]["deterministic_mode"] and not plain["inputs"]["deterministic_mode"]
    assert "--deterministic-mode" not in {f["flag"] for f in det["imported"]["ignored"]}
    assert det["throughput"]["step_time_s"] > plain["throughput"]["step_time_s"]  # sm100's slower backward
    assert "--deterministic-mode" in plan("det.args", "--emit", "megatron")[1]
    assert "--deterministic-mode" not in plan("plain.args", "--emit", "megatron")[1]


@counted("given", 2)
@pytest.mark.parametrize("flag, layout", [("--overlap-p2p", ["--tp", "1", "--pp", "2"]),
                                          ("--tp-comm-overlap", ["--tp", "1"])])
def test_an_overlap_megatron_runs_without_is_planned_without_and_said(cli, flag, layout):
    """review8: `--overlap-p2p` without a virtual pipeline hid the pipeline sends (+0.13% tokens/s on llama-3-8b, PP 2,
    GB200), while Megatron-LM switches overlap_p2p_comm off for the 1F1B schedule (arguments.py L1010-1012, as
    btacalc's own launch reader already did); `--tp-comm-overlap` at TP 1, which Megatron refuses (L1433-1442: no
    sequence parallelism at TP 1), was reported as on. Both are planned without now, the reason beside the defaults."""
    base = ["plan", "-m", "llama-3-8b", "--hw", "gb200", "--devices", "8", *layout, "--json"]
    (c1, without, e1), (c2, given, e2) = cli(*base), cli(*base, flag)
    assert c1 == c2 == 0, (e1, e2)
    a, b = json.loads(without), json.loads(given)
    assert b["throughput"]["step_time_s"] == a["throughput"]["step_time_s"]
    assert not any(b["parallelism"]["overlaps"].values()), b["parallelism"]["overlaps"]
    key = {"--overlap-p2p": "overlap_p2p", "--tp-comm-overlap": "tp_comm_overlap"}[flag]
    assert b["inputs"]["defaults"][key].endswith("planned without it")
    assert "arguments.py:10" in b["inputs"]["defaults"][key] or "arguments.py:14" in b["inputs"]["defaults"][key]
    code, text, err = cli(*base[:-1], flag)
    assert code == 0 and "planned without it" in " ".join(text.split()), err


@counted("given", 4)
@pytest.mark.parametrize("given, pp, vp, runs", [(None, 4, 2, True), (False, 4, 2, False), (False, 2, 2, True),
                                                  (True, 4, 1, False)])
def test_a_search_candidates_p2p_overlap_is_megatrons(given, pp, vp, runs):
    """review8: `plan --search --no-overlap-p2p` gave every interleaved candidate the p2p overlap (the given False was
    dropped), and `--search --overlap-p2p` gave it to 1F1B candidates. Megatron-LM: on by default with interleaving,
    off without it (arguments.py L1010-1012), and the interleaved schedule over 2 stages needs it (L1001-1009)."""
    from btacalc.config.execution import ExecutionRequest, OverlapRequest
    from btacalc.planning.search import _p2p

    request = ExecutionRequest(overlaps=OverlapRequest(p2p=given))
    assert _p2p(request, pp, vp) is runs


@counted("given", 4)
@pytest.mark.parametrize("hw, devices, per_node, nodes, noted", [("gb200", 128, 4, 32, False), ("h100", 16, 8, 2, False),
                                                                  ("gb200", 8, 4, 2, False), ("h100", 12, 4, 3, True)])
def test_an_emitted_launch_starts_the_plans_devices(cli, tmp_path, hw, devices, per_node, nodes, noted):
    """review8: `plan --hw gb200 --devices 128 --emit megatron` launched `torchrun --nproc_per_node 72 --nnodes 1`, 72
    processes for a 128-device plan (the NVL72 domain as the node, 128 // 72 = 1 node). torchrun's world size is
    nproc_per_node x nnodes, so the launch must start the plan's devices, one torchrun node per host: a GB200 host is
    a compute tray of 4 GPUs (gb200.toml system.devices_per_host), 128 = 32 x 4; 16 H100s are 2 DGX nodes of 8; 12
    H100s do not fill hosts of 8, so gcd(12, 8) = 4 per node, said in a note."""
    code, out, err = cli("plan", "--hw", hw, "--devices", str(devices), "--emit", "megatron")
    assert code in (0, 1), err
    assert f"torchrun --nproc_per_node {per_node} --nnodes {nodes} " in out
    assert per_node * nodes == devices
    assert (f"hosts of 8 GPUs do not divide {devices} devices" in out) is noted
    # read back, the launch runs in the plan's NVLink domain (the NVL72 rack, not torchrun's host of 4; hostile25: 12
    # H100s as 3 nodes of 4 were read back in domains of 4, the launch's `# btacalc option: --gpus-per-node 8` now
    # keeps the plan's 8)
    launch = tmp_path / "launch.sh"
    launch.write_text(out)
    assert ("# btacalc option: --gpus-per-node 8 " in out) is noted
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", hw, "--json")
    domain = {"gb200": 72, "h100": 8}[hw]
    assert code in (0, 1) and json.loads(out)["parallelism"]["devices_per_node"] == domain, err
