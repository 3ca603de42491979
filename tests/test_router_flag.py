"""--emit megatron writes the router whose weights the model uses, as Megatron-LM computes them (freshuser17 left it:
every softmax router was written with --moe-router-pre-softmax, so a Qwen3 launch trained unnormalised weights).

Megatron-LM @ d98e8a64 megatron/core/transformer/moe/moe_utils.py L900-914: with --moe-router-pre-softmax the
softmax runs over all E logits and the top k of those probabilities are the weights (they sum to less than 1: OLMoE,
norm_topk_prob false); without it the top k logits are taken and the softmax runs over them, so the weights sum to 1:
softmax-then-top-k-then-divide-by-the-sum (Qwen3, Mixtral: norm_topk_prob true) gives the same numbers, and so does
GPT-OSS's top-k-then-softmax. Sigmoid scores are always renormalised for k > 1 (L929).
"""

from __future__ import annotations

import math

import pytest

from btacalc.config.megatron_model_rows import _dec_router, _enc_router


def _weights_pre_softmax(logits, k):
    e = [math.exp(x) for x in logits]
    p = [x / sum(e) for x in e]
    return sorted(p, reverse=True)[:k]


def _weights_topk_then_softmax(logits, k):
    top = sorted(logits, reverse=True)[:k]
    e = [math.exp(x) for x in top]
    return [x / sum(e) for x in e]


def _weights_softmax_renormalised(logits, k):
    top = _weights_pre_softmax(logits, k)
    return [x / sum(top) for x in top]


def test_megatrons_default_router_is_the_renormalised_softmax():
    logits, k = [0.3, -1.2, 2.0, 0.7, 1.1, -0.4], 2
    assert _weights_topk_then_softmax(logits, k) == pytest.approx(_weights_softmax_renormalised(logits, k))
    assert sum(_weights_pre_softmax(logits, k)) < 0.9  # pre-softmax: not renormalised


@pytest.mark.parametrize("router, renormalize, flags", [
    ("softmax", True, {}),  # Qwen3, Mixtral: Megatron's default
    ("softmax", False, {"moe_router_pre_softmax": True}),  # OLMoE
    ("topk_softmax", False, {}),  # GPT-OSS: top-k then softmax is Megatron's default
    ("sigmoid", True, {"moe_router_score_function": "sigmoid"}),  # DeepSeek-V3
])
def test_the_router_flags(router, renormalize, flags):
    fields = {"model.num_experts": 8, "model.router": router, "model.router_renormalize": renormalize}
    assert _enc_router(fields) == flags


def test_a_launch_reads_back_the_weights_it_trains():
    def read(args):
        return _dec_router(lambda name: args.get(name))
    assert read({})["model.router"] == "softmax" and read({})["model.router_renormalize"] is True
    pre = read({"moe_router_pre_softmax": True})
    assert (pre["model.router"], pre["model.router_renormalize"]) == ("softmax", False)
    sig = read({"moe_router_score_function": "sigmoid"})
    assert (sig["model.router"], sig["model.router_renormalize"]) == ("sigmoid", True)


def test_emitted_qwen3_launch_has_no_pre_softmax(cli):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16",
                         "--emit", "megatron")
    assert code == 0, err
    assert "--moe-router-pre-softmax" not in out and "--moe-router-topk 8" in out
    code, out, err = cli("plan", "--model", "olmoe-1b-7b", "--hw", "h100", "--devices", "8", "--ep", "8",
                         "--emit", "megatron")
    assert code == 0, err
    assert "--moe-router-pre-softmax" in out and "does not renormalise" not in out
