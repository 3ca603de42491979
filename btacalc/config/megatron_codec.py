"""btacalc's resolved run <-> Megatron-LM arguments <-> Megatron-Bridge config keys, as one table.

A run is a flat dict of *fields* (`model.hidden_size`, `layout.tensor_parallel`, `batch.micro_batch`, ...:
what btacalc resolved). Each row of `ROWS` turns some fields into Megatron argparse destinations
(`encode`) and back (`decode`): the architecture's rows (`MODEL_ROWS`, `model_fields`) are in
config/megatron_model_rows.py, the row primitives (`Row`, `same`, `switch`, `choice`, `Get`) in config/megatron_rows.py,
the run's rows (`RUN_ROWS`) here; `render_flags` writes destinations as Megatron-LM flags (names from
btacalc/data/megatron_flags.tsv, MEGATRON_LM_PIN); bridge_codec's `BRIDGE_KEYS` names the same destinations as
Megatron-Bridge's ConfigContainer keys (BRIDGE_PIN) and reads Bridge overrides back into them. A new execution field is one new row: e.g.
`Same("layout.first_stage_layers", "decoder_first_pipeline_num_layers")`.

A destination absent from a launch takes Megatron's own default (the parser's, from the flags table):
a script without --untie-embeddings-and-output-weights trains tied embeddings, one without
--hidden-dropout trains with dropout 0.1, as Megatron would.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..errors import BtacalcError
from ..vocabulary import FEATURES, OP_POLICY, SELECTIVE_MODULES
from .attention_kernels import DEFAULT_ATTENTION_KERNEL
from .cuda_graphs import GRAPH_IMPL
from .pipeline import parse_layout
from .megatron_rules import ATTENTION_SWITCHES, BACKEND_SWITCHES
from .megatron_launch import flags_by_dest, real
from .megatron_rows import Args, Fields, Get, Row, attention_backend, choice, optional_int, same, switch, truth
from .megatron_model_rows import BALANCING_ROW, MODEL_ROWS


BRIDGE_PIN = "NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a"


def _enc_recompute(f: Fields) -> Args:
    policy = f["run.recompute"]
    if policy == "none":
        return {}
    if policy == "full" and f.get("run.recompute_layers", 0):  # the first N layers (RunOptions.recompute_layers)
        return {"recompute_granularity": "full", "recompute_method": "block",
                "recompute_num_layers": f["run.recompute_layers"]}
    if policy == "full":
        return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    if policy == OP_POLICY:  # (the emit refuses it first: cli/plan.py _NOT_MEGATRON)
        raise BtacalcError("{recompute} op is torchtitan's per-op activation checkpoint: Megatron has no such policy")
    modules = list(SELECTIVE_MODULES) if policy == "selective" else policy.split(",")
    return {"recompute_granularity": "selective", "recompute_modules": modules}


# The selective recompute modules Megatron-Core accepts (transformer_config.py L1945-1957 @ d98e8a64); those btacalc
# does not model (the gated-delta-net and mHC modules) are refused later as modules it does not know
MEGATRON_RECOMPUTE_MODULES = frozenset({"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                                        "shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"})


def _dec_recompute(get: Get) -> Fields:
    granularity = get("recompute_granularity")
    if truth(get("recompute_activations")):
        # review30: Megatron-LM sets the granularity to selective whatever --recompute-granularity says (arguments.py
        # L606-607 @ d98e8a64); btacalc kept a given full
        granularity = "selective"
    if granularity is None:
        # no recomputation: Megatron-Core reads --recompute-method / -num-layers / -modules only under a
        # granularity (transformer_config.py L1900-1932), so they stay unread and are listed (megatron_run.IGNORED)
        return {"run.recompute": "none"}
    method, layers, modules = get("recompute_method"), get("recompute_num_layers"), get("recompute_modules")
    if granularity == "full":
        count = optional_int(layers, "recompute_num_layers")
        if method is None or count is None:
            # review30: Megatron-Core refuses a full granularity without a method (transformer_config.py L1908-1917 @
            # d98e8a64) or without a layer count (L1919-1924)
            missing = " and ".join(f for f, v in (("--recompute-method", method), ("--recompute-num-layers", count))
                                   if v is None)
            raise BtacalcError(f"--recompute-granularity full without {missing}: Megatron-Core refuses it "
                               "(transformer_config.py L1908-1924 @ d98e8a64); give --recompute-method uniform "
                               "--recompute-num-layers 1 (every layer) or block N (the first N)")
        if method == "block" and count >= 1:
            # Megatron-Core's block method: the first N layers of each pipeline stage's model chunk are checkpointed,
            # the rest keep their activations (recompute.py L167-180 @ d98e8a64; RunOptions.recompute_layers,
            # Problem.stored_layers)
            return {"run.recompute": "full", "run.recompute_layers": count}
        if method != "uniform" or count != 1:
            raise BtacalcError(f"--recompute-method {method} --recompute-num-layers {layers}: btacalc models full "
                               "recomputation of every layer (uniform, 1 layer per checkpoint) or of each chunk's "
                               "first N (block, N >= 1)")
        return {"run.recompute": "full"}
    if granularity != "selective":
        raise BtacalcError(f"--recompute-granularity {granularity!r}: Megatron takes full or selective")
    if method is not None or layers is not None:
        # review30: Megatron-LM asserts no method under selective (arguments.py L1424-1427; --recompute-activations
        # makes it selective), Megatron-Core no layer count (transformer_config.py L1926-1932); both were dropped
        given = " ".join(f"--recompute-{k} {v}" for k, v in (("method", method), ("num-layers", layers)) if v is not None)
        raise BtacalcError(f"{given} with selective recomputation (--recompute-granularity selective or "
                           "--recompute-activations): Megatron refuses a method or a layer count there "
                           "(arguments.py L1424-1427, transformer_config.py L1926-1932 @ d98e8a64)")
    chosen = list(modules) if modules else list(SELECTIVE_MODULES)
    invalid = sorted(set(chosen) - MEGATRON_RECOMPUTE_MODULES)
    if invalid:
        # review34: `op` (btacalc's torchtitan policy) was refused with the torchtitan wording; Megatron-Core refuses
        # it as a module it does not know
        raise BtacalcError(f"--recompute-modules {' '.join(invalid)}: Megatron-Core refuses modules outside "
                           f"{', '.join(sorted(MEGATRON_RECOMPUTE_MODULES))} (transformer_config.py L1943-1962 @ "
                           "d98e8a64)")
    return {"run.recompute": ",".join(sorted(chosen)) if sorted(chosen) != list(SELECTIVE_MODULES) else "selective"}


def _enc_sharding(f: Fields) -> Args:
    zero = f.get("layout.zero_stage", 0)
    if zero == 1:
        return {"use_distributed_optimizer": True}
    if zero >= 2:
        return {"use_megatron_fsdp": True, "ckpt_format": "fsdp_dtensor",
                "data_parallel_sharding_strategy": "optim_grads" if zero == 2 else "optim_grads_params"}
    return {}


def _dec_sharding(get: Get) -> Fields:
    get("ckpt_format")
    if truth(get("use_torch_fsdp2")):  # review25: listed as not modelled, the launch was planned as Megatron DDP
        raise BtacalcError("--use-torch-fsdp2 (Megatron-Bridge's dist.use_torch_fsdp2: Megatron-LM's wrapper of "
                           "PyTorch FSDP2 around its own layers) is not "
                           "modelled, and planning it as data parallel without it would count the whole model on every "
                           "GPU: btacalc plans Megatron-FSDP (--use-megatron-fsdp) and PyTorch FSDP2 as torchtitan "
                           "runs it (btacalc plan --fsdp --fsdp-impl fsdp2)")
    if truth(get("use_megatron_fsdp")):
        strategy = get("data_parallel_sharding_strategy")
        stages = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
        if strategy not in stages:
            raise BtacalcError(f"--data-parallel-sharding-strategy {strategy!r}: not one of {', '.join(stages)}")
        get("use_distributed_optimizer")  # Megatron-FSDP v1 turns it on itself (arguments.py:1127-1135)
        return {"layout.zero_stage": stages[strategy], "layout.fsdp": stages[strategy] == 3}
    get("data_parallel_sharding_strategy")
    return {"layout.zero_stage": 1 if truth(get("use_distributed_optimizer")) else 0, "layout.fsdp": False}


def _enc_precision(f: Fields) -> Args:
    """--bf16 (gradients reduced in fp32 unless --grad-reduce-in-bf16) or --fp16, whose gradients Megatron-LM reduces
    in fp16 unless --accumulate-allreduce-grads-in-fp32: only --bf16 turns that on (MEGATRON_LM_PIN
    megatron/training/arguments.py L1195-1217; training.py L2635 grad_reduce_in_fp32 =
    accumulate_allreduce_grads_in_fp32). hostile16: --precision fp16 was an internal error (KeyError) here."""
    if f.get("run.precision") == "fp16":
        return {"fp16": True} if f.get("run.gradient_bytes") == 2 else \
            {"fp16": True, "accumulate_allreduce_grads_in_fp32": True}
    out: Args = {"bf16": True}
    if f.get("run.gradient_bytes") == 2:
        out["grad_reduce_in_bf16"] = True
    return out


def _dec_precision(get: Get) -> Fields:
    bf16, fp16 = truth(get("bf16")), truth(get("fp16"))
    if not (bf16 or fp16):
        raise BtacalcError("the launch trains in fp32 (no --bf16 or --fp16): btacalc models 16-bit training")
    if bf16 and fp16:  # Megatron-LM asserts one of them (arguments.py L1195-1206)
        raise BtacalcError("--bf16 and --fp16 together: Megatron-LM refuses both (arguments.py L1196, L1205); give one")
    if fp16:  # --grad-reduce-in-bf16 not read: listed ignored, with megatron_run.IGNORED's reason (hostile17)
        return {"run.gradient_bytes": 4 if truth(get("accumulate_allreduce_grads_in_fp32")) else 2}
    # --bf16 turns accumulate_allreduce_grads_in_fp32 on itself unless --grad-reduce-in-bf16, or (review28) the
    # precision-aware optimizer's --main-grads-dtype bf16, which Megatron-LM asserts against the flag given
    # (arguments.py L1209-1216): then the gradient buffers are bf16 (training.py L2635 grad_reduce_in_fp32)
    grads = str(get("main_grads_dtype") or "fp32")
    accumulate = truth(get("accumulate_allreduce_grads_in_fp32"))
    if accumulate and grads != "fp32":
        raise BtacalcError(f"--main-grads-dtype {grads} with --accumulate-allreduce-grads-in-fp32: Megatron-LM asserts "
                           "fp32 main gradients there (arguments.py L1209-1211 @ d98e8a64); give one")
    if grads not in ("fp32", "bf16"):
        raise BtacalcError(f"--main-grads-dtype {grads}: Megatron-LM takes fp32 or bf16 (arguments.py L3671)")
    low = truth(get("grad_reduce_in_bf16")) or (grads == "bf16" and not accumulate)
    return {"run.gradient_bytes": 2 if low else 4}


def _enc_pipeline(f: Fields) -> Args:
    out: Args = {"pipeline_model_parallel_size": f["layout.pipeline_parallel"]}
    vp = f.get("layout.virtual_pipeline", 1)
    if vp > 1 and f.get("layout.pipeline_layout") is None:  # a layout sets VP: Megatron refuses both
        out["num_virtual_stages_per_pipeline_rank"] = vp
    if vp > 1 and not f.get("overlap.p2p", True):
        out["overlap_p2p_comm"] = False
    if vp > 1 and f.get("layout.microbatch_group") is not None:
        out["microbatch_group_size_per_vp_stage"] = f["layout.microbatch_group"]
    split = f.get("layout.pipeline_split")  # btacalc.config.pipeline Placement.method
    if split in ("embedding_loss", "embedding"):
        out["account_for_embedding_in_pipeline_split"] = True
    if split in ("embedding_loss", "loss"):
        out["account_for_loss_in_pipeline_split"] = True
    return out


def _dec_pipeline(get: Get) -> Fields:
    pp = optional_int(get("pipeline_model_parallel_size"), "pipeline_model_parallel_size") or 1
    vp = optional_int(get("num_virtual_stages_per_pipeline_rank"), "num_virtual_stages_per_pipeline_rank")
    per_stage = optional_int(get("num_layers_per_virtual_pipeline_stage"), "num_layers_per_virtual_pipeline_stage")
    if per_stage and not vp:  # arguments.py L953-975: VP = ((L + account-for flags) / PP) / layers per virtual stage
        layers = ((optional_int(get("num_layers"), "num_layers") or 0) + truth(get("account_for_embedding_in_pipeline_split"))
                  + truth(get("account_for_loss_in_pipeline_split")))
        vp = layers // pp // per_stage
    layout = get("pipeline_model_parallel_layout")
    if layout is not None and not vp and not per_stage:
        # a layout sets VP: its model chunks / PP (MEGATRON_LM_PIN megatron/training/arguments.py L941-950); chunks
        # that PP does not divide are left to the placement's check, which names both
        chunks = len(parse_layout(str(layout)))
        vp = chunks // pp if chunks % pp == 0 else None
    embedding, loss = (truth(get("account_for_embedding_in_pipeline_split")),
                       truth(get("account_for_loss_in_pipeline_split")))
    vp = vp or 1
    split = {(True, True): "embedding_loss", (True, False): "embedding", (False, True): "loss"}.get((embedding, loss),
                                                                                                  "even")
    # hostile28: the group is read with virtual stages only (Megatron's other schedules do not use it); without
    # them a launch's value is left unread, so listed as ignored, not planned as a setting that changes nothing
    group = optional_int(get("microbatch_group_size_per_vp_stage"), "microbatch_group_size_per_vp_stage") if vp > 1 else None
    return {"layout.pipeline_parallel": pp, "layout.virtual_pipeline": vp,
            "layout.pipeline_split": split, "layout.microbatch_group": group,
            "overlap.p2p": truth(get("overlap_p2p_comm")) and vp > 1}


def _enc_sp(f: Fields) -> Args:
    return {"sequence_parallel": True} if f.get("layout.sequence_parallel") else {}


def _dec_sp(get: Get) -> Fields:
    """Megatron switches sequence parallelism off with TP = 1 (arguments.py:1430-1431)."""
    tp = optional_int(get("tensor_model_parallel_size"), "tensor_model_parallel_size") or 1
    return {"layout.sequence_parallel": truth(get("sequence_parallel")) and tp > 1}


def _enc_dispatcher(f: Fields) -> Args:
    """The dispatcher btacalc timed, always stated for an MoE model: Megatron's default is allgather
    (transformer_config.py L891 @ d98e8a64), which btacalc times only with `layout.allgather_dispatcher`; otherwise
    the alltoall dispatcher (model/gpu/collectives.py), also at EP 1, where the two dispatchers differ in what the
    expert-tensor-parallel group exchanges. DeepEP (`layout.deepep`) is the flex dispatcher with its deepep backend
    (transformer_config.py L891-900: moe_enable_deepep is deprecated for --moe-flex-dispatcher-backend deepep,
    L1743-1753) and its SMs --moe-flex-dispatcher-num-sms (L964)."""
    if not f.get("model.num_experts"):
        return {}
    if f.get("layout.allgather_dispatcher"):
        return {"moe_token_dispatcher_type": "allgather"}
    if not f.get("layout.deepep"):
        return {"moe_token_dispatcher_type": "alltoall"}
    out: Args = {"moe_token_dispatcher_type": "flex",
                 "moe_flex_dispatcher_backend": "hybridep" if f.get("layout.hybridep") else "deepep"}
    if f.get("layout.dispatcher_sms") is not None:
        out["moe_flex_dispatcher_num_sms"] = f["layout.dispatcher_sms"]
    return out


def _dec_dispatcher(get: Get) -> Fields:
    """Megatron's dispatcher, its default (allgather) when the launch names none: the allgather dispatcher
    (`layout.allgather_dispatcher`), the alltoall one, or the flex dispatcher with the deepep or hybridep backend
    (or the deprecated --moe-enable-deepep), which sends one copy of a token per destination rank, as btacalc's
    DeepEP dispatch times it; its SMs come from --moe-flex-dispatcher-num-sms or the deprecated
    --moe-deepep-num-sms / --moe-hybridep-num-sms (transformer_config.py L964-975, routed to it in __post_init__).
    A dense model reads none of them."""
    kind = get("moe_token_dispatcher_type")
    if kind == "allgather":  # --num-experts 0 is a dense model (arguments.py L1648-1649 @ d98e8a64 sets it None)
        return {"layout.allgather_dispatcher": True} if optional_int(get("num_experts"), "num_experts") else {}
    if kind != "flex":
        return {}
    backend = "deepep" if truth(get("moe_enable_deepep")) else get("moe_flex_dispatcher_backend")
    if backend not in ("deepep", "hybridep"):
        return {"run.dispatcher_note": f"--moe-flex-dispatcher-backend {backend}: btacalc times an all-to-all"}
    sms = next((optional_int(get(d), d) for d in ("moe_flex_dispatcher_num_sms", "moe_deepep_num_sms", "moe_hybridep_num_sms")
                if get(d) is not None), None)
    return {"layout.deepep": True, "layout.hybridep": backend == "hybridep", "layout.dispatcher_sms": sms}


def _enc_cuda_graphs(f: Fields) -> Args:
    """Per-layer CUDA graphs (config/cuda_graphs.py): the TransformerEngine implementation with the scopes.
    Megatron-LM @ d98e8a64 (btacalc's flag table) names them --cuda-graph-modules (arguments.py L2050-2064;
    --cuda-graph-scope, the name of the 25.x/26.0x releases (554ce493 L1529), is its hidden deprecated alias,
    L2047-2049, moved to it in validate_args L633-641)."""
    scope = f.get("layout.cuda_graph_scope") or ()
    if not scope:
        return {}
    return {"cuda_graph_impl": GRAPH_IMPL, "cuda_graph_modules": list(scope)}


def _dec_cuda_graphs(get: Get) -> Fields:
    """--cuda-graph-impl transformer_engine with its scopes (--cuda-graph-modules or the deprecated
    --cuda-graph-scope); a whole-layer graph (no scope, or "full") and the local / full-iteration graphs are
    not expressed: planned without graphs, with a note."""
    impl = get("cuda_graph_impl")
    if impl in (None, "none"):
        return {}
    scope = get("cuda_graph_modules") or get("cuda_graph_scope_deprecated") or []
    scope = [scope] if isinstance(scope, str) else [str(s) for s in scope]
    if impl != GRAPH_IMPL or not scope or "full" in scope:
        return {"run.cuda_graph_note": f"--cuda-graph-impl {impl} {' '.join(scope) or '(whole layer)'}: btacalc "
                                       "models per-layer scopes only (attn, mlp, moe_router, moe_preprocess); "
                                       "planned without CUDA graphs"}
    return {"layout.cuda_graph_scope": tuple(scope)}


# The attention kernels (btacalc/data/attention_kernels.toml) that Megatron's --attention-backend flash runs: the
# flash-attn package through TransformerEngine. Every other fused kernel btacalc times is cuDNN's (TE's
# FusedAttention: `default`, `cudnn-9-13`), which is --attention-backend fused; `flash` sets NVTE_FUSED_ATTN=0
# (Megatron-LM @ d98e8a64 language_module.py L133-136) and so ran the flash-attn package where btacalc timed cuDNN,
# and found no backend at all for a learnable softmax (GPT-OSS's sinks: TransformerEngine @ d0067d0
# attention/dot_product_attention/utils.py L1114-1124 disables FlashAttention for it). Megatron's default `auto`
# would pick cuDNN too on Hopper and later (utils.py L1647-1653); on Ampere FlashAttention-2 (below).
FLASH_BACKEND_KERNELS = frozenset({"flash-attn-2"})


# semantics20: below compute capability 9.0 (A100) btacalc's default kernel is FlashAttention-2, not cuDNN:
# attention_kernels.toml times `default` on sm80 at FlashAttention-2's own A100 figure (Dao 2023, Figure 4; a100attn),
# because Megatron-LM's default --attention-backend auto takes FlashAttention-2 there (TE @ d0067d0 utils.py
# L1647-1653 prefer FusedAttention only from sm90; the profile's attention note), and it is the only fused backend TE keeps under --deterministic-mode there (utils.py L1555-1567
# turn FusedAttention's F16 backend off for training below sm90): `fused` left a deterministic A100 launch no backend.
# A learnable softmax (GPT-OSS's sinks) has no FlashAttention (utils.py L1122-1124): fused, as before.
FLASH_BELOW_CAPABILITY = 9.0


# TransformerEngine's backend switches as Megatron-Core sets them for each AttnBackend (megatron_rules.BACKEND_SWITCHES,
# language_module.py L129-145 @ d98e8a64). `local` (all three off there) is left out: no environment makes a Bridge run
# local (BRIDGE_LOCAL_ATTENTION), and `auto` (all three on) is TE's own choice
ATTENTION_BACKEND_ENVIRONMENT = {name: BACKEND_SWITCHES[name] for name in ("flash", "fused", "unfused")}


# review22: what a Bridge override's model.attention_backend=local runs. The string matches neither GPTModelProvider's
# check that swaps in Megatron-Core's DotProductAttention (gpt_provider.py L278-280 @ 067f987df: == AttnBackend.local)
# nor _set_attention_backend's, so the layers keep TransformerEngine's attention and TE picks its kernel; no environment
# changes that (all three NVTE_* switches off leave TE no kernel at all). The lead's note advised those three switches.
BRIDGE_LOCAL_ATTENTION = ("{key}=local: a Hydra override sets the string 'local', which neither Megatron-Bridge's "
                          "GPTModelProvider (gpt_provider.py L278-280: DotProductAttention only for AttnBackend.local) "
                          "nor Megatron-Core (language_module.py L129-145) matches, so the run keeps "
                          "TransformerEngine's attention and TE chooses the kernel, and no NVTE_* environment makes it "
                          "local (all three switches off leave TE none); planned as given (unfused)")


def bridge_attention_environment(args: Args) -> dict[str, str]:
    """The NVTE_* variables that make a Bridge run use the attention backend `args` name: a Hydra override leaves
    model.attention_backend a string (Bridge's omegaconf_utils.py _apply_overrides sets the value as given), which
    Megatron-Core's _set_attention_backend compares with AttnBackend's members only, so it sets no switch and
    TransformerEngine chooses the kernel; `auto` (TE's choice) needs none. `local` has none either (review22): its
    three switches off leave TransformerEngine no kernel, and what makes a Bridge run local is GPTModelProvider's
    DotProductAttention swap (gpt_provider.py L278-280 @ 067f987df), which compares with AttnBackend.local and so is
    not made for the string either (BRIDGE_LOCAL_ATTENTION)."""
    switches = ATTENTION_BACKEND_ENVIRONMENT.get(str(args.get("attention_backend", "auto")))
    if switches is None:
        return {}
    return {name: str(v) for name, v in zip(ATTENTION_SWITCHES, switches)}


def _enc_attention(f: Fields) -> Args:
    """Fused attention as --attention-backend fused (cuDNN, TransformerEngine's FusedAttention: btacalc's default
    kernel from sm90, and the only one TE runs FP8 attention on, TE @ d0067d0 common/recipe/__init__.py L222-227), or
    flash where the plan is timed at the flash-attn package's kernel (FLASH_BACKEND_KERNELS; the default kernel below
    FLASH_BELOW_CAPABILITY)."""
    if f["run.attention"] != "flash":
        return {"attention_backend": "unfused"}
    kernel, cc = f.get("run.attention_kernel"), f.get("run.compute_capability")
    ampere = (kernel == DEFAULT_ATTENTION_KERNEL and cc is not None and 0 < cc < FLASH_BELOW_CAPABILITY
              and not f.get("model.attention_sinks"))
    flash = (kernel in FLASH_BACKEND_KERNELS or ampere) and not f.get("run.fp8_attention")
    return {"attention_backend": "flash" if flash else "fused"}


def _dec_attention(get: Get) -> Fields:
    """Unfused attention (materialised scores) for --attention-backend unfused or local, and for --transformer-impl
    local whatever the backend: its layers are Megatron-Core's own modules, whose core attention is
    DotProductAttention (Megatron-LM @ d98e8a64 gpt_builders.py L35 use_te, L109-149 get_gpt_layer_local_spec
    unless use_te; core/models/backends.py L129-131 LocalSpecProvider.core_attention). memci: the CI's
    gpt3_mcore_tp1_pp{2,4} tests (--transformer-impl local) were planned with fused attention, -27% and -18%."""
    return {"run.attention": "eager" if attention_backend(get) in ("unfused", "local") else "flash"}


def _enc_loss(f: Fields) -> Args:
    """TransformerEngine's fused cross-entropy (loss te_fused) is Megatron's --cross-entropy-loss-fusion with
    --cross-entropy-fusion-impl te (language_module.py L173-L194), native_fused the flag with the native impl,
    Megatron's default impl (L197); the unfused vocab-parallel cross-entropy is the default without the flag."""
    loss = f.get("run.loss")
    if loss == "te_fused":
        return {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}
    return {"cross_entropy_loss_fusion": True} if loss == "native_fused" else {}


def _dec_loss(get: Get) -> Fields:
    """Unfused and native both keep the fp32 softmax of the logits; native runs the steps compiled, whose backward
    holds a second fp32 copy (native_fused); te fuses in place (te_fused)."""
    impl = str(get("cross_entropy_fusion_impl"))
    if impl not in ("native", "te"):
        raise BtacalcError(f"Megatron cross_entropy_fusion_impl {impl!r}: Megatron-LM's choices are native and te")
    if not truth(get("cross_entropy_loss_fusion")):
        return {"run.loss": "vocab_parallel"}
    return {"run.loss": "te_fused" if impl == "te" else "native_fused"}


# btacalc's precisions (the precision work's --precision) as Megatron's FP8/FP4 settings, the way Megatron-Bridge's
# mixed-precision recipes set them (BRIDGE_PIN src/megatron/bridge/training/mixed_precision.py:217-414: delayed
# hybrid, current-scaling tensorwise hybrid, subchannel blockwise hybrid, mxfp8 e4m3, nvfp4 e2m1);
# Megatron-Core's recipe names at MEGATRON_LM_PIN megatron/core/enums.py Fp8Recipe.
PRECISIONS: dict[str, dict[str, str]] = {
    "bf16": {},
    "fp8": {"fp8": "hybrid", "fp8_recipe": "delayed"},
    "fp8-current": {"fp8": "hybrid", "fp8_recipe": "tensorwise"},
    "fp8-blockwise": {"fp8": "hybrid", "fp8_recipe": "blockwise"},
    "mxfp8": {"fp8": "e4m3", "fp8_recipe": "mxfp8"},
    "nvfp4": {"fp4": "e2m1", "fp4_recipe": "nvfp4"},
}


FP8_FORMATS = ("e4m3", "hybrid")  # Megatron-Core's TransformerConfig.fp8 (transformer_config.py L587 @ d98e8a64)


def _enc_low_precision(f: Fields) -> Args:
    """The low-precision recipe's Megatron settings (bf16 and fp16 set none: `_enc_precision` says which)."""
    precision = f.get("run.precision") or "bf16"
    return {} if precision == "fp16" else dict(PRECISIONS[precision])


def _dec_low_precision(get: Get) -> Fields:
    fp8, fp4 = get("fp8"), get("fp4")
    fp16 = truth(get("fp16"))
    if fp8 is None and fp4 is None:
        return {"run.precision": "fp16" if fp16 else "bf16"}
    if fp16:  # btacalc's FP8/FP4 recipes run over bf16 (Megatron-Bridge's bf16_with_* recipes): fp16 would be lost
        raise BtacalcError(f"--fp16 with --{'fp8' if fp8 is not None else 'fp4'}-format: btacalc models the low-"
                           "precision recipes over bf16 (give --bf16), or fp16 alone")
    given = {"fp8": fp8, "fp8_recipe": get("fp8_recipe")} if fp8 is not None else \
        {"fp4": fp4, "fp4_recipe": get("fp4_recipe")}
    if fp8 is not None and str(fp8) in FP8_FORMATS:
        # hostile16: the recipe decides; Megatron-Core hands --fp8-format e4m3 or hybrid to every FP8 recipe
        # (MEGATRON_LM_PIN megatron/core/fp8_utils.py L761-787; transformer_config.py L587 Literal['e4m3', 'hybrid']),
        # and btacalc's cost of a recipe does not depend on it: `--fp8-format e4m3 --fp8-recipe tensorwise`, the flags
        # btacalc/data/precision.toml itself gives for fp8-current, was refused because the emitter writes hybrid
        given = {**given, "fp8": "hybrid" if str(given["fp8_recipe"]) != "mxfp8" else "e4m3"}
    name = next((k for k, v in PRECISIONS.items() if v and all(str(given.get(d)) == x for d, x in v.items())), None)
    if name is None:
        raise BtacalcError(f"low precision {given}: btacalc models {', '.join(PRECISIONS)} "
                           "(Megatron-Bridge's recipes)")
    if str(get("transformer_impl")) == "local":
        flag = "--fp8-format" if fp8 is not None else "--fp4-format"
        return {"run.precision": "bf16", "run.precision_note": LOCAL_LOW_PRECISION_NOTE.format(flag=flag, name=name)}
    return {"run.precision": name}


# hostile24: --transformer-impl local builds Megatron-Core's own ColumnParallelLinear / RowParallelLinear
# (LocalSpecProvider, core/models/backends.py L102-108 @ d98e8a64, experts too: L136-140), which multiply in the 16-bit
# weights' dtype
# (tensor_parallel/layers.py has no FP8 or FP4 path); the low-precision recipe reaches TransformerEngine's modules
# only (its fp8_autocast), and the local layers have none. btacalc planned the recipe's GEMMs (FP8 rates and bytes).
LOCAL_LOW_PRECISION_NOTE = ("{flag} ({name}) with --transformer-impl local: the local layers are Megatron-Core's "
                            "ColumnParallelLinear / RowParallelLinear (core/models/backends.py L102-108 @ d98e8a64), "
                            "which TransformerEngine's low-precision recipe does not reach, so the launch multiplies "
                            "in bf16: planned bf16 (--transformer-impl transformer_engine runs {name})")


LOCAL_PARAM_GATHER_NOTE = ("--fp8-param-gather / --fp4-param-gather with --transformer-impl local: the local layers' "
                           "parameters stay 16-bit (TransformerEngine's low-precision parameters are its own "
                           "modules'), so the gather moves bf16: planned without it")


def _enc_param_gather(f: Fields) -> Args:
    """--fp8-param-gather (--fp4-param-gather under nvfp4): the parameters kept and all-gathered in the low
    precision (btacalc/data/precision.toml param_gather_flag)."""
    if not f.get("run.fp8_param_gather"):
        return {}
    return {"fp4_param_gather" if f.get("run.precision") == "nvfp4" else "fp8_param_gather": True}


def _dec_param_gather(get: Get) -> Fields:
    fp8, fp4 = truth(get("fp8_param_gather")), truth(get("fp4_param_gather"))  # both read: neither is "ignored"
    if (fp8 or fp4) and str(get("transformer_impl")) == "local":  # hostile24: LOCAL_LOW_PRECISION_NOTE
        return {"run.fp8_param_gather": False, "run.param_gather_note": LOCAL_PARAM_GATHER_NOTE}
    return {"run.fp8_param_gather": fp8 or fp4}


def _enc_fp8_attention(f: Fields) -> Args:
    """FP8 attention sets TransformerConfig.fp8_dot_product_attention (Megatron-LM @ d98e8a64 transformer_config.py
    L640, passed to TransformerEngine's recipe as fp8_dpa: transformer_engine.py L3350, fp8_utils.py L779/L787,
    fp4_utils.py L225), which has no command-line flag (arguments.py L2332-2334, 'no CLI argument exists for
    these'): no destination; the launch's notes and the Bridge overrides say it (output/megatron.py)."""
    return {}


def _dec_fp8_attention(get: Get) -> Fields:
    """Read from Megatron-Bridge's mixed_precision.fp8_dot_product_attention (`from_bridge`; no flag sets it)."""
    return {"run.fp8_attention": truth(get(FP8_ATTENTION_DEST))}


def _enc_capacity(f: Fields) -> Args:
    """Token dropping: --moe-expert-capacity-factor CF and, padding every expert to it,
    --moe-pad-expert-input-to-capacity (Megatron-LM @ d98e8a64 transformer_config.py L917-924)."""
    cf = f.get("run.capacity_factor")
    if cf is None:
        return {}
    out: Args = {"moe_expert_capacity_factor": cf}
    if f.get("run.pad_to_capacity"):
        out["moe_pad_expert_input_to_capacity"] = True
    return out


def _dec_capacity(get: Get) -> Fields:
    """A capacity factor below 0 is dropless in Megatron-Core (transformer_config.py L1836-1838); padding without a
    factor is refused by the plan, as Megatron-Core refuses it (L1862-1866)."""
    cf = get("moe_expert_capacity_factor")
    value = None if cf is None else real(cf, "moe_expert_capacity_factor")
    return {"run.capacity_factor": None if value is None or value < 0 else value,
            "run.pad_to_capacity": truth(get("moe_pad_expert_input_to_capacity"))}


def _enc_offload(f: Fields) -> Args:
    """--cpu-offloading-num-layers N: the first N layers' activations in host memory (Megatron-LM turns
    cpu_offloading on when N > 0: arguments.py L1950-1951; config.resolution.ACTIVATION_OFFLOAD)."""
    n = f.get("run.cpu_offload_layers", 0)
    return {"cpu_offloading_num_layers": n} if n else {}


def _dec_offload(get: Get) -> Fields:
    return {"run.cpu_offload_layers": optional_int(get("cpu_offloading_num_layers"), "cpu_offloading_num_layers") or 0}


def _enc_bf16_ends(f: Fields) -> Args:
    """--first-last-layers-bf16 --num-layers-at-start-in-bf16 N --num-layers-at-end-in-bf16 M: the first N and last M
    decoder layers outside the low-precision recipe (config.resolution.BF16_LAYERS_SOURCE); both counts written, as
    Megatron's parser defaults each to 1 (megatron_flags.tsv)."""
    start, end = f.get("run.bf16_layers_at_start", 0), f.get("run.bf16_layers_at_end", 0)
    if not (start or end):
        return {}
    return {"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": start, "num_layers_at_end_in_bf16": end}


def _dec_bf16_ends(get: Get) -> Fields:
    """The counts take effect only with --first-last-layers-bf16 and an FP8 or FP4 recipe (MLM @ d98e8a64 fp8_utils.py
    L711-727 and L848-850, fp4_utils.py L247-263: without a recipe no layer enters a low-precision context)."""
    on = truth(get("first_last_layers_bf16"))
    start = optional_int(get("num_layers_at_start_in_bf16"), "num_layers_at_start_in_bf16") or 0
    end = optional_int(get("num_layers_at_end_in_bf16"), "num_layers_at_end_in_bf16") or 0
    if not on or (get("fp8") is None and get("fp4") is None):
        return {"run.bf16_layers_at_start": 0, "run.bf16_layers_at_end": 0}
    return {"run.bf16_layers_at_start": start, "run.bf16_layers_at_end": end}


# Bytes of an Adam moment for --exp-avg-dtype / --exp-avg-sq-dtype (Megatron-LM optimizer_config.py L203-206)
MOMENT_BYTES = {"fp32": 4, "bf16": 2}


def _enc_moments(f: Fields) -> Args:
    """--use-precision-aware-optimizer (TransformerEngine's FusedAdam), with bf16 Adam moments where the plan has
    them (they need it: optimizer_config.py L466-478 @ d98e8a64), and, where the precision has no FP8 recipe of its
    own, the --fp8-recipe the optimizer config holds when it is not Megatron-LM's default delayed (review28:
    RunOptions.optimizer_fp8_recipe, a Megatron-Bridge run's tensorwise)."""
    bf16 = f.get("run.moment_bytes", 4) == 2
    if not (bf16 or f.get("run.precision_aware_optimizer")):
        return {}
    out: Args = {"use_precision_aware_optimizer": True}
    if bf16:
        out.update({"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"})
    recipe = f.get("run.optimizer_fp8_recipe", "delayed")
    if "fp8_recipe" not in PRECISIONS.get(f.get("run.precision") or "bf16", {}) and recipe not in (None, "delayed"):
        out["fp8_recipe"] = recipe
    return out


# Megatron-Core's FP8 recipe names (transformer_config.py L594-596 @ d98e8a64: TransformerConfig.fp8_recipe)
FP8_RECIPE_NAMES = ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")


# review28: the optimizer settings Megatron-Core asserts fp32 for without --use-precision-aware-optimizer
# (optimizer_config.py L466-479 @ d98e8a64: main_grads_dtype, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype)
_AWARE_ONLY = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")


def _dec_moments(get: Get) -> Fields:
    """The precision-aware optimizer (its master weights: RunOptions.param_remainders, with the fp8_recipe its config
    holds where the precision has no FP8 recipe: Megatron-LM's --fp8-recipe, default delayed, training.py L2609-2616,
    transformer_config.py L594-596 @ d98e8a64) and its moments' dtype."""
    aware = truth(get("use_precision_aware_optimizer"))
    dtypes = {str(get("exp_avg_dtype") or "fp32"), str(get("exp_avg_sq_dtype") or "fp32")}
    if truth(get("optimizer_cpu_offload")):  # review28 (Megatron-LM asserts it needs the precision-aware optimizer,
        # arguments.py L1884-1887); it was listed "not modelled" and planned with the whole state on the device
        raise BtacalcError("--optimizer-cpu-offload: Megatron-Core's HybridDeviceOptimizer keeps the optimizer state "
                           "(--optimizer-offload-fraction of it, default all) in host memory and steps it on the CPU "
                           "(optimizer/__init__.py L504-545 @ d98e8a64); btacalc models the state on the device: plan "
                           "without it")
    if not aware:
        lower = [f"--{d.replace('_', '-')} {get(d)}" for d in _AWARE_ONLY if str(get(d) or "fp32") != "fp32"]
        if lower:
            raise BtacalcError(f"{', '.join(lower)} without --use-precision-aware-optimizer: Megatron-Core asserts fp32 "
                               "there (optimizer_config.py L466-479 @ d98e8a64); give --use-precision-aware-optimizer")
        return {"run.moment_bytes": 4, "run.precision_aware_optimizer": False}
    master = str(get("main_params_dtype") or "fp32")
    if master != "fp32":
        raise BtacalcError(f"--main-params-dtype {master}: FusedAdam would keep {master} master weights under every "
                           "recipe (optimizer_config.py L407-414, optimizer/__init__.py L574-588 @ d98e8a64); btacalc "
                           "models fp32 master weights or FusedAdam's int16 remainders: give --main-params-dtype fp32")
    out: Fields = {"run.precision_aware_optimizer": True}
    if get("fp8") is None:
        recipe = get("fp8_recipe")
        if recipe is not None and str(recipe) not in FP8_RECIPE_NAMES:
            raise BtacalcError(f"fp8_recipe {recipe!r}: Megatron-Core's recipes are {', '.join(FP8_RECIPE_NAMES)} "
                               "(transformer_config.py L594-596 @ d98e8a64); under the precision-aware optimizer it "
                               "decides FusedAdam's master weights")
        out["run.optimizer_fp8_recipe"] = "delayed" if recipe is None else str(recipe)
    if dtypes == {"fp32"}:
        return {**out, "run.moment_bytes": 4}
    if len(dtypes) > 1 or not dtypes <= set(MOMENT_BYTES):
        raise BtacalcError(f"--exp-avg-dtype / --exp-avg-sq-dtype {' / '.join(sorted(dtypes))}: btacalc models both "
                           "Adam moments in fp32 or both in bf16")
    return {**out, "run.moment_bytes": MOMENT_BYTES[dtypes.pop()]}


# The optimizers whose state btacalc's catalogue holds (formulas/training_state.toml: Adam's fp32 master weights and two
# moments, SGD's master weights and one momentum); Megatron-LM @ d98e8a64 arguments.py L2913 offers more (muon, lion,
# soap, ...), whose state btacalc does not model: refused, not planned as Adam.
OPTIMIZERS = FEATURES["optimizer"]


def _enc_optimizer(f: Fields) -> Args:
    """--optimizer sgd (adam is Megatron-LM's default, arguments.py L2913: nothing to say)."""
    return {} if f.get("run.optimizer", "adam") == "adam" else {"optimizer": f["run.optimizer"]}


def _dec_optimizer(get: Get) -> Fields:
    name = str(get("optimizer") or "adam")
    if name not in OPTIMIZERS:
        raise BtacalcError(f"--optimizer {name}: btacalc holds the optimizer state of {' and '.join(OPTIMIZERS)} only "
                           "(formulas/training_state.toml); plan with the nearest and add the difference yourself")
    return {"run.optimizer": name}


def _enc_stages(f: Fields) -> Args:
    """Uneven first/last pipeline stages and explicit layouts (btacalc.config.pipeline.StageSplit)."""
    out: Args = {}
    if f.get("layout.first_stage_layers") is not None:
        out["decoder_first_pipeline_num_layers"] = f["layout.first_stage_layers"]
    if f.get("layout.last_stage_layers") is not None:
        out["decoder_last_pipeline_num_layers"] = f["layout.last_stage_layers"]
    if f.get("layout.pipeline_layout") is not None:
        out["pipeline_model_parallel_layout"] = f["layout.pipeline_layout"]
    return out


def _dec_stages(get: Get) -> Fields:
    return {"layout.first_stage_layers": optional_int(get("decoder_first_pipeline_num_layers"), "decoder_first_pipeline_num_layers"),
            "layout.last_stage_layers": optional_int(get("decoder_last_pipeline_num_layers"), "decoder_last_pipeline_num_layers"),
            "layout.pipeline_layout": get("pipeline_model_parallel_layout")}


def _enc_grouped_gemm(f: Fields) -> Args:
    """--moe-grouped-gemm for an MoE model whose experts run as grouped GEMMs (btacalc's plans: one kernel over the
    local experts, and what the moe_act recompute module needs, transformer_config.py L1964-1967 @ d98e8a64)."""
    grouped = f.get("model.num_experts") and f.get("run.expert_grouped_gemm", True)
    return {"moe_grouped_gemm": True} if grouped else {}


def _dec_grouped_gemm(get: Get) -> Fields:
    """An MoE launch without --moe-grouped-gemm (Megatron-LM's default: off, megatron_flags.tsv) builds SequentialMLP,
    one linear pair per local expert (Megatron-Core @ d98e8a64 models/gpt/moe_module_specs.py, core/models/backends.py
    L133-142), which asks TransformerEngine for no grouped GEMM and so none of its grouped-GEMM workspaces
    (config/workspaces.py). A dense launch's flag is read and has no experts to change."""
    grouped = truth(get("moe_grouped_gemm"))
    if not (optional_int(get("num_experts"), "num_experts") or 0):
        return {}
    return {"run.expert_grouped_gemm": grouped,
            **({} if grouped else {"run.expert_gemm_note": SEQUENTIAL_EXPERTS_NOTE})}


SEQUENTIAL_EXPERTS_NOTE = (
    "no --moe-grouped-gemm: Megatron-Core runs the experts as SequentialMLP (one linear pair per local expert); btacalc "
    "holds none of TransformerEngine's grouped-GEMM workspaces for it and times the experts as TransformerEngine's "
    "grouped GEMM, itself one GEMM per local expert (model/gpu/fixed.py); SequentialMLP's own per-expert Python is "
    "not timed")


def _enc_transformer_impl(f: Fields) -> Args:
    """--transformer-impl local when the plan's layers are Megatron-Core's own; TransformerEngine's (Megatron's default,
    megatron_flags.tsv) is left unsaid."""
    return {"transformer_impl": "local"} if f.get("run.transformer_engine") is False else {}


def _dec_transformer_impl(get: Get) -> Fields:
    """tews: a local launch runs no TransformerEngine GEMM (Megatron-Core's ColumnParallelLinear: torch.matmul, apex's
    weight-gradient kernels; layers.py L459, L683, L721-726 @ d98e8a64), so it holds none of TE's cuBLAS workspaces
    (config/workspaces.py); its attention is _dec_attention's."""
    return {"run.transformer_engine": str(get("transformer_impl")) != "local"}


# hostile31: Megatron-Core cuts the gradient reduce into buckets only with overlap_grad_reduce (training.py
# L2192-2193 sets bucket_size None without it); without it a launch's bucket flags are left unread, so listed as
# ignored, not planned as settings that change nothing
def _enc_buckets(f: Fields) -> Args:
    if not f.get("overlap.grad_reduce"):
        return {}
    return {dest: f[field] for field, dest in (("layout.ddp_bucket_params", "ddp_bucket_size"),
                                                ("layout.ddp_num_buckets", "ddp_num_buckets")) if f.get(field) is not None}


def _dec_buckets(get: Get) -> Fields:
    if not truth(get("overlap_grad_reduce")):
        return {"layout.ddp_bucket_params": None, "layout.ddp_num_buckets": None}
    size, count = get("ddp_bucket_size"), get("ddp_num_buckets")
    return {"layout.ddp_bucket_params": None if size is None else optional_int(size, "ddp_bucket_size"),
            "layout.ddp_num_buckets": None if count is None else optional_int(count, "ddp_num_buckets")}


def _enc_wgrad_fusion(f: Fields) -> Args:
    """--no-gradient-accumulation-fusion when the plan turns the fusion off; Megatron's default (on:
    megatron_flags.tsv, the flag stores False) is left unsaid."""
    return {"gradient_accumulation_fusion": False} if f.get("run.gradient_accumulation_fusion") is False else {}


def _dec_wgrad_fusion(get: Get) -> Fields:
    return {"run.gradient_accumulation_fusion": truth(get("gradient_accumulation_fusion"))}


RUN_ROWS: tuple[Row, ...] = (
    same("layout.tensor_parallel", "tensor_model_parallel_size"),
    Row("sequence parallel", _enc_sp, _dec_sp),
    Row("pipeline", _enc_pipeline, _dec_pipeline),
    Row("uneven stages", _enc_stages, _dec_stages),
    same("layout.context_parallel", "context_parallel_size"),
    same("layout.expert_parallel", "expert_model_parallel_size"),
    same("layout.expert_tensor_parallel", "expert_tensor_parallel_size"),
    Row("sharding", _enc_sharding, _dec_sharding),
    same("batch.micro_batch", "micro_batch_size"),
    same("batch.global_batch", "global_batch_size"),
    Row("recompute", _enc_recompute, _dec_recompute),
    Row("attention", _enc_attention, _dec_attention),
    Row("transformer implementation", _enc_transformer_impl, _dec_transformer_impl),
    Row("expert GEMMs", _enc_grouped_gemm, _dec_grouped_gemm),
    Row("cross-entropy", _enc_loss, _dec_loss),
    Row("precision", _enc_precision, _dec_precision),
    Row("low precision", _enc_low_precision, _dec_low_precision),
    Row("low-precision parameter gather", _enc_param_gather, _dec_param_gather),
    Row("FP8 attention", _enc_fp8_attention, _dec_fp8_attention),
    Row("activation offloading", _enc_offload, _dec_offload),
    Row("first/last layers in BF16", _enc_bf16_ends, _dec_bf16_ends),
    Row("optimizer moments", _enc_moments, _dec_moments),
    Row("optimizer", _enc_optimizer, _dec_optimizer),
    Row("dispatcher", _enc_dispatcher, _dec_dispatcher),
    Row("token dropping", _enc_capacity, _dec_capacity),
    Row("cuda graphs", _enc_cuda_graphs, _dec_cuda_graphs),
    Row("gradient accumulation fusion", _enc_wgrad_fusion, _dec_wgrad_fusion),
    switch("run.deterministic_mode", "deterministic_mode"),
    switch("layout.nccl_ub", "nccl_ub"),
    Row("gradient buckets", _enc_buckets, _dec_buckets),
    switch("overlap.grad_reduce", "overlap_grad_reduce"),
    switch("overlap.param_gather", "overlap_param_gather"),
    switch("overlap.tp_comm", "tp_comm_overlap"),
    switch("overlap.all_to_all", "overlap_moe_expert_parallel_comm"),
    switch("overlap.early_attn_release", "ep_overlap_early_attn_memory_release"),
    switch("overlap.delay_wgrad", "delay_wgrad_compute"),
)


# the router's loss is written last, where `--emit megatron` has written it since freshuser22 (the README's launch)
ROWS = tuple(row for row in MODEL_ROWS if row is not BALANCING_ROW) + RUN_ROWS + (BALANCING_ROW,)


def encode(fields: Fields, rows: tuple[Row, ...] = ROWS) -> Args:
    """Megatron destinations of a run (see module docstring)."""
    out: Args = {}
    for row in rows:
        out.update(row.encode(fields))
    return out


def decode(args: Args, rows: tuple[Row, ...] = ROWS) -> tuple[Fields, set[str]]:
    """The fields of a Megatron run and the destinations the rows read."""
    get, fields = Get(args), Fields()
    for row in rows:
        fields.update(row.decode(get))
    return fields, get.read


# Megatron-LM flag to use for a destination several flags share (the rest are aliases).
_PREFERRED = {"num_experts": "--num-experts"}


# The request parameters a refusal names (`{tensor_parallel}`, BtacalcError) that are one Megatron-LM destination
# each, value for value (the `same` rows above, the pipeline row's size, the sequence row's seq_length and the
# sequence-parallel switch): a plan-level refusal of an imported launch names them as the file does
# (`imported_names`). The others (the micro-batch count, recomputation, what btacalc alone decides) have no one flag.
PARAM_DESTS = {
    "tensor_parallel": "tensor_model_parallel_size", "pipeline_parallel": "pipeline_model_parallel_size",
    "context_parallel": "context_parallel_size", "expert_parallel": "expert_model_parallel_size",
    "expert_tensor_parallel": "expert_tensor_parallel_size", "global_batch": "global_batch_size",
    "seq_len": "seq_length", "sequence_parallel": "sequence_parallel", "ddp_bucket_params": "ddp_bucket_size",
    "ddp_num_buckets": "ddp_num_buckets", "microbatch_group": "microbatch_group_size_per_vp_stage",
}


def megatron_flag(dest: str) -> str:
    """The flag `render_flags` writes for a destination that takes a value (or the switch that sets it True)."""
    flags = flags_by_dest()[dest]
    valued = [f for f in flags if f.arity != "0"]
    if not valued:
        return next(f.flag for f in flags if not f.store_false)
    return next((f.flag for f in valued if f.flag == _PREFERRED.get(dest)), valued[0].flag)


def render_flags(args: Args) -> list[str]:
    """Destinations as Megatron-LM flags, one "--flag [value ...]" string each; a switch at its default is left out."""
    out = []
    for dest, value in args.items():
        flags = flags_by_dest().get(dest)
        if not flags:
            raise KeyError(f"no Megatron-LM flag sets {dest}")  # a bug in ROWS, caught by the tests
        if isinstance(value, bool) and all(f.arity == "0" for f in flags):
            flag = next((f for f in flags if f.store_false != value), None)
            if flag is not None:
                out.append(flag.flag)
            continue
        name = megatron_flag(dest)
        out.append(" ".join([name, *map(_shell, value)]) if isinstance(value, list) else f"{name} {_shell(value)}")
    return out


def _shell(value: Any) -> str:
    """`value` as one word bash passes on unchanged: quoted where it holds a character bash reads otherwise. hostile37:
    only ( ) [ ] * and a blank were quoted, so a pipeline layout without a repeat (`Etttt|ttttL`) was written bare and
    bash ran `|` as a pipe (Megatron-LM got --pipeline-model-parallel-layout Etttt; the rest of the launch was lost)."""
    return shlex.quote(str(value))


# TransformerConfig.fp8_dot_product_attention: set by Megatron-Bridge's mixed-precision config (Megatron-Bridge @
# 067f987d src/megatron/bridge/training/mixed_precision.py L58; perf_recipes/qwen/common.py L55 @ 51885cf1), no flag
FP8_ATTENTION_DEST = "fp8_dot_product_attention"


FP8_ATTENTION_BRIDGE_KEY = "mixed_precision.fp8_dot_product_attention"
