"""Errors that mean "the user's input is wrong": the CLI prints them on one line and exits 2."""


class BtacalcError(ValueError):
    """Invalid user input: unknown name, bad size, malformed file. Message is one line."""


class DataError(RuntimeError):
    """A shipped data file (formula catalogue, profile, preset) is broken: a bug in btacalc."""
