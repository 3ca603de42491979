"""The device's rates under a problem's layout and run (`Rates`, made once per layout by `rates_of`): the achieved
matmul peak per dtype (datasheet x the measured large-GEMM ceiling, `matmul_ceiling`, x the family's fitted
`compute_efficiency`), the GEMM shape model's device view, HBM and streaming bandwidths, the low-precision recipe's
cast rates, and the fused attention core's rate (`attention_core_peak`, from btacalc/data/attention_kernels.toml)
with the share of the score blocks a causal kernel runs (`causal_block_fraction`, `attention_core_time_factor`).
`costs.py` times each phase at these rates."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ...catalogue.terms import Gemm, Phase
from ...catalogue.constants import constants
from ...vocabulary import OP_POLICY
from ...config.attention_kernels import attention_kernel
from ..problem import Problem
from ..steptime import compute_efficiency
from ..arrays import minimum, where
from .precision import AttentionCastRates, CastRates, attention_cast_rates, cast_rates
from .gemm import GemmDevice

# FlashAttention-2's thread blocks cover B_r = B_c = 128 queries and keys for head dimensions up to 128
# (Dao 2023, arXiv 2307.08691, §3.1 and §4.1 "block sizes {64, 128} x {64, 128}"; flash-attention
# csrc/flash_attn/src/flash_fwd_launch_template.h, run_mha_fwd_hdim128: kBlockM = 128): the causal mask
# leaves whole blocks above the diagonal, which the kernel skips (§3.1.1 "causal masking").
CAUSAL_BLOCK = 128


@dataclass(frozen=True)
class Rates:
    """What a device reaches under one layout and run, the same for every batch shape (`rates_of`); a layer kind's
    copy adds its symbol values and GEMMs (costs.py `_kind_rates`)."""

    peak: float  # achieved matmul FLOP/s of a large, perfectly quantised GEMM
    hbm: float  # HBM bytes/s
    imbalance: Any  # R on the busiest expert-parallel rank (1 without expert parallelism)
    expert_shards: Any  # EP·ETP
    flash: bool
    sequence_parallel: bool
    beta: int
    cast: Optional[CastRates] = None  # the low-precision recipe's rates (None: 16-bit training)
    peak_share: float = 1.0  # peak over the datasheet peak (GEMM ceiling x compute_efficiency)
    device: Optional[GemmDevice] = None  # None: a profile without [kernels] (every matmul at `peak`)
    expert_parallel: Any = 1
    core_time_factor: Any = 1.0  # FLOPs the attention kernel runs per FLOP counted (causal block skipping)
    symbols: dict[str, Any] = field(default_factory=dict)  # the layer kind's symbol values (GEMM shapes)
    features: dict[str, Any] = field(default_factory=dict)
    gemms: dict[str, tuple[Gemm, ...]] = field(default_factory=dict)  # per phase, its GEMMs under `features`
    low_peak: float = 0.0  # achieved FLOP/s of the low-precision GEMMs: dtype datasheet x dtype ceiling x efficiency
    low_share: float = 1.0  # low_peak over the dtype's datasheet peak (its GEMM ceiling x compute_efficiency)
    low_device: Optional[GemmDevice] = None  # the low-precision GEMMs' device view (their dtype's peak)
    low_beta: float = 1.0  # bytes per element of the low-precision GEMM operands
    # HBM bytes per element of each pass's result (forward, data-gradient, weight-gradient): `gemm_output_bytes`
    output_bytes: tuple[float, float, float] = (2.0, 2.0, 4.0)
    attention_peak: float = 0.0  # FLOP/s of the fused attention core (`attention_core_peak`)
    datasheet_peak: float = 0.0  # the chip's dense 16-bit datasheet FLOP/s (what the report's efficiencies are shares of)
    attention_wall_rate: bool = False  # the kernel's measured wall-clock rate: no separate HBM-traffic bound
    attention_bwd_ratio: float = 1.0  # its backward's time over the default's (deterministic backward, `attention_bwd_ratio`)
    attention_cast: Optional[AttentionCastRates] = None  # --fp8-attention: the casts around the FP8 kernel
    stream_hbm: float = 0.0  # B/s a memory-bound phase moves its traffic at: HBM x achievable_bandwidth_fraction
    # every symbol a Python int or float and EP an int: GEMM shapes are then Python arithmetic (`_evaluate_all`)
    python_symbols: bool = False
    # every symbol but G and b a Python int or float and EP an int (G and b may be arrays of shapes): an expression
    # that reads neither is then Python arithmetic on the layout's values, the same at every shape (`_evaluate_all`)
    python_layout: bool = False
    # what a phase's arithmetic needs that is the same for every shape under these rates (`_volume_factors`);
    # a layer kind's rates have their own (`_kind_rates`), which every shape of the layout shares
    plans: dict[Any, Any] = field(default_factory=dict)
    cuda_graph_scope: tuple[str, ...] = ()  # Layout.cuda_graph_scope (config/cuda_graphs.py)
    experts: Any = 0  # E, the model's routed experts (0: dense): the dispatcher's per-expert counts (Phase.count_gathers)
    dispatcher: str = "alltoall"  # Layout.dispatcher: the MoE token dispatcher whose exchange calls count (Phase.a2a_calls)
    # all-gathers of a sequence-parallel column-parallel input again in the backward for dW (`sp_regather`)
    sp_regather: int = 1
    # whether a re-run repeats a row-parallel output's sequence-parallel reduce-scatter: not under torchtitan's per-op
    # policy (--recompute op), whose save list has the functional reduce-scatter (pytorch/torchtitan @ 820504e2
    # torchtitan/models/llama3/parallelize_llama.py L218-227: _c10d_functional.reduce_scatter_tensor), so its re-run
    # takes the output from the cache; the all-gathers, not on the list, run again
    rerun_scatters: bool = True

    def load(self, phase: Phase) -> Any:
        """The share of the mean a phase's work carries on the busiest rank: `imbalance` for the phases routed
        tokens reach (catalogue `routed_load`), else 1."""
        return self.imbalance if phase.routed_load else 1.0


def expert_load(problem: Problem) -> Any:
    """The busiest expert-parallel rank's routed copies over the balanced share (Rates.imbalance):
    - dropless (Megatron's default): --routing-imbalance R with expert parallelism, 1 on one rank (it runs every
      copy however they spread);
    - with a capacity factor CF (Megatron-LM @ d98e8a64 megatron/core/transformer/moe/moe_utils.py L248-266:
      capacity = ceil(copies / E x CF) per expert of each rank's routed copies, the rest dropped): min(R, CF), the
      busiest rank's experts filled at most to capacity (an upper bound: the drop is counted on the busiest rank
      only, and at one rank the dropped copies are not taken off);
    - padded to capacity (--moe-pad-expert-input-to-capacity; token_dispatcher.py L517-540: every expert's input
      padded to its capacity, and the padded rows travel in the all-to-all): CF on every rank, at any EP."""
    run, ep = problem.run, problem.layout.expert_parallel
    if run.capacity_factor is None:
        return where(ep > 1, run.routing_imbalance, 1.0)
    if run.pad_to_capacity:
        return run.capacity_factor + 0.0 * ep  # (the layout's shape where EP is an array of layouts)
    return where(ep > 1, minimum(run.routing_imbalance, run.capacity_factor), 1.0)


def rates_of(problem: Problem) -> Rates:
    """The device's rates under the problem's layout and run: the same for every batch shape, so computed
    once per problem (kept in its cache, which only problems of the same layout and formulas share)."""
    rates = problem.layout_cache.get("gpu rates")
    if rates is None:
        rates = problem.layout_cache["gpu rates"] = _device_rates(problem)
    return rates


def _device_rates(problem: Problem) -> Rates:
    hw, lay = problem.hardware, problem.layout
    ceiling = matmul_ceiling(problem)
    share = ceiling * compute_efficiency(problem)
    peak = hw.chip.peak_flops_per_s.value * share
    cast = cast_rates(problem)  # the low-precision dtype's peak x compute_efficiency (x its dtype's ceiling below)
    low_ceiling = matmul_ceiling(problem, cast.ceiling_kernel) if cast is not None else ceiling
    return Rates(
        peak=peak,
        peak_share=share,
        hbm=hw.memory.offchip_bandwidth_bytes_per_s.value,
        imbalance=expert_load(problem),
        expert_shards=lay.expert_parallel * lay.expert_tensor_parallel,
        flash=problem.run.attention == "flash",
        sequence_parallel=lay.sequence_parallel,
        beta=problem.run.bytes_per_element,
        cast=cast,
        device=gemm_device(problem, peak),
        expert_parallel=lay.expert_parallel,
        low_peak=cast.peak * low_ceiling if cast is not None else 0.0,
        low_share=low_ceiling * compute_efficiency(problem),
        low_device=gemm_device(problem, cast.peak * low_ceiling) if cast is not None else None,
        low_beta=cast.recipe.bytes_per_element if cast is not None else 1.0,
        output_bytes=gemm_output_bytes(problem),
        attention_peak=attention_core_peak(problem, peak),
        datasheet_peak=hw.chip.peak_flops_per_s.value,
        attention_wall_rate=attention_kernel_share(problem) is not None,
        attention_bwd_ratio=attention_bwd_ratio(problem),
        attention_cast=attention_cast_rates(problem),
        stream_hbm=hw.memory.streaming_bandwidth_bytes_per_s(),
        cuda_graph_scope=lay.cuda_graph_scope,
        experts=problem.symbols.get("E", problem.model.num_experts),
        dispatcher=lay.dispatcher,
        sp_regather=sp_regather(problem),
        rerun_scatters=problem.run.recompute != OP_POLICY,
    )


def sp_regather(problem: Problem) -> int:
    """All-gathers of a sequence-parallel column-parallel linear's input in its backward, for the weight gradient:
    Megatron-Core / TransformerEngine save only the rank's sequence shard and gather it again (formulas/constants.toml
    `sp_backward_regather`); torchtitan's DTensor plan (PyTorch FSDP2 with TP, `--fsdp-impl fsdp2`) none. Its
    PrepareModuleInput redistributes the block's Shard(1) input to Replicate before the ColwiseParallel linears
    (pytorch/torchtitan @ 820504e2 torchtitan/models/llama3/parallelize_llama.py L181-184, L190-193), and autograd
    saves the gathered tensor the local mm read (re-run with it under the checkpoint), so the backward only
    reduce-scatters the input gradient (the redistribute's backward)."""
    return 0 if problem.layout.torch_fsdp else constants().passes.sp_backward_regather


def gemm_output_bytes(problem: Problem) -> tuple[float, float, float]:
    """HBM bytes per element of the result of a layer GEMM's forward, data-gradient and weight-gradient passes.
    The forward and data-gradient GEMMs write the 16-bit activation dtype, also from FP8 or FP4 operands
    (TransformerEngine @ d0067d0 pytorch/module/linear.py: general_gemm(..., out_dtype=activation_dtype) for fprop
    and dgrad; the output quantizer is off unless the next op takes a quantised input, which no modelled layer
    does). The weight-gradient GEMM accumulates into the main gradient buffer (`gradient_bytes`, fp32 by default):
    Megatron's gradient_accumulation_fusion is on by default (megatron_flags.tsv: --no-gradient-accumulation-fusion
    turns it off) and TE then runs general_gemm(..., out=main_grad, out_dtype=main_grad.dtype, accumulate=True)
    (linear.py L1227-1262 at d0067d0; v2.8 L823-844), which reads and writes the buffer: 2 x gradient_bytes. The first
    micro-batch of a step only writes it (accumulate False with is_first_microbatch), not separated here (an
    over-count of gradient_bytes / M per element). Without the fusion the same lines give out=None,
    out_dtype=activation_dtype, accumulate=False: the GEMM writes a 16-bit gradient once, and the main-gradient read
    and write go to the separate add (gpu/fixed.py `wgrad_accumulate_s`)."""
    run = problem.run
    out = float(run.bytes_per_element)
    return out, out, 2.0 * run.gradient_bytes if run.gradient_accumulation_fusion else out


def attention_kernel_share(problem: Problem, dtype: Optional[str] = None) -> Any:
    """The run's attention kernel's published (or derived) rate on this compute capability as a share of the
    dense 16-bit datasheet peak (btacalc/data/attention_kernels.toml), or None where the file has none. Where
    the file gives the rate per sequence length, it is taken at the tokens one kernel call spans: the run's
    sequence over the context-parallel ranks (each rank's ring-attention steps run its s / CP queries). `dtype`: the
    kernel's dtype (None: the run's, `attention_dtype`)."""
    chip = problem.hardware.chip
    cc = chip.compute_capability.value if chip.compute_capability else None
    kernel_seq = np.maximum(1, np.floor_divide(problem.run.seq_len, problem.layout.context_parallel))
    return attention_kernel(problem.run.attention_kernel).fraction_of_peak(cc, kernel_seq,
                                                                           dtype or attention_dtype(problem))


def attention_dtype(problem: Problem) -> str:
    """The attention core's kernel: the 16-bit one, or under --fp8-attention the recipe's FP8 fused attention
    (precision.toml fp8_attention_kernel: fp8 with per-tensor scales, mxfp8 with block scales)."""
    run = problem.run
    return run.recipe.fp8_attention_kernel if run.fp8_attention else "bf16"


def attention_bwd_ratio(problem: Problem, dtype: Optional[str] = None) -> float:
    """The fused core's backward time over its default backward's: under a deterministic attention backward
    (RunOptions.deterministic_attention: Megatron --deterministic-mode, NVTE_ALLOW_NONDETERMINISTIC_ALGO=0) the
    kernel's measured deterministic/default ratio on this compute capability (attention_kernels.toml
    `deterministic_backward`, e.g. cuDNN on GB200 4.754 / 4.127 ms = 1.152), else 1 (the default backward, or a
    deterministic one with no published time: not timed, said in the run's notes)."""
    chip = problem.hardware.chip
    cc = chip.compute_capability.value if chip.compute_capability else None
    if not problem.run.deterministic_attention:
        return 1.0
    ratio = attention_kernel(problem.run.attention_kernel).deterministic_backward_ratio(
        cc, dtype or attention_dtype(problem))
    return 1.0 if ratio is None else ratio


def attention_core_peak(problem: Problem, gemm_peak: float, dtype: Optional[str] = None) -> float:
    """FLOP/s of the fused attention core: datasheet 16-bit peak x the run's attention kernel's
    `fraction_of_peak` on this compute capability (btacalc/data/attention_kernels.toml), else `gemm_peak`,
    the large-GEMM rate (datasheet x ceiling x compute_efficiency). The file's rates are kernel benchmarks
    (FLOPs of the blocks run per second of wall time), so the fitted compute_efficiency does not multiply
    them: e.g. cuDNN fused attention on H100 (`default`, 0.467: FlashAttention-3 paper, Shah et al. 2024,
    arXiv 2407.08608, Figures 5 and 6) or llm-foundry's Triton FlashAttention on Hopper (0.175)."""
    share = attention_kernel_share(problem, dtype)
    return gemm_peak if share is None else problem.hardware.chip.peak_flops_per_s.value * share


def matmul_ceiling(problem: Problem, dtype: str = "bf16") -> float:
    """The generation's measured large-GEMM share of the datasheet peak of `dtype`'s GEMMs (a recipe's
    `ceiling_kernel`: bf16, fp8, mxfp8, fp8_block or fp4), 1 for a profile without a [kernels] section. Every
    matmul phase runs at datasheet x this x the family's fitted `compute_efficiency` before its shape's quantisation
    (model/gpu/gemm.py). The BF16 ceiling is `kernels.gemm_ceiling_fraction`; FP8 GEMMs take
    `kernels.fp8_gemm_ceiling_fraction` where the profile has a published FP8 microbenchmark (the same
    Maximum Achievable Matmul FLOPS table, torch._scaled_mm with per-tensor scales), else the BF16 one;
    MXFP8's block-scaled GEMMs (`dtype` "mxfp8", precision.toml `gemm_ceiling`) `kernels.mxfp8_gemm_ceiling_fraction`
    where the profile has one (the FP8 ceiling x a published MXFP8/FP8 ratio at the same shape), else the FP8 one;
    Hopper's 1x128 / 128x128 block-scaled GEMMs (`dtype` "fp8_block": fp8-blockwise below compute capability 10.0)
    `kernels.fp8_block_gemm_ceiling_fraction` where the profile has one, else the FP8 one;
    FP4 GEMMs `kernels.fp4_gemm_ceiling_fraction` where the profile has one (Blackwell: the BF16 ceiling x the
    NVFP4/BF16 ratio of a published cuBLAS benchmark at the same shapes), else the BF16 one."""
    kernels = problem.hardware.kernels
    if kernels is None:
        return 1.0
    if dtype == "mxfp8" and kernels.mxfp8_gemm_ceiling_fraction is not None:
        return kernels.mxfp8_gemm_ceiling_fraction.value
    if dtype == "fp8_block" and kernels.fp8_block_gemm_ceiling_fraction is not None:
        return kernels.fp8_block_gemm_ceiling_fraction.value
    if dtype in ("fp8", "mxfp8", "fp8_block") and kernels.fp8_gemm_ceiling_fraction is not None:
        return kernels.fp8_gemm_ceiling_fraction.value
    if dtype == "fp4" and kernels.fp4_gemm_ceiling_fraction is not None:
        return kernels.fp4_gemm_ceiling_fraction.value
    return kernels.gemm_ceiling_fraction.value


def gemm_device(problem: Problem, peak_flops_per_s: float) -> Optional[GemmDevice]:
    """The GEMM shape model's view of the problem's device at an achieved peak (the dtype's datasheet peak x
    compute_efficiency), or None for a profile without a [kernels] section."""
    hw = problem.hardware
    if hw.kernels is None:
        return None
    return GemmDevice(peak_flops_per_s, hw.memory.offchip_bandwidth_bytes_per_s.value, int(hw.chip.cores.value),
                      hw.kernels.gemm_tiles, hw.kernels.gemm_wave_overhead_s.value,
                      hw.kernels.gemm_overlap_exponent.value)


def causal_block_fraction(s: Any, block: int = CAUSAL_BLOCK) -> Any:
    """Share of the s x s score blocks a causal FlashAttention kernel runs: with nb = ceil(s/B) blocks per
    side (B_r = B_c = B), the nb(nb+1)/2 blocks on and below the diagonal of nb^2 (Dao 2023, arXiv
    2307.08691, §3.1.1: blocks whose column indices all exceed their row indices are skipped, about half)."""
    nb = np.ceil(np.asarray(s, dtype=float) / block)
    out = nb * (nb + 1) / (2 * nb * nb)
    return float(out) if np.ndim(out) == 0 else out


def attention_core_block_share(flash: bool, s: Any, w: Any, windowed: bool) -> Any:
    """Share of the queries x keys blocks of the attention core's matmuls (Q K^T, P V as the catalogue's
    `attention_core` GEMMs write them: n or k = s keys, or a sliding-window layer's w) that the kernel runs, as the
    core is timed (`attention_core_time_factor` x the counted share): a causal FlashAttention kernel over a
    full-attention layer `causal_block_fraction(s)` (Dao 2023, arXiv 2307.08691, §3.1.1), 1 over a window's band
    (its counted s x w); eager attention runs the whole s x s matrix, masked: 1 over a full-attention layer, s / w
    over a sliding-window layer's rows (whose n or k is the window: `_eager_core_time_factor`)."""
    if not flash:
        return 1.0 if not windowed else s / w
    runs = causal_block_fraction(s)
    return runs if not windowed else where(w < s, 1.0, runs)


def attention_core_time_factor(problem: Problem, symbols: dict[str, Any], windowed: bool) -> Any:
    """Kernel FLOPs per counted FLOP of the attention core under FlashAttention with a causal mask (every
    decoder layer btacalc models is causal). The count is full s x w (the papers' convention) or, with
    --causal, the unmasked (2sw - w^2 + w)/2; a window (w < s) runs its band's blocks, the counted s x w.
    A full-attention layer (`windowed` false) has w = s, as the catalogue reads it (Selection.term_expression):
    the model's window symbol is only the window of its sliding-window layers."""
    if problem.run.attention != "flash":
        return _eager_core_time_factor(problem, symbols, windowed)
    if type(symbols["s"]) in PYTHON_NUMBERS and type(symbols["w"]) in PYTHON_NUMBERS:
        s1 = float(symbols["s"])
        return _one_core_time_factor(s1, float(symbols["w"]) if windowed else s1, problem.run.causal)
    s = np.asarray(symbols["s"], dtype=float)
    w = np.asarray(symbols["w"], dtype=float) if windowed else s
    counted = (2 * s * w - w * w + w) / (2 * s * w) if problem.run.causal else 1.0
    runs = np.where(w < s, 1.0, causal_block_fraction(s))
    out = runs / counted
    return float(out) if np.ndim(out) == 0 else out


PYTHON_NUMBERS = (int, float)


def _eager_core_time_factor(problem: Problem, symbols: dict[str, Any], windowed: bool) -> Any:
    """Eager (materialised) attention computes every entry of the s x s score matrix and masks it (Megatron-LM's
    unfused DotProductAttention: baddbmm over the whole matrix, then the fused scale-mask-softmax): its work is the
    full square whatever the FLOP convention counts. So the time factor is the full square over the counted entries:
    1 under the papers' s x s count, s / w for a sliding-window layer's s x w count, and 2sw / (2sw - w^2 + w) under
    --causal's unmasked count (attngemm found the causal case timed at the halved count: about half the work)."""
    if not problem.run.causal and not windowed:
        return 1.0
    s = np.asarray(symbols["s"], dtype=float)
    w = np.asarray(symbols["w"], dtype=float) if windowed else s
    counted = (2 * s * w - w * w + w) / (2 * s * w) if problem.run.causal else 1.0
    out = s / w / counted
    return float(out) if np.ndim(out) == 0 else out


def _one_core_time_factor(s: float, w: float, causal: bool) -> float:
    """`attention_core_time_factor` of one sequence length in Python floats: the same IEEE operations in the same
    order as the array path (float64 either way), so the same bits."""
    counted = (2 * s * w - w * w + w) / (2 * s * w) if causal else 1.0
    if w < s:
        runs = 1.0
    else:
        nb = float(math.ceil(s / CAUSAL_BLOCK))
        runs = nb * (nb + 1) / (2 * nb * nb)
    return runs / counted
