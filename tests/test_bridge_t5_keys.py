"""A Megatron-Bridge file's `model.encoder_num_layers` (fu23's finding; session 31).

The key is T5ModelProvider's alone (Megatron-Bridge @ 067f987d src/megatron/bridge/models/t5_provider.py L63, L114:
the T5 encoder's depth); a GPT provider takes its depth from model.num_layers. btacalc read it as Megatron-LM's
--encoder-num-layers, which beside a preset's num_layers (`--model`) reached a refusal whose message looked up a flag
the file never gave: an internal error (KeyError). It is listed as ignored, and the plan is the preset's."""

from __future__ import annotations

import json


def _plan(cli, tmp_path, text: str) -> tuple[int, dict, str]:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    code, out, err = cli("plan", "--from-bridge", str(path), "--model", "llama-3-8b", "--hw", "h100", "--devices", "8",
                         "--json")
    return code, json.loads(out) if out else {}, err


def test_a_t5_encoder_depth_is_listed_as_ignored_and_changes_nothing(cli, tmp_path):
    base = "mixed_precision: bf16_mixed\ntrain:\n  global_batch_size: 16\n  micro_batch_size: 1\nmodel:\n  tensor_model_parallel_size: 8\n"
    code, plain, err = _plan(cli, tmp_path, base)
    assert code in (0, 1), err
    code, with_key, err = _plan(cli, tmp_path, base + "  encoder_num_layers: 4\n")
    assert code in (0, 1) and "internal error" not in err, err
    ignored = {row["flag"]: row["reason"] for row in with_key["imported"]["ignored"]}
    assert "t5_provider.py" in ignored["model.encoder_num_layers"]
    assert with_key["model"]["num_layers"] == plain["model"]["num_layers"] == 32
    assert with_key["throughput"]["step_time_s"] == plain["throughput"]["step_time_s"]
