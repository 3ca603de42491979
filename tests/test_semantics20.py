"""semantics20: the launch defects semantics19 noticed and left. Each expectation is derived from the pinned sources or
the model's Hugging Face config.json (tests/data), not from btacalc's output: Megatron-LM @ d98e8a64, Megatron-Bridge @
067f987d, TransformerEngine @ d0067d0."""

from __future__ import annotations

import json
import math

import pytest

from btacalc.config.megatron_rows import megatron_default
from btacalc.config.megatron_launch import read_launch
from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError
from support import emitted as _emit, hf_config as _hf


def _bridge(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def _plan_numbers(cli, *args: str) -> dict:
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    r = json.loads(out)
    return {k: r[k] for k in ("memory_bytes", "flops_per_step", "throughput", "phases")}


# --- 1. GPT-OSS's YaRN ----------------------------------------------------------------------------------------------

def _megatron_yarn(args: dict) -> dict:
    """The YaRN Megatron-LM builds from a launch: gpt_model.py L196-215 @ d98e8a64 builds YarnRotaryEmbedding only for
    position_embedding_type 'yarn', from the config attributes argument_utils.py L407-413 sets (the flag, else
    YarnRotaryEmbedding's default)."""
    if args.get("position_embedding_type", megatron_default("position_embedding_type")) != "yarn":
        return {}

    def flag(dest: str, default):
        return args.get(dest, default)

    return {"factor": float(flag("rotary_scaling_factor", 1.0)),
            "original_max_position_embeddings": int(flag("yarn_original_max_position_embeddings", 4096)),
            "beta_fast": float(flag("yarn_beta_fast", 32.0)), "beta_slow": float(flag("yarn_beta_slow", 1.0)),
            "truncate": bool(flag("yarn_correction_range_round_to_int", True)),
            "mscale": float(flag("mscale", megatron_default("mscale"))),
            "mscale_all_dim": float(flag("mscale_all_dim", megatron_default("mscale_all_dim")))}


def _concentration(factor: float, mscale=None, mscale_all_dim=None) -> float:
    """yarn_rotary_pos_embedding.py L275-294 @ d98e8a64 (and transformers' YaRN attention_factor): 0.1 m ln(s) + 1."""
    def get(m: float = 1.0) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0
    return get() if mscale is None or mscale_all_dim is None else get(mscale) / get(mscale_all_dim)


@pytest.mark.parametrize("model", ["gpt-oss-20b", "gpt-oss-120b"])
def test_the_gpt_oss_launch_builds_the_models_yarn(cli, model):
    hf = _hf("gpt-oss-120b")["rope_scaling"]  # both released configs give the same rope_scaling
    assert hf["rope_type"] == "yarn"
    args = read_launch(_emit(cli, f"--model {model} --hw h100 --devices 8 --ep 8")).args
    built = _megatron_yarn(args)
    assert built, "the launch trained plain RoPE"
    assert (built["factor"], built["original_max_position_embeddings"], built["beta_fast"], built["beta_slow"]) == (
        hf["factor"], hf["original_max_position_embeddings"], hf["beta_fast"], hf["beta_slow"])
    assert built["truncate"] == hf["truncate"]  # Bridge: yarn_correction_range_round_to_int = truncate (L620-621)
    # no mscale in the config: transformers' attention factor 0.1 ln(factor) + 1; Megatron's defaults give the same
    assert _concentration(built["factor"], built["mscale"], built["mscale_all_dim"]) == \
        pytest.approx(_concentration(hf["factor"]))


def test_the_gpt_oss_overrides_set_bridges_yarn_fields(cli):
    """gpt_oss_bridge.py L65, L93-99 @ 067f987d: position_embedding_type yarn and GPTModelProvider's yarn_* fields."""
    hf = _hf("gpt-oss-120b")["rope_scaling"]
    keys = _bridge(_emit(cli, "--model gpt-oss-120b --hw h100 --devices 8 --ep 8", "bridge"))
    assert keys["model.position_embedding_type"] == "yarn"
    assert float(keys["model.yarn_rotary_scaling_factor"]) == hf["factor"]
    assert int(keys["model.yarn_original_max_position_embeddings"]) == hf["original_max_position_embeddings"]
    assert (float(keys["model.yarn_beta_fast"]), float(keys["model.yarn_beta_slow"])) == (hf["beta_fast"],
                                                                                          hf["beta_slow"])
    assert keys["model.yarn_correction_range_round_to_int"] == str(hf["truncate"])


@pytest.mark.parametrize("kind", ["megatron", "bridge"])
def test_yarn_reads_back_as_the_preset_plans(cli, tmp_path, kind):
    given = "--model gpt-oss-20b --hw h100 --devices 8 --ep 8"
    path = tmp_path / "run.txt"
    path.write_text(_emit(cli, given, kind))
    text = path.read_text()
    run = import_megatron(text, "g.sh") if kind == "megatron" else import_bridge(text, "g.txt", devices=8)
    assert run.model.yarn == load_preset("gpt-oss-20b").yarn
    reader = "--from-megatron" if kind == "megatron" else "--from-bridge"
    assert _plan_numbers(cli, *given.split()) == _plan_numbers(cli, reader, str(path), "--hw", "h100", "--devices", "8")


LAUNCH = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 8 "
          "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 8 --bf16 "
          "--vocab-size 32000 ")


def test_a_yarn_launch_reads_back_with_megatrons_defaults():
    """argument_utils.py L407-413: the attributes a launch leaves out take YarnRotaryEmbedding's defaults; a factor of
    1 (no --rotary-scaling-factor) leaves the frequencies and the concentration as RoPE's (L100-115, L275-278)."""
    yarn = import_megatron(LAUNCH + "--position-embedding-type yarn --rotary-scaling-factor 8\n", "y.sh").model.yarn
    assert yarn is not None
    assert (yarn.factor, yarn.original_max_position_embeddings, yarn.beta_fast, yarn.beta_slow, yarn.truncate) == (
        8.0, 4096, 32.0, 1.0, True)
    assert import_megatron(LAUNCH + "--position-embedding-type yarn\n", "y.sh").model.yarn is None


def test_the_ci_proxys_mla_yarn_flags_are_read_as_its_model(cli):
    """Under MLA Megatron-Core's rope is MLATransformerConfig's (rope_type yarn by default, argument_utils.py
    L335-337), which reads --rotary-scaling-factor / --mscale / --mscale-all-dim (the DeepSeek CI proxy's
    model_config.yaml L101-103) with --position-embedding-type rope. semantics20 listed them as not planned;
    semantics21 reads them as the model's YaRN (tests/test_semantics21.py derives the values), so the proxy's own
    launch reads back to its preset and nothing is listed."""
    launch = _emit(cli, "--model deepseek-proxy-megatron-ci --hw h100 --devices 8 --ep 8")
    assert "--rotary-scaling-factor 40" in launch
    read = import_megatron(launch, "p.sh")
    listed = " ".join(flag for flag, _ in read.ignored)
    assert not any(flag in listed for flag in ("--rotary-scaling-factor", "--mscale", "--mscale-all-dim"))
    assert read.model.yarn == load_preset("deepseek-proxy-megatron-ci").yarn


def test_an_unmodelled_rope_scaling_in_a_gpt_oss_config_is_refused(tmp_path):
    raw = _hf("gpt-oss-120b")
    raw["rope_scaling"] = {"rope_type": "linear", "factor": 4.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    from btacalc.config.hf import load_hf_config
    with pytest.raises(BtacalcError, match="rope_scaling 'linear' is not modelled"):
        load_hf_config(path)


# --- 2. group-limited routing, the routing scale and the correction bias --------------------------------------------

def _routing(args: dict) -> tuple:
    """Megatron-Core's router settings of a launch (transformer_config.py L780-819 @ d98e8a64; defaults: no groups, no
    scale, no expert bias)."""
    def number(dest: str, kind):
        return None if args.get(dest) is None else kind(args[dest])  # a launch's text, as argparse types it
    return (number("moe_router_num_groups", int), number("moe_router_group_topk", int),
            number("moe_router_topk_scaling_factor", float), bool(args.get("moe_router_enable_expert_bias")))


def _hf_routing(hf: dict) -> tuple:
    """The same from a DeepSeek-V3-family config.json, as Megatron-Bridge maps it (conversion/model_bridge.py L485-489
    @ 067f987d: n_group, topk_group, routed_scaling_factor) with the noaux_tc correction bias (the V3 and Kimi bridges
    set moe_router_enable_expert_bias). One group, or all groups, limits nothing."""
    limited = hf["topk_group"] < hf["n_group"]
    return (hf["n_group"] if limited else None, hf["topk_group"] if limited else None,
            hf["routed_scaling_factor"], hf["topk_method"] == "noaux_tc")


@pytest.mark.parametrize("model", ["deepseek-v3", "kimi-k2"])
def test_the_launch_routes_as_the_hugging_face_config(cli, model):
    hf = _hf(model)
    args = read_launch(_emit(cli, f"--model {model} --hw h100 --devices 64 --ep 8")).args
    assert _routing(args) == _hf_routing(hf)
    keys = _bridge(_emit(cli, f"--model {model} --hw h100 --devices 64 --ep 8", "bridge"))
    groups, chosen, scale, bias = _hf_routing(hf)
    assert keys["model.moe_router_num_groups"] == ("null" if groups is None else str(groups))
    assert keys["model.moe_router_group_topk"] == ("null" if chosen is None else str(chosen))
    assert float(keys["model.moe_router_topk_scaling_factor"]) == scale
    assert keys["model.moe_router_enable_expert_bias"] == str(bias)


def test_deepseek_v3_routes_in_four_of_eight_groups(cli):
    """DeepSeek-V3's config.json: n_group 8, topk_group 4 (node-limited routing, transformer_config.py L780-795)."""
    hf = _hf("deepseek-v3")
    args = read_launch(_emit(cli, "--model deepseek-v3 --hw h100 --devices 64 --ep 8")).args
    assert _routing(args)[:2] == (hf["n_group"], hf["topk_group"]) == (8, 4)


@pytest.mark.parametrize("kind", ["megatron", "bridge"])
@pytest.mark.parametrize("model", ["deepseek-v3", "kimi-k2", "deepseek-proxy-megatron-ci"])
def test_the_routing_reads_back(cli, kind, model):
    text = _emit(cli, f"--model {model} --hw h100 --devices 64 --ep 8", kind)
    run = import_megatron(text, "d.sh") if kind == "megatron" else import_bridge(text, "d.txt", devices=64)
    preset = load_preset(model)
    fields = ("router_groups", "router_group_topk", "router_scale", "router_score_bias")
    assert [getattr(run.model, f) for f in fields] == [getattr(preset, f) for f in fields]


def test_the_megatron_ci_proxys_routing_is_its_model_config():
    """The proxy preset's routing is the functional test's (model_config.yaml L87-91 @ d98e8a64)."""
    proxy = load_preset("deepseek-proxy-megatron-ci")
    assert (proxy.router_groups, proxy.router_group_topk, proxy.router_scale, proxy.router_score_bias) == (4, 2, 2.0,
                                                                                                          True)


def test_a_softmax_routers_overrides_clear_a_recipes_grouping(cli):
    """A Qwen3 plan's overrides over Bridge's DeepSeek-V3 recipe (which maps n_group / topk_group / the scale and sets
    the expert bias) kept them: the overrides state Megatron-LM's defaults."""
    keys = _bridge(_emit(cli, "--model qwen3-30b-a3b --hw h100 --devices 8 --ep 8", "bridge"))
    assert (keys["model.moe_router_num_groups"], keys["model.moe_router_group_topk"],
            keys["model.moe_router_topk_scaling_factor"], keys["model.moe_router_enable_expert_bias"]) == (
        "null", "null", "null", "False")


# --- 5. the attention backend below sm90 ----------------------------------------------------------------------------

def _te_backend(capability: float, backend: str, deterministic: bool = False, sinks: bool = False):
    """The backend TransformerEngine @ d0067d0 runs a training step's vanilla / learnable softmax with, under
    Megatron's --attention-backend (language_module.py L128-144 @ d98e8a64 set NVTE_FLASH_ATTN / NVTE_FUSED_ATTN):
    FlashAttention has no learnable softmax (utils.py L1122-1124); FusedAttention's F16 backend is off under determinism
    below sm90 (L1555-1567) and for a sink softmax (L1536-1544); with both, FusedAttention only from sm90 (L1647-1653)."""
    flash = backend in ("flash", "auto") and not sinks
    fused = backend in ("fused", "auto") and not (deterministic and (capability < 9.0 or sinks))
    if flash and fused and capability >= 9.0:
        flash = False
    return "FlashAttention" if flash else "FusedAttention" if fused else None


def _backend(launch: str) -> str:
    return str(read_launch(launch).args.get("attention_backend", "auto"))


def test_the_launch_runs_the_kernel_megatrons_default_would(cli, tmp_path):
    """btacalc's default kernel is the one Megatron's default (auto) runs: below sm90 its rate is the A100 profile's
    large-GEMM rate fitted on runs with auto (FlashAttention-2), from sm90 cuDNN's benchmarked FusedAttention. The A100
    launch said fused (cuDNN), and with --deterministic-mode it left TransformerEngine no backend."""
    from btacalc.config.hardware import resolve_hardware
    for hw, capability in (("a100-80gb", 8.0), ("h100", 9.0), ("b200", 10.0)):
        assert resolve_hardware(hw).chip.capability == capability
        launch = _emit(cli, f"--model llama-3-8b --hw {hw} --devices 8")
        assert _te_backend(capability, _backend(launch)) == _te_backend(capability, "auto"), hw
        # --deterministic-mode (read from a launch, emitted again): a backend is left on every device
        path = tmp_path / "d.sh"
        path.write_text(launch.replace("    --bf16", "    --bf16 \\\n    --deterministic-mode"))
        code, out, err = cli("plan", "--hw", hw, "--from-megatron", str(path), "--emit", "megatron")
        assert code in (0, 1), err
        assert "--deterministic-mode" in out and _te_backend(capability, _backend(out), deterministic=True), hw
    # GPT-OSS's learnable softmax has no FlashAttention (utils.py L1122-1124): fused stays on the A100 (auto's pick)
    launch = _emit(cli, "--model gpt-oss-20b --hw a100-80gb --devices 8 --ep 8")
    assert _te_backend(8.0, _backend(launch), sinks=True) == _te_backend(8.0, "auto", sinks=True) == "FusedAttention"


# --- 4. encoder presets are no pretrain_gpt.py run ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["megatron", "bridge"])
@pytest.mark.parametrize("model", ["bert-large", "esm2-35m", "dit-2b"])
def test_an_encoder_is_not_emitted_as_a_causal_decoder(cli, tmp_path, kind, model):
    """Megatron-LM @ d98e8a64 pretrain_gpt.py builds GPT layers with AttnMaskType.causal (gpt_layer_specs.py L120,
    L143); BERT, ESM-2 (masked-language models) and DiT attend in both directions (their sources, the presets' notes).
    Refused in one line, nothing written."""
    assert load_preset(model).encoder
    out = tmp_path / "launch.txt"
    code, stdout, err = cli("plan", "--model", model, "--hw", "h100", "--devices", "8", "--emit", kind, "-o", str(out))
    assert code == 2 and stdout == "" and not out.exists()
    assert len(err.strip().splitlines()) == 1 and "bidirectional encoder" in err and "causal" in err


# --- 3. a learned position table shorter than the sequence ----------------------------------------------------------

def test_a_short_learned_table_is_planned_as_the_launch_builds_it(cli, tmp_path):
    """Megatron-LM asserts --max-position-embeddings >= --seq-length (arguments.py L1353-1356 @ d98e8a64), so the
    launch raises GPT-2's 1024 positions to the sequence, and its learned table is torch.nn.Embedding(
    max_position_embeddings, h) (gpt_builders.py L90, language_model_embedding.py L71-73): s x h weights. The plan
    counted the model's 1024 rows (124.44M) where the launch builds 4096 (126.80M read back)."""
    hf = _hf("gpt2-small")
    rows, h, seq = hf["n_positions"], hf["n_embd"], 4096
    code, out, err = cli("models", "show", "gpt2-small", "--json")
    assert code == 0, err
    model = json.loads(out)["params_total"]  # the model's own count (its published 124M) is unchanged
    assert model == 124_439_808
    given = ("--model", "gpt2-small", "--hw", "h100", "--devices", "8", "--seq", str(seq))
    code, out, err = cli("plan", *given, "--json")
    planned = json.loads(out)["model"]["params_total"]
    assert planned == model + (seq - rows) * h
    path = tmp_path / "g.sh"
    path.write_text(_emit(cli, " ".join(given)))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path), "--json")
    assert code in (0, 1), err
    assert json.loads(out)["model"]["params_total"] == planned
    code, out, err = cli("plan", *given)  # said where the model is named
    assert "gpt2-small (learned positions 1,024 -> 4,096)" in out
