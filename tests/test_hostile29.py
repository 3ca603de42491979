"""hostile29: a launch's round trip, empty and slash-ended path options, and the precision-aware optimizer's wording
without the distributed optimizer, each defect found as a test."""

from __future__ import annotations

import re

import pytest

from support import ROOT

FLAG_LINE = re.compile(r"^\s+--")


def _flag_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if FLAG_LINE.match(line)]


def _round_trip(cli, tmp_path, first: list[str], devices: str, edit=lambda text: text) -> tuple[str, str]:
    """The launch `first` emits (after `edit`), and what `--from-megatron` of it emits again."""
    a, b = tmp_path / "a.sh", tmp_path / "b.sh"
    code, out, err = cli("plan", *first, "--hw", "h100", "-n", devices, "--emit", "megatron", "-o", str(a))
    assert code == 0, err
    a.write_text(edit(a.read_text()))
    code, out, err = cli("plan", "--hw", "h100", "-n", devices, "--from-megatron", str(a), "--emit", "megatron",
                         "-o", str(b))
    assert code == 0, err
    return a.read_text(), b.read_text()


@pytest.mark.parametrize("model,layout", [("llama-3-8b", ["--tp", "2"]), ("nemotron4-15b", ["--tp", "8"]),
                                          ("deepseek-v3", ["--tp", "2", "--pp", "16", "--ep", "64", "--etp", "1"])])
def test_a_launchs_round_trip_keeps_its_flags(cli, tmp_path, model, layout):
    """llama-3-8b's source gives no initializer_range: the launch leaves --init-method-std out (Megatron's default,
    said in a comment); read back, the second emit wrote --init-method-std 0.02 and dropped the comment. A model that
    states one (DeepSeek-V3's 0.006, Nemotron-4's 0.0134) keeps it explicit."""
    devices = "1024" if model == "deepseek-v3" else "8"
    a, b = _round_trip(cli, tmp_path, ["-m", model, *layout], devices)
    assert _flag_lines(a) == _flag_lines(b)
    assert [line for line in a.splitlines() if "initializer_range" in line] == \
        [line.replace(f"{model} (from a.sh)", model) for line in b.splitlines() if "initializer_range" in line]
    assert any("--init-method-std" in line for line in _flag_lines(a)) == (model != "llama-3-8b")


def test_an_explicit_default_init_std_stays_explicit(cli, tmp_path):
    """A launch that passes --init-method-std 0.02 (Megatron's default) keeps it, and states no missing value."""
    def add(text: str) -> str:
        return text.replace("    --norm-epsilon 1e-05 \\\n", "    --norm-epsilon 1e-05 \\\n    --init-method-std 0.02 \\\n")
    a, b = _round_trip(cli, tmp_path, ["-m", "llama-3-8b", "--tp", "2"], "8", add)
    assert "    --init-method-std 0.02 \\" in a.splitlines()
    assert _flag_lines(a) == _flag_lines(b)
    assert "initializer_range" not in b


def test_a_launch_without_the_presets_init_std_trains_megatrons_and_is_said(cli, tmp_path):
    """DeepSeek-V3's preset states 0.006: a launch of its shape without --init-method-std trains Megatron's 0.02, which
    the read keeps (and says), so the second emit states it."""
    def drop(text: str) -> str:
        return "".join(line for line in text.splitlines(keepends=True) if "--init-method-std" not in line)
    a, b = _round_trip(cli, tmp_path, ["-m", "deepseek-v3", "--tp", "2", "--pp", "16", "--ep", "64", "--etp", "1"],
                       "1024", drop)
    assert "    --init-method-std 0.02 \\" in b.splitlines()
    code, out, err = cli("plan", "--hw", "h100", "-n", "1024", "--from-megatron", str(tmp_path / "a.sh"))
    assert code == 0 and "initial std 0.02" in out, err


# --- a path option's text as written: '' is no path (pathlib read it as '.'), a trailing slash names a folder ---

def _files(tmp_path) -> dict[str, str]:
    """An input file of each kind, in `tmp_path`: a launch, Bridge overrides, a run file, a config.json, a profile,
    measured runs."""
    files = {"launch": "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
                       "--max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1000\n",
             "bridge": "model.num_layers=2\n", "run.toml": 'hw = "h100"\n', "m.json": (ROOT / "tests" / "data" /
             "qwen2.5-7b.config.json").read_text(), "h.toml": (ROOT / "hardware_profiles" / "h100.toml").read_text(),
             "runs.json": '{"runs": []}\n'}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return {name: str(tmp_path / name) for name in files}


# (command line before the path, the option, the file it names, what follows)
PATH_OPTIONS = [
    (["plan"], "--config", "run.toml", []),
    (["plan", "--hw", "h100", "-n", "8"], "--from-megatron", "launch", []),
    (["plan", "--hw", "h100", "-n", "8"], "--from-bridge", "bridge", []),
    (["validate"], "--measured", "runs.json", []),
    (["plan", "--hw", "h100"], "--model", "m.json", []),
    (["plan", "-m", "llama-3-8b"], "--hw", "h.toml", []),
    (["compare", "-m", "llama-3-8b"], "--hw", "h.toml", []),
]


@pytest.mark.parametrize("before,option,name,after", PATH_OPTIONS[:5])
def test_an_empty_path_is_named_as_given(cli, tmp_path, monkeypatch, before, option, name, after):
    """`plan --config ''` said "--config '.': not a regular file" (typer's Path type read '' as the working folder);
    --model '' looked for a config.json in the working folder."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*before, option, "", *after)
    assert code == 2 and err.count("\n") == 1 and f"{option} '': an empty path" in err, err
    assert "'.'" not in err


@pytest.mark.parametrize("command,said", [(["models", "show", ""], "model '': an empty path"),
                                          (["plan", "--hw", ""], "--hw: give a profile name or the path"),
                                          (["hw", "show", ""], "profile: give a profile name or the path")])
def test_an_empty_name_or_path_is_named_as_given(cli, tmp_path, monkeypatch, command, said):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*command)
    assert code == 2 and err.count("\n") == 1 and said in err, err


def test_an_empty_path_in_a_run_file_is_named_as_given(cli, tmp_path):
    run = tmp_path / "r.toml"
    run.write_text('from-megatron = ""\nhw = "h100"\n')
    code, out, err = cli("plan", "--config", str(run))
    assert code == 2 and err.count("\n") == 1 and "--from-megatron '': an empty path" in err, err


@pytest.mark.parametrize("command,option", [
    (["plan", "-m", "llama-3-8b", "--hw", "h100"], "-o"),
    (["plan", "-m", "llama-3-8b", "--hw", "h100"], "--output"),
    (["sweep", "--vary", "seq=1024,2048", "--hw", "h100"], "--csv"),
    (["validate"], "--plot"),
])
def test_an_empty_output_is_named_as_given(cli, command, option):
    code, out, err = cli(*command, option, "")
    assert code == 2 and err.count("\n") == 1 and "''" in err, err


@pytest.mark.parametrize("before,option,name,after", PATH_OPTIONS)
def test_a_trailing_slash_on_a_file_is_refused(cli, tmp_path, before, option, name, after):
    """m.json exists: `--model m.json/` read it (pathlib drops the slash), where a shell and open() say "Not a
    directory"; so did every path option."""
    given = _files(tmp_path)[name] + "/"
    if option == "--hw" and before[0] == "compare":
        given += ",h100"
    code, out, err = cli(*before, option, given, *after)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{option} '{_files(tmp_path)[name]}/': not a directory (a trailing slash names a folder)" in err, err


def test_a_trailing_slash_in_a_run_file_is_refused(cli, tmp_path):
    launch = _files(tmp_path)["launch"]
    run = tmp_path / "r.toml"
    run.write_text(f'from-megatron = "{launch}/"\nhw = "h100"\ndevices = 8\n')
    code, out, err = cli("plan", "--config", str(run))
    assert code == 2 and err.count("\n") == 1 and f"'{launch}/': not a directory" in err, err


@pytest.mark.parametrize("command", [["models", "show"], ["hw", "show"], ["hw", "check"]])
def test_a_trailing_slash_on_a_shown_file_is_refused(cli, tmp_path, command):
    name = _files(tmp_path)["m.json" if command[0] == "models" else "h.toml"]
    code, out, err = cli(*command, name + "/")
    assert code == 2 and err.count("\n") == 1 and f"'{name}/': not a directory" in err, err


def test_a_folder_with_a_trailing_slash_is_still_a_folder(cli, tmp_path):
    """A folder holding a config.json is a --model; the slash a shell's completion adds changes nothing."""
    folder = tmp_path / "qwen"
    folder.mkdir()
    (folder / "config.json").write_text((ROOT / "tests" / "data" / "qwen2.5-7b.config.json").read_text())
    code, out, err = cli("plan", "--hw", "h100", "--model", f"{folder}/", "--json")
    assert code in (0, 1), err


@pytest.mark.parametrize("command,option,name", [
    (["plan", "-m", "llama-3-8b", "--hw", "h100"], "-o", "x.json"),
    (["plan", "-m", "llama-3-8b", "--hw", "h100"], "--output", "x.json"),
    (["sweep", "--vary", "seq=1024,2048", "--hw", "h100"], "--csv", "x.csv"),
    (["validate"], "--plot", "x.png"),
])
@pytest.mark.parametrize("exists", [False, True])
def test_an_output_with_a_trailing_slash_writes_nothing(cli, tmp_path, command, option, name, exists):
    """-o 'x.json/' must not write x.json (open() would refuse it: output.files.target already refuses it)."""
    target = tmp_path / name
    if exists:
        target.write_text("kept\n")
    code, out, err = cli(*command, option, f"{target}/")
    assert code == 2 and err.count("\n") == 1, err
    assert (target.read_text() == "kept\n") if exists else not target.exists()


def test_megatrons_torch_fsdp2_wrapper_is_refused_not_planned_as_ddp(cli, tmp_path):
    """review25 (N6): a launch with --use-torch-fsdp2 listed the flag as not modelled and planned Megatron DDP, every
    GPU holding the whole model's state: one line, exit 2, naming what btacalc does plan."""
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--emit", "megatron")
    assert code == 0, err
    path = tmp_path / "run.sh"
    path.write_text(out.replace("--use-distributed-optimizer", "--use-torch-fsdp2"))
    code, out, err = cli("plan", "--hw", "h100", "--devices", "16", "--from-megatron", str(path))
    assert code == 2 and "--use-torch-fsdp2" in err and "--fsdp-impl fsdp2" in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_size_on_one_device_says_it_must_be_1(cli):
    # review25 (N5): the list of divisors of 1 read "--tp must divide 1: or 1"
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "1", "--tp", "2")
    assert code == 2 and err.rstrip().endswith("--tp must be 1 on 1 device"), err
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "2", "--tp", "3")
    assert code == 2 and err.rstrip().endswith("--tp must divide 2: 1 or 2"), err
