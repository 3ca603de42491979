"""`btacalc measure`: the formulas against a real PyTorch layer (needs `btacalc[measure]`)."""

from __future__ import annotations

from typing import Any, Optional

import typer

from ..errors import BtacalcError
from .console import model_json, print_stdout, write_stdout
from .options import Attention, ModelOpt, QuietOpt, help_text
from .progress import progress
from .runfile import given_on_command_line

EXAMPLES = ("Examples:\n\n"
            "  btacalc measure --model qwen3-30b-a3b --seq 1024\n\n"
            "  btacalc measure --model qwen3-30b-a3b --seq 4096 --batch 2 --tiles 2 --attention flash --json\n\n"
            "  btacalc measure --model gpt3-175b --seq 2048")


def measure(
    ctx: typer.Context,
    model: str = ModelOpt,
    seq: int = typer.Option(1024, "--seq", min=1, help="Sequence length s."),
    batch: int = typer.Option(1, "--batch", min=1, help="Sequences in the layer's batch (G*b)."),
    tiles: int = typer.Option(1, "--tiles", min=1, help="Attention tiles G (BTA); must divide --batch."),
    attention: Attention = typer.Option(Attention.eager, "--attention", help="eager (HF eager attention) or flash (SDPA)."),
    layer_kind: Optional[str] = typer.Option(None, "--layer-kind", help=help_text(
        "Which layer kind of a mixed model (e.g. dense, moe, moe-sliding, moe-full) [default: the most common].")),
    real: bool = typer.Option(False, "--real", help="Run on real CPU tensors instead of FakeTensorMode (allocates memory!)."),
    real_limit_gb: float = typer.Option(8.0, "--real-limit-gb", min=0.001, max=1e6,
                                        help="With --real: refuse shapes the formulas estimate to need more memory "
                                        "than this (GB = 1e9 bytes)."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    quiet: bool = QuietOpt,
) -> int:
    """Measure one reference PyTorch decoder layer (saved-for-backward bytes, FLOPs, largest
    intermediate) and compare it, phase by phase, with the formulas under ideal and pytorch accounting."""
    if not real and given_on_command_line(ctx, ("real_limit_gb",)):
        raise BtacalcError("--real-limit-gb bounds the memory of a --real run: FakeTensorMode allocates none")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise BtacalcError("btacalc measure needs PyTorch: pip install 'btacalc[measure]'") from None
    from ..config.presets import resolve_model
    from ..torchref.accuracy import check_shape

    spec = resolve_model(model)
    check_shape(spec, batch, seq, tiles, attention.value, real_limit_gb * 1e9 if real else None)
    result = _measured(spec, batch, seq, tiles, attention.value, real, layer_kind, quiet)
    if as_json:
        write_stdout(model_json(result))
        return 0
    print_stdout(_table(result, spec.name, batch, seq, tiles, attention.value, real))
    return 0


def _measured(spec: Any, batch: int, seq: int, tiles: int, attention: str, real: bool, layer_kind: Optional[str],
              quiet: bool) -> Any:
    """The layer measured against the formulas, with a progress report; torch refusing a shape is one line."""
    from ..torchref.accuracy import compare_layer
    from ..torchref.measure import MEASURE_STEPS

    with progress(MEASURE_STEPS, "measuring the layer", quiet) as advance:
        try:
            return compare_layer(spec, batch, seq, tiles, attention, fake=not real, kind_name=layer_kind,
                                 progress=advance)
        except BtacalcError:
            raise
        except (RuntimeError, ValueError, OverflowError, IndexError, TypeError) as exc:  # torch refusing a shape
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise BtacalcError(f"torch cannot run this layer at --seq {seq} --batch {batch}: {first}") from None


def _ratio(a: int, b: int) -> str:
    return "-" if b == 0 and a == 0 else ("inf" if b == 0 else f"{a / b:.4f}")


def _table(result: Any, name: str, batch: int, seq: int, tiles: int, attention: str, real: bool) -> Any:
    """The phase-by-phase table (bytes kept for backward, forward FLOPs), fitted to the terminal."""
    from rich.markup import escape
    from rich.table import Table

    from ..output.fit import fit
    from ..output.tables import si

    t = Table(title=f"{escape(name)}: one {result.layer_kind} layer, {batch} x {seq} tokens, G = {tiles}, {attention} attention, "
              f"{'FakeTensorMode' if not real else 'real CPU tensors'} (bytes kept for backward)", title_justify="left")
    for c in ("phase", "ideal", "pytorch", "measured", "pytorch/measured", "fwd FLOP formula", "fwd FLOP measured"):
        t.add_column(c, justify="left" if c == "phase" else "right")
    for r in result.phases:
        t.add_row(r.phase, si(r.ideal_bytes, "B"), si(r.pytorch_bytes, "B"), si(r.measured_bytes, "B"),
                  _ratio(r.pytorch_bytes, r.measured_bytes), si(r.formula_flops_forward, "FLOP"),
                  si(r.measured_flops_forward, "FLOP"))
    t.add_row("[bold]layer[/]", si(result.ideal_bytes, "B"), si(result.pytorch_bytes, "B"), si(result.measured_bytes, "B"),
              _ratio(result.pytorch_bytes, result.measured_bytes), si(result.formula_flops_forward, "FLOP"),
              si(result.measured_flops_forward, "FLOP"))
    tokens = batch * seq
    t.caption = (f"per token: ideal {result.ideal_bytes / tokens:,.0f} B, pytorch {result.pytorch_bytes / tokens:,.0f} B, "
                 f"measured {result.measured_bytes / tokens:,.0f} B; backward FLOPs formula {si(result.formula_flops_backward, 'FLOP')}, "
                 f"measured {si(result.measured_flops_backward, 'FLOP')}; largest intermediate "
                 f"{si(result.measured_largest_intermediate_bytes, 'B')}"
                 + ("; SDPA is one fused kernel: its FLOPs and bytes show under attn_scores" if attention == "flash" else ""))
    return fit(t)


def register(app: typer.Typer) -> None:
    app.command(epilog=EXAMPLES)(measure)
