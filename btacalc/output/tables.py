"""Rich renderings of library results. Only the CLI prints; these functions build renderables.

Units: bytes shown in GB/MB (GB = 1e9 bytes, decimal throughout), FLOP in TFLOP/PFLOP (1e12/1e15).
"""

from __future__ import annotations

from typing import Iterable

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.markup import escape
from rich.text import Text

from ..planning.plan import SENSITIVITY_STEP
from ..planning.report import DeviceMemory, ExpectedError, PhaseRow, PlanReport
from .fit import Fit, fit, fit_all, label_grid
from .wafer_tables import sensitivity_table, wafer_renderable

# A plan loses more than 5% of its tokens/s when the busiest expert-parallel rank gets 25% more tokens:
# the output calls it sensitive to routing imbalance.
SENSITIVE_BELOW = 0.95

_SI = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


def si(value: float, unit: str, digits: int = 3) -> str:
    """Decimal SI formatting: 2.49e9 bytes -> '2.49 GB'."""
    v = float(value)
    for scale, prefix in _SI:
        if abs(v) >= scale:
            return f"{v / scale:.{digits}g} {prefix}{unit}"
    return f"{v:.{digits}g} {unit}"


def gb(value: float) -> str:
    return f"{value / 1e9:,.2f} GB"


def params(value: float) -> str:
    return f"{value / 1e9:,.3f} B"


def plan_renderable(r: PlanReport) -> Group:
    parts: list[RenderableType] = [_header(r), _plan_table(r), _memory_table(r)]
    if len(r.memory_stages) > 1:
        parts.append(_stages_table(r))
    if r.parallelism.devices > 1 and r.state_sharding:
        parts.append(_sharding_table(r))
    per = f"per {_basis(r)}"
    if r.layer_kinds:
        parts += [_phase_table(k.phases, r, f"One {k.name} layer ({k.count} of {sum(x.count for x in r.layer_kinds)}), "
                               f"{per}") for k in r.layer_kinds]
    else:
        parts.append(_phase_table(r.phases, r, f"One decoder layer, {per}"))
    parts += [_phase_table(r.outside_layers, r, f"Outside the layers, {per}"), _flops_table(r)]
    matmuls = [p for p in [*r.phases, *r.outside_layers] if p.gemms]
    if matmuls:
        most = f" (of the most common kind, {max(r.layer_kinds, key=lambda k: k.count).name})" if r.layer_kinds else ""
        parts.append(_gemm_table(matmuls, r, f"Matmuls per device: one decoder layer{most} and outside the layers, {per}"))
    if r.throughput is not None:
        parts.append(_throughput_table(r))
        if r.throughput.expected_error is not None:
            parts.append(Text(expected_error_text(r.throughput.expected_error)))
    if r.wafer is not None:
        parts.append(Panel(wafer_renderable(r.wafer), title="Wafer systems (Cerebras)", border_style="blue"))
    if r.sensitivity:
        parts.append(sensitivity_table(r))
    if r.imported is not None:
        parts.append(_imported_panel(r))
    if r.suggestions:
        parts.append(Panel("\n".join(f"• {s}" for s in r.suggestions), title="What would fit", border_style="yellow"))
    return Group(*fit_all(parts))


def _throughput_table(r: PlanReport) -> Table:
    th = r.throughput
    t = Table(title="Throughput (roofline per phase; see README for the time model)", title_justify="left")
    assert th is not None
    for c in ("", "tokens/s", "step time", "vs dense", "MFU", "tokens/s/kW"):
        if c != "vs dense" or r.model.num_experts > 0:
            t.add_column(c, justify="right" if c else "left")
    vs_dense = [f"{th.relative_to_dense:.2f}" if th.relative_to_dense is not None else "-"] \
        if r.model.num_experts > 0 else []
    t.add_row(f"plan G={r.plan.tiles}, b={r.plan.tile_batch}", f"{th.tokens_per_s:,.0f}", f"{th.step_time_s:.3f} s",
              *vs_dense, f"{100 * th.mfu:.1f}%", f"{th.tokens_per_s_per_kw:,.0f}")
    moe = r.model.num_experts > 0  # G = 1 and the dense equivalent compare expert layers; a dense model has none
    if moe and th.tokens_per_s_g1 is not None:
        t.add_row(f"G=1, b={th.tile_batch_g1}", f"{th.tokens_per_s_g1:,.0f}", f"{th.step_time_s_g1:.3f} s",
                  f"{th.relative_to_dense_g1:.2f}" if th.relative_to_dense_g1 is not None else "-", "")
    if moe and th.dense_tokens_per_s is not None:
        m = f", M={th.dense_micro_batches}" if (th.dense_micro_batches or 1) > 1 else ""
        t.add_row(f"dense equivalent, G·b={th.dense_global_batch}{m}", f"{th.dense_tokens_per_s:,.0f}", "", "1.00", "")
    top = sorted(th.phase_share.items(), key=lambda kv: -kv[1])[:4]
    streamed = r.hardware.memory_model == "weight_streaming"  # the weight stream exists only there
    stream = (f"streaming {'overlapped' if th.overlap_streaming else 'not overlapped'}, stream-bound "
              f"{100 * th.stream_bound_share:.0f}% of the step; " if streamed else "")
    t.caption = (f"compute efficiency {th.compute_efficiency:.3f}, {stream}{_mfu_basis(r)}largest shares: "
                 + ", ".join(f"{k} {100 * v:.0f}%" for k, v in top))
    if th.communication_s:
        t.caption += "; communication before overlap: " + ", ".join(f"{k} {v:.3f} s" for k, v in th.communication_s.items()
                                                                     if v)
    if r.parallelism.pipeline_parallel > 1:
        t.caption += f"; pipeline stage {th.critical_stage} sets the pace"
    if th.routing_sensitivity is not None:
        sensitive = th.routing_sensitivity < SENSITIVE_BELOW
        t.caption += (f"; routing imbalance x{SENSITIVITY_STEP:g} keeps {100 * th.routing_sensitivity:.0f}% of tokens/s"
                      + (" — SENSITIVE to routing imbalance (--routing-imbalance)" if sensitive else ""))
    return t


def _mfu_basis(r: PlanReport) -> str:
    """Under a low-precision recipe, what MFU is over (freshuser27: an NVFP4 plan's 46.5% did not say it was of the
    16-bit peak, not of the FP4 peak its GEMMs run at, README "Throughput"); '' in 16 bits."""
    if not r.inputs.te_recipe:
        return ""
    return (f"MFU over the 16-bit peak {r.hardware.peak_flops_per_s / 1e15:g} PFLOP/s (chip.peak_flops_per_s), "
            f"under {r.inputs.precision} too; ")


def expected_error_text(x: ExpectedError, subject: str = "this plan's") -> str:
    """The expected error of `subject`'s tokens/s in one clause (planning/expected_error.py): which runs, what
    "held out" means (the run's model family left out of the fit), and that the error is the tokens/s' (predicted /
    measured - 1)."""
    wider = f"; narrower groups hold fewer than {x.min_runs} runs" if x.narrower else ""
    more = "more" if x.mean_error > 0 else "fewer"
    kept = (f" ({x.not_held_out} of them with the shipped factors: without their family too few fit runs are left)"
            if x.not_held_out else "")
    return (f"Expected error of {subject} tokens/s (predicted / measured - 1) on the {x.runs} measured runs most "
            f"like it ({x.basis}{wider}), each predicted with factors fitted without its model family{kept}: "
            f"typical (median) "
            f"|error| {100 * x.median_abs_error:.0f}%, mean {100 * x.mean_abs_error:.0f}%, max "
            f"{100 * x.max_abs_error:.0f}%; on average btacalc predicted {100 * abs(x.mean_error):.0f}% {more} tokens/s "
            f"than measured (the runs: btacalc validate --cross-validate)")


def sweep_renderable(result) -> Fit:
    t = Table(title=f"Sweep: {escape(result.model)} on {escape(result.hardware)}" + (" (k·f fixed)" if result.fixed_active else ""),
              title_justify="left")
    names = list(result.points[0].params) if result.points else []
    for n in names:
        t.add_column(n, justify="right")
    for c in ("G", "b", "M", "T_e", "tokens/s", "vs dense", "G=1 b", "G=1 vs dense", "BTA gain"):
        t.add_column(c, justify="right")
    for p in result.points:
        cells = [str(p.params[n]) for n in names]
        th = p.throughput
        if th is None:
            t.add_row(*cells, *(["-"] * 8), p.error or "does not fit")
            continue
        gain = th.tokens_per_s / th.tokens_per_s_g1 if th.tokens_per_s_g1 else None
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        t.add_row(*cells, str(p.plan.tiles), str(p.plan.tile_batch), str(p.plan.micro_batches),
                  f"{p.plan.tokens_per_expert:,.0f}",
                  f"{th.tokens_per_s:,.0f}", fmt(th.relative_to_dense), str(th.tile_batch_g1 or "-"),
                  fmt(th.relative_to_dense_g1), fmt(gain) + "x" if gain else "-")
    t.caption = ("G: tiles, b: sequences per tile, M: micro-batches; T_e: tokens per expert; tokens/s: all devices; "
                 "vs dense: over the dense model with the same active parameters; G=1 b, G=1 vs dense: the fastest "
                 "untiled plan; BTA gain: tokens/s at G over G = 1")
    expected = {p.throughput.expected_error.basis: p.throughput.expected_error for p in result.points
                if p.throughput is not None and p.throughput.expected_error is not None}
    if len(expected) == 1:  # every point is of one kind (device, dense or MoE, precision): one line says it
        t.caption += ".\n" + expected_error_text(next(iter(expected.values())), "each point's")
    elif expected:  # e.g. --vary precision: the points' groups differ, each is in --json
        t.caption += (f".\nExpected error of tokens/s: the points are of {len(expected)} kinds (" + "; ".join(expected)
                      + "); each point's is in --json (throughput.expected_error)")
    return fit(t)


def _header(r: PlanReport) -> Table:
    t = label_grid()
    m, hw, i = r.model, r.hardware, r.inputs
    arch = (f"h={m.hidden_size} L={m.num_layers} a={m.num_heads} a_kv={m.num_kv_heads} d_h={m.head_dim} "
            f"V={m.vocab_size} f={m.ffn_size}" + (f" E={m.num_experts} k={m.top_k}" if m.num_experts else " (dense)"))
    t.add_row("model", f"{escape(m.name)}  [dim]{arch}[/dim]")
    t.add_row("parameters", f"total {params(m.params_total)}, active {params(m.params_active)}, "
                            f"non-embedding {params(m.params_non_embedding)}")
    t.add_row("hardware", f"{escape(hw.display_name)} ({escape(hw.name)}): {i.memory_model.replace('_', ' ')}, "
                          f"capacity {gb(hw.memory_capacity_bytes)}, usable {gb(hw.usable_memory_bytes)}")
    par = r.parallelism
    if par.devices > 1 and r.wafer is not None:
        t.add_row("parallelism", f"{par.devices} wafer systems in data parallel, {par.micro_batches} micro-batch(es) each")
    elif par.devices > 1:
        t.add_row("parallelism", _layout_text(r))
    marks = lambda key: " [dim](default)[/dim]" if key in i.defaults else ""  # noqa: E731
    t.add_row("inputs", f"seq {i.seq_len}{marks('seq_len')}, recompute {i.recompute}{marks('recompute')}, "
                        f"attention {i.attention}{marks('attention')}"
                        + f", loss {i.loss}{marks('loss')}, "
                        f"{'causal' if i.causal else 'full s²'} attention FLOPs{marks('causal')}, "
                        f"{i.accounting} accounting{marks('accounting')}, {i.optimizer}{marks('optimizer')}, "
                        f"precision {i.precision}{marks('precision')}, "
                        f"{i.bytes_per_element}-byte elements"
                        + (", multi-token prediction off" + marks("multi_token_prediction")
                           if "multi_token_prediction" in i.defaults else "")
                        + (", multi-token prediction on" if any(k.name == "mtp" for k in r.layer_kinds) else ""))
    options = i.run_options()
    if options:
        t.add_row("run options", escape("; ".join(f"{what} ({flag})" for what, flag in options)))
    return t


def _dispatcher_text(r: PlanReport) -> str:
    """The MoE token dispatcher the all-to-all rows time (freshuser26: the header named none, and btacalc's default,
    alltoall, is not Megatron-LM's, allgather, which a launch without --moe-token-dispatcher-type runs)."""
    par = r.parallelism
    if par.allgather_dispatcher:
        return "allgather dispatcher"
    if par.deepep:
        return f"flex dispatcher ({'HybridEP' if par.hybridep else 'DeepEP'})"
    return "alltoall dispatcher" + ("" if r.imported else " [dim](default)[/dim]")


def _layout_text(r: PlanReport) -> str:
    par = r.parallelism
    # freshuser22: the defaults taken here were marked nowhere (EP = gcd(devices, E) can span many NVLink domains)
    marks = lambda key: " [dim](default)[/dim]" if key in r.inputs.defaults else ""  # noqa: E731
    sizes = (f"TP {par.tensor_parallel}{' (SP)' if par.sequence_parallel else ''}, PP {par.pipeline_parallel}"
             + (f" x VP {par.virtual_pipeline}" if par.virtual_pipeline > 1 else "") + f", CP {par.context_parallel}, "
             f"DP {par.data_parallel}" + (f", EP {par.expert_parallel}{marks('expert_parallel')}, ETP "
                                          f"{par.expert_tensor_parallel}{marks('expert_tensor_parallel')}, EDP "
                                          f"{par.expert_data_parallel}, {_dispatcher_text(r)}"
                                          if r.model.num_experts else ""))
    shard = (f"FSDP{ {'torch': ' (PyTorch FSDP1)', 'fsdp2': ' (PyTorch FSDP2)'}.get(par.fsdp_impl, '')}" if par.fsdp
             else f"ZeRO-{par.zero_stage}{marks('zero_stage')}") + (f", nccl_ub: {par.nccl_ub_path}"
                                                                   if par.nccl_ub_path else "")
    on = [k for k, v in par.overlaps.items() if v]
    split = "" if par.pipeline_split == "even" else (
        f"; {par.pipeline_split} split, decoder layers per stage {par.stage_layers}"
        + (f" (layout {par.pipeline_layout})" if par.pipeline_layout else "")
        + (" [dim](default)[/dim]" if "pipeline_split" in r.inputs.defaults else ""))
    changed = [r.inputs.defaults[k] for k in r.inputs.changed_overlaps]  # megatron_rules' refusals and switch-offs
    return (f"{par.devices} devices ({par.devices_per_node} per NVLink domain): {sizes}{split}; {shard}; "
            f"M = {par.micro_batches} micro-batches{marks('global_batch')}; overlapped: {', '.join(on) or 'none'}"
            + (f" (userbuffers table: {par.tp_overlap_table})" if par.tp_overlap_table else "")
            + "".join(f"; {c}" for c in changed))


def _stages_table(r: PlanReport) -> Table:
    t = Table(title="Memory per device by pipeline stage (GB)", title_justify="left")
    keys = [k for k in _COMPONENT_NOTES if any(st.components.get(k) for st in r.memory_stages)]
    for c in ("stage", "layers", "in flight", *keys, "total"):
        t.add_column(c, justify="right")
    worst = max(r.memory_stages, key=lambda st: st.total).stage
    for st in r.memory_stages:
        style = "bold" if st.stage == worst else ""
        t.add_row(str(st.stage), str(st.layers), str(st.in_flight), *(f"{st.components.get(k, 0) / 1e9:.2f}" for k in keys),
                  f"{st.total / 1e9:.2f}", style=style)
    t.caption = ("in flight: model-chunk passes whose activations the stage holds at its peak (1F1B: PP - stage; "
                 "interleaved: 2(PP - stage - 1) + (VP - 1)PP + 1); the bold stage is the one the plan must fit")
    return t


def _plan_table(r: PlanReport) -> Panel:
    p = r.plan
    in_memory = r.memory_bytes["total"] <= r.memory_bytes["usable_capacity"]
    status = (Text("fits", style="bold green") if in_memory and p.fits else
              Text("fits in memory; the plan does not (see why)", style="bold yellow") if in_memory else
              Text("DOES NOT FIT", style="bold red"))
    t = label_grid(fold_values=True)
    t.add_row("tiles G", str(p.tiles))
    t.add_row("tile batch b", str(p.tile_batch))
    par = r.parallelism
    if par.devices > 1 or p.micro_batches > 1:
        t.add_row("micro-batch G·b", f"{p.global_batch} per data-parallel rank  ({p.tokens_per_step:,} tokens)")
    else:
        t.add_row("global batch G·b", f"{p.global_batch}  ({p.tokens_per_step:,} tokens per step)")
    shards = par.expert_tensor_parallel / (par.tensor_parallel * par.context_parallel)
    te = ("G·b·s·k/E" if par.expert_parallel == 1 else "EP·G·b·s·k/E" if shards == 1 else "EP·ETP/(TP·CP)·G·b·s·k/E")
    moe = bool(r.model.num_experts)  # a dense model has no experts: no T_e (issue 25: rows that do not apply)
    if moe:
        t.add_row("tokens per expert", f"{p.tokens_per_expert:,.0f}  (T_e = {te}, uniform routing)")
    if p.devices > 1 or p.micro_batches > 1:
        t.add_row("step batch N", f"DP {par.data_parallel} x M {p.micro_batches} x {p.global_batch} = {p.step_batch} "
                                  f"sequences, {p.cluster_tokens_per_step:,} tokens per optimizer step")
    t.add_row("objective", p.objective)
    t.add_row("binding constraint", f"{p.binding_constraint}; tile limited by {p.tile_constraint}")
    t.add_row("why", p.explanation)
    if p.alternative is not None:
        a = p.alternative
        t.add_row(f"{a.objective} plan", f"G = {a.tiles}, b = {a.tile_batch}" + (f", M = {a.micro_batches}" if a.micro_batches > 1 else "")
                  + f": {a.tokens_per_s:,.0f} tokens/s" + (f", T_e {a.tokens_per_expert:,.0f}" if moe else ""))
    t.add_row("memory", Text.assemble(status, f"  {gb(r.memory_bytes['total'])} of {gb(r.memory_bytes['usable_capacity'])} usable"))
    return Panel(t, title="Plan", border_style="green" if p.fits else "red")


_COMPONENT_NOTES = {
    "stored_activations": "kept for backward, all layers, G·b sequences",
    "recompute_buffer": "one layer's recomputed activations during its backward",
    "working_set": "largest phase's transient tensors",
    "weight_buffers": "streamed weights buffered on-chip",
    "gradient_buffers": "outgoing gradients buffered on-chip",
    "weights": "16-bit weights",
    "gradients": "gradients ({gradient_note})",
    "optimizer_state": "{optimizer_note}",
    "gathered_weights": "ZeRO-3 / FSDP: gathered layer weights",
    "low_precision_weights": "FP8/FP4 weight copies TransformerEngine caches (rowwise and columnwise), less the 16-bit "
                             "copy --fp8-param-gather drops",
    "global_buffer": "Megatron-Core's persistent global buffer: local attention scores' input or the "
                     "sequence-parallel all-gather of its own linears",
}


def _gradient_note(r: PlanReport) -> str:
    """The gradients' label from the run's own bytes per gradient element (--grad-bytes)."""
    n = r.inputs.gradient_bytes
    return {4: "fp32 main gradients: 4 B/param", 2: "16-bit gradients: 2 B/param"}.get(n, f"{n} B/param")


def _optimizer_note(r: PlanReport) -> str:
    """The optimizer state's label from the run's optimizer and moment bytes (--optimizer, --optimizer-moments)."""
    if r.inputs.optimizer == "sgd":
        return "fp32 master weights + SGD momentum (fp32)"
    master = "int16 master remainders" if r.inputs.master_weights == "remainders" else "fp32 master weights"
    return f"{master} + Adam moments ({'bf16' if r.inputs.moment_bytes == 2 else 'fp32'})"


def _memory_table(r: PlanReport) -> Table:
    mb = r.memory_bytes
    where = "SRAM" if r.hardware.memory_model == "weight_streaming" else "device memory"
    per = ", per device" if r.parallelism.devices > 1 else ""
    t = Table(title=f"Memory on {where}{per} (GB = 1e9 bytes)", title_justify="left")
    t.add_column("component")
    t.add_column("bytes", justify="right")
    t.add_column("of usable", justify="right")
    t.add_column("what", overflow="fold")
    share = lambda v: f"{100 * v / mb['usable_capacity']:.1f}%" if mb["usable_capacity"] else "-"  # noqa: E731
    for key, note in _COMPONENT_NOTES.items():
        if key in mb:
            extra = f" (peak: {_largest_phase(r)})" if key == "working_set" else ""
            note = note.replace("{gradient_note}", _gradient_note(r)).replace("{optimizer_note}", _optimizer_note(r))
            t.add_row(key, gb(mb[key]), share(mb[key]), note + extra)
    t.add_row("[bold]total[/bold]", f"[bold]{gb(mb['total'])}[/bold]", f"[bold]{share(mb['total'])}[/bold]",
              f"capacity {gb(mb['capacity'])}, usable {gb(mb['usable_capacity'])}")
    if r.device_memory is not None:
        t.caption = _device_caption(r.device_memory)
    if r.offchip_bytes:
        off = r.offchip_bytes
        state = off["weights"] + off["gradients"] + off["optimizer"]
        t.caption = (f"off-wafer (MemoryX): weights {gb(off['weights'])}, gradients {gb(off['gradients'])}, "
                     f"optimizer {gb(off['optimizer'])} = {gb(state)} of {off['capacity'] / 1e9:,.0f} GB")
        if r.wafer is not None and r.wafer.offloaded_activation_bytes:
            w = r.wafer
            ckpt = w.offloaded_activation_bytes - w.offloaded_recompute_bytes
            t.caption += (f"; activations offloaded to the activation servers: {gb(w.offloaded_activation_bytes)} "
                          f"per micro-batch: checkpoints {gb(ckpt)}, out in forward and back in backward, and "
                          f"recomputed activations {gb(w.offloaded_recompute_bytes)}, out and back within their "
                          "layer's backward (Cerebras R2.0+ dynamic memory offload, an estimate); stored_activations "
                          "and recompute_buffer are the parts kept in SRAM")
    return t


def _device_caption(d: DeviceMemory) -> str:
    """A GPU's total as PyTorch and the driver count it (config/hardware.py Reserves)."""
    held = " + ".join(f"{w.count} {w.name.replace('_', ' ')} x {w.bytes_each / 2**20:,.3f} MiB"
                      for w in d.library_workspaces)
    return (f"allocated {gb(d.allocated_bytes)} (total + {gb(d.library_workspace_bytes)} library workspaces: {held}; "
            f"torch "
            f"max_memory_allocated), reserved {gb(d.reserved_bytes)} (x {1 + d.allocator_fragmentation_fraction:g} "
            f"allocator fragmentation), + CUDA context {gb(d.cuda_context_bytes)} + communicator buffers "
            f"{gb(d.communicator_buffers_bytes)} = {gb(d.device_bytes)} of the {gb(d.capacity_bytes)} "
            + ("the driver reports" if d.capacity_kind != "estimate" else
               "the driver is estimated to report (memory.offchip_memory_bytes is an estimate: btacalc hw show)"))


def _sharding_table(r: PlanReport) -> Table:
    t = Table(title="Training state per device: bytes/param x ceil(params / divisor)", title_justify="left")
    for c in ("component", "part", "params (shard)", "bytes/param", "divisor", "per device"):
        t.add_column(c, justify="left" if c in ("component", "part") else "right")
    for s in r.state_sharding:
        t.add_row(s.component, s.part.replace("_", "-"), f"{s.params:,}", str(s.bytes_per_param), str(s.divisor), gb(s.bytes_per_device))
    par = r.parallelism
    experts = (f", experts over EP {par.expert_parallel} x ETP {par.expert_tensor_parallel}"
               if r.model.num_experts else "")
    t.caption = f"params: this device's shard (TP {par.tensor_parallel}, its pipeline stage{experts}); divisor: "
    if not any(s.divisor > 1 for s in r.state_sharding):  # freshuser21: ZeRO-0 read "shards over DP·CP = 16 ranks"
        t.caption += f"ZeRO-{par.zero_stage} shards nothing: each data-parallel rank holds its whole shard"
    elif not r.model.num_experts:
        t.caption += f"ZeRO-{par.zero_stage} shards over DP·CP = {par.data_parallel * par.context_parallel} ranks"
    else:
        t.caption += (f"ZeRO-{par.zero_stage} shards over DP·CP = {par.data_parallel * par.context_parallel} "
                      f"(non-expert) or EDP = {par.expert_data_parallel} (expert) ranks")
    return t


def _largest_phase(r: PlanReport) -> str:
    rows = r.phases + r.outside_layers
    return max(rows, key=lambda x: x.transient_bytes).name


def _kept_out(rows: Iterable[PhaseRow], r: PlanReport) -> bool:
    """A layer's rows kept out of the low-precision recipe (--bf16-layers-at-start/-end): it has linear-layer phases,
    none in the recipe's precision."""
    from ..catalogue.terms import phase_by_name

    rows = list(rows)
    return any(phase_by_name(p.name).low_precision for p in rows) and all(p.precision != r.inputs.precision
                                                                          for p in rows)


def _basis(r: PlanReport) -> str:
    """What the phase and FLOPs tables count: one micro-batch (G·b sequences of one data-parallel rank, one
    tensor/context-parallel rank's share); that is the step only when the step runs one micro-batch."""
    return "step" if r.plan.micro_batches == 1 else "micro-batch"


def _basis_text(r: PlanReport) -> str:
    """The phase and FLOPs tables' basis in words, when it is not simply the step of one device."""
    par, parts = r.parallelism, []
    if r.plan.micro_batches > 1:
        parts.append(f"per micro-batch: G·b = {r.plan.global_batch} sequences of one data-parallel rank, "
                     f"M = {r.plan.micro_batches} of them per step")
    shards = [f"{name} {n}" for name, n in (("TP", par.tensor_parallel), ("CP", par.context_parallel)) if n > 1]
    if shards:
        parts.append(f"one device's share under {' x '.join(shards)}")
    return "; ".join(parts)


def _phase_table(rows: Iterable[PhaseRow], r: PlanReport, title: str) -> Table:
    rows = list(rows)
    t = Table(title=f"{title} (G={r.plan.tiles}, b={r.plan.tile_batch})", title_justify="left")
    for col, just in (("phase", "left"), ("batch", "left"), ("fwd FLOP", "right"), ("bwd FLOP", "right"),
                      ("stored", "right"), ("transient", "right"), ("bytes moved", "right"), ("FLOP/byte", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]  # "left"/"right" literals from the table spec
    low = r.inputs.te_recipe != ""  # a low-precision recipe: each phase's dtype and its cast kernels
    if low:
        t.add_column("precision")
        t.add_column("cast", justify="right")
    for p in rows:
        cells = [p.name, "b" if p.batch == "tile" else "G·b", si(p.flops_forward, "FLOP") if p.flops_forward else "-",
                 si(p.flops_backward, "FLOP") if p.flops_backward else "-", si(p.stored_activation_bytes, "B"),
                 si(p.transient_bytes, "B"), si(p.bytes_moved, "B"),
                 f"{p.arithmetic_intensity:,.1f}" if p.arithmetic_intensity else "-"]
        if low:
            cells += [p.precision, f"{1e3 * p.cast_time_s:.3f} ms" if p.cast_time_s else "-"]
        t.add_row(*cells)
    if low and _kept_out(rows, r):
        t.caption = (f"kept out of {r.inputs.precision} (--bf16-layers-at-start/--bf16-layers-at-end: layers "
                     f"{', '.join(map(str, r.inputs.bf16_layers))}): every GEMM in 16 bits, no casts")
    elif low:
        t.caption = (f"{r.inputs.precision} ({r.inputs.te_recipe}): the linear layers' GEMMs at the low-precision peak; "
                     f"cast: their quantise kernels (HBM-bound), per layer per {_basis(r)}, inside the phase's "
                     "time but for the weights' cast, shown as 1/M of it: the step charges it once (weight_casts)")
    return t


def _gemm_table(rows: list[PhaseRow], r: PlanReport, title: str) -> Table:
    """GPU: one compact line per matmul (`PhaseRow.gemms`) of the representative layer kind's phases and of those
    outside the layers."""
    t = Table(title=f"{title} (G={r.plan.tiles}, b={r.plan.tile_batch})", title_justify="left")
    for col, just in (("phase", "left"), ("matmul", "left"), ("m x n x k", "right"), ("x", "right"),
                      ("blocks", "right"), ("of peak", "right"), ("binds", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]  # "left"/"right" literals from the table spec
    for p in rows:
        for i, g in enumerate(p.gemms):
            times = f"{g.batch:g}" if g.batch != 1 else f"{g.groups:g}x{g.launches:g}" if g.groups != 1 else ""
            t.add_row(p.name if i == 0 else "", g.name, f"{g.m:.0f} x {g.n:.0f} x {g.k:.0f}", times,
                      f"{100 * g.causal_fraction:.0f}%" if g.causal_fraction != 1 else "", f"{g.efficiency:.2f}",
                      g.binding)
    t.caption = ("per device, forward; x: matrices per launch (the attention core: sequences x heads) or a grouped "
                 "expert GEMM's streams x rounds; blocks: the share of its score blocks a causal kernel runs; of peak: "
                 "share of the datasheet peak; the attention core's two matmuls are one fused kernel at its rate")
    return t


def _flops_table(r: PlanReport) -> Table:
    f = r.flops_per_step
    t = Table(title=f"FLOPs per {_basis(r)} (matmul, 2mnk)", title_justify="left")
    t.add_column("forward", justify="right")
    t.add_column("backward", justify="right")
    t.add_column("model total", justify="right")
    t.add_column("recompute", justify="right")
    t.add_column("hardware total", justify="right")
    t.add_column("elementwise (apart)", justify="right")
    t.add_row(*(si(x, "FLOP") for x in (f.forward, f.backward, f.total, f.recompute, f.hardware_total, f.elementwise)))
    t.caption = ("model total = forward + backward; recompute: forward work the backward pass runs again (--recompute"
                 + ("; with flash attention also the kernel's S = QK^T, recomputed whatever --recompute says"
                    if r.inputs.attention == "flash" else "") + "); hardware total = model total + recompute"
                 + (f"; all layers, {_basis_text(r)}" if _basis_text(r) else ""))
    return t


def _imported_panel(r: PlanReport) -> Panel:
    """--from-megatron / --from-bridge: every flag btacalc left out, with its reason, and the notes."""
    imp = r.imported
    assert imp is not None  # the caller checked
    by_reason: dict[str, list[str]] = {}
    for row in imp.ignored:
        by_reason.setdefault(row.reason, []).append(row.flag)
    lines = [f"• ignored {' '.join(escape(f) for f in flags)}: {escape(reason)}" for reason, flags in by_reason.items()]
    lines += [f"• {escape(n)}" for n in imp.notes]
    return Panel("\n".join(lines) or "every flag is modelled", title=f"Read from {escape(imp.source)}",
                 border_style="cyan")
