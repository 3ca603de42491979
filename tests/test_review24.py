"""review24: the cross-entropy a Megatron-Bridge run trains from `--emit bridge`'s overrides.

Written from the sources, not from btacalc's codec. A field Bridge overrides leave out keeps the model provider's
value: Megatron-Bridge @ 067f987df src/megatron/bridge/models/gpt_provider.py L205 `cross_entropy_loss_fusion: bool =
True` (and AutoBridge's model configs, models/conversion/model_bridge.py L665, `cross_entropy_loss_fusion=True`);
`cross_entropy_fusion_impl` is Megatron-Core's ModelParallelConfig field, default 'native' (Megatron-LM @ d98e8a64
megatron/core/model_parallel_config.py L325). Megatron-Core picks the loss from the two (language_module.py
L173-200): the flag off, the unfused vocab-parallel cross-entropy; on with 'te', TransformerEngine's; on with
'native', the compiled native one (btacalc's vocab_parallel, te_fused and native_fused, docs/memory.md "cenative").
Before, a vocab_parallel plan's overrides said nothing about the flag, so Bridge ran the native fused loss, whose
backward holds one more fp32 copy of a micro-batch's logits than the plan counted.
"""

from __future__ import annotations

import json

import pytest

# the Bridge run's value of each field the overrides leave out (module docstring)
BRIDGE_PROVIDER = {"model.cross_entropy_loss_fusion": "True", "model.cross_entropy_fusion_impl": "native"}
PLAN = ("--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2", "--global-batch", "64",
        "--micro-batch", "1", "--recompute", "full")


def _megatron_loss(fusion: str, impl: str) -> str:
    """language_module.py L173-200, in btacalc's names."""
    if fusion.lower() != "true":
        return "vocab_parallel"
    return "te_fused" if impl == "te" else "native_fused"


@pytest.mark.parametrize("loss", ["vocab_parallel", "native_fused", "te_fused"])
def test_the_bridge_run_trains_the_planned_loss(cli, loss):
    code, text, err = cli("plan", *PLAN, "--loss", loss, "--emit", "bridge")
    assert code == 0, err
    given = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    run = {**BRIDGE_PROVIDER, **given}
    assert _megatron_loss(run["model.cross_entropy_loss_fusion"], run["model.cross_entropy_fusion_impl"]) == loss


@pytest.mark.parametrize("given", [{}, {"model.cross_entropy_loss_fusion": "False"},
                                   {"model.cross_entropy_fusion_impl": "te"}])
def test_a_bridge_file_is_read_with_the_providers_fusion(cli, tmp_path, given):
    """A Bridge file that leaves the flag out trains Bridge's value of it, not Megatron-LM's parser default (off):
    before, `--from-bridge` planned the unfused loss for it, one fp32 copy of a micro-batch's logits short."""
    code, text, err = cli("plan", *PLAN, "--emit", "bridge")
    assert code == 0, err
    lines = [line for line in text.splitlines() if not line.startswith(("model.cross_entropy_loss_fusion=",
                                                                         "model.cross_entropy_fusion_impl="))]
    lines += [f"{key}={value}" for key, value in given.items()]
    path = tmp_path / "overrides.txt"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-bridge", str(path), "--json")
    assert code == 0, err
    run = {**BRIDGE_PROVIDER, **given}
    planned = json.loads(out)["inputs"]["loss"]
    assert planned == _megatron_loss(run["model.cross_entropy_loss_fusion"], run["model.cross_entropy_fusion_impl"])


def test_the_a2a_rows_text_names_the_stage_of_the_default_splits_empty_chunk():
    """The Qwen3-235B model-zoo A2A row's known gap says where btacalc's default split (94 layers over PP 32 x VP 3,
    no account-for flags) left a chunk empty. Megatron's model chunk i is virtual chunk i // PP of stage i % PP
    (config/pipeline.py's docstring): the empty one is derived here, not copied from the text, which said stage 30."""
    from btacalc.config.pipeline import StageSplit, place
    from btacalc.planning.measured import load_runs

    placement = place(94, 32, 3, StageSplit())
    empty = [(p, v) for v in range(3) for p in range(32)
             if not (placement.chunk(p, v).count or placement.chunk(p, v).embedding or placement.chunk(p, v).loss)]
    assert len(empty) == 1
    stage, virtual = empty[0]
    run = next(r for r in load_runs() if r.id == "qwen3-235b-a22b-h100-256-bf16-mzoo-a2a-tp2-pp32-vp3-ep8")
    assert f"an empty chunk {virtual} on the last stage, {stage}" in run.known_gap and stage == 31
