"""PyTorch FSDP1 (`--fsdp-impl torch`) as llm-foundry @ 5e85bd62d runs MPT: the memory of one rank as
the sum of named buffers, derived here by hand from MPT-30B's shape and torch's / Composer's code
(model/state.py TorchFsdp docstring cites each line):

    state     fp32 sharded flat parameter (the master copy, in the optimizer's 12 B) + fp32 gradient
              shard (4 B) + Adam moments; no 16-bit weight shard (`_mp_shard` is freed after the gather)
    blocks    2 gathered 16-bit blocks (limit_all_gathers: 2 in flight) + one block's 16-bit gradient +
              its copy in reduce_dtype (fp32 under Composer's DEFAULT, none under PURE)
    root      embedding + positions + final norm, gathered through the backward (the root is not
              resharded after the forward) with its 16-bit gradient
"""

from __future__ import annotations

import math

import pytest

from btacalc.config.execution import BatchLimits, ExecutionRequest
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.planning.measured import load_runs, predict
from btacalc.planning.plan import make_plan

# MPT-30B (llm-foundry @ 5e85bd62d scripts/train/yamls/pretrain/mpt-30b.yaml): d_model, n_layers,
# expansion_ratio 4, vocab, max_seq_len (learned positions: no alibi in the yaml; biases: no_bias unset)
H, L, V, S_MAX = 7168, 48, 50368, 2048
F = 4 * H
V_PAD = math.ceil(V / 128) * 128  # btacalc's plans pad the vocabulary to 128·TP (docs/memory.md)
# one MPTBlock (an FSDP unit): Wqkv 3h²+3h, out_proj h²+h, up h·f+f, down f·h+h, two LayerNorms 2h each
BLOCK = 3 * H * H + 3 * H + H * H + H + H * F + F + F * H + H + 2 * 2 * H
ROOT = V_PAD * H + S_MAX * H + 2 * H  # the root FSDP unit: wte (tied head), wpe, norm_f
N = L * BLOCK + ROOT
RANKS = 8


def _plan(impl: str, grad_bytes: int | None = None):
    return make_plan(resolve_model("mpt-30b"), resolve_hardware("a100-80gb"), ExecutionRequest(
        seq_len=2048, devices=RANKS, fsdp=True, fsdp_impl=impl, recompute="full", attention="flash",
        attention_kernel="triton-flash", gradient_bytes=grad_bytes,
        limits=BatchLimits(global_batch=504, micro_batch=3)))


def test_mpt_30b_unit_sizes_by_hand():
    assert BLOCK == 616_655_872 and ROOT == 376_190_976
    assert L * BLOCK + V * H + S_MAX * H + 2 * H == 29_975_214_080  # the llm-foundry table's NumParams


def test_torch_fsdp_buffers_of_mpt_30b_by_hand():
    mem = _plan("torch").memory_bytes
    shard = math.ceil(N / RANKS)
    assert mem["weights"] == 0  # the 16-bit shard exists only during the all-gather
    assert mem["gradients"] == 4 * shard
    assert mem["optimizer_state"] == (4 + 8) * shard  # fp32 flat parameter + exp_avg + exp_avg_sq
    blocks = (2 * 2 + 2 + 4) * BLOCK  # two gathered bf16 blocks, one bf16 gradient, its fp32 copy
    root = (2 + 2) * ROOT  # the root's bf16 parameters and gradient through the backward
    assert mem["gathered_weights"] == blocks + root == 7_671_322_624


def test_megatron_fsdp_is_unchanged_and_differs_by_the_named_buffers():
    torch_mem, megatron = _plan("torch").memory_bytes, _plan("megatron").memory_bytes
    shard = math.ceil(N / RANKS)
    assert megatron["weights"] == 2 * shard
    assert megatron["gathered_weights"] == 2 * (2 + 4) * BLOCK  # two double-buffered units, bf16 + fp32 grads
    state = ("weights", "gradients", "optimizer_state", "gathered_weights")
    saved = sum(megatron[k] for k in state) - sum(torch_mem[k] for k in state)
    assert saved == 2 * shard + 2 * BLOCK - 4 * ROOT


def test_pure_mixed_precision_reduces_in_bf16_without_a_copy():
    mem = _plan("torch", grad_bytes=2).memory_bytes
    assert mem["gradients"] == 4 * math.ceil(N / RANKS)  # FSDP1 keeps the gradient shard in fp32
    assert mem["gathered_weights"] == (2 * 2 + 2) * BLOCK + 4 * ROOT


def test_mpt_30b_on_8_a100_is_expressible_and_fits_at_its_published_micro_batch():
    run = next(r for r in load_runs() if r.id == "mpt-30b-a100-80gb-8-bf16-llmfoundry")
    result = predict(run)
    assert result.expressible, result.reason
    report = _plan("torch")
    assert report.memory_bytes["total"] <= report.memory_bytes["usable_capacity"]
    assert report.plan.fits and report.plan.tiles * report.plan.tile_batch == 3 and report.plan.micro_batches == 21
    megatron = _plan("megatron")
    assert megatron.memory_bytes["total"] > megatron.memory_bytes["usable_capacity"]


@pytest.mark.parametrize("args, fragment", [
    (["--fsdp-impl", "torch"], "it needs --fsdp"),
    (["--fsdp-impl", "megatron"], "it needs --fsdp"),  # else parsed and ignored
    (["--fsdp", "--fsdp-impl", "torch", "--tp", "2"], "no --tp"),
    (["--fsdp", "--fsdp-impl", "deepspeed"], "must be one of megatron, torch"),
])
def test_refused_where_it_makes_no_sense(cli, args, fragment):
    code, out, err = cli("plan", "--model", "mpt-7b", "--hw", "h100", "--devices", "8", "--seq", "2048", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("btacalc: error:") and fragment in err, err


def test_no_megatron_launch_for_a_pytorch_fsdp_plan(cli):
    code, out, err = cli("plan", "--model", "mpt-7b", "--hw", "h100", "--devices", "8", "--seq", "2048", "--fsdp",
                         "--fsdp-impl", "torch", "--emit", "megatron")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Megatron does not run" in err, err


@pytest.mark.parametrize("impl", ["megatron", "torch"])
def test_the_layout_holds_the_one_rule_a_named_implementation_needs_fsdp(impl):
    """Layout._validate_fsdp_impl is the rule the request path and a layout built in code both meet: naming
    whose FSDP shards a model that FSDP does not shard is refused there, not only on the command line."""
    from btacalc.config.execution import Layout
    from btacalc.errors import BtacalcError

    model, hw = resolve_model("mpt-7b"), resolve_hardware("h100")
    Layout(devices=8, devices_per_node=8).validate(model, hw, 2048)  # no implementation named: no FSDP, valid
    Layout(devices=8, devices_per_node=8, zero_stage=3, fsdp=True, fsdp_impl=impl).validate(model, hw, 2048)
    with pytest.raises(BtacalcError, match="it needs fsdp$"):
        Layout(devices=8, devices_per_node=8, fsdp_impl=impl).validate(model, hw, 2048)
