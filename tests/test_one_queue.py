"""CUDA_DEVICE_MAX_CONNECTIONS=1 under Megatron's merged 1F1B schedule: one hardware queue starts kernels in the order
they were launched (pytorch/pytorch issue 143890; NVIDIA/Megatron-LM pull 6311), so the forward dispatch, issued after
the backward MLP (model_chunk_schedule_plan.py L261-301 @ d98e8a64), waits for it (btacalc/model/gpu/merged_pair.py)."""

import json
import subprocess
import sys

import pytest

from btacalc.model.gpu.merged_pair import LayerNodes, NodeHost, host_pair_time, pair_time
from btacalc.planning.measured import predict
from btacalc.planning.run_file import load_runs

# one layer's nodes, seconds: pre-dispatch forward 1, its backward 2, the MLP's forward 1 and backward 2, each of the
# four all-to-all calls 1.5 (LayerNodes.of takes the layer's exchange, four calls)
NODES = dict(pre_forward=1.0, pre_backward=2.0, mlp_forward=1.0, mlp_backward=2.0, call=1.5)


def test_pair_with_many_queues_by_hand():
    # combine_bwd 0-1.5 beside pre_dispatch_fwd 0-1; mlp_bwd waits for combine_bwd: 1.5-3.5; dispatch_fwd waits for
    # pre_dispatch_fwd and its stream: 1.5-3.0; dispatch_bwd waits for mlp_bwd: 3.5-5.0; mlp_fwd waits for
    # dispatch_fwd and its stream: 3.5-4.5; combine_fwd for mlp_fwd and its stream: 5.0-6.5; pre_dispatch_bwd for
    # dispatch_bwd: 5.0-7.0. The pair ends at 7.0
    assert pair_time(LayerNodes(**NODES), False) == pytest.approx(7.0)


def test_one_queue_pair_by_hand():
    # as above, but each node starts no earlier than the node issued before it starts, and after a compute node no
    # earlier than its end: dispatch_fwd (issued after mlp_bwd) 3.5-5.0; the empty dw node at 3.5; dispatch_bwd 5.0-6.5;
    # mlp_fwd (waits for dispatch_fwd) 5.0-6.0; combine_fwd (its stream) 6.5-8.0; pre_dispatch_bwd (waits for
    # dispatch_bwd) 6.5-8.5. The pair ends at 8.5: 1.5 more, the forward dispatch's call no longer beside the MLP
    one = LayerNodes(**NODES, one_queue=True)
    assert pair_time(one, False) == pytest.approx(8.5)
    assert host_pair_time(one, NodeHost(sync=False), False) == pytest.approx(8.5)


def test_one_queue_never_faster_and_equal_without_exchange():
    for call in (0.0, 0.25, 1.0, 3.0):
        nodes = dict(NODES, call=call)
        many, one = pair_time(LayerNodes(**nodes), False), pair_time(LayerNodes(**nodes, one_queue=True), False)
        assert one >= many - 1e-12
    # no exchange: both are the four compute nodes back to back, 6
    assert pair_time(LayerNodes(**dict(NODES, call=0.0), one_queue=True), False) == pytest.approx(6.0)


def _plan(*extra):
    cmd = [sys.executable, "-m", "btacalc", "plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "-n", "16", "--ep", "8",
           "--tp", "2", "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_plan_option_times_the_overlap_and_is_stated():
    many = _plan("--overlap-a2a")
    one = _plan("--overlap-a2a", "--cuda-max-connections", "1")
    assert one["parallelism"]["cuda_max_connections"] == 1
    assert many["parallelism"]["cuda_max_connections"] is None
    assert "CUDA_DEVICE_MAX_CONNECTIONS > 1" in many["inputs"]["defaults"]["cuda_max_connections"]
    assert one["throughput"]["step_time_s"] > many["throughput"]["step_time_s"]
    # without the overlap nothing reads the queues: the same step
    plain = _plan()
    assert _plan("--cuda-max-connections", "1")["throughput"]["step_time_s"] == plain["throughput"]["step_time_s"]


@pytest.mark.parametrize("value", ["0", "33", "x"])
def test_bad_connections_one_line_exit_2(value):
    cmd = [sys.executable, "-m", "btacalc", "plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "-n", "16", "--ep", "8",
           "--overlap-a2a", "--cuda-max-connections", value]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_launch_carries_it_and_reads_back(tmp_path):
    cmd = [sys.executable, "-m", "btacalc", "plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "-n", "16", "--ep", "8",
           "--tp", "2", "--overlap-a2a", "--cuda-max-connections", "1", "--emit", "megatron"]
    launch = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in launch
    f = tmp_path / "launch.sh"
    f.write_text(launch)
    back = subprocess.run([sys.executable, "-m", "btacalc", "plan", "--from-megatron", str(f), "--hw", "h100",
                           "--json"], capture_output=True, text=True, check=True)
    assert json.loads(back.stdout)["parallelism"]["cuda_max_connections"] == 1


def test_the_model_zoo_row_runs_one_queue():
    # Megatron-MoE-ModelZoo @ 8017e112 model_configs/benchmarking/Qwen3-235B-A22B.yaml L2: CUDA_DEVICE_MAX_CONNECTIONS 1
    runs = {r.id: r for r in load_runs()}
    row = runs["qwen3-235b-a22b-h100-256-bf16-mzoo-deepep-1f1b-tp2-pp8-vp4-ep32"]
    assert row.recipe.overlaps.max_connections == 1
    many = row.model_copy(update={"recipe": row.recipe.model_copy(update={
        "overlaps": row.recipe.overlaps.model_copy(update={"max_connections": None})})})
    assert predict(row).predicted.step_time_s > predict(many).predicted.step_time_s
