"""review18: a second engineer's review of the lead's fifth and sixth sessions (docs/story.md 'review18')."""

from __future__ import annotations

import numpy as np
import pytest

from btacalc.config.presets import load_preset


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64, np.uint32, np.uint16])
def test_the_memoised_group_walk_gives_each_groups_scalar_answer_for_any_integer_dtype(dtype):
    # _per_distinct_group keys (size, stride, devices) in one int64 and _distinct reads the key's bytes as int64: an
    # unsigned 64-bit array promoted the key to float64, and every group read back as another (local_members 1 for
    # groups of 2, 4 and 8 in one 8-GPU domain)
    from btacalc.model.gpu.collectives import domains_spanned, local_members

    size, stride, devices = (np.array(v, dtype=dtype) for v in ([2, 4, 8, 16, 4], [1, 2, 1, 1, 4], [16, 16, 16, 32, 64]))
    for walk in (local_members, domains_spanned):
        got = walk(size, stride, devices, 8)
        want = [walk(int(n), int(k), int(d), 8) for n, k, d in zip(size, stride, devices)]
        assert np.asarray(got).tolist() == want, walk.__name__


def _bridge_overrides(cli, model):
    code, out, err = cli("plan", "--model", model, "--hw", "h100", "--devices", "8", "--ep", "8", "--emit", "bridge")
    assert code in (0, 1), err
    return dict(line.split("=", 1) for line in out.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize("model, score, pre", [("qwen3-30b-a3b", "softmax", "False"), ("olmoe-1b-7b", "softmax", "True"),
                                               ("deepseek-v3", "sigmoid", "False")])
def test_emit_bridge_states_the_router_over_a_recipes_provider(cli, model, score, pre):
    # Bridge overrides apply over a recipe's model provider, and providers set their own router (Megatron-Bridge @
    # 067f987d olmoe_provider.py L89, deepseek_v2_bridge.py L57, kimi_bridge.py L58: moe_router_pre_softmax = True):
    # a Qwen3 plan's overrides said nothing, so such a recipe trained the unnormalised top-k weights that
    # --emit megatron stopped writing (07758c0). Each router field is stated, and read back as written.
    from btacalc.config.megatron_model_rows import _dec_router
    from btacalc.config.bridge_codec import from_bridge
    from btacalc.config.bridge_hydra import read_overrides

    given = _bridge_overrides(cli, model)
    assert (given["model.moe_router_score_function"], given["model.moe_router_pre_softmax"]) == (score, pre)
    assert given["model.moe_shared_expert_gate"] == "False"
    # review19: the aux-loss-free routing bias is off for a softmax router (Megatron refuses it there,
    # transformer_config.py L2617-2625); semantics20: a sigmoid router states the model's (DeepSeek-V3's noaux_tc: on)
    assert given.get("model.moe_router_enable_expert_bias") == str(load_preset(model).router_score_bias)
    args, _ = from_bridge(read_overrides("\n".join(f"{k}={v}" for k, v in given.items()), "overrides"))
    read = _dec_router(args.get)
    assert read["model.router"] == score and read["model.router_renormalize"] is (pre == "False")


def test_a_dense_plans_bridge_overrides_state_no_router(cli):
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--emit", "bridge")
    assert code in (0, 1), err  # (a plan that does not fit is emitted too)
    assert "model.num_layers=32" in out  # the overrides were written
    assert "moe_router" not in out and "moe_shared_expert_gate" not in out


@pytest.mark.parametrize("emit, reader", [("megatron", "--from-megatron"), ("bridge", "--from-bridge")])
def test_a_gpt_oss_launch_reads_back_its_routers_tensors(cli, tmp_path, emit, reader):
    # 07758c0 read every launch without --moe-router-pre-softmax as the renormalised "softmax" router (the same
    # weights), so gpt-oss-20b's top-k-then-softmax router read back with the softmax router's saved tensors: the
    # preset of the launch's shape says which of the two computations it is
    import json

    shape = ("--hw", "h100", "--devices", "8")
    code, launch, err = cli("plan", "--model", "gpt-oss-20b", *shape, "--ep", "8", "--emit", emit)
    assert code in (0, 1), err
    (tmp_path / "launch").write_text(launch, encoding="utf-8")
    code, planned, err = cli("plan", "--model", "gpt-oss-20b", *shape, "--ep", "8", "--json")
    code, read, err = cli("plan", reader, str(tmp_path / "launch"), *shape, "--json")
    assert code in (0, 1), err
    phases = [{p["name"]: p["stored_activation_bytes"] for p in json.loads(out)["phases"]} for out in (planned, read)]
    assert phases[1]["router"] == phases[0]["router"]
    assert json.loads(read)["memory_bytes"]["stored_activations"] == json.loads(planned)["memory_bytes"]["stored_activations"]
