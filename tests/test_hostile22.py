"""hostile22: a hostile user's campaign on the launch reader's bash, the Bridge readers, user files, outputs and
determinism (docs/story.md, hostile22). Each test failed before its fix."""

from __future__ import annotations

import pytest

from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.errors import BtacalcError

DENSE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 "
         "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --bf16 "
         "--vocab-size 1000")


def test_a_hash_inside_a_launch_word_keeps_the_rest_of_the_launch():
    # shlex's comments began at any `#`: the run name `run#3` dropped every flag after it on the (joined) line, and
    # the launch was planned with TP 1 and no recomputation, exit 0
    text = (DENSE + " \\\n  --wandb-exp-name run#3 \\\n  --tensor-model-parallel-size 2 --recompute-granularity full "
            "--recompute-method uniform --recompute-num-layers 1  # a real comment: --pipeline-model-parallel-size 2\n")
    run = import_megatron(text, "l.sh")
    assert (run.request.tensor_parallel, run.request.recompute, run.request.pipeline_parallel) == (2, "full", 1)


def test_a_hash_inside_a_hydra_word_is_hydras_to_refuse_not_a_comment():
    # the shell passes `logger.wandb_exp_name=run#3` whole, and Hydra's grammar refuses the `#`; btacalc's shlex cut
    # the line there and planned it without the TP and PP after it
    text = ("logger.wandb_exp_name=run#3 model.tensor_model_parallel_size=2 model.pipeline_model_parallel_size=2\n"
            "train.micro_batch_size=1 train.global_batch_size=64 mixed_precision=bf16_mixed  # a comment\n")
    with pytest.raises(BtacalcError, match=r"'logger.wandb_exp_name=run#3' is not a Hydra override"):
        import_bridge(text, "o.txt", devices=8, base=_base())
    # a comment that begins a word is still a comment, on its own line or after the overrides
    run = import_bridge(text.replace("logger.wandb_exp_name=run#3 ", "# run 3\n"), "o.txt", devices=8, base=_base())
    assert (run.request.tensor_parallel, run.request.pipeline_parallel) == (2, 2)


def _base():
    from btacalc.config.presets import load_preset

    return load_preset("llama-3-8b")


def test_several_assignments_on_one_line_are_each_made():
    # `export TP=2 PP=2` set TP only, so `${PP:-1}` planned PP 1 in silence; `A=1; B=2` and `declare` set nothing
    for head in ("export TP=2 PP=2\n", "TP=2 PP=2\n", "TP=2; PP=2\n", "TP=2 && export PP=2\n",
                 "declare -i TP=2\nreadonly PP=2\n", "local TP=2 PP=2\n"):
        run = import_megatron(head + DENSE + " --tensor-model-parallel-size ${TP:-1} --pipeline-model-parallel-size "
                              "${PP:-1}\n", "l.sh")
        assert (run.request.tensor_parallel, run.request.pipeline_parallel) == (2, 2), head
    exported = import_megatron("export NCCL_A=1 NCCL_B=2\n" + DENSE + "\n", "l.sh")
    assert {"NCCL_A": "1", "NCCL_B": "2"}.items() <= dict(exported.env).items()


def test_a_flag_given_only_when_a_variable_is_set():
    # `${FP8:+--fp8-format hybrid ...}` was refused "'${FP8:+--fp8-format' is not a Megatron-LM flag"
    launch = DENSE + " ${FP8:+--fp8-format hybrid --fp8-recipe delayed}\n"
    assert import_megatron("FP8=1\n" + launch, "l.sh").request.precision == "fp8"
    assert import_megatron(launch, "l.sh").request.precision == "bf16"
    assert import_megatron("FP8=\n" + launch, "l.sh").request.precision == "bf16"


def test_an_empty_variable_takes_the_default_of_a_colon_dash():
    # `L=` then `${L:-4}` gave the empty value (refused "--num-layers needs a value"); bash gives 4
    assert import_megatron("L=\n" + DENSE.replace("--num-layers 4", "--num-layers ${L:-6}") + "\n",
                           "l.sh").model.num_layers == 6
    # `: ${L:=6}` assigns the default, as bash does
    assert import_megatron(": ${L:=6}\n" + DENSE.replace("--num-layers 4", "--num-layers $L") + "\n",
                           "l.sh").model.num_layers == 6


@pytest.mark.parametrize("reads", ["source /opt/env.sh", ". ./env.sh", "eval \"$(cat env.sh)\""])
def test_a_default_taken_beside_a_file_the_launch_reads_is_said(reads):
    # `source env.sh` then `${TP:-1}`: planned TP 1 without a word, though env.sh may set TP
    launch = DENSE + " --tensor-model-parallel-size ${TP:-1} --pipeline-model-parallel-size ${PP:-1}\n"
    run = import_megatron(f"{reads}\nPP=1\n" + launch, "l.sh")
    assert run.request.tensor_parallel == 1
    said = [n for n in run.notes if "which btacalc does not read" in n]
    assert said == [f"l.sh runs {reads}, which btacalc does not read: the defaults of TP (${{NAME:-default}}) were "
                    "taken, as for a variable the file does not set; if that file sets them, give the values in the "
                    "launch"]
    assert not [n for n in import_megatron(launch, "l.sh").notes if "does not read" in n]


def test_a_scripts_arguments_take_their_defaults_and_say_so():
    # `TP=${1:-2}` was kept as written and refused "takes an integer, got '${1:-2}'"; bash run without arguments gives 2
    run = import_megatron("TP=${1:-2}\nPP=${2-1}\n" + DENSE + " --tensor-model-parallel-size $TP "
                          "--pipeline-model-parallel-size $PP\n", "l.sh")
    assert (run.request.tensor_parallel, run.request.pipeline_parallel) == (2, 1)
    assert "l.sh reads its arguments ($1, $2): btacalc reads it as run without them, so their defaults " \
           "(${1:-default}) were taken; if you pass arguments, give their values in the launch" in run.notes
