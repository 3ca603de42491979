"""review33: a second read of the thirty-fourth session's changes. Each test is a finding: it fails without its fix."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support import one_line_error
from btacalc.config.model import rotary_dimensions, rotary_share

# nccl_ub's NVLS path takes a registered all-gather and reduce-scatter only; an all-reduce keeps the ring (the module
# docstring of btacalc/model/gpu/sm_share.py; NVIDIA/nccl @ 5067397c src/enqueue.cc L2152-2173). Without the
# distributed optimizer (ZeRO 0) Megatron's DDP all-reduces the gradients, so nccl_ub changes nothing there.
LAYOUT = ("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2", "--recompute", "full",
          "--overlap-grad-reduce", "--json")


def _plan(cli, *args: str) -> dict:
    code, out, err = cli(*LAYOUT, *args)
    assert code == 0, err
    return json.loads(out)


def test_nccl_ub_at_zero_0_is_said_to_keep_the_ring(cli):
    """The parallelism line said 'NVLS path: all-gather and reduce-scatter on fewer SMs' at ZeRO 0, where the step
    time is the one without nccl_ub to the last digit (the DP traffic is an all-reduce). It now says the ring is kept
    and why; the claim 'as without it' is checked against the plan without --nccl-ub."""
    on = _plan(cli, "--zero", "0", "--nccl-ub", "--nvls")
    off = _plan(cli, "--zero", "0")
    path = on["parallelism"]["nccl_ub_path"]
    assert path.startswith("ring channels as without it: ZeRO 0"), path
    assert on["throughput"]["step_time_s"] == off["throughput"]["step_time_s"]


def test_nccl_ub_at_zero_1_still_takes_the_nvls_path(cli):
    """The control: with the distributed optimizer the gradients are reduce-scattered and the parameters
    all-gathered, which the NVLS path runs on fewer SMs than the ring, so the same plan is faster."""
    on = _plan(cli, "--zero", "1", "--nccl-ub", "--nvls")
    off = _plan(cli, "--zero", "1")
    assert on["parallelism"]["nccl_ub_path"].startswith("NVLS path")
    ctas = on["parallelism"]["dp_collective_ctas"]
    assert ctas["reduce_scatter"] < ctas["all_reduce"] and ctas["all_gather"] < ctas["all_reduce"]
    assert on["throughput"]["step_time_s"] < off["throughput"]["step_time_s"]


@pytest.mark.parametrize("given, fragment", [
    # llama-3-8b has 32 decoder layers: a first (or last) stage of all 32 leaves 32 - 32 = 0 layers for the other
    # PP - 1 = 3 stages, the last (or the first) among them
    (("--first-stage-layers", "32"), "leave 0 layer(s) for 3 other stage(s) (the last among them)"),
    (("--last-stage-layers", "32"), "leave 0 layer(s) for 3 other stage(s) (the first among them)")])
def test_empty_stage_error_names_the_stages_that_are_left(cli, given, fragment):
    """hostile41's rewording of the 'middle stage(s)' error reached one of its two messages: the one for stages left
    empty still called the last (or first) stage a middle one."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--pp", "4", *given)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert fragment in " ".join(err.split())


# Megatron-Core turns int(kv_channels x rotary_percent) dimensions of each head (Megatron-LM @ d98e8a64
# megatron/core/models/common/embeddings/rotary_pos_embedding.py L72-74) and Hugging Face int(head_dim x
# partial_rotary_factor): both truncate. 90 x 0.7 and 180 x 0.7 are a hair below 63 and 126 in floating point.
QWEN3 = json.loads((Path(__file__).parent / "data" / "qwen3-30b-a3b.config.json").read_text())


def _qwen3(tmp_path: Path, head_dim: int, factor: float) -> str:
    path = tmp_path / f"q{head_dim}.json"
    path.write_text(json.dumps({**QWEN3, "head_dim": head_dim, "partial_rotary_factor": factor}))
    return str(path)


def test_a_share_truncating_to_an_even_count_is_a_model(cli, tmp_path):
    """0.7 of head_dim 90 turns int(62.99...) = 62 dimensions in both frameworks, an even count; btacalc rounded it
    to 63 and refused the config ('int(90 x 0.7) = 63'). It is planned, and the launch keeps the share as given."""
    turned = int(90 * 0.7)
    assert turned == 62 and 90 * 0.7 > 62.99
    code, out, err = cli("plan", "--model", _qwen3(tmp_path, 90, 0.7), "--hw", "h100", "--devices", "8", "--emit",
                         "megatron")
    assert code in (0, 1), err
    assert float(re.search(r"--rotary-percent (\S+)", out).group(1)) == 0.7


def test_a_share_truncating_to_an_odd_count_is_refused(cli, tmp_path):
    """0.7 of head_dim 180 turns int(125.99...) = 125 dimensions in both frameworks, an odd count; btacalc rounded it
    to 126, planned it and wrote --rotary-percent 0.7000000000000001, which Megatron turns as 126: another model."""
    turned = int(180 * 0.7)
    assert turned == 125
    code, out, err = cli("plan", "--model", _qwen3(tmp_path, 180, 0.7), "--hw", "h100", "--devices", "8")
    one_line_error(code, out, err, "partial_rotary_factor = 0.7")
    assert f"= {turned} of head_dim 180" in err


def test_rotary_share_truncates_to_the_count_it_stands_for():
    """A count given as such (GPT-J's rotary_dim) is stored as the share whose truncation gives it back, within one
    floating-point step of count / head_dim (30 / 44 truncates to 29: hostile41 D2)."""
    assert int(44 * (30 / 44)) == 29
    for head_dim in range(2, 513):
        for turned in range(2, head_dim + 1, 2):
            share = rotary_share(turned, head_dim)
            assert rotary_dimensions(head_dim, share) == int(head_dim * share) == turned
            assert 0 <= share - turned / head_dim <= 4e-16


def test_the_odd_share_error_suggests_a_share_megatron_reads_as_its_count(cli, tmp_path):
    """The error for an odd count from a launch's --rotary-percent suggested 'a share of k x 2 / head_dim', which
    truncates one short for some counts; it now gives one share, whose truncation is the even count it names."""
    code, _, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--emit", "megatron", "-o",
                       str(tmp_path / "run.sh"))
    assert code in (0, 1), err
    launch = tmp_path / "run.sh"
    launch.write_text(launch.read_text().replace("--position-embedding-type rope", "--position-embedding-type rope "
                                                 f"--rotary-percent {65 / 128!r}"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch))
    one_line_error(code, out, err, "--rotary-percent")
    flat = " ".join(err.split())
    share, count = re.search(r"e\.g\. (\S+) for (\d+)\)", flat).groups()
    assert int(128 * float(share)) == int(count) == 64


def test_the_codec_mixed_defaults_are_the_dataclass_defaults():
    """bridge_codec.BRIDGE_MIXED_DEFAULTS (the fields of a mixed_precision section without a preset name) is read
    from the preset table now (the lead, after review33: no hand-written second copy); the expected values are
    MixedPrecisionConfig's dataclass defaults as Megatron-Bridge @ 067f987d mixed_precision.py L40-66 writes them
    (bf16 False, fp16 False, grad_reduce_in_fp32 True, fp8_param_gather False, fp4_param_gather False)."""
    from btacalc.config.bridge_codec import BRIDGE_MIXED_DEFAULTS

    assert BRIDGE_MIXED_DEFAULTS == {"bf16": False, "fp16": False, "grad_reduce_in_fp32": True,
                                     "fp8_param_gather": False, "fp4_param_gather": False}
