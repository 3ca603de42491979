"""Summarise `mutmut results --all true` (stdin): killed / total per module, and the survivors."""

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
total = sum(sum(c.values()) for c in by_module.values())
killed = sum(c["killed"] for c in by_module.values())
for module, c in sorted(by_module.items()):
    n = sum(c.values())
    print(f"{module:45s} {c['killed']:4d}/{n:<4d} killed  {dict(c)}")
print(f"{'total':45s} {killed:4d}/{total:<4d} = {100 * killed / max(total, 1):.1f}% killed")
if survivors:
    print("survivors:", *survivors, sep="\n  ")
