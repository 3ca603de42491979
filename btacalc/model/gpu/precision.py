"""Low-precision training on GPUs: the GEMM rate of the linear layers and the cost of their casts.

Under a low-precision recipe (btacalc/data/precision.toml, `btacalc.config.precision`) a phase the
catalogue marks ``low_precision`` (TransformerEngine ``te.Linear`` / ``GroupedLinear``: the QKV, output,
MLP, expert and shared-expert projections) runs its forward, dgrad and wgrad GEMMs at the chip's
peak for the recipe's dtype (FP8 or FP4) times that dtype's measured GEMM ceiling (rates.matmul_ceiling:
the profile's FP8 one where published, else the BF16 one) and the same compute efficiency; every
other phase (attention core, router, norms, softmax, embedding, LM head) stays 16-bit, as Megatron-LM
builds them (MLM @ d98e8a64 megatron/core/transformer/transformer_config.py:640-656: FP8 attention
and BF16 first/last layers are off by default; the router and output layer are not TE modules), except the
attention core under --fp8-attention: cuDNN's FP8 kernel at its benchmarked rate (rates.attention_kernel_share)
and the casts around it (`attention_cast_s`; docs/precision.md "FP8 attention").

Quantisation is a separate, bandwidth-bound kernel over every operand, once per use
(TE @ d0067d0 transformer_engine/pytorch/module/linear.py). Per element of a tensor of 16-bit values:

    cast bytes = 2·(1 + amax_passes)            (read the 16-bit tensor; again for the amax first)
               + copies · (q + scale / block)   (write the quantised copies with their scales)

with q the element bytes (FP8 1, FP4 0.5), one scale of `scale` bytes per `block` elements (MXFP8:
1 B E8M0 per 32; NVFP4: 1 B E4M3 per 16, plus an FP32 per tensor, negligible), `copies` = 2 where
dgrad/wgrad read a columnwise copy (block scales always; per-tensor FP8 below compute capability
10.0, whose FP8 GEMMs are TN-only: TE utils.py:658), else 1; `amax_passes` = 1 for current scaling
and NVFP4 (their amax kernel reads the tensor before the cast: TE quantizer.cpp:1009, 2630-2645).
NVFP4's 16x16 random Hadamard transform (RHT) and stochastic rounding run inside the amax and cast kernels
(no HBM pass of their own: 2·16 FLOP per element on the tensor cores, 16 FLOP per byte read, far below a
B200's 2.25e15 / 8e12 = 281 FLOP/B). Where the RHT'd columnwise copy of an activation or gradient is written
(TE before v2.14, precision.toml `rht_cast_fusion_since_te`, plan option `rht_cast_fusion` False) is a kernel
of its own, the cast of such a tensor is one kernel per copy, each reading the 16-bit tensor and writing one
copy: 2·amax_passes + copies·(2 + q + scale/block) bytes, every kernel at the single-output share f1. Weights take
no RHT and keep one kernel for both copies.

The activations cast per micro-batch are the phase's ``cast_elements`` (each GEMM's input in the
forward pass, its output gradient in the backward pass); the weights are cast once per optimizer
step (Megatron passes TE ``is_first_microbatch``, so the quantised weights are cached over the
micro-batches: MLM transformer_engine.py:1338), i.e. params / M per micro-batch. A phase then takes

    t = max(FLOPs / (peak_dtype · efficiency), traffic / HBM) + cast bytes / HBM

An operand TE all-gathers along the sequence (sequence parallelism: the column-parallel QKV / fc1 input, the
row-parallel projection / fc2 output gradient; the phase's ``sp_gather_cast_elements``, part of its
``cast_elements``, counted whether or not the run is sequence-parallel; its extra cost is 0 without) gets its columnwise copy as the recipe's `sp_gather` says (precision.toml; docs/precision.md
"fp8gather"). Per-tensor FP8 on a TN-only chip cannot gather a transposed copy: the local cast writes the rowwise
copy only, and after the gather a transpose reads and writes q bytes of each of the t gathered elements; 1D block
scales and NVFP4 cast both copies locally and re-order the gathered columnwise copy. Per local gathered element

    extra = local cast (its copies) − the recipe's cast + t · pass bytes / f1

(f1 the single-output cast share: a streaming copy kernel), so a phase's activation casts take
(cast_elements · cast + sp_gather_cast_elements · extra) / HBM. The run's TransformerEngine (`te_version`,
btacalc/data/te_releases.toml, docs/precision.md "te22") decides the per-tensor FP8 case where FP8 GEMMs take non-TN layouts (10.x-11.x, 13.0 on):
TE 1.x casts both copies there too (`copies`), TE before 2.2.0 still transposes the gathered tensors, and before 2.4
the column-parallel input's under Userbuffers (`gathered_transpose`); those inputs are the phase's
``sp_gather_input_cast_elements`` (part of the gathered ones), taking their own extra bytes.

With sequence parallelism TE quantises before it all-gathers, so a low-precision phase's TP all-gathers
move q + scale/block bytes per element and its reduce-scatters 2 (`gather_share`).

The device keeps `copies` quantised weight copies beside its 16-bit weights (TE's weight cache);
with --fp8-param-gather the first copy *is* the parameter and the 16-bit copy goes.

The cast kernels do not stream at the datasheet HBM bandwidth. A profile may give the share TE's quantise
kernel measures (`kernels.cast_bandwidth_fraction` f1 for one rowwise copy, `cast_two_copy_bandwidth_fraction`
f2 for the rowwise + columnwise kernel); a cast then takes

    t = elements · [2·amax_passes / f1 + (2 + copies·(q + scale/block)) / f_copies] / HBM

(the amax pass is a read-only kernel over the same tensor, taken at f1). B200: TE's MXFP8 cast of a BF16
8192x8192 tensor measured 34.84 us rowwise and 52.34 us both ways (ROCm/TransformerEngine PR 598, "CAST_ONLY",
B200 column), i.e. 2^26·3.03125 B / 34.84 us = 5.84 TB/s = 0.730 of 8 TB/s and 2^26·4.0625 B / 52.34 us =
5.21 TB/s = 0.651 (tests/test_lp_cast_bandwidth.py derives both). Without the fields (Hopper: no published
TransformerEngine cast benchmark found), f = the profile's streaming share, memory.achievable_bandwidth_fraction
(H100 0.87, a STREAM-like benchmark: no cast kernel streams faster than it), 1 without that either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ...config.hardware import Kernels
from ...config.precision import SIXTEEN_BIT_BYTES, Recipe
from ...config.te_release import te_behaviour
from ...catalogue.terms import Phase
from ..problem import Problem
from ..steptime import compute_efficiency


@dataclass(frozen=True)
class CastRates:
    """Per-problem constants of a low-precision recipe on one device."""

    recipe: Recipe
    peak: Any  # achieved FLOP/s of the low-precision GEMMs (the dtype's peak x compute efficiency)
    # HBM bytes per element cast (read + amax passes + written copies: `cast_bytes_per_element`), each kernel's
    # over its share of HBM bandwidth (`full_bandwidth_bytes`): a cast of e elements takes e x this / HBM
    full_bandwidth_bytes_per_cast: float  # a weight's cast
    activation_bytes_per_cast: float  # an activation's or gradient's (differs under NVFP4 without RHT cast fusion)
    cache_bytes_per_param: float  # quantised weight copies kept per parameter (with their scales)
    weight_casts_per_micro_batch: Any  # 1 / M: the weights are cast once per optimizer step
    # per local element of a sequence-parallel gathered operand, the bytes its cast and the pass over the gathered
    # tensor move beyond `activation_bytes_per_cast` (`sp_gather_extra_bytes`)
    sp_gather_extra_bytes: Any
    # the same for a column-parallel input (QKV, fc1: `sp_gather_input_cast_elements`, a part of the gathered ones),
    # whose gathered tensor an older TE transposes on more paths than the output gradient's (te_releases.toml)
    sp_gather_input_extra_bytes: Any
    ceiling_kernel: str  # the measured GEMM ceiling the recipe's GEMMs take on this chip (Recipe.ceiling_kernel)


def cast_bytes_per_element(recipe: Recipe, copies: int) -> float:
    """HBM bytes one element's cast moves: read 2 B (and again per amax pass), write each copy."""
    return SIXTEEN_BIT_BYTES * (1 + recipe.amax_passes) + copies * recipe.bytes_per_element


def cast_bandwidth_shares(kernels: Optional[Kernels], copies: int, streaming_share: float = 1.0) -> tuple[float, float]:
    """(f1, f_copies): the share of HBM bandwidth of the amax pass / single-copy cast and of the recipe's cast
    kernel with `copies` outputs, from the profile's measured quantise kernels; where it gives none, the share a
    streaming kernel reaches on the device (`streaming_share`, memory.achievable_bandwidth_fraction: a cast is a
    streaming kernel, so it cannot beat a STREAM-like benchmark), 1 without one either."""
    one = kernels.cast_bandwidth_fraction if kernels is not None else None
    two = kernels.cast_two_copy_bandwidth_fraction if kernels is not None else None
    f1 = one.value if one is not None else streaming_share
    return f1, ((two.value if two is not None else f1) if copies == 2 else f1)


def _cast_shares(problem: Problem, copies: int) -> tuple[float, float]:
    return cast_bandwidth_shares(problem.hardware.kernels, copies, problem.hardware.memory.streaming_share)


def full_bandwidth_bytes(recipe: Recipe, copies: int, shares: tuple[float, float], kernels: int = 1) -> float:
    """The bytes a cast of one element would move at the full HBM bandwidth in the time it takes. One kernel for
    all copies: 2·amax_passes / f1 + (2 + copies·(q + scale/block)) / f_copies; one kernel per copy (`kernels` =
    copies, `Recipe.activation_cast_kernels`): 2·amax_passes / f1 + copies·(2 + q + scale/block) / f1."""
    f1, fc = shares
    amax = SIXTEEN_BIT_BYTES * recipe.amax_passes
    if kernels > 1:
        return (amax + kernels * (SIXTEEN_BIT_BYTES + copies // kernels * recipe.bytes_per_element)) / f1
    return amax / f1 + (cast_bytes_per_element(recipe, copies) - amax) / fc


def cast_rates(problem: Problem) -> Optional[CastRates]:
    """The recipe's rates on `problem`'s device, or None for 16-bit training."""
    recipe = problem.run.recipe
    if not recipe.low:
        return None
    chip = problem.hardware.chip
    peak = {"fp8": chip.peak_fp8_flops_per_s, "fp4": chip.peak_fp4_flops_per_s}[recipe.gemm_peak]
    assert peak is not None  # checked when the execution was resolved (config.precision.check_precision)
    cc = chip.capability
    te = te_behaviour(problem.run.te_version)
    copies = recipe.copies(cc, te)
    shares = _cast_shares(problem, copies)
    kernels = recipe.activation_cast_kernels(copies, problem.run.rht_cast_fusion)
    activation = full_bandwidth_bytes(recipe, copies, shares, kernels)
    return CastRates(recipe=recipe, peak=peak.value * compute_efficiency(problem),
                     full_bandwidth_bytes_per_cast=full_bandwidth_bytes(recipe, copies, shares),
                     activation_bytes_per_cast=activation,
                     cache_bytes_per_param=copies * recipe.bytes_per_element,
                     weight_casts_per_micro_batch=1 / problem.layout.micro_batches,
                     sp_gather_extra_bytes=sp_gather_extra_bytes(problem, cc, activation, "gradient"),
                     sp_gather_input_extra_bytes=sp_gather_extra_bytes(problem, cc, activation, "input"),
                     ceiling_kernel=recipe.ceiling_kernel(cc))


def gathered_transpose(problem: Problem, operand: str) -> bool:
    """Whether the run's TE (`te_version`, te_releases.toml) transposes the gathered per-tensor FP8 tensor of a
    sequence-parallel `operand` ("input": the column-parallel QKV / fc1 input; "gradient": the row-parallel output
    gradient) even where FP8 GEMMs take non-TN layouts. With Userbuffers (`Layout.userbuffers`) the input is gathered
    by LayerNormLinear's bulk-dgrad overlap (transposed before TE 2.4) and the gradient by the ring exchange (never
    transposed from TE 2.0: update_usage); without, both by _all_gather_fp8 (transposed before TE 2.2.0)."""
    te = te_behaviour(problem.run.te_version)
    if problem.layout.userbuffers:
        return te.ub_bulk_dgrad_transposes if operand == "input" else False
    return te.gather_transposes


def sp_gather_extra_bytes(problem: Problem, cc: float, own: float, operand: str) -> Any:
    """Per local element of an `operand` ("input" or "gradient": `gathered_transpose`) TE all-gathers along the
    sequence, the full-bandwidth bytes beyond the recipe's own cast (`own`, the activation cast's
    `activation_bytes_per_cast`): the local cast writes the recipe's `sp_gather_pass` copies instead of its
    `copies`, and a pass over the t gathered elements reads and writes `pass` bytes each at the single-output cast
    share f1. 0 without sequence parallelism (nothing is gathered: TP all-reduces, and the local cast writes every
    copy), and at TP 1 (hostile30: a layout search's stacked layouts mark every candidate sequence-parallel, and its
    TP 1 candidates were charged a gather no plan of theirs runs)."""
    recipe, run = problem.run.recipe, problem.run
    local, pass_bytes = recipe.sp_gather_pass(cc, te_behaviour(run.te_version), gathered_transpose(problem, operand))
    shares = _cast_shares(problem, local)
    mine = full_bandwidth_bytes(recipe, local, shares, recipe.activation_cast_kernels(local, run.rht_cast_fusion))
    extra = mine - own + problem.layout.tensor_parallel * pass_bytes / shares[0]
    return extra * (problem.layout.tensor_parallel > 1) if problem.layout.sequence_parallel else 0.0


@dataclass(frozen=True)
class AttentionCastRates:
    """--fp8-attention: what quantising around TransformerEngine's FP8 fused attention costs per element, as bytes
    at the full HBM bandwidth (`full_bandwidth_bytes`, the cast kernels' measured shares): `cast` for Q, K, V
    (forward) and dO (backward), each quantised into precision.toml's `fp8_attention_copies`; `dequantize` for O
    (forward) and dQ, dK, dV (backward) where the kernel writes them in FP8 (delayed scaling), 0 otherwise."""

    cast_bytes: float
    dequantize_bytes: float


def attention_cast_rates(problem: Problem) -> Optional[AttentionCastRates]:
    """The FP8 attention's cast costs on `problem`'s device, or None without --fp8-attention. Per element:

        cast       = 2·amax_passes / f1 + (2 + copies·(q + scale/block)) / f_copies   (`full_bandwidth_bytes`)
        dequantize = (q + 2) / f1                                                     (read FP8, write 16 bits)

    with q + scale/block the recipe's quantised bytes (MXFP8 1 + 1/32, per-tensor FP8 1), copies 1 (per-tensor
    scaling: rowwise only) or 2 (MXFP8: rowwise and columnwise), f1 / f_copies the profile's cast-kernel shares."""
    run = problem.run
    if not run.fp8_attention:
        return None
    recipe = run.recipe
    copies = recipe.fp8_attention_copies
    shares = _cast_shares(problem, copies)
    dequantize = (recipe.element_bytes + SIXTEEN_BIT_BYTES) / shares[0] if recipe.fp8_attention_fp8_outputs else 0.0
    return AttentionCastRates(cast_bytes=full_bandwidth_bytes(recipe, copies, shares), dequantize_bytes=dequantize)


def attention_cast_s(rates: AttentionCastRates, hbm: float, v: Any) -> tuple[Any, Any]:
    """(first forward, backward) seconds of the casts around the FP8 fused attention per micro-batch, from a core
    phase's `attention_cast_elements` E_qkv (Q, K, V) and `attention_cast_elements_bwd` E_o (O's elements, dO's):

        forward  = (E_qkv · cast + E_o · dequantize) / HBM           (each forward pass; a re-run's in the backward)
        backward = (E_o · cast + E_qkv · dequantize) / HBM + re-runs · forward

    (TE @ d0067d0 attention/dot_product_attention/backends.py L1478, L1559, L1748-1753, L1915). `v` reads the
    phase's per-device values."""
    qkv, o = v("attention_cast_elements"), v("attention_cast_elements_bwd")
    forward = (qkv * rates.cast_bytes + o * rates.dequantize_bytes) / hbm
    return forward, (o * rates.cast_bytes + qkv * rates.dequantize_bytes) / hbm + v("reruns") * forward


def phase_cast_s(rates: CastRates, hbm: float, phase: Phase, v: Any, load: Any, expert_shards: Any,
                 weights: bool = True) -> Any:
    """Seconds of a low-precision phase's cast kernels per micro-batch: its activations and output
    gradients (`cast_elements` x the routed load, with the sequence-parallel gathered ones'
    `sp_gather_extra_bytes`) and, with `weights`, its weights' once-per-step cast as
    1/M of it (`phase_weight_cast_s` x weight_casts_per_micro_batch), each element moving its cast bytes
    at the cast kernels' share of HBM bandwidth (`activation_bytes_per_cast`, weights `full_bandwidth_bytes_per_cast`). `v` reads the phase's
    per-device values."""
    t = (v("cast_elements") * rates.activation_bytes_per_cast
         + v("sp_gather_cast_elements") * rates.sp_gather_extra_bytes
         + v("sp_gather_input_cast_elements") * (rates.sp_gather_input_extra_bytes - rates.sp_gather_extra_bytes)
         ) * load / hbm
    return t + phase_weight_cast_s(rates, hbm, phase, v, expert_shards) * rates.weight_casts_per_micro_batch \
        if weights else t


def phase_weight_cast_s(rates: CastRates, hbm: float, phase: Phase, v: Any, expert_shards: Any) -> Any:
    """Seconds of casting the phase's weights, once per optimizer step (TE caches the quantised weights for
    the step's micro-batches: MLM transformer_engine.py:1338); a routed phase casts only the device's
    1/(EP·ETP) of the experts. The step time adds it once (timing.py: per-step fixed costs)."""
    weights = v("params") / (expert_shards if phase.param_bucket == "routed" else 1)
    return weights * rates.full_bandwidth_bytes_per_cast / hbm


def gather_share(rates: Optional[CastRates], phase: Phase, sixteen_bit_bytes: float) -> float:
    """Bytes a sequence-parallel all-gather of a low-precision phase moves per 16-bit byte: TransformerEngine
    quantises before it gathers, so the column-parallel input (forward, and again for wgrad) and the
    row-parallel output gradient (backward) cross the TP group as q + scale/block bytes per element, not 2
    (TE @ d0067d0 pytorch/module/layernorm_linear.py:293-312 and linear.py:993-997 gather_along_first_dim(...,
    quantizer=...); module/base.py:1719-1751 grad_output_preprocess; pytorch/distributed.py:1668-1790 gathers
    FP8, MXFP8 and NVFP4 data). The reduce-scatters (forward output, backward input gradient) stay 16-bit.
    1 for 16-bit training and for phases that are not TE linears."""
    if rates is None or not phase.low_precision:
        return 1.0
    return rates.recipe.bytes_per_element / sixteen_bit_bytes


def phase_precision(problem: Problem, phase: Phase, quantised: bool = True) -> str:
    """The precision a phase's GEMMs run in: the recipe for low-precision phases, the FP8 attention kernel's
    (fp8 or mxfp8) for the attention core under --fp8-attention, else the 16-bit dtype; `quantised` False: a layer
    kept out of the recipe (feature `bf16_layer`), all 16-bit."""
    run = problem.run
    if run.recipe.low and phase.low_precision and quantised:
        return run.precision
    if run.fp8_attention and phase.core and run.attention == "flash" and quantised:
        return run.recipe.fp8_attention_kernel
    return "fp16" if run.precision == "fp16" else "bf16"


def weight_cache_bytes(problem: Problem, low_precision_params: Any) -> Any:
    """Bytes of the quantised weight copies a device keeps for `low_precision_params` parameters; with
    --fp8-param-gather the first copy replaces the 16-bit weight (negative share: 2 B per parameter
    fewer in the weights)."""
    rates = cast_rates(problem)
    if rates is None:
        return 0
    saved = SIXTEEN_BIT_BYTES if problem.run.low_precision_param_gather else 0
    return low_precision_params * (rates.cache_bytes_per_param - saved)


def param_gather_factor(problem: Problem) -> float:
    """The distributed optimizer's parameter all-gather moves q / 2 of its 16-bit volume with
    --fp8-param-gather (Megatron all-gathers the FP8 / FP4 parameters: arguments.py --fp8-param-gather)."""
    r = problem.run.recipe
    return r.bytes_per_element / SIXTEEN_BIT_BYTES if problem.run.low_precision_param_gather and r.low else 1.0
