"""numerics23: every preset numeric from a cited source, and the Llama-like readers' other RoPE scalings.

Each expectation is derived from a stored source, not typed from btacalc: the lines each preset cites, copied verbatim
from the pinned repositories (tests/data/numerics23/excerpts.toml), Meta's arch_args of the Llama 3 SKUs
(llama-models-arch-args.json, meta-llama/llama-models @ 8c88b8c0 models/sku_list.py) and the Hugging Face config.json
fields Megatron-Bridge's conversion tests hold (tests/data/numerics23/*.config.json, Megatron-Bridge @ 067f987df).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from btacalc.config.hf import LLAMA3_FIXED
from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset, resolve_model
from support import emitted as _emit

DATA = Path(__file__).parent / "data" / "numerics23"
EXCERPTS = tomllib.loads((DATA / "excerpts.toml").read_text())
ARCH = json.loads((DATA / "llama-models-arch-args.json").read_text())["models"]


def _number(excerpt: str, pattern: str) -> float:
    """The number `pattern`'s group 1 matches in a stored excerpt (int(1e4) read as Python reads it)."""
    match = re.search(pattern, EXCERPTS[excerpt]["text"])
    assert match, (excerpt, pattern)
    text = match.group(1)
    return float(int(float(text[4:-1]))) if text.startswith("int(") else float(text)


def _megatron_defaults() -> dict[str, float]:
    """TransformerConfig's layernorm_epsilon (--norm-epsilon) and init_method_std (--init-method-std) @ d98e8a64."""
    return {"norm_eps": _number("megatron_eps", r"default=([0-9.e-]+), metadata=\{\"argparse_meta\": \{\"arg_names\": "
                                r"\[\"--norm-epsilon\"\]"),
            "init_std": _number("megatron_init", r"init_method_std: float = ([0-9.]+)")}


def _llama3(name: str) -> dict[str, float]:
    """Meta's arch_args of a Llama 3 SKU; use_scaled_rope: the reference code's apply_scaling factor."""
    args = ARCH[name]["arch_args"]
    out = {"rope_theta": float(args["rope_theta"]), "norm_eps": float(args["norm_eps"])}
    if args["use_scaled_rope"]:
        out["rope_scaling_factor"] = _number("llama3_scaling", r"scale_factor = ([0-9.]+)")
    return out


def _hf_fixture(name: str) -> dict[str, float]:
    """The numerics btacalc's Hugging Face reader takes from a Bridge test's config.json (keys checked by hand below)."""
    raw = json.loads((DATA / f"{name}.config.json").read_text())
    theta = raw.get("rope_theta", (raw.get("rope_parameters") or {}).get("rope_theta"))
    out = {"rope_theta": float(theta), "norm_eps": float(raw["rms_norm_eps"]), "init_std": float(raw["initializer_range"])}
    if (raw.get("rope_scaling") or {}).get("rope_type") == "llama3":
        out["rope_scaling_factor"] = float(raw["rope_scaling"]["factor"])
    return out


def _mpt() -> dict[str, float]:
    """llm-foundry's MPT: norm_type low_precision_layernorm (the yamls set none) is LPLayerNorm, eps default 1e-05, and
    the blocks build it without an eps; initialisation kaiming_normal_ (no one std): no init_std."""
    assert "norm_type: str = 'low_precision_layernorm'" in EXCERPTS["mpt_norm_type"]["text"]
    assert "'low_precision_layernorm': LPLayerNorm" in EXCERPTS["mpt_norm_registry"]["text"]
    assert "eps" not in EXCERPTS["mpt_norm_call"]["text"]
    assert "'name': 'kaiming_normal_'" in EXCERPTS["mpt_init"]["text"] and "'init_std': None" in EXCERPTS["mpt_init"]["text"]
    return {"norm_eps": _number("mpt_norm", r"eps: float = ([0-9.e-]+)")}


def _paper_gpt() -> dict[str, float]:
    """A Megatron-LM paper's GPT: the table states no epsilon or init std, so the run's are Megatron's defaults."""
    return _megatron_defaults()


def _derived() -> dict[str, dict[str, float]]:
    """Every numeric numerics23 gave a preset, from its stored source."""
    out: dict[str, dict[str, float]] = {
        "llama-3-8b": _llama3("llama-3-8b"),
        "llama-3.1-405b": _llama3("llama-3.1-405b"),
        "llama-3.2-1b": _hf_fixture("llama-3.2-1b"),
        "olmoe-1b-7b": _hf_fixture("olmoe-1b-7b"),
        # Llama 2 / LLaMA: ModelArgs has no theta, and the model calls precompute_freqs_cis without one
        "llama-2-7b": {"rope_theta": _number("llama2_theta", r"theta: float = ([0-9.]+)")},
        "llama-7b": {"rope_theta": _number("llama1_theta", r"theta: float = ([0-9.]+)")},
        "grok-1": {"rope_theta": _number("grok_rope", r"base_exponent=(int\([0-9e.]+\))"),
                   "norm_eps": _number("grok_rmsnorm", r"eps: float = ([0-9.e-]+)")},
        "bloom-176b": {"norm_eps": _number("mds_eps", r"'--layernorm-epsilon', type=float, default=([0-9.e-]+)"),
                       "init_std": _number("bloom_init", r"--init-method-std ([0-9.]+)")},
        "gpt3-175b": {"norm_eps": _megatron_defaults()["norm_eps"],
                      "init_std": _number("gpt3_175b_init", r"--init-method-std ([0-9.]+)")},
    }
    for name in ("mpt-1b", "mpt-3b", "mpt-7b", "mpt-13b", "mpt-30b", "mpt-70b"):
        out[name] = _mpt()
    for name in ("gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18.4b", "gpt-39.1b", "gpt-76.1b", "gpt-145.6b", "gpt-310.1b",
                 "gpt-1t", "gpt-22b", "mt-nlg-530b"):
        out[name] = _paper_gpt()
    return out


DERIVED = _derived()


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_each_preset_numeric_is_its_sources(name):
    """The preset's numerics are exactly what its stored source gives: no field more (a value from memory), none less.
    Before numerics23 these presets had no [numerics]: their launches trained Megatron-LM's RoPE base 10000 (a Llama 3
    uses 500000), its epsilon and init std."""
    spec = load_preset(name)
    known = {k: v for k, v in spec.numerics.known().items() if not (k == "rotary_percent" and v == 1.0)}
    assert known == DERIVED[name]
    assert spec.numerics.source


def test_the_fields_numerics23_added_to_sourced_presets():
    """GPT-J's RoPE base is mesh-transformer-jax's fixed_pos_embedding's 10000; Nemotron-4's epsilon is Megatron-Core's
    TransformerConfig default, which NeMo's NemotronConfig and GPTConfig leave; Qwen3-235B-A22B's init std the
    initializer_range of the config.json Bridge's test holds."""
    assert load_preset("gpt-j-6b").numerics.rope_theta == _number("gptj_rope", r"1\. / \(([0-9]+) \*\*")
    for name in ("nemotron4-15b", "nemotron4-340b"):
        assert load_preset(name).numerics.norm_eps == _megatron_defaults()["norm_eps"]
    assert load_preset("qwen3-235b-a22b").numerics.init_std == _hf_fixture("qwen3-235b-a22b")["init_std"]


def test_gpt2_init_std_is_openais_model_py():
    """OpenAI's GPT-2 code initialises every linear (conv1d's default) and the token embedding at std 0.02; its position
    embedding's 0.01 is the one value the launch does not state (left, docs/story.md numerics23)."""
    text = EXCERPTS["gpt2_conv1d"]["text"]
    assert "initializer=tf.random_normal_initializer(stddev=w_init_stdev)" in text
    wte = _number("gpt2_embeddings", r"wte = [^\n]*\n\s*initializer=tf.random_normal_initializer\(stddev=([0-9.]+)\)")
    assert load_preset("gpt2-small").numerics.init_std == _number("gpt2_conv1d", r"w_init_stdev=([0-9.]+)") == wte


@pytest.mark.parametrize("name", ["mixtral-8x7b", "mixtral-8x22b"])
def test_mixtral_init_std_is_nemos_mixtral_config(name):
    """The stored config.json has no initializer_range; NeMo's MixtralConfig states init_method_std 0.02 beside an
    epsilon and a RoPE base that are the stored copy's (so it transcribes this model, not another)."""
    raw = json.loads((Path(__file__).parent / "data" / f"{name}.config.json").read_text())
    assert _number("nemo_mixtral", r"layernorm_epsilon: float = ([0-9.e-]+)") == raw["rms_norm_eps"]
    assert _number("nemo_mixtral", r"rotary_base: float = ([0-9.]+)") == raw["rope_theta"]
    assert load_preset(name).numerics.init_std == _number("nemo_mixtral", r"init_method_std: float = ([0-9.]+)")


def test_llama_3_1_scaling_is_what_megatron_fixes():
    """Meta's apply_scaling: low_freq_factor 1, high_freq_factor 4, old_context_len 8192, Megatron-Core's fixed values
    (btacalc's LLAMA3_FIXED): --use-rope-scaling --rope-scaling-factor 8 states Llama 3.1 405B's scaling exactly."""
    text = EXCERPTS["llama3_scaling"]["text"]
    meta = {"low_freq_factor": float(re.search(r"low_freq_factor = ([0-9.]+)", text).group(1)),
            "high_freq_factor": float(re.search(r"high_freq_factor = ([0-9.]+)", text).group(1)),
            "original_max_position_embeddings": int(re.search(r"old_context_len = ([0-9]+)", text).group(1))}
    assert meta == LLAMA3_FIXED


def _llama_ffn(args: dict) -> int:
    """Meta's FeedForward width: 2/3 of 4·dim, times ffn_dim_multiplier, rounded up to multiple_of (llama model.py)."""
    hidden = int(args["ffn_dim_multiplier"] * int(2 * 4 * args["dim"] / 3))
    return args["multiple_of"] * ((hidden + args["multiple_of"] - 1) // args["multiple_of"])


@pytest.mark.parametrize("name", sorted(ARCH))
def test_the_llama_shapes_agree_with_metas_arch_args(name):
    """The shape fields checked against the same source as the numerics (no mismatch found)."""
    args, spec = ARCH[name]["arch_args"], load_preset(name)
    assert (spec.hidden_size, spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.vocab_size, spec.ffn_size) == \
        (args["dim"], args["n_layers"], args["n_heads"], args["n_kv_heads"], args["vocab_size"], _llama_ffn(args))
    assert spec.head_dim == args["dim"] // args["n_heads"]


@pytest.mark.parametrize("name,unstated", [("llama-3.2-1b", ()), ("olmoe-1b-7b", ()),
                                           # Bridge's Qwen3 fixture leaves out head_dim (128 in Qwen's own file,
                                           # tests/data/qwen3-235b-a22b.config.json): the reader's h / a is not it;
                                           # and router_aux_loss_coef (0.001 in Qwen's file: freshuser22)
                                           ("qwen3-235b-a22b", ("head_dim", "dense_ffn_size", "aux_loss_coeff"))])
def test_the_bridge_fixtures_are_the_presets_shape(name, unstated):
    """The Hugging Face reader's spec of each Bridge fixture is the preset, field by field (numerics included)."""
    read = resolve_model(str(DATA / f"{name}.config.json")).model_dump(exclude={"name", "source", "published_params"})
    preset = load_preset(name).model_dump(exclude={"name", "source", "published_params"})
    read["numerics"].pop("source"), preset["numerics"].pop("source")
    assert {k: v for k, v in read.items() if k not in unstated} == {k: v for k, v in preset.items() if k not in unstated}


@pytest.mark.parametrize("name", ["llama-3.1-405b", "llama-3.2-1b", "olmoe-1b-7b", "grok-1", "bloom-176b", "mpt-7b",
                                  "gpt3-175b", "llama-2-7b"])
def test_the_launch_trains_the_sourced_numerics(cli, name):
    """--emit megatron states each sourced value (the RoPE base as the integer Megatron's argparse takes), and the
    comment names only the fields still unknown."""
    d = DERIVED[name]
    launch = _emit(cli, f"--model {name} --hw h100 --devices 512 --tp 8 --pp 8")
    words = " ".join(line for line in launch.splitlines() if not line.startswith("#")).replace("\\", " ").split()

    def flag(f: str):
        return words[words.index(f) + 1] if f in words else None
    assert flag("--rotary-base") == (str(int(d["rope_theta"])) if "rope_theta" in d else None)
    assert flag("--norm-epsilon") == (str(d["norm_eps"]) if "norm_eps" in d else None)
    assert flag("--init-method-std") == (str(d["init_std"]) if "init_std" in d else None)
    assert flag("--rope-scaling-factor") == (str(d["rope_scaling_factor"]) if "rope_scaling_factor" in d else None)
    assert ("--use-rope-scaling" in words) == ("rope_scaling_factor" in d)
    note = next((line for line in launch.splitlines() if "gives no" in line and "source of" in line), "")
    for field, key in (("rope_theta", "rope_theta"), ("norm_eps", "rms_norm_eps"), ("init_std", "initializer_range")):
        rope = field != "rope_theta" or load_preset(name).position_embedding == "rope"
        assert (key in note) == (field not in d and rope), (field, note)


# ---- the Llama-like readers' other RoPE scalings (rope_scaling types linear, dynamic, yarn and others) ----

def _excerpt_int_flag() -> bool:
    """Megatron-LM's --rotary-seq-len-interpolation-factor is type=int (arguments.py L2422 @ d98e8a64)."""
    return "'--rotary-seq-len-interpolation-factor', type=int, default=None" in EXCERPTS["megatron_interp"]["text"]


def _scaled_config(tmp_path, scaling: dict, key: str = "rope_scaling") -> Path:
    """Megatron-Bridge's Llama 3.2 1B fixture with another rope_scaling (transformers 5: rope_parameters)."""
    raw = json.loads((DATA / "llama-3.2-1b.config.json").read_text())
    raw.pop("rope_scaling")
    raw["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
    raw[key] = {**raw.get(key, {}), **scaling}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize("key", ["rope_scaling", "rope_parameters"])
def test_a_linear_rope_scaling_is_launched_and_read_back(cli, tmp_path, key):
    """rope_scaling type linear (positions divided by the factor) was read as plain RoPE without a word. Megatron-LM
    trains it with --rotary-seq-len-interpolation-factor (an int), Megatron-Bridge with model.seq_len_interpolation_factor
    (the Llama bridge maps type linear's factor onto it: llama_bridge.py L72-73, stored in excerpts.toml)."""
    assert _excerpt_int_flag()
    assert 'config_kwargs["seq_len_interpolation_factor"] = rope_scaling["factor"]' in EXCERPTS["bridge_linear"]["text"]
    factor = 4.0
    path = _scaled_config(tmp_path, {"type" if key == "rope_scaling" else "rope_type": "linear", "factor": factor}, key)
    assert resolve_model(str(path)).numerics.rope_interpolation_factor == int(factor)
    given = f"--model {path} --hw h100 --devices 8 --tp 8"
    launch = _emit(cli, given)
    words = " ".join(line for line in launch.splitlines() if not line.startswith("#")).replace("\\", " ").split()
    assert words[words.index("--rotary-seq-len-interpolation-factor") + 1] == str(int(factor))
    assert "--use-rope-scaling" not in words and "--position-embedding-type" in words
    assert import_megatron(launch, "m.sh").model.numerics.rope_interpolation_factor == int(factor)
    overrides = _emit(cli, given, "bridge")
    assert f"model.seq_len_interpolation_factor={int(factor)}" in overrides.splitlines()
    # the overrides are of Llama 3.2 1B's shape: the read took that preset's llama3 factor 32 beside the linear one
    # (refused as both) before numerics23; a run that states a scaling takes no other kind from the preset
    back = import_bridge(overrides, "b.txt", devices=8).model.numerics
    assert (back.rope_interpolation_factor, back.rope_scaling_factor) == (int(factor), None)
    unscaled = "\n".join(line for line in launch.splitlines() if "interpolation" not in line)
    assert import_megatron(unscaled, "m.sh").model.numerics.rope_interpolation_factor is None  # argparse's None


@pytest.mark.parametrize("factor", [2.5, 0.5])
def test_a_linear_factor_megatron_lm_cannot_take_is_bridges(cli, tmp_path, factor):
    """hostile24: a non-integer linear factor was refused ("Megatron-LM's flag takes an integer"), though Megatron-
    Bridge's field is a float that its Llama bridge fills with the config.json's factor as given, and Megatron-Core
    multiplies the positions by 1 / factor (the stored lines). It is planned; `--emit bridge` writes it and reads it
    back; `--emit megatron` refuses in one line: --rotary-seq-len-interpolation-factor is type=int."""
    assert "seq_len_interpolation_factor: Optional[float] = None" in EXCERPTS["bridge_interp_field"]["text"]
    assert "seq *= 1 / self.seq_len_interpolation_factor" in EXCERPTS["core_interp"]["text"]
    assert _excerpt_int_flag()
    path = _scaled_config(tmp_path, {"type": "linear", "factor": factor})
    assert resolve_model(str(path)).numerics.rope_interpolation_factor == factor
    given = f"--model {path} --hw h100 --devices 8 --tp 8"
    overrides = _emit(cli, given, "bridge")
    assert f"model.seq_len_interpolation_factor={factor}" in overrides.splitlines()
    assert import_bridge(overrides, "b.txt", devices=8).model.numerics.rope_interpolation_factor == factor
    out = tmp_path / "launch.sh"
    code, _, err = cli("plan", *given.split(), "--emit", "megatron", "-o", str(out))
    assert code == 2 and err.count("\n") == 1 and not out.exists(), err
    assert f"linear RoPE scaling factor {factor:g} is no integer" in err and "type=int" in err


@pytest.mark.parametrize("factor", [0, -2.0, "NaN", "Infinity"])
def test_a_linear_factor_megatron_core_cannot_train_is_refused(cli, tmp_path, factor):
    """0 divides by zero in Megatron-Core (the stored line); a negative, nan or infinite factor is no scaling."""
    path = tmp_path / "config.json"
    path.write_text(_scaled_config(tmp_path, {"type": "linear", "factor": 2.0}).read_text().replace(
        '"factor": 2.0', f'"factor": {factor}'))
    code, out, err = cli("plan", "--model", str(path), "--hw", "h100", "--devices", "8")
    assert code == 2 and "rope_scaling linear factor must be a finite number above 0" in err, err
    assert err.count("\n") == 1


@pytest.mark.parametrize("value", ["2.5", "0", "x"])
def test_a_launchs_bad_interpolation_factor_is_one_line(cli, tmp_path, value):
    """Megatron's argparse takes an integer (type=int); below 1 divides positions by nothing sensible."""
    path = _scaled_config(tmp_path, {"type": "linear", "factor": 2.0})
    launch = _emit(cli, f"--model {path} --hw h100 --devices 8 --tp 8")
    bad = launch.replace("--rotary-seq-len-interpolation-factor 2", f"--rotary-seq-len-interpolation-factor {value}")
    script = tmp_path / "m.sh"
    script.write_text(bad)
    code, out, err = cli("plan", "--from-megatron", str(script), "--hw", "h100")
    assert code == 2 and "interpolation" in err and err.count("\n") <= 1, err


@pytest.mark.parametrize("scaling,word", [({"rope_type": "dynamic", "factor": 2.0}, "dynamic"),
                                          ({"type": "dynamic", "factor": 4.0}, "dynamic"),
                                          ({"rope_type": "longrope", "factor": 4.0, "short_factor": [1.0],
                                            "long_factor": [1.0]}, "longrope"),
                                          ({"rope_type": "su", "factor": 4.0}, "'su'"),
                                          ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192,
                                            "attention_factor": 1.2}, "attention_factor")])
def test_a_rope_scaling_megatron_cannot_state_is_refused_in_one_line(cli, tmp_path, scaling, word):
    """Megatron-Core @ d98e8a64 has no dynamic NTK rotary embedding (its embeddings: rotary with linear interpolation
    or Llama 3 scaling, YaRN, multimodal), and Bridge's Llama bridge maps llama3 and linear only: such a config used to
    be planned and launched as plain RoPE, another model. Now one line, exit 2, naming the type."""
    path = _scaled_config(tmp_path, scaling)
    code, out, err = cli("plan", "--model", str(path), "--hw", "h100", "--devices", "8")
    assert code == 2 and word in err and err.count("\n") <= 1 and "Traceback" not in err, err


def test_a_yarn_scaling_on_a_llama_config_is_launched_and_read_back(cli, tmp_path):
    """rope_scaling type yarn on a Llama config was dropped; GPT models train YaRN with --position-embedding-type yarn
    and its flags (gpt_model.py L196-215 @ d98e8a64), as btacalc's GPT-OSS launch already states."""
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192, "beta_fast": 32.0,
               "beta_slow": 1.0}
    path = _scaled_config(tmp_path, scaling)
    spec = resolve_model(str(path))
    assert spec.yarn is not None and (spec.yarn.factor, spec.yarn.original_max_position_embeddings) == (4.0, 8192)
    launch = _emit(cli, f"--model {path} --hw h100 --devices 8 --tp 8")
    words = " ".join(line for line in launch.splitlines() if not line.startswith("#")).replace("\\", " ").split()
    assert words[words.index("--position-embedding-type") + 1] == "yarn"
    assert float(words[words.index("--rotary-scaling-factor") + 1]) == scaling["factor"]
    assert import_megatron(launch, "m.sh").model.yarn == spec.yarn
    overrides = _emit(cli, f"--model {path} --hw h100 --devices 8 --tp 8", "bridge")
    back = import_bridge(overrides, "b.txt", devices=8).model
    assert back.yarn == spec.yarn and back.numerics.rope_scaling_factor is None


def test_default_and_llama3_scalings_read_as_before(tmp_path):
    """rope_type default is plain RoPE; llama3 keeps semantics22's reading (Bridge's Llama 3.2 1B fixture: 32)."""
    assert resolve_model(str(_scaled_config(tmp_path, {"rope_type": "default"}))).numerics.known() == {
        "rope_theta": 500000.0, "norm_eps": 1e-05, "init_std": 0.02, "rotary_percent": 1.0}
    assert resolve_model(str(DATA / "llama-3.2-1b.config.json")).numerics.rope_scaling_factor == \
        json.loads((DATA / "llama-3.2-1b.config.json").read_text())["rope_scaling"]["factor"]


@pytest.mark.parametrize("name", ["gpt-oss-120b", "deepseek-v3", "mixtral-8x7b"])
def test_a_transformers_5_rope_parameters_reads_as_its_rope_scaling(name):
    """transformers 5 moves rope_scaling (and rope_theta) into rope_parameters; Bridge reads either
    (conversion/transformers_compat.py L27-60 @ 067f987df). The stored config.json rewritten so reads the same model:
    GPT-OSS's and DeepSeek-V3's YaRN were read as plain RoPE without a word."""
    raw = json.loads((Path(__file__).parent / "data" / f"{name}.config.json").read_text())
    v5 = {k: v for k, v in raw.items() if k not in ("rope_scaling", "rope_theta")}
    v5["rope_parameters"] = {**(raw.get("rope_scaling") or {"rope_type": "default"}), "rope_theta": raw["rope_theta"]}
    from btacalc.config.hf import hf_config_to_spec
    old, new = hf_config_to_spec(raw, name, "a.json"), hf_config_to_spec(v5, name, "b.json")
    assert new.yarn == old.yarn and (new.yarn is not None) == (raw.get("rope_scaling") is not None)
    assert new.numerics.known() == old.numerics.known()
