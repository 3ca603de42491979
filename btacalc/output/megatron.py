"""`--emit megatron` and `--emit bridge`: a plan as a complete Megatron-LM launch (environment, torchrun,
pretrain_gpt.py and every flag: architecture, layout, batch, precision, recomputation, dispatcher and
overlaps) or as Megatron-Bridge ConfigContainer overrides.

The plan becomes btacalc's run fields (`run_fields`), the fields Megatron destinations through the table of
btacalc.config.megatron_codec (flag names at MEGATRON_LM_PIN, Bridge keys at BRIDGE_PIN), and every
emitted run is checked against Megatron's own validation rules (btacalc.config.megatron_rules): a rule it
breaks is a bug, reported in the output rather than hidden.
"""

from __future__ import annotations

import math
import re
import shlex

from typing import Any, Optional

from ..catalogue.constants import constants
from ..config.attention_kernels import DEFAULT_ATTENTION_KERNEL
from ..config.megatron_codec import (BRIDGE_PIN, FP8_ATTENTION_BRIDGE_KEY, bridge_attention_environment, encode,
                                     render_flags)
from ..config.megatron_model_rows import MLA_YARN_BRIDGE, mla_yarn_unsaid, model_fields
from ..config.bridge_codec import (BRIDGE_COMM_OVERLAP_TARGET, bridge_stated, bridge_word_key, bridge_written,
                                   to_bridge, whole_mixed_preset)
from ..config.bridge_mixed import SYNCED, bridge_mixed_presets
from ..config.megatron_launch import MEGATRON_LM_PIN
from ..config.megatron_rows import truth
from ..config.megatron_run import LOSS_COMMENTS
from ..config.megatron_rules import LAUNCHER_ONLY, changed_overlaps, describe, violations
from ..config.model import ModelSpec
from ..config.text import exact_number
from ..config.precision import recipe
from ..errors import BtacalcError
from ..model.params import short_table
from ..planning.report import PlanReport

# What `--emit megatron` cannot say in Megatron's flags (the model features Megatron-Core has no flag for).
_UNSAID = (("parallel_block", "GPT-J's parallel attention and MLP block"),
           ("lm_head_bias", "a bias on the LM head"))


# the plan's inputs the codec reads as they are (`run.<name>`, megatron_codec's rows), after the overlaps
RUN_INPUTS = ("precision", "fp8_param_gather", "fp8_attention", "cpu_offload_layers", "bf16_layers_at_start",
              "bf16_layers_at_end", "recompute_layers", "moment_bytes", "precision_aware_optimizer", "optimizer_fp8_recipe", "gradient_accumulation_fusion", "deterministic_mode",
              "attention_kernel", "optimizer", "transformer_engine",
              "expert_grouped_gemm", "capacity_factor", "pad_to_capacity")


def run_fields(r: PlanReport, spec: ModelSpec) -> dict[str, Any]:
    """btacalc's resolved run as the flat fields of megatron_codec (model, layout, batch, run, overlaps), the device's
    CUDA compute capability among them (which attention backend runs btacalc's default kernel)."""
    par, moe = r.parallelism, spec.is_moe
    fields: dict[str, Any] = {
        **model_fields(spec), "run.mtp": "mtp" in {k.name for k in r.layer_kinds},
        "layout.tensor_parallel": par.tensor_parallel, "layout.sequence_parallel": par.sequence_parallel,
        "layout.pipeline_parallel": par.pipeline_parallel, "layout.virtual_pipeline": par.virtual_pipeline,
        "layout.pipeline_split": par.pipeline_split, "layout.context_parallel": par.context_parallel,
        "layout.expert_parallel": par.expert_parallel if moe else None,
        "layout.expert_tensor_parallel": par.expert_tensor_parallel if moe else None,
        "layout.zero_stage": par.zero_stage,
        "layout.deepep": par.deepep and moe, "layout.dispatcher_sms": par.dispatcher_sms if moe else None,
        "layout.allgather_dispatcher": par.allgather_dispatcher and moe,
        "layout.hybridep": par.hybridep and moe,
        "layout.cuda_graph_scope": tuple(par.cuda_graph_scope), "layout.nccl_ub": par.nccl_ub,
        "layout.ddp_bucket_params": par.ddp_bucket_params, "layout.ddp_num_buckets": par.ddp_num_buckets,
        "layout.microbatch_group": par.microbatch_group, "layout.vocab_multiple": par.vocab_multiple,
        "batch.micro_batch": r.plan.global_batch,
        "batch.global_batch": par.data_parallel * par.micro_batches * r.plan.global_batch,
        "run.seq_len": r.inputs.seq_len, "run.recompute": r.inputs.recompute, "run.attention": r.inputs.attention,
        "run.gradient_bytes": r.inputs.gradient_bytes, "run.loss": r.inputs.loss,
        "run.compute_capability": r.hardware.compute_capability,
    }
    for key in ("grad_reduce", "param_gather", "tp_comm", "all_to_all", "p2p", "early_attn_release", "delay_wgrad"):
        fields[f"overlap.{key}"] = bool(par.overlaps.get(key))
    for key in RUN_INPUTS:
        fields[f"run.{key}"] = getattr(r.inputs, key)
    for key in ("first_stage_layers", "last_stage_layers", "pipeline_layout"):
        fields[f"layout.{key}"] = getattr(par, key)
    if fields["overlap.all_to_all"] and not (moe and par.expert_parallel > 1):
        fields["overlap.all_to_all"] = False  # nothing to overlap without EP (btacalc times none)
        fields["overlap.early_attn_release"] = fields["overlap.delay_wgrad"] = False
    return fields


# semantics20: an encoder preset (BERT-large, ESM-2, DiT) was emitted as pretrain_gpt.py, whose layers Megatron-Core
# builds with a causal mask (gpt_layer_specs.py L120, L143, L299, L322 @ d98e8a64: AttnMaskType.causal), as Megatron-
# Bridge's GPT providers do. Megatron-LM's BERT is an example at that pin (pretrain_bert.py moved to
# examples/bert/pretrain_bert.py by 547fb1713e): a pre-LayerNorm BertModel (bert_layer_specs.py L60-76, the norms fused
# into linear_qkv / linear_fc1) with a padding mask and its masked-LM data, not BERT-large's post-LayerNorm layers,
# ESM-2's rotary protein model or DiT. Refused rather than written as another model.
def check_decoder(spec: ModelSpec) -> None:
    if spec.encoder:
        raise BtacalcError(f"{spec.name} is a bidirectional encoder: --emit megatron / bridge writes a GPT model "
                           "(pretrain_gpt.py, Bridge's GPTModelProvider), a causal decoder (Megatron-LM @ d98e8a64 "
                           "gpt_layer_specs.py AttnMaskType.causal); Megatron's BERT example "
                           "(examples/bert/pretrain_bert.py) builds another model")


# What a plan changes so that Megatron-LM's launcher runs it, per LAUNCHER_ONLY rule (btacalc's own options)
LAUNCHER_FIXES = {"fp8-param-gather-sharded": "plan with --zero 1 (Megatron's distributed optimizer) or --zero 3 "
                  "--fsdp (Megatron-FSDP)",
                  "te-cross-entropy": "plan with --loss native_fused (Megatron's compiled fused cross-entropy)",
                  # recipes42: the encoder writes a layout without its VP, so this is the invariant's entry only
                  "virtual-pipeline-one-way": "give the virtual pipeline by --pipeline-layout alone (VP = its chunks "
                  "/ PP)"}


def megatron_run(r: PlanReport, spec: ModelSpec,
                 bridge: bool = False) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Megatron destinations, the environment they need and the notes of a plan (`bridge`: as Megatron-Bridge runs it).
    A rule only Megatron-LM's own argument checks hold (megatron_rules.LAUNCHER_ONLY) refuses `--emit megatron` in one
    line naming its fix (LAUNCHER_FIXES; review35: `--fp8-param-gather` without a sharded optimizer and
    TransformerEngine's fused cross-entropy, both of which Bridge runs)."""
    check_decoder(spec)
    fields = run_fields(r, spec)
    args = encode(fields)
    env = {**_environment(args), **nccl_ub_environment(args, r.parallelism.nvls)}
    if r.parallelism.cuda_max_connections is not None:  # as the plan was timed (--cuda-max-connections)
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = str(r.parallelism.cuda_max_connections)
    notes = _notes(r, spec, args) + _router_dtype_note(r, spec, args, bridge)
    checked = dict(args, world=r.parallelism.devices)
    broken = violations(checked, env, bridge)
    for rule in broken:
        if rule.name in LAUNCHER_ONLY:
            raise BtacalcError(f"--emit megatron: Megatron-LM refuses this run: {describe(rule)}; "
                               f"{LAUNCHER_FIXES[rule.name]}, or --emit bridge, which writes it (Megatron-Bridge does "
                               "not run Megatron-LM's argument checks)")
    notes += [f"MEGATRON WOULD REFUSE THIS: {describe(rule)}" for rule in broken]
    return args, env, notes


# freshuser22: Megatron-LM's MoE README (Megatron-LM @ d98e8a64 megatron/core/transformer/moe/README.md L282) advises
# --moe-router-dtype fp32 at high expert counts; Megatron-Core's default None routes in the run's dtype
# (transformer_config.py L811). btacalc times the router in 16 bits (docs/clock.md "routerdtype": fp32 would add
# about 0.2% of an MoE step), so the launch does not set it, and says so.
ROUTER_DTYPE_NOTE = ("--moe-router-dtype is not set: the router's scores and the weighted sum of the expert outputs "
                     "stay in the run's 16-bit dtype (Megatron-Core's default None, transformer_config.py L811); "
                     "Megatron-LM's MoE README advises fp32 at high expert counts (moe/README.md L282) and "
                     "Megatron-Bridge's DeepSeek, Kimi and OLMoE bridges set it; btacalc times the 16-bit router (fp32 "
                     "adds about 0.2% of an MoE step, docs/clock.md 'routerdtype'): add --moe-router-dtype fp32 if "
                     "your run routes in fp32")
ROUTER_DTYPE_NOTE_BRIDGE = ("model.moe_router_dtype is left to the recipe and its model bridge (Megatron-Bridge's "
                            "DeepSeek, Kimi and OLMoE bridges set fp32, which Megatron-LM's MoE README advises at high "
                            "expert counts, moe/README.md L282); btacalc times the 16-bit router (fp32 adds about 0.2% "
                            "of an MoE step, docs/clock.md 'routerdtype')")


def _router_dtype_note(r: PlanReport, spec: ModelSpec, args: dict[str, Any], bridge: bool) -> list[str]:
    """The router's dtype, which no launch btacalc writes sets, named once for an MoE model (not where the launch read
    with --from-megatron set it: `_not_carried` names that flag)."""
    if not spec.is_moe or "moe_router_dtype" in args:
        return []
    if r.imported is not None and any(row.flag in ("--moe-router-dtype", "model.moe_router_dtype")
                                      for row in r.imported.ignored):
        return []
    return [ROUTER_DTYPE_NOTE_BRIDGE if bridge else ROUTER_DTYPE_NOTE]


def _environment(args: dict[str, Any]) -> dict[str, str]:
    """CUDA_DEVICE_MAX_CONNECTIONS=1 where Megatron asserts it (tensor or context parallelism before Blackwell,
    arguments.py:1477); never with Megatron-FSDP, which asserts it is not 1 (arguments.py:1166)."""
    tp, cp = args.get("tensor_model_parallel_size", 1), args.get("context_parallel_size", 1)
    if (tp > 1 or cp > 1) and not args.get("use_megatron_fsdp") and not args.get("overlap_moe_expert_parallel_comm"):
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


def nccl_ub_environment(args: dict[str, Any], nvls: bool) -> dict[str, str]:
    """nccl_ub's NCCL settings: NCCL_CTA_POLICY=1 (NCCL's SM-efficient path for registered buffers, NVIDIA/nccl @
    5067397c src/enqueue.cc L2152-2173: Megatron-LM sets no CTA policy) and NVLink SHARP as planned, as Megatron-
    Bridge's perf runs set them (@ 55f88437 scripts/performance/perf_plugins.py L263-267; @ 7af9601c
    scripts/performance/utils/executors.py L42: NCCL_NVLS_ENABLE=0 otherwise)."""
    if not args.get("nccl_ub"):
        return {}
    return {"NCCL_CTA_POLICY": "1", "NCCL_NVLS_ENABLE": "1" if nvls else "0"}



def _value_text(value: Any) -> str:
    """A setting as a launch note writes it: a number in %g (4096, 32, 1), anything else as Python spells it."""
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)

MOCK_DATA_NOTE = ("--mock-data and NullTokenizer make the command runnable as is: give your --data-path and tokenizer "
                  "(Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by {m} x TP); "
                  "--train-iters and --lr are placeholders of a short benchmark run (Megatron-LM needs both, training.py "
                  "L2586): give your schedule")
# review25: Megatron-Bridge pads the vocabulary only where the model leaves vocab_size unset (the tokenizer's then);
# the overrides state model.vocab_size, which it keeps as given (training/setup.py _validate_and_set_vocab_size
# L741-781 @ 067f987d; gpt_provider.py L266-271 pads only with should_pad_vocab), and with it a
# model.make_vocab_size_divisible_by (--vocab-multiple) pads nothing there
BRIDGE_VOCAB_NOTE = ("model.vocab_size is kept as given (Megatron-Bridge pads the vocabulary only where the model leaves it "
                     "unset, training/setup.py L741-781); btacalc plans it padded to a multiple of {m} x TP as "
                     "Megatron-LM does, at most {m} x TP - 1 more rows of the output layer and logits")


def vocab_notes(r: PlanReport) -> tuple[str, str]:
    """MOCK_DATA_NOTE and BRIDGE_VOCAB_NOTE at the plan's padding multiple (--vocab-multiple, else Megatron-LM's
    default). review30: both said 128 x TP beside a launch of --make-vocab-size-divisible-by 1187."""
    m = r.parallelism.vocab_multiple or constants().megatron.make_vocab_size_divisible_by
    return MOCK_DATA_NOTE.format(m=m), BRIDGE_VOCAB_NOTE.format(m=m)


def _notes(r: PlanReport, spec: ModelSpec, args: dict[str, Any]) -> list[str]:
    notes = [f"flags: {MEGATRON_LM_PIN} megatron/training/arguments.py; rules: btacalc/config/megatron_rules.py"]
    p = r.plan
    if p.tiles > 1:
        notes.append(f"the plan tiles attention into G = {p.tiles} tiles of b = {p.tile_batch} (BTA); Megatron runs the "
                     f"micro-batch of {p.global_batch} untiled")
    notes.append(vocab_notes(r)[0])
    notes += changed_overlaps(r.inputs.changed_overlaps, r.inputs.defaults)
    # review13: --te-version was planned and dropped from the launch without a word; no Megatron-LM or Bridge
    # argument sets TransformerEngine's release (the container's): since hostile16 `option_lines` names it, in a
    # comment the readers take back
    if short_table(spec, r.inputs.seq_len):
        notes.append(f"--max-position-embeddings raised to --seq-length {r.inputs.seq_len} (arguments.py:1354): the "
                     f"learned position table has {r.inputs.seq_len:,} rows, not the model's "
                     f"{short_table(spec, r.inputs.seq_len):,}, as the plan counts it")
    elif (spec.max_position_embeddings or 0) < r.inputs.seq_len:
        notes.append(f"--max-position-embeddings raised to --seq-length {r.inputs.seq_len} (arguments.py:1354)")
    if args.get("overlap_moe_expert_parallel_comm") and args.get("tensor_model_parallel_size", 1) > 1 \
            and r.parallelism.cuda_max_connections is None:
        notes.append("Megatron warns that the EP all-to-all overlap wants CUDA_DEVICE_MAX_CONNECTIONS > 1 while TP wants "
                     "1 (arguments.py:1466): left unset")
    if args.get("cross_entropy_fusion_impl") == "te":  # Bridge only: the te-cross-entropy rule refuses it for Megatron-LM
        notes.append("TransformerEngine's fused cross-entropy (impl te): Megatron-Bridge's DeepSeek-V3 and Kimi-K2 "
                     "bridges set it; Megatron-LM's arguments refuse it since 168cb15 (arguments.py:1697); btacalc "
                     "models the in-place kernel of TransformerEngine 2.2-2.17")
    notes += architecture_notes(spec, r.inputs.seq_len)
    notes += _model_notes(spec, args)
    if r.inputs.fp8_attention:
        notes.append("FP8 attention: set TransformerConfig.fp8_dot_product_attention = True (TransformerEngine's "
                     "fp8_dpa); Megatron-LM has no flag for it (arguments.py:2332-2334), Megatron-Bridge sets "
                     f"{FP8_ATTENTION_BRIDGE_KEY}")
    return notes


def _model_notes(spec: ModelSpec, args: dict[str, Any]) -> list[str]:
    """What the model has that the launch's flags cannot say or Megatron trains otherwise: parts without a flag,
    biases on some linears only, the top-1 softmax and sigmoid routers, MLA's YaRN fields."""
    notes = [f"no Megatron flag for {what}: leave the model's code to provide it" for key, what in _UNSAID
             if getattr(spec, key)]
    biases = spec.linear_biases()
    if len(set(biases.values())) > 1:
        given = ", ".join(k for k, v in biases.items() if v)
        notes.append(f"Megatron's --add-bias-linear gives every linear layer a bias or none; the model has them on the "
                     f"{given} only: this launch gives {'all' if args.get('add_bias_linear', True) else 'none'}")
    if spec.is_moe and spec.top_k == 1 and spec.router != "sigmoid" and (spec.router_renormalize
                                                                        or spec.router == "topk_softmax"):
        notes.append("top-1 routing: the model's softmax over the one selected logit weights its expert by 1; "
                     "Megatron-Core refuses that router (no gradient reaches it: transformer_config.py L2661-2669), so "
                     "it routes pre-softmax (moe_router_pre_softmax), the expert weighted by its softmax probability "
                     "over all experts, as Switch Transformer does (the same FLOPs and memory)")
    if spec.router == "sigmoid" and spec.router_renormalize is False and spec.top_k > 1:
        notes.append("the router does not renormalise its top-k sigmoid weights: Megatron always does "
                     "(moe_utils.py L929 at d98e8a64), and has no flag against it")
    unsaid = mla_yarn_unsaid(spec.yarn.model_dump() if spec.yarn else None) if spec.mla is not None else {}
    if unsaid:
        # review20: only the MLA_YARN_BRIDGE three are MLATransformerConfig fields; MLA builds YarnRotaryEmbedding
        # without correction_range_round_to_int, which then rounds (yarn_rotary_pos_embedding.py L63 @ d98e8a64)
        fields = [k for k in unsaid if k in MLA_YARN_BRIDGE]
        said = ["Megatron-LM has no flag for these (transformer_config.py L3318-3324), so the launch trains Megatron's"]
        if fields:
            said.append("Megatron-Bridge sets " + ", ".join(f"model.{k}" for k in fields))
        if "truncate" in unsaid:
            said.append("MLA's YaRN always rounds its correction range (yarn_rotary_pos_embedding.py L63), no field "
                        "sets it")
        values = ", ".join(f"{k} {_value_text(model)} (Megatron's {_value_text(megatron)})"
                           for k, (model, megatron) in unsaid.items())
        notes.append(f"the model's multi-latent attention YaRN has {values}: " + "; ".join(said))
    return notes


def architecture_notes(spec: ModelSpec, seq_len: int) -> list[str]:
    """What Megatron-LM @ d98e8a64 trains otherwise than the model's attention (OLMoE's q/k norm; llama4: Llama 4's),
    none of it a change to memory, FLOPs or time at the planned sequence."""
    notes = []
    if spec.qk_norm == "full":
        notes.append("Megatron's --qk-layernorm normalises per head; the model normalises the full q and k")
    if spec.attention_chunk:
        notes.append(f"Megatron-LM has no chunked attention: the model's rotary layers attend within "
                     f"{spec.attention_chunk:,}-token chunks (attention_chunk_size), which at --seq-length {seq_len:,} "
                     "is the full causal attention this launch trains (btacalc refuses a longer sequence)")
    if spec.no_rope_interval and spec.qk_norm == "l2":
        notes.append("Megatron-LM's --qk-l2-norm normalises q and k in every layer, the NoPE layers' too "
                     "(gpt_layer_specs.py L149-152); the model (transformers' Llama4TextAttention) only in its rotary "
                     "layers: an element-wise difference the plan does not count")
    if spec.no_rope_interval:
        notes.append("Llama 4's attention-temperature tuning of the NoPE layers' queries (transformers' "
                     "attn_temperature_tuning) has no Megatron-LM flag; it scales no query before position floor_scale "
                     "- 1 (8,191 in the published configs)")
    high = spec.numerics.rope_scaling_high_freq_factor
    if high is not None and high != 4 and spec.numerics.rope_scaling_factor:
        notes.append(f"the model's Llama 3 RoPE scaling has high_freq_factor {high:g}; Megatron-Core fixes 4 "
                     "(rotary_pos_embedding.py L92-98) and no Megatron-LM flag or Bridge field sets it: the launch "
                     "trains 4, another scaling of the frequencies between the two bands (the same FLOPs and memory)")
    return notes


# llama4: Megatron-Bridge @ 067f987df registers no bridge for Llama 4's architectures (its Llama 4 providers were
# removed in 217de1a2e; src/megatron/bridge/models/llama/llama4_utils.py keeps a chunked-attention Llama4SelfAttention and layer
# spec that no provider uses)
LLAMA4_BRIDGE_NOTE = ("Megatron-Bridge registers no bridge for Llama4ForConditionalGeneration or Llama4ForCausalLM "
                      "(AutoBridge refuses their config.json; models/llama/llama4_utils.py's chunked-attention layer "
                      "spec is used by no provider): these overrides build GPTModelProvider with the fields below")


def domain_line(r: PlanReport, emit: str, read_back: Optional[int]) -> list[str]:
    """hostile25: the NVLink domain the plan was timed with, as a `# btacalc option:` line where the file read back
    would give another (`read_back`: the domain `--from-megatron` derives from the launch's torchrun, `--from-bridge`
    the profile's; None: not known). `--gpus-per-node 36` on a GB200 (torchrun starts a tray's 4), 12 H100s as 3 nodes
    of 4, and any --gpus-per-node in Bridge overrides (no launcher) were read back in another domain, another step
    time. Both in one domain (the devices fit in either) is the same plan."""
    par = r.parallelism
    if read_back is None or min(read_back, par.devices) == min(par.devices_per_node, par.devices):
        return []
    why = ("torchrun's --nproc_per_node starts one node's processes, not the domain" if emit == "megatron"
           else "the overrides hold no launcher")
    return [f"# btacalc option: --gpus-per-node {par.devices_per_node} (the NVLink domain the plan's collectives are "
            f"timed in: {why})"]


def option_lines(r: PlanReport, emit: str) -> list[str]:
    """The plan options no Megatron-LM flag (and, but FP8 attention, no Bridge key) sets, as comment lines
    `# btacalc option: --flag [value] (what it means)` that `--from-megatron` / `--from-bridge` read back
    (config.megatron_run.OPTION_COMMENTS). hostile16: --routing-imbalance and --no-rht-cast-fusion were planned and
    dropped from the launch without a word."""
    i = r.inputs
    out = []
    if i.routing_imbalance != 1.0:
        out.append(f"--routing-imbalance {i.routing_imbalance!r} (the busiest expert's routed tokens over the mean, "
                   "which the plan's dispatch and expert GEMMs are timed at: how the router balances, not a launch "
                   "setting)")
    if not i.rht_cast_fusion and recipe(i.precision).rht_cast_fusion_since_te:
        out.append("--no-rht-cast-fusion (NVFP4's rowwise and Hadamard-transformed columnwise casts as two kernels, "
                   "as TransformerEngine 2.8-2.13 run them: the container's TransformerEngine decides, no launch "
                   "argument)")
    if i.te_version and "te_version" not in i.defaults and recipe(i.precision).te_release_decides:
        out.append(f"--te-version {i.te_version} (the container's TransformerEngine release, which no launch argument "
                   "sets)")
    if i.attention_kernel != DEFAULT_ATTENTION_KERNEL:
        out.append(f"--attention-kernel {i.attention_kernel} (the fused attention kernel whose rate the plan's "
                   "attention core is timed at, btacalc/data/attention_kernels.toml: the framework's kernel, not a "
                   "launch setting)")
    if i.accounting != "ideal":
        out.append(f"--accounting {i.accounting} (which activations the plan counts as saved: what a PyTorch layer "
                   "keeps, not a launch setting)")
    # hostile19: --causal and a loss no launch flag sets were dropped the same way (the launch read back counted the
    # full s² scores and Megatron's vocab-parallel cross-entropy)
    if i.causal:
        out.append("--causal (only the causal half of the s² attention matmuls counted: how btacalc counts FLOPs and "
                   "MFU, not a launch setting)")
    if i.loss in LOSS_COMMENTS:
        out.append(f"--loss {i.loss} (the cross-entropy whose logits the plan keeps: a btacalc loss model no "
                   "Megatron-LM flag selects)")
    if emit == "megatron" and i.fp8_attention:
        out.append("--fp8-attention (TransformerConfig.fp8_dot_product_attention, which no Megatron-LM flag sets)")
    return [f"# btacalc option: {line}" for line in out]


def torchrun_sizes(devices: int, host: int) -> tuple[int, int, list[str]]:
    """--nproc_per_node and --nnodes of a launch of `devices` processes (torchrun's world size is their product)
    on hosts of `host` GPUs: one host per node where the hosts divide the devices, else the largest per-node
    count that does (review8: 128 GB200s were launched as 72 processes on one node, the NVL72 rack taken for a
    host), said in a note."""
    per_node = math.gcd(devices, min(host, devices))
    if per_node == min(host, devices):
        return per_node, devices // per_node, []
    return per_node, devices // per_node, [
        f"torchrun: {devices} processes as {devices // per_node} nodes of {per_node} (hosts of {host} GPUs do "
        f"not divide {devices} devices); give --nproc_per_node your nodes' GPUs, with nproc_per_node x nnodes = "
        f"{devices}"]


def check_megatron_numerics(spec: ModelSpec) -> None:
    """hostile24: a linear RoPE scaling factor that is no integer (Megatron-Bridge's seq_len_interpolation_factor and
    Megatron-Core's RotaryEmbedding take a float) has no Megatron-LM flag: --rotary-seq-len-interpolation-factor is
    type=int (arguments.py L2422 @ d98e8a64), and --use-rope-scaling is Llama 3's per-frequency scaling, not a
    division of the positions. The launch would train another model, so it is not written."""
    factor = spec.numerics.rope_interpolation_factor
    if factor is not None and factor != int(factor):
        raise BtacalcError(f"--emit megatron: {spec.name}'s linear RoPE scaling factor {exact_number(factor)} is no "
                           "integer, which Megatron-LM's --rotary-seq-len-interpolation-factor (type=int, "
                           "arguments.py L2422 @ d98e8a64) cannot take and no other Megatron-LM flag states; "
                           "--emit bridge writes it (model.seq_len_interpolation_factor is a float)")


def megatron_arguments(r: PlanReport, spec: ModelSpec, profile_domain: Optional[int] = None) -> str:
    """The launch: comments, environment, torchrun and pretrain_gpt.py with one flag per line. `profile_domain`: the
    profile's NVLink domain, which a launch of one host's GPUs per node is read back in (launch_domain)."""
    check_megatron_numerics(spec)
    args, env, notes = megatron_run(r, spec)
    par = r.parallelism
    # torchrun starts one node's processes per host: a GB200 tray's 4 GPUs, not the NVL72 rack (ncclsm's
    # system.devices_per_host), else the NVLink domain
    host = min(par.devices_per_node, r.hardware.devices_per_host or par.devices_per_node)
    per_node, nodes, uneven = torchrun_sizes(par.devices, host)
    head = [f"# btacalc plan: {r.model.name} on {par.devices} x {r.hardware.name}"
            + ("" if r.plan.fits else " (DOES NOT FIT)")] + \
        [f"# {n}" for n in notes + [n for n in (_numerics(spec, _given_aux(r)),) if n]
         + _not_carried(r, {line.split()[0] for line in render_flags(args)}) + uneven] + \
        option_lines(r, "megatron") + domain_line(r, "megatron", profile_domain if per_node == r.hardware.devices_per_host
                                                  else per_node)
    launcher = f"torchrun --nproc_per_node {per_node} --nnodes {nodes} pretrain_gpt.py"
    lines = [*(f"export {k}={v}" for k, v in env.items()), " \\\n    ".join([launcher, *render_flags(args)])]
    return "\n".join(head + lines) + "\n"


# semantics22: the numerics a launch leaves at Megatron-LM's defaults where the model's source gives none
# (ModelSpec.numerics None: a trimmed config.json, a paper), by field: (the flag and Megatron's default, the source key)
NUMERICS_DEFAULTS = {"rope_theta": ("--rotary-base 10000", "rope_theta"),
                     "norm_eps": ("--norm-epsilon 1e-05", "rms_norm_eps / layer_norm_epsilon"),
                     "init_std": ("--init-method-std 0.02", "initializer_range")}


def _given_aux(r: PlanReport) -> bool:
    """The launch or Bridge file the plan read gave the router's aux-loss coefficient (which _not_carried names)."""
    return r.imported is not None and any(row.flag in ("--moe-aux-loss-coeff", "model.moe_aux_loss_coeff")
                                          for row in r.imported.ignored)


def _not_carried(r: PlanReport, written: set[str]) -> list[str]:
    """freshuser21: a launch read with --from-megatron and emitted again lost what btacalc does not model (Megatron-LM's
    Qwen3-30B-A3B settings: --moe-aux-loss-coeff 1e-3, --moe-router-dtype fp32, the tokenizer) without a word, and
    said the aux loss "stays at Megatron-LM's default"; this line names them."""
    if r.imported is None or not r.imported.ignored:
        return []
    flags = list(dict.fromkeys(row.flag for row in r.imported.ignored if row.flag not in written))
    if not flags:
        return []
    return [f"{r.imported.source} also sets {' '.join(flags)}: btacalc does not model them (its plan says why) and "
            "this file does not carry them: add back those your run needs"]


def _numerics(spec: ModelSpec, aux_given: bool = False) -> Optional[str]:
    """freshuser17: a Qwen3 / Llama 3 / Mixtral launch trained at Megatron-LM's RoPE base 10000 (theirs 1e6, 5e5, 1e6)
    without a word; semantics22: the launch states the model's numerics (megatron_model_rows NUMERIC_DESTS), and this line
    names only the ones the model's source does not give, field by field, and the router's loss (a training setting)."""
    n = spec.numerics
    unknown = [(flag, key) for field, (flag, key) in NUMERICS_DEFAULTS.items() if getattr(n, field) is None
               and not (field == "rope_theta" and spec.position_embedding != "rope")]
    said = []
    if unknown:
        said.append(f"the source of {spec.name} gives no {', '.join(key for _, key in unknown)}, so the launch trains "
                    f"Megatron-LM's default{'s' if len(unknown) > 1 else ''} ({', '.join(flag for flag, _ in unknown)}): give "
                    f"your model's value{'s' if len(unknown) > 1 else ''} with {'those flags' if len(unknown) > 1 else 'that flag'}")
    if n.rope_theta is not None and n.rope_theta != int(n.rope_theta) and spec.position_embedding == "rope":
        said.append(f"the model's RoPE base {exact_number(n.rope_theta)} is no integer, which Megatron-LM's --rotary-base (type=int, "
                    "arguments.py L2418) cannot take: the launch trains 10000 (Megatron-Bridge: model.rotary_base)")
    if spec.is_moe and not aux_given and spec.aux_loss_coeff is None and spec.load_balancing != "none":
        said.append("the router's load-balancing loss stays at Megatron-LM's default (--moe-aux-loss-coeff 0): give "
                    "your model's coefficient with that flag")
    return "; ".join(said) or None


def bridge_overrides(r: PlanReport, spec: ModelSpec, profile_domain: Optional[int] = None) -> str:
    """The same run as Megatron-Bridge ConfigContainer overrides, one Hydra `key=value` per line, each a word a
    POSIX shell passes unchanged to Bridge's scripts (which read them with Hydra's override grammar; `--from-bridge`
    reads them back the same way, btacalc.config.bridge_hydra)."""
    args, env, notes = megatron_run(r, spec, bridge=True)
    if args.get("ddp_num_buckets") and truth(args.get("use_distributed_optimizer")) and r.parallelism.data_parallel > 1:
        # bridgeparse: CommOverlapConfig.setup sets ddp.bucket_size (128 Mi parameters, or comm_overlap.bucket_size)
        # under the distributed optimizer with DP > 1 (Megatron-Bridge @ 067f987d training/comm_overlap.py L569-583,
        # L636-643), and Megatron-Core refuses num_buckets beside a bucket size (distributed_data_parallel_config.py
        # L275-276 @ d98e8a64)
        raise BtacalcError("--ddp-num-buckets with --emit bridge: Megatron-Bridge's CommOverlapConfig sets "
                           "ddp.bucket_size under the distributed optimizer with DP > 1 (comm_overlap.py L569-583), "
                           "which Megatron-Core refuses beside num_buckets: give --ddp-bucket-size")
    mock_data, bridge_vocab = vocab_notes(r)  # the launch's note on the vocabulary, and the overrides' in its place
    if spec.hf_model_type in ("llama4", "llama4_text"):
        notes.append(LLAMA4_BRIDGE_NOTE)
    notes += _bridge_position_rows(spec, r.inputs.seq_len)
    written = bridge_written(bridge_stated(args, to_bridge(args)), bool(r.inputs.fp8_attention))
    notes += _whole_mixed_note(written)
    backend_env = bridge_attention_environment(args)
    if backend_env:
        env = {**env, **backend_env}
        notes.append(f"model.attention_backend is an AttnBackend enum: a Hydra override sets the string "
                     f"{args['attention_backend']!r}, which Megatron-Core's _set_attention_backend matches against the "
                     "enum's members only (language_module.py L129-145 @ d98e8a64; Bridge's omegaconf_utils.py "
                     "_apply_overrides sets it as given), so it sets no NVTE_* switch and TE would "
                     "choose the kernel itself: the environment below selects it as Megatron-LM's --attention-backend "
                     "would")
    head = [f"# btacalc plan: {r.model.name} on {r.parallelism.devices} x {r.hardware.name}",
            f"# keys: {BRIDGE_PIN} (src/megatron/bridge/training/config.py, comm_overlap.py, models/gpt_provider.py)",
            *(f"# {bridge_vocab if n == mock_data else n}" for n in notes[1:] + _not_carried(r, set(written))),
            *(f"# environment: {k}={v}" for k, v in env.items()),
            *option_lines(r, "bridge"), *domain_line(r, "bridge", profile_domain),
            f"# btacalc option: --devices {r.parallelism.devices} (the devices the plan is for: the overrides hold no "
            "launcher)"]
    body = _bridge_body(written)
    if spec.mla is not None and spec.yarn is not None:
        body += [f"model.{key}={getattr(spec.yarn, key)}" for key in MLA_YARN_BRIDGE]
    if r.inputs.fp8_attention and FP8_ATTENTION_BRIDGE_KEY not in written:
        body.append(f"{FP8_ATTENTION_BRIDGE_KEY}=True")
    return "\n".join(head + body) + "\n"


def _whole_mixed_note(written: dict[str, Any]) -> list[str]:
    """bridgemp: a mixed_precision section written whole says which preset it is and what differs (Hydra sets no
    field below a preset's name, so the section replaces the name: bridge_codec.bridge_written)."""
    preset = whole_mixed_preset(written)
    if preset is None:
        return []
    name, differ = preset[0], {k: v for k, v in preset[1].items() if k not in SYNCED}
    data = bridge_mixed_presets()
    return [f"mixed_precision is written whole: Megatron-Bridge's {name} ({data.path} L{data.presets[name].line}) "
            f"with {', '.join(f'{k}={_hydra_value(v)}' for k, v in differ.items())}, every field given, which Bridge "
            "builds as a MixedPrecisionConfig (training/utils/omegaconf_utils.py L478-486); Hydra cannot set a field "
            f"below the name mixed_precision={name}"]


def _bridge_position_rows(spec: ModelSpec, seq: int) -> list[str]:
    """bridgeparse: Megatron-Bridge's GPTModelProvider sizes a learned position table by model.seq_length
    (max_sequence_length=self.seq_length, gpt_provider.py L298 @ 067f987d; it has no max_position_embeddings), where
    Megatron-LM's launch keeps the model's longer table: the file read back planned another parameter count."""
    rows = spec.max_position_embeddings or 0
    if spec.position_embedding != "learned" or rows <= seq:
        return []
    return [f"model.seq_length sizes the learned position table in Megatron-Bridge (GPTModelProvider passes "
            f"max_sequence_length=seq_length, gpt_provider.py L298): {seq:,} rows, not the model's {rows:,} that "
            f"the plan counts ({(rows - seq) * spec.hidden_size:,} fewer parameters)"]


def _bridge_body(stated: dict[str, Any]) -> list[str]:
    """One shell word per override; the comm_overlap section with `++` and, before its first field, its class, so
    that the words apply over a recipe without a CommOverlapConfig too (bridge_codec.BRIDGE_COMM_OVERLAP_TARGET); a
    mixed_precision section given whole (bridge_codec.bridge_written) with `++` too."""
    body: list[str] = []
    for key, value in stated.items():
        if key.startswith("comm_overlap.") and not any(w.startswith("++comm_overlap.") for w in body):
            body.append(shlex.quote(f"++{BRIDGE_COMM_OVERLAP_TARGET[0]}={BRIDGE_COMM_OVERLAP_TARGET[1]}"))
        body.append(shlex.quote(f"{bridge_word_key(key)}={_hydra_value(value)}"))
    return body


# A string Hydra's grammar reads unquoted as that string, not as another type: an ID and some of the other characters
# its unquoted primitive allows (facebookresearch/hydra v1.3.2 hydra/grammar/OverrideLexer.g4 L62-63)
_HYDRA_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_./+-]*")
_HYDRA_WORDS = {"true", "false", "null", "nan", "inf"}


def _hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar: a list as [a,b], a string quoted where the grammar would not read it
    back as the same string (a pipeline layout's `|(*`, a blank, a word such as `true`)."""
    if isinstance(value, (tuple, list)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, str) and not (_HYDRA_BARE.fullmatch(value) and value.lower() not in _HYDRA_WORDS):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)
