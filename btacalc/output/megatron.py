"""`--emit megatron`: the Megatron-LM command-line arguments and Megatron-Bridge config overrides of a
plan's layout, batch, recomputation, sharding, precision and overlaps, for pasting.

Flag names are Megatron-LM's (megatron/training/arguments.py and the TransformerConfig /
ModelParallelConfig / DistributedDataParallelConfig fields it exposes, @ d98e8a64); Bridge keys are the
ConfigContainer fields its recipes set (model.*, train.*, ddp.*, optimizer.*, comm_overlap.*).
"""

from __future__ import annotations

from ..config.precision import recipe
from ..planning.report import ParallelInfo, PlanReport
from ..vocabulary import SELECTIVE_MODULES


def megatron_arguments(r: PlanReport) -> str:
    """Megatron-LM flags and Megatron-Bridge overrides of the plan, with a comment line per caveat."""
    lm, bridge, notes = _layout(r)
    _batch(r, lm, bridge, notes)
    _recompute(r.inputs.recompute, lm, bridge)
    _sharding(r, lm, bridge)
    _overlaps(r, lm, bridge)
    head = [f"# btacalc plan: {r.model.name} on {r.parallelism.devices} x {r.hardware.name}"
            + ("" if r.plan.fits else " (DOES NOT FIT)")] + [f"# {n}" for n in notes]
    return "\n".join(head + ["# Megatron-LM (pretrain_gpt.py):", " \\\n  ".join(_precision(r) + lm),
                             "# Megatron-Bridge (ConfigContainer overrides):", "\n".join(bridge)])


def _precision(r: PlanReport) -> list[str]:
    """The 16-bit dtype flag, then the low-precision recipe's flags as Megatron-LM spells them
    (btacalc/data/precision.toml: --fp8-format/--fp8-recipe, --fp4-format/--fp4-recipe) and its parameter
    gather flag when the plan keeps the parameters in FP8/FP4."""
    rec = recipe(r.inputs.precision)
    flags = (["--bf16"] if rec.low else []) + list(rec.megatron)
    return flags + ([rec.param_gather_flag] if r.inputs.fp8_param_gather else [])


def _layout(r: PlanReport) -> tuple[list[str], list[str], list[str]]:
    par, notes = r.parallelism, list[str]()
    lm = [f"--tensor-model-parallel-size {par.tensor_parallel}", f"--pipeline-model-parallel-size {par.pipeline_parallel}",
          f"--context-parallel-size {par.context_parallel}"]
    bridge = [f"model.tensor_model_parallel_size={par.tensor_parallel}",
              f"model.pipeline_model_parallel_size={par.pipeline_parallel}",
              f"model.context_parallel_size={par.context_parallel}",
              f"model.sequence_parallel={par.sequence_parallel}"]
    if par.sequence_parallel:
        lm.append("--sequence-parallel")
    if par.virtual_pipeline > 1 and par.pipeline_layout is None:  # a layout sets VP (Megatron refuses both)
        lm.append(f"--num-virtual-stages-per-pipeline-rank {par.virtual_pipeline}")
    bridge.append(f"model.virtual_pipeline_model_parallel_size={par.virtual_pipeline if par.virtual_pipeline > 1 else None}")
    _split(par, lm, bridge)
    if r.model.num_experts:
        lm += [f"--expert-model-parallel-size {par.expert_parallel}",
               f"--expert-tensor-parallel-size {par.expert_tensor_parallel}"]
        bridge += [f"model.expert_model_parallel_size={par.expert_parallel}",
                   f"model.expert_tensor_parallel_size={par.expert_tensor_parallel}"]
    kernel = "flash" if r.inputs.attention == "flash" else "unfused"
    lm.append(f"--attention-backend {kernel}")
    bridge.append(f"model.attention_backend={kernel}")
    return lm, bridge, notes


def _split(par: ParallelInfo, lm: list[str], bridge: list[str]) -> None:
    """The pipeline split's own flags (btacalc.config.pipeline: Megatron's names)."""
    if par.pipeline_split in ("embedding_loss", "embedding"):
        lm.append("--account-for-embedding-in-pipeline-split")
        bridge.append("model.account_for_embedding_in_pipeline_split=True")
    if par.pipeline_split in ("embedding_loss", "loss"):
        lm.append("--account-for-loss-in-pipeline-split")
        bridge.append("model.account_for_loss_in_pipeline_split=True")
    for value, flag, key in ((par.first_stage_layers, "--decoder-first-pipeline-num-layers", "num_layers_in_first_pipeline_stage"),
                             (par.last_stage_layers, "--decoder-last-pipeline-num-layers", "num_layers_in_last_pipeline_stage")):
        if value is not None:
            lm.append(f"{flag} {value}")
            bridge.append(f"model.{key}={value}")
    if par.pipeline_layout is not None:
        lm.append(f"--pipeline-model-parallel-layout '{par.pipeline_layout}'")
        bridge.append(f"model.pipeline_model_parallel_layout='{par.pipeline_layout}'")


def _batch(r: PlanReport, lm: list[str], bridge: list[str], notes: list[str]) -> None:
    p, par = r.plan, r.parallelism
    micro = p.global_batch
    total = par.data_parallel * par.micro_batches * micro
    lm += [f"--seq-length {r.inputs.seq_len}", f"--micro-batch-size {micro}", f"--global-batch-size {total}"]
    bridge += [f"model.seq_length={r.inputs.seq_len}", f"train.micro_batch_size={micro}",
               f"train.global_batch_size={total}"]
    if p.tiles > 1:
        notes.append(f"the plan tiles attention into G = {p.tiles} tiles of b = {p.tile_batch} (BTA); Megatron runs the "
                     f"micro-batch of {micro} untiled")


def _recompute(policy: str, lm: list[str], bridge: list[str]) -> None:
    if policy == "none":
        bridge.append("model.recompute_granularity=None")
        return
    if policy == "full":
        lm += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
        bridge += ["model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"]
        return
    modules = list(SELECTIVE_MODULES) if policy == "selective" else policy.split(",")
    lm += ["--recompute-granularity selective", "--recompute-modules " + " ".join(modules)]
    bridge += ["model.recompute_granularity=selective", f"model.recompute_modules={modules}"]


def _sharding(r: PlanReport, lm: list[str], bridge: list[str]) -> None:
    zero = r.parallelism.zero_stage
    if zero == 1:
        lm.append("--use-distributed-optimizer")
        bridge += ["ddp.use_distributed_optimizer=True", "optimizer.use_distributed_optimizer=True"]
    elif zero >= 2:
        strategy = "optim_grads" if zero == 2 else "optim_grads_params"
        lm += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {strategy}"]
        bridge += ["ddp.use_megatron_fsdp=True", f"ddp.data_parallel_sharding_strategy={strategy}"]
    fp32 = r.inputs.gradient_bytes == 4
    if not fp32:
        lm.append("--grad-reduce-in-bf16")
    bridge.append(f"ddp.grad_reduce_in_fp32={fp32}")


def _overlaps(r: PlanReport, lm: list[str], bridge: list[str]) -> None:
    o, par = r.parallelism.overlaps, r.parallelism
    flags = (("grad_reduce", "--overlap-grad-reduce", "ddp.overlap_grad_reduce"),
             ("param_gather", "--overlap-param-gather", "ddp.overlap_param_gather"),
             ("tp_comm", "--tp-comm-overlap", "comm_overlap.tp_comm_overlap"),
             ("all_to_all", "--overlap-moe-expert-parallel-comm", "comm_overlap.overlap_moe_expert_parallel_comm"))
    for key, flag, field in flags:
        if o.get(key) and (key != "all_to_all" or par.expert_parallel > 1):
            lm.append(flag)
            bridge.append(f"{field}=True")
    if o.get("all_to_all") and par.expert_parallel > 1:
        lm.append("--moe-token-dispatcher-type alltoall")
        bridge.append("model.moe_token_dispatcher_type=alltoall")
    if par.virtual_pipeline > 1 and not o.get("p2p", True):
        lm.append("--no-overlap-p2p-communication")
