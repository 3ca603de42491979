"""A dense launch's --expert-tensor-parallel-size (memci's leftover). Megatron-LM accepts it on a dense model:
parallel_state.py (@ d98e8a64, L871-884) builds the expert rank grid ETP x EP x PP whatever the model and raises
only when it does not divide the world size; no dense layer uses the grid. So btacalc plans such a launch as the same
launch without the flag (with a note), and refuses it only where Megatron-Core's check would."""

from __future__ import annotations

import json

import pytest

LAUNCH = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
          "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --bf16 "
          "--vocab-size 32000 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2")


def _plan(cli, tmp_path, extra: str) -> tuple[int, str, str]:
    launch = tmp_path / "launch.sh"
    launch.write_text(LAUNCH + extra + "\n")
    return cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--json")


@pytest.mark.parametrize("etp", [2, 4])  # 8 % (ETP x EP 1 x PP 2) == 0
def test_a_dense_launchs_etp_changes_nothing(cli, tmp_path, etp):
    code, base, err = _plan(cli, tmp_path, "")
    assert code == 0, err
    code, given, err = _plan(cli, tmp_path, f" --expert-tensor-parallel-size {etp}")
    assert code == 0, err
    a, b = json.loads(base), json.loads(given)
    assert b["throughput"]["step_time_s"] == a["throughput"]["step_time_s"]
    assert b["memory_bytes"] == a["memory_bytes"] and b["memory_stages"] == a["memory_stages"]
    assert f"expert tensor parallelism {etp} (--expert-tensor-parallel-size / model.expert_tensor_parallel_size): the " \
        "model is dense" in given


def test_a_dense_launch_whose_expert_grid_does_not_divide_is_refused(cli, tmp_path):
    code, out, err = _plan(cli, tmp_path, " --expert-tensor-parallel-size 3")  # 8 % (3 x 1 x 2) = 2
    assert code == 2 and out == ""
    assert "(ETP x EP x PP = 6) must divide the world size 8" in err and len(err.strip().splitlines()) == 1


def test_a_dense_bridge_files_etp_is_read_the_same(cli, tmp_path):
    """The same reading for Megatron-Bridge overrides (model.expert_tensor_parallel_size reaches the same
    initialize_model_parallel): a note naming the Bridge key, the plan of the file without it."""
    lines = ["model.num_layers=2", "model.hidden_size=256", "model.num_attention_heads=4", "model.seq_length=512",
             "model.vocab_size=32000", "model.ffn_hidden_size=1024", "model.tensor_model_parallel_size=2",
             "train.micro_batch_size=1", "train.global_batch_size=8", "mixed_precision=bf16_mixed"]
    plans = []
    for extra in ([], ["model.expert_tensor_parallel_size=4"]):
        path = tmp_path / f"overrides{len(extra)}.txt"
        path.write_text("\n".join(lines + extra) + "\n")
        code, out, err = cli("plan", "--from-bridge", str(path), "--hw", "h100", "--devices", "8", "--json")
        assert code == 0, err
        plans.append((json.loads(out), out))
    (base, _), (given, text) = plans
    assert given["throughput"]["step_time_s"] == base["throughput"]["step_time_s"]
    assert "model.expert_tensor_parallel_size): the model is dense" in text
