"""semantics19: does the launch btacalc emits build the model it planned? Each expectation is derived from the pinned
sources, not from btacalc's output: TransformerEngine @ d0067d0 (the attention window, context-parallel attention),
Megatron-LM @ d98e8a64 (MLA's layer spec) and Megatron-Bridge @ 067f987d (its providers' conversions)."""

from __future__ import annotations

import json
import re

import pytest

from btacalc.config.megatron_launch import read_launch
from btacalc.config.megatron_rules import violations
from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset


def _emit(cli, given: str, kind: str = "megatron") -> str:
    code, out, err = cli("plan", *given.split(), "--emit", kind)
    assert code in (0, 1), err
    return out


def _keys_attended(left: int, right: int, i: int) -> int:
    """Keys a causal query at position i sees under TransformerEngine's window_size (left, right): those in
    [i - left, i + right] inclusive (TE @ d0067d0 pytorch/attention/dot_product_attention/utils.py L1780-1782),
    of the keys 0..i the causal mask leaves."""
    return len(range(max(0, i - left), min(i, i + right) + 1))


# --- the sliding window: w keys are TransformerEngine's (w - 1, 0) ------------------------------------------------

def test_the_emitted_window_attends_to_the_models_w_keys(cli, tmp_path):
    w = load_preset("gpt-oss-20b").sliding_window  # Hugging Face's sliding_window: keys per query, itself included
    given = "--model gpt-oss-20b --hw h100 --devices 8 --ep 8"
    launch = _emit(cli, given)
    left, right = map(int, re.search(r"--window-size '\((-?\d+),(-?\d+)\)'", launch).groups())
    assert _keys_attended(left, right, i=10 * w) == w  # (w, 0), as emitted before, attended to w + 1
    # read back, the same plan
    path = tmp_path / "g.sh"
    path.write_text(launch)
    plans = []
    for args in (given.split(), ["--from-megatron", str(path), "--hw", "h100"]):
        code, out, err = cli("plan", *args, "--json")
        assert code in (0, 1), err
        plans.append({k: json.loads(out)[k] for k in ("memory_bytes", "flops_per_step", "throughput", "phases")})
    assert plans[0] == plans[1]
    # Megatron-Bridge's own conversion of the same config: (sliding_window - 1, 0) (gpt_oss_bridge.py L87)
    bridge = _emit(cli, "--model gpt-oss-20b --hw h100 --devices 8 --ep 8", "bridge")
    assert f"model.window_size=[{w - 1},0]" in bridge.replace(" ", "")


def test_a_launch_window_reads_back_as_the_keys_it_attends_to():
    base = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 8 "
            "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 8 --bf16 "
            "--vocab-size 32000 ")
    # Bridge's GPT-OSS provider writes (127, 0) for the model's 128 (conversion/utils.py L27-39: HF = left + 1)
    assert import_megatron(base + "--window-size '(127,0)'\n", "w.sh").model.sliding_window == _keys_attended(127, 0, 999)
    # (-1, 0) is TransformerEngine's causal attention without a window (utils.py L1808)
    assert import_megatron(base + "--window-size '(-1,0)'\n", "n.sh").model.sliding_window == 0


# --- MLA's latent norms are Megatron's --qk-layernorm -------------------------------------------------------------

@pytest.mark.parametrize("model", ["deepseek-v3", "kimi-k2", "deepseek-proxy-megatron-ci"])
def test_an_mla_launch_builds_the_latent_norms(cli, model):
    """gpt_layer_specs.py L244-255 @ d98e8a64: under MLA, linear_q_up_proj / linear_kv_up_proj carry the RMSNorm of
    the compressed query / key-value (TELayerNormColumnParallelLinear) only with qk_layernorm; Bridge's DeepSeek-V3
    and Kimi providers set it (deepseek_v3_bridge.py L62, kimi_bridge.py L54). The preset's MLA has both norms."""
    spec = load_preset(model)
    assert spec.mla is not None and spec.mla.kv_lora_rank > 0
    launch = _emit(cli, f"--model {model} --hw h100 --devices 64 --ep 8")
    assert "--qk-layernorm" in launch.split()
    assert "model.qk_layernorm=True" in _emit(cli, f"--model {model} --hw h100 --devices 64 --ep 8", "bridge")


def _latent_note(run) -> bool:
    return any("latent RMSNorms" in note for note in run.notes)


def test_bridges_deepseek_launch_reads_as_mla_with_its_norms(cli):
    """A launch as Bridge's DeepSeek-V3 provider builds it (MLA with qk_layernorm) was refused ("MLA has its own
    normalised projections"): read as btacalc's MLA, whose norms are that flag's. Without the flag Megatron-Core builds
    no latent norms, which btacalc cannot plan: said in a note."""
    launch = _emit(cli, "--model deepseek-proxy-megatron-ci --hw h100 --devices 8 --ep 8")
    run = import_megatron(launch, "d.sh")
    assert run.model.mla is not None and run.model.qk_norm == "none" and not _latent_note(run)
    without = launch.replace("    --qk-layernorm \\\n", "")
    assert without != launch
    assert _latent_note(import_megatron(without, "d.sh"))


def test_bridge_overrides_with_mla_and_its_norms_read_back(cli):
    """Bridge's DeepSeek-V3 provider sets qk_layernorm (deepseek_v3_bridge.py L62): such overrides were refused."""
    given = "--model deepseek-proxy-megatron-ci --hw h100 --devices 8 --ep 8"
    overrides = [line for line in _emit(cli, given, "bridge").splitlines() if not line.startswith("model.qk_layernorm")]
    run = import_bridge("\n".join(overrides + ["model.qk_layernorm=True"]) + "\n", "d.txt", devices=8)
    assert run.model.mla is not None and run.model.qk_norm == "none"
    assert run.model.mla == load_preset("deepseek-proxy-megatron-ci").mla


# --- context parallelism with a window or a learnable softmax: TransformerEngine refuses the p2p ring -------------

CP = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 8 "
      "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 4 --bf16 "
      "--vocab-size 32000 --context-parallel-size 2 ")


def _refused(flags: str) -> set[str]:
    args = read_launch(CP + flags + "\n").args
    return {r.name for r in violations({**args, "world": 8}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})}


def test_transformer_engine_refuses_the_p2p_ring_beside_a_window():
    """context_parallel.py L5054-5060: a sliding window (not (-1, 0) / (-1, -1)) needs a2a or all_gather, on any layer
    Megatron-Core windows (transformer/utils.py L531-542: skip-freq N windows all but each N-th layer)."""
    window = "--window-size '(127,0)'"
    for flags in (window, f"{window} --cp-comm-type a2a+p2p", f"{window} --window-attn-skip-freq 2"):
        assert _refused(flags) == {"cp-window-comm"}, flags
    for flags in ("", f"{window} --cp-comm-type a2a", f"{window} --cp-comm-type all_gather", "--window-size '(-1,0)'",
                  f"{window} --window-attn-skip-freq 1", f"{window} --window-attn-skip-freq '([0]*4)'"):
        assert _refused(flags) == set(), flags


def test_transformer_engine_refuses_the_p2p_ring_beside_a_learnable_softmax():
    """context_parallel.py L5065-5067: a softmax other than vanilla (GPT-OSS's sinks) needs a2a."""
    for flags in ("--softmax-type learnable", "--softmax-type learnable --cp-comm-type all_gather"):
        assert _refused(flags) == {"cp-softmax-comm"}, flags
    assert _refused("--softmax-type learnable --cp-comm-type a2a") == set()


def test_a_gpt_oss_plan_with_cp_is_refused_before_any_launch(cli):
    # review19 refuses the sinks' CP plan itself (the ring btacalc times has no backend, utils.py L1148-1155), so no
    # launch is written; a read launch is refused by the rules above
    code, out, err = cli("plan", *"--model gpt-oss-20b --hw h100 --devices 16 --cp 2 --ep 8 --emit megatron".split())
    assert (code, out) == (2, "") and "cp_comm_type a2a" in err and len(err.strip().splitlines()) == 1, err
    assert "WOULD REFUSE" not in _emit(cli, "--model llama-3-8b --hw h100 --devices 16 --cp 2")


# --- CPU activation offloading with per-layer CUDA graphs ---------------------------------------------------------

def test_offloading_with_cuda_graphs_is_refused_before_any_launch(cli):
    """transformer_config.py L2800-2801 @ d98e8a64: with cuda_graph_impl other than none / full_iteration,
    cpu_offloading raises "CUDA graphs not supported with CPU offloading" (and --cpu-offloading-num-layers N > 0 turns
    cpu_offloading on, arguments.py L1950-1951). The plan was made and its launch emitted with no word."""
    given = "--model llama-3-8b --hw h100 --devices 8 --cpu-offloading-num-layers 4"
    for emit in ((), ("--emit", "megatron"), ("--emit", "bridge")):
        code, out, err = cli("plan", *given.split(), "--cuda-graph-scope", "attn", *emit)
        assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1, err
        assert "--cuda-graph-scope" in err and "L2800-2801" in err
    code, out, err = cli("plan", *given.split())  # either alone is planned
    assert code in (0, 1), err
    args = read_launch(CP.replace("--context-parallel-size 2 ", "").replace("size 4 ", "size 8 ") +
                       "--cpu-offloading-num-layers 2 "
                       "--cuda-graph-impl transformer_engine --cuda-graph-modules attn\n").args
    assert {r.name for r in violations({**args, "world": 8}, {})} == {"cuda-graphs-offload"}


# --- recomputation beside per-layer CUDA graphs -------------------------------------------------------------------

@pytest.mark.parametrize("given, refused, runs", [
    # transformer_config.py L2852-2855: full recomputation only under a full-iteration graph
    ("--model llama-3-8b --devices 8 --recompute full --cuda-graph-scope attn", "L2852-2855",
     "--model llama-3-8b --devices 8 --recompute core_attn --cuda-graph-scope attn"),  # no dropout: allowed
    # L2860-2867: the moe module not with the moe_router graph
    ("--model qwen3-30b-a3b --devices 8 --ep 8 --recompute moe --cuda-graph-scope moe_router", "L2860-2867",
     "--model qwen3-30b-a3b --devices 8 --ep 8 --recompute moe_act --cuda-graph-scope moe_router"),
    # L2875-2881 / L2882-2895: under dropout (GPT-3 and BLOOM train with 0.1) not a graphed module's recomputation
    ("--model gpt3-175b --devices 64 --tp 8 --pp 8 --recompute core_attn --cuda-graph-scope attn", "L2875-2881",
     "--model gpt3-175b --devices 64 --tp 8 --pp 8 --recompute core_attn --cuda-graph-scope mlp"),
    ("--model bloom-176b --devices 64 --tp 8 --pp 8 --recompute mlp --cuda-graph-scope mlp", "L2882-2895",
     "--model bloom-176b --devices 64 --tp 8 --pp 8 --recompute mlp --cuda-graph-scope attn"),
])
def test_megatron_cores_graph_and_recompute_refusals_before_any_launch(cli, given, refused, runs):
    for emit in ((), ("--emit", "megatron")):
        code, out, err = cli("plan", "--hw", "h100", *given.split(), *emit)
        assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1 and refused in err, err
    # the launch read back breaks the same rule; its neighbour Megatron runs is planned, emitted and passes the rules
    code, out, err = cli("plan", "--hw", "h100", *runs.split(), "--emit", "megatron")
    assert code in (0, 1) and "WOULD REFUSE" not in out, err + out
    world = {"world": int(runs.split()[3])}
    args = read_launch(out).args
    assert [r.name for r in violations({**args, **world}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})] == []
    refused_args = dict(args, recompute_modules=given.split()[given.split().index("--recompute") + 1].split(","),
                        cuda_graph_modules=given.split()[-1].split(","))
    if refused == "L2852-2855":
        refused_args.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
        del refused_args["recompute_modules"]
    broken = [r.name for r in violations({**refused_args, **world}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})]
    assert len(broken) == 1 and broken[0].startswith("graphs-"), broken


def test_the_search_leaves_full_recomputation_out_beside_per_layer_graphs(cli):
    """RECOMPUTE_CHOICES none, selective, full: with --cuda-graph-scope, full is refused (L2852-2855), so the search
    weighs two thirds of the candidates."""
    counts = []
    for scope in ((), ("--cuda-graph-scope", "attn")):
        code, out, err = cli("plan", "--model", "llama-3-70b", "--hw", "h100", "--devices", "16", "--search",
                             "--global-batch", "256", *scope, "--json")
        assert code in (0, 1), err
        counts.append(json.loads(out)["candidates"])
    assert counts[1] * 3 == counts[0] * 2


# --- FP8 attention beside sinks or a sliding window ---------------------------------------------------------------

def test_fp8_attention_with_sinks_or_a_window_needs_blackwell(cli):
    """TE @ d0067d0 utils.py L1125-1134 (learnable softmax) and L1344-1352 (sliding window): in FP8, FusedAttention is
    off below compute capability 10.0, and FP8 attention has no other backend (dot_product_attention.py L2159-2165).
    GPT-OSS has both; Llama 3 neither."""
    fp8 = ["--precision", "fp8", "--fp8-attention", "--devices", "8"]
    for hw in ("h100", "h200"):
        code, out, err = cli("plan", "--model", "gpt-oss-20b", "--hw", hw, "--ep", "8", *fp8, "--emit", "megatron")
        assert (code, out) == (2, "") and "attention sinks and a sliding window" in err and "9.0" in err, err
    for model, hw in (("gpt-oss-20b", "b200"), ("llama-3-8b", "h100")):
        code, out, err = cli("plan", "--model", model, "--hw", hw, *fp8)
        assert code in (0, 1), err


def test_a_bad_dropout_beside_graphed_recomputation_is_one_line(cli, tmp_path):
    """The graph / recompute rules run on a launch before the decoder reads it: a dropout that is no number is
    refused in one line there too (argparse's type=float), not a ValueError."""
    path = tmp_path / "bad.sh"
    path.write_text(CP.replace("--context-parallel-size 2 ", "").replace("size 4 ", "size 8 ") +
                    "--recompute-granularity selective --cuda-graph-impl transformer_engine --cuda-graph-modules attn "
                    "--attention-dropout abc\n")
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100")
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1 and "takes a number" in err, err


def test_deterministic_mode_with_sinks_needs_the_unfused_backend(cli, tmp_path):
    """TE @ d0067d0 utils.py L1535-1544: deterministic (NVTE_ALLOW_NONDETERMINISTIC_ALGO=0, which --deterministic-mode
    sets, determinism.py L28) FusedAttention has no sink softmax; FlashAttention has none at all (L1122-1124), and
    --attention-backend fused leaves no other backend. GPT-OSS's launch with --deterministic-mode was planned."""
    launch = _emit(cli, "--model gpt-oss-20b --hw h100 --devices 8 --ep 8").replace(
        "pretrain_gpt.py \\", "pretrain_gpt.py --deterministic-mode \\")
    assert "--attention-backend fused" in launch
    for backend, refused in (("fused", True), ("flash", True), ("unfused", False)):
        path = tmp_path / f"{backend}.sh"
        path.write_text(launch.replace("--attention-backend fused", f"--attention-backend {backend}"))
        code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100")
        if refused:
            assert (code, out) == (2, "") and "utils.py:1536" in err and len(err.strip().splitlines()) == 1, err
        else:
            assert code in (0, 1), err
