"""semantics21: multi-latent attention's YaRN in the launch (DeepSeek-V3, Kimi K2, the DeepSeek CI proxy).

Megatron-Core builds an MLA model's rotary embedding inside the attention from MLATransformerConfig, YaRN by default
(Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_config.py L3306-3331; multi_latent_attention.py
L188-198), and scales its softmax by mscale(factor, mscale_all_dim)^2 (L177-178). The factor and both mscales come
from --rotary-scaling-factor, --mscale and --mscale-all-dim (training/argument_utils.py L300-303 copies each
argument named as a config field; training/arguments.py L3558-3563, defaults 1.0, 1.0, 0.0); the original positions
and the betas have no flag. Before, a DeepSeek-V3 launch stated none of the three: it trained YaRN at factor 1 and
mscale_all_dim 0, another rotary embedding and softmax scale than the Hugging Face model's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from btacalc.config.megatron_model_rows import MLA_YARN_DESTS
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset
from support import emitted as _emit

DATA = Path(__file__).parent / "data"


def _flag(launch: str, flag: str) -> str:
    words = launch.replace("\\\n", " ").split()
    return words[words.index(flag) + 1]


def _hf_scaling(name: str) -> dict:
    return json.loads((DATA / f"{name}.config.json").read_text())["rope_scaling"]


def test_megatrons_flag_defaults_are_the_ones_the_codec_reads_back(cli):
    """arguments.py L3558-3563 @ d98e8a64: --mscale 1.0 and --mscale-all-dim 0.0, as btacalc's flag table holds them
    (data/megatron_flags.tsv, read from Megatron-LM's parser); a launch that gives only the factor reads them there.
    review20: the codec restated these defaults in MLA_YARN_DESTS beside the table's; this asserted the restatement
    equal to literals. MLATransformerConfig's fixed original positions and betas (L3318-3324) have no flag."""
    import ast

    from btacalc.config.megatron_launch import megatron_flags

    assert set(MLA_YARN_DESTS) == {"rotary_scaling_factor", "mscale", "mscale_all_dim"}
    launch = _emit(cli, "--model deepseek-proxy-megatron-ci --hw h100 --devices 8 --ep 8")
    only_factor = "\n".join(line for line in launch.splitlines() if "--mscale" not in line)
    yarn = import_megatron(only_factor, "m.sh").model.yarn
    assert yarn is not None and yarn.factor == 40
    flags = megatron_flags()
    assert (yarn.mscale, yarn.mscale_all_dim) == (ast.literal_eval(flags["--mscale"].default),
                                                  ast.literal_eval(flags["--mscale-all-dim"].default)) == (1.0, 0.0)


def test_a_deepseek_v3_launch_states_its_config_json_yarn(cli):
    """DeepSeek-V3's config.json rope_scaling: factor 40, mscale 1.0, mscale_all_dim 1.0 (tests/data); Megatron-LM's
    own DeepSeek-V3 launch writes the same three flags with --position-embedding-type rope
    (examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh L66, L112-114 @ d98e8a64)."""
    hf = _hf_scaling("deepseek-v3")
    launch = _emit(cli, "--model deepseek-v3 --hw h100 --devices 1024 --tp 2 --pp 16 --ep 64 --etp 1")
    assert _flag(launch, "--position-embedding-type") == "rope"
    assert float(_flag(launch, "--rotary-scaling-factor")) == hf["factor"] == 40
    assert float(_flag(launch, "--mscale")) == hf["mscale"] == 1.0
    assert float(_flag(launch, "--mscale-all-dim")) == hf["mscale_all_dim"] == 1.0
    assert "--yarn-beta-fast" not in launch  # the non-MLA YaRN flags are GPTModel's, not MLA's


def test_the_softmax_scale_the_flags_set_is_deepseeks():
    """multi_latent_attention.py L177-178: softmax_scale = mscale^2 / sqrt(q_head_dim) with
    mscale = 0.1 mscale_all_dim ln(factor) + 1 (yarn_rotary_pos_embedding.py `_yarn_get_mscale`, factor > 1). At the
    launch's old defaults (factor 1, mscale_all_dim 0) it is 1; at DeepSeek-V3's (40, 1.0) 1 + 0.1 ln 40 = 1.3689,
    a softmax scale 1.874 times larger: the launch trained another attention than the model's."""
    yarn = load_preset("deepseek-v3").yarn
    assert yarn is not None and yarn.mscale_all_dim == 1.0
    mscale = 0.1 * yarn.mscale_all_dim * math.log(yarn.factor) + 1
    assert round(mscale, 4) == 1.3689 and round(mscale ** 2, 3) == 1.874


def test_an_emitted_mla_launch_reads_back_to_the_presets_yarn(cli):
    for model in ("deepseek-v3", "deepseek-proxy-megatron-ci"):
        layout = "--devices 1024 --tp 2 --pp 16 --ep 64 --etp 1" if model == "deepseek-v3" else "--devices 8 --ep 8"
        read = import_megatron(_emit(cli, f"--model {model} --hw h100 {layout}"), "m.sh")
        assert read.model.yarn == load_preset(model).yarn, model
        assert not [flag for flag, _ in read.ignored if "scaling" in flag or "mscale" in flag]


def test_an_mla_launch_without_the_flags_has_no_yarn(cli):
    """At the flags' defaults the factor is 1: YaRN without extension is RoPE (the frequencies unchanged, mscale 1),
    so the model reads as RoPE without YaRN."""
    launch = _emit(cli, "--model deepseek-proxy-megatron-ci --hw h100 --devices 8 --ep 8")
    plain = "\n".join(line for line in launch.splitlines()
                      if not any(f in line for f in ("--rotary-scaling-factor", "--mscale")))
    assert import_megatron(plain, "m.sh").model.yarn is None


def test_kimi_k2s_betas_have_no_flag_and_the_launch_says_so(cli):
    """Kimi K2's config.json rope_scaling has beta_fast 1.0 (MLATransformerConfig's 32, no Megatron-LM flag): the
    launch says the Megatron value it trains and the Bridge field that sets it; its factor 32 is a flag (Megatron-LM's
    Kimi-K2-Instruct example, examples/post_training/modelopt/conf/moonshotai/Kimi-K2-Instruct.sh L52-54)."""
    hf = _hf_scaling("kimi-k2")
    assert hf["beta_fast"] == 1.0 and hf["factor"] == 32.0
    launch = _emit(cli, "--model kimi-k2 --hw h100 --devices 1024 --pp 16 --ep 64 --etp 1")
    assert float(_flag(launch, "--rotary-scaling-factor")) == 32.0
    note = next(line for line in launch.splitlines() if "multi-latent attention YaRN" in line)
    assert "beta_fast 1 (Megatron's 32)" in note and "model.beta_fast" in note
    assert "beta_slow" not in note  # 1.0 is Megatron's too


def test_the_hugging_face_reader_takes_an_mla_models_rope_scaling(tmp_path):
    """The DeepSeek-V3 reader (config/hf.py) reads rope_scaling as GPT-OSS's does: the preset's yarn is its own
    config.json's."""
    from btacalc.config.presets import resolve_model

    for name in ("deepseek-v3", "kimi-k2"):
        path = tmp_path / f"{name}.json"
        path.write_text((DATA / f"{name}.config.json").read_text())
        assert resolve_model(str(path)).yarn == load_preset(name).yarn, name


def test_the_bridge_overrides_state_mla_yarn_as_mlatransformerconfig_names_it(cli):
    """Megatron-Bridge's MLA providers hold MLATransformerConfig's own field names (rotary_scaling_factor, mscale,
    mscale_all_dim: transformer_config.py L3315-3331), unprefixed, unlike GPTModelProvider's yarn_* fields for
    GPT-OSS; the overrides read back to the preset's YaRN."""
    from btacalc.config.bridge_run import import_bridge

    text = _emit(cli, "--model deepseek-v3 --hw h100 --devices 1024 --tp 2 --pp 16 --ep 64 --etp 1", "bridge")
    lines = set(text.splitlines())
    assert {"model.rotary_scaling_factor=40.0", "model.mscale=1.0", "model.mscale_all_dim=1.0"} <= lines
    assert not any(line.startswith("model.yarn_") for line in lines)
    assert import_bridge(text, "ds.txt", devices=1024).model.yarn == load_preset("deepseek-v3").yarn


def test_the_report_carries_the_compute_capability_the_launch_reads():
    """review20 left the emitter's capability an optional argument: a library caller that left it out got `fused` on
    an A100, where the launch must say `flash` (TE @ d0067d0 attention/dot_product_attention/utils.py L1647-1653: auto
    prefers FusedAttention only from sm90; semantics20). The plan's report now carries the profile's compute
    capability (A100 8.0, H100 9.0: the NVIDIA CUDA GPUs table the profiles cite) and the emitter reads it there."""
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.execution import ExecutionRequest
    from btacalc.output.megatron import megatron_arguments
    from btacalc.planning.plan import make_plan

    spec = load_preset("llama-3-8b")
    backends = {}
    for hw, want in (("a100-80gb", 8.0), ("h100", 9.0)):
        report = make_plan(spec, resolve_hardware(hw), ExecutionRequest(devices=8, tensor_parallel=8))
        assert report.hardware.compute_capability == want
        assert json.loads(report.model_dump_json())["hardware"]["compute_capability"] == want
        launch = megatron_arguments(report, spec)
        backends[hw] = _flag(launch, "--attention-backend")
    assert backends == {"a100-80gb": "flash", "h100": "fused"}
