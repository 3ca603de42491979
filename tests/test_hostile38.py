"""hostile38: a hostile campaign on btacalc's command line (thirty-first session): compare's automatic GPU count with
the run's batch and layout options, bash launch lines that assign beside a command, array elements and positional
parameters, and a config.json's numerics named by their keys. Each test is a finding: it fails without its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import bash_words, one_line_error

DATA = Path(__file__).parent / "data"
SMALL = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
         "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --bf16 "
         "--vocab-size 32000")


# D1: compare with --devices auto (the default) planned each GPU row as min_devices' fit, a problem of one sequence per
# device without the run's batch: --global-batch and --grad-accum were dropped in silence (a row of 8 H100s planned
# DP 8 x M 64 x 2 = 1,024 sequences per step under --global-batch 64, or 7, which does not divide over 8 ranks).
def _gpu_row(cli, *args: str) -> dict:
    code, out, err = cli("compare", "--model", "qwen3-30b-a3b", "--hw", "wse3,h100", *args, "--json")
    assert code == 0, err
    rows = [r for r in json.loads(out)["rows"] if r["hardware"] == "h100"]
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize("option, value", [("--global-batch", 64), ("--grad-accum", 2)])
def test_compare_auto_devices_keeps_the_runs_batch(cli, option, value):
    row = _gpu_row(cli, option, str(value))
    dp = row["devices"]  # TP = PP = CP = 1 at the automatic count: every device a data-parallel rank
    assert row["layout"].endswith(f"DP{dp}")
    per_rank = row["tiles"] * row["tile_batch"]
    if option == "--global-batch":
        assert dp * row["micro_batches"] * per_rank == value  # N = DP x M x G·b, the run's N
    else:
        assert row["micro_batches"] == value
    # the same row as plan gives it at that count with the fit's ZeRO and recomputation, given explicitly
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", str(dp), "--zero",
                         str(row["zero_stage"]), "--recompute", row["recompute"], option, str(value), "--json")
    assert code in (0, 1), err
    assert json.loads(out)["throughput"]["tokens_per_s"] == pytest.approx(row["tokens_per_s"], rel=1e-12)


def test_compare_auto_devices_refuses_a_batch_that_does_not_divide(cli):
    code, out, err = cli("compare", "--model", "qwen3-30b-a3b", "--hw", "h100", "--global-batch", "7")
    one_line_error(code, out, err, "h100 row at --devices auto = 8")
    assert "--global-batch 7 does not divide over the 8 data-parallel ranks" in err


# D2: a layout that no power-of-two count takes (TP 8 over 4 key/value heads, ETP 3) fell back to a plan on one
# device and was refused as not dividing `--devices 1`, a count the command line never gave.
@pytest.mark.parametrize("args, fragment", [
    (("--tp", "8"), "--tp 8 does not divide the 32 query and 4 key/value heads"),
    (("--etp", "3"), "--etp 3 x --ep 1 x --pp 1 = 3 does not divide"),
    (("--pp", "4", "--first-stage-layers", "10"),
     "leave 38 layers, which do not divide over 3 other stage(s) (the last among them)")])
def test_compare_auto_devices_names_the_layouts_own_fault(cli, args, fragment):
    code, out, err = cli("compare", "--model", "qwen3-30b-a3b", "--hw", "h100", *args)
    one_line_error(code, out, err, fragment)
    assert "no power-of-two count up to it takes the layout" in err and "--devices 1 " not in err


# D3: an assignment beside another command on one line was no statement: `export NCCL_CTA_POLICY=1; torchrun ...`
# lost the launch's environment (planned without --use-nccl-ub's buffers, with a note that the variable was not
# set), and `L=4; torchrun ... --num-layers $L` was refused as a variable the file does not set.
@pytest.mark.parametrize("before", ["export NCCL_CTA_POLICY=1; ", "export NCCL_CTA_POLICY=1 && ",
                                    "cd /tmp && export NCCL_CTA_POLICY=1 && "])
def test_an_export_before_the_launch_on_its_line_is_its_environment(cli, tmp_path, before):
    launch = tmp_path / "l.sh"
    launch.write_text(before + SMALL + " --use-distributed-optimizer --use-nccl-ub "
                      "2>&1 | tee log.txt\n")
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch), "--json")
    assert code in (0, 1), err
    imported = json.loads(out)["imported"]
    assert imported["environment"] == {"NCCL_CTA_POLICY": "1"}
    assert not any("NCCL_CTA_POLICY" in note for note in imported["notes"])


def test_a_variable_set_before_the_launch_on_its_line_is_read(cli, tmp_path):
    script = "L=4; " + SMALL.replace("--num-layers 2", "--num-layers $L") + "\n"
    words = bash_words(script, tmp_path)
    assert words[words.index("--num-layers") + 1] == "4"
    launch = tmp_path / "l.sh"
    launch.write_text(script)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch), "--json")
    assert code in (0, 1), err
    assert json.loads(out)["model"]["num_layers"] == 4


@pytest.mark.parametrize("before", ["[ -z \"$X\" ] && export NCCL_CTA_POLICY=1", "false || export NCCL_CTA_POLICY=1",
                                    "export NCCL_CTA_POLICY=1 &"])
def test_a_conditional_or_background_export_is_not_the_environment(cli, tmp_path, before):
    """What bash may not run (after a test, after `||`) or runs in a subshell (`&`) stays out, as before."""
    launch = tmp_path / "l.sh"
    launch.write_text(before + ("" if before.endswith("&") else ";") + " " + SMALL + " --use-distributed-optimizer "
                      "--use-nccl-ub\n")
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch), "--json")
    assert code in (0, 1), err
    assert json.loads(out)["imported"]["environment"] == {}


# D4: `A[1]=8` sets an array's element, which bash passes on in "${A[@]}"; btacalc passed the statement over and kept
# the element the array was made with (planned 4 layers where bash launches 8).
def test_an_array_elements_assignment_is_refused(cli, tmp_path):
    script = ("A=(--num-layers 4)\nA[1]=8\n" + SMALL.replace("--num-layers 2 ", "") + ' "${A[@]}"\n')
    words = bash_words(script, tmp_path)
    assert words[words.index("--num-layers") + 1] == "8"
    launch = tmp_path / "l.sh"
    launch.write_text(script)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch))
    one_line_error(code, out, err, "A[1]=8: btacalc follows the assignment of a variable or a whole array, not of an "
                                   "array element")


# D5: `set -- 4` sets $1, which `${1:-2}` then reads as 4 in bash; btacalc read the script's positional parameters as
# unset and planned 2 layers.
@pytest.mark.parametrize("line", ["set -- 4", "set -e -- 4", "set 4"])
def test_setting_positional_parameters_is_refused(cli, tmp_path, line):
    script = line + "\n" + SMALL.replace("--num-layers 2", "--num-layers ${1:-2}") + "\n"
    words = bash_words(script, tmp_path)
    assert words[words.index("--num-layers") + 1] == "4"
    launch = tmp_path / "l.sh"
    launch.write_text(script)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch))
    one_line_error(code, out, err, "sets the script's positional parameters")


@pytest.mark.parametrize("line", ["set -euo pipefail", "set -eu -o pipefail", "set -x", "set --", "set +o errexit"])
def test_setting_shell_options_is_no_refusal(cli, tmp_path, line):
    launch = tmp_path / "l.sh"
    launch.write_text(line + "\n" + SMALL + "\n")
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch), "--json")
    assert code in (0, 1), err
    assert json.loads(out)["model"]["num_layers"] == 2


# D6: a config.json numeric out of its bounds was refused naming the library's field ("field numerics.init_std: Input
# should be less than 1"), which no config.json has; it names the file's key and value.
@pytest.mark.parametrize("change, key", [({"initializer_range": 2.0}, "'initializer_range' = 2.0"),
                                         ({"rms_norm_eps": 0}, "'rms_norm_eps' = 0.0"),
                                         ({"rope_theta": -5}, "'rope_theta' = -5.0"),
                                         ({"partial_rotary_factor": 5}, "'partial_rotary_factor' = 5.0"),
                                         ({"rope_scaling": {"rope_type": "llama3", "factor": 0.5}},
                                          "'rope_scaling.factor' = 0.5")])
def test_a_config_numeric_out_of_bounds_is_named_by_its_key(cli, tmp_path, change, key):
    raw = json.loads((DATA / "qwen3-30b-a3b.config.json").read_text())
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({**raw, **change}))
    code, out, err = cli("models", "show", str(tmp_path / "m"))
    one_line_error(code, out, err, f"field {key}: Input should be")
    assert "numerics." not in err


# D7: `whatif --solve-for layers` planned every trial layer count under the given pipeline split, and the first count
# the split could not take stopped the whole question with that trial's refusal: `--pp 4 --first-stage-layers 12` was
# refused over a count the command line never gave. A trial the split cannot take is a point that does not plan (as a
# hardware number against a rule between numbers is); a layout that fixes the count is refused for what it is.
WHATIF = ("whatif", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--global-batch", "256",
          "--micro-batch", "1", "--target", "tokens_per_s=200000", "--solve-for", "layers")


def test_whatif_layers_passes_over_counts_the_stage_split_cannot_take(cli):
    code, out, err = cli(*WHATIF, "--pp", "4", "--ep", "4", "--first-stage-layers", "12", "--json")
    assert code in (0, 1), err
    result = json.loads(out)
    # L layers: 12 on the first stage, L - 12 shared by the 3 others (Megatron's even split), so L > 12 and 3 | L - 12
    for step in result["trace"]:
        layers = int(step["value"])
        takes = layers > 12 and (layers - 12) % 3 == 0
        assert step["binding_constraint"].startswith("not a valid layout") != takes, step
    assert result["today_value"] == 48 and len(result["trace"]) > 20


@pytest.mark.parametrize("args, fragment", [
    (("--ep", "8", "--pp", "2", "--first-stage-layers", "24", "--last-stage-layers", "24"),
     "no value from 1 to 10,000 but today's 48 is a plan under these options: not a valid layout at 54 layers"),
    (("--ep", "8", "--pp", "2", "--pipeline-layout", "Et*24|t*24L"),
     "--solve-for layers: --pipeline-layout places each of the model's 48 layers")])
def test_whatif_layers_under_a_split_that_fixes_them_is_refused_for_that(cli, args, fragment):
    code, out, err = cli(*WHATIF, *args)
    one_line_error(code, out, err, fragment)
    assert "would change nothing" not in err
