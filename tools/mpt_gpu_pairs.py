"""The same llm-foundry benchmark on A100-80GB and H100: btacalc's H100/A100 ratio against the table's (task h100sign).

docs/clock.md 'h100sign'. llm-foundry's benchmark table (github.com/mosaicml/llm-foundry
scripts/train/benchmarking/README.md @ 5e85bd62d, tables 'H100 80GB BF16' and 'A100 80GB with 1600 Gbps node-node
interconnect (RoCE)') holds 8-GPU rows run with one image (sweep.sh @ b2a43a147 L5 and @ 5e85bd62d L5:
mosaicml/pytorch:2.1.0_cu121-python3.10-ubuntu20.04) and one sweep, at the same model, sequence length, micro-batch,
gradient accumulation and activation checkpointing on both GPUs (the A100 13B/7B 2048-token rows accumulate 3/2
micro-batches where the H100 ones take 1; per micro-batch work is the same). Only the GPU differs, so the ratio of
the two measured throughputs against btacalc's ratio isolates what btacalc gets wrong about the H100 relative to the
A100 for one software stack:

    ratio error = (pred_H100 / pred_A100) / (meas_H100 / meas_A100) - 1   (positive: btacalc's H100 too fast)

Each row is planned as the measured MPT rows are (FSDP1, Triton FlashAttention, eager kernels, PyTorch 2.1's early
re-run stop under checkpointing). Nothing is fitted or written back: it prints a table. Only two of these pairs are
measured runs in btacalc/data/measured_runs.json (7B and 13B at 2048 tokens on 8 GPUs: the A100 rows and
mpt-7b-h100-8); the others are planned here, not added.

Usage: PYTHONPATH=$PWD python tools/mpt_gpu_pairs.py [--json]
"""
from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, NamedTuple


class Pair(NamedTuple):
    model: str
    seq: int
    micro_batch: int
    accum_a100: int
    accum_h100: int
    checkpointing: bool
    a100_tok_s_gpu: float    # 'Throughput (T/s/GPU)' of the A100 80GB table
    h100_tok_s_gpu: float    # of the H100 80GB BF16 table


# (model, SeqLen, MicroBatchSize, GradAccum A100, GradAccum H100, Activation Checkpointing, T/s/GPU A100, H100),
# 8 GPUs each, from README.md @ 5e85bd62d. Rows the H100 table lists twice at one setting (1B at 512 and 32768,
# 3B at 512) are left out, as are 1B/3B at 512 tokens.
PAIRS = [
    Pair("mpt-1b", 1024, 18, 4, 4, False, 22112, 48910),
    Pair("mpt-1b", 4096, 7, 4, 4, False, 17807, 38535),
    Pair("mpt-1b", 8192, 3, 4, 4, False, 13814, 29157),
    Pair("mpt-1b", 16384, 2, 4, 4, False, 9956, 19649),
    Pair("mpt-1b", 65536, 1, 2, 2, True, 3044, 5506),
    Pair("mpt-3b", 1024, 20, 6, 6, False, 11580, 27046),
    Pair("mpt-7b", 1024, 64, 2, 2, True, 4357, 10203),
    Pair("mpt-7b", 2048, 6, 2, 1, False, 4641, 10643),
    Pair("mpt-7b", 4096, 16, 2, 2, True, 3684, 8611),
    Pair("mpt-7b", 8192, 8, 2, 2, True, 3206, 6935),
    Pair("mpt-7b", 32768, 2, 2, 2, True, 1672, 3318),
    Pair("mpt-7b", 65536, 1, 2, 2, True, 1013, 1956),
    Pair("mpt-13b", 1024, 40, 3, 3, True, 2330, 5502),
    Pair("mpt-13b", 2048, 2, 3, 1, False, 2262, 4792),
    Pair("mpt-13b", 4096, 10, 3, 3, True, 2060, 4717),
    Pair("mpt-13b", 32768, 1, 3, 3, True, 1016, 1976),
    Pair("mpt-30b", 1024, 6, 21, 21, True, 946, 2084),
    Pair("mpt-30b", 2048, 3, 21, 21, True, 916, 2002),
    Pair("mpt-30b", 4096, 1, 21, 21, True, 814, 1802),
    Pair("mpt-30b", 8192, 1, 21, 21, True, 574, 1384),
]


def plan(pair: Pair, hw: str, accum: int) -> Any:
    args = [sys.executable, "-m", "btacalc", "plan", "--model", pair.model, "--hw", hw, "--devices", "8", "--fsdp",
            "--fsdp-impl", "torch", "--seq", str(pair.seq), "--global-batch", str(pair.micro_batch * accum * 8),
            "--micro-batch", str(pair.micro_batch), "--attention", "flash", "--attention-kernel", "triton-flash",
            "--eager-kernels", "--json"]
    args += ["--recompute", "full", "--checkpoint-early-stop"] if pair.checkpointing else ["--recompute", "none"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise SystemExit(f"plan failed for {pair}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def shares(p: Any) -> dict[str, float]:
    s = p["throughput"]["phase_share"]
    return {"core": s["attn_scores"] + s["attn_pv"], "gemm": s["qkv_proj"] + s["attn_out_proj"] + s["mlp"] + s["lm_head"]}


def main() -> None:
    rows = []
    for pair in PAIRS:
        h, a = plan(pair, "h100", pair.accum_h100), plan(pair, "a100-80gb", pair.accum_a100)
        ph, pa = (x["throughput"]["tokens_per_s"] / 8 for x in (h, a))
        eh, ea = ph / pair.h100_tok_s_gpu - 1, pa / pair.a100_tok_s_gpu - 1
        ratio = (ph / pa) / (pair.h100_tok_s_gpu / pair.a100_tok_s_gpu) - 1
        rows.append({"model": pair.model, "seq": pair.seq, "micro_batch": pair.micro_batch,
                     "checkpointing": pair.checkpointing, "error_h100": eh, "error_a100": ea, "ratio_error": ratio,
                     "h100_core_share": shares(h)["core"], "h100_gemm_share": shares(h)["gemm"],
                     "fits": (h["device_memory"].get("fits"), a["device_memory"].get("fits"))})
    if "--json" in sys.argv:
        print(json.dumps(rows, indent=1))
        return
    print("model | seq | mb | ckpt | H100 error | A100 error | ratio error | H100 core share | H100 GEMM share")
    for r in rows:
        print(f"{r['model']} | {r['seq']} | {r['micro_batch']} | {'yes' if r['checkpointing'] else 'no'} | "
              f"{r['error_h100']:+.1%} | {r['error_a100']:+.1%} | {r['ratio_error']:+.1%} | "
              f"{r['h100_core_share']:.1%} | {r['h100_gemm_share']:.1%}")


if __name__ == "__main__":
    main()
