"""hostile37: a hostile campaign on btacalc's command line (thirtieth session): the launches it writes as bash reads
them, the launch and Bridge files it reads, the numbers of its option comments. Each test is a finding: the one-line
refusal, or the meaning an input or an output must have."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support import bash_words, one_line_error

DATA = Path(__file__).parent / "data"
MEGATRON = DATA / "megatron"
BRIDGE = MEGATRON / "qwen3-30b-a3b-8gpu-h100-bridge.yaml"
SMALL = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
         "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --bf16 "
         "--vocab-size 32000 --init-method-std 0.02")


# D1: `--emit megatron` quoted a value only where it held ( ) [ ] * or a blank, so a pipeline layout without a repeat
# was written bare and bash read its `|` as pipes: pretrain_gpt.py got `--pipeline-model-parallel-layout Et*8` (the
# first chunk) and the rest of the launch went to commands named after the other chunks. Read back, the launch lost
# every flag after the layout ("trains in fp32").
LAYOUT = "Etttttttt|tttttttt|tttttttt|ttttttttL"  # 32 layers in 4 chunks, embedding first and loss last


def test_an_emitted_layout_is_one_word_to_bash(cli, tmp_path):
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--pp", "4",
                         "--pipeline-layout", LAYOUT, "--emit", "megatron")
    assert code == 0, err
    words = bash_words(out, tmp_path)
    assert words[words.index("--pipeline-model-parallel-layout") + 1] == LAYOUT
    assert "--bf16" in words and words[words.index("--pipeline-model-parallel-size") + 1] == "4"
    launch = tmp_path / "launch.sh"
    launch.write_text(out)
    code, back, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch), "--json")
    assert code == 0, err
    parallelism = json.loads(back)["parallelism"]
    assert parallelism["pipeline_layout"] == LAYOUT and parallelism["stage_layers"] == [8, 8, 8, 8]


# D2: the file name of a --from-megatron / --from-bridge file went into the report unsanitised (every other name passes
# errors.clean_text): a name holding a newline put a line of its own into the comment `--emit megatron` writes ("NAME
# also sets ... btacalc does not model"), and bash ran that line as a command; a name holding a byte that is not UTF-8
# stopped `--json` and `-o` with an internal error (exit 3, "surrogates not allowed").
def test_a_launch_file_name_never_becomes_a_line_of_the_emitted_launch(cli, tmp_path):
    name = tmp_path / "run\ntouch PWNED\n.sh"
    name.write_text(SMALL + " --clip-grad 0.5\n")  # a flag btacalc does not model: the comment names the file
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(name), "--emit", "megatron")
    assert code == 0, err
    head = out.split("torchrun", 1)[0].splitlines()
    assert all(line.startswith(("#", "export ")) for line in head), head
    assert any("--clip-grad" in line and "touch PWNED.sh also sets" in line for line in head)
    words = bash_words(out, tmp_path)
    assert not (tmp_path / "PWNED").exists() and words[words.index("--num-layers") + 1] == "2"


def test_a_launch_file_name_that_is_not_utf8_is_written_escaped(cli, tmp_path):
    raw = os.fsencode(tmp_path) + b"/bad\xff.sh"
    with open(raw, "w") as fh:
        fh.write(SMALL + "\n")
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", os.fsdecode(raw), "--json")
    assert code == 0, err
    assert json.loads(out)["imported"]["source"] == f"{tmp_path}/bad\\xff.sh"  # the README's rendering of the byte
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", os.fsdecode(raw), "-o", str(tmp_path / "p.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "p.json").read_text())["imported"]["source"].endswith("bad\\xff.sh")


# D3: a Megatron-LM option given twice was compared as text: `--hidden-size 1024 ... --hidden-size 01024` was refused as
# contradictory flags, though argparse converts both to 1024 (type=int) and keeps the last; so were `0.02` and `2e-2`
# of a type=float option. Different numbers stay refused.
@pytest.mark.parametrize("again", ["--hidden-size 01024", "--hidden-size +1024", "--hidden-size 1_024",
                                   "--init-method-std 2e-2", "--init-method-std 0.020"])
def test_a_flag_given_twice_with_one_value_is_no_contradiction(cli, tmp_path, again):
    launch = tmp_path / "l.sh"
    launch.write_text(SMALL.replace("--hidden-size 256", "--hidden-size 1024") + f" {again}\n")
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch), "--json")
    assert code == 0, err
    model = json.loads(out)["model"]
    assert model["hidden_size"] == 1024 and model["head_dim"] == 1024 // 4


def test_a_flag_given_twice_with_two_values_is_still_refused(cli, tmp_path):
    launch = tmp_path / "l.sh"
    launch.write_text(SMALL + " --hidden-size 0512\n")
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch))
    one_line_error(code, out, err, "contradictory flags: --hidden-size and --hidden-size set hidden_size to '256' "
                                   "and '0512'")


# D4: an OmegaConf interpolation in a Bridge YAML file
# (`expert_model_parallel_size: ${model.tensor_model_parallel_size}`) was refused as "a string, which Megatron-Bridge
# sets as given (no conversion)": Bridge resolves it first (Megatron-Bridge @ 067f987df
# src/megatron/bridge/training/utils/omegaconf_utils.py L157, to_container(resolve=True)), against the recipe's config
# btacalc does not have. The same value as a Hydra override was refused so already.
@pytest.mark.parametrize("value", ["${model.tensor_model_parallel_size}", "${oc.env:EP,4}"])
def test_an_interpolation_in_bridge_yaml_is_refused_as_in_hydra_overrides(cli, tmp_path, value):
    yaml = tmp_path / "r.yaml"
    yaml.write_text(BRIDGE.read_text().replace("expert_model_parallel_size: 4", f"expert_model_parallel_size: {value}"))
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--from-bridge",
                         str(yaml))
    one_line_error(code, out, err, f"model.expert_model_parallel_size: '{value}': an interpolation, which Bridge "
                                   "resolves against the recipe's config")
    assert "sets as given" not in err
    hydra = tmp_path / "r.txt"
    hydra.write_text(f"model.tensor_model_parallel_size=4\n'model.expert_model_parallel_size={value}'\n")
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--from-bridge",
                         str(hydra))
    one_line_error(code, out, err, "an interpolation, which Bridge resolves against the recipe's config")


def test_an_interpolation_in_a_bridge_yaml_list_is_refused(cli, tmp_path):
    yaml = tmp_path / "r.yaml"
    yaml.write_text(BRIDGE.read_text() + "dataset:\n  seq_length: '${model.seq_length}'\n")
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--from-bridge",
                         str(yaml))
    one_line_error(code, out, err, "dataset.seq_length: '${model.seq_length}': an interpolation")


@pytest.mark.parametrize("extra", ["logger:\n  wandb_exp_name: qwen3-${oc.env:USER}\n",
                                   "optimizer:\n  lr: ${oc.env:LR,3e-4}\n"])
def test_an_interpolation_in_a_key_btacalc_ignores_is_listed_as_ignored(cli, tmp_path, extra):
    """The lead, on D4: a real recipe interpolates its paths and tags (`checkpoint.save: ${oc.env:HOME}/ckpt`); such a
    key was listed as ignored before D4 and D4 refused the whole file. Only a key btacalc reads refuses one
    (bridge_run._read_by_btacalc); the plan is the plan without the key."""
    yaml = tmp_path / "r.yaml"
    yaml.write_text(BRIDGE.read_text() + extra)
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--from-bridge",
                         str(yaml), "--json")
    assert code in (0, 1), err
    key = extra.split(":")[0] + "." + extra.split("\n  ")[1].split(":")[0]
    assert key in [item["flag"] for item in json.loads(out)["imported"]["ignored"]], key
    code, plain, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--from-bridge",
                           str(BRIDGE), "--json")
    assert json.loads(out)["throughput"] == json.loads(plain)["throughput"]
    hydra = tmp_path / "r.txt"  # the Hydra form alike
    hydra.write_text("mixed_precision=bf16_mixed\nmodel.expert_model_parallel_size=8\ntrain.global_batch_size=32\n"
                     "train.micro_batch_size=2\ncheckpoint.save=${oc.env:HOME}/ckpt\n")
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--from-bridge",
                         str(hydra), "--json")
    assert "checkpoint.save" in [item["flag"] for item in json.loads(out)["imported"]["ignored"]], err


# D5: a `# btacalc option: --routing-imbalance X` line was read with float(), which takes Python's digit grouping
# (`1_5` read as 15, then refused as beyond E/k naming 15.0) and other scripts' digits (`１.5` fullwidth, `٢`
# Arabic-Indic: planned at 1.5 and 2), where the option itself refuses them (hostile31: decimal digits only).
@pytest.mark.parametrize("value", ["1_5", "\uff11.5", "\u0662"])
def test_an_option_comment_takes_decimal_digits_only(cli, tmp_path, value):
    launch = tmp_path / "l.sh"
    launch.write_text((MEGATRON / "mixtral-8x7b.args").read_text()
                      + f"# btacalc option: --routing-imbalance {value} (the busiest expert's tokens over the mean)\n")
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch))
    one_line_error(code, out, err, f"--routing-imbalance takes a number written in decimal digits, got {value!r}")
    code, out, err = cli("plan", "--hw", "h100", "--devices", "32", "--ep", "8", "--routing-imbalance", value)
    one_line_error(code, out, err, "--routing-imbalance takes a number written in decimal digits")


def test_an_option_comment_in_decimal_digits_is_read(cli, tmp_path):
    launch = tmp_path / "l.sh"
    launch.write_text((MEGATRON / "mixtral-8x7b.args").read_text()
                      + "# btacalc option: --routing-imbalance 1.5e0 (the busiest expert's tokens over the mean)\n")
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch), "--json")
    assert code in (0, 1), err
    assert json.loads(out)["inputs"]["routing_imbalance"] == 1.5


# D6: on a dumb terminal (TERM=dumb, as an editor's shell buffer sets) the progress of a long command was rich's bar,
# which rich does not draw there: nothing showed until the command ended, and then an empty line where the bar was
# erased. A dumb terminal now gets the lines a pipe gets.
@pytest.mark.parametrize("term, lines", [("dumb", True), ("xterm-256color", False)])
def test_progress_on_a_dumb_terminal_is_lines(monkeypatch, capsys, term, lines):
    import sys

    from btacalc.cli.console import err
    from btacalc.cli.progress import progress

    monkeypatch.setenv("TERM", term)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    err.reset()
    try:
        with progress(4, "solving", delay_s=0, interval_s=0) as advance:
            for _ in range(4):
                advance(1)
    finally:
        err.reset()
    shown = capsys.readouterr().err
    assert ("btacalc: solving: 2 of 4 (50%)" in shown) == lines, shown
    if lines:
        assert shown.splitlines() == [f"btacalc: solving: {n} of 4 ({25 * n}%), 0 s" for n in (1, 2, 3, 4)]


# D7: a Qwen-MoE config.json whose mlp_only_layers names a layer outside the model or one layer twice was refused as
# "dense_layer_indices must be distinct layers in 0..47", a field no config.json has; the refusal names the file's
# field and the entry.
@pytest.mark.parametrize("only, entry", [([100], "got 100"), ([-1], "got -1"), ([3, 3], "got 3 twice"),
                                         ([0, 48], "got 48")])
def test_mlp_only_layers_outside_the_model_is_refused_by_its_name(cli, tmp_path, only, entry):
    raw = json.loads((DATA / "qwen3-30b-a3b.config.json").read_text())  # 48 layers: 0..47
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({**raw, "mlp_only_layers": only}))
    code, out, err = cli("models", "show", str(tmp_path / "m"))
    one_line_error(code, out, err, f"field 'mlp_only_layers' must list distinct layers in 0..47, {entry}")
    assert "dense_layer_indices" not in err
