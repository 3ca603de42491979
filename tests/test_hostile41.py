"""hostile41: a hostile campaign on btacalc's command line (thirty-fourth session): a partial rotary embedding that
turns an odd number of dimensions (or none), a rotary share Megatron reads back one dimension short, a profile file
shown under a built-in profile's name, `plan --search --emit` with no fitting layout, and a launch's
CUDA_DEVICE_MAX_CONNECTIONS that btacalc does not read. Each test is a finding: it fails without its fix."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support import one_line_error
from btacalc.paths import data_dir

DATA = Path(__file__).parent / "data"
GPTJ = json.loads((DATA / "gpt-j-6b.config.json").read_text())
QWEN3 = json.loads((DATA / "qwen3-30b-a3b.config.json").read_text())


def _write(tmp_path: Path, name: str, config: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


# D1: RoPE turns pairs of dimensions. A GPT-J config with an odd rotary_dim (63 of 256), a partial_rotary_factor whose
# int(head_dim x factor) is odd (65 of 128) or 0, and a launch's --rotary-percent of the same were planned and emitted.
# transformers builds ceil(n / 2) frequencies and repeats each twice, n + 1 values against n dimensions (GPT-J's
# apply_rotary_pos_emb fails); Megatron-Core turns 2 ceil(n / 2) dimensions at frequencies spaced for n, another model.
def test_an_odd_gptj_rotary_dim_is_refused_by_its_key(cli, tmp_path):
    assert GPTJ["n_embd"] // GPTJ["n_head"] == 256 and GPTJ["rotary_dim"] == 64
    path = _write(tmp_path, "odd.json", {**GPTJ, "rotary_dim": 63})
    code, out, err = cli("plan", "--model", path, "--hw", "h100", "--devices", "8")
    one_line_error(code, out, err, "rotary_dim = 63")
    assert "pairs" in err


@pytest.mark.parametrize("factor, turned", [(65 / 128, 65), (0.001, 0)])
def test_a_partial_rotary_factor_turning_an_odd_count_or_none_is_refused(cli, tmp_path, factor, turned):
    assert QWEN3["head_dim"] == 128 and int(128 * factor) == turned
    path = _write(tmp_path, "odd.json", {**QWEN3, "partial_rotary_factor": factor})
    code, out, err = cli("plan", "--model", path, "--hw", "h100", "--devices", "8")
    one_line_error(code, out, err, f"partial_rotary_factor = {factor!r}")
    assert f"= {turned} of head_dim 128" in err


def test_an_odd_head_turned_whole_is_refused(cli, tmp_path):
    llama = json.loads((DATA / "llama-3-8b.config.json").read_text())
    assert llama.get("head_dim") is None and llama.get("partial_rotary_factor") is None
    path = _write(tmp_path, "odd.json", {**llama, "head_dim": 127})
    code, out, err = cli("plan", "--model", path, "--hw", "h100", "--devices", "8")
    one_line_error(code, out, err, "head_dim 127 is odd")


def test_an_even_partial_share_is_still_read(cli, tmp_path):
    path = _write(tmp_path, "ok.json", {**QWEN3, "partial_rotary_factor": 0.3})  # int(128 x 0.3) = 38
    code, out, err = cli("plan", "--model", path, "--hw", "h100", "--devices", "8", "--emit", "megatron")
    assert code in (0, 1), err
    assert "--rotary-percent 0.3 " in out


def _launch(cli, tmp_path: Path, *args: str) -> Path:
    launch = tmp_path / "run.sh"
    code, _, err = cli("plan", "--hw", "h100", "--emit", "megatron", "-o", str(launch), *args)
    assert code in (0, 1), err
    return launch


def test_a_launchs_odd_rotary_percent_is_refused(cli, tmp_path):
    launch = _launch(cli, tmp_path, "--model", "llama-3-8b", "--devices", "8")
    text = launch.read_text()
    assert "--kv-channels" not in text and "--hidden-size 4096" in text and "--num-attention-heads 32" in text
    launch.write_text(text.replace("--position-embedding-type rope", "--position-embedding-type rope --rotary-percent "
                                   f"{65 / 128!r}"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch))
    one_line_error(code, out, err, "--rotary-percent")
    assert "turns 65 dimensions" in err


# D2: GPT-J's rotary_dim 30 of head_dim 44 was written --rotary-percent 0.6818181818181818 (30 / 44), which
# Megatron-Core reads as int(44 x 0.6818181818181818) = 29 dimensions (rotary_pos_embedding.py L72-74): the share is
# raised by floating point's least step until Megatron's truncation gives 30, on the launch and in the Bridge file.
def test_the_emitted_rotary_share_gives_megatron_the_models_dimensions(cli, tmp_path):
    path = _write(tmp_path, "gptj44.json", {**GPTJ, "n_embd": 44 * GPTJ["n_head"], "rotary_dim": 30})
    assert int(44 * (30 / 44)) == 29  # the defect: the plain quotient truncates one short
    for emit, pattern in (("megatron", r"--rotary-percent (\S+)"), ("bridge", r"model\.rotary_percent=(\S+)")):
        code, out, err = cli("plan", "--model", path, "--hw", "h100", "--devices", "8", "--emit", emit)
        assert code in (0, 1), err
        share = float(re.search(pattern, out).group(1))
        assert int(44 * share) == 30 and abs(share - 30 / 44) < 1e-15


# D3: a profile file named like a built-in profile (`name = "h100"`) with numbers of its own was shown as
# "NVIDIA H100 SXM 80GB (h100)" and `"name": "h100"` in the JSON, the built-in's name over other numbers, and
# `compare --hw h100,./h100.toml` refused the pair as "profile h100 given twice". Such a file is named by its path.
H100 = (data_dir("hardware_profiles") / "h100.toml").read_text()


def _own_h100(tmp_path: Path, monkeypatch) -> str:
    """./h100.toml in the working folder (`tmp_path`), its peak 4e14 FLOP/s where the built-in's is 9.89e14."""
    given = "[chip.peak_flops_per_s]\nvalue = 9.89e14"
    assert given in H100 and 'name = "h100"' in H100
    (tmp_path / "h100.toml").write_text(H100.replace(given, "[chip.peak_flops_per_s]\nvalue = 4.0e14"))
    monkeypatch.chdir(tmp_path)
    return "./h100.toml"


def test_a_profile_file_named_like_a_builtin_is_shown_by_its_path(cli, tmp_path, monkeypatch):
    path = _own_h100(tmp_path, monkeypatch)
    code, out, err = cli("plan", "--hw", path, "--model", "llama-3-8b", "--devices", "8", "--json")
    assert code in (0, 1), err
    hardware = json.loads(out)["hardware"]
    assert hardware["name"] == path and hardware["peak_flops_per_s"] == 4.0e14
    code, out, err = cli("plan", "--hw", path, "--model", "llama-3-8b", "--devices", "8")
    line = next(line for line in out.splitlines() if line.startswith("hardware"))
    assert f"({path})" in line and "(h100)" not in line


def test_a_builtin_and_a_file_of_its_name_are_two_rows(cli, tmp_path, monkeypatch):
    path = _own_h100(tmp_path, monkeypatch)
    code, out, err = cli("compare", "--model", "llama-3-8b", "--hw", f"h100,{path}", "--devices", "8", "--json")
    assert code == 0, err
    names = [row["hardware"] for row in json.loads(out)["rows"]]
    assert names == ["h100", path]


def test_a_verbatim_copy_keeps_the_builtins_name(cli, tmp_path):
    path = tmp_path / "h100.toml"
    path.write_text(H100)
    code, out, err = cli("plan", "--hw", str(path), "--model", "llama-3-8b", "--devices", "8", "--json")
    assert code in (0, 1), err
    assert json.loads(out)["hardware"]["name"] == "h100"


# D4: `plan --search --emit megatron -o run.sh` where no layout fits wrote the search's JSON report into run.sh and
# onto standard output, exit 1, not a word that no launch was written. Nothing is written; one line on stderr says
# why. The case: Llama 3.1 405B on 13 H100 (13 is prime: DP 13 or a 13-way pipeline, and 405e9 parameters' 2-byte
# weights and 4-byte gradients over 13 ranks are 187 GB, more than an H100 holds). hostile41 found it on Qwen3-30B-A3B
# on 13 H100, which search33's uneven pipeline stages (PP 13 over 48 layers) now fit.
@pytest.mark.parametrize("emit", ["megatron", "bridge"])
def test_a_search_with_no_fitting_layout_emits_nothing(cli, tmp_path, emit):
    launch = tmp_path / "run.sh"
    code, out, err = cli("plan", "--model", "llama-3.1-405b", "--hw", "h100", "--devices", "13", "--search",
                         "--emit", emit, "-o", str(launch))
    assert code == 1 and out == "" and not launch.exists()
    assert len(err.strip().splitlines()) == 1 and f"--emit {emit}" in err and "no launch" in err
    assert str(launch) in err and "not written" in err


def test_a_search_with_no_fitting_layout_leaves_an_existing_file(cli, tmp_path):
    launch = tmp_path / "run.sh"
    launch.write_text("# my launch\n")
    code, out, err = cli("plan", "--model", "llama-3.1-405b", "--hw", "h100", "--devices", "13", "--search",
                         "--emit", "megatron", "-o", str(launch))
    assert code == 1 and launch.read_text() == "# my launch\n"


# D5: a launch under the EP all-to-all overlap whose CUDA_DEVICE_MAX_CONNECTIONS is not a whole number 1-32 (0, 64,
# 1e0, eight) was planned as if it were unset, with no note: the launch's setting was silently not read. It is noted.
OVERLAPPED = ("--model", "qwen3-30b-a3b", "--devices", "32", "--ep", "8", "--pp", "2", "--vp", "2", "--global-batch",
              "256", "--micro-batch", "1", "--recompute", "selective", "--overlap-a2a")


def _imported(cli, launch: Path, value: str) -> dict:
    text = launch.read_text()
    assert text.count("export CUDA_DEVICE_MAX_CONNECTIONS=1\n") == 1
    launch.write_text(text.replace("CUDA_DEVICE_MAX_CONNECTIONS=1\n", f"CUDA_DEVICE_MAX_CONNECTIONS={value}\n"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch), "--json")
    assert code in (0, 1), err
    report = json.loads(out)
    assert report["parallelism"]["overlaps"]["all_to_all"]
    return report


@pytest.mark.parametrize("value", ["0", "64", "1e0", "eight"])
def test_an_unread_cuda_max_connections_is_noted(cli, tmp_path, value):
    launch = _launch(cli, tmp_path, *OVERLAPPED, "--cuda-max-connections", "1")
    report = _imported(cli, launch, value)
    assert report["parallelism"]["cuda_max_connections"] is None
    assert any(f"CUDA_DEVICE_MAX_CONNECTIONS='{value}'" in note and "not read" in note
               for note in report["imported"]["notes"])


@pytest.mark.parametrize("value, read", [("1", 1), ('"1"', 1), ("32", 32)])
def test_a_read_cuda_max_connections_has_no_note(cli, tmp_path, value, read):
    launch = _launch(cli, tmp_path, *OVERLAPPED, "--cuda-max-connections", "1")
    report = _imported(cli, launch, value)
    assert report["parallelism"]["cuda_max_connections"] == read
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in note for note in report["imported"]["notes"])


# D6: qwen3-30b-a3b on 13 H100 (13 is prime: DP 13, EP gcd(13, 128) = 1) holds 211 GB of state per device at ZeRO-1;
# "What would fit" offered only --devices 8 --ep 8 --zero 3 --recompute full and --search, which finds no layout on 13
# and sends the user back to "what would fit". --zero 3 on the same 13 devices fits (the plan with it exits 0) and is
# now offered, checked like every suggestion.
def test_zero3_on_the_given_devices_is_offered_when_it_fits(cli):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "13", "--json")
    assert code == 1, err
    offered = [s for s in json.loads(out)["suggestions"] if s.startswith("--zero 3 fits")]
    assert len(offered) == 1 and "on these 13 devices" in offered[0]
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "13", "--zero", "3")
    assert code == 0, err


def test_zero3_is_not_offered_where_it_was_given(cli):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "2", "--zero", "3", "--json")
    assert code == 1, err
    assert not any(s.startswith("--zero 3") for s in json.loads(out)["suggestions"])


@pytest.mark.parametrize("given, fragment", [
    # Megatron-LM splits what the given stage(s) leave over the other PP - 1 (or PP - 2) stages: 32 - 6 = 26 layers
    # over 3 stages, the last among them (or the first, given the last); 32 - 5 - 6 = 21 over 2 middle ones
    (("--first-stage-layers", "6"), "leave 26 layers, which do not divide over 3 other stage(s) (the last among them)"),
    (("--last-stage-layers", "6"), "leave 26 layers, which do not divide over 3 other stage(s) (the first among them)"),
    (("--first-stage-layers", "5", "--last-stage-layers", "6"), "leave 21 layers, which do not divide over 2 middle")])
def test_uneven_stage_error_names_the_stages_that_are_left(cli, given, fragment):
    """hostile41 (left item, fixed by the lead): with only --first-stage-layers the error said the layers left do not
    divide over 3 'middle' stages of PP 4, though the last stage is one of them."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--pp", "4", *given)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert fragment in err


def _transformers5(config: dict, factor: float) -> dict:
    """The config as transformers 5 writes it: rope_theta and partial_rotary_factor inside rope_parameters (a
    Qwen3.5-style config.json), none at the top level."""
    out = {k: v for k, v in config.items() if k not in ("rope_theta", "partial_rotary_factor", "rope_scaling")}
    out["rope_parameters"] = {"rope_type": "default", "rope_theta": config["rope_theta"],
                              "partial_rotary_factor": factor}
    return out


def test_a_transformers_5_partial_rotary_factor_is_read_from_rope_parameters(cli, tmp_path):
    """review33's left item (the lead): a partial_rotary_factor inside transformers 5's rope_parameters was not read,
    so the model was planned and emitted turning every dimension: int(128 x 0.25) = 32 of Qwen3's 128 (a share
    Megatron-Core reads back as the same 32: int(128 x 0.25))."""
    path = _write(tmp_path, "v5.json", _transformers5(QWEN3, 0.25))
    code, out, err = cli("plan", "--model", path, "--hw", "h100", "--devices", "8", "--emit", "megatron")
    assert code in (0, 1), err
    assert "--rotary-percent 0.25" in out


def test_an_odd_transformers_5_share_is_refused_by_its_key(cli, tmp_path):
    path = _write(tmp_path, "odd.json", _transformers5(QWEN3, 65 / 128))
    code, out, err = cli("plan", "--model", path, "--hw", "h100", "--devices", "8")
    one_line_error(code, out, err, "rope_parameters.partial_rotary_factor = ")
    assert "= 65 of head_dim 128" in err
