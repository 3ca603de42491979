"""`plan --config run.toml` (every plan option as data) and `plan --from-megatron/--from-bridge FILE` (a
Megatron-LM launch or a Megatron-Bridge recipe as the run).

A run file is TOML: one key per `plan` option, named as the option (`global-batch`, `overlap-grad-reduce`)
or as its parameter (`global_batch`); each value goes through the option's own type and range, so a run
file accepts exactly what the command line accepts; the command line wins over the file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

from ..config.text import parse_value_error
from ..errors import BtacalcError
from ..paths import read_input, read_stdin
from .integers import check_integer, takes_integer, takes_number
from .pathoptions import check_path

try:  # typer >= 0.20 vendors click (as app.py)
    from typer._click import exceptions as click_exc
    from typer._click.core import Context, Parameter, ParameterSource
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc  # type: ignore[no-redef]
    from click.core import Context, Parameter, ParameterSource  # type: ignore[assignment]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_RUN_FILE_BYTES = 1 << 20  # a run description is a few hundred bytes; 1 MiB bounds what is read
# Options a run file cannot hold: the run file itself, and what prints instead of planning.
NOT_IN_RUN_FILE = ("config", "schema")


def read_text(path: Path, what: str) -> str:
    """A launch, recipe or run file (`-`: standard input), at most MAX_RUN_FILE_BYTES, read through the
    input registry (btacalc.paths.read_input: type and size checked before any byte is read, and no output
    of this command may replace it)."""
    try:
        if str(path) == "-":
            return read_stdin(MAX_RUN_FILE_BYTES, what)
        return read_input(path, MAX_RUN_FILE_BYTES)
    except FileNotFoundError:
        raise BtacalcError(f"{what} {str(path)!r}: not a readable file") from None
    except OSError as exc:
        raise BtacalcError(f"{what} {str(path)!r}: {exc.strerror or exc}") from None


def run_file_options(ctx: Context, path: Path) -> dict[str, Any]:
    """The run file's values, checked by each plan option's own type and range (one-line errors)."""
    text = read_text(path, "{config}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BtacalcError(f"{{config}} {str(path)!r}: not TOML: {exc}") from None
    except RecursionError:  # hostile15: 5,000 nested arrays were an internal error (as parse_profile refuses them)
        raise BtacalcError(f"{{config}} {str(path)!r}: not TOML: nested too deeply") from None
    except ValueError as exc:  # tomllib's own ValueError: an integer of more than 4,300 digits
        raise BtacalcError(f"{{config}} {str(path)!r}: not TOML: {parse_value_error(exc)}") from None
    params = _run_file_keys(ctx)
    out: dict[str, Any] = {}
    given: dict[str, str] = {}  # parameter -> the key that gave it
    for key, value in data.items():
        param = params.get(key.replace("-", "_"))
        if key.replace("-", "_") in NOT_IN_RUN_FILE:  # hostile15: was "unknown option", though plan has it
            raise BtacalcError(f"{{config}} {str(path)!r}: {key} is a plan option a run file cannot hold (the run file "
                               f"itself, or what prints instead of planning): give --{key} on the command line")
        if param is None or param.name is None:
            raise BtacalcError(f"{{config}} {str(path)!r}: unknown option {key!r} (plan options: see btacalc plan --help)")
        name = param.name
        if name in given:  # hostile15: `global-batch = 64` and `global_batch = 128` planned 128 in silence
            raise BtacalcError(f"{{config}} {str(path)!r}: {given[name]} and {key} are one option ({param.opts[0]}): "
                               "give it once (only the last would count)")
        given[name] = key
        if isinstance(value, (dict, list)):
            raise BtacalcError(f"{{config}} {str(path)!r}: {key} must be a single value, got {type(value).__name__}")
        flag = bool(getattr(param, "is_flag", False))
        if flag != isinstance(value, bool):
            need = "a switch: true or false" if flag else "a value, not true/false"
            raise BtacalcError(f"{{config}} {str(path)!r}: {key} is {need}, got {value!r}")
        if isinstance(value, float) and _text_option(param):
            # review13: `te-version = 1.10` was TOML's float 1.1, planned as TransformerEngine 1.1; a text option
            # takes a TOML string, whose characters stay as written
            raise BtacalcError(f"{{config}} {str(path)!r}: {key} = {value!r} is a TOML number, which keeps no trailing "
                               f"zeros (1.10 reads 1.1): quote it, {key} = \"...\"")
        if isinstance(value, str) and (takes_integer(param) or takes_number(param)):
            # a TOML string where the option takes a number (`devices = "8"`) was read as the number: a run file's
            # values are typed, so a quoted count is a mistake the file's own syntax can show
            raise BtacalcError(f"{{config}} {str(path)!r}: {key} = {value!r} is a TOML string: {key} takes a number, "
                               f"written without quotes")
        raw = value if flag else str(value)
        try:
            check_integer(param, raw)
            check_path(param, raw)
        except BtacalcError as exc:
            raise BtacalcError(f"{{config}} {str(path)!r}: {key}: {exc}") from None
        try:
            _coerce(param, raw, ctx)
        except click_exc.BadParameter as exc:
            raise BtacalcError(f"{{config}} {str(path)!r}: {key}: {exc.format_message()}") from None
        out[name] = raw  # the option converts it again, as a value typed on the command line
    return out


def _run_file_keys(ctx: Context) -> dict[str, Parameter]:
    """A run file's keys (dashes read as underscores): each plan option by its parameter name and by its long option
    name (hostile15: `json = true` and `profile = true` were "unknown option" though `--json` and `--profile` are plan
    options, whose parameters are named as_json and profile_run). A switch's negation (`--no-overlap`) is no key: the
    switch takes true or false."""
    params: dict[str, Parameter] = {}
    for p in ctx.command.params:
        if not p.name or p.name in NOT_IN_RUN_FILE:
            continue
        params[p.name] = p
        for opt in p.opts:
            if opt.startswith("--") and opt[2:].replace("-", "_") not in NOT_IN_RUN_FILE:
                params.setdefault(opt[2:].replace("-", "_"), p)
    return params


def _text_option(param: Parameter) -> bool:
    """Whether the option takes text (its annotation `str`, typer's runtime parameter; click's type name "text")."""
    runtime = getattr(param, "get_runtime_param", None)
    if runtime is not None:
        annotation = getattr(runtime(), "annotation", None)
        return annotation is str or annotation == Optional[str]
    return getattr(getattr(param, "type", None), "name", None) == "text"


def _coerce(param: Parameter, value: Any, ctx: Context) -> Any:
    """The option's own conversion and range check (typer's runtime parameter; click's type otherwise)."""
    runtime = getattr(param, "get_runtime_param", None)
    if runtime is not None:
        return runtime().coerce(value, param=param, ctx=ctx)
    return param.type.convert(value, param, ctx)  # type: ignore[attr-defined]  # click's Parameter has it


def config_callback(ctx: Context, param: Parameter, value: Optional[Path]) -> Optional[Path]:
    """Eager: the run file's values become the defaults of the options the command line does not give."""
    if value is not None:
        ctx.default_map = {**(ctx.default_map or {}), **run_file_options(ctx, value)}
    return value


def given_on_command_line(ctx: Context, names: tuple[str, ...]) -> list[str]:
    """Which of these parameters the user set (command line or run file), not left at their defaults."""
    return [n for n in names if ctx.get_parameter_source(n) in (ParameterSource.COMMANDLINE, ParameterSource.DEFAULT_MAP)]
