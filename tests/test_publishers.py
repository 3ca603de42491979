"""A published GPU run whose row states no recipe takes its publisher's performance recipe (planning/publishers.py,
btacalc/data/publisher_recipes.toml), not Megatron-LM's command-line defaults.

What the baselines hold, read from the publishers' code (each cited in the data file):
- Megatron-Bridge's performance configs (@ f9b6319e): grad_reduce_in_fp32 = False (qwen3_llm_pretrain.py L41-42),
  ddp.overlap_grad_reduce / overlap_param_gather = True (recipes/llama/llama3.py L727-728),
  CommOverlapConfig(tp_comm_overlap=True) (L737-738) except under NVFP4 (llama3_llm_pretrain.py L115) and in its
  MoE recipes (qwen3_moe.py L107, gpt_oss.py L129, deepseek_v3.py L168, kimi_k2.py L182), and force-balanced MoE
  routing (docs/performance-summary.md L104 @ 067f987d);
- NVIDIA's NeMo-based benchmarks (NeMo 2 scripts/performance/helpers.py L234 and recipes, NeMo 1.0's launcher
  175b_fp8_performance.yaml, dgxc-benchmarking, MLPerf): bf16 gradient reduction and the three overlaps (no
  tensor-parallel overlap in MoE recipes: NeMo's deepseek_v3.py L144-147), free routing.
A baseline row must therefore predict exactly what the same row with that recipe typed out predicts; a row's own
recipe wins field by field, the fields it leaves out taking the baseline's.
"""

from __future__ import annotations

import json

import pytest

from btacalc.planning.measured import MeasuredRun, express, load_runs, predict, run_defaults, validate_measured
from btacalc.planning.publishers import publisher_of, publishers

BRIDGE = "https://docs.nvidia.com/nemo/megatron-bridge/latest/performance-summary-archive.html ; repo github.com/NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md"
DGXC = "github.com/NVIDIA/dgxc-benchmarking llama3/README.md"

DENSE = {"id": "llama-70b-gb200-64", "source": BRIDGE, "model": "llama-3-70b", "hw": "gb200", "devices": 64,
         "precision": "fp8-current", "seq": 8192, "global_batch": 128, "micro_batch": 1, "tp": 2, "pp": 4,
         "vp": 5, "cp": 1, "ep": 1, "measured": {"tokens_per_s_per_device": 3000.0}, "role": "check"}
MOE = {"id": "qwen3-30b-h100-16", "source": BRIDGE, "model": "qwen3-30b-a3b", "hw": "h100", "devices": 16,
       "precision": "bf16", "seq": 4096, "global_batch": 512, "micro_batch": 1, "tp": 1, "pp": 2, "vp": 12,
       "cp": 1, "ep": 8, "measured": {"tokens_per_s_per_device": 5000.0}, "role": "check"}


def _run(base, **changes):
    return MeasuredRun.model_validate({**base, **changes})


def _typed_out(base, overlaps, force_balanced=None, **changes):
    recipe = {"source": "typed out by hand", "grad_reduce_in_bf16": True, "overlaps": overlaps}
    extra = {} if force_balanced is None else {"router_force_load_balancing": force_balanced}
    return _run(base, recipe=recipe, **extra, **changes)


ALL_ON = {"grad_reduce": True, "param_gather": True, "tp_comm": True}


def test_publishers_are_read_from_the_runs_source():
    assert publisher_of(BRIDGE).name == "megatron-bridge-performance"
    assert publisher_of(DGXC).name == "nvidia-performance"
    assert publisher_of("github.com/mlcommons/training_results_v5.1 NVIDIA/benchmarks/llama31_8b").name == \
        "nvidia-performance"
    assert publisher_of("https://github.com/mosaicml/llm-foundry scripts/train/benchmarking/README.md").name == \
        "llm-foundry-benchmarks"
    assert publisher_of("https://github.com/mosaicml/llm-foundry/blob/main/README.md") is None  # not its tables
    assert publisher_of("https://arxiv.org/abs/2104.04473 (Narayanan et al., SC'21), Table 1").name == "megatron-lm-2021"
    for p in publishers():  # every baseline cites the code or the paper it reads
        assert ("github.com" in p.recipe["source"] or "arXiv" in p.recipe["source"]) and len(p.recipe["source"]) > 100


def test_a_bridge_dense_row_without_a_recipe_predicts_as_its_recipe_typed_out():
    bare, typed = _run(DENSE), _typed_out(DENSE, ALL_ON)
    assert predict(bare).predicted.step_time_s == pytest.approx(predict(typed).predicted.step_time_s, rel=1e-12)
    request, _ = express(bare)
    assert request.overlaps.grad_reduce and request.overlaps.param_gather and request.overlaps.tp_comm
    assert request.gradient_bytes == 2  # bf16 main gradients, not Megatron's fp32 default


def test_under_nvfp4_bridge_turns_tensor_parallel_overlap_off():
    """llama3_llm_pretrain.py L115: tp_comm_overlap = False if precision == 'nvfp4'."""
    request, _ = express(_run(DENSE, precision="nvfp4"))
    assert not request.overlaps.tp_comm and request.overlaps.grad_reduce and request.overlaps.param_gather
    typed = _typed_out(DENSE, {**ALL_ON, "tp_comm": False}, precision="nvfp4")
    assert predict(_run(DENSE, precision="nvfp4")).predicted.step_time_s == pytest.approx(
        predict(typed).predicted.step_time_s, rel=1e-12)


MOE_OVERLAPS = {**ALL_ON, "tp_comm": False}


def test_a_bridge_moe_row_takes_force_balanced_routing_unless_it_says_otherwise():
    bare = _run(MOE)
    assert predict(bare).predicted.step_time_s == pytest.approx(
        predict(_typed_out(MOE, MOE_OVERLAPS, force_balanced=True)).predicted.step_time_s, rel=1e-12)
    said_free = _run(MOE, router_force_load_balancing=False)
    assert predict(said_free).predicted.step_time_s == pytest.approx(
        predict(_typed_out(MOE, MOE_OVERLAPS, force_balanced=False)).predicted.step_time_s, rel=1e-12)
    defaults = run_defaults(bare, "gpu")
    assert defaults["recipe"][0] == "megatron-bridge-performance"
    assert "qwen3_moe.py L107" in defaults["recipe"][1]  # the MoE override cites its own source
    assert defaults["router_force_load_balancing"][0] is True
    assert "router_force_load_balancing" not in run_defaults(said_free, "gpu")


def test_a_row_with_its_own_recipe_keeps_what_it_states_and_takes_the_rest():
    """The row's recipe wins field by field: it states fp32 gradients and no gradient-reduce overlap, so those stay;
    it leaves the parameter-gather and TP overlaps out, so the publisher's come in."""
    own = _run(DENSE, recipe={"source": "the row's own reading of its config", "grad_reduce_in_bf16": False,
                              "overlaps": {"grad_reduce": False}})
    request, _ = express(own)
    assert request.gradient_bytes == 4 and request.overlaps.grad_reduce is False
    assert request.overlaps.param_gather and request.overlaps.tp_comm
    assert run_defaults(own, "gpu")["recipe"][0] == "megatron-bridge-performance"
    grad_bytes = _run(DENSE, recipe={"source": "states the bytes instead", "grad_bytes": 4})
    assert express(grad_bytes)[0].gradient_bytes == 4  # grad_bytes counts as stating the gradient precision


def test_a_row_from_another_source_keeps_megatrons_defaults():
    other = _run(DENSE, source="https://example.org/some-blog")
    request, _ = express(other)
    assert request.gradient_bytes is None and request.overlaps.grad_reduce is None
    assert "recipe" not in run_defaults(other, "gpu")


def test_validate_lists_the_baseline_among_the_runs_defaults(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [DENSE, {**DENSE, "id": "dgxc", "source": DGXC}]}))
    bridge, dgxc = validate_measured(path).runs
    assert bridge.defaulted["recipe"].startswith("megatron-bridge-performance: ")
    assert "llama3.py L727-728" in bridge.defaulted["recipe"]
    assert dgxc.defaulted["recipe"].startswith("nvidia-performance: ")


@pytest.mark.parametrize("source", [BRIDGE, DGXC])
def test_moe_recipes_leave_tensor_parallel_overlap_off(source):
    """At TP 2 an MoE row keeps the data-parallel overlaps and bf16 gradients but not the TP overlap."""
    request, _ = express(_run(MOE, source=source, tp=2, devices=32, ep=8))
    assert request.overlaps.grad_reduce and request.overlaps.param_gather and not request.overlaps.tp_comm
    assert request.gradient_bytes == 2
    dense, _ = express(_run(DENSE, source=source))
    assert dense.overlaps.tp_comm


@pytest.mark.parametrize("paper, least", [("2104.04473", 8), ("2205.05198", 4), ("nemo/automodel", 2)])
def test_the_papers_rows_predict_the_same_without_their_recipe(paper, least):
    """Every shipped row of arXiv 2104.04473 states the same recipe (eager attention, no sequence parallelism, no
    distributed optimizer, full recomputation: the paper's section 5 and the Megatron-LM of 2021), and every row of
    arXiv 2205.05198 eager attention at data parallelism one, without sequence parallelism where it recomputes in
    full (Table 5's baseline); stripped of it, as a row pasted from the paper's table would be, each predicts exactly
    what it predicts with it; so does each NeMo AutoModel row (full activation checkpointing, bf16 gradients, DeepEP
    for MoE: both benchmark configs the shipped rows cite)."""
    rows = [r for r in load_runs() if paper in r.source]
    assert len(rows) >= least
    for row in rows:
        stripped = {k: v for k, v in row.model_dump().items() if k in MeasuredRun.model_fields and k != "recipe"}
        bare = MeasuredRun.model_validate({**stripped, "known_gap": "", "known_gap_summary": "",
                                        "vp": row.recipe.vp or row.vp})
        assert predict(bare).predicted.step_time_s == pytest.approx(predict(row).predicted.step_time_s, rel=1e-12)
        assert "recipe" in run_defaults(bare, "gpu")  # the baseline filled the stripped row in
        assert "recipe" not in run_defaults(row, "gpu")  # and has nothing to add to the row's own recipe


def test_a_baseline_never_overrides_what_the_row_itself_states():
    """The 2021 baseline says full recomputation and no sequence parallelism; a row that states selective
    recomputation and sequence parallelism keeps them (a recipe's field would otherwise override the row's)."""
    row = _run(DENSE, source="arXiv 2104.04473 Table 1", hw="a100-80gb", precision="bf16", recompute="selective",
               sequence_parallel=True)
    request, _ = express(row)
    assert request.recompute == "selective" and request.sequence_parallel is True
    assert request.attention == "eager" and request.zero_stage == 0


LLM_FOUNDRY_BASELINE = ("attention", "attention_kernel", "eager_kernels", "fsdp_impl")


def test_llm_foundry_rows_predict_the_same_without_the_tables_common_recipe():
    """Every llm-foundry table row ran submit_benchmarks.py's defaults of its time: attn_impl triton (L144 @
    5e85bd62d and b2a43a14, the commits the tables were measured for: the Triton FlashAttention kernel), eager PyTorch
    modules (fc_type torch in BF16), PyTorch FSDP1 (Composer 0.16 / 0.17). A row pasted from the table without those
    fields predicts what the shipped row predicts; the fields the tables differ in (MP Mode PURE: bf16 gradients;
    activation checkpointing) stay the row's to state."""
    rows = [r for r in load_runs() if "llm-foundry scripts/train/benchmarking" in r.source]
    assert len(rows) == 26
    bare_rows = 0
    for row in rows:
        own = row.recipe.model_dump(exclude_unset=True)
        # mpt6: the large-scale table's sweep passed attn_impl flash for MPT-7B and -70B (sweep.py L56-60, L77-81):
        # those four rows state their kernel, which the baseline does not give
        stated = ("attention_kernel",) if own["attention_kernel"] == "flash-attn-2-varlen" else ()
        baseline = {"attention": "flash", "attention_kernel": "triton-flash", "eager_kernels": True, "fsdp_impl": "torch"}
        assert {k: own[k] for k in LLM_FOUNDRY_BASELINE if k not in stated} == \
            {k: v for k, v in baseline.items() if k not in stated}
        left = {k: v for k, v in own.items() if k not in LLM_FOUNDRY_BASELINE or k in stated}
        fields = {k: v for k, v in row.model_dump().items() if k in MeasuredRun.model_fields and k != "recipe"}
        stripped = MeasuredRun.model_validate({**fields, "known_gap": "", "known_gap_summary": "", "recipe": left})
        assert predict(stripped).predicted.step_time_s == pytest.approx(predict(row).predicted.step_time_s, rel=1e-12)
        assert run_defaults(stripped, "gpu")["recipe"][0] == "llm-foundry-benchmarks"
        if set(left) <= {"source", "recompute", "sequence_parallel"} and left.get("sequence_parallel") is False:
            bare = MeasuredRun.model_validate({**fields, "known_gap": "", "known_gap_summary": ""})  # no recipe
            assert predict(bare).predicted.step_time_s == pytest.approx(predict(row).predicted.step_time_s, rel=1e-12)
            bare_rows += 1
    assert bare_rows == 8  # the AMP rows without activation checkpointing or PURE gradients (mpt-7b-h100-512 states its kernel)
