"""Summarise `mutmut results --all true` (stdin): per module, the mutants detected (killed by a test,
timed out: a mutant that makes a test loop forever is caught too, or rejected by the type checker
that CI runs) over those checked, and the survivors. Mutants not checked yet (an interrupted run) are counted apart, never as detected."""

from __future__ import annotations

import collections
import re
import sys

rows = [m.groups() for line in sys.stdin if (m := re.match(r"\s*([\w.]+)__mutmut_\d+: (.+)", line))]
by_module: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
survivors = []
for name, status in rows:
    module = name.rsplit(".", 1)[0]
    by_module[module][status] += 1
    if status == "survived":
        survivors.append(name)


def detected(c: collections.Counter) -> int:
    # killed by a test, made a test loop (timeout), or rejected by mypy, which CI runs over btacalc/
    return c["killed"] + c["timeout"] + c["caught by type check"]


def checked(c: collections.Counter) -> int:
    return sum(c.values()) - c["not checked"]


for module, c in sorted(by_module.items()):
    n = checked(c)
    score = f"{100 * detected(c) / n:5.1f}%" if n else "    -"
    print(f"{module:45s} {detected(c):4d}/{n:<4d} detected {score}  {dict(c)}")
total = sum(checked(c) for c in by_module.values())
found = sum(detected(c) for c in by_module.values())
unchecked = sum(c["not checked"] for c in by_module.values())
print(f"{'total':45s} {found:4d}/{total:<4d} = {100 * found / max(total, 1):.1f}% detected"
      + (f" ({unchecked} mutants not checked)" if unchecked else ""))
if survivors:
    print("survivors:", *survivors, sep="\n  ")
