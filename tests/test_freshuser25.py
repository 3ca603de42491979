"""freshuser25: a new user planning DeepSeek-V3 on 256 H100 / B200 from the README (docs/story.md "freshuser25").

Each test pins one defect found that way. Expected values come from the measured-run file's own text
(btacalc/data/measured_runs.json, the run's `recompute` and `recipe` as the file states them), from the DeepSeek-V3
paper (arXiv 2412.19437 §4.2: the sequence-wise balance loss's alpha = 0.0001) and Megatron-Bridge's DeepSeek-V3
bridge, never from btacalc's output.
"""

from __future__ import annotations

import json
from pathlib import Path

RUNS = Path(__file__).parents[1] / "btacalc" / "data" / "measured_runs.json"
RUN = "deepseek-v3-b200-256-mxfp8-80"


def _run_record() -> dict:
    return next(r for r in json.loads(RUNS.read_text())["runs"] if r["id"] == RUN)


def _explain(cli) -> dict[str, str]:
    """`validate --explain RUN` as {field: value}, each folded cell joined back into one line."""
    code, out, err = cli("validate", "--explain", RUN)
    assert code == 0, err
    rows: dict[str, str] = {}
    last = ""
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) < 4:
            continue
        field, value = cells[1], cells[2]
        if field:
            last = field
            rows[last] = value
        elif last:
            rows[last] += " " + value
    return rows


def test_explain_shows_the_recompute_the_prediction_timed(cli):
    """The run's row states recompute [mla_up_proj]; its recipe, which the prediction applies
    (MeasuredRun.with_recipe), [mla_up_proj, mlp]. `--explain`'s layout showed the row's list only, so a user
    comparing their plan with the run saw a recompute the prediction did not use."""
    record = _run_record()
    assert record["recompute"] == ["mla_up_proj"] and record["recipe"]["recompute"] == ["mla_up_proj", "mlp"]
    layout = _explain(cli)["layout"]
    assert "recompute ['mla_up_proj', 'mlp']" in layout
    assert "the row states ['mla_up_proj']" in layout


def test_explain_shows_what_the_recipe_sets(cli):
    """The recipe trains the MTP layer, dispatches with DeepEP, overlaps the all-to-all and keeps bf16 Adam moments:
    all timed, none of them shown by `--explain`, the page a user reads to judge whether the run is like theirs."""
    recipe = _run_record()["recipe"]
    rows = _explain(cli)
    shown = rows.get("recipe", "")
    for key in ("mtp_num_layers", "deepep", "pipeline_layout", "exp_avg_dtype", "moe_token_dispatcher_type"):
        assert f"{key} {recipe[key]}" in shown, key
    assert "all_to_all" in shown and "delay_wgrad" in shown
    assert rows.get("recipe source", "").replace(" ", "").startswith(recipe["source"].replace(" ", "")[:60])


def test_deepseek_v3_launch_trains_the_papers_sequence_wise_balance_loss(cli):
    """DeepSeek-V3 trains a complementary sequence-wise balance loss with alpha = 0.0001 (arXiv 2412.19437 §2.1.2
    eq. 17-20, §4.2 "we set alpha to 0.0001"); Megatron-Bridge's DeepSeek-V3 bridge sets seq_aux_loss with that
    default because the released config.json omits the key (Megatron-Bridge @ 067f987df
    src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py L68-71). btacalc's launch trained no balance loss
    (Megatron-LM's default coefficient 0) and told the user to find the coefficient."""
    code, launch, err = cli("plan", "--model", "deepseek-v3", "--hw", "b200", "--devices", "256", "--pp", "8",
                            "--ep", "32", "--recompute", "full", "--emit", "megatron")
    assert code in (0, 1), err
    flags = [line.strip().rstrip("\\").strip() for line in launch.splitlines() if line.strip().startswith("--")]
    assert "--moe-aux-loss-coeff 0.0001" in flags
    assert "--moe-router-load-balancing-type seq_aux_loss" in flags
    assert "give your model's coefficient" not in launch
    code, overrides, err = cli("plan", "--model", "deepseek-v3", "--hw", "b200", "--devices", "256", "--pp", "8",
                               "--ep", "32", "--recompute", "full", "--emit", "bridge")
    assert code in (0, 1), err
    assert "model.moe_aux_loss_coeff=0.0001" in overrides.splitlines()
    assert "model.moe_router_load_balancing_type=seq_aux_loss" in overrides.splitlines()
