"""The rules of Megatron-LM's argument validation that btacalc's emitted runs depend on, as data.

Each rule names the file and line it follows at MEGATRON_LM_PIN (megatron/training/arguments.py
`validate_args`, megatron/core/transformer/transformer_config.py `TransformerConfig.__post_init__`,
megatron/core/num_microbatches_calculator.py, megatron/core/transformer/moe/moe_layer.py,
megatron/core/transformer/moe/shared_experts.py, megatron/training/determinism.py `apply_determinism_to_args`) and
checks Megatron argparse destinations (`args`, Megatron's defaults filled in) and the environment (`env`).
`violations` lists the rules a run breaks; `PLAN_FIXES` are the rules a plan can meet by dropping an
option (the plan says so; `runnable_overlaps`).

Layouts are read after Megatron's own derivations: data parallel = world / (TP·PP·CP) (`world` in args).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .megatron_launch import MEGATRON_LM_SHORT, integer, pattern, real
from .pipeline import parse_layout

ARGS = "megatron/training/arguments.py"
TC = "megatron/core/transformer/transformer_config.py"
MICRO = "megatron/core/num_microbatches_calculator.py"
MOE_LAYER = "megatron/core/transformer/moe/moe_layer.py"
SHARED_EXPERTS = "megatron/core/transformer/moe/shared_experts.py"
EXPERTS = "megatron/core/transformer/moe/experts.py"
ARG_UTILS = "megatron/training/argument_utils.py"
MLA = "megatron/core/transformer/multi_latent_attention.py"

DETERMINISM = "megatron/training/determinism.py"
DDP_CONFIG = "megatron/core/distributed/distributed_data_parallel_config.py"
LANGUAGE_MODULE = "megatron/core/models/common/language_module/language_module.py"
DPA = "megatron/core/transformer/dot_product_attention.py"
# TransformerEngine's backend switches as Megatron-Core's _set_attention_backend sets them for each AttnBackend
# (LANGUAGE_MODULE L129-145 @ d98e8a64), asserting first that one already in the environment agrees (L120-126)
ATTENTION_SWITCHES = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")
BACKEND_SWITCHES = {"local": (0, 0, 0), "flash": (1, 0, 0), "fused": (0, 1, 0), "unfused": (0, 0, 1),
                    "auto": (1, 1, 1)}
# TransformerEngine's context-parallel attention, at the release btacalc's kernels cite (semantics19): Megatron-Core
# hands it --cp-comm-type, the window and the softmax type as given (transformer_engine.py L2140-2153 @ d98e8a64)
TE_SHORT = "TransformerEngine@d0067d0"
TE_CP = "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py"
TE_BACKENDS = "transformer_engine/pytorch/attention/dot_product_attention/utils.py"

A = dict[str, Any]
# The NCCL_ALGO tokens --deterministic-mode accepts (DETERMINISM L48: ring and CollNet, or NVLS excluded)
DETERMINISTIC_NCCL_ALGOS = frozenset({"Ring", "CollnetDirect", "CollnetChain", "^NVLS"})


def _tokens(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


@dataclass(frozen=True)
class Rule:
    """When `applies`, Megatron requires `holds`; else it stops with `message`."""

    name: str
    source: str  # file:line at MEGATRON_LM_PIN
    applies: Callable[[A, dict[str, str]], bool]
    holds: Callable[[A, dict[str, str]], bool]
    message: str

    def broken(self, args: A, env: dict[str, str]) -> bool:
        return self.applies(args, env) and not self.holds(args, env)


def _a2a(a: A, e: dict[str, str]) -> bool:
    return bool(a.get("overlap_moe_expert_parallel_comm"))


def _i(a: A, key: str, default: int = 1) -> int:
    v = a.get(key)
    return default if v is None else integer(v, key)


def _moe(a: A) -> bool:
    """An MoE launch: --num-experts at least 1. hostile23: a launch's "0" is a true string, so `--num-experts 0`, which
    Megatron-LM reads as no experts (arguments.py L1648-1649: `if args.num_experts == 0: args.num_experts = None`), met
    the MoE rules (a dense launch at TP 2 refused "MoE with tensor parallelism needs --sequence-parallel")."""
    return _i(a, "num_experts", 0) != 0


def _layers_for_split(a: A) -> int:
    return (_i(a, "num_layers", 0) + bool(a.get("account_for_embedding_in_pipeline_split"))
            + bool(a.get("account_for_loss_in_pipeline_split")))


def _vp(a: A) -> int:
    """The virtual pipeline size Megatron-LM derives: a layout's model chunks over PP (arguments.py L941-952; freshuser19:
    the rules read only --num-virtual-stages-per-pipeline-rank, so a layout's interleaving met the rules of no
    virtual pipeline, and a2a-vp refused an interleaved launch Megatron accepts), else the flag's value."""
    layout = a.get("pipeline_model_parallel_layout")
    if layout is not None:
        return max(len(parse_layout(str(layout))) // _i(a, "pipeline_model_parallel_size"), 1)
    per_stage = _i(a, "num_layers_per_virtual_pipeline_stage", 0)
    if per_stage and _per_stage_form(a):  # review19: arguments.py L953-975
        return max(_layers_for_split(a) // _i(a, "pipeline_model_parallel_size") // per_stage, 1)
    return _i(a, "num_virtual_stages_per_pipeline_rank")


def _per_stage_form(a: A) -> bool:
    """--num-layers-per-virtual-pipeline-stage sets the virtual pipeline (arguments.py L953-954: only without
    --num-virtual-stages-per-pipeline-rank, which the one-way rule refuses beside it)."""
    return a.get("num_layers_per_virtual_pipeline_stage") is not None and \
        a.get("num_virtual_stages_per_pipeline_rank") is None


def _model_size(a: A) -> int:
    return _i(a, "tensor_model_parallel_size") * _i(a, "pipeline_model_parallel_size") * _i(a, "context_parallel_size")


def _world_divides(a: A) -> bool:
    return _i(a, "world") % _model_size(a) == 0


def _dp(a: A) -> int:
    return _i(a, "world") // _model_size(a)


def _cp_comm_types(a: A) -> list[str]:
    """--cp-comm-type as TransformerEngine gets it: one type, or one per layer (arguments.py L3221-3226 @ d98e8a64;
    default p2p)."""
    v = a.get("cp_comm_type") or ["p2p"]
    return [str(t) for t in ([v] if isinstance(v, str) else v)]


def _windowed(a: A) -> bool:
    """A layer with a sliding window: --window-size other than TransformerEngine's no-window (-1, 0) / (-1, -1)
    (context_parallel.py L5054-5056) on some layer (Megatron-Core's is_layer_window_attention, transformer/utils.py
    L531-542 @ d98e8a64: --window-attn-skip-freq N windows every layer but each N-th, a list the layers it marks 1)."""
    size, skip = a.get("window_size"), a.get("window_attn_skip_freq")
    if size is None or str(size).replace(" ", "").strip("()[]").split(",")[0] == "-1":
        return False
    if skip is None:
        return True
    items = pattern(skip, _i(a, "num_layers", 0))
    return items[0] != 1 if len(items) == 1 else any(items)


def _per_layer_graphs(a: A) -> bool:
    return (a.get("cuda_graph_impl") or "none") in ("local", "transformer_engine")


def _graph_modules(a: A) -> list[str]:
    """The per-layer CUDA-graph modules (the deprecated --cuda-graph-scope is moved to them, arguments.py L633-641);
    none: the whole layer."""
    v = a.get("cuda_graph_modules") or a.get("cuda_graph_scope_deprecated") or []
    return [str(m) for m in ([v] if isinstance(v, str) else v)]


def _balancing(a: A) -> Any:
    """--moe-router-load-balancing-type (nargs +) as TransformerConfig gets it: one type as its string (arguments.py
    L1661-1662 @ d98e8a64), several as the list."""
    v = a.get("moe_router_load_balancing_type") or "aux_loss"
    return v[0] if isinstance(v, (list, tuple)) and len(v) == 1 else v


def _coefficients(a: A) -> int:
    """How many --moe-aux-loss-coeff values TransformerConfig gets as a list (nargs +; a list of one becomes its
    value, arguments.py L1663-1664, and a value is no list: 0)."""
    v = a.get("moe_aux_loss_coeff")
    return len(v) if isinstance(v, (list, tuple)) and len(v) > 1 else 0


# the load balancings Megatron-Core drops tokens under (TC L1839-1860)
CAPACITY_BALANCINGS = frozenset({"aux_loss", "seq_aux_loss", "global_aux_loss", "none"})


def _balancing_types(a: A) -> list[str]:
    """Every --moe-router-load-balancing-type given (nargs +), Megatron's default aux_loss if none."""
    v = a.get("moe_router_load_balancing_type") or "aux_loss"
    return [str(t) for t in ([v] if isinstance(v, str) else v)]


def _recompute_modules(a: A) -> list[str]:
    v = a.get("recompute_modules") or ["core_attn"]  # Megatron-LM's default module list
    return [str(m) for m in ([v] if isinstance(v, str) else v)]


def _graphed_recompute_under_dropout(a: A, e: dict[str, str]) -> bool:
    """transformer_config.py L2868-2895: under dropout (Megatron's default 0.1), a recomputed core_attn / mlp must not
    be inside a graph (the whole layer's, or the attn / mlp module's)."""
    graphs, modules = _graph_modules(a), _recompute_modules(a)
    for dropout, module, graph in (("attention_dropout", "core_attn", "attn"), ("hidden_dropout", "mlp", "mlp")):
        rate = a.get(dropout)
        if real(0.1 if rate is None else rate, dropout) != 0.0 and module in modules and (not graphs or graph in graphs):
            return False
    return True


def _switches_agree(a: A, e: dict[str, str]) -> bool:
    """hostile24: an exported NVTE_* switch must be the value Megatron-Core sets for the launch's backend (an enum on
    Megatron-LM's path; its default auto wants all three on), else _set_attention_backend's assertion stops the run
    at the model's build. btacalc planned such a launch (`export NVTE_FUSED_ATTN=0` with the default backend)."""
    backend = str(a.get("attention_backend") or "auto").split(".")[-1].split(":")[0].strip("<> ")
    wanted = BACKEND_SWITCHES.get(backend)
    return wanted is None or all(e.get(name, str(v)) == str(v) for name, v in zip(ATTENTION_SWITCHES, wanted))


def _model_parallel_needs_one_connection(a: A, e: dict[str, str]) -> bool:
    """arguments.py:1453-1479 (the assertion at 1477): with TP or CP > 1 before Blackwell, Megatron asserts
    CUDA_DEVICE_MAX_CONNECTIONS=1 unless Megatron-FSDP (which wants it unset) or the EP all-to-all overlap (a warning) is on. btacalc does
    not know the GPU's compute capability from the run, so it holds every GPU to the Hopper rule (harmless
    on Blackwell, where the assertion does not run)."""
    return ((_i(a, "tensor_model_parallel_size") > 1 or _i(a, "context_parallel_size") > 1)
            and not a.get("use_megatron_fsdp") and not _a2a(a, e))


RULES: tuple[Rule, ...] = (
    Rule("fsdp-ckpt-format", f"{ARGS}:1169", lambda a, e: bool(a.get("use_megatron_fsdp")),
         lambda a, e: a.get("ckpt_format") == "fsdp_dtensor",
         "Megatron-FSDP requires --ckpt-format fsdp_dtensor"),
    Rule("fsdp-connections", f"{ARGS}:1166", lambda a, e: bool(a.get("use_megatron_fsdp")),
         lambda a, e: e.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1",
         "Megatron-FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset"),
    Rule("fsdp-dtensor-needs-fsdp", f"{ARGS}:1676", lambda a, e: a.get("ckpt_format") == "fsdp_dtensor",
         lambda a, e: bool(a.get("use_megatron_fsdp")), "--ckpt-format fsdp_dtensor needs --use-megatron-fsdp"),
    Rule("fsdp-manual-registration", f"{ARGS}:1191", lambda a, e: bool(a.get("fsdp_manual_registration")),
         lambda a, e: bool(a.get("use_megatron_fsdp") and a.get("nccl_ub")),
         "--fsdp-manual-registration needs --use-megatron-fsdp and --use-nccl-ub"),
    # the rest of Megatron-FSDP's validation (L1118-1187) and hybrid CP's (L1444-1447); a launch's
    # --data-parallel-sharding-strategy defaults to optim_grads_params (L3190)
    Rule("fsdp-v2-distributed-optimizer", f"{ARGS}:1125",
         lambda a, e: bool(a.get("use_megatron_fsdp")) and _i(a, "megatron_fsdp_version") == 2,
         lambda a, e: not a.get("use_distributed_optimizer"),
         "--megatron-fsdp-version 2 is not compatible with --use-distributed-optimizer"),
    Rule("fsdp-grouped-moe-params", f"{ARGS}:1138", lambda a, e: bool(a.get("use_megatron_fsdp")),
         lambda a, e: not (a.get("moe_single_grouped_weight") or a.get("moe_single_grouped_bias")),
         "Megatron-FSDP does not support --moe-single-grouped-weight or --moe-single-grouped-bias"),
    Rule("fsdp-optimizer", f"{ARGS}:1150", lambda a, e: bool(a.get("use_megatron_fsdp")),
         lambda a, e: (a.get("optimizer") or "adam") in ("sgd", "adam"),
         "Megatron-FSDP supports --optimizer adam or sgd only"),
    Rule("fsdp-weight-hash", f"{ARGS}:1163", lambda a, e: bool(a.get("use_megatron_fsdp")) and (
        a.get("data_parallel_sharding_strategy") or "optim_grads_params") == "optim_grads_params",
         lambda a, e: a.get("check_weight_hash_across_dp_replicas_interval") is None,
         "--check-weight-hash-across-dp-replicas-interval is not supported with Megatron-FSDP's optim_grads_params"),
    Rule("fsdp-meta-no-shard", f"{ARGS}:1183", lambda a, e: bool(a.get("use_megatron_fsdp"))
         and a.get("data_parallel_sharding_strategy") == "no_shard",
         lambda a, e: not a.get("init_model_with_meta_device"),
         "--init-model-with-meta-device is not supported with Megatron-FSDP's no_shard strategy"),
    Rule("fsdp-hybrid-cp", f"{ARGS}:1447", lambda a, e: bool(a.get("hybrid_context_parallel")),
         lambda a, e: not a.get("use_megatron_fsdp"), "--hybrid-context-parallel is not supported with Megatron-FSDP"),
    Rule("tp-cp-connections", f"{ARGS}:1477", _model_parallel_needs_one_connection,
         lambda a, e: e.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1",
         "tensor or context parallelism needs CUDA_DEVICE_MAX_CONNECTIONS=1 (Hopper and before)"),
    Rule("attention-switches", f"{LANGUAGE_MODULE}:124", lambda a, e: any(n in e for n in ATTENTION_SWITCHES),
         _switches_agree, "an exported NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN must be what "
         "Megatron-Core sets for --attention-backend (auto 1 1 1, flash 1 0 0, fused 0 1 0, unfused 0 0 1, local 0 0 "
         "0), which it asserts before setting them: unset them or give the backend"),
    Rule("param-gather-sharded", f"{ARGS}:1025", lambda a, e: bool(a.get("overlap_param_gather")),
         lambda a, e: bool(a.get("use_distributed_optimizer") or a.get("use_megatron_fsdp")),
         "--overlap-param-gather needs the distributed optimizer or Megatron-FSDP"),
    Rule("param-gather-grad-reduce", f"{ARGS}:1028", lambda a, e: bool(a.get("overlap_param_gather")),
         lambda a, e: bool(a.get("overlap_grad_reduce")), "--overlap-param-gather needs --overlap-grad-reduce"),
    # L1433-1439 turn sequence parallelism off at TP 1 before L1441-1442 assert it (review8: a launch with
    # --sequence-parallel at TP 1 passed this rule)
    Rule("tp-overlap-sp", f"{ARGS}:1442", lambda a, e: bool(a.get("tp_comm_overlap")),
         lambda a, e: bool(a.get("sequence_parallel")) and _i(a, "tensor_model_parallel_size") > 1,
         "--tp-comm-overlap needs --sequence-parallel, which Megatron switches off at TP 1"),
    # DistributedDataParallelConfig.__post_init__ (L275-277): the two ways of sizing buckets exclude each other
    Rule("ddp-buckets", f"{DDP_CONFIG}:276", lambda a, e: a.get("ddp_num_buckets") is not None,
         lambda a, e: a.get("ddp_bucket_size") is None and _i(a, "ddp_num_buckets") > 0,
         "--ddp-num-buckets needs no --ddp-bucket-size and a count above 0"),
    Rule("deterministic-options", f"{DETERMINISM}:146",  # the options of L24, checked at L141-148
         lambda a, e: bool(a.get("deterministic_mode")),
         lambda a, e: not a.get("tp_comm_overlap") and not a.get("cross_entropy_loss_fusion"),
         "--deterministic-mode needs --tp-comm-overlap and --cross-entropy-loss-fusion off"),
    Rule("deterministic-nccl-algo", f"{DETERMINISM}:91",  # the tokens of L48, checked at L88-94
         lambda a, e: bool(a.get("deterministic_mode")) and "NCCL_ALGO" in e,
         lambda a, e: bool(_tokens(e["NCCL_ALGO"])) and set(_tokens(e["NCCL_ALGO"])) <= DETERMINISTIC_NCCL_ALGOS,
         f"--deterministic-mode takes NCCL_ALGO from {', '.join(sorted(DETERMINISTIC_NCCL_ALGOS))} only (not Tree)"),
    Rule("cp-sequence", f"{ARGS}:1336", lambda a, e: _i(a, "context_parallel_size") > 1,
         lambda a, e: _i(a, "seq_length", 0) % (2 * _i(a, "context_parallel_size")) == 0,
         "--seq-length must be a multiple of 2 x --context-parallel-size"),
    # semantics19: TransformerEngine's context-parallel attention (attn_forward_func_with_cp) asserts both for every
    # layer; btacalc times Megatron's default p2p K/V ring (model/gpu/timing.py), which neither admits, so a GPT-OSS
    # launch with CP stopped at the first forward
    Rule("cp-window-comm", f"{TE_CP}:5057", lambda a, e: _i(a, "context_parallel_size") > 1 and _windowed(a),
         lambda a, e: all(t in ("a2a", "all_gather") for t in _cp_comm_types(a)),
         "context parallelism with a sliding window needs --cp-comm-type a2a or all_gather (not the p2p ring)"),
    Rule("cp-softmax-comm", f"{TE_CP}:5065", lambda a, e: _i(a, "context_parallel_size") > 1
         and (a.get("softmax_type") or "vanilla") != "vanilla",
         lambda a, e: all(t == "a2a" for t in _cp_comm_types(a)),
         "context parallelism with a learnable or off-by-one softmax needs --cp-comm-type a2a (not the p2p ring)"),
    # TE's backend choice: deterministic FusedAttention has no sink (learnable or off-by-one) softmax, and
    # --attention-backend fused / flash leave no other backend for it (flash has no sinks at all, utils.py L1122-1124)
    Rule("deterministic-sinks", f"{TE_BACKENDS}:1536", lambda a, e: bool(a.get("deterministic_mode"))
         and (a.get("softmax_type") or "vanilla") != "vanilla",
         lambda a, e: str(a.get("attention_backend") or "auto").split(".")[-1] not in ("fused", "flash"),
         "--deterministic-mode with a learnable or off-by-one softmax has no fused attention: TransformerEngine "
         "needs --attention-backend unfused (or auto) for it"),
    Rule("cuda-graphs-offload", f"{TC}:2801", lambda a, e: (a.get("cuda_graph_impl") or "none") not in
         ("none", "full_iteration") and (_i(a, "cpu_offloading_num_layers", 0) > 0 or bool(a.get("cpu_offloading"))),
         lambda a, e: False, "per-layer CUDA graphs (--cuda-graph-impl) are refused with CPU activation offloading"),
    # semantics19: recomputation beside per-layer CUDA graphs (transformer_config.py L2851-2895)
    Rule("graphs-full-recompute", f"{TC}:2853", lambda a, e: _per_layer_graphs(a)
         and a.get("recompute_granularity") == "full", lambda a, e: False,
         "full recomputation runs only under --cuda-graph-impl full_iteration, not per-layer CUDA graphs"),
    Rule("graphs-moe-recompute", f"{TC}:2864", lambda a, e: a.get("cuda_graph_impl") == "transformer_engine"
         and a.get("recompute_granularity") == "selective" and "moe" in _recompute_modules(a),
         lambda a, e: "moe_router" not in _graph_modules(a),
         "the moe recompute module is refused with the moe_router CUDA graph"),
    Rule("graphs-dropout-recompute", f"{TC}:2876", lambda a, e: _per_layer_graphs(a)
         and a.get("recompute_granularity") == "selective", _graphed_recompute_under_dropout,
         "with dropout, a recomputed core_attn or mlp module must not be inside its CUDA graph"),
    Rule("positions", f"{ARGS}:1354", lambda a, e: a.get("seq_length") is not None,
         lambda a, e: _i(a, "max_position_embeddings", 0) >= _i(a, "seq_length", 0),
         "--max-position-embeddings must be at least --seq-length"),
    # hostile35: --decoder-seq-length (which a GPT does not train with) was listed as not modelled, and a launch whose
    # positions fall short of it planned, where Megatron-LM asserts at its arguments
    Rule("decoder-positions", f"{ARGS}:1357", lambda a, e: a.get("decoder_seq_length") is not None,
         lambda a, e: _i(a, "max_position_embeddings", 0) >= _i(a, "decoder_seq_length", 0),
         "--max-position-embeddings must be at least --decoder-seq-length"),
    Rule("even-pipeline", f"{ARGS}:997", lambda a, e: _vp(a) == 1 and a.get("decoder_first_pipeline_num_layers") is None
         and a.get("decoder_last_pipeline_num_layers") is None and a.get("pipeline_model_parallel_layout") is None,
         lambda a, e: _layers_for_split(a) % _i(a, "pipeline_model_parallel_size") == 0,
         "the layers (+1 per account-for flag) must divide over --pipeline-model-parallel-size"),
    Rule("virtual-pipeline", f"{TC}:2406", lambda a, e: _vp(a) > 1 and a.get("pipeline_model_parallel_layout") is None
         and a.get("decoder_first_pipeline_num_layers") is None and a.get("decoder_last_pipeline_num_layers") is None
         and not _per_stage_form(a),
         lambda a, e: _layers_for_split(a) % (_i(a, "pipeline_model_parallel_size") * _vp(a)) == 0,
         "the layers per pipeline rank must divide by --num-virtual-stages-per-pipeline-rank"),
    # review19: a launch's --num-layers-per-virtual-pipeline-stage was planned as the VP it rounds down to, where
    # Megatron-LM stops
    Rule("virtual-pipeline-one-way", f"{ARGS}:928", lambda a, e: True,
         lambda a, e: sum(a.get(k) is not None for k in ("num_layers_per_virtual_pipeline_stage",
                                                         "num_virtual_stages_per_pipeline_rank",
                                                         "pipeline_model_parallel_layout")) <= 1,
         "no more than one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank and "
         "--pipeline-model-parallel-layout"),
    Rule("vp-per-stage-even", f"{ARGS}:955", lambda a, e: _per_stage_form(a),
         lambda a, e: a.get("decoder_first_pipeline_num_layers") is None
         and a.get("decoder_last_pipeline_num_layers") is None,
         "uneven pipeline stages take their virtual pipeline from --num-virtual-stages-per-pipeline-rank, not "
         "--num-layers-per-virtual-pipeline-stage"),
    Rule("vp-per-stage-pp", f"{ARGS}:968", lambda a, e: _per_stage_form(a),
         lambda a, e: _layers_for_split(a) % _i(a, "pipeline_model_parallel_size") == 0,
         "the layers (+1 per account-for flag) must divide over --pipeline-model-parallel-size"),
    Rule("vp-per-stage-divides", f"{ARGS}:972", lambda a, e: _per_stage_form(a),
         lambda a, e: (_layers_for_split(a) // _i(a, "pipeline_model_parallel_size"))
         % max(_i(a, "num_layers_per_virtual_pipeline_stage"), 1) == 0,
         "the layers per pipeline stage must divide by --num-layers-per-virtual-pipeline-stage"),
    Rule("interleave-pp", f"{ARGS}:1002", lambda a, e: _vp(a) > 1,
         lambda a, e: _i(a, "pipeline_model_parallel_size") > (1 if a.get("overlap_p2p_comm", True) else 2),
         "the interleaved schedule needs --pipeline-model-parallel-size > 1 (> 2 without p2p overlap)"),
    Rule("heads-tp", f"{TC}:1446", lambda a, e: True,
         lambda a, e: _i(a, "num_attention_heads") % _i(a, "tensor_model_parallel_size") == 0,
         "--num-attention-heads must be a multiple of --tensor-model-parallel-size"),
    Rule("groups-tp", f"{TC}:1462", lambda a, e: bool(a.get("group_query_attention")),
         lambda a, e: (_i(a, "num_query_groups") % _i(a, "tensor_model_parallel_size") == 0
                       or _i(a, "tensor_model_parallel_size") % _i(a, "num_query_groups") == 0),
         "--num-query-groups must be a multiple or a divisor of --tensor-model-parallel-size"),
    Rule("experts-ep", f"{ARGS}:1657", lambda a, e: _i(a, "expert_model_parallel_size") > 1,
         lambda a, e: _i(a, "num_experts", 0) % _i(a, "expert_model_parallel_size") == 0,
         "--num-experts must be a multiple of --expert-model-parallel-size"),
    # the biases of an MoE model's linears (router and experts included: moe/router.py L67, experts.py L223, L246)
    # all come from --add-bias-linear, Megatron's default
    Rule("moe-bias-etp", f"{TC}:2612", lambda a, e: _moe(a) and a.get("add_bias_linear", True),
         lambda a, e: _i(a, "expert_tensor_parallel_size", _i(a, "tensor_model_parallel_size")) == 1,
         "biases in MoE layers (Megatron's default --add-bias-linear) need --expert-tensor-parallel-size 1"),
    # review26: the local implementation's core attention, Megatron-Core's DotProductAttention (backends.py L131),
    # asserts CP 1; btacalc planned it with a ring and a global buffer of b/CP sequences
    Rule("local-attention-cp", f"{DPA}:57",
         lambda a, e: a.get("transformer_impl") == "local", lambda a, e: _i(a, "context_parallel_size", 1) == 1,
         "--transformer-impl local runs Megatron-Core's DotProductAttention, which has no context parallelism: "
         "--context-parallel-size 1"),
    # gelu: TEGroupedMLP (--moe-grouped-gemm under TransformerEngine: transformer_engine_spec_provider.py L75-85)
    # asserts biases without the fused bias-dropout-add, which --no-bias-dropout-fusion turns off (on by default)
    Rule("moe-grouped-bias-dropout", f"{EXPERTS}:205", lambda a, e: _moe(a) and a.get("add_bias_linear", True)
         and bool(a.get("moe_grouped_gemm")) and (a.get("transformer_impl") or "transformer_engine") != "local",
         lambda a, e: not a.get("bias_dropout_fusion", True),
         "biased MoE experts as grouped GEMMs (--moe-grouped-gemm) need --no-bias-dropout-fusion "
         "(model.bias_dropout_fusion=False)"),
    # gelu: with biases the fused bias-GeLU stays on (--no-bias-gelu-fusion; arguments.py L1605-1606 turns it off only
    # without biases), and neither expert class fuses GeLU with the routing weight: TEGroupedMLP raises (L982-985), a
    # SequentialMLP's MLP too (mlp.py L296-298)
    Rule("moe-gelu-bias-fusion", f"{EXPERTS}:984", lambda a, e: _moe(a) and a.get("add_bias_linear", True)
         and not (a.get("swiglu") or a.get("quick_geglu") or a.get("squared_relu") or a.get("use_te_activation_func")),
         lambda a, e: not a.get("bias_gelu_fusion", True),
         "biased GeLU experts (no --swiglu, Megatron's default --add-bias-linear) need --no-bias-gelu-fusion "
         "(model.bias_activation_fusion=False): Megatron-Core fuses bias and GeLU only without the routing weight"),
    # hostile23: Megatron-Core refuses a shared-expert width of 0 or less; the rule below took "0" as a width
    Rule("shared-expert-size", f"{TC}:1813", lambda a, e: a.get("moe_shared_expert_intermediate_size") is not None,
         lambda a, e: _i(a, "moe_shared_expert_intermediate_size") > 0,
         "--moe-shared-expert-intermediate-size must be positive (the shared experts' FFN width, num_shared_experts x "
         "each one's)"),
    # review19: the shared experts take no bias, so a shared-expert model needs --disable-bias-linear
    Rule("shared-expert-bias", f"{SHARED_EXPERTS}:124",
         lambda a, e: _moe(a) and _i(a, "moe_shared_expert_intermediate_size", 0) > 0,
         lambda a, e: not a.get("add_bias_linear", True),
         "shared experts take no bias: --moe-shared-expert-intermediate-size needs --disable-bias-linear"),
    Rule("expert-bias-score", f"{TC}:2617", lambda a, e: bool(a.get("moe_router_enable_expert_bias")),
         lambda a, e: (a.get("moe_router_score_function") or "softmax") in ("sigmoid", "sqrtsoftplus"),
         "--moe-router-enable-expert-bias (aux-loss-free routing) needs --moe-router-score-function sigmoid or "
         "sqrtsoftplus"),
    # semantics20: group-limited routing (DeepSeek-V3's n_group / topk_group), which the launch now states
    # hostile23: a launch's "0" is a true string; Megatron tests the integers (`if self.moe_router_group_topk:`,
    # `if not self.moe_router_num_groups:`), so --moe-router-num-groups 0 fell through to the split rule's modulo
    # (ZeroDivisionError) instead of this refusal
    Rule("router-groups", f"{TC}:2677", lambda a, e: _moe(a)
         and _i(a, "moe_router_group_topk", 0) != 0, lambda a, e: _i(a, "moe_router_num_groups", 0) != 0,
         "--moe-router-group-topk (group-limited routing) needs --moe-router-num-groups"),
    Rule("router-groups-split", f"{TC}:2682", lambda a, e: _moe(a)
         and _i(a, "moe_router_group_topk", 0) != 0 and _i(a, "moe_router_num_groups", 0) != 0,
         lambda a, e: _i(a, "num_experts", 0) % _i(a, "moe_router_num_groups") == 0
         and _i(a, "moe_router_group_topk") <= _i(a, "moe_router_num_groups"),
         "--moe-router-num-groups must divide --num-experts and --moe-router-group-topk must not exceed it"),
    # semantics20: YaRN (GPT-OSS's --position-embedding-type yarn) and learned positions take no MTP
    Rule("mtp-positions", f"{ARGS}:883", lambda a, e: _i(a, "mtp_num_layers", 0) > 0,
         lambda a, e: (a.get("position_embedding_type") or "learned_absolute") in ("rope", "none"),
         "multi-token prediction (--mtp-num-layers) needs --position-embedding-type rope or none"),
    # review20: GPTModel builds its YaRN embedding for --position-embedding-type yarn whatever the attention and
    # hands it to every layer (gpt_model.py L196-215, L421-428; its rope and mrope branches exclude MLA); MLA builds
    # its own and asserts it is given none. Attention other than MLA takes --rope-type rope only.
    Rule("mla-yarn-positions", f"{MLA}:316", lambda a, e: bool(a.get("multi_latent_attention")),
         lambda a, e: a.get("position_embedding_type") != "yarn",
         "multi-latent attention builds its own YaRN (--rotary-scaling-factor, --mscale, --mscale-all-dim): "
         "--position-embedding-type yarn hands it a second rotary embedding, which it refuses; use rope"),
    Rule("rope-type-attention", f"{ARG_UTILS}:339", lambda a, e: a.get("rope_type") is not None,
         lambda a, e: bool(a.get("multi_latent_attention")) or a.get("rope_type") == "rope",
         "--rope-type yarn is for multi-latent attention only: other attention takes rope"),
    Rule("moe-tp-sp", f"{MOE_LAYER}:636", lambda a, e: _moe(a) and
         _i(a, "tensor_model_parallel_size") > 1, lambda a, e: bool(a.get("sequence_parallel")),
         "MoE with tensor parallelism needs --sequence-parallel in training"),
    # hostile22: a launch of more model-parallel ranks than processes (TP 16 on 8) stopped the batch rule below with
    # "ZeroDivisionError: integer modulo by zero" (data parallel 0)
    Rule("world-divides", f"{ARGS}:432", lambda a, e: "world" in a, lambda a, e: _world_divides(a),
         "the processes (world size) must be a multiple of --tensor-model-parallel-size x "
         "--pipeline-model-parallel-size x --context-parallel-size"),
    Rule("batch-divides", f"{MICRO}:381", lambda a, e: a.get("global_batch_size") is not None and _world_divides(a),
         lambda a, e: _i(a, "global_batch_size") % (_i(a, "micro_batch_size") * _dp(a)) == 0,
         "--global-batch-size must be a multiple of --micro-batch-size x data parallel"),
    # review30: --recompute-activations makes the granularity selective whatever is given (arguments.py L606-607)
    Rule("selective-no-method", f"{ARGS}:1426", lambda a, e: a.get("recompute_granularity") == "selective"
         or bool(a.get("recompute_activations")),
         lambda a, e: a.get("recompute_method") is None, "selective recomputation takes no --recompute-method"),
    Rule("moe-act-grouped-gemm", f"{TC}:1964", lambda a, e: "moe_act" in (a.get("recompute_modules") or ()),
         lambda a, e: bool(a.get("moe_grouped_gemm")), "the moe_act recompute module needs --moe-grouped-gemm"),
    # freshuser17: two module lists Megatron-Core refuses for the model or the recipe (in a selective list only)
    Rule("mla-up-proj-mla", f"{TC}:1969", lambda a, e: a.get("recompute_granularity") == "selective"
         and "mla_up_proj" in (a.get("recompute_modules") or ()),
         lambda a, e: bool(a.get("multi_latent_attention")),
         "the mla_up_proj recompute module needs --multi-latent-attention"),
    # review25: the shared experts' overlap (which DeepSeek-V3's model bridge turns on, bridge_model_bridges.toml)
    Rule("shared-experts-recompute-overlap", f"{TC}:1991", lambda a, e: a.get("recompute_granularity") == "selective"
         and "shared_experts" in (a.get("recompute_modules") or ())
         and a.get("moe_shared_expert_intermediate_size") is not None,
         lambda a, e: not bool(a.get("moe_shared_expert_overlap")),
         "the shared_experts recompute module is refused with --moe-shared-expert-overlap "
         "(DeepSeek-V3's Megatron-Bridge model bridge turns it on: give model.moe_shared_expert_overlap=false)"),
    Rule("shared-expert-overlap-dispatcher", f"{TC}:1820", lambda a, e: bool(a.get("moe_shared_expert_overlap"))
         and a.get("moe_shared_expert_intermediate_size") is not None,
         lambda a, e: a.get("moe_token_dispatcher_type") in ("alltoall", "flex"),
         "--moe-shared-expert-overlap needs the alltoall or flex dispatcher"),
    # review27: what Megatron-Core refuses beside its allgather dispatcher, the dispatcher a launch that names none runs
    # (TC:891; None here, the flag left out) whatever the model, and DeepEP outside the flex dispatcher
    Rule("deepep-flex", f"{TC}:1744", lambda a, e: bool(a.get("moe_enable_deepep")),
         lambda a, e: a.get("moe_token_dispatcher_type") == "flex",
         "--moe-enable-deepep needs --moe-token-dispatcher-type flex"),
    # review29: the deprecated switch sets the deepep backend, and refuses a hybridep one (TC L1746-1747); btacalc read
    # it as DeepEP, whose cross-node rate differs from Hybrid-EP's since the hybridep backend is timed apart
    Rule("deepep-hybridep", f"{TC}:1746",
         lambda a, e: bool(a.get("moe_enable_deepep")) and a.get("moe_token_dispatcher_type") == "flex",
         lambda a, e: a.get("moe_flex_dispatcher_backend") != "hybridep",
         "--moe-enable-deepep sets the flex dispatcher's deepep backend: Megatron-Core refuses it beside "
         "--moe-flex-dispatcher-backend hybridep (only one backend)"),
    # review29: the deprecated SM knobs routed to moe_flex_dispatcher_num_sms must agree when it is not given
    # (TC L1795-1811); btacalc took the first of them
    Rule("flex-sms-conflict", f"{TC}:1806",
         lambda a, e: a.get("moe_flex_dispatcher_num_sms") is None and a.get("moe_deepep_num_sms") is not None
         and a.get("moe_hybridep_num_sms") is not None,
         lambda a, e: _i(a, "moe_deepep_num_sms") == _i(a, "moe_hybridep_num_sms"),
         "--moe-deepep-num-sms and --moe-hybridep-num-sms (both deprecated) differ: give one "
         "--moe-flex-dispatcher-num-sms"),
    Rule("padding-quantization-dispatcher", f"{TC}:2655",
         lambda a, e: bool(a.get("moe_router_padding_for_quantization") or a.get("moe_router_padding_for_fp8")),
         lambda a, e: a.get("moe_token_dispatcher_type") in ("alltoall", "flex"),
         "--moe-router-padding-for-quantization (which --moe-router-padding-for-fp8 sets, transformer_config.py "
         "L2641-2647) needs the alltoall or flex dispatcher"),
    Rule("variable-seq-lengths-dispatcher", f"{TC}:2977", lambda a, e: a.get("variable_seq_lengths") is True,
         lambda a, e: a.get("moe_token_dispatcher_type") in ("alltoall", "flex"),
         "model.variable_seq_lengths needs the alltoall or flex dispatcher (Megatron-Core checks it for a dense model "
         "too): give model.moe_token_dispatcher_type"),
    Rule("fp8-delayed-recompute", f"{TC}:2002", lambda a, e: a.get("recompute_granularity") == "selective"
         and a.get("fp8") is not None and (a.get("fp8_recipe") or "delayed") == "delayed",
         lambda a, e: not {"moe_act", "layernorm"} & set(a.get("recompute_modules") or ()),
         "FP8 delayed scaling refuses the moe_act and layernorm recompute modules"),
    # review35: Megatron-Core's router for one expert per token (the softmax over the k = 1 selected logit is 1 and gives
    # the router no gradient)
    Rule("top1-pre-softmax", f"{TC}:2669", lambda a, e: _moe(a) and _i(a, "moe_router_topk", 2) == 1
         and (a.get("moe_router_score_function") or "softmax") == "softmax"
         and _balancing(a) != "sinkhorn",
         lambda a, e: bool(a.get("moe_router_pre_softmax")), "top-1 routing with the softmax router needs "
         "--moe-router-pre-softmax"),
    # token dropping is for the auxiliary-loss balancings (and none): a capacity factor, even a negative one (read as
    # dropless just before, L1837-1838), with sinkhorn or another type is refused, every entry of a list checked
    # review23: several balancing types need as many loss coefficients (after arguments.py L1661-1664 turned a list of
    # one into its value); checked before the capacity rule, as TransformerConfig checks it
    Rule("aux-loss-coeff-length", f"{TC}:1829", lambda a, e: isinstance(_balancing(a), (list, tuple)),
         lambda a, e: _coefficients(a) == len(_balancing(a)),
         "several --moe-router-load-balancing-type values need an --moe-aux-loss-coeff list of the same length"),
    Rule("capacity-factor-balancing", f"{TC}:1839",
         lambda a, e: a.get("moe_expert_capacity_factor") is not None,
         lambda a, e: all(t in CAPACITY_BALANCINGS for t in _balancing_types(a)),
         "--moe-expert-capacity-factor only works with the aux_loss, seq_aux_loss, global_aux_loss or none load "
         "balancing"),
    # review35: the low-precision parameters are all-gathered by the distributed optimizer or an FSDP
    Rule("fp8-param-gather-sharded", f"{ARGS}:1096", lambda a, e: bool(a.get("fp8_param_gather")),
         lambda a, e: bool(a.get("use_distributed_optimizer") or a.get("use_megatron_fsdp")
                           or a.get("use_torch_fsdp2")),
         "--fp8-param-gather needs the distributed optimizer, torch FSDP2 or Megatron-FSDP"),
    # review35: TransformerEngine's fused cross-entropy, refused by Megatron-LM's arguments since 168cb15 (2026-06-03,
    # 'stability issues'); Megatron-Bridge's DeepSeek-V3 and Kimi-K2 bridges set it
    Rule("te-cross-entropy", f"{ARGS}:1698", lambda a, e: bool(a.get("cross_entropy_loss_fusion"))
         and a.get("cross_entropy_fusion_impl") == "te", lambda a, e: False,
         "--cross-entropy-fusion-impl te (TransformerEngine's fused cross-entropy) is refused since 168cb15"),
    Rule("fp8-or-fp4", f"{ARGS}:1101", lambda a, e: a.get("fp8") is not None,
         lambda a, e: a.get("fp4") is None, "--fp8-format and --fp4-format cannot be used together"),
    Rule("a2a-vp", f"{TC}:3007", lambda a, e: _a2a(a, e) and _i(a, "pipeline_model_parallel_size") > 1,
         lambda a, e: _vp(a) > 1 or a.get("num_virtual_stages_per_pipeline_rank") is not None,
         "--overlap-moe-expert-parallel-comm with pipeline parallelism needs a virtual pipeline"),
    Rule("a2a-ep", f"{TC}:3014", _a2a, lambda a, e: _i(a, "expert_model_parallel_size") > 1,
         "--overlap-moe-expert-parallel-comm needs expert parallelism"),
    Rule("a2a-dispatcher", f"{TC}:3016", _a2a, lambda a, e: a.get("moe_token_dispatcher_type") in ("alltoall", "flex"),
         "--overlap-moe-expert-parallel-comm needs the alltoall or flex dispatcher"),
    Rule("a2a-full-recompute", f"{TC}:3022", _a2a, lambda a, e: a.get("recompute_granularity") != "full",
         "--overlap-moe-expert-parallel-comm is refused with full recomputation"),
    Rule("a2a-recompute-method", f"{TC}:3025", _a2a, lambda a, e: a.get("recompute_method") is None,
         "--overlap-moe-expert-parallel-comm takes no --recompute-method"),
    Rule("a2a-recompute-layers", f"{TC}:3028", _a2a, lambda a, e: a.get("recompute_num_layers") is None,
         "--overlap-moe-expert-parallel-comm takes no --recompute-num-layers"),
    Rule("a2a-moe-module", f"{TC}:3031", _a2a, lambda a, e: "moe" not in (a.get("recompute_modules") or ()),
         "--overlap-moe-expert-parallel-comm is refused with the moe recompute module"),
    Rule("a2a-16-bit", f"{TC}:3036", _a2a, lambda a, e: bool(a.get("bf16") or a.get("fp16")),
         "--overlap-moe-expert-parallel-comm needs --bf16 or --fp16"),
    # review25: DeepSeek-V3's model bridge turns the shared experts' overlap on (Megatron-Bridge @ 067f987df
    # deepseek_v3_bridge.py L72; bridge_model_bridges.toml), which a Bridge run of it with the EP overlap must turn off,
    # as Bridge's performance scripts do (scripts/performance/utils/overrides.py L189-197)
    Rule("a2a-shared-expert-overlap", f"{TC}:3039", _a2a, lambda a, e: not bool(a.get("moe_shared_expert_overlap")),
         "--overlap-moe-expert-parallel-comm is refused with --moe-shared-expert-overlap "
         "(DeepSeek-V3's Megatron-Bridge model bridge turns it on: give model.moe_shared_expert_overlap=false)"),
    Rule("a2a-delay-wgrad", f"{TC}:3074", lambda a, e: bool(a.get("delay_wgrad_compute")), _a2a,
         "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm"),
    Rule("a2a-early-release", f"{TC}:3097", lambda a, e: bool(a.get("ep_overlap_early_attn_memory_release")), _a2a,
         "--ep-overlap-early-attn-memory-release needs --overlap-moe-expert-parallel-comm"),
    Rule("a2a-mtp", f"{TC}:3042", _a2a, lambda a, e: _i(a, "mtp_num_layers", 0) <= 1,
         "--overlap-moe-expert-parallel-comm allows at most one MTP layer"),
)


# Rules of Megatron-LM's own argument checks (megatron/training/arguments.py) that Megatron-Bridge's ConfigContainer
# does not run, nor Megatron-Core behind it: a Bridge run may do what they refuse (Bridge's FP8 recipes turn
# fp8_param_gather on whatever the optimizer: mixed_precision.py L231 @ 067f987d; no Megatron-Core assertion; its
# DeepSeek-V3 and Kimi-K2 bridges set cross_entropy_fusion_impl te: deepseek_v3_bridge.py L82). recipes42: Bridge's
# recipes set both virtual_pipeline_model_parallel_size and a pipeline layout (perf_recipes/kimi/gb200/kimi_k2.py,
# qwen/gb200/qwen3_moe.py @ 067f987d): arguments.py L928 refuses the pair, Megatron-Core's TransformerConfig takes it
# when VP is the layout's chunks / PP (transformer_config.py L2275-2285 @ d98e8a64), which the plan checks itself
LAUNCHER_ONLY = frozenset({"fp8-param-gather-sharded", "te-cross-entropy", "virtual-pipeline-one-way"})


def violations(args: A, env: dict[str, str], bridge: bool = False) -> list[Rule]:
    """The rules a run breaks (`bridge`: as Megatron-Bridge runs it, without LAUNCHER_ONLY)."""
    return [r for r in RULES if r.broken(args, env) and not (bridge and r.name in LAUNCHER_ONLY)]


def describe(rule: Rule) -> str:
    pin = TE_SHORT if rule.source.startswith("transformer_engine/") else MEGATRON_LM_SHORT
    return f"{rule.message} ({pin} {rule.source})"


# The ends of the reasons a plan keeps where it runs an overlap other than the one asked for, as Megatron would
# (`a2a_refusal`, `dropped_overlaps`, `p2p_refusal`); the resolved execution records which overlaps these are
# (Execution.changed_overlaps) and `changed_overlaps` writes them as the emitted launch's notes
PLANNED_WITHOUT, PLANNED_WITH = "planned without it", "planned with it"
OVERLAP_KEYS = {"overlap_all_to_all": "--overlap-moe-expert-parallel-comm", "overlap_p2p": "--overlap-p2p-communication",
                "tp_comm_overlap": "--tp-comm-overlap"}


def changed_overlaps(changed: dict[str, bool], reasons: dict[str, str]) -> list[str]:
    """review35: the overlaps the plan changed from the request so that Megatron runs it (`changed`: key -> whether
    the plan runs it; `reasons`: why), each as a launch note (the launch left the asked-for flag out without a word)."""
    out = []
    for key, flag in OVERLAP_KEYS.items():
        if key not in changed:
            continue
        why = reasons[key].removesuffix(PLANNED_WITH if changed[key] else PLANNED_WITHOUT).rstrip(": ")
        out.append(f"{flag} was asked off and is left on: {why}" if changed[key]
                   else f"{flag} was asked for and is left out: {why}")
    return out


# Plans btacalc can model but Megatron refuses, and the nearest runnable plan: drop the all-to-all overlap
# (its Megatron-Core conditions: TC:3007-3031). (condition on the resolved recompute policy, pipeline, VP, EP)
# hostile33: at EP 1 the option was said to be moot, but the plan kept it (its stored buffers, "overlapped:
# all_to_all") while the emitted launch left it out without a word, so the launch read back planned other memory
A2A_REFUSALS: tuple[tuple[str, str, Callable[[str, int, int, int], bool]], ...] = (
    ("a2a-ep", "no expert parallelism (EP 1)", lambda rc, pp, vp, ep: ep == 1),
    ("a2a-full-recompute", "full recomputation", lambda rc, pp, vp, ep: rc == "full"),
    ("a2a-moe-module", "the moe recompute module", lambda rc, pp, vp, ep: "moe" in rc.split(",")),
    ("a2a-vp", "pipeline parallelism without a virtual pipeline", lambda rc, pp, vp, ep: pp > 1 and vp == 1),
)


def a2a_refusal(recompute: str, pp: int, vp: int, ep: int) -> str | None:
    """Why Megatron-Core refuses --overlap-moe-expert-parallel-comm for this run (None: it runs)."""
    by_name = {r.name: r for r in RULES}
    for name, what, refused in A2A_REFUSALS:
        if refused(recompute, pp, vp, ep):
            return (f"Megatron-Core refuses overlap_moe_expert_parallel_comm with {what} ({MEGATRON_LM_SHORT} "
                    f"{by_name[name].source}): {PLANNED_WITHOUT}")
    return None


def dropped_overlaps(tp: int, vp: int, tp_comm: bool, p2p: bool) -> dict[str, str]:
    """The communication overlaps Megatron-LM switches off or refuses for this layout, each with why (the plan
    runs without them, as Megatron would): --overlap-p2p-communication without a virtual pipeline (arguments.py
    L1010-1012 sets overlap_p2p_comm False: the 1F1B schedule has no p2p overlap), --tp-comm-overlap at TP 1
    (L1433-1439 turns sequence parallelism off, then L1441-1442 asserts it)."""
    out = {}
    if p2p and vp == 1:
        out["overlap_p2p"] = (f"Megatron-LM switches overlap_p2p_comm off without a virtual pipeline "
                              f"({MEGATRON_LM_SHORT} {ARGS}:1010-1012, the 1F1B schedule): {PLANNED_WITHOUT}")
    if tp_comm and tp == 1:
        out["tp_comm_overlap"] = (f"Megatron-LM refuses --tp-comm-overlap at TP 1 (sequence parallelism is off there: "
                                  f"{MEGATRON_LM_SHORT} {ARGS}:1433-1442); there is no TP communication to hide: "
                                  f"{PLANNED_WITHOUT}")
    return out


def overlap_refusal(tp: int, sp: bool, tp_comm: bool, grad_reduce: bool, param_gather: bool,
                    sharded: bool) -> str | None:
    """Why Megatron-LM asserts against these communication overlaps as given (None: it runs them). freshuser19: a plan
    kept them, printed them as overlapped and emitted a launch with a MEGATRON WOULD REFUSE THIS line, which the launch
    reader then refused; unlike the overlaps `dropped_overlaps` names, each is a choice the user made against another."""
    rule = {r.name: f"{MEGATRON_LM_SHORT} {r.source}" for r in RULES}
    if tp_comm and tp > 1 and not sp:
        return (f"{{tp_comm_overlap}} needs {{sequence_parallel}} at {{tensor_parallel}} {tp}: Megatron-LM overlaps the "
                f"sequence-parallel all-gather / reduce-scatter only, and asserts it ({rule['tp-overlap-sp']})")
    if param_gather and not grad_reduce:
        return ("{overlap_param_gather} needs {overlap_grad_reduce}: Megatron-LM asserts it "
                f"({rule['param-gather-grad-reduce']})")
    if param_gather and not sharded:
        return ("{overlap_param_gather} needs the distributed optimizer ({zero_stage} 1 or more) or Megatron-FSDP: under "
                f"ZeRO-0 no parameter is gathered, and Megatron-LM asserts it ({rule['param-gather-sharded']})")
    return None


def userbuffers_domain_refusal(tp: int, devices: int, domain: int) -> str | None:
    """Why TransformerEngine's userbuffers (Megatron-LM's --tp-comm-overlap) cannot run a TP group that leaves its
    NVLink domain (None: every TP group lies inside one). Megatron-LM calls `initialize_ub` with the TP size and no
    cuBLASMp backend (Megatron-LM training/initialize.py L240-255); TE makes each TP group the userbuffers' NVLink group
    (module/base.py L305-320) and maps its buffers as peer memory: multi-node NVLink fabric handles, or POSIX handles
    passed over Unix-domain sockets between the ranks of one host (userbuffers-host.cpp L286-291), or CUDA IPC for at
    most 8 GPUs (L664). Megatron's rank order puts each TP group on consecutive ranks, so the groups stay inside
    domains of `domain` consecutive devices when the TP size divides the devices one domain holds."""
    within = min(devices, domain)
    if tp <= 1 or within % tp == 0:
        return None
    return (f"{{tp_comm_overlap}} at {{tensor_parallel}} {tp} with {within} devices per NVLink domain: a TP group "
            f"would span two domains, and TransformerEngine's userbuffers (Megatron's TP overlap) map the TP group's "
            f"buffers as NVLink peer memory inside one domain ({TE_SHORT} transformer_engine/pytorch/module/base.py "
            f"L305-320, comm_gemm_overlap/userbuffers/userbuffers-host.cpp L286-291, L664): give a TP that divides "
            f"{within}, or --no-tp-comm-overlap")


def p2p_refusal(pp: int, vp: int, p2p: bool) -> str | None:
    """Why Megatron refuses the interleaved schedule without p2p overlap on two stages (None: it runs)."""
    if vp > 1 and pp <= 2 and not p2p:
        rule = next(r for r in RULES if r.name == "interleave-pp")
        return (f"Megatron-LM refuses the interleaved schedule on {pp} stages without p2p overlap ({MEGATRON_LM_SHORT} "
                f"{rule.source}-1006): {PLANNED_WITH}")
    return None
