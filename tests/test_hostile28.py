"""hostile28: a campaign against the reliability rules (bad input is one line and exit 2; options parsed but ignored
are refused; machine-readable output is the same whatever the terminal), each defect it found as a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT

MOE_PP2 = ["plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "16", "--pp", "2", "--ep", "8",
           "--global-batch", "64", "--micro-batch", "1"]
# Megatron-LM's tunable_overlap shape over PP 4 without virtual stages (tests/test_pipesched.py has it with VP 3)
GROUP_LAUNCH = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
                "--max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 40 --bf16 "
                "--pipeline-model-parallel-size 4 --microbatch-group-size-per-virtual-pipeline-stage 5")


@pytest.mark.parametrize("pp", ["2", "1"])
@pytest.mark.parametrize("group", ["4", "1000"])
def test_a_microbatch_group_without_virtual_stages_is_refused(cli, pp, group):
    """--microbatch-group-size without --vp was planned as without it, exit 0, whatever N (1000 > M too): the group
    is the interleaved schedule's, which a plan without virtual stages does not run."""
    args = [pp if prev == "--pp" else a for prev, a in zip([""] + MOE_PP2, MOE_PP2)]
    code, out, err = cli(*args, "--microbatch-group-size", group)
    assert code == 2 and err.count("\n") == 1 and "--microbatch-group-size" in err and "--vp > 1" in err, err


def test_a_microbatch_group_with_virtual_stages_is_still_planned(cli):
    code, out, err = cli(*MOE_PP2, "--vp", "2", "--microbatch-group-size", "4", "--json")
    assert code in (0, 1), err
    assert json.loads(out)["parallelism"]["microbatch_group"] == 4


def test_a_launchs_microbatch_group_without_virtual_stages_is_listed_ignored(cli, tmp_path):
    """Megatron runs such a launch and its schedule never reads the group: the launch is planned, the flag is listed
    among those btacalc ignored (it was carried into the plan unlisted, and written back by --emit)."""
    launch = tmp_path / "launch.txt"
    launch.write_text(GROUP_LAUNCH)
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", str(launch), "--json")
    assert code == 0, err
    flags = [i["flag"] for i in json.loads(out)["imported"]["ignored"]]
    assert "--microbatch-group-size-per-virtual-pipeline-stage" in flags
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", str(launch), "--emit", "megatron")
    flags_written = "\n".join(line for line in out.splitlines() if not line.startswith("#"))  # freshuser21: a comment
    assert code == 0 and "microbatch-group" not in flags_written, err                     # names what is not carried
    assert any("--microbatch-group-size-per-virtual-pipeline-stage" in line and "does not carry" in line
               for line in out.splitlines() if line.startswith("#"))


def test_the_search_gives_the_group_to_its_interleaved_candidates(cli):
    """With a group given, --search refused nothing and applies the group to its VP > 1 candidates; with --vp 1 the
    group changes nothing and is refused."""
    search = ["plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "32", "--search",
              "--microbatch-group-size", "4"]
    code, out, err = cli(*search)
    assert code == 0, err
    code, out, err = cli(*search, "--vp", "1")
    assert code == 2 and err.count("\n") == 1 and "--microbatch-group-size" in err, err


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m btacalc ARGS` from this checkout in `cwd`, with `env` added to the environment."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "btacalc", *args], cwd=cwd, env=full, capture_output=True,
                          timeout=300)


@pytest.mark.parametrize("args", [
    ["plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--name", "Modèle-π𝛑", "--json"],
    ["plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--name", "Modèle", "--output", "-"],
    ["compare", "--model", "qwen3-30b-a3b", "--hw", "b200", "--name", "Modèle", "--json", "--quiet"],
    ["whatif", "--hw", "wse2", "--top-k", "1", "--fixed-active", "--target", "relative_to_dense=0.85",
     "--solve-for", "sram_bytes", "--name", "Modèle", "--json"],
], ids=["plan-json", "plan-output-dash", "compare", "whatif"])
def test_json_on_a_stream_without_unicode_is_the_same_json(tmp_path, args):
    """Under PYTHONIOENCODING=ascii (or a C locale) the JSON on standard output went through the stand-ins for a
    reader: 'Modèle' became 'Mod?le' and '§3.2' '?3.2', silently other data than the --output file of the same run.
    It is written with JSON's \\u escapes instead: ASCII bytes that parse to the same value."""
    utf8 = _run(args, tmp_path, PYTHONIOENCODING="utf-8")
    ascii_ = _run(args, tmp_path, PYTHONIOENCODING="ascii")
    assert utf8.returncode == ascii_.returncode == 0, ascii_.stderr
    assert ascii_.stdout.isascii() and ascii_.stdout.count(b"?") == utf8.stdout.count(b"?")
    assert json.loads(ascii_.stdout) == json.loads(utf8.stdout)
    assert "Modèle" in json.dumps(json.loads(ascii_.stdout), ensure_ascii=False)


def test_hw_show_json_of_a_profile_with_unicode_is_the_same_json(tmp_path):
    profile = tmp_path / "mine.toml"
    profile.write_text((ROOT / "hardware_profiles" / "b200.toml").read_text(encoding="utf-8")
                       .replace('display_name = "NVIDIA B200 (HGX, 1000 W)"', 'display_name = "Größe B200 — π"'),
                       encoding="utf-8")
    utf8 = _run(["hw", "show", "mine.toml", "--json"], tmp_path, PYTHONIOENCODING="utf-8")
    ascii_ = _run(["hw", "show", "mine.toml", "--json"], tmp_path, PYTHONIOENCODING="ascii")
    assert utf8.returncode == ascii_.returncode == 0, ascii_.stderr
    assert ascii_.stdout.isascii() and json.loads(ascii_.stdout) == json.loads(utf8.stdout)
    assert json.loads(ascii_.stdout)["display_name"] == "Größe B200 — π"
