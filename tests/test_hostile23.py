"""hostile23: launches Megatron-LM reads one way and btacalc read another (the readers' integer tests on a launch's
strings, a router score btacalc does not model). Megatron-LM @ d98e8a64:
- megatron/training/arguments.py L1648-1649: `if args.num_experts == 0: args.num_experts = None` (a dense model);
- megatron/core/transformer/transformer_config.py L808: moe_router_score_function softmax, sigmoid or sqrtsoftplus.
"""

from __future__ import annotations

import pytest

from btacalc.config.megatron_launch import read_launch
from btacalc.config.megatron_run import import_megatron
from btacalc.config.megatron_rules import violations
from btacalc.errors import BtacalcError

DENSE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 "
         "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --bf16 "
         "--vocab-size 1000 --tensor-model-parallel-size 2")
MOE = " --swiglu --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512 --disable-bias-linear --sequence-parallel"


def test_num_experts_0_is_a_dense_launch_as_megatron_reads_it():
    """The rules took the string "0" as true: this dense launch at TP 2 (no sequence parallelism, Megatron's default
    biases) was refused "Megatron-LM would refuse this launch: biases in MoE layers ...", which Megatron runs."""
    run = import_megatron(DENSE + " --num-experts 0\n", "l.sh", devices=None)
    assert run.model.num_experts == 0 and run.request.tensor_parallel == 2
    args = read_launch(DENSE + " --num-experts 0\n", "l.sh").args
    assert violations(dict(args, world=8), {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}) == []


def test_a_sqrtsoftplus_router_is_refused_not_planned_as_softmax():
    """It was planned as btacalc's softmax router without a word (and, beside --moe-router-enable-expert-bias, refused
    "needs the sigmoid router", which Megatron accepts)."""
    text = DENSE + MOE + " --moe-router-score-function {}\n"
    assert import_megatron(text.format("sigmoid"), "l.sh").model.router == "sigmoid"
    with pytest.raises(BtacalcError, match="--moe-router-score-function sqrtsoftplus: btacalc models the softmax and "
                                           "sigmoid routers"):
        import_megatron(text.format("sqrtsoftplus"), "l.sh")
    with pytest.raises(BtacalcError, match="sqrtsoftplus"):
        import_megatron(text.format("sqrtsoftplus --moe-router-enable-expert-bias"), "l.sh")


def test_a_shared_expert_width_of_0_is_refused_with_megatrons_reason():
    """transformer_config.py L1813-1819 raises on a width of 0 or less; the reader took "0" as a shared expert (and, with
    Megatron's default biases, refused it for the bias)."""
    with pytest.raises(BtacalcError, match="--moe-shared-expert-intermediate-size must be positive"):
        import_megatron(DENSE + MOE + " --moe-shared-expert-intermediate-size 0\n", "l.sh")
