"""Golden outputs: the numbers users act on, pinned exactly.

Each case is a full command output (``plan --json`` and friends) or the compiled per-phase values of
a model at a batch shape, stored under ``tests/goldens/``. Integers and strings must match exactly;
floats to a relative 1e-12 (re-associating a sum moves the last bit, nothing else may).

Goldens change only through the explicit regeneration command

    python -m pytest tests/test_goldens.py --regen-goldens

and a commit that regenerates them says why.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

GOLDEN_DIR = Path(__file__).parent / "goldens"

# name -> btacalc command line. Wafers and GPUs, one device and several, every recompute mode,
# eager and flash, both accountings, fixed and free batch shapes, plans that fit and plans that do not.
COMMANDS: dict[str, list[str]] = {
    "plan-wse3-default": ["plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--json"],
    "plan-wse2-default": ["plan", "--model", "qwen3-30b-a3b", "--hw", "wse2", "--json"],
    "plan-wse3-pytorch": ["plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--accounting", "pytorch", "--json"],
    "plan-wse2-topk1": ["plan", "--model", "qwen3-30b-a3b", "--hw", "wse2", "--top-k", "1", "--fixed-active", "--json"],
    "plan-wse2-selective-flash": ["plan", "--model", "qwen3-30b-a3b", "--hw", "wse2", "--recompute", "selective",
                                  "--attention", "flash", "--json"],
    "plan-wse3-global-batch": ["plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--experts", "64",
                               "--global-batch", "24", "--no-overlap", "--json"],
    "plan-wse3-global-batch-fit": ["plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--global-batch", "16",
                                   "--max-tile-batch", "2", "--json"],
    "plan-wse3-stored-loss-causal": ["plan", "--model", "qwen3-30b-a3b", "--hw", "wse3", "--loss", "stored",
                                     "--causal", "--seq", "2048", "--json"],
    "plan-a100-1-nofit": ["plan", "--model", "qwen3-30b-a3b", "--hw", "a100-80gb", "--devices", "1", "--json"],
    "plan-a100-64-ep8": ["plan", "--model", "qwen3-30b-a3b", "--hw", "a100-80gb", "--devices", "64", "--ep", "8",
                         "--zero", "1", "--json"],
    "plan-a100-40-gpt3": ["plan", "--model", "gpt3-175b", "--hw", "a100-40gb", "--seq", "2048", "--tiles", "1",
                          "--tile-batch", "1", "--recompute", "none", "--attention", "eager", "--json"],
    "plan-b200-16-selective": ["plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "16", "--ep", "8",
                               "--zero", "1", "--recompute", "selective", "--json"],
    "plan-b200-8-eager-full": ["plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "8",
                               "--attention", "eager", "--recompute", "full", "--overlap-a2a", "--json"],
    "plan-b200-64-zero3-accum": ["plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "64", "--ep", "8",
                                 "--zero", "3", "--grad-accum", "4", "--json"],
    "plan-b200-64-ep16-none": ["plan", "--model", "qwen3-30b-a3b", "--hw", "b200", "--devices", "64", "--ep", "16",
                               "--zero", "2", "--recompute", "none", "--gpus-per-node", "4", "--json"],
    "plan-b200-gpt3-flash": ["plan", "--model", "gpt3-175b", "--hw", "b200", "--devices", "256", "--zero", "3",
                             "--json"],
    "plan-h100-gpt3-tp4-pp8-vp6": ["plan", "--model", "gpt3-175b", "--hw", "h100", "--devices", "128", "--tp", "4",
                                   "--pp", "8", "--vp", "6", "--global-batch", "256", "--micro-batch", "1", "--seq",
                                   "2048", "--recompute", "none", "--grad-bytes", "2", "--overlap-grad-reduce",
                                   "--overlap-param-gather", "--json"],
    "plan-gb200-qwen3-pp-ep": ["plan", "--model", "qwen3-30b-a3b", "--hw", "gb200", "--devices", "64", "--tp", "2",
                               "--pp", "4", "--vp", "2", "--cp", "2", "--ep", "8", "--etp", "1", "--global-batch",
                               "512", "--micro-batch", "2", "--recompute", "core_attn,moe_act", "--routing-imbalance",
                               "1.2", "--json"],
    # a low-precision run as Megatron-Bridge's recipes set it up: activation offloading, bf16 Adam moments
    "plan-gb200-qwen3-mxfp8-offload": ["plan", "--model", "qwen3-30b-a3b", "--hw", "gb200", "--devices", "8", "--ep",
                                       "8", "--precision", "mxfp8", "--fp8-param-gather", "--optimizer-moments",
                                       "bf16", "--cpu-offloading-num-layers", "8", "--recompute", "none",
                                       "--grad-bytes", "2", "--json"],
    # the precision-aware optimizer in BF16: FusedAdam's int16 master remainders (docs/memory.md "remainders")
    "plan-h100-llama-precision-aware": ["plan", "--model", "llama-3.2-1b", "--hw", "h100", "--devices", "8",
                                        "--global-batch", "64", "--precision-aware-optimizer", "--json"],
    # the 26.08 Qwen3 recipe's FP8 attention (--fp8-attention): cuDNN's MXFP8 kernel and its casts
    "plan-gb200-qwen3-mxfp8-fp8-attention": ["plan", "--model", "qwen3-30b-a3b", "--hw", "gb200", "--devices", "8",
                                             "--ep", "8", "--precision", "mxfp8", "--attention", "flash",
                                             "--fp8-attention", "--recompute", "none", "--seq", "4096",
                                             "--micro-batch", "4", "--global-batch", "512", "--json"],
    "search-h100-qwen3": ["plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--global-batch",
                          "256", "--search", "--json"],
    "compare-default": ["compare", "--model", "qwen3-30b-a3b", "--json"],
    "compare-devices": ["compare", "--model", "qwen3-30b-a3b", "--hw", "wse3,b200", "--devices", "8,64", "--ep", "8",
                        "--json"],
    "sweep-experts": ["sweep", "--model", "qwen3-30b-a3b", "--hw", "wse2", "--vary", "experts=16:128:x2", "--json"],
    "sweep-topk": ["sweep", "--model", "qwen3-30b-a3b", "--hw", "wse2", "--vary", "top-k=1,2,4,8", "--fixed-active",
                   "--json"],
    "sweep-devices": ["sweep", "--model", "qwen3-30b-a3b", "--hw", "b200", "--vary", "devices=8:64:x2", "--json"],
    "crossover-small": ["crossover", "--hw", "wse3,b200", "--hidden", "512,2048,4096", "--json"],
    "validate": ["validate", "--json"],
    "plan-wse2-4-systems": ["plan", "--model", "qwen3-30b-a3b", "--hw", "wse2", "--devices", "4", "--global-batch", "96",
                            "--json"],
    "whatif-topk1-sram": ["whatif", "--model", "qwen3-30b-a3b", "--hw", "wse2", "--top-k", "1", "--fixed-active",
                          "--target", "relative_to_dense=0.85", "--solve-for", "sram_bytes", "--json"],
    # issue 10: MLA, a shared expert and a mixed dense/MoE stack; sliding-window/full layers with sinks
    "plan-wse3-deepseek-v3": ["plan", "--model", "deepseek-v3", "--hw", "wse3", "--json"],
    "plan-wse3-gpt-oss-120b": ["plan", "--model", "gpt-oss-120b", "--hw", "wse3", "--json"],
}

# The plan cases again under `--objective density`, the rule every plan followed before the default
# became the fastest shape (issue 14): with a global batch, the fewest micro-batches whose G*b fits,
# then the largest G*b and the largest tile, as the wafer split did before (issue 12).
COMMANDS.update({f"{name}-density": [*args, "--objective", "density"]
                 for name, args in list(COMMANDS.items()) if name.startswith("plan-")})

# Compiled per-phase values: every model x every selection x three batch shapes (s, b, G).
MODELS = ["qwen3-30b-a3b", "gpt3-175b", "data:mixtral-8x7b.config.json", "data:olmoe-1b-7b.config.json",
          "data:llama-3-8b.config.json", "data:qwen3-8b.config.json",
          # issue 10's families: MLA + shared expert + dense/MoE stack + sigmoid router (and MTP below);
          # sliding-window/full layers with sinks and biases; the Qwen2-MoE gated shared expert; GPT-J
          # (parallel block, biases); GPT-2 (learned positions, tied embeddings); MLA without query
          # compression (DeepSeek-V2-Lite's q_proj)
          "deepseek-v3", "gpt-oss-120b", "data:qwen1.5-moe-a2.7b.config.json", "gpt-j-6b", "gpt2-small",
          "deepseek-v3+no-q-lora",
          # gelu: ungated (GeLU) routed and shared experts, with expert biases (Megatron-LM without --swiglu)
          "data:qwen1.5-moe-a2.7b.config.json+gelu-experts"]
SHAPES = [(1024, 1, 1), (4096, 2, 3), (2048, 3, 8)]
SELECTIONS = [
    dict(recompute="none", attention="eager", accounting="ideal"),
    dict(recompute="selective", attention="eager", accounting="ideal"),
    dict(recompute="full", attention="eager", accounting="ideal"),
    dict(recompute="none", attention="flash", accounting="ideal"),
    dict(recompute="none", attention="eager", accounting="pytorch"),
    dict(recompute="full", attention="flash", accounting="pytorch", loss="stored", causal=True),
    # as Megatron-Core runs on GPUs: its cross-entropy, and the MoE routing weights applied inside the experts
    dict(recompute="selective", attention="flash", accounting="ideal", loss="vocab_parallel", routing_weights="experts"),
]


# Selections that apply to one model only (a run option the other models do not have).
EXTRA_SELECTIONS = {
    # --recompute op: torchtitan's per-op checkpoint on its Llama block (the op caches' terms; docs/runs.md opsac)
    # and PyTorch's cross-entropy on fp32 logits, as torchtitan computes it (docs/runs.md memrows)
    "data:llama-3-8b.config.json": [dict(recompute="op", attention="flash", accounting="pytorch", loss="torch_fp32"),
                                    dict(recompute="op", attention="flash", accounting="ideal", loss="torch_fp32_held"),
                                    # torchtitan's 2-D run: DTensor's TP plan beside FSDP2 (the saved gathered
                                    # inputs, the op cache's reduce-scatter outputs; docs/runs.md fsdp2tp)
                                    dict(recompute="op", attention="flash", accounting="ideal", loss="vocab_parallel",
                                         layout="fsdp2_tp2")],
    # --fp8-attention: the Q, K, V and dO casts around the FP8 fused attention (GQA: a_kv < a)
    "qwen3-30b-a3b": [dict(recompute="selective", attention="flash", accounting="ideal", loss="vocab_parallel",
                           fp8_attention=True),
                      # delayed-scaling FP8: the output projection's quantised copy of O beside FlashAttention's O
                      # (attn_out_proj; tests/test_proj_copy.py derives the bytes)
                      dict(recompute="none", attention="flash", accounting="ideal", loss="vocab_parallel",
                           precision="fp8"),
                      dict(recompute="selective", attention="flash", accounting="ideal", loss="vocab_parallel",
                           routing_weights="experts", layout="ep2"),
                      dict(recompute="selective", attention="flash", accounting="ideal", loss="vocab_parallel",
                           routing_weights="experts", layout="ep2_allgather")],
    # --eager-kernels with Triton FlashAttention (llm-foundry's MPT block: LayerNorm, biases, GeLU; docs/runs.md mpt4)
    "gpt2-small": [dict(recompute="none", attention="flash", accounting="ideal", eager_kernels=True,
                        attention_kernel="triton-flash")],
    # llm-foundry's flash path (bert_padding's unpad of q, k, v and pad of the output around FlashAttention-2's varlen
    # kernel; docs/runs.md mpt6) on a GQA model (a_kv < a), under a full re-run that repeats the forward's gathers
    "data:qwen3-8b.config.json": [dict(recompute="full", attention="flash", accounting="ideal", eager_kernels=True,
                                       attention_kernel="flash-attn-2-varlen")],
    "deepseek-v3": [dict(recompute="none", attention="eager", accounting="pytorch", multi_token_prediction=True),
                    dict(recompute="full", attention="flash", accounting="ideal", loss="stored",
                         multi_token_prediction=True),
                    dict(recompute="selective", attention="flash", accounting="ideal", loss="vocab_parallel",
                         multi_token_prediction=True),
                    dict(recompute="selective", attention="flash", accounting="ideal", loss="te_fused",
                         multi_token_prediction=True),
                    # cenative: the compiled native cross-entropy's second fp32 copy, on the head and the MTP head
                    dict(recompute="selective", attention="flash", accounting="ideal", loss="native_fused",
                         multi_token_prediction=True)],
}

# Every per-phase quantity the catalogue defines (all of them are pinned; the values goldens were
# regenerated when issue 11's communication quantities joined them).
from btacalc.vocabulary import QUANTITIES as PINNED_QUANTITIES  # noqa: E402


def _model_path(name: str) -> str:
    return str(Path(__file__).parent / "data" / name[5:]) if name.startswith("data:") else name


def golden_model(name: str) -> Any:
    """The model of a golden case: a preset, a test config ("data:FILE"), or a named variant ("BASE+VARIANT")."""
    from btacalc.config.presets import resolve_model

    base, _, variant = name.partition("+")
    model = resolve_model(_model_path(base))
    if variant == "no-q-lora":  # one q_proj h -> a d_h instead of the q_a/q_b pair (DeepSeek-V2-Lite's query)
        return model.model_copy(update={"name": name, "mla": model.mla.model_copy(update={"q_lora_rank": 0})})
    if variant == "gelu-experts":  # Megatron-LM's default activation: fc1 h -> f, GeLU, fc2 (experts.py L212-247)
        return model.model_copy(update={"name": name, "mlp": "gelu", "expert_bias": True})
    assert not variant, variant
    return model


def golden_selections(name: str) -> list[dict[str, Any]]:
    return SELECTIONS + EXTRA_SELECTIONS.get(name, [])


# a selection's `layout`: the layouts whose features the run options alone do not set (Problem.features)
GOLDEN_LAYOUTS: dict[str, dict[str, Any]] = {
    "fsdp2_tp2": dict(devices=2, tensor_parallel=2, sequence_parallel=True, fsdp=True, fsdp_impl="fsdp2",
                      zero_stage=3),
    # the MoE dispatchers' own terms (x_s: the alltoall dispatcher's chunk sorts with several local experts; x_g, n_g:
    # the allgather dispatcher's gathers), which the one-device cases leave at 0
    "ep2": dict(devices=2, expert_parallel=2),
    "ep2_allgather": dict(devices=2, expert_parallel=2, allgather_dispatcher=True),
}


def golden_problem(model: Any, seq_len: int, sel: dict[str, Any]) -> Any:
    """The problem a golden selection evaluates: its run options (and layout, GOLDEN_LAYOUTS) on wse3."""
    from btacalc.config.execution import Layout, RunOptions
    from btacalc.config.hardware import resolve_hardware
    from btacalc.model.problem import make_problem

    options = {k: v for k, v in sel.items() if k != "layout"}
    layout = Layout(**GOLDEN_LAYOUTS[sel["layout"]]) if "layout" in sel else Layout()
    return make_problem(model, resolve_hardware("wse3"), RunOptions(seq_len=seq_len, **options), layout)


def phase_values(model_name: str) -> dict[str, Any]:
    model = golden_model(model_name)
    out: dict[str, Any] = {}
    for sel in golden_selections(model_name):
        key = ",".join(f"{k}={v}" for k, v in sel.items())
        for s, b, g in SHAPES:
            problem = golden_problem(model, s, sel)
            layers = problem.evaluate(g, b).layers
            for kind, pv in layers:  # each kind's values include the parts outside the layers
                suffix = "" if len(layers) == 1 else f" kind={kind.name}"
                out[f"{key} s={s} b={b} G={g}{suffix}"] = {
                    name: {q: _plain(pv.value(name, q)) for q in PINNED_QUANTITIES} for name in pv.phase_names()
                }
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return v
    return int(v) if hasattr(v, "__int__") and not isinstance(v, float) else v


def _golden_name(case: str) -> Path:
    return GOLDEN_DIR / f"{case.replace(':', '_')}.json"


def produce(case: str, cli) -> Any:
    if case.startswith("values:"):
        return phase_values(case[len("values:"):])
    code, out, err = cli(*COMMANDS[case])
    assert not err.strip() or "Traceback" not in err
    return {"exit_code": code, "output": json.loads(out)}


def _same(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        diffs = [f"{path}/{k}: missing in new output" for k in a.keys() - b.keys()]
        diffs += [f"{path}/{k}: not in golden" for k in b.keys() - a.keys()]
        for k in a.keys() & b.keys():
            diffs += _same(a[k], b[k], f"{path}/{k}")
        return diffs
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _same(x, y, f"{path}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
                and not isinstance(b, bool) and math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0):
            return []
        return [f"{path}: golden {a!r} != {b!r}"]
    return [] if a == b and type(a) is type(b) else [f"{path}: golden {a!r} != {b!r}"]


CASES = list(COMMANDS) + [f"values:{m}" for m in MODELS]


@pytest.mark.parametrize("case", CASES)
def test_golden(case, cli, request):
    new = produce(case, cli)
    path = _golden_name(case)
    if request.config.getoption("--regen-goldens"):
        path.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        pytest.skip(f"regenerated {path.name}")
    assert path.is_file(), f"no golden for {case}: run python -m pytest tests/test_goldens.py --regen-goldens"
    old = json.loads(path.read_text(encoding="utf-8"))
    diffs = _same(old, json.loads(json.dumps(new)))
    assert not diffs, f"{case}: {len(diffs)} differences from the golden, first: " + "; ".join(diffs[:8])
