"""review29: defects found reviewing session 30's changes (the option groups, compare's wafer rows, the router's
aux loss in the launches), each test failing before its fix.

Expected values come from an independent source: the model's config.json (the coefficient and seq_aux), the first
launch btacalc wrote (a round trip gives it back), and `plan`'s answer for one row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
V2_LITE = DATA / "deepseek-v2-lite.config.json"


def _flags(launch: str) -> list[str]:
    """A launch's flag lines (`--flag value`), or a Bridge file's override lines, without comments or the launcher."""
    lines = [line.strip().rstrip("\\").strip() for line in launch.splitlines()]
    return [line for line in lines if line.startswith("--") or (line and not line.startswith(("#", "torchrun")))]


@pytest.mark.parametrize("emit,read", [("megatron", "--from-megatron"), ("bridge", "--from-bridge")])
def test_the_router_aux_loss_survives_a_round_trip(cli, tmp_path, emit, read):
    """freshuser22 made `--emit megatron` / `--emit bridge` write the config.json's aux loss (--moe-aux-loss-coeff,
    --moe-router-load-balancing-type seq_aux_loss), but `--from-megatron` / `--from-bridge` listed both as ignored, so
    a launch read back and written again lost them and asked the user to add them back. The config.json states
    aux_loss_alpha 0.001 with seq_aux: the launch read back carries both, as the first one did."""
    config = json.loads(V2_LITE.read_text())
    assert config["aux_loss_alpha"] == 0.001 and config["seq_aux"] is True
    args = ("--hw", "h100", "--devices", "16", "--emit", emit)
    code, first, err = cli("plan", "--model", str(V2_LITE), *args)
    assert code == 0, err
    path = tmp_path / ("run.sh" if emit == "megatron" else "run.yaml")
    path.write_text(first)
    code, again, err = cli("plan", "--hw", "h100", read, str(path), "--emit", emit)
    assert code == 0, err
    if emit == "megatron":
        wanted = ["--moe-aux-loss-coeff 0.001", "--moe-router-load-balancing-type seq_aux_loss"]
    else:
        wanted = ["model.moe_aux_loss_coeff=0.001", "model.moe_router_load_balancing_type=seq_aux_loss"]
    for flags in (_flags(first), _flags(again)):
        assert all(w in flags for w in wanted), flags
    assert _flags(again) == _flags(first)
    assert "does not carry them" not in again


def test_a_balancing_btacalc_does_not_write_stays_ignored(cli, tmp_path):
    """Only Megatron's aux_loss and seq_aux_loss with one coefficient are the model's aux loss; sinkhorn (no
    coefficient) is still listed as ignored, and its coefficient with it."""
    code, first, err = cli("plan", "--model", str(V2_LITE), "--hw", "h100", "--devices", "16", "--emit", "megatron")
    assert code == 0, err
    text = first.replace("--moe-router-load-balancing-type seq_aux_loss", "--moe-router-load-balancing-type sinkhorn")
    path = tmp_path / "run.sh"
    path.write_text(text)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path), "--json")
    assert code == 0, err
    ignored = {row["flag"] for row in json.loads(out)["imported"]["ignored"]}
    assert {"--moe-aux-loss-coeff", "--moe-router-load-balancing-type"} <= ignored


def _rates(out: str) -> dict[str, float]:
    return {r["hardware"]: r["tokens_per_s"] for r in json.loads(out)["rows"]}


@pytest.mark.parametrize("option", [("--capacity-factor", "1.25"), ("--capacity-factor", "1.25", "--pad-to-capacity")])
def test_compare_drops_token_dropping_from_its_wafer_rows(cli, option):
    """--capacity-factor and --pad-to-capacity are Megatron's token dropping on a GPU (a wafer plan refuses them: its
    MoE layers are dropless). compare dropped every other GPU-only option from its wafer rows (_GPU_ROW_NEUTRAL) but
    refused the whole comparison for these two: the GPU row is plan's answer with them, the wafer row the one without."""
    base = ("compare", "--hw", "wse3,h100", "--devices", "16", "--quiet", "--json")
    code, out, err = cli(*base, *option)
    assert code == 0, err
    rows = _rates(out)
    code, plan_out, err = cli("plan", "--hw", "h100", "--devices", "16", *option, "--json")
    assert code == 0, err
    assert rows["h100"] == pytest.approx(json.loads(plan_out)["throughput"]["tokens_per_s"], rel=1e-12)
    code, plan_out, err = cli("plan", "--hw", "wse3", "--json")
    assert rows["wse3"] == pytest.approx(json.loads(plan_out)["throughput"]["tokens_per_s"], rel=1e-12)
    code, out, err = cli("compare", "--hw", "wse2,wse3", *option)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--capacity-factor" in err and "no GPU profile" in err
