"""A full recompute of some layers only (--recompute-layers N; Megatron --recompute-granularity full
--recompute-method block --recompute-num-layers N), written as its derivation from the code:

- Megatron-LM @ d98e8a64 megatron/core/recompute.py L167-180: under the block method each pipeline rank's chunk runs
  its layers 0 .. N-1 under the activation checkpoint (the layer input saved, the forward re-run in the backward) and
  the others as they are (every activation saved); transformer/multi_token_prediction.py L1630-1633: MTP layers are
  not recomputed under it;
- torchtitan @ 157a12c5 torchtitan/parallelisms/parallelize_llama.py L82-106: its "selective layer" checkpointing
  wraps every k-th block the same way (the measured torchtitan rows).

So without a pipeline a step holds N layers as a full recompute holds them and L - N as no recompute does: each
per-layer quantity (stored activations, recomputed FLOPs) is N/L of the full-recompute plan's plus (L - N)/L of the
no-recompute plan's, at the same batch shape, whatever lies outside the layers (it is the same in all three).
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from btacalc.config.presets import load_preset

BASE = "-m llama-3-8b --hw h100 --devices 8 --seq 2048 --global-batch 64 --tiles 1 --tile-batch 1".split()


def _plan(cli, *extra: str) -> dict:
    code, out, err = cli("plan", *BASE, *extra, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("n", [1, 12, 31])
def test_a_step_holds_n_layers_recomputed_and_the_rest_stored(cli, n):
    L = load_preset("llama-3-8b").num_layers
    full, none, part = _plan(cli, "--recompute", "full"), _plan(cli, "--recompute", "none"), \
        _plan(cli, "--recompute", "full", "--recompute-layers", str(n))
    for value in (lambda p: p["memory_bytes"]["stored_activations"], lambda p: p["flops_per_step"]["recompute"]):
        expected = Fraction(n, L) * value(full) + Fraction(L - n, L) * value(none)
        assert value(part) == pytest.approx(float(expected), rel=1e-12)
    # the buffer a re-run needs is one recomputed layer's, as under a full recompute
    assert part["memory_bytes"]["recompute_buffer"] == full["memory_bytes"]["recompute_buffer"]
    assert [(k["name"], k["count"]) for k in part["layer_kinds"]] == [("decoder", n), ("decoder-stored", L - n)]
    assert part["inputs"]["recompute_layers"] == n
    # the step's time lies between the two (each layer's time is its kind's)
    assert none["throughput"]["step_time_s"] < part["throughput"]["step_time_s"] < full["throughput"]["step_time_s"]


@pytest.mark.parametrize("extra", [0, 8])  # review30: Megatron never bounds N (recompute.py L174-180): N >= L is all
def test_every_layer_is_a_full_recompute(cli, extra):
    L = load_preset("llama-3-8b").num_layers
    full = _plan(cli, "--recompute", "full")
    every = _plan(cli, "--recompute", "full", "--recompute-layers", str(L + extra))
    assert every["memory_bytes"] == full["memory_bytes"]
    assert every["throughput"]["step_time_s"] == pytest.approx(full["throughput"]["step_time_s"], rel=1e-12)
    assert every["inputs"]["recompute_layers"] == L


def test_mtp_layers_are_not_recomputed_under_the_block_method():
    spec = load_preset("deepseek-v3")
    kinds = spec.layer_kinds(multi_token_prediction=True, stored=frozenset(range(3, spec.num_layers)))
    mtp = next(k for k in kinds if k.name == "mtp")
    assert dict(mtp.features).get("recompute_off") is True  # multi_token_prediction.py L1630-1633
    stored = sum(k.count for k in kinds if dict(k.features).get("recompute_off") and k.name != "mtp")
    assert stored == spec.num_layers - 3


def test_a_megatron_block_launch_reads_and_writes_back(cli, tmp_path):
    code, launch, err = cli("plan", *BASE, "--recompute", "full", "--recompute-layers", "12", "--emit", "megatron")
    assert code == 0, err
    words = launch.replace("\\", " ").split()
    assert words[words.index("--recompute-method") + 1] == "block"
    assert words[words.index("--recompute-num-layers") + 1] == "12"
    path = tmp_path / "run.sh"
    path.write_text(launch)
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100", "--json")
    assert code == 0, err
    read = json.loads(out)
    assert read["inputs"]["recompute"] == "full" and read["inputs"]["recompute_layers"] == 12
    code, text, err = cli("plan", *BASE, "--recompute", "full", "--recompute-layers", "12", "--emit", "bridge")
    assert {"model.recompute_method=block", "model.recompute_num_layers=12"} <= set(text.splitlines())


@pytest.mark.parametrize("extra, fragment", [
    ("--recompute-layers 4", "needs --recompute full"),
    ("--recompute full --recompute-layers -1", "1 or more (0: every layer)"),
])
def test_what_btacalc_does_not_place_is_refused_in_one_line(cli, extra, fragment):
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", *extra.split())
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


# With a pipeline the block method recomputes the first N layers of every pipeline rank's model chunk (recompute.py
# L167-180: num_layers_per_pipeline_rank is the chunk's). Llama 3 8B at PP 4 holds 8 layers a stage: N = 3 recomputes
# 3 of each stage's 8, 12 of 32; with VP 2 a chunk holds 4, so 3 of each chunk's 4, 24 of 32. Each stage's stored
# activations are then 3/8 of its full-recompute ones plus 5/8 of its no-recompute ones, whatever it holds outside
# the layers (the embedding, the loss) and however many micro-batches it keeps in flight.
def _stages(cli, *extra: str) -> dict:
    return _plan(cli, "--pp", "4", *extra)


def test_each_pipeline_stage_recomputes_its_first_n_layers(cli):
    part, full, none = (_stages(cli, "--recompute", "full", "--recompute-layers", "3"),
                        _stages(cli, "--recompute", "full"), _stages(cli, "--recompute", "none"))
    assert [(k["name"], k["count"]) for k in part["layer_kinds"]] == [("decoder", 12), ("decoder-stored", 20)]
    for j, stage in enumerate(part["memory_stages"]):
        assert stage["layers"] == 8
        expected = Fraction(3, 8) * full["memory_stages"][j]["components"]["stored_activations"] + \
            Fraction(5, 8) * none["memory_stages"][j]["components"]["stored_activations"]
        assert stage["components"]["stored_activations"] == pytest.approx(float(expected), rel=1e-12)
    interleaved = _stages(cli, "--vp", "2", "--recompute", "full", "--recompute-layers", "3")
    assert [(k["name"], k["count"]) for k in interleaved["layer_kinds"]] == [("decoder", 24), ("decoder-stored", 8)]


def test_a_pipelined_block_launch_reads_and_writes_back(cli, tmp_path):
    code, launch, err = cli("plan", *BASE, "--pp", "4", "--recompute", "full", "--recompute-layers", "3",
                            "--emit", "megatron")
    assert code == 0, err
    path = tmp_path / "run.sh"
    path.write_text(launch)
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100", "--json")
    assert code == 0, err
    read = json.loads(out)
    assert read["inputs"]["recompute_layers"] == 3 and read["parallelism"]["pipeline_parallel"] == 4
    assert [(k["name"], k["count"]) for k in read["layer_kinds"]] == [("decoder", 12), ("decoder-stored", 20)]


def test_the_search_places_the_block_recompute_per_layout(cli):
    code, out, err = cli("plan", "-m", "llama-3-70b", "--hw", "h100", "--devices", "64", "--global-batch", "128",
                         "--recompute", "full", "--recompute-layers", "4", "--search", "--json")
    assert code == 0, err
    search = json.loads(out)
    plan = search["best"]
    # the vectorised ranking (candidates grouped per PP x VP under a block recompute) scores what the plan gives
    assert search["ranking"][0]["step_time_s"] == pytest.approx(plan["throughput"]["step_time_s"], rel=1e-9)
    assert search["ranking"][0]["memory_bytes"] == pytest.approx(plan["memory_bytes"]["total"], rel=1e-9)
    pp, vp = plan["parallelism"]["pipeline_parallel"], plan["parallelism"]["virtual_pipeline"]
    per_chunk = 80 // (pp * vp)
    recomputed = pp * vp * min(4, per_chunk)
    kinds = {k["name"]: k["count"] for k in plan["layer_kinds"]}
    assert kinds.get("decoder", 0) == recomputed and kinds.get("decoder-stored", 0) == 80 - recomputed


# review30: Megatron-LM makes --recompute-activations selective whatever the granularity given (arguments.py
# L606-607) and refuses a method under selective (L1424-1427); Megatron-Core refuses a layer count there
# (transformer_config.py L1926-1932). btacalc planned the first as a block recompute and dropped the others' numbers.
SMALL = ("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512 "
         "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 32000 ")


@pytest.mark.parametrize("flags", [
    "--recompute-granularity full --recompute-activations --recompute-method block --recompute-num-layers 2",
    "--recompute-activations --recompute-method block --recompute-num-layers 2",
    "--recompute-granularity selective --recompute-num-layers 2",
])
def test_selective_with_a_method_or_count_is_refused_as_megatron_refuses_it(cli, tmp_path, flags):
    path = tmp_path / "run.sh"
    path.write_text(SMALL + flags)
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100", "--devices", "8")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "selective" in err


def test_a_method_without_a_granularity_is_listed_as_having_no_effect(cli, tmp_path):
    path = tmp_path / "run.sh"
    path.write_text(SMALL + "--recompute-method block --recompute-num-layers 2")
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100", "--devices", "8", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["inputs"]["recompute"] == "none"
    listed = {row["flag"]: row["reason"] for row in plan["imported"]["ignored"]}
    assert listed["--recompute-method"].startswith("no effect without --recompute-granularity")
    assert listed["--recompute-num-layers"].startswith("no effect without --recompute-granularity")


def test_compare_drops_the_block_recompute_from_wafer_rows(cli):
    code, out, err = cli("compare", "-m", "llama-3-8b", "--hw", "h100,wse3", "--recompute", "full",
                         "--recompute-layers", "16")
    assert code in (0, 1), err
    assert "Traceback" not in err and "--recompute-layers" not in err


@pytest.mark.parametrize("flags, missing", [
    ("--recompute-granularity full", "--recompute-method and --recompute-num-layers"),
    ("--recompute-granularity full --recompute-method block", "--recompute-num-layers"),
    ("--recompute-granularity full --recompute-num-layers 1", "--recompute-method"),
])
def test_a_full_granularity_needs_a_method_and_a_count(cli, tmp_path, flags, missing):
    # review30: Megatron-Core refuses either missing (transformer_config.py L1908-1924 @ d98e8a64)
    path = tmp_path / "run.sh"
    path.write_text(SMALL + flags)
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100", "--devices", "8")
    assert code == 2 and f"--recompute-granularity full without {missing}: Megatron-Core refuses" in err, err

