"""semantics22: a launch that trains the model's numerics, not Megatron-LM's defaults.

Megatron-LM @ d98e8a64 megatron/training/arguments.py: --rotary-base (type=int, default 10000, L2418), --rotary-percent
(1.0, L2420), --norm-epsilon (layernorm_epsilon, 1e-05) and --init-method-std (0.02), each a TransformerConfig field
(transformer_config.py L201, L400; MLATransformerConfig's rotary_base / rotary_percent L3309-3312, which multi-latent
attention's rotary embeddings read, multi_latent_attention.py L184-192). Megatron-Bridge @ 067f987df takes the same
fields from a Hugging Face config (conversion/model_bridge.py L466-467 rms_norm_eps -> layernorm_epsilon,
initializer_range -> init_method_std; L476-477 rope_theta -> rotary_base, partial_rotary_factor -> rotary_percent).
Every expectation below comes from the stored config.json copies (tests/data) or those lines, not from btacalc.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from btacalc.config.megatron_rows import megatron_default
from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset, resolve_model
from support import emitted as _emit, hf_config as _hf

DATA = Path(__file__).parent / "data"

# Megatron-Bridge's AutoBridge names (model_bridge.py L466-467, L476-477): Hugging Face key -> TransformerConfig field
AUTOBRIDGE = {"rope_theta": "rotary_base", "rms_norm_eps": "layernorm_epsilon", "initializer_range": "init_method_std",
              "partial_rotary_factor": "rotary_percent"}
# Megatron-LM's flag of each field (arguments.py; btacalc/data/megatron_flags.tsv)
FLAG = {"rotary_base": "--rotary-base", "layernorm_epsilon": "--norm-epsilon", "init_method_std": "--init-method-std",
        "rotary_percent": "--rotary-percent"}
# (preset, its stored config.json, a layout that plans)
CONFIGS = [("qwen3-30b-a3b", "--devices 8 --ep 8"), ("qwen3-235b-a22b", "--devices 64 --ep 8 --pp 8"),
           ("mixtral-8x7b", "--devices 8 --ep 8"), ("mixtral-8x22b", "--devices 64 --ep 8 --pp 8"),
           ("llama-3-70b", "--devices 8 --tp 8"), ("kimi-k2", "--devices 1024 --pp 16 --ep 64 --etp 1"),
           ("deepseek-v3", "--devices 1024 --tp 2 --pp 16 --ep 64 --etp 1"), ("gpt-oss-120b", "--devices 8 --ep 8")]


def _words(launch: str) -> list[str]:
    """The command's words (the comment lines left out)."""
    command = "\n".join(line for line in launch.splitlines() if not line.startswith("#"))
    return command.replace("\\\n", " ").split()


def _flag(launch: str, flag: str):
    words = _words(launch)
    return words[words.index(flag) + 1] if flag in words else None


def _overrides(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize("model,layout", CONFIGS)
def test_the_launch_trains_the_config_jsons_numerics(cli, model, layout):
    """Each field the stored config.json gives is the launch's flag: --rotary-base as the integer Megatron's argparse
    takes (type=int: "1000000", not "1e+06"), --norm-epsilon and --init-method-std as numbers. Before, the launch gave
    none of them: Megatron trained 10000, 1e-05 and 0.02."""
    hf = _hf(model)
    launch = _emit(cli, f"--model {model} --hw h100 {layout}")
    for key in ("rope_theta", "rms_norm_eps", "initializer_range"):
        if key not in hf:
            continue
        text = _flag(launch, FLAG[AUTOBRIDGE[key]])
        assert text is not None, (model, key)
        if key == "rope_theta":
            assert int(text) == hf[key], model  # int() raises on "1e+06", as Megatron's argparse does
        else:
            assert float(text) == hf[key], (model, key)


def test_multi_latent_attention_reads_the_rope_base_too(cli):
    """Kimi K2's config.json rope_theta 50000 (tests/data): MLA builds its rotary embedding from the config's rotary_base
    (multi_latent_attention.py L184-192), which argument_utils copies from --rotary-base: the launch says 50000."""
    launch = _emit(cli, "--model kimi-k2 --hw h100 --devices 1024 --pp 16 --ep 64 --etp 1")
    assert int(_flag(launch, "--rotary-base")) == _hf("kimi-k2")["rope_theta"] == 50000


def test_gpt_j_turns_a_quarter_of_each_head(cli):
    """GPT-J's config.json: rotary_dim 64 of heads of n_embd / n_head = 4096 / 16 = 256 dimensions; Megatron turns the
    whole head unless --rotary-percent says otherwise (default 1.0, arguments.py L2420)."""
    hf = _hf("gpt-j-6b")
    share = hf["rotary_dim"] / (hf["n_embd"] // hf["n_head"])
    assert share == 0.25 and megatron_default("rotary_percent") == 1.0
    launch = _emit(cli, "--model gpt-j-6b --hw h100 --devices 8 --tp 8")
    assert float(_flag(launch, "--rotary-percent")) == share
    assert float(_flag(launch, "--norm-epsilon")) == hf["layer_norm_epsilon"]
    assert resolve_model(str(DATA / "gpt-j-6b.config.json")).numerics.rotary_percent == share


def test_a_trimmed_config_leaves_the_field_unknown_and_the_note_names_it(cli, tmp_path):
    """tests/data/llama-3-8b.config.json is trimmed: no rope_theta, rms_norm_eps or initializer_range. The Hugging Face
    reader keeps them None (not the family's default), the launch leaves those flags at Megatron's defaults and the
    comment names each missing field; GPT-J's copy has layer_norm_epsilon, so its comment names only rope_theta and
    initializer_range."""
    hf = _hf("llama-3-8b")
    assert not {"rope_theta", "rms_norm_eps", "initializer_range"} & set(hf)
    spec = resolve_model(str(DATA / "llama-3-8b.config.json"))
    assert (spec.numerics.rope_theta, spec.numerics.norm_eps, spec.numerics.init_std) == (None, None, None)
    launch = _emit(cli, f"--model {DATA / 'llama-3-8b.config.json'} --hw h100 --devices 8 --tp 8")
    assert _flag(launch, "--rotary-base") is None and _flag(launch, "--norm-epsilon") is None
    note = next(line for line in launch.splitlines() if line.startswith("#") and "rope_theta" in line)
    assert "--rotary-base 10000" in note and "rms_norm_eps" in note and "initializer_range" in note
    # the stored copy, not the preset (numerics23 gave the preset mesh-transformer-jax's RoPE base)
    gptj = _emit(cli, f"--model {DATA / 'gpt-j-6b.config.json'} --hw h100 --devices 8 --tp 8")
    note = next(line for line in gptj.splitlines() if line.startswith("#") and "rope_theta" in line)
    assert "initializer_range" in note and "layer_norm_epsilon" not in note and "--norm-epsilon" not in note


def test_a_config_without_rotary_embedding_states_no_rope_base(cli):
    """GPT-2's learned positions: --rotary-base would be ignored (no RotaryEmbedding); its layer_norm_epsilon is
    stated, and its comment does not ask for a RoPE base."""
    launch = _emit(cli, "--model gpt2-small --hw h100 --devices 8 --seq 1024")
    assert _flag(launch, "--rotary-base") is None
    assert float(_flag(launch, "--norm-epsilon")) == _hf("gpt2-small")["layer_norm_epsilon"]
    assert "rope_theta" not in launch


@pytest.mark.parametrize("model,layout", CONFIGS[:3] + [("gpt-j-6b", "--devices 8 --tp 8"),
                                                        ("nemotron4-15b", "--devices 8 --tp 8")])
def test_megatron_and_bridge_read_the_numerics_back(cli, model, layout):
    preset = load_preset(model).numerics
    launch = _emit(cli, f"--model {model} --hw h100 {layout}")
    read = import_megatron(launch, "m.sh")
    for run in (read, import_bridge(_emit(cli, f"--model {model} --hw h100 {layout}", "bridge"), "b.txt",
                                    devices=read.request.devices)):
        assert {k: v for k, v in run.model.numerics.known().items() if getattr(preset, k) is not None} == preset.known()
        assert not [n for n in run.notes if "another model than the preset's" in n], run.notes
        assert not [flag for flag, _ in run.ignored if "rotary" in flag or "epsilon" in flag or "init" in flag]


def test_the_bridge_overrides_use_autobridges_field_names(cli):
    """The Bridge overrides state the config.json's values under the TransformerConfig fields AutoBridge writes them to
    (model_bridge.py L466-477), so they agree with what Bridge takes from the Hugging Face config."""
    hf = _hf("qwen3-30b-a3b")
    overrides = _overrides(_emit(cli, "--model qwen3-30b-a3b --hw h100 --devices 8 --ep 8", "bridge"))
    for key in ("rope_theta", "rms_norm_eps", "initializer_range"):
        assert float(overrides[f"model.{AUTOBRIDGE[key]}"]) == hf[key], key


def test_a_launch_without_the_rope_base_trains_megatrons_and_is_said(cli):
    """A Qwen3 launch without --rotary-base trains Megatron's 10000 (the parser's default): read back as 10000, and the
    read says it is not the preset's rope_theta 1e6 (as the codec names other model differences)."""
    launch = _emit(cli, "--model qwen3-30b-a3b --hw h100 --devices 8 --ep 8")
    without = "\n".join(line for line in launch.splitlines() if "--rotary-base" not in line)
    run = import_megatron(without, "m.sh")
    assert run.model.numerics.rope_theta == megatron_default("rotary_base") == 10000
    note = next(n for n in run.notes if "RoPE base" in n)
    theirs = load_preset("qwen3-30b-a3b").numerics.rope_theta
    assert "RoPE base 10000 " in note and f"rope_theta {int(theirs)} " in note and "qwen3-30b-a3b" in note


def test_bridge_overrides_without_the_numerics_keep_the_hugging_face_configs(cli):
    """An override file that leaves model.rotary_base out keeps what AutoBridge took from the Hugging Face config
    (model_bridge.py L476, L584-588), not Megatron-LM's argparse default: read as the preset's (the model of this shape,
    or the plan's --model), with no note."""
    text = _emit(cli, "--model qwen3-30b-a3b --hw h100 --devices 8 --ep 8", "bridge")
    without = "\n".join(line for line in text.splitlines()
                        if not line.startswith(("model.rotary_base", "model.layernorm_epsilon", "model.init_method_std")))
    for base in (None, load_preset("qwen3-30b-a3b")):
        run = import_bridge(without, "b.txt", devices=8, base=base)
        assert run.model.numerics.known() == load_preset("qwen3-30b-a3b").numerics.known()
        assert not [n for n in run.notes if "another model than the preset's" in n]


def test_bridge_mla_overrides_without_the_yarn_factor_train_the_providers(cli):
    """review20 left it: the Bridge reader took an absent model.rotary_scaling_factor at Megatron-LM's argparse 1.0
    ("no YaRN"). A Bridge MLA provider is an MLATransformerConfig (mla_provider.py L28), whose factor is 40, mscale 1.0,
    mscale_all_dim 0.0 (transformer_config.py L3315, L3327, L3330), over which AutoBridge writes the Hugging Face
    rope_scaling (model_bridge.py L516-523) and the DeepSeek-V3 recipe 40 again (recipes/deepseek/h100/deepseek_v3.py
    L143): read as the provider's (DeepSeek-V3's config.json rope_scaling with --model deepseek-v3)."""
    text = _emit(cli, "--model deepseek-v3 --hw h100 --devices 1024 --tp 2 --pp 16 --ep 64 --etp 1", "bridge")
    without = "\n".join(line for line in text.splitlines()
                        if not line.startswith(("model.rotary_scaling_factor", "model.mscale")))
    hf = _hf("deepseek-v3")["rope_scaling"]
    yarn = import_bridge(without, "b.txt", devices=1024, base=load_preset("deepseek-v3")).model.yarn
    assert yarn is not None and (yarn.factor, yarn.mscale, yarn.mscale_all_dim) == (
        hf["factor"], hf["mscale"], hf["mscale_all_dim"])
    yarn = import_bridge(without, "b.txt", devices=1024).model.yarn
    assert yarn is not None and (yarn.factor, yarn.mscale, yarn.mscale_all_dim) == (40.0, 1.0, 0.0)
    # a Megatron-LM launch without the flag trains the argparse default 1.0: no YaRN (semantics21), unchanged
    launch = _emit(cli, "--model deepseek-v3 --hw h100 --devices 1024 --tp 2 --pp 16 --ep 64 --etp 1")
    plain = "\n".join(line for line in launch.splitlines() if "--rotary-scaling-factor" not in line)
    assert import_megatron(plain, "m.sh").model.yarn is None


@pytest.mark.parametrize("value", ["-1", "0", "true", '"1e6"', "NaN", "Infinity"])
def test_a_bad_numeric_in_a_config_json_is_one_line(cli, tmp_path, value):
    raw = (DATA / "qwen3-30b-a3b.config.json").read_text()
    path = tmp_path / "config.json"
    path.write_text(raw.replace('"rope_theta": 1000000.0', f'"rope_theta": {value}'))
    assert f'"rope_theta": {value}' in path.read_text()
    code, out, err = cli("plan", "--model", str(path), "--hw", "h100", "--devices", "8")
    assert code == 2 and err.count("\n") <= 1 and "rope_theta" in err, err


@pytest.mark.parametrize("model,devices", [("deepseek-v3", "1024"), ("gpt-oss-20b", "8")])
def test_sweep_plans_mla_and_yarn_models(cli, model, devices):
    """`sweep` keyed a model's structure by its fields as a tuple, which a nested field (MLA, YaRN, numerics) made an
    internal error ("unhashable type: 'dict'") for DeepSeek-V3, Kimi K2, GPT-OSS and the DeepSeek proxy."""
    code, out, err = cli("sweep", "--model", model, "--hw", "h100", "--devices", devices, "--vary", "seq=1024,2048",
                         "--json")
    assert code == 0, err
    assert len(json.loads(out)["points"]) == 2


def test_the_numerics_change_no_prediction(cli):
    """The numerics are of the same shapes: two models that differ only in them plan the same memory, FLOPs and time."""
    spec = load_preset("qwen3-30b-a3b")
    other = spec.model_copy(update={"numerics": spec.numerics.model_copy(update={"rope_theta": 10000.0})})
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.planning.plan import make_plan

    request = ExecutionRequest(devices=8, expert_parallel=8)
    a, b = (make_plan(s, resolve_hardware("h100"), request) for s in (spec, other))
    assert other.numerics != spec.numerics
    assert a.model_dump(exclude={"model"}) == b.model_dump(exclude={"model"})


# NeMo @ c341fb3801651311be46332d6af106bd2c2f37e6 nemo/collections/llm/gpt/model/nemotron.py, the presets' source:
# NemotronConfig activation_func squared_relu (L41), rotary_percent 0.5 (L48), layernorm_zero_centered_gamma True (L52);
# Nemotron4Config15B init_method_std 0.0134 (L112), Nemotron4Config340B 0.0063 (L124); GPTConfig rotary_base 10000
# (base.py L169). Megatron-Bridge's nemotron_bridge.py L62 / L69 set the same activation and norm.
NEMOTRON = {"nemotron4-15b": 0.0134, "nemotron4-340b": 0.0063}


@pytest.mark.parametrize("model", sorted(NEMOTRON))
def test_a_nemotron_launch_trains_squared_relu_and_its_zero_centred_norm(cli, model):
    """Before, the launch trained GeLU (Megatron's ungated MLP without --squared-relu, argument_utils.py L318-322),
    plain LayerNorm and a whole-head RoPE at init std 0.02."""
    layout = "--devices 8 --tp 8" if model == "nemotron4-15b" else "--devices 512 --tp 8 --pp 16"
    launch = _emit(cli, f"--model {model} --hw h100 {layout}")
    words = _words(launch)
    assert "--squared-relu" in words and "--apply-layernorm-1p" in words and "--swiglu" not in words
    assert float(_flag(launch, "--rotary-percent")) == 0.5 and float(_flag(launch, "--init-method-std")) == NEMOTRON[model]
    assert int(_flag(launch, "--rotary-base")) == 10000
    overrides = _overrides(_emit(cli, f"--model {model} --hw h100 {layout}", "bridge"))
    assert overrides["model.activation_func"] == "squared_relu"  # Bridge's activation_map.py L48 name
    assert overrides["model.layernorm_zero_centered_gamma"] == "True"
    read = import_megatron(launch, "m.sh")
    assert (read.model.mlp_activation, read.model.norm_zero_centered) == ("squared_relu", True)
    assert not [n for n in read.notes if "another model" in n]
    plain = "\n".join(line for line in launch.splitlines() if "--squared-relu" not in line
                      and "--apply-layernorm-1p" not in line)
    notes = [n for n in import_megatron(plain, "m.sh").notes if "another model" in n]
    assert len(notes) == 2 and any("squared_relu" in n for n in notes) and any("norm_zero_centered" in n for n in notes)


def test_squared_relu_with_a_gated_activation_is_refused(cli, tmp_path):
    """argument_utils.py L320-325 @ d98e8a64: `assert not args.swiglu` under --squared-relu."""
    launch = _emit(cli, "--model llama-3-70b --hw h100 --devices 8 --tp 8").replace("--swiglu", "--swiglu --squared-relu")
    path = tmp_path / "l.sh"
    path.write_text(launch)
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100")
    assert code == 2 and "--squared-relu" in err and err.count("\n") <= 1, err


def _llama3_config(tmp_path, **scaling) -> Path:
    """Llama-3-70B's stored config.json with a Llama 3.1 rope_scaling (rope_type llama3), as Megatron-Core fixes it:
    low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192 (rotary_pos_embedding.py L92-98)."""
    raw = _hf("llama-3-70b")
    raw["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192, **scaling}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return path


def test_a_llama3_rope_scaling_is_launched_and_read_back(cli, tmp_path):
    """The Hugging Face reader dropped rope_type llama3 without a word, so a Llama 3.1 launch trained unscaled RoPE.
    Megatron-LM builds it with --use-rope-scaling --rope-scaling-factor (arguments.py L2424-2427, default off / 8.0);
    Megatron-Bridge's Llama bridge sets model.rope_scaling and model.rope_scaling_factor (llama_bridge.py L67-71)."""
    path = _llama3_config(tmp_path, factor=16.0)
    assert resolve_model(str(path)).numerics.rope_scaling_factor == 16.0
    given = f"--model {path} --hw h100 --devices 8 --tp 8"
    launch = _emit(cli, given)
    assert "--use-rope-scaling" in _words(launch) and float(_flag(launch, "--rope-scaling-factor")) == 16.0
    assert import_megatron(launch, "m.sh").model.numerics.rope_scaling_factor == 16.0
    overrides = _emit(cli, given, "bridge")
    assert {"model.rope_scaling=True", "model.rope_scaling_factor=16.0"} <= set(overrides.splitlines())
    assert import_bridge(overrides, "b.txt", devices=8).model.numerics.rope_scaling_factor == 16.0
    switch_only = "\n".join(line for line in launch.splitlines() if "--rope-scaling-factor" not in line)
    assert import_megatron(switch_only, "m.sh").model.numerics.rope_scaling_factor == megatron_default(
        "rope_scaling_factor") == 8.0
    unscaled = "\n".join(line for line in launch.splitlines() if "rope-scaling" not in line)
    assert import_megatron(unscaled, "m.sh").model.numerics.rope_scaling_factor == 1.0


def test_a_llama3_rope_scaling_megatron_cannot_say_is_refused(cli, tmp_path):
    path = _llama3_config(tmp_path, high_freq_factor=2.0)
    code, out, err = cli("plan", "--model", str(path), "--hw", "h100", "--devices", "8")
    assert code == 2 and "high_freq_factor" in err and err.count("\n") <= 1, err


@pytest.mark.parametrize("flag,value", [("--norm-epsilon", "0"), ("--init-method-std", "nan"),
                                        ("--rotary-percent", "1.5"), ("--rotary-base", "0"), ("--rotary-base", "1e6")])
def test_a_launchs_numerics_out_of_range_are_refused_naming_the_flag(cli, tmp_path, flag, value):
    """ModelSpec.numerics' bounds (an epsilon and a std in (0, 1), a share in (0, 1], a positive base; --rotary-base an
    integer as Megatron's argparse reads it, type=int) as one line naming the launch's flag, not btacalc's field."""
    launch = _emit(cli, "--model llama-3-70b --hw h100 --devices 8 --tp 8")
    words = launch.replace("--rotary-base 500000", f"{flag} {value}" if flag != "--norm-epsilon" else "")
    words = words.replace("--norm-epsilon 1e-05", f"{flag} {value}") if flag == "--norm-epsilon" else words
    path = tmp_path / "l.sh"
    path.write_text(words)
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100")
    assert code == 2 and err.count("\n") <= 1 and flag in err and "field numerics" not in err, err


def test_a_rope_base_megatron_cannot_take_is_left_out_and_said(cli, tmp_path):
    """--rotary-base is type=int (arguments.py L2418): a config's rope_theta 12345.5 has no flag; the launch leaves it at
    Megatron's 10000 and says so rather than writing a value argparse refuses."""
    raw = _hf("qwen3-30b-a3b")
    raw["rope_theta"] = 12345.5
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    launch = _emit(cli, f"--model {path} --hw h100 --devices 8 --ep 8")
    assert _flag(launch, "--rotary-base") is None
    assert any(line.startswith("#") and "12345.5" in line and "type=int" in line for line in launch.splitlines())


def test_a_transformers_5_config_gives_its_rope_base_in_rope_parameters(tmp_path):
    """transformers 5 configs hold rope_theta in a rope_parameters object; Megatron-Bridge reads it there too
    (conversion/transformers_compat.py L27-60): the reader takes the same base."""
    raw = _hf("qwen3-30b-a3b")
    raw["rope_parameters"] = {"rope_type": "default", "rope_theta": raw.pop("rope_theta")}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert resolve_model(str(path)).numerics.rope_theta == raw["rope_parameters"]["rope_theta"] == 1e6
