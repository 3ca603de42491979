"""review21: a second engineer's review of the ninth session's merged work (a100attn, semantics22, attngemm,
hostile23, runs10); docs/story.md "review21". The argparse-choice cases are in tests/test_bad_input.py."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from btacalc.cli.options import AttentionKernelOpt
from btacalc.config.attention_kernels import attention_kernel
from btacalc.config.hardware import resolve_hardware
from btacalc.config.megatron_launch import read_launch
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError
from btacalc.planning.measured import Recipe
from btacalc.planning.report import Inputs
from support import emitted, hf_config


def _default_kernel_texts() -> list[str]:
    return [str(AttentionKernelOpt.help), str(Recipe.model_fields["attention_kernel"].description),
            str(Inputs.model_fields["attention_kernel"].description)]


def test_the_default_kernel_is_not_described_as_the_large_gemm_rate_where_it_has_a_rate():
    """a100attn gave the default kernel FlashAttention-2's A100 rate, on top of cuDNN's Hopper and Blackwell rates;
    the --attention-kernel help and the report's and a run's field descriptions still said the default kernel runs
    the core at the large-GEMM rate. Each built-in A100 / H100 / B200 profile's default kernel has a rate."""
    for hw in ("a100-40gb", "h100", "b200"):
        capability = resolve_hardware(hw).chip.capability
        assert attention_kernel("default").fraction_of_peak(capability, 4096, "bf16") is not None, hw
    for text in _default_kernel_texts():
        assert "default: the large-GEMM rate" not in text and "default (the attention core at the device's " \
            "large-GEMM rate" not in text, text
        assert "large-GEMM rate" in text  # the fallback where the file has no rate is still said


def test_a_read_back_numeric_is_said_with_every_digit(cli):
    """`:g` kept six digits: a Qwen3 launch of --rotary-base 1000001 and --norm-epsilon 1.0000001e-06 was read back
    with the notes "the run trains the RoPE base 1e+06 ..., not qwen3-30b-a3b's rope_theta 1e+06" (and the same of the
    epsilons): a difference said in numbers that do not differ."""
    preset = load_preset("qwen3-30b-a3b").numerics
    assert preset.rope_theta is not None and preset.norm_eps is not None
    theta, eps = int(preset.rope_theta) + 1, preset.norm_eps * (1 + 1e-7)
    launch = emitted(cli, "--model qwen3-30b-a3b --hw h100 --devices 8 --ep 8")
    launch = launch.replace(f"--rotary-base {int(preset.rope_theta)} ", f"--rotary-base {theta} ")
    launch = re.sub(r"--norm-epsilon \S+", f"--norm-epsilon {eps!r}", launch)
    notes = [n for n in import_megatron(launch, "m.sh").notes if "another model" in n]
    assert len(notes) == 2, notes
    assert f"RoPE base {theta} " in notes[0] and f"rope_theta {int(preset.rope_theta)} " in notes[0]
    assert f"norm epsilon {eps!r} " in notes[1] and f"norm epsilon {preset.norm_eps!r} " in notes[1]


def test_a_rope_base_that_is_no_integer_is_said_as_it_is(cli, tmp_path):
    """The launch's comment said "the model's RoPE base 500000 is no integer" of a config.json's rope_theta 500000.5."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**hf_config("llama-3-8b"), "rope_theta": 500000.5}))
    launch = emitted(cli, f"--model {config} --hw h100 --devices 8")
    assert "the model's RoPE base 500000.5 is no integer" in launch and "    --rotary-base" not in launch


def _bash_num_layers(script: str) -> str:
    """The --num-layers value bash itself passes (the launch's python replaced by a function printing its words)."""
    run = subprocess.run(["bash", "-c", "python() { printf '%s\\n' \"$@\"; }\n" + script], capture_output=True,
                         text=True, check=True)
    words = run.stdout.split("\n")
    return words[words.index("--num-layers") + 1]


@pytest.mark.parametrize("before", ["L=3\nunset L\n", "L=3\nunset -v M L\n", "A=(3 5)\nunset A\n",
                                    "L=$(echo 3)\nunset L\n"])
def test_an_unset_variable_takes_its_default_as_in_bash(before):
    """bash's `unset` was passed over: `L=3; unset L; ... ${L:-9}` planned 3 layers where bash passes 9."""
    script = before + "python pretrain_gpt.py --num-layers ${L:-9} ${A:+--x}\n"
    assert read_launch(script, "l.sh").args["num_layers"] == _bash_num_layers(script) == "9"


def test_an_unset_export_leaves_the_launchs_environment():
    launch = read_launch("export NCCL_ALGO=Ring\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\nunset NCCL_ALGO\n"
                         "python pretrain_gpt.py --num-layers 4\n", "l.sh")
    assert launch.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def test_the_unset_of_an_array_element_is_refused():
    with pytest.raises(BtacalcError, match=r"unset A\[1\]: btacalc follows the unset of a variable"):
        read_launch("A=(3 5)\nunset A[1]\npython pretrain_gpt.py --num-layers ${A[1]:-9}\n", "l.sh")


def test_squared_relu_beside_quick_geglu_trains_squared_relu_as_megatron_does(cli):
    """argument_utils.py L314-326 @ d98e8a64: `if args.squared_relu: assert not args.swiglu ... elif args.quick_geglu`:
    Megatron-LM asserts only against --swiglu and passes --quick-geglu over; the reader refused the launch saying
    Megatron asserts. Nemotron-4's launch with --quick-geglu added reads back as the preset's squared-ReLU MLP."""
    preset = load_preset("nemotron4-15b")
    launch = emitted(cli, "--model nemotron4-15b --hw h100 --devices 8 --tp 8")
    assert "--squared-relu" in launch
    run = import_megatron(launch.replace("--squared-relu", "--squared-relu --quick-geglu"), "m.sh")
    assert (run.model.mlp, run.model.mlp_activation) == (preset.mlp, preset.mlp_activation) == ("gelu", "squared_relu")
    # (the emitted launch's placeholder run length and learning rate are listed too: review35)
    assert [flag for flag, _ in run.ignored if flag not in ("--train-iters", "--lr")] == ["--quick-geglu"]
