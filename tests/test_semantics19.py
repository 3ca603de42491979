"""semantics19: does the launch btacalc emits build the model it planned? Each expectation is derived from the pinned
sources, not from btacalc's output: TransformerEngine @ d0067d0 (the attention window, context-parallel attention),
Megatron-Bridge @ 067f987d (its providers' conversions)."""

from __future__ import annotations

import json
import re

from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset


def _emit(cli, given: str, kind: str = "megatron") -> str:
    code, out, err = cli("plan", *given.split(), "--emit", kind)
    assert code in (0, 1), err
    return out


def _keys_attended(left: int, right: int, i: int) -> int:
    """Keys a causal query at position i sees under TransformerEngine's window_size (left, right): those in
    [i - left, i + right] inclusive (TE @ d0067d0 pytorch/attention/dot_product_attention/utils.py L1780-1782),
    of the keys 0..i the causal mask leaves."""
    return len(range(max(0, i - left), min(i, i + right) + 1))


# --- the sliding window: w keys are TransformerEngine's (w - 1, 0) ------------------------------------------------

def test_the_emitted_window_attends_to_the_models_w_keys(cli, tmp_path):
    w = load_preset("gpt-oss-20b").sliding_window  # Hugging Face's sliding_window: keys per query, itself included
    given = "--model gpt-oss-20b --hw h100 --devices 8 --ep 8"
    launch = _emit(cli, given)
    left, right = map(int, re.search(r"--window-size '\((-?\d+),(-?\d+)\)'", launch).groups())
    assert _keys_attended(left, right, i=10 * w) == w  # (w, 0), as emitted before, attended to w + 1
    # read back, the same plan
    path = tmp_path / "g.sh"
    path.write_text(launch)
    plans = []
    for args in (given.split(), ["--from-megatron", str(path), "--hw", "h100"]):
        code, out, err = cli("plan", *args, "--json")
        assert code in (0, 1), err
        plans.append({k: json.loads(out)[k] for k in ("memory_bytes", "flops_per_step", "throughput", "phases")})
    assert plans[0] == plans[1]
    # Megatron-Bridge's own conversion of the same config: (sliding_window - 1, 0) (gpt_oss_bridge.py L87)
    bridge = _emit(cli, "--model gpt-oss-20b --hw h100 --devices 8 --ep 8", "bridge")
    assert f"model.window_size=[{w - 1},0]" in bridge.replace(" ", "")


def test_a_launch_window_reads_back_as_the_keys_it_attends_to():
    base = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 8 "
            "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 8 --bf16 "
            "--vocab-size 32000 ")
    # Bridge's GPT-OSS provider writes (127, 0) for the model's 128 (conversion/utils.py L27-39: HF = left + 1)
    assert import_megatron(base + "--window-size '(127,0)'\n", "w.sh").model.sliding_window == _keys_attended(127, 0, 999)
    # (-1, 0) is TransformerEngine's causal attention without a window (utils.py L1808)
    assert import_megatron(base + "--window-size '(-1,0)'\n", "n.sh").model.sliding_window == 0
