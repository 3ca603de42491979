"""A Megatron-LM launch read back without one of the arguments Megatron-LM requires is refused as Megatron-LM refuses it.

megatron/training/arguments.py @ d98e8a64 L1314-1317: `required_args = ['num_layers', 'hidden_size',
'num_attention_heads', 'max_position_embeddings']`, each checked not None before the later L1354 check that
max_position_embeddings >= seq_length. hostile34 found the missing --max-position-embeddings reported as the later
check ("must be at least --seq-length").
"""

from __future__ import annotations

import pytest

LAUNCH = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 8 "
          "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 64 --bf16 "
          "--vocab-size 32000")


def _read_back(cli, tmp_path, text: str) -> tuple[int, str, str]:
    path = tmp_path / "launch.sh"
    path.write_text(text)
    return cli("plan", "--hw", "h100", "--from-megatron", str(path))


@pytest.mark.parametrize("drop, says", [
    ("--max-position-embeddings 1024", "--max-position-embeddings is a required argument"),
    ("--hidden-size 1024", "--hidden-size is a required argument"),
    ("--num-attention-heads 8", "--num-attention-heads is a required argument"),
])
def test_a_launch_without_a_required_argument_is_refused_at_megatrons_required_check(cli, tmp_path, drop, says):
    code, out, err = _read_back(cli, tmp_path, LAUNCH.replace(" " + drop, ""))
    line = err.strip()
    assert code == 2 and out == ""
    assert "\n" not in line and says in line and "1314" in line


def test_the_first_missing_in_megatrons_order_is_named(cli, tmp_path):
    launch = LAUNCH.replace(" --hidden-size 1024", "").replace(" --max-position-embeddings 1024", "")
    assert "--hidden-size is a required argument" in _read_back(cli, tmp_path, launch)[2]


def test_a_launch_whose_positions_are_too_few_is_refused_at_the_later_check(cli, tmp_path):
    code, _, err = _read_back(cli, tmp_path, LAUNCH.replace("--max-position-embeddings 1024",
                                                           "--max-position-embeddings 512"))
    assert code == 2
    assert "must be at least --seq-length" in err and "arguments.py:1354" in err


def test_the_launch_with_every_required_argument_plans(cli, tmp_path):
    assert _read_back(cli, tmp_path, LAUNCH)[0] == 0
