"""llama4: Llama 4 Scout and Maverick from their Hugging Face config.json (model_type llama4, the text model in
text_config) and as presets, planned and emitted as Megatron runs.

Expected values come from the configs' numbers and transformers' Llama 4 classes (v5.24.0 configuration_llama4.py,
modeling_llama4.py), Meta's model card (meta-llama/llama-models @ a9c89c4 models/llama4/MODEL_CARD.md L23-38: Scout
17B activated / 109B total, Maverick 17B / 400B) and Megatron-LM @ d98e8a64's flags, not from btacalc's output.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from btacalc.config.execution import RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.hf import hf_config_to_spec, load_hf_config
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError
from btacalc.model.params import model_param_counts, published_checks
from btacalc.model.problem import make_problem

DATA = Path(__file__).parent / "data"
# the configs' shared numbers (text_config): hidden, layers, heads, key-value heads, head dim, vocabulary, the expert
# and shared-expert width (intermediate_size), the dense layers' width (intermediate_size_mlp)
H, L, A, KV, D, V, F, F_DENSE = 5120, 48, 40, 8, 128, 202048, 8192, 16384
ATTENTION = H * A * D + 2 * H * KV * D + A * D * H  # q, k, v, o (no biases, attention_bias false)
SWIGLU = 3 * H  # gate, up, down per unit of width
NORMS = 2 * H  # input and post-attention RMSNorm weights (the L2 QK norm has none)


def _counts(spec):
    return model_param_counts(make_problem(spec, resolve_hardware("wse3"), RunOptions()))


def _by_hand(experts: int, step: int) -> tuple[int, int]:
    """(total, active) of the text model: untied embedding and head, the final norm, every layer's attention and norms,
    MoE layers (every step-th) of E routed experts, one shared expert and the router (h x E, no bias), dense layers of
    intermediate_size_mlp."""
    moe_layers = L // step
    dense_layers = L - moe_layers
    common = 2 * V * H + H + L * (ATTENTION + NORMS) + dense_layers * SWIGLU * F_DENSE
    total = common + moe_layers * (experts * SWIGLU * F + SWIGLU * F + H * experts)
    active = common + moe_layers * (SWIGLU * F + SWIGLU * F + H * experts)
    return total, active


def _vision_tower() -> int:
    """The parameters of vision_config's encoder and projector (modeling_llama4.py Llama4VisionModel and
    Llama4MultiModalProjector) at the stored configs' values: hidden 1408, 34 layers of biased q/k/v/o, a biased GeLU
    MLP of 5632 and two LayerNorms; a 14 x 14 x 3 patch linear, the class embedding, (336/14)^2 + 1 positions, two more
    LayerNorms; the pixel-shuffle adapter fc1 5632 -> 4096 and fc2 4096 -> 4096; the projector 4096 -> 5120."""
    hv, iv, layers = 1408, 5632, 34
    layer = 4 * (hv * hv + hv) + (hv * iv + iv) + (iv * hv + hv) + 2 * 2 * hv
    return (3 * 14 * 14 * hv + hv + ((336 // 14) ** 2 + 1) * hv + 2 * 2 * hv + layers * layer
            + iv * 4096 + 4096 * 4096 + 4096 * H)


@pytest.mark.parametrize("name", ["llama4-scout", "llama4-maverick"])
def test_the_config_json_reads_as_the_preset(name):
    """A Llama 4 config.json (architectures Llama4ForConditionalGeneration) was refused as "unsupported architecture
    'llama4'" (freshuser23); its text_config now reads as the preset, field for field."""
    spec, preset = load_hf_config(DATA / f"{name}.config.json"), load_preset(name)
    skip = {"name", "source", "published_params"}
    assert spec.model_dump(exclude=skip | {"numerics"}) == preset.model_dump(exclude=skip | {"numerics"})
    assert spec.numerics.known() == preset.numerics.known()
    assert "vision encoder and projector are not planned" in spec.source


def test_scout_counts_against_the_model_card():
    """Scout: 16 experts in all 48 layers. The card's 17B activated is the count rounded; its 109B total counts the
    vision tower too: the text model is 107.77B, with vision_config's encoder and projector 108.64B, written 109B."""
    total, active = _by_hand(16, 1)
    pc = _counts(load_preset("llama4-scout"))
    assert (pc.total, pc.active) == (total, active)
    assert round(active / 1e9) == 17 and round(total / 1e9) == 108
    assert round((total + _vision_tower()) / 1e9) == 109
    assert all(c.matches for c in published_checks(load_preset("llama4-scout"), pc))


def test_maverick_counts_against_the_model_card():
    """Maverick: 128 experts in the odd layers (interleave_moe_layer_step 2), dense SwiGLU of 16384 in the even ones.
    400.71B total (within 0.5% of the card's 400B, with the vision tower 401.58B too), 17.18B active (17B)."""
    total, active = _by_hand(128, 2)
    pc = _counts(load_preset("llama4-maverick"))
    assert (pc.total, pc.active) == (total, active)
    assert abs(total - 400e9) <= 0.005 * 400e9 and abs(total + _vision_tower() - 400e9) <= 0.005 * 400e9
    assert round(active / 1e9) == 17
    assert all(c.matches for c in published_checks(load_preset("llama4-maverick"), pc))


@pytest.mark.parametrize("name, experts, step", [("llama4-scout", 16, 1), ("llama4-maverick", 128, 2)])
def test_flops_per_token_are_six_active_matmul_parameters_and_attention(cli, name, experts, step):
    """Training FLOPs per token = 6 x the active parameters a token multiplies (all but the input embedding's gather
    and the norms' weights: the head, attention, the routed expert, the shared expert, the router, the dense MLPs) +
    12 s a d_h per layer for the full s x s scores and P V (forward 4 s a d_h, backward twice that; btacalc's
    default counts the full s^2). The NoPE layers' missing RoPE and QK norm are element-wise, outside this count."""
    s = 4096
    moe_layers = L // step
    matmul = V * H + L * ATTENTION + moe_layers * (2 * SWIGLU * F + H * experts) + (L - moe_layers) * SWIGLU * F_DENSE
    code, out, err = cli("plan", "--model", name, "--hw", "wse3", "--seq", str(s), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["flops_per_step"]["total"] == (6 * matmul + 12 * s * A * D * L) * report["plan"]["tokens_per_step"]


def test_nope_layers_are_their_own_kind_without_rope_or_qk_norm(cli):
    """Every fourth layer (3, 7, ..., 47) has no rotary embedding and no QK norm (transformers' Llama4TextAttention:
    use_rope = no_rope_layers[i], qk_norm only where use_rope); Maverick's are all odd, so MoE layers."""
    scout, maverick = load_preset("llama4-scout"), load_preset("llama4-maverick")
    assert scout.nope_positions() == {i for i in range(L) if i % 4 == 3}
    assert [(k.name, k.count) for k in scout.layer_kinds()] == [("moe", 36), ("moe-nope", 12)]
    assert [(k.name, k.count) for k in maverick.layer_kinds()] == [("dense", 24), ("moe", 12), ("moe-nope", 12)]
    code, out, err = cli("plan", "--model", "llama4-scout", "--hw", "wse3", "--json")
    assert code == 0, err
    phases = {k["name"]: {p["name"] for p in k["phases"]} for k in json.loads(out)["layer_kinds"]}
    assert {"rope", "qk_norm"} <= phases["moe"] and not {"rope", "qk_norm"} & phases["moe-nope"]


def test_a_sequence_beyond_the_attention_chunk_is_refused_in_one_line(cli):
    """Chunked attention equals full causal attention up to attention_chunk_size (8192) tokens; beyond it btacalc has
    no model of it: plan refuses (exit 2), a sweep point is refused and the others planned."""
    code, _, err = cli("plan", "--model", "llama4-scout", "--hw", "wse3", "--seq", "16384")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "attention_chunk_size" in err
    code, _, err = cli("plan", "--model", "llama4-scout", "--hw", "wse3", "--seq", "8192")
    assert code == 0, err
    code, out, err = cli("sweep", "--model", "llama4-maverick", "--hw", "wse3", "--vary", "seq=4096,16384", "--json",
                         "--quiet")
    assert code == 0, err
    first, second = json.loads(out)["points"]
    assert first["error"] is None and "attention chunk" in second["error"]


LAYOUTS = {"llama4-scout": ("--hw", "h100", "--devices", "64", "--tp", "2", "--pp", "2", "--ep", "16", "--recompute",
                             "full"),
           "llama4-maverick": ("--hw", "h100", "--devices", "256", "--pp", "4", "--ep", "64", "--recompute", "full")}


def _emit(cli, model: str, emit: str) -> tuple[str, list[str]]:
    """The emitted file and its words outside the comments."""
    code, out, err = cli("plan", "--model", model, *LAYOUTS[model], "--emit", emit)
    assert code == 0, err
    return out, shlex.split(" ".join(line for line in out.splitlines() if not line.startswith("#")))


def test_the_megatron_launch_states_llama4s_flags(cli):
    """Each flag exists at Megatron-LM @ d98e8a64 (btacalc/data/megatron_flags.tsv, read from its parser): top-1,
    sigmoid scores, the probability on the expert's input, the shared expert's width, L2 QK norm, one NoPE layer in
    four; Maverick's dense layers in --moe-layer-freq. What Megatron lacks is said in the comments."""
    from btacalc.config.megatron_launch import megatron_flags, pattern

    known = megatron_flags()
    scout, words = _emit(cli, "llama4-scout", "megatron")
    for flag, value in (("--moe-router-topk", "1"), ("--moe-router-score-function", "sigmoid"),
                        ("--moe-shared-expert-intermediate-size", "8192"), ("--no-rope-freq", "4"),
                        ("--rope-scaling-factor", "16.0"), ("--num-experts", "16"), ("--rotary-base", "500000")):
        assert flag in known and words[words.index(flag) + 1] == value, flag
    for flag in ("--moe-apply-probs-on-input", "--qk-l2-norm", "--use-rope-scaling",
                 "--untie-embeddings-and-output-weights"):
        assert flag in known and flag in words, flag
    assert "--moe-layer-freq" not in words and "--qk-layernorm" not in words
    assert "--moe-router-pre-softmax" not in words and "--attention-softmax-in-fp32" not in words
    assert "no chunked attention" in scout and "high_freq_factor 1" in scout and "MEGATRON WOULD REFUSE" not in scout
    maverick, words = _emit(cli, "llama4-maverick", "megatron")
    assert pattern(words[words.index("--moe-layer-freq") + 1], L) == [i % 2 for i in range(L)]
    assert words[words.index("--ffn-hidden-size") + 1] == str(F_DENSE)
    assert "--qk-l2-norm" not in words and "--use-rope-scaling" not in words and "--no-rope-freq" in words


@pytest.mark.parametrize("name", ["llama4-scout", "llama4-maverick"])
@pytest.mark.parametrize("emit, flag", [("megatron", "--from-megatron"), ("bridge", "--from-bridge")])
def test_the_emitted_run_reads_back_as_the_same_plan(cli, tmp_path, name, emit, flag):
    """The launch (or Bridge overrides) read back plans the same: the plan, its time, memory and FLOPs, under the
    preset's name, with nothing of the file ignored but the placeholder run length and learning rate."""
    code, planned, err = cli("plan", "--model", name, *LAYOUTS[name], "--json")
    assert code == 0, err
    text, _ = _emit(cli, name, emit)
    path = tmp_path / f"{name}.{emit}"
    path.write_text(text)
    code, back, err = cli("plan", "--hw", "h100", flag, str(path), "--json")
    assert code == 0, err
    a, b = json.loads(planned), json.loads(back)
    for key in ("plan", "throughput", "memory_bytes", "flops_per_step", "layer_kinds"):
        assert a[key] == b[key], key
    assert b["model"]["name"].startswith(f"{name} (from ")
    assert {row["flag"] for row in b["imported"]["ignored"]} <= {"--train-iters", "--lr"}


def test_the_bridge_overrides_say_no_bridge_builds_llama4(cli):
    """Megatron-Bridge @ 067f987df registers no bridge for Llama 4 (its providers were removed in 217de1a2e): the
    overrides say so, and state the fields as model.* keys of its TransformerConfig."""
    text, words = _emit(cli, "llama4-scout", "bridge")
    assert "registers no bridge for Llama4ForConditionalGeneration" in text
    for key in ("model.qk_l2_norm=True", "model.no_rope_freq=4", "model.moe_apply_probs_on_input=True",
                "model.moe_router_score_function=sigmoid", "model.moe_router_topk=1"):
        assert key in words, key


def _config(**text) -> dict:
    raw = json.loads((DATA / "llama4-scout.config.json").read_text())
    raw["text_config"].update(text)
    return raw


@pytest.mark.parametrize("text, key", [
    ({"no_rope_layers": [1, 0] + [1] * 46}, "no_rope_layers"),
    ({"router_jitter_noise": 0.1}, "router_jitter_noise"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"layer_types": ["full_attention"] * 48}, "layer_types"),
    ({"moe_layers": [0, 0]}, "moe_layers"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 2.0, "high_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192}}, "low_freq_factor"),
])
def test_what_btacalc_cannot_plan_is_refused_by_key(text, key):
    with pytest.raises(BtacalcError) as exc:
        hf_config_to_spec(_config(**text), "x", "x.json")
    assert key in str(exc.value) and "\n" not in str(exc.value)


def test_other_layer_patterns_read_as_transformers_derives_them():
    """moe_layers overrides the step (Llama4TextConfig.__post_init__); a text-only config (model_type llama4_text,
    Llama4ForCausalLM) is read flat; a null attention_chunk_size is no chunking; no_rope_layers of all 1 is no NoPE."""
    spec = hf_config_to_spec(_config(moe_layers=[1, 5, 9], intermediate_size_mlp=1024), "x", "x.json")
    assert spec.dense_positions() == set(range(L)) - {1, 5, 9} and spec.dense_ffn_size == 1024
    flat = {**_config()["text_config"], "architectures": ["Llama4ForCausalLM"], "attention_chunk_size": None,
            "no_rope_layers": [1] * L}
    spec = hf_config_to_spec(flat, "x", "x.json")
    assert (spec.hf_model_type, spec.attention_chunk, spec.no_rope_interval) == ("llama4_text", 0, 0)
    assert spec.chunk_refusal(1 << 20) is None


def test_a_launch_of_llama4s_flags_is_read(cli, tmp_path):
    """--no-rope-freq as a list (1: NoPE) reads as the same interval; Megatron-Core's own refusals are refused in one
    line: an N that does not divide the layers (transformer_config.py L3141) and --moe-apply-probs-on-input above
    top-1 (moe/experts.py L918-921)."""
    text, _ = _emit(cli, "llama4-scout", "megatron")
    path = tmp_path / "launch.sh"
    path.write_text(text.replace("--no-rope-freq 4", "--no-rope-freq '([0]*3+[1]*1)*12'"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["name"].startswith("llama4-scout (from ")
    from btacalc.config.megatron_run import import_megatron

    model = import_megatron(path.read_text(), str(path)).model
    skip = {"name", "source", "published_params", "numerics", "attention_chunk", "hf_model_type"}
    # what the launch trains is the preset's model but for the chunking it has no flag for (full causal attention,
    # the same at its --seq-length 4096) and the numerics (said in its comments); the top-1 sigmoid router keeps its
    # one score unrenormalised (moe_utils.py L929 @ d98e8a64), as the model does
    assert model.model_dump(exclude=skip) == load_preset("llama4-scout").model_dump(exclude=skip)
    assert model.attention_chunk == 0 and model.router_renormalize is False
    for old, new, why in (("--no-rope-freq 4", "--no-rope-freq 5", "num_layers % no_rope_freq"),
                          ("--moe-router-topk 1", "--moe-router-topk 2", "top_k 1")):
        path.write_text(text.replace(old, new))
        code, _, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
        assert code == 2 and why in err and len(err.strip().splitlines()) == 1, err
