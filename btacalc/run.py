"""Run options (sequence length, recomputation, attention kernel, ...) and the evaluation context."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from .catalogue import CompiledSelection, PhaseValues, Selection, compile_selection
from .hardware import HardwareProfile
from .models import ModelSpec

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
    accounting: Literal["ideal", "framework"] = "ideal"
    optimizer: Literal["adam", "sgd"] = "adam"
    bytes_per_element: int = 2

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

    @cached_property
    def selection(self) -> Selection:
        return Selection.make({**self.model.features(), **self.run.features()}, self.run.recompute)

    @cached_property
    def compiled(self) -> CompiledSelection:
        return compile_selection(self.selection)

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

        return Problem(self.model, self.hardware, replace(self.run, **changes))
