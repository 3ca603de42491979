"""hostile42: a hostile campaign on btacalc's command line (thirty-fifth session): a layout search whose space grows
with the divisors of the devices and of the batch ran for minutes in silence (and gigabytes), `--search --vp` with PP
chosen was refused, a config.json giving a RoPE setting both at the top and in transformers 5's rope_parameters with
two values was read from one in silence, and NVFP4 under --te-version was planned on a TransformerEngine without NVFP4
or with the fused RHT cast a release before 2.14 lacks. Each test is a finding: it fails without its fix."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from support import one_line_error

DATA = Path(__file__).parent / "data"
QWEN3 = json.loads((DATA / "qwen3-30b-a3b.config.json").read_text())


# D1: `plan --search` weighs every PP that divides the devices up to L + 2, every EP dividing gcd(E, devices) and
# every micro-batch dividing N / DP up to 65,536 tokens: 256 H100s at s = 128 with a global batch of 720,720 x 256
# sequences (720,720 has 101 divisors up to the 512 sequences of 65,536 tokens) weighed 2,245,280 layouts for 147 s
# and 3.1 GB, with no word; 40,320 H100s 429,216 layouts for 87 s. The search is now refused above a stated cap.
def test_a_search_beyond_its_cap_is_refused_at_once(cli):
    start = time.perf_counter()
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "256", "--seq", "128",
                         "--global-batch", str(720_720 * 256), "--search")
    elapsed = time.perf_counter() - start
    one_line_error(code, out, err, "more than the 1,000,000 a search takes")
    assert "--micro-batch" in err and "--pp" in err and elapsed < 30, (elapsed, err)
    # the count it names is at least the micro-batches alone: DP 256 leaves 720,720 sequences per replica, whose
    # divisors up to 512 are 101, each with every EP of gcd(128, 256) = 128 (8 sizes) at TP 1 PP 1 CP 1 VP 1 and the
    # four recomputation policies (none, selective, full, layernorm,moe_act)
    count = int(err.split("--search: ")[1].split(" layouts")[0].replace(",", ""))
    assert count >= 101 * 8 * 4 and count > 1_000_000


def test_a_long_search_says_so_before_it_starts(cli, monkeypatch):
    """Above SEARCH_NOTE_LAYOUTS the search says on stderr how many layouts it weighs (here the threshold is lowered
    so that a 16-GPU search crosses it); the count it names bounds the layouts the report says it evaluated."""
    from btacalc.planning import search

    monkeypatch.setattr(search, "SEARCH_NOTE_LAYOUTS", 1000)
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--search", "--json")
    assert code == 0, err
    (line,) = err.splitlines()
    assert line.startswith("btacalc: --search: weighing ") and "--micro-batch" in line, err
    weighed = int(line.split("weighing ")[1].split(" layouts")[0].replace(",", ""))
    assert json.loads(out)["candidates"] <= weighed


def test_search_space_bounds_the_layouts_evaluated(cli):
    """search_space counts without Layout.validate: never fewer than the search evaluates, on a dense model and an
    MoE one, with and without fixed sizes."""
    from btacalc.planning import search

    seen = []
    real = search.search_space

    def spy(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    for args in (("--model", "llama-3-8b", "--devices", "24"), ("--model", "qwen3-30b-a3b", "--devices", "12"),
                 ("--model", "qwen3-30b-a3b", "--devices", "32", "--tp", "2", "--micro-batch", "2")):
        search.search_space = spy
        try:
            code, out, err = cli("plan", "--hw", "h100", *args, "--search", "--json")
        finally:
            search.search_space = real
        assert code in (0, 1), err
        assert 0 < json.loads(out)["candidates"] <= seen[-1], args


# D2: `plan --search --vp N` (PP chosen by the search) was refused "--vp > 1 needs --pp > 1": the search resolved its
# base at PP 1 with the given VP. Every layout it ranks now has that VP, at a PP > 1.
def test_search_with_a_given_vp_chooses_pp(cli):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--vp", "2",
                         "--search", "--json")
    assert code == 0, err
    ranking = json.loads(out)["ranking"]
    assert ranking and all(r["virtual_pipeline"] == 2 and r["pipeline_parallel"] > 1 for r in ranking)


# D3: transformers 5 moves rope_theta and partial_rotary_factor into rope_parameters; a config.json with both the old
# top-level key and the new nested one, disagreeing, was planned with the top-level value and no word. transformers 5
# keeps rope_parameters' own (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict: setdefault), transformers 4
# reads the top-level attribute: refused, naming both.
@pytest.mark.parametrize("key, top, nested", [("rope_theta", 10_000, 1_000_000),
                                              ("partial_rotary_factor", 0.25, 0.5)])
def test_rope_settings_given_twice_with_two_values_are_refused(cli, tmp_path, key, top, nested):
    config = {k: v for k, v in QWEN3.items() if k != "rope_theta"}
    config.update({key: top, "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000, key: nested}})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = cli("plan", "--model", str(path), "--hw", "h100", "--devices", "16", "--ep", "16")
    one_line_error(code, out, err, f"rope_parameters.{key} = {nested}")
    assert f"{key}' = {top}" in err and "transformers 5" in err


def test_rope_settings_given_twice_alike_are_read(cli, tmp_path):
    config = {**QWEN3, "rope_parameters": {"rope_type": "default", "rope_theta": QWEN3["rope_theta"]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = cli("models", "show", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["spec"]["numerics"]["rope_theta"] == QWEN3["rope_theta"]


# D4: since --te-version reaches NVFP4 (the projection's copy), `--te-version 2.5` planned NVFP4 on a TE without it
# (Megatron-Bridge refuses fp4 before 2.7.0.dev0, mixed_precision.py L110-111 @ 067f987d), and `--te-version 2.10`
# timed the fused RHT cast that TE 2.14 introduced (precision.toml rht_cast_fusion_since_te): the plan of 2.10 and of
# 2.14 were the same. The given TE and --rht-cast-fusion must now agree.
NVFP4 = ("plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--ep", "8", "--precision", "nvfp4")


@pytest.mark.parametrize("te, extra, says", [("2.5", (), "needs TransformerEngine 2.7.0.dev0"),
                                             ("2.6.0.dev0", (), "needs TransformerEngine 2.7.0.dev0"),
                                             ("2.10", (), "give --no-rht-cast-fusion"),
                                             ("2.14", ("--no-rht-cast-fusion",), "contradicts it")])
def test_nvfp4_te_version_must_have_nvfp4_and_agree_with_its_casts(cli, te, extra, says):
    code, out, err = cli(*NVFP4, "--te-version", te, *extra)
    one_line_error(code, out, err, says)

