"""freshuser22: btacalc used as a new MoE user would, from its README (docs/story.md "freshuser22").

Each test pins one defect found that way; the expected values are the inputs given (a config.json written by hand
from Moonshot AI's Moonlight-16B-A3B model card numbers) or Megatron's own texts, not btacalc's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import MOONLIGHT

DATA = Path(__file__).parent / "data"


def _config(tmp_path, **changes) -> str:
    folder = tmp_path / "moonlight"
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps({**MOONLIGHT, **changes}))
    return str(path)


def _emit(cli, model: str, emit: str = "megatron", *extra: str) -> str:
    ep = () if model == "llama-3-8b" else ("--ep", "8")
    code, text, err = cli("plan", "--model", model, "--hw", "b200", "--devices", "64", *ep, "--emit", emit, *extra)
    assert code in (0, 1), err
    return text


def _flags(launch: str) -> list[str]:
    """The launch's flag lines as `--flag value` strings (comments and the launcher line left out)."""
    return [line.strip().rstrip("\\").strip() for line in launch.splitlines() if line.strip().startswith("--")]


def test_the_config_jsons_aux_loss_is_launched(cli, tmp_path):
    """The config.json gives aux_loss_alpha 0.001 with seq_aux (a sequence-wise balance loss); Megatron-Bridge's
    AutoBridge maps that key to moe_aux_loss_coeff (Megatron-Bridge @ 067f987d src/megatron/bridge/models/conversion/
    model_bridge.py L483) and its DeepSeek bridges train seq_aux_loss. The launch dropped both and told the user to
    "give your model's coefficient with that flag", the one the file had given."""
    launch = _emit(cli, _config(tmp_path))
    flags = _flags(launch)
    assert "--moe-aux-loss-coeff 0.001" in flags
    assert "--moe-router-load-balancing-type seq_aux_loss" in flags
    assert "give your model's coefficient" not in launch
    assert "MEGATRON WOULD REFUSE" not in launch
    overrides = _emit(cli, _config(tmp_path), "bridge").splitlines()
    assert "model.moe_aux_loss_coeff=0.001" in overrides
    assert "model.moe_router_load_balancing_type=seq_aux_loss" in overrides


def test_a_batch_level_aux_loss_keeps_megatrons_balancing_type(cli, tmp_path):
    """Without seq_aux (and in the Qwen, Mixtral and OLMoE families' router_aux_loss_coef, transformers'
    load_balancing_loss_func over all tokens) the loss is Megatron's default aux_loss: only the coefficient is said."""
    launch = _emit(cli, _config(tmp_path, seq_aux=False, aux_loss_alpha=0.0003))
    assert "--moe-aux-loss-coeff 0.0003" in _flags(launch)
    assert not any(f.startswith("--moe-router-load-balancing-type") for f in _flags(launch))
    qwen = json.loads((DATA / "qwen3-30b-a3b.config.json").read_text())
    path = tmp_path / "qwen3" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(qwen))
    launch = _emit(cli, str(path))
    assert f"--moe-aux-loss-coeff {qwen['router_aux_loss_coef']}" in _flags(launch)


def test_a_file_without_the_coefficient_trains_bridges_default(cli, tmp_path):
    """A trimmed DeepSeek-V3-type config.json (no aux_loss_alpha) trains what Megatron-Bridge's DeepSeek-V3 bridge
    gives it, the sequence-wise loss at 0.0001 (deepseek_v3_bridge.py L68-71 @ 067f987d: `getattr(hf_config,
    "aux_loss_alpha", 0.0001)`), where it had left Megatron-LM's 0 (freshuser25)."""
    config = {k: v for k, v in MOONLIGHT.items() if k not in ("aux_loss_alpha", "seq_aux")}
    folder = tmp_path / "trimmed"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    flags = _flags(_emit(cli, str(folder / "config.json")))
    assert "--moe-aux-loss-coeff 0.0001" in " ".join(flags) or "--moe-aux-loss-coeff=0.0001" in flags
    assert "--moe-router-load-balancing-type seq_aux_loss" in " ".join(flags)


def test_models_show_names_the_aux_loss_it_read(cli, tmp_path):
    code, out, err = cli("models", "show", _config(tmp_path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    spec = doc.get("spec", doc)
    assert spec["aux_loss_coeff"] == MOONLIGHT["aux_loss_alpha"] and spec["aux_loss_per_sequence"] is True


@pytest.mark.parametrize("model", ["moonlight", "qwen3-30b-a3b"])
def test_an_moe_launch_says_what_it_does_with_the_routers_dtype(cli, tmp_path, model):
    """A 64-expert model's launch had no --moe-router-dtype and no word about it. Megatron-Core routes in the 16-bit
    dtype unless told (transformer_config.py L811 @ d98e8a64: moe_router_dtype None), while its MoE README recommends
    fp32 ("At high expert counts, FP32 precision yields better accuracy", README.md L282) and Megatron-Bridge's
    DeepSeek bridges set it. The launch now says which it trains and that btacalc does not time fp32 routing."""
    launch = _emit(cli, _config(tmp_path) if model == "moonlight" else model)
    comments = [line for line in launch.splitlines() if line.startswith("#")]
    said = [line for line in comments if "--moe-router-dtype" in line]
    assert len(said) == 1 and "fp32" in said[0] and "README.md L282" in said[0]
    assert not any(f.startswith("--moe-router-dtype") for f in _flags(launch))
    dense = _emit(cli, "llama-3-8b")
    assert "--moe-router-dtype" not in dense


def test_compare_shows_wafer_systems_as_systems_not_a_megatron_layout(cli, tmp_path, monkeypatch):
    """`compare --systems 4` set the 4 CS-3 row up as "TP1 PP1 DP4, ZeRO-0": a Megatron layout and a ZeRO stage for
    weight-streaming systems, whose optimizer state is in MemoryX (README "Wafer-scale clusters": strict data
    parallel). The row now says the memory model and the systems, as a one-system row says the memory model."""
    code, out, err = cli("compare", "--model", _config(tmp_path), "--hw", "wse3,b200", "--systems", "4", "--devices",
                         "64", "--json")
    assert code == 0, err
    rows = {row["hardware"]: row for row in json.loads(out)["rows"]}
    assert rows["wse3"]["devices"] == 4 and rows["wse3"]["layout"] == ""
    assert rows["b200"]["layout"].startswith("TP")
    monkeypatch.setenv("COLUMNS", "200")  # one line per row's first line, whatever the worker's width
    code, out, err = cli("compare", "--model", _config(tmp_path), "--hw", "wse3,b200", "--systems", "4", "--devices",
                         "64")
    assert code == 0, err
    wafer = next(line for line in out.splitlines() if line.strip().startswith("wse3 x4"))
    assert "TP1" not in wafer and "ZeRO" not in wafer and "streamed" in wafer and "4 systems" in wafer
    assert "ZeRO-1" in out  # the GPU row keeps its layout and ZeRO stage


def test_a_deepseek_v2_lite_config_is_read(cli):
    """DeepSeek-V2-Lite's config.json (model_type deepseek_v2) was refused as an unsupported architecture, though its
    layers are DeepSeek-V3's MLA and expert stack with a softmax router (and Megatron-Bridge builds it,
    deepseek_v2_bridge.py). The parameters, by hand from the config's sizes, against the paper's "15.7B total, 2.4B
    activated" (arXiv 2405.04434 Table: DeepSeek-V2-Lite)."""
    from btacalc.config.execution import RunOptions
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.hf import load_hf_config
    from btacalc.model.params import model_param_counts
    from btacalc.model.problem import make_problem

    spec = load_hf_config(DATA / "deepseek-v2-lite.config.json")
    h, L, V, a, E, k, f, shared, dense_f = 2048, 27, 102400, 16, 64, 6, 1408, 2 * 1408, 10944
    attention = h * a * 192 + h * (512 + 64) + 512 + 512 * a * (128 + 128) + a * 128 * h  # q, kv_a, norm, kv_b, o
    norms = 2 * h
    moe = E * 3 * h * f + 3 * h * shared + E * h  # routed, shared, the router (no correction bias: greedy top-k)
    total = 2 * V * h + h + L * (attention + norms) + 3 * h * dense_f + (L - 1) * moe
    active = (2 * V * h + h + L * (attention + norms) + 3 * h * dense_f
              + (L - 1) * (k * 3 * h * f + 3 * h * shared + E * h))
    pc = model_param_counts(make_problem(spec, resolve_hardware("wse3"), RunOptions()))
    assert (pc.total, pc.active) == (total, active)
    assert round(total / 1e8) == 157  # "15.7B"
    assert int((active - V * h) / 1e8) == 24  # "2.4B activated": without the input embedding, to one decimal
    assert (spec.router, spec.router_renormalize, spec.router_score_bias, spec.router_scale) == ("softmax", False,
                                                                                                False, 1.0)
    assert spec.yarn is not None and spec.yarn.factor == 40
    code, launch, err = cli("plan", "--model", str(DATA / "deepseek-v2-lite.config.json"), "--hw", "b200",
                            "--devices", "64", "--ep", "8", "--emit", "megatron")
    assert code == 0, err
    flags = _flags(launch)
    # softmax over every expert, then the top 6 unrenormalised: Megatron's pre-softmax router
    assert "--moe-router-pre-softmax" in flags and "--moe-router-enable-expert-bias" not in flags
    assert "--rotary-scaling-factor 40.0" in flags and "--mscale 0.707" in flags
    assert "--moe-router-load-balancing-type seq_aux_loss" in flags and "MEGATRON WOULD REFUSE" not in launch


def test_a_deepseek_v2_config_with_v3s_router_is_refused(tmp_path):
    from btacalc.config.hf import load_hf_config
    from btacalc.errors import BtacalcError

    raw = json.loads((DATA / "deepseek-v2-lite.config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**raw, "scoring_func": "sigmoid"}))
    with pytest.raises(BtacalcError, match="scoring_func 'sigmoid'"):
        load_hf_config(path)


def test_the_plan_header_states_the_precision(cli, tmp_path, monkeypatch):
    """`plan --precision mxfp8` printed the same header as a BF16 plan ("adam, 2-byte elements"): the precision the
    GEMMs run at was in the phase tables only. The inputs row now names it, marked (default) where it is one (the
    JSON's inputs.defaults gives why)."""
    monkeypatch.setenv("COLUMNS", "300")
    base = ("plan", "--model", _config(tmp_path), "--hw", "b200", "--devices", "64", "--ep", "8")
    code, out, err = cli(*base, "--precision", "mxfp8")
    assert code == 0, err
    inputs = next(line for line in out.splitlines() if line.startswith("inputs"))
    assert "precision mxfp8" in inputs and "precision mxfp8 (default)" not in inputs
    code, out, err = cli(*base)
    inputs = next(line for line in out.splitlines() if line.startswith("inputs"))
    assert "precision bf16 (default)" in inputs
