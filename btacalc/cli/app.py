"""The `btacalc` command line: a thin layer over the library. Printing happens only in `btacalc.cli`.

Commands live in their own modules and register themselves through `COMMAND_MODULES` (no module
imports this one back). `main` turns library errors into one line on stderr and exit code 2,
rendering the parameters they name as the flags a user typed.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from ..errors import BtacalcError, DataError
from . import cluster, info, measure, plan, validate, whatif
from .console import err, out
from .options import FLAGS, flag

try:  # typer >= 0.20 vendors click; older typer uses the click package
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc  # type: ignore[no-redef]  # the same module, older location

COMMAND_MODULES = (plan, cluster, whatif, measure, validate, info)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="btacalc",
        help="Analytical memory, FLOP and throughput calculator for MoE training with Batch Tiling on Attention (BTA)."
        "\n\nExample: btacalc plan --model qwen3-30b-a3b --hw wse3",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
    )
    for module in COMMAND_MODULES:
        module.register(app)
    return app


app = build_app()


def _say(text: str, code: int) -> None:
    err.print(text, highlight=False, markup=False, soft_wrap=True)
    sys.exit(code)


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry: user errors become one line on stderr and exit code 2."""
    try:
        rv = typer.main.get_command(app).main(args=argv, prog_name="btacalc", standalone_mode=False)
    except click_exc.NoArgsIsHelpError as exc:  # `btacalc` alone: help, as usual
        out.print(exc.ctx.get_help() if exc.ctx else "")
        sys.exit(0)
    except click_exc.UsageError as exc:
        _say(f"btacalc: error: {exc.format_message()}".replace("\n", " "), 2)
    except typer.Abort:
        sys.exit(130)
    except BtacalcError as exc:
        _say(f"btacalc: error: {exc.render({p: flag(p) for p in exc.params})}", 2)
    except DataError as exc:  # a broken shipped file: a bug, but still no traceback
        _say(f"btacalc: internal data error (please report): {exc}", 3)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) else 0)


__all__ = ["app", "main", "FLAGS"]
