"""PyTorch FSDP2 with tensor parallelism, as torchtitan runs "2-D" training (`--fsdp --fsdp-impl fsdp2 --tp T`), written
as its derivation from the code (pytorch/torchtitan @ 820504e2, the commit of the asyncTP benchmark's versions table,
torchtitan/models/llama3/parallelize_llama.py):

- L67-73, L123-203 apply_tp: the block's norms SequenceParallel, wq/wk/wv/w1/w3 ColwiseParallel, wo/w2 RowwiseParallel
  with Shard(1) outputs (sequence parallel), the embedding RowwiseParallel, the output ColwiseParallel (loss parallel);
- L90-98, L344-367 apply_fsdp: fully_shard per block and the root over the data-parallel mesh ("dp_shard_cp"), after
  apply_tp: FSDP2 shards each DTensor's local (TP) shard over the DP = devices / TP ranks, the blocks but the last
  resharded after the forward: 3 L + 1 collectives per micro-batch, as with TP 1 (tests/test_fsdp2_copies.py);
- L181-184, L190-193: PrepareModuleInput gathers the block's Shard(1) input to Replicate before the column-parallel
  linears, and autograd keeps that gathered tensor for the weight gradient: no second gather in the backward
  (Megatron-Core and TransformerEngine save the sequence shard and gather it again, formulas/constants.toml
  sp_backward_regather);
- L218-227: the per-op policy saves the functional reduce-scatter's output, so its re-run repeats no reduce-scatter.

Llama 3 8B on 64 H100 96GB, FSDP 8 x TP 8 (the asyncTP benchmark's layout): per layer q 4096 x 4096, k and v 4096 x 1024
each, o 4096 x 4096, gate, up and down 3 x 4096 x 14,336 split 8 ways, two RMSNorm weights of 4096 whole on every TP
rank (SequenceParallel replicates them); the embedding and the output layer split 8 ways over the vocabulary, padded
as btacalc pads it under TP (128,256 -> 129,024 = a multiple of 128 x 8).
"""

from __future__ import annotations

import json
import math

import pytest

from btacalc.config.hardware import resolve_hardware

H, KV, F, L, V_PAD, TP, DEVICES = 4096, 1024, 14336, 32, 129_024, 8, 64
DP = DEVICES // TP
SPLIT_PER_LAYER = H * H + 2 * H * KV + H * H + 3 * H * F  # the linears, split over TP
BLOCK = SPLIT_PER_LAYER // TP + 2 * H  # one block's parameters on a device
ROOT = 2 * V_PAD * H // TP + H  # embedding and output shards, the final norm whole
P_DEV = L * BLOCK + ROOT
SEQ, MICRO = 8192, 12


def _plan(cli, *extra: str) -> dict:
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100-96gb", "--devices", str(DEVICES), "--tp", str(TP),
                         "--seq", str(SEQ), "--global-batch", str(DP * MICRO), "--micro-batch", str(MICRO),
                         "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def _fsdp2(cli, *extra: str) -> dict:
    return _plan(cli, "--fsdp", "--fsdp-impl", "fsdp2", *extra)


def _rows(plan: dict) -> dict:
    return {c["name"]: c for c in plan["throughput"]["collectives"]}


def _ring(n: int) -> float:
    return (n - 1) / n


def test_the_device_holds_its_tp_shard_and_fsdp_shards_it_over_dp(cli):
    plan = _fsdp2(cli, "--recompute", "full")
    assert plan["parallelism"]["data_parallel"] == DP and plan["parallelism"]["fsdp_impl"] == "fsdp2"
    assert P_DEV == 1_004_802_048
    mem = plan["memory_bytes"]
    # TorchFsdp: no 16-bit weight shard, the fp32 flat shard's gradient (4 B) and Adam's 12 B, over DP ranks
    assert mem["weights"] == 0
    assert mem["gradients"] == 4 * math.ceil(P_DEV / DP)
    assert mem["optimizer_state"] == 12 * math.ceil(P_DEV / DP)
    # two gathered 16-bit blocks, one block's 16-bit gradient and its fp32 copy; the root's 16-bit weights and gradient
    assert mem["gathered_weights"] == (2 * 2 + 2 + 4) * BLOCK + (2 + 2) * ROOT
    assert mem["global_buffer"] == 0  # no Megatron-Core buffer: DTensor gathers into ordinary tensors


def test_the_fsdp_collectives_are_the_ring_share_of_the_tp_shard_over_dp_one_rank_per_node(cli):
    plan = _fsdp2(cli, "--recompute", "full")
    row = _rows(plan)["zero_per_micro_batch_dense"]
    m = plan["parallelism"]["micro_batches"]
    assert row["ranks"] == DP and row["calls"] == m * (3 * L + 1)
    # TP fills the 8-GPU node, so the DP group (stride TP) has one rank per node: the network ring
    assert row["link"] == "network"
    # per micro-batch two bf16 all-gathers and one fp32 reduce-scatter of the device's shard, each moving (DP-1)/DP
    assert row["message_bytes"] * row["calls"] == pytest.approx(m * _ring(DP) * P_DEV * (2 * 2 + 4), rel=1e-12)
    # Megatron-FSDP at the same layout moves the same bytes over the same group and link (its buckets, not 3L + 1)
    megatron = _rows(_plan(cli, "--fsdp", "--recompute", "full"))["zero_per_micro_batch_dense"]
    assert (megatron["ranks"], megatron["link"]) == (DP, "network")
    assert megatron["message_bytes"] * megatron["calls"] == pytest.approx(row["message_bytes"] * row["calls"],
                                                                          rel=1e-12)


def test_the_fsdp2_copies_are_of_the_device_shard(cli):
    plan = _fsdp2(cli, "--recompute", "full")
    gathered = (L - 1) * 2 * BLOCK + BLOCK + ROOT  # blocks 0..L-2 twice, the last block and the root once
    copy_bytes = gathered * (2 + 2) + P_DEV * (2 + 4)  # copy-out read + write; copy-in bf16 read, fp32 written
    hbm = resolve_hardware("h100-96gb").memory.streaming_bandwidth_bytes_per_s()
    th = plan["throughput"]
    m = plan["parallelism"]["micro_batches"]
    assert th["phase_share"]["fsdp2_copies"] * th["step_time_s"] == pytest.approx(m * copy_bytes / hbm, rel=1e-9)


def test_tp_collectives_are_megatrons_sequence_parallel_ones_less_the_backward_regather(cli):
    # per layer and micro-batch, in units of one s·b·h bf16 activation (x (TP-1)/TP per rank), full recompute:
    # Megatron: the two column-parallel inputs gather forward, again in the re-run and again for dW, and reduce-scatter
    # their gradient (4 each); the two row-parallel outputs reduce-scatter forward and in the re-run and gather their
    # gradient (3 each): 14. torchtitan: no gather for dW: 12.
    fsdp2 = _rows(_fsdp2(cli, "--recompute", "full"))["tensor_parallel"]
    megatron = _rows(_plan(cli, "--fsdp", "--recompute", "full"))["tensor_parallel"]
    unit = MICRO * SEQ * H * 2 * _ring(TP)
    assert fsdp2["message_bytes"] == megatron["message_bytes"] == pytest.approx(unit, rel=1e-12)
    assert (megatron["calls"], fsdp2["calls"]) == (L * 14, L * 12)
    assert (fsdp2["ranks"], fsdp2["link"]) == (TP, "nvlink")


def test_the_per_op_policy_reruns_the_gathers_and_takes_the_reduce_scatters_from_its_cache(cli):
    # re-run: both column-parallel gathers (not on the save list), neither row-parallel reduce-scatter (on it):
    # in 2 x (1 + 1 + 1), out 2 x (1 + 1) = 10 per layer
    op = _rows(_fsdp2(cli, "--recompute", "op"))["tensor_parallel"]
    assert op["calls"] == L * 10


def test_async_tp_hides_the_fused_collectives_and_exposes_the_unfused_gradient_reduce_scatters(cli):
    vanilla = _fsdp2(cli, "--recompute", "full", "--no-tp-comm-overlap")
    asynchronous = _fsdp2(cli, "--recompute", "full", "--tp-comm-overlap")
    assert asynchronous["parallelism"]["overlaps"]["tp_comm"] and asynchronous["parallelism"]["tp_overlap_table"] is None
    row = _rows(asynchronous)["tensor_parallel"]
    c = row["time_s"] / row["calls"]  # one collective (they are all the same size)

    def exposed(plan: dict) -> float:
        th = plan["throughput"]
        return th["phase_share"]["tp_comm"] * th["step_time_s"]

    # the raw traffic is the same; each layer still shows its two data-gradient reduce-scatters (a sum of mms feeds
    # them: not fused), and at most what vanilla TP shows
    assert asynchronous["throughput"]["communication_s"]["tp_comm"] == vanilla["throughput"]["communication_s"]["tp_comm"]
    assert exposed(vanilla) == pytest.approx(vanilla["throughput"]["communication_s"]["tp_comm"], rel=1e-12)
    assert 2 * L * c < exposed(asynchronous) < exposed(vanilla)
    # no TransformerEngine userbuffers workspace in the memory
    assert asynchronous["memory_bytes"]["total"] == vanilla["memory_bytes"]["total"]


def test_the_async_tp_table_is_ring_exchange_without_sm_margins():
    from btacalc.model.gpu.tp_overlap import ASYNC_TP_OVERLAPS, ASYNC_TP_UNFUSED

    assert {o.name for o in ASYNC_TP_OVERLAPS} == {"qkv_fprop", "fc1_fprop", "proj_fprop", "fc2_fprop", "proj_dgrad",
                                                   "fc2_dgrad"}
    assert all(o.method == "ring_exchange" and o.num_sm == 0 and not o.set_sm_margin for o in ASYNC_TP_OVERLAPS)
    assert ASYNC_TP_UNFUSED == ("qkv_dgrad", "fc1_dgrad")


@pytest.mark.parametrize("extra, says", [
    (("--fsdp-impl", "fsdp2", "--pp", "2"), "no --pp, --cp, --ep or --etp"),
    (("--fsdp-impl", "fsdp2", "--cp", "2"), "no --pp, --cp, --ep or --etp"),
    (("--fsdp-impl", "torch"), "FSDP1 (--fsdp-impl torch) no --tp"),
    (("--fsdp-impl", "fsdp2", "--no-sequence-parallel"), "it needs --sequence-parallel"),
    (("--fsdp-impl", "fsdp2", "--loss", "torch_fp32"), "loss-parallel cross-entropy"),
])
def test_what_stays_refused(cli, extra, says):
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--fsdp", "--tp", "2", *extra)
    assert code == 2 and says in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("impl, search", [("fsdp2", ()), ("torch", ()), ("torch", ("--search",))])
def test_tp_comm_overlap_without_tp_stays_refused_under_pytorch_fsdp(cli, impl, search):
    # review24: the refusal names async TP and what it needs, not "a PyTorch FSDP run has none" (an FSDP2 search
    # with TP free ranks TP > 1 only: tests/test_search_tp_overlap.py)
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--fsdp", "--fsdp-impl",
                         impl, "--tp-comm-overlap", *search)
    assert code == 2 and "torchtitan's async TP" in err and "--fsdp-impl fsdp2 and --tp > 1" in err, err
    assert len(err.strip().splitlines()) == 1


def test_an_moe_model_beside_tp_is_refused_naming_its_experts(cli):
    # review24: the implicit ETP = TP tripped "no --pp, --cp or --ep", options the user never gave
    code, out, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--fsdp", "--fsdp-impl",
                         "fsdp2", "--tp", "2")
    assert code == 2 and "experts" in err and "1-D FSDP2" in err, err
    assert len(err.strip().splitlines()) == 1


def _memory(cli, impl: str, recompute: str, micro: int) -> dict:
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100-96gb", "--devices", str(DEVICES), "--tp", str(TP),
                         "--seq", str(SEQ), "--global-batch", str(DP * micro), "--micro-batch", str(micro), "--fsdp",
                         "--fsdp-impl", impl, "--recompute", recompute, "--json")
    assert code == 0, err
    return json.loads(out)["memory_bytes"]


@pytest.mark.parametrize("recompute, micro", [("none", 2), ("full", MICRO)])
def test_the_column_parallel_linears_keep_their_whole_gathered_input(cli, recompute, micro):
    """review24 (D1): DTensor's PrepareModuleInput hands wq/wk/wv and w1/w3 the Replicate (gathered) norm output, and
    the output layer's ColwiseParallel gathers the final norm's (input_layouts Shard(1)); mm saves that input for dW.
    Megatron-Core / TE save the rank's sequence shard, s b h / TP. So per layer FSDP2 x TP keeps two tensors of
    s b h (TP - 1)/TP bf16 bytes more, and the head one more. Without recomputation all of it is stored; under full
    recomputation the head's is stored (kept outside the checkpoint) and the layer's two are rebuilt in the one-layer
    re-run. Megatron-FSDP at the same layout is the reference (its activations are Megatron's)."""
    ours, megatron = (_memory(cli, impl, recompute, micro) for impl in ("fsdp2", "megatron"))
    more = SEQ * micro * H * 2 * (TP - 1) // TP  # one gathered bf16 input beyond its shard
    if recompute == "none":
        assert ours["stored_activations"] - megatron["stored_activations"] == (2 * L + 1) * more
        assert ours["recompute_buffer"] == megatron["recompute_buffer"] == 0
    else:
        assert ours["stored_activations"] - megatron["stored_activations"] == more
        assert ours["recompute_buffer"] - megatron["recompute_buffer"] == 2 * more


@pytest.mark.parametrize("policy", ["none", "full", "selective", "op"])
def test_a_column_input_is_a_sequence_tensor_with_the_shard_and_whole_with_the_gathered_input(policy):
    """The catalogue class per term: the QKV input, the MLP's first linear input and the output layer's input are
    stored (or rebuilt in a re-run, torchtitan's op policy among them: it saves no gather) at s b h / t with
    sequence parallelism where the linear keeps its shard, at s b h where it keeps the gathered input or without
    sequence parallelism."""
    from btacalc.catalogue.selection import Selection
    from btacalc.catalogue.symbols import SYMBOLS
    from btacalc.config.execution import RunOptions
    from btacalc.config.presets import resolve_model

    feats = {**resolve_model("llama-3-8b").features(), **RunOptions(recompute=policy).features(),
             "master": "fp32"}
    t = SYMBOLS["t"]
    found = []
    for sp_on in (True, False):
        for dtensor in (False, True):
            sel = Selection.make({**feats, "sequence_parallel": sp_on, "dtensor_tp": dtensor}, policy)
            for phase in sel.phases():
                for term in phase.terms:
                    if term.q == "stored" and phase.tp_class(term) == "column_input" and term.applies(sel.feature_dict):
                        whole = sel.term_expression(term)
                        expected = whole / t if (sp_on and not dtensor) else whole
                        assert sel.per_device(phase, term) == expected
                        found.append(phase.name)
    assert set(found) == {"qkv_proj", "mlp", "lm_head"}, set(found)


def test_a_search_with_pytorch_cross_entropy_ranks_only_what_plan_runs(cli):
    """review24 (D2): PyTorch's cross-entropy on whole logits is planned at TP 1 only (check_torch_loss); the search
    ranked TP 2 and 4 layouts, and on Llama 3 70B chose one, whose plan then refused the loss (exit 2)."""
    base = ("plan", "--hw", "h100", "--devices", "16", "--seq", "4096", "--global-batch", "64", "--fsdp", "--fsdp-impl",
            "fsdp2", "--loss", "torch_fp32", "--search")
    code, out, err = cli(*base, "-m", "llama-3-8b", "--json")
    assert code == 0, err
    assert {r["tensor_parallel"] for r in json.loads(out)["ranking"]} == {1}
    code, out, err = cli(*base, "-m", "llama-3-70b")
    assert code == 1, err  # nothing fits at TP 1, as before the 2-D build


def test_a_search_at_a_given_tp_with_async_tp_times_the_winner_as_plan_does(cli):
    # review24 (D3): the search keys its evaluation by the async-TP overlap as by TE's userbuffers
    base = ("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--seq", "4096", "--global-batch", "64",
            "--fsdp", "--fsdp-impl", "fsdp2", "--tp", "2", "--tp-comm-overlap", "--json")
    code, out, err = cli(*base, "--search")
    assert code == 0, err
    best = json.loads(out)["ranking"][0]
    code, out, err = cli(*base, "--micro-batch", str(best["micro_batch"]), "--recompute", best["recompute"])
    assert code == 0, err
    assert json.loads(out)["throughput"]["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)


def test_a_layout_search_times_an_fsdp2_tp_layout_as_its_plan_does(cli):
    # the search evaluates its layouts as arrays (TP among them): the per-device copies take TP > 1 layout by layout
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--seq", "4096", "--global-batch",
                         "64", "--attention", "flash", "--fsdp", "--fsdp-impl", "fsdp2", "--recompute", "op", "--search",
                         "--json")
    assert code == 0, err
    rows = [r for r in json.loads(out)["ranking"] if r["tensor_parallel"] > 1]
    assert rows
    row = rows[0]
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--seq", "4096", "--global-batch",
                         "64", "--micro-batch", str(row["micro_batch"]), "--tp", str(row["tensor_parallel"]),
                         "--attention", "flash", "--fsdp", "--fsdp-impl", "fsdp2", "--recompute", "op", "--json")
    assert code == 0, err
    plan = json.loads(out)
    th = plan["throughput"]
    assert th["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)
    assert th["phase_share"]["fsdp2_copies"] * th["step_time_s"] == pytest.approx(row["time_s"]["fsdp2_copies"],
                                                                                  rel=1e-9)
    assert plan["memory_bytes"]["total"] == row["memory_bytes"]


def test_the_op_policy_keeps_the_row_parallel_reduce_scatter_outputs():
    """review25 (E2): torchtitan's op policy MUST_SAVEs every op on its save list, the functional reduce-scatter among
    them (parallelize_llama.py L218-227, L255-268 @ 820504e2), and wo and w2 end in one each (RowwiseParallel with
    Shard(1) outputs, L188, L195). Their outputs, s b h / t each, stay in the cache to the backward: per layer the op
    policy under DTensor TP stores 2 beta s G b h / t more than the same selection with Megatron's TP, and the
    column-parallel inputs it does not keep add nothing (the re-run rebuilds them: `recompute_bytes`)."""
    import sympy as sp

    from btacalc.catalogue.selection import Selection
    from btacalc.catalogue.symbols import SYMBOLS
    from btacalc.config.execution import RunOptions
    from btacalc.config.presets import resolve_model

    feats = {**resolve_model("llama-3-8b").features(), **RunOptions(recompute="op", attention="flash").features(),
             "master": "fp32", "sequence_parallel": True}

    def layer_stored(dtensor: bool) -> "sp.Expr":
        sel = Selection.make({**feats, "dtensor_tp": dtensor}, "op")
        return sp.Add(*[sel.expression(p, "stored") for p in sel.phases() if p.scope == "layer"])

    beta, s, G, b, h, t = (SYMBOLS[k] for k in ("beta", "s", "G", "b", "h", "t"))
    assert sp.simplify(layer_stored(True) - layer_stored(False) - 2 * beta * s * G * b * h / t) == 0


def test_the_op_policy_plan_at_tp_8_stores_the_two_scatter_outputs_per_layer(cli):
    # the benchmark's 8B per-op layout: 2 x 8192 x 12 x 4096 x 2 B / 8 x 32 layers = 6.44 GB, which e7f414a5 left out
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100-96gb", "--devices", str(DEVICES), "--tp", str(TP),
                         "--seq", str(SEQ), "--global-batch", str(DP * MICRO), "--micro-batch", str(MICRO), "--fsdp",
                         "--fsdp-impl", "fsdp2", "--recompute", "op", "--attention", "flash", "--json")
    assert code == 0, err
    stored = {p["name"]: p["stored_activation_bytes"] for p in json.loads(out)["phases"]}
    shard = SEQ * MICRO * H * 2 // TP  # s b h / t in bf16: one scatter output
    # the output projection: SDPA's output O (a d_v = h, split by heads) from the cache, and W_O's scatter output
    assert stored["attn_out_proj"] == shard + shard
    # the MLP: w1's output (f / t per token), w2's whole partial output (h per token on every rank, the policy keeps
    # the mm's output), and w2's scatter output
    assert stored["mlp"] == SEQ * MICRO * F * 2 // TP + SEQ * MICRO * H * 2 + shard


@pytest.mark.parametrize("precision", ["mxfp8", "fp8-blockwise", "nvfp4", "fp8"])
def test_recipes_torchtitan_gathers_in_16_bits_are_refused_beside_tp(cli, precision):
    # review25 (Q2): torchtitan casts before the gather only under tensorwise float8 (L56-65); the rest gather and
    # keep the bf16 input, where btacalc's recipes would gather and keep TransformerEngine's quantised one
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "b200", "--devices", "16", "--tp", "2", "--fsdp",
                         "--fsdp-impl", "fsdp2", "--precision", precision)
    assert code == 2 and "tensorwise" in err and len(err.strip().splitlines()) == 1, err
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "b200", "--devices", "16", "--seq", "4096",
                         "--global-batch", "64", "--fsdp", "--fsdp-impl", "fsdp2", "--precision", precision, "--search",
                         "--json")
    assert code == 0, err
    assert {r["tensor_parallel"] for r in json.loads(out)["ranking"]} == {1}


def test_an_moe_model_beside_tp_under_fsdp1_gets_fsdp1s_message(cli):
    # review25 (N1): the experts message is FSDP2's; FSDP1 has no TP at all
    code, out, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--fsdp", "--fsdp-impl",
                         "torch", "--tp", "2")
    assert code == 2 and "FSDP1 (--fsdp-impl torch) no --tp" in err, err


def test_an_uneven_sequence_under_fsdp2_tp_names_btacalc_rule_not_megatron(cli):
    # hostile30 nit: the refusal cited Megatron's assert and offered --no-sequence-parallel, which FSDP2 x TP refuses
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--fsdp", "--fsdp-impl", "fsdp2",
                         "--tp", "2", "--seq", "4095")
    assert code == 2 and "give --seq 4094 or 4096" in err, err
    assert "Megatron" not in err and "--no-sequence-parallel" not in err
    assert len(err.strip().splitlines()) == 1
