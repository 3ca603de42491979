"""The Cerebras configuration as YAML text (PyYAML's safe dumper), with a comment header."""

from __future__ import annotations

from typing import Any

from ..planning.cerebras import cerebras_config, header
from ..planning.report import PlanReport


def cerebras_yaml(report: PlanReport, spec: Any = None) -> str:
    import yaml

    body = yaml.safe_dump(cerebras_config(report), sort_keys=False, default_flow_style=False)
    return "".join(f"# {line}\n" for line in header(report)) + body
