"""Training precisions (``--precision``): the recipes of btacalc/data/precision.toml as validated data,
and the checks that a recipe can run on a device.

A recipe says which dense peak the linear layers' GEMMs run at (the catalogue's ``low_precision``
phases: TransformerEngine ``te.Linear`` / ``GroupedLinear``; every other phase stays 16-bit) and what
quantising their operands costs. The arithmetic lives in `btacalc.model.gpu.precision`; this module
only holds the data:

- bytes written per quantised element and copy: ``element_bytes + scale_bytes / block_elements``
  (MXFP8: 1 + 1/32 B; NVFP4: 0.5 + 1/16 B; per-tensor scaling: ``element_bytes``, one FP32 scale per
  tensor being negligible);
- copies written: 2 where dgrad/wgrad need a columnwise operand TE cannot read from the rowwise one
  (block scales always; per-tensor scales where FP8 GEMMs are TN-only: below 10.0 and 12.x, `non_tn_fp8_gemms`),
  else 1;
- ``amax_passes`` extra reads of the 16-bit tensor before the cast (current scaling, NVFP4);
- ``sp_gather``: how TE gets the columnwise copy of an operand it all-gathers along the sequence (sequence
  parallelism: the column-parallel input, the row-parallel output gradient): "transpose_where_tn_only" (per-tensor FP8:
  the local cast writes the rowwise copy only, and where FP8 GEMMs are TN-only a transpose of the *gathered* tensor
  reads and writes its q bytes), "reorder" (1D block scales, NVFP4: both copies cast locally and gathered, then the
  gathered columnwise copy is re-interleaved, its data and, with ``sp_gather_reorders_scales``, its scales read and
  written once), "gathered" (MXFP8: both copies cast locally and gathered as they are), "none" (16-bit);
- ``rht_cast_fusion_since_te``: NVFP4 writes the columnwise copy of activations and gradients through a 16x16
  random Hadamard transform; TransformerEngine from this version writes it in the same kernel as the rowwise copy,
  older versions run one kernel per copy (each re-reading the 16-bit tensor). Empty: no Hadamard transform.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BtacalcError
from .attention_kernels import DEFAULT_ATTENTION_KERNEL, attention_kernel
from .named_tables import load_named_tables, pick
from .te_release import te_release_key  # TE's version order, one reading (review13: two parsers disagreed)

if TYPE_CHECKING:
    from .hardware import HardwareProfile
    from .te_release import TeBehaviour


PRECISION_FILE = "precision.toml"
DEFAULT_PRECISION = "bf16"
SIXTEEN_BIT_BYTES = 2  # the 16-bit tensors a cast kernel reads (bf16 / fp16)


# The compute capabilities whose FP8 GEMMs take non-TN layouts, so a per-tensor FP8 tensor needs no transposed copy
# (TE @ d0067d0 transformer_engine/pytorch/utils.py L658-663 is_non_tn_fp8_gemm_supported:
# `(10, 0) <= device_capability < (12, 0) or device_capability >= (13, 0)`): 10.x-11.x and 13.0 on; 12.x (consumer
# and workstation Blackwell, sm_120) is TN-only, as Hopper is (review14: the rule was `>= 10.0`)
NON_TN_FP8_CC_RANGES: tuple[tuple[float, float], ...] = ((10.0, 12.0), (13.0, float("inf")))
NON_TN_FP8_CC_TEXT = "10.x-11.x, 13.0 on"


def non_tn_fp8_gemms(compute_capability: float) -> bool:
    """Whether FP8 GEMMs take non-TN layouts on a chip of `compute_capability` (NON_TN_FP8_CC_RANGES, TE's rule)."""
    return any(low <= compute_capability < high for low, high in NON_TN_FP8_CC_RANGES)


class Recipe(BaseModel):
    """One training precision, with its TransformerEngine recipe and Megatron flags (see precision.toml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    te_recipe: str
    gemm_peak: Literal["bf16", "fp8", "fp4"]
    # the GEMM kernel whose measured ceiling applies (precision.toml `gemm_ceiling`); None: the gemm_peak dtype's
    gemm_ceiling: Optional[Literal["mxfp8", "fp8_block"]] = None
    # the kernel TE runs instead from compute capability 10.0 on (precision.toml `gemm_ceiling_from_cc10`)
    gemm_ceiling_from_cc10: Optional[Literal["mxfp8"]] = None
    gemm_ceiling_source: str = ""  # the TE code that says which GEMM kernel the recipe calls
    element_bytes: float = Field(gt=0, le=2)
    block_elements: int = Field(ge=0)
    scale_bytes: float = Field(ge=0)
    columnwise: Literal["none", "transpose_where_tn_only", "always"]
    amax_passes: int = Field(ge=0)
    min_compute_capability: float = Field(ge=0)
    megatron: tuple[str, ...]
    param_gather_flag: str
    bridge_param_gather: bool  # Megatron-Bridge's recipe keeps the parameters in the low precision (precision.toml)
    grouped_quantize_kernels_per_expert: int = Field(ge=0)  # TE GroupedLinear's per-expert quantise launches
    # TE GroupedLinear's Python per local expert that the recipe's quantizers add to the 16-bit path's
    # (formulas/constants.toml grouped_linear_expert_*_ref_ops), reference ops per grouped linear (precision.toml)
    grouped_linear_expert_quantizer_forward_ref_ops: float = Field(0.0, ge=0)
    grouped_linear_expert_quantizer_backward_ref_ops: float = Field(0.0, ge=0)
    grouped_linear_expert_quantizer_source: str = ""
    # the TE version whose activation/gradient cast writes the rowwise and the Hadamard-transformed columnwise copy
    # in one kernel (precision.toml); "": the recipe applies no Hadamard transform
    # the columnwise copy of a sequence-parallel all-gathered operand (precision.toml `sp_gather`, `sp_gather_pass`)
    sp_gather: Literal["none", "gathered", "transpose_where_tn_only", "reorder"] = "none"
    sp_gather_reorders_scales: bool = False
    sp_gather_source: str = ""
    rht_cast_fusion_since_te: str = ""
    rht_cast_fusion_source: str = ""  # the TE code that says which versions fuse the two casts
    # the first TE with which Megatron-Core has the attention output projection save its 16-bit input instead of a
    # quantised copy (save_original_input, precision.toml); "": never under this recipe (delayed scaling)
    proj_saves_original_input_since_te: str = ""
    proj_saves_original_input_source: str = ""
    # the first TE that runs the recipe at all (precision.toml `since_te`: Megatron-Core builds the TE recipe from it
    # on, plan --te-version refuses an older one); "": every release btacalc knows
    since_te: str = ""
    since_te_source: str = ""
    # --fp8-attention (precision.toml): the cuDNN FP8 attention kernel TE runs under the recipe ("": none, refused),
    # the oldest architecture it runs on, the quantised copies of Q, K, V and dO, and whether O and dQ, dK, dV come
    # out in FP8 (TE then dequantizes them)
    fp8_attention_kernel: Literal["", "fp8", "mxfp8"] = ""
    fp8_attention_min_compute_capability: float = Field(0.0, ge=0)
    fp8_attention_copies: int = Field(0, ge=0, le=2)
    fp8_attention_fp8_outputs: bool = False
    fp8_attention_source: str = ""
    source: str = Field(min_length=3)
    note: str = ""

    @property
    def low(self) -> bool:
        """The linear layers run below 16 bits (anything quantised at all)."""
        return self.gemm_peak != "bf16"

    def ceiling_kernel(self, compute_capability: float) -> str:
        """The key of the measured GEMM ceiling the recipe's linear-layer GEMMs run at on a chip of
        `compute_capability` (model/gpu/rates.py `matmul_ceiling`): the kernel TE runs instead from 10.0 on where
        precision.toml names one (fp8-blockwise: emulated with MXFP8 GEMMs), else its own kernel's where it names one
        (MXFP8's block-scaled GEMM, Hopper's 1x128 / 128x128 block-scaled one), else its peak's dtype."""
        if self.gemm_ceiling_from_cc10 and compute_capability >= 10.0:
            return self.gemm_ceiling_from_cc10
        return self.gemm_ceiling or self.gemm_peak

    @property
    def bytes_per_element(self) -> float:
        """Bytes one quantised element occupies with its share of the block scale."""
        share = self.scale_bytes / self.block_elements if self.block_elements else 0.0
        return self.element_bytes + share

    def activation_cast_kernels(self, copies: int, rht_cast_fusion: bool) -> int:
        """Kernels that cast one activation or gradient tensor into its `copies` quantised copies (each reads the
        16-bit tensor once): one, unless the recipe's columnwise copy goes through the Hadamard transform and the
        TransformerEngine in use writes it in a kernel of its own (`rht_cast_fusion` False)."""
        return copies if self.rht_cast_fusion_since_te and not rht_cast_fusion and copies > 1 else 1

    def rht_cast_fused_in(self, te_version: str) -> bool:
        """Whether TransformerEngine `te_version` (e.g. "2.8.0+7cde9a33", "2.14+71bbefb") casts the rowwise and
        the Hadamard-transformed columnwise copy in one kernel (`rht_cast_fusion_since_te`); True for a recipe
        without the transform."""
        if not self.rht_cast_fusion_since_te:
            return True
        return te_release_key(te_version) >= te_release_key(self.rht_cast_fusion_since_te)

    def sp_gather_pass(self, compute_capability: float, te: Optional["TeBehaviour"] = None,
                       gathered_transpose: bool = False) -> tuple[int, float]:
        """(copies the local cast writes, bytes the pass over the gathered tensor reads and writes per gathered
        element) for an operand TE all-gathers along the sequence before its GEMMs (`sp_gather`), under TE `te`
        (None: the pinned TE). `gathered_transpose`: that TE transposes this operand's gathered tensor even where
        FP8 GEMMs take non-TN layouts (te_releases.toml: TE 2.x before a guard, per operand path)."""
        copies = self.copies(compute_capability, te)
        if self.sp_gather == "transpose_where_tn_only" and (copies == 2 or gathered_transpose):
            return 1, 2 * self.element_bytes
        if self.sp_gather == "reorder":
            return copies, 2 * (self.bytes_per_element if self.sp_gather_reorders_scales else self.element_bytes)
        return copies, 0.0

    @property
    def follows_te_release(self) -> bool:
        """Whether the TransformerEngine release changes this recipe's casts: per-tensor FP8, whose transposes
        te_releases.toml gives by release (the one reading of it: --te-version, measured runs' containers, the
        run-options line and --emit's note all ask this)."""
        return self.columnwise == "transpose_where_tn_only"

    def follows_te_release_on(self, compute_capability: float) -> bool:
        """Whether the TE release changes this recipe's casts on a chip of `compute_capability`: per-tensor FP8
        where FP8 GEMMs take non-TN layouts (non_tn_fp8_gemms: 10.x-11.x, 13.0 on). Elsewhere (Hopper, 12.x) they are
        TN-only (TE @ d0067d0 pytorch/utils.py L658-663, is_non_tn_fp8_gemm_supported), so every release writes the
        transposes (`copies`: 2 whatever the TE)."""
        return self.follows_te_release and non_tn_fp8_gemms(compute_capability)

    @property
    def te_release_decides(self) -> bool:
        """Whether the TransformerEngine release changes anything this recipe does on some GPU: per-tensor FP8's
        transposes (`follows_te_release`), or whether the attention output projection keeps its own quantised copy of
        O (`proj_saves_original_input_since_te`: Megatron-Core sets save_original_input from that TE on)."""
        return self.follows_te_release or bool(self.proj_saves_original_input_since_te)

    def te_release_decides_on(self, compute_capability: float) -> bool:
        """`te_release_decides` on a chip of `compute_capability`: the projection's copy on every GPU, per-tensor FP8's
        transposes only where FP8 GEMMs take non-TN layouts (`follows_te_release_on`)."""
        return self.follows_te_release_on(compute_capability) or bool(self.proj_saves_original_input_since_te)

    def copies(self, compute_capability: float, te: Optional["TeBehaviour"] = None) -> int:
        """Quantised copies of a tensor that both a rowwise and a columnwise GEMM operand read, under TE `te` (None:
        the pinned TE): per-tensor FP8 writes a transpose where FP8 GEMMs are TN-only (`non_tn_fp8_gemms`), and on any chip under a TE
        whose cast always writes it (TE 1.x: te_releases.toml cast_transpose_guarded_since)."""
        if self.columnwise == "always":
            return 2
        if self.columnwise == "transpose_where_tn_only":
            return 2 if not non_tn_fp8_gemms(compute_capability) or (te is not None and te.cast_transposes) else 1
        return 0


@functools.lru_cache(maxsize=1)
def recipes() -> dict[str, Recipe]:
    return load_named_tables(PRECISION_FILE, "recipe", Recipe)


def recipe(name: str) -> Recipe:
    return pick(recipes(), name, "precision")


def check_precision(name: str, profile: "HardwareProfile", param_gather: bool, rht_cast_fusion: bool = True) -> Recipe:
    """The recipe `name`, after checking `profile` has its peak and architecture and that the recipe-dependent run
    options asked for (`param_gather`; `rht_cast_fusion` False) are the recipe's (precision.toml
    `param_gather_flag`, `rht_cast_fusion_since_te`): one-line errors."""
    r = recipe(name)
    chip = profile.chip
    if r.low and profile.family != "gpu":
        raise BtacalcError(f"{{precision}} {name}: {profile.name} is a wafer-scale profile (16-bit training only)")
    peak = {"fp8": chip.peak_fp8_flops_per_s, "fp4": chip.peak_fp4_flops_per_s}.get(r.gemm_peak)
    if r.low and peak is None:
        raise BtacalcError(f"{{precision}} {name} runs its GEMMs at the {r.gemm_peak.upper()} peak, which "
                           f"{profile.name} does not have (chip.peak_{r.gemm_peak}_flops_per_s): train in bf16, "
                           "or on a profile that has it (btacalc hw list)")
    cc = chip.capability
    if r.low and cc < r.min_compute_capability:
        raise BtacalcError(f"{{precision}} {name} needs compute capability {r.min_compute_capability:g} or later; "
                           f"{_has_capability(profile)}")
    if param_gather and not r.param_gather_flag:
        raise BtacalcError(f"{{fp8_param_gather}} keeps the parameters in FP8/FP4 and needs a low {{precision}} "
                           f"(fp8, fp8-current, fp8-blockwise, mxfp8, nvfp4), got {name}")
    # a wafer-scale profile refuses the option as a GPU kernel option (config/resolution.py _GPU_ONLY)
    if not rht_cast_fusion and not r.rht_cast_fusion_since_te and profile.family == "gpu":
        able = ", ".join(n for n, x in recipes().items() if x.rht_cast_fusion_since_te)
        raise BtacalcError(f"{{rht_cast_fusion}} splits the Hadamard-transformed cast of a {{precision}} that has one "
                           f"({able}) into its own kernel, got {name}")
    return r


def _has_capability(profile: "HardwareProfile") -> str:
    """hostile33: a GPU profile without chip.compute_capability was said to "have 0"."""
    if profile.chip.compute_capability is None:
        return f"{profile.name} states no chip.compute_capability (give it in the profile)"
    return f"{profile.name} has {profile.chip.capability:g}"


def check_fp8_attention(name: str, profile: "HardwareProfile", attention: str, kernel: Optional[str] = None) -> Recipe:
    """The recipe `name` after checking that TransformerEngine runs FP8 fused attention under it on `profile`
    (precision.toml fp8_attention_*) with FlashAttention-style fused attention (FP8 DPA runs only in TE's
    FusedAttention backend: TE @ d0067d0 common/recipe/__init__.py L222-227), and that the attention `kernel`
    (None: the default) has a rate for that FP8 kernel there (attention_kernels.toml: no published rate, no plan);
    one-line errors."""
    r = recipe(name)
    if not r.fp8_attention_kernel:
        able = ", ".join(n for n, x in recipes().items() if x.fp8_attention_kernel)
        raise BtacalcError(f"{{fp8_attention}} runs the attention core in FP8 and needs a {{precision}} whose "
                           f"TransformerEngine recipe has FP8 fused attention ({able}), got {name}")
    chip = profile.chip
    cc = chip.capability
    if cc < r.fp8_attention_min_compute_capability:
        raise BtacalcError(f"{{fp8_attention}} under {name}: TransformerEngine's FP8 fused attention with this recipe "
                           f"needs compute capability {r.fp8_attention_min_compute_capability:g} or later; "
                           f"{_has_capability(profile)}")
    if attention != "flash":
        raise BtacalcError("{fp8_attention} runs TransformerEngine's fused attention kernel: it needs "
                           "{attention} flash")
    rates = attention_kernel(kernel or DEFAULT_ATTENTION_KERNEL)
    if rates.fraction_of_peak(chip.compute_capability.value if chip.compute_capability else None, None,
                              r.fp8_attention_kernel) is None:
        raise BtacalcError(f"{{fp8_attention}}: no published rate of the {{attention_kernel}} {rates.name}'s "
                           f"{r.fp8_attention_kernel} kernel on {profile.name} (btacalc/data/attention_kernels.toml)")
    return r
