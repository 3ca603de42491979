from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def cli(capsys):
    """Run the btacalc console entry point in-process: returns (exit code, stdout, stderr)."""
    from btacalc.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        cap = capsys.readouterr()
        return exc.value.code, cap.out, cap.err

    return run


def pytest_addoption(parser):
    parser.addoption("--regen-goldens", action="store_true", default=False,
                     help="rewrite tests/goldens/*.json from the current code (say why in the commit)")
