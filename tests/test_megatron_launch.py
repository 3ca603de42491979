"""Megatron-LM launches out and in: `plan --emit megatron|bridge`, `plan --from-megatron|--from-bridge`,
Megatron's validation rules (btacalc/config/megatron_rules.py, each citing Megatron-LM @ d98e8a64), and
`plan --config run.toml`.

What is expected comes from Megatron-LM's own rules and from the published launches in
tests/data/megatron (each file names its source), not from btacalc's output.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import sys
from pathlib import Path

import pytest

from btacalc.config.megatron_codec import ROWS, decode, encode, render_flags
from btacalc.config.bridge_codec import bridge_key
from btacalc.config.megatron_launch import megatron_flags, read_launch
from btacalc.config.megatron_rules import RULES, violations
from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import NOT_MODELLED, import_megatron
from btacalc.config.hardware import resolve_hardware
from btacalc.config.presets import resolve_model
from btacalc.planning.plan import make_plan

DATA = Path(__file__).parent / "data" / "megatron"

# 24 plans over layouts (TP, SP, PP, VP, CP, EP, ETP), recomputation, overlaps, ZeRO/FSDP, gradient precision,
# models (dense, MoE, MLA, dense-first MoE, uneven pipeline split) and GPUs. None is a held-back layout.
PLANS = {
    "qwen-tp2-pp4-vp4-ep8-a2a": ("--model qwen3-30b-a3b --hw h100 --devices 64 --tp 2 --pp 4 --vp 4 --ep 8 "
                                 "--global-batch 1024 --overlap-a2a"),
    "qwen-ep8-zero2": "--model qwen3-30b-a3b --hw h100 --devices 64 --ep 8 --zero 2 --global-batch 512 --micro-batch 1",
    "qwen-ep8-fsdp": "--model qwen3-30b-a3b --hw h100 --devices 64 --ep 8 --fsdp --global-batch 512 --micro-batch 1",
    "qwen-pp2-a2a-no-vp": "--model qwen3-30b-a3b --hw h100 --devices 64 --pp 2 --ep 8 --overlap-a2a --global-batch 256",
    "qwen-a2a-full": ("--model qwen3-30b-a3b --hw h100 --devices 64 --ep 8 --overlap-a2a --recompute full "
                      "--global-batch 512 --micro-batch 1"),
    "qwen-tp2-etp1-overlaps": ("--model qwen3-30b-a3b --hw h100 --devices 64 --tp 2 --ep 8 --etp 1 --tp-comm-overlap "
                               "--overlap-grad-reduce --overlap-param-gather --global-batch 512 --micro-batch 2"),
    "qwen-cp2-modules": ("--model qwen3-30b-a3b --hw h100 --devices 32 --cp 2 --ep 8 --seq 8192 --global-batch 64 "
                         "--micro-batch 1 --recompute core_attn,moe_act"),
    "llama8b-tp2-none": "--model llama-3-8b --hw h100 --devices 8 --tp 2 --global-batch 128 --micro-batch 1 --recompute none",
    "llama8b-pp2-vp2-no-p2p": ("--model llama-3-8b --hw h100 --devices 16 --pp 2 --vp 2 --no-overlap-p2p "
                               "--global-batch 256 --micro-batch 1"),
    # hydra: a layout sets VP (chunks / PP, arguments.py L941-950): read back as VP 1, it was refused ("32 model
    # chunks, not --pp 16 x --vp 1"), and the p2p overlap's switch was left out of the launch
    "llama8b-pp2-vp2-layout-no-p2p": ("--model llama-3-8b --hw h100 --devices 16 --pp 2 --vp 2 --no-overlap-p2p "
                                      "--pipeline-layout Et*8|t*8|t*8|t*8L --global-batch 256 --micro-batch 1"),
    "llama70b-tp8-pp4-full-bf16grads": ("--model llama-3-70b --hw h100 --devices 64 --tp 8 --pp 4 --global-batch 512 "
                                        "--micro-batch 1 --recompute full --grad-bytes 2"),
    "gpt3-tp4-pp8-vp6": ("--model gpt3-175b --hw h100 --devices 128 --tp 4 --pp 8 --vp 6 --seq 2048 --global-batch 256 "
                         "--micro-batch 1 --recompute none --grad-bytes 2 --overlap-grad-reduce --overlap-param-gather"),
    "gpt3-tp8-pp8": "--model gpt3-175b --hw h100 --devices 64 --tp 8 --pp 8 --seq 2048 --global-batch 64 --micro-batch 1",
    "mixtral-pp4-ep8": "--model mixtral-8x7b --hw h100 --devices 32 --pp 4 --ep 8 --global-batch 256 --micro-batch 1",
    "mixtral-tp2-ep8-zero0": "--model mixtral-8x7b --hw h100 --devices 64 --tp 2 --ep 8 --zero 0 --global-batch 512",
    "deepseek-fsdp-mtp": ("--model deepseek-v3 --hw b200 --devices 256 --ep 64 --fsdp --recompute full --mtp "
                          "--global-batch 256 --micro-batch 1"),
    "olmoe-ep8": "--model olmoe-1b-7b --hw h100 --devices 8 --ep 8 --global-batch 64 --micro-batch 2",
    "qwen235-pp4-vp2-ep16": ("--model qwen3-235b-a22b --hw h100 --devices 128 --pp 4 --vp 2 --ep 16 --global-batch 512 "
                             "--micro-batch 1 --recompute full"),
    "llama405-tp8-pp8": ("--model llama-3.1-405b --hw b200 --devices 512 --tp 8 --pp 8 --global-batch 512 "
                         "--micro-batch 1 --recompute full"),
    "mixtral22-tp2-pp2-vp2-a2a": ("--model mixtral-8x22b --hw h100 --devices 64 --tp 2 --pp 2 --vp 2 --ep 8 "
                                  "--overlap-a2a --global-batch 256 --micro-batch 1"),
    "llama8b-cp2-fsdp": ("--model llama-3-8b --hw b200 --devices 16 --cp 2 --fsdp --seq 8192 --global-batch 64 "
                         "--micro-batch 1"),
    "qwen-a100-zero0-bf16": ("--model qwen3-30b-a3b --hw a100-80gb --devices 64 --ep 8 --zero 0 --grad-bytes 2 "
                             "--global-batch 256 --micro-batch 1 --recompute full"),
    "qwen-search": "--model qwen3-30b-a3b --hw h100 --devices 16 --search --global-batch 256",
    "qwen-deepep-sms": ("--model qwen3-30b-a3b --hw h100 --devices 16 --ep 16 --global-batch 1024 --micro-batch 1 "
                        "--overlap-a2a --deepep --dispatcher-sms 32"),
}
# Plans whose model has a feature Megatron has no flag for: the emitted launch says so, and reading it back
# plans the nearest model Megatron builds (OLMoE normalises the full q and k, Megatron per head).
NOT_EXPRESSIBLE = {"olmoe-ep8": "normalises per head"}


def _emit(cli, args: str, kind: str = "megatron") -> str:
    code, out, err = cli("plan", *args.split(), "--emit", kind)
    assert code in (0, 1), err
    return out


def _flat(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def _checked(text: str, devices: int) -> tuple[dict, dict]:
    launch = read_launch(text, "emitted")
    assert launch.devices == devices
    return dict(launch.args, world=launch.devices), launch.env


def _plan_json(cli, *args: str, stdin: str | None = None, monkeypatch=None) -> dict:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    data = json.loads(out)
    return data["best"] if "best" in data else data


def _same_plan(a: dict, b: dict) -> None:
    for key in ("tiles", "tile_batch", "micro_batches", "step_batch", "fits"):
        assert a["plan"][key] == b["plan"][key], key
    assert a["memory_bytes"] == b["memory_bytes"]
    assert a["flops_per_step"] == b["flops_per_step"]
    assert a["parallelism"] == b["parallelism"]
    assert (a["throughput"] is None) == (b["throughput"] is None)  # a plan that does not fit has no step time
    if a["throughput"] is not None:
        assert a["throughput"]["step_time_s"] == pytest.approx(b["throughput"]["step_time_s"], rel=1e-12)
    for key in ("params_total", "params_active", "hidden_size", "num_layers", "vocab_size", "ffn_size", "num_experts"):
        assert a["model"][key] == b["model"][key], key


@pytest.mark.parametrize("name", PLANS)
def test_emitted_launch_passes_megatrons_rules_and_plans_back_the_same(cli, monkeypatch, name):
    """Every emitted command meets every encoded Megatron rule (none is reported refused), and reading it back
    with --from-megatron plans the same run: layout, batch split, memory, FLOPs and step time."""
    args = PLANS[name]
    text = _emit(cli, args)
    devices = int(re.search(r"--devices (\d+)", args).group(1))
    margs, env = _checked(text, devices)
    assert [r.name for r in violations(margs, env)] == []
    assert "MEGATRON WOULD REFUSE" not in text
    hw = re.search(r"--hw (\S+)", args).group(1)
    original = _plan_json(cli, *args.split())
    back = _plan_json(cli, "--hw", hw, "--from-megatron", "-", stdin=text, monkeypatch=monkeypatch)
    if name in NOT_EXPRESSIBLE:
        assert NOT_EXPRESSIBLE[name] in text
        assert back["model"]["params_total"] != original["model"]["params_total"]
        return
    assert original["plan"]["tiles"] == 1  # Megatron runs a micro-batch untiled: a tiled plan would not round-trip
    _same_plan(original, back)


def test_the_three_refused_combinations_now_run(cli):
    """Issue 23's three plans Megatron refused: --zero 2|3 emits --ckpt-format fsdp_dtensor (arguments.py:1169)
    and no CUDA_DEVICE_MAX_CONNECTIONS=1 (1166); the all-to-all overlap with full recomputation (TC:3022) or
    with PP > 1 and no VP (TC:3007) is dropped from the plan with the reason."""
    # freshuser17: ZeRO-3 is emitted as the Megatron-FSDP it is read back as (--fsdp); --zero 3 alone is refused
    for zero in ("2", "3 --fsdp"):  # with TP 2, which alone would need CUDA_DEVICE_MAX_CONNECTIONS=1
        text = _emit(cli, f"--model qwen3-30b-a3b --hw h100 --devices 64 --tp 2 --ep 8 --zero {zero} "
                          "--global-batch 512")
        assert "--use-megatron-fsdp" in text and "--ckpt-format fsdp_dtensor" in text
        assert "export CUDA_DEVICE_MAX_CONNECTIONS" not in text
        strategy = "optim_grads" if zero == "2" else "optim_grads_params"
        assert f"--data-parallel-sharding-strategy {strategy}" in text
    for extra, why in (("--recompute full", "full recomputation"),
                       ("--pp 2", "pipeline parallelism without a virtual pipeline")):
        base = f"--model qwen3-30b-a3b --hw h100 --devices 64 --ep 8 --overlap-a2a --global-batch 512 {extra}"
        code, out, err = cli("plan", *base.split(), "--json")
        r = json.loads(out)
        assert r["parallelism"]["overlaps"]["all_to_all"] is False
        assert why in r["inputs"]["defaults"]["overlap_all_to_all"]
        text = _emit(cli, base)
        launch = [line for line in text.splitlines() if not line.startswith("#")]
        assert not any("--overlap-moe-expert-parallel-comm" in line for line in launch)
        # review35: the launch says the asked-for overlap is left out, and why
        assert f"# --overlap-moe-expert-parallel-comm was asked for and is left out: Megatron-Core refuses " \
               f"overlap_moe_expert_parallel_comm with {why}" in text
        code, out, err = cli("plan", *base.split())
        assert why in " ".join(out.split())  # the table says so too


def test_dispatcher_and_environment_follow_what_btacalc_times(cli):
    """EP > 1 without the overlap still dispatches with an all-to-all (Megatron's default is allgather,
    arguments.py); GPT-3 with TP on H100 exports CUDA_DEVICE_MAX_CONNECTIONS=1 (arguments.py:1477)."""
    text = _emit(cli, "--model qwen3-30b-a3b --hw h100 --devices 64 --ep 8 --global-batch 512")
    assert "--moe-token-dispatcher-type alltoall" in text
    text = _emit(cli, "--model gpt3-175b --hw h100 --devices 64 --tp 8 --pp 8 --seq 2048 --global-batch 64")
    assert text.count("export CUDA_DEVICE_MAX_CONNECTIONS=1") == 1
    text = _emit(cli, "--model llama-3-8b --hw h100 --devices 8 --global-batch 64")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in text


def test_deepep_is_emitted_as_megatrons_flex_dispatcher(cli):
    """--deepep is Megatron's flex dispatcher with the deepep backend (transformer_config.py L891-900;
    --moe-enable-deepep is deprecated for it, L1743-1753) and --dispatcher-sms its --moe-flex-dispatcher-num-sms
    (L964); without --dispatcher-sms Megatron-Core's own default holds, so no SM flag is written. Reading the
    deprecated spellings back gives the same run."""
    text = _emit(cli, "--model qwen3-30b-a3b --hw h100 --devices 16 --ep 16 --global-batch 1024 --micro-batch 1 "
                      "--deepep --dispatcher-sms 32")
    flags = " ".join(text.split())
    for flag in ("--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep",
                 "--moe-flex-dispatcher-num-sms 32"):
        assert flag in flags, flag
    assert "--moe-enable-deepep" not in flags and "alltoall" not in flags
    text = _emit(cli, "--model qwen3-30b-a3b --hw h100 --devices 16 --ep 16 --global-batch 1024 --micro-batch 1 "
                      "--deepep")
    assert "--moe-flex-dispatcher-backend deepep" in text and "num-sms" not in text
    from btacalc.config.megatron_codec import ROWS, decode

    row = tuple(r for r in ROWS if r.name == "dispatcher")
    fields, _ = decode({"moe_token_dispatcher_type": "flex", "moe_enable_deepep": True, "moe_deepep_num_sms": 24},
                       row)
    assert fields["layout.deepep"] is True and fields["layout.dispatcher_sms"] == 24
    fields, _ = decode({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
                        "moe_hybridep_num_sms": 16}, row)
    assert fields["layout.deepep"] is True and fields["layout.dispatcher_sms"] == 16
    fields, _ = decode({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "ncclep"}, row)
    assert "layout.deepep" not in fields and "ncclep" in fields["run.dispatcher_note"]


def test_architecture_flags_say_the_model(cli):
    """DeepSeek-V3 (HF config: 61 layers, first_k_dense_replace 3, MLA ranks 1536/512, rope 64, nope 128, v 128,
    256 experts top-8 of width 2048, one shared expert of 2048, sigmoid router, one MTP module)."""
    text = _emit(cli, "--model deepseek-v3 --hw b200 --devices 256 --ep 64 --fsdp --recompute full --mtp "
                      "--global-batch 256 --micro-batch 1")
    flat = _flat(text)
    for flag in ("--num-layers 61", "--hidden-size 7168", "--num-attention-heads 128", "--multi-latent-attention",
                 "--q-lora-rank 1536", "--kv-lora-rank 512", "--qk-head-dim 128", "--qk-pos-emb-head-dim 64",
                 "--v-head-dim 128", "--num-experts 256", "--moe-router-topk 8", "--moe-ffn-hidden-size 2048",
                 "--moe-shared-expert-intermediate-size 2048", "--moe-layer-freq '([0]*3+[1]*58)'",
                 "--ffn-hidden-size 18432", "--moe-router-score-function sigmoid",
                 "--mtp-num-layers 1", "--normalization RMSNorm", "--swiglu", "--position-embedding-type rope"):
        assert flag in flat, flag
    # GQA: Llama 3 8B has 8 key/value groups of its 32 heads; no --kv-channels when d_h = h / a
    flat = _flat(_emit(cli, "--model llama-3-8b --hw h100 --devices 8 --global-batch 64"))
    assert "--group-query-attention --num-query-groups 8" in flat and "--kv-channels" not in flat


# --- each rule, broken on purpose ----------------------------------------------------------------------------

BASE = {"num_layers": 48, "hidden_size": 2048, "num_attention_heads": 32, "seq_length": 4096,
        "max_position_embeddings": 4096, "micro_batch_size": 1, "global_batch_size": 64, "world": 64,
        "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
        "num_experts": 128, "expert_model_parallel_size": 8, "moe_token_dispatcher_type": "alltoall", "bf16": True,
        "add_bias_linear": False}
FSDP = {"use_megatron_fsdp": True, "ckpt_format": "fsdp_dtensor"}  # a valid Megatron-FSDP launch's two flags
BROKEN = {
    # hostile22: arguments.py L432 (the world size over TP x PP x CP); 8 ranks of TP 16 stopped the batch rule with a
    # ZeroDivisionError
    "world-divides": ({"pipeline_model_parallel_size": 3}, {}),
    # review26: dot_product_attention.py L57-59 (DotProductAttention, the local core attention, asserts CP 1)
    "local-attention-cp": ({"transformer_impl": "local", "context_parallel_size": 2},
                           {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
    "fsdp-ckpt-format": ({"use_megatron_fsdp": True}, {}),
    "fsdp-connections": ({"use_megatron_fsdp": True, "ckpt_format": "fsdp_dtensor"}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
    "fsdp-dtensor-needs-fsdp": ({"ckpt_format": "fsdp_dtensor"}, {}),
    # arguments.py L1189-1191: manual registration of Megatron-FSDP's buffers needs both (here FSDP without nccl_ub)
    "fsdp-manual-registration": ({"use_megatron_fsdp": True, "ckpt_format": "fsdp_dtensor",
                                  "fsdp_manual_registration": True}, {}),
    # review10: Megatron-FSDP's other refusals (arguments.py L1124-1126, L1138-1147, L1150, L1162-1164, L1183-1187,
    # L1447), each planned before as if Megatron ran it
    "fsdp-v2-distributed-optimizer": ({**FSDP, "megatron_fsdp_version": 2, "use_distributed_optimizer": True}, {}),
    "fsdp-grouped-moe-params": ({**FSDP, "moe_single_grouped_weight": True}, {}),
    "fsdp-optimizer": ({**FSDP, "optimizer": "muon"}, {}),
    "fsdp-weight-hash": ({**FSDP, "check_weight_hash_across_dp_replicas_interval": 10}, {}),
    "fsdp-meta-no-shard": ({**FSDP, "data_parallel_sharding_strategy": "no_shard",
                            "init_model_with_meta_device": True}, {}),
    "fsdp-hybrid-cp": ({**FSDP, "hybrid_context_parallel": True}, {}),
    "tp-cp-connections": ({"tensor_model_parallel_size": 2, "sequence_parallel": True}, {}),
    # hostile24: language_module.py L120-126 (Megatron-Core's default backend auto wants all three switches on)
    "attention-switches": ({}, {"NVTE_FUSED_ATTN": "0"}),
    "param-gather-sharded": ({"overlap_param_gather": True, "overlap_grad_reduce": True}, {}),
    "param-gather-grad-reduce": ({"overlap_param_gather": True, "use_distributed_optimizer": True}, {}),
    "tp-overlap-sp": ({"tp_comm_overlap": True}, {}),
    "cp-sequence": ({"context_parallel_size": 4, "seq_length": 4100, "max_position_embeddings": 4100},
                    {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
    "positions": ({"max_position_embeddings": 2048}, {}),
    # hostile35: arguments.py L1357-1358
    "decoder-positions": ({"decoder_seq_length": 8192}, {}),
    "even-pipeline": ({"pipeline_model_parallel_size": 5, "world": 40}, {}),
    "virtual-pipeline": ({"pipeline_model_parallel_size": 4, "num_virtual_stages_per_pipeline_rank": 5}, {}),
    # review19: arguments.py L928-938, L955-956, L968-969, L972-973 (the layers-per-virtual-stage form of VP)
    "virtual-pipeline-one-way": ({"pipeline_model_parallel_size": 2, "num_virtual_stages_per_pipeline_rank": 2,
                                  "num_layers_per_virtual_pipeline_stage": 12}, {}),
    "vp-per-stage-even": ({"pipeline_model_parallel_size": 2, "num_layers_per_virtual_pipeline_stage": 12,
                           "decoder_first_pipeline_num_layers": 24}, {}),
    "vp-per-stage-pp": ({"pipeline_model_parallel_size": 5, "world": 40, "num_layers_per_virtual_pipeline_stage": 3},
                        {}),
    "vp-per-stage-divides": ({"pipeline_model_parallel_size": 2, "num_layers_per_virtual_pipeline_stage": 5}, {}),
    "interleave-pp": ({"pipeline_model_parallel_size": 2, "num_virtual_stages_per_pipeline_rank": 2,
                       "overlap_p2p_comm": False}, {}),
    "heads-tp": ({"tensor_model_parallel_size": 3, "world": 48, "sequence_parallel": True},
                 {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
    "groups-tp": ({"group_query_attention": True, "num_query_groups": 6, "tensor_model_parallel_size": 4,
                   "sequence_parallel": True}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
    "experts-ep": ({"expert_model_parallel_size": 3}, {}),
    "moe-tp-sp": ({"tensor_model_parallel_size": 2}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
    # transformer_config.py L2612-2625: biased MoE linears (GPT-OSS) only at ETP 1; the aux-loss-free expert bias
    # (DeepSeek-V3) only with a sigmoid or sqrtsoftplus score (btacalc's GPT-OSS launch wrote it with softmax)
    # (BASE's experts are GeLU: a biased launch also turns the fused bias-GeLU off, gelu's rule below)
    "moe-bias-etp": ({"add_bias_linear": True, "bias_gelu_fusion": False, "expert_tensor_parallel_size": 2}, {}),
    "expert-bias-score": ({"moe_router_enable_expert_bias": True}, {}),
    # hostile23: transformer_config.py L1813-1819 (a shared-expert width of 0; "0" read as a width before)
    "shared-expert-size": ({"moe_shared_expert_intermediate_size": 0}, {}),
    # review19: shared_experts.py L124 asserts add_bias_linear is off (a shared-expert model with Megatron's default)
    "shared-expert-bias": ({"moe_shared_expert_intermediate_size": 256, "add_bias_linear": True,
                            "bias_gelu_fusion": False}, {}),
    # gelu: moe/experts.py L205-207 (TEGroupedMLP: biases without the fused bias-dropout-add), L982-985 (no fused
    # bias-GeLU with the routing weight; BASE's experts are GeLU: no --swiglu)
    "moe-grouped-bias-dropout": ({"add_bias_linear": True, "bias_gelu_fusion": False, "moe_grouped_gemm": True}, {}),
    "moe-gelu-bias-fusion": ({"add_bias_linear": True}, {}),
    "batch-divides": ({"global_batch_size": 100}, {}),
    "selective-no-method": ({"recompute_granularity": "selective", "recompute_method": "uniform"}, {}),
    "fp8-or-fp4": ({"fp8": "hybrid", "fp4": "e2m1"}, {}),
    # review35: transformer_config.py L2661-2669 (BASE's softmax router at Megatron's default top-k 2 passes) and
    # arguments.py L1095-1097 (BASE has no distributed optimizer)
    "top1-pre-softmax": ({"moe_router_topk": 1}, {}),
    # transformer_config.py L1839-1860: token dropping only under the auxiliary-loss balancings (and none)
    "capacity-factor-balancing": ({"moe_expert_capacity_factor": 1.0, "moe_router_load_balancing_type": "sinkhorn"},
                                  {}),
    # transformer_config.py L1828-1834: a list of balancing types needs a loss-coefficient list of its length
    "aux-loss-coeff-length": ({"moe_router_load_balancing_type": ["aux_loss", "seq_aux_loss"],
                               "moe_aux_loss_coeff": [0.01]}, {}),
    "fp8-param-gather-sharded": ({"fp8": "hybrid", "fp8_param_gather": True}, {}),
    # arguments.py L1697-1702 (since 168cb15)
    "te-cross-entropy": ({"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}, {}),
    "moe-act-grouped-gemm": ({"recompute_granularity": "selective", "recompute_modules": ["moe_act"]}, {}),
    # freshuser17: transformer_config.py L1969-1973 and L2000-2006
    "mla-up-proj-mla": ({"recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"]}, {}),
    "fp8-delayed-recompute": ({"fp8": "hybrid", "recompute_granularity": "selective",
                               "recompute_modules": ["layernorm"]}, {}),
    "a2a-vp": ({"overlap_moe_expert_parallel_comm": True, "pipeline_model_parallel_size": 2}, {}),
    "a2a-ep": ({"overlap_moe_expert_parallel_comm": True, "expert_model_parallel_size": 1}, {}),
    "a2a-dispatcher": ({"overlap_moe_expert_parallel_comm": True, "moe_token_dispatcher_type": "allgather"}, {}),
    "a2a-full-recompute": ({"overlap_moe_expert_parallel_comm": True, "recompute_granularity": "full"}, {}),
    "a2a-recompute-method": ({"overlap_moe_expert_parallel_comm": True, "recompute_method": "block"}, {}),
    "a2a-recompute-layers": ({"overlap_moe_expert_parallel_comm": True, "recompute_num_layers": 2}, {}),
    "a2a-moe-module": ({"overlap_moe_expert_parallel_comm": True, "recompute_granularity": "selective",
                        "recompute_modules": ["moe"]}, {}),
    "a2a-16-bit": ({"overlap_moe_expert_parallel_comm": True, "bf16": False}, {}),
    "a2a-early-release": ({"ep_overlap_early_attn_memory_release": True}, {}),
    "a2a-delay-wgrad": ({"delay_wgrad_compute": True}, {}),
    # review25: the shared experts' overlap, which DeepSeek-V3's Megatron-Bridge model bridge turns on
    "a2a-shared-expert-overlap": ({"overlap_moe_expert_parallel_comm": True, "moe_shared_expert_overlap": True}, {}),
    "shared-experts-recompute-overlap": ({"recompute_granularity": "selective", "recompute_modules": ["shared_experts"],
                                          "moe_shared_expert_intermediate_size": 1024,
                                          "moe_shared_expert_overlap": True}, {}),
    "shared-expert-overlap-dispatcher": ({"moe_shared_expert_intermediate_size": 1024, "moe_shared_expert_overlap": True,
                                          "moe_token_dispatcher_type": "allgather"}, {}),
    "a2a-mtp": ({"overlap_moe_expert_parallel_comm": True, "mtp_num_layers": 2, "position_embedding_type": "rope"}, {}),
    # review27: transformer_config.py L1743-1745 (moe_enable_deepep outside flex), L2641-2659 (router padding, or the
    # deprecated fp8 flag that sets it, under allgather), L2977-2982 (Bridge's variable_seq_lengths under allgather)
    "deepep-flex": ({"moe_enable_deepep": True}, {}),
    # review29: transformer_config.py L1746-1747 (the deprecated switch beside the hybridep backend), L1795-1811 (the
    # deprecated SM knobs routed to moe_flex_dispatcher_num_sms disagree)
    "deepep-hybridep": ({"moe_enable_deepep": True, "moe_token_dispatcher_type": "flex",
                         "moe_flex_dispatcher_backend": "hybridep"}, {}),
    "flex-sms-conflict": ({"moe_deepep_num_sms": 24, "moe_hybridep_num_sms": 32}, {}),
    "padding-quantization-dispatcher": ({"fp8": "hybrid", "moe_router_padding_for_fp8": True,
                                         "moe_token_dispatcher_type": "allgather"}, {}),
    "variable-seq-lengths-dispatcher": ({"variable_seq_lengths": True, "moe_token_dispatcher_type": "allgather"}, {}),
    # semantics20: arguments.py L881-885 (MTP with rope or none only; Megatron's default is learned_absolute, and
    # GPT-OSS's yarn is refused as well), transformer_config.py L2677-2689 (group-limited routing)
    "mtp-positions": ({"mtp_num_layers": 1, "position_embedding_type": "yarn"}, {}),
    "router-groups": ({"moe_router_group_topk": 4}, {}),
    "router-groups-split": ({"moe_router_group_topk": 4, "moe_router_num_groups": 3}, {}),
    # review20: multi_latent_attention.py L316 (GPTModel's yarn embedding handed to MLA), argument_utils.py L339-341
    "mla-yarn-positions": ({"multi_latent_attention": True, "position_embedding_type": "yarn"}, {}),
    "rope-type-attention": ({"rope_type": "yarn"}, {}),
    # distributed_data_parallel_config.py L275-277: --ddp-num-buckets with --ddp-bucket-size
    "ddp-buckets": ({"ddp_num_buckets": 4, "ddp_bucket_size": 40_000_000}, {}),
    "deterministic-options": ({"deterministic_mode": True, "cross_entropy_loss_fusion": True}, {}),
    "deterministic-nccl-algo": ({"deterministic_mode": True}, {"NCCL_ALGO": "Tree"}),
    # semantics19: TransformerEngine @ d0067d0 context_parallel.py L5054-5060 and L5065-5067 (Megatron's default
    # --cp-comm-type is p2p)
    "cp-window-comm": ({"context_parallel_size": 2, "window_size": "(127,0)"}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
    "cp-softmax-comm": ({"context_parallel_size": 2, "softmax_type": "learnable"}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
    # semantics19: TransformerEngine @ d0067d0 utils.py L1535-1544 (deterministic FusedAttention has no sinks)
    "deterministic-sinks": ({"deterministic_mode": True, "softmax_type": "learnable", "attention_backend": "fused"},
                            {}),
    # semantics19: transformer_config.py L2852-2855, L2860-2867, L2875-2881 (attention dropout at Megatron's default
    # 0.1, recompute modules at its default core_attn)
    "graphs-full-recompute": ({"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn"],
                               "recompute_granularity": "full"}, {}),
    "graphs-moe-recompute": ({"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["moe_router"],
                              "recompute_granularity": "selective", "recompute_modules": ["moe"]}, {}),
    "graphs-dropout-recompute": ({"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn"],
                                  "recompute_granularity": "selective"}, {}),
    # semantics19: transformer_config.py L2800-2801
    "cuda-graphs-offload": ({"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn"],
                             "cpu_offloading_num_layers": 4}, {}),
}


def test_every_rule_cites_a_line_and_is_tested():
    files = ("megatron/training/arguments.py", "megatron/training/argument_utils.py",
             "megatron/core/transformer/multi_latent_attention.py", "megatron/core/transformer/transformer_config.py",
             "megatron/core/num_microbatches_calculator.py", "megatron/core/transformer/moe/moe_layer.py",
             "megatron/core/transformer/moe/shared_experts.py", "megatron/core/transformer/moe/experts.py",
             "megatron/training/determinism.py", "megatron/core/distributed/distributed_data_parallel_config.py",
             "megatron/core/models/common/language_module/language_module.py",
             "megatron/core/transformer/dot_product_attention.py",
             "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py",
             "transformer_engine/pytorch/attention/dot_product_attention/utils.py")
    for rule in RULES:
        path, line = rule.source.rsplit(":", 1)
        assert path in files and int(line) > 0, rule
    assert sorted(BROKEN) == sorted(r.name for r in RULES)
    assert violations(BASE, {}) == []


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_rule_is_reported_alone(name):
    """Each mutation of a valid run breaks exactly the rule it targets (so each rule is live and specific)."""
    change, env = BROKEN[name]
    assert [r.name for r in violations({**BASE, **change}, env)] == [name]


def test_tp_comm_overlap_at_tp_1_is_refused_even_with_sequence_parallel():
    """review8: Megatron-LM switches sequence parallelism off at TP 1 (arguments.py L1433-1439) before asserting it
    under --tp-comm-overlap (L1441-1442), so --sequence-parallel does not save the overlap at TP 1; the rule passed it."""
    run = {**BASE, "tp_comm_overlap": True, "sequence_parallel": True}
    assert [r.name for r in violations(run, {})] == ["tp-overlap-sp"]
    assert violations({**run, "tensor_model_parallel_size": 2}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}) == []


@pytest.mark.parametrize("algo, refused", [("Ring", False), ("Ring,CollnetDirect", False), ("^NVLS", False),
                                           ("Tree", True), ("Ring,Tree", True), (",", True), ("ring", True)])
def test_deterministic_mode_takes_megatrons_nccl_algorithms(algo, refused):
    """determinism.py L48: Ring, CollnetDirect, CollnetChain, ^NVLS; L88-94: every comma-separated token one of them,
    and at least one token (an exact, case-sensitive match)."""
    run = {**BASE, "deterministic_mode": True}
    assert bool(violations(run, {"NCCL_ALGO": algo})) is refused
    assert violations({**BASE}, {"NCCL_ALGO": "Tree"}) == []  # without --deterministic-mode any algorithm runs


# --- reading launches ----------------------------------------------------------------------------------------

RECIPES = sorted(DATA.glob("*.args"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_published_launches_read_with_every_ignored_flag_explained(cli, path):
    text = path.read_text()
    assert "Source: NVIDIA/Megatron-LM@d98e8a64" in text
    run = import_megatron(text, str(path))
    assert [f for f, reason in run.ignored if reason == NOT_MODELLED] == []
    launch = read_launch(text)
    assert [r.name for r in violations(dict(launch.args, world=run.request.devices), launch.env)] == []
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path), "--json")
    assert code in (0, 1), err
    r = json.loads(out)
    assert r["imported"]["ignored"]  # every launch sets optimiser or logging flags btacalc leaves out


def test_published_launches_give_their_layouts(cli):
    """The numbers each script sets (see the files' sources)."""
    expect = {  # file: (devices, TP, PP, EP, ZeRO, micro-batch, global batch, vocabulary)
        "gpt3-175b": (128, 8, 16, 1, 0, 1, 1536, 51200),
        "llama3-8b-h100-fp8": (8, 1, 1, 1, 1, 1, 128, 128256),
        "llama3-8b-fsdp-h100-fp8": (8, 1, 1, 1, 3, 1, 128, 128256),
        "mixtral-8x7b": (32, 1, 4, 8, 1, 1, 256, 32000),
    }
    for stem, (devices, tp, pp, ep, zero, micro, gbs, vocab) in expect.items():
        run = import_megatron((DATA / f"{stem}.args").read_text(), stem)
        req = run.request
        assert (req.devices, req.tensor_parallel, req.pipeline_parallel, req.expert_parallel, req.zero_stage) == \
            (devices, tp, pp, ep, zero), stem
        assert (req.limits.micro_batch, req.limits.global_batch, run.model.vocab_size) == (micro, gbs, vocab), stem
    fp8 = import_megatron((DATA / "llama3-8b-h100-fp8.args").read_text(), "x")
    assert fp8.request.gradient_bytes == 2 and fp8.request.overlaps.param_gather is True  # --grad-reduce-in-bf16
    assert not fp8.request.sequence_parallel  # TP 1: Megatron turns it off (arguments.py:1433)


BRIDGE_RECIPES = {"qwen3-30b-a3b-8gpu-h100-bridge": ("qwen3-30b-a3b", 8), "llama3-70b-32gpu-h100-bridge": ("llama-3-70b", 32)}


@pytest.mark.parametrize("stem", BRIDGE_RECIPES)
def test_bridge_recipes_read_with_every_ignored_key_explained(cli, stem):
    model, devices = BRIDGE_RECIPES[stem]
    path = DATA / f"{stem}.yaml"
    assert "Source: NVIDIA-NeMo/Megatron-Bridge@067f987d" in path.read_text()
    run = import_bridge(path.read_text(), str(path), devices, resolve_model(model))
    assert [f for f, reason in run.ignored if reason == NOT_MODELLED] == []
    code, out, err = cli("plan", "--hw", "h100", "--model", model, "--devices", str(devices), "--from-bridge",
                         str(path), "--json")
    assert code in (0, 1), err


def test_llama3_70b_bridge_recipe_layout():
    """llama3_70b_pretrain_32gpu_h100_bf16_config: TP 4, PP 4, VP 5, CP 2, SP; batch 512 x 1; TP overlap."""
    path = DATA / "llama3-70b-32gpu-h100-bridge.yaml"
    req = import_bridge(path.read_text(), str(path), 32, resolve_model("llama-3-70b")).request
    assert (req.tensor_parallel, req.pipeline_parallel, req.virtual_pipeline, req.context_parallel) == (4, 4, 5, 2)
    assert req.sequence_parallel and req.overlaps.tp_comm and req.recompute == "none"
    assert (req.limits.global_batch, req.limits.micro_batch, req.seq_len) == (512, 1, 8192)


def test_bridge_recipe_reads_with_the_model_from_hugging_face(cli):
    path = DATA / "qwen3-30b-a3b-8gpu-h100-bridge.yaml"
    run = import_bridge(path.read_text(), str(path), 8, resolve_model("qwen3-30b-a3b"))
    req = run.request
    assert (req.tensor_parallel, req.pipeline_parallel, req.expert_parallel, req.expert_tensor_parallel) == (4, 2, 4, 1)
    assert (req.recompute, req.gradient_bytes, req.zero_stage) == ("full", 4, 1)
    assert (req.limits.micro_batch, req.limits.global_batch) == (2, 32)
    assert [f for f, reason in run.ignored if reason == NOT_MODELLED] == []
    code, out, err = cli("plan", "--hw", "h100", "--model", "qwen3-30b-a3b", "--devices", "8", "--from-bridge",
                         str(path), "--json")
    assert code in (0, 1), err and json.loads(out)["parallelism"]["micro_batches"] == 32 // 2


def test_emit_bridge_reads_back(cli):
    args = "--model mixtral-8x7b --hw h100 --devices 32 --pp 4 --ep 8 --global-batch 256 --micro-batch 1"
    text = _emit(cli, args, "bridge")
    data: dict = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            data[key.removeprefix("++")] = value  # bridgeparse: the comm_overlap section is written `++key=`
    assert data["model.num_moe_experts"] == "8" and data["model.pipeline_model_parallel_size"] == "4"
    assert data["ddp.use_distributed_optimizer"] == "True" and data["mixed_precision"] == "bf16_mixed"
    yaml_text = "\n".join(f"{k}: {v}" for k, v in data.items())
    run = import_bridge(yaml_text, "r.yaml", 32)
    assert run.model.num_experts == 8 and run.request.pipeline_parallel == 4 and run.request.expert_parallel == 8


SCRIPT = """#!/bin/bash
# a launch as people write them
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-2}
TP=2
MODEL_ARGS=(
    --num-layers 32 --hidden-size 4096   # Llama 3 8B
    --ffn-hidden-size 14336 --num-attention-heads 32
    --group-query-attention --num-query-groups 8
)
MODEL_ARGS+=(--swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights)
NCCL_DEBUG=WARN torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES pretrain_gpt.py \\
    ${MODEL_ARGS[@]} --disable-bias-linear --attention-dropout 0.0 --hidden-dropout 0.0 \\
    --tensor-model-parallel-size $TP --sequence-parallel --seq-length 8192 --max-position-embeddings 8192 \\
    --micro-batch-size 1 --global-batch-size $((16*8)) --bf16 --vocab-size 128256 --lr 3e-4
"""


def test_a_launch_script_with_variables_arrays_and_continuations():
    launch = read_launch(SCRIPT, "run.sh")
    assert launch.devices == 16 and launch.devices_per_node == 8
    assert launch.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_DEBUG": "WARN"}
    assert launch.args["num_layers"] == "32" and launch.args["global_batch_size"] == "128"
    run = import_megatron(SCRIPT, "run.sh")
    assert run.model.name.startswith("llama-3-8b") and run.request.tensor_parallel == 2
    assert [f for f, _ in run.ignored] == ["--lr"]


@pytest.mark.parametrize("text, message", [
    ("--num-layers 2 --frobnicate 3", "unknown Megatron-LM flag --frobnicate"),
    ("--tensor-model-parallel-size 2 --tensor-model-parallel-size 4", "contradictory flags"),
    ("--num-layers", "--num-layers needs a value"),
    ("--bf16=1", "is a switch"),
    ("--num-layers 2 stray", "is not a Megatron-LM flag"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 "
     "--micro-batch-size 1 --bf16 --overlap-param-gather --overlap-grad-reduce",
     "Megatron-LM would refuse this launch: --overlap-param-gather needs the distributed optimizer"),
])
def test_bad_launches_are_one_line_errors(cli, monkeypatch, text, message):
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-megatron", "-")
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1, err


def test_from_megatron_refuses_plan_options_the_file_gives(cli):
    code, out, err = cli("plan", "--hw", "h100", "--tp", "2", "--from-megatron", str(RECIPES[0]))
    assert code == 2 and "--tp with --from-megatron" in err and len(err.strip().splitlines()) == 1


def test_the_table_maps_every_destination_to_a_megatron_flag_and_a_bridge_key():
    """Every destination a row writes is a Megatron-LM flag at the pin, and renders and reads back."""
    spec = resolve_model("deepseek-v3")
    from btacalc.config.megatron_model_rows import model_fields

    fields = {**model_fields(spec), "run.seq_len": 4096, "run.mtp": True, "layout.tensor_parallel": 2,
              "layout.sequence_parallel": True, "layout.pipeline_parallel": 4, "layout.virtual_pipeline": 2,
              "layout.pipeline_split": "even", "layout.context_parallel": 1, "layout.expert_parallel": 8,
              "layout.expert_tensor_parallel": 1, "layout.zero_stage": 3, "batch.micro_batch": 1,
              "batch.global_batch": 64, "run.recompute": "core_attn,mlp", "run.attention": "flash",
              "run.gradient_bytes": 2, "overlap.grad_reduce": True, "overlap.param_gather": True,
              "overlap.tp_comm": True, "overlap.all_to_all": True, "overlap.p2p": True,
              "run.precision": "mxfp8", "layout.first_stage_layers": 13, "layout.last_stage_layers": 16}
    args = encode(fields)
    dests = {f.dest for f in megatron_flags().values()}
    assert set(args) <= dests
    assert all(bridge_key(d) is None or "." in bridge_key(d) or d == "bf16" for d in args)
    text = " ".join(render_flags(args))
    again = read_launch(text, "x").args
    back, _ = decode(again)
    for key, value in fields.items():
        if key in back:
            assert back[key] == value, key
    assert len(ROWS) >= 30


# --- run files ---------------------------------------------------------------------------------------------


def _plan_params():
    import typer

    from btacalc.cli.app import app
    from btacalc.cli.runfile import NOT_IN_RUN_FILE

    command = typer.main.get_command(app).commands["plan"]
    return command, [p for p in command.params if p.name not in NOT_IN_RUN_FILE]


SAMPLES = {"model": "llama-3-8b", "hw": "h100", "name": "mine", "emit": "megatron", "output": "plan.json",
           "recompute": "full", "attention": "flash", "loss": "stored", "accounting": "pytorch",
           "memory_model": "resident", "objective": "density", "routing_imbalance": 1.5, "sensitivity": 10.0,
           "from_megatron": "run.sh", "from_bridge": "recipe.yaml", "grad_bytes": 2, "zero": 1,
           "precision": "mxfp8", "pipeline_layout": "Et|tL", "optimizer_moments": "bf16", "optimizer": "sgd"}


def test_a_run_file_covers_every_plan_option(tmp_path):
    """Every option of `plan` (introspected from the command) is accepted from a run file, converted by the
    option's own type."""
    from btacalc.cli.runfile import run_file_options

    command, params = _plan_params()
    lines = []
    for p in params:
        flag = bool(getattr(p, "is_flag", False))
        value = SAMPLES.get(p.name, True if flag else 2)
        lines.append(f"{p.name.replace('_', '-')} = {json.dumps(value)}")
    path = tmp_path / "run.toml"
    path.write_text("\n".join(lines) + "\n")
    from btacalc.cli.runfile import Context

    got = run_file_options(Context(command), path)
    assert sorted(got) == sorted(p.name for p in params)


def test_a_run_file_takes_each_option_by_its_long_name(tmp_path):
    """hostile15: a key is an option's name as `plan --help` prints it (`json`, `profile`, whose parameters are named
    as_json and profile_run, were "unknown option"); every option, by its first long name, gives its parameter."""
    from btacalc.cli.runfile import Context, run_file_options

    command, params = _plan_params()
    lines = []
    for p in params:
        flag = bool(getattr(p, "is_flag", False))
        value = SAMPLES.get(p.name, True if flag else 2)
        long_name = next(o for o in p.opts if o.startswith("--"))[2:]
        lines.append(f"{long_name} = {json.dumps(value)}")
    assert "json = true" in lines and "profile = true" in lines
    path = tmp_path / "run.toml"
    path.write_text("\n".join(lines) + "\n")
    assert sorted(run_file_options(Context(command), path)) == sorted(p.name for p in params)


def test_a_run_file_json_key_prints_as_the_flag(cli, tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('model = "llama-3-8b"\nhw = "h100"\ndevices = 8\njson = true\n')
    code, out, err = cli("plan", "--config", str(path))
    code2, out2, _ = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--json")
    assert (code, out) == (code2, out2) and out.startswith("{"), err


def test_a_run_file_plans_as_its_flags(cli, tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('model = "qwen3-30b-a3b"\nhw = "h100"\ndevices = 64\ntp = 2\nep = 8\nglobal-batch = 512\n'
                    'micro-batch = 1\noverlap-grad-reduce = true\n')
    code, out, err = cli("plan", "--config", str(path), "--json")
    flags = _plan_json(cli, *"--model qwen3-30b-a3b --hw h100 --devices 64 --tp 2 --ep 8 --global-batch 512 "
                            "--micro-batch 1 --overlap-grad-reduce".split())
    assert code in (0, 1), err
    _same_plan(json.loads(out), flags)
    code, out, err = cli("plan", "--config", str(path), "--ep", "4", "--json")  # the command line wins
    assert json.loads(out)["parallelism"]["expert_parallel"] == 4


def test_every_switch_a_run_file_sets_is_undone_on_the_command_line(tmp_path):
    """hostile32 (found, not fixed then): `fsdp = true` in a run file could not be undone (`--no-fsdp`: "No such
    option"), though "the command line wins". Every plan switch a run file can hold has an off form, and the
    command line's negation wins over the file's true (parsed as the command parses it, every switch at once)."""
    command, params = _plan_params()
    switches = [p for p in params if getattr(p, "is_flag", False)]
    assert len(switches) >= 20  # the introspection found plan's switches, not nothing
    lines = [f"{p.name.replace('_', '-')} = true" for p in switches]
    path = tmp_path / "run.toml"
    path.write_text("\n".join(lines) + "\n")
    negations = []
    for p in switches:
        assert p.secondary_opts, f"{p.opts[0]}: a run file sets it, nothing on the command line unsets it"
        negations.append(p.secondary_opts[0])  # --no-X, or --full-scores for --causal
    ctx = command.make_context("plan", ["--config", str(path), *negations], resilient_parsing=True)
    assert {p.name: ctx.params[p.name] for p in switches} == {p.name: False for p in switches}
    ctx = command.make_context("plan", ["--config", str(path)], resilient_parsing=True)  # the file alone: all on
    assert all(ctx.params[p.name] for p in switches)


def test_schema_of_the_plan_with_no_search(cli):
    """`--schema --no-search` prints the plan's schema (the schema follows the search switch's value, not whether it
    was typed)."""
    code, out, err = cli("plan", "--schema", "--no-search")
    assert code == 0 and json.loads(out)["title"] == "PlanReport", err
    code, out, err = cli("plan", "--schema", "--search")
    assert code == 0 and json.loads(out)["title"] == "SearchResult", err


@pytest.mark.parametrize("body, message", [
    ("tpp = 2\n", "unknown option 'tpp'"),
    ("tp = 0\n", "tp:"),
    ("tp = 1.5\n", "tp:"),
    ("overlap-grad-reduce = 1\n", "is a switch"),
    ("tp = true\n", "not true/false"),
    ("tp = [2]\n", "single value"),
    ("tp = \n", "not TOML"),
    ('devices = "8"\n', "devices = '8' is a TOML string"),  # a count is a TOML integer (it was read as 8)
    ('routing-imbalance = "1.5"\n', "is a TOML string"),
])
def test_bad_run_files_are_one_line_errors(cli, tmp_path, body, message):
    path = tmp_path / "run.toml"
    path.write_text(body)
    code, out, err = cli("plan", "--config", str(path))
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1, err


def test_precision_and_uneven_stages_are_read_and_planned():
    """FP8 (with its parameter gather) and uneven first/last stages in a launch are planned as given, not listed
    as ignored; the recipe details btacalc does not model (the amax history) are listed with the reason."""
    text = (DATA / "llama3-8b-h100-fp8.args").read_text()
    run = import_megatron(text.rstrip("\n") + " --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 15\n",
                          "x")
    assert run.request.precision == "fp8" and run.request.fp8_param_gather  # --fp8-format hybrid, recipe delayed
    assert run.request.stage_split.first_stage_layers == 15
    reasons = dict(run.ignored)
    assert "--fp8-format" not in reasons and "--decoder-first-pipeline-num-layers" not in reasons
    assert "amax history" in reasons["--fp8-amax-history-len"]
    from btacalc.config.megatron_codec import PRECISIONS, _dec_low_precision
    from btacalc.config.megatron_rows import Get

    for name, dests in PRECISIONS.items():  # each precision renders as flags and reads back as itself
        args = read_launch(" ".join(render_flags(dict(dests))), "x").args
        assert _dec_low_precision(Get(args)) == {"run.precision": name}


def test_flags_after_the_launch_command_are_an_error():
    with pytest.raises(Exception, match="after the launch command"):
        read_launch("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2\n--hidden-size 8\n", "x")


def test_a_measured_run_may_be_given_as_megatron_arguments():
    """validate --measured: the same run as layout fields and as Megatron arguments predicts the same."""
    from btacalc.planning.measured import MeasuredRun, predict

    fields = {"id": "r", "source": "test", "model": "llama-3-8b", "hw": "h100", "devices": 16, "precision": "bf16",
              "seq": 8192, "global_batch": 128, "micro_batch": 1, "tp": 2, "zero": 1, "sequence_parallel": True,
              "recompute": "selective", "measured": {"tokens_per_s_per_device": 1000.0}, "role": "check",
              "recipe": {"source": "this test's launch below", "attention": "flash", "grad_bytes": 4,
                         "overlaps": {"grad_reduce": False, "param_gather": False, "tp_comm": False}}}
    launch = SCRIPT.replace("${SLURM_NNODES:-2}", "2").replace("$((16*8))", "128").replace(" --lr 3e-4", "")
    launch = launch.replace("--bf16", "--bf16 --use-distributed-optimizer --recompute-granularity selective "
                                      "--attention-backend flash")
    as_fields = predict(MeasuredRun.model_validate(fields))
    as_args = predict(MeasuredRun.model_validate({**{k: v for k, v in fields.items() if k not in
                                                     ("tp", "zero", "sequence_parallel", "recompute", "recipe",
                                                      "micro_batch")}, "megatron_args": launch}))
    assert as_fields.expressible and as_args.expressible, (as_fields.reason, as_args.reason)
    assert as_args.predicted.tokens_per_s_per_device == pytest.approx(as_fields.predicted.tokens_per_s_per_device,
                                                                      rel=1e-12)


def test_megatron_arguments_of_another_model_are_not_predicted():
    from btacalc.planning.measured import MeasuredRun, predict

    launch = SCRIPT.replace("${SLURM_NNODES:-2}", "2").replace("$((16*8))", "128").replace("--num-layers 32",
                                                                                            "--num-layers 16")
    run = {"id": "r", "source": "test", "model": "llama-3-8b", "hw": "h100", "devices": 16, "precision": "bf16",
           "seq": 8192, "global_batch": 128, "measured": {"tokens_per_s_per_device": 1000.0}, "role": "check",
           "megatron_args": launch}
    result = predict(MeasuredRun.model_validate(run))
    assert not result.expressible and "num_layers" in result.reason


def test_bridge_names_each_precision_by_its_mixed_precision_recipe():
    """Megatron-Bridge sets FP8/FP4 through named recipes (mixed_precision.py at 067f987d): each btacalc
    precision maps to the recipe whose fp8/fp8_recipe (or fp4/fp4_recipe) Megatron flags it stands for."""
    from btacalc.config.megatron_codec import PRECISIONS
    from btacalc.config.bridge_codec import BRIDGE_PRECISION, from_bridge, to_bridge

    assert set(BRIDGE_PRECISION) == set(PRECISIONS)
    for name, dests in PRECISIONS.items():
        bridge = to_bridge({"bf16": True, **dests})
        # the current-scaling recipe keeps the first and last layer in BF16 unless told otherwise (L285-303): a
        # plan of every layer in the recipe says so (bf16ends)
        keeps = {"mixed_precision.first_last_layers_bf16": False} if name == "fp8-current" else {}
        # hostile16: the delayed, current-scaling and MXFP8 recipes gather FP8 parameters, the NVFP4 recipe FP4 ones
        # (mixed_precision.py L231, L264, L302, L416): a plan without the gather says so in the mixed precision,
        # which Bridge copies over the model's and the DDP config's fields
        gather = "fp4_param_gather" if name == "nvfp4" else "fp8_param_gather"
        if name in ("fp8", "fp8-current", "mxfp8", "nvfp4"):
            keeps = {f"mixed_precision.{gather}": False, **keeps}
        assert bridge == {"mixed_precision": BRIDGE_PRECISION[name], **keeps}
        read = {"first_last_layers_bf16": False, "num_layers_at_start_in_bf16": 1, "num_layers_at_end_in_bf16": 1} \
            if name == "fp8-current" else {}
        assert from_bridge(bridge)[0] == {"bf16": True, **dests, **read}


def test_sampled_layouts_all_emit_runnable_launches():
    """Beyond the 22 plans: 60 layouts drawn (fixed seed) from TP x PP x VP x CP x EP x ZeRO/FSDP x recompute x
    overlaps x gradient precision; every one btacalc accepts emits a launch that meets every rule."""
    import itertools
    import random

    from btacalc.config.execution import BatchLimits, ExecutionRequest, OverlapRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.errors import BtacalcError
    from btacalc.output.megatron import megatron_run
    from btacalc.planning.plan import make_plan

    spec, hw = resolve_model("qwen3-30b-a3b"), resolve_hardware("h100")
    grid = list(itertools.product((1, 2, 4), (1, 2, 4), (1, 2, 3), (1, 2), (4, 8), (0, 1, 2, 3),
                                  ("none", "selective", "full", "core_attn,moe"), (False, True), (False, True),
                                  (False, True), (2, 4)))
    checked = 0
    for tp, pp, vp, cp, ep, zero, rc, a2a, tp_overlap, p2p, grad in random.Random(23).sample(grid, 60):
        request = ExecutionRequest(
            devices=64, tensor_parallel=tp, pipeline_parallel=pp, virtual_pipeline=vp, context_parallel=cp,
            expert_parallel=ep, zero_stage=zero, fsdp=zero == 3, recompute=rc, overlap_all_to_all=a2a,
            gradient_bytes=grad, limits=BatchLimits(global_batch=512, micro_batch=1),
            overlaps=OverlapRequest(tp_comm=tp_overlap and tp > 1, p2p=p2p, grad_reduce=True, param_gather=zero > 0))
        try:
            report = make_plan(spec, hw, request)
        except BtacalcError:
            continue  # a layout btacalc refuses (e.g. VP without PP) emits nothing
        args, env, notes = megatron_run(report, spec)
        assert not [n for n in notes if "WOULD REFUSE" in n], (request, notes)
        assert violations(dict(args, world=64), env) == []
        checked += 1
    assert checked >= 20, checked


def test_ddp_num_buckets_is_read_as_megatron_runs_it(cli, tmp_path):
    """Megatron-LM@d98e8a64 sets the DDP bucket size from --ddp-num-buckets N: bucket_size = the rank's parameters
    // N (training.py L2179-2194 resolve_ddp_bucket_size, applied at L2497), with --overlap-grad-reduce; a bucket
    closes once it holds bucket_size elements and the last takes the rest (param_and_grad_buffer.py L980-995), so the
    rank's gradients go out in N reduce-scatters, not in Megatron's default buckets of max(4e7, 1e6 x DP x CP)
    (a review of this round found btacalc's old reason, 'read by neither Megatron DDP ...', wrong). It is checked
    as Megatron checks it (distributed_data_parallel_config.py L275-277: not with --ddp-bucket-size, above 0) and
    written back by --emit megatron."""
    from btacalc.output.megatron import megatron_run

    # Llama 3 8B on 8 H100 (DP 8, ZeRO 1, --overlap-grad-reduce): 8,030,261,248 parameters on every rank
    text = (DATA / "llama3-8b-h100-fp8.args").read_text()
    with_flag = text.replace("--num-layers 32", "--num-layers 32 --ddp-num-buckets 4", 1)
    run, plain = import_megatron(with_flag, "x.args"), import_megatron(text, "y.args")
    assert "--ddp-num-buckets" not in dict(run.ignored)
    assert run.request.ddp_num_buckets == 4 and run.request.ddp_bucket_params is None
    hw, spec = resolve_hardware("h100"), run.model
    full = {"recompute": "full"}  # the launch recomputes nothing and does not fit btacalc's memory at seq 8192
    report = make_plan(spec, hw, dataclasses.replace(run.request, **full))
    default = make_plan(spec, hw, dataclasses.replace(plain.request, **full))
    calls = {c["name"]: c["calls"] for c in report.throughput.collectives}
    assert calls["gradient_reduce_dense"] == 4  # one reduce-scatter per bucket, N buckets
    default_calls = {c["name"]: c["calls"] for c in default.throughput.collectives}["gradient_reduce_dense"]
    # the default: buckets of max(4e7, 1e6 x 8) = 4e7 parameters: ceil(8,030,261,248 / 4e7) = 201
    assert report.model.params_total == 8_030_261_248 and default_calls == -(-8_030_261_248 // 40_000_000) == 201
    assert report.parallelism.ddp_num_buckets == 4
    args, _, _ = megatron_run(report, spec)
    assert args["ddp_num_buckets"] == 4 and "ddp_bucket_size" not in args
    both = with_flag.replace("--ddp-num-buckets 4", "--ddp-num-buckets 4 --ddp-bucket-size 40000000")
    path = tmp_path / "both.args"
    path.write_text(both)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and "--ddp-num-buckets needs no --ddp-bucket-size" in err and len(err.strip().splitlines()) == 1
    zero = tmp_path / "zero.args"
    zero.write_text(with_flag.replace("--ddp-num-buckets 4", "--ddp-num-buckets 0"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(zero))
    assert code == 2 and "a count above 0" in err


def test_bridge_ddp_num_buckets_is_megatrons_flag():
    """Bridge's `ddp` section is Megatron-Core's DistributedDataParallelConfig: ddp.num_buckets is --ddp-num-buckets,
    read like it and checked by the same rule (distributed_data_parallel_config.py L275-277)."""
    base = resolve_model("llama-3-70b")
    text = (DATA / "llama3-70b-32gpu-h100-bridge.yaml").read_text()
    run = import_bridge(text + "\nddp.num_buckets: 4\n", "x.yaml", 32, base)
    assert "ddp.num_buckets" not in dict(run.ignored) and run.request.ddp_num_buckets == 4
    plain = import_bridge(text, "y.yaml", 32, base).request
    assert dataclasses.replace(run.request, ddp_num_buckets=None) == plain


def test_tp_comm_overlap_cfg_file_says_the_default_table_is_timed():
    """review9: Megatron-LM's --tp-comm-overlap-cfg names a userbuffers YAML (TE's ub_cfgs, the table mlpv31's recipe
    tp_overlap_cfg carries for measured runs); a launch's file is not read, so the plan is TE's default table and the
    reason says so (it said btacalc models the overlap only 'on or off', which stopped being true with mlpv31)."""
    text = (DATA / "gpt3-175b.args").read_text()
    with_cfg = text.replace("--split 949,50,1", "--split 949,50,1 --tp-comm-overlap-cfg ub.yaml")
    run = import_megatron(with_cfg, "x.args")
    reason = dict(run.ignored)["--tp-comm-overlap-cfg"]
    assert "default table" in reason and "tp_overlap_cfg" in reason and "on or off" not in reason
    assert run.request == import_megatron(text, "y.args").request


def test_a_layout_takes_bucket_count_or_bucket_size_not_both():
    """Megatron-Core's DistributedDataParallelConfig asserts num_buckets without bucket_size, and above 0
    (distributed_data_parallel_config.py L275-277); the library's Layout refuses the same, in one line."""
    from btacalc.config.execution import Layout
    from btacalc.errors import BtacalcError

    hw, spec = resolve_hardware("h100"), resolve_model("llama-3-8b")
    Layout(devices=8, ddp_num_buckets=4).validate(spec, hw, 4096)
    with pytest.raises(BtacalcError, match="needs no"):
        Layout(devices=8, ddp_num_buckets=4, ddp_bucket_params=40_000_000).validate(spec, hw, 4096)
    with pytest.raises(BtacalcError, match="must be a positive integer"):
        Layout(devices=8, ddp_num_buckets=0).validate(spec, hw, 4096)


def test_plan_takes_ddp_num_buckets_on_the_command_line(cli):
    """`plan --ddp-num-buckets N` is the launch flag typed directly: Llama 3 8B on 8 H100 with the overlapped reduce
    sends its 8,030,261,248 parameters' gradients in 4 reduce-scatters and gathers the weights in 4 all-gathers (the
    distributed optimizer), and `--emit megatron` writes the flag back."""
    args = ("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--overlap-grad-reduce",
            "--recompute", "full", "--ddp-num-buckets", "4")
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    plan = json.loads(out)
    calls = {c["name"]: c["calls"] for c in plan["throughput"]["collectives"]}
    assert plan["parallelism"]["ddp_num_buckets"] == 4
    assert calls["gradient_reduce_dense"] == 4 and calls["param_gather_dense"] == 4
    code, out, err = cli(*args, "--emit", "megatron")
    assert code == 0 and "--ddp-num-buckets 4" in out


def test_a_quoted_array_expands_to_one_word_per_element():
    """review12: `"${ARGS[@]}"` is bash's array expansion that keeps each element one word (bash manual, Arrays:
    "${name[@]} expands each element of name to a separate word"), the form scripts use to pass arguments safely
    (Megatron-LM@d98e8a64 examples/llama/train_llama3_8b_h100_fp8.sh L130: TRAINING_ARGS+=("${DDP_ARGS[@]}")).
    btacalc read the quoted array as one word, "--num-layers 32 --hidden-size 4096 ...", an unknown flag."""
    quoted = ("DIST=(--nproc_per_node 8 --nnodes 2)\nMODEL=(\n    --num-layers 32 --hidden-size 4096\n)\n"
              "MODEL+=(--num-attention-heads 32)\nTRAIN=(--micro-batch-size 1 --seq-length 8192)\n"
              "torchrun \"${DIST[@]}\" pretrain_gpt.py \"${MODEL[@]}\" \"${TRAIN[@]}\" --bf16\n")
    plain = ("torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
             "--num-attention-heads 32 --micro-batch-size 1 --seq-length 8192 --bf16\n")
    from btacalc.errors import BtacalcError

    got, want = read_launch(quoted, "q.sh"), read_launch(plain, "p.sh")
    assert got.args == want.args and (got.devices, got.devices_per_node) == (want.devices, want.devices_per_node) == (16, 8)
    # an element holding a blank stays one word when quoted, as bash passes it: Megatron's parser has no such flag
    with pytest.raises(BtacalcError, match="unknown Megatron-LM flag --fp8-format hybrid"):
        read_launch('A=("--fp8-format hybrid")\ntorchrun --nproc_per_node 8 pretrain_gpt.py "${A[@]}"\n', "e.sh")
    # unquoted, bash splits the elements again at blanks: the same element is a flag and its value
    assert read_launch('A=("--fp8-format hybrid")\ntorchrun --nproc_per_node 8 pretrain_gpt.py ${A[@]}\n',
                       "u.sh").args["fp8"] == "hybrid"


@pytest.mark.parametrize("plan", [
    ("--hw", "h100", "--devices", "64", "--tp", "2", "--pp", "4"),
    # a list (the MoE layer pattern, Bridge's list of 0/1) and a string Hydra reads only quoted (a layout's | and *)
    ("--hw", "h100", "-m", "deepseek-proxy-megatron-ci", "--devices", "8", "--ep", "8"),
    ("--hw", "h100", "-m", "llama-3-8b", "--devices", "16", "--pp", "2", "--pipeline-layout", "Et*16|t*16L"),
    ("--hw", "h100", "-m", "llama-3-8b", "--devices", "16", "--pp", "2", "--vp", "2", "--no-overlap-p2p",
     "--pipeline-layout", "Et*8|t*8|t*8|t*8L"),
    ("--hw", "b200", "-m", "qwen3-30b-a3b", "--devices", "8", "--ep", "8", "--cuda-graph-scope",
     "moe_router,moe_preprocess"),
])
def test_emitted_bridge_overrides_plan_the_same_run(cli, tmp_path, plan):
    """hydra: `--emit bridge` prints Hydra overrides; `--from-bridge` reads them with Hydra's own parser into the keys
    the YAML path reads, so the plan of the emitted file is the emitted plan: the same layout, hence the same memory
    and step time (exactly: one computation of one run)."""
    code, emitted, err = cli("plan", *plan, "--emit", "bridge")
    assert code in (0, 1), err
    recipe = tmp_path / "overrides.txt"
    recipe.write_text(emitted)
    devices = plan[plan.index("--devices") + 1]
    code_a, a, _ = cli("plan", *plan, "--json")
    first = json.loads(a)["plan"]
    if first["tiles"] > 1:  # freshuser21: Megatron runs a micro-batch untiled: the file is the plan at G = 1, same N
        batch = () if "--global-batch" in plan else ("--global-batch", str(first["step_batch"]))
        code_a, a, _ = cli("plan", *plan, "--tiles", "1", *batch, "--json")
    code_b, b, err = cli("plan", "--hw", plan[1], "--devices", devices, "--from-bridge", str(recipe), "--json")
    assert code_a == code_b, err
    a, b = json.loads(a), json.loads(b)
    assert a["parallelism"] == b["parallelism"] and a["memory_bytes"] == b["memory_bytes"]
    assert a["throughput"]["step_time_s"] == b["throughput"]["step_time_s"]


def test_hydra_and_yaml_overrides_read_the_same_keys():
    """The two forms of one recipe's overrides: dotted keys, a section's dict value (merged, as OmegaConf.update with
    merge=True), several overrides per line, a backslash-newline and shell quoting give the YAML mapping's keys and
    values exactly; a key given again takes its last value (Hydra applies overrides in order)."""
    from btacalc.config.bridge_hydra import read_overrides
    from btacalc.config.bridge_run import _yaml_overrides

    hydra = ("model.tensor_model_parallel_size=1 model.tensor_model_parallel_size=2  # a comment\n"
             "'model={num_layers:4,hidden_size:256}' 'model.cuda_graph_scope=[attn,mlp]'\n"
             "model.pipeline_model_parallel_layout='\"E|t*4|L\"' \\\n    train.global_batch_size=8 model.fp8=null\n")
    yaml_text = ("model:\n  tensor_model_parallel_size: 2\n  num_layers: 4\n  hidden_size: 256\n"
                 "  cuda_graph_scope: [attn, mlp]\n  pipeline_model_parallel_layout: 'E|t*4|L'\n  fp8: null\n"
                 "train:\n  global_batch_size: 8\n")
    assert read_overrides(hydra, "o.txt") == _yaml_overrides(yaml_text, "r.yaml")


def test_emitted_bridge_overrides_written_as_yaml_plan_the_same_run(cli, tmp_path):
    """review12: `--emit bridge` prints Hydra's `key=value` overrides; the same keys as YAML (`key: value`, the form
    --from-bridge reads) plan the run the emitted plan is: same memory and step time."""
    plan = ("plan", "--hw", "h100", "--devices", "64", "--tp", "2", "--pp", "4")
    code, emitted, _ = cli(*plan, "--emit", "bridge")
    assert code in (0, 1)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(re.sub(r"(?m)^(?:\+\+)?([A-Za-z_][\w.]*)=", r"\1: ", emitted))  # bridgeparse: ++comm_overlap
    code_a, a, _ = cli(*plan, "--json")
    code_b, b, _ = cli("plan", "--hw", "h100", "--devices", "64", "--from-bridge", str(recipe), "--json")
    a, b = json.loads(a), json.loads(b)
    assert code_a == code_b and a["memory_bytes"] == b["memory_bytes"]
    assert a["throughput"]["step_time_s"] == b["throughput"]["step_time_s"]
