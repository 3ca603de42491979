"""review30: a review of session 31's changes (compare --loss, --vocab-multiple, mergedhost, the per-device routed
rows, hostile38's and freshuser23's fixes, runs39). Each test pins one defect found, failing before its fix; the
expected values are arithmetic on the layout or the plan of the same options (`sweep` "solves every point of the grid
as plan would", README), not numbers copied from btacalc's output."""

from __future__ import annotations

import json

import pytest

# Qwen3-30B-A3B on 16 H100s at PP 2 and EP 8: DP = 16 / 2 = 8 data-parallel ranks
PP2 = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "8", "--pp", "2")


def _plan(cli, *args: str) -> dict:
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    return json.loads(out)["plan"]


def _sweep(cli, *args: str) -> list[dict]:
    code, out, err = cli("sweep", *args, "--json", "--quiet")
    assert code in (0, 1), err
    return json.loads(out)["points"]


def _shape(plan: dict) -> tuple:
    return plan["fits"], plan["tiles"], plan["tile_batch"], plan["micro_batches"]


@pytest.mark.parametrize("vary, flag", [("grad-accum=2,4", "--grad-accum"), ("seq=4096,8192", "--seq")])
def test_a_pipeline_sweep_holds_each_points_micro_batches_in_flight(cli, vary, flag):
    """Under --pp 2 stage 0 holds min(PP, M) micro-batches' activations (1F1B, model/gpu/stages.py). freshuser23's fix
    ran every sweep point's memory at M = 1 (its layout's M set to 1, the points' own M only timed): `--vary
    grad-accum=2,4` chose b = 2, which plan with --grad-accum 2 or 4 finds does not fit, and at --seq 8192 (the default
    batch, M = 512 / 8 = 64) the sweep reported a plan that fits where plan reports none. Each point is plan's."""
    name, values = vary.split("=")
    points = _sweep(cli, *PP2, "--vary", vary)
    planned = [_plan(cli, *PP2, flag, v) for v in values.split(",")]
    assert [_shape(p["plan"]) for p in points] == [_shape(p) for p in planned]


@pytest.mark.parametrize("given, flag", [(("--tiles", "3"), "--tiles 3"), (("--tile-batch", "3"), "--tile-batch 3")])
def test_a_global_batch_the_given_tile_does_not_divide_is_refused_naming_the_tile(cli, given, flag):
    """Under --pp 2 a global batch beside --tiles or --tile-batch runs the smallest micro-batch they leave (G x b,
    a53fc03e). 256 sequences over DP 8 are 32 per rank, which 3 does not divide: the refusal named a `--micro-batch 3`
    in plan and a `--grad-accum 10` (32 // 3) in sweep, options nobody gave; before the session it named the tile."""
    assert (256 // 8) % 3 != 0
    code, out, err = cli("plan", *PP2, "--global-batch", "256", *given)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert flag in err and "--micro-batch" not in err and "--grad-accum" not in err, err
    valid, point = _sweep(cli, *PP2, "--global-batch", "256", "--vary", f"{given[0][2:]}=2,{given[1]}")
    assert valid["plan"]["micro_batches"] == 256 // (8 * 2) and point["plan"]["fits"] is False
    assert flag in point["error"] and "--grad-accum" not in point["error"], point["error"]


def test_a_pipeline_global_batch_the_ranks_do_not_divide_names_no_micro_batch(cli):
    """The same rule without a tile: 100 sequences over DP 8 (12.5 per rank) were refused as "not a multiple of DP 8 x
    --micro-batch 1" though no --micro-batch was given (the pipeline's default micro-batch of 1)."""
    assert 100 % 8 != 0
    code, out, err = cli("plan", *PP2, "--global-batch", "100")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--global-batch 100" in err and "--micro-batch" not in err and "(96 or 104)" in err, err


# Qwen3-30B-A3B at TP 2 with Megatron-LM's own Qwen3 multiple: 1187 x 2 = 2,374 divides 151,936 (64 times), where the
# default 128 x 2 = 256 pads it to 594 x 256 = 152,064
VOCAB = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--tp", "2", "--ep", "8", "--global-batch",
         "64", "--vocab-multiple", "1187")


def _comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def test_the_emitted_launch_states_the_multiple_it_pads_at(cli):
    """`--emit megatron` of a --vocab-multiple 1187 plan passes --make-vocab-size-divisible-by 1187 and its header said
    "Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by 128 x TP", the default it does not
    run; the plan pads 151,936 at 1187 x TP (to itself)."""
    assert 151936 % (1187 * 2) == 0 and -(-151936 // 256) * 256 == 152064
    code, out, err = cli("plan", *VOCAB, "--emit", "megatron")
    assert code == 0, err
    assert "    --make-vocab-size-divisible-by 1187 \\" in out.splitlines()
    head = " ".join(_comments(out))
    assert "--make-vocab-size-divisible-by 1187 x TP" in head and "128 x TP" not in head, head


def test_the_emitted_bridge_overrides_state_the_multiple_the_plan_pads_at(cli, tmp_path):
    """`--emit bridge` writes model.make_vocab_size_divisible_by=1187 and its header said "btacalc plans it padded to a
    multiple of 128 x TP", where the plan, and its read-back, pad at 1187 x TP. Megatron-Bridge pads only a vocabulary
    the model leaves unset (training/setup.py L741-781 @ 067f987d): beside model.vocab_size the multiple pads nothing
    there, which the header says."""
    code, out, err = cli("plan", *VOCAB, "--emit", "bridge")
    assert code == 0, err
    assert "model.make_vocab_size_divisible_by=1187" in out.splitlines()
    head = " ".join(_comments(out))
    assert "1187 x TP" in head and "128 x TP" not in head, head
    path = tmp_path / "overrides.txt"
    path.write_text(out)
    code, back, err = cli("plan", "--hw", "h100", "--from-bridge", str(path), "--json")
    assert code == 0, err
    assert json.loads(back)["parallelism"]["vocab_multiple"] == 1187


@pytest.mark.parametrize("command", ["plan", "sweep"])
def test_the_global_batch_help_says_what_a_given_tile_makes_of_the_pipeline_rule(cli, command):
    """--global-batch's help said "under --pp > 1 one sequence per micro-batch, M = N/DP" alone; beside --tiles or
    --tile-batch the rule runs the G x b they leave (resolution.pipeline_micro_batch), as the README's row says."""
    code, text, _ = cli(command, "--help")
    assert code == 0
    assert "the G·b a given --tiles/--tile-batch leaves" in " ".join(text.split())


def test_the_readme_says_memory_reads_the_micro_batches_in_flight():
    """README "Batch sizes" said "Memory depends on (G, b) only", where a pipeline stage holds min(PP, M) micro-batches
    (model/gpu/stages.py), the sweep defect above."""
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    assert "Memory depends on (G, b) only" not in text
    assert "the micro-batches a pipeline stage holds in flight (min(PP, M) without interleaving)" in text
