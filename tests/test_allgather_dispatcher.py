"""Megatron's allgather token dispatcher (Megatron-Core's default, transformer_config.py L891 @ d98e8a64), each
test written as its derivation from the dispatcher's code (megatron/core/transformer/moe/token_dispatcher.py
L232-373, MoEAllGatherTokenDispatcher):

- token_dispatch (L281-303): the routing map [tokens, E] (bool, under no_grad), the probabilities [tokens, E]
  (the logits' 16-bit dtype) and the hidden states [tokens, h] are all-gathered over the tp_ep group, ETP x EP
  ranks; the hidden states into Megatron-Core's global buffer ("mpu", use_global_buffer=True);
- dispatch_postprocess (L305-335): the bool map of the gathered tokens to the rank's E/EP local experts is kept,
  and `.cpu()` of its counts is one device-to-host sync per forward (L320);
- token_combine (L355-368): the unpermuted outputs [gathered tokens, h] reduce-scattered back.
The backward of an all-gather is a reduce-scatter and the other way round, so per MoE layer and micro-batch the
hidden states cross the group four times (two calls forward, two backward), the probabilities twice and the map
once: seven NCCL calls (review27: four before, the probabilities' and the map's calls folded into the tokens').
"""

from __future__ import annotations

import json

import pytest

from btacalc.config.execution import Layout
from btacalc.model.gpu.fixed import dispatcher_syncs

from support import resolved

# OLMoE-1B-7B (btacalc/data/presets/olmoe-1b-7b.toml): h 2048, 16 layers, all MoE, 64 experts, top-8
H, LAYERS, EXPERTS = 2048, 16, 64
SEQ, BETA = 4096, 2
LAYOUT = "--model olmoe-1b-7b --hw h100 --devices 8 --ep 8 --seq 4096 --micro-batch 1 --global-batch 8"


def _plan(cli, extra: str = "") -> dict:
    code, out, err = cli("plan", *f"{LAYOUT} {extra}".split(), "--json")
    assert code == 0, err
    return json.loads(out)


def _row(plan: dict, name: str) -> dict | None:
    return next((c for c in plan["throughput"]["collectives"] if c["name"] == name), None)


def test_the_dispatchers_bytes_and_calls_are_megatrons_tensors(cli):
    plan = _plan(cli, "--allgather-dispatcher")
    n_g = 1 * 8  # ETP x EP
    hidden = SEQ * H * BETA  # one micro-batch of one sequence at TP 1: 4,096 tokens x 2,048 x 2 B
    probs = SEQ * EXPERTS * BETA  # [tokens, E] in the logits' bf16
    routing_map = SEQ * EXPERTS * 1  # [tokens, E] bool, forward only
    # dispatch: the hidden states and probabilities forward and backward, the map forward; combine: the outputs
    # reduce-scattered forward, their gradient all-gathered backward
    per_layer = 2 * (hidden + probs) + routing_map + 2 * hidden
    # forward: the map, the probabilities and the tokens gathered (L290-301), the outputs reduce-scattered (L365);
    # backward: the outputs' gradient gathered, the tokens' and the probabilities' reduce-scattered (mappings.py
    # L340-344, L376-377); the map's gather runs under no_grad
    calls = LAYERS * (3 + 1 + 1 + 2)
    row = _row(plan, "moe_allgather")
    assert row["calls"] == calls and row["ranks"] == n_g and row["link"] == "nvlink"
    # a ring moves (n - 1)/n of each call's buffer, n_g contributions: (n_g - 1) contributions per rank
    assert row["message_bytes"] * row["calls"] == pytest.approx(LAYERS * per_layer * (n_g - 1), rel=1e-12)
    assert row["buffer_bytes"] == pytest.approx(row["message_bytes"] * n_g / (n_g - 1), rel=1e-12)
    # no all-to-all under this dispatcher
    assert _row(plan, "expert_all_to_all") is None
    # the ring runs on NVLink (450 GB/s per direction, 0.8 of it at large messages, nccl-tests issue 326): no
    # faster than the line rate, no slower than NCCL's large-message share at the smallest efficiency it gives
    bus = row["message_bytes"] * row["calls"]
    assert bus / 450e9 < row["time_s"] < bus / (450e9 * 0.7) + calls * row["latency_s"]


def test_the_alltoall_dispatcher_moves_k_copies_and_the_allgather_one_per_rank(cli):
    # the same layout with the all-to-all: k = 8 copies of each token, 7/8 of them leave the rank, dispatch and
    # combine, forward and backward: 4 x 8 x hidden x 7/8 per layer (the routing is force-balanced, R = 1 here)
    # in 4 token calls per layer; the routing probabilities travel in 2 more (tests/test_a2a_probs.py), whose
    # bytes are not counted: the row's message is a token call's
    a2a = _row(_plan(cli), "expert_all_to_all")
    hidden = SEQ * H * BETA
    assert a2a["calls"] == LAYERS * (4 + 2) and a2a["message_calls"] == LAYERS * 4
    assert a2a["message_bytes"] * a2a["message_calls"] == pytest.approx(LAYERS * 4 * 8 * hidden * 7 / 8, rel=0.02)
    assert _row(_plan(cli), "moe_allgather") is None


def test_the_global_buffer_holds_the_gathered_tokens(cli):
    # [(s/t) b n_g, h] in bf16: 4,096 x 8 x 2,048 x 2 B; larger than any other "mpu" request of this TE run
    # (no local attention; TP 1 gathers nothing)
    assert _plan(cli, "--allgather-dispatcher")["memory_bytes"]["global_buffer"] == 4096 * 8 * 2048 * 2
    assert _plan(cli)["memory_bytes"]["global_buffer"] == 0


def test_what_masked_select_keeps_is_stored_per_moe_layer(cli):
    # dispatch_postprocess (token_dispatcher.py L331-333): local_probs.T.contiguous().masked_select(local_map.T
    # .contiguous()), whose backward (PyTorch derivatives.yaml: masked_select_backward(grad, self, mask)) keeps its
    # input, the probabilities [E/EP, gathered tokens] in bf16, and its mask, the same shape in bool:
    # (s/t) t_e EP x E/EP = 4,096 x 64 elements per layer, 2 + 1 bytes each
    with_map = _plan(cli, "--allgather-dispatcher")["memory_bytes"]["stored_activations"]
    without = _plan(cli)["memory_bytes"]["stored_activations"]
    assert with_map - without == LAYERS * SEQ * EXPERTS * (BETA + 1)


def test_one_sync_per_forward_as_the_alltoall_dispatcher():
    problem = resolved("olmoe-1b-7b", "h100", Layout(devices=8, expert_parallel=8, devices_per_node=8,
                                                      allgather_dispatcher=True))
    assert problem.layout.dispatcher == "allgather"
    assert dispatcher_syncs(problem).forward_per_layer == 1
    assert "L320" in dispatcher_syncs(problem).source


def test_a_launch_without_a_dispatcher_runs_megatrons_default_and_the_emitted_one_says_it(cli, tmp_path):
    # Megatron-LM's --moe-token-dispatcher-type defaults to allgather: a launch that names none is planned so,
    # and --emit megatron states the dispatcher btacalc timed for every MoE model
    code, text, err = cli("plan", *LAYOUT.split(), "--emit", "megatron")
    assert code == 0 and "--moe-token-dispatcher-type alltoall" in text
    launch = tmp_path / "run.sh"
    launch.write_text(text.replace("--moe-token-dispatcher-type alltoall", ""))
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--json")
    assert code == 0, err
    assert json.loads(out)["parallelism"]["allgather_dispatcher"] is True
    launch.write_text(text)
    code, out, err = cli("plan", "--from-megatron", str(launch), "--hw", "h100", "--json")
    assert json.loads(out)["parallelism"]["allgather_dispatcher"] is False
    # at EP 1 too: the two dispatchers differ in what an expert-tensor-parallel group exchanges
    code, text, err = cli("plan", "--model", "olmoe-1b-7b", "--hw", "h100", "--devices", "8", "--ep", "1",
                          "--seq", "4096", "--emit", "megatron")
    assert "--moe-token-dispatcher-type alltoall" in text, err


def test_the_allgather_dispatcher_round_trips_through_megatron_and_bridge(cli, tmp_path):
    for kind, flag in (("megatron", "--from-megatron"), ("bridge", "--from-bridge")):
        code, text, err = cli("plan", *LAYOUT.split(), "--allgather-dispatcher", "--emit", kind)
        assert code == 0, err
        assert ("--moe-token-dispatcher-type allgather" if kind == "megatron"
                else "model.moe_token_dispatcher_type=allgather") in text
        path = tmp_path / f"run.{kind}"
        path.write_text(text)
        code, out, err = cli("plan", flag, str(path), "--hw", "h100", "--devices", "8", "--json")
        assert code == 0, err
        plan = json.loads(out)
        assert plan["parallelism"]["allgather_dispatcher"] is True
        assert _row(plan, "moe_allgather")["calls"] == LAYERS * 7 and _row(plan, "expert_all_to_all") is None


@pytest.mark.parametrize("extra, fragment", [
    ("--deepep", "two MoE token dispatchers"),
    ("--overlap-a2a", "Megatron-Core refuses it with --allgather-dispatcher"),
])
def test_what_megatron_refuses_beside_it_is_refused(cli, extra, fragment):
    code, out, err = cli("plan", *LAYOUT.split(), "--allgather-dispatcher", *extra.split())
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("layout, split, n_g, micro_batches", [
    # TP 2, ETP 1, EP 4: tp_ep = ETP x EP = 4 ranks (token_dispatcher.py L86-87: pg_collection.tp_ep, its
    # tp_size the expert tensor-parallel group's), each holding its s/TP tokens (the MoE layer's input is sequence
    # parallel over the attention's TP, moe_layer.py L636-640); DP = 8 / 2 = 4, so 8 sequences are M = 2
    ("--tp 2 --etp 1 --ep 4", 2, 4, 2),
    # TP 4, ETP 2, EP 2: tp_ep = 2 x 2 = 4 ranks of s/4 tokens each; DP 2, M = 4
    ("--tp 4 --etp 2 --ep 2", 4, 4, 4),
    # EP 1 at TP 2 (ETP defaults to TP, parallel_state.py L871-872): the dispatcher still gathers over
    # tp_ep = 2 x 1 (token_dispatcher.py L285: `if self.tp_size > 1 or self.ep_size > 1`); DP 4, M = 2
    ("--tp 2 --ep 1", 2, 2, 2),
    # CP 2, EP 4: each rank routes its s/CP tokens; tp_ep = 1 x 4; DP 4 (dense: 8 / CP 2), M = 2
    ("--cp 2 --ep 4", 2, 4, 2),
])
def test_the_group_and_the_contribution_when_tp_and_etp_differ(cli, layout, split, n_g, micro_batches):
    code, out, err = cli("plan", *f"--model olmoe-1b-7b --hw h100 --devices 8 {layout} --seq 4096 --micro-batch 1 "
                         "--global-batch 8 --allgather-dispatcher --json".split())
    assert code == 0, err
    plan = json.loads(out)
    tokens = SEQ // split  # a rank's contribution: its (S/TP)*B tokens (L298; S/CP under context parallelism)
    per_layer = 4 * tokens * H * BETA + 2 * tokens * EXPERTS * BETA + tokens * EXPERTS
    row = _row(plan, "moe_allgather")
    assert row["ranks"] == n_g
    assert row["message_bytes"] * row["calls"] == pytest.approx(micro_batches * LAYERS * per_layer * (n_g - 1),
                                                                rel=1e-12)
    # the gathered hidden states [(S/TP)*B*n_g, H] in the global buffer (mappings.py L142-143)
    assert plan["memory_bytes"]["global_buffer"] == tokens * n_g * H * BETA


def test_a_stage_of_dense_layers_holds_no_dispatch_buffer(cli):
    # deepseek-proxy-2l: layer 1 dense (first_dense_layers 1), layer 2 MoE; at PP 2 the first stage runs no MoE
    # layer, so no dispatcher asks the "mpu" buffer for its gather (TE linears, TP 1: nothing else does); the second
    # holds [1,024 x 1 x EP 4, 512] bf16 (token_dispatcher.py L299-301, mappings.py L142-143)
    code, out, err = cli("plan", *"-m deepseek-proxy-2l-megatron-ci --hw h100 --devices 8 --pp 2 --ep 4 --seq 1024 "
                         "--micro-batch 1 --global-batch 8 --allgather-dispatcher --json".split())
    assert code == 0, err
    stages = json.loads(out)["memory_stages"]
    assert [s["components"]["global_buffer"] for s in stages] == [0, 1024 * 4 * 512 * 2]


def test_a_rerun_repeats_the_forward_calls(cli):
    # --recompute moe checkpoints the MoE layer (moe_layer.py L701-714: tensor_parallel.checkpoint(custom_forward)),
    # whose backward re-runs its forward: the three gathers and the reduce-scatter again, 7 + 4 calls per layer
    row = _row(_plan(cli, "--allgather-dispatcher --recompute moe"), "moe_allgather")
    assert row["calls"] == LAYERS * (7 + 4)


def test_a_bridge_file_without_the_dispatcher_says_which_it_took(cli, tmp_path):
    # TransformerConfig's default is allgather (transformer_config.py L891); without --model no model bridge is known
    # to set alltoall (bridge_model_bridges.toml: OlMoEBridge, olmoe_bridge.py L87), so the plan says it took allgather
    code, text, err = cli("plan", *LAYOUT.split(), "--emit", "bridge")
    assert code == 0 and "model.moe_token_dispatcher_type=alltoall" in text, err
    path = tmp_path / "run.txt"
    path.write_text(text.replace("model.moe_token_dispatcher_type=alltoall\n", ""))
    for extra, allgather in (((), True), (("--model", "olmoe-1b-7b"), False)):
        code, out, err = cli("plan", "--from-bridge", str(path), "--hw", "h100", "--devices", "8", *extra, "--json")
        assert code == 0, err
        plan = json.loads(out)
        assert plan["parallelism"]["allgather_dispatcher"] is allgather
        said = [n for n in plan["imported"]["notes"] if n.startswith("model.moe_token_dispatcher_type left out")]
        assert len(said) == allgather
