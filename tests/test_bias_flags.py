"""Linear biases in launches: Megatron-LM's --add-bias-linear (default on) gives every linear layer a bias, the MoE
router's and each expert's included (Megatron-LM @ d98e8a64 moe/router.py L67-70, moe/experts.py L223 and L246),
while --moe-router-enable-expert-bias is DeepSeek-V3's aux-loss-free routing bias (transformer_config.py L816-819),
refused beside a softmax score (L2617-2625). btacalc's GPT-OSS launch wrote the second for the model's expert
biases (Megatron refused it) and said the router's bias had no flag. Expected counts are GPT-OSS's bias tensors
from its Hugging Face config (hidden 2880, 128 experts, expert ffn 2880, 36 layers), not btacalc's output."""

from __future__ import annotations

import json

import pytest

from btacalc.config.megatron_launch import read_launch
from btacalc.config.megatron_rules import violations
from btacalc.config.megatron_run import import_megatron

H, E, F, L = 2880, 128, 2880, 36


def _params(cli, tmp_path, text=None, model=None):
    """Total parameters of a launch read back (or of a preset), as `plan --json` reports them."""
    if text is not None:
        path = tmp_path / f"l{len(list(tmp_path.iterdir()))}.sh"
        path.write_text(text)
    given = ["--from-megatron", str(path)] if text is not None else ["--model", model]
    code, out, err = cli("plan", *given, "--hw", "b200", "--devices", "64", "--json")
    assert code in (0, 1), err
    return json.loads(out)["model"]["params_total"]


def _emit(cli, model, kind="megatron"):
    code, out, err = cli("plan", "--model", model, "--hw", "b200", "--devices", "64", "--emit", kind)
    assert code in (0, 1), err
    return out


def test_gpt_oss_launch_gives_its_biases_with_megatrons_one_flag(cli, tmp_path):
    launch = _emit(cli, "gpt-oss-120b")
    assert "--moe-router-enable-expert-bias" not in launch and "--disable-bias-linear" not in launch
    assert "MEGATRON WOULD REFUSE" not in launch and "no Megatron flag for a bias on the router" not in launch
    read = import_megatron(launch, "g.sh").model
    assert (read.router_bias, read.expert_bias, read.linear_bias, read.qkv_bias) == (True, True, True, True)
    total = _params(cli, tmp_path, launch)
    assert total == _params(cli, tmp_path, model="gpt-oss-120b")  # was 4,608 parameters short: the router's bias
    # without --add-bias-linear (q/k/v keep theirs): per layer the router's E, the experts' E x (2f + h) and the
    # output projection's h
    bare = launch.replace("pretrain_gpt.py \\", "pretrain_gpt.py --disable-bias-linear --add-qkv-bias \\")
    assert total - _params(cli, tmp_path, bare) == L * (E + E * (2 * F + H) + H)


def test_the_aux_loss_free_routing_bias_adds_no_expert_biases(cli, tmp_path):
    launch = _emit(cli, "deepseek-v3")
    assert "--disable-bias-linear" in launch
    with_bias = launch.replace("pretrain_gpt.py \\", "pretrain_gpt.py --moe-router-enable-expert-bias \\")
    read = import_megatron(with_bias, "d.sh").model
    assert not read.expert_bias and not read.router_bias  # it was read as biases on every expert's linears
    assert _params(cli, tmp_path, launch) == _params(cli, tmp_path, with_bias)


@pytest.mark.parametrize("score, refused", [("softmax", True), ("sigmoid", False)])
def test_megatron_refuses_the_routing_bias_beside_a_softmax_score(score, refused):
    args = read_launch(f"torchrun pretrain_gpt.py --num-experts 8 --moe-router-score-function {score} "
                       "--moe-router-enable-expert-bias --disable-bias-linear\n").args
    assert ("expert-bias-score" in {r.name for r in violations(args, {})}) is refused


def test_gpt_oss_bridge_overrides_keep_the_biases_over_any_recipe(cli):
    out = _emit(cli, "gpt-oss-120b", "bridge")
    lines = set(out.splitlines())
    # a recipe's add_bias_linear = False (Llama's, Qwen's) would strip them; the routing bias stays off
    assert "model.add_bias_linear=true" in {x.lower() for x in lines}
    assert "model.moe_router_enable_expert_bias=False" in lines


def test_a_shared_expert_launch_with_megatrons_default_biases_is_refused(cli, tmp_path):
    # review19: Megatron-LM @ d98e8a64 moe/shared_experts.py L124 asserts add_bias_linear is off; the launch was
    # planned (shared experts with biases) and would stop at model construction
    text = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 8 "
            "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 "
            "--vocab-size 32000 --swiglu --num-experts 8 --moe-router-topk 2 --ffn-hidden-size 512 "
            "--moe-shared-expert-intermediate-size 512 --expert-tensor-parallel-size 1\n")
    path = tmp_path / "s.sh"
    path.write_text(text)
    code, _, err = cli("plan", "--from-megatron", str(path), "--hw", "h100")
    assert code == 2 and "shared_experts.py:124" in err and len(err.strip().splitlines()) == 1
    path.write_text(text.replace("pretrain_gpt.py", "pretrain_gpt.py --disable-bias-linear"))
    assert cli("plan", "--from-megatron", str(path), "--hw", "h100")[0] in (0, 1)


def _candidates(cli, *given):
    code, out, err = cli("plan", "--model", "gpt-oss-120b", "--hw", "h100", "--devices", "64", "--tp", "2",
                         "--cp", "1", "--search", "--json", *given)
    assert code in (0, 1), err
    result = json.loads(out)
    assert all(r["expert_tensor_parallel"] == 1 for r in result["ranking"])
    return result["candidates"]


def test_the_layout_search_tries_a_biased_moe_model_at_etp_1_only(cli):
    # review19: the search also tried ETP = TP for GPT-OSS, which Megatron refuses (transformer_config.py L2612,
    # moe-bias-etp); its layouts are now those of --etp 1
    assert _candidates(cli) == _candidates(cli, "--etp", "1")


def test_the_biases_megatrons_one_flag_decides_per_model():
    # GPT-OSS has no dense layer (no MLP entry) and biases on every linear it has; Qwen3-30B-A3B none; Qwen2-style
    # q/k/v biases alone come from --add-qkv-bias, not --add-bias-linear (no q/k/v entry when nothing else has one)
    from btacalc.config.presets import load_preset

    oss = load_preset("gpt-oss-120b")
    assert oss.linear_biases() == {"attention projection": True, "router": True, "experts": True,
                                   "attention q/k/v": True} and oss.biased_moe()
    qwen = load_preset("qwen3-30b-a3b")
    assert not any(qwen.linear_biases().values()) and not qwen.biased_moe()
    assert "attention q/k/v" not in qwen.model_copy(update={"qkv_bias": True}).linear_biases()
    assert not load_preset("llama-3-8b").model_copy(update={"linear_bias": True}).biased_moe()  # dense: no MoE layer
