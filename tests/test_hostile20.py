"""hostile20: Megatron-Bridge YAML merge keys read as OmegaConf reads them, Hydra overrides continued over CRLF
line ends, and a launch script's here-documents, pipes, redirections and lists of commands (docs/story.md
"hostile20"). The refusals of this campaign are cases in tests/test_bad_input.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import btacalc
from btacalc.config.megatron_launch import read_launch
from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError

BRIDGE = (Path(__file__).parent / "data" / "megatron" / "qwen3-30b-a3b-8gpu-h100-bridge.yaml").read_text()
LAYOUT = "model:\n  tensor_model_parallel_size: 4\n  pipeline_model_parallel_size: 2\n"
# the same layout: TP from a merged mapping, PP given by both and the section's own value winning
MERGED = ("model:\n  <<: {tensor_model_parallel_size: 4, pipeline_model_parallel_size: 4}\n"
          "  pipeline_model_parallel_size: 2\n")


def _request(text: str, source: str = "r.yaml", model: str = "qwen3-30b-a3b"):
    return import_bridge(text, source, 8, load_preset(model)).request


def test_a_merge_key_plans_as_the_keys_it_merges():
    assert LAYOUT in BRIDGE
    merged = BRIDGE.replace(LAYOUT, MERGED)
    # was "r.yaml: not YAML: could not determine a constructor for the tag 'tag:yaml.org,2002:merge'"
    assert _request(merged) == _request(BRIDGE)
    read = (_request(merged).tensor_parallel, _request(merged).pipeline_parallel)
    assert read == (4, 2)
    try:  # what Bridge loads a recipe's YAML overrides with reads the same
        from omegaconf import OmegaConf
    except ImportError:
        return
    model = OmegaConf.to_container(OmegaConf.create(merged))["model"]
    assert read == (model["tensor_model_parallel_size"], model["pipeline_model_parallel_size"])


def test_a_merge_key_does_not_hide_a_key_given_twice():
    twice = BRIDGE.replace(LAYOUT, MERGED + "  pipeline_model_parallel_size: 2\n")
    with pytest.raises(BtacalcError, match="key 'pipeline_model_parallel_size' is given twice"):
        _request(twice)


HYDRA = ("model.tensor_model_parallel_size=2 \\\nmodel.pipeline_model_parallel_size=1 \\\n"
         "train.micro_batch_size=1 train.global_batch_size=64 mixed_precision=bf16_mixed\n")


def test_hydra_overrides_continued_over_crlf_line_ends_plan_as_with_lf():
    crlf = HYDRA.replace("\n", "\r\n")
    # was "o.txt: '\r' is not a Hydra override: token recognition error at: '\r'"
    assert _request(crlf, "o.txt", "llama-3-8b") == _request(HYDRA, "o.txt", "llama-3-8b")
    assert _request(crlf, "o.txt", "llama-3-8b").tensor_parallel == 2


LAUNCH = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 "
          "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --bf16 --swiglu "
          "--vocab-size 1000 --ffn-hidden-size 512 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512\n")


@pytest.mark.parametrize("heredoc", [
    "cat > extra.args <<EOF\n--num-layers 2\ntorchrun x.py --num-layers 8\nEOF\n",
    "cat > extra.args <<-'EOF'\n\t--num-layers 2\n\tEOF\n",
    'cat <<"END" | tee notes.txt\n--hidden-size 8\nEND\n',
])
def test_a_here_document_is_text_not_the_launch(heredoc):
    # was "l.sh: flags after the launch command (--num-layers ...)" (or, with a script in it, its launch read)
    plain = import_megatron(LAUNCH, "l.sh")
    read = import_megatron(heredoc + LAUNCH, "l.sh")
    assert (read.model, read.request) == (plain.model, plain.request)


@pytest.mark.parametrize("before, after", [
    ("", " 2>&1 | tee log.txt"), ("", " > log.txt 2> err.txt"), ("", " &>> all.log"), ("", " ; echo done"),
    ("", " && echo done"), ("", " &\nwait"), ("cd /workspace/Megatron-LM && ", " | tee log"), ("", " 2>&1|tee 'my log'"),
    ("", " --tokenizer-model '<a|b>;c' < /dev/null"),
])
def test_a_launch_line_with_pipes_redirections_and_lists_reads_its_launch(before, after):
    # was "l.sh: '2>&1' is not a Megatron-LM flag (a value without its flag?)" (and '|', '>', ';', '&&', '&')
    plain = import_megatron(LAUNCH, "l.sh")
    read = import_megatron(before + LAUNCH.rstrip("\n") + after + "\n", "l.sh")
    assert (read.model, read.request) == (plain.model, plain.request)
    if "<a|b>" in after:  # a quoted operator is the flag's value, not an operator
        assert read_launch(before + LAUNCH.rstrip("\n") + after, "l.sh").args["tokenizer_model"] == "<a|b>;c"


@pytest.mark.parametrize("name", ["/dev/stdin", "/proc/self/fd/0"])
def test_standard_input_named_as_a_file_says_to_give_a_dash(tmp_path, name):
    # a pipe is never read as a file (it could block); "not a regular file" alone did not say what to write instead
    env = {**os.environ, "PYTHONPATH": str(Path(btacalc.__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--hw", "h100", "--from-megatron", name],
                          input=LAUNCH, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 2
    assert done.stderr == (f"btacalc: error: --from-megatron '{name}': not a regular file (it is standard input: give "
                           "- to read it)\n")


@pytest.mark.parametrize("launcher, per_node", [
    ("--nproc_per_node 8 --nnodes $SLURM_NNODES", 8), ("--nproc_per_node 8 --nnodes 1:4", 8),
    ("--nproc_per_node gpu --nnodes 2", None), ("--nproc-per-node=auto", None),
])
def test_torchrun_sizes_btacalc_cannot_read_take_the_devices_given(launcher, per_node):
    # was "l.sh: --nnodes '$SLURM_NNODES' is not a number of processes", with --devices given too
    run = import_megatron(LAUNCH.replace("--nproc_per_node 8", launcher), "l.sh", devices=8)
    assert (run.request.devices, run.request.devices_per_node) == (8, per_node)


@pytest.mark.parametrize("expression", ["$((L*2))", "$(( L * 2 ))", "$((L+L))"])
def test_bash_arithmetic_reads_bare_variable_names(expression):
    # was "l.sh: Megatron-LM's --num-layers (num_layers) takes an integer, got '$((L*2))'" (a bare name)
    run = import_megatron("L=2\n" + LAUNCH.replace("--num-layers 4", f"--num-layers {expression}"), "l.sh")
    assert run.model.num_layers == 4
