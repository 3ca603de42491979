"""dropout35: attention dropout and hidden dropout as two switches (hostile34 D5).

Megatron-LM has two probabilities (Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_config.py L188
hidden_dropout: float = 0.1, L191 attention_dropout: float = 0.1; --hidden-dropout / --attention-dropout are made
from these fields, btacalc/data/megatron_types.tsv L34, L289):
- attention_dropout drops the attention probabilities in the core attention (dot_product_attention.py L114-116 builds
  torch.nn.Dropout(config.attention_dropout), L216-220 calls it on attention_probs): under eager attention that keeps
  a 1-byte mask a s^2 b and the 2-byte dropped-out probabilities 2 a s^2 b (Korthikanti et al. 2022, arXiv
  2205.05198, §4.1: "softmax dropout mask as^2b, dropout output 2as^2b"), heads split by TP;
- hidden_dropout drops the residual branches (transformer_layer.py L363 self.hidden_dropout = config.hidden_dropout;
  L754-756 self_attn_bda(...)(attention_output_with_bias, residual, self.hidden_dropout); L1105-1106 mlp_bda(...)
  (mlp_output_with_bias, residual, self.hidden_dropout)) and the embeddings
  (megatron/core/models/common/embeddings/language_model_embedding.py L90 torch.nn.Dropout(config.hidden_dropout),
  L154-156): a 1-byte s b h mask each (Korthikanti §4.1 "attention dropout mask sbh" after the projection and
  "dropout mask sbh" after the MLP, §4.3 the embedding dropout), split only by sequence parallelism (§4.2.2).
torch's dropout at p = 0 returns its input and keeps no mask (ATen native/Dropout.cpp `_dropout_impl`), so each
switch's tensors exist only when its own probability is above 0. Before, one ModelSpec.dropout was set from
`attention_dropout > 0 or hidden_dropout > 0` and keyed every dropout term.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from btacalc.catalogue.terms import load_catalogue
from btacalc.config.hf import hf_config_to_spec
from btacalc.config.model import validate_model
from btacalc.config.presets import load_preset, resolve_model
from btacalc.config.resolution import graph_recompute_refusal
from btacalc.errors import BtacalcError

LLAMA = resolve_model("llama-3-8b")
# the campaign's command (hostile34 D5): Llama-3-8B, 8 H100, TP 2, eager attention, full recomputation, s = 2048
EMIT = ("plan", "-m", "llama-3-8b", "--hw", "h100", "-n", "8", "--tp", "2", "--recompute", "full", "--seq", "2048",
        "--emit", "megatron")


def _launch(cli: Any, attention: str) -> str:
    code, out, err = cli(*EMIT, "--attention", attention)
    assert code == 0, err
    assert "--attention-dropout 0.0" in out and "--hidden-dropout 0.0" in out  # Llama 3 trains without dropout
    return out


def _with(launch: str, attention_p: str, hidden_p: str) -> str:
    return launch.replace("--attention-dropout 0.0", f"--attention-dropout {attention_p}").replace(
        "--hidden-dropout 0.0", f"--hidden-dropout {hidden_p}")


def _plan(cli: Any, tmp_path: Path, launch: str, *extra: str) -> dict[str, Any]:
    path = tmp_path / "launch.sh"
    path.write_text(launch)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path), "--json", *extra)
    assert code in (0, 1), err
    return json.loads(out)


def _micro_batch(launch: str) -> int:
    return int(re.search(r"--micro-batch-size (\d+)", launch).group(1))  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def eager(tmp_path_factory: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """The eager plans of the four (attention, hidden) probabilities, read back from the emitted launch."""
    import contextlib
    import io

    from btacalc.cli import main

    def run(*args: str) -> tuple[int, str, str]:  # the `cli` fixture's, once for the module (capsys is per test)
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exc:
            main(list(args))
        return int(exc.value.code or 0), buf.getvalue(), err.getvalue()

    tmp = tmp_path_factory.mktemp("eager")
    launch = _launch(run, "eager")
    plans = {pair: _plan(run, tmp, _with(launch, *pair))
             for pair in (("0.0", "0.0"), ("0.0", "0.1"), ("0.1", "0.0"), ("0.1", "0.1"))}
    return {**plans, ("launch", ""): {"text": launch}}


def _shape(eager: dict[tuple[str, str], dict[str, Any]]) -> tuple[int, int, int, int, int, int]:
    """s, h, a, t, G, b: the model's and the launch's numbers; G x b is the launch's micro-batch, G = 1 since
    freshuser21 (Megatron runs a micro-batch's attention at once; before, btacalc tiled the launch's 32 sequences)."""
    launch = eager[("launch", "")]["text"]
    plan = eager[("0.0", "0.0")]["plan"]
    tiles, tile_batch = plan["tiles"], plan["tile_batch"]
    assert tiles == 1 and tile_batch == _micro_batch(launch) > 1
    assert "--sequence-parallel" in launch and "--tensor-model-parallel-size 2" in launch
    return 2048, LLAMA.hidden_size, LLAMA.num_heads, 2, tiles, tile_batch


def _delta(eager: dict[tuple[str, str], dict[str, Any]], pair: tuple[str, str], key: str) -> int:
    return int(eager[pair]["memory_bytes"][key] - eager[("0.0", "0.0")]["memory_bytes"][key])


def test_hidden_dropout_alone_adds_the_residual_and_embedding_masks_only(eager):
    """(attention, hidden) = (0, 0.1): no s^2 tensor. Under full recomputation a rank keeps each layer's input;
    the embedding dropout mask (outside the layers, never recomputed) is kept: s h (G b) / t bytes with sequence
    parallelism. The layer re-run in the backward rebuilds its two residual masks, 1 byte x s h per sequence / t:
    the attention block's over one tile (b), the MLP's over the micro-batch (G b). Nothing else moves; the campaign
    measured 5.7 GB more (78,315,294,720 B against 72,611,041,280 B), the s^2 attention-dropout tensors."""
    s, h, _, t, g, b = _shape(eager)
    pair = ("0.0", "0.1")
    assert _delta(eager, pair, "stored_activations") == s * h * g * b // t
    assert _delta(eager, pair, "recompute_buffer") == s * h * b // t + s * h * g * b // t
    assert _delta(eager, pair, "working_set") == 0
    assert _delta(eager, pair, "total") == s * h * g * b // t + s * h * b // t + s * h * g * b // t
    assert _delta(eager, pair, "total") < 400e6  # the campaign's wrong plan was 5.7 GB above (0, 0)


def test_attention_dropout_alone_adds_the_probability_tensors_only(eager):
    """(0.1, 0): per layer the a s^2 b mask (1 B) and the dropped-out probabilities (2 B) over one tile, heads split
    by TP (a / t), rebuilt by the layer's re-run; and the dropout output of the tile being computed, 2 a s^2 b / t, as
    working set (formulas/attention.toml attn_softmax transient). No residual or embedding mask."""
    s, _, a, t, _, b = _shape(eager)
    pair = ("0.1", "0.0")
    scores = a * s * s * b // t
    assert _delta(eager, pair, "stored_activations") == 0
    assert _delta(eager, pair, "recompute_buffer") == scores * (1 + 2)
    assert _delta(eager, pair, "working_set") == 2 * scores
    assert _delta(eager, pair, "total") == 5 * scores


def test_both_dropouts_add_both_sets(eager):
    for key in ("stored_activations", "recompute_buffer", "working_set", "total"):
        assert _delta(eager, ("0.1", "0.1"), key) == _delta(eager, ("0.0", "0.1"), key) + _delta(eager, ("0.1", "0.0"),
                                                                                                  key), key


@pytest.mark.parametrize("pair", [("0.0", "0.1"), ("0.1", "0.0")])
def test_emit_and_read_back_keeps_each_probability(cli, tmp_path, pair):
    """A (0, 0.1) launch was read back as dropout on and written again as 0.1 for both."""
    launch = _with(_launch(cli, "eager"), *pair)
    path = tmp_path / "launch.sh"
    path.write_text(launch)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path), "--emit", "megatron")
    assert code == 0, err
    assert f"--attention-dropout {pair[0]}" in out and f"--hidden-dropout {pair[1]}" in out


def test_bridge_read_back_keeps_each_probability(cli, tmp_path):
    code, out, err = cli(*EMIT[:-1], "bridge", "--attention", "eager")
    assert code == 0 and "model.hidden_dropout=0.0" in out and "model.attention_dropout=0.0" in out, err
    path = tmp_path / "o.txt"
    path.write_text(out.replace("model.hidden_dropout=0.0", "model.hidden_dropout=0.1"))
    code, back, err = cli("plan", "--hw", "h100", "-n", "8", "--from-bridge", str(path), "--emit", "bridge")
    assert code == 0, err
    assert "model.hidden_dropout=0.1" in back and "model.attention_dropout=0.0" in back


def test_flash_attention_with_attention_dropout_only_adds_nothing(cli, tmp_path):
    """FlashAttention keeps only the RNG state of its dropout, no mask (Dao et al. 2022 §3.1 / Alg. 2: the mask is
    regenerated in the backward from the saved seed); with hidden_dropout 0 no residual or embedding mask exists.
    The campaign saw 683,671,552 B of residual masks added."""
    launch = _launch(cli, "flash")
    none, attention = (_plan(cli, tmp_path, _with(launch, *pair)) for pair in (("0.0", "0.0"), ("0.1", "0.0")))
    assert attention["memory_bytes"] == none["memory_bytes"]


def test_a_model_files_dropout_sets_both_switches():
    """Backwards compatibility: a preset's `dropout = true` (GPT-2, GPT-3, BLOOM: both probabilities 0.1) is both."""
    for name, on in (("gpt3-175b", True), ("bloom-176b", True), ("llama-3-8b", False)):
        spec = load_preset(name)
        assert (spec.attention_dropout, spec.hidden_dropout) == (on, on)
    data = {**LLAMA.model_dump(), "name": "m"}
    del data["attention_dropout"], data["hidden_dropout"]
    spec = validate_model({**data, "dropout": True, "attention_dropout": True}, "m.toml")  # agrees: kept
    assert (spec.attention_dropout, spec.hidden_dropout) == (True, True)
    split = validate_model({**data, "attention_dropout": False, "hidden_dropout": True}, "m.toml")
    assert (split.attention_dropout, split.hidden_dropout, split.dropout) == (False, True, True)


def test_a_model_file_contradicting_dropout_is_one_line(cli, tmp_path, monkeypatch):
    import btacalc.config.presets as presets
    import btacalc.paths as paths

    text = (Path(paths.presets_dir()) / "gpt2-small.toml").read_text()
    assert "\ndropout = true\n" in text
    (tmp_path / "gpt2-split.toml").write_text(text.replace('name = "gpt2-small"', 'name = "gpt2-split"').replace(
        "\ndropout = true\n", "\ndropout = true\nhidden_dropout = false\n"))
    monkeypatch.setattr(paths, "presets_dir", lambda: tmp_path)
    monkeypatch.setattr(presets, "presets_dir", lambda: tmp_path)
    code, out, err = cli("plan", "--model", "gpt2-split", "--hw", "h100", "--json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "dropout = true sets attention_dropout and hidden_dropout both, but hidden_dropout = false" in err
    with pytest.raises(BtacalcError, match="dropout must be true or false"):
        validate_model({**LLAMA.model_dump(), "name": "m", "dropout": 0.1}, "m.toml")


GPT2 = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
        "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}


@pytest.mark.parametrize("change, switches", [
    ({}, (True, True)),
    ({"attn_pdrop": 0.0}, (False, True)),  # GPT2Attention.attn_dropout off; resid_dropout and the embeddings' on
    ({"resid_pdrop": 0.0, "embd_pdrop": 0.0}, (True, False)),
])
def test_hugging_face_gpt2_rates_map_each_switch(change, switches):
    spec = hf_config_to_spec({**GPT2, **change}, "gpt2", "config.json")
    assert (spec.attention_dropout, spec.hidden_dropout) == switches


def test_hugging_face_split_hidden_rates_are_refused():
    with pytest.raises(BtacalcError, match="dropout on one of resid_pdrop, embd_pdrop only"):
        hf_config_to_spec({**GPT2, "embd_pdrop": 0.0}, "gpt2", "config.json")


def test_a_llama_configs_attention_dropout_is_the_attention_switch():
    """transformers' Llama family drops the attention weights with config.attention_dropout (eager_attention_forward:
    nn.functional.dropout(attn_weights, p=dropout)) and has no hidden dropout; before, > 0 was refused."""
    raw = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 128, "intermediate_size": 96, "attention_dropout": 0.1}
    spec = hf_config_to_spec(raw, "l", "config.json")
    assert (spec.attention_dropout, spec.hidden_dropout) == (True, False)
    assert not hf_config_to_spec({**raw, "attention_dropout": 0.0}, "l", "config.json").dropout


def test_each_dropout_term_is_keyed_by_its_own_switch():
    """The catalogue: attention_dropout keys the attention core's probability terms (attn_softmax, attn_pv), and
    hidden_dropout the residual, MLP and embedding masks; no term tests the old one switch."""
    by_switch: dict[str, set[str]] = {"attention_dropout": set(), "hidden_dropout": set()}
    for phase in load_catalogue():
        for term in phase.term:
            for when in term.when if isinstance(term.when, list) else [term.when]:
                assert "dropout" not in when, (phase.name, term.tensor)
                for key in by_switch:
                    if when.get(key) is True:
                        by_switch[key].add(phase.name)
    assert by_switch["attention_dropout"] == {"attn_softmax", "attn_pv"}
    # the masks after the projection (attn_out_proj) and the MLP, the embeddings' mask, and the bias-dropout-adds'
    # mask traffic counted with the norms that follow them (input_norm: the previous MLP's; post_attn_norm)
    assert by_switch["hidden_dropout"] == {"attn_out_proj", "mlp", "embedding", "input_norm", "post_attn_norm"}


def test_graphed_recomputation_is_refused_under_its_own_dropout_only():
    """transformer_config.py L2878-2885: `if self.attention_dropout != 0.0` refuses core_attn recomputed beside the
    attn graph; L2886-2895: `if self.hidden_dropout != 0.0` refuses mlp recomputed beside the mlp graph."""
    attention = LLAMA.model_copy(update={"attention_dropout": True})
    hidden = LLAMA.model_copy(update={"hidden_dropout": True})
    assert graph_recompute_refusal("core_attn", ("attn",), attention) is not None
    assert graph_recompute_refusal("core_attn", ("attn",), hidden) is None
    assert graph_recompute_refusal("mlp", ("mlp",), hidden) is not None
    assert graph_recompute_refusal("mlp", ("mlp",), attention) is None


@pytest.mark.parametrize("attention_on, hidden_on", [(False, True), (True, False)])
def test_the_reference_gpt_layer_keeps_each_dropouts_tensors_only(attention_on, hidden_on):
    """The PyTorch reference layer (btacalc.torchref GPTLayer) with one dropout at 0.1 and the other at 0, measured
    under saved_tensors_hooks, agrees with the formulas phase by phase: the softmax keeps its 16-bit output (2 a s^2 b,
    Korthikanti §4.1) and, with attention dropout, the 1-byte mask (a s^2 b); the output projection keeps its input
    (2 s b h) and, with hidden dropout, the residual mask (s b h)."""
    pytest.importorskip("torch")
    from btacalc.torchref.accuracy import compare_layer

    gpt3 = resolve_model("gpt3-175b")
    model = validate_model({**gpt3.model_dump(), "name": "gpt-small", "published_params": None, "hidden_size": 64,
                            "num_layers": 2, "num_heads": 4, "num_kv_heads": 4, "head_dim": 16, "ffn_size": 256,
                            "attention_dropout": attention_on, "hidden_dropout": hidden_on}, "test")
    c = compare_layer(model, 2, 16, 1, "eager", fake=True)
    assert c.measured_bytes == c.pytorch_bytes
    rows = {r.phase: r for r in c.phases}
    s, b, h, a = 16, 2, 64, 4
    assert rows["attn_softmax"].measured_bytes == 2 * a * s * s * b + attention_on * a * s * s * b
    assert rows["attn_out_proj"].measured_bytes == 2 * s * b * h + hidden_on * s * b * h
