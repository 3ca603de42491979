"""freshuser23: btacalc used as a new MoE user would, from its README (docs/story.md "freshuser23").

Each test pins one defect found that way. The model is Qwen2-57B-A14B, its config.json written by hand from the
model card's numbers (hidden 3584, 28 layers, 28 heads with 4 key-value groups, 64 experts of width 2560 with top 8,
a gated shared expert of width 20480, vocabulary 151936); the expected values come from the README's own rules and
from arithmetic on those numbers, not from btacalc's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

QWEN2_57B = {
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 3584,
    "intermediate_size": 18944, "moe_intermediate_size": 2560, "shared_expert_intermediate_size": 20480,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "num_experts": 64,
    "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": False,
    "vocab_size": 151936, "max_position_embeddings": 131072, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
    "hidden_act": "silu", "initializer_range": 0.02, "tie_word_embeddings": False, "use_sliding_window": False,
    "router_aux_loss_coef": 0.001,
}

# 64 GB200s at PP 2 and EP 8: DP = 64 / 2 = 32 data-parallel ranks
LAYOUT = ("--hw", "gb200", "--devices", "64", "--pp", "2", "--ep", "8")
DP = 32


def _config(tmp_path: Path) -> str:
    folder = tmp_path / "qwen2-57b-a14b"
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(QWEN2_57B))
    return str(path)


def _plan(cli, model: str, *extra: str) -> dict:
    code, text, err = cli("plan", "--model", model, *LAYOUT, *extra, "--json")
    assert code == 0, err
    return json.loads(text)["plan"]


def _sweep(cli, model: str, vary: str, *extra: str) -> list[dict]:
    code, text, err = cli("sweep", "--model", model, *LAYOUT, "--vary", vary, *extra, "--json", "--quiet")
    assert code == 0, err
    return [p["plan"] for p in json.loads(text)["points"]]


def _shape(plan: dict) -> tuple[int, int, int]:
    return plan["tiles"], plan["tile_batch"], plan["micro_batches"]


def test_a_sweep_under_pipeline_parallelism_runs_micro_batch_one_as_plan_does(cli, tmp_path):
    """README (--grad-accum default): "under --pp > 1 a global batch alone means micro-batch 1 (M = N/DP), as
    Megatron's published recipes"; and a sweep "solves every point of the grid as plan would". At the GPU default
    batch (4,194,304 tokens = 1024 sequences of 4096) and at a global batch given by --vary, M = N / DP with one
    sequence per micro-batch. The sweep chose micro-batch 2 (M 16) where plan runs 1 (M 32)."""
    model = _config(tmp_path)
    default_n = 4_194_304 // 4096
    assert _shape(_plan(cli, model)) == (1, 1, default_n // DP)
    [point] = _sweep(cli, model, "seq=4096")
    assert _shape(point) == (1, 1, default_n // DP)
    points = _sweep(cli, model, "global-batch=256,1024")
    assert [_shape(p) for p in points] == [(1, 1, 256 // DP), (1, 1, 1024 // DP)]


@pytest.mark.parametrize("vary, given", [("tiles=1", ("--tiles", "1")),
                                         ("max-global-batch=4096", ("--max-global-batch", "4096"))])
def test_a_sweep_point_that_fixes_no_global_batch_runs_one_micro_batch(cli, tmp_path, vary, given):
    """A point that fixes a tile count or a cap, and no global batch, takes no default batch: M is --grad-accum's
    default, 1 (README --grad-accum row: "else 1"), in plan and in sweep alike. Under --pp 2 the sweep ran M = 32,
    the micro-batches of the default batch it had resolved its layout with."""
    model = _config(tmp_path)
    planned = _plan(cli, model, *given)
    [point] = _sweep(cli, model, vary)
    assert planned["micro_batches"] == 1
    assert _shape(point) == _shape(planned)


@pytest.mark.parametrize("given", [("--tiles", "2"), ("--tile-batch", "2")])
def test_a_global_batch_beside_a_fixed_tile_takes_the_smallest_micro_batch_it_leaves(cli, tmp_path, given):
    """README: under --pp > 1 "a global batch alone means micro-batch 1". Beside --tiles 2 (or --tile-batch 2) the rule
    still fixed a micro-batch of 1, M = 1024 / 32 = 32, and refused the plan as "--grad-accum 32 x --tiles 2 = 64 does
    not divide --global-batch 1024", naming a --grad-accum nobody gave. The smallest micro-batch the given 2 leaves is
    2 sequences: M = 1024 / (32 x 2) = 16, in plan and in sweep."""
    model = _config(tmp_path)
    code, text, err = cli("plan", "--model", model, *LAYOUT, "--global-batch", "1024", *given, "--json")
    assert code == 0, err
    assert "--grad-accum" not in err
    plan = json.loads(text)["plan"]
    assert _shape(plan) == ((2, 1, 16) if given[0] == "--tiles" else (1, 2, 16))
    [point] = _sweep(cli, model, f"{given[0][2:]}=2", "--global-batch", "1024")
    assert _shape(point) == _shape(plan)


def test_the_emitted_bridge_overrides_read_back_with_nothing_ignored(cli, tmp_path):
    """`--emit bridge` writes model.moe_shared_expert_overlap=False for a shared-expert model (over a recipe that turns
    it on, as DeepSeek-V3's bridge does); `--from-bridge` of that very file listed the key as ignored ("btacalc times
    them in series"), though off is what the plan runs. Turned on, the key is still listed."""
    code, text, err = cli("plan", "--model", _config(tmp_path), *LAYOUT, "--emit", "bridge")
    assert code == 0, err
    assert "model.moe_shared_expert_overlap=False" in text.splitlines()
    path = tmp_path / "overrides.txt"
    path.write_text(text)
    code, out, err = cli("plan", "--hw", "gb200", "--from-bridge", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["imported"]["ignored"] == []
    path.write_text(text.replace("model.moe_shared_expert_overlap=False", "model.moe_shared_expert_overlap=True"))
    code, out, err = cli("plan", "--hw", "gb200", "--from-bridge", str(path), "--json")
    assert code == 0, err
    assert [i["flag"] for i in json.loads(out)["imported"]["ignored"]] == ["model.moe_shared_expert_overlap"]


@pytest.mark.parametrize("command", ["plan", "sweep", "whatif"])
def test_the_global_batch_help_says_what_a_global_batch_alone_does(cli, command):
    """--global-batch's help said "alone it fixes G·b = N/(DP·M)", where the README's --grad-accum row has the solver
    choose M with G and b (under --pp > 1: micro-batch 1, M = N/DP); and it named --micro-batch, which sweep does
    not take."""
    code, text, _ = cli(command, "--help")
    assert code == 0
    flat = " ".join(text.split())
    assert "alone it fixes G·b" not in flat
    assert "alone the solver splits it into M, G and b" in flat
    assert "with plan's or whatif's --micro-batch" in flat
