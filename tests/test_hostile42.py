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



# D5: a search's layouts are int64 arrays, where the step's tokens N x s wrapped past 2^63: a global batch of 2^62
# sequences of 4,096 tokens (2^74 tokens, 0 modulo 2^64) put every layout at 0 tokens/s and the ranking divided by
# zero (exit 2, "beyond the arithmetic's range", for a batch the README gives as answered); 2^62 - 1 wrapped to
# -4,096 tokens, every row 0 tokens/s and the winner a PP 1 layout at 1,922 tokens/s where PP 8 runs 103,549.
@pytest.mark.parametrize("batch", [2 ** 62, 2 ** 62 - 1])
def test_a_search_at_a_2_62_global_batch_ranks_real_rates(cli, batch):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--global-batch",
                         str(batch), "--search", "--json")
    assert code == 0, err
    report = json.loads(out)
    rows = report["ranking"]
    assert rows and all(r["tokens_per_s"] > 0 for r in rows)
    for r in rows:  # N x s over the row's own step time
        assert r["tokens_per_s"] == pytest.approx(batch * 4096 / r["step_time_s"], rel=1e-9)
    assert rows[0]["tokens_per_s"] == max(r["tokens_per_s"] for r in rows)


# D6: counting a pipeline stage's in-flight passes where M is not a multiple of the micro-batch group built Megatron's
# whole schedule table, M x VP entries, to read its first few: `plan --pp 16 --global-batch 4611686018427387903`
# (M = 2^62 - 1 at DP 1) filled memory and never answered. Only the entries counted are built now.
def test_a_pipeline_plan_with_an_odd_huge_m_answers(cli):
    start = time.perf_counter()
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--pp", "16", "--ep",
                         "1", "--global-batch", str(2 ** 62 - 1), "--json")
    assert code in (0, 1), err
    assert json.loads(out)["plan"]["micro_batches"] == 2 ** 62 - 1 and time.perf_counter() - start < 60


def test_schedule_table_prefix_is_the_table_s_start():
    """Megatron's get_schedule_table order (groups of `group` micro-batches, each run through every chunk): the first
    entries built alone equal the whole table's first entries."""
    from btacalc.model.gpu.schedule import schedule_table

    whole = schedule_table(7, 3, 2)
    assert whole[:8] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 0), (3, 0)]
    for k in (0, 1, 5, 8, 21, 30):
        assert schedule_table(7, 3, 2, first=k) == whole[:k]
