"""freshuser26: a new user planning GPT-OSS-120B against Llama 3 70B on 64 GB200 (NVL72) in MXFP8 and BF16 from the
README (docs/story.md "freshuser26").

Each test pins one defect found that way. Expected values are arithmetic on the command's own inputs (a global batch
of N sequences of s tokens is N·s tokens per optimizer step, whatever the layout), never btacalc's output.
"""

from __future__ import annotations

import json

import pytest


def _sweep_points(cli, *args: str) -> list[dict]:
    code, out, err = cli("sweep", *args, "--json", "--quiet")
    assert code == 0, err
    return json.loads(out)["points"]


def test_sweep_cluster_tokens_per_step_counts_data_parallel_ranks_not_devices(cli):
    """A sweep point's `plan.cluster_tokens_per_step` is the tokens of one optimizer step over all devices, N·s
    (`plan --json`'s field, report.py: DP*M*G*b*s). The sweep wrote devices*M*G*b*s, so under TP 2 it read twice the
    tokens the step runs (262,144 for 64 sequences of 2,048 tokens on 8 GB200 at TP 2), and under PP the same."""
    for layout in (("--tp", "2"), ("--pp", "2")):
        points = _sweep_points(cli, "--model", "llama-3-8b", "--hw", "gb200", "--devices", "8", *layout,
                               "--global-batch", "64", "--vary", "seq=2048,4096")
        assert [p["params"]["seq"] for p in points] == [2048, 4096]
        for p in points:
            seq = p["params"]["seq"]
            assert p["plan"]["step_batch"] == 64, layout
            assert p["plan"]["cluster_tokens_per_step"] == 64 * seq, layout


def test_sweep_cluster_tokens_of_a_point_that_does_not_fit(cli):
    """A point whose fixed tiles do not fit shows that fixed shape (`plan`'s verdict); its tokens per step are still
    its step batch's sequences times s, not times the devices."""
    points = _sweep_points(cli, "--model", "llama-3-70b", "--hw", "gb200", "--devices", "8", "--tp", "2",
                           "--tiles", "64", "--tile-batch", "1", "--vary", "seq=4096")
    (p,) = points
    assert p["plan"]["fits"] is False
    assert p["plan"]["global_batch"] == 64
    assert p["plan"]["cluster_tokens_per_step"] == p["plan"]["step_batch"] * 4096
    assert p["plan"]["step_batch"] == 4 * p["plan"]["micro_batches"] * 64  # DP = 8 / TP 2


def _parallelism_line(out: str) -> str:
    """The plan header's `parallelism` row, its folded continuation lines joined back into one line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("parallelism"))
    text = [lines[start][len("parallelism"):]]
    for line in lines[start + 1:]:
        if not line.startswith(" "):
            break
        text.append(line)
    return " ".join(" ".join(text).split())


def test_plan_header_names_the_moe_dispatcher_it_times(cli, monkeypatch, tmp_path):
    """The all-to-all rows of an MoE plan are timed for one dispatcher: btacalc's default alltoall, --deepep
    (Megatron's flex dispatcher with DeepEP or, with --hybridep, HybridEP) or --allgather-dispatcher. The header
    named none of them, so a user reading a plan could not tell which it timed, and btacalc's default is not
    Megatron-LM's (a launch without --moe-token-dispatcher-type runs allgather)."""
    monkeypatch.setenv("COLUMNS", "200")
    base = ("plan", "--model", "gpt-oss-120b", "--hw", "gb200", "--devices", "64", "--ep", "64",
            "--micro-batch", "4", "--recompute", "none")
    for extra, shown in (((), "alltoall dispatcher (default)"), (("--deepep",), "flex dispatcher (DeepEP)"),
                         (("--deepep", "--hybridep"), "flex dispatcher (HybridEP)"),
                         (("--allgather-dispatcher",), "allgather dispatcher")):
        code, out, err = cli(*base, *extra)
        assert code == 0, err
        assert shown in _parallelism_line(out), extra
    code, launch, err = cli(*base, "--emit", "megatron")
    assert code == 0 and "--moe-token-dispatcher-type alltoall" in launch, err
    script = tmp_path / "launch.sh"
    script.write_text(launch)
    code, out, err = cli("plan", "--hw", "gb200", "--from-megatron", str(script))
    assert code == 0, err
    line = _parallelism_line(out)
    assert "alltoall dispatcher" in line and "alltoall dispatcher (default)" not in line  # the launch states it
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "gb200", "--devices", "8")
    assert code == 0 and "dispatcher" not in _parallelism_line(out)  # a dense model dispatches nothing


def test_gpu_plan_times_each_layer_kind_by_its_own_phases(cli):
    """GPT-OSS alternates 128-token sliding-window and full-attention layers (config.json: sliding_window 128,
    layer_types). A full layer's attention core at s = 4096 does 4096/128 = 32 times the sliding layer's
    score FLOPs (both counted over s·w, w = s for a full layer), yet `plan --json` gave both kinds' `attn_scores`
    and `attn_pv` rows one time: the average over the two kinds (the step total over all 36 layers), so neither
    row was either kind's. Each kind's row is its own layer's time; the two kinds' rows still add up to the step's
    (18 layers of each kind and M micro-batches)."""
    code, out, err = cli("plan", "--model", "gpt-oss-120b", "--hw", "gb200", "--devices", "64", "--ep", "64",
                         "--micro-batch", "4", "--recompute", "none", "--precision", "mxfp8", "--json")
    assert code == 0, err
    report = json.loads(out)
    kinds = {k["name"]: (k["count"], {p["name"]: p for p in k["phases"]}) for k in report["layer_kinds"]}
    assert set(kinds) == {"moe-sliding", "moe-full"} and kinds["moe-sliding"][0] == kinds["moe-full"][0] == 18
    sliding, full = kinds["moe-sliding"][1], kinds["moe-full"][1]
    assert full["attn_scores"]["flops_forward"] == 32 * sliding["attn_scores"]["flops_forward"]
    for phase in ("attn_scores", "attn_pv"):
        assert full[phase]["time_s"] > 4 * sliding[phase]["time_s"] > 0, phase
    m = report["plan"]["micro_batches"]
    shares, step = report["throughput"]["phase_share"], report["throughput"]["step_time_s"]
    for phase in ("attn_scores", "attn_pv", "experts", "qkv_proj"):
        per_step = m * 18 * (full[phase]["time_s"] + sliding[phase]["time_s"])
        assert abs(per_step - shares[phase] * step) <= 1e-9 * step, phase
    # `phases`, the representative kind's rows, shows that kind's own times too
    rows = {p["name"]: p for p in report["phases"]}
    (own,) = [k for _, k in kinds.values() if k["attn_scores"]["flops_forward"] == rows["attn_scores"]["flops_forward"]]
    assert rows["attn_scores"]["time_s"] == own["attn_scores"]["time_s"]


def test_compare_of_a_dense_model_shows_no_expert_columns(cli):
    """freshuser26 (left item, fixed by the lead): `compare` of a dense model showed T_e = G·b·s (4,096 for one
    sequence of 4,096 tokens: every token "to one expert"), a "vs dense" over itself (0.96) and a G = 1 gain, which
    `plan` hides for a dense model (tables.py: no expert layers, no dense equivalent, no G = 1 row). The JSON states
    `moe` and leaves the three values out; the table leaves their columns out; an MoE model keeps all three."""
    code, out, err = cli("compare", "--model", "llama-3-70b", "--hw", "gb200", "--devices", "64", "--tp", "4",
                         "--pp", "4", "--json")
    assert code == 0, err
    dense = json.loads(out)
    assert dense["moe"] is False and dense["rows"][0]["fits"]
    assert all(r["tokens_per_expert"] is None and r["relative_to_dense"] is None and r["bta_gain"] is None
               for r in dense["rows"])
    code, table, err = cli("compare", "--model", "llama-3-70b", "--hw", "gb200", "--devices", "64", "--tp", "4",
                           "--pp", "4")
    assert code == 0, err
    header = next(line for line in table.splitlines() if "tokens/s" in line and "device" in line)
    assert "T_e" not in header and "vs dense" not in header and "BTA" not in header
    code, out, err = cli("compare", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8", "--json")
    assert code == 0, err
    moe = json.loads(out)
    assert moe["moe"] is True
    row = moe["rows"][0]
    # T_e on 8 B200 at EP 8: EP·G·b·s·k/E (plan's formula), k = 8 of E = 128
    assert row["tokens_per_expert"] == 8 * row["tiles"] * row["tile_batch"] * moe["seq_len"] * 8 / 128


@pytest.mark.parametrize("hw, devices, flags, path", [
    # NCCL takes its NVLS path for nccl_ub's registered all-gather / reduce-scatter only with NVLS on, on sm90 or
    # later, without MNNVL and inside one NVLink domain (NVIDIA/nccl @ 5067397c src/enqueue.cc L2152-2173;
    # src/graph/search.cc L1124): 8 H100 in one node take it; the rest say which condition they miss
    ("h100", 8, ("--nvls",), "NVLS path"),
    ("h100", 8, (), "ring channels as without it: NCCL_NVLS_ENABLE off"),
    ("a100-80gb", 8, ("--nvls",), "ring channels as without it: NVLS needs sm90"),
    ("gb200", 64, ("--nvls",), "ring channels as without it: the NVLink domain spans several hosts"),
    ("h100", 16, ("--nvls",), "ring channels as without it: the data-parallel group leaves the NVLink domain")])
def test_nccl_ub_says_which_path_nccl_takes(cli, hw, devices, flags, path):
    """freshuser26 (left item, fixed by the lead): `--nccl-ub` alone, and `--nccl-ub --nvls` on a GB200 NVL72 rack
    (4 GPUs per host, 72 per NVLink domain: MNNVL), change nothing in the clock, and the plan said nothing of it.
    The parallelism line and `plan --json` now say which path NCCL takes and, for the ring, why; the SM counts the
    JSON gives agree (the ring's count for every collective where the NVLS path is not taken)."""
    run = ("plan", "--model", "llama-3-8b", "--hw", hw, "--devices", str(devices), "--recompute", "full", "--nccl-ub")
    code, out, err = cli(*run, *flags, "--json")
    assert code == 0, err
    par = json.loads(out)["parallelism"]
    assert par["nccl_ub_path"].startswith(path)
    ctas = par["dp_collective_ctas"]
    ring = path.startswith("ring")
    assert (ctas["all_gather"] == ctas["all_reduce"]) is ring
    code, out, err = cli(*run, *flags)
    assert code == 0, err
    assert "nccl_ub:" in " ".join(out.split())


def test_search_tie_line_states_memory_used_by_the_tie_and_the_winner(cli):
    """freshuser26 (left item, fixed by the lead): the search's tie line named the tie with the most memory headroom
    'at 77.8 GB', which reads as headroom; it is the memory that layout uses. The line now says 'using X GB per device
    against the winner's Y GB', X and Y the ranking rows' own memory_bytes / 1e9 (the tie: the least memory among the
    layouts within 0.5% of the winner's tokens/s)."""
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--global-batch",
                         "256", "--search", "--json")
    assert code == 0, err
    found = json.loads(out)
    ranking = found["ranking"]
    best = ranking[0]
    ties = [r for r in ranking[1:] if r["tokens_per_s"] >= 0.995 * best["tokens_per_s"]]
    roomy = min(ties, key=lambda r: r["memory_bytes"])
    assert roomy["memory_bytes"] < best["memory_bytes"]
    line = next(w for w in found["why"] if "runner-up" in w)
    assert (f"using {roomy['memory_bytes'] / 1e9:.1f} GB per device against the winner's "
            f"{best['memory_bytes'] / 1e9:.1f} GB") in line
