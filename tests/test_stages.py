"""Pipeline stages as Megatron builds them (btacalc.config.pipeline, btacalc.model.gpu.stages).

Expected layers are written by hand from Megatron-LM @ d98e8a64ddf3: get_num_layers_to_build
(megatron/core/transformer/transformer_block.py:76-200), get_transformer_layer_offset
(transformer_layer.py:65-218), PipelineParallelLayerLayout (pipeline_parallel_layer_layout.py), and from
the published recipes that use them (Megatron-Bridge @ 05d003fb recipes/deepseek/deepseek_v3.py
layout_map; Megatron-LM docs/user-guide/features/pipeline_parallel_layout.md; Megatron-LM
examples/post_training/modelopt/conf/moonshotai/kimi_k2_instruct_export.sh).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.pipeline import StageSplit, balanced_first_last, balanced_layout, parse_layout, place
from btacalc.config.presets import resolve_model
from btacalc.errors import BtacalcError
from btacalc.model.gpu.costs import layer_parts, outside_parts
from btacalc.model.gpu.memory import GpuMemory
from btacalc.model.gpu.stages import PipelineStages
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.problem import make_problem

DSV3 = resolve_model("deepseek-v3")
KIMI = resolve_model("kimi-k2")


def chunk_layers(placement, stage, virtual):
    return list(placement.chunk(stage, virtual).layers)


def test_default_split_follows_megatrons_docstring_examples():
    # transformer_block.py:166-172: 8 layers, 2 stages, 4 chunks: stage 0 [0] [2] [4] [6], stage 1 [1] [3] [5] [7];
    # 2 chunks: stage 0 [0, 1] [4, 5], stage 1 [2, 3] [6, 7]
    four = place(8, 2, 4)
    assert [[chunk_layers(four, p, v) for v in range(4)] for p in range(2)] == [[[0], [2], [4], [6]],
                                                                               [[1], [3], [5], [7]]]
    two = place(8, 2, 2)
    assert [[chunk_layers(two, p, v) for v in range(2)] for p in range(2)] == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    assert four.method == two.method == "even"


def test_account_for_embedding_and_loss_offsets():
    # 94 layers, PP 8, VP 3, both flags: 96 units, 96/8 = 12 per stage, 4 per chunk; offset(p, v) = v·96/3 +
    # p·4 - 1 except at (0, 0) (transformer_layer.py:195-209); the first chunk builds 4 - 1, the last 4 - 1
    pl = place(94, 8, 3, StageSplit(account_for_embedding=True, account_for_loss=True))
    for p in range(8):
        for v in range(3):
            offset = v * 32 + p * 4 - (0 if (p, v) == (0, 0) else 1)
            count = 4 - ((p, v) == (0, 0)) - ((p, v) == (7, 2))
            assert chunk_layers(pl, p, v) == list(range(offset, offset + count))
    assert pl.chunk(0, 0).embedding and pl.chunk(7, 2).loss
    # btacalc picks the same split when 94 does not divide into 24 chunks but 96 does
    assert place(94, 8, 3).chunks == pl.chunks


def test_uneven_first_and_last_stage_offsets_with_interleaving():
    # 28 layers, PP 4, VP 2, first 4 and last 4 (transformer_layer.py:122-166): per chunk first 4/2 = 2, last
    # 2, middle (28 - 8)/2 = 10 per stage, 5 per chunk; total per virtual round 2 + 10 + 2 = 14;
    # offset(0, v) = 14v, offset(p, v) = 14v + 2 + (p - 1)·5 for p > 0
    pl = place(28, 4, 2, StageSplit(first_stage_layers=4, last_stage_layers=4))
    sizes = [2, 5, 5, 2]
    for p in range(4):
        for v in range(2):
            offset = 14 * v + (0 if p == 0 else 2 + (p - 1) * 5)
            assert chunk_layers(pl, p, v) == list(range(offset, offset + sizes[p]))
    assert pl.method == "first_last"


def test_kimi_k2_published_first_last_split():
    # kimi_k2_instruct_export.sh: PP 16 with first 3 and last 2: "3, [4] * 14, 2"
    pl = place(61, 16, 1, StageSplit(first_stage_layers=3, last_stage_layers=2))
    assert [len(pl.stage_layers(p)) for p in range(16)] == [3] + [4] * 14 + [2]
    assert pl.stage_layers(1) == [3, 4, 5, 6]


def test_layout_string_as_megatrons_rank_map():
    # pipeline_parallel_layout.md: "Et*3|(tt|)*29,m|L" at PP 16 (VP 2): stage 0 holds E + 3 layers and 2;
    # stages 1-13 2 and 2; stage 14 2 and the MTP layer; stage 15 2 and the loss. Offsets: the running sum
    # of decoder layers over model chunks (get_layer_offset), so chunk i (1..29) starts at 3 + 2(i - 1)
    chunks = parse_layout("Et*3|(tt|)*29,m|L")
    assert len(chunks) == 32 and chunks[0] == "Ettt" and chunks[30] == "m" and chunks[31] == "L"
    pl = place(61, 16, 2, StageSplit(pipeline_layout="Et*3|(tt|)*29,m|L"), mtp=1)
    assert chunk_layers(pl, 0, 0) == [0, 1, 2] and pl.chunk(0, 0).embedding
    for i in range(1, 30):
        assert chunk_layers(pl, i % 16, i // 16) == [3 + 2 * (i - 1), 4 + 2 * (i - 1)]
    assert chunk_layers(pl, 14, 1) == [] and pl.chunk(14, 1).mtp == 1
    assert chunk_layers(pl, 15, 1) == [] and pl.chunk(15, 1).loss
    assert [len(pl.stage_layers(p)) for p in range(16)] == [5] + [4] * 13 + [2, 2]


# Megatron-Bridge @ 05d003fb recipes/deepseek/deepseek_v3.py layout_map, (PP, VP) -> decoder layers per model
# chunk (the first chunk also holds the embedding, the last the MTP layer and the loss)
BRIDGE_DSV3 = {(4, 1): [16, 16, 16, 13], (8, 1): [8] * 7 + [5], (4, 2): [8] * 7 + [5], (16, 1): [4] * 15 + [1],
               (8, 2): [4] * 15 + [1], (4, 4): [4] * 15 + [1]}


def bridge_layout(counts):
    bodies = ["t" * n for n in counts]
    bodies[0] = "E" + bodies[0]
    bodies[-1] += "mL"
    return "|".join(bodies)


@pytest.mark.parametrize("pp, vp", BRIDGE_DSV3)
def test_bridge_deepseek_v3_layouts(pp, vp):
    counts = BRIDGE_DSV3[(pp, vp)]
    pl = place(61, pp, vp, StageSplit(pipeline_layout=bridge_layout(counts)), mtp=1)
    assert [c.count for c in pl.chunks] == counts
    assert pl.chunk(pp - 1, vp - 1).mtp == 1 and pl.chunk(pp - 1, vp - 1).loss


@pytest.mark.parametrize("pp", [4, 8, 16])
def test_btacalc_first_last_pick_matches_bridge_at_vp1(pp):
    # with VP 1 btacalc's pick is Megatron's first/last form with the same stages as Bridge's layouts
    split = balanced_first_last(61, pp, 1)
    pl = place(61, pp, 1, split)
    assert [c.count for c in pl.chunks] == BRIDGE_DSV3[(pp, 1)]
    assert split == StageSplit(last_stage_layers=BRIDGE_DSV3[(pp, 1)][-1])  # the middle share needs no flag


@pytest.mark.parametrize("pp", [4, 8, 16])
@pytest.mark.parametrize("vp", range(1, 9))
def test_every_61_layer_pipeline_places_every_layer_once(pp, vp):
    pl = place(61, pp, vp, mtp=1)
    layers = [i for c in pl.chunks for i in c.layers]
    assert layers == list(range(61))
    assert all(pl.stage_layers(p) or pl.chunk(p, 0).embedding or pl.chunk(p, vp - 1).loss for p in range(pp))
    assert sum(c.mtp for c in pl.chunks) == 1 and pl.chunk(pp - 1, vp - 1).mtp == 1
    shares = [len(pl.stage_layers(p)) for p in range(pp)]
    # as even as the form allows: the busiest stage holds the ceiling share (first/last form, VP 1), or at
    # most one unit more (a layout counting E and L as a layer each)
    assert max(shares) <= -(-61 // pp) + (vp > 1)


def test_generated_layout_round_trips():
    for pp, vp in ((8, 2), (16, 8), (4, 3), (16, 5)):
        text = balanced_layout(61, pp, vp, 1)
        chunks = parse_layout(text)
        assert len(chunks) == pp * vp and "".join(chunks).count("t") == 61
        totals = [sum(chunks[v * pp + p].count("t") for v in range(vp)) for p in range(pp)]
        # 63 units (E and L one each) over PP stages, ceil shares first
        units = [-(-(p + 1) * 63 // pp) - -(-p * 63 // pp) for p in range(pp)]
        assert totals == [u - (p == 0) - (p == pp - 1) for p, u in enumerate(units)]


@pytest.mark.parametrize("split, text", [
    (StageSplit(pipeline_layout="Et*30|t*30L"), "places 60 decoder layers"),
    (StageSplit(pipeline_layout="Et*31|t*30L|t"), "3 model chunks"),
    (StageSplit(pipeline_layout="t*31|Et*30L"), "must start with the embedding"),
    (StageSplit(pipeline_layout="Et*31|t*30Lx"), "unknown symbol"),
    (StageSplit(pipeline_layout="Et*31|t*30mL"), "MTP layer"),
    (StageSplit(pipeline_layout="Et*99999999999|L"), "unrolls to more than"),
    (StageSplit(first_stage_layers=62), "exceed the model's 61 layers"),
    (StageSplit(first_stage_layers=30, last_stage_layers=30), "layers would have no stage"),
    (StageSplit(first_stage_layers=3, account_for_loss=True), "cannot be combined"),
    (StageSplit(account_for_embedding=True), "do not divide"),
])
def test_bad_splits_are_one_line_errors(split, text):
    with pytest.raises(BtacalcError, match=text):
        place(61, 2 if split.pipeline_layout or split.first_stage_layers else 4, 1, split)


def test_a_layout_that_leaves_a_stage_empty():
    with pytest.raises(BtacalcError, match="stage 2 holds no layer"):
        place(61, 4, 1, StageSplit(pipeline_layout="Et*30|t*31||L"))


def test_stage_kind_counts_as_arrays_match_each_layout():
    kinds = DSV3.layer_kind_indices()
    pp, vp = np.array([2, 4, 8, 4]), np.array([1, 1, 2, 4])
    arrays = PipelineStages(61, pp, vp, np.array([8, 8, 16, 8]), kind_of_layer=kinds)
    for i in range(4):
        one = PipelineStages(61, int(pp[i]), int(vp[i]), 8 * (1 + (i == 2)), kind_of_layer=kinds)
        for j in range(8):
            assert [int(np.asarray(c)[i]) for c in arrays.kind_counts(j)] == \
                (one.kind_counts(j) if j < pp[i] else [0, 0])
            assert int(np.asarray(arrays.held_layers(j))[i]) == (one.held_layers(j) if j < pp[i] else 0)


def test_interleaved_in_flight_passes_per_chunk():
    # stage 0 of PP 4 x VP 3 runs 2·3 + 2·4 = 14 warm-up forwards, holds K = 15 passes: micro-batch groups of
    # PP = 4 visit chunk 0, 1, 2, then chunk 0 again: chunk 0 holds 4 + 3, chunks 1 and 2 hold 4 each
    st = PipelineStages(61, 4, 3, 64, kind_of_layer=DSV3.layer_kind_indices())
    assert st.in_flight(0) == 15
    assert [st.chunk_passes(0, v) for v in range(3)] == [7, 4, 4]
    pl = place(61, 4, 3)
    assert st.held_layers(0) == sum(n * pl.chunk(0, v).count for v, n in enumerate([7, 4, 4]))


def dsv3_pp2(micro_batches=2):
    hw = resolve_hardware("h100")
    layout = Layout(devices=2, pipeline_parallel=2, micro_batches=micro_batches, devices_per_node=8)
    return make_problem(DSV3, hw, RunOptions(seq_len=4096, attention="flash", recompute="none", gradient_bytes=4), layout)


def test_mixed_stack_stage_memory_is_the_sum_of_its_real_layers():
    # DeepSeek-V3 (layers 0-2 dense, 3-60 MoE) over PP 2: 61 layers do not divide, so btacalc takes Megatron's
    # first/last form with 31 and 30 layers; stage 0 holds layers 0-30 (3 dense, 28 MoE) plus the embedding,
    # stage 1 layers 31-60 (30 MoE) plus the head. One device per stage, no sharding: weights 2 bytes per
    # parameter, fp32 main gradients 4 (Megatron bf16 default).
    problem = dsv3_pp2()
    placed = problem.layout.placement(61)
    assert placed.stage_layers(0) == list(range(31)) and placed.stage_layers(1) == list(range(31, 61))
    ev = problem.evaluate(1, 1)
    parts = {kind.name: part for (kind, _), part in zip(ev.layers, layer_parts(problem, ev, memory_only=True))}
    dense, moe = parts["dense"], parts["moe"]
    first, last = outside_parts(problem, ev, memory_only=True)

    def params(part):
        return part.dense_params + part.routed_params  # EP = ETP = 1: every expert on the device

    stage0 = 3 * params(dense) + 28 * params(moe) + first.dense_params
    stage1 = 30 * params(moe) + last.dense_params
    rows = GpuMemory(problem).stage_rows(1, 1)
    for row, expected in zip(rows, (stage0, stage1)):
        assert row.components["weights"] == 2 * expected
        assert row.components["gradients"] == 4 * expected
    # activations: 1F1B with M = 2, stage 0 holds min(2, M) = 2 micro-batches, stage 1 one
    assert rows[0].components["stored_activations"] == 2 * (3 * dense.stored + 28 * moe.stored) + 2 * first.stored
    assert rows[1].components["stored_activations"] == 30 * moe.stored + last.stored
    # a proportional share (31·3/61 dense layers on stage 0) would differ: the test can fail
    assert 3 * params(dense) + 28 * params(moe) != pytest.approx(31 * (3 * params(dense) + 58 * params(moe)) / 61)


def test_mixed_stack_stage_time_is_the_sum_of_its_real_layers():
    problem = dsv3_pp2()
    ev = problem.evaluate(1, 1)
    parts = {kind.name: part for (kind, _), part in zip(ev.layers, layer_parts(problem, ev))}
    st = gpu_step_time(problem, 1, 1)
    first, last = outside_parts(problem, ev)
    stage0 = 3 * parts["dense"].compute_s + 28 * parts["moe"].compute_s + first.compute_s
    stage1 = 30 * parts["moe"].compute_s + last.compute_s
    assert st.details["terms"]["compute"] == pytest.approx(max(stage0, stage1), rel=1e-12)


def _plan(cli, model, pp, vp, *extra):
    return cli("plan", "--model", model, "--hw", "h100", "--devices", "2048", "--ep", "32", "--pp", str(pp), "--vp",
               str(vp), "--global-batch", "4096", "--micro-batch", "1", "--recompute", "full", *extra, "--json")


@pytest.mark.parametrize("model", ["deepseek-v3", "kimi-k2"])
@pytest.mark.parametrize("pp", [4, 8, 16])
def test_61_layer_models_plan_at_every_pp_and_vp(cli, model, pp):
    for vp in range(1, 9):
        code, out, err = _plan(cli, model, pp, vp)
        assert code in (0, 1), (vp, err)
        par = json.loads(out)["parallelism"]
        assert sum(par["stage_layers"]) == 61 and len(par["stage_layers"]) == pp
        assert par["pipeline_split"] == ("first_last" if vp == 1 else "layout")
        reasons = json.loads(out)["inputs"]["defaults"]
        assert "pipeline_split" in reasons


@pytest.mark.parametrize("pp, vp", BRIDGE_DSV3)
def test_published_deepseek_v3_layouts_plan(cli, pp, vp):
    code, out, err = _plan(cli, "deepseek-v3", pp, vp, "--mtp", "--pipeline-layout",
                           bridge_layout(BRIDGE_DSV3[(pp, vp)]))
    assert code in (0, 1), err
    par = json.loads(out)["parallelism"]
    assert par["pipeline_split"] == "layout" and par["virtual_pipeline"] == vp


def test_published_kimi_k2_first_last_plans_and_emits(cli):
    code, out, err = cli("plan", "--model", "kimi-k2", "--hw", "h100", "--devices", "2048", "--ep", "32", "--pp", "16",
                         "--first-stage-layers", "3", "--last-stage-layers", "2", "--global-batch", "4096",
                         "--micro-batch", "1", "--emit", "megatron")
    assert code in (0, 1), err
    assert "--decoder-first-pipeline-num-layers 3" in out and "--decoder-last-pipeline-num-layers 2" in out
    assert "model.num_layers_in_last_pipeline_stage=2" in out


def test_layout_string_sets_vp_and_is_emitted(cli):
    layout = "Et*3|(tt|)*29,m|L"
    code, out, err = cli("plan", "--model", "deepseek-v3", "--hw", "h100", "--devices", "2048", "--ep", "32", "--pp",
                         "16", "--mtp", "--pipeline-layout", layout, "--global-batch", "4096", "--micro-batch", "1",
                         "--emit", "megatron")
    assert code in (0, 1), err
    assert f"--pipeline-model-parallel-layout '{layout}'" in out
    assert "--num-virtual-stages-per-pipeline-rank" not in out  # Megatron refuses it beside a layout


@pytest.mark.parametrize("args, text", [
    (("--pp", "4", "--pipeline-layout", "Et*30|t*29|t|L"), "places 60 decoder layers"),
    (("--pp", "4", "--pipeline-layout", "Et*30|t*30|t*0|tL"), "holds no layer"),
    (("--pp", "4", "--first-stage-layers", "70"), "exceed the model's 61 layers"),
    (("--pp", "4", "--last-stage-layers", "62"), "exceed the model's 61 layers"),
    (("--pp", "4", "--vp", "2", "--first-stage-layers", "3"), "multiple of --vp 2"),
    (("--pp", "4", "--pipeline-layout", "Et*61|L"), "2 model chunks"),
    (("--pp", "1", "--first-stage-layers", "3"), "need --pp > 1"),
    (("--pp", "2", "--pipeline-layout", "Et*31|t*30mL"), "--mtp"),
])
def test_bad_pipeline_splits_on_the_command_line(cli, args, text):
    code, out, err = cli("plan", "--model", "deepseek-v3", "--hw", "h100", "--devices", "256", "--ep", "8", *args)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and text in err, err


def test_search_considers_uneven_splits():
    # 29 layers over a fixed PP 4: neither 29 nor 31 divides by 4, so every candidate uses Megatron's
    # first/last form (8, 8, 8, 5 at VP 1); before, the search had no candidate at all
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.model import validate_model
    from btacalc.planning.search import search_layouts

    data = resolve_model("llama-3-8b").model_dump()
    data.update(name="llama-29", num_layers=29, published_params=None)
    model = validate_model(data, origin="test")
    request = ExecutionRequest(devices=8, pipeline_parallel=4, virtual_pipeline=1, tensor_parallel=1,
                               context_parallel=1, seq_len=2048)
    result = search_layouts(model, resolve_hardware("h100"), request)
    assert result.candidates > 0 and result.best is not None
    assert result.best.parallelism.pipeline_split == "first_last"
    assert result.best.parallelism.stage_layers == [8, 8, 8, 5]


def test_search_with_a_layout_string_takes_its_pp_and_vp():
    # the layout's 8 chunks fix PP·VP = 8 (Megatron: VP = chunks / PP); with PP free, the search tries
    # PP 1, 2, 4, 8 at VP 8, 4, 2, 1 and keeps the ones the layout fits (PP 1 cannot take a split)
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.model import validate_model
    from btacalc.planning.search import search_layouts

    data = resolve_model("llama-3-8b").model_dump()
    data.update(name="llama-29", num_layers=29, published_params=None)
    model = validate_model(data, origin="test")
    layout = "Et*4|(t*4|)*6t*1L"
    request = ExecutionRequest(devices=8, tensor_parallel=1, context_parallel=1, seq_len=2048,
                               stage_split=StageSplit(pipeline_layout=layout))
    result = search_layouts(model, resolve_hardware("h100"), request)
    best = result.best.parallelism
    assert best.pipeline_split == "layout" and best.pipeline_layout == layout
    assert best.pipeline_parallel * best.virtual_pipeline == 8


def test_more_stages_than_layers_is_a_one_line_error(cli):
    # 64 stages for 61 layers + the embedding + the loss (63 units): a stage would hold nothing
    code, out, err = cli("plan", "--model", "deepseek-v3", "--hw", "h100", "--devices", "512", "--ep", "8", "--pp", "64")
    assert code == 2 and out == "" and err.count("\n") == 1 and "would leave a stage empty" in err, err
