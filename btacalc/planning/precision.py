"""The plan's precision columns: each phase's GEMM dtype and its cast kernels' time per step
(`btacalc.model.gpu.precision` holds the arithmetic)."""

from __future__ import annotations

from ..catalogue.compiled import PhaseValues
from ..catalogue.terms import phase_by_name
from ..model.gpu.precision import attention_cast_rates, attention_cast_s, cast_rates, phase_cast_s, phase_precision
from ..model.gpu.rates import expert_load
from ..model.problem import Evaluation, Problem
from .report import PhaseRow, PlanReport


def mark_precision(problem: Problem, ev: Evaluation, report: PlanReport) -> None:
    """Set `precision` and `cast_time_s` on the report's phase rows: one layer, on the basis of the row's
    `time_s` (one micro-batch; the weights' once-per-step cast counted as 1/M of it). Under --fp8-attention the
    attention core's rows show the FP8 kernel (fp8 / mxfp8) and the casts around it (on the phase whose terms
    count them, attn_scores). A layer kind kept in BF16 (first/last layers, feature `bf16_layer`) shows 16 bits and
    no casts."""
    kinds = {kind.name: pv for kind, pv in ev.layers}
    main = max(ev.layers, key=lambda kp: kp[0].count)[1]
    tables: list[tuple[list[PhaseRow], PhaseValues]] = [(report.phases, main), (report.outside_layers, ev.outside)]
    tables += [(rows.phases, kinds[rows.name]) for rows in report.layer_kinds]
    rates, lay = cast_rates(problem), problem.layout
    attention = attention_cast_rates(problem)
    load = expert_load(problem)
    hbm = problem.hardware.memory.offchip_bandwidth_bytes_per_s.value
    for rows, pv in tables:
        quantised = not pv.compiled.selection.feature_dict["bf16_layer"]  # (a layer kept in BF16: none of it)
        for row in rows:
            phase = phase_by_name(row.name)
            row.precision = phase_precision(problem, phase, quantised)
            if not quantised:
                continue
            if rates is not None and phase.low_precision:
                v = lambda q, name=row.name, values=pv: values.value(name, q)  # noqa: E731
                per_micro_batch = phase_cast_s(rates, hbm, phase, v, load if phase.routed_load else 1.0,
                                               lay.expert_parallel * lay.expert_tensor_parallel)
                row.cast_time_s = float(per_micro_batch)
            elif attention is not None and phase.core:
                v = lambda q, name=row.name, values=pv: values.value(name, q)  # noqa: E731
                forward, backward = attention_cast_s(attention, hbm, v)
                row.cast_time_s = float(forward + backward)
