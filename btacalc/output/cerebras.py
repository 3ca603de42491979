"""The Cerebras configuration as YAML text (PyYAML's safe dumper), with a comment header: the plan's batch
split and BTA flags, and the model section for presets Model Zoo has (btacalc.planning.modelzoo).

Keys Model Zoo's source does not define, only Cerebras' documentation (the `ws_opt_*` compiler flags), carry
a comment saying so and where they are documented."""

from __future__ import annotations

from typing import Any, Optional

from ..config.model import ModelSpec
from ..planning.cerebras import DOCS_ONLY, cerebras_config, header
from ..planning.modelzoo import zoo_model
from ..planning.report import PlanReport


def cerebras_yaml(report: PlanReport, spec: Optional[ModelSpec] = None) -> str:
    import yaml

    config: dict[str, Any] = cerebras_config(report)
    notes: list[str] = []
    if spec is not None:
        model, notes = zoo_model(spec)
        if model is not None:
            init = config["trainer"]["init"]
            config["trainer"]["init"] = {**{k: v for k, v in init.items() if k == "backend"}, "model": model,
                                         **{k: v for k, v in init.items() if k != "backend"}}
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    lines = []
    for line in body.splitlines():
        key = line.strip().split(":", 1)[0]
        lines.append(f"{line}  # {DOCS_ONLY[key]}" if key in DOCS_ONLY else line)
    return "".join(f"# {line}\n" for line in header(report) + notes) + "\n".join(lines) + "\n"
