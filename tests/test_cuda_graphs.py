"""Megatron's per-layer CUDA-graph scopes in the host-time model (btacalc/data/cuda_graph_scopes.toml,
config/cuda_graphs.py, model/gpu/costs.py; docs/host-time.md "CUDA-graph scopes"). Expected values are written
as the counts the catalogue's phases issue (model/gpu/fixed.py): a dense GEMM 3 launches (forward, data and
weight gradient), another phase with work 2, the fused attention core 2; a module call forward and backward; the
dense layer's glue 161 + 155 reference ops on qkv_proj, the MoE extra 195 + 140 on dispatch."""

from __future__ import annotations
import shlex

import json

import pytest

from btacalc.config.cuda_graphs import captured_counts, check_scopes, scopes
from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError
from btacalc.model.gpu.costs import ISSUED_COUNTS, layer_parts
from btacalc.model.gpu.fixed import host_time
from btacalc.model.problem import make_problem

NO_RERUN = RunOptions(seq_len=4096, attention="flash", gradient_bytes=4, recompute="none")


def _layer(model: str, hw: str, scope: tuple[str, ...] = (), **layout):
    p = make_problem(load_preset(model), resolve_hardware(hw), NO_RERUN, Layout(cuda_graph_scope=scope, **layout))
    (part,) = layer_parts(p, p.evaluate(1, 1))
    return p, part


def _host(p, part) -> float:
    return host_time(p, part.kernels, part.expert_gemms, part.module_calls, part.glue_ops)


def test_the_attn_scope_replays_a_layers_attention_from_two_graph_launches():
    """Qwen3-30B-A3B at EP 8 on a B200, no re-run. The attn scope (TransformerLayer._forward_attention) captures
    input_norm 2 + qkv_proj 3 (one GEMM) + qk_norm 2 + rope 2 + the fused core 2 + attn_out_proj 3 = 14 launches,
    the modules linear_qkv, linear_proj and core attention forward and backward (6 calls) and the dense layer's
    glue 161 + 155 = 316 reference ops; the graph adds one forward and one backward launch (TE graph.py Graphed).
    The 96 expert GEMMs and the grouped linears' per-expert Python stay eager. Host time falls by (14 - 2) x launch + 6 x module + 316 x op."""
    p, eager = _layer("qwen3-30b-a3b", "b200", (), devices=8, expert_parallel=8)
    _, graphed = _layer("qwen3-30b-a3b", "b200", ("attn",), devices=8, expert_parallel=8)
    assert graphed.kernels == pytest.approx(eager.kernels - 14 + 2)
    assert graphed.module_calls == pytest.approx(eager.module_calls - 6) == 4  # grouped fc1, fc2 x 2 passes
    # what stays: the MoE glue and the grouped linears' per-expert Python, 16 x 2 x (1.0 + 2.7) (tegrouped)
    assert graphed.glue_ops == pytest.approx(eager.glue_ops - 316)
    assert graphed.glue_ops == pytest.approx(195 + 140 + 16 * 2 * (1.0 + 2.7))
    assert graphed.expert_gemms == eager.expert_gemms == 16 * 2 * 3
    k = p.hardware.kernels
    drop = (14 - 2) * k.launch_overhead_s.value + 6 * k.module_host_s.value + 316 * k.eager_op_host_s.value
    assert _host(p, eager) - _host(p, graphed) == pytest.approx(drop)
    # the first forward: 6 of its launches go (input_norm, qkv, qk_norm, rope, core, out proj), the graph's 1 comes;
    # 3 of 5 module calls; the glue's forward 161 of 356
    assert graphed.kernels_fwd == pytest.approx(eager.kernels_fwd - 6 + 1)
    assert graphed.module_calls_fwd == pytest.approx(eager.module_calls_fwd - 3)
    assert graphed.glue_ops_fwd == pytest.approx(eager.glue_ops_fwd - 161)
    # GPU time is unchanged: the graph replays the same kernels
    assert graphed.compute_s == pytest.approx(eager.compute_s) and graphed.backward_s == pytest.approx(eager.backward_s)


def test_the_router_scopes_replace_seven_launches_by_two():
    """moe_router captures the pre-MLP norm (2) and the router (its gating GEMM, 3; a functional call, no module);
    moe_preprocess the dispatcher's first permutation (2 launches), whose glue stays eager (measured whole). 7
    launches become 2: host time 5 launches less, module calls and glue unchanged. With attn too, one graph per
    layer still: 14 + 7 launches become 2."""
    p, eager = _layer("qwen3-30b-a3b", "b200", (), devices=8, expert_parallel=8)
    _, router = _layer("qwen3-30b-a3b", "b200", ("moe_router", "moe_preprocess"), devices=8, expert_parallel=8)
    assert router.kernels == pytest.approx(eager.kernels - 7 + 2)
    assert (router.module_calls, router.glue_ops) == pytest.approx((eager.module_calls, eager.glue_ops))
    assert _host(p, eager) - _host(p, router) == pytest.approx(5 * p.hardware.kernels.launch_overhead_s.value)
    _, both = _layer("qwen3-30b-a3b", "b200", ("attn", "moe_router", "moe_preprocess"), devices=8, expert_parallel=8)
    assert both.kernels == pytest.approx(eager.kernels - 14 - 7 + 2)
    # the graph runs before the dispatcher's sync: nothing moves in the post-sync part
    assert both.kernels_post == pytest.approx(eager.kernels_post)


def test_the_mlp_scope_captures_a_dense_layers_mlp_and_not_an_moe_layers():
    """Llama-3-8B: mlp captures post_attn_norm (2) and the SwiGLU MLP (W_gate_up, W_down: 2 x 3 launches, 2
    modules x 2 passes); the glue (on qkv_proj) stays. In an MoE layer mlp captures nothing (Megatron: 'for a
    dense layer'), and moe_router nothing in a dense layer."""
    p, eager = _layer("llama-3-8b", "h100", (), devices=8)
    _, mlp = _layer("llama-3-8b", "h100", ("mlp",), devices=8)
    assert mlp.kernels == pytest.approx(eager.kernels - 8 + 2)
    assert mlp.module_calls == pytest.approx(eager.module_calls - 4)
    assert mlp.glue_ops == pytest.approx(eager.glue_ops) == 161 + 155
    _, moe_mlp = _layer("qwen3-30b-a3b", "b200", ("mlp",), devices=8, expert_parallel=8)
    _, moe_eager = _layer("qwen3-30b-a3b", "b200", (), devices=8, expert_parallel=8)
    assert all(getattr(moe_mlp, n) == pytest.approx(getattr(moe_eager, n)) for n in ISSUED_COUNTS)
    _, dense_router = _layer("llama-3-8b", "h100", ("moe_router", "moe_preprocess"), devices=8)
    assert dense_router.kernels == pytest.approx(eager.kernels)


def test_the_scope_table_names_catalogue_phases_with_sources():
    """Every phase a scope names is a phase of the catalogue in the group its layer kind needs (moe scopes name
    no attention phase, attn no moe phase), every scope has its source, and the expressible ones are Megatron's
    attn, mlp, moe_router, moe_preprocess (554ce493 arguments.py L1531 lists them with moe, mamba,
    full_iteration, which btacalc refuses)."""
    from btacalc.catalogue.terms import load_catalogue

    catalogue = {p.name: p for p in load_catalogue()}
    table = scopes()
    for s in table.values():
        assert s.source
        assert set(s.phases) <= set(catalogue), s.name
        assert set(s.counts) <= set(ISSUED_COUNTS)
    assert {n for n, s in table.items() if s.refused is None} == {"attn", "mlp", "moe_router", "moe_preprocess"}
    assert {catalogue[p].group for p in table["attn"].phases} <= {"norm", "attention"}
    assert {catalogue[p].group for p in table["moe_router"].phases} <= {"norm", "moe"}
    assert captured_counts(("moe_router",), ["router", "post_attn_norm"], moe_layer=False) == {}


@pytest.mark.parametrize("given, says", [
    (("bogus",), "not a CUDA-graph scope"), (("moe_preprocess",), "must be given with moe_router"),
    (("moe",), "drop-and-pad"), (("full_iteration",), "whole-iteration"), (("attn", "attn"), "twice")])
def test_a_scope_btacalc_cannot_express_is_one_line(given, says):
    with pytest.raises(BtacalcError, match=says):
        check_scopes(given)
    assert check_scopes(("attn", "moe_router", "moe_preprocess")) == ("attn", "moe_router", "moe_preprocess")


def test_the_plan_option_refuses_an_unknown_scope_in_one_line(cli):
    code, _, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--ep", "8",
                       "--global-batch", "512", "--micro-batch", "1", "--cuda-graph-scope", "attn,bogus")
    assert code == 2 and "--cuda-graph-scope 'bogus'" in err and len(err.strip().splitlines()) == 1


def test_scopes_are_emitted_for_megatron_and_read_back(cli, tmp_path):
    """--emit megatron writes --cuda-graph-impl transformer_engine and the scopes under Megatron-LM d98e8a64's
    name (--cuda-graph-modules); reading the launch back, or one with the releases' --cuda-graph-scope, gives the
    same scopes; a whole-layer graph is planned without graphs and says so."""
    base = ("plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--ep", "8", "--global-batch",
            "512", "--micro-batch", "1")
    code, out, err = cli(*base, "--cuda-graph-scope", "attn,moe_router,moe_preprocess", "--emit", "megatron")
    assert code in (0, 1), err
    flat = " ".join(out.replace("\\\n", " ").split())
    assert "--cuda-graph-impl transformer_engine" in flat and "--cuda-graph-modules attn moe_router moe_preprocess" in flat
    for text in (out, out.replace("--cuda-graph-modules", "--cuda-graph-scope")):
        launch = tmp_path / "launch.sh"
        launch.write_text(text)
        code, js, err = cli("plan", "--from-megatron", str(launch), "--hw", "b200", "--devices", "8", "--json")
        assert code in (0, 1), err
        assert json.loads(js)["parallelism"]["cuda_graph_scope"] == ["attn", "moe_router", "moe_preprocess"]
    from btacalc.config.megatron_codec import ROWS, decode

    row = tuple(r for r in ROWS if r.name == "cuda graphs")
    fields, _ = decode({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope_deprecated": ["full"]}, row)
    assert "layout.cuda_graph_scope" not in fields and "planned without CUDA graphs" in fields["run.cuda_graph_note"]
    fields, _ = decode({"cuda_graph_impl": "none"}, row)
    assert fields == {}


def test_a_run_file_sets_the_scopes(cli, tmp_path):
    """A TOML run file's `cuda-graph-scope` key is the plan option (comma-separated scopes)."""
    run = tmp_path / "run.toml"
    run.write_text('model = "qwen3-30b-a3b"\nhw = "b200"\ndevices = 8\nep = 8\nglobal-batch = 512\n'
                   'micro-batch = 1\ncuda-graph-scope = "attn,moe_router,moe_preprocess"\n')
    code, js, err = cli("plan", "--config", str(run), "--json")
    assert code in (0, 1), err
    assert json.loads(js)["parallelism"]["cuda_graph_scope"] == ["attn", "moe_router", "moe_preprocess"]


def test_bridge_overrides_carry_the_scopes_both_ways(cli):
    """--emit bridge writes model.cuda_graph_impl and model.cuda_graph_modules; a recipe's overrides with the
    releases' field model.cuda_graph_scope (the perf configs' cuda_graph_scope=[...]) read back as the scopes."""
    from btacalc.config.bridge_run import import_bridge

    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--ep", "8",
                         "--global-batch", "512", "--micro-batch", "1", "--cuda-graph-scope", "moe_router,moe_preprocess",
                         "--emit", "bridge")
    assert code in (0, 1), err
    # a shell's words; bridgeparse: the comm_overlap section is written `++key=value`
    data = {key.removeprefix("++"): value for key, value in
            (word.partition("=")[::2] for word in shlex.split(out, comments=True))}
    assert data["model.cuda_graph_impl"] == "transformer_engine"
    assert data["model.cuda_graph_modules"] == "[moe_router,moe_preprocess]"  # Hydra's list of two strings
    for key in ("model.cuda_graph_modules", "model.cuda_graph_scope"):
        text = "\n".join(f"{key if k == 'model.cuda_graph_modules' else k}: {v}" for k, v in data.items())
        run = import_bridge(text, "r.yaml", 8)
        assert run.request.cuda_graph_scope == ("moe_router", "moe_preprocess"), key
