"""Run options (sequence length, recomputation, attention kernel, ...) and the evaluation context."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, Optional

from .catalogue import CompiledSelection, PhaseValues, Selection, compile_selection
from .hardware import HardwareProfile
from .models import ModelSpec
from .parallel import Parallelism

if TYPE_CHECKING:
    from .memory import ParamCounts

# Default sequence length: Qwen3's pre-training stages S1 and S2 used 4,096 tokens
# (Qwen3 technical report, arXiv 2505.09388, §3.2). The BTA paper does not state its length.
DEFAULT_SEQ_LEN = 4096
DEFAULT_SEQ_LEN_SOURCE = "Qwen3 technical report (arXiv 2505.09388) §3.2: stages S1-S2 at 4,096 tokens"


@dataclass(frozen=True)
class RunOptions:
    seq_len: int = DEFAULT_SEQ_LEN
    recompute: Literal["none", "selective", "full"] = "full"
    attention: Literal["eager", "flash"] = "eager"
    causal: bool = False
    loss: Literal["stored", "fused"] = "fused"
    accounting: Literal["ideal", "pytorch"] = "ideal"
    optimizer: Literal["adam", "sgd"] = "adam"
    bytes_per_element: int = 2
    # None or "auto": `memory.resolve_memory_model` (called by make_plan) picks resident when the whole
    # training state fits on the device, else the profile's; read unresolved, None means the profile's.
    memory_model: Optional[Literal["weight_streaming", "resident", "auto"]] = None

    def features(self) -> dict[str, Any]:
        return {
            "attention": self.attention,
            "causal": self.causal,
            "loss": self.loss,
            "accounting": self.accounting,
            "optimizer": self.optimizer,
        }


@dataclass(frozen=True)
class Problem:
    """A model on a device with run options: everything but the batch shape (G, b)."""

    model: ModelSpec
    hardware: HardwareProfile
    run: RunOptions
    parallel: Parallelism = Parallelism()

    @property
    def memory_model(self) -> str:
        """weight_streaming or resident ("auto" must be resolved first: memory.resolve_memory_model)."""
        return self.run.memory_model or self.hardware.memory_model

    @cached_property
    def selection(self) -> Selection:
        return Selection.make({**self.model.features(), **self.run.features()}, self.run.recompute)

    @cached_property
    def compiled(self) -> CompiledSelection:
        return compile_selection(self.selection)

    @cached_property
    def params(self) -> "ParamCounts":
        """Parameter counts (memory.param_counts), computed once per problem: the memory model and
        the communication model both need them."""
        from .memory import param_counts

        return param_counts(self)

    def symbol_values(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> dict[str, Any]:
        values: dict[str, Any] = dict(self.model.symbol_values())
        values.update(
            s=self.run.seq_len if seq_len is None else seq_len,
            b=tile_batch,
            G=tiles,
            beta=self.run.bytes_per_element,
            P=0,
        )
        return values

    def evaluate(self, tiles: Any, tile_batch: Any, seq_len: Any = None) -> PhaseValues:
        return self.compiled.evaluate(self.symbol_values(tiles, tile_batch, seq_len))

    def with_run(self, **changes: Any) -> "Problem":
        from dataclasses import replace

        return Problem(self.model, self.hardware, replace(self.run, **changes), self.parallel)

    def with_parallel(self, **changes: Any) -> "Problem":
        from dataclasses import replace

        return Problem(self.model, self.hardware, self.run, replace(self.parallel, **changes))


def run_options_for(profile: HardwareProfile, seq_len: Optional[int] = None, recompute: Optional[str] = None,
                    attention: Optional[str] = None, causal: bool = False, loss: str = "fused",
                    accounting: str = "ideal", memory_model: str = "auto") -> tuple[RunOptions, dict[str, str]]:
    """Run options with the device's defaults filled in; returns the options and, for every input
    left at its default, why that default."""
    defaults: dict[str, str] = {}
    if seq_len is None:
        seq_len = DEFAULT_SEQ_LEN
        defaults["seq_len"] = DEFAULT_SEQ_LEN_SOURCE
    if recompute is None:
        recompute = profile.default_recompute
        defaults["recompute"] = f"{profile.name} default: {profile.defaults_note}"
    if attention is None:
        attention = profile.default_attention
        defaults["attention"] = f"{profile.name} default: {profile.defaults_note}"
    if loss == "fused":
        defaults["loss"] = "fused linear cross-entropy: logits materialised one sequence at a time"
    if memory_model == "auto":
        defaults["memory_model"] = ("auto: the whole training state resident on the device when it fits with one "
                                    "sequence, else weights streamed (wafer)")
    run = RunOptions(seq_len=seq_len, recompute=recompute, attention=attention, causal=causal,  # type: ignore[arg-type]
                     loss=loss, accounting=accounting, memory_model=memory_model)  # type: ignore[arg-type]
    return run, defaults
