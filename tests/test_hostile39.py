"""hostile39: a hostile campaign on btacalc's command line (thirty-second session): a sweep over sequence lengths under
a layout with rules on them (context and sequence parallelism, Llama 4's attention chunk), the line a sweep that fits
nowhere ends with, whatif's trial depths of a model with dense layers, and a long Llama 4 config.json's layer lists.
Each test is a finding: it fails without its fix."""

from __future__ import annotations

import json
import time

import pytest

from support import DATA, one_line_error


def _points(cli, *args: str) -> tuple[dict[int, dict], str]:
    """`sweep ... --json`'s points by their sequence length, and its standard error."""
    code, out, err = cli("sweep", *args, "--json")
    assert code == 0, err
    return {p["params"]["seq"]: p for p in json.loads(out)["points"]}, err


def _plan_error(cli, *args: str) -> str:
    """`plan`'s own refusal of the same point, without its 'btacalc: error: ' prefix."""
    code, out, err = cli("plan", *args, "--json")
    one_line_error(code, out, err)
    return err.strip().removeprefix("btacalc: error: ")


def _plan_tokens(cli, *args: str) -> float:
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    return json.loads(out)["throughput"]["tokens_per_s"]


# D1: sweep resolved each layout at the default sequence (4,096) whatever --vary seq gave, so the layout's rules on the
# sequence were checked against 4,096, never against a point's own length: under --tp 2 (sequence parallelism) seq=3
# and under --cp 2 seq=6 were planned, where `plan` refuses both (TP must divide the sequence; 2·CP must); under --cp 3
# every point (6 and 12, multiples of 2·CP = 6) was refused for "the sequence 4096"; and a Llama 4 config whose
# attention chunk is 1,024 tokens refused seq=512 and 1024 for "--seq 4096 is longer than the 1,024-token chunk".
@pytest.mark.parametrize("layout, bad, good", [(("--tp", "2"), 3, 4), (("--cp", "2"), 6, 8)])
def test_a_swept_sequence_the_layout_refuses_is_an_invalid_point(cli, layout, bad, good):
    given = ("--hw", "h100", "--devices", "8", *layout)
    points, err = _points(cli, *given, "--vary", f"seq={bad},{good}")
    refusal = _plan_error(cli, *given, "--seq", str(bad))
    assert points[bad]["error"] == refusal and points[bad]["throughput"] is None
    assert f"invalid point seq={bad}: {refusal}" in err
    assert points[good]["error"] is None
    assert points[good]["throughput"]["tokens_per_s"] == pytest.approx(
        _plan_tokens(cli, *given, "--seq", str(good)), rel=1e-12)


def test_swept_sequences_the_layout_takes_are_planned_at_their_own_length(cli):
    # CP 3: 2·CP = 6 divides 6 and 12 but not the default 4,096 (4,096 = 6 x 682 + 4)
    given = ("--model", "llama-3-8b", "--hw", "h100", "--devices", "6", "--cp", "3")
    points, err = _points(cli, *given, "--vary", "seq=6,12")
    assert "4096" not in err
    for seq in (6, 12):
        assert points[seq]["error"] is None
        assert points[seq]["throughput"]["tokens_per_s"] == pytest.approx(
            _plan_tokens(cli, *given, "--seq", str(seq)), rel=1e-12)


@pytest.mark.parametrize("hw", [("--hw", "h100", "--devices", "16"), ("--hw", "wse3")])
def test_a_llama4_chunk_shorter_than_the_default_sequence_refuses_only_the_longer_points(cli, tmp_path, hw):
    config = json.loads((DATA / "llama4-scout.config.json").read_text())
    config["text_config"].update(attention_chunk_size=1024, num_hidden_layers=4)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    points, _ = _points(cli, "--model", str(path), *hw, "--vary", "seq=512,1024,2048")
    for seq in (512, 1024):  # at most the chunk: full causal attention, planned
        assert points[seq]["error"] is None
        assert points[seq]["throughput"]["tokens_per_s"] == pytest.approx(
            _plan_tokens(cli, "--model", str(path), *hw, "--seq", str(seq)), rel=1e-12)
    assert points[2048]["error"] == _plan_error(cli, "--model", str(path), *hw, "--seq", "2048")


# D2: a GPU sweep none of whose points fits ended with "sweep lays the model out in data and expert parallelism only
# (no --tp, --pp or --cp)" also when --tp, --pp or --cp were given (sweep takes them since the line was written).
@pytest.mark.parametrize("layout", [("--tp", "2"), ("--pp", "4")])
def test_the_no_fit_line_names_the_layout_given(cli, layout):
    code, out, err = cli("sweep", "--hw", "h100", *layout, "--vary", "devices=4,8", "--json")
    assert code == 0, err
    assert not any(p["plan"]["fits"] for p in json.loads(out)["points"])  # the premise: nothing fits
    (line,) = [x for x in err.splitlines() if "no point of the sweep fits" in x]
    assert "expert parallelism only" not in line and "no --tp" not in line
    assert f"at the layout given ({' '.join(layout)})" in line and "plan --search" in line


def test_the_no_fit_line_without_a_layout_still_says_data_and_expert_parallelism(cli):
    code, out, err = cli("sweep", "--hw", "h100", "--vary", "devices=1,2", "--json")
    assert code == 0, err
    assert "data and expert parallelism only (no --tp, --pp or --cp)" in err


# D3: whatif --solve-for layers planned each trial depth as a copy of the model that was never validated: a model whose
# first layers are dense (DeepSeek's first_k_dense_replace) became, at that many layers or fewer, an "MoE" model with
# no MoE layer, which btacalc refuses as input ("every layer is dense"), and was planned and reported (DeepSeek-V3 on
# 256 H100s: "best 12,570,000 at 1"). A trial depth the model cannot have is a point that does not plan.
def test_whatif_layers_refuses_a_trial_depth_the_model_cannot_have(cli):
    code, out, err = cli("whatif", "--model", "deepseek-proxy-2l-megatron-ci", "--hw", "h100", "--devices", "8",
                         "--target", "tokens_per_s=1e12", "--solve-for", "layers", "--json")
    assert code in (0, 1), err
    report = json.loads(out)
    code, shown, err = cli("models", "show", "deepseek-proxy-2l-megatron-ci", "--json")
    assert code == 0, err
    first_dense = json.loads(shown)["spec"]["first_dense_layers"]
    assert first_dense == 1 and report["today_value"] == 2  # the premise: 1 dense layer, then 1 MoE layer
    trials = {t["value"]: t for t in report["trace"]}
    assert trials[1.0]["metric"] is None and not trials[1.0]["fits"]
    assert "not a valid model at 1 layers" in trials[1.0]["binding_constraint"]
    assert "every layer is dense" in trials[1.0]["binding_constraint"]
    assert trials[2.0]["metric"] is not None  # today's depth plans


def test_whatif_layers_never_answers_an_all_dense_depth(cli):
    args = ("--model", "deepseek-proxy-2l-megatron-ci", "--hw", "h100", "--devices", "8")
    today = _plan_tokens(cli, *args)
    code, out, err = cli("whatif", *args, "--target", f"tokens_per_s={today * 1.05}", "--solve-for", "layers",
                         "--json")
    assert code in (0, 1), err
    report = json.loads(out)
    assert report["value"] is None or report["value"] >= 2, report["value"]


# D4: a Llama 4 config.json's moe_layers and no_rope_layers were matched against every interval n from 1 to L, a set
# of L layers each (quadratic: 15 s of CPU at 10,000 layers, the most a model may have); one candidate n, from the
# first listed layer, decides it.
@pytest.mark.parametrize("change", [{"moe_layers": [0]}, {"no_rope_layers": [0] + [1] * 9999}])
def test_a_long_llama4_layer_list_is_read_in_one_pass(cli, tmp_path, change):
    config = json.loads((DATA / "llama4-scout.config.json").read_text())
    config["text_config"].update(num_hidden_layers=10_000, **change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    start = time.process_time()
    code, out, err = cli("models", "show", str(path), "--json")
    took = time.process_time() - start
    assert took < 1.5, took  # about 0.05 s read in one pass; 4 to 8 s before
    if "moe_layers" in change:  # layer 0 alone is MoE: every other layer is dense, listed
        assert code == 0, err
        shown = json.loads(out)["spec"]
        assert shown["moe_layer_interval"] == 1 and shown["dense_layer_indices"] == list(range(1, 10_000))
    else:  # NoPE on layer 0 alone is no every-n-th pattern
        one_line_error(code, out, err, "NoPE layers other than every n-th layer")


@pytest.mark.parametrize("change, interval, nope", [
    ({"interleave_moe_layer_step": 2}, 2, 4), ({"moe_layers": [3, 7, 11]}, 4, 4),
    ({"no_rope_layers": [1, 1, 0] * 4}, 1, 3), ({"no_rope_layer_interval": 13}, 1, 0)])
def test_llama4_layer_patterns_read_as_before(cli, tmp_path, change, interval, nope):
    """The one-pass reading gives the intervals the definition gives (every n-th: layers n - 1, 2n - 1, ...)."""
    config = json.loads((DATA / "llama4-scout.config.json").read_text())
    config["text_config"].update(num_hidden_layers=12, **change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = cli("models", "show", str(path), "--json")
    assert code == 0, err
    shown = json.loads(out)["spec"]
    assert (shown["moe_layer_interval"], shown["no_rope_interval"]) == (interval, nope)
    assert shown["dense_layer_indices"] == []


# D5: a Megatron-LM launch's --no-rope-freq and --window-attn-skip-freq lists were matched the same quadratic way
# (every n from 2 to L, a list of L entries each: 5 s of CPU at 10,000 layers before the launch was refused).
# D6: and the refusal of a --window-attn-skip-freq list that is no every-n-th pattern quoted the expanded list (a
# 30,000-character "one line" at 10,000 layers); it quotes Megatron's run-length expression, cut as other quotes are.
LONG = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 10000 --hidden-size 256 --num-attention-heads 4 "
        "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --bf16 "
        "--vocab-size 32000 --position-embedding-type rope ")


@pytest.mark.parametrize("flags, fragment", [
    ("--no-rope-freq '([1]+[0]*9999)'", "--no-rope-freq ([1]+[0]*9999): btacalc models one NoPE layer every N"),
    ("--window-size '(127,0)' --window-attn-skip-freq '([0]+[1]*9999)'",
     "--window-attn-skip-freq ([0]*1+[1]*9999): btacalc models one full-attention layer every N")])
def test_a_long_launch_layer_list_is_read_in_one_pass_and_quoted_short(cli, tmp_path, flags, fragment):
    launch = tmp_path / "run.sh"
    launch.write_text(LONG + flags + "\n")
    start = time.process_time()
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(launch), "--json")
    took = time.process_time() - start
    one_line_error(code, out, err, fragment)
    assert took < 1.5, took  # about 0.1 s read in one pass; 5 s before
    assert len(err) < 300, len(err)


@pytest.mark.parametrize("flags, field, n", [("--no-rope-freq '([0]*3+[1])*6'", "no_rope_interval", 4),
                                             ("--window-size '(127,0)' --window-attn-skip-freq '([1]*2+[0])*8'",
                                              "full_attention_interval", 3)])
def test_launch_layer_lists_read_as_before(tmp_path, flags, field, n):
    """Every n-th layer (layers n - 1, 2n - 1, ...) NoPE, or full attention, still read as that n."""
    launch = tmp_path / "run.sh"
    launch.write_text(LONG.replace("10000", "24") + flags + "\n")
    from btacalc.config.megatron_run import import_megatron

    assert getattr(import_megatron(launch.read_text(), "run.sh", 8).model, field) == n
