"""hostile31: a campaign on run files, number options, outputs and environments (twenty-fourth session). Each test
is a finding: the one-line refusal, or the number the plan must equal."""

from __future__ import annotations

import json
import re

import pytest

from btacalc.paths import data_dir


@pytest.mark.parametrize("args", [
    ("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "8", "--capacity-factor", "1_0.5"),
    ("plan", "--hw", "wse2", "--sensitivity", "1_0"),
    ("measure", "--seq", "128", "--real", "--real-limit-gb", "1_0", "-q"),
])
def test_a_number_option_refuses_python_digit_grouping(cli, args):
    # float('1_0.5') is 10.5: `--capacity-factor 1_0.5` planned a cap of 10.5, where `--devices 8_0` is refused
    code, out, err = cli(*args)
    assert code == 2 and "takes a number written in decimal digits" in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["0.8_5", "\u0660.\u0668\u0665"])
def test_a_whatif_target_is_written_in_decimal_digits(cli, value):
    # the target went through float(): 0.8_5 and Arabic-Indic ٠.٨٥ were both read as 0.85
    code, out, err = cli("whatif", "--hw", "wse2", "--top-k", "1", "--fixed-active", "--target",
                         f"relative_to_dense={value}", "--solve-for", "sram_bytes")
    assert code == 2 and "is not a number" in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_run_file_number_written_as_a_string_keeps_the_rule(cli, tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('model = "qwen3-30b-a3b"\nhw = "h100"\ndevices = 16\nep = 8\ncapacity-factor = "1_0"\n')
    code, out, err = cli("plan", "--config", str(path))
    # since the twenty-fifth session a quoted number in a run file is refused before its digits are read
    assert code == 2 and "capacity-factor = '1_0' is a TOML string" in err and len(err.splitlines()) == 1, err
    code, out, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "-n", "16", "--ep", "8", "--capacity-factor",
                         "1_0")  # the command line's text keeps the decimal-digits rule
    assert code == 2 and "--capacity-factor takes a number written in decimal digits" in err, err


def test_a_profile_whose_block_shared_memory_exceeds_its_sm_sram_is_refused(cli, tmp_path):
    # H100: 227 KB a block may use of the SM's 256 KB L1/shared; 10x the SM's SRAM was accepted and planned with
    text = (data_dir("hardware_profiles") / "h100.toml").read_text()
    text = re.sub(r"(\[chip\.shared_memory_bytes_per_core\]\nvalue = )[^\n]*", r"\g<1>2621440", text)
    path = tmp_path / "h100x.toml"
    path.write_text(text)
    for args in (("hw", "check", str(path)), ("plan", "--hw", str(path), "--devices", "8", "--model", "llama-3-8b")):
        code, out, err = cli(*args)
        assert code == 2 and "chip.shared_memory_bytes_per_core = 2.62144e+06 B exceeds chip.sram_bytes_per_core" \
            in err, err
        assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("option", [("--ddp-bucket-size", "1000000"), ("--ddp-num-buckets", "2")])
def test_gradient_buckets_without_the_overlapped_reduce_are_refused(cli, option):
    # Megatron-Core sets bucket_size None without overlap_grad_reduce; the plan was the same at any bucket size
    base = ("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--seq", "2048", "--global-batch", "64",
            "--micro-batch", "1", "--json")
    code, out, err = cli(*base, *option)
    assert code == 2 and "they need --overlap-grad-reduce" in err, err
    assert len(err.strip().splitlines()) == 1
    code, out_one, err = cli(*base, "--overlap-grad-reduce")
    code, out_two, err = cli(*base, "--overlap-grad-reduce", *option)
    assert code == 0, err
    assert json.loads(out_one)["throughput"]["step_time_s"] != json.loads(out_two)["throughput"]["step_time_s"]


def test_a_launchs_bucket_without_the_overlapped_reduce_is_listed_as_ignored(cli, tmp_path):
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--seq", "2048",
                         "--global-batch", "64", "--micro-batch", "1", "--emit", "megatron")
    assert code == 0, err
    path = tmp_path / "run.sh"
    path.write_text(out.replace("--micro-batch-size 1", "--micro-batch-size 1 --ddp-num-buckets 2"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 0, err
    assert "ignored --ddp-num-buckets: the gradient buckets: without --overlap-grad-reduce" in " ".join(
        line.strip("│ ") for line in out.splitlines())
