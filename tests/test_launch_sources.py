"""What hostile25 left: a Bridge file's null batch sizes, and launches of scripts other than pretrain_gpt.py.

- Megatron-Bridge's ConfigContainer.validate asserts `train.global_batch_size` and `train.micro_batch_size` are set
  when it derives the evaluation's from them (src/megatron/bridge/training/config.py L1433-1442 @ 067f987d), and
  Megatron-LM's micro-batch calculator takes integers: a null is refused, where btacalc read it as left out and
  planned the preset's / Megatron-LM's default.
- Megatron-LM @ d98e8a64 has four training scripts besides pretrain_gpt.py: pretrain_hybrid.py, pretrain_mamba.py and
  pretrain_vlm.py build other models (refused, hostile25), train_rl.py trains a GPTModel in a reinforcement-learning
  loop (its __main__, L383-420, adds the inference arguments). A launch of train_rl.py or of a script Megatron-LM
  does not have is planned as pretrain_gpt.py's step, with a note saying so.
"""

from __future__ import annotations

import pytest

from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError

ARGS = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
        "--micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 32000")


@pytest.mark.parametrize("text", [
    "train.micro_batch_size: 1\ntrain.global_batch_size: null\nmixed_precision: bf16_mixed\n",
    "train.micro_batch_size: null\ntrain.global_batch_size: 64\nmixed_precision: bf16_mixed\n",
    "train.micro_batch_size=1 train.global_batch_size=null mixed_precision=bf16_mixed\n",  # Hydra overrides
])
def test_a_null_training_batch_size_is_refused_as_bridge_asserts(text):
    with pytest.raises(BtacalcError, match=r"batch_size=null: Megatron-Bridge needs the training batch sizes"):
        import_bridge(text, "run.yaml", devices=8, base=load_preset("llama-3-8b"))


def test_the_batch_sizes_left_out_are_still_read_as_the_recipes():
    run = import_bridge("mixed_precision: bf16_mixed\n", "run.yaml", devices=8, base=load_preset("llama-3-8b"))
    assert run.request is not None


@pytest.mark.parametrize("script, said", [
    ("train_rl.py", "reinforcement learning"),
    ("/workspace/my_pretrain.py", "a script Megatron-LM @ d98e8a64 does not have"),
])
def test_a_launch_of_another_training_loop_is_planned_with_a_note(script, said):
    run = import_megatron(f"torchrun --nproc_per_node 8 {script} {ARGS}", "launch.sh")
    [note] = [n for n in run.notes if n.startswith(script)]
    assert said in note


@pytest.mark.parametrize("launch", [f"torchrun --nproc_per_node 8 pretrain_gpt.py {ARGS}",
                                    f"torchrun --nproc_per_node 8 /opt/Megatron-LM/pretrain_gpt.py {ARGS}", ARGS])
def test_pretrain_gpt_and_bare_arguments_need_no_note(launch):
    run = import_megatron(launch, "launch.sh", devices=8)
    assert not [n for n in run.notes if "does not have" in n or "reinforcement" in n]


def test_the_emitted_bridge_overrides_say_bridge_keeps_the_vocabulary_as_given(cli):
    """review25: Megatron-Bridge's setup keeps a model's vocab_size as given and pads only a vocabulary it takes from
    the tokenizer (training/setup.py _validate_and_set_vocab_size L762-781 @ 067f987d: (model_vocab_size, False));
    `--emit bridge` states model.vocab_size, so its header must not say Megatron-LM's padding applies."""
    layout = ("plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "8", "--micro-batch", "1",
              "--global-batch", "256", "--seq", "4096")
    code, bridge, err = cli(*layout, "--emit", "bridge")
    assert code in (0, 1), err
    head = [line for line in bridge.splitlines() if line.startswith("#")]
    assert "model.vocab_size=151936" in bridge.splitlines()
    assert any("model.vocab_size is kept as given" in line for line in head)
    assert not any("Megatron pads the vocabulary" in line for line in head)
    code, megatron, err = cli(*layout, "--emit", "megatron")
    assert "Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by 128 x TP" in megatron
