"""GPT-OSS's gated activation in launches. transformers' GptOssExperts computes gate * sigmoid(1.702 gate) * (up + 1)
with gate and up clamped at swiglu_limit (7.0 in openai/gpt-oss-120b's config.json): a quick-GELU GLU with a linear
offset of 1 and a clamp of 7, which Megatron-LM @ d98e8a64 builds from --quick-geglu (argument_utils.py L322-325:
quick_gelu, x sigmoid(1.702 x), gated), --glu-linear-offset and --activation-func-clamp-value, and Megatron-Bridge's
GPT-OSS provider sets (gpt_oss_bridge.py L81-84 @ 067f987d). --swiglu is F.silu (argument_utils.py L314-316), and
Megatron asserts the two are not both given (L323). btacalc's launch wrote --swiglu for GPT-OSS: the pasted run
trained SiLU."""

from __future__ import annotations

import json

import pytest

from btacalc.config.hf import load_hf_config
from btacalc.config.megatron_launch import read_launch
from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron

GPT_OSS = {"quick_geglu": True, "glu_linear_offset": 1.0, "activation_func_clamp_value": 7.0}


def _emit(cli, model, kind):
    code, out, err = cli("plan", "--model", model, "--hw", "b200", "--devices", "64", "--emit", kind)
    assert code in (0, 1), err
    return out


@pytest.mark.parametrize("model", ["gpt-oss-120b", "gpt-oss-20b"])
def test_gpt_oss_launch_trains_its_clamped_quick_gelu_glu(cli, model):
    launch = _emit(cli, model, "megatron")
    args = read_launch(launch).args
    assert {k: float(v) if k != "quick_geglu" else v for k, v in args.items() if k in GPT_OSS} == GPT_OSS
    assert "swiglu" not in args  # Megatron asserts not both (argument_utils.py L323); --swiglu alone is SiLU
    assert import_megatron(launch, "g.sh").model.glu_activation == "clamped_quick_gelu"


def test_a_swiglu_model_keeps_silu_in_both_launches(cli):
    assert "--swiglu" in _emit(cli, "qwen3-30b-a3b", "megatron").split()
    lines = _emit(cli, "qwen3-30b-a3b", "bridge").splitlines()
    # a recipe's own activation stood under model.gated_linear_unit alone
    assert {"model.gated_linear_unit=True", "model.activation_func=silu"} <= set(lines)


def test_gpt_oss_bridge_overrides_name_the_activation_and_read_back(cli):
    text = _emit(cli, "gpt-oss-120b", "bridge")
    lines = set(text.splitlines())
    assert {"model.gated_linear_unit=True", "model.activation_func=quick_gelu", "model.glu_linear_offset=1.0",
            "model.activation_func_clamp_value=7.0"} <= lines
    assert import_bridge(text, "o.txt", 64).model.glu_activation == "clamped_quick_gelu"


@pytest.mark.parametrize("flags, fragment", [
    ("--quick-geglu --glu-linear-offset 0.5 --activation-func-clamp-value 7", "offset 1, clamp 7"),
    ("--quick-geglu", "offset 1, clamp 7"),
    ("--swiglu --activation-func-clamp-value 7", "without --quick-geglu"),
    # was an internal error (float('abc')): argparse's type=float refuses it
    ("--quick-geglu --glu-linear-offset abc --activation-func-clamp-value 7", "--glu-linear-offset (glu_linear_offset) "
     "takes a number, got 'abc'"),
])
def test_other_gated_activations_are_refused_in_one_line(cli, tmp_path, flags, fragment):
    launch = _emit(cli, "gpt-oss-120b", "megatron")
    for flag in ("--quick-geglu", "--glu-linear-offset 1.0", "--activation-func-clamp-value 7.0"):
        launch = launch.replace(f"    {flag} \\\n", "")
    path = tmp_path / "l.sh"
    path.write_text(launch.replace("pretrain_gpt.py \\", f"pretrain_gpt.py {flags} \\"))
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "b200")
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err


def test_hugging_face_gpt_oss_reads_as_the_clamped_glu(tmp_path, data_dir):
    raw = json.loads((data_dir / "gpt-oss-120b.config.json").read_text())
    assert raw["swiglu_limit"] == 7.0
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert load_hf_config(path).glu_activation == "clamped_quick_gelu"
    path.write_text(json.dumps({**raw, "swiglu_limit": 10.0}))
    with pytest.raises(Exception, match="swiglu_limit 10"):
        load_hf_config(path)
