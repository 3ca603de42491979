"""Errors that mean "the user's input is wrong": the CLI prints them on one line and exits 2."""


class BtacalcError(ValueError):
    """Invalid user input: unknown name, bad size, malformed file. Message is one line."""


class DataError(RuntimeError):
    """A shipped data file (formula catalogue, profile, preset) is broken: a bug in btacalc."""


def first_validation_error(exc: "ValidationError") -> str:  # type: ignore[name-defined]  # noqa: F821
    """One line from a pydantic ValidationError: 'field a.b: reason'."""
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"field {loc}: {msg}" if loc else msg
