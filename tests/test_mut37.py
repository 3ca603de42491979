"""mut37: tests for mutants of this session's new code that the suite let survive: model/gpu/costs.py's tile counts
(`_tiles`, `_issued`, `_fused_core`), model/gpu/nccl.py and collectives.py's LL cap, `nccl_group`, `p2p_link` and
the ring row's efficiency, the Megatron rotary row, `every_nth`, `Layout.check_sequence`, and the wafer's loss in
compare and resolution. Each expected value is arithmetic from the cited source (Megatron-LM @ d98e8a64's modules
and recomputation, the catalogue's phases, NVIDIA/nccl @ 5067397c src/graph/tuning.cc), not the tool's own output
(docs/mutation-survivors.md "mut37" lists the mutants each test kills)."""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout
from btacalc.config.presets import load_preset
from btacalc.model.gpu.costs import ISSUED_COUNTS, layer_parts, outside_parts
from support import resolved

KERNELS, EXPERTS, MODULES = (ISSUED_COUNTS.index(n) for n in ("kernels", "expert_gemms", "module_calls"))


def _qwen3(recompute: str):
    """Qwen3-30B-A3B on 16 H100 at EP 16 under flash attention (test_tilehost's layer)."""
    layout = Layout(devices=16, expert_parallel=16, micro_batches=4)
    return resolved(load_preset("qwen3-30b-a3b"), "h100", layout, seq_len=4096, recompute=recompute,
                    attention="flash")


# ---- costs: a re-run module or fused kernel is issued once more per tile


@pytest.mark.parametrize("tiles", [1, 2, 3])
@pytest.mark.parametrize("recompute, per_tile, once, pre_once, modules_per_tile, modules_once, expert_gemms", [
    # Megatron's full recomputation (--recompute-granularity full: transformer_block.py _checkpointed_forward runs
    # tensor_parallel.checkpoint over the layer) re-runs every module's forward once in the backward: a phase without
    # GEMMs 3 kernels (forward, re-run, backward), a GEMM 4 (forward, re-run, data and weight gradient), the fused
    # attention kernel 3. Per tile: input_norm 3 + qkv_proj 4 + qk_norm 3 + rope 3 + core 3 + attn_out_proj 4 = 20;
    # once: post_attn_norm 3 + router 4 + dispatch 3 + combine 3 = 13. Module calls: linear_qkv, core_attention,
    # linear_proj 3 each per tile; the experts' linear_fc1 and linear_fc2 3 each. Per-expert GEMMs: 8 local experts
    # x 2 linears x 4. The pre-dispatch node: the tiles, post_attn_norm 3 and the router 4.
    ("full", 20, 13, 7, 9, 6, 64),
    # selective recomputation of Megatron's default module, core_attn (attention.py _checkpointed_attention_forward):
    # the fused kernel and its core_attention module once more per tile; test_tilehost's 14 G + 9 and 6 G + 4 else
    # (post_attn_norm 2 and the router 3 in the pre-dispatch node)
    ("selective", 15, 9, 5, 7, 4, 48),
])
def test_a_recomputed_module_and_the_fused_kernel_re_run_once_per_tile(recompute, per_tile, once, pre_once,
                                                                         modules_per_tile, modules_once, expert_gemms,
                                                                         tiles):
    p = _qwen3(recompute)
    part = layer_parts(p, p.evaluate(tiles, 1))[0]
    assert part.kernels == per_tile * tiles + once
    assert part.module_calls == modules_per_tile * tiles + modules_once
    assert part.expert_gemms == expert_gemms
    pre = part.node_issued["pre"]  # the attention tiles, with post_attn_norm's and the router's kernels
    assert (pre[KERNELS], pre[MODULES]) == (per_tile * tiles + pre_once, modules_per_tile * tiles)


@pytest.mark.parametrize("tiles", [1, 3])
def test_the_parts_outside_the_layers_issue_no_attention_kernel(tiles):
    """The embedding (formulas/head.toml, batch = "global") one kernel forward and one backward; final_norm and loss
    (batch = "tile") 2 per tile, lm_head one GEMM 3 per tile (forward, data and weight gradient) and its output_layer
    module forward and backward. No attention core runs outside the layers, so no fused kernel is issued there."""
    p = _qwen3("none")
    first, last = outside_parts(p, p.evaluate(tiles, 1))
    assert (first.kernels, first.kernels_fwd, first.module_calls) == (2, 1, 0)
    assert (last.kernels, last.kernels_fwd, last.module_calls, last.module_calls_fwd) == (7 * tiles, 3 * tiles,
                                                                                            2 * tiles, tiles)


# ---- collectives: point-to-point sends and a ring row's line rate (review31)

# The H100 profile's sources (tests/test_review31.py): NVLink 450 GB/s per direction at 360/450, 13.0 us per call in
# a DGX H100; one 400 Gb/s NIC per GPU, 50 GB/s at 47/50, 46.5 us across nodes
NVLINK, NVLINK_EFF, NVLINK_ALPHA = 450e9, 360 / 450, 13.0e-6
NIC, NIC_EFF, NIC_ALPHA = 50e9, 47 / 50, 46.5e-6
H100_SCALEUP_SCALE = 13.0 / (6.6 + 14 * 0.6)  # measured / NCCL's ring LL on 8 ranks (docs/comm.md "nccl2")


def _h100(**layout):
    from btacalc.config.execution import RunOptions
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import resolve_model
    from btacalc.model.problem import make_problem

    return make_problem(resolve_model("llama-3-8b"), resolve_hardware("h100"),
                        RunOptions(attention="flash", recompute="none"), Layout(devices_per_node=8, **layout))


def test_a_context_parallel_ring_on_two_gpus_sends_over_nvlink():
    """CP 2 on two GPUs of one DGX H100: one step of V bytes to the other rank per exchange (TransformerEngine's P2P
    ring, CP - 1 steps), over NVLink: 13.0 us and V / 360 GB/s each."""
    from btacalc.model.gpu.collectives import context_parallel_time

    p = _h100(devices=2, context_parallel=2)
    volume, exchanges = 4 * 2**20, 10
    assert context_parallel_time(p, volume, exchanges) == pytest.approx(exchanges * NVLINK_ALPHA
                                                                        + volume / (NVLINK * NVLINK_EFF))


def test_one_gpu_has_no_context_parallel_or_pipeline_time():
    from btacalc.model.gpu.collectives import context_parallel_time, pipeline_p2p_time

    p = _h100(devices=1)
    assert context_parallel_time(p, 4 * 2**20, 10) == 0.0
    assert pipeline_p2p_time(p, 4 * 2**20) == 0.0


def test_a_pipeline_of_every_gpu_in_one_node_sends_over_nvlink():
    """PP 8 on the 8 GPUs of one DGX H100 (the pipeline group at stride devices / PP = 1: all in the node): 2 sends a
    micro-batch (activation forward, gradient backward), each 13.0 us and V / 360 GB/s."""
    from btacalc.model.gpu.collectives import pipeline_p2p_time

    p = _h100(devices=8, pipeline_parallel=8)
    volume = 16 * 2**20
    assert pipeline_p2p_time(p, volume) == pytest.approx(2 * NVLINK_ALPHA + 2 * volume / (NVLINK * NVLINK_EFF))


def test_a_ring_inside_a_node_reads_its_efficiency_over_nvlinks_line_rate():
    """A reduce-scatter of 6 GB of bus bytes over a TP-2 group inside a DGX H100 (8 GPUs, group {0, 1}): NCCL's ring
    Simple (tuning.cc L151, L159: 8.4 + 1 step x 3.4 us, x the profile's NVLink scale) at 360 GB/s beats LL128 (14.0 +
    1.9 us at 0.92 x 360) and LL (6.6 + 0.6 us at min(141, 180) GB/s) for 6 GB. The row's efficiency is the achieved
    bus bandwidth over NVLink's 450 GB/s line rate, the link that paces a ring inside the domain (not 2 NICs' 100)."""
    from btacalc.model.gpu.collectives import describe

    p = _h100(devices=8, tensor_parallel=2, sequence_parallel=True)
    bus = 6e9
    seconds = (8.4 + 3.4) * 1e-6 * H100_SCALEUP_SCALE + bus / (NVLINK * NVLINK_EFF)
    row = describe(p, "gradient_reduce_dense", (2, 1), (bus, 1), seconds, kind=1, collective="reduce_scatter")
    assert (row.link, row.protocol) == ("nvlink", "Simple")
    assert row.efficiency == pytest.approx(bus / seconds / NVLINK)


def test_a_layout_without_context_parallelism_has_no_context_parallel_time():
    """TP 2 on 16 GPUs, CP 1: no K/V ring, whatever the part's volume and calls."""
    from btacalc.model.gpu.collectives import context_parallel_time

    assert context_parallel_time(_h100(devices=16, tensor_parallel=2, sequence_parallel=True), 4 * 2**20, 10) == 0.0


# ---- nccl: LL's cap (llMaxBw)

# NVIDIA/nccl @ 5067397c src/graph/tuning.cc L177-183, the llMaxBws table in GB/s (rows Volta, Ampere, Hopper,
# Blackwell; columns one node, 2 nodes, more), and L267-272: compCapIndex = Blackwell from compute capability 10.0,
# Hopper from 9.0, Ampere from 8.0, else Volta; index2 = nNodes <= 2 ? nNodes - 1 : 2; inside one node the row is the
# GPU's, across nodes the CPU's (Intel / default: the Volta row's 39.0 and 20.4)
@pytest.mark.parametrize("capability, nodes, gb_per_s", [
    (8.0, 1, 87.7), (8.6, 1, 87.7), (9.0, 1, 141.0), (10.0, 1, 2 * 141.0), (10.3, 1, 2 * 141.0),
    (7.0, 1, 39.0), (7.5, 1, 39.0),  # Volta and Turing: compCapIndex 0
    (9.0, 2, 39.0), (10.0, 2, 39.0), (8.0, 2, 39.0),
    (9.0, 3, 20.4), (10.0, 4, 20.4), (8.0, 36, 20.4),
])
def test_ll_max_bandwidth_is_nccls_table(capability, nodes, gb_per_s):
    from btacalc.model.gpu.nccl import ll_max_bytes_per_s

    assert ll_max_bytes_per_s(capability, nodes) == pytest.approx(gb_per_s * 1e9, rel=1e-12)


def test_ll_max_bandwidth_over_arrays_of_nodes_and_without_a_gpu_generation():
    """Over a search's arrays of NVLink domains; a profile that states no compute capability has no generation row:
    no cap inside one node (btacalc's choice, nccl.py), the network's across nodes."""
    import numpy as np

    from btacalc.model.gpu.nccl import ll_max_bytes_per_s

    got = ll_max_bytes_per_s(9.0, np.array([1, 2, 3, 4, 9]))
    assert got == pytest.approx(np.array([141.0, 39.0, 20.4, 20.4, 20.4]) * 1e9, rel=1e-12)
    assert ll_max_bytes_per_s(None, 1) == np.inf
    assert ll_max_bytes_per_s(None, 2) == pytest.approx(39.0e9, rel=1e-12)


def test_the_tree_caps_ll_alone_at_ll_max_bandwidth():
    """An all-reduce (factor 2) of 2 GiB on 2 x 8 ranks, Simple ring bus bandwidth 360 GB/s, LL capped at 39 GB/s
    (2 nodes). Tree (tuning.cc L330-335, L380, L414-416): bus = 360 x 0.92 x the protocol's share, LL's at most llMaxBw;
    the algorithm bandwidth half of it; the size correction 1.0 at 2 GiB (log2(2^31 / 64) = 25, past the table's 23
    sizes). Latency base + 2 x ((8 - 1) x NVLink step + log2(2) x network step) (tuning.cc L151, L159, formulas/
    constants.toml [nccl]): LL 6.8 + 2 x (7 x 0.6 + 5.0) = 25.2 us at min(360 x 0.92 / 3.8 = 87.2, 39) = 39 GB/s;
    Simple 8.4 + 2 x (7 x 4.0 + 14.0) = 92.4 us at 360 x 0.92 = 331.2 GB/s, uncapped."""
    from btacalc.model.gpu.nccl import LL, SIMPLE, Group, tree_time_s

    group = Group(16, 2, 2, 360e9, ll_max_bus_bytes_per_s=39e9)
    nbytes = 2**31
    assert tree_time_s(group, nbytes, LL) == pytest.approx(25.2e-6 + nbytes / (0.5 * 39e9))
    assert tree_time_s(group, nbytes, SIMPLE) == pytest.approx(92.4e-6 + nbytes / (0.5 * 360e9 * 0.92))


# ---- config: the Megatron rotary row, every_nth, the rotary check, Layout.check_sequence


def _megatron_args(**given):
    """A launch's parsed arguments as `Row` decoders read them (`get(dest)`), absent ones None."""
    return lambda dest: given.get(dest)


@pytest.mark.parametrize("embedding, interleaved", [("rope", True), ("yarn", True), ("learned_absolute", False),
                                                    ("none", False)])
def test_rotary_interleaved_is_read_for_every_rotary_embedding(embedding, interleaved):
    """Megatron-LM's --rotary-interleaved (TransformerConfig.rotary_interleaved, transformer_config.py L243 @ d98e8a64)
    selects the pairs of a rotary embedding: --position-embedding-type rope, and yarn, whose YarnRotaryEmbedding is a
    RotaryEmbedding (yarn_rotary_pos_embedding.py) and rotates as it does (GPT-OSS's launch: semantics20). Beside a
    learned or no position embedding the flag changes nothing."""
    from btacalc.config.megatron_model_rows import _dec_rotary_pairs

    get = _megatron_args(rotary_interleaved=True, position_embedding_type=embedding)
    assert _dec_rotary_pairs(get) == {"model.rotary_interleaved": interleaved}


def test_rotary_interleaved_beside_mla_is_refused_with_megatrons_own_words():
    from btacalc.config.megatron_model_rows import _dec_rotary_pairs
    from btacalc.errors import BtacalcError

    get = _megatron_args(rotary_interleaved=True, multi_latent_attention=True, position_embedding_type="rope")
    with pytest.raises(BtacalcError) as e:
        _dec_rotary_pairs(get)
    # Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_config.py L2526-2527
    assert str(e.value) == ("Megatron --rotary-interleaved with --multi-latent-attention: Megatron-Core raises "
                            "'rotary_interleaved does not work with multi_latent_attention' (transformer_config.py "
                            "L2526-2527 @ d98e8a64)")


@pytest.mark.parametrize("flagged, count, n", [([], 48, 0), ([3, 7, 11], 12, 4), ([3, 7], 12, 0), ([0], 1, 1)])
def test_every_nth(flagged, count, n):
    """n when the flagged layers are exactly n - 1, 2n - 1, ... below count; 0 otherwise, and when none is flagged."""
    from btacalc.config.model import every_nth

    assert every_nth(flagged, count) == n


@pytest.mark.parametrize("preset", ["gpt3-175b"])
def test_rotary_interleaved_needs_a_rotary_embedding(preset):
    """Which dimensions RoPE turns together means nothing without RoPE: a learned-position model (GPT-3) refuses it,
    as one with multi-latent attention does (Megatron-Core, transformer_config.py L2526-2527 @ d98e8a64)."""
    from btacalc.config.model import validate_model
    from btacalc.errors import BtacalcError

    data = load_preset(preset).model_dump()
    assert data["position_embedding"] != "rope"
    data["rotary_interleaved"] = True
    with pytest.raises(BtacalcError) as e:
        validate_model(data, origin="test")
    assert str(e.value) == "test: rotary_interleaved needs position_embedding rope without multi-latent attention"
    data = load_preset("deepseek-v3").model_dump()
    data["rotary_interleaved"] = True
    with pytest.raises(BtacalcError, match="rotary_interleaved needs position_embedding rope without multi-latent"):
        validate_model(data, origin="test")


def _refusal(layout, model, seq_len):
    from btacalc.errors import BtacalcError

    with pytest.raises(BtacalcError) as e:
        layout.check_sequence(load_preset(model), seq_len)
    return e.value.render()


def test_a_context_parallel_refusal_names_the_multiple_of_two_cp():
    """CP 3: Megatron's load-balanced causal split cuts each sequence into 2·CP = 6 chunks; 1,000 is not a multiple."""
    text = _refusal(Layout(devices=3, context_parallel=3), "llama-3-8b", 1000)
    assert "the sequence 1000 must be a multiple of 2·CP = 6 " in text


def test_a_sequence_parallel_refusal_offers_the_way_out_the_model_has():
    """TP 2 with sequence parallelism over a 4,095-token sequence (review35: Megatron-LM tensor_parallel/mappings.py
    L71-74 asserts TP divides it): 4,094 or 4,096; a dense model may also drop sequence parallelism, an MoE model at
    TP > 1 may not (Megatron needs it there), and FSDP2 x TP needs it (btacalc splits each sequence evenly)."""
    sp = dict(devices=2, tensor_parallel=2, sequence_parallel=True)
    dense = _refusal(Layout(**sp), "llama-3-8b", 4095)
    assert "tensor_parallel/mappings.py L71-74 asserts it at the first forward): give" in dense
    assert dense.endswith("give seq_len 4094 or 4096, or no_sequence_parallel")
    assert _refusal(Layout(**sp), "qwen3-30b-a3b", 4095).endswith("give seq_len 4094 or 4096")
    fsdp = _refusal(Layout(**sp, fsdp=True, fsdp_impl="fsdp2"), "llama-3-8b", 4095)
    assert fsdp.endswith("(btacalc splits each sequence evenly over DTensor's sequence shards): give seq_len 4094 or "
                         "4096")


# ---- compare: a wafer row at a wafer's own loss (waferloss)


def test_compare_plans_a_wafer_row_at_the_wafer_loss_given(cli):
    """`--loss stored` is a wafer's loss (Korthikanti's stored logits; a wafer computes `fused` or `stored`), so a
    wafer-only comparison takes it (it sets no GPU row alone) and plans the wafer row with it: the row is the plan's
    at --loss stored, not at the default fused loss (which keeps less and runs faster there)."""
    import json

    code, out, err = cli("compare", "-m", "qwen3-30b-a3b", "--hw", "wse3", "--loss", "stored", "--json")
    assert code == 0, err
    (row,) = json.loads(out)["rows"]
    assert row["run_options"] == ["--loss stored"]
    plans = {}
    for loss in ("stored", "fused"):
        code, plan, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "wse3", "--loss", loss, "--json")
        assert code == 0, err
        plans[loss] = json.loads(plan)["throughput"]["tokens_per_s"]
    assert plans["stored"] != pytest.approx(plans["fused"], rel=1e-3)
    assert row["tokens_per_s"] == pytest.approx(plans["stored"], rel=1e-12)


def test_a_wafer_refuses_megatrons_losses_saying_whose_kernels_they_are_and_what_a_wafer_computes(cli):
    """waferloss: vocab_parallel, native_fused and te_fused are Megatron-Core's and TransformerEngine's cross-entropy
    kernels (formulas/head.toml); a wafer computes its compiler's loss, `fused` or Korthikanti's `stored`."""
    code, _, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "wse3", "--loss", "native_fused")
    assert code == 2
    assert err.strip() == ("btacalc: error: --loss vocab_parallel, native_fused and te_fused are Megatron-Core's and "
                           "TransformerEngine's cross-entropy on a GPU; a wafer-scale run's loss is the compiler's: "
                           "fused (the default) or stored")
