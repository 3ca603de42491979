"""Decoded Megatron fields (megatron_codec's rows over a launch or a Bridge recipe) -> the `ModelSpec` and the
`ExecutionRequest` btacalc plans: the model named after the preset of its shape (a missing vocabulary, the router's
computation and the numerics a launch leaves out are that preset's, each said in a note), the run's sizes guarded
against values no layout can hold. Split out of megatron_run.py (twenty-sixth session); the rules are unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ..errors import BtacalcError
from .execution import BatchLimits, ExecutionRequest, OverlapRequest
from .megatron_rows import Fields
from .model import ModelSpec, every_nth, validate_model
from .pipeline import StageSplit
from .megatron_launch import list_expression
from .text import cut, exact_number


def model_from_fields(f: Fields, source: str, notes: list[str], name: Optional[str] = None) -> ModelSpec:
    """The ModelSpec of decoded Megatron fields; a missing vocabulary comes from the preset of the same shape."""
    moe = bool(f["model.num_experts"])
    pattern = f.get("model.moe_pattern")
    dense = [i for i, x in enumerate(pattern) if not x] if pattern is not None else []
    first = next((i for i, x in enumerate(pattern) if x), 0) if pattern is not None else 0
    data: dict[str, Any] = {
        "name": f"megatron:{Path(source).name}", "source": f"{source} (Megatron-LM arguments)",
        "hidden_size": f["model.hidden_size"], "num_layers": f["model.num_layers"],
        "num_heads": f["model.num_heads"], "num_kv_heads": f["model.num_kv_heads"], "head_dim": f["model.head_dim"],
        "vocab_size": f["model.vocab_size"], "ffn_size": f["model.moe_ffn"] if moe else f["model.dense_ffn"],
        "num_experts": f["model.num_experts"], "top_k": f["model.top_k"] if moe else 0,
        "norm": f["model.norm"], "mlp": f["model.mlp"], "mlp_activation": f.get("model.mlp_activation", "gelu"),
        "norm_zero_centered": f.get("model.norm_zero_centered", False),
        "glu_activation": f.get("model.glu_activation", "silu"), "position_embedding": f["model.position_embedding"],
        "qk_norm": "l2" if f.get("model.qk_norm_l2") else "head" if f["model.qk_norm_head"] else "none",
        "no_rope_interval": f.get("model.no_rope_interval", 0), "attention_dropout": f["model.attention_dropout"],
        "rotary_interleaved": f.get("model.rotary_interleaved", False),
        "hidden_dropout": f["model.hidden_dropout"],
        "qkv_bias": f["model.qkv_bias"], "linear_bias": f["model.linear_bias"], "mlp_bias": f["model.mlp_bias"],
        "tied_embeddings": f["model.tied_embeddings"], "softmax_fp32": f["model.softmax_fp32"],
        "max_position_embeddings": f["model.max_position_embeddings"], "mla": f["model.mla"],
        "sliding_window": f["model.sliding_window"],
        "full_attention_interval": _full_interval(f.get("model.window_pattern")),
        "attention_sinks": f["model.attention_sinks"], "mtp_layers": f["model.mtp_layers"], "yarn": f.get("model.yarn"),
        "numerics": {**f["model.numerics"], "source": f"{source} (Megatron-LM arguments; a flag not given: Megatron's "
                     "default)"},
    }
    if moe:
        data.update(router=f["model.router"], router_renormalize=f.get("model.router_renormalize", True),
                    router_bias=f["model.router_bias"], expert_bias=f["model.expert_bias"],
                    shared_expert_size=f["model.shared_expert_size"], shared_expert_gate=f["model.shared_expert_gate"],
                    router_groups=f.get("model.router_groups", 1), router_group_topk=f.get("model.router_group_topk", 1),
                    router_scale=f.get("model.router_scale", 1.0), router_score_bias=f.get("model.router_score_bias", False),
                    router_probs_on_input=f.get("model.router_probs_on_input", False),
                    aux_loss_coeff=f.get("model.aux_loss_coeff"),
                    load_balancing=f.get("model.load_balancing", "aux_loss"),
                    first_dense_layers=first, dense_layer_indices=tuple(i for i in dense if i >= first))
        if dense:
            data["dense_ffn_size"] = f["model.dense_ffn"]
    preset = _from_preset(data, notes, source)
    _implied_numerics(data["numerics"], f.get("model.numerics_implied", ()), preset)
    if name is not None:
        data["name"] = name
    return validate_model(data, origin=source)


def _implied_numerics(numerics: dict[str, Any], implied: tuple[str, ...], preset: Optional[ModelSpec]) -> None:
    """hostile29: a numerics flag the launch leaves out (megatron_model_rows IMPLIED_NUMERICS) trains Megatron-LM's default,
    which the model holds as unset (None, the default implied: `--emit megatron` leaves the flag out again and says
    so) unless the preset of the run's shape states a value (then the default stays, as another model's, and
    `_preset_numerics` has said so). A round trip of a launch without --init-method-std gained it explicitly."""
    for field in implied:
        if preset is None or getattr(preset.numerics, field) is None:
            numerics[field] = None


def _full_interval(items: Optional[list[int]]) -> int:
    if items is None:
        return 0
    n = every_nth([i for i, x in enumerate(items) if not x], len(items))  # hostile39: one pass, not every n to L
    if n >= 2:
        return n
    # hostile39: the list as Megatron's run-length expression, cut (the expanded list of a 10,000-layer launch made a
    # 30,000-character error line)
    raise BtacalcError(f"--window-attn-skip-freq {cut(list_expression(items))}: btacalc models one full-attention "
                       "layer every N layers")


_SHAPE = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size", "num_experts", "top_k")


def _from_preset(data: dict[str, Any], notes: list[str], source: str) -> Optional[ModelSpec]:
    """Name the model after the preset of its shape; a missing vocabulary is that preset's, and so is the router's
    computation where the launch's weights are the preset's: Megatron's default router (top k of the logits, a
    softmax over them) trains GPT-OSS's top-k-then-softmax weights as well as a renormalised softmax's, which
    `_dec_router` reads (review18: gpt-oss-20b emitted and read back planned the softmax router's tensors, 13 MB more
    stored activations per GPU at EP 8). Returns that preset (None: no preset has the shape)."""
    from .presets import load_preset, preset_names

    for name in preset_names():
        preset = load_preset(name)
        if all(getattr(preset, k) == data[k] for k in _SHAPE) and data["vocab_size"] in (None, preset.vocab_size):
            data["name"] = f"{name} (from {Path(source).name})"
            if preset.router == "topk_softmax" and data.get("router") == "softmax" and data.get("router_renormalize"):
                data.update(router=preset.router, router_renormalize=preset.router_renormalize)
            _preset_numerics(data, preset, notes)
            if data["vocab_size"] is None:
                data["vocab_size"] = preset.vocab_size
                notes.append(f"no --vocab-size: the vocabulary {preset.vocab_size:,} of preset {name}, whose shape this "
                             "is (the tokenizer file is not read)")
            return preset
    if data["vocab_size"] is None:
        raise BtacalcError(f"{source}: no --vocab-size and no preset of this shape: add --vocab-size V "
                           "(the tokenizer's vocabulary)")
    return None


# the numerics as a read note names them: the launch's flag, the Bridge key and the model's config key
NUMERICS_NAMES = {"rope_theta": ("RoPE base", "--rotary-base / model.rotary_base", "rope_theta"),
                  "norm_eps": ("norm epsilon", "--norm-epsilon / model.layernorm_epsilon", "norm epsilon"),
                  "init_std": ("initial std", "--init-method-std / model.init_method_std", "initializer_range"),
                  "rotary_percent": ("rotary share of each head", "--rotary-percent / model.rotary_percent",
                                     "rotary share"),
                  "rope_scaling_factor": ("Llama 3 RoPE scaling factor (1: none)",
                                          "--use-rope-scaling --rope-scaling-factor / model.rope_scaling_factor",
                                          "rope_scaling factor"),
                  "rope_interpolation_factor": ("linear RoPE scaling factor (none: 1)",
                                                "--rotary-seq-len-interpolation-factor / "
                                                "model.seq_len_interpolation_factor", "rope_scaling linear factor")}


def _preset_numerics(data: dict[str, Any], preset: ModelSpec, notes: list[str]) -> None:
    """semantics22: the numerics of a run read back against the preset of its shape. A value the run trains that is not
    the preset's is said in a note (the run trains another model than the preset's: e.g. a Qwen3 launch without
    --rotary-base trains Megatron's 10000, not the config.json's 1e6); one the run leaves unknown (a Bridge key left to
    the Hugging Face config) is the preset's, as its vocabulary is."""
    numerics, theirs = data["numerics"], preset.numerics
    # numerics23: a run that states its own RoPE scaling (YaRN, linear or Llama 3) takes no other kind from the preset
    # of its shape (a linear-scaled Llama 3.2 1B read from Bridge overrides took the preset's llama3 factor 32 too)
    scaled = data.get("yarn") is not None or numerics.get("rope_interpolation_factor") is not None \
        or (numerics.get("rope_scaling_factor") or 1) != 1
    for field, (what, flags, config_key) in NUMERICS_NAMES.items():
        mine, model = numerics.get(field), getattr(theirs, field)
        if field in ("rope_theta", "rotary_percent", "rope_interpolation_factor") and data["position_embedding"] != "rope":
            continue
        if mine is None and scaled and field in ("rope_scaling_factor", "rope_interpolation_factor"):
            continue
        if mine is None:
            numerics[field] = model
        elif model is not None and mine != model:
            notes.append(f"the run trains the {what} {exact_number(mine)} ({flags}), not {preset.name}'s {config_key} "
                         f"{exact_number(model)} "
                         f"({theirs.source or preset.source}): another model than the preset's")
    for field, flag in (("mlp_activation", "--squared-relu / model.activation_func"),
                        ("norm_zero_centered", "--apply-layernorm-1p / model.layernorm_zero_centered_gamma"),
                        ("rotary_interleaved", "--rotary-interleaved / model.rotary_interleaved")):
        if data.get(field, False) != getattr(preset, field) and data["mlp"] == preset.mlp:
            notes.append(f"the run trains {field} {data.get(field)} ({flag}), not {preset.name}'s "
                         f"{getattr(preset, field)} ({preset.source}): another model than the preset's")


def request_from_fields(f: Fields, spec: ModelSpec, devices: int, per_node: Optional[int],
                        notes: list[str]) -> ExecutionRequest:
    """The ExecutionRequest of decoded Megatron fields (every size explicit: Megatron's defaults, not btacalc's)."""
    pp, vp = f["layout.pipeline_parallel"], f["layout.virtual_pipeline"]
    micro, global_batch = f.get("batch.micro_batch"), f.get("batch.global_batch")
    return ExecutionRequest(
        seq_len=f["run.seq_len"], recompute=f["run.recompute"], attention=f["run.attention"],
        devices=devices, devices_per_node=per_node, expert_parallel=f["layout.expert_parallel"],
        zero_stage=f["layout.zero_stage"], fsdp=f["layout.fsdp"],
        overlap_all_to_all=bool(f.get("overlap.all_to_all")), deepep=bool(f.get("layout.deepep")),
        allgather_dispatcher=bool(f.get("layout.allgather_dispatcher")), hybridep=bool(f.get("layout.hybridep")),
        dispatcher_sms=f.get("layout.dispatcher_sms"), nccl_ub=bool(f.get("layout.nccl_ub")),
        ddp_bucket_params=f.get("layout.ddp_bucket_params"), ddp_num_buckets=f.get("layout.ddp_num_buckets"),
        microbatch_group=f.get("layout.microbatch_group"), vocab_multiple=f.get("layout.vocab_multiple"),
        cuda_graph_scope=tuple(f.get("layout.cuda_graph_scope") or ()),
        limits=BatchLimits(global_batch=global_batch, micro_batch=micro or 1, tiles=1),
        tensor_parallel=f["layout.tensor_parallel"], sequence_parallel=f["layout.sequence_parallel"],
        pipeline_parallel=pp, virtual_pipeline=vp, context_parallel=f["layout.context_parallel"],
        expert_tensor_parallel=_expert_tensor_parallel(f, spec, devices, notes),
        gradient_bytes=f["run.gradient_bytes"],
        overlaps=OverlapRequest(grad_reduce=f["overlap.grad_reduce"], param_gather=f["overlap.param_gather"],
                                tp_comm=f["overlap.tp_comm"], p2p=f["overlap.p2p"],
                                early_attn_release=bool(f.get("overlap.early_attn_release")),
                                delay_wgrad=bool(f.get("overlap.delay_wgrad"))),
        multi_token_prediction=bool(f.get("run.mtp")) if spec.mtp_layers else None, loss=f.get("run.loss"),
        **_guarded_request_fields(f, notes))


_ETP_NAMES = "--expert-tensor-parallel-size / model.expert_tensor_parallel_size"


def _expert_tensor_parallel(f: Fields, spec: ModelSpec, devices: int, notes: list[str]) -> Optional[int]:
    """The launch's ETP. A dense model has no expert layer to split, and Megatron-LM accepts the flag there: it builds
    the expert rank grid anyway, which needs the world size to be a multiple of ETP x EP x PP (Megatron-LM @ d98e8a64
    parallel_state.py L871-884), and uses it in no layer (memci: the CI's dense etp4 tests were refused as 'need an MoE
    model'). So a dense launch's ETP is that check and a note, then the plan's default."""
    etp = f.get("layout.expert_tensor_parallel")
    if spec.is_moe or etp is None or etp == 1:
        return etp
    grid = etp * f["layout.expert_parallel"] * f["layout.pipeline_parallel"]
    if devices % grid:
        raise BtacalcError(f"expert tensor parallelism {etp} ({_ETP_NAMES}): Megatron-Core's expert rank grid "
                           f"(ETP x EP x PP = {grid}) "
                           f"must divide the world size {devices} (parallel_state.py L881-884), even for a dense model")
    notes.append(f"expert tensor parallelism {etp} ({_ETP_NAMES}): the model is dense, so no layer uses the expert grid "
                 "Megatron-Core "
                 "builds with it (parallel_state.py L871-884): no effect on memory or step time")
    return None


def _guarded_request_fields(f: Fields, notes: list[str]) -> dict[str, Any]:
    """The precision and the pipeline split as the launch gives them (first/last stage layers, a layout
    string, the account-for flags: btacalc.config.pipeline.StageSplit, placed exactly as Megatron places them)."""
    split = _account_for(f, notes)
    stage_split = StageSplit(first_stage_layers=f.get("layout.first_stage_layers"),
                             last_stage_layers=f.get("layout.last_stage_layers"),
                             pipeline_layout=f.get("layout.pipeline_layout"),
                             account_for_embedding=split in ("embedding_loss", "embedding"),
                             account_for_loss=split in ("embedding_loss", "loss"))
    out: dict[str, Any] = {"stage_split": stage_split}
    if f.get("run.precision") is not None:
        out["precision"] = f["run.precision"]
    out["fp8_param_gather"] = bool(f.get("run.fp8_param_gather"))
    out["fp8_attention"] = bool(f.get("run.fp8_attention"))
    out["cpu_offload_layers"] = f.get("run.cpu_offload_layers", 0)
    out["bf16_layers_at_start"] = f.get("run.bf16_layers_at_start", 0)
    out["bf16_layers_at_end"] = f.get("run.bf16_layers_at_end", 0)
    out["recompute_layers"] = f.get("run.recompute_layers", 0)
    out["moment_bytes"] = f.get("run.moment_bytes", 4)
    out["precision_aware_optimizer"] = bool(f.get("run.precision_aware_optimizer"))
    out["optimizer_fp8_recipe"] = f.get("run.optimizer_fp8_recipe", "delayed")
    out["optimizer"] = f.get("run.optimizer", "adam")
    out["gradient_accumulation_fusion"] = f.get("run.gradient_accumulation_fusion", True)
    out["transformer_engine"] = f.get("run.transformer_engine", True)
    out["expert_grouped_gemm"] = f.get("run.expert_grouped_gemm", True)
    out["capacity_factor"] = f.get("run.capacity_factor")
    out["pad_to_capacity"] = bool(f.get("run.pad_to_capacity"))
    # --deterministic-mode: TE's deterministic attention backward and NCCL_ALGO=Ring, as a run's recipe sets them
    out["deterministic_attention"] = out["nccl_ring_only"] = bool(f.get("run.deterministic_mode"))
    return out


def _account_for(f: Fields, notes: list[str]) -> str:
    """The launch's account-for flags (`layout.pipeline_split`). At PP 1 Megatron-LM reads them only to check that the
    layers (plus one for each flag) divide by the pipeline size (Megatron-LM @ d98e8a64 megatron/training/arguments.py
    L990-997), which 1 always does, and places no layer differently: the launch runs, so they are dropped with a
    note, where a plan asked for them at PP 1 is refused as an option with no effect (Layout._validate_pipeline).
    Twenty-sixth session: Megatron-LM's own Qwen3-235B GB200 recipe (examples/moe_recipes, PP 1) was refused."""
    split = f.get("layout.pipeline_split", "even")
    if split != "even" and f["layout.pipeline_parallel"] == 1:
        notes.append("--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split at pipeline "
                     "size 1: no effect (Megatron-LM arguments.py L990-997 counts them only toward the layers' "
                     "divisibility by the pipeline size); dropped")
        return "even"
    return split
