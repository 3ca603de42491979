"""An option given twice is refused (review5): click keeps the last value of a repeated option and drops
the others, so `plan --hw wse3 --hw h100` planned h100 and `--output a.json --output b.json` wrote b.json
alone, each exit 0. An option that takes a list (`sweep --vary`) may repeat, and so may an eager switch
(`--help`, `--version`); a switch and its negation (`--overlap/--no-overlap`) are one option, so giving both is
giving it twice. An integer option's value is checked as written here too (cli/integers.py), and a path option's
(cli/pathoptions.py).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from ..errors import BtacalcError
from .helpwidth import walk
from .integers import check_integer
from .pathoptions import check_path


def once(command: Any) -> Any:
    """`command` (a click command or group) and every subcommand refuse an option given more than once;
    returns `command`."""
    for cmd in walk(command):
        cmd.parse_args = _Once(cmd, cmd.parse_args)
    return command


class _Once:
    """A command's parse_args that first counts the options of the command line."""

    def __init__(self, command: Any, parse: Callable[[Any, list[str]], list[str]]):
        self.command, self.parse = command, parse

    def __call__(self, ctx: Any, args: list[str]) -> list[str]:
        if args and not ctx.resilient_parsing:  # completion parses resiliently: it never refuses
            values, _, order = self.command.make_parser(ctx).parse_args(args=list(args))
            for param in order:
                check_integer(param, values.get(param.name))
                check_path(param, values.get(param.name))
            counts = Counter(p for p in order if _single(p))
            repeated = next((p for p, n in counts.items() if n > 1), None)
            if repeated is not None:
                names = "/".join(repeated.opts + repeated.secondary_opts)
                raise BtacalcError(f"{names} is given {counts[repeated]} times: give it once "
                                   "(only the last would count)")
        return self.parse(ctx, args)


def _single(param: Any) -> bool:
    """An option that holds one value (not a list, a count or a positional argument). An eager switch (--help,
    --version) acts as it is read and holds nothing to lose: given twice it does what it does once (review6)."""
    if getattr(param, "is_eager", False) and getattr(param, "is_flag", False):
        return False
    return getattr(param, "param_type_name", "") == "option" and not param.multiple and not param.count
