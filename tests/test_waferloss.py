"""A GPU framework's cross-entropy on a wafer (thirty-second session; hostile39 and freshuser24 both noticed it).

`--loss vocab_parallel` (Megatron-Core's vocab-parallel cross-entropy), `native_fused` (Megatron's compiled one) and
`te_fused` (TransformerEngine's) are GPU kernels (formulas/head.toml): a wafer plan took them and changed its loss
memory for kernels a wafer-scale run does not have, while PyTorch's two (torch_fp32, torch_fp32_held) were already
refused. A wafer computes the loss as its compiler does: `fused` (its default) or Korthikanti's `stored`."""

from __future__ import annotations

import json

import pytest

from btacalc.vocabulary import GPU_LOSSES, MEGATRON_LOSSES, TORCH_LOSSES


def test_the_gpu_losses_are_megatrons_and_pytorchs():
    assert set(GPU_LOSSES) == set(MEGATRON_LOSSES) | set(TORCH_LOSSES)
    assert set(MEGATRON_LOSSES) == {"vocab_parallel", "native_fused", "te_fused"}


@pytest.mark.parametrize("loss", GPU_LOSSES)
@pytest.mark.parametrize("command", [("plan",), ("sweep", "--vary", "tiles=1,2"),
                                     ("whatif", "--target", "tokens_per_s=1e6", "--solve-for", "sram_bytes")])
def test_a_wafer_refuses_a_gpu_frameworks_loss_in_one_line(cli, loss, command):
    code, out, err = cli(*command, "-m", "qwen3-30b-a3b", "--hw", "wse3", "--loss", loss)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--loss" in err and "Traceback" not in err, err


@pytest.mark.parametrize("loss", ["fused", "stored"])
def test_a_wafer_plans_its_own_losses(cli, loss):
    code, out, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "wse3", "--loss", loss, "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["loss"] == loss


def test_compare_plans_the_wafer_row_at_its_own_loss_and_the_gpu_rows_at_the_one_given(cli):
    code, out, err = cli("compare", "-m", "qwen3-30b-a3b", "--hw", "wse3,b200", "--devices", "8", "--loss", "te_fused",
                         "--json")
    assert code == 0, err
    rows = {r["hardware"]: r for r in json.loads(out)["rows"]}
    assert rows["wse3"]["run_options"] == [] and rows["b200"]["run_options"] == ["--loss te_fused"]
    code, wafer, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "wse3", "--json")
    assert code == 0, err
    assert rows["wse3"]["tokens_per_s"] == pytest.approx(json.loads(wafer)["throughput"]["tokens_per_s"], rel=1e-12)
    code, _, err = cli("compare", "-m", "qwen3-30b-a3b", "--hw", "wse3", "--loss", "vocab_parallel")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "{loss}" not in err and "--loss" in err, err
