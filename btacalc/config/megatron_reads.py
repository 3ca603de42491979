"""Which Megatron-LM destinations btacalc reads anywhere: the row codec (megatron_codec.decode, whose `Get.read`
records what it reads), the argument rules (megatron_rules.RULES) or imported_run's checks, under any setting of the
others that a probe reaches (`read_anywhere`). An interpolation in a Megatron-Bridge key is refused where btacalc
reads its destination (bridge_run._read_by_btacalc) and listed as ignored elsewhere, as the key is (fu23)."""

from __future__ import annotations

import functools
from typing import Any

from .megatron_codec import ROWS
from .megatron_launch import argparse_choices, flags_by_dest
from .megatron_rows import Get
from .megatron_rules import RULES
from .megatron_run import DIVISORS, LAUNCH_CHECKED, MODEL_SIZES, POSITIVE_SIZES

# The settings the probes start from (`read_anywhere`): a small dense model as a launch gives one (a row that lacks
# the heads or the hidden size refuses before it reads what depends on them) and an MoE model with multi-latent
# attention (each probe changes one destination; these open the reads under two settings together)
_DENSE: dict[str, Any] = {
    "num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "seq_length": 512, "max_position_embeddings": 512,
    "micro_batch_size": 1, "global_batch_size": 8, "bf16": True, "vocab_size": 32000, "world": 8}
_BASES: tuple[dict[str, Any], ...] = (
    _DENSE, {**_DENSE, "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 256,
             "multi_latent_attention": True, "kv_lora_rank": 64, "qk_head_dim": 32, "qk_pos_emb_head_dim": 16,
             "v_head_dim": 32})


class _Recorded(dict[str, Any]):
    """A rule's argument mapping that records the destinations it looks at."""

    def __init__(self, args: dict[str, Any], read: set[str]):
        super().__init__(args)
        self.read = read

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: Any) -> bool:
        self.read.add(key)
        return super().__contains__(key)


def _reads(args: dict[str, Any]) -> set[str]:
    """The destinations the rows and the rules read of `args`. A probe's value may be one a row or a rule refuses:
    what it read before the refusal stands, and the rest of the rows and rules are still asked. A rule's `holds` is
    asked even where it does not apply (its reads are reads under the settings where it applies)."""
    get = Get(args)
    for row in ROWS:
        try:
            row.decode(get)
        except Exception:  # noqa: BLE001 - a probe: only what it read counts
            pass
    read = set(get.read)
    recorded = _Recorded(args, read)
    for rule in RULES:
        for part in (rule.applies, rule.holds):
            try:
                part(recorded, {})
            except Exception:  # noqa: BLE001 - as above
                pass
    return read


def _probes(dest: str) -> list[Any]:
    """The values a probe sets `dest` to: both senses of a switch, each of its choices, else a small number, 0 and a
    word (a gate such as --num-virtual-stages-per-pipeline-rank opens at 2); a destination with no Megatron-LM flag
    (a Bridge field the rows read, such as MLA's YaRN betas) as a value."""
    flags = flags_by_dest().get(dest)
    if flags and flags[0].arity == "0":
        return [True, False]
    choices = argparse_choices().get(dest)
    return list(choices[0]) if choices else [2, 0, "x"]


@functools.lru_cache(maxsize=1)
def read_anywhere() -> frozenset[str]:
    """The destinations btacalc reads (and megatron_run.imported_run's checks, LAUNCH_CHECKED), under each of
    `_BASES` or a setting probes reach from one: each destination read is set to each of its `_probes`, and a probe
    that opens new reads is a setting whose new destinations are probed in turn (a gate behind a gate: MLA's RoPE,
    then its YaRN factor, then the betas). It errs towards "read" as far as the probes reach, and no further: a
    destination read only under two settings that neither a base holds nor one opens the other's reads would be
    missed (none is known); a probe's refused value leaves out no read (see `_reads`)."""
    read: set[str] = set()
    for base in _BASES:
        seen = _reads(base)
        todo: list[tuple[dict[str, Any], set[str]]] = [(base, set(seen))]
        while todo:
            state, dests = todo.pop()
            for dest in sorted(dests - {"world"}):
                for value in _probes(dest):
                    probe = {**state, dest: value}
                    new = _reads(probe) - seen
                    if new:
                        seen |= new
                        todo.append((probe, new))
        read |= seen
    return frozenset((read - {"world"}) | LAUNCH_CHECKED | {*DIVISORS, *POSITIVE_SIZES, *MODEL_SIZES})
