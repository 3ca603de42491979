"""review35: `--emit megatron` checked against Megatron-LM @ d98e8a64's own argument path (and TransformerEngine @
d0067d0's backend choice). Each defect's test states the Megatron line it follows; the launch is checked as text
(the flag written or refused) and against btacalc's rule table (btacalc/config/megatron_rules.py).
"""

from __future__ import annotations

import json

import pytest

from btacalc.config.megatron_model_rows import PLACEHOLDER_RUN
from btacalc.config.megatron_rules import changed_overlaps, violations


def _launch(text: str) -> list[str]:
    """The launch's words (comments left out)."""
    return " ".join(line for line in text.splitlines() if not line.startswith("#")).replace("\\", " ").split()


def _emit(cli, *args: str, emit: str = "megatron") -> tuple[int, str, str]:
    return cli("plan", *args, "--emit", emit)


# D1. transformer_config.py L2661-2669: top-1 under the softmax score function (not sinkhorn) needs
# --moe-router-pre-softmax: the softmax over one selected logit is 1 and gives the router no gradient.
@pytest.mark.parametrize("args", [
    ("--hw", "h100", "--model", "moe-toy-megatron-ci", "--devices", "8"),
    ("--hw", "h100", "--model", "mixtral-8x7b", "--devices", "32", "--pp", "4", "--ep", "8", "--top-k", "1"),
    ("--hw", "h100", "--model", "gpt-oss-20b", "--devices", "8", "--ep", "8", "--top-k", "1"),
])
def test_a_top1_softmax_router_is_written_pre_softmax_and_said(cli, args):
    code, out, err = _emit(cli, *args)
    assert code in (0, 1), err
    words = _launch(out)
    assert words[words.index("--moe-router-topk") + 1] == "1"
    assert "--moe-router-pre-softmax" in words
    assert "MEGATRON WOULD REFUSE" not in out
    assert "# top-1 routing: the model's softmax over the one selected logit weights its expert by 1" in out


def test_top1_sigmoid_and_top2_softmax_keep_their_routers(cli):
    # DeepSeek-V3's sigmoid router is outside the rule; Qwen3's renormalised top-8 softmax is Megatron's default
    code, out, err = _emit(cli, "--hw", "b200", "--model", "deepseek-v3", "--devices", "256", "--pp", "8", "--ep",
                           "32", "--top-k", "1")
    words = _launch(out)
    assert code in (0, 1) and "--moe-router-pre-softmax" not in words and "sigmoid" in words, err
    code, out, err = _emit(cli, "--hw", "h100", "--model", "qwen3-30b-a3b", "--devices", "16", "--ep", "16")
    assert code in (0, 1) and "--moe-router-pre-softmax" not in _launch(out), err
    assert "top-1 routing" not in out


def test_the_rule_table_refuses_a_top1_softmax_launch():
    base = {"num_experts": 8, "moe_router_topk": 1, "num_attention_heads": 8, "add_bias_linear": False}
    assert [r.name for r in violations(base, {})] == ["top1-pre-softmax"]
    assert violations({**base, "moe_router_pre_softmax": True}, {}) == []
    assert violations({**base, "moe_router_score_function": "sigmoid"}, {}) == []
    assert violations({**base, "moe_router_load_balancing_type": "sinkhorn"}, {}) == []
    # nargs +: one type is read as its string (arguments.py L1661-1662), as the Megatron CI's sinkhorn toy gives it;
    # a list of several is compared whole (transformer_config.py L2665) and refused
    assert violations({**base, "moe_router_load_balancing_type": ["sinkhorn"]}, {}) == []
    assert [r.name for r in violations({**base, "moe_router_load_balancing_type": ["sinkhorn", "aux_loss"],
                                        "moe_aux_loss_coeff": [0.0, 0.01]}, {})] == ["top1-pre-softmax"]
    assert violations({**base, "moe_router_topk": 2}, {}) == []
    assert violations({**base, "num_experts": 0}, {}) == []  # Megatron reads 0 experts as a dense model


# D2. arguments.py L1095-1097: --fp8-param-gather only with the distributed optimizer, torch FSDP2 or Megatron-FSDP.
# Megatron-Bridge runs no such check (its FP8 recipes turn the gather on whatever the optimizer), nor Megatron-Core.
def test_fp8_param_gather_without_sharded_parameters_is_no_megatron_launch(cli, tmp_path):
    args = ("--hw", "h100", "--model", "llama-3-8b", "--devices", "8", "--precision", "fp8", "--fp8-param-gather")
    code, out, err = cli("plan", *args, "--zero", "0", "--emit", "megatron")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "arguments.py:1096" in err and "plan with --zero 1" in err and "--emit bridge, which writes it" in err
    code, out, err = cli("plan", *args, "--zero", "0", "--emit", "bridge")
    assert code in (0, 1) and "MEGATRON WOULD REFUSE" not in out, err
    path = tmp_path / "run.txt"
    path.write_text(out)
    code, back, err = cli("plan", "--hw", "h100", "--devices", "8", "--from-bridge", str(path))
    assert code in (0, 1), err  # Bridge's reader does not hold Megatron-LM's launcher rule
    code, out, err = cli("plan", *args, "--zero", "1", "--emit", "megatron")
    assert code in (0, 1), err
    words = _launch(out)
    assert "--fp8-param-gather" in words and "--use-distributed-optimizer" in words
    # NVFP4's --fp4-param-gather has no such assertion (L1103-1105 check only --fp4-format)
    code, out, err = cli("plan", "--hw", "b200", "--model", "llama-3-8b", "--devices", "8", "--precision", "nvfp4",
                         "--fp8-param-gather", "--zero", "0", "--emit", "megatron")
    assert code in (0, 1) and "--fp4-param-gather" in _launch(out), err


def test_the_launcher_rule_is_kept_apart_for_bridge():
    args = {"fp8": "hybrid", "fp8_param_gather": True, "num_attention_heads": 8}
    assert [r.name for r in violations(args, {})] == ["fp8-param-gather-sharded"]
    assert violations(args, {}, bridge=True) == []
    assert violations({**args, "use_distributed_optimizer": True}, {}) == []


# D3. arguments.py L1697-1702 (168cb15, 2026-06-03): test_cefuse.py::test_emit_and_read_back.
def test_the_te_cross_entropy_is_a_launcher_rule_read_and_written_as_megatron_runs_it(cli, tmp_path):
    """The rule is Megatron-LM's launcher's: --from-megatron refuses a launch with the te impl, --from-bridge reads it
    (Bridge's DeepSeek-V3 bridge sets it); each fix the emit refusal names runs."""
    code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "8", "--emit", "megatron")
    path = tmp_path / "run.sh"
    path.write_text(out.replace("    --mock-data", "    --cross-entropy-loss-fusion --cross-entropy-fusion-impl te \\\n"
                                                  "    --mock-data"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and out == "" and "Megatron-LM would refuse this launch: --cross-entropy-fusion-impl te" in err
    code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "8", "--loss", "te_fused",
                         "--emit", "megatron")
    assert code == 2 and "plan with --loss native_fused" in err, err
    code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "8", "--loss", "native_fused",
                         "--emit", "megatron")
    assert code in (0, 1) and "--cross-entropy-loss-fusion" in _launch(out), err


def test_an_encoder_is_refused_as_an_encoder_before_its_loss(cli):
    """review of review35: BERT with --loss te_fused was told to use --emit bridge or --loss native_fused, both of
    which an encoder cannot take; the encoder refusal comes first."""
    code, out, err = cli("plan", "--hw", "h100", "--model", "bert-large", "--devices", "8", "--loss", "te_fused",
                         "--emit", "megatron")
    assert code == 2 and "bidirectional encoder" in err, err


# D4. TE @ d0067d0 utils.py L1169-1173 switches the unfused backend off under CP; Megatron-Core's local attention
# asserts CP 1 (dot_product_attention.py L57-59).
def test_eager_attention_with_context_parallelism_is_refused(cli):
    args = ("--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--cp", "2")
    code, out, err = cli("plan", *args, "--attention", "eager")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "utils.py L1169-1173" in err and "--attention flash or --cp 1" in err
    code, out, err = cli("plan", *args, "--attention", "flash", "--json")
    assert code in (0, 1), err


# D5. mappings.py L71-74: the embedding's scatter to the sequence-parallel region needs (s / CP) % TP == 0.
@pytest.mark.parametrize("args, tokens", [
    (("--model", "llama-3-8b", "--devices", "16", "--tp", "2", "--seq", "4095"), "sequence of 4095"),
    (("--model", "llama-3-70b", "--devices", "64", "--cp", "2", "--tp", "4", "--seq", "4100"),
     f"{4100 // 2} tokens per context-parallel rank"),  # 2050 = 4 x 512 + 2
])
def test_sequence_parallelism_needs_tp_to_divide_the_tokens(cli, args, tokens):
    code, out, err = cli("plan", "--hw", "h100", *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert tokens in err and "mappings.py L71-74" in err
    code, out, err = cli("plan", "--hw", "h100", *args, "--no-sequence-parallel", "--json")
    assert code in (0, 1), err


def test_an_moe_model_is_told_only_the_sequences_that_divide(cli):
    """An MoE model at TP > 1 needs sequence parallelism (moe_layer.py L636), so --no-sequence-parallel is no fix for
    it: the refusal names the nearest sequences TP divides, 4094 = 2 x 2047 and 4096, and each plans."""
    args = ("plan", "--hw", "h100", "--model", "qwen3-30b-a3b", "--devices", "16", "--tp", "2")
    code, out, err = cli(*args, "--seq", "4095")
    assert code == 2 and "give --seq 4094 or 4096" in err and "--no-sequence-parallel" not in err, err
    for seq in ("4094", "4096"):
        code, out, err = cli(*args, "--seq", seq, "--json")
        assert code in (0, 1), err


def test_a_sequence_that_divides_is_planned(cli):
    # 4104 = 2 x 2052 and 2052 = 4 x 513: CP 2 x TP 4 divide it
    code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-70b", "--devices", "64", "--cp", "2", "--tp", "4",
                         "--seq", "4104", "--json")
    assert code in (0, 1), err


# D6. A user's overlap the plan changes so that Megatron runs it is named in the launch.
def test_a_changed_overlap_is_a_launch_note(cli):
    code, out, err = _emit(cli, "--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--pp", "2", "--vp", "2",
                           "--no-overlap-p2p")
    assert code in (0, 1), err
    assert "--no-overlap-p2p-communication" not in _launch(out)
    assert ("# --overlap-p2p-communication was asked off and is left on: Megatron-LM refuses the interleaved schedule "
            "on 2 stages without p2p overlap") in out
    code, out, err = _emit(cli, "--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--pp", "2", "--vp", "2")
    assert "was asked" not in out  # nothing asked, nothing changed


def test_changed_overlaps_reads_only_changed_reasons():
    # a plain default's reason is no change, whatever its words (the record decides, not the reason's text)
    assert changed_overlaps({}, {"overlap_p2p": "on with interleaving only: Megatron-LM's default, planned with it"}) == []
    assert changed_overlaps({"overlap_all_to_all": False}, {"overlap_all_to_all": "why: planned without it"}) == [
        "--overlap-moe-expert-parallel-comm was asked for and is left out: why"]
    assert changed_overlaps({"overlap_p2p": True}, {"overlap_p2p": "why: planned with it"}) == [
        "--overlap-p2p-communication was asked off and is left on: why"]


def test_the_execution_records_each_changed_overlap():
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.resolution import resolve_execution
    from btacalc.config.execution import OverlapRequest
    from btacalc.config.hardware import resolve_hardware
    from btacalc.config.presets import load_preset
    spec, hw = load_preset("llama-3-8b"), resolve_hardware("h100")
    ex = resolve_execution(ExecutionRequest(devices=16, pipeline_parallel=2, virtual_pipeline=2,
                                            overlaps=OverlapRequest(p2p=False)), spec, hw)
    assert dict(ex.changed_overlaps) == {"overlap_p2p": True} and ex.layout.overlap.p2p
    ex = resolve_execution(ExecutionRequest(devices=16, pipeline_parallel=2, virtual_pipeline=2), spec, hw)
    assert ex.changed_overlaps == ()


# review36: training.py L2586 needs --train-iters or --train-samples, optimizer_param_scheduler.py L148 float(lr).
def test_the_launch_has_a_run_length_and_a_learning_rate(cli):
    code, out, err = _emit(cli, "--hw", "h100", "--model", "llama-3-8b", "--devices", "8")
    words = _launch(out)
    for dest, value in PLACEHOLDER_RUN.items():
        flag = "--" + dest.replace("_", "-")
        assert float(words[words.index(flag) + 1]) == value
    assert "placeholders of a short benchmark run" in out
    code, out, err = _emit(cli, "--hw", "h100", "--model", "llama-3-8b", "--devices", "8", emit="bridge")
    assert "train_iters" not in out and "optimizer.lr" not in out  # a Bridge recipe sets its own


def test_a_derived_micro_batch_count_is_not_named_as_the_users_option(cli):
    """review35 (wording): with no --grad-accum, M = N / (DP x micro-batch) was refused as `--grad-accum 512`. GPT-3
    on 96 H100s at TP 8, PP 3: DP 4, N = 2^22 / 2048 = 2048 sequences, micro-batch 1 under PP: M = 2048 / 4 = 512, and
    512 mod the group PP 3 is 2."""
    args = ("plan", "--hw", "h100", "--model", "gpt3-175b", "--devices", "96", "--tp", "8", "--pp", "3", "--vp", "2",
            "--seq", "2048")
    code, out, err = cli(*args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"M = {2**22 // 2048 // 4} micro-batches (the global batch over DP x the micro-batch)" in err
    assert "--grad-accum" not in err
    code, out, err = cli(*args, "--grad-accum", "128", "--micro-batch", "1")
    assert code == 2 and "--grad-accum 128: the interleaved schedule refuses it" in err, err


def test_the_search_does_not_choose_context_parallelism_for_eager_attention(cli):
    """review of review35: `--search --attention eager` ranked CP > 1 layouts, chose one, and its plan then refused
    eager attention under CP (a --cp the user never gave); the search now leaves them out, as the plan would."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--search", "--attention",
                         "eager", "--seq", "32768", "--json")
    assert code in (0, 1), err
    search = json.loads(out)
    assert search["best"]["parallelism"]["context_parallel"] == 1
    assert search["ranking"] and all(row["context_parallel"] == 1 for row in search["ranking"])


def test_a_plan_refusal_of_an_imported_run_names_the_file(cli, tmp_path):
    """review of review35: the plan's refusal of an imported launch (here sequence parallelism at TP 2 over 4095
    tokens) named btacalc's options and no file; it now names the file, and the settings as the file gives them
    (tests/test_import_refusal_names.py)."""
    code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--tp", "2", "--emit",
                         "megatron")
    path = tmp_path / "run.sh"
    path.write_text(out.replace("--seq-length 4096", "--seq-length 4095"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{path}: sequence parallelism splits the sequence of 4095 over --tensor-model-parallel-size 2" in err


@pytest.mark.parametrize("tp, sp, cp, multiple", [
    (8, True, 1, 8),  # TP divides s
    (4, True, 2, 8),  # 2·CP = 4 chunks, and TP 4 divides s / 2: s a multiple of lcm(4, 2 x 4) = 8
    (1, False, 2, 4),  # 2·CP only
    (2, True, 3, 6),  # lcm(2 x 3, 3 x 2)
    (8, False, 1, 1),  # no constraint without SP or CP
])
def test_a_layouts_sequence_multiple_is_its_two_rules(tp, sp, cp, multiple):
    """Layout.sequence_multiple: 2·CP load-balanced chunks (arguments.py) and TP dividing s / CP under sequence
    parallelism (mappings.py L71-74), whose lcm "What would fit" rounds the longest sequence down to."""
    from btacalc.config.execution import Layout

    assert Layout(tensor_parallel=tp, sequence_parallel=sp, context_parallel=cp).sequence_multiple() == multiple


def test_every_launcher_rule_names_its_fix():
    """A LAUNCHER_ONLY rule without a LAUNCHER_FIXES entry would stop --emit megatron with a KeyError."""
    from btacalc.config.megatron_rules import LAUNCHER_ONLY
    from btacalc.output.megatron import LAUNCHER_FIXES

    assert set(LAUNCHER_FIXES) == LAUNCHER_ONLY
