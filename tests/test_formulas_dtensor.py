"""`btacalc formulas --sequence-parallel --dtensor-tp` (twenty-fourth session): the listing shows the terms plan counts
under PyTorch FSDP2 beside TP (catalogue feature `dtensor_tp`, Layout.dtensor_tp), which it could not show before.
DTensor's ColwiseParallel hands wq/wk/wv and w1/w3 the gathered norm output, and the output layer gathers the final
norm's output; `mm` saves that whole tensor for dW (torchtitan parallelize_llama.py @ 820504e2), where Megatron-Core
and TransformerEngine save the rank's sequence shard: three stored tensors lose their 1/t."""

from __future__ import annotations

import json

import pytest
import sympy as sp

BASE = ("formulas", "-m", "llama-3-8b", "--sequence-parallel", "-q", "stored", "--recompute", "none", "--attention",
        "flash", "--json")


def _stored(cli, *extra: str) -> dict[str, sp.Expr]:
    code, out, err = cli(*BASE, *extra)
    assert code == 0, err
    names = {n: sp.Symbol(n) for n in ("G", "b", "s", "h", "t", "beta", "beta_s", "a", "a_kv", "d_h", "d_v", "f")}
    return {p["name"]: sp.sympify(p["formulas"][0]["formula"], locals=names)
            for p in json.loads(out)["phases"] if p["formulas"]}


def test_three_saved_inputs_lose_their_tp_split(cli):
    megatron, dtensor = _stored(cli), _stored(cli, "--dtensor-tp")
    G, b, s, h, t, beta, beta_s = sp.symbols("G b s h t beta beta_s")
    gathered_less_shard = G * b * s * h * (1 - 1 / t)  # the gathered tensor minus the rank's 1/t shard
    assert sp.simplify(dtensor["qkv_proj"] - megatron["qkv_proj"] - beta_s * gathered_less_shard) == 0
    assert sp.simplify(dtensor["mlp"] - megatron["mlp"] - beta_s * gathered_less_shard) == 0
    assert sp.simplify(dtensor["lm_head"] - megatron["lm_head"] - beta * gathered_less_shard) == 0
    assert {k for k in megatron if sp.simplify(dtensor[k] - megatron[k]) != 0} == {"qkv_proj", "mlp", "lm_head"}


def _listing_extra(megatron: dict[str, sp.Expr], dtensor: dict[str, sp.Expr], values: dict[str, int], layers: int):
    per_layer = sum((dtensor[k] - megatron[k]).subs(values) for k in ("qkv_proj", "mlp"))
    return layers * per_layer + (dtensor["lm_head"] - megatron["lm_head"]).subs(values)


def test_the_listing_sums_to_what_plan_adds(cli):
    """At Llama 3 8B, TP 8, s 8192, micro-batch 12, 16-bit (the layout review24 D1 measured): (2L + 1) s b h 2 (7/8)
    bytes more, 45.80 GB; the listing's per-layer terms x L plus the output layer's give the same."""
    megatron, dtensor = _stored(cli), _stored(cli, "--dtensor-tp")
    L, t, s, b, h = 32, 8, 8192, 12, 4096
    values = {"G": 1, "b": b, "s": s, "h": h, "t": t, "beta": 2, "beta_s": 2}
    extra = _listing_extra(megatron, dtensor, values, L)
    assert extra == (2 * L + 1) * s * b * h * 2 * 7 // 8
    assert float(extra) / 1e9 == pytest.approx(45.80, abs=0.005)


def test_the_listing_is_what_plan_stores(cli):
    """review26 D6: plan's stored bytes, FSDP2 x TP against Megatron-FSDP at one layout (Llama 3 8B on 64 H100-96GB,
    TP 8, s 8192, micro-batch 2, no recomputation), differ by the listing's terms at that layout."""
    stored = {}
    for impl in ("fsdp2", "megatron"):
        code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100-96gb", "--devices", "64", "--tp", "8", "--seq",
                             "8192", "--global-batch", "16", "--micro-batch", "2", "--fsdp", "--fsdp-impl", impl,
                             "--recompute", "none", "--json")
        assert code == 0, err
        stored[impl] = json.loads(out)["memory_bytes"]["stored_activations"]
    values = {"G": 1, "b": 2, "s": 8192, "h": 4096, "t": 8, "beta": 2, "beta_s": 2}
    assert stored["fsdp2"] - stored["megatron"] == _listing_extra(_stored(cli), _stored(cli, "--dtensor-tp"), values, 32)


@pytest.mark.parametrize("args, says", [
    (("-m", "llama-3-8b", "--dtensor-tp"), "it needs --sequence-parallel"),
    (("-m", "qwen3-30b-a3b", "--sequence-parallel", "--dtensor-tp"), "dense models"),
    (("-m", "llama-3-8b", "--sequence-parallel", "--dtensor-tp", "--loss", "torch_fp32"), "without tensor parallelism"),
    (("--dtensor-tp",), "give --model"),
    (("-m", "llama-3-8b", "--sequence-parallel", "--recompute", "op", "--attention", "flash"), "--dtensor-tp"),
    # review26 D2: torchtitan recomputes none, full or op, as plan refuses Megatron's modules under FSDP2
    (("-m", "llama-3-8b", "--sequence-parallel", "--dtensor-tp", "--recompute", "selective"), "give --recompute none"),
    (("-m", "llama-3-8b", "--sequence-parallel", "--dtensor-tp", "--recompute", "core_attn,mlp"), "module recomputation"),
])
def test_what_the_listing_refuses(cli, args, says):
    code, out, err = cli("formulas", *args)
    assert code == 2 and says in err, err
    assert len(err.strip().splitlines()) == 1


def test_the_op_policy_keeps_the_reduce_scatter_outputs(cli):
    """review25 E2: torchtitan's op policy saves the functional reduce-scatter, so wo's and w2's Shard(1) outputs
    (beta s G b h / t each) stay to the backward beside TP: the catalogue's `op_cache` terms, listed under DTensor."""
    code, out, err = cli("formulas", "-m", "llama-3-8b", "--sequence-parallel", "--dtensor-tp", "-q", "stored",
                         "--recompute", "op", "--attention", "flash", "--json")
    assert code == 0, err
    phases = {p["name"]: p["formulas"][0] for p in json.loads(out)["phases"] if p["formulas"]}
    for name in ("attn_out_proj", "mlp"):
        assert any("reduce-scatter" in term["tensor"] for term in phases[name]["terms"]), phases[name]["terms"]
