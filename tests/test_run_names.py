"""A plan's refusal of a measured run names the run file's fields (planning/measured.py in_run_names; session 30).

`validate --measured FILE` with `"tp": 3` on 16 GPUs said "tensor_parallel 3 x pipeline_parallel 1 x context_parallel
1 = 3 does not divide devices 16": names of btacalc's library, which the file does not have. The file's keys are
`tp`, `pp`, `cp`, `ep`, `etp`, `seq` (planning/run_file.py)."""

from __future__ import annotations

import json

import pytest



def _runs(path) -> dict:
    with open("btacalc/data/measured_runs.json") as f:
        shipped = json.load(f)
    run = next(r for r in shipped["runs"] if r["id"] == "qwen3-30b-a3b-h100-16-389")
    return {"about": shipped["about"], "runs": [dict(run, id="three-way-tp", tp=3),
                                                dict(run, id="sp-without-tp", sequence_parallel=True)]}


def test_a_recipe_field_is_named_as_the_run_file_writes_it(cli, tmp_path):
    """review29: a refusal of a field the run's `recipe` block sets under another name named the library's parameter;
    a dense run with recipe.moe_expert_capacity_factor is refused naming that field."""
    with open("btacalc/data/measured_runs.json") as f:
        shipped = json.load(f)
    run = next(r for r in shipped["runs"] if r["id"] == "llama-3-70b-h100-64-fp8-69")
    run = dict(run, id="dense-capacity", recipe=dict(run["recipe"], moe_expert_capacity_factor=1.0))
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"about": shipped["about"], "runs": [run]}))
    code, out, err = cli("validate", "--measured", str(path), "--json", "--quiet")
    reason = json.loads(out)["measured"]["runs"][0]["reason"]
    assert reason.startswith("recipe.moe_expert_capacity_factor caps the tokens each expert takes"), reason


@pytest.mark.parametrize("run_id, words, not_words", [
    ("three-way-tp", "tp 3 x pp 1 x cp 1 = 3 does not divide devices 16", "tensor_parallel"),
    ("sp-without-tp", "sequence_parallel needs tp > 1", "tensor_parallel")])
def test_a_refused_run_is_named_in_its_files_words(cli, tmp_path, run_id, words, not_words):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(_runs(path)))
    code, out, err = cli("validate", "--measured", str(path), "--json", "--quiet")
    reason = next(r["reason"] for r in json.loads(out)["measured"]["runs"] if r["id"] == run_id)
    assert words in reason and not_words not in reason, reason
