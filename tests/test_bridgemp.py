"""bridgemp: `--emit bridge` writes the mixed_precision section whole where a plan's mixed precision differs from its
Megatron-Bridge preset, so that Hydra can apply it (none of these tests needs Bridge).

bridgeparse found that `mixed_precision=<preset>` then `mixed_precision.<field>=` stops in Hydra: Bridge applies the
overrides in struct mode with Hydra's own code (NVIDIA-NeMo/Megatron-Bridge @ 067f987d
src/megatron/bridge/training/utils/omegaconf_utils.py L163-188), which sets no field below a string ("Could not
override 'mixed_precision.fp8_param_gather'"): 44 of 212 files. `++mixed_precision._target_=<class>` replaces the
name with a dict, and `_apply_overrides` builds the class from a dict with a `_target_` (L478-486), so the file now
gives every field of the preset with the plan's values over it. The presets are data (btacalc/data/
bridge_mixed_precision.toml, tools/bridge_mixed_precision.py); below, each checked value is derived from the source
line quoted beside it (src/megatron/bridge/training/mixed_precision.py @ 067f987d).
"""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from btacalc.config.bridge_mixed import TorchName, bridge_mixed_presets, preset_values

BRIDGE_MIRROR = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
ROOT = Path(__file__).resolve().parents[1]
MP_CLASS = "megatron.bridge.training.mixed_precision.MixedPrecisionConfig"  # mixed_precision.py L32-33
PIN = "NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a"

# (preset, line, the source text at that line of mixed_precision.py @ 067f987d)
SOURCE_SETS = [
    ("bf16_mixed", 192, "        bf16=True,"),
    ("bf16_mixed", 193, "        params_dtype=torch.bfloat16,"),
    ("bf16_mixed", 196, "        grad_reduce_in_fp32=True,"),
    ("fp16_mixed", 209, "        params_dtype=torch.half,"),
    ("fp16_mixed", 212, "        grad_reduce_in_fp32=False,"),
    ("bf16_with_fp8_delayed_scaling_mixed", 226, '    cfg.fp8 = "hybrid"'),
    ("bf16_with_fp8_delayed_scaling_mixed", 227, '    cfg.fp8_recipe = "delayed"'),
    ("bf16_with_fp8_delayed_scaling_mixed", 229, "    cfg.fp8_amax_history_len = 1024"),
    ("bf16_with_fp8_delayed_scaling_mixed", 230, '    cfg.fp8_amax_compute_algo = "max"'),
    ("bf16_with_fp8_delayed_scaling_mixed", 231, "    cfg.fp8_param_gather = True"),
    ("bf16_with_mxfp8_mixed", 262, '    cfg.fp8 = "e4m3"'),
    ("bf16_with_mxfp8_mixed", 263, '    cfg.fp8_recipe = "mxfp8"'),
    ("bf16_with_mxfp8_mixed", 264, "    cfg.fp8_param_gather = True"),
    ("bf16_with_mxfp8_mixed", 265, "    cfg.reuse_grad_buf_for_mxfp8_param_ag = True"),
    ("bf16_with_fp8_current_scaling_mixed", 298, '    cfg.fp8_recipe = "tensorwise"'),
    ("bf16_with_fp8_current_scaling_mixed", 299, "    cfg.first_last_layers_bf16 = True"),
    ("bf16_with_fp8_current_scaling_mixed", 300, "    cfg.num_layers_at_start_in_bf16 = 1"),
    ("bf16_with_fp8_current_scaling_mixed", 302, "    cfg.fp8_param_gather = True"),
    ("bf16_with_fp8_subchannel_scaling_mixed", 383, '    cfg.fp8_recipe = "blockwise"'),
    ("bf16_with_fp8_subchannel_scaling_mixed", 384, "    cfg.fp8_param_gather = False"),
    ("bf16_with_nvfp4_mixed", 412, "    cfg.fp8 = None"),
    ("bf16_with_nvfp4_mixed", 413, '    cfg.fp4 = "e2m1"'),
    ("bf16_with_nvfp4_mixed", 416, "    cfg.fp4_param_gather = True"),
    ("nemotron_3_super_bf16_with_nvfp4_mixed", 428, "    cfg.num_layers_at_end_in_bf16 = 14"),
]
# (field, line, the dataclass line) of MixedPrecisionConfig (L40-75)
SOURCE_DEFAULTS = [
    ("fp32", 40, "    fp32: bool = False"),
    ("grad_reduce_in_fp32", 47, "    grad_reduce_in_fp32: bool = True"),
    ("fp8_recipe", 50, '    fp8_recipe: str = ('),  # the value is on L51: "tensorwise"
    ("fp8_amax_history_len", 55, "    fp8_amax_history_len: int = 1"),
    ("fp8_param", 60, "    fp8_param: Optional[bool] = None"),
    ("fp4_recipe", 64, '    fp4_recipe: str = "nvfp4"'),
    ("initial_loss_scale", 69, "    initial_loss_scale: Optional[float] = 4294967296  # 2**32"),
    ("reuse_grad_buf_for_mxfp8_param_ag", 75, "    reuse_grad_buf_for_mxfp8_param_ag: bool = False"),
]
# the 31 fields of L40-75: the annotated lines, less the three comments (L48, L62, L67) and L51-52 of fp8_recipe
FIELD_COUNT = (75 - 40 + 1) - 3 - 2


def _assignment(text: str) -> tuple[str, object]:
    """`cfg.x = v`, `x=v,` or `x: T = v` as (x, v), v evaluated from the quoted text (torch.<name> as TorchName)."""
    text = text.strip().rstrip(",")
    if ":" in text.split("=")[0]:
        name, _, value = text.partition("=")
        name = name.split(":")[0]
    else:
        name, _, value = text.partition("=")
    value = value.split("#")[0].strip()
    node = ast.parse(value, mode="eval").body
    if isinstance(node, ast.Attribute):
        return name.strip().removeprefix("cfg."), TorchName(value)
    return name.strip().removeprefix("cfg."), ast.literal_eval(node)


def test_the_table_names_its_source_and_holds_every_preset_btacalc_writes():
    from btacalc.config.bridge_codec import BRIDGE_FP16_RECIPE, BRIDGE_PRECISION

    data = bridge_mixed_presets()
    assert data.bridge == PIN and data.path == "src/megatron/bridge/training/mixed_precision.py"
    assert data.config_class == MP_CLASS and data.class_line == 33
    assert len(data.fields) == FIELD_COUNT
    assert {*BRIDGE_PRECISION.values(), BRIDGE_FP16_RECIPE} <= set(data.presets)
    # the 14 functions decorated @register at L184 ... L420 (every 16-22 lines from bf16_mixed to the Nemotron-3 one)
    assert len(data.presets) == 14 and data.presets["bf16_mixed"].line == 185


@pytest.mark.skipif(not BRIDGE_MIRROR.exists(), reason="needs the Megatron-Bridge mirror")
def test_the_data_file_is_the_tools_output():
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "bridge_mixed_precision.py"), str(BRIDGE_MIRROR),
                          PIN.split("@")[1]], capture_output=True, text=True, check=True)
    assert run.stdout == (ROOT / "btacalc" / "data" / "bridge_mixed_precision.toml").read_text()


@pytest.mark.parametrize("preset, line, text", SOURCE_SETS)
def test_each_preset_value_is_the_source_lines(preset, line, text):
    field, value = _assignment(text)
    rows = {row.field: row for row in bridge_mixed_presets().presets[preset].sets}
    assert rows[field].line == line
    assert preset_values(preset)[field] == value


@pytest.mark.parametrize("field, line, text", SOURCE_DEFAULTS)
def test_each_default_is_the_dataclass_line(field, line, text):
    row = bridge_mixed_presets().fields[field]
    assert row.line == line
    want = "tensorwise" if field == "fp8_recipe" else 2 ** 32 if field == "initial_loss_scale" else _assignment(text)[1]
    assert ast.literal_eval(row.default) == want
    # a preset that does not set it keeps the default (bf16_mixed sets five fields, L192-196), except fp8_param,
    # which MixedPrecisionConfig.__setattr__ keeps equal to fp8_param_gather (L77-95): False, the default of L61
    assert preset_values("bf16_mixed")[field] == (False if field == "fp8_param" else want)


def test_a_preset_starts_from_the_one_it_calls():
    """bf16_with_mxfp8_mixed calls bf16_mixed() (L261): its bf16 and params_dtype are bf16_mixed's (L192-193);
    nemotron_3_super_bf16_with_nvfp4_mixed calls bf16_with_nvfp4_mixed() (L426), whose fp4 it keeps (L413)."""
    mx = preset_values("bf16_with_mxfp8_mixed")
    assert mx["bf16"] is True and mx["params_dtype"] == TorchName("torch.bfloat16") and mx["fp8_param"] is True
    nemo = preset_values("nemotron_3_super_bf16_with_nvfp4_mixed")
    assert nemo["fp4"] == "e2m1" and nemo["num_layers_at_end_in_bf16"] == 14 and nemo["num_layers_at_start_in_bf16"] == 0


def test_the_codec_constants_agree_with_the_table():
    """bridge_codec's recipe fields are read from the table now (the lead, after review33: no hand-written second
    copy). The expected values are those the codec's comment cites at Megatron-Bridge @ 067f987d mixed_precision.py:
    bf16_mixed L185-198 grad_reduce_in_fp32 True; fp16_mixed L201-214 bf16 False, fp16 True, grad_reduce_in_fp32
    False; fp8_param_gather True in the delayed (L231), MXFP8 (L264) and current-scaling (L302) presets, False in the
    subchannel one (L384); bf16_with_nvfp4_mixed L405-418 fp4_param_gather True. The BF16 ends as before."""
    from btacalc.config.bridge_codec import (BRIDGE_BF16_ENDS, BRIDGE_FP16_RECIPE, BRIDGE_PRECISION,
                                             BRIDGE_RECIPE_FIELDS)

    bf16 = {"bf16": True, "fp16": False, "grad_reduce_in_fp32": True, "fp8_param_gather": False,
            "fp4_param_gather": False}
    assert BRIDGE_RECIPE_FIELDS == {
        "bf16": bf16, "fp16": {**bf16, "bf16": False, "fp16": True, "grad_reduce_in_fp32": False},
        "fp8": {**bf16, "fp8_param_gather": True}, "mxfp8": {**bf16, "fp8_param_gather": True},
        "fp8-current": {**bf16, "fp8_param_gather": True}, "fp8-blockwise": bf16,
        "nvfp4": {**bf16, "fp4_param_gather": True}}
    names = {**BRIDGE_PRECISION, "fp16": BRIDGE_FP16_RECIPE}
    for precision in BRIDGE_RECIPE_FIELDS:
        values = preset_values(names[precision])
        ends = (values["num_layers_at_start_in_bf16"], values["num_layers_at_end_in_bf16"])
        assert ends == BRIDGE_BF16_ENDS.get(precision, (0, 0)) or not values["first_last_layers_bf16"]


# ----------------------------------------------------------------------------------------------- the emitted file

def _emit(cli, *plan: str) -> tuple[str, list[str]]:
    code, out, err = cli("plan", *plan, "--emit", "bridge")
    assert code in (0, 1), err
    return out, [w for line in out.splitlines() if line and not line.startswith("#") for w in shlex.split(line)]


def _section(words: list[str]) -> dict[str, str]:
    return {w.split("=", 1)[0].removeprefix("++mixed_precision."): w.split("=", 1)[1] for w in words
            if w.startswith("++mixed_precision.")}


def _apply_as_bridge(base: dict, words: list[str]) -> dict:
    """parse_hydra_overrides (omegaconf_utils.py L163-188): OmegaConf in struct mode, Hydra's parser and its
    _apply_overrides_to_config."""
    cfg = OmegaConf.create(base)
    OmegaConf.set_struct(cfg, True)
    ConfigLoaderImpl._apply_overrides_to_config(overrides=OverridesParser.create().parse_overrides(overrides=words),
                                                cfg=cfg)
    return OmegaConf.to_container(cfg)


MXFP8 = ("-m", "llama-3-8b", "--hw", "b200", "-n", "8", "--precision", "mxfp8")
GRAD2 = ("-m", "llama-3-8b", "--hw", "h100", "-n", "8", "--grad-bytes", "2")
ENDS = ("-m", "llama-3-8b", "--hw", "b200", "-n", "8", "--precision", "nvfp4", "--bf16-layers-at-start", "2",
        "--bf16-layers-at-end", "1")


def _every_field(section: dict[str, str]) -> set[str]:
    return {k.split(".")[0] for k in section if k != "_target_"}


def test_an_mxfp8_plan_without_the_parameter_gather(cli):
    """bf16_with_mxfp8_mixed gathers FP8 parameters (L264) and reuses the gradient buffer for it (L265); the plan
    gathers none, and Megatron-Core refuses the reuse without the gather (Megatron-LM @ d98e8a64
    distributed_data_parallel_config.py L259-260), so both are off and the rest is the preset's."""
    out, words = _emit(cli, *MXFP8)
    assert not any(w.startswith("mixed_precision") for w in words)  # no name: the section replaces it
    section = _section(words)
    assert words[words.index(f"++mixed_precision._target_={MP_CLASS}") + 1].startswith("++mixed_precision.fp32=")
    assert _every_field(section) == set(bridge_mixed_presets().fields)
    assert section["fp8"] == "e4m3" and section["fp8_recipe"] == "mxfp8" and section["bf16"] == "True"
    assert section["fp8_param_gather"] == section["reuse_grad_buf_for_mxfp8_param_ag"] == "False"
    assert section["params_dtype._target_"] == "torch.bfloat16" and section["params_dtype._call_"] == "False"
    assert "CANNOT APPLY" not in out and "mixed_precision is written whole: Megatron-Bridge's bf16_with_mxfp8_mixed" in out


@pytest.mark.parametrize("base", ["bf16_mixed", {"bf16": True, "params_dtype": "torch.bfloat16", "fp8": None,
                                                 "fp8_param_gather": False, "loss_scale": 7.0}],
                         ids=["a-preset-name", "a-MixedPrecisionConfig"])
def test_hydra_applies_the_section_over_a_name_or_a_section(cli, base):
    """Over `_pretrain_common`'s name (recipes/common.py) and over a recipe's MixedPrecisionConfig (converted to a dict
    with dtype strings, omegaconf_utils.py L264-267) the words apply, and every field is the file's."""
    _, words = _emit(cli, *MXFP8)
    got = _apply_as_bridge({"mixed_precision": base, "train": {"micro_batch_size": 1}},
                           [w for w in words if w.startswith("++mixed_precision.")])["mixed_precision"]
    assert got["_target_"] == MP_CLASS and got["fp8"] == "e4m3" and got["fp8_param_gather"] is False
    assert got["params_dtype"] == {"_target_": "torch.bfloat16", "_call_": False}
    assert got["loss_scale"] is None  # the preset's (L68 default), not the recipe section's 7.0


def test_the_old_words_are_what_hydra_refused():
    with pytest.raises(Exception, match="Could not override 'mixed_precision.fp8_param_gather'"):
        _apply_as_bridge({"mixed_precision": "bf16_with_mxfp8_mixed"},
                         ["mixed_precision=bf16_with_mxfp8_mixed", "mixed_precision.fp8_param_gather=False"])


def test_grad_bytes_2_is_bf16_mixed_with_bf16_gradient_reduction(cli):
    """bf16_mixed reduces gradients in fp32 (L196); --grad-bytes 2 does not: that field alone differs."""
    out, words = _emit(cli, *GRAD2)
    section = _section(words)
    assert section["grad_reduce_in_fp32"] == "False" and section["bf16"] == "True" and section["fp8"] == "null"
    assert section["pipeline_dtype._target_"] == "torch.bfloat16" and section["fp8_recipe"] == "tensorwise"  # L50-51
    assert "bf16_mixed (src/megatron/bridge/training/mixed_precision.py L185) with grad_reduce_in_fp32=False," in out


def test_first_and_last_bf16_layers(cli):
    """bf16_with_nvfp4_mixed keeps no layer in BF16 (MixedPrecisionConfig's False, 0, 0: L53, L73-74) and gathers
    FP4 parameters (L416); the plan keeps 2 and 1 and gathers none."""
    _, words = _emit(cli, *ENDS)
    section = _section(words)
    assert section["first_last_layers_bf16"] == "True"
    assert (section["num_layers_at_start_in_bf16"], section["num_layers_at_end_in_bf16"]) == ("2", "1")
    assert section["fp4"] == "e2m1" and section["fp4_param_gather"] == section["fp4_param"] == "False"


def test_a_plan_that_differs_in_nothing_keeps_the_name(cli):
    _, words = _emit(cli, "-m", "llama-3-8b", "--hw", "h100", "-n", "8")
    assert "mixed_precision=bf16_mixed" in words and not _section(words)


# ------------------------------------------------------------------------------------------------- read back

def _plan(cli, *args: str) -> dict:
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    data = json.loads(out)
    return data.get("best", data)


@pytest.mark.parametrize("plan", [MXFP8, GRAD2, ENDS, ("-m", "llama-3-8b", "--hw", "h100", "-n", "8", "--precision",
                                                       "fp8", "--fp8-attention"),
                                  ("-m", "llama-3-8b", "--hw", "h100", "-n", "8", "--precision", "fp16"),
                                  # bridgeparse's CANNOT APPLY example: two fields differ from the delayed preset
                                  ("-m", "llama-3-8b", "--hw", "h100", "-n", "8", "--recompute", "full",
                                   "--precision", "fp8", "--grad-bytes", "2")],
                         ids=["mxfp8", "grad-bytes-2", "bf16-ends", "fp8-attention", "fp16", "fp8-grad-bytes-2"])
def test_the_whole_section_reads_back_as_the_same_plan(cli, tmp_path, plan):
    out, _ = _emit(cli, *plan)
    (tmp_path / "o.txt").write_text(out)
    back = _plan(cli, "--from-bridge", str(tmp_path / "o.txt"), "--hw", plan[plan.index("--hw") + 1])
    original = _plan(cli, *plan)
    for key in ("memory_bytes", "flops_per_step", "parallelism", "throughput"):
        assert back[key] == original[key], key
    assert not [row for row in back["imported"]["ignored"] if row["flag"].startswith("mixed_precision")]


def test_the_old_form_still_reads(cli, tmp_path):
    """A file of `mixed_precision=<preset>` and its fields (a YAML file can give them so) plans as the whole form."""
    out, _ = _emit(cli, *MXFP8)
    lines = [line for line in out.splitlines() if not line.startswith("++mixed_precision.")]
    (tmp_path / "old.txt").write_text("\n".join(lines + ["mixed_precision=bf16_with_mxfp8_mixed",
                                                         "mixed_precision.fp8_param_gather=False"]) + "\n")
    (tmp_path / "new.txt").write_text(out)
    old = _plan(cli, "--from-bridge", str(tmp_path / "old.txt"), "--hw", "b200")
    new = _plan(cli, "--from-bridge", str(tmp_path / "new.txt"), "--hw", "b200")
    assert old["memory_bytes"] == new["memory_bytes"] and old["throughput"] == new["throughput"]


@pytest.mark.parametrize("change, fragment", [
    (("++mixed_precision._target_=" + MP_CLASS, "++mixed_precision._target_=megatron.bridge.training.config.Other"),
     "another class is not read"),
    (("++mixed_precision.fp32=False", "++mixed_precision.fp32=False\nmixed_precision=bf16_mixed"),
     "after mixed_precision._target_"),
])
def test_another_class_or_a_name_after_the_section_is_refused(cli, tmp_path, change, fragment):
    out, _ = _emit(cli, *MXFP8)
    (tmp_path / "o.txt").write_text(out.replace(*change))
    code, _, err = cli("plan", "--from-bridge", str(tmp_path / "o.txt"), "--hw", "b200")
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err


def test_a_field_btacalc_does_not_model_is_listed_where_it_leaves_the_preset(cli, tmp_path):
    """The delayed preset keeps 1024 amax values (L229): a section that keeps 16 is listed as ignored, the others are
    its preset's values and are not."""
    out, _ = _emit(cli, "-m", "llama-3-8b", "--hw", "h100", "-n", "8", "--precision", "fp8")
    assert "++mixed_precision.fp8_amax_history_len=1024" in out.splitlines()
    (tmp_path / "o.txt").write_text(out.replace("fp8_amax_history_len=1024", "fp8_amax_history_len=16"))
    back = _plan(cli, "--from-bridge", str(tmp_path / "o.txt"), "--hw", "h100")
    listed = [row["flag"] for row in back["imported"]["ignored"] if row["flag"].startswith("mixed_precision")]
    assert listed == ["mixed_precision.fp8_amax_history_len"]
