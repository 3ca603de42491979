"""Pipeline stages as Megatron-LM builds them: which decoder layers, and where the embedding, the loss
and the multi-token-prediction (MTP) layers sit, on each pipeline stage and each virtual chunk.

Megatron numbers the PP·VP model chunks in schedule order: model chunk i is virtual chunk i // PP of
stage i % PP (stage p, virtual chunk v hold model chunk v·PP + p), and the decoder layers fill the model
chunks in that order, each chunk a contiguous run (every rule below only sets how many layers each model
chunk holds; the offsets are the running sums). Sources, Megatron-LM @ d98e8a64ddf3 (2026-08-22):

- default: L divides over PP stages and then over VP chunks, so every model chunk holds L/(PP·VP)
  (megatron/core/transformer/transformer_block.py:147-186 get_num_layers_to_build; offsets
  transformer_layer.py:179-216 get_transformer_layer_offset); Megatron refuses any other L
  (training/arguments.py:985-1001).
- --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: the embedding (the
  loss) counts as one layer of the first (last) model chunk, so L + e + l divides over PP·VP chunks and
  that chunk builds one decoder layer fewer (transformer_block.py:148-159 and 188-200;
  transformer_layer.py:180-216; transformer_config.py:2370-2416).
- --decoder-first-pipeline-num-layers F / --decoder-last-pipeline-num-layers K: the first (last) stage
  holds F (K) layers, F/VP per virtual chunk; the other stages share the rest evenly, (L - F - K)/(PP - 2)
  each, again /VP per chunk (transformer_block.py:103-146; transformer_layer.py:80-178). Megatron checks F, K
  > 0 and multiples of VP, the middle layers a multiple of the middle stages and of VP per stage, middle
  layers if and only if middle stages (transformer_config.py:2294-2368), and refuses it with the account-for
  flags or a layout (transformer_config.py:2229-2260) and with PP = 1 (arguments.py:800-836).
- --pipeline-model-parallel-layout: one string, `|` between model chunks (pipeline_parallel_layer_layout.py
  parse_str_to_list: commas dropped, `(...)*n` then `x*n` unrolled; E embedding, L loss, t decoder layer,
  m MTP layer), PP·VP chunks (VP = chunks / PP, __init__ and arguments.py:941-952); validate_layer_layout:
  E first and L last, once each, exactly L decoder layers, the MTP layers after every decoder layer, all in
  the last virtual chunk of one stage.
- MTP without a layout: on the last stage (transformer/multi_token_prediction.py:788-828 mtp_on_this_rank).
The embedding is built on stage 0's first chunk and the loss on the last stage's last chunk
(pre_process / post_process), so btacalc asks a layout to put E and L there.

When the user gives none of these and PP·VP does not divide L, btacalc picks (the reason is shown with
the plan's defaults): the account-for split of both ends when L + 2 divides into chunks of at least 2;
else Megatron's first/last form, the middle stages at the smallest even share that leaves the last stage
lighter (Megatron-Bridge's DeepSeek-V3 recipes: 16/16/16/13 at PP 4, 8·7 + 5 at PP 8); else (VP not
dividing L, which the first/last form needs) a layout string: L + 2 units (E and L one each, Megatron's
account-for convention) spread over the stages as evenly as whole units allow, the larger shares first,
then each stage's layers over its virtual chunks the same way, the larger shares last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

from ..errors import BtacalcError

MEGATRON_LAYOUT = "Megatron-LM @ d98e8a64ddf3"
_UNROLL = (re.compile(r"\(([^)]+)\)\*(\d+)"), re.compile(r"(.)\*(\d+)"))
_SYMBOLS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
# No layout string needs more characters once unrolled than a model has layers; the cap keeps a typo
# such as t*99999999 from exhausting memory.
MAX_LAYOUT_CHARS = 1 << 20


@dataclass(frozen=True)
class StageSplit:
    """How the user splits the layers over the pipeline (Megatron-LM's options); all unset: Megatron's
    default even split, or btacalc's pick when that is impossible (module docstring)."""

    first_stage_layers: Optional[int] = None  # --decoder-first-pipeline-num-layers
    last_stage_layers: Optional[int] = None  # --decoder-last-pipeline-num-layers
    pipeline_layout: Optional[str] = None  # --pipeline-model-parallel-layout
    account_for_embedding: bool = False  # --account-for-embedding-in-pipeline-split
    account_for_loss: bool = False  # --account-for-loss-in-pipeline-split

    @property
    def given(self) -> bool:
        return (self.first_stage_layers is not None or self.last_stage_layers is not None
                or self.pipeline_layout is not None or self.account_for_embedding or self.account_for_loss)


@dataclass(frozen=True)
class Chunk:
    """One model chunk: its decoder layers [start, start + count), and the embedding, loss and MTP
    layers it holds."""

    start: int
    count: int
    embedding: bool = False
    loss: bool = False
    mtp: int = 0

    @property
    def layers(self) -> range:
        return range(self.start, self.start + self.count)


@dataclass(frozen=True)
class Placement:
    """The layers of every stage and virtual chunk of one PP x VP pipeline."""

    pp: int
    vp: int
    method: str  # even, embedding_loss (or embedding / loss), first_last, layout
    chunks: tuple[Chunk, ...]  # model-chunk order: chunk i is virtual chunk i // PP of stage i % PP
    split: StageSplit  # the Megatron options that build it

    def chunk(self, stage: int, virtual: int) -> Chunk:
        return self.chunks[virtual * self.pp + stage]

    def stage_layers(self, stage: int) -> list[int]:
        """The decoder layers of `stage`, by index."""
        return [i for v in range(self.vp) for i in self.chunk(stage, v).layers]

    def stage_mtp(self, stage: int) -> int:
        return sum(self.chunk(stage, v).mtp for v in range(self.vp))

    @property
    def layout_string(self) -> str:
        """This placement as a --pipeline-model-parallel-layout string."""
        parts = []
        for c in self.chunks:
            body = ("E" if c.embedding else "") + (f"t*{c.count}" if c.count > 1 else "t" * c.count) \
                + "m" * c.mtp + ("L" if c.loss else "")
            parts.append(body)
        return "|".join(parts)


def parse_layout(text: str) -> list[str]:
    """A layout string as one string of layer symbols per model chunk (Megatron's parse_str_to_list)."""
    flat = text.replace(",", "")
    for pattern in _UNROLL:
        try:
            flat = pattern.sub(_Unroll(len(flat)), flat)
        except (OverflowError, ValueError):  # ValueError: a repeat count beyond int's digit limit
            raise BtacalcError(f"{{pipeline_layout}} {text!r} unrolls to more than {MAX_LAYOUT_CHARS} symbols") from None
    bad = sorted(set(flat) - set(_SYMBOLS) - {"|"})
    if bad:
        raise BtacalcError(f"{{pipeline_layout}} {text!r}: unknown symbol(s) {''.join(bad)!r} (E embedding, L loss, "
                           "t decoder layer, m MTP layer, | between chunks, (...)*n and x*n repeat)")
    return flat.split("|")


class _Unroll:
    """One `x*n` / `(...)*n` substitution, refusing (OverflowError) to grow the string past the cap."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, match: "re.Match[str]") -> str:
        body, n = match.group(1), int(match.group(2))
        self.size += len(body) * n - len(match.group(0))
        if self.size > MAX_LAYOUT_CHARS:
            raise OverflowError(self.size)
        return body * n


def place(num_layers: int, pp: int, vp: int, split: StageSplit = StageSplit(), mtp: int = 0) -> Placement:
    """The placement Megatron builds for these options (btacalc's pick when none is given and the even
    split is impossible), or a one-line BtacalcError naming the option that Megatron would refuse."""
    return _place(num_layers, pp, vp, split, mtp)


@lru_cache(maxsize=4096)
def _place(num_layers: int, pp: int, vp: int, split: StageSplit, mtp: int) -> Placement:
    if split.pipeline_layout is not None:
        _no_mix(split)
        placement = _from_layout(num_layers, pp, vp, split, mtp)
    elif split.first_stage_layers is not None or split.last_stage_layers is not None:
        if split.account_for_embedding or split.account_for_loss:
            raise BtacalcError("{first_stage_layers}/{last_stage_layers} cannot be combined with the account-for "
                               "flags (Megatron-Core transformer_config.py refuses it)")
        placement = _from_counts(num_layers, pp, vp, split, "first_last", _first_last_counts(num_layers, pp, vp, split), mtp)
    elif split.given:
        placement = _from_counts(num_layers, pp, vp, split, _account_name(split),
                                 _account_counts(num_layers, pp, vp, split), mtp)
    else:
        placement = _default(num_layers, pp, vp, mtp)
    _check_not_empty(placement)
    return placement


def _no_mix(split: StageSplit) -> None:
    if split.first_stage_layers is not None or split.last_stage_layers is not None or split.account_for_embedding \
            or split.account_for_loss:
        raise BtacalcError("{pipeline_layout} cannot be combined with {first_stage_layers}, {last_stage_layers} or the "
                           "account-for flags (Megatron-Core transformer_config.py refuses it)")


def _account_name(split: StageSplit) -> str:
    return {(True, True): "embedding_loss", (True, False): "embedding", (False, True): "loss"}[
        (split.account_for_embedding, split.account_for_loss)]


def _even(num_layers: int, pp: int, vp: int) -> list[int]:
    chunks = pp * vp
    if num_layers % chunks:
        raise BtacalcError(f"{{pipeline_parallel}} {pp} x {{virtual_pipeline}} {vp} = {chunks} model chunks do not divide "
                           f"the {num_layers} layers (Megatron's default split); give {{first_stage_layers}}/"
                           "{last_stage_layers}, {pipeline_layout} or the account-for flags")
    return [num_layers // chunks] * chunks


def _account_counts(num_layers: int, pp: int, vp: int, split: StageSplit) -> list[int]:
    """Decoder layers per model chunk with the embedding / loss counted as one layer each."""
    e, lo = int(split.account_for_embedding), int(split.account_for_loss)
    units, chunks = num_layers + e + lo, pp * vp
    if units % chunks:
        raise BtacalcError(f"the {num_layers} layers + {e + lo} counted for the embedding/loss = {units} do not divide "
                           f"over {{pipeline_parallel}} {pp} x {{virtual_pipeline}} {vp} = {chunks} model chunks "
                           "(Megatron-Core transformer_config.py)")
    per = units // chunks
    counts = [per] * chunks
    counts[0] -= e
    counts[-1] -= lo
    if min(counts) < 0:
        raise BtacalcError(f"{{pipeline_parallel}} {pp} x {{virtual_pipeline}} {vp}: chunks of {per} layer(s) cannot hold "
                           "the embedding and the loss as layers")
    return counts


def _first_last_counts(num_layers: int, pp: int, vp: int, split: StageSplit) -> list[int]:
    """Decoder layers per model chunk with Megatron's uneven first / last stage."""
    first, last = split.first_stage_layers, split.last_stage_layers
    if pp < 2:
        raise BtacalcError("{first_stage_layers}/{last_stage_layers} need {pipeline_parallel} > 1 (Megatron-LM "
                           "arguments.py)")
    middle_layers, middle_stages = num_layers, pp
    for name, given in (("first_stage_layers", first), ("last_stage_layers", last)):
        if given is None:
            continue
        if given < 1 or given % vp:
            raise BtacalcError(f"{{{name}}} {given} must be a positive multiple of {{virtual_pipeline}} {vp} "
                               "(Megatron-Core transformer_config.py)")
        middle_layers, middle_stages = middle_layers - given, middle_stages - 1
    if middle_layers < 0:
        raise BtacalcError(f"{{first_stage_layers}}/{{last_stage_layers}} {first or 0} + {last or 0} exceed the model's "
                           f"{num_layers} layers")
    # hostile41: with one of the two given, the stages left include the last (or the first), not only middle ones
    # (review33: in both errors below)
    others = "middle stage(s)" if first is not None and last is not None else \
        f"other stage(s) (the {'last' if first is not None else 'first'} among them)"
    if bool(middle_layers) != bool(middle_stages):
        raise BtacalcError(f"{{first_stage_layers}}/{{last_stage_layers}} leave {middle_layers} layer(s) for "
                           f"{middle_stages} {others} of {{pipeline_parallel}} {pp}: a stage would be empty, or "
                           "layers would have no stage")
    per = middle_layers // middle_stages if middle_stages else 0
    if middle_stages and (middle_layers % middle_stages or per % vp):
        raise BtacalcError(f"{{first_stage_layers}}/{{last_stage_layers}} leave {middle_layers} layers, which do not "
                           f"divide over {middle_stages} {others} x {{virtual_pipeline}} {vp} chunks")
    stages = [per] * pp
    if first is not None:
        stages[0] = first
    if last is not None:
        stages[-1] = last
    return [stages[i % pp] // vp for i in range(pp * vp)]


def _from_counts(num_layers: int, pp: int, vp: int, split: StageSplit, method: str, counts: list[int],
                 mtp: int) -> Placement:
    """Chunks filled in model-chunk order; MTP on the last stage's last chunk (no layout)."""
    chunks, start, last = [], 0, len(counts) - 1
    for i, n in enumerate(counts):
        chunks.append(Chunk(start, n, embedding=i == 0, loss=i == last, mtp=mtp if i == last else 0))
        start += n
    return Placement(pp, vp, method, tuple(chunks), split)


def _from_layout(num_layers: int, pp: int, vp: int, split: StageSplit, mtp: int) -> Placement:
    text = split.pipeline_layout or ""
    chunks = parse_layout(text)
    if len(chunks) != pp * vp:
        raise BtacalcError(f"{{pipeline_layout}} has {len(chunks)} model chunks, not {{pipeline_parallel}} {pp} x "
                           f"{{virtual_pipeline}} {vp} = {pp * vp} (Megatron: VP = chunks / PP)")
    flat = "".join(chunks)
    if flat.count("t") != num_layers:
        raise BtacalcError(f"{{pipeline_layout}} places {flat.count('t')} decoder layers (t), the model has {num_layers}")
    if flat.count("E") != 1 or not chunks[0].startswith("E"):
        raise BtacalcError("{pipeline_layout} must start with the embedding E, once (stage 0 builds it)")
    if flat.count("L") != 1 or not chunks[-1].endswith("L"):
        raise BtacalcError("{pipeline_layout} must end with the loss L, once (the last stage's last chunk builds it)")
    if flat.count("m") != mtp:
        raise BtacalcError(f"{{pipeline_layout}} places {flat.count('m')} MTP layer(s) (m); the run trains {mtp} "
                           "({multi_token_prediction})")
    _check_mtp(chunks, pp, vp, flat)
    out, start = [], 0
    for i, body in enumerate(chunks):
        n = body.count("t")
        out.append(Chunk(start, n, embedding="E" in body, loss="L" in body, mtp=body.count("m")))
        start += n
    return Placement(pp, vp, "layout", tuple(out), split)


def _check_mtp(chunks: list[str], pp: int, vp: int, flat: str) -> None:
    """Megatron's MTP rules (validate_layer_layout): after every decoder layer, all in one chunk, the
    last virtual chunk of its stage."""
    if "m" not in flat:
        return
    if "t" in flat[flat.index("m"):]:
        raise BtacalcError("{pipeline_layout}: the MTP layers (m) must follow every decoder layer (t)")
    holders = [i for i, body in enumerate(chunks) if "m" in body]
    if len(holders) > 1 or holders[0] // pp != vp - 1:
        raise BtacalcError("{pipeline_layout}: the MTP layers (m) must sit together in the last virtual chunk of one "
                           "stage (Megatron-Core validate_layer_layout)")


def _default(num_layers: int, pp: int, vp: int, mtp: int) -> Placement:
    """Megatron's even split, else btacalc's pick (module docstring)."""
    chunks = pp * vp
    if num_layers % chunks == 0:
        return _from_counts(num_layers, pp, vp, StageSplit(), "even", _even(num_layers, pp, vp), mtp)
    if (num_layers + 2) % chunks == 0 and num_layers + 2 >= 2 * chunks:
        split = StageSplit(account_for_embedding=True, account_for_loss=True)
        return _from_counts(num_layers, pp, vp, split, "embedding_loss", _account_counts(num_layers, pp, vp, split), mtp)
    uneven = balanced_first_last(num_layers, pp, vp)
    if uneven is not None:
        return _from_counts(num_layers, pp, vp, uneven, "first_last", _first_last_counts(num_layers, pp, vp, uneven),
                            mtp)
    if num_layers + 2 < pp:
        raise BtacalcError(f"{{pipeline_parallel}} {pp} stages for {num_layers} layers + the embedding and the loss "
                           "would leave a stage empty")
    layout = balanced_layout(num_layers, pp, vp, mtp)
    return _from_layout(num_layers, pp, vp, StageSplit(pipeline_layout=layout), mtp)


def balanced_first_last(num_layers: int, pp: int, vp: int) -> Optional[StageSplit]:
    """Megatron's first/last form with the middle stages at the smallest share s (a multiple of VP) that
    leaves the ends at most s each, the first stage as full as allowed (the last holds the head and the
    loss); only the flags that differ from s. None when no such split exists (VP not dividing L)."""
    if pp < 2 or num_layers % vp:
        return None
    s = -(-num_layers // pp)
    s += (-s) % vp
    while s <= num_layers:
        rest = num_layers - (pp - 2) * s  # for the first and the last stage together
        first = min(s, rest - vp)
        first -= first % vp
        last = rest - first
        if first >= vp and 0 < last <= s:
            return StageSplit(first_stage_layers=first if first != s or pp == 2 else None,
                              last_stage_layers=last if last != s or pp == 2 else None)
        s += vp
    return None


def balanced_layout(num_layers: int, pp: int, vp: int, mtp: int = 0) -> str:
    """A layout string: L + 2 units (E and L one each) over the stages, the larger shares first; each
    stage's decoder layers over its chunks, the larger shares last; MTP beside the loss."""
    units = num_layers + 2
    totals = [-(-(p + 1) * units // pp) - -(-p * units // pp) for p in range(pp)]
    decoders = [t - (p == 0) - (p == pp - 1) for p, t in enumerate(totals)]
    bodies = [""] * (pp * vp)
    for p, d in enumerate(decoders):
        for v in range(vp):
            n = (v + 1) * d // vp - v * d // vp
            bodies[v * pp + p] = f"t*{n}" if n > 1 else "t" * n
    bodies[0] = "E" + bodies[0]
    bodies[-1] += "m" * mtp + "L"
    return compress_layout(bodies)


def compress_layout(bodies: list[str]) -> str:
    """Chunk bodies as one layout string, runs of equal chunks written (body|)*n (parse_layout's inverse)."""
    runs: list[list[Any]] = []
    for body in bodies:
        if runs and runs[-1][0] == body:
            runs[-1][1] += 1
        else:
            runs.append([body, 1])
    out = []
    for i, (body, n) in enumerate(runs):
        final = i == len(runs) - 1
        if n > 1 and body:
            out.append(f"({body}|)*{n - 1 if final else n}" + (body if final else ""))
        elif n > 1:  # empty chunks: n bars (one fewer at the end)
            out.append("|" * (n - 1 if final else n))
        else:
            out.append(body + ("" if final else "|"))
    return "".join(out)


def _check_not_empty(placement: Placement) -> None:
    for p in range(placement.pp):
        held = [placement.chunk(p, v) for v in range(placement.vp)]
        if not any(c.count or c.embedding or c.loss or c.mtp for c in held):
            raise BtacalcError(f"{{pipeline_parallel}} {placement.pp} x {{virtual_pipeline}} {placement.vp}: stage {p} "
                               "holds no layer (a stage count that leaves a stage empty)")


def group_rule(pp: int, m: int, group: int) -> str:
    """Why Megatron refuses micro-batch group size `group` at PP `pp` and M `m` with interleaving, or '' if it
    runs (schedules.py L1160-1180: PP <= N <= M, and M mod N is 0 or at least PP)."""
    if group < pp or group > m:
        return f"the micro-batch group must hold PP {pp} to M {m} micro-batches, not {group}"
    rest = m % group
    if 0 < rest < pp:
        return (f"M {m} mod the micro-batch group {group} is {rest}: Megatron needs it 0 or at least PP {pp} "
                "(else the last group leaves dependency bubbles)")
    return ""
