"""Refresh the outputs the README quotes: every ```console block's `$ btacalc ...` command is run and the
lines under it are replaced by the first lines of what it prints today (as many as the block shows
now; a trailing `...` line is kept). A block with a `...` line between its lines is an excerpt, written by hand:
it is kept as it is while each of its lines still appears, in order, in what the command prints (the rule
tests/test_readme.py applies to every block), and reported otherwise, for a hand edit. tests/test_readme.py checks the same blocks line by line, so a
number that drifts fails CI until this is run:

    python tools/readme_examples.py          # rewrite README.md's console blocks
    python tools/readme_examples.py --check  # exit 1 if a block is not what the command prints

Commands run from a scratch folder that sees the repository's data as a clone does, at 120 columns.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DATA = ("btacalc", "tests", "formulas", "hardware_profiles", "examples")
WIDTH = "120"


def run(command: str, cwd: Path) -> list[str]:
    args = shlex.split(command)
    env = {**os.environ, "COLUMNS": WIDTH, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    res = subprocess.run([sys.executable, "-m", "btacalc", *args[1:]], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=600)
    if res.returncode not in (0, 1):
        raise SystemExit(f"{command}: exit {res.returncode}: {res.stderr.strip()[:300]}")
    return [line.rstrip() for line in (res.stdout + res.stderr).splitlines()]


def _squash(line: str) -> str:
    return " ".join(line.split())


def excerpt_missing(excerpt: list[str], got: list[str]) -> "str | None":
    """The first line of a hand-written excerpt (`...` lines skipped) that is not in `got` after the previous one's
    match (runs of spaces compared as one, a line contained in an output line), or None when all are."""
    squashed, pos = [_squash(line) for line in got], 0
    for want in excerpt:
        if want.strip() in ("...", ""):
            continue
        w = _squash(want)
        while pos < len(squashed) and w not in squashed[pos]:
            pos += 1
        if pos == len(squashed):
            return want.strip()
        pos += 1
    return None


def refresh(text: str, cwd: Path) -> str:
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.strip() != "```console":
            continue
        while i < len(lines) and lines[i].strip() != "```":
            cmd = lines[i]
            out.append(cmd)
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("$ ") and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            if not cmd.startswith("$ "):
                out += body
                continue
            ellipsis = bool(body) and body[-1].strip() == "..."
            shown = len(body) - (1 if ellipsis else 0)
            got = run(cmd[2:].strip(), cwd)
            if any(line.strip() == "..." for line in body[:shown]):
                missing = excerpt_missing(body, got)
                if missing is not None:
                    raise SystemExit(f"{cmd[2:].strip()}: the excerpt's line {missing!r} is not in today's output, in "
                                     "order: edit the excerpt in README.md by hand")
                out += body
                continue
            out += got[:shown] + (["..."] if ellipsis or len(got) > shown else [])
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    opts = parser.parse_args()
    text = README.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        for name in DATA:
            if (ROOT / name).exists():
                (Path(tmp) / name).symlink_to(ROOT / name)
        new = refresh(text, Path(tmp))
    if opts.check:
        if new != text:
            print("README.md console blocks are stale: run python tools/readme_examples.py")
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
