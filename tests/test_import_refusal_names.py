"""A plan-level refusal of an imported run names the file's own settings (nineteenth session; left by the review of
review35): a setting that is one Megatron-LM flag or one Megatron-Bridge key (megatron_codec.PARAM_DESTS) is written
as the file writes it; a setting with no one flag keeps btacalc's option name, and the message says so."""

from __future__ import annotations

from btacalc.config.megatron_codec import PARAM_DESTS, megatron_flag
from btacalc.config.megatron_run import imported_names
from btacalc.config.megatron_launch import flags_by_dest


def _emitted(cli, emit, *extra):
    code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--tp", "2",
                         "--emit", emit, *extra)
    assert code == 0, err
    return out


def test_each_mapped_setting_is_one_flag_megatron_parses():
    """Every PARAM_DESTS destination is a Megatron-LM argparse destination, and the flag named for it sets it."""
    table = flags_by_dest()
    for param, dest in PARAM_DESTS.items():
        assert dest in table, (param, dest)
        assert megatron_flag(dest) in {f.flag for f in table[dest]}


def test_the_sequence_refusal_of_a_launch_names_its_flags(cli, tmp_path):
    path = tmp_path / "run.sh"
    path.write_text(_emitted(cli, "megatron").replace("--seq-length 4096", "--seq-length 4095"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{path}: sequence parallelism splits the sequence of 4095 over --tensor-model-parallel-size 2" in err
    assert "give --seq-length 4094 or 4096, or no --sequence-parallel" in err
    assert "--tp" not in err and "--seq " not in err and "btacalc's option names" not in err


def test_the_sequence_refusal_of_a_bridge_file_names_its_keys(cli, tmp_path):
    path = tmp_path / "run.txt"
    # bridgeparse: the file states the dataset's length beside the model's (Bridge asserts they are one)
    path.write_text(_emitted(cli, "bridge").replace("seq_length=4096", "seq_length=4095"))
    code, out, err = cli("plan", "--hw", "h100", "--devices", "16", "--from-bridge", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "over model.tensor_model_parallel_size 2" in err
    assert "give model.seq_length 4094 or 4096, or model.sequence_parallel false" in err


def test_the_command_line_keeps_its_own_options():
    """The same refusal on the command line names btacalc's options (nothing imported)."""
    from btacalc.cli.options import flag

    assert (flag("tensor_parallel"), flag("seq_len"), flag("no_sequence_parallel")) == \
        ("--tp", "--seq", "--no-sequence-parallel")


def test_a_setting_with_no_one_flag_keeps_btacalcs_name_and_says_so(cli, tmp_path):
    """Eager attention under CP: the launch's attention choice is btacalc's --attention (no one Megatron-LM flag
    chooses materialised scores), its CP the file's --context-parallel-size."""
    text = _emitted(cli, "megatron", "--attention", "eager")
    assert "--context-parallel-size 1" in text
    path = tmp_path / "run.sh"
    path.write_text(text.replace("--context-parallel-size 1", "--context-parallel-size 2"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{path} (--attention: btacalc's option names): --attention eager with --context-parallel-size 2" in err


def test_standard_input_is_named_as_such(cli, monkeypatch):
    import io
    import sys

    text = _emitted(cli, "megatron").replace("--seq-length 4096", "--seq-length 4095")
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", "-")
    assert code == 2 and err.strip().startswith("btacalc: error: standard input: sequence parallelism"), err


def test_names_cover_both_kinds_of_file():
    """The two tables name the same settings; Bridge's are ConfigContainer keys (a section, a dot, a field)."""
    megatron, bridge = imported_names(False), imported_names(True)
    assert set(megatron) == set(bridge) == set(PARAM_DESTS) | {"no_sequence_parallel"}
    assert all(n.startswith("--") for p, n in megatron.items() if p != "no_sequence_parallel")
    assert all("." in n and not n.startswith("-") for n in bridge.values())


def test_a_bridge_files_rule_refusal_names_its_keys(cli, tmp_path):
    """review19: a Megatron rule broken by a Bridge file named Megatron-LM's flags ("--global-batch-size must be a
    multiple of --micro-batch-size x data parallel") and called the file a launch; each flag is now the file's key."""
    import re

    path = tmp_path / "run.txt"
    text, n = re.subn(r"train\.global_batch_size=\d+", "train.global_batch_size=1020", _emitted(cli, "bridge"))
    assert n == 1 and "train.micro_batch_size=4\n" in text  # 1,020 sequences over DP 8 (16 GPUs at TP 2) x 4: 31.9
    path.write_text(text)
    code, out, err = cli("plan", "--hw", "h100", "--devices", "16", "--from-bridge", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{path}: Megatron would refuse this run: train.global_batch_size must be a multiple of " \
           "train.micro_batch_size x data parallel" in err
    assert "--" not in err.split("would refuse this run:")[1].split("(Megatron-LM@")[0]


def test_flags_without_a_bridge_key_stay_flags():
    from btacalc.config.megatron_run import in_bridge_keys

    assert in_bridge_keys("--micro-batch-size and --no-such-flag") == "train.micro_batch_size and --no-such-flag"


def test_a_launchs_gpus_are_its_torchrun_processes(cli, tmp_path):
    """review19: the GPUs of a launch with a torchrun prefix are its processes, not a btacalc --devices the user
    gave: a refusal naming them said "(--devices: btacalc's option names)"."""
    code, out, err = cli("plan", "--hw", "h100", "--model", "qwen3-30b-a3b", "--devices", "16", "--ep", "8",
                         "--emit", "megatron")
    assert code in (0, 1) and "torchrun" in out and "--expert-model-parallel-size 8" in out, err  # 1: no fit
    path = tmp_path / "run.sh"
    path.write_text(out.replace("--expert-model-parallel-size 8", "--expert-model-parallel-size 32"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "does not divide torchrun's processes (--nproc_per_node x --nnodes) 16" in err
    assert "btacalc's option names" not in err and "--devices" not in err
