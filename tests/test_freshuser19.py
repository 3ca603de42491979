"""freshuser19: btacalc's launches pasted into Megatron-LM / Megatron-Bridge and its numbers checked by hand.

docs/story.md "freshuser19" says what each test pins and what happened before.
"""

from __future__ import annotations

import pytest

from btacalc.config.presets import resolve_model
from btacalc.paths import preset_names
from tests.support import emitted

BIASED_MOE = [name for name in preset_names() if resolve_model(name).biased_moe()]
UNBIASED_MOE = [name for name in preset_names() if resolve_model(name).is_moe and not resolve_model(name).biased_moe()]


def test_the_built_in_presets_hold_both_kinds_of_moe_model():
    assert "gpt-oss-120b" in BIASED_MOE and "qwen3-30b-a3b" in UNBIASED_MOE


# A biased MoE model (GPT-OSS: q/k/v/o, router and expert biases) at an ETP the user gave: `plan` planned it and
# `--emit megatron` printed a launch with a "MEGATRON WOULD REFUSE THIS" line, which `--from-megatron` then refused
# (megatron_rules moe-bias-etp, transformer_config.py L2612-2615). The default and the search keep ETP 1.
@pytest.mark.parametrize("name", BIASED_MOE)
@pytest.mark.parametrize("emit", [(), ("--emit", "megatron"), ("--emit", "bridge")])
def test_a_biased_moe_model_at_etp_above_1_is_refused_before_any_output(cli, name, emit):
    code, out, err = cli("plan", "--model", name, "--hw", "h100", "--devices", "16", "--tp", "2", "--etp", "2",
                         "--ep", "8", *emit)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and "--etp 2" in err and "ETP 1" in err and "give --etp 1" in err, err


@pytest.mark.parametrize("name", BIASED_MOE)
def test_the_same_plan_at_etp_1_emits_a_launch_megatron_takes_and_reads_back(cli, tmp_path, name):
    launch = emitted(cli, f"--model {name} --hw h100 --devices 16 --tp 2 --etp 1 --ep 8")
    assert "--expert-tensor-parallel-size 1" in launch and "MEGATRON WOULD REFUSE" not in launch
    path = tmp_path / "launch.sh"
    path.write_text(launch)
    code, _, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code in (0, 1), err


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "mixtral-8x7b"])
def test_an_unbiased_moe_model_keeps_the_etp_given(cli, name):
    assert name in UNBIASED_MOE
    code, out, err = cli("plan", "--model", name, "--hw", "h100", "--devices", "16", "--tp", "2", "--etp", "2",
                         "--ep", "8", "--emit", "megatron")
    assert code in (0, 1), err
    assert "--expert-tensor-parallel-size 2" in out and "MEGATRON WOULD REFUSE" not in out


# Overlaps Megatron-LM asserts against beside another option the user gave (arguments.py L1025, L1028, L1442): `plan`
# printed them as overlapped and `--emit megatron` wrote a MEGATRON WOULD REFUSE THIS line (docs/story.md review8
# had left it so); the launch reader refuses the same launch. Each is now one line naming what it needs.
@pytest.mark.parametrize("given, rule, needs", [
    ("--tp 2 --no-sequence-parallel --tp-comm-overlap", "tp-overlap-sp", "needs --sequence-parallel at --tp 2"),
    ("--overlap-param-gather", "param-gather-grad-reduce", "needs --overlap-grad-reduce"),
    ("--zero 0 --overlap-grad-reduce --overlap-param-gather", "param-gather-sharded", "(--zero 1 or more)"),
])
@pytest.mark.parametrize("emit", [(), ("--emit", "megatron"), ("--emit", "bridge")])
def test_an_overlap_megatron_asserts_against_is_refused_before_any_output(cli, given, rule, needs, emit):
    from btacalc.config.megatron_rules import RULES

    source = next(r.source for r in RULES if r.name == rule)
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", *given.split(), *emit)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and needs in err and source in err, err


@pytest.mark.parametrize("given", ["--overlap-grad-reduce --overlap-param-gather", "--tp 2 --tp-comm-overlap",
                                   "--zero 3 --fsdp --overlap-grad-reduce --overlap-param-gather",
                                   "--tp-comm-overlap"])  # at TP 1 dropped with its reason, as before
def test_the_overlaps_megatron_runs_are_planned_and_emitted_without_a_refusal(cli, given):
    launch = emitted(cli, f"--model llama-3-8b --hw h100 --devices 8 {given}")
    assert "MEGATRON WOULD REFUSE" not in launch


# The rules read a layout's virtual pipeline as Megatron-LM derives it (its chunks over PP, arguments.py L941-952).
# They read --num-virtual-stages-per-pipeline-rank only, so DeepSeek-V3 with its MTP layer (emitted as a layout) at
# PP 16 x VP 2 with the all-to-all overlap was emitted with "MEGATRON WOULD REFUSE THIS: ... needs a virtual
# pipeline", which Megatron's own validation passes, and --from-megatron refused its own launch.
GIVEN_DSV3 = "--model deepseek-v3 --hw b200 --devices 512 --pp 16 --vp 2 --ep 32 --overlap-a2a --mtp"


def test_a_layout_interleaved_launch_with_the_all_to_all_overlap_reads_back(cli, tmp_path):
    launch = emitted(cli, GIVEN_DSV3)
    assert "--pipeline-model-parallel-layout" in launch and "--overlap-moe-expert-parallel-comm" in launch
    assert "MEGATRON WOULD REFUSE" not in launch
    path = tmp_path / "launch.sh"
    path.write_text(launch)
    code, out, err = cli("plan", "--hw", "b200", "--from-megatron", str(path), "--json")
    assert code in (0, 1), err
    import json

    assert json.loads(out)["parallelism"]["overlaps"]["all_to_all"] is True


@pytest.mark.parametrize("layout, pp, vp", [("Et|t|t|tL", 2, 2), ("Et|tL", 2, 1), ("E(t|)*7tL", 4, 2)])
def test_the_rules_read_a_layouts_virtual_pipeline_as_megatron_derives_it(layout, pp, vp):
    from btacalc.config.megatron_rules import RULES, violations
    from btacalc.config.pipeline import parse_layout

    assert len(parse_layout(layout)) // pp == vp
    args = {"pipeline_model_parallel_size": pp, "pipeline_model_parallel_layout": layout, "num_experts": 8,
            "expert_model_parallel_size": 2, "moe_token_dispatcher_type": "alltoall", "bf16": True,
            "overlap_moe_expert_parallel_comm": True, "overlap_p2p_comm": False}
    broken = {r.name for r in violations(args, {})}
    assert ("a2a-vp" in broken) == (vp == 1)
    # Megatron's interleaved schedule on 2 stages without p2p overlap (L1000-1009) applies to a layout's VP too
    assert ("interleave-pp" in broken) == (vp > 1 and pp <= 2)
    assert {r.name for r in RULES} >= {"a2a-vp", "interleave-pp"}


# The step's rows: phase_share (each layer phase, the exposed collectives, the bubble, the synchronisation, the
# optimizer) and tiling_overhead_s add up to step_time_s; phase_share alone summed to 0.999 (the hand check's
# Mixtral plan: 5.12 ms of 5.296 s) while its description said "share of step time per phase".
@pytest.mark.parametrize("given", ["--model mixtral-8x7b --hw h100 --devices 32 --global-batch 256 --pp 4 --vp 8 --ep 8",
                                   "--model qwen3-30b-a3b --hw wse3"])
def test_the_step_rows_add_up_and_the_schema_says_which_they_are(cli, given):
    import json

    code, out, err = cli("plan", *given.split(), "--json")
    assert code == 0, err
    th = json.loads(out)["throughput"]
    shares = sum(th["phase_share"].values())
    # a wafer pays its mesh's per-tile cost; a GPU issues each tile's kernels from the host (the `launch` row)
    assert (th["tiling_overhead_s"] > 0) == ("wse3" in given) and shares <= 1 + 1e-12
    assert shares + th["tiling_overhead_s"] / th["step_time_s"] == pytest.approx(1, abs=1e-12)
    code, out, err = cli("plan", "--schema")
    text = json.dumps(json.loads(out))
    assert "tiling_overhead_s / step_time_s the shares add up to 1" in text
    assert "a part of step_time_s that phase_share leaves out" in text


# `--emit bridge` writes model.num_query_groups for DeepSeek-V3 (the head count, over a recipe's GQA); reading its own
# file back listed it as "ignored ...: not modelled by btacalc", as if btacalc dropped something the run uses.
def test_a_bridge_files_query_groups_under_mla_are_listed_with_why(cli, tmp_path):
    import json

    from btacalc.config.megatron_run import NOT_MODELLED

    given = "--model deepseek-v3 --hw b200 --devices 256 --pp 16 --ep 16"
    overrides = emitted(cli, given, "bridge")
    assert "model.num_query_groups=128" in overrides and "model.multi_latent_attention=True" in overrides
    path = tmp_path / "dsv3.txt"
    path.write_text(overrides)
    code, out, err = cli("plan", "--hw", "b200", "--devices", "256", "--from-bridge", str(path), "--json")
    assert code in (0, 1), err
    reasons = {row["flag"]: row["reason"] for row in json.loads(out)["imported"]["ignored"]}
    assert reasons["model.num_query_groups"] != NOT_MODELLED
    assert "multi-latent attention" in reasons["model.num_query_groups"]


def test_query_groups_without_group_query_attention_are_listed_with_why(cli, monkeypatch):
    import io
    import json
    import sys

    monkeypatch.setattr(sys, "stdin", io.StringIO(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --num-query-groups 2 --seq-length 64 "
        "--max-position-embeddings 64 --micro-batch-size 1 --bf16 --vocab-size 1000"))
    code, out, err = cli("plan", "--hw", "h100", "--devices", "1", "--from-megatron", "-", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"]["num_kv_heads"] == 4  # Megatron-LM trains every head its own key/value
    reasons = {row["flag"]: row["reason"] for row in doc["imported"]["ignored"]}
    assert "only with --group-query-attention" in reasons["--num-query-groups"]
