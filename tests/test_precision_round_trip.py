"""hostile16: every precision through every emitter that can express it, read back by the matching reader, gives
the same precision and options (the precision, the low-precision parameter gather, the gradient bytes); an emitter
that cannot express a precision refuses it in one line, exit 2.

Before hostile16: `--precision fp16 --emit megatron` (and `--emit bridge`) was an internal error (KeyError 'fp16',
exit 3); a launch with `--fp16` was read back as bf16; `--emit bridge` wrote a plan's 16-bit gradient reduce as
`ddp.grad_reduce_in_fp32=False`, which Bridge's mixed precision overwrites (the run reduced in fp32), and wrote
the FP8 recipes without `mixed_precision.fp8_param_gather=False`, so Bridge gathered FP8 parameters the plan did
not; `--emit cerebras` / `modelzoo` wrote fp16 exactly as bf16.
"""

from __future__ import annotations

import json

import pytest

PRECISIONS = ("bf16", "fp16", "fp8", "fp8-current", "fp8-blockwise", "mxfp8", "nvfp4")
LOW = PRECISIONS[2:]
READER = {"megatron": "--from-megatron", "bridge": "--from-bridge"}
# (precision, extra plan options): every precision plain and with 16-bit gradients, the low ones with the gather
CASES = [(p, ()) for p in PRECISIONS] + [(p, ("--grad-bytes", "2")) for p in PRECISIONS] + \
        [(p, ("--fp8-param-gather",)) for p in LOW]


def _inputs(cli, *args: str) -> dict:
    code, out, err = cli(*args, "--json")
    assert code in (0, 1), err
    return json.loads(out)["inputs"]


@pytest.mark.parametrize("emit", ["megatron", "bridge"])
@pytest.mark.parametrize("precision,extra", CASES, ids=[f"{p}{''.join(e)}" for p, e in CASES])
def test_emitted_precision_reads_back_the_same(cli, tmp_path, emit, precision, extra):
    plan = ("plan", "--model", "llama-3-8b", "--hw", "b200", "--devices", "8", "--precision", precision, *extra)
    code, out, err = cli(*plan, "--emit", emit)
    assert code in (0, 1), err
    path = tmp_path / f"run.{emit}"
    path.write_text(out)
    want = _inputs(cli, *plan)
    got = _inputs(cli, "plan", "--hw", "b200", "--devices", "8", READER[emit], str(path))
    for key in ("precision", "fp8_param_gather", "gradient_bytes"):
        assert got[key] == want[key], (key, got[key], want[key], out)


def test_fp16_launch_says_fp16_and_its_gradient_reduce(cli):
    """Megatron-LM reduces fp16 gradients in fp16 unless --accumulate-allreduce-grads-in-fp32 (only --bf16 turns it
    on: arguments.py L1195-1217 @ d98e8a64): a plan of fp32 gradients says so, a plan of 16-bit ones does not."""
    base = ("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--precision", "fp16", "--emit")
    code, out, err = cli(*base, "megatron")
    assert code in (0, 1), err
    flags = out.split()
    assert "--fp16" in flags and "--bf16" not in flags and "--accumulate-allreduce-grads-in-fp32" in flags
    code, out, err = cli(*base[:-1], "--grad-bytes", "2", "--emit", "megatron")
    assert "--fp16" in out.split() and "--accumulate-allreduce-grads-in-fp32" not in out
    code, out, err = cli(*base, "bridge")
    lines = out.splitlines()
    # bridgemp: fp16_mixed's fields (it reduces in fp16, mixed_precision.py L212 @ 067f987d) with the plan's over them
    assert "++mixed_precision.fp16=True" in lines and "++mixed_precision.grad_reduce_in_fp32=True" in lines


@pytest.mark.parametrize("emit", ["cerebras", "modelzoo"])
def test_wafer_emitters_refuse_fp16_they_cannot_write(cli, emit):
    code, out, err = cli("plan", "--hw", "wse3", "--precision", "fp16", "--emit", emit)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "writes no precision setting" in err
    code, out, err = cli("plan", "--hw", "wse3", "--precision", "bf16", "--emit", emit)
    assert code in (0, 1), err


@pytest.mark.parametrize("precision", LOW)
def test_wafer_emitters_refuse_low_precision(cli, precision):
    code, out, err = cli("plan", "--hw", "wse3", "--precision", precision, "--emit", "cerebras")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err


def test_a_launch_with_fp16_and_fp8_is_refused_not_read_as_bf16(cli, tmp_path):
    """btacalc's FP8 recipes run over bf16; `--fp16 --fp8-format hybrid` would lose fp16: one line, exit 2, as is
    `--bf16 --fp16` (Megatron-LM asserts one of them)."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--precision", "fp8",
                         "--emit", "megatron")
    for old, new, fragment in (("--bf16", "--fp16", "--fp16 with --fp8-format"),
                               ("--bf16", "--bf16 --fp16", "--bf16 and --fp16 together")):
        path = tmp_path / "run.sh"
        path.write_text(out.replace(old, new))
        code2, out2, err2 = cli("plan", "--hw", "h100", "--from-megatron", str(path))
        assert code2 == 2 and fragment in err2 and len(err2.strip().splitlines()) == 1, err2


BRIDGE = ("model.num_layers=32\nmodel.hidden_size=4096\nmodel.num_attention_heads=32\nmodel.num_query_groups=8\n"
          "model.ffn_hidden_size=14336\nmodel.vocab_size=128256\nmodel.seq_length=4096\n"
          "model.tensor_model_parallel_size=1\ntrain.micro_batch_size=1\ntrain.global_batch_size=64\n")


@pytest.mark.parametrize("lines,precision,gather,grad", [
    # Bridge copies the mixed precision's fields over ddp / model (mixed_precision.py L138-164, config.py L2012-2016)
    ("mixed_precision=bf16_mixed\nddp.grad_reduce_in_fp32=false\n", "bf16", False, 4),
    ("ddp.grad_reduce_in_fp32=false\nmixed_precision=bf16_mixed\n", "bf16", False, 4),
    ("mixed_precision=bf16_mixed\nmixed_precision.grad_reduce_in_fp32=false\nddp.grad_reduce_in_fp32=true\n",
     "bf16", False, 2),
    ("mixed_precision=fp16_mixed\n", "fp16", False, 2),  # fp16_mixed: grad_reduce_in_fp32=False (L212)
    ("mixed_precision=fp16-mixed\nmixed_precision.grad_reduce_in_fp32=true\n", "fp16", False, 4),  # hyphens: L444
    # the delayed-scaling recipe gathers FP8 parameters (L231); model.fp8_param_gather beside it is overwritten
    ("mixed_precision=bf16_with_fp8_delayed_scaling_mixed\n", "fp8", True, 4),
    ("mixed_precision=bf16_with_fp8_delayed_scaling_mixed\nmodel.fp8_param_gather=false\n", "fp8", True, 4),
    ("mixed_precision=bf16_with_fp8_delayed_scaling_mixed\nmixed_precision.fp8_param_gather=false\n"
     "model.fp8_param_gather=true\n", "fp8", False, 4),
    ("mixed_precision=bf16_with_fp8_delayed_scaling_mixed\nmixed_precision.fp8_param=false\n", "fp8", False, 4),
    ("mixed_precision=bf16_with_fp8_subchannel_scaling_mixed\n", "fp8-blockwise", False, 4),  # L384
    ("mixed_precision=bf16_with_nvfp4_mixed\n", "nvfp4", True, 4),  # fp4_param_gather = True (L416)
    # no mixed precision: the DDP config's own field
    ("model.bf16=true\nddp.grad_reduce_in_fp32=false\n", "bf16", False, 2),
    # the recipe's FP8 fields in the mixed precision (were "ignored: low-precision details" and planned as bf16);
    # MixedPrecisionConfig's fp8_recipe defaults to tensorwise (L50), so fp8=hybrid alone is current scaling
    ("mixed_precision=bf16_mixed\nmixed_precision.fp8=hybrid\n", "fp8-current", False, 4),
    ("mixed_precision.bf16=true\nmixed_precision.fp8=hybrid\nmixed_precision.fp8_recipe=delayed\n", "fp8", False, 4),
    ("mixed_precision=bf16_with_fp8_delayed_scaling_mixed\nmixed_precision.fp8_recipe=mxfp8\n", "mxfp8", True, 4),
    ("mixed_precision=bf16_mixed\nmodel.fp8=hybrid\n", "bf16", False, 4),  # overwritten by the mixed precision's None
])
def test_bridge_takes_the_mixed_precision_over_ddp_and_model(cli, tmp_path, lines, precision, gather, grad):
    path = tmp_path / "o.txt"
    path.write_text(BRIDGE + lines)
    code, out, err = cli("plan", "--hw", "b200", "--devices", "8", "--from-bridge", str(path), "--json")
    assert code in (0, 1), err
    report = json.loads(out)
    got = report["inputs"]
    assert (got["precision"], got["fp8_param_gather"], got["gradient_bytes"]) == (precision, gather, grad)
    ignored = {i["flag"]: i["reason"] for i in report["imported"]["ignored"]}
    for key in ("ddp.grad_reduce_in_fp32", "model.fp8_param_gather", "model.fp8"):
        if key + "=" in lines and "mixed_precision" in lines:
            assert ignored[key].startswith("overwritten by mixed_precision"), ignored
    assert not any(k.startswith("mixed_precision.") for k in ignored), ignored


def test_bridge_fp8_param_and_its_gather_disagreeing_is_refused(cli, tmp_path):
    path = tmp_path / "o.txt"
    path.write_text(BRIDGE + "mixed_precision=bf16_with_fp8_delayed_scaling_mixed\n"
                    "mixed_precision.fp8_param=false\nmixed_precision.fp8_param_gather=true\n")
    code, out, err = cli("plan", "--hw", "b200", "--devices", "8", "--from-bridge", str(path))
    assert code == 2 and "Megatron-Bridge keeps the two equal" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("precision", ["fp8", "fp8-current", "fp8-blockwise", "mxfp8"])
@pytest.mark.parametrize("fmt", ["e4m3", "hybrid"])
def test_either_fp8_format_reads_as_the_recipe(cli, tmp_path, precision, fmt):
    """Megatron-Core hands --fp8-format e4m3 or hybrid to every FP8 recipe (fp8_utils.py L761-787 @ d98e8a64):
    `--fp8-format e4m3 --fp8-recipe tensorwise`, the flags btacalc/data/precision.toml gives for fp8-current, was
    refused ("low precision {...}: btacalc models ...") because the emitter writes hybrid."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "b200", "--devices", "8", "--precision", precision,
                         "--emit", "megatron")
    assert code in (0, 1), err
    lines = [line for line in out.splitlines()]
    path = tmp_path / "run.sh"
    path.write_text("\n".join(line.replace("--fp8-format hybrid", f"--fp8-format {fmt}")
                              .replace("--fp8-format e4m3", f"--fp8-format {fmt}") for line in lines) + "\n")
    assert f"--fp8-format {fmt}" in path.read_text()
    assert _inputs(cli, "plan", "--hw", "b200", "--from-megatron", str(path))["precision"] == precision
