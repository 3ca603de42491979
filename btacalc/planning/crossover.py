"""`btacalc crossover`: scale a model family and find, per device, where its memory regime changes.

Family `qwen3-moe` (one free variable, the hidden size h, a multiple of 256):
    L = 3h/128 layers, a = h/64 query heads of d_h = 128, a_kv = 4, f = 3h/8, E = 128, k = 8,
    V = 151,936, q/k RMSNorm, untied embeddings.
The rule goes through both published members' shapes: h = 2048 gives Qwen3-30B-A3B exactly
(L = 48, a = 32, f = 768; https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json) and
h = 4096 gives L = 96, a = 64, f = 1536, two layers more than Qwen3-235B-A22B's 94
(https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json). Total parameters grow as about
3.5·h³ + 2·V·h: 0.1 B at h = 256, 0.6 B at h = 512, 1.3 T at h = 7168.

Regimes per device:
- wafer: `resident` (all training state on the wafer, 16 B/param + activations), `weight_streaming`
  (weights and optimizer in MemoryX, activations on the wafer), or `does not fit` (one sequence's
  activations exceed SRAM, or the state exceeds the profile's MemoryX capacity);
- GPU: the smallest power-of-two device count whose per-device shard fits (EP = gcd(N, E), ZeRO-1).
A boundary is reported between the two family members on either side of a regime change.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from pydantic import BaseModel, Field

from ..config.execution import ExecutionRequest
from ..config.hardware import HardwareProfile
from ..config.model import ModelSpec, validate_model
from ..config.presets import load_preset
from ..errors import BtacalcError
from .compare import CompareRequest, CompareRow, compare

FAMILIES = ("qwen3-moe",)
# The family's member at h = 2048 is Qwen3-30B-A3B: what the rule does not scale with h (the key-value heads, the
# head width, the vocabulary, the experts and their top-k, the q/k norm, the positions) is its preset's
# (data/presets/qwen3-30b-a3b.toml, from its config.json), not numbers written again here
ANCHOR = "qwen3-30b-a3b"
ANCHOR_FIELDS = ("num_kv_heads", "head_dim", "vocab_size", "num_experts", "top_k", "qk_norm", "max_position_embeddings")
DEFAULT_HIDDEN = tuple(range(256, 7168 + 1, 256))
# At most this many family members per run: each is a full comparison (about 0.1 s per device), so
# 1,024 members on four devices take minutes; the default scan has 28.
MAX_HIDDEN_SIZES = 1024
# The widest member: 2.5x the widest published dense model (GPT-1T, h = 25,600: Narayanan et al. 2021);
# the family then has 1,536 layers and about 75 T parameters.
MAX_HIDDEN = 65536


def check_family(family: str, hidden_sizes: Sequence[int]) -> None:
    """Every input of a crossover, checked before any work."""
    if family not in FAMILIES:
        raise BtacalcError(f"{{family}}: unknown model family {family!r} (known: {', '.join(FAMILIES)})")
    if not hidden_sizes:
        raise BtacalcError("{hidden}: give at least one size")
    if len(set(hidden_sizes)) > MAX_HIDDEN_SIZES:
        raise BtacalcError(f"{{hidden}}: {len(set(hidden_sizes)):,} sizes, more than {MAX_HIDDEN_SIZES:,} per run; "
                           "use a coarser step")
    for hidden in hidden_sizes:
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 256 or hidden % 256:
            raise BtacalcError(f"{{hidden}} {hidden}: the qwen3-moe family needs a multiple of 256 "
                               "(a = h/64 divisible by a_kv = 4)")
        if hidden > MAX_HIDDEN:
            raise BtacalcError(f"{{hidden}} {hidden}: at most {MAX_HIDDEN:,} (2.5x the widest published model, "
                               "GPT-1T's 25,600)")


def family_model(family: str, hidden: int) -> ModelSpec:
    """The family's member of hidden size `hidden`: the rule's widths (module docstring), the rest the anchor's."""
    check_family(family, [hidden])
    anchor = load_preset(ANCHOR)
    return validate_model({
        "name": f"qwen3-moe-h{hidden}",
        "source": f"btacalc family rule (crossover.py): L = 3h/128, a = h/64, d_h = {anchor.head_dim}, "
                  f"a_kv = {anchor.num_kv_heads}, f = 3h/8, E = {anchor.num_experts}, k = {anchor.top_k}",
        "hidden_size": hidden, "num_layers": 3 * hidden // 128, "num_heads": hidden // 64, "ffn_size": 3 * hidden // 8,
        **{field: getattr(anchor, field) for field in ANCHOR_FIELDS},
    }, origin=f"family {family}")


class CrossoverPoint(BaseModel):
    model: str
    hidden_size: int
    params_total: int
    hardware: str
    regime: str = Field(description="wafer: resident | weight_streaming | does_not_fit; GPU: 'N devices' | does_not_fit")
    row: CompareRow


class Boundary(BaseModel):
    hardware: str
    from_regime: str
    to_regime: str
    below_params: int = Field(description="largest family member still in from_regime")
    above_params: int = Field(description="smallest family member in to_regime")


class CrossoverResult(BaseModel):
    family: str
    seq_len: int
    points: list[CrossoverPoint]
    boundaries: list[Boundary]
    best_per_kw: dict[str, str] = Field(description="model -> device with the most tokens/s per kW")
    gpu_equivalents: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="model -> {'wafer/gpu': GPUs whose tokens/s (per GPU, at the GPU's "
        "smallest fitting cluster) match one wafer system}")


def _regime(row: CompareRow, profile: HardwareProfile) -> str:
    if not row.fits:
        return "does_not_fit"
    if profile.family == "wse":
        return row.memory_model
    return f"{row.devices} devices" if row.devices > 1 else "1 device"


def crossover(profiles: Sequence[HardwareProfile], family: str = "qwen3-moe",
              hidden_sizes: Sequence[int] = DEFAULT_HIDDEN, seq_len: Optional[int] = None,
              progress: Optional[Callable[[int], None]] = None, search: bool = False) -> CrossoverResult:
    """Scale the family over `hidden_sizes`; with `search`, each GPU point runs the fastest layout that
    fits on its smallest fitting power-of-two device count (see the module docstring). `progress(n)`, if
    given, is called as rows are done (one row per size and profile)."""
    check_family(family, hidden_sizes)
    points: list[CrossoverPoint] = []
    seq = 0
    for h in sorted(set(hidden_sizes)):
        model = family_model(family, h)
        result = compare(model, profiles, CompareRequest(run=ExecutionRequest(seq_len=seq_len), search=search),
                         progress=progress)
        seq = result.seq_len
        for profile, row in zip(profiles, result.rows):
            points.append(CrossoverPoint(model=model.name, hidden_size=h, params_total=result.params_total,
                                         hardware=profile.name, regime=_regime(row, profile), row=row))
    boundaries = []
    for profile in profiles:
        mine = [p for p in points if p.hardware == profile.name]
        for a, b in zip(mine, mine[1:]):
            if a.regime != b.regime:
                boundaries.append(Boundary(hardware=profile.name, from_regime=a.regime, to_regime=b.regime,
                                           below_params=a.params_total, above_params=b.params_total))
    best: dict[str, str] = {}
    for h in sorted(set(hidden_sizes)):
        cands = [p for p in points if p.hidden_size == h and p.row.tokens_per_s_per_kw]
        if cands:
            top = max(cands, key=lambda p: p.row.tokens_per_s_per_kw or 0.0)
            best[top.model] = top.hardware
    equiv: dict[str, dict[str, float]] = {}
    wafers = {p.name for p in profiles if p.family == "wse"}
    for h in sorted(set(hidden_sizes)):
        mine = [p for p in points if p.hidden_size == h]
        for w in (p for p in mine if p.hardware in wafers):
            for g in (p for p in mine if p.hardware not in wafers):
                if w.row.tokens_per_s and g.row.tokens_per_s_per_device:
                    equiv.setdefault(w.model, {})[f"{w.hardware}/{g.hardware}"] = \
                        w.row.tokens_per_s / g.row.tokens_per_s_per_device
    return CrossoverResult(family=family, seq_len=seq, points=points, boundaries=boundaries, best_per_kw=best,
                           gpu_equivalents=equiv)
